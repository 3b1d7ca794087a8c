package cpu

import (
	"math"
	"unsafe"
)

// Vectorised e^(x − m) over float32 rows: the exponentials of softmax, cross-entropy, the
// log-sum-exp and fused attention's tiles. Exp's table-driven scalar exp32 costs 5–10 ns an
// element with its range branches; ExpShift computes the same function four elements per AVX2
// instruction, branch-free, in float64:
//
//	d = clamp(x − m, −700, 700)   (x − m in float64: exact for float32 operands but at the
//	                               extremes of the exponent range)
//	e^d = 2^k · e^r,  d = k·ln2 + r (|r| ≤ ln2/2),  e^r by its Taylor polynomial of degree 8
//	      (truncation below 3e-10 relative), 2^k added to the exponent bits
//
// rounded once to float32: within one float32 ulp of e^(x−m), correctly rounded but for values
// within 3e-10 of a rounding boundary, subnormal results included. A NaN difference gives NaN;
// the clamp changes nothing that is not already 0 or +∞ in float32. expShiftScalar performs
// the same IEEE operations as the assembly, in the same order, so a row's tail (done in Go)
// and machines without AVX2 get the same bits as the vector body.

// expShiftK holds the constants in the order the assembly reads them (8 bytes each).
var expShiftK = [...]float64{
	0:  1,
	1:  700,
	2:  -700,
	3:  math.Log2E,
	4:  exp32Round,                 // 1.5·2^52
	5:  6.93147180369123816490e-01, // ln2, high part (k·ln2hi exact for |k| < 2^20)
	6:  1.90821492927058770002e-10, // ln2, low part
	7:  1.0 / 40320,                // 1/8!
	8:  1.0 / 5040,
	9:  1.0 / 720,
	10: 1.0 / 120,
	11: 1.0 / 24,
	12: 1.0 / 6,
	13: 0.5,
}

// expShiftScalar is one element of expShift32.
func expShiftScalar(x float32, m float64) float32 {
	c := &expShiftK
	d := float64(x) - m
	if d != d {
		return float32(math.Float64frombits(^uint64(0))) // the assembly's NaN: all ones
	}
	if !(d < c[1]) {
		d = c[1]
	}
	if !(d > c[2]) {
		d = c[2]
	}
	y := float64(d*c[3]) + c[4]
	kf := y - c[4]
	r := float64(d - float64(kf*c[5]))
	r = float64(r - float64(kf*c[6]))
	p := c[7]
	for i := 8; i <= 13; i++ {
		p = float64(p*r) + c[i]
	}
	p = float64(p*r) + c[0]
	p = float64(p*r) + c[0]
	ki := int64(math.Float64bits(y)) - int64(math.Float64bits(c[4]))
	return float32(math.Float64frombits(uint64(int64(math.Float64bits(p)) + ki<<52)))
}

// expShift32 sets dst[i] = e^(x[i] − m) for float32 rows (see above); dst may be x.
func expShift32(dst, x []float32, m float32) {
	x = x[:len(dst)]
	n := expShiftVec(dst, x, float64(m))
	for i := n; i < len(dst); i++ {
		dst[i] = expShiftScalar(x[i], float64(m))
	}
}

// ExpShift sets dst[i] = e^(x[i] − m): for float32, the vectorised kernel above; for float64,
// math.Exp of the float64 difference. dst may be x; it panics if x is shorter than dst.
func ExpShift[T Float](dst, x []T, m T) {
	x = x[:len(dst)]
	if isFloat32Type[T]() {
		expShift32(f32s(dst), f32s(x), float32(m))
		return
	}
	for i, v := range x {
		dst[i] = T(math.Exp(float64(v - m)))
	}
}

// f32s views a []T whose T is float32 as []float32.
func f32s[T Float](s []T) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}
