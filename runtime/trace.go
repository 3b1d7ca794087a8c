package runtime

import (
	"bufio"
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime/device"
)

// Trace streams executed instructions to a Chrome trace (Perfetto): one process per rank,
// pipeline actions (F, I, W, OPT) as spans on one track and kernels and communication on
// another, comparable with the simulator's trace.
//
// Every timestamp is on one clock that starts at NewTrace, so the steps of a run follow each
// other on the timeline. The file is written as the run goes, not kept in memory (a step of a
// small GPT makes about a megabyte of events): the opening and the metadata at NewTrace, each
// event when its instruction completes, into a buffer flushed at the end of every step, and
// the closing brackets at Close. So a run that stops between steps (an error, Ctrl-C) leaves
// a valid trace of what it ran once Close is called.
type Trace struct {
	first, last int // steps recorded, inclusive; last 0: no end

	mu    sync.Mutex
	dst   io.Writer
	w     *bufio.Writer
	start time.Time
	// open is each rank's pipeline action in progress; only the rank's own goroutine
	// touches its slot during a step.
	open   []*traceEvent
	n      int    // events written
	tmp    string // a multi-process trace's part: the temporary file
	err    error  // the first write error, reported at the end of the step and by Close
	closed bool
}

type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`  // microseconds since the start of the run
	Dur  float64        `json:"dur"` // microseconds
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// NewTrace starts a trace of a job of the given number of ranks on w, recording steps first
// to last inclusive (last 0: every step from first on). It writes the opening of the JSON
// and the names of the ranks' tracks now, so that a write error shows before training.
func NewTrace(w io.Writer, ranks, first, last int) (*Trace, error) {
	all := make([]int, ranks)
	for r := range all {
		all[r] = r
	}
	return newTrace(w, all, first, last, time.Now())
}

// newTrace is NewTrace for the given ranks, on a clock that starts at start.
func newTrace(w io.Writer, ranks []int, first, last int, start time.Time) (*Trace, error) {
	n := 0
	for _, r := range ranks {
		n = max(n, r+1)
	}
	t := &Trace{first: first, last: last, dst: w, w: bufio.NewWriterSize(w, 1<<16), start: start, open: make([]*traceEvent, n)}
	t.w.WriteString(`{"displayTimeUnit":"ms","traceEvents":[`)
	for _, r := range ranks {
		t.write(traceEvent{Name: "process_name", Ph: "M", Pid: r, Args: map[string]any{"name": "rank " + strconv.Itoa(r)}})
		t.write(traceEvent{Name: "thread_name", Ph: "M", Pid: r, Tid: 0, Args: map[string]any{"name": "actions"}})
		t.write(traceEvent{Name: "thread_name", Ph: "M", Pid: r, Tid: 1, Args: map[string]any{"name": "kernels"}})
	}
	if err := t.w.Flush(); err != nil {
		return nil, err
	}
	return t, nil
}

// records reports whether step is in the recorded range (the executor skips timing the
// others).
func (t *Trace) records(step int) bool {
	return t != nil && step >= t.first && (t.last == 0 || step <= t.last)
}

// write appends one event to the buffer (a write error is kept by the buffer and reported
// by the next Flush). The caller holds t.mu.
func (t *Trace) write(ev traceEvent) {
	t.writeJSON(marshalEvent(ev))
}

func (t *Trace) writeJSON(b []byte) {
	if b == nil {
		return
	}
	if t.n > 0 {
		t.w.WriteByte(',')
	}
	t.n++
	t.w.WriteByte('\n')
	t.w.Write(b)
}

func marshalEvent(ev traceEvent) []byte {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil // finite numbers and strings only: cannot fail
	}
	return b
}

// record writes the event of one executed instruction of a rank that began at began and
// took dur. It is called from the rank's goroutine.
func (t *Trace) record(rank, step int, it *instr, began time.Time, dur time.Duration) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	start := began.Sub(t.start)
	var ev traceEvent
	if (it.Kind == pb.Instr_BEGIN || it.Kind == pb.Instr_END) && rank >= len(t.open) {
		return // a rank NewTrace was not told of
	}
	switch it.Kind {
	case pb.Instr_BEGIN:
		t.open[rank] = &traceEvent{Name: actionName(it), Cat: "action", Ph: "X", Ts: us(start), Pid: rank, Tid: 0,
			Args: map[string]any{"stage": it.Stage, "microbatch": it.Microbatch, "step": step}}
		return
	case pb.Instr_END:
		if t.open[rank] == nil {
			return
		}
		ev = *t.open[rank]
		ev.Dur = us(start+dur) - ev.Ts
		t.open[rank] = nil
	case pb.Instr_NOP:
		return
	default:
		name := it.Kind.String()
		if it.Kind == pb.Instr_LAUNCH {
			name = it.name
		}
		ev = traceEvent{Name: name, Cat: it.Kind.String(), Ph: "X", Ts: us(start), Dur: us(dur),
			Pid: rank, Tid: 1, Args: map[string]any{"step": step, "microbatch": it.Microbatch}}
		if it.Kind == pb.Instr_LAUNCH {
			// The operand types, so that a profile tells a kernel's launches apart.
			ev.Args["in"], ev.Args["out"] = typeNames(it.in), typeNames(it.out)
		}
	}
	b := marshalEvent(ev) // outside the lock: the ranks encode in parallel
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.writeJSON(b)
	}
}

// endStep flushes the step's events to the file. An action a failed step left open has no
// end and is dropped.
func (t *Trace) endStep() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.open) // after the step: no rank goroutine runs
	if t.closed {
		return t.err
	}
	if err := t.w.Flush(); err != nil && t.err == nil {
		t.err = err
	}
	return t.err
}

// Close ends the JSON, flushes it and closes the writer given to NewTrace if it is an
// io.Closer. It may be called at any point between steps, and more than once.
func (t *Trace) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return t.err
	}
	t.closed = true
	t.w.WriteString("\n]}\n")
	if err := t.w.Flush(); err != nil && t.err == nil {
		t.err = err
	}
	if c, ok := t.dst.(io.Closer); ok {
		if err := c.Close(); err != nil && t.err == nil {
			t.err = err
		}
	}
	return t.err
}

func actionName(it *instr) string {
	if it.Label == "OPT" {
		return "OPT"
	}
	name := it.Label + strconv.Itoa(int(it.Microbatch))
	if it.TokenSlice > 0 {
		name += "." + strconv.Itoa(int(it.TokenSlice)-1) // micro-batch.slice, as the simulator labels units
	}
	return name + " s" + strconv.Itoa(int(it.Stage))
}

func typeNames(ts []device.Tensor) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Type.String()
	}
	return names
}
