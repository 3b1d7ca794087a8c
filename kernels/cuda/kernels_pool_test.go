package cuda_test

import (
	"math"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// TestKernelsPoolRefusals: attribute values the CPU device refuses, or that the kernels do not
// cover, are errors, not kernels.
func TestKernelsPoolRefusals(t *testing.T) {
	x := ty(f32, 1, 2, 5, 5)
	for _, c := range []struct {
		op  string
		at  ir.Attrs
		in  []ir.Type
		out ir.Type
	}{
		{"max_pool", ir.Attrs{{Name: "kernel", Value: ir.Ints(3)}}, []ir.Type{x}, ty(f32, 1, 2, 3, 3)},
		{"max_pool", ir.Attrs{{Name: "kernel", Value: ir.Ints(3, 3)}}, []ir.Type{x}, ty(f32, 1, 2, 4, 3)},
		{"max_pool", ir.Attrs{{Name: "kernel", Value: ir.Ints(3, 3)}}, []ir.Type{ty(ir.I64, 1, 2, 5, 5)}, ty(ir.I64, 1, 2, 3, 3)},
		{"avg_pool", ir.Attrs{{Name: "kernel", Value: ir.Ints(7, 3)}}, []ir.Type{x}, ty(f32, 1, 2, 0, 3)},
		{"max_pool", ir.Attrs{{Name: "kernel", Value: ir.Ints(1, 1, 1, 1)}}, []ir.Type{ty(f32, 1, 1, 2, 2, 2, 2)}, ty(f32, 1, 1, 2, 2, 2, 2)},
		{"lrn", ir.Attrs{{Name: "size", Value: ir.Int(0)}}, []ir.Type{x}, x},
		{"lrn", ir.Attrs{{Name: "beta", Value: ir.Float(math.Inf(1))}, {Name: "size", Value: ir.Int(3)}}, []ir.Type{x}, x},
		{"resize", ir.Attrs{{Name: "coordinate_transformation_mode", Value: ir.Ident("tf_crop_and_resize")}, {Name: "sizes", Value: ir.Ints(1, 2, 7, 7)}}, []ir.Type{x}, ty(f32, 1, 2, 7, 7)},
		{"resize", ir.Attrs{{Name: "mode", Value: ir.Ident("area")}, {Name: "sizes", Value: ir.Ints(1, 2, 7, 7)}}, []ir.Type{x}, ty(f32, 1, 2, 7, 7)},
		{"resize", ir.Attrs{{Name: "mode", Value: ir.Ident("linear")}, {Name: "sizes", Value: ir.Ints(1, 2, 7, 7)}}, []ir.Type{ty(ir.I64, 1, 2, 5, 5)}, ty(ir.I64, 1, 2, 7, 7)},
		{"resize", ir.Attrs{{Name: "scales", Value: ir.List{ir.Float(1), ir.Float(1), ir.Float(1e-300), ir.Float(1)}}, {Name: "sizes", Value: ir.Ints(1, 2, 7, 7)}}, []ir.Type{x}, ty(f32, 1, 2, 7, 7)},
		{"resize", ir.Attrs{{Name: "sizes", Value: ir.Ints(1, 2, 7)}}, []ir.Type{x}, ty(f32, 1, 2, 7)},
	} {
		s := &device.Spec{Op: ir.MustLookup(c.op), Attrs: c.at, In: c.in, Out: []ir.Type{c.out}}
		if k, err := cuda.Generate(s, "k"); err == nil {
			t.Errorf("%s %v on %v: want an error, got a kernel:\n%s", c.op, c.at, c.in, k.Body)
		}
	}
}
