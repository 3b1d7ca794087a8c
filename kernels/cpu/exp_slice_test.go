package cpu

import (
	"math"
	"testing"
)

func expShiftInputs() []float32 {
	r := tkRand(31)
	var x []float32
	for v := -110.0; v <= 92; v += 1.0 / 256 {
		x = append(x, float32(v))
	}
	for range 200000 {
		x = append(x, float32((r.Float64()-0.5)*40), float32((r.Float64()-0.5)*1e-5))
	}
	inf := float32(math.Inf(1))
	return append(x, 0, float32(math.Copysign(0, -1)), 88.72283, 88.7229, -103.9, -104, -149, 1e30, -1e30,
		inf, -inf, float32(math.NaN()), 1, 2)
}

// The assembly and expShiftScalar agree bit for bit (NaNs included), for every length.
func TestExpShiftAssemblyMatchesGo(t *testing.T) {
	x := expShiftInputs()
	for _, m := range []float32{0, 3.5, -7.25, float32(math.Inf(1))} {
		for _, n := range []int{len(x), len(x) - 3, 5, 4, 1, 0} {
			xs := x[len(x)-n:]
			asm, ref := make([]float32, n), make([]float32, n)
			expShift32(asm, xs, m)
			expShiftForceGo = true
			expShift32(ref, xs, m)
			expShiftForceGo = false
			for i := range asm {
				if math.Float32bits(asm[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("m=%v n=%d: e^(%v − m): assembly %v (%#x), Go %v (%#x)", m, n, xs[i], asm[i], math.Float32bits(asm[i]), ref[i], math.Float32bits(ref[i]))
				}
			}
		}
	}
}

// Within one float32 ulp of math.Exp of the float64 difference, subnormals and overflow
// included; NaN for a NaN difference; in place (dst = x) as well.
func TestExpShiftAccuracy(t *testing.T) {
	x := expShiftInputs()
	for _, m := range []float32{0, 3.5, -7.25} {
		got := append([]float32(nil), x...)
		ExpShift(got, got, m)
		for i, v := range x {
			d := float64(v) - float64(m)
			want := float32(math.Exp(d))
			if math.IsNaN(d) {
				if !math.IsNaN(float64(got[i])) {
					t.Fatalf("e^(%v − %v) = %v, want NaN", v, m, got[i])
				}
				continue
			}
			if u := tkULP32(got[i], want); u > 1 {
				t.Fatalf("e^(%v − %v) = %v, want %v (%d ulps)", v, m, got[i], want, u)
			}
		}
	}
	g := []float32{0}
	if ExpShift(g, []float32{float32(math.Inf(1))}, float32(math.Inf(1))); !math.IsNaN(float64(g[0])) {
		t.Fatalf("e^(∞ − ∞) = %v", g[0])
	}
	d := []float64{1, -2}
	ExpShift(d, d, 0.5)
	if d[0] != math.Exp(0.5) || d[1] != math.Exp(-2.5) {
		t.Fatalf("float64 ExpShift = %v", d)
	}
}

func BenchmarkExpShift(b *testing.B) {
	x := expShiftInputs()[:4096]
	dst := make([]float32, len(x))
	b.Run("vector", func(b *testing.B) {
		b.SetBytes(8 * int64(len(x)))
		for b.Loop() {
			ExpShift(dst, x, 1.5)
		}
	})
	b.Run("scalar-Exp", func(b *testing.B) {
		b.SetBytes(8 * int64(len(x)))
		for b.Loop() {
			for i, v := range x {
				dst[i] = Exp(v - 1.5)
			}
		}
	})
}
