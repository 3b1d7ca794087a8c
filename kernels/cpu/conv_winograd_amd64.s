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

// ROW(t0, t1, t2, t3): the transform's row from (Bᵀ·d)'s row t: t0 − t2, t1 + t2, t2 − t1,
// t1 − t3, stored at R8, R8 + BX, … (R8 advanced past them; Y12 scratch).
#define ROW(t0, t1, t2, t3) \
	VSUBPS t2, t0, Y12 \
	VMOVUPS Y12, (R8) \
	ADDQ BX, R8 \
	VADDPS t2, t1, Y12 \
	VMOVUPS Y12, (R8) \
	ADDQ BX, R8 \
	VSUBPS t1, t2, Y12 \
	VMOVUPS Y12, (R8) \
	ADDQ BX, R8 \
	VSUBPS t3, t1, Y12 \
	VMOVUPS Y12, (R8) \
	ADDQ BX, R8

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
	COLS(CX, Y0, Y1, Y2, Y3)
	COLS(DX, Y4, Y5, Y6, Y7)
	// Points 4–7: row 1 of Bᵀ·d, r1 + r2.
	VADDPS Y4, Y0, Y8
	VADDPS Y5, Y1, Y9
	VADDPS Y6, Y2, Y10
	VADDPS Y7, Y3, Y11
	MOVQ BX, R8
	SHLQ $2, R8
	ADDQ DI, R8
	ROW(Y8, Y9, Y10, Y11)
	// Points 8–11: r2 − r1.
	VSUBPS Y0, Y4, Y8
	VSUBPS Y1, Y5, Y9
	VSUBPS Y2, Y6, Y10
	VSUBPS Y3, Y7, Y11
	ROW(Y8, Y9, Y10, Y11)
	// Points 12–15: r1 − r3.
	COLS(SI, Y8, Y9, Y10, Y11)
	VSUBPS Y8, Y0, Y8
	VSUBPS Y9, Y1, Y9
	VSUBPS Y10, Y2, Y10
	VSUBPS Y11, Y3, Y11
	ROW(Y8, Y9, Y10, Y11)
	// Points 0–3: r0 − r2.
	COLS(AX, Y0, Y1, Y2, Y3)
	VSUBPS Y4, Y0, Y0
	VSUBPS Y5, Y1, Y1
	VSUBPS Y6, Y2, Y2
	VSUBPS Y7, Y3, Y3
	MOVQ DI, R8
	ROW(Y0, Y1, Y2, Y3)
	VZEROUPPER
	RET

// func winoOut8AVX(src unsafe.Pointer, stride int, y0, y1 unsafe.Pointer, b float32)
// Y = Aᵀ·M·A + b of eight tiles (point ξ's eight values at src + ξ·stride bytes): the
// tiles' two output rows, sixteen values each, at y0 and y1.
TEXT ·winoOut8AVX(SB), NOSPLIT, $0-36
	MOVQ src+0(FP), SI
	MOVQ stride+8(FP), BX
	MOVQ y0+16(FP), DI
	MOVQ y1+24(FP), DX
	VBROADCASTSS b+32(FP), Y15
	// Column c of Aᵀ·M: u0c = (m0c + m1c) + m2c in Y0–Y3, u1c = (m1c − m2c) − m3c in Y4–Y7,
	// where mrc is point 4r + c.
	LEAQ (BX)(BX*2), R9 // 3·stride
	MOVQ BX, R10
	SHLQ $2, R10        // 4·stride
	MOVQ SI, R8
	VMOVUPS (R8), Y8
	VMOVUPS (R8)(R10*1), Y9
	VMOVUPS (R8)(R10*2), Y10
	LEAQ (R8)(R9*4), R11
	VMOVUPS (R11), Y11
	VADDPS Y9, Y8, Y0
	VADDPS Y10, Y0, Y0
	VSUBPS Y10, Y9, Y4
	VSUBPS Y11, Y4, Y4
	ADDQ BX, R8
	VMOVUPS (R8), Y8
	VMOVUPS (R8)(R10*1), Y9
	VMOVUPS (R8)(R10*2), Y10
	LEAQ (R8)(R9*4), R11
	VMOVUPS (R11), Y11
	VADDPS Y9, Y8, Y1
	VADDPS Y10, Y1, Y1
	VSUBPS Y10, Y9, Y5
	VSUBPS Y11, Y5, Y5
	ADDQ BX, R8
	VMOVUPS (R8), Y8
	VMOVUPS (R8)(R10*1), Y9
	VMOVUPS (R8)(R10*2), Y10
	LEAQ (R8)(R9*4), R11
	VMOVUPS (R11), Y11
	VADDPS Y9, Y8, Y2
	VADDPS Y10, Y2, Y2
	VSUBPS Y10, Y9, Y6
	VSUBPS Y11, Y6, Y6
	ADDQ BX, R8
	VMOVUPS (R8), Y8
	VMOVUPS (R8)(R10*1), Y9
	VMOVUPS (R8)(R10*2), Y10
	LEAQ (R8)(R9*4), R11
	VMOVUPS (R11), Y11
	VADDPS Y9, Y8, Y3
	VADDPS Y10, Y3, Y3
	VSUBPS Y10, Y9, Y7
	VSUBPS Y11, Y7, Y7
	// Row 0: ((u00 + u01) + u02) + b and ((u01 − u02) − u03) + b, interleaved by tile.
	VADDPS Y1, Y0, Y8
	VADDPS Y2, Y8, Y8
	VADDPS Y15, Y8, Y8
	VSUBPS Y2, Y1, Y9
	VSUBPS Y3, Y9, Y9
	VADDPS Y15, Y9, Y9
	VUNPCKLPS Y9, Y8, Y10
	VUNPCKHPS Y9, Y8, Y11
	VPERM2F128 $0x20, Y11, Y10, Y12
	VPERM2F128 $0x31, Y11, Y10, Y13
	VMOVUPS Y12, (DI)
	VMOVUPS Y13, 32(DI)
	// Row 1, from u1c.
	VADDPS Y5, Y4, Y8
	VADDPS Y6, Y8, Y8
	VADDPS Y15, Y8, Y8
	VSUBPS Y6, Y5, Y9
	VSUBPS Y7, Y9, Y9
	VADDPS Y15, Y9, Y9
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

// ROW4: ROW in xmm registers (X12 scratch).
#define ROW4(t0, t1, t2, t3) \
	VSUBPS t2, t0, X12 \
	VMOVUPS X12, (R8) \
	ADDQ BX, R8 \
	VADDPS t2, t1, X12 \
	VMOVUPS X12, (R8) \
	ADDQ BX, R8 \
	VSUBPS t1, t2, X12 \
	VMOVUPS X12, (R8) \
	ADDQ BX, R8 \
	VSUBPS t3, t1, X12 \
	VMOVUPS X12, (R8) \
	ADDQ BX, R8

// func winoIn4AVX(r0, r1, r2, r3, dst unsafe.Pointer, stride int)
// winoIn8AVX for four tiles (10 floats of each row read, four values a point written).
TEXT ·winoIn4AVX(SB), NOSPLIT, $0-48
	MOVQ r0+0(FP), AX
	MOVQ r1+8(FP), CX
	MOVQ r2+16(FP), DX
	MOVQ r3+24(FP), SI
	MOVQ dst+32(FP), DI
	MOVQ stride+40(FP), BX
	COLS4(CX, X0, X1, X2, X3)
	COLS4(DX, X4, X5, X6, X7)
	VADDPS X4, X0, X8
	VADDPS X5, X1, X9
	VADDPS X6, X2, X10
	VADDPS X7, X3, X11
	MOVQ BX, R8
	SHLQ $2, R8
	ADDQ DI, R8
	ROW4(X8, X9, X10, X11)
	VSUBPS X0, X4, X8
	VSUBPS X1, X5, X9
	VSUBPS X2, X6, X10
	VSUBPS X3, X7, X11
	ROW4(X8, X9, X10, X11)
	COLS4(SI, X8, X9, X10, X11)
	VSUBPS X8, X0, X8
	VSUBPS X9, X1, X9
	VSUBPS X10, X2, X10
	VSUBPS X11, X3, X11
	ROW4(X8, X9, X10, X11)
	COLS4(AX, X0, X1, X2, X3)
	VSUBPS X4, X0, X0
	VSUBPS X5, X1, X1
	VSUBPS X6, X2, X2
	VSUBPS X7, X3, X3
	MOVQ DI, R8
	ROW4(X0, X1, X2, X3)
	RET

// func winoOut4AVX(src unsafe.Pointer, stride int, y0, y1 unsafe.Pointer, b float32)
// winoOut8AVX for four tiles (eight values of each output row written).
TEXT ·winoOut4AVX(SB), NOSPLIT, $0-36
	MOVQ src+0(FP), SI
	MOVQ stride+8(FP), BX
	MOVQ y0+16(FP), DI
	MOVQ y1+24(FP), DX
	VBROADCASTSS b+32(FP), X15
	LEAQ (BX)(BX*2), R9
	MOVQ BX, R10
	SHLQ $2, R10
	MOVQ SI, R8
	VMOVUPS (R8), X8
	VMOVUPS (R8)(R10*1), X9
	VMOVUPS (R8)(R10*2), X10
	LEAQ (R8)(R9*4), R11
	VMOVUPS (R11), X11
	VADDPS X9, X8, X0
	VADDPS X10, X0, X0
	VSUBPS X10, X9, X4
	VSUBPS X11, X4, X4
	ADDQ BX, R8
	VMOVUPS (R8), X8
	VMOVUPS (R8)(R10*1), X9
	VMOVUPS (R8)(R10*2), X10
	LEAQ (R8)(R9*4), R11
	VMOVUPS (R11), X11
	VADDPS X9, X8, X1
	VADDPS X10, X1, X1
	VSUBPS X10, X9, X5
	VSUBPS X11, X5, X5
	ADDQ BX, R8
	VMOVUPS (R8), X8
	VMOVUPS (R8)(R10*1), X9
	VMOVUPS (R8)(R10*2), X10
	LEAQ (R8)(R9*4), R11
	VMOVUPS (R11), X11
	VADDPS X9, X8, X2
	VADDPS X10, X2, X2
	VSUBPS X10, X9, X6
	VSUBPS X11, X6, X6
	ADDQ BX, R8
	VMOVUPS (R8), X8
	VMOVUPS (R8)(R10*1), X9
	VMOVUPS (R8)(R10*2), X10
	LEAQ (R8)(R9*4), R11
	VMOVUPS (R11), X11
	VADDPS X9, X8, X3
	VADDPS X10, X3, X3
	VSUBPS X10, X9, X7
	VSUBPS X11, X7, X7
	VADDPS X1, X0, X8
	VADDPS X2, X8, X8
	VADDPS X15, X8, X8
	VSUBPS X2, X1, X9
	VSUBPS X3, X9, X9
	VADDPS X15, X9, X9
	VUNPCKLPS X9, X8, X10
	VUNPCKHPS X9, X8, X11
	VMOVUPS X10, (DI)
	VMOVUPS X11, 16(DI)
	VADDPS X5, X4, X8
	VADDPS X6, X8, X8
	VADDPS X15, X8, X8
	VSUBPS X6, X5, X9
	VSUBPS X7, X9, X9
	VADDPS X15, X9, X9
	VUNPCKLPS X9, X8, X10
	VUNPCKHPS X9, X8, X11
	VMOVUPS X10, (DX)
	VMOVUPS X11, 16(DX)
	RET
