package cuda_test

import (
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/device"
)

// TestConvRefusals: what the generators cannot compute is an error naming the problem, not a
// kernel or a panic.
func TestConvRefusals(t *testing.T) {
	spec := func(op string, at ir.Attrs, in []ir.Type, out ir.Type) *device.Spec {
		return &device.Spec{Op: ir.MustLookup(op), Attrs: at, In: in, Out: []ir.Type{out}}
	}
	x, w := ty(f32, 2, 3, 5, 7), ty(f32, 4, 3, 3, 2)
	for _, c := range []struct {
		name string
		spec *device.Spec
	}{
		{"unknown attribute", spec("conv", cudatest.Attrs("kernel", []int{3, 2}), []ir.Type{x, w}, ty(f32, 2, 4, 3, 6))},
		{"integer dtype", spec("conv", nil, []ir.Type{ty(ir.I64, 2, 3, 5, 7), ty(ir.I64, 4, 3, 3, 2)}, ty(ir.I64, 2, 4, 3, 6))},
		{"mixed dtypes", spec("conv", nil, []ir.Type{x, ty(bf, 4, 3, 3, 2)}, ty(f32, 2, 4, 3, 6))},
		{"rank 2", spec("conv", nil, []ir.Type{ty(f32, 2, 3), ty(f32, 4, 3)}, ty(f32, 2, 4))},
		{"wrong result", spec("conv", nil, []ir.Type{x, w}, ty(f32, 2, 4, 5, 7))},
		{"groups", spec("conv", cudatest.Attrs("groups", 2), []ir.Type{x, w}, ty(f32, 2, 4, 3, 6))},
		{"bias", spec("conv", nil, []ir.Type{x, w, ty(f32, 3)}, ty(f32, 2, 4, 3, 6))},
		{"kernel too large", spec("conv", nil, []ir.Type{x, ty(f32, 4, 3, 9, 2)}, ty(f32, 2, 4, 1, 6))},
		{"strides length", spec("conv", cudatest.Attrs("strides", []int{2}), []ir.Type{x, w}, ty(f32, 2, 4, 2, 3))},
		{"transpose pads", spec("conv_transpose", cudatest.Attrs("pads", []int{9, 9, 0, 0}), []ir.Type{x, ty(f32, 3, 4, 3, 2)}, ty(f32, 2, 4, 1, 1))},
		{"transpose result", spec("conv_transpose", nil, []ir.Type{x, ty(f32, 3, 4, 3, 2)}, ty(f32, 2, 4, 7, 7))},
		{"filter_shape", spec("conv_grad_filter", cudatest.Attrs("filter_shape", []int{4, 3, 3, 3}), []ir.Type{x, ty(f32, 2, 4, 3, 6)}, ty(f32, 4, 3, 3, 2))},
		{"dy shape", spec("conv_grad_filter", cudatest.Attrs("filter_shape", []int{4, 3, 3, 2}), []ir.Type{x, ty(f32, 2, 4, 3, 5)}, ty(f32, 4, 3, 3, 2))},
	} {
		if k, err := cuda.Generate(c.spec, "k"); err == nil {
			t.Errorf("%s: generated a kernel:\n%s", c.name, k.Body)
		}
	}
}
