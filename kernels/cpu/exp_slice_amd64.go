//go:build amd64 && !purego

package cpu

// Implemented in exp_slice_amd64.s: n float32 elements (a multiple of 4) with AVX2.

//go:noescape
func expShiftAVX2(dst, x *float32, n int, m float64, k *float64)

// expShiftForceGo makes expShift32 compute every element in Go (tests compare the two).
var expShiftForceGo bool

// expShiftVec computes the longest prefix of dst that is a multiple of 4 elements with the
// assembly and returns its length (0 without AVX2).
func expShiftVec(dst, x []float32, m float64) int {
	n := len(dst) &^ 3
	if n == 0 || !gemmHasAVX2FMA || expShiftForceGo {
		return 0
	}
	expShiftAVX2(&dst[0], &x[0], n, m, &expShiftK[0])
	return n
}
