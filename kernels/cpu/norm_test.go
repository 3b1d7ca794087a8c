package cpu

import (
	"fmt"
	"math"
	"testing"
)

// tkRefLayerNorm is LayerNorm in float64 (gamma/beta nil = 1/0); rms selects RMSNorm.
func tkRefLayerNorm(x, gamma, beta []float64, rows, n int, eps float64, rms bool) []float64 {
	y := make([]float64, len(x))
	for r := range rows {
		row := x[r*n : (r+1)*n]
		mu := 0.0
		if !rms {
			for _, v := range row {
				mu += v
			}
			mu /= float64(n)
		}
		v2 := 0.0
		for _, v := range row {
			v2 += (v - mu) * (v - mu)
		}
		rs := 1 / math.Sqrt(v2/float64(n)+eps)
		for i, v := range row {
			o := (v - mu) * rs
			if gamma != nil {
				o *= gamma[i]
			}
			if beta != nil {
				o += beta[i]
			}
			y[r*n+i] = o
		}
	}
	return y
}

func TestLayerNorm(t *testing.T) {
	r := tkRand(20)
	for _, sh := range [][2]int{{1, 1}, {1, 5}, {3, 7}, {5, 33}, {130, 9}, {2, 5000}, {70, 600}} {
		rows, n := sh[0], sh[1]
		x := tkNormals(r, rows*n)
		for i := range x {
			x[i] = 3 + 2*x[i] // non-zero mean
		}
		gamma, beta := tkNormals(r, n), tkNormals(r, n)
		w := tkNormals(r, rows*n)
		const eps = 1e-5
		for _, rms := range []bool{false, true} {
			for _, affine := range []bool{false, true} {
				g, b := gamma, beta
				if !affine {
					g, b = nil, nil
				}
				if rms {
					b = nil
				}
				name := fmt.Sprintf("norm(rms=%v,affine=%v) %v", rms, affine, sh)
				want := tkRefLayerNorm(x, g, b, rows, n, eps, rms)
				y := make([]float64, len(x))
				mean, rstd := make([]float64, rows), make([]float64, rows)
				if rms {
					RMSNorm(x, g, y, rstd, rows, n, eps)
				} else {
					LayerNorm(x, g, b, y, mean, rstd, rows, n, eps)
				}
				tkCheck(t, name, y, want, 1e-10, 1e-10)
				y32 := make([]float32, len(x))
				if rms {
					RMSNorm(tkTo32(x), tkTo32(g), y32, nil, rows, n, eps)
				} else {
					LayerNorm(tkTo32(x), tkTo32(g), tkTo32(b), y32, nil, nil, rows, n, eps)
				}
				tkCheck(t, name+" f32", tkTo64(y32), want, 1e-4, 1e-4)

				// Backward: loss = Σ w·y.
				if rows*n > 2000 {
					continue // finite differences are quadratic in size
				}
				dx := make([]float64, len(x))
				dg := make([]float64, n)
				db := make([]float64, n)
				if rms {
					RMSNormBackward(x, g, rstd, w, dx, dg, rows, n)
				} else {
					LayerNormBackward(x, g, mean, rstd, w, dx, dg, db, rows, n)
				}
				tkGradCheck(t, name+" dx", dx, tkFD(x, func(x []float64) float64 {
					return tkDot(w, tkRefLayerNorm(x, g, b, rows, n, eps, rms))
				}))
				gg := gamma
				if !affine {
					gg = make([]float64, n)
					for i := range gg {
						gg[i] = 1
					}
				}
				tkGradCheck(t, name+" dgamma", dg, tkFD(gg, func(gv []float64) float64 {
					return tkDot(w, tkRefLayerNorm(x, gv, b, rows, n, eps, rms))
				}))
				if !rms {
					bb := beta
					if !affine {
						bb = make([]float64, n)
					}
					tkGradCheck(t, name+" dbeta", db, tkFD(bb, func(bv []float64) float64 {
						return tkDot(w, tkRefLayerNorm(x, g, bv, rows, n, eps, rms))
					}))
				}
				// float32 backward against the float64 kernel
				dx32, dg32, db32 := make([]float32, len(x)), make([]float32, n), make([]float32, n)
				if rms {
					RMSNormBackward(tkTo32(x), tkTo32(g), tkTo32(rstd), tkTo32(w), dx32, dg32, rows, n)
				} else {
					LayerNormBackward(tkTo32(x), tkTo32(g), tkTo32(mean), tkTo32(rstd), tkTo32(w), dx32, dg32, db32, rows, n)
				}
				tkCheck(t, name+" dx f32", tkTo64(dx32), dx, 1e-3, 1e-3)
				tkCheck(t, name+" dgamma f32", tkTo64(dg32), dg, 1e-3, 1e-3)
			}
		}
	}
}

func TestLayerNormBackwardAliasAndNil(t *testing.T) {
	r := tkRand(21)
	rows, n := 9, 13
	x, g, dy := tkNormals(r, rows*n), tkNormals(r, n), tkNormals(r, rows*n)
	mean, rstd, y := make([]float64, rows), make([]float64, rows), make([]float64, rows*n)
	LayerNorm(x, g, nil, y, mean, rstd, rows, n, 1e-5)
	dx := make([]float64, rows*n)
	dg, db := make([]float64, n), make([]float64, n)
	LayerNormBackward(x, g, mean, rstd, dy, dx, dg, db, rows, n)
	// dx aliasing dy, parameter gradients skipped
	d := append([]float64(nil), dy...)
	LayerNormBackward(x, g, mean, rstd, d, d, nil, nil, rows, n)
	tkCheck(t, "aliased dx", d, dx, 0, 0)
	// dbeta = column sums of dy
	want := make([]float64, n)
	for i := range dy {
		want[i%n] += dy[i]
	}
	tkCheck(t, "dbeta", db, want, 1e-12, 1e-12)
}

func TestNormDeterminism(t *testing.T) {
	r := tkRand(22)
	rows, n := 1000, 300
	x := tkTo32(tkNormals(r, rows*n))
	dy := tkTo32(tkNormals(r, rows*n))
	g, b := tkTo32(tkNormals(r, n)), tkTo32(tkNormals(r, n))
	y := make([]float32, rows*n)
	mean, rstd := make([]float32, rows), make([]float32, rows)
	LayerNorm(x, g, b, y, mean, rstd, rows, n, 1e-5)
	dx, dg, db := make([]float32, rows*n), make([]float32, n), make([]float32, n)
	tkSameBits(t, "LayerNorm", func() []float32 { LayerNorm(x, g, b, y, mean, rstd, rows, n, 1e-5); return y })
	tkSameBits(t, "LayerNormBackward dx", func() []float32 {
		LayerNormBackward(x, g, mean, rstd, dy, dx, dg, db, rows, n)
		return dx
	})
	tkSameBits(t, "LayerNormBackward dgamma", func() []float32 {
		LayerNormBackward(x, g, mean, rstd, dy, dx, dg, db, rows, n)
		return append(append([]float32(nil), dg...), db...)
	})
	tkSameBits(t, "RMSNormBackward dgamma", func() []float32 {
		RMSNormBackward(x, g, rstd, dy, dx, dg, rows, n)
		return append(append([]float32(nil), dg...), dx...)
	})
}

func BenchmarkLayerNorm(b *testing.B) {
	const rows, n = 4096, 1024
	r := tkRand(23)
	x := tkTo32(tkNormals(r, rows*n))
	g, be := tkTo32(tkNormals(r, n)), tkTo32(tkNormals(r, n))
	y := make([]float32, len(x))
	mean, rstd := make([]float32, rows), make([]float32, rows)
	b.SetBytes(int64(8 * len(x)))
	for b.Loop() {
		LayerNorm(x, g, be, y, mean, rstd, rows, n, 1e-5)
	}
}

func BenchmarkLayerNormBackward(b *testing.B) {
	const rows, n = 4096, 1024
	r := tkRand(24)
	x := tkTo32(tkNormals(r, rows*n))
	dy := tkTo32(tkNormals(r, rows*n))
	g, be := tkTo32(tkNormals(r, n)), tkTo32(tkNormals(r, n))
	y := make([]float32, len(x))
	mean, rstd := make([]float32, rows), make([]float32, rows)
	LayerNorm(x, g, be, y, mean, rstd, rows, n, 1e-5)
	dx, dg, db := make([]float32, len(x)), make([]float32, n), make([]float32, n)
	b.SetBytes(int64(12 * len(x)))
	for b.Loop() {
		LayerNormBackward(x, g, mean, rstd, dy, dx, dg, db, rows, n)
	}
}
