package schedule

import (
	"fmt"
	"strings"
)

// A generator builds one schedule family. Generators are listed in one
// ordered table; Names and Generate read it.
type generator struct {
	name string
	// virtual is the required number of stages per rank (0: any, default 2).
	virtual int
	// minMicrobatches returns the smallest valid micro-batch count and an
	// extra condition on m, if any, as an error message.
	check func(p, m, v int) error
	gen   func(p, m, v int) [][]Action
	place func(p, v int) []int
}

var generators = []generator{
	{name: "gpipe", virtual: 1, check: atLeast(1), gen: genGPipe, place: LoopPlacement},
	{name: "1f1b", virtual: 1, check: atLeastRanks(1), gen: gen1F1B, place: LoopPlacement},
	{name: "interleaved-1f1b", virtual: 0, check: checkInterleaved, gen: genInterleaved, place: LoopPlacement},
	{name: "zb-h1", virtual: 1, check: atLeastRanks(1), gen: genZBH1, place: LoopPlacement},
	{name: "zb-h2", virtual: 1, check: atLeastRanks(1), gen: genZBH2, place: LoopPlacement},
	{name: "zbv", virtual: 2, check: atLeast(1), gen: genZBV, place: vPlace},
	{name: "dualpipev", virtual: 2, check: atLeastRanks(2), gen: genDualPipeV, place: vPlace},
	{name: "zb-auto", virtual: 1, check: atLeast(1), gen: genZBAuto, place: LoopPlacement},
}

// genZBAuto is zb-auto on unit costs with p micro-batches in flight (see ZBAuto; GenerateFor
// builds it for real costs and another memory limit).
func genZBAuto(p, m, _ int) [][]Action {
	s, err := ZBAuto(p, m, UnitCost(), p)
	if err != nil {
		return genGPipe(p, m, 1) // unreachable: the list scheduler always completes
	}
	return s.Actions
}

// GenerateFor is Generate with the stage costs and the memory limit (micro-batches in flight
// per rank, 0: the schedule's own) that a cost-aware schedule (zb-auto) is built for; the
// hand-written schedules take neither. zb-h1 and zb-h2 stay the Zero Bubble paper's
// hand-written layouts whatever the costs, so that they reproduce its ZB-H1 and ZB-H2
// columns; the schedule built for the costs at ZB-H2's memory is zb-auto with maxInflight
// 2p−1, never worse than the layout.
func GenerateFor(name string, ranks, microbatches, virtual int, cost Cost, maxInflight int) (*Schedule, error) {
	if !strings.EqualFold(name, "zb-auto") {
		if maxInflight != 0 {
			return nil, fmt.Errorf("--max-inflight applies to zb-auto, whose layout it bounds; %s has its own", name)
		}
		return Generate(name, ranks, microbatches, virtual)
	}
	if virtual > 1 {
		return nil, fmt.Errorf("zb-auto places one stage per rank, --virtual-stages is %d", virtual)
	}
	return ZBAuto(ranks, microbatches, cost, maxInflight)
}

// CostAware reports whether the named schedule is built for the stage costs (zb-auto).
func CostAware(name string) bool {
	return strings.EqualFold(name, "zb-auto")
}

func vPlace(p, _ int) []int { return VPlacement(p) }

func atLeast(n int) func(p, m, v int) error {
	return func(p, m, v int) error {
		if m < n {
			return fmt.Errorf("needs at least %d micro-batches, got %d", n, m)
		}
		return nil
	}
}

// atLeastRanks requires k micro-batches per rank.
func atLeastRanks(k int) func(p, m, v int) error {
	return func(p, m, v int) error {
		if m < k*p {
			return fmt.Errorf("needs at least %d micro-batches with %d ranks (%d per rank), got %d", k*p, p, k, m)
		}
		return nil
	}
}

func checkInterleaved(p, m, v int) error {
	if m < p || m%p != 0 {
		return fmt.Errorf("needs the micro-batch count to be a positive multiple of the rank count %d (minimum %d), got %d", p, p, m)
	}
	return nil
}

// Names returns the generator names in Generate's order.
func Names() []string {
	out := make([]string, len(generators))
	for i, g := range generators {
		out[i] = g.name
	}
	return out
}

// Generate builds the named schedule for the given number of ranks and
// micro-batches. virtual is the number of stages per rank; 0 picks the
// schedule's default (1 for the single-stage schedules, 2 for
// interleaved-1f1b, zbv and dualpipev).
//
// Requirements: gpipe m ≥ 1; 1f1b, zb-h1, zb-h2 m ≥ p; interleaved-1f1b
// m a multiple of p (Megatron's classic form), any v ≥ 1 (v = 1 gives the
// 1F1B order); zbv m ≥ 1 (v = 2); dualpipev m ≥ 2p (v = 2). zb-h2 and zbv
// are valid for fewer micro-batches but reach their zero-bubble shape only
// from m = 2p−1 on. Errors name the schedule, the rule and the minimum.
func Generate(name string, ranks, microbatches, virtual int) (*Schedule, error) {
	var g *generator
	for i := range generators {
		if strings.EqualFold(generators[i].name, name) {
			g = &generators[i]
		}
	}
	if g == nil {
		return nil, fmt.Errorf("unknown schedule %q (valid: %s)", name, strings.Join(Names(), ", "))
	}
	p, m, v := ranks, microbatches, virtual
	switch {
	case p < 1:
		return nil, fmt.Errorf("%s: ranks must be at least 1, got %d", g.name, p)
	case p > MaxRanks:
		return nil, fmt.Errorf("%s: %d ranks is more than the limit %d", g.name, p, MaxRanks)
	case m < 1:
		return nil, fmt.Errorf("%s: micro-batches must be at least 1, got %d", g.name, m)
	case m > MaxMicrobatches:
		return nil, fmt.Errorf("%s: %d micro-batches is more than the limit %d", g.name, m, MaxMicrobatches)
	case v < 0:
		return nil, fmt.Errorf("%s: virtual stages per rank must be at least 1, got %d", g.name, v)
	}
	if v == 0 {
		v = g.virtual
		if v == 0 {
			v = 2
		}
	}
	if g.virtual != 0 && v != g.virtual {
		return nil, fmt.Errorf("%s: supports exactly %d stage(s) per rank (virtual=%d), got virtual=%d", g.name, g.virtual, g.virtual, v)
	}
	if p*v > MaxStages {
		return nil, fmt.Errorf("%s: %d ranks × %d virtual stages is more than the limit of %d stages", g.name, p, v, MaxStages)
	}
	if n := 3 * p * v * m; n > MaxActions {
		return nil, fmt.Errorf("%s: %d ranks × %d virtual stages × %d micro-batches is too large (more than %d actions)", g.name, p, v, m, MaxActions)
	}
	if err := g.check(p, m, v); err != nil {
		return nil, fmt.Errorf("%s with %d ranks: %v", g.name, p, err)
	}
	s := &Schedule{Name: g.name, Ranks: p, Stages: p * v, Microbatches: m, Placement: g.place(p, v), Actions: g.gen(p, m, v)}
	return s, nil
}

func fwd(st, mb int) Action  { return Act(Forward, st, mb) }
func bwd(st, mb int) Action  { return Act(FullBackward, st, mb) }
func bwdI(st, mb int) Action { return Act(BackwardInput, st, mb) }
func bwdW(st, mb int) Action { return Act(BackwardWeight, st, mb) }

// genGPipe: all forwards, then all backwards (full B), on every rank.
func genGPipe(p, m, _ int) [][]Action {
	out := make([][]Action, p)
	for r := range p {
		acts := make([]Action, 0, 2*m)
		for mb := range m {
			acts = append(acts, fwd(r, mb))
		}
		for mb := range m {
			acts = append(acts, bwd(r, mb))
		}
		out[r] = acts
	}
	return out
}

// gen1F1B: rank r runs p−r−1 warm-up forwards, then alternates one forward
// and one full backward, then drains the remaining backwards.
func gen1F1B(p, m, _ int) [][]Action {
	out := make([][]Action, p)
	for r := range p {
		w := min(p-r-1, m)
		acts := make([]Action, 0, 2*m)
		for mb := range w {
			acts = append(acts, fwd(r, mb))
		}
		for i := 0; w+i < m; i++ {
			acts = append(acts, fwd(r, w+i), bwd(r, i))
		}
		for mb := m - w; mb < m; mb++ {
			acts = append(acts, bwd(r, mb))
		}
		out[r] = acts
	}
	return out
}

// genInterleaved is Megatron-LM's interleaved 1F1B: rank r owns stages
// r, r+p, ..., r+(v−1)p. Its k-th forward is micro-batch
// (k div pv)·p + k mod p of local chunk (k div p) mod v; its k-th backward
// the same micro-batch of chunk v−1−(k div p) mod v. Warm-up is
// 2(p−r−1) + (v−1)p forwards (capped at mv), then 1F1B, then the drain.
func genInterleaved(p, m, v int) [][]Action {
	if v == 1 {
		return gen1F1B(p, m, 1)
	}
	total := m * v
	out := make([][]Action, p)
	for r := range p {
		at := func(k int, backward bool) (int, int) {
			chunk := (k / p) % v
			if backward {
				chunk = v - 1 - chunk
			}
			return chunk*p + r, (k/(p*v))*p + k%p
		}
		w := min(2*(p-r-1)+(v-1)*p, total)
		acts := make([]Action, 0, 2*total)
		for k := range w {
			acts = append(acts, fwd(at(k, false)))
		}
		for i := 0; w+i < total; i++ {
			acts = append(acts, fwd(at(w+i, false)), bwd(at(i, true)))
		}
		for k := total - w; k < total; k++ {
			acts = append(acts, bwd(at(k, true)))
		}
		out[r] = acts
	}
	return out
}

// genZBH1 is the Zero Bubble paper's ZB-H1: rank r warms up with p−r
// forwards like 1F1B, then repeats I, W, F, but defers its first W by r
// iterations, so every rank holds p micro-batches in flight and the W passes
// fill the drain.
func genZBH1(p, m, _ int) [][]Action {
	return genZB(p, m, func(r int) (int, int) { return p - r, r })
}

// genZBH2 is ZB-H2: rank r warms up with 2(p−r)−1 forwards and defers its
// first W by 2r iterations (2p−1 micro-batches in flight on every rank), so
// the warm-up bubble is filled too.
func genZBH2(p, m, _ int) [][]Action {
	return genZB(p, m, func(r int) (int, int) { return 2*(p-r) - 1, 2 * r })
}

func genZB(p, m int, shape func(r int) (warmup, deferW int)) [][]Action {
	out := make([][]Action, p)
	for r := range p {
		w, d := shape(r)
		w = min(w, m)
		acts := make([]Action, 0, 3*m)
		for mb := range w {
			acts = append(acts, fwd(r, mb))
		}
		nextF, nextW := w, 0
		for k := range m {
			acts = append(acts, bwdI(r, k))
			if k >= d {
				acts = append(acts, bwdW(r, nextW))
				nextW++
			}
			if nextF < m {
				acts = append(acts, fwd(r, nextF))
				nextF++
			}
		}
		for ; nextW < m; nextW++ {
			acts = append(acts, bwdW(r, nextW))
		}
		out[r] = acts
	}
	return out
}

// genZBV is the Zero Bubble paper's ZB-V (as PyTorch's ScheduleZBVZeroBubble
// builds it) on the V placement: rank r holds chunk 0 = stage r and chunk 1 =
// stage 2p−1−r. With fewer than 2p−1 micro-batches it is built for 2p−1 and
// the actions of the missing micro-batches are dropped.
func genZBV(p, m, _ int) [][]Action {
	n := max(2*p-1, m)
	out := make([][]Action, p)
	for r := range p {
		c0, c1 := r, 2*p-1-r
		var acts []Action
		f0, f1, b0, b1 := 0, 0, 0, 0
		for range 2*(p-r) - 1 {
			acts = append(acts, fwd(c0, f0))
			f0++
		}
		for range r {
			acts = append(acts, fwd(c1, f1), fwd(c0, f0))
			f1++
			f0++
		}
		for range p - r {
			acts = append(acts, fwd(c1, f1), bwdI(c1, b1), bwdW(c1, b1))
			f1++
			b1++
		}
		for f1 < f0 || f0 < n {
			if f0 < n {
				acts = append(acts, fwd(c0, f0))
				f0++
			}
			acts = append(acts, bwdI(c0, b0), bwdW(c0, b0), fwd(c1, f1), bwdI(c1, b1), bwdW(c1, b1))
			b0++
			f1++
			b1++
		}
		w0, w1 := b0, b1
		for range r {
			acts = append(acts, bwdI(c0, b0), bwdI(c1, b1))
			b0++
			b1++
		}
		for range p - r {
			acts = append(acts, bwdI(c0, b0), bwdW(c0, w0))
			b0++
			w0++
		}
		for ; w1 < b1; w1++ {
			acts = append(acts, bwdW(c1, w1))
		}
		for ; w0 < b0; w0++ {
			acts = append(acts, bwdW(c0, w0))
		}
		kept := acts[:0]
		for _, a := range acts {
			if a.Microbatch < m {
				kept = append(kept, a)
			}
		}
		out[r] = kept
	}
	return out
}

// genDualPipeV is DeepSeek's DualPipeV ("cut-in-half" DualPipe) on the V
// placement, in the eight steps of DualPipe's dualpipev.py: F0 warm-up, F0F1,
// I1-W-F1 (zero bubble), the main loop of overlapped (F0;B1) and (F1;B0)
// pairs, B1-(F1;B0), B1B0 switching to split backward halfway, W-B0, and the
// remaining W. Rank r holds chunk 0 = stage r and chunk 1 = stage 2p−1−r.
func genDualPipeV(p, m, _ int) [][]Action {
	out := make([][]Action, p)
	for r := range p {
		c0, c1 := r, 2*p-1-r
		var acts []Action
		fcnt := map[int]int{}
		bcnt := map[int]int{}
		var wq []Action
		nextF := func(st int) Action {
			a := fwd(st, fcnt[st])
			fcnt[st]++
			return a
		}
		nextB := func(st int, split bool) Action {
			mb := bcnt[st]
			bcnt[st]++
			if split {
				wq = append(wq, bwdW(st, mb))
				return bwdI(st, mb)
			}
			return bwd(st, mb)
		}
		popW := func() {
			if len(wq) > 0 {
				acts = append(acts, wq[0])
				wq = wq[1:]
			}
		}
		overlap := func(fst, bst int) {
			f := nextF(fst)
			acts = append(acts, Overlap(f, nextB(bst, false)))
		}
		for range 2 * (p - r - 1) { // step 1: nF0
			acts = append(acts, nextF(c0))
		}
		for range r + 1 { // step 2: nF0F1
			acts = append(acts, nextF(c0), nextF(c1))
		}
		for range p - r - 1 { // step 3: nI1W1F1
			acts = append(acts, nextB(c1, true))
			popW()
			acts = append(acts, nextF(c1))
		}
		for i := range m - 2*p + r + 1 { // step 4: n(F0;B1)(F1;B0)
			if i == 0 && r == p-1 {
				// the turn of the V: run F0 and B1 apart to shrink the bubble
				acts = append(acts, nextF(c0), nextB(c1, false))
			} else {
				overlap(c0, c1)
			}
			overlap(c1, c0)
		}
		for range p - r - 1 { // step 5: nB1(F1;B0)
			acts = append(acts, nextB(c1, false))
			overlap(c1, c0)
		}
		split := false
		for i := range r + 1 { // step 6: nB1B0, second half split
			if i == (r+1)/2 && r%2 == 1 {
				split = true
			}
			acts = append(acts, nextB(c1, split))
			if i == (r+1)/2 && r%2 == 0 {
				split = true
			}
			acts = append(acts, nextB(c0, split))
		}
		for range p - r - 1 { // step 7: nWB0
			popW()
			acts = append(acts, nextB(c0, split))
		}
		for range r + 1 { // step 8: nW
			popW()
		}
		for len(wq) > 0 {
			popW()
		}
		out[r] = acts
	}
	return out
}
