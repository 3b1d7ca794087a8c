package cuda_test

import (
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// TestAttentionTiles: the attention sites are FlashAttention-2's tile kernels — the forward
// one kernel writing o and the log-sum-exp, the backward δ then dq and the key-side
// gradients — for head dims up to 256 in every float dtype, each within the static shared
// memory a block has without opting in (48 KiB). f32 and f64 run on the CUDA cores: blocks of
// 128 threads, within 40 KiB, dk and dv in two kernels. bf16 and f16 run on tensor cores
// (mma.sync in every kernel but δ): blocks of two threads per row, within 46 KiB, dk and dv
// in one kernel; GPT-2's head dim 64 takes 64 query rows a block (128 threads) and 32-row
// key tiles in 32 KiB.
func TestAttentionTiles(t *testing.T) {
	for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.F16, ir.F64} {
		mma := dt == ir.BF16 || dt == ir.F16
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
			wantBwd, maxShared := 4, 40<<10
			if mma {
				wantBwd, maxShared = 3, 46<<10
			}
			if len(fwd.Steps) != 1 || len(fwd.Steps[0].Also) != 1 || len(bwd.Steps) != wantBwd {
				t.Fatalf("%s d %d: %d forward kernels (%d extra results), %d backward; want 1 (1) and %d", dt, d, len(fwd.Steps), len(fwd.Steps[0].Also), len(bwd.Steps), wantBwd)
			}
			for _, st := range append(fwd.Steps, bwd.Steps[1:]...) {
				k := st.Kernel
				if !mma && k.Block != 128 || mma && (k.Block < 32 || k.Block > 128) || k.Shared <= 0 || k.Shared > int64(maxShared) {
					t.Errorf("%s d %d: %s has blocks of %d threads and %d bytes of shared memory", dt, d, k.Name, k.Block, k.Shared)
				}
				if got := strings.Contains(k.Body, "ppc_mma_"); got != mma {
					t.Errorf("%s d %d: %s uses tensor cores: %v", dt, d, k.Name, got)
				}
				// 64 query rows by 32 keys: Q, K, V and P as 16-bit tiles with padded strides
				// (23,552 bytes), the lanes' row maxima and sums (1 KiB), the rows' statistics.
				if dt == ir.BF16 && d == 64 && k.Name == "f_s0" && (k.Shared != 25088 || k.Block != 128) {
					t.Errorf("bf16 d 64: the forward has blocks of %d threads staging %d bytes, want 128 and 25,088", k.Block, k.Shared)
				}
			}
		}
	}
}
