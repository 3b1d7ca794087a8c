package cpu

import "math"

// Vectorised tanh-GELU for results of single (or lower) precision.
//
// GPT-2's MLP spends a third of a CPU training step in the tanh approximation of GELU and its
// gradient when each element pays a scalar exp with branches (σ's sign test, exp's range
// checks): about 40 ns per element. GeluTanhSlice and GeluTanhGradSlice compute the same
// functions branch-free in float64, four elements per AVX2 instruction:
//
//	m = clamp(−2√(2/π)·x·(1 + 0.044715·x²), −700, 700)   (= −2u)
//	t = e^m, by m = k·ln2 + r (|r| ≤ ln2/2), e^r from its Taylor polynomial of degree 10
//	    (truncation below 3e-13 relative) and 2^k added to the exponent bits
//	gelu(x)  = x / (1 + t)                                 (= x·σ(2u))
//	gelu'(x) = s + x·s·(1 − s)·2√(2/π)·(1 + 3·0.044715·x²),  s = 1/(1 + t)
//
// Each value is within 1e-12 relative of the float64 formula (GeluTanh, GeluTanhGrad), so
// once rounded to float32 it is the correctly rounded result but for inputs within 1e-12 of
// a rounding boundary. The clamp keeps t finite: beyond it either t < 1e-304, so 1 + t = 1
// as it would be unclamped, or x/(1 + t) is below 1e-265 where the exact value is smaller
// still: both round to float32's zero. (At x = −∞ the result is −∞ where the formula's
// x·σ(2u) is NaN.) The assembly and geluTanhScalar perform
// the same IEEE operations in the same order (no fused multiply-adds: each product is
// converted explicitly, which forbids Go from fusing it), so the two are bit-identical and a
// slice's tail, computed in Go, matches its body.

// geluTanhK holds the kernels' constants in the order the assembly reads them (8 bytes each).
var geluTanhK = [...]float64{
	0:  geluTanhA,                  // 0.044715
	1:  1,                          //
	2:  -2 * geluTanhC,             // −2√(2/π)
	3:  700,                        // clamp above
	4:  -700,                       // clamp below
	5:  math.Log2E,                 //
	6:  exp32Round,                 // 1.5·2^52: adding and subtracting it rounds to an integer
	7:  6.93147180369123816490e-01, // ln2, high part: k·ln2hi is exact for |k| < 2^20
	8:  1.90821492927058770002e-10, // ln2, low part
	9:  1.0 / 3628800,              // 1/10!
	10: 1.0 / 362880,               // 1/9!
	11: 1.0 / 40320,                // 1/8!
	12: 1.0 / 5040,                 // 1/7!
	13: 1.0 / 720,                  // 1/6!
	14: 1.0 / 120,                  // 1/5!
	15: 1.0 / 24,                   // 1/4!
	16: 1.0 / 6,                    // 1/3!
	17: 0.5,                        // 1/2!
	18: 3 * geluTanhA,              // 3·0.044715
	19: 2 * geluTanhC,              // 2√(2/π)
}

// geluTanhExp returns x, x² and t = e^m of the formulas above for one element.
func geluTanhExp(x float64) (x2, t float64) {
	c := &geluTanhK
	x2 = float64(x * x)
	w := float64(float64(float64(c[0]*x2)+c[1]) * x)
	m := float64(c[2] * w)
	if !(m < c[3]) { // VMINPD's order: a NaN m becomes the bound (x is NaN, so is the result)
		m = c[3]
	}
	if !(m > c[4]) {
		m = c[4]
	}
	y := float64(m*c[5]) + c[6]
	kf := y - c[6]
	r := float64(m - float64(kf*c[7]))
	r = float64(r - float64(kf*c[8]))
	p := c[9]
	for i := 10; i <= 17; i++ {
		p = float64(p*r) + c[i]
	}
	p = float64(p*r) + c[1]
	p = float64(p*r) + c[1]
	ki := int64(math.Float64bits(y)) - int64(math.Float64bits(c[6]))
	t = math.Float64frombits(uint64(int64(math.Float64bits(p)) + ki<<52))
	return x2, t
}

// geluTanhScalar and geluTanhGradScalar are one element of GeluTanhSlice and
// GeluTanhGradSlice, operation for operation as the assembly computes it.
func geluTanhScalar(x float64) float64 {
	_, t := geluTanhExp(x)
	return x / (t + geluTanhK[1])
}

func geluTanhGradScalar(x, dy float64) float64 {
	c := &geluTanhK
	x2, t := geluTanhExp(x)
	s := c[1] / (t + c[1])
	a := float64(float64(x*s) * float64(c[1]-s))
	d := float64(float64(float64(c[18]*x2)+c[1]) * c[19])
	g := s + float64(a*d)
	return dy * g
}

// GeluTanhSlice sets dst[i] to the tanh-GELU of x[i] for results of float32 or lower
// precision (see above). It panics if the lengths differ.
func GeluTanhSlice(dst, x []float64) {
	if len(x) != len(dst) {
		panic("cpu.GeluTanhSlice: length mismatch")
	}
	n := geluTanhVec(dst, x)
	for i := n; i < len(dst); i++ {
		dst[i] = geluTanhScalar(x[i])
	}
}

// GeluTanhGradSlice sets dst[i] to dy[i]·gelu′(x[i]) for the tanh-GELU, for results of
// float32 or lower precision. It panics if the lengths differ.
func GeluTanhGradSlice(dst, x, dy []float64) {
	if len(x) != len(dst) || len(dy) != len(dst) {
		panic("cpu.GeluTanhGradSlice: length mismatch")
	}
	n := geluTanhGradVec(dst, x, dy)
	for i := n; i < len(dst); i++ {
		dst[i] = geluTanhGradScalar(x[i], dy[i])
	}
}
