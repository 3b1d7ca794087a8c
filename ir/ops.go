package ir

import "slices"

// The op table: every IR op as data. It is one table kept in several files by topic —
// coreOps (here: the ops of MLPs and GPT/Llama-style transformers, collectives and
// point-to-point), nnOps (ops_nn.go: convolutions, pooling, normalisations and the rest of what
// ONNX models need), attentionOps (ops_attention.go: fused attention and its gradient), ringOps
// (ops_ring.go: context parallelism's ring attention steps), moeOps
// (ops_moe.go: top-k routing and the mixture-of-experts dispatch and combine), gradOps
// (ops_grad.go: fused gradient kernels the autodiff emits) and rankOps (ops_rank.go: what a
// rank's program does once per step with its gradients and its optimizer). Passes look rows
// up by name and read their traits; the verifier checks ops against them.
var opTable = slices.Concat(coreOps, nnOps, attentionOps, ringOps, moeOps, gradOps, rankOps)

var reductionKinds = []string{"sum", "mean", "max", "min"}

func axisAttr(opt bool) AttrSpec { return AttrSpec{Name: "axis", Kind: KindInt, Optional: opt} }

var (
	reduceAttrs    = []AttrSpec{{Name: "axes", Kind: KindInts, Optional: true}, {Name: "keepdims", Kind: KindBool, Optional: true}}
	normAttrs      = []AttrSpec{axisAttr(true), {Name: "eps", Kind: KindFloat, Optional: true}}
	collectiveAxis = AttrSpec{Name: "axis", Kind: KindAxis}
	gatherDimAttrs = []AttrSpec{collectiveAxis, {Name: "dim", Kind: KindInt}, {Name: "parts", Kind: KindInt}}
	p2pAttrs       = []AttrSpec{{Name: "peer", Kind: KindInt}, {Name: "tag", Kind: KindInt},
		// In a rank's program (passes' rank-programs): the port and micro-batch carried.
		{Name: "port", Kind: KindString, Optional: true}, {Name: "microbatch", Kind: KindInt, Optional: true}}
	lossReduction = AttrSpec{Name: "reduction", Kind: KindEnum, Optional: true, Enum: []string{"mean", "sum", "none"}}
)

func unaryOp(name, doc string, infer InferFunc) OpDef {
	return OpDef{Name: name, Doc: doc, MinOperands: 1, MaxOperands: 1, Traits: Pure | Elementwise, Infer: infer}
}

func binaryOp(name, doc string, extra Trait, infer InferFunc) OpDef {
	return OpDef{Name: name, Doc: doc, MinOperands: 2, MaxOperands: 2, Traits: Pure | Elementwise | Broadcasting | extra, Infer: infer}
}

func reduction(name, doc string) OpDef {
	return OpDef{Name: name, Doc: doc, MinOperands: 1, MaxOperands: 1, Traits: Pure | Reduction, Attrs: reduceAttrs, Infer: inferReduce}
}

var coreOps = []OpDef{
	// Elementwise arithmetic with numpy broadcasting.
	binaryOp("add", "a + b", Commutative, inferBinary),
	binaryOp("sub", "a - b", 0, inferBinary),
	binaryOp("mul", "a * b", Commutative, inferBinary),
	binaryOp("div", "a / b (integer division truncates toward zero)", 0, inferBinary),
	binaryOp("pow", "a raised to the power b", 0, inferBinary),
	binaryOp("max", "elementwise maximum", Commutative, inferBinary),
	binaryOp("min", "elementwise minimum", Commutative, inferBinary),
	binaryOp("equal", "a == b (bool result)", Commutative, inferCompare),
	binaryOp("less", "a < b (bool result)", 0, inferCompare),
	binaryOp("greater", "a > b (bool result)", 0, inferCompare),
	binaryOp("and", "logical and of bools", Commutative, inferLogical),
	binaryOp("or", "logical or of bools", Commutative, inferLogical),
	unaryOp("not", "logical not of a bool", func(in []Type, _ Attrs) ([]Type, error) { return inferLogical(in, nil) }),
	{Name: "where", Doc: "select a where cond is true, else b (broadcasting)", MinOperands: 3, MaxOperands: 3,
		Traits: Pure | Elementwise | Broadcasting, Infer: inferWhere},

	// Elementwise math.
	unaryOp("neg", "-x", inferNumericUnary),
	unaryOp("abs", "|x|", inferNumericUnary),
	unaryOp("relu", "max(x, 0)", inferNumericUnary),
	{Name: "gelu", Doc: "x·Φ(x); approximate = tanh uses the tanh formula", MinOperands: 1, MaxOperands: 1,
		Traits: Pure | Elementwise, Infer: inferFloatUnary,
		Attrs: []AttrSpec{{Name: "approximate", Kind: KindEnum, Optional: true, Enum: []string{"none", "tanh"}}}},
	unaryOp("silu", "x·sigmoid(x)", inferFloatUnary),
	unaryOp("stop_gradient", "x, with no gradient flowing back through it (a vocab-parallel cross-entropy's stabilising max)", inferUnary),
	unaryOp("tanh", "hyperbolic tangent", inferFloatUnary),
	unaryOp("sigmoid", "1 / (1 + exp(-x))", inferFloatUnary),
	unaryOp("exp", "e^x", inferFloatUnary),
	unaryOp("log", "natural logarithm", inferFloatUnary),
	unaryOp("sqrt", "square root", inferFloatUnary),
	unaryOp("rsqrt", "1 / sqrt(x)", inferFloatUnary),
	unaryOp("erf", "the error function", inferFloatUnary),
	unaryOp("sin", "sine", inferFloatUnary),
	unaryOp("cos", "cosine", inferFloatUnary),
	{Name: "iota", Doc: "a tensor of the given type whose elements are their index along axis (0, 1, 2, …); builds positions and causal masks at run time instead of as large constants",
		MinOperands: 0, MaxOperands: 0, Traits: Pure, Infer: inferIota,
		Attrs: []AttrSpec{{Name: "type", Kind: KindType}, axisAttr(false)}},

	// Normalisations and softmax along an axis (default the last).
	{Name: "softmax", Doc: "softmax along axis (default -1)", MinOperands: 1, MaxOperands: 1, Traits: Pure,
		Attrs: []AttrSpec{axisAttr(true)}, Infer: inferAxisSame},
	{Name: "log_softmax", Doc: "log of softmax along axis (default -1)", MinOperands: 1, MaxOperands: 1, Traits: Pure,
		Attrs: []AttrSpec{axisAttr(true)}, Infer: inferAxisSame},
	{Name: "layer_norm", Doc: "(x - mean) / sqrt(var + eps) · scale + bias over dims axis.. (default -1); operands x [, scale [, bias]]",
		MinOperands: 1, MaxOperands: 3, Traits: Pure, Attrs: normAttrs, Infer: inferNorm},
	{Name: "rms_norm", Doc: "x / sqrt(mean(x²) + eps) · scale over dims axis.. (default -1); operands x [, scale]",
		MinOperands: 1, MaxOperands: 2, Traits: Pure, Attrs: normAttrs, Infer: inferNorm},

	// Linear algebra.
	{Name: "matmul", Doc: "numpy matmul with batch broadcasting; transpose_a/b swap the last two dims; optional bias added to the result",
		MinOperands: 2, MaxOperands: 3, Traits: Pure, Infer: inferMatMul,
		Attrs: []AttrSpec{{Name: "transpose_a", Kind: KindBool, Optional: true}, {Name: "transpose_b", Kind: KindBool, Optional: true}}},

	// Shape and data movement.
	{Name: "reshape", Doc: "same elements, new shape (one -1 is inferred)", MinOperands: 1, MaxOperands: 1, Traits: Pure,
		Attrs: []AttrSpec{{Name: "shape", Kind: KindInts}}, Infer: inferReshape},
	{Name: "transpose", Doc: "permute dims: result dim i is operand dim perm[i]", MinOperands: 1, MaxOperands: 1, Traits: Pure,
		Attrs: []AttrSpec{{Name: "perm", Kind: KindInts}}, Infer: inferTranspose},
	{Name: "broadcast", Doc: "numpy broadcast_to shape", MinOperands: 1, MaxOperands: 1, Traits: Pure,
		Attrs: []AttrSpec{{Name: "shape", Kind: KindInts}}, Infer: inferBroadcastTo},
	{Name: "gather", Doc: "take slices of data along axis (default 0) at integer indices", MinOperands: 2, MaxOperands: 2, Traits: Pure,
		Attrs: []AttrSpec{axisAttr(true)}, Infer: inferGather},
	{Name: "concat", Doc: "join operands along axis", MinOperands: 1, MaxOperands: -1, Traits: Pure,
		Attrs: []AttrSpec{axisAttr(false)}, Infer: inferConcat},
	{Name: "slice", Doc: "strided slice: starts/ends per listed axes (default the leading dims), steps default 1",
		MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferSlice,
		Attrs: []AttrSpec{{Name: "starts", Kind: KindInts}, {Name: "ends", Kind: KindInts},
			{Name: "axes", Kind: KindInts, Optional: true}, {Name: "steps", Kind: KindInts, Optional: true}}},
	{Name: "split", Doc: "cut along axis into pieces of the given sizes (one result each)", MinOperands: 1, MaxOperands: 1, Traits: Pure,
		Attrs: []AttrSpec{axisAttr(false), {Name: "sizes", Kind: KindInts}}, Infer: inferSplit},
	{Name: "constant", Doc: "a compile-time tensor", MinOperands: 0, MaxOperands: 0, Traits: Pure | ConstantLike,
		Attrs: []AttrSpec{{Name: "value", Kind: KindDense}}, Infer: inferConstant},
	{Name: "cast", Doc: "convert elements to dtype `to`", MinOperands: 1, MaxOperands: 1, Traits: Pure | Elementwise,
		Attrs: []AttrSpec{{Name: "to", Kind: KindDType}}, Infer: inferCast},

	// Reductions.
	reduction("reduce_sum", "sum over axes (default all)"),
	reduction("reduce_mean", "mean over axes (default all)"),
	reduction("reduce_max", "maximum over axes (default all)"),

	// Losses.
	{Name: "cross_entropy", Doc: "softmax cross-entropy of logits [..., C] against integer labels [...]; mean by default",
		MinOperands: 2, MaxOperands: 2, Traits: Pure | Loss, Infer: inferCrossEntropy,
		Attrs: []AttrSpec{lossReduction, {Name: "ignore_index", Kind: KindInt, Optional: true}}},
	{Name: "mse", Doc: "mean squared error of prediction and target", MinOperands: 2, MaxOperands: 2, Traits: Pure | Loss,
		Attrs: []AttrSpec{lossReduction}, Infer: inferMSE},

	// Collectives over a mesh axis; parts is the size of that axis.
	{Name: "all_reduce", Doc: "reduce over the ranks of a mesh axis; every rank gets the result", MinOperands: 1, MaxOperands: 1,
		Traits: Collective, Infer: inferUnary,
		Attrs: []AttrSpec{collectiveAxis, {Name: "op", Kind: KindEnum, Optional: true, Enum: reductionKinds}}},
	{Name: "all_gather", Doc: "concatenate the shards of a mesh axis along dim; grad = reduce_scatter (the default: the gradient arriving is a partial sum over the axis, as from a tensor-parallel region) or slice (it is whole on every rank, as from computation every rank repeats)",
		MinOperands: 1, MaxOperands: 1, Traits: Collective, Infer: inferGatherScatterDim(true),
		Attrs: append(slices.Clone(gatherDimAttrs), AttrSpec{Name: "grad", Kind: KindEnum, Optional: true, Enum: []string{"reduce_scatter", "slice"}})},
	{Name: "reduce_scatter", Doc: "sum over a mesh axis, each rank keeping its slice of dim", MinOperands: 1, MaxOperands: 1,
		Traits: Collective, Attrs: gatherDimAttrs, Infer: inferGatherScatterDim(false)},
	{Name: "copy_to_axis", Doc: "identity on a value replicated over a mesh axis, entering a region split over that axis; its gradient is an all_reduce (Megatron's f operator)",
		MinOperands: 1, MaxOperands: 1, Traits: Collective, Infer: inferUnary, Attrs: []AttrSpec{collectiveAxis}},
	{Name: "axis_index", Doc: "this rank's coordinate on a mesh axis, an i64 scalar (as jax.lax.axis_index): the offset of the rank's block of a split tensor",
		MinOperands: 0, MaxOperands: 0, Traits: Collective, Infer: inferAxisIndex, Attrs: []AttrSpec{collectiveAxis}},
	{Name: "collective_broadcast", Doc: "copy the root rank's value to every rank of a mesh axis (named as XLA's CollectiveBroadcast, since `broadcast` is numpy's broadcast_to)",
		MinOperands: 1, MaxOperands: 1, Traits: Collective, Infer: inferUnary,
		Attrs: []AttrSpec{collectiveAxis, {Name: "root", Kind: KindInt, Optional: true}}},

	// A rank's program (passes' rank-programs): one run of a per-stage function.
	{Name: "run", Doc: "run the function named func for one micro-batch (token slice slice of it, in a token-sliced module): operands are its port arguments, results its port results, in order",
		MinOperands: 0, MaxOperands: -1, Traits: Calls, Infer: inferNone,
		Attrs: []AttrSpec{{Name: "func", Kind: KindString}, {Name: "microbatch", Kind: KindInt}, {Name: "slice", Kind: KindInt, Optional: true}}},

	// Point-to-point.
	{Name: "send", Doc: "send a value to a peer (pipeline stage or rank) with a tag; no result", MinOperands: 1, MaxOperands: 1,
		Traits: P2P, Attrs: p2pAttrs, Infer: inferNone},
	{Name: "recv", Doc: "receive a value of the given type from a peer with a tag", MinOperands: 0, MaxOperands: 0,
		Traits: P2P, Attrs: append([]AttrSpec{{Name: "type", Kind: KindType}}, p2pAttrs...), Infer: inferRecv},
}
