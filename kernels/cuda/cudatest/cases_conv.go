package cudatest

import (
	"fmt"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Attrs builds an attribute dictionary from name, value pairs, sorted by name as ir.Attrs
// must be (lookups are binary searches).
func Attrs(kv ...any) ir.Attrs {
	var at ir.Attrs
	for j := 0; j < len(kv); j += 2 {
		var v ir.Attr
		switch x := kv[j+1].(type) {
		case int:
			v = ir.Int(x)
		case []int:
			v = ir.Ints(x...)
		}
		at = append(at, ir.NamedAttr{Name: kv[j].(string), Value: v})
	}
	return at.Sorted()
}

// convCases: conv, conv_transpose and conv_grad_filter on odd sizes (batch 2, 3 channels,
// 5×7 images, 3×2 kernels) with strides, asymmetric pads, dilations, output_padding and
// groups (grouped, and depthwise, which kernels/cpu sums in another order), 1-d, 2-d and
// 3-d, with and without bias, in f32, bf16 and f64. The result types come from the ops' own
// shape inference. Tolerances: the CPU device sums in GEMM blocks, the kernels straight
// through (a few ulps, and an absolute one where terms of both signs cancel near 0); bf16
// results may round once more (the CPU device rounds its f32 result).
func convCases() []Case {
	var cs []Case
	add := func(op string, at ir.Attrs, d ir.DType, shapes ...[]int) {
		var in []ir.Type
		for _, sh := range shapes {
			in = append(in, ty(d, sh...))
		}
		def := ir.MustLookup(op)
		out, err := def.Infer(in, at)
		if err != nil {
			panic(fmt.Sprintf("%s %v %v: %v", op, at, in, err))
		}
		// Products per result element (a bound): the absolute tolerance grows with them,
		// as the rounding errors of two summation orders do.
		terms := in[1].NumElements() / in[1].Shape[1]
		abs := map[ir.DType]float64{f32: 2e-5, bf: 1.0 / 16, ir.F64: 1e-12}[d] * max(1, float64(terms)/32)
		cs = append(cs, Case{fmt.Sprintf("kconv%d_%s", len(cs), op), &device.Spec{Op: def, Attrs: at, In: in, Out: out}, 64, abs, 0, nil})
	}
	for _, d := range []ir.DType{f32, bf, ir.F64} {
		// conv: x [N, C, D…], w [M, C/groups, K…] [, bias [M]].
		add("conv", nil, d, []int{2, 3, 5, 7}, []int{4, 3, 3, 2}, []int{4})
		add("conv", Attrs("dilations", []int{1, 2}, "pads", []int{1, 0, 0, 1}, "strides", []int{2, 2}), d, []int{2, 3, 5, 7}, []int{4, 3, 3, 2})
		add("conv", Attrs("groups", 3, "pads", []int{1, 1, 1, 1}), d, []int{2, 3, 5, 7}, []int{6, 1, 3, 2}, []int{6}) // depthwise
		add("conv", Attrs("groups", 2, "pads", []int{1, 2, 1, 0}, "strides", []int{1, 3}), d, []int{2, 4, 5, 7}, []int{6, 2, 3, 3})
		add("conv", Attrs("dilations", []int{2}, "pads", []int{2, 1}, "strides", []int{2}), d, []int{2, 3, 11}, []int{5, 3, 3}, []int{5})
		add("conv", nil, d, []int{2, 3, 5, 7}, []int{4, 3, 1, 1}) // pointwise: a plain GEMM on the CPU
		add("conv", Attrs("pads", []int{1, 0, 1, 0, 1, 1}), d, []int{1, 2, 3, 4, 5}, []int{3, 2, 2, 2, 3})
		// conv_transpose: x [N, C, D…], w [C, M/groups, K…] [, bias [M]].
		add("conv_transpose", nil, d, []int{2, 3, 5, 7}, []int{3, 4, 3, 2}, []int{4})
		add("conv_transpose", Attrs("dilations", []int{1, 2}, "output_padding", []int{1, 2}, "pads", []int{1, 0, 0, 1}, "strides", []int{2, 3}),
			d, []int{2, 3, 5, 7}, []int{3, 4, 3, 2})
		add("conv_transpose", Attrs("groups", 3, "pads", []int{1, 1, 1, 1}, "strides", []int{2, 2}), d, []int{2, 3, 5, 7}, []int{3, 1, 3, 2}, []int{3}) // depthwise
		add("conv_transpose", Attrs("groups", 2), d, []int{2, 4, 5, 7}, []int{4, 3, 3, 3})
		add("conv_transpose", Attrs("output_padding", []int{1}, "pads", []int{1, 2}, "strides", []int{3}), d, []int{2, 3, 6}, []int{3, 2, 4}, []int{2})
		add("conv_transpose", Attrs("pads", []int{0, 1, 1, 0, 0, 1}, "strides", []int{1, 2, 2}), d, []int{1, 2, 3, 4, 2}, []int{2, 3, 2, 2, 3})
		// conv_grad_filter: x, dy of conv's result shape; filter_shape the weight's.
		add("conv_grad_filter", Attrs("filter_shape", []int{4, 3, 3, 2}), d, []int{2, 3, 5, 7}, []int{2, 4, 3, 6})
		add("conv_grad_filter", Attrs("dilations", []int{1, 2}, "filter_shape", []int{4, 3, 3, 2}, "pads", []int{1, 0, 0, 1}, "strides", []int{2, 2}),
			d, []int{2, 3, 5, 7}, []int{2, 4, 2, 3})
		add("conv_grad_filter", Attrs("filter_shape", []int{6, 1, 3, 2}, "groups", 3, "pads", []int{1, 1, 1, 1}), d, []int{2, 3, 5, 7}, []int{2, 6, 5, 8}) // depthwise
		add("conv_grad_filter", Attrs("filter_shape", []int{6, 2, 3, 3}, "groups", 2, "pads", []int{1, 2, 1, 0}, "strides", []int{1, 3}), d, []int{2, 4, 5, 7}, []int{2, 6, 5, 3})
		add("conv_grad_filter", Attrs("dilations", []int{2}, "filter_shape", []int{5, 3, 3}, "pads", []int{2, 1}, "strides", []int{2}), d, []int{2, 3, 11}, []int{2, 5, 5})
		// conv_transpose's weight gradient (operands its dy and x), over a batch of 5.
		add("conv_grad_filter", Attrs("filter_shape", []int{3, 4, 3, 2}), d, []int{5, 4, 7, 8}, []int{5, 3, 5, 7})
		add("conv_grad_filter", Attrs("filter_shape", []int{4, 3, 1, 1}), d, []int{2, 3, 5, 7}, []int{2, 4, 5, 7}) // pointwise
	}
	return cs
}
