package ir

// gradOps are fused gradient kernels emitted by the autodiff pass (for example the backward of
// softmax or layer_norm), where expressing the gradient with core ops would cost extra passes
// over memory. Each Doc is the kernel's specification: operands in order, attributes, the
// formula, and the result. "dy" is always the gradient of the forward op's result, "dx" the
// gradient of its input; every operand and result shares one floating-point dtype unless said
// otherwise, and every op is pure, so cse and dce treat them like any other op. Inference is in
// infer_grad.go.
var gradOps = []OpDef{
	elementwiseGrad("relu_grad",
		"Backward of relu. Operands x (relu's input) and dy, of one floating-point type; "+
			"dx = dy where x > 0, else 0 (the gradient at x = 0 is 0, as in PyTorch)."),
	{Name: "gelu_grad", MinOperands: 2, MaxOperands: 2, Traits: Pure | Elementwise, Infer: inferGradElementwise,
		Attrs: []AttrSpec{{Name: "approximate", Kind: KindEnum, Optional: true, Enum: []string{"none", "tanh"}}},
		Doc: "Backward of gelu. Operands x (gelu's input) and dy, of one floating-point type; approximate as on the " +
			"forward op. none: dx = dy·(Φ(x) + x·φ(x)) with Φ(x) = (1 + erf(x/√2))/2 and φ(x) = exp(−x²/2)/√(2π). " +
			"tanh: with k = √(2/π), u = k·(x + 0.044715·x³) and t = tanh(u), " +
			"dx = dy·(0.5·(1 + t) + 0.5·x·(1 − t²)·k·(1 + 3·0.044715·x²))."},
	elementwiseGrad("silu_grad",
		"Backward of silu. Operands x (silu's input) and dy, of one floating-point type; with s = sigmoid(x), "+
			"dx = dy·s·(1 + x·(1 − s))."),
	elementwiseGrad("sigmoid_grad",
		"Backward of sigmoid from its result. Operands y (sigmoid's result) and dy, of one floating-point type; "+
			"dx = dy·y·(1 − y)."),
	elementwiseGrad("tanh_grad",
		"Backward of tanh from its result. Operands y (tanh's result) and dy, of one floating-point type; "+
			"dx = dy·(1 − y²)."),
	{Name: "softmax_grad", MinOperands: 2, MaxOperands: 2, Traits: Pure, Attrs: []AttrSpec{axisAttr(true)}, Infer: inferAxisGrad,
		Doc: "Backward of softmax from its result. Operands y (softmax's result) and dy, of one floating-point type; " +
			"axis as on the forward op (default −1). dx = y·(dy − s) where s = Σ_axis dy·y is reduced over axis and " +
			"broadcast back along it (one pass to reduce, one to write per row)."},
	{Name: "log_softmax_grad", MinOperands: 2, MaxOperands: 2, Traits: Pure, Attrs: []AttrSpec{axisAttr(true)}, Infer: inferAxisGrad,
		Doc: "Backward of log_softmax from its result. Operands y (log_softmax's result) and dy, of one floating-point " +
			"type; axis as on the forward op (default −1). dx = dy − exp(y)·s where s = Σ_axis dy is reduced over axis " +
			"and broadcast back along it."},
	{Name: "layer_norm_grad_input", MinOperands: 2, MaxOperands: 3, Traits: Pure, Attrs: normAttrs, Infer: inferNormGradInput,
		Doc: "Backward of layer_norm with respect to x (the activation gradient, phase bwd_in). Operands x (layer_norm's " +
			"input), dy, and the scale when layer_norm has one (shape x.shape[axis:]); axis and eps exactly as on the " +
			"forward op (same defaults). The statistics are recomputed from x, over the normalised dims axis.. (n " +
			"elements per row): μ = mean(x), σ² = mean((x − μ)²) (biased), r = 1/√(σ² + eps), x̂ = (x − μ)·r. With " +
			"g = dy·scale (g = dy without a scale), dx = r·(g − mean(g) − x̂·mean(g·x̂)), means over the normalised dims. " +
			"The result has x's type. The bias does not enter dx."},
	{Name: "layer_norm_grad_params", MinOperands: 2, MaxOperands: 2, Traits: Pure, Attrs: normAttrs, Infer: inferNormGradParams(2),
		Doc: "Backward of layer_norm with respect to its scale and bias (weight gradients, phase bwd_w). Operands x " +
			"(layer_norm's input) and dy; axis and eps exactly as on the forward op. Recomputes x̂ = (x − μ)·r as in " +
			"layer_norm_grad_input (independently, so the input and weight gradients can run at different times) and " +
			"returns two results of shape x.shape[axis:]: dscale = Σ dy·x̂ and dbias = Σ dy, both summed over the " +
			"leading dims 0..axis−1 in increasing row order."},
	{Name: "rms_norm_grad_input", MinOperands: 2, MaxOperands: 3, Traits: Pure, Attrs: normAttrs, Infer: inferNormGradInput,
		Doc: "Backward of rms_norm with respect to x (phase bwd_in). Operands x (rms_norm's input), dy, and the scale " +
			"when rms_norm has one (shape x.shape[axis:]); axis and eps exactly as on the forward op. Per row of the " +
			"normalised dims axis..: r = 1/√(mean(x²) + eps), x̂ = x·r, g = dy·scale (or dy), " +
			"dx = r·(g − x̂·mean(g·x̂)). The result has x's type."},
	{Name: "rms_norm_grad_params", MinOperands: 2, MaxOperands: 2, Traits: Pure, Attrs: normAttrs, Infer: inferNormGradParams(1),
		Doc: "Backward of rms_norm with respect to its scale (phase bwd_w). Operands x (rms_norm's input) and dy; axis " +
			"and eps as on the forward op. Recomputes x̂ = x·r as in rms_norm_grad_input; the result, of shape " +
			"x.shape[axis:], is dscale = Σ dy·x̂ summed over the leading dims 0..axis−1 in increasing row order."},
	{Name: "cross_entropy_grad", MinOperands: 3, MaxOperands: 3, Traits: Pure, Infer: inferCrossEntropyGrad,
		Attrs: []AttrSpec{lossReduction, {Name: "ignore_index", Kind: KindInt, Optional: true}},
		Doc: "Backward of cross_entropy with respect to the logits. Operands logits [..., C] (floating point), labels " +
			"[...] (integers) and dloss (the gradient of cross_entropy's result: a scalar for reduction mean or sum, " +
			"labels' shape for none); reduction and ignore_index as on the forward op. For each row r: " +
			"dlogits[r, c] = w_r·(softmax(logits[r, :])[c] − [c = labels[r]]), with w_r = dloss/valid for mean (valid = " +
			"the number of rows whose label is not ignore_index, as the forward mean divides by), dloss for sum and " +
			"dloss[r] for none; rows whose label equals ignore_index get 0. A label outside [0, C) that is not " +
			"ignore_index is a run-time error. The result has the logits' type."},
	{Name: "mse_grad", MinOperands: 3, MaxOperands: 3, Traits: Pure, Infer: inferMSEGrad, Attrs: []AttrSpec{lossReduction},
		Doc: "Backward of mse with respect to the prediction. Operands pred, target (equal types) and dloss (a scalar " +
			"for reduction mean or sum, pred's shape for none); reduction as on the forward op. " +
			"dpred = 2·(pred − target)·w with w = dloss/N for mean (N = pred's element count), dloss for sum and dloss " +
			"elementwise for none. The gradient of target is the negation."},
	{Name: "gather_grad", MinOperands: 2, MaxOperands: 2, Traits: Pure, Infer: inferGatherGrad,
		Attrs: []AttrSpec{{Name: "axis", Kind: KindInt}, {Name: "dim", Kind: KindInt}},
		Doc: "Backward of gather with respect to the data: a scatter-add into zeros. Operands indices (integers, " +
			"gather's indices) and dy (gather's result gradient, shape data.shape[:axis] ++ indices.shape ++ " +
			"data.shape[axis+1:]); axis is gather's axis normalised to [0, rank of data) and dim is data.shape[axis]. " +
			"The result has data's shape (dy.shape[:axis] ++ [dim] ++ the rest) and dy's dtype: zeros, then for every " +
			"outer index o, every index position i of indices in row-major order and every inner index e, " +
			"ddata[o, idx(i), e] += dy[o, i, e], where idx(i) = indices[i], plus dim when negative. Repeated indices " +
			"(a token appearing twice) accumulate in increasing i, so the sum is deterministic; an index outside " +
			"[−dim, dim) is a run-time error."},
	{Name: "reduce_max_grad", MinOperands: 3, MaxOperands: 3, Traits: Pure, Attrs: reduceAttrs, Infer: inferReduceMaxGrad,
		Doc: "Backward of reduce_max. Operands x (reduce_max's input), y (its result) and dy (y's gradient); axes " +
			"and keepdims as on the forward op. The result has x's type: zeros except that, in each group of elements " +
			"reduced to one y element, the first element in row-major order with x = y receives dy (ties go to the " +
			"lowest index, so exactly one element per group is nonzero)."},
	{Name: "slice_grad", MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferSliceGrad,
		Attrs: []AttrSpec{{Name: "shape", Kind: KindInts}, {Name: "starts", Kind: KindInts}, {Name: "ends", Kind: KindInts},
			{Name: "axes", Kind: KindInts, Optional: true}, {Name: "steps", Kind: KindInts, Optional: true}},
		Doc: "Backward of slice: the transpose of the strided slice. Operand dy (slice's result gradient); shape is " +
			"the sliced operand's shape and starts, ends, axes, steps are slice's attributes. The result, of type " +
			"dy.dtype[shape], is zero except at the positions the slice reads, which receive the matching dy element " +
			"(a slice reads each position at most once, so there is no accumulation)."},
}

func elementwiseGrad(name, doc string) OpDef {
	return OpDef{Name: name, Doc: doc, MinOperands: 2, MaxOperands: 2, Traits: Pure | Elementwise, Infer: inferGradElementwise}
}
