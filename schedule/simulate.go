package schedule

import (
	"fmt"
	"math"
)

// Result is the outcome of Simulate.
type Result struct {
	Name         string `json:"schedule,omitempty"`
	Ranks        int    `json:"ranks"`
	Stages       int    `json:"stages"`
	Microbatches int    `json:"microbatches"`
	Format       string `json:"format"` // compute_only or compute_comms
	Cost         string `json:"cost"`   // the costs, in ParseCost syntax
	// CostSource says where the costs came from (Cost.Describe).
	CostSource string `json:"cost_source"`
	// Unit is the unit of every time below (and of the events).
	Unit      TimeUnit `json:"time_unit"`
	Placement []int    `json:"placement"`

	// The step time splits into the ideal time, the bubble and the
	// communication compute does not hide: StepTime = IdealTime + BubbleTime +
	// CommTime.
	//
	// StepTime is when the last rank finishes (all ranks start at 0).
	StepTime float64 `json:"step_time"`
	// IdealTime is the busiest rank's total compute time.
	IdealTime float64 `json:"ideal_time"`
	// BubbleTime is the idle time the schedule's dependencies add to the
	// ideal time: the step time with free transfers, minus IdealTime.
	// BubbleRatio is BubbleTime / IdealTime, the papers' convention: (p−1)/m
	// for GPipe and 1F1B with unit costs (so above 1 when m < p−1).
	BubbleTime  float64 `json:"bubble_time"`
	BubbleRatio float64 `json:"bubble_ratio"`
	// CommTime is what transfers add on top: StepTime minus the step time
	// with free transfers. A bubble far above the schedule's formula is
	// usually this, and it is reported apart so the bubble keeps its meaning.
	CommTime float64 `json:"comm_time"`
	// InternalBubble is the largest idle time of a rank between its own first
	// start and last end, with free transfers: the bubble that remains when
	// the next step may start on each rank as soon as it finishes (the
	// papers' "parallelogram" view, in which ZB-H2 has no bubble).
	InternalBubble float64 `json:"internal_bubble_time"`

	Busy []float64 `json:"busy_time"` // per rank: compute time
	Idle []float64 `json:"idle_time"` // per rank: StepTime − Busy

	// PeakActivations is, per rank, the largest number of micro-batch
	// activations stashed at once. The activation of (stage, mb) is held from
	// the start of its F to the end of its W, or of its B when the backward
	// is not split.
	PeakActivations []int `json:"peak_activations"`
	// PeakActivationBytes weighs the same count by the per-stage activation
	// size; present only when the cost gives activation bytes.
	PeakActivationBytes []float64 `json:"peak_activation_bytes,omitempty"`

	// Events holds, per rank, every non-idle action with its start and end.
	// A RECV starts when the rank reaches it and ends when its message has
	// arrived; sends take no time.
	Events [][]Event `json:"events"`
}

// Event is one action on a rank's timeline.
type Event struct {
	Start  float64 `json:"start"`
	End    float64 `json:"end"`
	Action Action  `json:"action"`
}

// Simulate runs s under the costs c and returns its timeline and metrics.
// It accepts both formats: compute_only schedules use the implicit
// dependencies, paying c's transfer time between ranks; compute_comms
// schedules run their SEND/RECV actions (a send is non-blocking and its
// message reaches the peer's mailbox after the transfer time, a RECV waits
// for it). A schedule that Validate rejects is an error, never a hang.
//
// With communication costs it simulates the schedule twice, the second time
// with free transfers, to tell the bubble from the communication time.
func Simulate(s *Schedule, c Cost) (*Result, error) {
	if err := s.checkShape(); err != nil {
		return nil, err
	}
	if err := c.check(s.Stages); err != nil {
		return nil, err
	}
	res, err := simulate(s, c)
	if err != nil {
		return nil, err
	}
	free := res
	if c.communicates() {
		if free, err = simulate(s, c.free()); err != nil {
			return nil, err
		}
	}
	// A rank's action order is fixed, so a shorter transfer never delays an
	// action: the free step time is at most the real one.
	res.BubbleTime = free.StepTime - res.IdealTime
	res.CommTime = res.StepTime - free.StepTime
	if res.CommTime < 0 { // rounding
		res.BubbleTime, res.CommTime = res.StepTime-res.IdealTime, 0
	}
	res.InternalBubble = free.InternalBubble
	if res.IdealTime > 0 {
		res.BubbleRatio = res.BubbleTime / res.IdealTime
	}
	return res, nil
}

// simulate runs s under c; the bubble figures are left to Simulate.
func simulate(s *Schedule, c Cost) (*Result, error) {
	cm := &costModel{c: &c}
	p, err := compile(s, cm)
	if err != nil {
		return nil, err
	}
	tl, err := p.run()
	if err != nil {
		return nil, err
	}
	if err := p.checkComplete(); err != nil {
		return nil, err
	}
	R := s.Ranks
	res := &Result{
		Name: s.Name, Ranks: R, Stages: s.Stages, Microbatches: s.Microbatches,
		Format: s.Format(), Cost: c.String(), CostSource: c.Describe(), Unit: c.Unit,
		Placement: append([]int(nil), s.Placement...), Busy: make([]float64, R), Idle: make([]float64, R),
		PeakActivations: make([]int, R), Events: make([][]Event, R),
	}
	withBytes := c.ActBytes > 0
	for _, sc := range c.Stages {
		withBytes = withBytes || sc.ActBytes > 0
	}
	if withBytes {
		res.PeakActivationBytes = make([]float64, R)
	}
	for r := range R {
		first, last := -1.0, 0.0
		var live int
		var liveBytes float64
		evs := make([]Event, 0, len(p.ops[r]))
		for i := range p.ops[r] {
			o := &p.ops[r][i]
			if o.act.IsIdle() {
				continue
			}
			start, end := tl.start[r][i], tl.end[r][i]
			if o.act.Kind == RecvF || o.act.Kind == RecvB {
				start = tl.reach[r][i]
			}
			evs = append(evs, Event{Start: start, End: end, Action: o.act})
			if !o.act.Kind.IsCompute() {
				continue
			}
			res.Busy[r] += o.dur
			if first < 0 {
				first = tl.start[r][i]
			}
			last = max(last, end)
			// Ops on one rank never overlap, so stashing at each start and
			// freeing at each end in list order follows time order.
			for _, st := range o.stash.list() {
				live++
				liveBytes += cm.actBytes(int(st))
			}
			res.PeakActivations[r] = max(res.PeakActivations[r], live)
			if withBytes {
				res.PeakActivationBytes[r] = max(res.PeakActivationBytes[r], liveBytes)
			}
			for _, st := range o.free.list() {
				live--
				liveBytes -= cm.actBytes(int(st))
			}
		}
		res.Events[r] = evs
		for _, e := range evs {
			res.StepTime = max(res.StepTime, e.End)
		}
		res.IdealTime = max(res.IdealTime, res.Busy[r])
		if first >= 0 {
			res.InternalBubble = max(res.InternalBubble, last-first-res.Busy[r])
		}
	}
	for r := range R {
		res.Idle[r] = res.StepTime - res.Busy[r]
	}
	// Each cost is finite, but a sum of huge ones is not: report that rather than print a
	// step time of +Inf and a bubble of NaN.
	if math.IsInf(res.StepTime, 0) || math.IsInf(res.IdealTime, 0) {
		return nil, fmt.Errorf("the step time overflows: the costs are too large to simulate (scale them down)")
	}
	return res, nil
}
