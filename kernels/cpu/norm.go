package cpu

import (
	"fmt"
	"math"
)

// Layer normalisation and RMS normalisation over the last n elements of each of rows rows.
//
// The forward kernels optionally save per-row statistics (mean and rstd = 1/√(var+eps)) for the
// backward kernels. The parameter gradients dgamma/dbeta sum over rows; to stay bitwise
// reproducible for any GOMAXPROCS the rows are cut into fixed chunks of layerNormRowChunk rows, each
// chunk is summed row by row in order, and the chunk partials are added in chunk order. Only the
// chunk grid, never the goroutine count, decides the order.

const (
	layerNormGrain    = 16384 // elements per goroutine for the row-parallel passes
	layerNormRowChunk = 64    // rows per partial sum of dgamma/dbeta (part of the determinism contract)
	layerNormColBlock = 512   // columns per unit of the dgamma/dbeta pass
)

func checkLayerNorm(name string, rows, n int, full []int, perRow []int, perCol []int) {
	bad := rows < 0 || n < 0
	for _, l := range full {
		bad = bad || l != rows*n
	}
	for _, l := range perRow {
		bad = bad || (l != 0 && l != rows)
	}
	for _, l := range perCol {
		bad = bad || (l != 0 && l != n)
	}
	if bad {
		panic(fmt.Sprintf("cpu.%s: slice lengths do not match rows=%d n=%d (full %v, per-row %v, per-column %v)",
			name, rows, n, full, perRow, perCol))
	}
}

// nilIfEmpty treats an empty optional slice as absent.
func nilIfEmpty[T Float](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func rsqrtT[T Float](v T) T { return T(1 / math.Sqrt(float64(v))) }

// LayerNorm sets y = (x − mean)·rstd·gamma + beta for each row of n elements, where mean and
// var are the row's mean and (biased) variance and rstd = 1/√(var + eps). gamma and beta (length
// n) may be nil (scale 1, shift 0); mean and rstd (length rows) may be nil, otherwise they
// receive the statistics for LayerNormBackward. The variance is computed in two passes
// (Σ (x−mean)²), which stays accurate when |mean| ≫ std. y may alias x.
func LayerNorm[T Float](x, gamma, beta, y, mean, rstd []T, rows, n int, eps T) {
	checkLayerNorm("LayerNorm", rows, n, []int{len(x), len(y)}, []int{len(mean), len(rstd)}, []int{len(gamma), len(beta)})
	gamma, beta, mean, rstd = nilIfEmpty(gamma), nilIfEmpty(beta), nilIfEmpty(mean), nilIfEmpty(rstd)
	if rows == 0 || n == 0 {
		return
	}
	nn := T(n)
	Parallel(rows, max(1, layerNormGrain/n), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*n:(r+1)*n], y[r*n:(r+1)*n]
			mu := sumRow(xr) / nn
			var v T
			for lo := 0; lo < n; lo += reduceRowBlock {
				blk := xr[lo:min(lo+reduceRowBlock, n)]
				var s0, s1, s2, s3 T
				i := 0
				for ; i+4 <= len(blk); i += 4 {
					b := blk[i : i+4 : i+4]
					d0, d1, d2, d3 := b[0]-mu, b[1]-mu, b[2]-mu, b[3]-mu
					s0 += d0 * d0
					s1 += d1 * d1
					s2 += d2 * d2
					s3 += d3 * d3
				}
				for k := i; k < len(blk); k++ {
					d := blk[k] - mu
					switch k - i {
					case 0:
						s0 += d * d
					case 1:
						s1 += d * d
					case 2:
						s2 += d * d
					}
				}
				v += (s0 + s1) + (s2 + s3)
			}
			rs := rsqrtT(v/nn + eps)
			if mean != nil {
				mean[r] = mu
			}
			if rstd != nil {
				rstd[r] = rs
			}
			switch {
			case gamma != nil && beta != nil:
				g, b := gamma[:n], beta[:n]
				for i, xv := range xr {
					yr[i] = (xv-mu)*rs*g[i] + b[i]
				}
			case gamma != nil:
				g := gamma[:n]
				for i, xv := range xr {
					yr[i] = (xv - mu) * rs * g[i]
				}
			case beta != nil:
				b := beta[:n]
				for i, xv := range xr {
					yr[i] = (xv-mu)*rs + b[i]
				}
			default:
				for i, xv := range xr {
					yr[i] = (xv - mu) * rs
				}
			}
		}
	})
}

// LayerNormBackward computes the gradients of LayerNorm from the saved mean and rstd:
//
//	x̂ = (x − mean)·rstd,  g = dy·gamma,
//	dx = rstd·(g − mean(g) − x̂·mean(g·x̂)),  dgamma = Σ_rows dy·x̂,  dbeta = Σ_rows dy.
//
// gamma may be nil (scale 1). dx, dgamma and dbeta may each be nil to skip them; they are
// overwritten, not accumulated. dx may alias dy.
func LayerNormBackward[T Float](x, gamma, mean, rstd, dy, dx, dgamma, dbeta []T, rows, n int) {
	checkLayerNorm("LayerNormBackward", rows, n, []int{len(x), len(dy)}, []int{len(mean), len(rstd)}, []int{len(gamma), len(dgamma), len(dbeta)})
	gamma, dgamma, dbeta, dx = nilIfEmpty(gamma), nilIfEmpty(dgamma), nilIfEmpty(dbeta), nilIfEmpty(dx)
	if (dx != nil && len(dx) != rows*n) || len(mean) != rows || len(rstd) != rows {
		panic(fmt.Sprintf("cpu.LayerNormBackward: need mean, rstd of length %d and dx of length %d", rows, rows*n))
	}
	if n == 0 {
		return
	}
	// Parameter gradients first: dx may alias dy.
	layerNormParamGrads(x, mean, rstd, dy, dgamma, dbeta, rows, n)
	if dx == nil {
		return
	}
	nn := T(n)
	Parallel(rows, max(1, layerNormGrain/n), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x[r*n:(r+1)*n], dy[r*n:(r+1)*n], dx[r*n:(r+1)*n]
			mu, rs := mean[r], rstd[r]
			// Σ g and Σ g·x̂ in the blocked order of sumRow, with 4 accumulators.
			var sg, sgx T
			for lo := 0; lo < n; lo += reduceRowBlock {
				hi := min(lo+reduceRowBlock, n)
				var a0, a1, b0, b1 T
				i := lo
				for ; i+2 <= hi; i += 2 {
					g0, g1 := dyr[i], dyr[i+1]
					if gamma != nil {
						g0 *= gamma[i]
						g1 *= gamma[i+1]
					}
					a0 += g0
					a1 += g1
					b0 += g0 * ((xr[i] - mu) * rs)
					b1 += g1 * ((xr[i+1] - mu) * rs)
				}
				if i < hi {
					g0 := dyr[i]
					if gamma != nil {
						g0 *= gamma[i]
					}
					a0 += g0
					b0 += g0 * ((xr[i] - mu) * rs)
				}
				sg += a0 + a1
				sgx += b0 + b1
			}
			mg, mgx := sg/nn, sgx/nn
			if gamma != nil {
				g := gamma[:n]
				for i, xv := range xr {
					dxr[i] = rs * (dyr[i]*g[i] - mg - (xv-mu)*rs*mgx)
				}
			} else {
				for i, xv := range xr {
					dxr[i] = rs * (dyr[i] - mg - (xv-mu)*rs*mgx)
				}
			}
		}
	})
}

// layerNormParamGrads computes dgamma = Σ_rows dy·x̂ and dbeta = Σ_rows dy (either may be nil), with
// x̂ = (x − mean)·rstd (mean nil means 0, as RMSNorm), in the fixed chunk order.
func layerNormParamGrads[T Float](x, mean, rstd, dy, dgamma, dbeta []T, rows, n int) {
	if dgamma == nil && dbeta == nil {
		return
	}
	if rows == 0 {
		clear(dgamma)
		clear(dbeta)
		return
	}
	nchunk := (rows + layerNormRowChunk - 1) / layerNormRowChunk
	ncb := (n + layerNormColBlock - 1) / layerNormColBlock
	var pg, pb []T // chunk partials, nchunk×n each (chunk 0 writes straight into the outputs)
	if nchunk > 1 {
		if dgamma != nil {
			pg = make([]T, (nchunk-1)*n)
		}
		if dbeta != nil {
			pb = make([]T, (nchunk-1)*n)
		}
	}
	dst := func(buf, out []T, c int) []T {
		if out == nil {
			return nil
		}
		if c == 0 {
			return out
		}
		return buf[(c-1)*n : c*n]
	}
	Parallel(nchunk*ncb, max(1, layerNormGrain/(layerNormRowChunk*min(n, layerNormColBlock))), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			c, cb := u/ncb, u%ncb
			j0, j1 := cb*layerNormColBlock, min((cb+1)*layerNormColBlock, n)
			g, b := dst(pg, dgamma, c), dst(pb, dbeta, c)
			r0, r1 := c*layerNormRowChunk, min((c+1)*layerNormRowChunk, rows)
			for r := r0; r < r1; r++ {
				xr, dyr := x[r*n+j0:r*n+j1], dy[r*n+j0:r*n+j1]
				var mu T
				if mean != nil {
					mu = mean[r]
				}
				rs := rstd[r]
				if g != nil {
					gs := g[j0:j1]
					if r == r0 {
						for i, xv := range xr {
							gs[i] = dyr[i] * ((xv - mu) * rs)
						}
					} else {
						for i, xv := range xr {
							gs[i] += dyr[i] * ((xv - mu) * rs)
						}
					}
				}
				if b != nil {
					bs := b[j0:j1]
					if r == r0 {
						copy(bs, dyr)
					} else {
						for i, v := range dyr {
							bs[i] += v
						}
					}
				}
			}
		}
	})
	if nchunk == 1 {
		return
	}
	// Fold the chunk partials in chunk order, parallel over columns.
	Parallel(n, max(1, layerNormGrain/nchunk), func(lo, hi int) {
		for c := 1; c < nchunk; c++ {
			if dgamma != nil {
				p := pg[(c-1)*n+lo : (c-1)*n+hi]
				d := dgamma[lo:hi]
				for i, v := range p {
					d[i] += v
				}
			}
			if dbeta != nil {
				p := pb[(c-1)*n+lo : (c-1)*n+hi]
				d := dbeta[lo:hi]
				for i, v := range p {
					d[i] += v
				}
			}
		}
	})
}

// RMSNorm sets y = x·rstd·gamma with rstd = 1/√(mean(x²) + eps) per row of n elements. gamma may
// be nil (scale 1); rstd (length rows) may be nil, otherwise it receives the statistic for
// RMSNormBackward. y may alias x.
func RMSNorm[T Float](x, gamma, y, rstd []T, rows, n int, eps T) {
	checkLayerNorm("RMSNorm", rows, n, []int{len(x), len(y)}, []int{len(rstd)}, []int{len(gamma)})
	gamma, rstd = nilIfEmpty(gamma), nilIfEmpty(rstd)
	if rows == 0 || n == 0 {
		return
	}
	nn := T(n)
	Parallel(rows, max(1, layerNormGrain/n), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*n:(r+1)*n], y[r*n:(r+1)*n]
			rs := rsqrtT(sumSqRow(xr)/nn + eps)
			if rstd != nil {
				rstd[r] = rs
			}
			if gamma != nil {
				g := gamma[:n]
				for i, v := range xr {
					yr[i] = v * rs * g[i]
				}
			} else {
				for i, v := range xr {
					yr[i] = v * rs
				}
			}
		}
	})
}

// RMSNormBackward computes the gradients of RMSNorm from the saved rstd:
//
//	x̂ = x·rstd,  g = dy·gamma,  dx = rstd·(g − x̂·mean(g·x̂)),  dgamma = Σ_rows dy·x̂.
//
// gamma may be nil; dx and dgamma may be nil to skip them (overwritten, not accumulated). dx may
// alias dy.
func RMSNormBackward[T Float](x, gamma, rstd, dy, dx, dgamma []T, rows, n int) {
	checkLayerNorm("RMSNormBackward", rows, n, []int{len(x), len(dy)}, []int{len(rstd)}, []int{len(gamma), len(dgamma)})
	gamma, dgamma, dx = nilIfEmpty(gamma), nilIfEmpty(dgamma), nilIfEmpty(dx)
	if (dx != nil && len(dx) != rows*n) || len(rstd) != rows {
		panic(fmt.Sprintf("cpu.RMSNormBackward: need rstd of length %d and dx of length %d", rows, rows*n))
	}
	if n == 0 {
		return
	}
	layerNormParamGrads(x, nil, rstd, dy, dgamma, nil, rows, n)
	if dx == nil {
		return
	}
	nn := T(n)
	Parallel(rows, max(1, layerNormGrain/n), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x[r*n:(r+1)*n], dy[r*n:(r+1)*n], dx[r*n:(r+1)*n]
			rs := rstd[r]
			var sgx T
			if gamma != nil {
				for lo := 0; lo < n; lo += reduceRowBlock {
					hi := min(lo+reduceRowBlock, n)
					var a0, a1 T
					i := lo
					for ; i+2 <= hi; i += 2 {
						a0 += dyr[i] * gamma[i] * xr[i]
						a1 += dyr[i+1] * gamma[i+1] * xr[i+1]
					}
					if i < hi {
						a0 += dyr[i] * gamma[i] * xr[i]
					}
					sgx += a0 + a1
				}
			} else {
				sgx = dotRow(dyr, xr)
			}
			c := sgx * rs * rs / nn // mean(g·x̂)·rstd = Σ g·x·rstd² / n
			if gamma != nil {
				g := gamma[:n]
				for i, xv := range xr {
					dxr[i] = rs * (dyr[i]*g[i] - xv*c)
				}
			} else {
				for i, xv := range xr {
					dxr[i] = rs * (dyr[i] - xv*c)
				}
			}
		}
	})
}
