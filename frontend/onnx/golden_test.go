package onnx

import (
	"testing"

	"ppc.dev/ppc/internal/filecheck"
	"ppc.dev/ppc/ir"
)

// FileCheck tests of the importer: each case builds a small ModelProto, imports it and matches
// the printed module (dense data above 16 elements elided) against CHECK lines.

type goldenCase struct {
	name   string
	model  func() *mb
	opts   Options
	checks string
}

// lnModel is PyTorch's LayerNorm decomposition over the last dim; tweak adjusts it.
func lnModel(exp float32, eps float32, extraOut bool) *mb {
	m := model(13).input("x", dtFloat, 2, 4, 8).
		init(f32n("ln.weight", 8)).init(f32n("ln.bias", 8)).
		constant("two", scalarF(exp)).constant("eps", scalarF(eps)).
		node("ReduceMean", "rm1", in("x"), in("mean"), aInts("axes", -1)).
		node("Sub", "sub", in("x", "mean"), in("d")).
		node("Pow", "pow", in("d", "two"), in("p")).
		node("ReduceMean", "rm2", in("p"), in("var"), aInts("axes", -1)).
		node("Add", "add_eps", in("var", "eps"), in("ve")).
		node("Sqrt", "sqrt", in("ve"), in("std")).
		node("Div", "div", in("d", "std"), in("n")).
		node("Mul", "mul_g", in("n", "ln.weight"), in("g")).
		node("Add", "add_b", in("g", "ln.bias"), in("y")).
		output("y")
	if extraOut {
		m.output("d")
	}
	return m
}

func geluErfModel(half float32) *mb {
	return model(13).input("x", dtFloat, 2, 8).
		constant("sqrt2", scalarF(1.4142135)).constant("one", scalarF(1)).constant("half", scalarF(half)).
		node("Div", "div", in("x", "sqrt2"), in("t")).
		node("Erf", "erf", in("t"), in("e")).
		node("Add", "add", in("e", "one"), in("a")).
		node("Mul", "mul1", in("x", "a"), in("m")).
		node("Mul", "mul2", in("m", "half"), in("y")).
		output("y")
}

var goldenCases = []goldenCase{
	{name: "layer_norm", model: func() *mb { return lnModel(2, 1e-5, false) }, checks: `
// CHECK: func @forward(%x: f32[2,4,8] {input, name = "x"}, %ln.weight: f32[8] {data = dense<f32[8]: [{{.*}}]>, param}, %ln.bias: f32[8] {data = {{.*}}, param}) -> (f32[2,4,8] {name = "y"})
// CHECK-NEXT: %y = layer_norm %x, %ln.weight, %ln.bias {eps = 9.999999747378752e-06} : f32[2,4,8]
// CHECK-NEXT: return %y
// CHECK-NOT: reduce_mean
`},
	{name: "layer_norm_near_miss_shared", model: func() *mb { return lnModel(2, 1e-5, true) }, checks: `
// An intermediate (x - mean) is also a graph output: the pattern is not raised.
// CHECK: reduce_mean %x
// CHECK: pow
// CHECK-NOT: layer_norm
`},
	{name: "layer_norm_near_miss_exponent", model: func() *mb { return lnModel(2.5, 1e-5, false) }, checks: `
// CHECK: pow
// CHECK-NOT: layer_norm
`},
	{name: "gelu_erf", model: func() *mb { return geluErfModel(0.5) }, checks: `
// CHECK: %y = gelu %x : f32[2,8]
// CHECK-NEXT: return %y
`},
	{name: "gelu_erf_half_first", model: func() *mb {
		return model(17).input("x", dtFloat, 2, 8).
			constant("inv", scalarF(0.70710677)).constant("one", scalarF(1)).constant("half", scalarF(0.5)).
			node("Mul", "h", in("x", "half"), in("h")).
			node("Mul", "t", in("x", "inv"), in("t")).
			node("Erf", "erf", in("t"), in("e")).
			node("Add", "add", in("one", "e"), in("a")).
			node("Mul", "y", in("h", "a"), in("y")).
			output("y")
	}, checks: `
// CHECK: %y = gelu %x : f32[2,8]
// CHECK-NOT: erf
`},
	{name: "gelu_erf_near_miss", model: func() *mb { return geluErfModel(0.6) }, checks: `
// CHECK: erf
// CHECK-NOT: gelu
`},
	{name: "gelu_tanh", model: func() *mb {
		return model(13).input("x", dtFloat, 2, 8).
			constant("three", scalarF(3)).constant("c", scalarF(0.044715)).constant("k", scalarF(0.7978845608)).
			constant("one", scalarF(1)).constant("half", scalarF(0.5)).
			node("Mul", "h", in("half", "x"), in("h")).
			node("Pow", "cube", in("x", "three"), in("x3")).
			node("Mul", "q", in("c", "x3"), in("q")).
			node("Add", "inner", in("x", "q"), in("inner")).
			node("Mul", "s", in("k", "inner"), in("s")).
			node("Tanh", "tanh", in("s"), in("t")).
			node("Add", "u", in("one", "t"), in("u")).
			node("Mul", "y", in("h", "u"), in("y")).
			output("y")
	}, checks: `
// CHECK: %y = gelu %x {approximate = tanh} : f32[2,8]
// CHECK-NOT: tanh %
`},
	{name: "matmul_bias", model: func() *mb {
		return model(13).input("x", dtFloat, 2, 3, 8).init(f32n("fc.weight", 8, 4)).init(f32n("fc.bias", 4)).
			node("MatMul", "mm", in("x", "fc.weight"), in("h")).
			node("Add", "add", in("h", "fc.bias"), in("y")).output("y")
	}, checks: `
// CHECK: %y = matmul %x, %fc.weight, %fc.bias : f32[2,3,4]
// CHECK-NOT: add
`},
	{name: "matmul_bias_near_miss", model: func() *mb {
		return model(13).input("x", dtFloat, 3, 8).init(f32n("fc.weight", 8, 4)).init(f32n("b2", 3, 4)).
			node("MatMul", "mm", in("x", "fc.weight"), in("h")).
			node("Add", "add", in("h", "b2"), in("y")).output("y").output("h")
	}, checks: `
// The product is also an output and the bias is not 1-D: nothing is raised.
// CHECK: %h = matmul %x, %fc.weight : f32[3,4]
// CHECK-NEXT: %y = add %h, %b2 : f32[3,4]
`},
	{name: "matmul_transpose", model: func() *mb {
		// A Linear exported without constant folding (weight [out, in], Transpose, MatMul,
		// Add), attention scores against a transposed key, and a Gemm whose transB meets a
		// Transpose (the flags cancel).
		return model(17).input("x", dtFloat, 2, 3, 8).input("k", dtFloat, 2, 4, 3, 8).input("x2", dtFloat, 3, 4).
			init(f32n("fc.weight", 4, 8)).init(f32n("fc.bias", 4)).init(f32n("w2", 4, 5)).
			node("Transpose", "wt", in("fc.weight"), in("wt"), aInts("perm", 1, 0)).
			node("MatMul", "mm", in("x", "wt"), in("h")).
			node("Add", "add", in("fc.bias", "h"), in("y")).
			node("Transpose", "kt", in("k"), in("kt"), aInts("perm", 0, 1, 3, 2)).
			node("MatMul", "scores", in("k", "kt"), in("s")).
			node("Transpose", "w2t", in("w2"), in("w2t"), aInts("perm", 1, 0)).
			node("Gemm", "fc2", in("x2", "w2t"), in("z"), aInt("transB", 1)).
			output("y").output("s").output("z")
	}, checks: `
// CHECK: %y = matmul %x, %fc.weight, %fc.bias {transpose_b = true} : f32[2,3,4]
// CHECK-NEXT: %s = matmul %k, %k {transpose_b = true} : f32[2,4,3,3]
// CHECK-NEXT: %z = matmul %x2, %w2 : f32[3,5]
// CHECK-NOT: transpose
`},
	{name: "matmul_transpose_near_miss", model: func() *mb {
		// The transposed weight has a second use, and a 3-D transpose moves a batch dim:
		// neither is folded.
		return model(17).input("x", dtFloat, 3, 8).input("a", dtFloat, 2, 3, 4).input("b", dtFloat, 3, 4, 2).
			init(f32n("w", 4, 8)).
			node("Transpose", "wt", in("w"), in("wt"), aInts("perm", 1, 0)).
			node("MatMul", "mm", in("x", "wt"), in("y")).
			node("Transpose", "at", in("a"), in("at"), aInts("perm", 1, 0, 2)).
			node("MatMul", "mm2", in("at", "b"), in("z")).
			output("y").output("wt").output("z")
	}, checks: `
// CHECK: %wt = transpose %w {perm = [1, 0]} : f32[8,4]
// CHECK-NEXT: %y = matmul %x, %wt : f32[3,4]
// CHECK-NEXT: %at = transpose %a {perm = [1, 0, 2]} : f32[3,2,4]
// CHECK-NEXT: %z = matmul %at, %b : f32[3,2,2]
`},
	{name: "gemm", model: func() *mb {
		return model(11).input("x", dtFloat, 2, 8).init(f32n("w", 4, 8)).init(f32n("b", 4)).init(f32n("w2", 4, 4)).
			node("Gemm", "fc", in("x", "w", "b"), in("y"), aInt("transB", 1)).
			node("Gemm", "fc2", in("y", "w2", "b"), in("z"), aInt("transB", 1), aFloat("alpha", 2), aFloat("beta", 0.5)).
			output("z")
	}, checks: `
// CHECK: %y = matmul %x, %w, %b {transpose_b = true} : f32[2,4]
// CHECK: [[P:%[0-9]+]] = matmul %y, %w2 {transpose_b = true} : f32[2,4]
// CHECK: mul [[P]], {{%[0-9]+}} : f32[2,4]
// CHECK: mul %b, {{%[0-9]+}} : f32[4]
// CHECK: %z = add
`},
	{name: "shape_folding", opts: Options{Dims: map[string]int{"batch": 4}}, model: func() *mb {
		// x.view(x.size(0), -1) as PyTorch exports it.
		return model(13).input("x", dtFloat, "batch", 16, 8).
			node("Shape", "shape", in("x"), in("s")).
			constant("zero", i64("", nil, 0)).
			node("Gather", "g", in("s", "zero"), in("b")).
			constant("ax0", i64("", []int64{1}, 0)).
			node("Unsqueeze", "u", in("b", "ax0"), in("bu")).
			constant("m1", i64("", []int64{1}, -1)).
			node("Concat", "cat", in("bu", "m1"), in("shape2"), aInt("axis", 0)).
			node("Reshape", "view", in("x", "shape2"), in("y")).
			output("y")
	}, checks: `
// CHECK: func @forward(%x: f32[4,16,8] {input, name = "x"}) -> (f32[4,128] {name = "y"})
// CHECK-NEXT: %y = reshape %x {shape = [4, -1]} : f32[4,128]
// CHECK-NEXT: return %y
`},
	{name: "microbatches", opts: Options{Dims: map[string]int{"batch": 8, "seq": 5}, Microbatches: 4}, model: func() *mb {
		return model(13).input("x", dtFloat, "batch", "seq", 6).input("mask", dtBool, "batch", "seq").
			node("Shape", "shape", in("x"), in("s")).
			node("ConstantOfShape", "zeros", in("s"), in("z")).
			node("Add", "add", in("x", "z"), in("y")).
			node("Not", "not", in("mask"), in("nm")).
			output("y").output("nm")
	}, checks: `
// CHECK: func @forward(%x: f32[2,5,6] {input, name = "x"}, %mask: bool[2,5] {input, name = "mask"})
// CHECK: constant {value = dense<f32[2,5,6]: 0>}
`},
	{name: "old_export_initializer_inputs", model: func() *mb {
		// Opset 6: initializers are also listed as graph inputs; Add broadcasts with axis.
		return model(6).input("0", dtFloat, 2, 3, 4).input("1", dtFloat, 3).init(f32("1", []int64{3}, 1, 2, 3)).
			node("Add", "", in("0", "1"), in("2"), aInt("broadcast", 1), aInt("axis", 1)).
			node("Softmax", "", in("2"), in("3"), aInt("axis", 1)).
			output("3")
	}, checks: `
// CHECK: func @forward(%arg0: f32[2,3,4] {input, name = "0"}, %arg1: f32[3] {data = dense<f32[3]: [1, 2, 3]>, name = "1", param}) -> (f32[2,3,4] {name = "3"})
// CHECK-NEXT: reshape %arg1 {shape = [3, 1]} : f32[3,1]
// CHECK-NEXT: add %arg0
// Opset < 13 Softmax flattens to 2-D from the axis.
// CHECK-NEXT: reshape {{%[0-9]+}} {shape = [2, 12]} : f32[2,12]
// CHECK-NEXT: softmax
// CHECK-NEXT: reshape {{%[0-9]+}} {shape = [2, 3, 4]} : f32[2,3,4]
`},
	{name: "slice_opset9", model: func() *mb {
		return model(9).input("x", dtFloat, 4, 6).
			node("Slice", "s", in("x"), in("y"), aInts("starts", 1, -3), aInts("ends", 1000, -1), aInts("axes", 0, 1)).output("y")
	}, checks: `
// CHECK: %y = slice %x {axes = [0, 1], ends = [4, 5], starts = [1, 3]} : f32[3,2]
`},
	{name: "slice_opset13", model: func() *mb {
		return model(13).input("x", dtFloat, 4, 6).
			init(i64("st", []int64{1}, -1)).init(i64("en", []int64{1}, math64Min)).init(i64("ax", []int64{1}, 1)).init(i64("sp", []int64{1}, -2)).
			node("Slice", "s", in("x", "st", "en", "ax", "sp"), in("y")).output("y")
	}, checks: `
// CHECK: %y = slice %x {axes = [1], ends = [-1], starts = [5], steps = [-2]} : f32[4,3]
// CHECK-NOT: constant
`},
	{name: "split_squeeze_opsets", model: func() *mb {
		return model(11).input("x", dtFloat, 1, 6).
			node("Split", "sp", in("x"), in("a", "b"), aInt("axis", 1), aInts("split", 2, 4)).
			node("Squeeze", "sq", in("a"), in("y"), aInts("axes", 0)).
			output("y").output("b")
	}, checks: `
// CHECK: %a, %b = split %x {axis = 1, sizes = [2, 4]} : f32[1,2], f32[1,4]
// CHECK-NEXT: %y = reshape %a {shape = [2]} : f32[2]
`},
	{name: "split_opset18", model: func() *mb {
		return model(18).input("x", dtFloat, 7, 2).init(i64("ax", []int64{1}, 1)).init(i64("ax0", []int64{1}, 0)).
			node("Split", "sp", in("x"), in("a", "b", "c"), aInt("num_outputs", 3)).
			node("Squeeze", "sq", in("c", "ax0"), in("d")).
			node("ReduceMean", "rm", in("a", "ax"), in("m"), aInt("keepdims", 0)).
			output("b").output("d").output("m")
	}, checks: `
// CHECK: %a, %b, %c = split %x {axis = 0, sizes = [3, 3, 1]} : f32[3,2], f32[3,2], f32[1,2]
// CHECK: %m = reduce_mean %a {axes = [1]} : f32[3]
`},
	{name: "reduce_opsets", model: func() *mb {
		return model(13).input("x", dtFloat, 2, 3, 4).init(i64("axes", []int64{2}, 0, -1)).
			node("ReduceSum", "rs", in("x", "axes"), in("s")).
			node("ReduceMax", "rmax", in("x"), in("mx"), aInts("axes", 1), aInt("keepdims", 0)).
			node("ReduceL2", "rl2", in("x"), in("l2"), aInts("axes", 1)).
			output("s").output("mx").output("l2")
	}, checks: `
// CHECK: %s = reduce_sum %x {axes = [0, 2], keepdims = true} : f32[1,3,1]
// CHECK: %mx = reduce_max %x {axes = [1]} : f32[2,4]
// CHECK: mul %x, %x
// CHECK: reduce_sum {{%[0-9]+}} {axes = [1], keepdims = true} : f32[2,1,4]
// CHECK: %l2 = sqrt
`},
	{name: "pad_opsets", model: func() *mb {
		return model(11).input("x", dtFloat, 1, 2, 4, 4).init(i64("pads", []int64{8}, 0, 0, 1, 2, 0, 0, 1, 2)).
			node("Pad", "p", in("x", "pads"), in("y"), aStr("mode", "reflect")).output("y")
	}, checks: `
// CHECK: %y = pad %x {mode = reflect, pads = [0, 0, 1, 2, 0, 0, 1, 2]} : f32[1,2,6,8]
`},
	{name: "pad_opset2_crop", model: func() *mb {
		return model(2).input("x", dtFloat, 3, 4).
			node("Pad", "p", in("x"), in("y"), aInts("pads", 1, -1, 0, 0), aFloat("value", 1.5)).output("y")
	}, checks: `
// CHECK: %y = pad %x {pads = [1, -1, 0, 0], value = 1.5} : f32[4,3]
`},
	{name: "clip_opsets", model: func() *mb {
		return model(6).input("x", dtFloat, 4).
			node("Clip", "c", in("x"), in("y"), aFloat("min", -1), aFloat("max", 1)).output("y")
	}, checks: `
// CHECK: max %x, {{%[0-9]+}} : f32[4]
// CHECK-NEXT: %y = min
`},
	{name: "clip_opset12", model: func() *mb {
		return model(12).input("x", dtFloat, 4).constant("lo", scalarF(0)).
			node("Clip", "c", in("x", "lo", ""), in("y")).output("y")
	}, checks: `
// CHECK: %y = max %x, %lo : f32[4]
// CHECK-NOT: min
`},
	{name: "resize_opsets", model: func() *mb {
		return model(13).input("x", dtFloat, 1, 1, 4, 4).init(i64("sizes", []int64{4}, 1, 1, 8, 6)).
			init(f32("scales10", []int64{4}, 1, 1, 2, 2)).
			node("Resize", "r", in("x", "", "", "sizes"), in("y"), aStr("mode", "linear")).
			node("Resize", "r2", in("x", "", "scales10"), in("z"), aStr("coordinate_transformation_mode", "asymmetric")).
			output("y").output("z")
	}, checks: `
// CHECK: %y = resize %x {coordinate_transformation_mode = half_pixel, mode = linear, sizes = [1, 1, 8, 6]} : f32[1,1,8,6]
// CHECK: %z = resize %x {coordinate_transformation_mode = asymmetric, nearest_mode = round_prefer_floor, scales = [1.0, 1.0, 2.0, 2.0], sizes = [1, 1, 8, 8]} : f32[1,1,8,8]
`},
	{name: "upsample_opset9", model: func() *mb {
		return model(9).input("x", dtFloat, 1, 1, 2, 2).constant("sc", f32("", []int64{4}, 1, 1, 2, 3)).
			node("Upsample", "u", in("x", "sc"), in("y")).output("y")
	}, checks: `
// CHECK: %y = resize %x {coordinate_transformation_mode = asymmetric, nearest_mode = floor, scales = [1.0, 1.0, 2.0, 3.0], sizes = [1, 1, 4, 6]} : f32[1,1,4,6]
`},
	{name: "softmax_opset13", model: func() *mb {
		return model(13).input("x", dtFloat, 2, 3, 4).
			node("Softmax", "s", in("x"), in("y"), aInt("axis", 1)).output("y")
	}, checks: `
// CHECK: %y = softmax %x {axis = 1} : f32[2,3,4]
`},
	{name: "conv_pool_bn", model: func() *mb {
		return model(13).input("x", dtFloat, 1, 3, 9, 9).init(f32n("conv.weight", 8, 3, 3, 3)).
			init(f32n("bn.weight", 8)).init(f32n("bn.bias", 8)).init(f32n("bn.running_mean", 8)).init(f32n("bn.running_var", 8)).
			node("Conv", "conv", in("x", "conv.weight"), in("c"), aStr("auto_pad", "SAME_UPPER"), aInts("strides", 2, 2)).
			node("BatchNormalization", "bn", in("c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"), in("n")).
			node("Relu", "relu", in("n"), in("r")).
			node("MaxPool", "pool", in("r"), in("p"), aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInt("ceil_mode", 1)).
			node("GlobalAveragePool", "gap", in("p"), in("g")).
			node("Flatten", "flat", in("g"), in("y")).
			output("y")
	}, checks: `
// Running statistics are constants, not parameters.
// CHECK: func @forward(%x: f32[1,3,9,9] {input, name = "x"}, %conv.weight: f32[8,3,3,3] {data = dense<f32[8,3,3,3]: elided>, param}, %bn.weight: f32[8] {{.*}}, %bn.bias: f32[8] {{.*}})
// CHECK: %c = conv %x, %conv.weight {pads = [1, 1, 1, 1], strides = [2, 2]} : f32[1,8,5,5]
// CHECK: %bn.running_mean = constant
// CHECK: %n = batch_norm %c, %bn.weight, %bn.bias, %bn.running_mean, %bn.running_var {eps = 9.999999747378752e-06} : f32[1,8,5,5]
// CHECK: %p = max_pool %r {ceil_mode = true, kernel = [3, 3], strides = [2, 2]} : f32[1,8,2,2]
// CHECK: %g = avg_pool %p {kernel = [2, 2]} : f32[1,8,1,1]
// CHECK: %y = reshape %g {shape = [1, 8]} : f32[1,8]
`},
	{name: "constants_fold", model: func() *mb {
		return model(13).input("x", dtInt64, 5).
			constant("start", i64("", nil, 2)).constant("limit", i64("", nil, 12)).constant("delta", i64("", nil, 2)).
			node("Range", "r", in("start", "limit", "delta"), in("rg")).
			node("Add", "a", in("x", "rg"), in("y")).
			node("Identity", "id", in("y"), in("y2")).
			node("Sum", "sum", in("y2", "x", "rg"), in("z")).
			output("z")
	}, checks: `
// CHECK: %rg = constant {value = dense<i64[5]: [2, 4, 6, 8, 10]>} : i64[5]
// CHECK-NEXT: %y = add %x, %rg : i64[5]
// CHECK-NEXT: add %y, %x
// CHECK-NEXT: %z = add {{%[0-9]+}}, %rg
`},
	{name: "cnn_zoo_ops", model: func() *mb {
		return model(12).input("x", dtFloat, 1, 4, 6, 6).init(f32n("wt", 4, 4, 3, 3)).
			init(f32n("in.s", 4)).init(f32n("in.b", 4)).init(i64("reps", []int64{4}, 1, 1, 1, 2)).
			node("LRN", "lrn", in("x"), in("l"), aInt("size", 5), aFloat("alpha", 1e-4), aFloat("beta", 0.75), aFloat("bias", 2)).
			node("Dropout", "drop", in("l"), in("dr", "mask")).
			node("ConvTranspose", "up", in("dr", "wt"), in("ct"), aInts("strides", 2, 2), aInts("output_shape", 12, 12)).
			node("InstanceNormalization", "inorm", in("ct", "in.s", "in.b"), in("inn")).
			node("HardSigmoid", "hs", in("inn"), in("hs")).
			node("DepthToSpace", "d2s", in("hs"), in("d2s"), aInt("blocksize", 2), aStr("mode", "CRD")).
			node("Tile", "tile", in("d2s", "reps"), in("t")).
			node("ArgMax", "am", in("t"), in("am"), aInt("axis", 3), aInt("keepdims", 0)).
			node("AveragePool", "ap", in("t"), in("ap"), aInts("kernel_shape", 3, 3), aInts("pads", 1, 1, 1, 1), aInt("count_include_pad", 1)).
			output("ap").output("am").output("mask")
	}, checks: `
// CHECK: %l = lrn %x {bias = 2.0, size = 5} : f32[1,4,6,6]
// CHECK: %mask = constant {value = dense<bool[1,4,6,6]: true>} : bool[1,4,6,6]
// CHECK: %ct = conv_transpose %l, %wt {pads = [1, 1, 0, 0], strides = [2, 2]} : f32[1,4,12,12]
// CHECK-NEXT: %inn = instance_norm %ct, %in.s, %in.b {eps = 9.999999747378752e-06} : f32[1,4,12,12]
// CHECK-NEXT: %hs = hard_sigmoid %inn : f32[1,4,12,12]
// CHECK-NEXT: reshape %hs {shape = [1, 1, 2, 2, 12, 12]}
// CHECK-NEXT: transpose {{%[0-9]+}} {perm = [0, 1, 4, 2, 5, 3]}
// CHECK-NEXT: %d2s = reshape {{%[0-9]+}} {shape = [1, 1, 24, 24]}
// CHECK-NEXT: reshape %d2s {shape = [1, 1, 1, 1, 1, 24, 1, 24]}
// CHECK-NEXT: broadcast {{%[0-9]+}} {shape = [1, 1, 1, 1, 1, 24, 2, 24]}
// CHECK-NEXT: %t = reshape {{%[0-9]+}} {shape = [1, 1, 24, 48]}
// CHECK-NEXT: %am = arg_max %t {axis = 3} : i64[1,1,24]
// CHECK-NEXT: %ap = avg_pool %t {count_include_pad = true, kernel = [3, 3], pads = [1, 1, 1, 1]} : f32[1,1,24,48]
`},
	{name: "transformer_ops", model: func() *mb {
		return model(14).input("ids", dtInt64, 2, 5).input("mask", dtInt64, 2, 5).init(f32n("emb", 10, 4)).
			init(f32n("ln.w", 4)).init(f32n("ln.b", 4)).
			node("Gather", "embed", in("ids", "ids"), in("bad")).
			node("Cast", "cast", in("mask"), in("maskf"), aInt("to", 1)).
			constant("zero", scalarF(0)).
			node("Equal", "eq", in("maskf", "zero"), in("pad")).
			constant("neg", scalarF(-1e9)).
			node("Where", "where", in("pad", "neg", "maskf"), in("bias")).
			node("Gather", "embed2", in("emb", "ids"), in("h")).
			constant("shape3", i64("", []int64{3}, 2, 5, 4)).
			node("Expand", "expand", in("zero", "shape3"), in("zeros")).
			node("Add", "addz", in("h", "zeros"), in("h2")).
			node("ReduceMax", "rmax", in("h2"), in("hm"), aInts("axes", -1)).
			node("Sub", "subm", in("h2", "hm"), in("h3")).
			node("LayerNormalization", "ln", in("h3", "ln.w", "ln.b"), in("y"), aFloat("epsilon", 1e-6)).
			output("y").output("bias")
	}, checks: `
// CHECK: func @forward(%ids: i64[2,5] {input, name = "ids"}, %mask: i64[2,5] {input, name = "mask"}, %emb: f32[10,4] {{.*}}, %ln.w: f32[4] {{.*}}, %ln.b: f32[4] {{.*}})
// CHECK: %maskf = cast %mask {to = f32} : f32[2,5]
// CHECK: %pad = equal %maskf, %zero : bool[2,5]
// CHECK: %bias = where %pad, %neg, %maskf : f32[2,5]
// CHECK: %h = gather %emb, %ids : f32[2,5,4]
// CHECK: %zeros = constant {value = dense<f32[2,5,4]: elided>}
// CHECK: %hm = reduce_max %h2 {axes = [2], keepdims = true} : f32[2,5,1]
// CHECK: %y = layer_norm %h3, %ln.w, %ln.b {eps = 9.999999974752427e-07} : f32[2,5,4]
`},
	{name: "opset_attrs", model: func() *mb {
		m := model(13).input("x", dtFloat, 2)
		m.m.OpsetImport = append(m.m.OpsetImport, &onnxpbOpset{Domain: "com.microsoft", Version: 1})
		m.m.Graph.Name = "my graph!"
		return m.node("Relu", "", in("x"), in("y")).output("y")
	}, checks: `
// CHECK: module @my_graph_ attributes {opset = {"" = 13, com.microsoft = 1}, producer = "pytorch 2.1"}
`},
}

func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			mod, err := Import("model.onnx", c.model().bytes(t), "", c.opts)
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			out := string(mod.Append(nil, ir.PrintOptions{ElideAbove: 16}))
			if err := filecheck.Run(c.name, c.checks, 0, out); err != nil {
				t.Fatal(err)
			}
			// The full print parses back, verifies and prints identically.
			text := mod.String()
			back, err := ir.ParseAndVerify("model.ir", text)
			if err != nil {
				t.Fatalf("printed IR does not parse: %v\n%s", err, text)
			}
			if back.String() != text {
				t.Errorf("print/parse/print differs:\n%s\n%s", text, back.String())
			}
		})
	}
}
