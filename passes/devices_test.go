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
			if want := flops / (c.rate * GEMMEfficiency(8192, 8192, 8192)); math.Abs(got-want) > 1e-9*want {
				t.Errorf("%s %s matmul: %g s, want %g (compute-bound at %g FLOP/s times the GEMM efficiency)", d.Name, c.dt, got, want, c.rate)
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
