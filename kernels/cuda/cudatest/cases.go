package cudatest

import (
	"fmt"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Case is one launch site to generate, compile and run.
type Case struct {
	Name string
	Spec *device.Spec
	// ULPs: how far from the CPU device a result may be, in units of the result dtype's
	// last place (0: bit-exact). Transcendentals differ by a few ulps between libraries;
	// 16-bit results of f32 arithmetic may round once more than the CPU's float64 path.
	ULPs float64
	// Abs: an absolute tolerance besides (log_softmax's x − max − log Σ cancels near 0).
	Abs float64
	// Labels, when positive, draws integer operands in [0, Labels) (class labels) instead of
	// [-10, 10].
	Labels int
	// Fix, when set, adjusts the case's random operands before it runs.
	Fix func(in []device.Tensor)
}

var (
	f32 = ir.F32
	bf  = ir.BF16
	f16 = ir.F16
)

func ty(d ir.DType, s ...int) ir.Type { return ir.Type{DType: d, Shape: ir.Shape(s)} }

// Cases: every elementwise op ppc's CUDA device has, on an odd-sized output (105 elements,
// not a multiple of any block size used) with broadcast inputs, in f32 and in the 16-bit
// dtypes; integer and boolean ops; fused chains as the lowering makes them; every other op
// the CPU device has (data movement, reductions, softmax, norms, losses, gathers, pad, …);
// then the batch and instance norms', the convolutions' and the pooling's (PoolCases). Names
// are unique: each family has its prefix.
func Cases() []Case {
	out := []int{3, 5, 7}
	var cs []Case
	op := func(name string, at ir.Attrs, ulps float64, in []ir.Type, o ir.Type) {
		cs = append(cs, Case{fmt.Sprintf("k%d_%s", len(cs), name), &device.Spec{Op: ir.MustLookup(name), Attrs: at, In: in, Out: []ir.Type{o}}, ulps, 0, 0, nil})
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
	cs = append(cs, Case{"k_fused_bias_gelu", &device.Spec{
		In: []ir.Type{ty(f32, out...), ty(f32, 7), ty(f32)},
		Fused: []device.FusedStep{step("mul", []int{0, 2}, nil, ty(f32, out...)), step("add", []int{3, 1}, nil, ty(f32, out...)),
			step("gelu", []int{4}, ir.Attrs{{Name: "approximate", Value: ir.String("tanh")}}, ty(f32, out...)), step("cast", []int{5}, nil, ty(bf, out...))},
		Out: []ir.Type{ty(bf, out...)}}, 1, 0, 0, nil})
	cs = append(cs, Case{"k_fused_mask", &device.Spec{
		In: []ir.Type{ty(bf, out...), ty(ir.Bool, 5, 7), ty(bf)},
		Fused: []device.FusedStep{step("mul", []int{0, 2}, nil, ty(bf, out...)), step("where", []int{1, 2, 3}, nil, ty(bf, out...)),
			step("exp", []int{4}, nil, ty(f32, out...))},
		Out: []ir.Type{ty(f32, out...)}}, 8, 0, 0, nil})
	// A chain writing several results: AdamW's update as lower fuses it (the new moments, the
	// parameter and its bf16 copy in one launch), its results written over its inputs on the
	// device as code generation places them (here separate buffers; TestFusedOutputsInPlace
	// runs it in place).
	full := ty(f32, out...)
	cs = append(cs, Case{"k_fused_adamw", &device.Spec{
		In: []ir.Type{full, full, full, full, ty(f32)}, // m, v, g, p, β
		Fused: []device.FusedStep{
			step("mul", []int{0, 4}, nil, full),          // 5: β·m
			step("add", []int{5, 2}, nil, full),          // 6: m' = β·m + g
			step("mul", []int{2, 2}, nil, full),          // 7: g²
			step("abs", []int{1}, nil, full),             // 8: |v|
			step("add", []int{8, 7}, nil, full),          // 9: v' = |v| + g²
			step("sqrt", []int{9}, nil, full),            // 10
			step("div", []int{6, 10}, nil, full),         // 11: m'/√v'
			step("sub", []int{3, 11}, nil, full),         // 12: p'
			step("cast", []int{12}, nil, ty(bf, out...)), // 13: p' in bf16
		},
		Outputs: []int{1, 4, 7, 8},
		Out:     []ir.Type{full, full, full, ty(bf, out...)}}, 0, 0, 0, nil})
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
				cs[n+i].Abs = a
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
			cs[i].Abs = a
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
			cs[i].Abs = 1e-5
		}
		cs[first+1].Abs = 1.0 / 64
		// The gradients' sums of 200 random products cancel, and the CPU device sums them
		// with several accumulators: a few thousandths on results in the hundreds.
		cs[first+2].Abs, cs[first+3].Abs = 1e-2, 1e-2
	}
	// Concatenation, split (one kernel per result) and slices with steps, as the rotary
	// embedding's halves and a fused QKV projection use them.
	op("concat", ir.Attrs{{Name: "axis", Value: ir.Int(-1)}}, 0, []ir.Type{ty(bf, 3, 5, 2), ty(bf, 3, 5, 5), ty(bf, 3, 5, 1)}, ty(bf, 3, 5, 8))
	op("concat", ir.Attrs{{Name: "axis", Value: ir.Int(0)}}, 0, []ir.Type{ty(f32, 2, 7), ty(f32, 3, 7)}, ty(f32, 5, 7))
	cs = append(cs, Case{fmt.Sprintf("k%d_split", len(cs)), &device.Spec{Op: ir.MustLookup("split"),
		Attrs: ir.Attrs{{Name: "axis", Value: ir.Int(1)}, {Name: "sizes", Value: ir.Ints(1, 3, 1)}}, In: []ir.Type{ty(f32, 3, 5, 7)},
		Out: []ir.Type{ty(f32, 3, 1, 7), ty(f32, 3, 3, 7), ty(f32, 3, 1, 7)}}, 0, 0, 0, nil})
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
		cs[len(cs)-1].Abs = 1e-5
	}
	op("pad_grad", pad("constant", []int{0, 1, 2, 1, -1, 3}, 0), 0, []ir.Type{ty(ir.F64, 4, 5, 12)}, ty(ir.F64, 3, 5, 7))
	// Gradients of reductions: max and min give dy to the first element equal to the
	// result (Fix makes y the real reduction, with ties), prod the product of the others.
	for _, kind := range []string{"max", "min"} {
		for _, at := range []ir.Attrs{{{Name: "axes", Value: ir.Ints(-1)}}, {{Name: "axes", Value: ir.Ints(0, 2)}, {Name: "keepdims", Value: ir.BoolAttr(true)}}} {
			yt := ty(f32, 3, 5)
			if len(at) > 1 {
				yt = ty(f32, 1, 5, 1)
			}
			op("reduce_"+kind+"_grad", at, 0, []ir.Type{x, yt, yt}, x)
			cs[len(cs)-1].Fix = reduceFix("reduce_"+kind, at)
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
		cs = append(cs, Case{fmt.Sprintf("k%d_layer_norm_grad_params", len(cs)), &device.Spec{Op: ir.MustLookup("layer_norm_grad_params"),
			In: []ir.Type{x, x}, Out: []ir.Type{ty(d, 7), ty(d, 7)}}, 64, 0, 0, nil})
		cs = append(cs, Case{fmt.Sprintf("k%d_layer_norm_grad_params", len(cs)), &device.Spec{Op: ir.MustLookup("layer_norm_grad_params"),
			Attrs: ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, In: []ir.Type{x, x}, Out: []ir.Type{ty(d, 5, 7), ty(d, 5, 7)}}, 64, 0, 0, nil})
		op("rms_norm_grad_params", nil, 64, []ir.Type{x, x}, ty(d, 7))
		// 150 rows: three chunks of 64, whose partial sums add in order.
		long := ty(d, 3, 50, 7)
		cs = append(cs, Case{fmt.Sprintf("k%d_layer_norm_grad_params", len(cs)), &device.Spec{Op: ir.MustLookup("layer_norm_grad_params"),
			In: []ir.Type{long, long}, Out: []ir.Type{ty(d, 7), ty(d, 7)}}, 64, 0, 0, nil})
		op("rms_norm_grad_params", nil, 64, []ir.Type{long, long}, ty(d, 7))
		for i := first; i < len(cs); i++ {
			cs[i].Abs = a
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
			cs[len(cs)-1].Labels, cs[len(cs)-1].Abs = 11, abs
			op("cross_entropy_grad", at, ulps, []ir.Type{logits, labels, lossT}, logits)
			cs[len(cs)-1].Labels, cs[len(cs)-1].Abs = 11, abs
		}
	}
	op("cross_entropy", nil, 64, []ir.Type{ty(f32, 6, 11), ty(ir.I32, 6)}, ty(f32))
	cs[len(cs)-1].Labels, cs[len(cs)-1].Abs = 11, 1e-5
	// A vocabulary longer than rowThreshold: a block per row (labels 0–2, 2 ignored).
	for _, red := range []string{"mean", "none"} {
		at := ir.Attrs{{Name: "ignore_index", Value: ir.Int(2)}, {Name: "reduction", Value: ir.Ident(red)}}
		logits, labels, lossT := ty(f32, 2, 3, 1500), ty(ir.I64, 2, 3), ty(f32)
		if red == "none" {
			lossT = ty(f32, 2, 3)
		}
		op("cross_entropy", at, 64, []ir.Type{logits, labels}, lossT)
		cs[len(cs)-1].Labels, cs[len(cs)-1].Abs = 3, 1e-5
		op("cross_entropy_grad", at, 64, []ir.Type{logits, labels, lossT}, logits)
		cs[len(cs)-1].Labels, cs[len(cs)-1].Abs = 3, 1e-6
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
			cs[i].Abs = abs
		}
		for _, name := range []string{"softmax_grad", "log_softmax_grad"} {
			op(name, nil, 64, []ir.Type{t, t}, t)
			op(name, ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, 64, []ir.Type{t, t}, t)
			cs[len(cs)-1].Abs, cs[len(cs)-2].Abs = 1e-5, 1e-5 // y·(dy − s) cancels
			if d == bf {
				cs[len(cs)-1].Abs, cs[len(cs)-2].Abs = 1.0/32, 1.0/32
			}
		}
	}
	cs = append(cs, bnormCases()...)
	cs = append(cs, convCases()...)
	cs = append(cs, PoolCases()...)
	cs = append(cs, attentionCases(len(cs))...)
	return append(cs, moeCases(len(cs))...)
}

// attentionCases: attention and its gradient. Small ones with grouped-query heads (4 query
// heads over 2 kv heads) on odd sizes — causal with more keys than queries, a boolean mask,
// an additive one — in f32, bf16 and f64; then sizes where the tile kernels' tiles (128 query
// or key rows per block, key or query tiles of up to 32 rows) end ragged, in f32, with bf16,
// f16 and f64 on one each: head dims 64, 80, 128 and 37 (with a value dim of 19; also in bf16,
// which the tensor-core kernels pad to 48 and 32 columns), more queries
// than a block, Sq ≠ Skv both ways (causal with Sq > Skv leaves the first queries no key),
// grouped-query and multi-query heads, masks broadcast over the batch or the heads. The
// gradient's o and lse are the CPU device's forward of its q, k and v, as in training.
//
// Tolerances against the CPU device (whose tiles sum in another order): f32 within 64 ulps
// or 1e-5 absolute (forward), 256 ulps or 1e-4 (backward) (gradients are sums of products of values of order 1, cancelling), f64
// 1e-12, the 16-bit dtypes within 2 of their ulps or 1/32 absolute (a result near a rounding
// boundary of its dtype may round the other way).
func attentionCases(first int) []Case {
	var cs []Case
	causal := ir.Attrs{{Name: "causal", Value: ir.BoolAttr(true)}}
	add := func(d ir.DType, at ir.Attrs, q, k, v ir.Type, mask ...ir.Type) {
		o := ty(d, append(append([]int{}, q.Shape[:q.Rank()-1]...), v.Shape[v.Rank()-1])...)
		lse := ty(ir.AttentionLSEType(d), append(append([]int{}, q.Shape[:q.Rank()-1]...), 1)...)
		ulps, abs := map[ir.DType]float64{f32: 64, bf: 2, f16: 2, ir.F64: 64}[d], map[ir.DType]float64{f32: 3e-5, bf: 1.0 / 32, f16: 1.0 / 32, ir.F64: 1e-12}[d]
		fwd := &device.Spec{Op: ir.MustLookup("attention"), Attrs: at, In: append([]ir.Type{q, k, v}, mask...), Out: []ir.Type{o, lse}}
		fabs := abs
		if d == f32 {
			fabs = 1e-5
		}
		cs = append(cs, Case{fmt.Sprintf("k%d_attention", first+len(cs)), fwd, ulps, fabs, 0, nil})
		bwd := &device.Spec{Op: ir.MustLookup("attention_grad"), Attrs: at, In: append([]ir.Type{q, k, v, o, lse, o}, mask...), Out: []ir.Type{q, k, v}}
		if d == f32 {
			ulps, abs = 256, 1e-4
		}
		cs = append(cs, Case{fmt.Sprintf("k%d_attention_grad", first+len(cs)), bwd, ulps, abs, 0, attentionFix(fwd)})
	}
	for _, d := range []ir.DType{f32, bf, ir.F64} {
		q, k, v := ty(d, 2, 4, 5, 6), ty(d, 2, 2, 7, 6), ty(d, 2, 2, 7, 3)
		add(d, causal, q, k, v)
		add(d, ir.Attrs{{Name: "scale", Value: ir.Float(0.3)}}, q, k, v, ty(ir.Bool, 5, 7))
		add(d, causal, q, k, v, ty(d, 4, 5, 7))
	}
	// Head dim 64, two query blocks (130 rows), keys in five tiles of 32, the last ragged.
	for _, d := range []ir.DType{f32, bf} {
		add(d, causal, ty(d, 1, 4, 130, 64), ty(d, 1, 2, 130, 64), ty(d, 1, 2, 130, 64))
	}
	// Head dim 128, more queries than keys under causal masking, a boolean mask.
	for _, d := range []ir.DType{f32, f16} {
		add(d, causal, ty(d, 1, 2, 150, 128), ty(d, 1, 1, 90, 128), ty(d, 1, 1, 90, 128), ty(ir.Bool, 1, 1, 150, 90))
	}
	// Head dim 80, more keys than queries (blocks of 64 query rows, 128 key rows), an additive
	// mask per head and query.
	add(f32, nil, ty(f32, 2, 2, 45, 80), ty(f32, 2, 2, 200, 80), ty(f32, 2, 2, 200, 80), ty(f32, 2, 45, 200))
	// An odd head dim, a narrower value dim, multi-query heads, a key block and a bit.
	for _, d := range []ir.DType{f32, ir.F64, bf} {
		add(d, ir.Attrs{causal[0], {Name: "scale", Value: ir.Float(0.2)}}, ty(d, 3, 129, 37), ty(d, 1, 131, 37), ty(d, 1, 131, 19))
	}
	return cs
}

// attentionFix sets the gradient case's o and lse (operands 3 and 4) to the forward of its q,
// k, v and mask on the CPU device.
func attentionFix(fwd *device.Spec) func(in []device.Tensor) {
	return func(in []device.Tensor) {
		impl, err := cpu.New().Prepare(fwd)
		if err != nil {
			panic(err)
		}
		args := append([]device.Tensor{in[0], in[1], in[2]}, in[6:]...)
		if err := impl(args, in[3:5]); err != nil {
			panic(err)
		}
	}
}

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
