package cudatest

import (
	"fmt"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// poolCase builds a launch site of op on operands in, its result type inferred as the IR
// does (so the CPU device's Prepare accepts it).
func poolCase(name string, at ir.Attrs, in ...ir.Type) *device.Spec {
	op := ir.MustLookup(name)
	at = at.Sorted()
	out, err := op.Infer(in, at)
	if err != nil {
		panic(fmt.Sprintf("%s of %v: %v", name, in, err))
	}
	return &device.Spec{Op: op, Attrs: at, In: in, Out: out}
}

// poolTol are the tolerances of sums and quotients in each dtype (the GPU's may contract
// multiply-adds the host build does not).
var poolTol = map[ir.DType][2]float64{f32: {64, 1e-5}, bf: {1, 1.0 / 16}, f16: {1, 1.0 / 256}, ir.F64: {64, 1e-12}}

// PoolCases: max and average pooling in 1 to 3 spatial dims with strides, pads, dilations,
// ceil_mode and count_include_pad, and their gradients (overlapping windows, so inputs
// receive several outputs); lrn with odd and even sizes and its gradient; resize in every
// mode and coordinate transform, through each of the CPU's ways of combining taps, and its
// gradient. Odd sizes; f32, bf16 and f64 (and one f16).
func PoolCases() []Case {
	var cs []Case
	add := func(s *device.Spec, exact bool) {
		tol := poolTol[s.Out[0].DType]
		if exact {
			tol = [2]float64{}
		}
		cs = append(cs, Case{fmt.Sprintf("kpool%d_%s", len(cs), s.Op.Name), s, tol[0], tol[1], 0, nil})
	}
	ints := func(v ...int) ir.Attr { return ir.Ints(v...) }
	yes := ir.BoolAttr(true)
	// Window geometries: x, attributes.
	type window struct {
		x  ir.Type
		at ir.Attrs
	}
	windows := func(d ir.DType) []window {
		return []window{
			{ty(d, 2, 3, 7, 9), ir.Attrs{{Name: "kernel", Value: ints(3, 3)}, {Name: "pads", Value: ints(1, 1, 1, 1)}, {Name: "strides", Value: ints(2, 2)}}},
			{ty(d, 2, 3, 7, 9), ir.Attrs{{Name: "kernel", Value: ints(3, 3)}, {Name: "pads", Value: ints(1, 2, 2, 1)}}}, // stride 1: overlaps
			{ty(d, 2, 3, 9, 7), ir.Attrs{{Name: "ceil_mode", Value: yes}, {Name: "dilations", Value: ints(1, 2)}, {Name: "kernel", Value: ints(3, 2)},
				{Name: "pads", Value: ints(2, 1, 1, 1)}, {Name: "strides", Value: ints(2, 2)}}},
			{ty(d, 2, 3, 11), ir.Attrs{{Name: "ceil_mode", Value: yes}, {Name: "kernel", Value: ints(3)}, {Name: "pads", Value: ints(1, 1)}, {Name: "strides", Value: ints(2)}}},
			{ty(d, 1, 2, 5, 4, 6), ir.Attrs{{Name: "ceil_mode", Value: yes}, {Name: "kernel", Value: ints(2, 2, 3)}, {Name: "pads", Value: ints(0, 1, 1, 1, 0, 2)},
				{Name: "strides", Value: ints(2, 1, 2)}}},
		}
	}
	for _, d := range []ir.DType{f32, bf, ir.F64} {
		for wi, w := range windows(d) {
			if d != f32 && wi%2 == 1 {
				continue
			}
			add(poolCase("max_pool", w.at, w.x), true)
			y := poolCase("max_pool", w.at, w.x).Out[0]
			add(poolCase("max_pool_grad", w.at, w.x, y), true)
			for _, incl := range []bool{false, true} {
				at := w.at.Set("count_include_pad", ir.BoolAttr(incl))
				if incl && wi%2 == 0 && d != f32 {
					continue
				}
				add(poolCase("avg_pool", at, w.x), false)
				add(poolCase("avg_pool_grad", at.Set("input_shape", ints(w.x.Shape...)), y), false)
			}
		}
	}
	// lrn: sizes odd and even (the window then reaches further after the channel), default
	// and given constants, with and without spatial dims.
	for _, d := range []ir.DType{f32, bf, ir.F64} {
		for _, c := range []struct {
			x  ir.Type
			at ir.Attrs
		}{
			{ty(d, 2, 7, 3, 5), ir.Attrs{{Name: "size", Value: ir.Int(3)}}},
			{ty(d, 2, 8, 5), ir.Attrs{{Name: "alpha", Value: ir.Float(0.02)}, {Name: "beta", Value: ir.Float(0.6)}, {Name: "bias", Value: ir.Float(2)}, {Name: "size", Value: ir.Int(4)}}},
			{ty(d, 3, 7), ir.Attrs{{Name: "alpha", Value: ir.Float(0.5)}, {Name: "size", Value: ir.Int(5)}}},
		} {
			add(poolCase("lrn", c.at, c.x), false)
			add(poolCase("lrn_grad", c.at, c.x, c.x), false)
		}
	}
	// resize: each mode, coordinate transform and nearest_mode; the CPU's four ways of
	// combining kernels/cpu's taps (one or two along the last dim, one or two combinations
	// of the others, else a double sum); cubic_coeff_a = 0 (the separable resampler).
	str := func(s string) ir.Attr { return ir.Ident(s) }
	rs := func(d ir.DType, from, to []int, kv ...any) {
		at := ir.Attrs{{Name: "sizes", Value: ints(to...)}}
		for k := 0; k < len(kv); k += 2 {
			v := kv[k+1]
			switch v := v.(type) {
			case string:
				at = at.Set(kv[k].(string), str(v))
			case ir.Attr:
				at = at.Set(kv[k].(string), v)
			}
		}
		nearest := at.Str("mode", "nearest") == "nearest"
		add(poolCase("resize", at, ty(d, from...)), nearest)
		if d.IsFloat() {
			add(poolCase("resize_grad", at.Set("input_shape", ints(from...)), ty(d, to...)), false)
		}
	}
	rs(f32, []int{2, 3, 5, 7}, []int{2, 3, 9, 4})
	rs(bf, []int{1, 2, 5, 6}, []int{1, 2, 10, 3}, "coordinate_transformation_mode", "asymmetric", "nearest_mode", "floor")
	rs(ir.I64, []int{2, 3, 4, 5}, []int{2, 3, 7, 9}, "coordinate_transformation_mode", "align_corners", "nearest_mode", "round_prefer_ceil")
	rs(f32, []int{2, 3, 4, 5}, []int{2, 3, 7, 9}, "coordinate_transformation_mode", "align_corners", "nearest_mode", "round_prefer_ceil")
	rs(ir.F64, []int{2, 5, 7}, []int{2, 11, 3}, "coordinate_transformation_mode", "tf_half_pixel_for_nn", "nearest_mode", "ceil")
	rs(f32, []int{2, 3, 5, 7}, []int{2, 3, 12, 4}, "scales", ir.List{ir.Int(1), ir.Float(1), ir.Float(2.5), ir.Float(0.6)})
	rs(f32, []int{2, 3, 5, 7}, []int{2, 3, 5, 11}, "mode", "linear")                                                // 2 taps, 1 combination
	rs(f32, []int{1, 2, 5, 7}, []int{1, 2, 8, 4}, "mode", "linear")                                                 // 2 taps, 2 combinations
	rs(ir.F64, []int{2, 3, 4, 5}, []int{3, 3, 6, 2}, "mode", "linear")                                              // double sum
	rs(f32, []int{2, 3, 6, 6}, []int{2, 3, 3, 6}, "coordinate_transformation_mode", "asymmetric", "mode", "linear") // 1 tap (collapsed), 1 combination
	rs(bf, []int{1, 2, 5, 6}, []int{1, 2, 9, 11}, "coordinate_transformation_mode", "align_corners", "mode", "linear")
	rs(f32, []int{2, 3, 5, 7}, []int{2, 3, 1, 10}, "coordinate_transformation_mode", "pytorch_half_pixel", "mode", "linear")
	rs(f32, []int{1, 2, 5, 7}, []int{1, 2, 8, 3}, "coordinate_transformation_mode", "half_pixel_symmetric", "mode", "linear")
	rs(f16, []int{1, 3, 5}, []int{1, 3, 8}, "mode", "linear")
	rs(f32, []int{1, 2, 5, 6}, []int{1, 2, 7, 9}, "mode", "cubic")
	rs(bf, []int{2, 3, 4, 5}, []int{2, 3, 4, 9}, "mode", "cubic")
	rs(f32, []int{1, 2, 5, 6}, []int{1, 2, 3, 11}, "cubic_coeff_a", ir.Float(-0.5), "exclude_outside", yes, "mode", "cubic")
	rs(f32, []int{1, 2, 5, 6}, []int{1, 2, 7, 4}, "cubic_coeff_a", ir.Float(0), "mode", "cubic")
	rs(ir.F64, []int{2, 5, 7}, []int{3, 5, 9}, "cubic_coeff_a", ir.Float(0), "exclude_outside", yes, "mode", "cubic")
	return cs
}
