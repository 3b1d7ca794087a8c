package onnx

import (
	"math"
	"testing"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
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
	m := model(13).Input("x", dtFloat, 2, 4, 8).
		Init(f32n("ln.weight", 8)).Init(f32n("ln.bias", 8)).
		Constant("two", scalarF(exp)).Constant("eps", scalarF(eps)).
		Node("ReduceMean", "rm1", in("x"), in("mean"), aInts("axes", -1)).
		Node("Sub", "sub", in("x", "mean"), in("d")).
		Node("Pow", "pow", in("d", "two"), in("p")).
		Node("ReduceMean", "rm2", in("p"), in("var"), aInts("axes", -1)).
		Node("Add", "add_eps", in("var", "eps"), in("ve")).
		Node("Sqrt", "sqrt", in("ve"), in("std")).
		Node("Div", "div", in("d", "std"), in("n")).
		Node("Mul", "mul_g", in("n", "ln.weight"), in("g")).
		Node("Add", "add_b", in("g", "ln.bias"), in("y")).
		Output("y")
	if extraOut {
		m.Output("d")
	}
	return m
}

func geluErfModel(half float32) *mb {
	return model(13).Input("x", dtFloat, 2, 8).
		Constant("sqrt2", scalarF(1.4142135)).Constant("one", scalarF(1)).Constant("half", scalarF(half)).
		Node("Div", "div", in("x", "sqrt2"), in("t")).
		Node("Erf", "erf", in("t"), in("e")).
		Node("Add", "add", in("e", "one"), in("a")).
		Node("Mul", "mul1", in("x", "a"), in("m")).
		Node("Mul", "mul2", in("m", "half"), in("y")).
		Output("y")
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
		return model(17).Input("x", dtFloat, 2, 8).
			Constant("inv", scalarF(0.70710677)).Constant("one", scalarF(1)).Constant("half", scalarF(0.5)).
			Node("Mul", "h", in("x", "half"), in("h")).
			Node("Mul", "t", in("x", "inv"), in("t")).
			Node("Erf", "erf", in("t"), in("e")).
			Node("Add", "add", in("one", "e"), in("a")).
			Node("Mul", "y", in("h", "a"), in("y")).
			Output("y")
	}, checks: `
// CHECK: %y = gelu %x : f32[2,8]
// CHECK-NOT: erf
`},
	{name: "gelu_erf_near_miss", model: func() *mb { return geluErfModel(0.6) }, checks: `
// CHECK: erf
// CHECK-NOT: gelu
`},
	{name: "gelu_tanh", model: func() *mb {
		return model(13).Input("x", dtFloat, 2, 8).
			Constant("three", scalarF(3)).Constant("c", scalarF(0.044715)).Constant("k", scalarF(0.7978845608)).
			Constant("one", scalarF(1)).Constant("half", scalarF(0.5)).
			Node("Mul", "h", in("half", "x"), in("h")).
			Node("Pow", "cube", in("x", "three"), in("x3")).
			Node("Mul", "q", in("c", "x3"), in("q")).
			Node("Add", "inner", in("x", "q"), in("inner")).
			Node("Mul", "s", in("k", "inner"), in("s")).
			Node("Tanh", "tanh", in("s"), in("t")).
			Node("Add", "u", in("one", "t"), in("u")).
			Node("Mul", "y", in("h", "u"), in("y")).
			Output("y")
	}, checks: `
// CHECK: %y = gelu %x {approximate = tanh} : f32[2,8]
// CHECK-NOT: tanh %
`},
	{name: "matmul_bias", model: func() *mb {
		return model(13).Input("x", dtFloat, 2, 3, 8).Init(f32n("fc.weight", 8, 4)).Init(f32n("fc.bias", 4)).
			Node("MatMul", "mm", in("x", "fc.weight"), in("h")).
			Node("Add", "add", in("h", "fc.bias"), in("y")).Output("y")
	}, checks: `
// CHECK: %y = matmul %x, %fc.weight, %fc.bias : f32[2,3,4]
// CHECK-NOT: add
`},
	{name: "matmul_bias_near_miss", model: func() *mb {
		return model(13).Input("x", dtFloat, 3, 8).Init(f32n("fc.weight", 8, 4)).Init(f32n("b2", 3, 4)).
			Node("MatMul", "mm", in("x", "fc.weight"), in("h")).
			Node("Add", "add", in("h", "b2"), in("y")).Output("y").Output("h")
	}, checks: `
// The product is also an output and the bias is not 1-D: nothing is raised.
// CHECK: %h = matmul %x, %fc.weight : f32[3,4]
// CHECK-NEXT: %y = add %h, %b2 : f32[3,4]
`},
	{name: "matmul_transpose", model: func() *mb {
		// A Linear exported without constant folding (weight [out, in], Transpose, MatMul,
		// Add), attention scores against a transposed key, and a Gemm whose transB meets a
		// Transpose (the flags cancel).
		return model(17).Input("x", dtFloat, 2, 3, 8).Input("k", dtFloat, 2, 4, 3, 8).Input("x2", dtFloat, 3, 4).
			Init(f32n("fc.weight", 4, 8)).Init(f32n("fc.bias", 4)).Init(f32n("w2", 4, 5)).
			Node("Transpose", "wt", in("fc.weight"), in("wt"), aInts("perm", 1, 0)).
			Node("MatMul", "mm", in("x", "wt"), in("h")).
			Node("Add", "add", in("fc.bias", "h"), in("y")).
			Node("Transpose", "kt", in("k"), in("kt"), aInts("perm", 0, 1, 3, 2)).
			Node("MatMul", "scores", in("k", "kt"), in("s")).
			Node("Transpose", "w2t", in("w2"), in("w2t"), aInts("perm", 1, 0)).
			Node("Gemm", "fc2", in("x2", "w2t"), in("z"), aInt("transB", 1)).
			Output("y").Output("s").Output("z")
	}, checks: `
// CHECK: %y = matmul %x, %fc.weight, %fc.bias {transpose_b = true} : f32[2,3,4]
// CHECK-NEXT: %s = matmul %k, %k {transpose_b = true} : f32[2,4,3,3]
// CHECK-NEXT: %z = matmul %x2, %w2 : f32[3,5]
// CHECK-NOT: transpose
`},
	{name: "matmul_transpose_near_miss", model: func() *mb {
		// The transposed weight has a second use, and a 3-D transpose moves a batch dim:
		// neither is folded.
		return model(17).Input("x", dtFloat, 3, 8).Input("a", dtFloat, 2, 3, 4).Input("b", dtFloat, 3, 4, 2).
			Init(f32n("w", 4, 8)).
			Node("Transpose", "wt", in("w"), in("wt"), aInts("perm", 1, 0)).
			Node("MatMul", "mm", in("x", "wt"), in("y")).
			Node("Transpose", "at", in("a"), in("at"), aInts("perm", 1, 0, 2)).
			Node("MatMul", "mm2", in("at", "b"), in("z")).
			Output("y").Output("wt").Output("z")
	}, checks: `
// CHECK: %wt = transpose %w {perm = [1, 0]} : f32[8,4]
// CHECK-NEXT: %y = matmul %x, %wt : f32[3,4]
// CHECK-NEXT: %at = transpose %a {perm = [1, 0, 2]} : f32[3,2,4]
// CHECK-NEXT: %z = matmul %at, %b : f32[3,2,2]
`},
	{name: "gemm", model: func() *mb {
		return model(11).Input("x", dtFloat, 2, 8).Init(f32n("w", 4, 8)).Init(f32n("b", 4)).Init(f32n("w2", 4, 4)).
			Node("Gemm", "fc", in("x", "w", "b"), in("y"), aInt("transB", 1)).
			Node("Gemm", "fc2", in("y", "w2", "b"), in("z"), aInt("transB", 1), aFloat("alpha", 2), aFloat("beta", 0.5)).
			Output("z")
	}, checks: `
// CHECK: %y = matmul %x, %w, %b {transpose_b = true} : f32[2,4]
// CHECK: [[P:%[0-9]+]] = matmul %y, %w2 {transpose_b = true} : f32[2,4]
// CHECK: mul [[P]], {{%[0-9]+}} : f32[2,4]
// CHECK: mul %b, {{%[0-9]+}} : f32[4]
// CHECK: %z = add
`},
	{name: "shape_folding", opts: Options{Dims: map[string]int{"batch": 4}}, model: func() *mb {
		// x.view(x.size(0), -1) as PyTorch exports it.
		return model(13).Input("x", dtFloat, "batch", 16, 8).
			Node("Shape", "shape", in("x"), in("s")).
			Constant("zero", i64("", nil, 0)).
			Node("Gather", "g", in("s", "zero"), in("b")).
			Constant("ax0", i64("", []int64{1}, 0)).
			Node("Unsqueeze", "u", in("b", "ax0"), in("bu")).
			Constant("m1", i64("", []int64{1}, -1)).
			Node("Concat", "cat", in("bu", "m1"), in("shape2"), aInt("axis", 0)).
			Node("Reshape", "view", in("x", "shape2"), in("y")).
			Output("y")
	}, checks: `
// CHECK: func @forward(%x: f32[4,16,8] {input, name = "x"}) -> (f32[4,128] {name = "y"})
// CHECK-NEXT: %y = reshape %x {shape = [4, -1]} : f32[4,128]
// CHECK-NEXT: return %y
`},
	{name: "microbatches", opts: Options{Dims: map[string]int{"batch": 8, "seq": 5}, Microbatches: 4}, model: func() *mb {
		return model(13).Input("x", dtFloat, "batch", "seq", 6).Input("mask", dtBool, "batch", "seq").
			Node("Shape", "shape", in("x"), in("s")).
			Node("ConstantOfShape", "zeros", in("s"), in("z")).
			Node("Add", "add", in("x", "z"), in("y")).
			Node("Not", "not", in("mask"), in("nm")).
			Output("y").Output("nm")
	}, checks: `
// CHECK: func @forward(%x: f32[2,5,6] {input, name = "x"}, %mask: bool[2,5] {input, name = "mask"})
// CHECK: constant {value = dense<f32[2,5,6]: 0>}
`},
	{name: "old_export_initializer_inputs", model: func() *mb {
		// Opset 6: initializers are also listed as graph inputs; Add broadcasts with axis.
		return model(6).Input("0", dtFloat, 2, 3, 4).Input("1", dtFloat, 3).Init(f32("1", []int64{3}, 1, 2, 3)).
			Node("Add", "", in("0", "1"), in("2"), aInt("broadcast", 1), aInt("axis", 1)).
			Node("Softmax", "", in("2"), in("3"), aInt("axis", 1)).
			Output("3")
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
		return model(9).Input("x", dtFloat, 4, 6).
			Node("Slice", "s", in("x"), in("y"), aInts("starts", 1, -3), aInts("ends", 1000, -1), aInts("axes", 0, 1)).Output("y")
	}, checks: `
// CHECK: %y = slice %x {axes = [0, 1], ends = [4, 5], starts = [1, 3]} : f32[3,2]
`},
	{name: "slice_opset13", model: func() *mb {
		return model(13).Input("x", dtFloat, 4, 6).
			Init(i64("st", []int64{1}, -1)).Init(i64("en", []int64{1}, math.MinInt64)).Init(i64("ax", []int64{1}, 1)).Init(i64("sp", []int64{1}, -2)).
			Node("Slice", "s", in("x", "st", "en", "ax", "sp"), in("y")).Output("y")
	}, checks: `
// CHECK: %y = slice %x {axes = [1], ends = [-1], starts = [5], steps = [-2]} : f32[4,3]
// CHECK-NOT: constant
`},
	{name: "split_squeeze_opsets", model: func() *mb {
		return model(11).Input("x", dtFloat, 1, 6).
			Node("Split", "sp", in("x"), in("a", "b"), aInt("axis", 1), aInts("split", 2, 4)).
			Node("Squeeze", "sq", in("a"), in("y"), aInts("axes", 0)).
			Output("y").Output("b")
	}, checks: `
// CHECK: %a, %b = split %x {axis = 1, sizes = [2, 4]} : f32[1,2], f32[1,4]
// CHECK-NEXT: %y = reshape %a {shape = [2]} : f32[2]
`},
	{name: "split_opset18", model: func() *mb {
		return model(18).Input("x", dtFloat, 7, 2).Init(i64("ax", []int64{1}, 1)).Init(i64("ax0", []int64{1}, 0)).
			Node("Split", "sp", in("x"), in("a", "b", "c"), aInt("num_outputs", 3)).
			Node("Squeeze", "sq", in("c", "ax0"), in("d")).
			Node("ReduceMean", "rm", in("a", "ax"), in("m"), aInt("keepdims", 0)).
			Output("b").Output("d").Output("m")
	}, checks: `
// CHECK: %a, %b, %c = split %x {axis = 0, sizes = [3, 3, 1]} : f32[3,2], f32[3,2], f32[1,2]
// CHECK: %m = reduce_mean %a {axes = [1]} : f32[3]
`},
	{name: "reduce_opsets", model: func() *mb {
		return model(13).Input("x", dtFloat, 2, 3, 4).Init(i64("axes", []int64{2}, 0, -1)).
			Node("ReduceSum", "rs", in("x", "axes"), in("s")).
			Node("ReduceMax", "rmax", in("x"), in("mx"), aInts("axes", 1), aInt("keepdims", 0)).
			Node("ReduceL2", "rl2", in("x"), in("l2"), aInts("axes", 1)).
			Output("s").Output("mx").Output("l2")
	}, checks: `
// CHECK: %s = reduce_sum %x {axes = [0, 2], keepdims = true} : f32[1,3,1]
// CHECK: %mx = reduce_max %x {axes = [1]} : f32[2,4]
// CHECK: mul %x, %x
// CHECK: reduce_sum {{%[0-9]+}} {axes = [1], keepdims = true} : f32[2,1,4]
// CHECK: %l2 = sqrt
`},
	{name: "pad_opsets", model: func() *mb {
		return model(11).Input("x", dtFloat, 1, 2, 4, 4).Init(i64("pads", []int64{8}, 0, 0, 1, 2, 0, 0, 1, 2)).
			Node("Pad", "p", in("x", "pads"), in("y"), aStr("mode", "reflect")).Output("y")
	}, checks: `
// CHECK: %y = pad %x {mode = reflect, pads = [0, 0, 1, 2, 0, 0, 1, 2]} : f32[1,2,6,8]
`},
	{name: "pad_opset2_crop", model: func() *mb {
		return model(2).Input("x", dtFloat, 3, 4).
			Node("Pad", "p", in("x"), in("y"), aInts("pads", 1, -1, 0, 0), aFloat("value", 1.5)).Output("y")
	}, checks: `
// CHECK: %y = pad %x {pads = [1, -1, 0, 0], value = 1.5} : f32[4,3]
`},
	{name: "clip_opsets", model: func() *mb {
		return model(6).Input("x", dtFloat, 4).
			Node("Clip", "c", in("x"), in("y"), aFloat("min", -1), aFloat("max", 1)).Output("y")
	}, checks: `
// CHECK: max %x, {{%[0-9]+}} : f32[4]
// CHECK-NEXT: %y = min
`},
	{name: "clip_opset12", model: func() *mb {
		return model(12).Input("x", dtFloat, 4).Constant("lo", scalarF(0)).
			Node("Clip", "c", in("x", "lo", ""), in("y")).Output("y")
	}, checks: `
// CHECK: %y = max %x, %lo : f32[4]
// CHECK-NOT: min
`},
	{name: "resize_opsets", model: func() *mb {
		return model(13).Input("x", dtFloat, 1, 1, 4, 4).Init(i64("sizes", []int64{4}, 1, 1, 8, 6)).
			Init(f32("scales10", []int64{4}, 1, 1, 2, 2)).
			Node("Resize", "r", in("x", "", "", "sizes"), in("y"), aStr("mode", "linear")).
			Node("Resize", "r2", in("x", "", "scales10"), in("z"), aStr("coordinate_transformation_mode", "asymmetric")).
			Output("y").Output("z")
	}, checks: `
// CHECK: %y = resize %x {coordinate_transformation_mode = half_pixel, mode = linear, sizes = [1, 1, 8, 6]} : f32[1,1,8,6]
// CHECK: %z = resize %x {coordinate_transformation_mode = asymmetric, nearest_mode = round_prefer_floor, scales = [1.0, 1.0, 2.0, 2.0], sizes = [1, 1, 8, 8]} : f32[1,1,8,8]
`},
	{name: "upsample_opset9", model: func() *mb {
		return model(9).Input("x", dtFloat, 1, 1, 2, 2).Constant("sc", f32("", []int64{4}, 1, 1, 2, 3)).
			Node("Upsample", "u", in("x", "sc"), in("y")).Output("y")
	}, checks: `
// CHECK: %y = resize %x {coordinate_transformation_mode = asymmetric, nearest_mode = floor, scales = [1.0, 1.0, 2.0, 3.0], sizes = [1, 1, 4, 6]} : f32[1,1,4,6]
`},
	{name: "attention_opset23", model: func() *mb {
		return model(23).Input("q", dtFloat, 2, 4, 5, 8).Input("k", dtFloat, 2, 2, 5, 8).Input("v", dtFloat, 2, 2, 5, 8).
			Input("m", dtBool, 5, 5).Input("bias", dtFloat, 2, 1, 5, 5).
			Node("Attention", "causal", in("q", "k", "v"), in("y"), aInt("is_causal", 1)).
			Node("Attention", "masked", in("q", "k", "v", "m"), in("z"), aFloat("scale", 0.25)).
			Node("Attention", "additive", in("q", "k", "v", "bias"), in("w")).
			Output("y").Output("z").Output("w")
	}, checks: `
// ONNX's Attention is ppc's fused op: grouped-query (2 kv heads for 4), causal, a boolean or
// additive mask, the scale.
// CHECK: %y, {{%[0-9]+}} = attention %q, %k, %v {causal = true} : f32[2,4,5,8], f32[2,4,5,1]
// CHECK: %z, {{%[0-9]+}} = attention %q, %k, %v, %m {scale = 0.25} : f32[2,4,5,8], f32[2,4,5,1]
// CHECK: %w, {{%[0-9]+}} = attention %q, %k, %v, %bias : f32[2,4,5,8], f32[2,4,5,1]
`},
	{name: "attention_chain_not_causal", model: func() *mb {
		// A bias that hides key 0 from query 3 rather than the future: not the causal rule,
		// so the chain stays as it is.
		bias := f32("", []int64{1, 1, 4, 4}, 0, -1e9, -1e9, -1e9, 0, 0, -1e9, -1e9, 0, 0, 0, -1e9, -1e9, 0, 0, 0)
		return attentionChain(bias)
	}, checks: `
// CHECK: softmax
// CHECK-NOT: attention
`},
	{name: "attention_chain_causal", model: func() *mb {
		bias := f32("", []int64{1, 1, 4, 4}, 0, -1e9, -1e9, -1e9, 0, 0, -1e9, -1e9, 0, 0, 0, -1e9, 0, 0, 0, 0)
		return attentionChain(bias)
	}, checks: `
// The exported causal chain is the fused op: k's transpose folded back, the scale 1/c.
// CHECK: %y, {{%[0-9]+}} = attention %q, %k, %v {causal = true, scale = 0.3535533{{[0-9]*}}} : f32[2,2,4,8], f32[2,2,4,1]
// CHECK-NOT: softmax
`},
	{name: "softmax_opset13", model: func() *mb {
		return model(13).Input("x", dtFloat, 2, 3, 4).
			Node("Softmax", "s", in("x"), in("y"), aInt("axis", 1)).Output("y")
	}, checks: `
// CHECK: %y = softmax %x {axis = 1} : f32[2,3,4]
`},
	{name: "conv_pool_bn", model: func() *mb {
		return model(13).Input("x", dtFloat, 1, 3, 9, 9).Init(f32n("conv.weight", 8, 3, 3, 3)).
			Init(f32n("bn.weight", 8)).Init(f32n("bn.bias", 8)).Init(f32n("bn.running_mean", 8)).Init(f32n("bn.running_var", 8)).
			Node("Conv", "conv", in("x", "conv.weight"), in("c"), aStr("auto_pad", "SAME_UPPER"), aInts("strides", 2, 2)).
			Node("BatchNormalization", "bn", in("c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"), in("n")).
			Node("Relu", "relu", in("n"), in("r")).
			Node("MaxPool", "pool", in("r"), in("p"), aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInt("ceil_mode", 1)).
			Node("GlobalAveragePool", "gap", in("p"), in("g")).
			Node("Flatten", "flat", in("g"), in("y")).
			Output("y")
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
		return model(13).Input("x", dtInt64, 5).
			Constant("start", i64("", nil, 2)).Constant("limit", i64("", nil, 12)).Constant("delta", i64("", nil, 2)).
			Node("Range", "r", in("start", "limit", "delta"), in("rg")).
			Node("Add", "a", in("x", "rg"), in("y")).
			Node("Identity", "id", in("y"), in("y2")).
			Node("Sum", "sum", in("y2", "x", "rg"), in("z")).
			Output("z")
	}, checks: `
// CHECK: %rg = constant {value = dense<i64[5]: [2, 4, 6, 8, 10]>} : i64[5]
// CHECK-NEXT: %y = add %x, %rg : i64[5]
// CHECK-NEXT: add %y, %x
// CHECK-NEXT: %z = add {{%[0-9]+}}, %rg
`},
	{name: "cnn_zoo_ops", model: func() *mb {
		return model(12).Input("x", dtFloat, 1, 4, 6, 6).Init(f32n("wt", 4, 4, 3, 3)).
			Init(f32n("in.s", 4)).Init(f32n("in.b", 4)).Init(i64("reps", []int64{4}, 1, 1, 1, 2)).
			Node("LRN", "lrn", in("x"), in("l"), aInt("size", 5), aFloat("alpha", 1e-4), aFloat("beta", 0.75), aFloat("bias", 2)).
			Node("Dropout", "drop", in("l"), in("dr", "mask")).
			Node("ConvTranspose", "up", in("dr", "wt"), in("ct"), aInts("strides", 2, 2), aInts("output_shape", 12, 12)).
			Node("InstanceNormalization", "inorm", in("ct", "in.s", "in.b"), in("inn")).
			Node("HardSigmoid", "hs", in("inn"), in("hs")).
			Node("DepthToSpace", "d2s", in("hs"), in("d2s"), aInt("blocksize", 2), aStr("mode", "CRD")).
			Node("Tile", "tile", in("d2s", "reps"), in("t")).
			Node("ArgMax", "am", in("t"), in("am"), aInt("axis", 3), aInt("keepdims", 0)).
			Node("AveragePool", "ap", in("t"), in("ap"), aInts("kernel_shape", 3, 3), aInts("pads", 1, 1, 1, 1), aInt("count_include_pad", 1)).
			Output("ap").Output("am").Output("mask")
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
		return model(14).Input("ids", dtInt64, 2, 5).Input("mask", dtInt64, 2, 5).Init(f32n("emb", 10, 4)).
			Init(f32n("ln.w", 4)).Init(f32n("ln.b", 4)).
			Node("Gather", "embed", in("ids", "ids"), in("bad")).
			Node("Cast", "cast", in("mask"), in("maskf"), aInt("to", 1)).
			Constant("zero", scalarF(0)).
			Node("Equal", "eq", in("maskf", "zero"), in("pad")).
			Constant("neg", scalarF(-1e9)).
			Node("Where", "where", in("pad", "neg", "maskf"), in("bias")).
			Node("Gather", "embed2", in("emb", "ids"), in("h")).
			Constant("shape3", i64("", []int64{3}, 2, 5, 4)).
			Node("Expand", "expand", in("zero", "shape3"), in("zeros")).
			Node("Add", "addz", in("h", "zeros"), in("h2")).
			Node("ReduceMax", "rmax", in("h2"), in("hm"), aInts("axes", -1)).
			Node("Sub", "subm", in("h2", "hm"), in("h3")).
			Node("LayerNormalization", "ln", in("h3", "ln.w", "ln.b"), in("y"), aFloat("epsilon", 1e-6)).
			Output("y").Output("bias")
	}, checks: `
// CHECK: func @forward(%ids: i64[2,5] {input, name = "ids", range = [0, 10]}, %mask: i64[2,5] {input, name = "mask"}, %emb: f32[10,4] {{.*}}, %ln.w: f32[4] {{.*}}, %ln.b: f32[4] {{.*}})
// CHECK: %maskf = cast %mask {to = f32} : f32[2,5]
// CHECK: %pad = equal %maskf, %zero : bool[2,5]
// CHECK: %bias = where %pad, %neg, %maskf : f32[2,5]
// CHECK: %h = gather %emb, %ids : f32[2,5,4]
// CHECK: %zeros = constant {value = dense<f32[2,5,4]: elided>}
// CHECK: %hm = reduce_max %h2 {axes = [2], keepdims = true} : f32[2,5,1]
// CHECK: %y = layer_norm %h3, %ln.w, %ln.b {eps = 9.999999974752427e-07} : f32[2,5,4]
`},
	{name: "opset_attrs", model: func() *mb {
		m := model(13).Input("x", dtFloat, 2)
		m.M.OpsetImport = append(m.M.OpsetImport, &onnxpbOpset{Domain: "com.microsoft", Version: 1})
		m.M.Graph.Name = "my graph!"
		return m.Node("Relu", "", in("x"), in("y")).Output("y")
	}, checks: `
// CHECK: module @my_graph_ attributes {opset = {"" = 13, com.microsoft = 1}, producer = "pytorch 2.1"}
`},
}

func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			mod, err := Import("model.onnx", c.model().Bytes(t), "", c.opts)
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

// attentionChain is attention as torch.onnx.export writes it — q·kᵀ, divided by √d, plus an
// additive mask, softmax, ·v — over q, k, v of f32[2,2,4,8] and the given [1,1,4,4] bias.
func attentionChain(bias *onnxpb.TensorProto) *mb {
	return model(17).Input("q", dtFloat, 2, 2, 4, 8).Input("k", dtFloat, 2, 2, 4, 8).Input("v", dtFloat, 2, 2, 4, 8).
		Constant("bias", bias).Constant("c", scalarF(2.828427)).
		Node("Transpose", "kt", in("k"), in("kT"), aInts("perm", 0, 1, 3, 2)).
		Node("MatMul", "qk", in("q", "kT"), in("s")).
		Node("Div", "scale", in("s", "c"), in("ss")).
		Node("Add", "mask", in("ss", "bias"), in("sm")).
		Node("Softmax", "softmax", in("sm"), in("p"), aInt("axis", -1)).
		Node("MatMul", "pv", in("p", "v"), in("y")).Output("y")
}
