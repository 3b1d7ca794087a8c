//go:build amd64 && !purego

#include "textflag.h"

// expShift32's vector body (exp_slice.go): four float32 elements per step, widened to float64
// lanes; each operation is the one expShiftScalar performs, in the same order. k points at
// expShiftK.

#define EXP_POLY(off) \
	VMULPD Y5, Y6, Y6 \
	VBROADCASTSD off(R8), Y4 \
	VADDPD Y4, Y6, Y6

// func expShiftAVX2(dst, x *float32, n int, m float64, k *float64)
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD m+24(FP), Y15
	MOVQ k+32(FP), R8
	VBROADCASTSD 0(R8), Y14
	VBROADCASTSD 8(R8), Y13
	VBROADCASTSD 16(R8), Y12
	VBROADCASTSD 24(R8), Y11
	VBROADCASTSD 32(R8), Y10
	VBROADCASTSD 40(R8), Y9
	VBROADCASTSD 48(R8), Y8
	SHRQ $2, CX
	JZ exp_done
exp_loop:
	VCVTPS2PD (SI), Y0
	VSUBPD Y15, Y0, Y2
	VCMPPD $3, Y2, Y2, Y7
	VMINPD Y13, Y2, Y2
	VMAXPD Y12, Y2, Y2
	VMULPD Y11, Y2, Y3
	VADDPD Y10, Y3, Y3
	VSUBPD Y10, Y3, Y4
	VMULPD Y9, Y4, Y5
	VSUBPD Y5, Y2, Y5
	VMULPD Y8, Y4, Y4
	VSUBPD Y4, Y5, Y5
	VBROADCASTSD 56(R8), Y6
	EXP_POLY(64)
	EXP_POLY(72)
	EXP_POLY(80)
	EXP_POLY(88)
	EXP_POLY(96)
	EXP_POLY(104)
	VMULPD Y5, Y6, Y6
	VADDPD Y14, Y6, Y6
	VMULPD Y5, Y6, Y6
	VADDPD Y14, Y6, Y6
	VPSUBQ Y10, Y3, Y3
	VPSLLQ $52, Y3, Y3
	VPADDQ Y3, Y6, Y6
	VORPD Y7, Y6, Y6
	VCVTPD2PSY Y6, X6
	VMOVUPS X6, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	DECQ CX
	JNZ exp_loop
exp_done:
	VZEROUPPER
	RET
