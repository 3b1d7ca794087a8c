package cpu

import (
	"math"
	"testing"
)

// geluTanhInputs are dense and random values over the range activations take, the far tails
// and the special values, in a slice whose length is not a multiple of the vector width.
func geluTanhInputs() (x, dy []float64) {
	r := tkRand(27)
	for v := -16.0; v <= 16; v += 1.0 / 512 {
		x = append(x, float64(float32(v)))
	}
	for range 100000 {
		x = append(x, float64(float32((r.Float64()-0.5)*20)))
		x = append(x, float64(float32((r.Float64()-0.5)*1e-4)))
	}
	x = append(x, 0, math.Copysign(0, -1), 1e-40, -1e-40, 100, -100, 1e30, -1e30, 3e38, -3e38,
		math.Inf(1), math.Inf(-1), math.NaN(), 5.5, -5.5)
	dy = make([]float64, len(x))
	for i := range dy {
		dy[i] = float64(float32(r.NormFloat64()))
	}
	return x, dy
}

// The assembly computes bit for bit what the Go definition does (so a slice's tail, done in
// Go, matches its body, and machines with and without AVX2 agree).
func TestGeluTanhSliceAssemblyMatchesGo(t *testing.T) {
	x, dy := geluTanhInputs()
	for _, n := range []int{len(x), len(x) - 1, 7, 4, 3, 0} {
		xs, dys := x[len(x)-n:], dy[len(x)-n:]
		asm, ref := make([]float64, n), make([]float64, n)
		asmG, refG := make([]float64, n), make([]float64, n)
		GeluTanhSlice(asm, xs)
		GeluTanhGradSlice(asmG, xs, dys)
		geluTanhForceGo = true
		GeluTanhSlice(ref, xs)
		GeluTanhGradSlice(refG, xs, dys)
		geluTanhForceGo = false
		for i := range asm {
			if math.Float64bits(asm[i]) != math.Float64bits(ref[i]) && !(math.IsNaN(asm[i]) && math.IsNaN(ref[i])) {
				t.Fatalf("n=%d: gelu(%v): assembly %v, Go %v", n, xs[i], asm[i], ref[i])
			}
			if math.Float64bits(asmG[i]) != math.Float64bits(refG[i]) && !(math.IsNaN(asmG[i]) && math.IsNaN(refG[i])) {
				t.Fatalf("n=%d: gelu'(%v)·%v: assembly %v, Go %v", n, xs[i], dys[i], asmG[i], refG[i])
			}
		}
	}
}

// Against the float64 formulas (math.Exp): within 1e-12 relative wherever the result is a
// normal float32, and within one float32 ulp once rounded everywhere (the clamp only changes
// results far below float32's smallest subnormal); the derivative also against central
// differences of the value.
func TestGeluTanhSliceAccuracy(t *testing.T) {
	x, dy := geluTanhInputs()
	got, gotG := make([]float64, len(x)), make([]float64, len(x))
	GeluTanhSlice(got, x)
	GeluTanhGradSlice(gotG, x, dy)
	worst, worstG := 0.0, 0.0
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if !math.IsNaN(got[i]) && v != got[i] {
				t.Errorf("gelu(%v) = %v", v, got[i])
			}
			continue
		}
		want := GeluTanh(v)
		if e := math.Abs(got[i]-want) / math.Abs(want); math.Abs(want) > 0x1p-126 && e > worst {
			worst = e
		}
		if u := tkULP32(float32(got[i]), float32(want)); u > 1 {
			t.Fatalf("gelu(%v) = %v, want %v (%d f32 ulps)", v, float32(got[i]), float32(want), u)
		}
		wantG := dy[i] * GeluTanhGrad(v)
		if u := tkULP32(float32(gotG[i]), float32(wantG)); u > 1 {
			t.Fatalf("%v·gelu'(%v) = %v, want %v (%d f32 ulps)", dy[i], v, float32(gotG[i]), float32(wantG), u)
		}
		if e := math.Abs(gotG[i]-wantG) / math.Abs(wantG); math.Abs(wantG) > 0x1p-126 && e > worstG {
			worstG = e
		}
	}
	if worst > 1e-12 || worstG > 1e-12 {
		t.Fatalf("relative error %.3g (value), %.3g (derivative)", worst, worstG)
	}
	// Central differences of the value itself (h = 1e-5: truncation and rounding ~1e-10).
	var xs, ys, gs []float64
	for v := -6.0; v <= 6; v += 0.01 {
		xs = append(xs, v-1e-5, v+1e-5)
		gs = append(gs, v)
	}
	ys = make([]float64, len(xs))
	GeluTanhSlice(ys, xs)
	ones := make([]float64, len(gs))
	for i := range ones {
		ones[i] = 1
	}
	d := make([]float64, len(gs))
	GeluTanhGradSlice(d, gs, ones)
	for i, v := range gs {
		fd := (ys[2*i+1] - ys[2*i]) / 2e-5
		if math.Abs(fd-d[i]) > 1e-8 {
			t.Fatalf("gelu'(%v) = %v, central difference %v", v, d[i], fd)
		}
	}
}

func BenchmarkGeluTanhSlice(b *testing.B) {
	x, dy := geluTanhInputs()
	x, dy = x[:4096], dy[:4096]
	dst := make([]float64, len(x))
	b.Run("value", func(b *testing.B) {
		b.SetBytes(16 * int64(len(x)))
		for b.Loop() {
			GeluTanhSlice(dst, x)
		}
	})
	b.Run("grad", func(b *testing.B) {
		b.SetBytes(24 * int64(len(x)))
		for b.Loop() {
			GeluTanhGradSlice(dst, x, dy)
		}
	})
}
