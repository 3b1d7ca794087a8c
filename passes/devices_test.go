package passes

import (
	"math"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

// TestDeviceMatmulRates: a compute-bound matmul is priced at its dtype's rate — bf16 at the
// tensor-core peak, fp32 at the fp32 one (TF32 off) — on every real profile, and the
// profiles' figures are sane (positive rates and links, memory, a source).
func TestDeviceMatmulRates(t *testing.T) {
	mm := func(dt ir.DType) *ir.Op {
		a := &ir.Value{Type: ir.Type{DType: dt, Shape: ir.Shape{8192, 8192}}}
		b := &ir.Value{Type: ir.Type{DType: dt, Shape: ir.Shape{8192, 8192}}}
		return ir.NewOp(ir.MustLookup("matmul"), []*ir.Value{a, b}, nil, []ir.Type{{DType: dt, Shape: ir.Shape{8192, 8192}}})
	}
	no := func(*ir.Value) bool { return false }
	one := func(string) int { return 1 }
	flops := 2.0 * 8192 * 8192 * 8192
	for _, d := range Devices {
		if d.PeakFLOPs <= 0 || d.VectorFLOPs <= 0 || d.MemBandwidth <= 0 || d.LinkBandwidth <= 0 || d.IntraNodeBandwidth <= 0 || d.InterNodeBandwidth <= 0 || d.Source == "" || d.GPUsPerNode < 1 {
			t.Errorf("%s: incomplete profile %+v", d.Name, d)
		}
		if d == A100Like {
			continue
		}
		if d.MemBytes <= 0 {
			t.Errorf("%s: no memory size", d.Name)
		}
		for _, c := range []struct {
			dt   ir.DType
			rate float64
		}{{ir.BF16, d.PeakBF16}, {ir.F16, d.PeakFP16}, {ir.F32, d.PeakFP32}} {
			got := d.CostOf(mm(c.dt), no, one).F
			if want := flops/(c.rate*d.GEMMEfficiency(8192, 8192, 8192)) + d.LaunchSeconds; math.Abs(got-want) > 1e-9*want {
				t.Errorf("%s %s matmul: %g s, want %g (compute-bound at %g FLOP/s times the GEMM efficiency, plus a launch)", d.Name, c.dt, got, want, c.rate)
			}
		}
	}
	if h, a := H100.CostOf(mm(ir.BF16), no, one).F, A10080.CostOf(mm(ir.BF16), no, one).F; !(h < a) {
		t.Errorf("bf16 matmul: H100 %g s is not faster than A100 %g s", h, a)
	}
	m := &ir.Module{}
	m.Attrs = m.Attrs.Set(AttrDevice, ir.String("b200"))
	if _, err := ModuleDevice(m); err == nil {
		t.Error("unknown profile b200: no error")
	}
}

// TestGEMMEfficiencyCurve pins the documented points of the curve (costmodel.go): large
// GEMMs near cuBLAS's best, short dims well below it, monotone in every dim.
func TestGEMMEfficiencyCurve(t *testing.T) {
	for _, c := range []struct {
		m, n, k int
		want    float64
	}{{4096, 4096, 4096, 0.80}, {1024, 1024, 1024, 0.68}, {1 << 20, 2048, 128, 0.50}, {2048, 1536, 12288, 0.77}} {
		if got := GEMMEfficiency(c.m, c.n, c.k); math.Abs(got-c.want) > 0.005 {
			t.Errorf("GEMMEfficiency(%d, %d, %d) = %.3f, documented %.2f", c.m, c.n, c.k, got, c.want)
		}
	}
	prev := 0.0
	for d := 1; d <= 1<<16; d *= 2 {
		e := GEMMEfficiency(d, d, d)
		if e <= prev || e > GEMMPeakEfficiency {
			t.Fatalf("GEMMEfficiency(%d³) = %g after %g: not increasing towards %g", d, e, prev, GEMMPeakEfficiency)
		}
		prev = e
	}
}

// TestParseDeviceWholeNumbers: a byte size or count overridden in a profile is a whole
// number and is named as one (an 80 GiB limit reads mem_bytes=103079215104, as typed, not
// 1.03079215104e+11); a fraction or a size beyond 2^53 is refused.
func TestParseDeviceWholeNumbers(t *testing.T) {
	for spec, want := range map[string]string{
		"h100-80gb{mem_bytes=103079215104}":         "h100-80gb{mem_bytes=103079215104}",
		"h100-80gb{mem_bytes=80e9,gpus_per_node=4}": "h100-80gb{gpus_per_node=4,mem_bytes=80000000000}",
		"h100-80gb{inter_node_bandwidth=2.5e10}":    "h100-80gb{inter_node_bandwidth=2.5e+10}",
	} {
		d, err := ParseDevice(spec)
		if err != nil || d.Name != want {
			t.Errorf("%s: %q %v, want the name %q", spec, d.Name, err, want)
		}
	}
	for _, spec := range []string{"h100-80gb{mem_bytes=1.5}", "h100-80gb{mem_bytes=1e30}", "h100-80gb{gpus_per_node=2.5}"} {
		if d, err := ParseDevice(spec); err == nil || !strings.Contains(err.Error(), "want a whole number") {
			t.Errorf("%s: %+v %v, want an error", spec, d, err)
		}
	}
}

// FuzzParseDevice: any spec parses into a profile or an error, never a panic, and a parsed
// profile's name parses back to the same profile.
func FuzzParseDevice(f *testing.F) {
	for _, s := range []string{"h100-80gb", "a100-40gb{mem_bytes=4e10}", "v100-16gb{gpus_per_node=4,inter_node_bandwidth=1e9}", "h200{", "x{}", "h100-80gb{gpus_per_node=1.5}", "h100-80gb{,=}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		d, err := ParseDevice(spec)
		if err != nil {
			return
		}
		again, err := ParseDevice(d.Name)
		if err != nil {
			t.Fatalf("%q parsed to %q, which does not parse: %v", spec, d.Name, err)
		}
		if again != d {
			t.Fatalf("%q: %+v, but its name %q parses to %+v", spec, d, d.Name, again)
		}
	})
}

// TestGenerationEfficiencies: the real profiles carry their generation's achieved fractions
// (devices.go: Ampere GEMMs 0.87 and collectives 0.77, Hopper 0.80 and 0.82, 4 µs a launch),
// the cost model applies them — a large GEMM at that fraction of peak, a collective at that
// fraction of the link, every kernel at least a launch — and the default a100-like profile
// keeps the figures plans were made with.
func TestGenerationEfficiencies(t *testing.T) {
	for _, c := range []struct {
		d          DeviceProfile
		gemm, coll float64
	}{{A10040, 0.87, 0.77}, {A10080, 0.87, 0.77}, {H100, 0.80, 0.82}, {H200, 0.80, 0.82}} {
		if c.d.GEMMEff != c.gemm || c.d.CollectiveEff != c.coll || c.d.LaunchSeconds != 4e-6 || !strings.Contains(c.d.Source, "achieved") {
			t.Errorf("%s: GEMM %g, collectives %g, launch %g, source %q", c.d.Name, c.d.GEMMEff, c.d.CollectiveEff, c.d.LaunchSeconds, c.d.Source)
		}
		if got := c.d.GEMMEfficiency(1<<20, 1<<20, 1<<20); math.Abs(got-c.gemm) > 1e-3 {
			t.Errorf("%s: a huge GEMM at %.3f of peak, want %.2f", c.d.Name, got, c.gemm)
		}
		// A ring all-gather of 1 GB over 8 ranks in a node: 7/8 of it through the link.
		if got, want := c.d.CollectiveTime("all_gather", 1e9, 8, true), 7.0/8*1e9/(c.d.IntraNodeBandwidth*c.coll)+7*c.d.IntraNodeLatency; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: all-gather %g s, want %g", c.d.Name, got, want)
		}
		tiny := ir.NewOp(ir.MustLookup("neg"), []*ir.Value{{Type: ir.T(ir.BF16, 4)}}, nil, []ir.Type{ir.T(ir.BF16, 4)})
		if f := c.d.CostOf(tiny, func(*ir.Value) bool { return false }, func(string) int { return 1 }).F; f < 4e-6 {
			t.Errorf("%s: a 4-element op costs %g s, less than a launch", c.d.Name, f)
		}
	}
	if d := A100Like; d.GEMMEff != 0 || d.CollectiveEff != 0 || d.LaunchSeconds != 0 || d.GEMMEfficiency(4096, 4096, 4096) != GEMMEfficiency(4096, 4096, 4096) {
		t.Errorf("a100-like changed: %+v", d)
	}
	d, err := ParseDevice("h100-80gb{gemm_efficiency=0.7,collective_efficiency=0.5,launch_seconds=1e-5}")
	if err != nil || d.GEMMEff != 0.7 || d.CollectiveEff != 0.5 || d.LaunchSeconds != 1e-5 {
		t.Errorf("overridden efficiencies: %+v, %v", d, err)
	}
}

// TestAttentionBackwardPriced: fused attention's input gradient costs FlashAttention-2's
// 2.5 forwards (five products against the forward's two) and no weight gradient; a causal
// kernel runs half the tiles of a non-causal one.
func TestAttentionBackwardPriced(t *testing.T) {
	q := &ir.Value{Type: ir.T(ir.BF16, 8, 32, 4096, 128)}
	att := func(causal bool) OpCost {
		var attrs ir.Attrs
		if causal {
			attrs = ir.Attrs{{Name: "causal", Value: ir.BoolAttr(true)}}
		}
		op := ir.NewOp(ir.MustLookup("attention"), []*ir.Value{q, q, q}, attrs, []ir.Type{q.Type, ir.T(ir.F32, 8, 32, 4096, 1)})
		return H100.CostOf(op, func(*ir.Value) bool { return false }, func(string) int { return 1 })
	}
	full, causal := att(false), att(true)
	l := H100.LaunchSeconds
	if r := (full.I - l) / (full.F - l); math.Abs(r-AttentionBackwardFactor) > 1e-9 || full.W != 0 {
		t.Errorf("attention: I/F = %g (want %g), W = %g", r, AttentionBackwardFactor, full.W)
	}
	if r := (causal.F - l) / (full.F - l); math.Abs(r-0.5) > 1e-9 {
		t.Errorf("causal attention takes %g of the full one's time, want 0.5", r)
	}
	if causal.FLOPs != full.FLOPs {
		t.Errorf("causal attention reports %g FLOPs, the full one %g: reports count every product", causal.FLOPs, full.FLOPs)
	}
}
