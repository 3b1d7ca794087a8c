package cpu

import "fmt"

// Mixture-of-experts kernels (the ops of ir/ops_moe.go): TopK, MoESlots, MoEDispatch,
// MoECombine and MoEWeightsGrad. Every one is a loop in a fixed order — a token's choices in
// order, tokens in order — so results are bitwise reproducible, and the dispatch writes each
// buffer row at most once (slots are distinct), so no sum depends on a schedule.

// Number is the element types TopK orders.
type Number interface {
	~float32 | ~float64 | ~int32 | ~int64
}

// before reports whether a precedes b in TopK's order: larger first (smaller first when
// !largest), NaN before every number (a NaN is "largest", as NumPy and PyTorch sort it), ties
// by index.
func before[T Number](a, b T, ia, ib int, largest bool) bool {
	an, bn := a != a, b != b // NaN, for floats
	switch {
	case an || bn:
		if an && bn {
			return ia < ib
		}
		return an == largest
	case a == b:
		return ia < ib
	case largest:
		return a > b
	}
	return a < b
}

// TopK writes the k first elements of x in TopK's order along the middle dim of
// [outer, n, inner] into values and their indices into indices ([outer, k, inner]).
func TopK[T Number](x []T, outer, n, inner, k int, largest bool, values []T, indices []int64) {
	TopKGrouped(x, outer, n, inner, k, 1, 1, largest, values, indices)
}

// TopKGrouped is TopK limited to groups (DeepSeek-V3's node-limited routing, ir's top_k with
// groups and topk_groups): the n elements of a fibre are `groups` contiguous groups, each
// scored by the float64 sum of its first ⌈k/topkGroups⌉ elements in TopK's order (summed in
// that order); the topkGroups first groups in TopK's order of their scores (ties to the lower
// group) are kept, and the k elements are chosen among theirs. groups = 1 is TopK.
func TopKGrouped[T Number](x []T, outer, n, inner, k, groups, topkGroups int, largest bool, values []T, indices []int64) {
	best := make([]int, 0, k)
	size := n / max(groups, 1)
	scored := (k + topkGroups - 1) / max(topkGroups, 1)
	var inGroup, bestGroups []int
	var score []float64
	kept := make([]bool, groups)
	if groups > 1 {
		inGroup, bestGroups, score = make([]int, 0, scored), make([]int, 0, topkGroups), make([]float64, groups)
	}
	for o := range outer {
		for in := range inner {
			at := func(i int) T { return x[(o*n+i)*inner+in] }
			if groups > 1 {
				for g := range groups {
					inGroup = inGroup[:0]
					for i := g * size; i < (g+1)*size; i++ {
						inGroup = insertBest(inGroup, scored, i, at, largest)
					}
					s := 0.0
					for _, i := range inGroup {
						s += float64(at(i))
					}
					score[g] = s
				}
				bestGroups = bestGroups[:0]
				for g := range groups {
					bestGroups = insertBest(bestGroups, topkGroups, g, func(g int) float64 { return score[g] }, largest)
				}
				clear(kept)
				for _, g := range bestGroups {
					kept[g] = true
				}
			}
			// The kept groups' elements in index order (every element without groups).
			best = best[:0]
			for g := range max(groups, 1) {
				if groups <= 1 || kept[g] {
					for i := g * size; i < (g+1)*size; i++ {
						best = insertBest(best, k, i, at, largest)
					}
				}
			}
			for j, i := range best {
				values[(o*k+j)*inner+in] = at(i)
				indices[(o*k+j)*inner+in] = int64(i)
			}
		}
	}
}

// insertBest inserts i into best, the sorted list (TopK's order of at) of at most k indices
// seen so far, all below i: O(k) per element, and k is small (a router's top-2 or top-8)
// where it matters.
func insertBest[T Number](best []int, k, i int, at func(int) T, largest bool) []int {
	if len(best) == k && !before(at(i), at(best[k-1]), i, best[k-1], largest) {
		return best
	}
	p := len(best)
	if p == k {
		p--
	} else {
		best = append(best, 0)
	}
	for p > 0 && before(at(i), at(best[p-1]), i, best[p-1], largest) {
		best[p] = best[p-1]
		p--
	}
	best[p] = i
	return best
}

// MoESlots places each token's k choices of experts (idx, [tokens, k]) in capacity rows,
// choice-major (every first choice before any second choice), tokens in order: slots[t·k+j]
// is e·capacity + row, or −1 when expert e's rows are full. load[e] counts the choices routed
// to e, the dropped included. An expert outside [0, len(load)) is an error, as is a token
// choosing one expert twice (the dispatch would add it twice to one expert's input).
func MoESlots(idx []int64, k, capacity int, slots, load []int64) error {
	experts := len(load)
	clear(load)
	tokens := len(idx) / max(k, 1)
	for t := range tokens {
		for j := range k {
			e := idx[t*k+j]
			if e < 0 || e >= int64(experts) {
				return fmt.Errorf("moe_slots: token %d's choice %d is expert %d, outside [0, %d)", t, j, e, experts)
			}
			for i := range j {
				if idx[t*k+i] == e {
					return fmt.Errorf("moe_slots: token %d chooses expert %d twice (choices %d and %d)", t, e, i, j)
				}
			}
		}
	}
	for j := range k {
		for t := range tokens {
			e := idx[t*k+j]
			slots[t*k+j] = -1
			if load[e] < int64(capacity) {
				slots[t*k+j] = e*int64(capacity) + load[e]
			}
			load[e]++
		}
	}
	return nil
}

// checkSlots reports a slot outside [−1, rows).
func checkSlots(op string, slots []int64, rows int) error {
	for p, s := range slots {
		if s < -1 || s >= int64(rows) {
			return fmt.Errorf("%s: slots[%d] = %d outside [−1, %d) (−1 is a dropped choice)", op, p, s, rows)
		}
	}
	return nil
}

// MoEDispatch fills buf ([rows, d], zeroed here) with the tokens of x ([tokens, d]): row
// slots[t·k+j] gets x[t], times w[t·k+j] when w is not nil.
func MoEDispatch[T float32 | float64](x []T, slots []int64, w []T, k, d int, buf []T) error {
	if err := checkSlots("moe_dispatch", slots, len(buf)/max(d, 1)); err != nil {
		return err
	}
	clear(buf)
	seen := make([]bool, len(buf)/max(d, 1))
	for p, s := range slots {
		if s < 0 {
			continue
		}
		if seen[s] {
			return fmt.Errorf("moe_dispatch: slots[%d] = %d is a row another choice already fills", p, s)
		}
		seen[s] = true
		src, dst := x[p/k*d:][:d], buf[int(s)*d:][:d]
		if w == nil {
			copy(dst, src)
			continue
		}
		for c, v := range src {
			dst[c] = v * w[p]
		}
	}
	return nil
}

// MoECombine writes out[t] = Σ_j w[t·k+j]·y[slots[t·k+j]] (y [rows, d], out [tokens, d]; w
// nil means weights of 1), j in order, skipping dropped choices.
func MoECombine[T float32 | float64](y []T, slots []int64, w []T, k, d int, out []T) error {
	if err := checkSlots("moe_combine", slots, len(y)/max(d, 1)); err != nil {
		return err
	}
	clear(out)
	for p, s := range slots {
		if s < 0 {
			continue
		}
		src, dst := y[int(s)*d:][:d], out[p/k*d:][:d]
		if w == nil {
			for c, v := range src {
				dst[c] += v
			}
			continue
		}
		for c, v := range src {
			dst[c] += w[p] * v
		}
	}
	return nil
}

// MoEWeightsGrad writes g[t·k+j] = a[t]·b[slots[t·k+j]] (a [tokens, d], b [rows, d]), 0 for
// a dropped choice, each dot product summed in order.
func MoEWeightsGrad[T float32 | float64](a, b []T, slots []int64, k, d int, g []T) error {
	if err := checkSlots("moe_weights_grad", slots, len(b)/max(d, 1)); err != nil {
		return err
	}
	for p, s := range slots {
		if s < 0 {
			g[p] = 0
			continue
		}
		var acc T
		for c, v := range a[p/k*d:][:d] {
			acc += v * b[int(s)*d+c]
		}
		g[p] = acc
	}
	return nil
}
