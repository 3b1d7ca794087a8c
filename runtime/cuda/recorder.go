package cuda

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// Recorder is a Driver that records every call in order and keeps device memory in host
// slices: the executor's tests read its Log to check launch order, stream and event
// dependencies and buffer offsets, and its memory to check what was copied where.
type Recorder struct {
	mu  sync.Mutex
	Log []string
	// Total is the memory MemInfo reports (free is Total less what is allocated).
	Total   uint64
	next    uint64
	allocs  map[DevicePtr][]byte
	objects uintptr
	modules map[Module][]byte
}

// NewRecorder returns an empty Recorder; allocations start at 0x10000 and are 256-byte
// aligned, as cuMemAlloc's are.
func NewRecorder() *Recorder {
	return &Recorder{next: 0x10000, allocs: map[DevicePtr][]byte{}, modules: map[Module][]byte{}}
}

// logf appends to the log; it may be called concurrently (a device waits on events
// without holding its lock).
func (r *Recorder) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Log = append(r.Log, fmt.Sprintf(format, args...))
}

func (r *Recorder) MemAlloc(bytes uint64) (DevicePtr, error) {
	p := DevicePtr(r.next)
	r.allocs[p] = make([]byte, bytes)
	r.next += (bytes + 255) &^ 255
	r.logf("alloc %#x %d", uint64(p), bytes)
	return p, nil
}

func (r *Recorder) MemFree(p DevicePtr) error {
	if _, ok := r.allocs[p]; !ok {
		return fmt.Errorf("free of %#x, not an allocation", uint64(p))
	}
	delete(r.allocs, p)
	r.logf("free %#x", uint64(p))
	return nil
}

// mem is the host slice behind [p, p+n): within one allocation, or an error.
func (r *Recorder) mem(p DevicePtr, n int) ([]byte, error) {
	base, err := r.locate(p)
	if err != nil {
		return nil, err
	}
	m := r.allocs[base]
	if off := int(p - base); off+n > len(m) {
		return nil, fmt.Errorf("%d bytes at %#x run past the allocation at %#x (%d bytes)", n, uint64(p), uint64(base), len(m))
	}
	return m[p-base : int(p-base)+n], nil
}

// tail is the host slice from p to the end of its allocation.
func (r *Recorder) tail(p DevicePtr) ([]byte, error) {
	base, err := r.locate(p)
	if err != nil {
		return nil, err
	}
	return r.allocs[base][p-base:], nil
}

// locate finds the allocation p is in (or just past the end of): the one that starts last at
// or before p.
func (r *Recorder) locate(p DevicePtr) (DevicePtr, error) {
	var base DevicePtr
	found := false
	for b := range r.allocs {
		if b <= p && (!found || b > base) {
			base, found = b, true
		}
	}
	if !found || int(p-base) > len(r.allocs[base]) {
		return 0, fmt.Errorf("%#x is not device memory", uint64(p))
	}
	return base, nil
}

// host is the host address of device address p.
func (r *Recorder) host(p DevicePtr) (unsafe.Pointer, error) {
	m, err := r.tail(p)
	if err != nil {
		return nil, err
	}
	return unsafe.Pointer(unsafe.SliceData(m)), nil
}

func (r *Recorder) CopyHtoD(dst DevicePtr, src []byte, s Stream) error {
	m, err := r.mem(dst, len(src))
	if err != nil {
		return err
	}
	copy(m, src)
	r.logf("h2d %#x %d stream %d", uint64(dst), len(src), s)
	return nil
}

func (r *Recorder) CopyDtoH(dst []byte, src DevicePtr, s Stream) error {
	m, err := r.mem(src, len(dst))
	if err != nil {
		return err
	}
	copy(dst, m)
	r.logf("d2h %#x %d stream %d", uint64(src), len(dst), s)
	return nil
}

func (r *Recorder) CopyDtoD(dst, src DevicePtr, bytes uint64, s Stream) error {
	d, err := r.mem(dst, int(bytes))
	if err != nil {
		return err
	}
	m, err := r.mem(src, int(bytes))
	if err != nil {
		return err
	}
	copy(d, m)
	r.logf("d2d %#x %#x %d stream %d", uint64(dst), uint64(src), bytes, s)
	return nil
}

func (r *Recorder) Memset(p DevicePtr, bytes uint64, s Stream) error {
	m, err := r.mem(p, int(bytes))
	if err != nil {
		return err
	}
	clear(m)
	r.logf("memset %#x %d stream %d", uint64(p), bytes, s)
	return nil
}

func (r *Recorder) MemInfo() (free, total uint64, err error) {
	var used uint64
	for _, m := range r.allocs {
		used += uint64(len(m))
	}
	return r.Total - min(used, r.Total), r.Total, nil
}

func (r *Recorder) HostAlloc(bytes uint64) ([]byte, error) {
	r.logf("host alloc %d", bytes)
	return make([]byte, bytes), nil
}

func (r *Recorder) HostFree(b []byte) error {
	r.logf("host free %d", len(b))
	return nil
}

func (r *Recorder) EventSync(e Event) error {
	r.logf("sync event %d", e)
	return nil
}

func (r *Recorder) EventDestroy(e Event) error {
	r.logf("destroy event %d", e)
	return nil
}

func (r *Recorder) LoadModule(ptx []byte) (Module, error) {
	r.objects++
	m := Module(r.objects)
	r.modules[m] = ptx
	r.logf("module %d (%d bytes)", m, len(ptx))
	return m, nil
}

func (r *Recorder) Function(m Module, name string) (Function, error) {
	ptx, ok := r.modules[m]
	if !ok {
		return 0, fmt.Errorf("module %d not loaded", m)
	}
	if !strings.Contains(string(ptx), ".entry "+name+"(") {
		return 0, fmt.Errorf("module %d has no entry %s", m, name)
	}
	r.objects++
	r.logf("function %d %s", r.objects, name)
	return Function(r.objects), nil
}

func (r *Recorder) Launch(f Function, grid, block uint32, s Stream, args ...uint64) error {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = fmt.Sprintf("%#x", a)
	}
	r.logf("launch %d grid %d block %d stream %d (%s)", f, grid, block, s, strings.Join(parts, ", "))
	return nil
}

func (r *Recorder) StreamCreate() (Stream, error) {
	r.objects++
	r.logf("stream %d", r.objects)
	return Stream(r.objects), nil
}

func (r *Recorder) EventCreate() (Event, error) {
	r.objects++
	r.logf("event %d", r.objects)
	return Event(r.objects), nil
}

func (r *Recorder) EventRecord(e Event, s Stream) error {
	r.logf("record event %d on stream %d", e, s)
	return nil
}

func (r *Recorder) StreamWait(s Stream, e Event) error {
	r.logf("stream %d waits for event %d", s, e)
	return nil
}

func (r *Recorder) StreamSync(s Stream) error {
	r.logf("sync stream %d", s)
	return nil
}

// Bound runs call: the recorded device has no context.
func (r *Recorder) Bound(call func() error) error { return call() }

var _ Driver = (*Recorder)(nil)
