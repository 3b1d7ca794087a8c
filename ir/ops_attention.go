package ir

import "fmt"

// attentionOps are fused scaled dot-product attention and its gradient. The scores
// q·kᵀ·scale (s_q × s_kv per head) are never a value of the program: the forward keeps only
// the output and the row log-sum-exp, and the gradient recomputes the probabilities tile by
// tile from them (FlashAttention-2), so a step's memory grows with s·d rather than s².
var attentionOps = []OpDef{
	{Name: "attention", MinOperands: 3, MaxOperands: 4, Traits: Pure, Attrs: attentionAttrs, Infer: inferAttention,
		Doc: "Scaled dot-product attention. Operands q [..., Hq, Sq, D], k [..., Hkv, Skv, D], v [..., Hkv, Skv, Dv] " +
			"(one floating-point dtype; equal leading dims) and an optional mask broadcastable to [..., Hq, Sq, Skv]: " +
			"bool (true = the key is visible, as ONNX and PyTorch's SDPA) or additive, of q's dtype. Hkv divides Hq " +
			"(grouped-query and multi-query attention): query head h reads kv head h / (Hq/Hkv), and the kv heads are " +
			"never repeated in memory. scale defaults to 1/√D. causal (default false) hides key j from query i when " +
			"j > i + Skv − Sq (aligned at the bottom right, so that a query block at the end of its keys — a token " +
			"slice over a K/V prefix — is causal too; for Sq = Skv the usual lower triangle). With " +
			"s[i, j] = scale·q[i]·k[j] + mask[i, j] over the visible keys, the results are o[i] = Σ_j softmax(s[i])_j·v[j] " +
			"([..., Hq, Sq, Dv], q's dtype) and the row log-sum-exp lse[i] = log Σ_j exp(s[i, j]) ([..., Hq, Sq, 1], f32 — f64 " +
			"for f64 operands — kept for the gradient; the trailing 1 gives both results one rank, so that the op's " +
			"one layout annotation fits both). A row with no visible key gives o = 0 and lse = −∞."},
	{Name: "attention_grad", MinOperands: 6, MaxOperands: 7, Traits: Pure, Attrs: attentionAttrs, Infer: inferAttentionGrad,
		Doc: "Backward of attention (FlashAttention-2's algorithm). Operands q, k, v, o and lse (attention's operands and " +
			"results), do (the gradient of o) and the mask when attention has one; causal and scale as on the forward " +
			"op. The probabilities are recomputed per tile from lse, p[i, j] = exp(s[i, j] − lse[i]), never stored whole: " +
			"with δ[i] = Σ_c do[i, c]·o[i, c] and ds[i, j] = p[i, j]·(do[i]·v[j] − δ[i]), the results are " +
			"dq[i] = scale·Σ_j ds[i, j]·k[j], dk[j] = scale·Σ_i ds[i, j]·q[i] and dv[j] = Σ_i p[i, j]·do[i], the last two " +
			"summed over the query heads of the kv head's group; they have q's, k's and v's types. The mask gets no " +
			"gradient."},
}

var attentionAttrs = []AttrSpec{{Name: "causal", Kind: KindBool, Optional: true}, {Name: "scale", Kind: KindFloat, Optional: true}}

// AttentionDims are the sizes of an attention: Batch is the product of the leading dims.
type AttentionDims struct {
	Batch, Hq, Hkv, Sq, Skv, D, Dv int
}

// AttentionOperands checks the operand types of attention (maskAt 3) or attention_grad
// (maskAt 6) — q, k, v first, the mask at maskAt when present — and returns the sizes and the
// mask's type (nil without one).
func AttentionOperands(in []Type, maskAt int) (AttentionDims, *Type, error) {
	if len(in) < 3 {
		return AttentionDims{}, nil, fmt.Errorf("want q, k and v, have %d operands", len(in))
	}
	var mask *Type
	if len(in) > maskAt {
		mask = &in[maskAt]
	}
	d, err := AttentionShape(in[0], in[1], in[2], mask)
	return d, mask, err
}

// AttentionShape checks attention's operand types (q, k, v and an optional mask) and returns
// its sizes.
func AttentionShape(q, k, v Type, mask *Type) (AttentionDims, error) {
	var d AttentionDims
	if !q.DType.IsFloat() {
		return d, fmt.Errorf("q must be floating point, got %s", q)
	}
	if k.DType != q.DType || v.DType != q.DType {
		return d, fmt.Errorf("q, k and v must have one dtype, got %s, %s and %s", q, k, v)
	}
	r := q.Rank()
	if r < 3 || k.Rank() != r || v.Rank() != r {
		return d, fmt.Errorf("q, k and v must have one rank of at least 3 ([..., heads, seq, dim]), got %s, %s and %s", q, k, v)
	}
	if !q.Shape[:r-3].Equal(k.Shape[:r-3]) || !q.Shape[:r-3].Equal(v.Shape[:r-3]) {
		return d, fmt.Errorf("q, k and v must have equal leading dims, got %s, %s and %s", q, k, v)
	}
	d.Batch = q.Shape[:r-3].NumElements()
	d.Hq, d.Sq, d.D = q.Shape[r-3], q.Shape[r-2], q.Shape[r-1]
	d.Hkv, d.Skv, d.Dv = k.Shape[r-3], k.Shape[r-2], v.Shape[r-1]
	switch {
	case k.Shape[r-1] != d.D:
		return d, fmt.Errorf("k %s must have q's head dim %d", k, d.D)
	case v.Shape[r-3] != d.Hkv || v.Shape[r-2] != d.Skv:
		return d, fmt.Errorf("v %s must have k's heads and sequence (%d, %d)", v, d.Hkv, d.Skv)
	case d.Hkv == 0 || d.Hq%d.Hkv != 0:
		return d, fmt.Errorf("k's %d heads must divide q's %d", d.Hkv, d.Hq)
	}
	if mask != nil {
		if mask.DType != Bool && mask.DType != q.DType {
			return d, fmt.Errorf("mask %s must be bool or %s (additive)", *mask, q.DType)
		}
		scores := append(slicesClone(q.Shape[:r-1]), d.Skv)
		if got, err := BroadcastShapes(mask.Shape, scores); err != nil || !got.Equal(scores) {
			return d, fmt.Errorf("mask %s does not broadcast to the scores' shape %s", *mask, scores)
		}
	}
	return d, nil
}

func slicesClone(s Shape) Shape { return append(Shape(nil), s...) }

// AttentionLSEType is the dtype of attention's log-sum-exp: f32, or f64 for f64 operands.
func AttentionLSEType(d DType) DType {
	if d == F64 {
		return F64
	}
	return F32
}

func inferAttention(in []Type, at Attrs) ([]Type, error) {
	if _, _, err := AttentionOperands(in, 3); err != nil {
		return nil, err
	}
	q, v := in[0], in[2]
	r := q.Rank()
	o := Type{DType: q.DType, Shape: append(slicesClone(q.Shape[:r-1]), v.Shape[r-1])}
	lse := Type{DType: AttentionLSEType(q.DType), Shape: append(slicesClone(q.Shape[:r-1]), 1)}
	return []Type{o, lse}, nil
}

func inferAttentionGrad(in []Type, at Attrs) ([]Type, error) {
	if _, _, err := AttentionOperands(in, 6); err != nil {
		return nil, err
	}
	want, _ := inferAttention(in[:3], at)
	if !in[3].Equal(want[0]) {
		return nil, fmt.Errorf("o %s must be %s", in[3], want[0])
	}
	if !in[4].Equal(want[1]) {
		return nil, fmt.Errorf("lse %s must be %s", in[4], want[1])
	}
	if !in[5].Equal(want[0]) {
		return nil, fmt.Errorf("do %s must be %s", in[5], want[0])
	}
	return []Type{in[0], in[1], in[2]}, nil
}
