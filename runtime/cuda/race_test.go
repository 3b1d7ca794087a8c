package cuda

import (
	"fmt"
	"maps"
	"sync"
)

// hbCheck checks that the device orders its streams: every two operations on different
// streams that touch the same memory, one of them writing, must be ordered by the events the
// device recorded and waited for, or by the host's waits, whatever the GPU's timing. The
// emulated driver runs each stream's work when it is queued, so a missing wait gives right
// numbers on the host and wrong ones on a GPU; this finds it from the calls alone.
//
// It keeps a vector clock per stream (how far each stream's work is known done when the
// stream's next operation starts), per event record, and for the host: an operation
// happens after another of stream q when its clock's q entry has reached the other's own.
// Copies and memsets say what they touch through their arguments, NCCL's stand-in through
// its own, and launches and GEMMs through the device's note of their operands and results.
type hbCheck struct {
	mu    sync.Mutex
	vc    map[Stream]clock
	ev    map[Event]clock
	host  clock
	hist  []hbOp
	races []string
}

type clock map[Stream]int

// join raises c to at least o, entry by entry.
func (c clock) join(o clock) {
	for s, v := range o {
		if v > c[s] {
			c[s] = v
		}
	}
}

type hbOp struct {
	s             Stream
	at            int // the stream's own clock at the operation
	reads, writes []span
	what          string
}

func newHBCheck() *hbCheck {
	return &hbCheck{vc: map[Stream]clock{}, ev: map[Event]clock{}, host: clock{}}
}

// issue is the clock of stream s for work the host queues now (h.mu held): after everything
// the host has waited for.
func (h *hbCheck) issue(s Stream) clock {
	c := h.vc[s]
	if c == nil {
		c = clock{}
		h.vc[s] = c
	}
	c.join(h.host)
	return c
}

func (h *hbCheck) op(s Stream, reads, writes []span, what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.issue(s)
	c[s]++
	kept := h.hist[:0]
	for _, p := range h.hist {
		if h.host[p.s] >= p.at {
			continue // the host has waited for it: everything queued from now on is after it
		}
		kept = append(kept, p)
		if p.s == s || c[p.s] >= p.at {
			continue
		}
		if overlap(p.writes, reads) || overlap(p.writes, writes) || overlap(p.reads, writes) {
			if len(h.races) < 10 {
				h.races = append(h.races, fmt.Sprintf("%s on stream %d is not ordered after %s on stream %d", what, s, p.what, p.s))
			}
		}
	}
	h.hist = append(kept, hbOp{s: s, at: c[s], reads: reads, writes: writes, what: what})
}

func (h *hbCheck) record(e Event, s Stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ev[e] = maps.Clone(h.issue(s))
}

func (h *hbCheck) wait(s Stream, e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.issue(s).join(h.ev[e])
}

func (h *hbCheck) syncStream(s Stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.host.join(h.vc[s])
}

func (h *hbCheck) syncEvent(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.host.join(h.ev[e])
}

// The emulator's calls, checked when it has a checker.

func (e *emulator) access(s Stream, reads, writes []span) {
	if e.hb != nil {
		e.hb.op(s, reads, writes, fmt.Sprintf("access r%v w%v", reads, writes))
	}
}

// noteAccess is the device's note of what its next launch or GEMM reads and writes.
func (e *emulator) noteAccess(reads, writes []span) {
	e.note = &[2][]span{reads, writes}
}

// noted checks the next launch or GEMM against the device's note (an unnoted one is a
// failure of its own).
func (e *emulator) noted(s Stream, what string) {
	if e.hb == nil {
		return
	}
	if e.note == nil {
		e.hb.mu.Lock()
		e.hb.races = append(e.hb.races, what+" without a note of its memory")
		e.hb.mu.Unlock()
		return
	}
	e.hb.op(s, e.note[0], e.note[1], what)
	e.note = nil
}

func one(p DevicePtr, n uint64) []span { return []span{{uint64(p), uint64(p) + n}} }

func (e *emulator) CopyHtoD(dst DevicePtr, src []byte, s Stream) error {
	if e.hb != nil {
		e.hb.op(s, nil, one(dst, uint64(len(src))), fmt.Sprintf("copy to %#x", uint64(dst)))
	}
	return e.Recorder.CopyHtoD(dst, src, s)
}

func (e *emulator) CopyDtoH(dst []byte, src DevicePtr, s Stream) error {
	if e.hb != nil {
		e.hb.op(s, one(src, uint64(len(dst))), nil, fmt.Sprintf("copy from %#x", uint64(src)))
	}
	return e.Recorder.CopyDtoH(dst, src, s)
}

func (e *emulator) CopyDtoD(dst, src DevicePtr, bytes uint64, s Stream) error {
	if e.hb != nil {
		e.hb.op(s, one(src, bytes), one(dst, bytes), fmt.Sprintf("copy %#x to %#x", uint64(src), uint64(dst)))
	}
	return e.Recorder.CopyDtoD(dst, src, bytes, s)
}

func (e *emulator) Memset(p DevicePtr, bytes uint64, s Stream) error {
	if e.hb != nil {
		e.hb.op(s, nil, one(p, bytes), fmt.Sprintf("memset %#x", uint64(p)))
	}
	return e.Recorder.Memset(p, bytes, s)
}

func (e *emulator) EventRecord(ev Event, s Stream) error {
	if e.hb != nil {
		e.hb.record(ev, s)
	}
	return e.Recorder.EventRecord(ev, s)
}

func (e *emulator) StreamWait(s Stream, ev Event) error {
	if e.hb != nil {
		e.hb.wait(s, ev)
	}
	return e.Recorder.StreamWait(s, ev)
}

func (e *emulator) StreamSync(s Stream) error {
	if e.hb != nil {
		e.hb.syncStream(s)
	}
	return e.Recorder.StreamSync(s)
}

func (e *emulator) EventSync(ev Event) error {
	if e.hb != nil {
		e.hb.syncEvent(ev)
	}
	return e.Recorder.EventSync(ev)
}
