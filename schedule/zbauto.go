package schedule

import (
	"fmt"
	"math"
)

// ZBAuto is the cost-aware zero-bubble scheduler (`zb-auto`), in the spirit of the Zero
// Bubble paper's automatic scheduling: with real per-stage F, I and W times (uneven stages,
// W shorter than F) the hand-written ZB-H1 and ZB-H2 layouts leave bubbles, so the schedule is
// built for the costs. A list scheduler plays the pipeline forward in time on the given
// costs: whenever a rank is free it runs, in order of preference, an input gradient whose
// inputs have arrived (it unblocks the previous stage), a forward whose input has arrived
// while fewer than maxInflight micro-batches hold activations on the rank (memory), and
// otherwise a deferred weight gradient (filling what would be a bubble); when nothing is
// ready it waits for the next arrival. It is run for several preferences (forwards before or
// after ready input gradients, weight gradients deferred as long as possible or not), and
// the result is compared, simulated on the same costs, with the hand-written schedules that
// fit the same memory (1F1B and ZB-H1 hold p micro-batches on the first rank, ZB-H2 2p−1):
// the fastest that validates and keeps within maxInflight is returned. So zb-auto is never
// slower than ZB-H1 at p in flight, nor than ZB-H2 at 2p−1, on the costs it is given.
// maxInflight 0 means p.
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
	base := func(acts [][]Action, name string) *Schedule {
		return &Schedule{Name: name, Ranks: p, Stages: p, Microbatches: m, Placement: LoopPlacement(p, 1), Actions: acts}
	}
	var cands []*Schedule
	for _, pref := range []zbPref{{fFirst: false, eagerW: false}, {fFirst: true, eagerW: false}, {fFirst: false, eagerW: true}} {
		cands = append(cands, base(listSchedule(p, m, cost, maxInflight, pref), "zb-auto"))
	}
	if m >= p && maxInflight >= p {
		cands = append(cands, base(genZBH1(p, m, 1), "zb-auto"), base(gen1F1B(p, m, 1), "zb-auto"))
	}
	if m >= p && maxInflight >= 2*p-1 {
		cands = append(cands, base(genZBH2(p, m, 1), "zb-auto"))
	}
	var best *Schedule
	bestTime := math.Inf(1)
	for _, s := range cands {
		if Validate(s) != nil {
			continue
		}
		res, err := Simulate(s, cost)
		if err != nil {
			continue
		}
		if maxPeak(res.PeakActivations) > maxInflight {
			continue
		}
		if best == nil || res.StepTime < bestTime*(1-1e-12) {
			best, bestTime = s, res.StepTime
		}
	}
	if best == nil {
		return nil, fmt.Errorf("zb-auto: no schedule of %d micro-batches on %d ranks keeps within %d micro-batches in flight", m, p, maxInflight)
	}
	return best, nil
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
