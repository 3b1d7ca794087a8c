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

// The AVX transposes that pack 8- and 6-row A slivers, and a transposed B's full 16- and
// 32-column slivers, write what the scalar interleave writes, for every depth up to 41 and
// an odd row stride, and nothing past what they report packing (the 6-row one's overlapping
// stores must stop at the block's end).
func TestPackTransposesMatchInterleave(t *testing.T) {
	if !gemmHasAVX2FMA {
		t.Skip("no AVX2")
	}
	const ld = 45
	const guard = float32(-7)
	for _, c := range []struct {
		name string
		w    int // the sliver's width: rows of A, columns of B
		pack func(d, src []float32, kb int) int
	}{
		{"A", 8, func(d, src []float32, kb int) int { return gemmFastPackA(d, src, ld, kb, 8) }},
		{"A", 6, func(d, src []float32, kb int) int { return gemmFastPackA(d, src, ld, kb, 6) }},
		{"Bᵀ", 16, func(d, src []float32, kb int) int { return gemmFastPackBT(d, src, ld, kb, 16) }},
		{"Bᵀ", 32, func(d, src []float32, kb int) int { return gemmFastPackBT(d, src, ld, kb, 32) }},
	} {
		src := make([]float32, c.w*ld)
		for i := range src {
			src[i] = float32(i) + 0.5
		}
		for kb := 0; kb <= 41; kb++ {
			got, want := make([]float32, c.w*kb+c.w), make([]float32, c.w*kb)
			for i := range got {
				got[i] = guard
			}
			done := c.pack(got, src, kb)
			if done != kb&^7 {
				t.Fatalf("%s %d kb %d: packed %d, want %d", c.name, c.w, kb, done, kb&^7)
			}
			for i := done * c.w; i < len(got); i++ {
				if got[i] != guard {
					t.Fatalf("%s %d kb %d: wrote sliver[%d] past the %d packed", c.name, c.w, kb, i, done)
				}
			}
			gemmInterleave(got[done*c.w:], c.w, c.w, kb-done, func(i int) []float32 { return src[i*ld+done : i*ld+kb] })
			gemmInterleave(want, c.w, c.w, kb, func(i int) []float32 { return src[i*ld : i*ld+kb] })
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s %d kb %d: sliver[%d] = %v, want %v", c.name, c.w, kb, i, got[i], want[i])
				}
			}
		}
	}
}

// The vector row copy moves exactly w elements a row for each width it takes (runs of 16 to
// 128 bytes: the slivers' 24, 48, 64 and 128, and the overlapping-vector copies of every
// width between), and declines the others.
func TestFastCopyWidths(t *testing.T) {
	if !gemmHasAVX2FMA {
		t.Skip("no AVX2")
	}
	check := func(t *testing.T, size int, copyRows func(dst, src []float64, rows, w int) bool) {
		for w := 1; w <= 33; w++ {
			const rows, srcLd, dstLd = 5, 37, 41
			src := make([]float64, rows*srcLd)
			for i := range src {
				src[i] = float64(i) + 0.25
			}
			dst := make([]float64, rows*dstLd)
			for i := range dst {
				dst[i] = -1
			}
			ok := copyRows(dst, src, rows, w)
			if want := w*size >= 16 && w*size <= 128; ok != want {
				t.Fatalf("size %d w %d: copied %v, want %v", size, w, ok, want)
			}
			for r := 0; r < rows; r++ {
				for j := 0; j < dstLd; j++ {
					want := -1.0
					if ok && j < w {
						want = src[r*srcLd+j]
					}
					if got := dst[r*dstLd+j]; got != want {
						t.Fatalf("size %d w %d: dst[%d][%d] = %v, want %v", size, w, r, j, got, want)
					}
				}
			}
		}
	}
	check(t, 4, func(dst, src []float64, rows, w int) bool {
		d, s := make([]float32, len(dst)), make([]float32, len(src))
		for i := range d {
			d[i] = float32(dst[i])
		}
		for i := range s {
			s[i] = float32(src[i])
		}
		ok := gemmFastCopy(d, 41, s, 37, rows, w)
		for i := range d {
			dst[i] = float64(d[i])
		}
		return ok
	})
	check(t, 8, func(dst, src []float64, rows, w int) bool { return gemmFastCopy(dst, 41, src, 37, rows, w) })
}
