package passes

import (
	"math"
	"testing"

	"ppc.dev/ppc/ir"
)

// TestSliceCostMatchesCostOf: the token-slice cost model prices a slice of the whole sequence
// (no earlier context) as CostOf prices the unsliced ops — the generation's GEMM efficiency
// for the shapes, FlashAttention-2's backward, a kernel launch per phase — plus the K/V
// prefixes it joins; a sliced plan's estimate and an unsliced one's are one model. (Before,
// it priced every matmul at the datasheet peak and launched nothing, so ppc compile's
// estimate of a sliced plan was several times the planner's on small models.)
func TestSliceCostMatchesCostOf(t *testing.T) {
	src := `func @forward(%tok: i64[2,64] {input}, %lab: i64[2,64] {input, label}, %wte: f32[512,128] {param}, %wq: f32[128,128] {param}, %wk: f32[128,128] {param}, %wv: f32[128,128] {param}, %w1: f32[128,512] {param}, %head: f32[128,512] {param}) -> (f32[] {loss}) {
  %x = gather %wte, %tok : f32[2,64,128]
  %q = matmul %x, %wq : f32[2,64,128]
  %k = matmul %x, %wk : f32[2,64,128]
  %v = matmul %x, %wv : f32[2,64,128]
  %s = matmul %q, %k {transpose_b = true} : f32[2,64,64]
  %col = iota {axis = 1, type = i64[64,64]} : i64[64,64]
  %row = iota {axis = 0, type = i64[64,64]} : i64[64,64]
  %future = greater %col, %row : bool[64,64]
  %fill = constant {value = dense<f32[]: [-1e9]>} : f32[]
  %m = where %future, %fill, %s : f32[2,64,64]
  %p = softmax %m : f32[2,64,64]
  %y = matmul %p, %v : f32[2,64,128]
  %h = matmul %y, %w1 : f32[2,64,512]
  %g = gelu %h : f32[2,64,512]
  %r = reshape %g {shape = [2, 64, 4, 128]} : f32[2,64,4,128]
  %z = reduce_sum %r {axes = [2]} : f32[2,64,128]
  %logits = matmul %z, %head : f32[2,64,512]
  %loss = cross_entropy %logits, %lab : f32[]
  return %loss
}`
	m, err := ir.Parse("slice.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []DeviceProfile{H100, A10080, V100} {
		sc, err := NewSliceCostModel(m, dev)
		if err != nil {
			t.Fatal(err)
		}
		f := m.Func(ir.ForwardFunc)
		param := paramDerived(f)
		var want SliceTimes
		for _, op := range f.Ops {
			c := dev.CostOf(op, func(v *ir.Value) bool { return param[v] }, func(string) int { return 1 })
			want.F, want.I, want.W = want.F+c.F, want.I+c.I, want.W+c.W
		}
		for _, o := range sc.groups[0] {
			if o.kind == opCopy { // the K/V prefix's join: F once, I twice (rebuilt and split)
				b := (o.bytes[0].base + o.bytes[1].base) / dev.MemBandwidth
				want.F += b + dev.LaunchSeconds
				want.I += 2 * (b + dev.LaunchSeconds)
			}
		}
		got := sc.Parts(0, 2, 64, 0)
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"F", got.F, want.F}, {"I", got.I, want.I}, {"W", got.W, want.W}} {
			if math.Abs(c.got/c.want-1) > 1e-9 {
				t.Errorf("%s: one slice of the whole sequence: %s %.6g s, CostOf's ops %.6g s", dev.Name, c.name, c.got, c.want)
			}
		}
	}
}
