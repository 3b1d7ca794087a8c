package cuda

import (
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	kernels "ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/device"
)

// TestMisalignedGemmStaged: 16-bit GEMMs with an odd dim (GPT-2's head at a small scale: a
// vocabulary of 131) run on copies padded to multiples of 8 (kernels.AlignGemm, with its
// size threshold lowered) and give the CPU device's results: the logits (the head padded
// with rows, the result copied back), their gradient with respect to the activations (K
// padded in both operands), with respect to the head (the result's columns), and a product
// whose right operand is misaligned. Each site launches exactly the copies it needs.
func TestMisalignedGemmStaged(t *testing.T) {
	defer func(v int64) { kernels.AlignGemmMin = v }(kernels.AlignGemmMin)
	kernels.AlignGemmMin = 1
	for _, c := range misalignedGemms() {
		t.Run(c.c.Name, func(t *testing.T) {
			e := newEmulator(t)
			dev, err := NewDevice(e, e, e.compile, false)
			if err != nil {
				t.Fatal(err)
			}
			checkKernels(t, []cudatest.Case{c.c}, dev)
			var copies string
			for _, l := range e.Log {
				if i := strings.Index(l, " pad_"); strings.HasPrefix(l, "function ") && i > 0 {
					copies += l[strings.LastIndex(l, "_"):]
				}
			}
			if copies != c.copies {
				t.Errorf("the site's padded copies: %q, want %q", copies, c.copies)
			}
		})
	}
}

// TestGPUMisalignedGemm: the same staged GEMMs through cuBLASLt on the GPU, against the
// CPU device (skips with one line where there is no GPU).
func TestGPUMisalignedGemm(t *testing.T) {
	dev, _ := gpuDevice(t)
	defer func(v int64) { kernels.AlignGemmMin = v }(kernels.AlignGemmMin)
	kernels.AlignGemmMin = 1
	var cases []cudatest.Case
	for _, c := range misalignedGemms() {
		cases = append(cases, c.c)
	}
	checkKernels(t, cases, dev)
}

// misalignedGemms are the cases of the two tests above, each with the copies it stages.
func misalignedGemms() []struct {
	c      cudatest.Case
	copies string
} {
	bf := func(s ...int) ir.Type { return ir.Type{DType: ir.BF16, Shape: s} }
	mm := ir.MustLookup("matmul")
	tb := ir.Attrs{{Name: "transpose_b", Value: ir.BoolAttr(true)}}
	ta := ir.Attrs{{Name: "transpose_a", Value: ir.BoolAttr(true)}}
	cases := []struct {
		c      cudatest.Case
		copies string
	}{
		{cudatest.Case{Name: "logits", Spec: &device.Spec{Op: mm, Attrs: tb, In: []ir.Type{bf(136, 128), bf(131, 128)}, Out: []ir.Type{bf(136, 131)}}, ULPs: 1}, "_a_c"},
		{cudatest.Case{Name: "dx", Spec: &device.Spec{Op: mm, In: []ir.Type{bf(136, 131), bf(131, 128)}, Out: []ir.Type{bf(136, 128)}}, ULPs: 1}, "_a_b"},
		{cudatest.Case{Name: "dw", Spec: &device.Spec{Op: mm, Attrs: ta, In: []ir.Type{bf(136, 131), bf(136, 128)}, Out: []ir.Type{bf(131, 128)}}, ULPs: 1}, "_b_c"},
		{cudatest.Case{Name: "right", Spec: &device.Spec{Op: mm, In: []ir.Type{bf(136, 128), bf(128, 131)}, Out: []ir.Type{bf(136, 131)}}, ULPs: 1}, "_a_c"},
		// As the model has them: [batch, seq, ·] activations. The logits and their input
		// gradient fold the batch into one GEMM (kernels.PlanMatmul); the head's gradient
		// is a product per sequence (summed after, by reduce_sum), each staged.
		{cudatest.Case{Name: "logits 3d", Spec: &device.Spec{Op: mm, Attrs: tb, In: []ir.Type{bf(2, 68, 128), bf(131, 128)}, Out: []ir.Type{bf(2, 68, 131)}}, ULPs: 1}, "_a_c"},
		{cudatest.Case{Name: "dx 3d", Spec: &device.Spec{Op: mm, In: []ir.Type{bf(2, 68, 131), bf(131, 128)}, Out: []ir.Type{bf(2, 68, 128)}}, ULPs: 1}, "_a_b"},
		{cudatest.Case{Name: "dw batched", Spec: &device.Spec{Op: mm, Attrs: ta, In: []ir.Type{bf(3, 136, 131), bf(3, 136, 128)}, Out: []ir.Type{bf(3, 131, 128)}}, ULPs: 2}, "_b_c"}, // a bf16 rounding off a cancelling sum: 1.2 ulps
	}
	return cases
}
