//go:build amd64 && !purego

#include "textflag.h"

// Vector conversions between float32 and the 16-bit floats, 8 elements a step; n is a
// positive multiple of 8. They give the bits of the scalar F32ToF16, F16ToF32, F32ToBF16
// and BF16ToF32 (TestCastVectorMatchesScalar).

// ARGS loads the arguments every conversion takes; NEXT advances by 8 elements of srcSize
// and dstSize bytes and loops while any remain.
#define ARGS \
	MOVQ dst+0(FP), DI \
	MOVQ src+8(FP), SI \
	MOVQ n+16(FP), CX

#define NEXT(srcSize, dstSize, loop) \
	ADDQ $(8*srcSize), SI \
	ADDQ $(8*dstSize), DI \
	SUBQ $8, CX \
	JNZ loop \
	VZEROUPPER \
	RET

// func castF32ToF16F16C(dst *uint16, src *float32, n int)
// VCVTPS2PH with rounding control 0: round to nearest even, independent of MXCSR.
TEXT ·castF32ToF16F16C(SB), NOSPLIT, $0-24
	ARGS
f2h_loop:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU X1, (DI)
	NEXT(4, 2, f2h_loop)

// func castF16ToF32F16C(dst *float32, src *uint16, n int)
TEXT ·castF16ToF32F16C(SB), NOSPLIT, $0-24
	ARGS
h2f_loop:
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	NEXT(2, 4, h2f_loop)

// BF16_CONSTS loads the bfloat16 rounding's constants into Y8–Y12, and BF16_ROUND rounds the
// 8 float32 in Y0 to the 8 bfloat16 in X3 (clobbering Y1–Y6).
#define BF16_CONSTS \
	MOVL $1, AX \
	VMOVD AX, X8 \
	VPBROADCASTD X8, Y8 \
	MOVL $0x7fff, AX \
	VMOVD AX, X9 \
	VPBROADCASTD X9, Y9 \
	MOVL $0x7fffffff, AX \
	VMOVD AX, X10 \
	VPBROADCASTD X10, Y10 \
	MOVL $0x7f800000, AX \
	VMOVD AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL $0x40, AX \
	VMOVD AX, X12 \
	VPBROADCASTD X12, Y12

#define BF16_ROUND \
	VPSRLD $16, Y0, Y1 \
	VPAND Y8, Y1, Y2 \
	VPADDD Y9, Y0, Y3 \
	VPADDD Y2, Y3, Y3 \
	VPSRLD $16, Y3, Y3 \
	VPAND Y10, Y0, Y4 \
	VPCMPGTD Y11, Y4, Y4 \
	VPOR Y12, Y1, Y5 \
	VPBLENDVB Y4, Y5, Y3, Y3 \
	VEXTRACTI128 $1, Y3, X6 \
	VPACKUSDW X6, X3, X3

// func castF32ToBF16AVX2(dst *uint16, src *float32, n int)
// Round to nearest even on the top 16 bits (u + 0x7fff + bit 16 of u, then the top half);
// a NaN keeps its top half with the quiet bit set.
TEXT ·castF32ToBF16AVX2(SB), NOSPLIT, $0-24
	ARGS
	BF16_CONSTS
f2b_loop:
	VMOVDQU (SI), Y0
	// u + 0x7fff + bit 16 of u, then the top half; a NaN (|u| > infinity) gets the quiet bit.
	BF16_ROUND
	VMOVDQU X3, (DI)
	NEXT(4, 2, f2b_loop)

// func castBF16ToF32AVX2(dst *float32, src *uint16, n int)
TEXT ·castBF16ToF32AVX2(SB), NOSPLIT, $0-24
	ARGS
b2f_loop:
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVDQU Y0, (DI)
	NEXT(2, 4, b2f_loop)

// The float64 forms round to float32 first (VCVTPD2PS under the default MXCSR rounds to
// nearest even, as Go's float32(x) does) and then to the 16-bit format: the runtime's
// elementwise stores, whose float64 values are float32 results.

// func castF64ToF16F16C(dst *uint16, src *float64, n int)
TEXT ·castF64ToF16F16C(SB), NOSPLIT, $0-24
	ARGS
d2h_loop:
	VCVTPD2PSY (SI), X0
	VCVTPD2PSY 32(SI), X1
	VINSERTF128 $1, X1, Y0, Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU X1, (DI)
	NEXT(8, 2, d2h_loop)

// func castF16ToF64F16C(dst *float64, src *uint16, n int)
TEXT ·castF16ToF64F16C(SB), NOSPLIT, $0-24
	ARGS
h2d_loop:
	VCVTPH2PS (SI), Y0
	VCVTPS2PD X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y3
	VMOVUPD Y1, (DI)
	VMOVUPD Y3, 32(DI)
	NEXT(2, 8, h2d_loop)

// func castF64ToBF16AVX2(dst *uint16, src *float64, n int)
TEXT ·castF64ToBF16AVX2(SB), NOSPLIT, $0-24
	ARGS
	BF16_CONSTS
d2b_loop:
	VCVTPD2PSY (SI), X0
	VCVTPD2PSY 32(SI), X1
	VINSERTF128 $1, X1, Y0, Y0
	BF16_ROUND
	VMOVDQU X3, (DI)
	NEXT(8, 2, d2b_loop)
