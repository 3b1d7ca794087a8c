package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

// ewCase is one elementwise launch site to generate, compile and run.
type ewCase struct {
	name string
	spec *device.Spec
	// ulps: how far from the CPU device a result may be, in units of the result dtype's
	// last place (0: bit-exact). Transcendentals differ by a few ulps between libraries;
	// 16-bit results of f32 arithmetic may round once more than the CPU's float64 path.
	ulps float64
	// abs: an absolute tolerance besides (log_softmax's x − max − log Σ cancels near 0).
	abs float64
	// labels, when positive, draws integer operands in [0, labels) (class labels) instead of
	// [-10, 10].
	labels int
}

var (
	f32 = ir.F32
	bf  = ir.BF16
	f16 = ir.F16
)

func ty(d ir.DType, s ...int) ir.Type { return ir.Type{DType: d, Shape: ir.Shape(s)} }

// ewCases: every elementwise op ppc's CUDA device has, on an odd-sized output (105 elements,
// not a multiple of any block size used) with broadcast inputs, in f32 and in the 16-bit
// dtypes; integer and boolean ops; and fused chains as the lowering makes them.
func ewCases() []ewCase {
	out := []int{3, 5, 7}
	var cs []ewCase
	op := func(name string, at ir.Attrs, ulps float64, in []ir.Type, o ir.Type) {
		cs = append(cs, ewCase{fmt.Sprintf("k%d_%s", len(cs), name), &device.Spec{Op: ir.MustLookup(name), Attrs: at, In: in, Out: []ir.Type{o}}, ulps, 0, 0})
	}
	for _, d := range []ir.DType{f32, bf, f16, ir.F64} {
		low := 0.0
		if d == bf || d == f16 {
			low = 1
		}
		full, row, scalar := ty(d, out...), ty(d, 7), ty(d)
		for _, name := range []string{"add", "sub", "mul", "div", "max", "min"} {
			op(name, nil, low, []ir.Type{full, row}, full)
		}
		op("pow", nil, 8, []ir.Type{full, scalar}, full)
		for _, name := range []string{"neg", "abs", "relu", "stop_gradient", "sqrt"} {
			op(name, nil, low, []ir.Type{full}, full)
		}
		for _, name := range []string{"exp", "log", "tanh", "sigmoid", "silu", "erf", "sin", "cos", "rsqrt"} {
			op(name, nil, 8, []ir.Type{full}, full)
		}
		// erfc's tail (GELU at negative x) differs by up to tens of ulps between libraries.
		op("gelu", nil, 32, []ir.Type{full}, full)
		op("gelu", ir.Attrs{{Name: "approximate", Value: ir.String("tanh")}}, 8, []ir.Type{full}, full)
		for _, name := range []string{"equal", "less", "greater"} {
			op(name, nil, 0, []ir.Type{full, ty(d, 5, 1)}, ty(ir.Bool, out...))
		}
		op("where", nil, 0, []ir.Type{ty(ir.Bool, 5, 7), full, scalar}, full)
	}
	i64 := ty(ir.I64, out...)
	for _, name := range []string{"add", "sub", "mul", "div", "max", "min"} {
		op(name, nil, 0, []ir.Type{i64, ty(ir.I64, 7)}, i64)
	}
	b := ty(ir.Bool, out...)
	op("and", nil, 0, []ir.Type{b, ty(ir.Bool, 5, 1)}, b)
	op("or", nil, 0, []ir.Type{b, b}, b)
	op("not", nil, 0, []ir.Type{b}, b)
	// Casts between every pair of float dtypes, and to and from integers.
	for _, from := range []ir.DType{f32, bf, f16, ir.F64, ir.I32} {
		for _, to := range []ir.DType{f32, bf, f16, ir.F64, ir.I64} {
			if from != to {
				op("cast", nil, 0, []ir.Type{ty(from, out...)}, ty(to, out...))
			}
		}
	}
	// Fused chains: a bias and GELU in bf16 (x·w + b, gelu, cast), and a causal mask step.
	step := func(name string, args []int, at ir.Attrs, t ir.Type) device.FusedStep {
		return device.FusedStep{Op: ir.MustLookup(name), Args: args, Attrs: at, Type: t}
	}
	cs = append(cs, ewCase{"k_fused_bias_gelu", &device.Spec{
		In: []ir.Type{ty(f32, out...), ty(f32, 7), ty(f32)},
		Fused: []device.FusedStep{step("mul", []int{0, 2}, nil, ty(f32, out...)), step("add", []int{3, 1}, nil, ty(f32, out...)),
			step("gelu", []int{4}, ir.Attrs{{Name: "approximate", Value: ir.String("tanh")}}, ty(f32, out...)), step("cast", []int{5}, nil, ty(bf, out...))},
		Out: []ir.Type{ty(bf, out...)}}, 1, 0, 0})
	cs = append(cs, ewCase{"k_fused_mask", &device.Spec{
		In: []ir.Type{ty(bf, out...), ty(ir.Bool, 5, 7), ty(bf)},
		Fused: []device.FusedStep{step("mul", []int{0, 2}, nil, ty(bf, out...)), step("where", []int{1, 2, 3}, nil, ty(bf, out...)),
			step("exp", []int{4}, nil, ty(f32, out...))},
		Out: []ir.Type{ty(f32, out...)}}, 8, 0, 0})
	// Data movement, reductions and softmax (Generate), on odd shapes.
	x := ty(f32, 3, 5, 7)
	op("reshape", ir.Attrs{{Name: "shape", Value: ir.Ints(15, 7)}}, 0, []ir.Type{ty(bf, 3, 5, 7)}, ty(bf, 15, 7))
	op("transpose", ir.Attrs{{Name: "perm", Value: ir.Ints(2, 0, 1)}}, 0, []ir.Type{x}, ty(f32, 7, 3, 5))
	op("transpose", ir.Attrs{{Name: "perm", Value: ir.Ints(0, 2, 1, 3)}}, 0, []ir.Type{ty(f16, 2, 3, 5, 7)}, ty(f16, 2, 5, 3, 7))
	op("broadcast", ir.Attrs{{Name: "shape", Value: ir.Ints(3, 5, 7)}}, 0, []ir.Type{ty(f32, 5, 1)}, x)
	op("iota", ir.Attrs{{Name: "type", Value: ir.TypeAttr(ty(ir.I64, 5, 7))}, {Name: "axis", Value: ir.Int(1)}}, 0, nil, ty(ir.I64, 5, 7))
	op("iota", ir.Attrs{{Name: "type", Value: ir.TypeAttr(ty(f32, 5, 7))}, {Name: "axis", Value: ir.Int(0)}}, 0, nil, ty(f32, 5, 7))
	for _, kind := range []string{"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_log_sum_exp"} {
		op(kind, ir.Attrs{{Name: "axes", Value: ir.Ints(-1)}}, 64, []ir.Type{x}, ty(f32, 3, 5))
		op(kind, ir.Attrs{{Name: "axes", Value: ir.Ints(0, 2)}, {Name: "keepdims", Value: ir.BoolAttr(true)}}, 64, []ir.Type{x}, ty(f32, 1, 5, 1))
		op(kind, nil, 64, []ir.Type{ty(bf, 3, 5, 7)}, ty(bf))
	}
	// Few results over many elements: planned in chunks (planReduce), summed in another
	// order than the CPU device's.
	for _, kind := range []string{"reduce_sum", "reduce_mean", "reduce_max", "reduce_min"} {
		op(kind, ir.Attrs{{Name: "axes", Value: ir.Ints(0, 1)}}, 256, []ir.Type{ty(f32, 40, 30, 3)}, ty(f32, 3))
		op(kind, ir.Attrs{{Name: "axes", Value: ir.Ints(1)}}, 256, []ir.Type{ty(bf, 3, 1100, 2)}, ty(bf, 3, 2))
	}
	for _, kind := range []string{"softmax", "log_softmax"} {
		n := len(cs)
		op(kind, nil, 16, []ir.Type{x}, x)
		op(kind, ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, 16, []ir.Type{x}, x)
		op(kind, nil, 2, []ir.Type{ty(bf, 3, 5, 7)}, ty(bf, 3, 5, 7))
		op(kind, nil, 16, []ir.Type{ty(ir.F64, 3, 5, 7)}, ty(ir.F64, 3, 5, 7))
		if kind == "log_softmax" {
			for i, a := range []float64{4e-6, 4e-6, 1.0 / 64, 1e-14} {
				cs[n+i].abs = a
			}
		}
	}
	// Normalisations over the last dims, with and without scale and bias, and their input
	// gradients (the statistics' summation order differs from the CPU's: a few ulps, and
	// an absolute 1e-5 where x − μ cancels).
	for _, d := range []ir.DType{f32, bf, ir.F64} {
		x := ty(d, 3, 5, 7)
		row, rows2 := ty(d, 7), ty(d, 5, 7)
		a := map[ir.DType]float64{f32: 1e-5, bf: 1.0 / 32, ir.F64: 1e-12}[d]
		first := len(cs)
		op("layer_norm", nil, 64, []ir.Type{x}, x)
		op("layer_norm", nil, 64, []ir.Type{x, row, row}, x)
		op("layer_norm", ir.Attrs{{Name: "axis", Value: ir.Int(1)}, {Name: "eps", Value: ir.Float(1e-3)}}, 64, []ir.Type{x, rows2}, x)
		op("rms_norm", nil, 64, []ir.Type{x, row}, x)
		op("layer_norm_grad_input", nil, 64, []ir.Type{x, x, row}, x)
		op("layer_norm_grad_input", ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, 64, []ir.Type{x, x}, x)
		op("rms_norm_grad_input", nil, 64, []ir.Type{x, x, row}, x)
		for i := first; i < len(cs); i++ {
			cs[i].abs = a
		}
	}
	// Rows longer than a block: each of rows.go's threads folds several elements, and
	// the threads fold their partial results in a tree.
	{
		long, col := ty(f32, 3, 200), ty(f32, 200)
		first := len(cs)
		op("softmax", nil, 16, []ir.Type{long}, long)
		op("log_softmax", nil, 16, []ir.Type{ty(bf, 2, 150)}, ty(bf, 2, 150))
		op("softmax_grad", nil, 16, []ir.Type{long, long}, long)
		op("log_softmax_grad", nil, 16, []ir.Type{long, long}, long)
		op("layer_norm", nil, 64, []ir.Type{long, col, col}, long)
		op("rms_norm", nil, 64, []ir.Type{long, col}, long)
		op("layer_norm_grad_input", nil, 64, []ir.Type{long, long, col}, long)
		op("rms_norm_grad_input", nil, 64, []ir.Type{long, long}, long)
		for i := first; i < len(cs); i++ {
			cs[i].abs = 1e-5
		}
		cs[first+1].abs = 1.0 / 64
		// The gradients' sums of 200 random products cancel, and the CPU device sums them
		// with several accumulators: a few thousandths on results in the hundreds.
		cs[first+2].abs, cs[first+3].abs = 1e-2, 1e-2
	}
	// Concatenation, split (one kernel per result) and slices with steps, as the rotary
	// embedding's halves and a fused QKV projection use them.
	op("concat", ir.Attrs{{Name: "axis", Value: ir.Int(-1)}}, 0, []ir.Type{ty(bf, 3, 5, 2), ty(bf, 3, 5, 5), ty(bf, 3, 5, 1)}, ty(bf, 3, 5, 8))
	op("concat", ir.Attrs{{Name: "axis", Value: ir.Int(0)}}, 0, []ir.Type{ty(f32, 2, 7), ty(f32, 3, 7)}, ty(f32, 5, 7))
	cs = append(cs, ewCase{fmt.Sprintf("k%d_split", len(cs)), &device.Spec{Op: ir.MustLookup("split"),
		Attrs: ir.Attrs{{Name: "axis", Value: ir.Int(1)}, {Name: "sizes", Value: ir.Ints(1, 3, 1)}}, In: []ir.Type{ty(f32, 3, 5, 7)},
		Out: []ir.Type{ty(f32, 3, 1, 7), ty(f32, 3, 3, 7), ty(f32, 3, 1, 7)}}, 0, 0, 0})
	op("slice", ir.Attrs{{Name: "axes", Value: ir.Ints(2)}, {Name: "ends", Value: ir.Ints(7)}, {Name: "starts", Value: ir.Ints(1)}, {Name: "steps", Value: ir.Ints(2)}}, 0, []ir.Type{ty(f16, 3, 5, 7)}, ty(f16, 3, 5, 3))
	op("slice", ir.Attrs{{Name: "axes", Value: ir.Ints(0, 1)}, {Name: "ends", Value: ir.Ints(-1, 1)}, {Name: "starts", Value: ir.Ints(2, 4)}, {Name: "steps", Value: ir.Ints(-1, -2)}}, 0, []ir.Type{ty(ir.I64, 3, 5, 7)}, ty(ir.I64, 3, 2, 7))
	// arg_max and arg_min (ties and NaN as the CPU device: first of equals unless
	// select_last_index), on floats and integers.
	op("arg_max", ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, 0, []ir.Type{x}, ty(ir.I64, 3, 7))
	op("arg_min", ir.Attrs{{Name: "axis", Value: ir.Int(-1)}, {Name: "select_last_index", Value: ir.BoolAttr(true)}}, 0, []ir.Type{ty(ir.F64, 3, 5, 7)}, ty(ir.I64, 3, 5))
	op("arg_max", ir.Attrs{{Name: "axis", Value: ir.Int(0)}}, 0, []ir.Type{ty(ir.I64, 3, 5, 7)}, ty(ir.I64, 5, 7))
	op("arg_min", ir.Attrs{{Name: "axis", Value: ir.Int(2)}, {Name: "select_last_index", Value: ir.BoolAttr(true)}}, 0, []ir.Type{ty(ir.I32, 3, 5, 7)}, ty(ir.I64, 3, 5))
	// MSE and its gradient, every reduction.
	for _, d := range []ir.DType{f32, ir.F64} {
		t := ty(d, 3, 5, 7)
		for _, red := range []string{"mean", "sum", "none"} {
			at := ir.Attrs{{Name: "reduction", Value: ir.Ident(red)}}
			lossT := ty(d)
			if red == "none" {
				lossT = t
			}
			op("mse", at, 4, []ir.Type{t, t}, lossT)
			op("mse_grad", at, 0, []ir.Type{t, t, lossT}, t)
		}
	}
	// pad in every mode (negative pads crop), and its gradient.
	pad := func(mode string, pads []int, value float64) ir.Attrs {
		return ir.Attrs{{Name: "mode", Value: ir.Ident(mode)}, {Name: "pads", Value: ir.Ints(pads...)}, {Name: "value", Value: ir.Float(value)}}
	}
	op("pad", pad("constant", []int{0, 1, 2, 1, -1, 3}, 2.5), 0, []ir.Type{ty(bf, 3, 5, 7)}, ty(bf, 4, 5, 12))
	op("pad", pad("constant", []int{1, 0, 0, 0, 2, 1}, -3), 0, []ir.Type{ty(ir.I64, 3, 5, 7)}, ty(ir.I64, 4, 7, 8))
	for _, mode := range []string{"edge", "reflect", "wrap"} {
		op("pad", pad(mode, []int{0, 2, 3, 0, 4, 1}, 0), 0, []ir.Type{x}, ty(f32, 3, 11, 11))
		op("pad_grad", pad(mode, []int{0, 2, 3, 0, 4, 1}, 0), 8, []ir.Type{ty(f32, 3, 11, 11)}, x)
		cs[len(cs)-1].abs = 1e-5
	}
	op("pad_grad", pad("constant", []int{0, 1, 2, 1, -1, 3}, 0), 0, []ir.Type{ty(ir.F64, 4, 5, 12)}, ty(ir.F64, 3, 5, 7))
	// Gradients of reductions: max and min give dy to the first element equal to the
	// result (fixInputs makes y the real reduction, with ties), prod the product of the others.
	for _, kind := range []string{"max", "min"} {
		for _, at := range []ir.Attrs{{{Name: "axes", Value: ir.Ints(-1)}}, {{Name: "axes", Value: ir.Ints(0, 2)}, {Name: "keepdims", Value: ir.BoolAttr(true)}}} {
			yt := ty(f32, 3, 5)
			if len(at) > 1 {
				yt = ty(f32, 1, 5, 1)
			}
			op("reduce_"+kind+"_grad", at, 0, []ir.Type{x, yt, yt}, x)
			fixInputs[cs[len(cs)-1].name] = reduceFix("reduce_"+kind, at)
		}
	}
	op("reduce_prod_grad", ir.Attrs{{Name: "axes", Value: ir.Ints(1)}}, 8, []ir.Type{x, ty(f32, 3, 7)}, x)
	op("reduce_prod_grad", ir.Attrs{{Name: "axes", Value: ir.Ints(0, 2)}}, 8, []ir.Type{ty(ir.F64, 3, 5, 7), ty(ir.F64, 5)}, ty(ir.F64, 3, 5, 7))
	// slice's gradient, with steps (one negative).
	op("slice_grad", ir.Attrs{{Name: "axes", Value: ir.Ints(0, 2)}, {Name: "ends", Value: ir.Ints(-1, 7)}, {Name: "starts", Value: ir.Ints(2, 1)}, {Name: "steps", Value: ir.Ints(-2, 3)}}, 0, []ir.Type{ty(f32, 2, 5, 2)}, x)
	// Gathers (an embedding lookup, with repeated and negative indices), and their backward.
	op("gather", nil, 0, []ir.Type{ty(f32, 11, 5), ty(ir.I64, 3, 7)}, ty(f32, 3, 7, 5))
	op("gather", ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, 0, []ir.Type{ty(bf, 3, 11, 5), ty(ir.I32, 4)}, ty(bf, 3, 4, 5))
	op("gather_grad", ir.Attrs{{Name: "axis", Value: ir.Int(0)}, {Name: "dim", Value: ir.Int(11)}}, 16, []ir.Type{ty(ir.I64, 3, 7), ty(f32, 3, 7, 5)}, ty(f32, 11, 5))
	op("gather_grad", ir.Attrs{{Name: "axis", Value: ir.Int(1)}, {Name: "dim", Value: ir.Int(11)}}, 16, []ir.Type{ty(ir.I32, 4), ty(ir.F64, 3, 4, 5)}, ty(ir.F64, 3, 11, 5))
	// gather_elements (the loss's pick of each label's logit) and its backward, with data
	// larger than the indices off the axis.
	op("gather_elements", ir.Attrs{{Name: "axis", Value: ir.Int(-1)}}, 0, []ir.Type{ty(f32, 3, 6, 11), ty(ir.I64, 3, 5, 2)}, ty(f32, 3, 5, 2))
	op("gather_elements", ir.Attrs{{Name: "axis", Value: ir.Int(0)}}, 0, []ir.Type{ty(bf, 11, 4), ty(ir.I32, 7, 4)}, ty(bf, 7, 4))
	op("gather_elements_grad", ir.Attrs{{Name: "axis", Value: ir.Int(2)}, {Name: "shape", Value: ir.Ints(3, 6, 11)}}, 16, []ir.Type{ty(ir.I64, 3, 5, 2), ty(f32, 3, 5, 2)}, ty(f32, 3, 6, 11))
	op("gather_elements_grad", ir.Attrs{{Name: "axis", Value: ir.Int(0)}, {Name: "shape", Value: ir.Ints(11, 4)}}, 16, []ir.Type{ty(ir.I32, 7, 4), ty(ir.F64, 7, 4)}, ty(ir.F64, 11, 4))
	// Norms' parameter gradients (two results for layer_norm: one kernel each).
	for _, d := range []ir.DType{f32, bf, ir.F64} {
		x := ty(d, 3, 5, 7)
		a := map[ir.DType]float64{f32: 1e-5, bf: 1.0 / 16, ir.F64: 1e-12}[d]
		first := len(cs)
		cs = append(cs, ewCase{fmt.Sprintf("k%d_layer_norm_grad_params", len(cs)), &device.Spec{Op: ir.MustLookup("layer_norm_grad_params"),
			In: []ir.Type{x, x}, Out: []ir.Type{ty(d, 7), ty(d, 7)}}, 64, 0, 0})
		cs = append(cs, ewCase{fmt.Sprintf("k%d_layer_norm_grad_params", len(cs)), &device.Spec{Op: ir.MustLookup("layer_norm_grad_params"),
			Attrs: ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, In: []ir.Type{x, x}, Out: []ir.Type{ty(d, 5, 7), ty(d, 5, 7)}}, 64, 0, 0})
		op("rms_norm_grad_params", nil, 64, []ir.Type{x, x}, ty(d, 7))
		// 150 rows: three chunks of 64, whose partial sums add in order.
		long := ty(d, 3, 50, 7)
		cs = append(cs, ewCase{fmt.Sprintf("k%d_layer_norm_grad_params", len(cs)), &device.Spec{Op: ir.MustLookup("layer_norm_grad_params"),
			In: []ir.Type{long, long}, Out: []ir.Type{ty(d, 7), ty(d, 7)}}, 64, 0, 0})
		op("rms_norm_grad_params", nil, 64, []ir.Type{long, long}, ty(d, 7))
		for i := first; i < len(cs); i++ {
			cs[i].abs = a
		}
	}
	// Cross-entropy over 11 classes, every reduction, with an ignored label, and its gradient.
	for _, d := range []ir.DType{f32, ir.F64} {
		logits, labels := ty(d, 3, 5, 11), ty(ir.I64, 3, 5)
		ulps, abs := 64.0, map[ir.DType]float64{f32: 1e-5, ir.F64: 1e-13}[d]
		for _, red := range []string{"mean", "sum", "none"} {
			at := ir.Attrs{{Name: "ignore_index", Value: ir.Int(2)}, {Name: "reduction", Value: ir.Ident(red)}}
			lossT := ty(d)
			if red == "none" {
				lossT = ty(d, 3, 5)
			}
			op("cross_entropy", at, ulps, []ir.Type{logits, labels}, lossT)
			cs[len(cs)-1].labels, cs[len(cs)-1].abs = 11, abs
			op("cross_entropy_grad", at, ulps, []ir.Type{logits, labels, lossT}, logits)
			cs[len(cs)-1].labels, cs[len(cs)-1].abs = 11, abs
		}
	}
	op("cross_entropy", nil, 64, []ir.Type{ty(f32, 6, 11), ty(ir.I32, 6)}, ty(f32))
	cs[len(cs)-1].labels, cs[len(cs)-1].abs = 11, 1e-5
	// A vocabulary longer than rowThreshold: a block per row (labels 0–2, 2 ignored).
	for _, red := range []string{"mean", "none"} {
		at := ir.Attrs{{Name: "ignore_index", Value: ir.Int(2)}, {Name: "reduction", Value: ir.Ident(red)}}
		logits, labels, lossT := ty(f32, 2, 3, 1500), ty(ir.I64, 2, 3), ty(f32)
		if red == "none" {
			lossT = ty(f32, 2, 3)
		}
		op("cross_entropy", at, 64, []ir.Type{logits, labels}, lossT)
		cs[len(cs)-1].labels, cs[len(cs)-1].abs = 3, 1e-5
		op("cross_entropy_grad", at, 64, []ir.Type{logits, labels, lossT}, logits)
		cs[len(cs)-1].labels, cs[len(cs)-1].abs = 3, 1e-6
	}
	// Gradients: elementwise ones (operands x or y, and dy), and softmax's along an axis.
	for _, d := range []ir.DType{f32, bf, ir.F64} {
		t := ty(d, 3, 5, 7)
		low := 8.0
		if d == bf {
			low = 1
		}
		// The CPU device evaluates these formulas in float64 and rounds once; a GPU evaluates
		// them in the dtype, where 1 − y² and erfc + x·φ cancel: an absolute 1e-6 (f32).
		abs := map[ir.DType]float64{f32: 1e-6, bf: 1.0 / 64, ir.F64: 1e-14}[d]
		first := len(cs)
		for _, name := range []string{"relu_grad", "silu_grad", "sigmoid_grad", "tanh_grad"} {
			op(name, nil, low, []ir.Type{t, t}, t)
		}
		op("gelu_grad", nil, 32, []ir.Type{t, t}, t)
		op("gelu_grad", ir.Attrs{{Name: "approximate", Value: ir.String("tanh")}}, 32, []ir.Type{t, t}, t)
		for i := first; i < len(cs); i++ {
			cs[i].abs = abs
		}
		for _, name := range []string{"softmax_grad", "log_softmax_grad"} {
			op(name, nil, 64, []ir.Type{t, t}, t)
			op(name, ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, 64, []ir.Type{t, t}, t)
			cs[len(cs)-1].abs, cs[len(cs)-2].abs = 1e-5, 1e-5 // y·(dy − s) cancels
			if d == bf {
				cs[len(cs)-1].abs, cs[len(cs)-2].abs = 1.0/32, 1.0/32
			}
		}
	}
	for _, more := range moreCases {
		cs = append(cs, more()...)
	}
	return cs
}

// fixInputs adjusts a case's random operands (by case name) before it runs.
var fixInputs = map[string]func(in []device.Tensor){}

// reduceFix makes operand 1 the reduction of operand 0 with some ties: the operands of a
// reduce_max_grad or reduce_min_grad case.
func reduceFix(op string, at ir.Attrs) func(in []device.Tensor) {
	return func(in []device.Tensor) {
		x := in[0].F32()
		for i := 0; i+3 < len(x); i += 5 {
			x[i+3] = x[i] // ties within the groups
		}
		impl, err := cpu.New().Prepare(&device.Spec{Op: ir.MustLookup(op), Attrs: at, In: []ir.Type{in[0].Type}, Out: []ir.Type{in[1].Type}})
		if err != nil {
			panic(err)
		}
		if err := impl(in[:1], in[1:2]); err != nil {
			panic(err)
		}
	}
}

// moreCases are the case lists of other test files (one per family of kernels), appended to
// ewCases; their names must be unique (each file uses its own prefix).
var moreCases []func() []ewCase

// randomTensor fills t with values an op of the case accepts: positive where a log, sqrt or
// pow needs it, 0/1 for booleans, small integers without zero divisors' trouble.
func randomTensor(rng *rand.Rand, t ir.Type, positive bool, labels int) device.Tensor {
	n := t.NumElements()
	data := make([]byte, max(t.Bytes(), 8))
	tt := device.Tensor{Type: t, Data: data[:t.Bytes()]}
	for i := 0; i < n; i++ {
		x := rng.NormFloat64() * 2
		if positive {
			x = math.Abs(x) + 0.05
		}
		switch t.DType {
		case ir.F32:
			tt.F32()[i] = float32(x)
		case ir.F64:
			tt.F64()[i] = x
		case ir.BF16:
			tt.U16()[i] = ir.F32ToBF16(float32(x))
		case ir.F16:
			tt.U16()[i] = ir.F32ToF16(float32(x))
		case ir.I64, ir.I32:
			v := rng.IntN(21) - 10 // in [-10, 10]: valid indices of a dim of 11
			if labels > 0 {
				v = rng.IntN(labels)
			}
			if t.DType == ir.I64 {
				tt.I64()[i] = int64(v)
			} else {
				tt.I32()[i] = int32(v)
			}
		case ir.Bool:
			tt.Data[i] = byte(rng.IntN(2))
		}
	}
	return tt
}

// value reads element i as float64, and the size of one ulp there.
func value(t device.Tensor, i int) (v, ulp float64) {
	switch t.Type.DType {
	case ir.F32:
		x := t.F32()[i]
		return float64(x), float64(math.Nextafter32(float32(math.Abs(float64(x))), float32(math.Inf(1)))) - math.Abs(float64(x))
	case ir.F64:
		x := t.F64()[i]
		return x, math.Nextafter(math.Abs(x), math.Inf(1)) - math.Abs(x)
	case ir.BF16:
		x := float64(ir.BF16ToF32(t.U16()[i]))
		return x, math.Max(math.Abs(x)/128, 1e-38)
	case ir.F16:
		x := float64(ir.F16ToF32(t.U16()[i]))
		return x, math.Max(math.Abs(x)/1024, 6e-8)
	case ir.I64:
		return float64(t.I64()[i]), 0
	case ir.I32:
		return float64(t.I32()[i]), 0
	}
	return float64(t.Data[i]), 0
}

// compiler finds a C++ compiler for the host build.
func hostCompiler(t testing.TB) string {
	for _, c := range []string{"clang++", "c++", "g++"} {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	t.Skip("no C++ compiler to build the kernels for the host")
	return ""
}

// everyKernel is every kernel case's kernels and the communication's own: the ordered
// reductions' folds (an all-reduce's over 3 members, in each float dtype and op; the permutes
// of gathers and scatters are transposes, among the cases).
func everyKernel(t *testing.T) []Kernel {
	ks := caseKernels(t, ewCases())
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.BF16, ir.F16} {
		for _, op := range []string{"sum", "mean", "max", "min"} {
			c := device.Coll{Kind: device.AllReduce, In: ir.Type{DType: dt, Shape: ir.Shape{3 * 7}}, Op: op}
			fold, err := CollectiveKernels(c, 3, 0)
			if err != nil || len(fold) != 1 {
				t.Fatalf("%v of %s over 3 members: %d kernels, %v", op, c.In, len(fold), err)
			}
			ks = append(ks, fold...)
		}
	}
	return ks
}

// TestKernelsCompileWithNVRTC: every generated kernel compiles with a real NVRTC, the
// compiler a GPU run uses (ppc_cuda.h's NVRTC branch: no SDK headers, no __builtin_huge_val),
// to Hopper's machine code, each an entry point. It runs where the dynamic loader or the
// usual folders find libnvrtc (CI installs Debian's, from CUDA 11.8), and skips elsewhere.
func TestKernelsCompileWithNVRTC(t *testing.T) {
	l := Probe(nil).Libraries[1]
	if !l.Found() {
		t.Skipf("no NVRTC on this machine (%s): the NVRTC compile is checked where there is one (.ci/run installs it)", l.Err)
	}
	nv, err := OpenNVRTC(&l)
	if err != nil {
		t.Fatal(err)
	}
	target, err := nv.Target(9, 0)
	if err != nil {
		t.Fatal(err)
	}
	ks := everyKernel(t)
	// As the device builds them: modules of a few dozen kernels, compiled concurrently.
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := 0; i < len(ks); i += 64 {
		chunk := ks[i:min(i+64, len(ks))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			img, err := nv.Compile(Source(chunk...), "kernels.cu", target)
			if err != nil {
				t.Error(err)
				return
			}
			for _, k := range chunk {
				if !bytes.Contains(img, []byte(k.Name+"\x00")) {
					t.Errorf("NVRTC's %s image has no kernel %s", target, k.Name)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d kernels compiled by NVRTC %s (%s) for %s", len(ks), l.Version, l.Path, target)
}

// TestKernelsCompileToPTX: every generated kernel compiles to PTX for sm_80 with clang
// and no CUDA SDK (CI installs clang), each an entry point.
func TestKernelsCompileToPTX(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("clang is not installed (.ci/run installs it): the kernels' PTX compile is not checked here")
	}
	ks := everyKernel(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "kernels.cu")
	if err := os.WriteFile(src, []byte(Source(ks...)), 0o644); err != nil {
		t.Fatal(err)
	}
	ptx := filepath.Join(dir, "kernels.ptx")
	out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80", "-O2", "-S", "-o", ptx, src).CombinedOutput()
	if err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	text, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if !strings.Contains(string(text), ".entry "+k.Name+"(") {
			t.Errorf("the PTX has no entry %s", k.Name)
		}
	}
}

// TestKernelsOnHost: every generated kernel, built for the host through ppc_cuda.h and run
// by the CUDA device over the emulated driver with grids that do not divide the size (3
// blocks of 32 threads, 4 of 64, one thread), gives the CPU device's results on random
// inputs: bit for bit where the arithmetic is IEEE, within a few ulps for transcendentals.
func TestKernelsOnHost(t *testing.T) {
	e := newEmulator(t)
	dev, err := NewDevice(e, e, e.compile, false)
	if err != nil {
		t.Fatal(err)
	}
	checkKernels(t, ewCases(), dev)
}

// TestKernelsInSeveralModules: a build split into modules (as a GPU's, whose modules NVRTC
// compiles concurrently) runs every kernel as one module does: each kernel is looked up in
// its own module, and the modules are compiled at once.
func TestKernelsInSeveralModules(t *testing.T) {
	e := newEmulator(t)
	var mu sync.Mutex
	inFlight, most := 0, 0
	compile := func(src string) ([]byte, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		time.Sleep(50 * time.Millisecond) // as NVRTC takes time: the workers overlap
		return e.compile(src)
	}
	dev, err := NewDevice(e, e, compile, false)
	if err != nil {
		t.Fatal(err)
	}
	dev.ModuleKernels = 3
	cases := ewCases()[:16]
	checkKernels(t, cases, dev)
	modules := 0
	for _, l := range e.Log {
		if strings.HasPrefix(l, "module ") {
			modules++
		}
	}
	if want := (len(caseKernels(t, cases)) + 2) / 3; modules < want {
		t.Errorf("%d modules for %d kernels in modules of at least 3 (want %d or more)", modules, len(caseKernels(t, cases)), want)
	}
	if most < 2 && runtime.GOMAXPROCS(0) > 1 {
		t.Errorf("at most %d module compiled at once", most)
	}
}

// caseKernels generates the kernels of every case.
func caseKernels(t *testing.T, cases []ewCase) []Kernel {
	t.Helper()
	var ks []Kernel
	for _, c := range cases {
		k, err := Kernels(c.spec, c.name)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ks = append(ks, k...)
	}
	return ks
}

// checkKernels runs every case on dev (the CUDA device, over the emulated driver or a GPU)
// on random inputs with grids that do not divide the size (3 blocks of 32 threads, 4 of 64,
// one thread) and compares each result with the CPU device's, within the case's tolerance.
// Every case is prepared before the first launch, so their kernels build as one module.
func checkKernels(t *testing.T, cases []ewCase, dev *Device) {
	t.Helper()
	ref := cpu.New()
	rng := rand.New(rand.NewPCG(1, 2))
	impls := make([]device.Impl, len(cases))
	for ci, c := range cases {
		impl, err := dev.Prepare(c.spec)
		if err != nil {
			t.Fatalf("%s: CUDA device: %v", c.name, err)
		}
		impls[ci] = impl
	}
	onDevice := func(x device.Tensor) device.Tensor { return upload(t, dev, x) }
	for ci, c := range cases {
		impl, err := ref.Prepare(c.spec)
		if err != nil {
			t.Fatalf("%s: CPU device: %v", c.name, err)
		}
		name := describe(c.spec)
		// Sums of positive values: no cancellation to make the summation order matter more
		// than a few ulps per term.
		positive := strings.Contains(name, "log") && !strings.Contains(name, "softmax") || strings.Contains(name, "sqrt") || strings.Contains(name, "pow") || strings.HasPrefix(name, "reduce")
		var in, din []device.Tensor
		for _, t := range c.spec.In {
			in = append(in, randomTensor(rng, t, positive, c.labels))
		}
		if fix := fixInputs[c.name]; fix != nil {
			fix(in)
		}
		for _, x := range in {
			din = append(din, onDevice(x))
		}
		var want, got, dout []device.Tensor
		for _, o := range c.spec.Out {
			want = append(want, device.Tensor{Type: o, Data: make([]byte, o.Bytes())})
			got = append(got, device.Tensor{Type: o, Data: make([]byte, o.Bytes())})
			dout = append(dout, onDevice(got[len(got)-1]))
		}
		if err := impl(in, want); err != nil {
			t.Fatalf("%s: CPU device: %v", c.name, err)
		}
		for _, g := range [][2]uint32{{3, 32}, {4, 64}, {1, 1}} {
			dev.Geometry = func(int64) (uint32, uint32) { return g[0], g[1] }
			dev.RowGeometry = func(int64, int64) (uint32, uint32) { return g[0], g[1] }
			if err := impls[ci](din, dout); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			bad := 0
			for r := range dout {
				if err := dev.Read(got[r].Data, dout[r]); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < got[r].Type.NumElements(); i++ {
					w, ulp := value(want[r], i)
					v, _ := value(got[r], i)
					if v == w || (math.IsNaN(v) && math.IsNaN(w)) || math.Abs(v-w) <= c.ulps*ulp || math.Abs(v-w) <= c.abs {
						continue
					}
					if bad++; bad <= 3 {
						t.Errorf("%s (%s, grid %d×%d): result %d element %d = %v, the CPU device gives %v (%.1f ulps; allowed %g)", c.name, name, g[0], g[1], r, i, v, w, math.Abs(v-w)/ulp, c.ulps)
					}
				}
			}
		}
	}
	dev.Geometry, dev.RowGeometry = DefaultGeometry, DefaultRowGeometry
}

// TestEveryCPUOpHasACUDAKernel: the CUDA device covers every op the CPU device implements,
// and every one is among the cases checked against it (matmul and constant have their own
// tests: TestPlanMatmulMatchesCPU, TestDeviceMemory).
func TestEveryCPUOpHasACUDAKernel(t *testing.T) {
	tested := map[string]bool{"matmul": true, "constant": true}
	for _, c := range ewCases() {
		if c.spec.Op != nil {
			tested[c.spec.Op.Name] = true
		}
	}
	for _, op := range cpu.Ops() {
		if !HasKernel(op) {
			t.Errorf("op %s has a CPU kernel and no CUDA kernel", op)
		} else if !tested[op] {
			t.Errorf("op %s has no kernel case", op)
		}
	}
}

// upload copies a host tensor into a new allocation of dev.
func upload(t testing.TB, dev device.Device, x device.Tensor) device.Tensor {
	t.Helper()
	m, err := dev.Alloc(x.Type.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	d := m.At(0, x.Type)
	if err := dev.Write(d, x.Data); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestReducePlannedInChunks: a bias's gradient (the sum of [8, 1024, 768] over its first two
// axes) is two kernels, a thread per chunk of 64 rows and column and then one per column,
// not 768 threads reading 8,192 elements each; a reduction with many results stays one.
func TestReducePlannedInChunks(t *testing.T) {
	for _, c := range []struct {
		in, out ir.Shape
		axes    []int
		steps   int
	}{{ir.Shape{8, 1024, 768}, ir.Shape{768}, []int{0, 1}, 2}, {ir.Shape{3, 5, 7}, ir.Shape{3, 5}, []int{-1}, 1}, {ir.Shape{70000, 600}, ir.Shape{70000}, []int{1}, 1}} {
		s := &device.Spec{Op: ir.MustLookup("reduce_sum"), Attrs: ir.Attrs{{Name: "axes", Value: ir.Ints(c.axes...)}},
			In: []ir.Type{{DType: ir.BF16, Shape: c.in}}, Out: []ir.Type{{DType: ir.BF16, Shape: c.out}}}
		p, err := PlanSite(s, "k")
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Steps) != c.steps {
			t.Errorf("reduce_sum %v over %v: %d kernels, want %d", c.in, c.axes, len(p.Steps), c.steps)
		}
		if c.steps == 2 && (len(p.Scratch) != 1 || p.Scratch[0].NumElements() != 128*768 || p.Steps[0].Kernel.N != 128*768) {
			t.Errorf("reduce_sum %v: scratch %v, first kernel over %d indices; want 128 chunks × 768", c.in, p.Scratch, p.Steps[0].Kernel.N)
		}
	}
}
