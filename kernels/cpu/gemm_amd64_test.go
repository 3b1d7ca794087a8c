//go:build amd64 && !purego

package cpu

import (
	"runtime"
	"testing"
)

// BenchmarkFMAPeak measures one core's FMA throughput with a loop of independent FMAs and
// no memory traffic: the denominator for "fraction of peak" in the GEMM benchmarks.
func BenchmarkFMAPeak(b *testing.B) {
	const iters = 1 << 16
	run := func(b *testing.B, f func(int), flopsPerIter float64) {
		old := runtime.GOMAXPROCS(1)
		defer runtime.GOMAXPROCS(old)
		for b.Loop() {
			f(iters)
		}
		b.ReportMetric(flopsPerIter*iters*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
	if gemmHasAVX2FMA {
		b.Run("avx2-f32", func(b *testing.B) { run(b, gemmPeakAVX2, 24*8*2) })
	}
	if gemmHasAVX512 {
		b.Run("avx512-f32", func(b *testing.B) { run(b, gemmPeakAVX512, 48*16*2) })
	}
}

// The AVX transpose that packs 8-row A slivers writes what the scalar interleave writes,
// for every width up to 41 and an odd row stride.
func TestPackA8MatchesInterleave(t *testing.T) {
	if !gemmHasAVX2FMA {
		t.Skip("no AVX2")
	}
	const lda = 45
	src := make([]float32, 8*lda)
	for i := range src {
		src[i] = float32(i) + 0.5
	}
	for kb := 0; kb <= 41; kb++ {
		got, want := make([]float32, 8*kb), make([]float32, 8*kb)
		done := gemmFastPackA8(got, src, lda, kb)
		if done != kb&^7 {
			t.Fatalf("kb %d: packed %d columns, want %d", kb, done, kb&^7)
		}
		gemmInterleave(got[done*8:], 8, 8, kb-done, func(i int) []float32 { return src[i*lda+done : i*lda+kb] })
		gemmInterleave(want, 8, 8, kb, func(i int) []float32 { return src[i*lda : i*lda+kb] })
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("kb %d: sliver[%d] = %v, want %v", kb, i, got[i], want[i])
			}
		}
	}
}
