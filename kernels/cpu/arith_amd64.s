//go:build amd64 && !purego

#include "textflag.h"

// float32 row kernels of arith_vec.go with AVX: n elements (a multiple of 8), eight per
// instruction. Each is the IEEE operation the Go loops perform, so results are the same bits.

// MAXNAN(a, b, d): d = Go's builtin max of a and b, eight lanes (Y2–Y5 scratch). MAXPS
// returns its second source b when the values are equal or either is NaN, so: equal values
// (±0 being the only unequal bits) take a AND b, and a NaN a is forced through by OR-ing its
// all-ones mask.
#define MAXNAN(a, b, d) \
	VMAXPS b, a, Y2 \
	VCMPPS $0, b, a, Y3 \
	VANDPS b, a, Y4 \
	VBLENDVPS Y3, Y4, Y2, Y2 \
	VCMPPS $3, a, a, Y5 \
	VORPS Y5, Y2, d

// VV(name, op): o[i] = a[i] op b[i].
#define VV(name, op) \
TEXT name(SB), NOSPLIT, $0-32 \
	MOVQ o+0(FP), DI \
	MOVQ a+8(FP), SI \
	MOVQ b+16(FP), DX \
	MOVQ n+24(FP), CX \
	SHRQ $3, CX \
	JZ 2(PC) \
	JMP 2(PC) \
	RET \
	VMOVUPS (SI), Y0 \
	op (DX), Y0, Y0 \
	VMOVUPS Y0, (DI) \
	ADDQ $32, SI \
	ADDQ $32, DX \
	ADDQ $32, DI \
	DECQ CX \
	JNZ -7(PC) \
	VZEROUPPER \
	RET

// VS(name, op): o[i] = a[i] op s.
#define VS(name, op) \
TEXT name(SB), NOSPLIT, $0-32 \
	MOVQ o+0(FP), DI \
	MOVQ a+8(FP), SI \
	VBROADCASTSS s+16(FP), Y1 \
	MOVQ n+24(FP), CX \
	SHRQ $3, CX \
	JZ 2(PC) \
	JMP 2(PC) \
	RET \
	VMOVUPS (SI), Y0 \
	op Y1, Y0, Y0 \
	VMOVUPS Y0, (DI) \
	ADDQ $32, SI \
	ADDQ $32, DI \
	DECQ CX \
	JNZ -6(PC) \
	VZEROUPPER \
	RET

// SV(name, op): o[i] = s op b[i].
#define SV(name, op) \
TEXT name(SB), NOSPLIT, $0-32 \
	MOVQ o+0(FP), DI \
	MOVQ b+8(FP), SI \
	VBROADCASTSS s+16(FP), Y1 \
	MOVQ n+24(FP), CX \
	SHRQ $3, CX \
	JZ 2(PC) \
	JMP 2(PC) \
	RET \
	op (SI), Y1, Y0 \
	VMOVUPS Y0, (DI) \
	ADDQ $32, SI \
	ADDQ $32, DI \
	DECQ CX \
	JNZ -5(PC) \
	VZEROUPPER \
	RET

// func addVV32(o, a, b *float32, n int)
VV(·addVV32, VADDPS)
VV(·subVV32, VSUBPS)
VV(·mulVV32, VMULPS)
VV(·divVV32, VDIVPS)

// func addVS32(o, a *float32, s float32, n int)
VS(·addVS32, VADDPS)
VS(·subVS32, VSUBPS)
VS(·mulVS32, VMULPS)
VS(·divVS32, VDIVPS)

// func addSV32(o, b *float32, s float32, n int)
SV(·addSV32, VADDPS)
SV(·subSV32, VSUBPS)
SV(·mulSV32, VMULPS)
SV(·divSV32, VDIVPS)

// func sqrt32(o, a *float32, n int)
TEXT ·sqrt32(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ sqrt_done
sqrt_loop:
	VSQRTPS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ sqrt_loop
sqrt_done:
	VZEROUPPER
	RET

// func scaleShift32(o, a *float32, mul, add float32, n int): o[i] = a[i]·mul + add, the
// product rounded before the sum (no FMA), as the Go twin computes it.
TEXT ·scaleShift32(SB), NOSPLIT, $0-32
	MOVQ o+0(FP), DI
	MOVQ a+8(FP), SI
	VBROADCASTSS mul+16(FP), Y1
	VBROADCASTSS add+20(FP), Y2
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ ss_done
ss_loop:
	VMULPS (SI), Y1, Y0
	VADDPS Y2, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ ss_loop
ss_done:
	VZEROUPPER
	RET

// func scaleShiftRelu32(o, a *float32, mul, add float32, n int): o[i] = relu(a[i]·mul + add),
// scaleShift32's two roundings and then relu32's MAXPS against 0, in one pass: a batch norm
// and the ReLU after it without writing and reading the row twice.
TEXT ·scaleShiftRelu32(SB), NOSPLIT, $0-32
	MOVQ o+0(FP), DI
	MOVQ a+8(FP), SI
	VBROADCASTSS mul+16(FP), Y1
	VBROADCASTSS add+20(FP), Y2
	MOVQ n+24(FP), CX
	VXORPS Y3, Y3, Y3
	SHRQ $3, CX
	JZ ssr_done
ssr_loop:
	VMULPS (SI), Y1, Y0
	VADDPS Y2, Y0, Y0
	VMAXPS Y3, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ ssr_loop
ssr_done:
	VZEROUPPER
	RET

// func relu32(o, a *float32, n int): MAXPS returns its second source (0) when the first is
// not greater, NaN and −0 included — relu's "x if x > 0 else 0".
TEXT ·relu32(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ n+16(FP), CX
	VXORPS Y1, Y1, Y1
	SHRQ $3, CX
	JZ relu_done
relu_loop:
	VMOVUPS (SI), Y0
	VMAXPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ relu_loop
relu_done:
	VZEROUPPER
	RET

// func dot32(a, b *float32, n int) float32: Σ a[i]·b[i] over n elements (a multiple of 32)
// in four 8-lane FMA accumulators, folded ((0 + 1) + (2 + 3)) and then across lanes in a
// fixed tree: a fixed order, whatever the caller's thread count.
TEXT ·dot32(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $5, CX
	JZ dot_reduce
dot_loop:
	VMOVUPS (SI), Y4
	VFMADD231PS (DX), Y4, Y0
	VMOVUPS 32(SI), Y5
	VFMADD231PS 32(DX), Y5, Y1
	VMOVUPS 64(SI), Y6
	VFMADD231PS 64(DX), Y6, Y2
	VMOVUPS 96(SI), Y7
	VFMADD231PS 96(DX), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DX
	DECQ CX
	JNZ dot_loop
dot_reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func maxNaN32(o, x *float32, n int): o[i] = max(o[i], x[i]) as Go's builtin max computes it
// for floats (NaN if either is NaN; max(−0, +0) = +0: MAXNAN), n a multiple of 8.
TEXT ·maxNaN32(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ max_done
max_loop:
	VMOVUPS (SI), Y0
	VMOVUPS (DI), Y1
	MAXNAN(Y0, Y1, Y2)
	VMOVUPS Y2, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ max_loop
max_done:
	VZEROUPPER
	RET

// func maxNaN3_32(o, a, b, c *float32, n int): o[i] = max(max(a[i], b[i]), c[i]) as Go's
// builtin max computes it (MAXNAN twice), n a multiple of 8: a 3-tap pooling
// window in one pass.
TEXT ·maxNaN3_32(SB), NOSPLIT, $0-40
	MOVQ o+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ c+24(FP), R8
	MOVQ n+32(FP), CX
	SHRQ $3, CX
	JZ max3_done
max3_loop:
	VMOVUPS (SI), Y1
	VMOVUPS (DX), Y0
	MAXNAN(Y0, Y1, Y1)
	VMOVUPS (R8), Y0
	MAXNAN(Y0, Y1, Y2)
	VMOVUPS Y2, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, DI
	DECQ CX
	JNZ max3_loop
max3_done:
	VZEROUPPER
	RET

// func maxNaN3s2_32(o, v *float32, n int): o[j] = max(max(v[2j], v[2j+1]), v[2j+2]) as Go's
// builtin max computes it (MAXNAN twice), n a multiple of 8, reading v[0 :
// 2n+2]: a 3-tap stride-2 pooling window along a row. Eight outputs take sixteen values
// and the sixteen two further on; VSHUFPS picks the even and odd ones within each 128-bit
// lane and VPERMPD puts the lanes' halves in order.
TEXT ·maxNaN3s2_32(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ max3s2_done
max3s2_loop:
	VMOVUPS (SI), Y6
	VMOVUPS 32(SI), Y7
	VMOVUPS 8(SI), Y8
	VMOVUPS 40(SI), Y9
	VSHUFPS $0x88, Y7, Y6, Y1
	VPERMPD $0xD8, Y1, Y1
	VSHUFPS $0xDD, Y7, Y6, Y0
	VPERMPD $0xD8, Y0, Y0
	MAXNAN(Y0, Y1, Y1)
	VSHUFPS $0x88, Y9, Y8, Y0
	VPERMPD $0xD8, Y0, Y0
	MAXNAN(Y0, Y1, Y2)
	VMOVUPS Y2, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ max3s2_loop
max3s2_done:
	VZEROUPPER
	RET

// func dot32x2(a, b0, b1 *float32, n int) (s0, s1 float32): dot32 of a with two rows at once
// (two memory streams in flight instead of one; each row's sum in dot32's order and fold, so
// the same bits as two dot32 calls).
TEXT ·dot32x2(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), SI
	MOVQ b0+8(FP), DX
	MOVQ b1+16(FP), R8
	MOVQ n+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	SHRQ $5, CX
	JZ dot2_reduce
dot2_loop:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DX), Y4, Y0
	VFMADD231PS (R8), Y4, Y8
	VFMADD231PS 32(DX), Y5, Y1
	VFMADD231PS 32(R8), Y5, Y9
	VFMADD231PS 64(DX), Y6, Y2
	VFMADD231PS 64(R8), Y6, Y10
	VFMADD231PS 96(DX), Y7, Y3
	VFMADD231PS 96(R8), Y7, Y11
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, R8
	DECQ CX
	JNZ dot2_loop
dot2_reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	VMOVSS X0, s0+32(FP)
	VADDPS Y9, Y8, Y8
	VADDPS Y11, Y10, Y10
	VADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVHLPS X8, X8, X9
	VADDPS X9, X8, X8
	VMOVSHDUP X8, X9
	VADDSS X9, X8, X8
	VMOVSS X8, s1+36(FP)
	VZEROUPPER
	RET

// func dot32x4(a, b0, b1, b2, b3 *float32, n int) (s0, s1, s2, s3 float32) (AVX-512): dot32 of
// a with four rows at once, four memory streams in flight. Each row's zmm accumulator pair
// holds dot32's four ymm accumulators lane for lane (acc0|acc1, acc2|acc3), and the fold is
// dot32's ((0 + 1) + (2 + 3), then across lanes), so each sum has dot32's bits.
TEXT ·dot32x4(SB), NOSPLIT, $0-64
	MOVQ a+0(FP), SI
	MOVQ b0+8(FP), DX
	MOVQ b1+16(FP), R8
	MOVQ b2+24(FP), R9
	MOVQ b3+32(FP), R10
	MOVQ n+40(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	SHRQ $5, CX
	JZ dot4_reduce
dot4_loop:
	VMOVUPS (SI), Z16
	VMOVUPS 64(SI), Z17
	VFMADD231PS (DX), Z16, Z0
	VFMADD231PS 64(DX), Z17, Z1
	VFMADD231PS (R8), Z16, Z2
	VFMADD231PS 64(R8), Z17, Z3
	VFMADD231PS (R9), Z16, Z4
	VFMADD231PS 64(R9), Z17, Z5
	VFMADD231PS (R10), Z16, Z6
	VFMADD231PS 64(R10), Z17, Z7
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, R8
	ADDQ $128, R9
	ADDQ $128, R10
	DECQ CX
	JNZ dot4_loop
dot4_reduce:
	VEXTRACTF64X4 $1, Z0, Y8
	VADDPS Y8, Y0, Y8
	VEXTRACTF64X4 $1, Z1, Y9
	VADDPS Y9, Y1, Y9
	VADDPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVHLPS X8, X8, X9
	VADDPS X9, X8, X8
	VMOVSHDUP X8, X9
	VADDSS X9, X8, X8
	VMOVSS X8, s0+48(FP)
	VEXTRACTF64X4 $1, Z2, Y8
	VADDPS Y8, Y2, Y8
	VEXTRACTF64X4 $1, Z3, Y9
	VADDPS Y9, Y3, Y9
	VADDPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVHLPS X8, X8, X9
	VADDPS X9, X8, X8
	VMOVSHDUP X8, X9
	VADDSS X9, X8, X8
	VMOVSS X8, s1+52(FP)
	VEXTRACTF64X4 $1, Z4, Y8
	VADDPS Y8, Y4, Y8
	VEXTRACTF64X4 $1, Z5, Y9
	VADDPS Y9, Y5, Y9
	VADDPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVHLPS X8, X8, X9
	VADDPS X9, X8, X8
	VMOVSHDUP X8, X9
	VADDSS X9, X8, X8
	VMOVSS X8, s2+56(FP)
	VEXTRACTF64X4 $1, Z6, Y8
	VADDPS Y8, Y6, Y8
	VEXTRACTF64X4 $1, Z7, Y9
	VADDPS Y9, Y7, Y9
	VADDPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVHLPS X8, X8, X9
	VADDPS X9, X8, X8
	VMOVSHDUP X8, X9
	VADDSS X9, X8, X8
	VMOVSS X8, s3+60(FP)
	VZEROUPPER
	RET

// func maxRange32(o, x *float32, n int): maxNaN32 with AVX-512DQ's VRANGEPS (imm 5: the
// larger value, bits 1:0 = 01, with the sign of the comparison's result, bits 3:2 = 01), which
// orders −0 below +0 as Go's builtin max does but, as IEEE's maxNum, takes the number over a
// quiet NaN: lanes where an operand is a NaN (VCMPPS unordered) take their sum instead, a NaN.
// Three instructions for sixteen lanes where MAXNAN takes six for eight. n a multiple of 16.
TEXT ·maxRange32(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ maxr_done
maxr_loop:
	VMOVUPS (SI), Z0
	VMOVUPS (DI), Z1
	VRANGEPS $5, Z0, Z1, Z2
	VCMPPS $3, Z0, Z1, K1
	VADDPS Z0, Z1, K1, Z2
	VMOVUPS Z2, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ maxr_loop
maxr_done:
	VZEROUPPER
	RET

// func maxRange3_32(o, a, b, c *float32, n int): maxNaN3_32 with VRANGEPS (see maxRange32):
// a lane with a NaN among its three operands takes (a + b) + c, a NaN. n a multiple of 16.
TEXT ·maxRange3_32(SB), NOSPLIT, $0-40
	MOVQ o+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ c+24(FP), R8
	MOVQ n+32(FP), CX
	SHRQ $4, CX
	JZ maxr3_done
maxr3_loop:
	VMOVUPS (SI), Z0
	VMOVUPS (DX), Z1
	VMOVUPS (R8), Z2
	VRANGEPS $5, Z1, Z0, Z3
	VRANGEPS $5, Z2, Z3, Z3
	VCMPPS $3, Z1, Z0, K1
	VCMPPS $3, Z2, Z2, K2
	KORW K1, K2, K1
	VADDPS Z1, Z0, Z4
	VADDPS Z2, Z4, K1, Z3
	VMOVUPS Z3, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, R8
	ADDQ $64, DI
	DECQ CX
	JNZ maxr3_loop
maxr3_done:
	VZEROUPPER
	RET

// SCC_LOAD and SCC_STORE are a row of scaleShiftCols32 around what follows the shift: the 16
// elements at DI times the broadcast at SI plus the broadcast at R8, in Y0 and Y3, then
// masked by Y6 and Y7, stored back and the pointers advanced to the next row.
#define SCC_LOAD \
	VBROADCASTSS (SI), Y1 \
	VBROADCASTSS (R8), Y2 \
	VMULPS (DI), Y1, Y0 \
	VMULPS 32(DI), Y1, Y3 \
	VADDPS Y2, Y0, Y0 \
	VADDPS Y2, Y3, Y3

#define SCC_STORE \
	VANDPS Y6, Y0, Y0 \
	VANDPS Y7, Y3, Y3 \
	VMOVUPS Y0, (DI) \
	VMOVUPS Y3, 32(DI) \
	ADDQ $4, SI \
	ADDQ $4, R8 \
	ADDQ DX, DI

// func scaleShiftCols32(d *float32, stride int, mul, add *float32, rows, relu int, mask *uint32):
// in place, for each row p < rows, the 16 elements at d + p·stride (bytes: stride·4) become
// d·mul[p] + add[p] — scaleShift32's two roundings — then, with relu ≠ 0, relu32's MAXPS
// against 0, and then AND mask (16 lanes: all ones keeps the value, 0 writes +0): a packed
// GEMM B sliver's rows under a per-row batch norm (gemmPreB), its padding columns kept 0.
TEXT ·scaleShiftCols32(SB), NOSPLIT, $0-56
	MOVQ d+0(FP), DI
	MOVQ stride+8(FP), DX
	SHLQ $2, DX
	MOVQ mul+16(FP), SI
	MOVQ add+24(FP), R8
	MOVQ rows+32(FP), CX
	MOVQ relu+40(FP), R9
	MOVQ mask+48(FP), R10
	VMOVUPS (R10), Y6
	VMOVUPS 32(R10), Y7
	VXORPS Y5, Y5, Y5
	TESTQ CX, CX
	JZ scc_done
	TESTQ R9, R9
	JZ scc_plain
scc_relu:
	SCC_LOAD
	VMAXPS Y5, Y0, Y0
	VMAXPS Y5, Y3, Y3
	SCC_STORE
	DECQ CX
	JNZ scc_relu
	JMP scc_done
scc_plain:
	SCC_LOAD
	SCC_STORE
	DECQ CX
	JNZ scc_plain
scc_done:
	VZEROUPPER
	RET

// maxRange3s2 is the even (then odd) element indexes of two zmm tables, for VPERMI2PS.
DATA maxRange3s2<>+0(SB)/4, $0
DATA maxRange3s2<>+4(SB)/4, $2
DATA maxRange3s2<>+8(SB)/4, $4
DATA maxRange3s2<>+12(SB)/4, $6
DATA maxRange3s2<>+16(SB)/4, $8
DATA maxRange3s2<>+20(SB)/4, $10
DATA maxRange3s2<>+24(SB)/4, $12
DATA maxRange3s2<>+28(SB)/4, $14
DATA maxRange3s2<>+32(SB)/4, $16
DATA maxRange3s2<>+36(SB)/4, $18
DATA maxRange3s2<>+40(SB)/4, $20
DATA maxRange3s2<>+44(SB)/4, $22
DATA maxRange3s2<>+48(SB)/4, $24
DATA maxRange3s2<>+52(SB)/4, $26
DATA maxRange3s2<>+56(SB)/4, $28
DATA maxRange3s2<>+60(SB)/4, $30
DATA maxRange3s2<>+64(SB)/4, $1
DATA maxRange3s2<>+68(SB)/4, $3
DATA maxRange3s2<>+72(SB)/4, $5
DATA maxRange3s2<>+76(SB)/4, $7
DATA maxRange3s2<>+80(SB)/4, $9
DATA maxRange3s2<>+84(SB)/4, $11
DATA maxRange3s2<>+88(SB)/4, $13
DATA maxRange3s2<>+92(SB)/4, $15
DATA maxRange3s2<>+96(SB)/4, $17
DATA maxRange3s2<>+100(SB)/4, $19
DATA maxRange3s2<>+104(SB)/4, $21
DATA maxRange3s2<>+108(SB)/4, $23
DATA maxRange3s2<>+112(SB)/4, $25
DATA maxRange3s2<>+116(SB)/4, $27
DATA maxRange3s2<>+120(SB)/4, $29
DATA maxRange3s2<>+124(SB)/4, $31
GLOBL maxRange3s2<>(SB), RODATA|NOPTR, $128

// func maxRange3s2_32(o, v *float32, n int): maxNaN3s2_32 with VRANGEPS (see maxRange32),
// sixteen outputs a round: v's even and odd elements (and the even ones two on) gathered
// from two vectors each by VPERMI2PS, then maxRange3_32's three-way max. Reads v[0 … 2n+1].
// n a multiple of 16.
TEXT ·maxRange3s2_32(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ maxr3s2_done
	VMOVUPS maxRange3s2<>+0(SB), Z28
	VMOVUPS maxRange3s2<>+64(SB), Z29
maxr3s2_loop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 8(SI), Z2
	VMOVUPS 72(SI), Z3
	VMOVAPS Z28, Z4
	VPERMI2PS Z1, Z0, Z4
	VMOVAPS Z29, Z5
	VPERMI2PS Z1, Z0, Z5
	VMOVAPS Z28, Z6
	VPERMI2PS Z3, Z2, Z6
	VRANGEPS $5, Z5, Z4, Z7
	VRANGEPS $5, Z6, Z7, Z7
	VCMPPS $3, Z5, Z4, K1
	VCMPPS $3, Z6, Z6, K2
	KORW K1, K2, K1
	VADDPS Z5, Z4, Z8
	VADDPS Z6, Z8, K1, Z7
	VMOVUPS Z7, (DI)
	ADDQ $128, SI
	ADDQ $64, DI
	DECQ CX
	JNZ maxr3s2_loop
maxr3s2_done:
	VZEROUPPER
	RET

// func maxRange2s2_32(o, v *float32, n int): o[j] = Go's builtin max of v[2j] and v[2j+1]
// with VRANGEPS (see maxRange32), sixteen outputs a round from v's even and odd elements
// (VPERMI2PS). Reads v[0 … 2n−1]. n a multiple of 16.
TEXT ·maxRange2s2_32(SB), NOSPLIT, $0-24
	MOVQ o+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ maxr2s2_done
	VMOVUPS maxRange3s2<>+0(SB), Z28
	VMOVUPS maxRange3s2<>+64(SB), Z29
maxr2s2_loop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVAPS Z28, Z4
	VPERMI2PS Z1, Z0, Z4
	VMOVAPS Z29, Z5
	VPERMI2PS Z1, Z0, Z5
	VRANGEPS $5, Z5, Z4, Z7
	VCMPPS $3, Z5, Z4, K1
	VADDPS Z5, Z4, K1, Z7
	VMOVUPS Z7, (DI)
	ADDQ $128, SI
	ADDQ $64, DI
	DECQ CX
	JNZ maxr2s2_loop
maxr2s2_done:
	VZEROUPPER
	RET

// func gatherEvenRows32(o, v *float32, wo, rows, ldv int)
// o[r·wo + j] = v[r·ldv + 2j] for r < rows, j < wo (AVX-512): sixteen a round by VPERMI2PS
// on two vectors of the row, the row's last wo mod 16 outputs by masked loads and a masked store, which
// read only the 2t − 1 elements the t outputs need and write nothing past the row.
TEXT ·gatherEvenRows32(SB), NOSPLIT, $0-40
	MOVQ o+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ wo+16(FP), R8
	MOVQ rows+24(FP), R9
	MOVQ ldv+32(FP), R10
	SHLQ $2, R10
	TESTQ R9, R9
	JZ gevr_done
	VMOVUPS maxRange3s2<>+0(SB), Z28
	// The tail's masks: K1 its t outputs, K2 and K3 the 2t − 1 source elements.
	MOVQ R8, CX
	ANDQ $15, CX
	MOVQ CX, R12
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	LEAQ -1(CX)(CX*1), CX
	MOVQ $1, BX
	SHLQ CX, BX
	DECQ BX
	KMOVW BX, K2
	SHRQ $16, BX
	KMOVW BX, K3
gevr_row:
	MOVQ SI, R11
	MOVQ R8, CX
	SHRQ $4, CX
	JZ gevr_tail
gevr_loop:
	VMOVUPS (R11), Z0
	VMOVUPS 64(R11), Z1
	VMOVAPS Z28, Z4
	VPERMI2PS Z1, Z0, Z4
	VMOVUPS Z4, (DI)
	ADDQ $128, R11
	ADDQ $64, DI
	DECQ CX
	JNZ gevr_loop
gevr_tail:
	TESTQ R12, R12
	JZ gevr_next
	VMOVUPS.Z (R11), K2, Z0
	VMOVUPS.Z 64(R11), K3, Z1
	VMOVAPS Z28, Z4
	VPERMI2PS Z1, Z0, Z4
	VMOVUPS Z4, K1, (DI)
	LEAQ (DI)(R12*4), DI
gevr_next:
	ADDQ R10, SI
	DECQ R9
	JNZ gevr_row
gevr_done:
	VZEROUPPER
	RET
