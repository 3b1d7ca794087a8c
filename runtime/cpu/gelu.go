package cpu

import (
	"math"
	"sync"

	k "ppc.dev/ppc/kernels/cpu"
)

// Fast gelu and gelu_grad (approximate none) for f32 results, exactly equal to the engine's
// float64 values rounded to f32.
//
// The exact functions cost a math.Erfc (and for the gradient a math.Exp) per element, about
// 15–25 ns on random inputs. On [−4, 4], where nearly all activations lie, they are evaluated
// here from piecewise polynomial interpolants (256 pieces of degree 6, fitted at start-up from
// the exact functions) whose error on each piece is bounded at start-up: 1000 times the worst
// error measured on a dense sample of the piece, which TestGeluPolyBoundsExhaustive confirms
// over every f32 input. Ziv's rounding test then decides the f32 result: when the interval of
// values the exact result can take rounds to a single f32, that is the exact result's rounding
// too; otherwise (about one element in 10⁴–10⁵), and outside [−4, 4], the exact function is
// evaluated. So the results are bit for bit those of the float64 engine.

const (
	geluLo, geluHi = -4.0, 4.0
	geluPieces     = 256 // pieces of width 1/32
	geluDegree     = 6
	geluScale      = 2 * geluPieces / (geluHi - geluLo) // maps a piece onto t ∈ [−1, 1]
)

type geluPoly struct {
	c   [geluDegree + 1]float64 // monomial coefficients in t = (x − mid)·geluScale
	err float64                 // the error bound on the piece (relative or absolute, see below)
	mid float64
}

var (
	geluOnce sync.Once
	// geluPhi interpolates Φ(x) = erfc(−x/√2)/2; err bounds |x·P(x) − gelu(x)| / |gelu(x)|.
	geluPhi [geluPieces]geluPoly
	// geluDeriv interpolates gelu'(x) = Φ(x) + x·φ(x); err bounds |P(x) − gelu'(x)|.
	geluDeriv [geluPieces]geluPoly
)

func initGeluPolys() {
	phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	fitPieces(&geluPhi, phi, func(x, p float64) float64 {
		g := k.Gelu(x)
		if g == 0 {
			return 0
		}
		return math.Abs(x*p-g) / math.Abs(g)
	}, 1e-13)
	fitPieces(&geluDeriv, k.GeluGrad[float64], func(x, p float64) float64 {
		return math.Abs(p - k.GeluGrad(x))
	}, 1e-15)
}

// fitPieces interpolates f on every piece at the Chebyshev nodes, converts the interpolant to
// monomials in t, and sets each piece's error bound to 1000 times the worst errFn seen on a
// dense sample of f32 inputs (at least floor).
func fitPieces(polys *[geluPieces]geluPoly, f func(float64) float64, errFn func(x, p float64) float64, floor float64) {
	const n = geluDegree + 1
	w := (geluHi - geluLo) / geluPieces
	for p := range polys {
		lo := geluLo + float64(p)*w
		mid := lo + w/2
		var cheb [n]float64
		for j := 0; j < n; j++ {
			th := math.Pi * (float64(j) + 0.5) / n
			fv := f(mid + math.Cos(th)*w/2)
			for kk := 0; kk < n; kk++ {
				cheb[kk] += 2 / float64(n) * fv * math.Cos(float64(kk)*th)
			}
		}
		cheb[0] /= 2
		// T_0 = 1, T_1 = t, T_{k+1} = 2t·T_k − T_{k−1}, as monomial coefficient vectors.
		var tPrev, tCur, mono [n]float64
		tPrev[0], tCur[1] = 1, 1
		mono[0] = cheb[0]
		for i := range mono {
			mono[i] += cheb[1] * tCur[i]
		}
		for kk := 2; kk < n; kk++ {
			var tNext [n]float64
			for i := 0; i < n; i++ {
				if i > 0 {
					tNext[i] += 2 * tCur[i-1]
				}
				tNext[i] -= tPrev[i]
			}
			for i := range mono {
				mono[i] += cheb[kk] * tNext[i]
			}
			tPrev, tCur = tCur, tNext
		}
		gp := geluPoly{c: mono, mid: mid}
		worst := 0.0
		const samples = 256
		for s := 0; s <= samples; s++ {
			x := float64(float32(lo + w*float64(s)/samples))
			worst = max(worst, errFn(x, gp.eval(x)))
		}
		gp.err = max(1000*worst, floor)
		polys[p] = gp
	}
}

// geluPiece returns the piece of x ∈ [geluLo, geluHi).
func geluPiece(polys *[geluPieces]geluPoly, x float64) *geluPoly {
	return &polys[int((x-geluLo)*geluScale/2)&(geluPieces-1)]
}

// eval is Estrin's scheme for the degree-6 polynomial (a short dependency chain).
func (gp *geluPoly) eval(x float64) float64 {
	t := (x - gp.mid) * geluScale
	c := &gp.c
	t2 := t * t
	return (c[0] + c[1]*t) + t2*((c[2]+c[3]*t)+t2*((c[4]+c[5]*t)+t2*c[6]))
}

// sameF32 compares bits, so that −0 and +0 differ (an interval around 0 leaves the sign open).
func sameF32(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

// geluRounded returns float64(float32(k.Gelu(x))).
func geluRounded(x float64) float64 {
	if x >= geluLo && x < geluHi {
		gp := geluPiece(&geluPhi, x)
		v := x * gp.eval(x)
		e := gp.err * math.Abs(v)
		if lo := float32(v - e); sameF32(lo, float32(v+e)) {
			return float64(lo)
		}
	}
	return float64(float32(k.Gelu(x)))
}

// geluGradRounded returns float64(float32(dy·k.GeluGrad(x))). The engine's float64 product
// differs from dy·gelu'(x) by its own rounding, and v from dy·P(x) by another: 2⁻⁵² of |v|
// (plus the smallest normal, for results near underflow) covers both.
func geluGradRounded(x, dy float64) float64 {
	if x >= geluLo && x < geluHi {
		gp := geluPiece(&geluDeriv, x)
		v := dy * gp.eval(x)
		e := gp.err*math.Abs(dy) + 0x1p-51*math.Abs(v) + 0x1p-1022
		// e is not finite when dy is infinite or NaN: leave those to the exact path.
		if lo := float32(v - e); e <= math.MaxFloat64 && sameF32(lo, float32(v+e)) {
			return float64(lo)
		}
	}
	return float64(float32(dy * k.GeluGrad(x)))
}

// geluF32 is the engine step of gelu with an f32 result: geluRounded over the chunk.
func geluF32(dst []float64, a [][]float64) {
	geluOnce.Do(initGeluPolys)
	x := a[0][:len(dst)]
	for i, xv := range x {
		if xv >= geluLo && xv < geluHi {
			gp := geluPiece(&geluPhi, xv)
			v := xv * gp.eval(xv)
			e := gp.err * math.Abs(v)
			if lo := float32(v - e); sameF32(lo, float32(v+e)) {
				dst[i] = float64(lo)
				continue
			}
		}
		dst[i] = float64(float32(k.Gelu(xv)))
	}
}

// geluGradF32 is the engine step of gelu_grad with an f32 result.
func geluGradF32(dst []float64, a [][]float64) {
	geluOnce.Do(initGeluPolys)
	x, dy := a[0][:len(dst)], a[1][:len(dst)]
	for i, xv := range x {
		dst[i] = geluGradRounded(xv, dy[i])
	}
}
