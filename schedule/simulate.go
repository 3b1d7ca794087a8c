package schedule

import (
	"fmt"
	"math"
	"strconv"
)

// Result is the outcome of Simulate.
type Result struct {
	Name         string `json:"schedule,omitempty"`
	Ranks        int    `json:"ranks"`
	Stages       int    `json:"stages"`
	Microbatches int    `json:"microbatches"`
	// Slices is the token slices per micro-batch of a sliced schedule (Microbatches then
	// counts units: micro-batches × slices); 0 otherwise.
	Slices int    `json:"token_slices,omitempty"`
	Format string `json:"format"` // compute_only or compute_comms
	Cost   string `json:"cost"`   // the costs, in ParseCost syntax
	// CostSource says where the costs came from (Cost.Describe).
	CostSource string `json:"cost_source"`
	// Unit is the unit of every time below (and of the events).
	Unit      TimeUnit `json:"time_unit"`
	Placement []int    `json:"placement"`

	// The step time splits into the ideal time, the bubble, the collectives
	// and the communication compute does not hide: StepTime = IdealTime +
	// BubbleTime + CollectiveTime + CommTime.
	//
	// StepTime is when the last rank finishes (all ranks start at 0), its
	// reductions and step-end collectives included.
	StepTime float64 `json:"step_time"`
	// IdealTime is the busiest rank's total compute time, without the
	// collectives inside its actions (StageCost.FColl …).
	IdealTime float64 `json:"ideal_time"`
	// BubbleTime is the idle time the schedule's dependencies add to the
	// ideal time: the step time with free transfers and free collectives,
	// minus IdealTime. BubbleRatio is BubbleTime / IdealTime, the papers'
	// convention: (p−1)/m for GPipe and 1F1B with unit costs (so above 1 when
	// m < p−1).
	BubbleTime  float64 `json:"bubble_time"`
	BubbleRatio float64 `json:"bubble_ratio"`
	// CollectiveTime is what collectives add: the step time with free
	// transfers minus the same with free collectives too. It counts the
	// collectives inside the actions on the critical path, and the reductions
	// and step-end collectives that compute does not hide (zero without
	// collective costs).
	CollectiveTime float64 `json:"collective_time"`
	// CommTime is what transfers add on top: StepTime minus the step time
	// with free transfers. A bubble far above the schedule's formula is
	// usually this, and it is reported apart so the bubble keeps its meaning.
	CommTime float64 `json:"comm_time"`
	// InternalBubble is the largest idle time of a rank between its own first
	// start and last end, with free transfers and collectives: the bubble that
	// remains when the next step may start on each rank as soon as it
	// finishes (the papers' "parallelogram" view, in which ZB-H2 has no
	// bubble).
	InternalBubble float64 `json:"internal_bubble_time"`
	// SpanTime is the Zero Bubble paper's cost of a schedule: the longest time any rank
	// spends from the start of its first computation to the end of its last, transfers and
	// collectives included. SpanBubbleRate is the paper's bubble rate, (SpanTime −
	// IdealTime) / SpanTime: (cost − m(F+B+W)) / cost with uniform stages. It is what the
	// paper's tables give; unlike BubbleRatio it counts no rank's wait for its first input
	// (the next step may start on each rank as soon as it is done) and divides by the span,
	// not by the ideal time.
	SpanTime       float64 `json:"span_time"`
	SpanBubbleRate float64 `json:"span_bubble_rate"`

	Busy []float64 `json:"busy_time"` // per rank: time in actions (their collectives included)
	Idle []float64 `json:"idle_time"` // per rank: StepTime − Busy

	// PeakActivations is, per rank, the largest number of micro-batch
	// activations stashed at once. The activation of (stage, mb) is held from
	// the start of its F to the end of its W, or of its B when the backward
	// is not split.
	PeakActivations []int `json:"peak_activations"`
	// PeakActivationsHeld is, when Cost.WStash is below 1, the same peak weighted as zb-auto's
	// memory limit counts it: a micro-batch holds a whole activation from its F to its I and
	// WStash of one from there to its W.
	PeakActivationsHeld []float64 `json:"peak_activations_held,omitempty"`
	// PeakActivationBytes weighs the same count by the per-stage activation
	// size; present only when the cost gives activation bytes.
	PeakActivationBytes []float64 `json:"peak_activation_bytes,omitempty"`

	// Events holds, per rank, every non-idle action with its start and end.
	// A RECV starts when the rank reaches it and ends when its message has
	// arrived; sends take no time.
	Events [][]Event `json:"events"`
	// Collectives holds, per rank, the collectives outside the actions
	// (gradient reductions and step-end collectives, see StageCost) on the
	// rank's collective stream; nil when there are none.
	Collectives [][]CollectiveEvent `json:"collectives,omitempty"`
}

// Event is one action on a rank's timeline.
type Event struct {
	Start  float64 `json:"start"`
	End    float64 `json:"end"`
	Action Action  `json:"action"`
	// Collective is the part of End − Start spent in collectives inside the
	// action (tensor parallelism). They really sit between the action's
	// matmuls; the trace and SVG draw them as one span at the action's end,
	// which keeps the total exact without a per-op timeline.
	Collective float64 `json:"collective,omitempty"`
	// AllToAll is the part of Collective spent in expert parallelism's all-to-alls.
	AllToAll float64 `json:"all_to_all,omitempty"`
}

// CollectiveKind says what a CollectiveEvent is (see StageCost).
type CollectiveKind string

const (
	// GradReduce is the all-reduce of a stage's gradients over its
	// data-parallel replicas, after the stage's last W (or B).
	GradReduce CollectiveKind = "grad_reduce"
	// GradReduceMB is a reduce-scatter of one micro-batch's gradients, after
	// that micro-batch's W (or B) (ZeRO-2).
	GradReduceMB CollectiveKind = "grad_reduce_mb"
	// StepEnd is the optimizer's collectives (ZeRO), after the rank's last
	// action and reduction.
	StepEnd CollectiveKind = "step_end"
)

// CollectiveEvent is one collective outside the actions on a rank's
// collective stream. Microbatch is −1 except for GradReduceMB.
type CollectiveEvent struct {
	Start      float64        `json:"start"`
	End        float64        `json:"end"`
	Kind       CollectiveKind `json:"kind"`
	Stage      int            `json:"stage"`
	Microbatch int            `json:"mb"`
}

// Name describes e for the trace and SVG: "gradient all-reduce s1" (over dp, and over tp for
// whole parameters used in split computations),
// "dp reduce-scatter 3 s1", "optimizer collectives s1".
func (e CollectiveEvent) Name() string {
	switch e.Kind {
	case GradReduce:
		return fmt.Sprintf("gradient all-reduce s%d", e.Stage)
	case GradReduceMB:
		return fmt.Sprintf("dp reduce-scatter %d s%d", e.Microbatch, e.Stage)
	}
	return fmt.Sprintf("optimizer collectives s%d", e.Stage)
}

// Simulate runs s under the costs c and returns its timeline and metrics.
// It accepts both formats: compute_only schedules use the implicit
// dependencies, paying c's transfer time between ranks; compute_comms
// schedules run their SEND/RECV actions (a send is non-blocking and its
// message reaches the peer's mailbox after the transfer time, a RECV waits
// for it). A schedule that Validate rejects is an error, never a hang.
//
// With communication costs it simulates the schedule again with free
// transfers, to tell the bubble from the communication time, and with
// collective costs once more with free collectives too, to tell both from
// the collective time.
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
	bare := free
	if c.hasCollectives() {
		if bare, err = simulate(s, c.free().compute()); err != nil {
			return nil, err
		}
	}
	// A rank's action order is fixed, so a shorter transfer or collective
	// never delays an action: each step time is at most the one before.
	res.IdealTime = bare.IdealTime
	res.BubbleTime = bare.StepTime - res.IdealTime
	res.CollectiveTime = free.StepTime - bare.StepTime
	res.CommTime = res.StepTime - free.StepTime
	if res.CommTime < 0 { // rounding
		res.CollectiveTime, res.CommTime = res.CollectiveTime+res.CommTime, 0
	}
	if res.CollectiveTime < 0 {
		res.BubbleTime, res.CollectiveTime = res.BubbleTime+res.CollectiveTime, 0
	}
	res.InternalBubble = bare.InternalBubble
	if res.IdealTime > 0 {
		res.BubbleRatio = res.BubbleTime / res.IdealTime
	}
	if st := c.stash(); st != 1 {
		res.PeakActivationsHeld = heldPeaks(res, st)
	}
	if res.SpanTime > 0 {
		res.SpanBubbleRate = max(0, res.SpanTime-res.IdealTime) / res.SpanTime
	}
	return res, nil
}

// simulate runs s under c; the bubble figures are left to Simulate.
// SimulateStep is Simulate without the step time's breakdown (one simulation instead of
// three): StepTime, Busy, Idle, PeakActivations and PeakActivationBytes are set, IdealTime
// is the busiest rank's time in actions, and the other parts are zero. The planner prices
// thousands of configurations with it and breaks down only the ones it prints.
func SimulateStep(s *Schedule, c Cost) (*Result, error) {
	if err := s.checkShape(); err != nil {
		return nil, err
	}
	if err := c.check(s.Stages); err != nil {
		return nil, err
	}
	return simulate(s, c)
}

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
		Name: s.Name, Ranks: R, Stages: s.Stages, Microbatches: s.Microbatches, Slices: sliceCount(s),
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
			evs = append(evs, Event{Start: start, End: end, Action: o.act, Collective: o.coll, AllToAll: o.a2a})
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
				liveBytes += cm.actBytes(int(st), o.unitOf(int(st), Forward))
			}
			res.PeakActivations[r] = max(res.PeakActivations[r], live)
			if withBytes {
				res.PeakActivationBytes[r] = max(res.PeakActivationBytes[r], liveBytes)
			}
			for _, st := range o.free.list() {
				live--
				liveBytes -= cm.actBytes(int(st), o.unitOf(int(st), BackwardWeight))
			}
		}
		res.Events[r] = evs
		for _, e := range evs {
			res.StepTime = max(res.StepTime, e.End)
		}
		if c.hasCollectives() {
			if res.Collectives == nil {
				res.Collectives = make([][]CollectiveEvent, R)
			}
			res.Collectives[r] = p.collectives(r, tl, cm)
			for _, e := range res.Collectives[r] {
				res.StepTime = max(res.StepTime, e.End)
			}
		}
		res.IdealTime = max(res.IdealTime, res.Busy[r])
		if first >= 0 {
			res.InternalBubble = max(res.InternalBubble, last-first-res.Busy[r])
			res.SpanTime = max(res.SpanTime, last-first)
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

// collectives places rank r's collectives outside the actions (StageCost's
// GradReduce, GradReduceMB and StepEnd) on its collective stream: each
// reduction is issued when the W (or B) that completes its gradients ends and
// starts when the stream is free, so reductions overlap the compute that
// follows but not each other; the step-end collectives start once the last
// action and the last reduction are done, one stage after another.
func (p *program) collectives(r int, tl *timeline, cm *costModel) []CollectiveEvent {
	var evs []CollectiveEvent
	stream, last := 0.0, 0.0
	issue := func(at, dur float64, kind CollectiveKind, stage, mb int) {
		start := max(at, stream)
		stream = start + dur
		evs = append(evs, CollectiveEvent{Start: start, End: stream, Kind: kind, Stage: stage, Microbatch: mb})
	}
	done := map[int]int{} // stage → micro-batches whose weight gradient is complete
	for i := range p.ops[r] {
		o := &p.ops[r][i]
		if o.act.IsIdle() {
			continue
		}
		end := tl.end[r][i]
		last = max(last, end)
		for _, c := range o.act.Computes() {
			if c.Kind != BackwardWeight && c.Kind != FullBackward {
				continue
			}
			sc := cm.stage(c.Stage)
			if sc.GradReduceMB > 0 {
				issue(end, sc.GradReduceMB, GradReduceMB, c.Stage, c.Microbatch)
			}
			if done[c.Stage]++; done[c.Stage] == p.s.Microbatches && sc.GradReduce > 0 {
				issue(end, sc.GradReduce, GradReduce, c.Stage, -1)
			}
		}
	}
	t := max(last, stream)
	for st, owner := range p.s.Placement {
		if sc := cm.stage(st); owner == r && sc.StepEnd > 0 {
			evs = append(evs, CollectiveEvent{Start: t, End: t + sc.StepEnd, Kind: StepEnd, Stage: st, Microbatch: -1})
			t += sc.StepEnd
		}
	}
	return evs
}

func sliceCount(s *Schedule) int {
	if s.Slices > 1 {
		return s.Slices
	}
	return 0
}

// unitLabel writes a unit as people read it: the micro-batch, or micro-batch.slice ("3.1")
// in a sliced schedule.
func unitLabel(mb, slices int) string {
	if slices > 1 && mb >= 0 {
		return fmt.Sprintf("%d.%d", mb/slices, mb%slices)
	}
	return strconv.Itoa(mb)
}
