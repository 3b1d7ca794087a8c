//go:build amd64 && !purego

#include "textflag.h"

// The tanh-GELU kernels of gelu_tanh.go, four float64 lanes per ymm register. Each step is
// the IEEE operation geluTanhExp, geluTanhScalar and geluTanhGradScalar perform, in the same
// order; k points at geluTanhK.

// GELU_EXP: Y0 = x (loaded) → Y1 = x², Y6 = t = e^m; clobbers Y2–Y5.
// Constants live in Y7–Y15 (see GELU_CONSTS).
#define GELU_CONSTS \
	VBROADCASTSD 0(R8), Y15 \
	VBROADCASTSD 8(R8), Y14 \
	VBROADCASTSD 16(R8), Y13 \
	VBROADCASTSD 24(R8), Y12 \
	VBROADCASTSD 32(R8), Y11 \
	VBROADCASTSD 40(R8), Y10 \
	VBROADCASTSD 48(R8), Y9 \
	VBROADCASTSD 56(R8), Y8 \
	VBROADCASTSD 64(R8), Y7

#define POLY_STEP(off) \
	VMULPD Y5, Y6, Y6 \
	VBROADCASTSD off(R8), Y4 \
	VADDPD Y4, Y6, Y6

#define GELU_EXP \
	VMULPD Y0, Y0, Y1 \
	VMULPD Y15, Y1, Y2 \
	VADDPD Y14, Y2, Y2 \
	VMULPD Y0, Y2, Y2 \
	VMULPD Y13, Y2, Y2 \
	VMINPD Y12, Y2, Y2 \
	VMAXPD Y11, Y2, Y2 \
	VMULPD Y10, Y2, Y3 \
	VADDPD Y9, Y3, Y3 \
	VSUBPD Y9, Y3, Y4 \
	VMULPD Y8, Y4, Y5 \
	VSUBPD Y5, Y2, Y5 \
	VMULPD Y7, Y4, Y4 \
	VSUBPD Y4, Y5, Y5 \
	VBROADCASTSD 72(R8), Y6 \
	POLY_STEP(80) \
	POLY_STEP(88) \
	POLY_STEP(96) \
	POLY_STEP(104) \
	POLY_STEP(112) \
	POLY_STEP(120) \
	POLY_STEP(128) \
	POLY_STEP(136) \
	VMULPD Y5, Y6, Y6 \
	VADDPD Y14, Y6, Y6 \
	VMULPD Y5, Y6, Y6 \
	VADDPD Y14, Y6, Y6 \
	VPSUBQ Y9, Y3, Y3 \
	VPSLLQ $52, Y3, Y3 \
	VPADDQ Y3, Y6, Y6

// func geluTanhAVX2(dst, x *float64, n int, k *float64)
TEXT ·geluTanhAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), R8
	GELU_CONSTS
	SHRQ $2, CX
	JZ gelu_done
gelu_loop:
	VMOVUPD (SI), Y0
	GELU_EXP
	VADDPD Y14, Y6, Y6
	VDIVPD Y6, Y0, Y6
	VMOVUPD Y6, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ gelu_loop
gelu_done:
	VZEROUPPER
	RET

// func geluTanhGradAVX2(dst, x, dy *float64, n int, k *float64)
TEXT ·geluTanhGradAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), R8
	GELU_CONSTS
	SHRQ $2, CX
	JZ grad_done
grad_loop:
	VMOVUPD (SI), Y0
	GELU_EXP
	VADDPD Y14, Y6, Y6
	VDIVPD Y6, Y14, Y6
	VMULPD Y6, Y0, Y2
	VSUBPD Y6, Y14, Y3
	VMULPD Y3, Y2, Y2
	VBROADCASTSD 144(R8), Y4
	VMULPD Y4, Y1, Y4
	VADDPD Y14, Y4, Y4
	VBROADCASTSD 152(R8), Y5
	VMULPD Y5, Y4, Y4
	VMULPD Y4, Y2, Y2
	VADDPD Y2, Y6, Y6
	VMOVUPD (DX), Y5
	VMULPD Y5, Y6, Y6
	VMOVUPD Y6, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ grad_loop
grad_done:
	VZEROUPPER
	RET
