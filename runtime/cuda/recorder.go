package cuda

import (
	"fmt"
	"sort"
	"strings"
)

// Recorder is a Driver that records every call in order and keeps device memory in host
// slices: the executor's tests read its Log to check launch order, stream and event
// dependencies and buffer offsets, and its memory to check what was copied where.
type Recorder struct {
	Log     []string
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

func (r *Recorder) logf(format string, args ...any) {
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
	bases := make([]DevicePtr, 0, len(r.allocs))
	for b := range r.allocs {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	for i := len(bases) - 1; i >= 0; i-- {
		if b := bases[i]; b <= p {
			m := r.allocs[b]
			off := int(p - b)
			if off+n > len(m) {
				return nil, fmt.Errorf("%d bytes at %#x run past the allocation at %#x (%d bytes)", n, uint64(p), uint64(b), len(m))
			}
			return m[off : off+n], nil
		}
	}
	return nil, fmt.Errorf("%#x is not device memory", uint64(p))
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

var _ Driver = (*Recorder)(nil)
