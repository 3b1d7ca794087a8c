package cpu

// GEMV: a GEMM of one row times a transposed B (c = alpha·a·Bᵀ + beta·c, B n × k row-major) —
// a fully connected layer at batch 1 as ONNX exports it (Gemm with transB), AlexNet's and
// VGG's classifiers. The blocked GEMM would pack all of B (hundreds of MB for those layers)
// to use one row of each 8-row register tile; here each output is a dot product streaming a
// row of B once: memory-bound, as it must be. Rows of B are split over the cores; every
// output's summation order is fixed (dot32's lanes, then the tail in order), so results do
// not depend on the thread count. They may differ in the last bits from the same row computed
// inside a larger GEMM, whose kernels sum in another order.

// gemvQuad: dot32x4 (AVX-512) is there to take four rows at a time.
var gemvQuad = gemmHasAVX512 && gemmHasAVX2FMA

// gemvMinK is the shortest k taking this path (below it a dot product is mostly its fold).
const gemvMinK = 64

// gemvT computes c[j] = alpha·Σ_p a[p]·b[j·ldb + p] + beta·c[j] for j < n (beta 0: c is not
// read), over workers goroutines.
func gemvT(n, k int, alpha float32, a, b []float32, ldb int, beta float32, c []float32, workers int) {
	a = a[:k]
	grain := max(1, (1<<16)/k)
	if workers <= 1 {
		grain = n
	}
	Parallel(n, grain, func(lo, hi int) {
		j := lo
		// Four rows at a time with AVX-512, else two: more streams from memory in flight (the
		// layer is bound by how fast one core can pull B in), each row summed as dotVec32
		// sums it, so the grouping (which moves with the thread split) changes no bits.
		for ; gemvQuad && j+4 <= hi; j += 4 {
			r0, r1, r2, r3 := b[j*ldb:j*ldb+k], b[(j+1)*ldb:(j+1)*ldb+k], b[(j+2)*ldb:(j+2)*ldb+k], b[(j+3)*ldb:(j+3)*ldb+k]
			s, i := dotVec32x4(a, r0, r1, r2, r3)
			for q, row := range [4][]float32{r0, r1, r2, r3} {
				gemvStore(j+q, dotTail(s[q], a, row, i), alpha, beta, c)
			}
		}
		for ; j+2 <= hi; j += 2 {
			r0, r1 := b[j*ldb:j*ldb+k], b[(j+1)*ldb:(j+1)*ldb+k]
			s0, s1, i := dotVec32x2(a, r0, r1)
			gemvStore(j, dotTail(s0, a, r0, i), alpha, beta, c)
			gemvStore(j+1, dotTail(s1, a, r1, i), alpha, beta, c)
		}
		for ; j < hi; j++ {
			row := b[j*ldb : j*ldb+k]
			s, i := dotVec32(a, row)
			gemvStore(j, dotTail(s, a, row, i), alpha, beta, c)
		}
	})
}

// dotTail adds a[i:]·row[i:] to s in order.
func dotTail(s float32, a, row []float32, i int) float32 {
	for ; i < len(a); i++ {
		s += a[i] * row[i]
	}
	return s
}

func gemvStore(j int, s, alpha, beta float32, c []float32) {
	v := alpha * s
	switch beta {
	case 0:
	case 1:
		v += c[j]
	default:
		v += beta * c[j]
	}
	c[j] = v
}
