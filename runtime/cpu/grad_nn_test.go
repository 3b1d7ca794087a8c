package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Tests of the nn gradient kernels (grad_nn.go): each gradient is compared, in float64, with
// central finite differences of its forward op running on this same device (the loss is
// Σ forward·dy for a random dy), and the f32 kernels with the f64 ones.

// nnGradCase is one forward op and the gradient ops that differentiate it.
type nnGradCase struct {
	name, fwd string
	as        ir.Attrs
	// in makes the forward operands (f64; integer operands as they are).
	in func(r *rand.Rand) []device.Tensor
	// grad runs the gradient ops on the forward operands and dy (of one float dtype) and
	// returns the gradient of each forward operand it covers.
	grad func(tb testing.TB, in []device.Tensor, dy device.Tensor) map[int]device.Tensor
	// positive lists operands drawn from [0.5, 2] instead of [−2, 2] (variances).
	positive []int
}

func randT(r *rand.Rand, shape ...int) device.Tensor {
	return f64T(shape, randVals(r, prod(shape), -2, 2))
}

// gradOf returns a grad function running one gradient op with the given operands (picked
// from the forward operands by index, −1 for dy) whose result i is the gradient of operand
// wrt[i].
func gradOf(op string, as ir.Attrs, args []int, wrt ...int) func(tb testing.TB, in []device.Tensor, dy device.Tensor) map[int]device.Tensor {
	return func(tb testing.TB, in []device.Tensor, dy device.Tensor) map[int]device.Tensor {
		var ts []device.Tensor
		for _, a := range args {
			if a < 0 {
				ts = append(ts, dy)
			} else {
				ts = append(ts, in[a])
			}
		}
		out := runOp(tb, op, as, ts...)
		res := map[int]device.Tensor{}
		for i, w := range wrt {
			res[w] = out[i]
		}
		return res
	}
}

// both merges the gradients of several grad functions.
func both(fs ...func(tb testing.TB, in []device.Tensor, dy device.Tensor) map[int]device.Tensor) func(tb testing.TB, in []device.Tensor, dy device.Tensor) map[int]device.Tensor {
	return func(tb testing.TB, in []device.Tensor, dy device.Tensor) map[int]device.Tensor {
		res := map[int]device.Tensor{}
		for _, f := range fs {
			for k, v := range f(tb, in, dy) {
				res[k] = v
			}
		}
		return res
	}
}

func gradX(shape ...int) func(*rand.Rand) []device.Tensor {
	return func(r *rand.Rand) []device.Tensor { return []device.Tensor{randT(r, shape...)} }
}

const dyArg = -1

var nnGradCases = []nnGradCase{
	{name: "conv filter and input (ragged stride)", fwd: "conv",
		as: attrs("strides", []int{2, 3}, "pads", []int{0, 1, 1, 0}, "dilations", []int{1, 2}),
		in: func(r *rand.Rand) []device.Tensor { return []device.Tensor{randT(r, 2, 2, 6, 7), randT(r, 3, 2, 2, 3)} },
		grad: both(
			gradOf("conv_grad_filter", attrs("strides", []int{2, 3}, "pads", []int{0, 1, 1, 0}, "dilations", []int{1, 2},
				"filter_shape", []int{3, 2, 2, 3}), []int{0, dyArg}, 1),
			// The rule's input gradient: (6 + 1 − 2) mod 2 = 1 and (7 + 1 − 5) mod 3 = 0.
			gradOf("conv_transpose", attrs("strides", []int{2, 3}, "pads", []int{0, 1, 1, 0}, "dilations", []int{1, 2},
				"output_padding", []int{1, 0}), []int{dyArg, 1}, 0))},
	{name: "conv groups 1d", fwd: "conv", as: attrs("groups", 2, "pads", []int{1, 2}),
		in:   func(r *rand.Rand) []device.Tensor { return []device.Tensor{randT(r, 3, 4, 5), randT(r, 6, 2, 3)} },
		grad: gradOf("conv_grad_filter", attrs("groups", 2, "pads", []int{1, 2}, "filter_shape", []int{6, 2, 3}), []int{0, dyArg}, 1)},
	{name: "conv pointwise 3d", fwd: "conv", as: nil,
		in: func(r *rand.Rand) []device.Tensor {
			return []device.Tensor{randT(r, 2, 3, 2, 3, 2), randT(r, 4, 3, 1, 1, 1)}
		},
		grad: gradOf("conv_grad_filter", attrs("filter_shape", []int{4, 3, 1, 1, 1}), []int{0, dyArg}, 1)},
	{name: "conv_transpose filter", fwd: "conv_transpose",
		as: attrs("strides", []int{2, 1}, "pads", []int{1, 0, 0, 1}, "groups", 2, "output_padding", []int{1, 0}),
		in: func(r *rand.Rand) []device.Tensor { return []device.Tensor{randT(r, 2, 4, 3, 3), randT(r, 4, 1, 3, 2)} },
		grad: both(
			gradOf("conv_grad_filter", attrs("strides", []int{2, 1}, "pads", []int{1, 0, 0, 1}, "groups", 2,
				"filter_shape", []int{4, 1, 3, 2}), []int{dyArg, 0}, 1),
			gradOf("conv", attrs("strides", []int{2, 1}, "pads", []int{1, 0, 0, 1}, "groups", 2), []int{dyArg, 1}, 0))},
	{name: "max_pool", fwd: "max_pool", as: attrs("kernel", []int{3, 3}, "strides", []int{2, 2}, "pads", []int{1, 1, 1, 1}),
		in:   gradX(2, 3, 5, 6),
		grad: gradOf("max_pool_grad", attrs("kernel", []int{3, 3}, "strides", []int{2, 2}, "pads", []int{1, 1, 1, 1}), []int{0, dyArg}, 0)},
	{name: "max_pool ceil dilated 1d", fwd: "max_pool", as: attrs("kernel", []int{2}, "strides", []int{2}, "dilations", []int{2}, "ceil_mode", true),
		in:   gradX(2, 2, 8),
		grad: gradOf("max_pool_grad", attrs("kernel", []int{2}, "strides", []int{2}, "dilations", []int{2}, "ceil_mode", true), []int{0, dyArg}, 0)},
	{name: "max_pool 3d", fwd: "max_pool", as: attrs("kernel", []int{2, 2, 2}, "strides", []int{1, 2, 1}),
		in:   gradX(1, 2, 3, 4, 3),
		grad: gradOf("max_pool_grad", attrs("kernel", []int{2, 2, 2}, "strides", []int{1, 2, 1}), []int{0, dyArg}, 0)},
	{name: "avg_pool count_include_pad ceil", fwd: "avg_pool",
		as:   attrs("kernel", []int{3, 2}, "strides", []int{2, 2}, "pads", []int{1, 0, 1, 1}, "ceil_mode", true, "count_include_pad", true),
		in:   gradX(2, 2, 6, 5),
		grad: gradOf("avg_pool_grad", attrs("kernel", []int{3, 2}, "strides", []int{2, 2}, "pads", []int{1, 0, 1, 1}, "ceil_mode", true, "count_include_pad", true, "input_shape", []int{2, 2, 6, 5}), []int{dyArg}, 0)},
	{name: "avg_pool global", fwd: "avg_pool", as: attrs("kernel", []int{3, 4}),
		in:   gradX(2, 3, 3, 4),
		grad: gradOf("avg_pool_grad", attrs("kernel", []int{3, 4}, "input_shape", []int{2, 3, 3, 4}), []int{dyArg}, 0)},
	{name: "batch_norm", fwd: "batch_norm", as: attrs("eps", 0.01), positive: []int{4},
		in: func(r *rand.Rand) []device.Tensor {
			return []device.Tensor{randT(r, 2, 3, 2, 2), randT(r, 3), randT(r, 3), randT(r, 3), randT(r, 3)}
		},
		grad: both(gradOf("batch_norm_grad_input", attrs("eps", 0.01), []int{dyArg, 1, 4}, 0),
			gradOf("batch_norm_grad_params", attrs("eps", 0.01), []int{0, dyArg, 3, 4}, 1, 2))},
	{name: "instance_norm", fwd: "instance_norm", as: nil,
		in: func(r *rand.Rand) []device.Tensor {
			return []device.Tensor{randT(r, 2, 3, 2, 3), randT(r, 3), randT(r, 3)}
		},
		grad: both(gradOf("instance_norm_grad_input", nil, []int{0, dyArg, 1}, 0),
			gradOf("instance_norm_grad_params", nil, []int{0, dyArg}, 1, 2))},
	{name: "lrn", fwd: "lrn", as: attrs("size", 3, "alpha", 0.4, "beta", 0.7, "bias", 1.5),
		in:   gradX(2, 5, 3),
		grad: gradOf("lrn_grad", attrs("size", 3, "alpha", 0.4, "beta", 0.7, "bias", 1.5), []int{0, dyArg}, 0)},
	{name: "lrn size 4", fwd: "lrn", as: attrs("size", 4, "alpha", 0.3),
		in:   gradX(1, 6, 2, 2),
		grad: gradOf("lrn_grad", attrs("size", 4, "alpha", 0.3), []int{0, dyArg}, 0)},
	{name: "pad reflect", fwd: "pad", as: attrs("pads", []int{2, 1, 1, 3}, "mode", "reflect"),
		in:   gradX(3, 4),
		grad: gradOf("pad_grad", attrs("pads", []int{2, 1, 1, 3}, "mode", "reflect"), []int{dyArg}, 0)},
	{name: "pad edge with crop", fwd: "pad", as: attrs("pads", []int{0, 1, 3, 0, 2, -1}, "mode", "edge"),
		in:   gradX(1, 2, 3),
		grad: gradOf("pad_grad", attrs("pads", []int{0, 1, 3, 0, 2, -1}, "mode", "edge"), []int{dyArg}, 0)},
	{name: "pad wrap", fwd: "pad", as: attrs("pads", []int{2, 0, 1, 3}, "mode", "wrap"),
		in:   gradX(3, 2),
		grad: gradOf("pad_grad", attrs("pads", []int{2, 0, 1, 3}, "mode", "wrap"), []int{dyArg}, 0)},
	{name: "pad constant", fwd: "pad", as: attrs("pads", []int{1, -1, 0, 2}, "value", 3.0),
		in:   gradX(3, 4),
		grad: gradOf("pad_grad", attrs("pads", []int{1, -1, 0, 2}), []int{dyArg}, 0)},
	{name: "resize linear", fwd: "resize", as: attrs("sizes", []int{1, 2, 5, 7}, "mode", "linear"),
		in:   gradX(1, 2, 3, 4),
		grad: gradOf("resize_grad", attrs("sizes", []int{1, 2, 5, 7}, "mode", "linear", "input_shape", []int{1, 2, 3, 4}), []int{dyArg}, 0)},
	{name: "resize linear align_corners down", fwd: "resize",
		as:   attrs("sizes", []int{1, 1, 3, 6}, "mode", "linear", "coordinate_transformation_mode", "align_corners"),
		in:   gradX(1, 1, 5, 4),
		grad: gradOf("resize_grad", attrs("sizes", []int{1, 1, 3, 6}, "mode", "linear", "coordinate_transformation_mode", "align_corners", "input_shape", []int{1, 1, 5, 4}), []int{dyArg}, 0)},
	{name: "resize nearest", fwd: "resize", as: attrs("sizes", []int{2, 1, 5, 3}, "nearest_mode", "round_prefer_ceil"),
		in:   gradX(2, 1, 2, 4),
		grad: gradOf("resize_grad", attrs("sizes", []int{2, 1, 5, 3}, "nearest_mode", "round_prefer_ceil", "input_shape", []int{2, 1, 2, 4}), []int{dyArg}, 0)},
	{name: "resize cubic", fwd: "resize", as: attrs("sizes", []int{1, 1, 6, 3}, "mode", "cubic", "exclude_outside", true),
		in:   gradX(1, 1, 4, 4),
		grad: gradOf("resize_grad", attrs("sizes", []int{1, 1, 6, 3}, "mode", "cubic", "exclude_outside", true, "input_shape", []int{1, 1, 4, 4}), []int{dyArg}, 0)},
	{name: "resize cubic a=0", fwd: "resize", as: attrs("sizes", []int{1, 1, 5, 3}, "mode", "cubic", "cubic_coeff_a", 0.0),
		in:   gradX(1, 1, 3, 4),
		grad: gradOf("resize_grad", attrs("sizes", []int{1, 1, 5, 3}, "mode", "cubic", "cubic_coeff_a", 0.0, "input_shape", []int{1, 1, 3, 4}), []int{dyArg}, 0)},
	{name: "gather_elements", fwd: "gather_elements", as: attrs("axis", 1),
		in: func(r *rand.Rand) []device.Tensor {
			return []device.Tensor{randT(r, 3, 4), i64T([]int{2, 5}, 0, 3, 3, -1, 2, 1, 1, 0, -4, 2)}
		},
		grad: gradOf("gather_elements_grad", attrs("axis", 1, "shape", []int{3, 4}), []int{1, dyArg}, 0)},
	{name: "reduce_min", fwd: "reduce_min", as: attrs("axes", []int{0, 2}),
		in: gradX(2, 3, 4),
		grad: func(tb testing.TB, in []device.Tensor, dy device.Tensor) map[int]device.Tensor {
			y := runOp(tb, "reduce_min", attrs("axes", []int{0, 2}), in[0])[0]
			return map[int]device.Tensor{0: runOp(tb, "reduce_min_grad", attrs("axes", []int{0, 2}), in[0], y, dy)[0]}
		}},
	{name: "reduce_prod adjacent", fwd: "reduce_prod", as: attrs("axes", []int{1, 2}, "keepdims", true),
		in:   gradX(2, 3, 2),
		grad: gradOf("reduce_prod_grad", attrs("axes", []int{1, 2}, "keepdims", true), []int{0, dyArg}, 0)},
	{name: "reduce_prod non-adjacent", fwd: "reduce_prod", as: attrs("axes", []int{0, 2}),
		in:   gradX(2, 3, 3),
		grad: gradOf("reduce_prod_grad", attrs("axes", []int{0, 2}), []int{0, dyArg}, 0)},
	{name: "reduce_prod with zeros", fwd: "reduce_prod", as: attrs("axes", []int{1}),
		in: func(*rand.Rand) []device.Tensor {
			return []device.Tensor{f64T([]int{3, 3}, []float64{0, 1.5, -2, 0, 0, 3, 0.5, 1.25, -1})}
		},
		grad: gradOf("reduce_prod_grad", attrs("axes", []int{1}), []int{0, dyArg}, 0)},
}

func TestNNGradsFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, c := range nnGradCases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in(r)
			for _, i := range c.positive {
				in[i] = f64T(in[i].Type.Shape, randVals(r, in[i].Type.NumElements(), 0.5, 2))
			}
			y := runOp(t, c.fwd, c.as, in...)[0]
			dyv := randVals(r, y.Type.NumElements(), -1, 1)
			dy := f64T(y.Type.Shape, dyv)
			got := c.grad(t, in, dy)
			if len(got) == 0 {
				t.Fatal("no gradients")
			}
			for i, g := range got {
				if !g.Type.Equal(in[i].Type) {
					t.Fatalf("gradient of operand %d is %s, want %s", i, g.Type, in[i].Type)
				}
				checkFD(t, c.name+": operand "+strconv.Itoa(i), values(g), fdGrad(values(in[i]), fdStep, forwardLoss(t, c.fwd, c.as, in, i, dyv)))
			}
			// f32: the same gradients within f32 accuracy.
			in32 := make([]device.Tensor, len(in))
			for i, x := range in {
				if in32[i] = x; x.Type.DType == ir.F64 {
					in32[i] = tensorOf(ir.F32, x.Type.Shape, values(x))
				}
			}
			for i, g := range c.grad(t, in32, tensorOf(ir.F32, y.Type.Shape, dyv)) {
				if e := relErr(values(g), values(got[i]), 1e-6); e > 1e-5 {
					t.Errorf("f32 gradient of operand %d: relative error %.2g vs f64", i, e)
				}
			}
		})
	}
}

func TestNNElementwiseGrads(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for _, c := range []struct {
		grad, fwd string
		as        ir.Attrs
		lo, hi    float64
	}{
		{"elu_grad", "elu", nil, -3, 3},
		{"elu_grad", "elu", attrs("alpha", 0.4), -3, 3},
		{"selu_grad", "selu", nil, -3, 3},
		{"selu_grad", "selu", attrs("alpha", 1.2, "gamma", 0.9), -3, 3},
		{"leaky_relu_grad", "leaky_relu", nil, -3, 3},
		{"leaky_relu_grad", "leaky_relu", attrs("alpha", 0.3), -3, 3},
		{"softplus_grad", "softplus", nil, -30, 30},
		{"hard_sigmoid_grad", "hard_sigmoid", nil, -5, 5},
		{"hard_sigmoid_grad", "hard_sigmoid", attrs("alpha", 0.5, "beta", 0.1), -3, 3},
		{"shrink_grad", "shrink", attrs("bias", 0.2), -2, 2},
		{"shrink_grad", "shrink", attrs("lambd", 1.0), -2, 2},
	} {
		shape := randShape(r, 2, 2, 6)
		xv := randVals(r, prod(shape), c.lo, c.hi)
		for i := range xv { // keep away from the kinks (0, ±lambd, the ends of hard_sigmoid's ramp)
			for _, kink := range []float64{0, 0.5, -0.5, 1, -1, -2.5, 2.5, -0.2, 1.8} {
				if math.Abs(xv[i]-kink) < 1e-3 {
					xv[i] += 0.01
				}
			}
		}
		dyv := randVals(r, prod(shape), -1, 1)
		x := f64T(shape, xv)
		gradAs := c.as
		if c.grad == "shrink_grad" {
			gradAs = gradAs.Delete("bias")
		}
		got := run1(t, c.grad, gradAs, x, f64T(shape, dyv))
		checkFD(t, c.grad+" "+ir.AttrString(ir.Dict(c.as)), got, fdGrad(xv, fdStep, forwardLoss(t, c.fwd, c.as, []device.Tensor{x}, 0, dyv)))
		g32 := run1(t, c.grad, gradAs, tensorOf(ir.F32, shape, xv), tensorOf(ir.F32, shape, dyv))
		closeTo(t, c.grad+" f32", g32, got, 4*tolFor(ir.F32))
	}
}

// Preparation checks dtypes and geometry and returns errors, never panics, for specs the
// verifier would not produce.
func TestNNGradPrepareErrors(t *testing.T) {
	f64 := func(s ...int) ir.Type { return ir.T(ir.F64, s...) }
	i64 := func(s ...int) ir.Type { return ir.T(ir.I64, s...) }
	for _, c := range []struct {
		op      string
		as      ir.Attrs
		in, out []ir.Type
	}{
		{"conv_grad_filter", nil, []ir.Type{f64(1, 2, 4, 4), f64(1, 3, 3, 3)}, []ir.Type{f64(3, 2, 3, 3)}}, // dy does not match
		{"conv_grad_filter", nil, []ir.Type{i64(1, 2, 4, 4), i64(1, 3, 2, 2)}, []ir.Type{i64(3, 2, 3, 3)}},
		{"max_pool_grad", attrs("kernel", []int{2, 2}), []ir.Type{f64(1, 1, 4, 4), f64(1, 1, 2, 2)}, []ir.Type{f64(1, 1, 4, 4)}},
		{"avg_pool_grad", attrs("kernel", []int{2}), []ir.Type{f64(1, 1, 2)}, []ir.Type{f64(1, 1, 4)}},
		{"batch_norm_grad_input", nil, []ir.Type{f64(2, 3), f64(3), f64(2)}, []ir.Type{f64(2, 3)}},
		{"batch_norm_grad_params", nil, []ir.Type{f64(2, 3), f64(2, 3), f64(3), f64(3)}, []ir.Type{f64(3)}},
		{"instance_norm_grad_input", nil, []ir.Type{f64(2, 3), f64(2, 3), f64(3)}, []ir.Type{f64(2, 3)}},
		{"instance_norm_grad_params", nil, []ir.Type{i64(2, 3, 2), i64(2, 3, 2)}, []ir.Type{i64(3), i64(3)}},
		{"lrn_grad", attrs("size", 0), []ir.Type{f64(2, 3), f64(2, 3)}, []ir.Type{f64(2, 3)}},
		{"pad_grad", attrs("pads", []int{1, 1}), []ir.Type{f64(4)}, []ir.Type{f64(3)}},
		{"pad_grad", attrs("pads", []int{3, 0}, "mode", "reflect"), []ir.Type{f64(5)}, []ir.Type{f64(2)}},
		{"resize_grad", attrs("sizes", []int{4}), []ir.Type{f64(3)}, []ir.Type{f64(2)}},
		{"gather_elements_grad", attrs("axis", 2, "shape", []int{2, 2}), []ir.Type{i64(2, 2), f64(2, 2)}, []ir.Type{f64(2, 2)}},
		{"gather_elements_grad", attrs("axis", 0, "shape", []int{2, 1}), []ir.Type{i64(2, 2), f64(2, 2)}, []ir.Type{f64(2, 1)}},
		{"reduce_prod_grad", attrs("axes", []int{0}), []ir.Type{f64(2, 3), f64(2)}, []ir.Type{f64(2, 3)}},
	} {
		op := ir.MustLookup(c.op)
		impl, err := testDev.Prepare(&device.Spec{Op: op, Attrs: c.as.Sorted(), In: c.in, Out: c.out})
		if err == nil || impl != nil {
			t.Errorf("%s %v → %v: prepared without an error", c.op, c.in, c.out)
		}
	}
}

// The kernels that accumulate (pooling, pad, gather_elements, conv filters) give the same
// bits on every run.
func TestNNGradsDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	for _, c := range nnGradCases {
		in := c.in(r)
		for _, i := range c.positive {
			in[i] = f64T(in[i].Type.Shape, randVals(r, in[i].Type.NumElements(), 0.5, 2))
		}
		y := runOp(t, c.fwd, c.as, in...)[0]
		dy := f64T(y.Type.Shape, randVals(r, y.Type.NumElements(), -1, 1))
		a, b := c.grad(t, in, dy), c.grad(t, in, dy)
		for i := range a {
			if !slices.Equal(a[i].Data, b[i].Data) {
				t.Errorf("%s: operand %d's gradient differs between runs", c.name, i)
			}
		}
	}
}
