package ir

import "fmt"

// ringOps are context parallelism's ops (passes' cp-partition and ring-attention): attention
// over a sequence split across the ranks of a mesh axis, and the point-to-point steps of the
// ring that computes it.
//
// ring_attention and ring_attention_grad exist only between cp-partition and ring-attention:
// they let the passes in between (tensor parallelism, pipeline partitioning, autodiff) treat a
// ring as one op, with one gradient rule. ring-attention then writes each as its steps —
// ring_send/ring_recv of the K/V blocks (and, backward, of their gradients), a fused
// attention or attention_grad per block, and the log-sum-exp merge — so that the rank
// programs, pass dumps and `ppc dis` show every transfer.
var ringOps = []OpDef{
	{Name: "ring_attention", MinOperands: 3, MaxOperands: 3, Traits: Pure, Attrs: ringAttrs, Infer: inferRingAttention,
		Doc: "Attention over a sequence split over the ranks of mesh axis `axis` (`size` of them): q, k and v are this " +
			"rank's tokens ([..., H, S/size, D]); the keys and values of every rank are visited around the ring. `split` " +
			"says which tokens a rank holds: contiguous (rank i: block i of size) or zigzag (2·size chunks; rank i holds " +
			"chunks i and 2·size−1−i, in that order), so that causal masking (by the tokens' real positions) and rotary " +
			"positions follow the split. Results as attention's: o and the row log-sum-exp over all the keys."},
	{Name: "ring_attention_grad", MinOperands: 6, MaxOperands: 6, Traits: Pure, Attrs: ringAttrs, Infer: inferRingAttentionGrad,
		Doc: "Backward of ring_attention: operands q, k, v, o, lse and do as attention_grad's; results dq, dk, dv of this " +
			"rank's tokens. The K/V blocks travel the ring again, each with the gradient its visits have summed."},
	{Name: "ring_send", MinOperands: 1, MaxOperands: 1, Traits: Collective, Attrs: []AttrSpec{collectiveAxis}, Infer: inferNone,
		Doc: "send a value to the next rank of the mesh axis's ring (coordinate + 1, wrapping); paired in order with the " +
			"ring_recv of that rank, so every rank of the axis issues the same sequence of them. Non-blocking: the send " +
			"is issued before the work it overlaps"},
	{Name: "ring_recv", MinOperands: 0, MaxOperands: 0, Traits: Collective, Attrs: []AttrSpec{collectiveAxis, {Name: "type", Kind: KindType}}, Infer: inferRecv,
		Doc: "receive a value of the given type from the previous rank of the mesh axis's ring (coordinate − 1, wrapping): " +
			"the value its matching ring_send sent"},
}

var ringAttrs = []AttrSpec{collectiveAxis, {Name: "size", Kind: KindInt}, {Name: "split", Kind: KindEnum, Enum: []string{"contiguous", "zigzag"}},
	{Name: "causal", Kind: KindBool, Optional: true}, {Name: "scale", Kind: KindFloat, Optional: true}}

func inferRingAttention(in []Type, at Attrs) ([]Type, error) {
	if n := at.Int("size", 0); n < 1 {
		return nil, fmt.Errorf("size %d: want the number of ranks of the ring (at least 1)", n)
	}
	d, _, err := AttentionOperands(in, 3)
	if err != nil {
		return nil, err
	}
	if d.Sq != d.Skv {
		return nil, fmt.Errorf("q has %d tokens, k %d: a ring rank holds as many queries as keys", d.Sq, d.Skv)
	}
	return inferAttention(in, at)
}

func inferRingAttentionGrad(in []Type, at Attrs) ([]Type, error) {
	if _, err := inferRingAttention(in[:3], at); err != nil {
		return nil, err
	}
	return inferAttentionGrad(in, at)
}
