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

//go:noescape
func castF64ToF16F16C(dst *uint16, src *float64, n int)

//go:noescape
func castF16ToF64F16C(dst *float64, src *uint16, n int)

//go:noescape
func castF64ToBF16AVX2(dst *uint16, src *float64, n int)

// castHasF16C: the CPU converts between float32 and IEEE half (CPUID.1:ECX.F16C[bit 29]);
// every AVX2 CPU has it, but a hypervisor may mask it.
var castHasF16C = func() bool {
	_, _, ecx, _ := gemmCPUID(1, 0)
	return gemmHasAVX2FMA && ecx&(1<<29) != 0
}()

// castForceGo makes the slice conversions convert every element in Go (tests compare).
var castForceGo bool

// castVec converts the leading elements of src into dst with the assembly, f16 for IEEE
// half (half) or bf16 for bfloat16, and returns how many: a multiple of 8, or 0 where the
// CPU lacks AVX2 (or F16C, for IEEE half) or tests force Go.
func castVec[D, S any](dst []D, src []S, half bool, f16, bf16 func(*D, *S, int)) int {
	if castForceGo || !gemmHasAVX2FMA || half && !castHasF16C || len(src) < 8 {
		return 0
	}
	n := len(src) &^ 7
	if len(dst) < n {
		panic("cpu: conversion destination shorter than its source")
	}
	if half {
		f16(&dst[0], &src[0], n)
	} else {
		bf16(&dst[0], &src[0], n)
	}
	return n
}

func castNarrowVec(dst []uint16, src []float32, half bool) int {
	return castVec(dst, src, half, castF32ToF16F16C, castF32ToBF16AVX2)
}

func castWidenVec(dst []float32, src []uint16, half bool) int {
	return castVec(dst, src, half, castF16ToF32F16C, castBF16ToF32AVX2)
}

// castNarrowVec64 is castNarrowVec for float64 values rounded to float32 first.
func castNarrowVec64(dst []uint16, src []float64, half bool) int {
	return castVec(dst, src, half, castF64ToF16F16C, castF64ToBF16AVX2)
}

// castWidenF16Vec64 widens IEEE halves to float64.
func castWidenF16Vec64(dst []float64, src []uint16) int {
	return castVec(dst, src, true, castF16ToF64F16C, nil)
}
