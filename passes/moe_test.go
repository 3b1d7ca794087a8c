package passes

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ppc.dev/ppc/ir"
)

// The reference evaluator's mixture-of-experts ops (gradeval_test.go), written from the op
// table's docs: top_k by a stable sort of each fibre, moe_slots by counting each expert's
// earlier choices in choice-major order, and dispatch, combine and the weights' gradient as
// loops over (token, choice) pairs.
func init() {
	evalOps["top_k"] = func(op *ir.Op, in []evalTensor) [][]float64 {
		s := in[0].s
		outer, n, inner := evalSplit3(s, evalAxis(op, len(s)))
		k, largest := op.Attrs.Int("k", 0), op.Attrs.Bool("largest", true)
		vals, idx := make([]float64, outer*k*inner), make([]float64, outer*k*inner)
		for o := range outer {
			for e := range inner {
				at := func(j int) float64 { return in[0].v[(o*n+j)*inner+e] }
				// sorted orders indices larger first (smaller with largest = false), ties in
				// index order.
				sorted := func(idx []int, key func(int) float64) []int {
					slices.SortStableFunc(idx, func(a, b int) int {
						x, y := key(a), key(b)
						if !largest {
							x, y = -x, -y
						}
						return -cmp.Compare(x, y)
					})
					return idx
				}
				// Node-limited routing: the M groups whose ⌈k/M⌉ best sum highest, and the
				// k best among their elements.
				groups, m := op.Attrs.Int("groups", 1), op.Attrs.Int("topk_groups", 1)
				size := n / groups
				score := make([]float64, groups)
				gs := make([]int, groups)
				for g := range groups {
					gs[g] = g
					members := make([]int, size)
					for j := range members {
						members[j] = g*size + j
					}
					for _, j := range sorted(members, at)[:(k+m-1)/m] {
						score[g] += at(j)
					}
				}
				var order []int
				for _, g := range sorted(gs, func(g int) float64 { return score[g] })[:m] {
					for j := range size {
						order = append(order, g*size+j)
					}
				}
				slices.Sort(order)
				order = sorted(order, at)
				for j := range k {
					vals[(o*k+j)*inner+e], idx[(o*k+j)*inner+e] = at(order[j]), float64(order[j])
				}
			}
		}
		return [][]float64{vals, idx}
	}
	evalOps["moe_slots"] = func(op *ir.Op, in []evalTensor) [][]float64 {
		experts, capacity := op.Attrs.Int("experts", 0), op.Attrs.Int("capacity", 0)
		k := in[0].s[len(in[0].s)-1]
		tokens := len(in[0].v) / k
		slots, load := make([]float64, len(in[0].v)), make([]float64, experts)
		for p := range slots {
			t, j := p/k, p%k
			e := in[0].v[p]
			// The choices before this one in choice-major order that picked e.
			row := 0
			for q := range in[0].v {
				if in[0].v[q] == e && (q%k < j || q%k == j && q/k < t) {
					row++
				}
			}
			slots[p] = -1
			if row < capacity {
				slots[p] = e*float64(capacity) + float64(row)
			}
		}
		for _, e := range in[0].v {
			load[int(e)]++
		}
		_ = tokens
		return [][]float64{slots, load}
	}
	rows := func(t evalTensor, r, d int) []float64 { return t.v[r*d : (r+1)*d] }
	weight := func(in []evalTensor, p int) float64 {
		if len(in) > 2 {
			return in[2].v[p]
		}
		return 1
	}
	evalOps["moe_dispatch"] = func(op *ir.Op, in []evalTensor) [][]float64 {
		d := in[0].s[len(in[0].s)-1]
		k := in[1].s[len(in[1].s)-1]
		out := make([]float64, op.Result().Type.NumElements())
		for p, s := range in[1].v {
			if s >= 0 {
				for c, v := range rows(in[0], p/k, d) {
					out[int(s)*d+c] = v * weight(in, p)
				}
			}
		}
		return [][]float64{out}
	}
	evalOps["moe_combine"] = func(op *ir.Op, in []evalTensor) [][]float64 {
		d := in[0].s[2]
		k := in[1].s[len(in[1].s)-1]
		out := make([]float64, op.Result().Type.NumElements())
		for p, s := range in[1].v {
			if s >= 0 {
				for c, v := range rows(in[0], int(s), d) {
					out[p/k*d+c] += v * weight(in, p)
				}
			}
		}
		return [][]float64{out}
	}
	evalOps["moe_weights_grad"] = func(op *ir.Op, in []evalTensor) [][]float64 {
		d := in[1].s[2]
		k := in[2].s[len(in[2].s)-1]
		out := make([]float64, len(in[2].v))
		for p, s := range in[2].v {
			if s >= 0 {
				for c, v := range rows(in[0], p/k, d) {
					out[p] += v * in[1].v[int(s)*d+c]
				}
			}
		}
		return [][]float64{out}
	}

	// Slots with a dropped choice: 3 tokens choosing 2 of 3 experts with capacity 1 —
	// choice-major, token 0 takes expert 2's row, token 1 expert 0's, token 2's first choice
	// (expert 2) is dropped, token 0's second choice (expert 1) gets its row.
	dropping := map[string][]float64{"i": {2, 1, 0, 2, 2, 0}}
	gradCases = append(gradCases,
		gradCase{name: "top_k", args: "%x: f64[2,5,3] {param}", body: "%y, %i = top_k %x {k = 2, axis = 1} : ?, ?", want: []string{"gather_elements_grad"}},
		gradCase{name: "top_k smallest", args: "%x: f64[3,4] {param}", body: "%y, %i = top_k %x {k = 3, largest = false} : ?, ?"},
		gradCase{name: "top_k groups", args: "%x: f64[3,8] {param}", body: "%y, %i = top_k %x {k = 3, groups = 4, topk_groups = 2} : ?, ?",
			want: []string{"gather_elements_grad"}},
		gradCase{name: "top_k groups along axis 0", args: "%x: f64[6,2] {param}", body: "%y, %i = top_k %x {k = 2, axis = 0, groups = 3, topk_groups = 1} : ?, ?"},
		gradCase{name: "moe_dispatch", args: "%x: f64[3,4] {param}, %i: i64[3,2] {input}",
			body: "%s, %l = moe_slots %i {experts = 3, capacity = 2} : ?, ?\n  %y = moe_dispatch %x, %s {experts = 3, capacity = 2} : ?",
			vals: map[string][]float64{"i": {2, 1, 0, 2, 2, 0}}, want: []string{"moe_combine"}},
		gradCase{name: "moe_dispatch weighted dropping", args: "%x: f64[3,4] {param}, %w: f64[3,2] {param}, %i: i64[3,2] {input}",
			body: "%s, %l = moe_slots %i {experts = 3, capacity = 1} : ?, ?\n  %y = moe_dispatch %x, %s, %w {experts = 3, capacity = 1} : ?",
			vals: dropping, want: []string{"moe_combine", "moe_weights_grad"}},
		gradCase{name: "moe_combine", args: "%y0: f64[3,2,4] {param}, %i: i64[3,2] {input}",
			body: "%s, %l = moe_slots %i {experts = 3, capacity = 2} : ?, ?\n  %y = moe_combine %y0, %s : ?",
			vals: map[string][]float64{"i": {2, 1, 0, 2, 2, 0}}, want: []string{"moe_dispatch"}},
		gradCase{name: "moe_combine weighted dropping", args: "%y0: f64[3,1,4] {param}, %w: f64[3,2] {param}, %i: i64[3,2] {input}",
			body: "%s, %l = moe_slots %i {experts = 3, capacity = 1} : ?, ?\n  %y = moe_combine %y0, %s, %w : ?",
			vals: dropping, want: []string{"moe_dispatch", "moe_weights_grad"}},
	)
	gradModels = append(gradModels, struct {
		name, src string
		vals      map[string][]float64
	}{"moe", moeGradModel, map[string][]float64{"labels": {1, 0, 2, 2, 1, 0}}})
}

// moeGradModel is a mixture-of-experts layer with every part of a router: linear router,
// softmax scores, top-2 with the weights renormalised, capacity 3 of 6 tokens × 2 choices
// over 4 experts (so some choices may drop, depending on the draw), SwiGLU experts as one
// batched matmul over [experts, capacity, d], a residual, the Switch load-balancing loss
// (experts · Σ_e f_e·P_e, f_e from moe_slots' load, no gradient) and the router z-loss
// (mean of the squared log-sum-exp of the router logits).
const moeGradModel = `func @forward(%x: f64[6,4] {input}, %labels: i64[6] {input, label}, %router: f64[4,4] {param}, %w1: f64[4,4,5] {param}, %w3: f64[4,4,5] {param}, %w2: f64[4,5,4] {param}, %head: f64[4,3] {param}) -> (f64[] {loss}) {
  %logits = matmul %x, %router : f64[6,4]
  %p = softmax %logits : f64[6,4]
  %topv, %topi = top_k %p {k = 2} : f64[6,2], i64[6,2]
  %norm = reduce_sum %topv {axes = [1], keepdims = true} : f64[6,1]
  %w = div %topv, %norm : f64[6,2]
  %slots, %load = moe_slots %topi {experts = 4, capacity = 3} : i64[6,2], i64[4]
  %buf = moe_dispatch %x, %slots {experts = 4, capacity = 3} : f64[4,3,4]
  %g = matmul %buf, %w1 : f64[4,3,5]
  %u = matmul %buf, %w3 : f64[4,3,5]
  %a = silu %g : f64[4,3,5]
  %h = mul %a, %u : f64[4,3,5]
  %e = matmul %h, %w2 : f64[4,3,4]
  %moe = moe_combine %e, %slots, %w : f64[6,4]
  %res = add %x, %moe : f64[6,4]
  %out = matmul %res, %head : f64[6,3]
  %ce = cross_entropy %out, %labels : f64[]
  %loadf = cast %load {to = f64} : f64[4]
  %tk = constant {value = dense<f64[]: 12>} : f64[]
  %f = div %loadf, %tk : f64[4]
  %pm = reduce_mean %p {axes = [0]} : f64[4]
  %fp = mul %f, %pm : f64[4]
  %bal = reduce_sum %fp : f64[]
  %coef = constant {value = dense<f64[]: 0.04>} : f64[]
  %aux = mul %bal, %coef : f64[]
  %lse = reduce_log_sum_exp %logits {axes = [1]} : f64[6]
  %lse2 = mul %lse, %lse : f64[6]
  %z = reduce_mean %lse2 : f64[]
  %zc = constant {value = dense<f64[]: 0.001>} : f64[]
  %zl = mul %z, %zc : f64[]
  %l1 = add %ce, %aux : f64[]
  %loss = add %l1, %zl : f64[]
  return %loss
}
`

// TestMoESlotsOrder pins moe_slots' placement on the doc's example: choice-major, tokens in
// order, and the load counting dropped choices.
func TestMoESlotsOrder(t *testing.T) {
	m, err := ir.ParseAndVerify("slots.ir", `func @f(%i: i64[3,2] {input}) -> (i64[3,2], i64[3]) {
  %s, %l = moe_slots %i {experts = 3, capacity = 1} : i64[3,2], i64[3]
  return %s, %l
}
`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := evalFunc(m.Funcs[0], []*ir.Dense{ir.NewDenseF64(ir.T(ir.I64, 3, 2), []float64{2, 1, 0, 2, 2, 0})})
	if err != nil {
		t.Fatal(err)
	}
	// Token 0's first choice takes expert 2's only row (2), token 1's expert 0's (0), token
	// 2's first choice (expert 2) drops, then token 0's second choice takes expert 1's row (1)
	// and the second choices of tokens 1 and 2 (experts 2 and 0) drop.
	if got, want := out[0].Floats(), []float64{2, 1, 0, -1, -1, -1}; !slices.Equal(got, want) {
		t.Errorf("slots = %v, want %v", got, want)
	}
	if got, want := out[1].Floats(), []float64{2, 1, 3}; !slices.Equal(got, want) {
		t.Errorf("load = %v, want %v", got, want)
	}
}

// TestMoEBalanceLossBalances: gradient descent on the Switch load-balancing loss alone
// spreads a router that sends almost every token to one expert: the busiest expert's share of
// the top-2 choices falls from over 40% towards the fair 25%. f_e (from moe_slots' load)
// carries no gradient; the loss moves the router through P_e, the mean probabilities.
func TestMoEBalanceLossBalances(t *testing.T) {
	const tokens, d, experts, k = 64, 4, 4, 2
	m, err := ir.ParseAndVerify("balance.ir", `func @forward(%x: f64[64,4] {input}, %router: f64[4,4] {param}) -> (f64[] {loss}) {
  %logits = matmul %x, %router : f64[64,4]
  %p = softmax %logits : f64[64,4]
  %topv, %topi = top_k %p {k = 2} : f64[64,2], i64[64,2]
  %slots, %load = moe_slots %topi {experts = 4, capacity = 64} : i64[64,2], i64[4]
  %loadf = cast %load {to = f64} : f64[4]
  %c = constant {value = dense<f64[]: 0.0078125>} : f64[]
  %f = mul %loadf, %c : f64[4]
  %pm = reduce_mean %p {axes = [0]} : f64[4]
  %fp = mul %f, %pm : f64[4]
  %s = reduce_sum %fp : f64[]
  %e = constant {value = dense<f64[]: 4>} : f64[]
  %loss = mul %s, %e : f64[]
  return %loss
}
`)
	if err != nil {
		t.Fatal(err)
	}
	runGradPipeline(t, m, "autodiff")
	train := m.Func(TrainFunc)
	r := rand.New(rand.NewPCG(11, 12))
	x := make([]float64, tokens*d)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	router := make([]float64, d*experts)
	for i := range router {
		router[i] = 0.1 * r.NormFloat64()
	}
	// Skew: expert 0's logit grows with a feature most tokens have positive.
	for tk := range tokens {
		x[tk*d] = math.Abs(x[tk*d]) + 0.5
	}
	router[0] = 3
	share := func() float64 {
		load := make([]int, experts)
		for tk := range tokens {
			logits := make([]float64, experts)
			for e := range experts {
				for c := range d {
					logits[e] += x[tk*d+c] * router[c*experts+e]
				}
			}
			order := []int{0, 1, 2, 3}
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
			for _, e := range order[:k] {
				load[e]++
			}
		}
		return float64(slices.Max(load)) / (tokens * k)
	}
	before := share()
	for range 200 {
		out, err := evalFunc(train, []*ir.Dense{ir.NewDenseF64(ir.T(ir.F64, tokens, d), x), ir.NewDenseF64(ir.T(ir.F64, d, experts), router)})
		if err != nil {
			t.Fatal(err)
		}
		for i := range router {
			router[i] -= 2 * out[1].F64(i)
		}
	}
	after := share()
	t.Logf("busiest expert's share of the choices: %.3f → %.3f (fair: %.3f)", before, after, 1.0/experts)
	if before < 0.4 || after > before-0.1 || after > 0.35 {
		t.Errorf("the balance loss did not balance the router: busiest expert's share %.3f → %.3f", before, after)
	}
}

// TestMoEDispatchTraffic: DeepSeek-V3's layer (256 experts, top 8, d 7168, bf16, 4,096
// tokens, capacity 160 = ⌈1.25·4096·8/256⌉) at ep 64 over 8 nodes: the static buffer
// 256·160·7168·2 bytes, 7/8 of it to other nodes whatever the routing; deduplicated per node a
// token would go to at most 4 other nodes with node-limited routing (8 groups, 4 kept), 7
// without it. Inside one node nothing crosses; 16 nodes put each group on 2 (fan-out 8);
// 3 nodes split groups, so only top_k bounds it.
func TestMoEDispatchTraffic(t *testing.T) {
	limited := MoEInfo{Experts: 256, TopK: 8, Layers: 58, Groups: 8, TopKGroups: 4}
	free := limited
	free.Groups, free.TopKGroups = 0, 0
	const tok, d, cp, el = 4096, 7168, 160, 2
	buf := 256.0 * cp * d * el
	row := float64(tok) * d * el
	for _, c := range []struct {
		name          string
		info          MoEInfo
		ep, tpcp      int
		nodes, fanOut int
		offNode       float64
		dedup         float64
	}{
		{"ep64 limited", limited, 64, 1, 8, 4, buf * 7 / 8, 4 * row},
		{"ep64 unlimited", free, 64, 1, 8, 8, buf * 7 / 8, 7 * row},
		{"ep8 one node", limited, 8, 1, 1, 4, 0, 0},
		{"ep64 tp2: 16 nodes", limited, 64, 2, 16, 8, buf * 60 / 64, 8 * row},
		{"ep24: 3 nodes", limited, 24, 1, 3, 8, buf * 16 / 24, 2 * row},
	} {
		got := MoEDispatchTraffic(c.info, tok, d, cp, el, c.ep, c.tpcp, 8)
		want := DispatchTraffic{Nodes: c.nodes, Buffer: buf, OffNode: c.offNode, Dedup: c.dedup, FanOut: c.fanOut}
		if got != want {
			t.Errorf("%s: %+v, want %+v", c.name, got, want)
		}
	}
}
