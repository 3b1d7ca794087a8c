//go:build amd64 && !purego

package cpu

// Implemented in cast_amd64.s: n elements, a positive multiple of 8.

//go:noescape
func castF32ToF16F16C(dst *uint16, src *float32, n int)

//go:noescape
func castF16ToF32F16C(dst *float32, src *uint16, n int)

//go:noescape
func castF32ToBF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func castBF16ToF32AVX2(dst *float32, src *uint16, n int)

// castHasF16C: the CPU converts between float32 and IEEE half (CPUID.1:ECX.F16C[bit 29]);
// every AVX2 CPU has it, but a hypervisor may mask it.
var castHasF16C = func() bool {
	_, _, ecx, _ := gemmCPUID(1, 0)
	return gemmHasAVX2FMA && ecx&(1<<29) != 0
}()

// castForceGo makes the slice conversions convert every element in Go (tests compare).
var castForceGo bool

// castNarrowVec converts the longest prefix of src that is a multiple of 8 elements with the
// assembly, if the CPU has it, and returns its length; half: IEEE half, else bfloat16.
func castNarrowVec(dst []uint16, src []float32, half bool) int {
	n := len(src) &^ 7
	if n == 0 || castForceGo || !gemmHasAVX2FMA || half && !castHasF16C {
		return 0
	}
	_ = dst[n-1]
	if half {
		castF32ToF16F16C(&dst[0], &src[0], n)
	} else {
		castF32ToBF16AVX2(&dst[0], &src[0], n)
	}
	return n
}

// castWidenVec is castNarrowVec's inverse.
func castWidenVec(dst []float32, src []uint16, half bool) int {
	n := len(src) &^ 7
	if n == 0 || castForceGo || !gemmHasAVX2FMA || half && !castHasF16C {
		return 0
	}
	_ = dst[n-1]
	if half {
		castF16ToF32F16C(&dst[0], &src[0], n)
	} else {
		castBF16ToF32AVX2(&dst[0], &src[0], n)
	}
	return n
}

//go:noescape
func castF64ToF16F16C(dst *uint16, src *float64, n int)

//go:noescape
func castF16ToF64F16C(dst *float64, src *uint16, n int)

//go:noescape
func castF64ToBF16AVX2(dst *uint16, src *float64, n int)

// castNarrowVec64 is castNarrowVec for float64 values rounded to float32 first.
func castNarrowVec64(dst []uint16, src []float64, half bool) int {
	n := len(src) &^ 7
	if n == 0 || castForceGo || !gemmHasAVX2FMA || half && !castHasF16C {
		return 0
	}
	_ = dst[n-1]
	if half {
		castF64ToF16F16C(&dst[0], &src[0], n)
	} else {
		castF64ToBF16AVX2(&dst[0], &src[0], n)
	}
	return n
}

// castWidenF16Vec64 widens IEEE halves to float64 (the longest prefix of a multiple of 8).
func castWidenF16Vec64(dst []float64, src []uint16) int {
	n := len(src) &^ 7
	if n == 0 || castForceGo || !castHasF16C {
		return 0
	}
	_ = dst[n-1]
	castF16ToF64F16C(&dst[0], &src[0], n)
	return n
}
