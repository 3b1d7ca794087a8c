package cuda

import (
	"fmt"
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
		{&d.moduleLoadData, "cuModuleLoadData"}, {&d.moduleGetFunc, "cuModuleGetFunction"}, {&d.launchKernel, "cuLaunchKernel"},
		{&d.streamCreate, "cuStreamCreate"}, {&d.eventCreate, "cuEventCreate"}, {&d.eventRecord, "cuEventRecord"},
		{&d.streamWaitEvent, "cuStreamWaitEvent"}, {&d.streamSync, "cuStreamSynchronize"}, {&d.errorName, "cuGetErrorName"}}...); err != nil {
		return nil, err
	}
	if err := d.check("cuInit", cuInit(0)); err != nil {
		return nil, err
	}
	var dev int32
	if err := d.check("cuDeviceGet", d.deviceGet(&dev, int32(ordinal))); err != nil {
		return nil, err
	}
	var ctx uintptr
	if err := d.check("cuDevicePrimaryCtxRetain", d.primaryRetain(&ctx, dev)); err != nil {
		return nil, err
	}
	return d, d.check("cuCtxSetCurrent", d.ctxSetCurrent(ctx))
}

func (d *driverAPI) check(what string, rc int32) error {
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
	return DevicePtr(p), d.check("cuMemAlloc", d.memAlloc(&p, bytes))
}

func (d *driverAPI) MemFree(p DevicePtr) error { return d.check("cuMemFree", d.memFree(uint64(p))) }

func (d *driverAPI) CopyHtoD(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return d.check("cuMemcpyHtoDAsync", d.copyHtoD(uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src)), uintptr(s)))
}

func (d *driverAPI) CopyDtoH(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoHAsync", d.copyDtoH(unsafe.Pointer(&dst[0]), uint64(src), uint64(len(dst)), uintptr(s)))
}

func (d *driverAPI) LoadModule(ptx []byte) (Module, error) {
	img := append(append([]byte{}, ptx...), 0)
	var m uintptr
	return Module(m), d.check("cuModuleLoadData", d.moduleLoadData(&m, unsafe.Pointer(&img[0])))
}

func (d *driverAPI) Function(m Module, name string) (Function, error) {
	var f uintptr
	return Function(f), d.check("cuModuleGetFunction "+name, d.moduleGetFunc(&f, uintptr(m), name))
}

func (d *driverAPI) Launch(f Function, grid, block uint32, s Stream, args ...uint64) error {
	// cuLaunchKernel takes an array of pointers to each parameter's value.
	vals := append([]uint64{}, args...)
	ptrs := make([]unsafe.Pointer, len(vals)+1)
	for i := range vals {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	return d.check("cuLaunchKernel", d.launchKernel(uintptr(f), grid, 1, 1, block, 1, 1, 0, uintptr(s), unsafe.Pointer(&ptrs[0]), nil))
}

func (d *driverAPI) StreamCreate() (Stream, error) {
	var s uintptr
	return Stream(s), d.check("cuStreamCreate", d.streamCreate(&s, 1)) // CU_STREAM_NON_BLOCKING
}

func (d *driverAPI) EventCreate() (Event, error) {
	var e uintptr
	return Event(e), d.check("cuEventCreate", d.eventCreate(&e, 2)) // CU_EVENT_DISABLE_TIMING
}

func (d *driverAPI) EventRecord(e Event, s Stream) error {
	return d.check("cuEventRecord", d.eventRecord(uintptr(e), uintptr(s)))
}

func (d *driverAPI) StreamWait(s Stream, e Event) error {
	return d.check("cuStreamWaitEvent", d.streamWaitEvent(uintptr(s), uintptr(e), 0))
}

func (d *driverAPI) StreamSync(s Stream) error {
	return d.check("cuStreamSynchronize", d.streamSync(uintptr(s)))
}
