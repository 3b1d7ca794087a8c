package cuda_test

import (
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// TestAttentionTiles: the attention sites are FlashAttention-2's tile kernels — the forward
// one kernel writing o and the log-sum-exp, the backward δ then dq, dk and dv — each block of
// 128 threads within 40 KiB of static shared memory (a block has 48 without opting in), for
// head dims up to 256 in every float dtype, with the tiles over 8,192 rows of 16-bit
// operands at GPT-2's head dim 64 taking 16 KiB (32-row key tiles).
func TestAttentionTiles(t *testing.T) {
	for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.F16, ir.F64} {
		for _, d := range []int{1, 37, 64, 80, 128, 256} {
			q := ir.Type{DType: dt, Shape: ir.Shape{1, 4, 8192, d}}
			kv := ir.Type{DType: dt, Shape: ir.Shape{1, 2, 8192, d}}
			lse := ir.Type{DType: ir.AttentionLSEType(dt), Shape: ir.Shape{1, 4, 8192, 1}}
			at := ir.Attrs{{Name: "causal", Value: ir.BoolAttr(true)}}
			fwd, err := cuda.PlanSite(&device.Spec{Op: ir.MustLookup("attention"), Attrs: at, In: []ir.Type{q, kv, kv}, Out: []ir.Type{q, lse}}, "f")
			if err != nil {
				t.Fatal(err)
			}
			bwd, err := cuda.PlanSite(&device.Spec{Op: ir.MustLookup("attention_grad"), Attrs: at, In: []ir.Type{q, kv, kv, q, lse, q}, Out: []ir.Type{q, kv, kv}}, "b")
			if err != nil {
				t.Fatal(err)
			}
			if len(fwd.Steps) != 1 || len(fwd.Steps[0].Also) != 1 || len(bwd.Steps) != 4 {
				t.Fatalf("%s d %d: %d forward kernels (%d extra results), %d backward; want 1 (1) and 4", dt, d, len(fwd.Steps), len(fwd.Steps[0].Also), len(bwd.Steps))
			}
			for _, st := range append(fwd.Steps, bwd.Steps[1:]...) {
				k := st.Kernel
				if k.Block != 128 || k.Shared <= 0 || k.Shared > 40<<10 {
					t.Errorf("%s d %d: %s has blocks of %d threads and %d bytes of shared memory", dt, d, k.Name, k.Block, k.Shared)
				}
				if dt == ir.BF16 && d == 64 && k.Name == "f_s0" && k.Shared != 16<<10 {
					t.Errorf("bf16 d 64: the forward stages %d bytes, want 16 KiB", k.Shared)
				}
			}
		}
	}
}
