package cuda_test

import (
	"math"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// TestKernelsBnormRefuses: launch sites the generators cannot honour are errors, not
// kernels (nor panics).
func TestKernelsBnormRefuses(t *testing.T) {
	x, ch := ty(f32, 3, 5, 7), ty(f32, 5)
	spec := func(op string, at ir.Attrs, in, out []ir.Type) *device.Spec {
		return &device.Spec{Op: ir.MustLookup(op), Attrs: at, In: in, Out: out}
	}
	for _, s := range []*device.Spec{
		spec("batch_norm", ir.Attrs{{Name: "eps", Value: ir.Float(math.NaN())}}, []ir.Type{x, ch, ch, ch, ch}, []ir.Type{x}),
		spec("instance_norm", ir.Attrs{{Name: "eps", Value: ir.Float(math.Inf(1))}}, []ir.Type{x, ch, ch}, []ir.Type{x}),
		spec("batch_norm", nil, []ir.Type{x, ch, ch, ch}, []ir.Type{x}),                               // an operand short
		spec("batch_norm", nil, []ir.Type{x, ty(f32, 7), ch, ch, ch}, []ir.Type{x}),                   // scale not [C]
		spec("batch_norm_grad_input", nil, []ir.Type{x, ch, ty(ir.F64, 5)}, []ir.Type{x}),             // mixed dtypes
		spec("instance_norm", nil, []ir.Type{ty(f32, 3, 5), ch, ch}, []ir.Type{ty(f32, 3, 5)}),        // no spatial dim
		spec("instance_norm_grad_input", nil, []ir.Type{x, ty(f32, 3, 5, 6), ch}, []ir.Type{x}),       // dy not x's shape
		spec("batch_norm_grad_params", nil, []ir.Type{x, x, ch, ch}, []ir.Type{ch}),                   // one result
		spec("instance_norm_grad_params", nil, []ir.Type{ty(ir.I64, 3, 5, 7), x}, []ir.Type{ch, ch}),  // integer x
		spec("instance_norm_grad_params", nil, []ir.Type{x, x}, []ir.Type{ty(f32, 7), ty(f32, 7)}),    // results not [C]
		spec("batch_norm_grad_params", nil, []ir.Type{x, x, ch, ch}, []ir.Type{ty(bf, 5), ty(bf, 5)}), // results of another dtype
	} {
		if ks, err := cuda.Kernels(s, "k"); err == nil {
			t.Errorf("%s %v → %v: generated %d kernels, want an error", s.Op.Name, s.In, s.Out, len(ks))
		}
	}
}
