package cpu

import (
	"math"
	"testing"

	k "ppc.dev/ppc/kernels/cpu"
)

// The float32 tanh-GELU and its derivative stay within a few ulps of the float64 formulas
// over the range activations take, and saturate correctly far out.
func TestGeluTanh32(t *testing.T) {
	worst, worstG := 0.0, 0.0
	for x := -12.0; x <= 12; x += 1.0 / 1024 {
		want := k.GeluTanh(x)
		got := float64(geluTanh32(float32(x)))
		scale := math.Max(math.Abs(want), 1e-3)
		worst = math.Max(worst, math.Abs(got-want)/scale)
		wantG := k.GeluTanhGrad(x)
		gotG := float64(geluTanhGrad32(float32(x)))
		worstG = math.Max(worstG, math.Abs(gotG-wantG)/math.Max(math.Abs(wantG), 0.1))
	}
	if worst > 2e-6 || worstG > 2e-6 {
		t.Fatalf("relative error %.3g (value), %.3g (derivative)", worst, worstG)
	}
	for _, x := range []float32{-100, -40, 40, 100} {
		g := geluTanh32(x)
		if math.IsNaN(float64(g)) || (x > 0 && g != x) || (x < 0 && g != 0 && g > -1e-30) {
			t.Errorf("gelu(%v) = %v", x, g)
		}
		if d := geluTanhGrad32(x); math.IsNaN(float64(d)) {
			t.Errorf("gelu'(%v) = NaN", x)
		}
	}
}
