package runtime

import (
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"

	pb "ppc.dev/ppc/codegen/programpb"
)

// Trace records executed instructions for a Chrome trace (Perfetto): one process per rank,
// pipeline actions (F, I, W, OPT) as spans on one track and kernels and communication on
// another, comparable with the simulator's trace.
type Trace struct {
	mu     sync.Mutex
	events []traceEvent
	open   map[int]traceEvent
}

type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`  // microseconds
	Dur  float64        `json:"dur"` // microseconds
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// NewTrace returns an empty trace.
func NewTrace() *Trace { return &Trace{open: map[int]traceEvent{}} }

func (t *Trace) record(rank, step int, it *instr, start, dur time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	switch it.Kind {
	case pb.Instr_BEGIN:
		t.open[rank] = traceEvent{Name: actionName(it), Cat: "action", Ph: "X", Ts: us(start), Pid: rank, Tid: 0,
			Args: map[string]any{"stage": it.Stage, "microbatch": it.Microbatch, "step": step}}
	case pb.Instr_END:
		if ev, ok := t.open[rank]; ok {
			ev.Dur = us(start+dur) - ev.Ts
			t.events = append(t.events, ev)
			delete(t.open, rank)
		}
	case pb.Instr_NOP:
	default:
		name := it.Kind.String()
		if it.Kind == pb.Instr_LAUNCH {
			name = it.name
		}
		t.events = append(t.events, traceEvent{Name: name, Cat: it.Kind.String(), Ph: "X", Ts: us(start), Dur: us(dur),
			Pid: rank, Tid: 1, Args: map[string]any{"step": step, "microbatch": it.Microbatch}})
	}
}

func actionName(it *instr) string {
	if it.Label == "OPT" {
		return "OPT"
	}
	return it.Label + strconv.Itoa(int(it.Microbatch)) + " s" + strconv.Itoa(int(it.Stage))
}

// Write writes the trace in the Trace Event Format.
func (t *Trace) Write(w io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	meta := []traceEvent{}
	ranks := map[int]bool{}
	for _, e := range t.events {
		ranks[e.Pid] = true
	}
	for r := range ranks {
		meta = append(meta, traceEvent{Name: "process_name", Ph: "M", Pid: r, Args: map[string]any{"name": "rank " + strconv.Itoa(r)}},
			traceEvent{Name: "thread_name", Ph: "M", Pid: r, Tid: 0, Args: map[string]any{"name": "actions"}},
			traceEvent{Name: "thread_name", Ph: "M", Pid: r, Tid: 1, Args: map[string]any{"name": "kernels"}})
	}
	return json.NewEncoder(w).Encode(map[string]any{"traceEvents": append(meta, t.events...), "displayTimeUnit": "ms"})
}
