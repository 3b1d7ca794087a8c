package passes

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

// Finite-difference checks of the gradient rules, in float64 on the reference evaluator
// (gradeval_test.go). Each case is a small @forward whose results are folded into the scalar
// loss Σᵢ sum(resultᵢ · Rᵢ) with fixed random Rᵢ; autodiff's gradients of every parameter
// element are compared with central differences (h = 1e-6): relative error < 1e-6 or absolute
// error < 1e-8.

type gradCase struct {
	name string
	args string // @forward's argument list
	body string // ops; result types may be `?`
	ret  string // the returned values (default %y)
	// vals fixes argument values (indices, labels, conditions); others are drawn from gen.
	vals map[string][]float64
	gen  func(r *rand.Rand) float64
	want []string // ops @train must contain (the rule's fused ops)
}

func gradUniform(lo, hi float64) func(r *rand.Rand) float64 {
	return func(r *rand.Rand) float64 { return lo + (hi-lo)*r.Float64() }
}

var (
	gradPositive = gradUniform(0.5, 2)
	// gradAwayFromZero keeps inputs off kinks at 0 (relu, abs) by more than the step h.
	gradAwayFromZero = func(r *rand.Rand) float64 {
		v := gradUniform(0.1, 1.5)(r)
		if r.IntN(2) == 0 {
			return -v
		}
		return v
	}
)

func gradUnaryCase(name, attrs string, gen func(r *rand.Rand) float64, want ...string) gradCase {
	if attrs != "" {
		attrs = " " + attrs
	}
	return gradCase{name: name + attrs, args: "%x: f64[2,3] {param}", body: "%y = " + name + " %x" + attrs + " : ?", gen: gen, want: want}
}

var gradCases = []gradCase{
	// Broadcasting binary ops.
	{name: "add", args: "%a: f64[2,3,4] {param}, %b: f64[3,1] {param}", body: "%y = add %a, %b : ?", want: []string{"reduce_sum", "reshape"}},
	{name: "add rank", args: "%a: f64[4] {param}, %b: f64[2,3,4] {param}", body: "%y = add %a, %b : ?"},
	{name: "sub", args: "%a: f64[2,1,4] {param}, %b: f64[3,1] {param}", body: "%y = sub %a, %b : ?"},
	{name: "mul input", args: "%x: f64[2,3] {input}, %w: f64[3] {param}", body: "%y = mul %x, %w : ?"},
	{name: "mul", args: "%a: f64[2,3,1] {param}, %b: f64[1,4] {param}", body: "%y = mul %a, %b : ?"},
	{name: "mul same operand", args: "%a: f64[2,3] {param}", body: "%y = mul %a, %a : ?"},
	{name: "uses summed", args: "%a: f64[2,3] {param}, %b: f64[3] {param}", body: "%0 = exp %a : ?\n  %1 = mul %0, %b : ?\n  %y = sub %1, %0 : ?"},
	{name: "div", args: "%a: f64[2,3] {param}, %b: f64[3] {param}", body: "%y = div %a, %b : ?", gen: gradPositive},
	{name: "pow", args: "%a: f64[2,3] {param}, %b: f64[3] {param}", body: "%y = pow %a, %b : ?", gen: gradPositive},
	{name: "pow scalar exponent", args: "%a: f64[2,3] {param}, %b: f64[] {param}", body: "%y = pow %a, %b : ?", gen: gradPositive},
	{name: "max", args: "%a: f64[2,3] {param}, %b: f64[3] {param}", body: "%y = max %a, %b : ?"},
	{name: "min", args: "%a: f64[3] {param}, %b: f64[2,3] {param}", body: "%y = min %a, %b : ?"},
	{name: "where", args: "%c: bool[2,3] {input}, %a: f64[2,3] {param}, %b: f64[3] {param}", body: "%y = where %c, %a, %b : ?",
		vals: map[string][]float64{"c": {1, 0, 1, 0, 0, 1}}},

	// Elementwise math.
	gradUnaryCase("neg", "", nil),
	gradUnaryCase("abs", "", gradAwayFromZero),
	gradUnaryCase("relu", "", gradAwayFromZero, "relu_grad"),
	gradUnaryCase("gelu", "", nil, "gelu_grad"),
	gradUnaryCase("gelu", "{approximate = tanh}", nil, "gelu_grad"),
	gradUnaryCase("silu", "", nil, "silu_grad"),
	gradUnaryCase("tanh", "", nil, "tanh_grad"),
	gradUnaryCase("sigmoid", "", nil, "sigmoid_grad"),
	gradUnaryCase("exp", "", nil),
	gradUnaryCase("log", "", gradPositive),
	gradUnaryCase("sqrt", "", gradPositive),
	gradUnaryCase("rsqrt", "", gradPositive),
	gradUnaryCase("erf", "", nil),
	gradUnaryCase("sin", "", nil),
	gradUnaryCase("cos", "", nil),
	{name: "cast", args: "%x: f64[2,3] {param}", body: "%y = cast %x {to = f64} : ?"},

	// Softmax and normalisations.
	{name: "softmax", args: "%x: f64[2,3,4] {param}", body: "%y = softmax %x : ?", want: []string{"softmax_grad"}},
	{name: "softmax axis 0", args: "%x: f64[2,3,4] {param}", body: "%y = softmax %x {axis = 0} : ?"},
	{name: "log_softmax", args: "%x: f64[2,3,4] {param}", body: "%y = log_softmax %x {axis = -2} : ?", want: []string{"log_softmax_grad"}},
	{name: "layer_norm", args: "%x: f64[2,3,4] {param}, %s: f64[4] {param}, %b: f64[4] {param}", body: "%y = layer_norm %x, %s, %b : ?",
		want: []string{"layer_norm_grad_input", "layer_norm_grad_params"}},
	{name: "layer_norm axis", args: "%x: f64[2,3,4] {param}, %s: f64[3,4] {param}, %b: f64[3,4] {param}",
		body: "%y = layer_norm %x, %s, %b {axis = -2, eps = 0.001} : ?"},
	{name: "layer_norm plain", args: "%x: f64[2,3,4] {param}", body: "%y = layer_norm %x {axis = 1} : ?"},
	{name: "layer_norm scale only, input x", args: "%x: f64[3,4] {input}, %s: f64[4] {param}", body: "%y = layer_norm %x, %s : ?"},
	{name: "rms_norm", args: "%x: f64[2,3,4] {param}, %s: f64[4] {param}", body: "%y = rms_norm %x, %s : ?",
		want: []string{"rms_norm_grad_input", "rms_norm_grad_params"}},
	{name: "rms_norm axis", args: "%x: f64[2,3,4] {param}, %s: f64[3,4] {param}", body: "%y = rms_norm %x, %s {axis = 1, eps = 0.01} : ?"},
	{name: "rms_norm plain", args: "%x: f64[2,3,4] {param}", body: "%y = rms_norm %x : ?"},

	// matmul: transposes, batch broadcasting, rank-1 operands, bias.
	{name: "matmul", args: "%a: f64[3,4] {param}, %b: f64[4,5] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul ta", args: "%a: f64[4,3] {param}, %b: f64[4,5] {param}", body: "%y = matmul %a, %b {transpose_a = true} : ?"},
	{name: "matmul tb", args: "%a: f64[3,4] {param}, %b: f64[5,4] {param}", body: "%y = matmul %a, %b {transpose_b = true} : ?"},
	{name: "matmul ta tb", args: "%a: f64[4,3] {param}, %b: f64[5,4] {param}", body: "%y = matmul %a, %b {transpose_a = true, transpose_b = true} : ?"},
	{name: "matmul batch", args: "%a: f64[2,3,4] {param}, %b: f64[4,5] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul batch tb", args: "%a: f64[2,3,4] {param}, %b: f64[5,4] {param}", body: "%y = matmul %a, %b {transpose_b = true} : ?"},
	{name: "matmul linear on input", args: "%x: f64[2,3,4] {input}, %w: f64[4,5] {param}", body: "%y = matmul %x, %w : ?"},
	{name: "matmul both batched", args: "%a: f64[2,3,4] {param}, %b: f64[2,4,5] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul broadcast batch", args: "%a: f64[2,1,3,4] {param}, %b: f64[3,4,5] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul matrix by batch", args: "%a: f64[3,4] {param}, %b: f64[2,4,5] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul batched ta tb", args: "%a: f64[2,4,3] {param}, %b: f64[2,5,4] {param}", body: "%y = matmul %a, %b {transpose_a = true, transpose_b = true} : ?"},
	{name: "matmul batched ta", args: "%a: f64[2,4,3] {param}, %b: f64[4,5] {param}", body: "%y = matmul %a, %b {transpose_a = true} : ?"},
	{name: "matmul vector matrix", args: "%a: f64[4] {param}, %b: f64[4,5] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul matrix vector", args: "%a: f64[3,4] {param}, %b: f64[4] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul dot", args: "%a: f64[4] {param}, %b: f64[4] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul batch vector", args: "%a: f64[2,3,4] {param}, %b: f64[4] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul vector batch", args: "%a: f64[4] {param}, %b: f64[2,4,5] {param}", body: "%y = matmul %a, %b : ?"},
	{name: "matmul bias", args: "%a: f64[3,4] {param}, %b: f64[4,5] {param}, %c: f64[5] {param}", body: "%y = matmul %a, %b, %c : ?"},
	{name: "matmul column bias", args: "%a: f64[3,4] {param}, %b: f64[5,4] {param}, %c: f64[3,1] {param}", body: "%y = matmul %a, %b, %c {transpose_b = true} : ?"},
	{name: "matmul batch bias", args: "%a: f64[2,3,4] {param}, %b: f64[4,5] {param}, %c: f64[5] {param}", body: "%y = matmul %a, %b, %c : ?"},

	// Shapes and data movement.
	{name: "reshape", args: "%x: f64[2,3,4] {param}", body: "%y = reshape %x {shape = [4, -1]} : ?"},
	{name: "transpose", args: "%x: f64[2,3,4] {param}", body: "%y = transpose %x {perm = [2, 0, 1]} : ?"},
	{name: "broadcast", args: "%x: f64[3,1] {param}", body: "%y = broadcast %x {shape = [2, 3, 4]} : ?"},
	{name: "reduce_sum", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_sum %x {axes = [1]} : ?"},
	{name: "reduce_sum keepdims", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_sum %x {axes = [-1], keepdims = true} : ?"},
	{name: "reduce_sum all", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_sum %x : ?"},
	{name: "reduce_mean", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_mean %x {axes = [0, 2]} : ?"},
	{name: "reduce_mean all keepdims", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_mean %x {keepdims = true} : ?"},
	{name: "reduce_max", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_max %x {axes = [1]} : ?", want: []string{"reduce_max_grad"}},
	{name: "reduce_max keepdims", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_max %x {axes = [-1, 0], keepdims = true} : ?"},
	{name: "gather", args: "%w: f64[5,3] {param}, %i: i64[2,3] {input}", body: "%y = gather %w, %i : ?",
		vals: map[string][]float64{"i": {0, 4, 1, 4, -1, 2}}, want: []string{"gather_grad"}},
	{name: "gather axis 1", args: "%w: f64[3,5] {param}, %i: i64[4] {input}", body: "%y = gather %w, %i {axis = 1} : ?",
		vals: map[string][]float64{"i": {1, 1, 4, 0}}},
	{name: "gather axis -1", args: "%w: f64[2,3,4] {param}, %i: i64[2] {input}", body: "%y = gather %w, %i {axis = -1} : ?",
		vals: map[string][]float64{"i": {3, -4}}},
	{name: "concat", args: "%a: f64[2,3] {param}, %b: f64[2,2] {param}", body: "%y = concat %a, %b {axis = 1} : ?"},
	{name: "concat three", args: "%a: f64[1,3] {param}, %b: f64[2,3] {param}, %c: f64[2,3] {param}", body: "%y = concat %a, %b, %c {axis = -2} : ?"},
	{name: "slice", args: "%x: f64[5,4] {param}", body: "%y = slice %x {ends = [4, 4], starts = [1, 0], steps = [2, 1]} : ?", want: []string{"slice_grad"}},
	{name: "slice reversed", args: "%x: f64[5,4] {param}", body: "%y = slice %x {axes = [-1], ends = [-1], starts = [3], steps = [-2]} : ?"},
	{name: "split", args: "%x: f64[2,5] {param}", body: "%a, %b = split %x {axis = 1, sizes = [2, 3]} : ?, ?", ret: "%a, %b"},
	{name: "split one piece used", args: "%x: f64[2,5] {param}", body: "%a, %b = split %x {axis = -1, sizes = [2, 3]} : ?, ?", ret: "%b"},

	// Losses.
	{name: "cross_entropy", args: "%z: f64[4,5] {param}, %l: i64[4] {input}", body: "%y = cross_entropy %z, %l : ?",
		vals: map[string][]float64{"l": {0, 3, 4, 1}}, want: []string{"cross_entropy_grad"}},
	{name: "cross_entropy sum", args: "%z: f64[4,5] {param}, %l: i64[4] {input}", body: "%y = cross_entropy %z, %l {reduction = sum} : ?",
		vals: map[string][]float64{"l": {0, 3, 4, 1}}},
	{name: "cross_entropy none", args: "%z: f64[2,3,5] {param}, %l: i64[2,3] {input}", body: "%y = cross_entropy %z, %l {reduction = none} : ?",
		vals: map[string][]float64{"l": {0, 3, 4, 1, 2, 2}}},
	{name: "cross_entropy ignore_index", args: "%z: f64[4,5] {param}, %l: i64[4] {input}", body: "%y = cross_entropy %z, %l {ignore_index = -100} : ?",
		vals: map[string][]float64{"l": {0, -100, 4, 1}}},
	{name: "mse", args: "%p: f64[2,3] {param}, %t: f64[2,3] {input}", body: "%y = mse %p, %t : ?", want: []string{"mse_grad"}},
	{name: "mse sum", args: "%p: f64[2,3] {param}, %t: f64[2,3] {param}", body: "%y = mse %p, %t {reduction = sum} : ?"},
	{name: "mse none", args: "%p: f64[2,3] {param}, %t: f64[2,3] {param}", body: "%y = mse %p, %t {reduction = none} : ?"},

	// The nn ops (grad_rules_nn.go): convolutions with strides, dilations, groups, pads and the
	// input positions no window reaches; pooling with ceil_mode and count_include_pad.
	{name: "conv", args: "%x: f64[2,3,5,5] {param}, %w: f64[4,3,3,3] {param}, %b: f64[4] {param}",
		body: "%y = conv %x, %w, %b {pads = [1, 1, 1, 1]} : ?", want: []string{"conv_transpose", "conv_grad_filter", "reduce_sum"}},
	{name: "conv strided ragged", args: "%x: f64[1,2,6,7] {param}, %w: f64[2,2,2,3] {param}",
		body: "%y = conv %x, %w {dilations = [1, 2], pads = [0, 1, 1, 0], strides = [2, 3]} : ?"},
	{name: "conv groups", args: "%x: f64[2,4,5,6] {param}, %w: f64[6,2,2,2] {param}, %b: f64[6] {param}",
		body: "%y = conv %x, %w, %b {dilations = [2, 1], groups = 2, strides = [1, 2]} : ?"},
	{name: "conv depthwise 1d", args: "%x: f64[2,3,7] {param}, %w: f64[3,1,3] {param}",
		body: "%y = conv %x, %w {groups = 3, pads = [2, 1], strides = [2]} : ?"},
	{name: "conv 3d", args: "%x: f64[1,2,3,4,3] {param}, %w: f64[2,2,2,2,2] {param}",
		body: "%y = conv %x, %w {pads = [1, 0, 0, 0, 1, 1], strides = [1, 2, 1]} : ?"},
	{name: "conv input data", args: "%x: f64[2,2,4,4] {input}, %w: f64[3,2,2,2] {param}, %b: f64[3] {param}",
		body: "%y = conv %x, %w, %b {strides = [2, 2]} : ?"},
	{name: "conv_transpose", args: "%x: f64[1,2,3,3] {param}, %w: f64[2,3,3,3] {param}, %b: f64[3] {param}",
		body: "%y = conv_transpose %x, %w, %b {output_padding = [1, 0], pads = [1, 1, 0, 0], strides = [2, 2]} : ?",
		want: []string{"conv", "conv_grad_filter"}},
	{name: "conv_transpose groups", args: "%x: f64[2,4,3,2] {param}, %w: f64[4,1,2,2] {param}",
		body: "%y = conv_transpose %x, %w {dilations = [1, 2], groups = 2, strides = [1, 2]} : ?"},
	{name: "max_pool", args: "%x: f64[1,2,5,5] {param}", body: "%y = max_pool %x {kernel = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]} : ?",
		want: []string{"max_pool_grad"}},
	{name: "max_pool ceil_mode dilations", args: "%x: f64[2,1,6,7] {param}",
		body: "%y = max_pool %x {ceil_mode = true, dilations = [2, 1], kernel = [2, 3], strides = [2, 2]} : ?"},
	{name: "max_pool global", args: "%x: f64[2,3,3,2] {param}", body: "%y = max_pool %x {kernel = [3, 2]} : ?"},
	{name: "avg_pool", args: "%x: f64[1,2,5,5] {param}", body: "%y = avg_pool %x {kernel = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]} : ?",
		want: []string{"avg_pool_grad"}},
	{name: "avg_pool count_include_pad ceil_mode", args: "%x: f64[1,2,6,5] {param}",
		body: "%y = avg_pool %x {ceil_mode = true, count_include_pad = true, kernel = [3, 2], pads = [1, 0, 1, 1], strides = [2, 2]} : ?"},
	{name: "avg_pool global 1d", args: "%x: f64[2,3,4] {param}", body: "%y = avg_pool %x {kernel = [4]} : ?"},
	{name: "batch_norm", args: "%x: f64[2,3,2,2] {param}, %s: f64[3] {param}, %b: f64[3] {param}, %m: f64[3] {input}, %v: f64[3] {input}",
		body: "%y = batch_norm %x, %s, %b, %m, %v {eps = 0.001} : ?", vals: map[string][]float64{"m": {0.1, -0.3, 0.5}, "v": {0.8, 1.5, 0.3}},
		want: []string{"batch_norm_grad_input", "batch_norm_grad_params"}},
	{name: "batch_norm input x", args: "%x: f64[3,2] {input}, %s: f64[2] {param}, %b: f64[2] {param}, %m: f64[2] {input}, %v: f64[2] {input}",
		body: "%y = batch_norm %x, %s, %b, %m, %v : ?", vals: map[string][]float64{"m": {0.1, -0.3}, "v": {0.8, 1.5}}},
	{name: "instance_norm", args: "%x: f64[2,3,4] {param}, %s: f64[3] {param}, %b: f64[3] {param}",
		body: "%y = instance_norm %x, %s, %b : ?", want: []string{"instance_norm_grad_input", "instance_norm_grad_params"}},
	{name: "instance_norm 2d", args: "%x: f64[1,2,2,3] {param}, %s: f64[2] {param}, %b: f64[2] {param}",
		body: "%y = instance_norm %x, %s, %b {eps = 0.01} : ?"},
	{name: "lrn", args: "%x: f64[2,5,2,2] {param}", body: "%y = lrn %x {alpha = 0.3, bias = 2, size = 3} : ?", want: []string{"lrn_grad"}},
	{name: "lrn even size", args: "%x: f64[1,4,3] {param}", body: "%y = lrn %x {alpha = 0.5, beta = 0.6, size = 2} : ?"},
	{name: "pad constant", args: "%x: f64[2,3] {param}", body: "%y = pad %x {pads = [1, 0, 2, -1], value = 0.5} : ?", want: []string{"pad"}},
	{name: "pad reflect", args: "%x: f64[3,4] {param}", body: "%y = pad %x {mode = reflect, pads = [2, 1, 1, 3]} : ?", want: []string{"pad_grad"}},
	{name: "pad edge", args: "%x: f64[1,2,3] {param}", body: "%y = pad %x {mode = edge, pads = [0, 1, 3, 0, 2, -1]} : ?"},
	{name: "pad wrap", args: "%x: f64[3,2] {param}", body: "%y = pad %x {mode = wrap, pads = [2, 0, 1, 3]} : ?"},
	{name: "resize linear", args: "%x: f64[1,2,3,4] {param}", body: "%y = resize %x {mode = linear, sizes = [1, 2, 5, 7]} : ?",
		want: []string{"resize_grad"}},
	{name: "resize linear align_corners down", args: "%x: f64[1,1,5,4] {param}",
		body: "%y = resize %x {coordinate_transformation_mode = align_corners, mode = linear, sizes = [1, 1, 3, 6]} : ?"},
	{name: "resize nearest", args: "%x: f64[1,2,2,3] {param}", body: "%y = resize %x {sizes = [1, 2, 4, 7]} : ?"},
	{name: "resize nearest asymmetric floor", args: "%x: f64[2,1,5] {param}",
		body: "%y = resize %x {coordinate_transformation_mode = asymmetric, nearest_mode = floor, scales = [1.0, 1.0, 0.6], sizes = [2, 1, 3]} : ?"},
	{name: "resize cubic", args: "%x: f64[1,1,4,4] {param}", body: "%y = resize %x {mode = cubic, sizes = [1, 1, 6, 3]} : ?"},
	{name: "gather_elements", args: "%x: f64[3,4] {param}, %i: i64[2,4] {input}", body: "%y = gather_elements %x, %i : ?",
		vals: map[string][]float64{"i": {0, 2, 2, -1, 0, 0, 1, 2}}, want: []string{"gather_elements_grad"}},
	{name: "gather_elements axis -1", args: "%x: f64[2,3] {param}, %i: i64[2,5] {input}", body: "%y = gather_elements %x, %i {axis = -1} : ?",
		vals: map[string][]float64{"i": {0, 2, 2, -1, 1, 0, 0, 1, 2, -3}}},
	gradUnaryCase("elu", "", gradAwayFromZero, "elu_grad"),
	gradUnaryCase("elu", "{alpha = 0.5}", gradAwayFromZero),
	gradUnaryCase("selu", "", gradAwayFromZero, "selu_grad"),
	gradUnaryCase("selu", "{alpha = 1.5, gamma = 2}", gradAwayFromZero),
	gradUnaryCase("leaky_relu", "{alpha = 0.2}", gradAwayFromZero, "leaky_relu_grad"),
	gradUnaryCase("softplus", "", nil, "softplus_grad"),
	gradUnaryCase("hard_sigmoid", "", gradUniform(-4, 4), "hard_sigmoid_grad"),
	gradUnaryCase("hard_sigmoid", "{alpha = 0.5, beta = 0.25}", gradUniform(-3, 3)),
	gradUnaryCase("shrink", "{bias = 0.1}", gradUniform(-1.5, 1.5), "shrink_grad"),
	gradUnaryCase("shrink", "{lambd = 0.2}", gradUniform(-1.5, 1.5)),
	{name: "floor has no gradient", args: "%x: f64[2,3] {param}", body: "%f = floor %x : ?\n  %y = mul %x, %f : ?"},
	{name: "reduce_min", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_min %x {axes = [1]} : ?", want: []string{"reduce_min_grad"}},
	{name: "reduce_min keepdims", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_min %x {axes = [0, 2], keepdims = true} : ?"},
	{name: "reduce_prod", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_prod %x {axes = [0, 2]} : ?", want: []string{"reduce_prod_grad"}},
	{name: "reduce_prod with a zero", args: "%x: f64[2,3] {param}", body: "%y = reduce_prod %x {axes = [1], keepdims = true} : ?",
		vals: map[string][]float64{"x": {0.5, 0, -1.5, 2, 0.7, -0.3}}},
	{name: "reduce_prod all", args: "%x: f64[2,3] {param}", body: "%y = reduce_prod %x : ?"},
	{name: "reduce_log_sum_exp", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_log_sum_exp %x {axes = [1]} : ?"},
	{name: "reduce_log_sum_exp all keepdims", args: "%x: f64[2,3,4] {param}", body: "%y = reduce_log_sum_exp %x {axes = [0, 2], keepdims = true} : ?"},
}

func TestGradRules(t *testing.T) {
	for _, c := range gradCases {
		t.Run(c.name, func(t *testing.T) {
			m, args := buildGradCase(t, c)
			train := checkGradients(t, m, args)
			for _, w := range c.want {
				if !slices.ContainsFunc(train.Ops, func(op *ir.Op) bool { return op.Name() == w }) {
					t.Errorf("@train has no %s op:\n%s", w, train)
				}
			}
		})
	}
}

// Every op with a rule has a finite-difference case.
func TestGradRulesAllChecked(t *testing.T) {
	covered := spmdCovered()
	for _, c := range gradCases {
		for _, line := range strings.Split(c.body, "\n") {
			_, rhs, _ := strings.Cut(line, "= ")
			covered[strings.Fields(rhs)[0]] = true
		}
	}
	for name, rule := range gradRules {
		if rule != nil && !covered[name] {
			t.Errorf("the gradient rule of %s has no finite-difference case", name)
		}
		if ir.Lookup(name) == nil {
			t.Errorf("gradRules has a row for unknown op %s", name)
		}
	}
}

// buildGradCase makes @forward from a case: its ops, then loss = Σ sum(result · R).
func buildGradCase(t *testing.T, c gradCase) (*ir.Module, []*ir.Dense) {
	t.Helper()
	ret := c.ret
	if ret == "" {
		ret = "%y"
	}
	n := len(strings.Split(ret, ","))
	src := fmt.Sprintf("func @forward(%s) -> (%s) {\n  %s\n  return %s\n}\n", c.args, strings.TrimSuffix(strings.Repeat("?, ", n), ", "), c.body, ret)
	m, err := ir.Parse(c.name+".ir", src)
	if err != nil {
		t.Fatal(err)
	}
	f := m.Funcs[0]
	if err := InferFunc(m, f); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, uint64(len(c.name))))
	b := ir.NewBuilder(f)
	var loss *ir.Value
	for _, r := range f.Results {
		rv := make([]float64, r.Type.NumElements())
		for i := range rv {
			rv[i] = gradUniform(-1, 1)(rng)
		}
		s := b.Reduce("sum", b.Mul(r, b.Constant(ir.NewDenseF64(r.Type, rv))), nil, false)
		if loss == nil {
			loss = s
		} else {
			loss = b.Add(loss, s)
		}
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	f.Results, f.ResultAttrs = []*ir.Value{loss}, []ir.Attrs{{{Name: ir.AttrLoss, Value: ir.Unit{}}}}
	if err := ir.Verify(m); err != nil {
		t.Fatal(err)
	}
	gen := c.gen
	if gen == nil {
		gen = gradUniform(-1.5, 1.5)
	}
	args := make([]*ir.Dense, len(f.Args))
	for i, a := range f.Args {
		v, ok := c.vals[a.Name]
		if !ok {
			if !a.Type.DType.IsFloat() {
				t.Fatalf("argument %%%s needs values", a.Name)
			}
			v = make([]float64, a.Type.NumElements())
			for j := range v {
				v[j] = gen(rng)
			}
		}
		args[i] = ir.NewDenseF64(a.Type, v)
	}
	return m, args
}

// checkGradients runs autodiff on m and compares @train's loss and gradients with the forward
// loss and central differences; then it runs canonicalize,cse,dce and checks the gradients
// are unchanged. It returns @train as autodiff left it.
func checkGradients(t *testing.T, m *ir.Module, args []*ir.Dense) *ir.Func {
	t.Helper()
	fwd := m.Clone().Func(ir.ForwardFunc)
	runGradPipeline(t, m, "autodiff")
	train := m.Func(TrainFunc)
	out, err := evalFunc(train, args)
	if err != nil {
		t.Fatalf("evaluating @train: %v\n%s", err, train)
	}
	lossAt := func(args []*ir.Dense) float64 {
		r, err := evalFunc(fwd, args)
		if err != nil {
			t.Fatalf("evaluating @forward: %v", err)
		}
		return r[0].F64(0)
	}
	if l := lossAt(args); math.Abs(l-out[0].F64(0)) > 1e-12*math.Max(1, math.Abs(l)) {
		t.Errorf("@train's loss %v differs from @forward's %v", out[0].F64(0), l)
	}
	const h = 1e-6
	gi, worst := 0, 0.0
	for ai, a := range fwd.Args {
		if !fwd.ArgAttrs[ai].Has(ir.AttrParam) {
			continue
		}
		gi++
		grad := out[gi]
		if !grad.Type.Equal(a.Type) {
			t.Fatalf("gradient of %%%s is %s, want %s", a.Name, grad.Type, a.Type)
		}
		base := args[ai].Floats()
		for e := range base {
			shifted := func(delta float64) float64 {
				v := slices.Clone(base)
				v[e] += delta
				as := slices.Clone(args)
				as[ai] = ir.NewDenseF64(a.Type, v)
				return lossAt(as)
			}
			fd := (shifted(h) - shifted(-h)) / (2 * h)
			ad := grad.F64(e)
			diff := math.Abs(ad - fd)
			worst = math.Max(worst, diff/math.Max(1e-2, math.Max(math.Abs(ad), math.Abs(fd))))
			if diff > 1e-8 && diff > 1e-6*math.Max(math.Abs(ad), math.Abs(fd)) {
				t.Errorf("d loss/d %s[%d]: autodiff %.12g, finite difference %.12g", a.Name, e, ad, fd)
			}
		}
	}
	t.Logf("worst relative error %.2g", worst)
	if t.Failed() {
		t.Logf("@train:\n%s", train)
	}

	// The cleanup passes keep @train valid and its values unchanged.
	clean := m.Clone()
	runGradPipeline(t, clean, "canonicalize,cse,dce")
	out2, err := evalFunc(clean.Func(TrainFunc), args)
	if err != nil {
		t.Fatalf("evaluating @train after cleanup: %v", err)
	}
	for i := range out {
		for e := 0; e < out[i].Len(); e++ {
			if x, y := out[i].F64(e), out2[i].F64(e); math.Abs(x-y) > 1e-12*math.Max(1, math.Abs(x)) {
				t.Fatalf("result %d[%d] changed by canonicalize,cse,dce: %v → %v", i, e, x, y)
			}
		}
	}
	return train
}

func runGradPipeline(t *testing.T, m *ir.Module, pipeline string) {
	t.Helper()
	pl, err := ParsePipeline(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(m, pl, Config{VerifyEach: true, ReproDir: t.TempDir()}); err != nil {
		t.Fatalf("%s: %v", pipeline, err)
	}
}

// Whole models: the gradients of every parameter through a chain of rules.
var gradModels = []struct {
	name, src string
	vals      map[string][]float64
}{
	{"mlp", `module @mlp attributes {microbatches = 2}
func @forward(%x: f64[4,6] {input}, %labels: i64[4] {input, label}, %w1: f64[6,8] {param}, %b1: f64[8] {param}, %w2: f64[8,3] {param}, %b2: f64[3] {param}) -> (f64[] {loss}) {
  %h = matmul %x, %w1, %b1 : f64[4,8] {stage = 0}
  %a = gelu %h : f64[4,8] {stage = 0}
  %logits = matmul %a, %w2 : f64[4,3] {stage = 1}
  %z = add %logits, %b2 : f64[4,3] {stage = 1}
  %loss = cross_entropy %z, %labels : f64[] {stage = 1}
  return %loss
}
`, map[string][]float64{"labels": {2, 0, 1, 1}}},

	// Pre-norm causal self-attention with two heads, a learned position embedding, a residual
	// and an MSE loss.
	{"attention", `func @forward(%x: f64[2,3,4] {input}, %target: f64[2,3,4] {input, label}, %pos: f64[3,4] {param}, %ln.scale: f64[4] {param}, %ln.bias: f64[4] {param}, %wqkv: f64[4,12] {param}, %wo: f64[4,4] {param}, %out.scale: f64[4] {param}) -> (f64[] {loss}) {
  %xp = add %x, %pos : f64[2,3,4]
  %h = layer_norm %xp, %ln.scale, %ln.bias : f64[2,3,4]
  %qkv = matmul %h, %wqkv : f64[2,3,12]
  %q, %k, %v = split %qkv {axis = 2, sizes = [4, 4, 4]} : f64[2,3,4], f64[2,3,4], f64[2,3,4]
  %q4 = reshape %q {shape = [2, 3, 2, 2]} : f64[2,3,2,2]
  %qh = transpose %q4 {perm = [0, 2, 1, 3]} : f64[2,2,3,2]
  %k4 = reshape %k {shape = [2, 3, 2, 2]} : f64[2,3,2,2]
  %kh = transpose %k4 {perm = [0, 2, 1, 3]} : f64[2,2,3,2]
  %v4 = reshape %v {shape = [2, 3, 2, 2]} : f64[2,3,2,2]
  %vh = transpose %v4 {perm = [0, 2, 1, 3]} : f64[2,2,3,2]
  %s = matmul %qh, %kh {transpose_b = true} : f64[2,2,3,3]
  %c = constant {value = dense<f64[]: 0.7071067811865476>} : f64[]
  %ss = mul %s, %c : f64[2,2,3,3]
  %row = iota {axis = 0, type = i64[3,3]} : i64[3,3]
  %col = iota {axis = 1, type = i64[3,3]} : i64[3,3]
  %future = greater %col, %row : bool[3,3]
  %ninf = constant {value = dense<f64[]: -1e9>} : f64[]
  %masked = where %future, %ninf, %ss : f64[2,2,3,3]
  %p = softmax %masked : f64[2,2,3,3]
  %o = matmul %p, %vh : f64[2,2,3,2]
  %ot = transpose %o {perm = [0, 2, 1, 3]} : f64[2,3,2,2]
  %o2 = reshape %ot {shape = [2, 3, 4]} : f64[2,3,4]
  %proj = matmul %o2, %wo : f64[2,3,4]
  %res = add %xp, %proj : f64[2,3,4]
  %y = rms_norm %res, %out.scale : f64[2,3,4]
  %loss = mse %y, %target : f64[]
  return %loss
}
`, nil},

	// A tied embedding: the token table is gathered and reused, transposed, as the output layer.
	{"tied embedding", `func @forward(%tokens: i64[2,3] {input}, %labels: i64[2,3] {input, label}, %wte: f64[5,4] {param}, %w: f64[4,4] {param}) -> (f64[] {loss}) {
  %e = gather %wte, %tokens : f64[2,3,4]
  %h = matmul %e, %w : f64[2,3,4]
  %t = tanh %h : f64[2,3,4]
  %logits = matmul %t, %wte {transpose_b = true} : f64[2,3,5]
  %loss = cross_entropy %logits, %labels : f64[]
  return %loss
}
`, map[string][]float64{"tokens": {0, 4, 4, 1, 2, 0}, "labels": {1, 0, 4, 4, 3, 2}}},

	// A small CNN: conv → relu → max_pool → batch_norm → strided conv (whose input gradient needs
	// output_padding) → leaky_relu → global avg_pool → linear → cross_entropy.
	{"cnn", `func @forward(%x: f64[2,2,6,6] {input}, %labels: i64[2] {input, label}, %w1: f64[3,2,3,3] {param}, %b1: f64[3] {param}, %bn.scale: f64[3] {param}, %bn.bias: f64[3] {param}, %w2: f64[4,3,3,3] {param}, %fc: f64[4,3] {param}) -> (f64[] {loss}) {
  %mean = constant {value = dense<f64[3]: [0.1, -0.2, 0.3]>} : f64[3]
  %var = constant {value = dense<f64[3]: [0.5, 1.5, 2]>} : f64[3]
  %c1 = conv %x, %w1, %b1 {pads = [1, 1, 1, 1]} : f64[2,3,6,6]
  %r1 = relu %c1 : f64[2,3,6,6]
  %p1 = max_pool %r1 {kernel = [2, 2], strides = [2, 2]} : f64[2,3,3,3]
  %n1 = batch_norm %p1, %bn.scale, %bn.bias, %mean, %var : f64[2,3,3,3]
  %c2 = conv %n1, %w2 {pads = [1, 1, 1, 1], strides = [2, 2]} : f64[2,4,2,2]
  %a2 = leaky_relu %c2 {alpha = 0.1} : f64[2,4,2,2]
  %g = avg_pool %a2 {kernel = [2, 2]} : f64[2,4,1,1]
  %f = reshape %g {shape = [2, 4]} : f64[2,4]
  %logits = matmul %f, %fc : f64[2,3]
  %loss = cross_entropy %logits, %labels : f64[]
  return %loss
}
`, map[string][]float64{"labels": {2, 0}}},
}

func TestGradModels(t *testing.T) {
	for _, c := range gradModels {
		t.Run(c.name, func(t *testing.T) {
			m, err := ir.ParseAndVerify(c.name+".ir", c.src)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			f := m.Func(ir.ForwardFunc)
			args := make([]*ir.Dense, len(f.Args))
			for i, a := range f.Args {
				v, ok := c.vals[a.Name]
				if !ok {
					v = make([]float64, a.Type.NumElements())
					for j := range v {
						v[j] = gradUniform(-1, 1)(rng)
					}
				}
				args[i] = ir.NewDenseF64(a.Type, v)
			}
			train := checkGradients(t, m, args)
			checkPhases(t, train)
		})
	}
}

// checkPhases checks the phase invariants of @train: every op has a phase; forward ops read
// only forward values; bwd_in ops never read bwd_w values (the input-gradient part of the
// backward runs without the weight-gradient part); parameter gradients are bwd_w.
func checkPhases(t *testing.T, f *ir.Func) {
	t.Helper()
	phase := func(v *ir.Value) ir.Phase {
		if v.Def == nil {
			return ir.Fwd
		}
		return v.Def.Phase
	}
	for _, op := range f.Ops {
		switch op.Phase {
		case ir.Fwd, ir.BwdIn, ir.BwdW:
		default:
			t.Errorf("op without a training phase: %s", op)
		}
		for _, x := range op.Operands {
			if p := phase(x); op.Phase == ir.Fwd && p != ir.Fwd || op.Phase == ir.BwdIn && p == ir.BwdW {
				t.Errorf("%s op reads a %s value: %s", op.Phase, p, op)
			}
		}
	}
	for i, r := range f.Results {
		if f.ResultAttrs[i].Has(ir.AttrGrad) && phase(r) != ir.BwdW {
			t.Errorf("gradient %s is computed in phase %s, want bwd_w", r.Name, phase(r))
		}
	}
}
