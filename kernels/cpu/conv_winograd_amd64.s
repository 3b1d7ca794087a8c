//go:build amd64 && !purego

#include "textflag.h"

// The Winograd F(2×2, 3×3) transforms of conv_winograd.go for eight (or four) tiles of a tile row at
// once (AVX2): the same IEEE additions in the same order as winoInput and winoOutput's Go
// loops, one tile a lane, so both give the same bits.

// COLS(p, c0, c1, c2, c3): the patch columns of eight tiles from a padded row p (tile q's
// columns at p[2q … 2q+3]): c0 = p[0, 2, …, 14], c1 = p[1, 3, …, 15], c2 = p[2, 4, …, 16],
// c3 = p[3, 5, …, 17]. SHUFPS picks the even (odd) elements of two vectors lane by lane, and
// VPERMPD puts the two halves' pairs back in order.
#define COLS(p, c0, c1, c2, c3) \
	VMOVUPS 0(p), c1 \
	VSHUFPS $0x88, 32(p), c1, c0 \
	VSHUFPS $0xDD, 32(p), c1, c1 \
	VPERMPD $0xD8, c0, c0 \
	VPERMPD $0xD8, c1, c1 \
	VMOVUPS 8(p), c3 \
	VSHUFPS $0x88, 40(p), c3, c2 \
	VSHUFPS $0xDD, 40(p), c3, c3 \
	VPERMPD $0xD8, c2, c2 \
	VPERMPD $0xD8, c3, c3

// ROW(t0, t1, t2, t3, x): the transform's row from (Bᵀ·d)'s row t: t0 − t2, t1 + t2,
// t2 − t1, t1 − t3, stored at R8, R8 + BX, … (R8 advanced past them; x scratch).
#define ROW(t0, t1, t2, t3, x) \
	VSUBPS t2, t0, x \
	VMOVUPS x, (R8) \
	ADDQ BX, R8 \
	VADDPS t2, t1, x \
	VMOVUPS x, (R8) \
	ADDQ BX, R8 \
	VSUBPS t1, t2, x \
	VMOVUPS x, (R8) \
	ADDQ BX, R8 \
	VSUBPS t3, t1, x \
	VMOVUPS x, (R8) \
	ADDQ BX, R8

// STAGE(op, a0…a3, b0…b3, d0…d3, x): row t of Bᵀ·d as d = a op b column by column (b
// the second operand: d0 = a0 − b0 for VSUBPS), then ROW on it.
#define STAGE(op, a0, a1, a2, a3, b0, b1, b2, b3, d0, d1, d2, d3, x) \
	op b0, a0, d0 \
	op b1, a1, d1 \
	op b2, a2, d2 \
	op b3, a3, d3 \
	ROW(d0, d1, d2, d3, x)

// OUTCOL(m0, m1, m2, m3, u0, u1): column c of Aᵀ·M from points c, 4 + c, 8 + c, 12 + c at R8,
// R8 + 4·stride, R8 + 8·stride and R8 + 12·stride (R10 = 4·stride, R9 = 3·stride): u0 =
// (m0 + m1) + m2, u1 = (m1 − m2) − m3; R8 advanced to the next column (R11, m0–m3 scratch).
#define OUTCOL(m0, m1, m2, m3, u0, u1) \
	VMOVUPS (R8), m0 \
	VMOVUPS (R8)(R10*1), m1 \
	VMOVUPS (R8)(R10*2), m2 \
	LEAQ (R8)(R9*4), R11 \
	VMOVUPS (R11), m3 \
	VADDPS m1, m0, u0 \
	VADDPS m2, u0, u0 \
	VSUBPS m2, m1, u1 \
	VSUBPS m3, u1, u1 \
	ADDQ BX, R8

// OUTPAIR(u0, u1, u2, u3, b, e, o): an output row of the tiles, its even columns ((u0 + u1) +
// u2) + b in e and its odd ones ((u1 − u2) − u3) + b in o.
#define OUTPAIR(u0, u1, u2, u3, b, e, o) \
	VADDPS u1, u0, e \
	VADDPS u2, e, e \
	VADDPS b, e, e \
	VSUBPS u2, u1, o \
	VSUBPS u3, o, o \
	VADDPS b, o, o

#define WINO_OUT_PROLOGUE \
	MOVQ src+0(FP), SI \
	MOVQ stride+8(FP), BX \
	MOVQ y0+16(FP), DI \
	MOVQ y1+24(FP), DX \
	LEAQ (BX)(BX*2), R9 \
	MOVQ BX, R10 \
	SHLQ $2, R10 \
	MOVQ SI, R8

// WINO_IN(C, r0…r12): winoIn8AVX's and winoIn4AVX's body, C their COLS, r their registers
// (R8 and BX as ROW has them, AX CX DX SI the rows, DI the destination). Rows 1 and 2 of
// the patches are loaded first; the points are stored 4–7 (row 1 of Bᵀ·d: r1 + r2), 8–11
// (r2 − r1), 12–15 (r1 − r3), then 0–3 (r0 − r2), so that sixteen registers suffice.
#define WINO_IN(C, r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12) \
	C(CX, r0, r1, r2, r3) \
	C(DX, r4, r5, r6, r7) \
	MOVQ BX, R8 \
	SHLQ $2, R8 \
	ADDQ DI, R8 \
	STAGE(VADDPS, r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12) \
	STAGE(VSUBPS, r4, r5, r6, r7, r0, r1, r2, r3, r8, r9, r10, r11, r12) \
	C(SI, r8, r9, r10, r11) \
	STAGE(VSUBPS, r0, r1, r2, r3, r8, r9, r10, r11, r8, r9, r10, r11, r12) \
	C(AX, r0, r1, r2, r3) \
	MOVQ DI, R8 \
	STAGE(VSUBPS, r0, r1, r2, r3, r4, r5, r6, r7, r0, r1, r2, r3, r12)

// func winoIn8AVX(r0, r1, r2, r3, dst unsafe.Pointer, stride int)
// V = Bᵀ·d·B of eight tiles whose patches start at r0 … r3 (four padded rows; 18 floats of
// each are read): point ξ's eight values at dst + ξ·stride bytes.
TEXT ·winoIn8AVX(SB), NOSPLIT, $0-48
	MOVQ r0+0(FP), AX
	MOVQ r1+8(FP), CX
	MOVQ r2+16(FP), DX
	MOVQ r3+24(FP), SI
	MOVQ dst+32(FP), DI
	MOVQ stride+40(FP), BX
	WINO_IN(COLS, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12)
	VZEROUPPER
	RET

// func winoOut8AVX(src unsafe.Pointer, stride int, y0, y1 unsafe.Pointer, b float32)
// Y = Aᵀ·M·A + b of eight tiles (point ξ's eight values at src + ξ·stride bytes): the
// tiles' two output rows, sixteen values each, at y0 and y1.
TEXT ·winoOut8AVX(SB), NOSPLIT, $0-36
	WINO_OUT_PROLOGUE
	VBROADCASTSS b+32(FP), Y15
	OUTCOL(Y8, Y9, Y10, Y11, Y0, Y4)
	OUTCOL(Y8, Y9, Y10, Y11, Y1, Y5)
	OUTCOL(Y8, Y9, Y10, Y11, Y2, Y6)
	OUTCOL(Y8, Y9, Y10, Y11, Y3, Y7)
	// Each row's two outputs a tile interleaved: UNPCK pairs them within 128-bit halves,
	// VPERM2F128 puts the halves in order.
	OUTPAIR(Y0, Y1, Y2, Y3, Y15, Y8, Y9)
	VUNPCKLPS Y9, Y8, Y10
	VUNPCKHPS Y9, Y8, Y11
	VPERM2F128 $0x20, Y11, Y10, Y12
	VPERM2F128 $0x31, Y11, Y10, Y13
	VMOVUPS Y12, (DI)
	VMOVUPS Y13, 32(DI)
	OUTPAIR(Y4, Y5, Y6, Y7, Y15, Y8, Y9)
	VUNPCKLPS Y9, Y8, Y10
	VUNPCKHPS Y9, Y8, Y11
	VPERM2F128 $0x20, Y11, Y10, Y12
	VPERM2F128 $0x31, Y11, Y10, Y13
	VMOVUPS Y12, (DX)
	VMOVUPS Y13, 32(DX)
	VZEROUPPER
	RET

// COLS4(p, c0, c1, c2, c3): COLS for four tiles in xmm registers (10 floats of p read).
#define COLS4(p, c0, c1, c2, c3) \
	VMOVUPS 0(p), c1 \
	VSHUFPS $0x88, 16(p), c1, c0 \
	VSHUFPS $0xDD, 16(p), c1, c1 \
	VMOVUPS 8(p), c3 \
	VSHUFPS $0x88, 24(p), c3, c2 \
	VSHUFPS $0xDD, 24(p), c3, c3

// func winoIn4AVX(r0, r1, r2, r3, dst unsafe.Pointer, stride int)
// winoIn8AVX for four tiles (10 floats of each row read, four values a point written).
TEXT ·winoIn4AVX(SB), NOSPLIT, $0-48
	MOVQ r0+0(FP), AX
	MOVQ r1+8(FP), CX
	MOVQ r2+16(FP), DX
	MOVQ r3+24(FP), SI
	MOVQ dst+32(FP), DI
	MOVQ stride+40(FP), BX
	WINO_IN(COLS4, X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12)
	RET

// func winoOut4AVX(src unsafe.Pointer, stride int, y0, y1 unsafe.Pointer, b float32)
// winoOut8AVX for four tiles (eight values of each output row written).
TEXT ·winoOut4AVX(SB), NOSPLIT, $0-36
	WINO_OUT_PROLOGUE
	VBROADCASTSS b+32(FP), X15
	OUTCOL(X8, X9, X10, X11, X0, X4)
	OUTCOL(X8, X9, X10, X11, X1, X5)
	OUTCOL(X8, X9, X10, X11, X2, X6)
	OUTCOL(X8, X9, X10, X11, X3, X7)
	OUTPAIR(X0, X1, X2, X3, X15, X8, X9)
	VUNPCKLPS X9, X8, X10
	VUNPCKHPS X9, X8, X11
	VMOVUPS X10, (DI)
	VMOVUPS X11, 16(DI)
	OUTPAIR(X4, X5, X6, X7, X15, X8, X9)
	VUNPCKLPS X9, X8, X10
	VUNPCKHPS X9, X8, X11
	VMOVUPS X10, (DX)
	VMOVUPS X11, 16(DX)
	RET
