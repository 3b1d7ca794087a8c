package cpu

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// TestTopK compares top_k with a stable sort of each fibre, in every dtype it runs in (bf16
// through the widened f32 kernel), with ties (the lower index first) and NaN (largest).
func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 16 {
		shape := randShape(r, 1+r.IntN(3), 1, 6)
		axis := r.IntN(len(shape))
		n := shape[axis]
		kk := 1 + r.IntN(n)
		largest := i%3 != 0
		vals := make([]float64, prod(shape))
		for j := range vals {
			vals[j] = float64(r.IntN(5)) // many ties
		}
		if i%4 == 1 {
			vals[r.IntN(len(vals))] = math.NaN()
		}
		for _, d := range []ir.DType{ir.F64, ir.F32, ir.BF16, ir.I64, ir.I32} {
			if d.IsInt() && slices.ContainsFunc(vals, math.IsNaN) {
				continue
			}
			out := runOp(t, "top_k", attrs("k", kk, "axis", axis-len(shape)*(i%2), "largest", largest), tensorOf(d, shape, vals))
			gotV, gotI := values(out[0]), values(out[1])
			outer, inner := prod(shape[:axis]), prod(shape[axis+1:])
			for o := range outer {
				for e := range inner {
					at := func(j int) float64 { return vals[(o*n+j)*inner+e] }
					order := make([]int, n)
					for j := range order {
						order[j] = j
					}
					key := func(j int) float64 {
						v := at(j)
						if math.IsNaN(v) {
							v = math.Inf(1)
						}
						if !largest {
							v = -v
						}
						return v
					}
					slices.SortStableFunc(order, func(a, b int) int {
						switch ka, kb := key(a), key(b); {
						case ka > kb:
							return -1
						case ka < kb:
							return 1
						}
						return 0
					})
					for j := range kk {
						p := (o*kk+j)*inner + e
						want := at(order[j])
						if gotI[p] != float64(order[j]) || !(gotV[p] == want || math.IsNaN(want) && math.IsNaN(gotV[p])) {
							t.Fatalf("%s %v axis %d k %d largest %v: element %d is %v at %v, want %v at %d", d, shape, axis, kk, largest, p, gotV[p], gotI[p], want, order[j])
						}
					}
				}
			}
		}
	}
}

// TestMoEDispatchCombine: with capacity enough for every choice, combine(dispatch(x)) with
// weights w is Σ_j w[t,j]·x[t]; every buffer row is a token or 0; and moe_weights_grad is the
// derivative of Σ dout·combine(y, w) in w (exactly: the combine is linear in w).
func TestMoEDispatchCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const tokens, kk, experts, d = 7, 3, 5, 4
	idx := make([]int64, tokens*kk)
	for tk := range tokens {
		for j, e := range r.Perm(experts)[:kk] {
			idx[tk*kk+j] = int64(e)
		}
	}
	for _, capacity := range []int{tokens, 2} {
		sl := runOp(t, "moe_slots", attrs("experts", experts, "capacity", capacity), i64T([]int{tokens, kk}, idx...))
		slots, load := sl[0].I64(), sl[1].I64()
		var routed int64
		for _, l := range load {
			routed += l
		}
		if routed != tokens*kk {
			t.Fatalf("load %v sums to %d, want %d", load, routed, tokens*kk)
		}
		for _, dt := range floatTypes {
			xv, wv := randVals(r, tokens*d, -1, 1), randVals(r, tokens*kk, 0, 1)
			x, w := tensorOf(dt, []int{tokens, d}, xv), tensorOf(dt, []int{tokens, kk}, wv)
			xv, wv = values(x), values(w) // as rounded to dt
			buf := runOp(t, "moe_dispatch", attrs("experts", experts, "capacity", capacity), x, sl[0])[0]
			bv := values(buf)
			for row := range experts * capacity {
				p := slices.Index(slots, int64(row))
				for c := range d {
					want := 0.0
					if p >= 0 {
						want = xv[p/kk*d+c]
					}
					if bv[row*d+c] != want {
						t.Fatalf("capacity %d: buffer row %d = %v, want token %d's", capacity, row, bv[row*d:row*d+d], p/kk)
					}
				}
			}
			out := values(runOp(t, "moe_combine", nil, buf, sl[0], w)[0])
			for tk := range tokens {
				for c := range d {
					want := 0.0
					for j := range kk {
						if slots[tk*kk+j] >= 0 {
							want += wv[tk*kk+j] * xv[tk*d+c]
						}
					}
					if math.Abs(out[tk*d+c]-want) > 1e-6 {
						t.Fatalf("capacity %d %s: combine[%d,%d] = %v, want %v", capacity, dt, tk, c, out[tk*d+c], want)
					}
				}
			}
			// d/dw of Σ dout·combine(y, w): perturb each weight by 1 (exact for a linear map).
			yv, dout := randVals(r, experts*capacity*d, -1, 1), randVals(r, tokens*d, -1, 1)
			y := tensorOf(dt, []int{experts, capacity, d}, yv)
			g := values(runOp(t, "moe_weights_grad", nil, tensorOf(dt, []int{tokens, d}, dout), y, sl[0])[0])
			base := dot(dout, values(runOp(t, "moe_combine", nil, y, sl[0], w)[0]))
			for p := range wv {
				w2 := slices.Clone(wv)
				w2[p]++
				want := dot(dout, values(runOp(t, "moe_combine", nil, y, sl[0], tensorOf(dt, []int{tokens, kk}, w2))[0])) - base
				if math.Abs(g[p]-want) > 1e-5 {
					t.Fatalf("capacity %d %s: moe_weights_grad[%d] = %v, want %v", capacity, dt, p, g[p], want)
				}
			}
		}
	}
}

// TestMoEErrors: routing data a kernel cannot place is an error naming the op and the
// element, never an index out of range.
func TestMoEErrors(t *testing.T) {
	for _, c := range []struct {
		op   string
		as   ir.Attrs
		in   []device.Tensor
		want string
	}{
		{"moe_slots", attrs("experts", 3, "capacity", 2), []device.Tensor{i64T([]int{2, 2}, 0, 1, 3, 0)}, "expert 3, outside [0, 3)"},
		{"moe_slots", attrs("experts", 3, "capacity", 2), []device.Tensor{i64T([]int{2, 2}, 0, 1, 2, 2)}, "chooses expert 2 twice"},
		{"moe_dispatch", attrs("experts", 2, "capacity", 1), []device.Tensor{f64T([]int{2, 1}, []float64{1, 2}), i64T([]int{2, 1}, 0, 2)}, "slots[1] = 2 outside [−1, 2)"},
		{"moe_dispatch", attrs("experts", 2, "capacity", 1), []device.Tensor{f64T([]int{2, 1}, []float64{1, 2}), i64T([]int{2, 1}, 1, 1)}, "another choice already fills"},
		{"moe_combine", nil, []device.Tensor{f64T([]int{1, 1, 1}, []float64{1}), i64T([]int{1, 1}, -2)}, "slots[0] = -2"},
	} {
		_, err := runOpErr(c.op, c.as, c.in...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.op, err, c.want)
		}
	}
}

// TestTopKGroups checks top_k limited to groups (DeepSeek-V3's node-limited routing) against
// a reference built from stable sorts — each group's ⌈k/M⌉ best summed, the groups sorted by
// those sums, the k best of the M first groups' elements — in every dtype, with ties, and on
// a hand-worked case where the limit changes the choice: 8 scores in 4 groups of 2, k = 3,
// M = 2: the group sums of their 2 best are 1.0, 1.3, 0.8, 0.6, so groups 1 and 0 are kept
// and the choice is 0, 2, 3, where plain top_k picks 0, 4, 2.
func TestTopKGroups(t *testing.T) {
	hand := []float64{0.9, 0.1, 0.7, 0.6, 0.8, 0, 0.3, 0.3}
	out := runOp(t, "top_k", attrs("k", 3, "groups", 4, "topk_groups", 2), tensorOf(ir.F64, []int{1, 8}, hand))
	if got := values(out[1]); !slices.Equal(got, []float64{0, 2, 3}) {
		t.Fatalf("hand case: indices %v, want [0 2 3]", got)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 24 {
		groups := 1 + r.IntN(4)
		size := 1 + r.IntN(4)
		m := 1 + r.IntN(groups)
		kk := 1 + r.IntN(m*size)
		largest := i%3 != 0
		n := groups * size
		shape := []int{1 + r.IntN(3), n, 1 + r.IntN(2)}
		vals := make([]float64, prod(shape))
		for j := range vals {
			vals[j] = float64(r.IntN(6)) / 4 // ties, exact in every dtype
		}
		for _, d := range []ir.DType{ir.F64, ir.F32, ir.BF16, ir.I64, ir.I32} {
			in := vals
			if d.IsInt() {
				in = slices.Clone(vals)
				for j := range in {
					in[j] *= 4
				}
			}
			out := runOp(t, "top_k", attrs("k", kk, "axis", 1, "largest", largest, "groups", groups, "topk_groups", m), tensorOf(d, shape, in))
			gotV, gotI := values(out[0]), values(out[1])
			for o := range shape[0] {
				for e := range shape[2] {
					at := func(j int) float64 { return in[(o*n+j)*shape[2]+e] }
					wantI := refTopKGroups(at, n, kk, groups, m, largest)
					for j, w := range wantI {
						p := (o*kk+j)*shape[2] + e
						if gotI[p] != float64(w) || gotV[p] != at(w) {
							t.Fatalf("%s %v k %d groups %d/%d largest %v: choice %d is %v at %v, want %v at %d", d, shape, kk, m, groups, largest, j, gotV[p], gotI[p], at(w), w)
						}
					}
				}
			}
		}
	}
	// Attributes the op's inference refuses never reach the kernel.
	for _, bad := range []ir.Attrs{
		attrs("k", 2, "groups", 3, "topk_groups", 1),
		attrs("k", 2, "groups", 4, "topk_groups", 5),
		attrs("k", 5, "groups", 4, "topk_groups", 2),
	} {
		if _, err := runOpErr("top_k", bad, tensorOf(ir.F32, []int{2, 8}, make([]float64, 16))); err == nil {
			t.Errorf("top_k %v of f32[2,8] ran", bad)
		}
	}
}

// refTopKGroups is top_k limited to groups by stable sorts of indices (larger first, ties to
// the lower index).
func refTopKGroups(at func(int) float64, n, k, groups, m int, largest bool) []int {
	sorted := func(idx []int, key func(int) float64) []int {
		slices.SortStableFunc(idx, func(a, b int) int {
			ka, kb := key(a), key(b)
			if !largest {
				ka, kb = -ka, -kb
			}
			return -cmp.Compare(ka, kb)
		})
		return idx
	}
	size := n / groups
	score := make([]float64, groups)
	for g := range score {
		members := make([]int, size)
		for j := range members {
			members[j] = g*size + j
		}
		for _, i := range sorted(members, at)[:(k+m-1)/m] {
			score[g] += at(i)
		}
	}
	gs := make([]int, groups)
	for g := range gs {
		gs[g] = g
	}
	var kept []int
	for _, g := range sorted(gs, func(g int) float64 { return score[g] })[:m] {
		for j := range size {
			kept = append(kept, g*size+j)
		}
	}
	slices.Sort(kept)
	return sorted(kept, at)[:k]
}
