package passes

import (
	"fmt"
	"math"
	"testing"

	"ppc.dev/ppc/ir"
)

// The collectives' costs follow the ring formulas with the profile's intra-node link for tp
// and inter-node link otherwise.
func TestCollectiveCosts(t *testing.T) {
	m, err := ir.ParseAndVerify("c.ir", `module @c attributes {mesh = {dp = 2, tp = 4}, partitioned}

func @forward(%x: f32[256,1024] {input}) -> (f32[256,1024], f32[256,1024], f32[1024,1024], f32[64,1024], f32[256,1024]) {
  %a = all_reduce %x {axis = tp} : f32[256,1024]
  %c = copy_to_axis %x {axis = tp} : f32[256,1024]
  %g = all_gather %x {axis = tp, dim = 0, parts = 4} : f32[1024,1024]
  %r = reduce_scatter %x {axis = tp, dim = 0, parts = 4} : f32[64,1024]
  %d = all_reduce %x {axis = dp} : f32[256,1024]
  return %a, %c, %g, %r, %d
}
`)
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	dev := DefaultDevice
	bw, lat := dev.IntraNodeBandwidth, dev.IntraNodeLatency
	want := map[string][2]float64{ // F, I
		"a": {2*0.75*mib/bw + 6*lat, 0},
		"c": {0, 2*0.75*mib/bw + 6*lat},
		"g": {0.75*4*mib/bw + 3*lat, 0.75*4*mib/bw + 3*lat},
		"r": {0.75*mib/bw + 3*lat, 0.75*mib/bw + 3*lat},
		"d": {2*0.5*mib/dev.InterNodeBandwidth + 2*dev.InterNodeLatency, 0},
	}
	for _, op := range m.Funcs[0].Ops {
		c := CostOf(op, func(*ir.Value) bool { return false }, func(a string) int { return meshSize(m, a) })
		w := want[op.Results[0].Name]
		if math.Abs(c.F-w[0]) > 1e-15 || math.Abs(c.I-w[1]) > 1e-15 || c.W != 0 || c.FComm != c.F || c.IComm != c.I || c.WComm != 0 {
			t.Errorf("%s: F %g I %g W %g, comm F %g I %g W %g; want F %g I %g, all of it comm", op.Results[0].Name, c.F, c.I, c.W, c.FComm, c.IComm, c.WComm, w[0], w[1])
		}
		// A weight's gradient is a weight gradient: the conjugate collective runs in W —
		// except a parameter copied to the axis, whose gradient's all-reduce is hoisted out
		// of the micro-batches (passes.hoistTPReductions) and priced per step by code
		// generation.
		w2 := CostOf(op, func(*ir.Value) bool { return true }, func(a string) int { return meshSize(m, a) })
		wantW := c.I
		if op.Name() == "copy_to_axis" {
			wantW = 0
		}
		if w2.F != c.F || w2.I != 0 || w2.W != wantW || w2.WComm != wantW {
			t.Errorf("%s of a weight: F %g I %g W %g (comm W %g), want F %g I 0 W %g", op.Results[0].Name, w2.F, w2.I, w2.W, w2.WComm, c.F, wantW)
		}
	}
	if got := dev.CollectiveTime("all_reduce", mib, 1, true); got != 0 {
		t.Errorf("a collective over one rank costs %g", got)
	}
}

// The cost model counts real byte sizes: after the precision pass, a 16-bit op moves half the
// bytes, keeps half the activation bytes and, when memory-bound, takes half the time; a
// matmul's FLOPs do not change (the profile's matmul peak is its 16-bit rate).
func TestCostsFollowPrecision(t *testing.T) {
	src := `func @forward(%x: f32[64,1024] {input}, %w: f32[1024,1024] {param}) -> (f32[] {loss}) {
  %h = matmul %x, %w : f32[64,1024]
  %g = gelu %h : f32[64,1024]
  %loss = reduce_mean %g : f32[]
  return %loss
}
`
	costs := func(prec string) map[string]OpCost {
		m, err := ir.ParseAndVerify("c.ir", src)
		if err != nil {
			t.Fatal(err)
		}
		pl, _ := ParsePipeline("precision{dtype=" + prec + "}")
		if err := Run(m, pl, Config{VerifyEach: true}); err != nil {
			t.Fatal(err)
		}
		out := map[string]OpCost{}
		for _, op := range m.Funcs[0].Ops {
			if op.Name() != "cast" {
				out[op.Name()] = CostOf(op, func(v *ir.Value) bool { return v.Def != nil && v.Def.Name() == "cast" }, func(string) int { return 1 })
			}
		}
		return out
	}
	f32, bf16 := costs("f32"), costs("bf16")
	mm32, mm16 := f32["matmul"], bf16["matmul"]
	if mm16.FLOPs != mm32.FLOPs || mm16.Bytes != mm32.Bytes/2 || mm16.ActBytes != mm32.ActBytes/2 {
		t.Errorf("matmul: bf16 %+v, f32 %+v: want the FLOPs and half the bytes", mm16, mm32)
	}
	g32, g16 := f32["gelu"], bf16["gelu"]
	if g16.Bytes != g32.Bytes/2 || g16.ActBytes != g32.ActBytes/2 || math.Abs(g16.F-g32.F/2) > 1e-18 {
		t.Errorf("gelu (memory-bound): bf16 %+v, f32 %+v: want half the bytes and half the time", g16, g32)
	}
}

// TestAllToAllCost: an all_to_all over ep keeps 1/ep of its operand and exchanges the rest,
// (ep−1)/ep of the bytes and ep−1 latencies, forward and (its adjoint) backward — on NVLink
// while the ep group's tp·ep consecutive ranks fit in a node, on the inter-node link beyond.
func TestAllToAllCost(t *testing.T) {
	dev := DefaultDevice // 8 GPUs a node
	for _, c := range []struct {
		tp, ep int
		intra  bool
	}{{1, 2, true}, {2, 4, true}, {1, 8, true}, {2, 8, false}, {1, 16, false}} {
		m, err := ir.ParseAndVerify("a.ir", fmt.Sprintf(`module @a attributes {mesh = {dp = %d, ep = %d, tp = %d}, partitioned}

func @forward(%%x: f32[%d,64,1024] {input}) -> (f32[1,%d,1024]) {
  %%y = all_to_all %%x {axis = ep, concat_dim = 1, parts = %d, split_dim = 0} : f32[1,%d,1024]
  return %%y
}
`, c.ep, c.ep, c.tp, c.ep, 64*c.ep, c.ep, 64*c.ep))
		if err != nil {
			t.Fatal(err)
		}
		op := m.Funcs[0].Ops[0]
		got := CostOf(op, func(*ir.Value) bool { return false }, func(a string) int { return meshSize(m, a) })
		bw, lat := dev.InterNodeBandwidth, dev.InterNodeLatency
		if c.intra {
			bw, lat = dev.IntraNodeBandwidth, dev.IntraNodeLatency
		}
		n := float64(c.ep)
		bytes := float64(c.ep) * 64 * 1024 * 4
		want := (n-1)/n*bytes/bw + (n-1)*lat
		if math.Abs(got.F-want) > 1e-12 || math.Abs(got.I-want) > 1e-12 || got.FComm != got.F || got.IComm != got.I {
			t.Errorf("tp %d ep %d: F %g I %g (comm %g %g), want %g each (intra-node %v)", c.tp, c.ep, got.F, got.I, got.FComm, got.IComm, want, c.intra)
		}
	}
}
