package schedule

import (
	"fmt"
	"math"
)

// ZBAuto is the cost-aware zero-bubble scheduler (`zb-auto`), after the Zero Bubble paper's
// automatic scheduling (Qi et al., ICLR 2024, section 3): with real per-stage F, I and W
// times (uneven stages, W shorter than F) the hand-written ZB-H1 and ZB-H2 layouts leave
// bubbles, so the schedule is built for the costs under a memory limit of maxInflight
// micro-batch activations per rank (0: p). A micro-batch holds its activation from the start
// of its F; between its I and its W it holds the part Cost.WStash says (1 unless given), as
// the paper counts memory for its ZB-1p (p activations) and ZB-2p (2p).
//
// The main candidates are the paper's heuristic, searched (zbSearch): each rank runs its
// forwards and input gradients in 1F1B order after a warm-up of as many forwards as is
// chosen for it, and each deferred weight gradient goes where the rank would otherwise wait
// for its next input (or where memory requires it), the layout timed exactly on the costs,
// transfers included; the warm-ups and the gap policy are searched. A list scheduler that
// plays the pipeline forward in time (listSchedule) adds three more, and the hand-written
// schedules that fit the memory (1F1B and ZB-H1 at p, ZB-H2 at 2p−1) are candidates too.
// Each is simulated; the one with the smallest span (the paper's cost: the longest first
// start to last end of a rank) wins, ties going to the shorter step, among those that
// validate, keep within the memory and whose step time is no longer than the hand-written
// reference's at this memory (ZB-H2 from 2p−1 micro-batches, else ZB-H1 from p). So zb-auto
// is never worse than ZB-H1 at p in flight nor than ZB-H2 at 2p−1, by either measure, on the
// costs it is given.
func ZBAuto(p, m int, cost Cost, maxInflight int) (*Schedule, error) {
	if p < 1 || m < 1 {
		return nil, fmt.Errorf("zb-auto: %d ranks, %d micro-batches", p, m)
	}
	if maxInflight == 0 {
		maxInflight = p
	}
	if maxInflight < 1 {
		return nil, fmt.Errorf("zb-auto: --max-inflight %d: want at least 1", maxInflight)
	}
	if err := cost.check(p); err != nil {
		return nil, err
	}
	limit, stash := float64(maxInflight), cost.stash()
	base := func(acts [][]Action) *Schedule {
		return &Schedule{Name: "zb-auto", Ranks: p, Stages: p, Microbatches: m, Placement: LoopPlacement(p, 1), Actions: acts}
	}
	type cand struct {
		s          *Schedule
		span, step float64
	}
	// One simulation per candidate gives its span, step and memory (SimulateStep; Simulate's
	// breakdown is not needed), and it fails on a schedule Validate would reject.
	eval := func(s *Schedule) (cand, bool) {
		res, err := SimulateStep(s, cost)
		if err != nil || heldPeak(res, stash) > limit+1e-9 {
			return cand{}, false
		}
		return cand{s, res.SpanTime, res.StepTime}, true
	}
	// The hand-written reference at this memory bounds the step time.
	refStep := math.Inf(1)
	var cands []cand
	if m >= p && maxInflight >= p {
		ref := base(genZBH1(p, m, 1))
		if maxInflight >= 2*p-1 {
			if c, ok := eval(base(genZBH1(p, m, 1))); ok {
				cands = append(cands, c)
			}
			ref = base(genZBH2(p, m, 1))
		}
		if c, ok := eval(ref); ok {
			cands, refStep = append(cands, c), c.step
		}
		if c, ok := eval(base(gen1F1B(p, m, 1))); ok {
			cands = append(cands, c)
		}
	}
	within := func(span, step float64) bool { return step <= refStep*(1+1e-12) }
	if acts := zbSearch(p, m, limit, stash, newZBCosts(p, &cost), within); acts != nil {
		if c, ok := eval(base(acts)); ok {
			cands = append(cands, c)
		}
	}
	for _, pref := range []zbPref{{fFirst: false, eagerW: false}, {fFirst: true, eagerW: false}, {fFirst: false, eagerW: true}} {
		if c, ok := eval(base(listSchedule(p, m, cost, maxInflight, pref))); ok {
			cands = append(cands, c)
		}
	}
	var best *cand
	for i := range cands {
		c := &cands[i]
		if !within(c.span, c.step) {
			continue
		}
		if best == nil || c.span < best.span*(1-1e-12) || (c.span <= best.span*(1+1e-12) && c.step < best.step*(1-1e-12)) {
			best = c
		}
	}
	if best == nil {
		return nil, fmt.Errorf("zb-auto: no schedule of %d micro-batches on %d ranks keeps within %d micro-batches in flight", m, p, maxInflight)
	}
	if err := Validate(best.s); err != nil {
		return nil, fmt.Errorf("zb-auto: internal error: the schedule built does not validate: %w", err)
	}
	return best.s, nil
}

// heldPeak is the most activation memory any rank of res holds, in micro-batch activations
// (see heldPeaks).
func heldPeak(res *Result, stash float64) float64 {
	peak := 0.0
	for _, h := range heldPeaks(res, stash) {
		peak = max(peak, h)
	}
	return peak
}

// heldPeaks is, per rank of res, the most activation memory held, in micro-batch
// activations: a micro-batch holds 1 from the start of its F to the end of its I and stash
// from there to the end of its W (1 to the end of a full backward B).
func heldPeaks(res *Result, stash float64) []float64 {
	out := make([]float64, len(res.Events))
	for r, evs := range res.Events {
		held := 0.0
		for _, e := range evs {
			for _, c := range e.Action.Computes() {
				if c.Kind == Forward {
					held++
				}
			}
			out[r] = max(out[r], held)
			for _, c := range e.Action.Computes() {
				switch c.Kind {
				case BackwardInput:
					held -= 1 - stash
				case BackwardWeight:
					held -= stash
				case FullBackward:
					held--
				}
			}
		}
	}
	return out
}

func maxPeak(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

type zbPref struct {
	fFirst bool // a ready forward goes before a ready input gradient
	eagerW bool // a weight gradient runs right after its input gradient
}

// listSchedule plays one pipeline of p single-stage ranks forward in time on cost and
// returns each rank's actions in the order they ran.
func listSchedule(p, m int, cost Cost, limit int, pref zbPref) [][]Action {
	cm := &costModel{c: &cost}
	dur := func(k Kind, s int) float64 { return cm.compute(Act(k, s, 0)) }
	xfer := func(a, b int) float64 { return cm.transfer(min(a, b), 0) }
	inf := math.Inf(1)
	fDone := make([][]float64, p) // when F(s, mb) ends
	iDone := make([][]float64, p)
	for s := range p {
		fDone[s], iDone[s] = make([]float64, m), make([]float64, m)
		for mb := range m {
			fDone[s][mb], iDone[s][mb] = inf, inf
		}
	}
	free := make([]float64, p)
	nextF, nextI, nextW := make([]int, p), make([]int, p), make([]int, p)
	out := make([][]Action, p)
	total := 3 * p * m
	for done := 0; done < total; done++ {
		// Pick, over all ranks, the action that can start earliest (ties: lower rank), so
		// the simulation advances in time order.
		bestR, bestStart, bestKind := -1, inf, Idle
		for s := range p {
			t := free[s]
			fReady, iReady := inf, inf
			if f := nextF[s]; f < m && f-nextW[s] < limit {
				fReady = 0
				if s > 0 {
					fReady = fDone[s-1][f] + xfer(s-1, s)
				}
			}
			if i := nextI[s]; i < nextF[s] {
				iReady = fDone[s][i]
				if s+1 < p {
					iReady = math.Max(iReady, iDone[s+1][i]+xfer(s+1, s))
				}
			}
			wReady := inf
			if nextW[s] < nextI[s] {
				wReady = iDone[s][nextW[s]]
			}
			kind, start := Idle, inf
			// Among the actions ready when the rank is free, the preferred one; else the
			// first to become ready (a deferred W runs only when nothing else is ready).
			ready := func(at float64) bool { return at <= t }
			switch {
			case pref.eagerW && ready(wReady):
				kind, start = BackwardWeight, t
			case pref.fFirst && ready(fReady):
				kind, start = Forward, t
			case ready(iReady):
				kind, start = BackwardInput, t
			case ready(fReady):
				kind, start = Forward, t
			case ready(wReady):
				kind, start = BackwardWeight, t
			default:
				start = math.Min(math.Min(fReady, iReady), wReady)
				switch start {
				case iReady:
					kind = BackwardInput
				case fReady:
					kind = Forward
				default:
					kind = BackwardWeight
				}
			}
			if kind != Idle && start < bestStart {
				bestR, bestStart, bestKind = s, start, kind
			}
		}
		if bestR < 0 {
			break // unreachable with limit ≥ 1: some rank can always proceed
		}
		s := bestR
		var mb int
		switch bestKind {
		case Forward:
			mb = nextF[s]
			nextF[s]++
		case BackwardInput:
			mb = nextI[s]
			nextI[s]++
		default:
			mb = nextW[s]
			nextW[s]++
		}
		end := bestStart + dur(bestKind, s)
		switch bestKind {
		case Forward:
			fDone[s][mb] = end
		case BackwardInput:
			iDone[s][mb] = end
		}
		free[s] = end
		out[s] = append(out[s], Act(bestKind, s, mb))
	}
	return out
}
