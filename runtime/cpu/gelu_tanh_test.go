package cpu

import (
	"math"
	"testing"

	k "ppc.dev/ppc/kernels/cpu"
)

// The engine's f32 tanh-GELU steps stay within one f32 ulp of the float64 formulas over the
// range activations take, and saturate correctly far out.
func TestGeluTanh32(t *testing.T) {
	var xs []float64
	for x := -12.0; x <= 12; x += 1.0 / 1024 {
		xs = append(xs, float64(float32(x)))
	}
	xs = append(xs, -100, -40, 40, 100)
	ones := make([]float64, len(xs))
	for i := range ones {
		ones[i] = 1
	}
	got, gotG := make([]float64, len(xs)), make([]float64, len(xs))
	geluTanhF32(got, [][]float64{xs})
	geluTanhGradF32(gotG, [][]float64{xs, ones})
	for i, x := range xs {
		if want := float32(k.GeluTanh(x)); ulps32(float32(got[i]), want) > 1 {
			t.Fatalf("gelu(%v) = %v, want %v", x, float32(got[i]), want)
		}
		if want := float32(k.GeluTanhGrad(x)); ulps32(float32(gotG[i]), want) > 1 {
			t.Fatalf("gelu'(%v) = %v, want %v", x, float32(gotG[i]), want)
		}
		if math.Abs(x) == 100 || math.Abs(x) == 40 {
			g := float32(got[i])
			if (x > 0 && g != float32(x)) || (x < 0 && g != 0) || math.IsNaN(gotG[i]) {
				t.Errorf("gelu(%v) = %v, gelu' = %v", x, g, gotG[i])
			}
		}
	}
}

// ulps32 is the distance in float32 ulps between two finite values of one sign (or zeros).
func ulps32(a, b float32) int64 {
	if a == b {
		return 0
	}
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	if d < 0 {
		d = -d
	}
	return d
}
