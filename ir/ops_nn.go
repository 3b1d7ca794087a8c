package ir

// nnOps are the ops ONNX models need beyond the transformer core: convolutions, pooling,
// normalisations, padding, resizing and the rest of the model zoo's vocabulary.
//
// Layout conventions shared by the rows below (they are ONNX's):
//   - Convolution and pooling operands are channels-first, x: [N, C, D1, …, Dk] with k >= 1
//     spatial dims.
//   - pads lists the padding at the beginning of every spatial dim, then at the end:
//     [b1, …, bk, e1, …, ek]. Padded positions hold zero for conv, are ignored by max_pool, and
//     are counted by avg_pool only with count_include_pad. ONNX's auto_pad is resolved by the
//     importer into explicit pads, so the IR never sees it.
//   - strides and dilations have one entry per spatial dim and default to 1; pads default to 0.
//   - The output extent of a window op along a spatial dim of size D with kernel K, stride S,
//     dilation L and pads b, e is floor((D + b + e − ((K−1)·L + 1)) / S) + 1, or with
//     ceil_mode the ceiling, except that a window that would start at or after D + b (entirely
//     in the end padding) is dropped (ONNX's and PyTorch's rule).
var nnOps = []OpDef{
	// Convolutions.
	{Name: "conv", Doc: "ONNX Conv: N-d cross-correlation. Operands x [N, C, D1..Dk], w [M, C/groups, K1..Kk] [, bias [M]]; " +
		"y[n, m, o…] = bias[m] + Σ_{c, k…} x[n, g·C/groups + c, o·stride + k·dilation − pad_begin] · w[m, c, k…] where g = m / (M/groups) " +
		"and positions outside x read as zero. Result [N, M, O1..Ok] with the window extent rule of this table.",
		MinOperands: 2, MaxOperands: 3, Traits: Pure, Attrs: convAttrs(false), Infer: inferConv},
	{Name: "conv_transpose", Doc: "ONNX ConvTranspose (the gradient of conv with respect to its input). Operands x [N, C, D1..Dk], " +
		"w [C, M/groups, K1..Kk] [, bias [M]]; every input element x[n, c, i…] adds x·w[c, m', k…] to the full output position " +
		"i·stride + k·dilation (m = g·M/groups + m', g = c / (C/groups)); the full output has extent stride·(D−1) + output_padding + (K−1)·dilation + 1 " +
		"and the result drops pad_begin positions at the start and pad_end at the end of each spatial dim, then adds bias[m].",
		MinOperands: 2, MaxOperands: 3, Traits: Pure, Attrs: convAttrs(true), Infer: inferConvTranspose},

	// Pooling (global pooling is imported with kernel = the spatial dims).
	{Name: "max_pool", Doc: "ONNX MaxPool: y[n, c, o…] = max over kernel positions k… of x[n, c, o·stride + k·dilation − pad_begin], " +
		"skipping positions in the padding. Operand x [N, C, D1..Dk]; result [N, C, O1..Ok].",
		MinOperands: 1, MaxOperands: 1, Traits: Pure, Attrs: poolAttrs(false), Infer: inferPool},
	{Name: "avg_pool", Doc: "ONNX AveragePool: the mean of the window positions x[n, c, o·stride + k·dilation − pad_begin]. " +
		"The divisor counts the positions inside x, or with count_include_pad also the positions in the explicit pads " +
		"(but never positions past the end padding that ceil_mode adds). Operand x [N, C, D1..Dk]; result [N, C, O1..Ok].",
		MinOperands: 1, MaxOperands: 1, Traits: Pure, Attrs: poolAttrs(true), Infer: inferPool},

	// Normalisations (inference form).
	{Name: "batch_norm", Doc: "ONNX BatchNormalization in inference mode: y = (x − mean[c]) / sqrt(var[c] + eps) · scale[c] + bias[c] " +
		"over the channel dim 1 of x [N, C, …]. Operands x, scale [C], bias [C], mean [C], var [C]; eps defaults to 1e-5.",
		MinOperands: 5, MaxOperands: 5, Traits: Pure, Attrs: []AttrSpec{{Name: "eps", Kind: KindFloat, Optional: true}}, Infer: inferBatchNorm},
	{Name: "instance_norm", Doc: "ONNX InstanceNormalization: for each n and channel c, y = (x − μ) / sqrt(σ² + eps) · scale[c] + bias[c] where μ and σ² " +
		"(biased) are the mean and variance of x[n, c, …] over the spatial dims. Operands x [N, C, D1..], scale [C], bias [C]; eps defaults to 1e-5.",
		MinOperands: 3, MaxOperands: 3, Traits: Pure, Attrs: []AttrSpec{{Name: "eps", Kind: KindFloat, Optional: true}}, Infer: inferInstanceNorm},
	{Name: "lrn", Doc: "ONNX LRN, local response normalisation across channels of x [N, C, …]: y = x / (bias + alpha/size · Σ x[n, j, …]²)^beta " +
		"with j from max(0, c − floor((size−1)/2)) to min(C−1, c + ceil((size−1)/2)); alpha 1e-4, beta 0.75, bias 1 by default.",
		MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferLRN,
		Attrs: []AttrSpec{{Name: "size", Kind: KindInt}, {Name: "alpha", Kind: KindFloat, Optional: true},
			{Name: "beta", Kind: KindFloat, Optional: true}, {Name: "bias", Kind: KindFloat, Optional: true}}},

	// Data movement.
	{Name: "pad", Doc: "ONNX Pad with explicit per-dim amounts: pads = [b0, …, b(r−1), e0, …, e(r−1)] adds b_i elements before and e_i after dim i " +
		"(a negative amount crops). mode constant (default) fills with value (default 0); reflect mirrors without repeating the edge " +
		"(needs pad < dim); edge repeats the edge element; wrap takes elements from the opposite end (circular).",
		MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferPad,
		Attrs: []AttrSpec{{Name: "pads", Kind: KindInts}, {Name: "value", Kind: KindFloat, Optional: true},
			{Name: "mode", Kind: KindEnum, Optional: true, Enum: []string{"constant", "reflect", "edge", "wrap"}}}},
	{Name: "resize", Doc: "ONNX Resize (opset 11+ semantics) to the static output shape sizes (same rank as x). For each dim, an output index o maps " +
		"to an input coordinate by coordinate_transformation_mode with scale s = scales[i] when given, else sizes[i]/in[i]: " +
		"half_pixel (default) (o+0.5)/s−0.5; pytorch_half_pixel the same but 0 when the output extent is 1; align_corners " +
		"o·(in−1)/(out−1) (0 when out = 1); asymmetric o/s; tf_half_pixel_for_nn (o+0.5)/s; half_pixel_symmetric " +
		"with an offset centring the sampled region. mode nearest (default) picks the input index by nearest_mode " +
		"(round_prefer_floor default, round_prefer_ceil, floor, ceil) clamped into range; linear interpolates (multi-linearly) between " +
		"the two neighbours clamped to the edge; cubic uses Keys' cubic with coefficient cubic_coeff_a (default −0.75) over 4 neighbours, " +
		"edge-clamped, or with exclude_outside dropping outside neighbours and renormalising the weights.",
		MinOperands: 1, MaxOperands: 1, Traits: Pure, Infer: inferResize,
		Attrs: []AttrSpec{{Name: "sizes", Kind: KindInts}, {Name: "scales", Kind: KindFloats, Optional: true},
			{Name: "mode", Kind: KindEnum, Optional: true, Enum: []string{"nearest", "linear", "cubic"}},
			{Name: "coordinate_transformation_mode", Kind: KindEnum, Optional: true, Enum: []string{"half_pixel", "half_pixel_symmetric",
				"pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"}},
			{Name: "nearest_mode", Kind: KindEnum, Optional: true, Enum: []string{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}},
			{Name: "cubic_coeff_a", Kind: KindFloat, Optional: true}, {Name: "exclude_outside", Kind: KindBool, Optional: true}}},
	{Name: "gather_elements", Doc: "ONNX GatherElements: y has the shape of indices, y[i…] = x[i… with dim axis replaced by indices[i…]] " +
		"(negative indices count from the end); x and indices have equal rank.",
		MinOperands: 2, MaxOperands: 2, Traits: Pure, Attrs: []AttrSpec{axisAttr(true)}, Infer: inferGatherElements},

	// Elementwise extras (ONNX's activation functions), float operands.
	unaryAttrOp("elu", "x if x > 0 else alpha·(exp(x) − 1); alpha defaults to 1", inferFloatUnary, "alpha"),
	unaryAttrOp("selu", "gamma·x if x > 0 else gamma·alpha·(exp(x) − 1); alpha 1.67326319217681884765625 and gamma 1.05070102214813232421875 by default", inferFloatUnary, "alpha", "gamma"),
	unaryAttrOp("leaky_relu", "x if x >= 0 else alpha·x; alpha defaults to 0.01", inferFloatUnary, "alpha"),
	unaryOp("softplus", "log(exp(x) + 1)", inferFloatUnary),
	unaryAttrOp("hard_sigmoid", "max(0, min(1, alpha·x + beta)); alpha 0.2 and beta 0.5 by default", inferFloatUnary, "alpha", "beta"),
	unaryAttrOp("shrink", "x − bias if x > lambd, x + bias if x < −lambd, else 0; bias 0 and lambd 0.5 by default", inferNumericUnary, "bias", "lambd"),
	unaryOp("sign", "−1, 0 or 1 by the sign of x (0 for 0; NaN stays NaN)", inferNumericUnary),
	unaryOp("floor", "round toward −∞", inferFloatUnary),
	unaryOp("ceil", "round toward +∞", inferFloatUnary),
	unaryOp("round", "round to the nearest integer, halves to even", inferFloatUnary),

	// Reductions beyond the core (axes default all; keepdims default false).
	reduction("reduce_min", "minimum over axes (default all)"),
	reduction("reduce_prod", "product over axes (default all)"),
	reduction("reduce_log_sum_exp", "log(Σ exp(x)) over axes (default all), computed stably as m + log(Σ exp(x − m)) with m the maximum"),
	{Name: "arg_max", Doc: "index (i64) of the maximum along axis (default 0), the first occurrence unless select_last_index; keepdims keeps the axis as size 1 (default false)",
		MinOperands: 1, MaxOperands: 1, Traits: Pure, Attrs: argAttrs, Infer: inferArg},
	{Name: "arg_min", Doc: "index (i64) of the minimum along axis (default 0), the first occurrence unless select_last_index; keepdims keeps the axis as size 1 (default false)",
		MinOperands: 1, MaxOperands: 1, Traits: Pure, Attrs: argAttrs, Infer: inferArg},
}

var argAttrs = []AttrSpec{axisAttr(true), {Name: "keepdims", Kind: KindBool, Optional: true}, {Name: "select_last_index", Kind: KindBool, Optional: true}}

func unaryAttrOp(name, doc string, infer InferFunc, floats ...string) OpDef {
	d := unaryOp(name, doc, infer)
	for _, f := range floats {
		d.Attrs = append(d.Attrs, AttrSpec{Name: f, Kind: KindFloat, Optional: true})
	}
	return d
}

func convAttrs(transpose bool) []AttrSpec {
	as := []AttrSpec{{Name: "strides", Kind: KindInts, Optional: true}, {Name: "pads", Kind: KindInts, Optional: true},
		{Name: "dilations", Kind: KindInts, Optional: true}, {Name: "groups", Kind: KindInt, Optional: true}}
	if transpose {
		as = append(as, AttrSpec{Name: "output_padding", Kind: KindInts, Optional: true})
	}
	return as
}

func poolAttrs(avg bool) []AttrSpec {
	as := []AttrSpec{{Name: "kernel", Kind: KindInts}, {Name: "strides", Kind: KindInts, Optional: true},
		{Name: "pads", Kind: KindInts, Optional: true}, {Name: "dilations", Kind: KindInts, Optional: true},
		{Name: "ceil_mode", Kind: KindBool, Optional: true}}
	if avg {
		as = append(as, AttrSpec{Name: "count_include_pad", Kind: KindBool, Optional: true})
	}
	return as
}
