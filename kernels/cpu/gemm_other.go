//go:build !amd64 || purego

package cpu

// Without assembly kernels every GEMM uses the pure-Go micro-kernel.
var gemmImplS, gemmImplD *gemmImpl

// gemmAvailable lists the micro-kernels this machine can run for the element size.
func gemmAvailable(size uintptr) []*gemmImpl {
	if size == 4 {
		return []*gemmImpl{&gemmGenericS}
	}
	return []*gemmImpl{&gemmGenericD}
}

func gemmFastCopy[T Float](dst []T, dstLd int, src []T, srcLd, rows, w int) bool { return false }

func gemmFastPackA[T Float](d, src []T, lda, kb, mr int) int { return 0 }

func gemmFastPackBT[T Float](d, src []T, ldb, kb, nr int) int { return 0 }

func convBcastOutFast(ct []float32, nPad, p, j0, j1 int, bias, y []float32) int { return 0 }

// No SIMD kernels to choose between here.
const gemmHasAVX2FMA, gemmHasAVX512 = false, false
