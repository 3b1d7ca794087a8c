package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// One row times a transposed B (the GEMV path) against the float64 reference: odd k and n,
// padded leading dimensions, transposed A with lda 1, each beta form (beta 0 must not read
// a NaN C), with and without the assembly; and the same bits on one core as on all.
func TestGemvT(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, force := range []bool{false, true} {
		arithForceGo = force
		for _, k := range []int{64, 65, 97, 1000} {
			for _, n := range []int{1, 7, 33, 513} {
				for _, beta := range []float32{0, 1, -0.5} {
					testGemmCase[float32](t, r, false, true, 1, n, k, 0.75, beta, 3)
					testGemmCase[float32](t, r, true, true, 1, n, k, 1, beta, 0)
				}
			}
		}
	}
	arithForceGo = false
	const n, k = 301, 777
	a, b := randSlice[float32](r, k), randSlice[float32](r, n*k)
	c1, c2 := make([]float32, n), make([]float32, n)
	old := runtime.GOMAXPROCS(1)
	Gemm(false, true, 1, n, k, 1, a, k, b, k, 0, c1, n)
	runtime.GOMAXPROCS(max(2, old))
	Gemm(false, true, 1, n, k, 1, a, k, b, k, 0, c2, n)
	runtime.GOMAXPROCS(old)
	for j := range c1 {
		if math.Float32bits(c1[j]) != math.Float32bits(c2[j]) {
			t.Fatalf("c[%d] = %v on one core, %v on several", j, c1[j], c2[j])
		}
	}
}

// BenchmarkGemvT is AlexNet's first classifier layer at batch 1 (9216 → 4096, 151 MB of
// weights): GB/s of weights streamed.
func BenchmarkGemvT(b *testing.B) {
	const n, k = 4096, 9216
	r := rand.New(rand.NewPCG(1, 1))
	x, w, y := randSlice[float32](r, k), randSlice[float32](r, n*k), make([]float32, n)
	for b.Loop() {
		Gemm(false, true, 1, n, k, 1, x, k, w, k, 0, y, n)
	}
	b.ReportMetric(float64(4*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// Two and four rows at once (dot32x2, dot32x4) sum each row as dot32 does: the same bits, whatever the row's
// partner, so gemvT's pairing of rows (which moves with the thread split) changes nothing.
func TestDotX2MatchesDot(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{32, 64, 999, 4096} {
		a, b0, b1 := randSlice[float32](r, k), randSlice[float32](r, k), randSlice[float32](r, k)
		b1[k/2] = float32(math.Inf(1))
		s0, s1, n := dotVec32x2(a, b0, b1)
		w0, n0 := dotVec32(a, b0)
		w1, _ := dotVec32(a, b1)
		if n != n0 || math.Float32bits(s0) != math.Float32bits(w0) || math.Float32bits(s1) != math.Float32bits(w1) {
			t.Fatalf("k %d: dot32x2 = %v, %v over %d; dot32 %v, %v over %d", k, s0, s1, n, w0, w1, n0)
		}
		if !gemvQuad {
			continue
		}
		s4, n4 := dotVec32x4(a, b1, b0, b1, b0)
		if n4 != n0 || math.Float32bits(s4[0]) != math.Float32bits(w1) || math.Float32bits(s4[1]) != math.Float32bits(w0) ||
			math.Float32bits(s4[2]) != math.Float32bits(w1) || math.Float32bits(s4[3]) != math.Float32bits(w0) {
			t.Fatalf("k %d: dot32x4 = %v over %d; dot32 %v, %v over %d", k, s4, n4, w1, w0, n0)
		}
	}
}
