package schedule

// zbCosts are the times zb-auto's builder schedules with: per stage F, I and W, and per
// boundary the transfer of an activation (or of its gradient) from stage j to j+1.
type zbCosts struct {
	f, i, w []float64
	x       []float64
}

func newZBCosts(p int, cost *Cost) *zbCosts {
	cm := &costModel{c: cost}
	c := &zbCosts{f: make([]float64, p), i: make([]float64, p), w: make([]float64, p), x: make([]float64, max(p-1, 0))}
	for s := range p {
		c.f[s] = cm.compute(Act(Forward, s, 0))
		c.i[s] = cm.compute(Act(BackwardInput, s, 0))
		c.w[s] = cm.compute(Act(BackwardWeight, s, 0))
	}
	for j := range p - 1 {
		c.x[j] = cm.transfer(j, 0)
	}
	return c
}

// W placement policies of zbBuild: what a deferred weight gradient does with an idle gap
// before the next forward or input gradient that is shorter than itself.
const (
	gapIdle = iota // leave the gap idle
	gapFill        // run the W: the next action starts late by W − gap
	gapHalf        // run the W when the gap is at least half of it
	numGapPolicies
)

// zbBuild lays out one candidate zb-auto schedule and times it as the simulator would
// (an action starts when its rank is free and its input has arrived, transfers included).
// Each rank runs its forwards and input gradients in 1F1B order — warm[j] forwards, then
// one input gradient and one forward in turn — and the builder decides where its weight
// gradients go: a W runs when the memory limit requires it (its activation is freed at its
// end), and otherwise only in what would be an idle gap before the next forward or input
// gradient, by the gap policy. Stages are laid out microbatch round by round (forwards from
// the first stage, input gradients from the last), so every input is placed before its
// consumer and every time is exact.
type zbBuild struct {
	p, m    int
	limit   float64 // activation memory per rank, in micro-batch activations
	stash   float64 // the part of its activation a micro-batch holds between its I and its W
	gap     int
	c       *zbCosts
	free    []float64 // when each rank is free
	first   []float64 // each rank's first start (−1: none yet)
	f, b, w []int     // forwards, input gradients and weight gradients laid out per rank
	tF, tI  []float64 // end of F and I of (stage j, mb) at j·m+mb
	acts    [][]Action
}

func newZBBuild(p, m int, limit, stash float64, c *zbCosts) *zbBuild {
	z := &zbBuild{p: p, m: m, limit: limit, stash: stash, c: c,
		free: make([]float64, p), first: make([]float64, p), f: make([]int, p), b: make([]int, p), w: make([]int, p),
		tF: make([]float64, p*m), tI: make([]float64, p*m), acts: make([][]Action, p)}
	for j := range p {
		z.acts[j] = make([]Action, 0, 3*m)
	}
	return z
}

func (z *zbBuild) reset(gap int) {
	z.gap = gap
	for j := range z.p {
		z.free[j], z.first[j], z.f[j], z.b[j], z.w[j] = 0, -1, 0, 0, 0
		z.acts[j] = z.acts[j][:0]
	}
}

// ready is when the input of rank j's next action of kind k arrives (0 when it has none
// from another rank).
func (z *zbBuild) ready(j int, k Kind) float64 {
	switch k {
	case Forward:
		if j > 0 {
			return z.tF[(j-1)*z.m+z.f[j]] + z.c.x[j-1]
		}
	case BackwardInput:
		if j < z.p-1 {
			return z.tI[(j+1)*z.m+z.b[j]] + z.c.x[j]
		}
	}
	return 0
}

func (z *zbBuild) put(j int, k Kind) {
	start := max(z.free[j], z.ready(j, k))
	var mb int
	var end float64
	switch k {
	case Forward:
		mb = z.f[j]
		z.f[j]++
		end = start + z.c.f[j]
		z.tF[j*z.m+mb] = end
	case BackwardInput:
		mb = z.b[j]
		z.b[j]++
		end = start + z.c.i[j]
		z.tI[j*z.m+mb] = end
	default:
		mb = z.w[j]
		z.w[j]++
		end = start + z.c.w[j]
	}
	if z.first[j] < 0 {
		z.first[j] = start
	}
	z.free[j] = end
	z.acts[j] = append(z.acts[j], Act(k, j, mb))
}

// held is the activation memory rank j holds, in micro-batch activations.
func (z *zbBuild) held(j int) float64 {
	return float64(z.f[j]-z.b[j]) + z.stash*float64(z.b[j]-z.w[j])
}

// next lays out rank j's next action of kind k, preceded by the weight gradients the memory
// limit requires and those that fill the wait for its input. It reports false when the
// memory limit cannot be kept.
func (z *zbBuild) next(j int, k Kind) bool {
	if k == Forward {
		for z.held(j)+1 > z.limit+1e-9 {
			if z.w[j] >= z.b[j] {
				return false
			}
			z.put(j, BackwardWeight)
		}
	}
	r := z.ready(j, k)
	for z.w[j] < z.b[j] && z.free[j]+z.c.w[j] <= r {
		z.put(j, BackwardWeight)
	}
	if z.w[j] < z.b[j] && z.free[j] < r {
		switch gap := r - z.free[j]; {
		case z.gap == gapFill, z.gap == gapHalf && 2*gap >= z.c.w[j]:
			z.put(j, BackwardWeight)
		}
	}
	z.put(j, k)
	return true
}

// run lays out the whole schedule for the warm-up counts warm (non-increasing, each in
// [1, min(limit, m)]); false when the memory limit cannot be kept.
func (z *zbBuild) run(warm []int, gap int) bool {
	z.reset(gap)
	p, m := z.p, z.m
	for j := range p {
		for z.f[j] < warm[j] {
			if !z.next(j, Forward) {
				return false
			}
		}
	}
	for i := range m {
		if i > 0 {
			for j := range p {
				if z.f[j] < m && (j == 0 || z.f[j] < z.f[j-1]) && !z.next(j, Forward) {
					return false
				}
			}
		}
		for j := p - 1; j >= 0; j-- {
			z.next(j, BackwardInput)
		}
	}
	for j := range p {
		for z.w[j] < m {
			z.put(j, BackwardWeight)
		}
	}
	return true
}

// spans returns the Zero Bubble paper's cost of the laid-out schedule, the longest time
// any rank spends from its first start to its last end, and the step time, when the last
// rank ends.
func (z *zbBuild) spans() (span, step float64) {
	for j := range z.p {
		span = max(span, z.free[j]-z.first[j])
		step = max(step, z.free[j])
	}
	return span, step
}

func (z *zbBuild) actions() [][]Action {
	out := make([][]Action, z.p)
	for j := range z.p {
		out[j] = append([]Action(nil), z.acts[j]...)
	}
	return out
}

// zbSearch lays out zb-auto's candidates with zbBuild and returns the best by the Zero
// Bubble paper's cost (the longest first-start-to-last-end span of any rank), ties broken by
// step time; nil when no warm-up keeps within the memory limit. The candidates are every
// gap policy on warm-ups of linear shape — a forwards on the first stage, s fewer per stage
// after it — and the best of them is then refined stage by stage, one forward more or less
// while that lowers the cost. ok, when given, rejects candidates (zb-auto keeps the step
// time within the hand-written schedules').
func zbSearch(p, m int, limit, stash float64, c *zbCosts, ok func(span, step float64) bool) [][]Action {
	z := newZBBuild(p, m, limit, stash, c)
	top := min(m, int(limit+1e-9)) // forwards before the first I each hold a whole activation
	if top < 1 {
		return nil
	}
	var (
		best               []int
		bestGap            int
		bestSpan, bestStep float64
		found              bool
	)
	try := func(warm []int, gap int) bool {
		if !z.run(warm, gap) {
			return false
		}
		span, step := z.spans()
		if ok != nil && !ok(span, step) {
			return false
		}
		if !found || span < bestSpan*(1-1e-12) || (span <= bestSpan*(1+1e-12) && step < bestStep*(1-1e-12)) {
			best, bestGap, bestSpan, bestStep, found = append(best[:0], warm...), gap, span, step, true
			return true
		}
		return false
	}
	warm := make([]int, p)
	shape := func(a int, s float64) []int {
		for j := range p {
			v := min(top, a-int(s*float64(j)+0.5))
			if j > 0 {
				v = min(v, warm[j-1])
			}
			warm[j] = max(v, 1)
		}
		return warm
	}
	for a := max(1, top-4); a <= top; a++ {
		for _, s := range []float64{0, 0.5, 1, 1.5, 2, 3} {
			for gap := range numGapPolicies {
				try(shape(a, s), gap)
			}
		}
	}
	for _, a := range []int{p, 2*p - 1} { // 1F1B's and ZB-H1's warm-up, ZB-H2's
		for _, s := range []float64{1, 2} {
			for gap := range numGapPolicies {
				try(shape(a, s), gap)
			}
		}
	}
	if !found {
		return nil
	}
	// Refine: one stage's warm-up up or down by one while that helps (warm-ups stay
	// non-increasing along the pipeline).
	for pass := 0; pass < 2; pass++ {
		improved := false
		for j := range p {
			for _, d := range []int{1, -1} {
				copy(warm, best)
				warm[j] += d
				if warm[j] < 1 || warm[j] > top || (j > 0 && warm[j] > warm[j-1]) || (j+1 < p && warm[j] < warm[j+1]) {
					continue
				}
				if try(warm, bestGap) {
					improved = true
				}
			}
		}
		if !improved {
			break
		}
	}
	z.run(best, bestGap)
	return z.actions()
}
