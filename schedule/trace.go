package schedule

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// traceScale is the number of trace microseconds per unit of the result's
// times: a second is 10⁶ µs; an abstract unit shows as one millisecond in
// Perfetto, so that unit-cost timelines read as whole numbers.
func (r *Result) traceScale() float64 {
	if r.Unit == Seconds {
		return 1e6
	}
	return 1000
}

type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteTrace writes the timeline in the Chrome Trace Event Format (JSON
// object form), which Perfetto and chrome://tracing load: one "X"
// (complete) event per action, one thread per rank (tid = rank, named
// "rank N" by "M" metadata events), times in microseconds: real ones for costs
// in seconds, one millisecond per abstract unit otherwise. Names read "F3 s1" (forward of micro-batch 3 on
// stage 1), "F7 s0 & B3 s7" for an OVERLAP_F_B, "SEND_F2 s0" for comms;
// args carry the stage(s), micro-batch(es) and the action in grammar form.
//
// Collectives: an action with collective time inside it (Event.Collective)
// gets a child "X" event on the same thread, nested at the end of the action
// ("tp collectives 12 µs", category "collective"), which Perfetto draws as
// a row under the action. The collectives outside the actions (gradient
// reductions, step-end collectives: Result.Collectives) overlap the rank's
// compute, so they go on a thread of their own per rank ("rank N
// collectives", tid = ranks + N), sorted right under the rank's thread.
func (r *Result) WriteTrace(w io.Writer) error {
	events := make([]traceEvent, 0, 2+r.Ranks)
	scale := r.traceScale()
	title := r.Name
	if title == "" {
		title = "schedule"
	}
	events = append(events, traceEvent{Name: "process_name", Ph: "M", Pid: 0,
		Args: map[string]any{"name": fmt.Sprintf("%s (p=%d, %s; costs: %s)", title, r.Ranks, r.unitsShort(), r.CostSource)}})
	coll := r.Collectives != nil
	for rank := range r.Ranks {
		sort := rank
		if coll {
			sort = 2 * rank
		}
		events = append(events,
			traceEvent{Name: "thread_name", Ph: "M", Pid: 0, Tid: rank, Args: map[string]any{"name": fmt.Sprintf("rank %d", rank)}},
			traceEvent{Name: "thread_sort_index", Ph: "M", Pid: 0, Tid: rank, Args: map[string]any{"sort_index": sort}})
		if coll {
			tid := r.Ranks + rank
			events = append(events,
				traceEvent{Name: "thread_name", Ph: "M", Pid: 0, Tid: tid, Args: map[string]any{"name": fmt.Sprintf("rank %d collectives", rank)}},
				traceEvent{Name: "thread_sort_index", Ph: "M", Pid: 0, Tid: tid, Args: map[string]any{"sort_index": sort + 1}})
		}
	}
	for rank, evs := range r.Events {
		for _, e := range evs {
			dur := (e.End - e.Start) * scale
			te := traceEvent{Name: traceName(e.Action, r.Slices), Cat: traceCat(e.Action), Ph: "X",
				Ts: e.Start * scale, Dur: &dur, Pid: 0, Tid: rank,
				Args: map[string]any{"action": e.Action.String()}}
			if e.Action.Kind == OverlapFB {
				var stages, mbs []int
				for _, c := range e.Action.Sub {
					stages = append(stages, c.Stage)
					mbs = append(mbs, c.Microbatch)
				}
				te.Args["stage"], te.Args["mb"] = stages, mbs
			} else {
				te.Args["stage"] = e.Action.Stage
				if e.Action.Microbatch >= 0 {
					te.Args["mb"] = e.Action.Microbatch
				}
			}
			events = append(events, te)
			if e.Collective > 0 {
				// Nested at the end: it ends with the action, so it never sticks out.
				end := te.Ts + dur
				ts := max(te.Ts, end-e.Collective*scale)
				cdur := end - ts
				name := "tp collectives " + r.Unit.Format(e.Collective)
				args := map[string]any{"action": e.Action.String(), "collective_time": e.Collective}
				if e.AllToAll > 0 {
					// Expert parallelism's exchanges named apart: the all-to-alls nested at
					// the end of the collective span, the tp ones before them.
					name = "collectives " + r.Unit.Format(e.Collective)
					args["all_to_all_time"] = e.AllToAll
					ats := max(ts, end-e.AllToAll*scale)
					adur := end - ats
					events = append(events, traceEvent{Name: "ep all-to-all " + r.Unit.Format(e.AllToAll), Cat: "collective", Ph: "X",
						Ts: ats, Dur: &adur, Pid: 0, Tid: rank, Args: map[string]any{"action": e.Action.String(), "all_to_all_time": e.AllToAll}})
				}
				events = append(events, traceEvent{Name: name, Cat: "collective", Ph: "X",
					Ts: ts, Dur: &cdur, Pid: 0, Tid: rank, Args: args})
			}
		}
	}
	for rank, evs := range r.Collectives {
		for _, e := range evs {
			dur := (e.End - e.Start) * scale
			te := traceEvent{Name: e.Name(), Cat: "collective", Ph: "X", Ts: e.Start * scale, Dur: &dur, Pid: 0, Tid: r.Ranks + rank,
				Args: map[string]any{"kind": string(e.Kind), "stage": e.Stage}}
			if e.Microbatch >= 0 {
				te.Args["mb"] = e.Microbatch
			}
			events = append(events, te)
		}
	}
	enc := json.NewEncoder(w)
	return enc.Encode(struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}{events, "ms"})
}

func traceName(a Action, slices int) string {
	switch {
	case a.Kind == OverlapFB:
		parts := make([]string, len(a.Sub))
		for i, c := range a.Sub {
			parts[i] = traceName(c, slices)
		}
		return strings.Join(parts, " & ")
	case a.Microbatch >= 0:
		return fmt.Sprintf("%s%s s%d", a.Kind, unitLabel(a.Microbatch, slices), a.Stage)
	default:
		return fmt.Sprintf("%s s%d", a.Kind, a.Stage)
	}
}

func traceCat(a Action) string {
	switch {
	case a.Kind == OverlapFB:
		return "F&B"
	case a.Kind.IsCompute():
		return a.Kind.String()
	case a.Kind.IsComm():
		return "comm"
	default:
		return "other"
	}
}

// actionName is an action as a sliced schedule's reader wants it: "1F3.1" for the forward of
// micro-batch 3, slice 1, on stage 1.
func (r *Result) actionName(a Action) string {
	if r.Slices <= 1 {
		return a.String()
	}
	if a.Kind == OverlapFB {
		parts := make([]string, len(a.Sub))
		for i, c := range a.Sub {
			parts[i] = r.actionName(c)
		}
		return "(" + strings.Join(parts, ";") + ")OVERLAP_F_B"
	}
	if a.Microbatch < 0 {
		return a.String()
	}
	return fmt.Sprintf("%d%s%s", a.Stage, a.Kind, unitLabel(a.Microbatch, r.Slices))
}

func (r *Result) unitsText() string {
	if r.Slices > 1 {
		return fmt.Sprintf("%d micro-batches of %d token slices", r.Microbatches/r.Slices, r.Slices)
	}
	return fmt.Sprintf("%d micro-batches", r.Microbatches)
}

func (r *Result) unitsShort() string {
	if r.Slices > 1 {
		return fmt.Sprintf("m=%d×%d slices", r.Microbatches/r.Slices, r.Slices)
	}
	return fmt.Sprintf("m=%d", r.Microbatches)
}
