package ir

import (
	"fmt"
	"slices"
)

// moeOps are the ops of a mixture-of-experts layer (issue 26): top_k picks each token's
// experts, moe_slots gives every (token, choice) a row of its expert's capacity buffer,
// moe_dispatch copies tokens into the [experts, capacity, d] buffer the experts run on as one
// batched matmul, and moe_combine sums the experts' rows back per token, weighted by the
// router. The buffer has static shape — the IR has no dynamic shapes — so the capacity bounds
// an expert's tokens; "dropless" routing is capacity = tokens, which no routing can overflow
// (a token picks distinct experts).
//
// The buffer is one value with the experts as its first dim, so that expert parallelism can
// shard it there and place its all-to-all where a token-sharded value meets an
// expert-sharded one, as tensor parallelism places its collectives: the dispatch and combine
// are the boundary, not a pattern of gathers and scatters a pass would have to recognise.
var moeOps = []OpDef{
	{Name: "top_k", MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferTopK,
		Attrs: []AttrSpec{{Name: "k", Kind: KindInt}, axisAttr(true), {Name: "largest", Kind: KindBool, Optional: true},
			{Name: "groups", Kind: KindInt, Optional: true}, {Name: "topk_groups", Kind: KindInt, Optional: true}},
		Doc: "The k largest (smallest with largest = false) elements of x along axis (default −1), sorted, and their " +
			"indices (i64): values has x's shape with axis's extent k. Ties go to the lower index, so the choice is " +
			"deterministic (ONNX TopK's rule); NaN counts as larger than every number. 1 ≤ k ≤ the axis's extent. " +
			"With groups = G and topk_groups = M (DeepSeek-V3's node-limited routing; both default 1, no limit) the " +
			"axis is G equal contiguous groups, each scored by the sum (in f64, in top_k's order) of its first " +
			"⌈k/M⌉ elements in top_k's order; the M first groups in that order of their scores (ties to the lower " +
			"group) are kept and the k elements are chosen among theirs only. G divides the axis's extent, " +
			"1 ≤ M ≤ G and k ≤ M·extent/G. The gradient scatters the values' gradient back to the chosen positions " +
			"(gather_elements_grad): the group choice, like the element choice, is piecewise constant."},
	{Name: "moe_slots", MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferMoESlots, Attrs: moeAttrs,
		Doc: "Capacity slots of routed tokens. Operand indices [..., k] (integers: each token's k chosen experts, " +
			"distinct, in [0, experts)); the leading dims are the tokens in order. Choices are placed choice-major — " +
			"every token's first choice before any second choice (GShard's priority), tokens in order within a choice " +
			"— each in the next free row of its expert: slots[t, j] = e·capacity + row, or −1 when the expert's " +
			"capacity rows are full (the choice is dropped). load [experts] (i64) counts the choices routed to each " +
			"expert, the dropped included (load − capacity, where positive, is what dropped). Integer results: no " +
			"gradient."},
	{Name: "moe_dispatch", MinOperands: 2, MaxOperands: 3, Traits: Pure, Infer: inferMoEDispatch, Attrs: moeAttrs,
		Doc: "Tokens into the experts' capacity buffer. Operands x [..., d] (floating point), slots [..., k] " +
			"(moe_slots' result: equal leading dims) and optionally weights [..., k] (x's dtype). The result " +
			"[experts, capacity, d] holds x[t] (times weights[t, j]) in row slots[t, j] for every choice not dropped; " +
			"rows no token fills are 0. Each row is written once, so the result does not depend on an order of sums. " +
			"Its gradient with respect to x is moe_combine of the buffer's gradient, and with respect to weights " +
			"moe_weights_grad."},
	{Name: "moe_combine", MinOperands: 2, MaxOperands: 3, Traits: Pure, Infer: inferMoECombine,
		Doc: "The experts' rows back to their tokens. Operands y [experts, capacity, d] (floating point), slots " +
			"[..., k] and optionally weights [..., k] (y's dtype). The result [..., d] is Σ_j weights[t, j]·y[slots[t, j]] " +
			"over the choices not dropped, j in order (weights 1 when absent); a token whose every choice dropped " +
			"gets 0. Its gradient with respect to y is moe_dispatch of the result's gradient (weighted), and with " +
			"respect to weights moe_weights_grad."},
	{Name: "moe_weights_grad", MinOperands: 3, MaxOperands: 3, Traits: Pure, Infer: inferMoEWeightsGrad,
		Doc: "The routing weights' gradient of moe_combine and moe_dispatch: operands a [..., d], b [experts, capacity, " +
			"d] (one floating-point dtype) and slots [..., k]; the result [..., k] (a's dtype) is a[t]·b[slots[t, j]], " +
			"0 where the choice dropped. For moe_combine(y, slots, w) a is the result's gradient and b is y; for " +
			"moe_dispatch(x, slots, w) a is x and b the buffer's gradient."},
}

var moeAttrs = []AttrSpec{{Name: "experts", Kind: KindInt}, {Name: "capacity", Kind: KindInt}}

func inferTopK(in []Type, at Attrs) ([]Type, error) {
	x := in[0]
	if x.DType == Bool || x.Rank() == 0 {
		return nil, fmt.Errorf("top_k needs a numeric operand of rank ≥ 1, got %s", x)
	}
	axis, err := NormAxis(at.Int("axis", -1), x.Rank())
	if err != nil {
		return nil, err
	}
	k := at.Int("k", 0)
	if k < 1 || k > x.Shape[axis] {
		return nil, fmt.Errorf("k = %d must be in [1, %d] (the extent of axis %d of %s)", k, x.Shape[axis], axis, x)
	}
	if _, _, err := TopKGroups(at, x.Shape[axis]); err != nil {
		return nil, err
	}
	s := slices.Clone(x.Shape)
	s[axis] = k
	return []Type{{x.DType, s}, {I64, slices.Clone(s)}}, nil
}

// TopKGroups reads top_k's groups and topk_groups attributes for an axis of extent n and
// checks them: groups divides n, 1 ≤ topk_groups ≤ groups, and k elements fit in
// topk_groups groups. Without the attributes it returns 1, 1 (one group: no limit). The
// kernels and the reports read the attributes through it, so they agree on the defaults.
func TopKGroups(at Attrs, n int) (groups, topkGroups int, err error) {
	groups, topkGroups = at.Int("groups", 1), at.Int("topk_groups", 1)
	k := at.Int("k", 0)
	switch {
	case groups < 1 || n%groups != 0:
		return 0, 0, fmt.Errorf("groups = %d must be ≥ 1 and divide the axis's %d elements", groups, n)
	case topkGroups < 1 || topkGroups > groups:
		return 0, 0, fmt.Errorf("topk_groups = %d must be in [1, %d] (groups)", topkGroups, groups)
	case k > topkGroups*(n/groups):
		return 0, 0, fmt.Errorf("k = %d cannot be reached within topk_groups = %d group(s) of %d element(s): at most %d", k, topkGroups, n/groups, topkGroups*(n/groups))
	}
	return groups, topkGroups, nil
}

// moeSize reads the experts and capacity attributes.
func moeSize(at Attrs) (experts, capacity int, err error) {
	experts, capacity = at.Int("experts", 0), at.Int("capacity", 0)
	if experts < 1 {
		return 0, 0, fmt.Errorf("experts = %d must be ≥ 1", experts)
	}
	if capacity < 1 {
		return 0, 0, fmt.Errorf("capacity = %d must be ≥ 1", capacity)
	}
	return experts, capacity, nil
}

func inferMoESlots(in []Type, at Attrs) ([]Type, error) {
	idx := in[0]
	if !idx.DType.IsInt() || idx.Rank() == 0 {
		return nil, fmt.Errorf("moe_slots indices must be integers of rank ≥ 1 ([..., k]), got %s", idx)
	}
	experts, _, err := moeSize(at)
	if err != nil {
		return nil, err
	}
	if k := idx.Shape[idx.Rank()-1]; k > experts {
		return nil, fmt.Errorf("moe_slots: %d choices per token of %d experts (a token's choices are distinct)", k, experts)
	}
	return []Type{{I64, slices.Clone(idx.Shape)}, {I64, Shape{experts}}}, nil
}

// moeTokens checks that x [..., d] (or weights) and slots [..., k] have one set of leading
// dims, and that slots are integers.
func moeTokens(what string, x, slots Type) error {
	if !slots.DType.IsInt() || slots.Rank() == 0 {
		return fmt.Errorf("slots must be integers of rank ≥ 1 ([..., k]), got %s", slots)
	}
	if x.Rank() != slots.Rank() || !x.Shape[:x.Rank()-1].Equal(slots.Shape[:slots.Rank()-1]) {
		return fmt.Errorf("%s %s and slots %s must have equal leading (token) dims", what, x, slots)
	}
	return nil
}

// moeWeights checks the optional weights operand at i against slots and dtype.
func moeWeights(in []Type, i int, dt DType) error {
	if len(in) <= i {
		return nil
	}
	if w := in[i]; w.DType != dt || !w.Shape.Equal(in[1].Shape) {
		return fmt.Errorf("weights %s must be %s", w, Type{dt, in[1].Shape})
	}
	return nil
}

func inferMoEDispatch(in []Type, at Attrs) ([]Type, error) {
	x := in[0]
	if !x.DType.IsFloat() {
		return nil, fmt.Errorf("moe_dispatch x must be floating point, got %s", x)
	}
	if err := moeTokens("x", x, in[1]); err != nil {
		return nil, err
	}
	if err := moeWeights(in, 2, x.DType); err != nil {
		return nil, err
	}
	experts, capacity, err := moeSize(at)
	if err != nil {
		return nil, err
	}
	return one(Type{x.DType, Shape{experts, capacity, x.Shape[x.Rank()-1]}})
}

func inferMoECombine(in []Type, at Attrs) ([]Type, error) {
	y, slots := in[0], in[1]
	if !y.DType.IsFloat() || y.Rank() != 3 {
		return nil, fmt.Errorf("moe_combine y must be floating point [experts, capacity, d], got %s", y)
	}
	if !slots.DType.IsInt() || slots.Rank() == 0 {
		return nil, fmt.Errorf("slots must be integers of rank ≥ 1 ([..., k]), got %s", slots)
	}
	if err := moeWeights(in, 2, y.DType); err != nil {
		return nil, err
	}
	s := slices.Clone(slots.Shape)
	s[len(s)-1] = y.Shape[2]
	return one(Type{y.DType, s})
}

func inferMoEWeightsGrad(in []Type, at Attrs) ([]Type, error) {
	a, b, slots := in[0], in[1], in[2]
	if !a.DType.IsFloat() || b.DType != a.DType || b.Rank() != 3 {
		return nil, fmt.Errorf("moe_weights_grad wants a [..., d] and b [experts, capacity, d] of one floating-point dtype, got %s and %s", a, b)
	}
	if err := moeTokens("a", a, slots); err != nil {
		return nil, err
	}
	if a.Shape[a.Rank()-1] != b.Shape[2] {
		return nil, fmt.Errorf("a %s and b %s must have one row width", a, b)
	}
	return one(Type{a.DType, slices.Clone(slots.Shape)})
}
