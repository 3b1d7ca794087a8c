//go:build amd64 && !purego

package cpu

// Implemented in gelu_tanh_amd64.s: n elements (a multiple of 4) with AVX2.

//go:noescape
func geluTanhAVX2(dst, x *float64, n int, k *float64)

//go:noescape
func geluTanhGradAVX2(dst, x, dy *float64, n int, k *float64)

// geluTanhForceGo makes the slice kernels compute every element in Go (tests compare the two).
var geluTanhForceGo bool

// geluTanhVec computes the longest prefix of dst that is a multiple of 4 elements with the
// assembly and returns its length (0 without AVX2).
func geluTanhVec(dst, x []float64) int {
	n := len(dst) &^ 3
	if n == 0 || !gemmHasAVX2FMA || geluTanhForceGo {
		return 0
	}
	geluTanhAVX2(&dst[0], &x[0], n, &geluTanhK[0])
	return n
}

func geluTanhGradVec(dst, x, dy []float64) int {
	n := len(dst) &^ 3
	if n == 0 || !gemmHasAVX2FMA || geluTanhForceGo {
		return 0
	}
	geluTanhGradAVX2(&dst[0], &x[0], &dy[0], n, &geluTanhK[0])
	return n
}
