package schedule

import (
	"fmt"
	"math"
	"sort"
)

// SliceCost is the time of one token slice on the bottleneck stage, forward plus backward:
// b sequences (the micro-batch size), l tokens, after c tokens of context.
type SliceCost func(b, l, c int) float64

// TokenPlanOptions constrain PlanTokenSlices and BestUniform.
type TokenPlanOptions struct {
	// Granularity: slice lengths are multiples of it, except the last slice, which takes the
	// remainder. 0 chooses one: the largest power of two that leaves at most 64 positions to
	// cut at (1 for sequences up to 64 tokens, 32 for 2048), as TeraPipe's own planner steps
	// by 8 tokens.
	Granularity int
	// Microbatches fixes m (it must divide the batch); 0 chooses m jointly with the slicing
	// among the divisors of the batch (TeraPipe's combined batch and token dimension, with
	// equal micro-batches, as ppc runs them).
	Microbatches int
	// MaxSlices bounds the slice count (0: none).
	MaxSlices int
}

// TokenPlan is one way to cut a pipeline's batch: m micro-batches of Batch/m sequences,
// each sequence in slices of Lengths, and TeraPipe's pipeline latency for it,
// m·Σtᵢ + (K−1)·max tⱼ over the slices' times tᵢ = t(b, lᵢ, Σ_{j<i} lⱼ).
type TokenPlan struct {
	Microbatches int
	Lengths      []int
	Latency      float64
	SliceTimes   []float64
}

// EvalTokenPlan is the latency of the given slicing with m micro-batches of batch/m sequences
// on a pipeline of the given number of stages.
func EvalTokenPlan(lengths []int, batch, microbatches, stages int, cost SliceCost) TokenPlan {
	p := TokenPlan{Microbatches: microbatches, Lengths: append([]int(nil), lengths...)}
	b := batch / max(microbatches, 1)
	sum, worst, c := 0.0, 0.0, 0
	for _, l := range lengths {
		t := cost(b, l, c)
		p.SliceTimes = append(p.SliceTimes, t)
		sum += t
		worst = max(worst, t)
		c += l
	}
	p.Latency = float64(microbatches)*sum + float64(stages-1)*worst
	return p
}

// UniformSlices cuts seq tokens into n slices as equal as possible, the longer ones first
// (10 into 4: 3, 3, 2, 2).
func UniformSlices(seq, n int) ([]int, error) {
	if n < 1 || n > seq {
		return nil, fmt.Errorf("%d slices of %d tokens: want 1 to %d", n, seq, seq)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = seq / n
		if i < seq%n {
			out[i]++
		}
	}
	return out, nil
}

func checkPlanArgs(seq, batch, stages int, opts TokenPlanOptions) error {
	switch {
	case seq < 1:
		return fmt.Errorf("token slicing: sequence length %d", seq)
	case batch < 1:
		return fmt.Errorf("token slicing: batch of %d sequences", batch)
	case stages < 1:
		return fmt.Errorf("token slicing: %d pipeline stages", stages)
	case opts.Microbatches < 0 || opts.Microbatches > 0 && batch%opts.Microbatches != 0:
		return fmt.Errorf("token slicing: %d micro-batches do not divide a batch of %d sequences", opts.Microbatches, batch)
	case opts.Granularity < 0 || opts.MaxSlices < 0:
		return fmt.Errorf("token slicing: negative granularity or slice limit")
	}
	return nil
}

// microbatchChoices are the micro-batch counts to try: the fixed one, or every divisor of batch.
func microbatchChoices(batch int, opts TokenPlanOptions) []int {
	if opts.Microbatches > 0 {
		return []int{opts.Microbatches}
	}
	var ms []int
	for m := 1; m <= batch; m++ {
		if batch%m == 0 {
			ms = append(ms, m)
		}
	}
	return ms
}

func granularity(seq int, opts TokenPlanOptions) int {
	if opts.Granularity > 0 {
		return min(opts.Granularity, seq)
	}
	g := 1
	for seq/(2*g) >= 64 {
		g *= 2
	}
	return g
}

// costGrid memoises the slice times one micro-batch size needs: the DP reads t(l, c) for
// every slice end and length on the granularity grid many times (once per candidate t_max).
type costGrid struct {
	n   int       // positions: slice ends at multiples of g, and seq
	pos []int     // token offset of position i (pos[n] = seq)
	t   []float64 // t[i*(n+1)+j]: the slice from pos[i] to pos[j]
}

func newCostGrid(seq, g, b int, cost SliceCost) (*costGrid, error) {
	var pos []int
	for p := 0; p < seq; p += g {
		pos = append(pos, p)
	}
	pos = append(pos, seq)
	n := len(pos) - 1
	cg := &costGrid{n: n, pos: pos, t: make([]float64, (n+1)*(n+1))}
	for i := 0; i < n; i++ {
		for j := i + 1; j <= n; j++ {
			v := cost(b, pos[j]-pos[i], pos[i])
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return nil, fmt.Errorf("token slicing: the slice cost of %d sequences, %d tokens after %d is %v", b, pos[j]-pos[i], pos[i], v)
			}
			cg.t[i*(n+1)+j] = v
		}
	}
	return cg, nil
}

func (cg *costGrid) at(i, j int) float64 { return cg.t[i*(cg.n+1)+j] }

// PlanTokenSlices is TeraPipe's dynamic program. For each candidate bound t_max on a slice's
// time (the distinct slice times, smallest first), S(j) = min over i<j with t(i→j) ≤ t_max of
// S(i) + t(i→j) is the least total time of slices covering the first j positions; the
// latency is then m·S(n) + (K−1)·t_max (an upper bound that is exact at the optimum, whose
// longest slice is the bound), minimised over t_max — and over m, the micro-batch count,
// when it is not fixed. Candidates stop once (m+K−1)·t_max cannot beat the best found (every
// plan costs at least that much). Ties go to fewer slices.
func PlanTokenSlices(seq, batch, stages int, cost SliceCost, opts TokenPlanOptions) (TokenPlan, error) {
	if err := checkPlanArgs(seq, batch, stages, opts); err != nil {
		return TokenPlan{}, err
	}
	g := granularity(seq, opts)
	best := TokenPlan{Latency: math.Inf(1)}
	for _, m := range microbatchChoices(batch, opts) {
		cg, err := newCostGrid(seq, g, batch/m, cost)
		if err != nil {
			return TokenPlan{}, err
		}
		n := cg.n
		cands := make([]float64, 0, n*(n+1)/2)
		for i := 0; i < n; i++ {
			for j := i + 1; j <= n; j++ {
				cands = append(cands, cg.at(i, j))
			}
		}
		sort.Float64s(cands)
		S := make([]float64, n+1)
		cnt := make([]int, n+1)
		from := make([]int, n+1)
		last := math.NaN()
		for _, tmax := range cands {
			if tmax == last {
				continue
			}
			last = tmax
			if float64(m+stages-1)*tmax >= best.Latency {
				break
			}
			for j := 1; j <= n; j++ {
				S[j], cnt[j], from[j] = math.Inf(1), 0, -1
				for i := 0; i < j; i++ {
					t := cg.at(i, j)
					if t > tmax || math.IsInf(S[i], 1) {
						continue
					}
					if v := S[i] + t; v < S[j] || v == S[j] && cnt[i]+1 < cnt[j] {
						S[j], cnt[j], from[j] = v, cnt[i]+1, i
					}
				}
				if opts.MaxSlices > 0 && cnt[j] > opts.MaxSlices {
					S[j] = math.Inf(1)
				}
			}
			if math.IsInf(S[n], 1) {
				continue
			}
			var lengths []int
			for j := n; j > 0; j = from[j] {
				lengths = append([]int{cg.pos[j] - cg.pos[from[j]]}, lengths...)
			}
			p := EvalTokenPlan(lengths, batch, m, stages, cost)
			if p.Latency < best.Latency || p.Latency == best.Latency && len(p.Lengths) < len(best.Lengths) {
				best = p
			}
		}
	}
	if best.Lengths == nil {
		return TokenPlan{}, fmt.Errorf("token slicing: no slicing of %d tokens within %d slices", seq, opts.MaxSlices)
	}
	return best, nil
}

// BestUniform is the best slicing into near-equal slices (UniformSlices), n from 1 up (to
// MaxSlices, and in steps that keep slices at least Granularity long), with the same rule for
// the micro-batch count as PlanTokenSlices.
func BestUniform(seq, batch, stages int, cost SliceCost, opts TokenPlanOptions) (TokenPlan, error) {
	if err := checkPlanArgs(seq, batch, stages, opts); err != nil {
		return TokenPlan{}, err
	}
	g := granularity(seq, opts)
	best := TokenPlan{Latency: math.Inf(1)}
	for _, m := range microbatchChoices(batch, opts) {
		for n := 1; n*g <= seq && (opts.MaxSlices == 0 || n <= opts.MaxSlices); n++ {
			lengths, _ := UniformSlices(seq, n)
			p := EvalTokenPlan(lengths, batch, m, stages, cost)
			if math.IsNaN(p.Latency) || p.Latency < 0 {
				return TokenPlan{}, fmt.Errorf("token slicing: the slice cost is %v", p.Latency)
			}
			if p.Latency < best.Latency {
				best = p
			}
		}
	}
	return best, nil
}
