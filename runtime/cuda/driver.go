package cuda

import (
	"fmt"
	goruntime "runtime"
	"strings"
	"unsafe"
)

// DevicePtr is an address in a GPU's memory.
type DevicePtr uint64

// Handles of the driver's objects.
type (
	Module   uintptr
	Function uintptr
	Stream   uintptr
	Event    uintptr
)

// Driver is the part of the CUDA driver API the CUDA device's executor uses: memory,
// modules, launches, and streams ordered by events. Two implementations: the driver itself
// through purego (OpenDriver), and Recorder, which records every call and keeps "device"
// memory in host slices, so that the executor's launch order, stream and event dependencies
// and buffer offsets are tested on machines without a GPU.
type Driver interface {
	MemAlloc(bytes uint64) (DevicePtr, error)
	MemFree(p DevicePtr) error
	CopyHtoD(dst DevicePtr, src []byte, s Stream) error
	CopyDtoH(dst []byte, src DevicePtr, s Stream) error
	CopyDtoD(dst, src DevicePtr, bytes uint64, s Stream) error
	Memset(p DevicePtr, bytes uint64, s Stream) error // zeroes
	// MemInfo is the GPU's free and total memory.
	MemInfo() (free, total uint64, err error)
	// HostAlloc returns page-locked host memory, which asynchronous copies need (a copy to
	// pageable memory returns only once it is done); HostFree releases it.
	HostAlloc(bytes uint64) ([]byte, error)
	HostFree(b []byte) error
	LoadModule(ptx []byte) (Module, error)
	Function(m Module, name string) (Function, error)
	// Launch runs f on a 1-D grid; each argument is a device pointer or a 64-bit integer,
	// passed by value as the kernel's parameters.
	Launch(f Function, grid, block uint32, s Stream, args ...uint64) error
	StreamCreate() (Stream, error)
	EventCreate() (Event, error)
	EventRecord(e Event, s Stream) error
	StreamWait(s Stream, e Event) error
	StreamSync(s Stream) error
	// EventSync waits until the work before the event's record is done; EventDestroy frees it.
	EventSync(e Event) error
	EventDestroy(e Event) error
	// Bound runs call on one OS thread with the driver's context current on it: cuBLASLt
	// and NCCL work on the calling thread's current context.
	Bound(call func() error) error
}

// driverAPI is libcuda's entry points as ppc calls them.
type driverAPI struct {
	lib             *Library
	primaryRetain   func(ctx *uintptr, dev int32) int32
	ctxSetCurrent   func(ctx uintptr) int32
	deviceGet       func(d *int32, ordinal int32) int32
	memAlloc        func(p *uint64, bytes uint64) int32
	memFree         func(p uint64) int32
	copyHtoD        func(dst uint64, src unsafe.Pointer, bytes uint64, s uintptr) int32
	copyDtoH        func(dst unsafe.Pointer, src uint64, bytes uint64, s uintptr) int32
	copyDtoD        func(dst, src uint64, bytes uint64, s uintptr) int32
	memset          func(p uint64, value uint8, n uint64, s uintptr) int32
	memInfo         func(free, total *uint64) int32
	hostAlloc       func(p *unsafe.Pointer, bytes uint64) int32
	hostFree        func(p unsafe.Pointer) int32
	eventSync       func(e uintptr) int32
	eventDestroy    func(e uintptr) int32
	ctx             uintptr
	moduleLoadData  func(m *uintptr, image unsafe.Pointer) int32
	moduleGetFunc   func(f *uintptr, m uintptr, name string) int32
	launchKernel    func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, s uintptr, params, extra unsafe.Pointer) int32
	streamCreate    func(s *uintptr, flags uint32) int32
	eventCreate     func(e *uintptr, flags uint32) int32
	eventRecord     func(e, s uintptr) int32
	streamWaitEvent func(s, e uintptr, flags uint32) int32
	streamSync      func(s uintptr) int32
	errorName       func(rc int32, name *uintptr) int32
}

// OpenDriver binds libcuda (Probe's first library), initialises it and makes GPU ordinal's
// primary context current on the calling thread.
func OpenDriver(l *Library, ordinal int) (Driver, error) {
	if !l.Found() {
		return nil, fmt.Errorf("the NVIDIA driver is not available: %s", l.Err)
	}
	d := &driverAPI{lib: l}
	var cuInit func(flags uint32) int32
	if err := l.bind([]binding{{&cuInit, "cuInit"}, {&d.primaryRetain, "cuDevicePrimaryCtxRetain"}, {&d.ctxSetCurrent, "cuCtxSetCurrent"}, {&d.deviceGet, "cuDeviceGet"},
		{&d.memAlloc, "cuMemAlloc_v2"}, {&d.memFree, "cuMemFree_v2"}, {&d.copyHtoD, "cuMemcpyHtoDAsync_v2"}, {&d.copyDtoH, "cuMemcpyDtoHAsync_v2"},
		{&d.copyDtoD, "cuMemcpyDtoDAsync_v2"}, {&d.memset, "cuMemsetD8Async"}, {&d.memInfo, "cuMemGetInfo_v2"},
		{&d.hostAlloc, "cuMemAllocHost_v2"}, {&d.hostFree, "cuMemFreeHost"}, {&d.eventSync, "cuEventSynchronize"}, {&d.eventDestroy, "cuEventDestroy_v2"},
		{&d.moduleLoadData, "cuModuleLoadData"}, {&d.moduleGetFunc, "cuModuleGetFunction"}, {&d.launchKernel, "cuLaunchKernel"},
		{&d.streamCreate, "cuStreamCreate"}, {&d.eventCreate, "cuEventCreate"}, {&d.eventRecord, "cuEventRecord"},
		{&d.streamWaitEvent, "cuStreamWaitEvent"}, {&d.streamSync, "cuStreamSynchronize"}, {&d.errorName, "cuGetErrorName"}}...); err != nil {
		return nil, err
	}
	if err := d.result("cuInit", cuInit(0)); err != nil {
		return nil, err
	}
	var dev int32
	if err := d.result("cuDeviceGet", d.deviceGet(&dev, int32(ordinal))); err != nil {
		return nil, err
	}
	if err := d.result("cuDevicePrimaryCtxRetain", d.primaryRetain(&d.ctx, dev)); err != nil {
		return nil, err
	}
	return d, nil
}

// check makes the call with the context current, and names the driver's error. A context is
// current per OS thread and goroutines move between threads, so each call locks its
// goroutine to the thread and makes the context current there first (cuCtxSetCurrent is a
// thread-local store).
func (d *driverAPI) check(what string, call func() int32) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	rc := d.ctxSetCurrent(d.ctx)
	if rc == 0 {
		rc = call()
	}
	return d.result(what, rc)
}

func (d *driverAPI) Bound(call func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := d.result("cuCtxSetCurrent", d.ctxSetCurrent(d.ctx)); err != nil {
		return err
	}
	return call()
}

func (d *driverAPI) result(what string, rc int32) error {
	if rc == 0 {
		return nil
	}
	name := resultName(rc)
	var p uintptr
	if d.errorName(rc, &p) == 0 && p != 0 {
		name = goString(p)
	}
	return fmt.Errorf("%s: %s", what, name)
}

// goString copies a NUL-terminated C string.
func goString(p uintptr) string {
	var b strings.Builder
	for i := uintptr(0); ; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(nil), p+i)) // a C string the driver owns
		if c == 0 {
			return b.String()
		}
		b.WriteByte(c)
	}
}

func (d *driverAPI) MemAlloc(bytes uint64) (DevicePtr, error) {
	var p uint64
	err := d.check("cuMemAlloc", func() int32 { return d.memAlloc(&p, bytes) })
	return DevicePtr(p), err
}

func (d *driverAPI) MemFree(p DevicePtr) error {
	return d.check("cuMemFree", func() int32 { return d.memFree(uint64(p)) })
}

func (d *driverAPI) CopyHtoD(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return d.check("cuMemcpyHtoDAsync", func() int32 { return d.copyHtoD(uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src)), uintptr(s)) })
}

func (d *driverAPI) CopyDtoH(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoHAsync", func() int32 { return d.copyDtoH(unsafe.Pointer(&dst[0]), uint64(src), uint64(len(dst)), uintptr(s)) })
}

func (d *driverAPI) CopyDtoD(dst, src DevicePtr, bytes uint64, s Stream) error {
	if bytes == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoDAsync", func() int32 { return d.copyDtoD(uint64(dst), uint64(src), bytes, uintptr(s)) })
}

func (d *driverAPI) Memset(p DevicePtr, bytes uint64, s Stream) error {
	if bytes == 0 {
		return nil
	}
	return d.check("cuMemsetD8Async", func() int32 { return d.memset(uint64(p), 0, bytes, uintptr(s)) })
}

func (d *driverAPI) MemInfo() (free, total uint64, err error) {
	err = d.check("cuMemGetInfo", func() int32 { return d.memInfo(&free, &total) })
	return free, total, err
}

func (d *driverAPI) HostAlloc(bytes uint64) ([]byte, error) {
	if bytes == 0 {
		return []byte{}, nil
	}
	var p unsafe.Pointer
	if err := d.check("cuMemAllocHost", func() int32 { return d.hostAlloc(&p, bytes) }); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), bytes), nil // the driver's memory, never moved by Go
}

func (d *driverAPI) HostFree(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return d.check("cuMemFreeHost", func() int32 { return d.hostFree(unsafe.Pointer(&b[0])) })
}

func (d *driverAPI) EventSync(e Event) error {
	return d.check("cuEventSynchronize", func() int32 { return d.eventSync(uintptr(e)) })
}

func (d *driverAPI) EventDestroy(e Event) error {
	return d.check("cuEventDestroy", func() int32 { return d.eventDestroy(uintptr(e)) })
}

func (d *driverAPI) LoadModule(ptx []byte) (Module, error) {
	img := append(append([]byte{}, ptx...), 0)
	var m uintptr
	err := d.check("cuModuleLoadData", func() int32 { return d.moduleLoadData(&m, unsafe.Pointer(&img[0])) })
	return Module(m), err
}

func (d *driverAPI) Function(m Module, name string) (Function, error) {
	var f uintptr
	err := d.check("cuModuleGetFunction "+name, func() int32 { return d.moduleGetFunc(&f, uintptr(m), name) })
	return Function(f), err
}

func (d *driverAPI) Launch(f Function, grid, block uint32, s Stream, args ...uint64) error {
	// cuLaunchKernel takes an array of pointers to each parameter's value.
	vals := append([]uint64{}, args...)
	ptrs := make([]unsafe.Pointer, len(vals)+1)
	for i := range vals {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	return d.check("cuLaunchKernel", func() int32 {
		return d.launchKernel(uintptr(f), grid, 1, 1, block, 1, 1, 0, uintptr(s), unsafe.Pointer(&ptrs[0]), nil)
	})
}

func (d *driverAPI) StreamCreate() (Stream, error) {
	var s uintptr
	return Stream(s), d.check("cuStreamCreate", func() int32 { return d.streamCreate(&s, 1) }) // CU_STREAM_NON_BLOCKING
}

func (d *driverAPI) EventCreate() (Event, error) {
	var e uintptr
	return Event(e), d.check("cuEventCreate", func() int32 { return d.eventCreate(&e, 2) }) // CU_EVENT_DISABLE_TIMING
}

func (d *driverAPI) EventRecord(e Event, s Stream) error {
	return d.check("cuEventRecord", func() int32 { return d.eventRecord(uintptr(e), uintptr(s)) })
}

func (d *driverAPI) StreamWait(s Stream, e Event) error {
	return d.check("cuStreamWaitEvent", func() int32 { return d.streamWaitEvent(uintptr(s), uintptr(e), 0) })
}

func (d *driverAPI) StreamSync(s Stream) error {
	return d.check("cuStreamSynchronize", func() int32 { return d.streamSync(uintptr(s)) })
}
