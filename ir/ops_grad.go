package ir

import "slices"

// gradOps are fused gradient kernels emitted by the autodiff pass (for example the backward of
// softmax or layer_norm), where expressing the gradient with core ops would cost extra passes
// over memory. Each Doc is the kernel's specification: operands in order, attributes, the
// formula, and the result. "dy" is always the gradient of the forward op's result, "dx" the
// gradient of its input; every operand and result shares one floating-point dtype unless said
// otherwise, and every op is pure, so cse and dce treat them like any other op. Inference is in
// infer_grad.go.
var gradOps = []OpDef{
	elementwiseGrad("relu_grad",
		"Backward of relu. Operands x (relu's input, or its result: relu(x) > 0 exactly where x > 0) and dy, "+
			"of one floating-point type; dx = dy where x > 0, else 0 (the gradient at x = 0 is 0, as in PyTorch). "+
			"Autodiff passes the result, so that relu's input need not be kept for the backward and a "+
			"convolution's relu can run as its epilogue."),
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

	// Gradients of the nn ops (ops_nn.go). The input gradients (phase bwd_in) and the weight
	// gradients (bwd_w) are separate ops, each recomputing what it needs from the forward's
	// operands. conv's input gradient is conv_transpose and conv_transpose's is conv (each is the
	// other's adjoint), the constant-mode pad's is pad with negated pads, and the bias gradients
	// are reduce_sum: those need no op of their own.
	{Name: "conv_grad_filter", MinOperands: 2, MaxOperands: 2, Traits: Pure, Infer: inferConvGradFilter,
		Attrs: append(convAttrs(false), AttrSpec{Name: "filter_shape", Kind: KindInts}),
		Doc: "Backward of conv with respect to its weight (phase bwd_w). Operands x (conv's input [N, C, D1..Dk]) and " +
			"dy (the gradient of conv's result, [N, M, O1..Ok]), of one floating-point type; strides, pads, dilations " +
			"and groups exactly as on the forward conv (same defaults) and filter_shape the weight's shape " +
			"[M, C/groups, K1..Kk]; dy must have the shape conv gives for x and a weight of that shape. " +
			"dw[m, c, k…] = Σ_{n, o…} dy[n, m, o…]·x[n, g·C/groups + c, o·stride + k·dilation − pad_begin] with " +
			"g = m / (M/groups), positions outside x reading as zero: summed over the batch and every output " +
			"position. The result has type x.dtype[filter_shape]. It is also conv_transpose's weight gradient: " +
			"conv_transpose(x, w) is the adjoint of the conv that maps its result's shape back to x's with the same " +
			"attributes, so its dw is conv_grad_filter(dy, x) with filter_shape = w's shape."},
	{Name: "max_pool_grad", MinOperands: 2, MaxOperands: 2, Traits: Pure, Attrs: poolAttrs(false), Infer: inferMaxPoolGrad,
		Doc: "Backward of max_pool (phase bwd_in). Operands x (max_pool's input [N, C, D1..Dk]) and dy (the gradient " +
			"of its result), of one floating-point type; kernel, strides, pads, dilations and ceil_mode exactly as on " +
			"the forward op. Each window's maximum is recomputed from x as max_pool defines it (positions in the " +
			"padding never count) and dy of that output goes to the window's first position, in row-major order " +
			"of the kernel offsets, that holds the maximum (the first NaN when the maximum is NaN; nowhere for a " +
			"window with no position inside x); the contributions of overlapping windows to one position are " +
			"summed. The result has x's type. Recomputing the argmax keeps the forward free of an index output."},
	{Name: "avg_pool_grad", MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferAvgPoolGrad,
		Attrs: append(poolAttrs(true), AttrSpec{Name: "input_shape", Kind: KindInts}),
		Doc: "Backward of avg_pool (phase bwd_in). Operand dy (the gradient of avg_pool's result, floating point); " +
			"kernel, strides, pads, dilations, ceil_mode and count_include_pad exactly as on the forward op and " +
			"input_shape the shape of its operand. Each dy element is divided by its window's divisor (as avg_pool " +
			"defines it: the positions inside x, or with count_include_pad also those in the explicit pads) and " +
			"added to every position of the window inside x (a window with divisor 0 adds nothing). The result " +
			"has type dy.dtype[input_shape]; global average pooling (kernel = the spatial dims) is the same op."},
	{Name: "batch_norm_grad_input", MinOperands: 3, MaxOperands: 3, Traits: Pure, Infer: inferBatchNormGradInput,
		Attrs: []AttrSpec{{Name: "eps", Kind: KindFloat, Optional: true}},
		Doc: "Backward of batch_norm (the inference form) with respect to x (phase bwd_in). Operands dy (the gradient " +
			"of batch_norm's result, [N, C, …]), scale [C] and var [C] (batch_norm's operands), of one floating-point " +
			"type; eps as on the forward op (default 1e-5). dx[n, c, …] = dy[n, c, …]·scale[c]/√(var[c] + eps). The " +
			"result has dy's type. mean and var are constants of the inference form: no gradient flows to them."},
	{Name: "batch_norm_grad_params", MinOperands: 4, MaxOperands: 4, Traits: Pure, Infer: inferBatchNormGradParams,
		Attrs: []AttrSpec{{Name: "eps", Kind: KindFloat, Optional: true}},
		Doc: "Backward of batch_norm (the inference form) with respect to scale and bias (phase bwd_w). Operands x " +
			"(batch_norm's input [N, C, …]), dy (x's type), mean [C] and var [C], of one floating-point type; eps as " +
			"on the forward op (default 1e-5). Two results of type x.dtype[C]: dscale[c] = Σ dy[n, c, …]·(x[n, c, …] " +
			"− mean[c])/√(var[c] + eps) and dbias[c] = Σ dy[n, c, …], summed over the batch and the spatial " +
			"positions in float64, in increasing order of n and then position."},
	{Name: "instance_norm_grad_input", MinOperands: 3, MaxOperands: 3, Traits: Pure, Infer: inferInstanceNormGradInput,
		Attrs: []AttrSpec{{Name: "eps", Kind: KindFloat, Optional: true}},
		Doc: "Backward of instance_norm with respect to x (phase bwd_in). Operands x (instance_norm's input [N, C, " +
			"D1..]), dy (x's type) and scale [C], of one floating-point type; eps as on the forward op (default " +
			"1e-5). The statistics are recomputed per instance (n, c) over its S spatial elements: μ = mean(x), " +
			"σ² = mean((x − μ)²) (biased), r = 1/√(σ² + eps), x̂ = (x − μ)·r; with g = dy·scale[c], dx = r·(g − mean(g) " +
			"− x̂·mean(g·x̂)), the means over the instance's S elements. The result has x's type; the bias does " +
			"not enter dx."},
	{Name: "instance_norm_grad_params", MinOperands: 2, MaxOperands: 2, Traits: Pure, Infer: inferInstanceNormGradParams,
		Attrs: []AttrSpec{{Name: "eps", Kind: KindFloat, Optional: true}},
		Doc: "Backward of instance_norm with respect to scale and bias (phase bwd_w). Operands x (instance_norm's " +
			"input [N, C, D1..]) and dy (x's type); eps as on the forward op. Recomputes x̂ per instance as " +
			"instance_norm_grad_input does (independently, so the input and weight gradients can run at different " +
			"times) and returns two results of type x.dtype[C]: dscale[c] = Σ dy[n, c, …]·x̂[n, c, …] and " +
			"dbias[c] = Σ dy[n, c, …], summed over the batch and the spatial positions in float64, in increasing " +
			"order of n and then position."},
	{Name: "lrn_grad", MinOperands: 2, MaxOperands: 2, Traits: Pure, Infer: inferLRNGrad,
		Attrs: []AttrSpec{{Name: "size", Kind: KindInt}, {Name: "alpha", Kind: KindFloat, Optional: true},
			{Name: "beta", Kind: KindFloat, Optional: true}, {Name: "bias", Kind: KindFloat, Optional: true}},
		Doc: "Backward of lrn (phase bwd_in). Operands x (lrn's input [N, C, …]) and dy, of one floating-point type; " +
			"size, alpha, beta and bias exactly as on the forward op (same defaults). With before = floor((size−1)/2), " +
			"after = ceil((size−1)/2), the forward's denominator base D[n, c, …] = bias + alpha/size·Σ x[n, j, …]² over " +
			"j from max(0, c − before) to min(C−1, c + after), and t = dy·x·D^(−beta−1) (elementwise): " +
			"dx[n, i, …] = dy[n, i, …]·D[n, i, …]^(−beta) − (2·alpha·beta/size)·x[n, i, …]·Σ t[n, c, …] over c from " +
			"max(0, i − after) to min(C−1, i + before) (the channels whose window holds i). The result has x's type."},
	{Name: "pad_grad", MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferPadGrad,
		Attrs: []AttrSpec{{Name: "pads", Kind: KindInts},
			{Name: "mode", Kind: KindEnum, Optional: true, Enum: []string{"constant", "reflect", "edge", "wrap"}}},
		Doc: "Backward of pad with respect to its operand (the adjoint of the copy; phase bwd_in). Operand dy (the " +
			"gradient of pad's result, floating point); pads and mode exactly as on the forward op (its value does " +
			"not matter). The operand's shape is dy.shape[i] − b_i − e_i per dim. Starting from zeros, every " +
			"position of pad's result that copies an operand element — the interior for every mode; for reflect, " +
			"edge and wrap also the padding, mapped to its source element as pad defines — adds its dy to that " +
			"element; positions filled with the constant and positions cropped away by negative pads add or " +
			"receive nothing. The result has type dy.dtype[the operand's shape]. The additions run one dim at a " +
			"time (pad is separable), in a fixed order."},
	{Name: "resize_grad", MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferResizeGrad,
		Attrs: append(opAttrSpecs(nnOps, "resize"), AttrSpec{Name: "input_shape", Kind: KindInts}),
		Doc: "Backward of resize with respect to its operand (the adjoint of the resampling; phase bwd_in). Operand dy " +
			"(the gradient of resize's result, floating point); sizes, scales, mode, coordinate_transformation_mode, " +
			"nearest_mode, cubic_coeff_a and exclude_outside exactly as on the forward op and input_shape the shape " +
			"of its operand. resize computes every output element as Σ_t w_t·x[i_t] over the source positions i_t " +
			"and weights w_t its Doc defines (per-dim tables combined as products; nearest: one position, weight " +
			"1); starting from zeros, resize_grad adds w_t·dy[o] to dx[i_t] for every output o and tap t. The result " +
			"has type dy.dtype[input_shape]."},
	{Name: "gather_elements_grad", MinOperands: 2, MaxOperands: 2, Traits: Pure, Infer: inferGatherElementsGrad,
		Attrs: []AttrSpec{{Name: "axis", Kind: KindInt}, {Name: "shape", Kind: KindInts}},
		Doc: "Backward of gather_elements with respect to its data: a scatter-add into zeros. Operands indices " +
			"(integers, gather_elements' indices) and dy (the gradient of its result: floating point, indices' " +
			"shape); axis is gather_elements' axis normalised to [0, rank) and shape the data's shape (indices' rank; " +
			"every dim but axis at least indices' dim). The result has type dy.dtype[shape]: zeros, then for every " +
			"position p of indices, ddata[p with dim axis replaced by idx(p)] += dy[p], where idx(p) = indices[p], " +
			"plus shape[axis] when negative; several positions landing on one element add up in increasing order " +
			"along axis, so the sum is deterministic. An index outside [−shape[axis], shape[axis]) is a run-time " +
			"error."},
	{Name: "reduce_min_grad", MinOperands: 3, MaxOperands: 3, Traits: Pure, Attrs: reduceAttrs, Infer: inferReduceMaxGrad,
		Doc: "Backward of reduce_min. Operands x (reduce_min's input), y (its result) and dy (y's gradient); axes " +
			"and keepdims as on the forward op. The result has x's type: zeros except that, in each group of elements " +
			"reduced to one y element, the first element in row-major order with x = y receives dy (ties go to the " +
			"lowest index, so exactly one element per group is nonzero)."},
	{Name: "reduce_prod_grad", MinOperands: 2, MaxOperands: 2, Traits: Pure, Attrs: reduceAttrs, Infer: inferReduceProdGrad,
		Doc: "Backward of reduce_prod. Operands x (reduce_prod's input, floating point) and dy (the gradient of its " +
			"result, of the reduced type); axes and keepdims as on the forward op. Every element of x receives the " +
			"dy of its group times the product of the group's other elements, computed as that product (prefix " +
			"and suffix products in float64), not as y/x, so that zeros in x give exact gradients. The result has " +
			"x's type."},
	elementwiseGradAttrs("elu_grad",
		"Backward of elu. Operands x (elu's input) and dy, of one floating-point type; alpha as on the forward op "+
			"(default 1). dx = dy where x > 0, else dy·alpha·exp(x).", "alpha"),
	elementwiseGradAttrs("selu_grad",
		"Backward of selu. Operands x (selu's input) and dy, of one floating-point type; alpha and gamma as on the "+
			"forward op (same defaults). dx = dy·gamma where x > 0, else dy·gamma·alpha·exp(x).", "alpha", "gamma"),
	elementwiseGradAttrs("leaky_relu_grad",
		"Backward of leaky_relu. Operands x (leaky_relu's input) and dy, of one floating-point type; alpha as on "+
			"the forward op (default 0.01). dx = dy where x > 0, else dy·alpha (the slope alpha at x = 0, as in "+
			"PyTorch).", "alpha"),
	elementwiseGrad("softplus_grad",
		"Backward of softplus. Operands x (softplus's input) and dy, of one floating-point type; "+
			"dx = dy·sigmoid(x) = dy/(1 + exp(−x))."),
	elementwiseGradAttrs("hard_sigmoid_grad",
		"Backward of hard_sigmoid. Operands x (hard_sigmoid's input) and dy, of one floating-point type; alpha and "+
			"beta as on the forward op (defaults 0.2 and 0.5). dx = dy·alpha where 0 < alpha·x + beta < 1 (the "+
			"linear part), else 0.", "alpha", "beta"),
	elementwiseGradAttrs("shrink_grad",
		"Backward of shrink. Operands x (shrink's input) and dy, of one floating-point type; lambd as on the "+
			"forward op (default 0.5; shrink's bias does not enter). dx = dy where x > lambd or x < −lambd, else 0.",
		"lambd"),
}

func elementwiseGrad(name, doc string) OpDef {
	return OpDef{Name: name, Doc: doc, MinOperands: 2, MaxOperands: 2, Traits: Pure | Elementwise, Infer: inferGradElementwise}
}

// elementwiseGradAttrs is elementwiseGrad with optional float attributes (the forward op's).
func elementwiseGradAttrs(name, doc string, floats ...string) OpDef {
	d := elementwiseGrad(name, doc)
	for _, f := range floats {
		d.Attrs = append(d.Attrs, AttrSpec{Name: f, Kind: KindFloat, Optional: true})
	}
	return d
}

// opAttrSpecs returns a copy of the attribute specs of the named row of a table (for a gradient
// op that takes its forward op's attributes).
func opAttrSpecs(table []OpDef, name string) []AttrSpec {
	for _, d := range table {
		if d.Name == name {
			return slices.Clone(d.Attrs)
		}
	}
	panic("ir: no op " + name)
}
