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
