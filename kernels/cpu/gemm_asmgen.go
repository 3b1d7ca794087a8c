//go:build ignore

// gemm_asmgen.go writes gemm_amd64.s: the register-blocked GEMM micro-kernels. They are
// generated because each one is the same k-loop unrolled over an mr×nr tile of accumulators,
// and writing several hundred near-identical FMA lines by hand invites register typos.
//
//	go run gemm_asmgen.go
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

var out bytes.Buffer

func p(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }

// kernel describes one micro-kernel: mr rows × nv vectors of lanes elements.
type kernel struct {
	name   string
	mr, nv int
	reg    string // "Y" or "Z"
	lanes  int
	double bool
	// indirect: B is not packed; step p reads its nr values at b + offs[p] (bytes), a table
	// of int64 — convolution reading the padded image in place (convIndirect).
	indirect bool
	// bvecs is the packed B sliver's width in vectors when it is wider than the tile (0: nv):
	// a narrow kernel for a panel's last columns reads the first nv vectors of each row of
	// the full kernel's sliver.
	bvecs int
	// walk "down": the kernel computes tiles tiles down a column of C, one after another (an
	// extra int argument after bias): tile t reads the A sliver after tile t−1's (the packed
	// block's next), the same B sliver, and writes C and bias mr rows further on. "across":
	// tiles along a row of C: the same A sliver, the next B sliver, C nr columns further on.
	// A call per tile cost a tenth of the time of a tile with k = 64 (ResNet's 1×1 layers on
	// 64 channels), and each tile prefetches the next one's C a whole tile ahead.
	walk string
	// astep is the packed A sliver's rows a step where the tile has fewer (0: mr): a kernel
	// for a block's last rows reads the first mr rows of the full kernel's sliver.
	astep int
	// bsl, where the tile spans two packed B slivers, is a sliver's width in vectors: vectors
	// bsl… come from the sliver bstride elements on (an extra int argument after bias). Two
	// rows of a block's end take 2×32 (eight accumulators, enough for the FMAs' latency),
	// not a 6×16 tile with four rows of zeros.
	bsl int
}

// bstep is the bytes between consecutive rows of the packed B sliver.
func (k kernel) bstep() int {
	if k.bsl > 0 {
		return k.bsl * k.lanes * k.es()
	}
	return max(k.bvecs, k.nv) * k.lanes * k.es()
}

// as is the packed A sliver's rows a step.
func (k kernel) as() int { return max(k.astep, k.mr) }

func (k kernel) es() int { // element size in bytes
	if k.double {
		return 8
	}
	return 4
}
func (k kernel) sfx() string {
	if k.double {
		return "PD"
	}
	return "PS"
}
func (k kernel) bcast() string {
	if k.double {
		return "VBROADCASTSD"
	}
	return "VBROADCASTSS"
}
func (k kernel) r(i int) string { return fmt.Sprintf("%s%d", k.reg, i) }

// Register plan: accumulators 0..mr*nv-1, then nv B vectors, then two broadcast registers
// (alternating, so consecutive rows' broadcasts do not serialise on one register).
func (k kernel) acc(i, v int) string { return k.r(i*k.nv + v) }
func (k kernel) breg(v int) string   { return k.r(k.mr*k.nv + v) }
func (k kernel) areg(i int) string   { return k.r(k.mr*k.nv + k.nv + i%2) }

func (k kernel) step(u int) {
	es := k.es()
	vb := k.lanes * es
	if k.indirect {
		p("\tMOVQ %d(R11), R12", u*8)
		for v := 0; v < k.nv; v++ {
			p("\tVMOVUPS %d(DI)(R12*1), %s", v*vb, k.breg(v))
		}
	} else {
		for v := 0; v < k.nv; v++ {
			if k.bsl > 0 && v >= k.bsl { // the second sliver
				p("\tVMOVUPS %d(DI)(R13*1), %s", u*k.bstep()+(v-k.bsl)*vb, k.breg(v))
				continue
			}
			p("\tVMOVUPS %d(DI), %s", u*k.bstep()+v*vb, k.breg(v))
		}
	}
	for i := 0; i < k.mr; i++ {
		p("\t%s %d(SI), %s", k.bcast(), (u*k.as()+i)*es, k.areg(i))
		for v := 0; v < k.nv; v++ {
			p("\tVFMADD231%s %s, %s, %s", k.sfx(), k.breg(v), k.areg(i), k.acc(i, v))
		}
	}
}

func (k kernel) gen() {
	es, nr := k.es(), k.nv*k.lanes
	vb := k.lanes * es
	shift := 2
	betaOff, modeOff, biasOff, argSize := 44, 48, 56, 64
	if k.double {
		shift, betaOff, modeOff, biasOff, argSize = 3, 48, 56, 64, 72
	}
	offsOff, tilesOff, bstrideOff := argSize, argSize, argSize
	if k.indirect || k.walk != "" || k.bsl > 0 {
		argSize += 8
	}
	typ := "float32"
	if k.double {
		typ = "float64"
	}
	if k.indirect {
		p("// func %s(k int, a, b, c unsafe.Pointer, ldc int, alpha, beta %s, mode int, bias, offs unsafe.Pointer)", k.name, typ)
		p("// As the packed kernel, but B's row p is the %d values at b + offs[p] bytes (offs: k int64s).", nr)
	} else if k.walk == "down" {
		p("// func %s(k int, a, b, c unsafe.Pointer, ldc int, alpha, beta %s, mode int, bias unsafe.Pointer, tiles int)", k.name, typ)
		p("// As the packed kernel, for tiles tiles down C: tile t reads A's sliver t (a + t·k·%d·%d bytes),", k.mr, es)
		p("// B, and writes C's rows and adds bias's elements %d·t on.", k.mr)
	} else if k.walk == "across" {
		p("// func %s(k int, a, b, c unsafe.Pointer, ldc int, alpha, beta %s, mode int, bias unsafe.Pointer, tiles int)", k.name, typ)
		p("// As the packed kernel, for tiles tiles along C: tile t reads A and B's sliver t (b + t·k·%d·%d", nr, es)
		p("// bytes), and writes C's columns %d·t on.", nr)
	} else if k.bsl > 0 {
		p("// func %s(k int, a, b, c unsafe.Pointer, ldc int, alpha, beta %s, mode int, bias unsafe.Pointer, bstride int)", k.name, typ)
		p("// C[0:%d, 0:%d] = alpha·A·B (+ beta·C) (+ bias[i] on row i): A's first %d rows of a sliver packed k×%d,", k.mr, nr, k.mr, k.as())
		p("// B two slivers packed k×%d, the second bstride elements after the first.", k.bstep()/es)
	} else {
		p("// func %s(k int, a, b, c unsafe.Pointer, ldc int, alpha, beta %s, mode int, bias unsafe.Pointer)", k.name, typ)
		p("// C[0:%d, 0:%d] = alpha·A·B (+ beta·C) (+ bias[i] on row i): A packed k×%d, B packed k×%d, C row-major with ldc elements.", k.mr, nr, k.as(), k.bstep()/es)
		if k.bvecs > k.nv {
			p("// (B's first %d columns: a panel's last columns, in the %d-wide kernel's sliver.)", nr, k.bstep()/es)
		}
	}
	p("TEXT ·%s(SB), NOSPLIT, $0-%d", k.name, argSize)
	if k.indirect {
		p("\tMOVQ offs+%d(FP), R11", offsOff)
	}
	if k.bsl > 0 {
		if k.walk != "" || k.indirect || k.bsl >= k.nv || k.nv-k.bsl > k.bsl {
			panic("a two-sliver kernel is a packed kernel of one tile, its first bsl vectors from one sliver and the rest from the next")
		}
		p("\tMOVQ bstride+%d(FP), R13", bstrideOff)
		p("\tSHLQ $%d, R13", shift)
	}
	p("\tMOVQ k+0(FP), CX")
	p("\tMOVQ a+8(FP), SI")
	p("\tMOVQ b+16(FP), DI")
	p("\tMOVQ c+24(FP), DX")
	p("\tMOVQ ldc+32(FP), R8")
	p("\tSHLQ $%d, R8", shift)
	if k.walk != "" && (k.mr != 6 || k.double || k.indirect) {
		panic("walking kernels are 6-row float32 packed kernels (the address arithmetic below)")
	}
	if k.walk != "" {
		// R11 counts the tiles done (across: R12 is the tile's C). The first tile's C is
		// prefetched here; each tile prefetches the next one's as it starts.
		p("\tXORQ R11, R11")
		p("\tMOVQ DX, R12")
		p("\tMOVQ DX, R9")
		for i := 0; i < k.mr; i++ {
			p("\tPREFETCHT0 (R9)")
			p("\tPREFETCHT0 %d(R9)", nr*es-1)
			p("\tADDQ R8, R9")
		}
		p("%s_tile:", k.name)
		p("\tMOVQ k+0(FP), CX")
		if k.walk == "down" { // SI is at the next sliver and DX at the next tile's rows already
			p("\tMOVQ b+16(FP), DI")
		} else { // DI is at the next sliver
			p("\tMOVQ a+8(FP), SI")
			p("\tMOVQ R12, DX")
		}
	}
	for i := 0; i < k.mr*k.nv; i++ {
		if k.reg == "Z" {
			p("\tVPXORD %s, %s, %s", k.r(i), k.r(i), k.r(i))
		} else {
			p("\tVXORPS %s, %s, %s", k.r(i), k.r(i), k.r(i))
		}
	}
	// Touch C early so its lines arrive while the k-loop runs (walking: the next tile's C).
	p("\tMOVQ DX, R9")
	switch k.walk {
	case "down":
		p("\tLEAQ (R8)(R8*2), R10")
		p("\tLEAQ (R9)(R10*2), R9")
	case "across":
		p("\tADDQ $%d, R9", nr*es)
	}
	for i := 0; i < k.mr; i++ {
		p("\tPREFETCHT0 (R9)")
		p("\tPREFETCHT0 %d(R9)", nr*es-1)
		p("\tADDQ R8, R9")
	}
	// And the residual's tile (modes 7 and 8: the mode's bits above the fourth are its
	// offset from C, zero in other modes): read in the store, where its misses stalled every
	// tile — the residual add in the store ran slower than a pass over C after the GEMM.
	p("\tMOVQ mode+%d(FP), R10", modeOff)
	p("\tSARQ $4, R10")
	p("\tJEQ %s_nores", k.name)
	for i := 0; i < k.mr; i++ {
		p("\tPREFETCHT0 (R9)(R10*1)")
		p("\tPREFETCHT0 %d(R9)(R10*1)", nr*es-1)
		if i < k.mr-1 {
			p("\tADDQ R8, R9")
		}
	}
	p("%s_nores:", k.name)
	// Every line of the packed B sliver is prefetched 16 steps ahead. Where tiles go along C's
	// rows (2048³ and up) each call streams its B sliver from L3; one prefetch per four steps
	// left three lines in four to the hardware prefetcher, and prefetching each line ran
	// 1024³–4096³ 3–6% faster at one thread on Zen 3 (8 steps ahead: 2048³ 2% less; 32: none).
	pre := func(u int) {
		if !k.indirect && (u*k.bstep())%64 == 0 {
			for l := 0; l < (k.bstep()+63)/64; l++ {
				p("\tPREFETCHT0 %d(DI)", (16+u)*k.bstep()+64*l)
				if k.bsl > 0 {
					p("\tPREFETCHT0 %d(DI)(R13*1)", (16+u)*k.bstep()+64*l)
				}
			}
		}
		// A's lines 64 steps ahead (8-row float32 slivers: a line every two steps), into the
		// next sliver near a slab's end, which the next tile down the column reads: a
		// network's weights, packed once (ConvFilter), come from memory, and each A sliver's
		// first tile took its misses. 16 steps ahead, one thread, in ResNet-50 (Zen 5, three
		// alternating runs): the 1×1 layers on 7 × 7 1.24–1.33× faster, on 14 × 14
		// 1.05–1.10×, the step 48.4 → 45.2–46.2 ms. 64 steps (about 500 cycles: a miss to
		// memory) against 16, ResNet-50's 32 1×1 layers in turn with their ReLUs, medians of
		// seven alternating runs: 1.06× at two threads, 1.04× at one (32 steps: 1.05×; 128
		// and 256: as 64); 1024³ and 2048³ within ±1%.
		if !k.double && k.as() == 8 && (u*k.as()*es)%64 == 0 {
			p("\tPREFETCHT0 %d(SI)", (64+u)*k.as()*es)
		}
	}
	adv := func(n int) {
		p("\tADDQ $%d, SI", n*k.as()*es)
		if k.indirect {
			p("\tADDQ $%d, R11", 8*n)
		} else {
			p("\tADDQ $%d, DI", n*k.bstep())
		}
	}
	kLoop(k.name, "store", pre, k.step, adv)
	p("%s_store:", k.name)
	alpha, beta, bias := k.areg(0), k.areg(1), k.breg(0)
	p("\t%s alpha+40(FP), %s", k.bcast(), alpha)
	// The mode's low four bits are the mode; the rest (an arithmetic shift) is modes 7 and
	// 8's residual offset in bytes from C (R10).
	p("\tMOVQ mode+%d(FP), AX", modeOff)
	p("\tMOVQ AX, R10")
	p("\tSARQ $4, R10")
	p("\tANDQ $15, AX")
	p("\tMOVQ bias+%d(FP), BX", biasOff)
	if k.walk == "down" { // this tile's bias: BX + R11·mr elements
		p("\tLEAQ (R11)(R11*2), R9")
		p("\tLEAQ (BX)(R9*%d), BX", 2*es)
	}
	// Modes 3 and 4 are 0 and 1 followed by adding bias[i] to row i: the bias comes after
	// the whole sum, in the same rounding as a separate pass over C. Modes 5 and 6 are 3
	// and 4 followed by max(·, 0), a ReLU (a convolution's epilogue, gemmEpi's relu): the
	// maximum with +0 as the second operand gives +0 for −0 and NaN, as ReluRow does. Modes
	// 7 and 8 are 5 and 6 with a residual of C's layout, R10 bytes on from C, added after
	// the bias and before the ReLU (ResNet's add and ReLU after a block's last convolution).
	for _, c := range []struct {
		mode   int
		eq, gt string // the epilogues of mode and of mode + 1 (or of any above: general)
	}{{7, "bias0resrelu", "bias1resrelu"}, {5, "bias0relu", "bias1relu"}, {3, "bias0", "bias1"}, {1, "add", "general"}} {
		p("\tCMPQ AX, $%d", c.mode)
		p("\tJEQ %s_%s", k.name, c.eq)
		p("\tJGT %s_%s", k.name, c.gt)
	}
	// The epilogues: each row's accumulators scaled by alpha, plus what the mode adds.
	epi := func(label string, body func(i, v int)) {
		p("%s_%s:", k.name, label)
		if strings.HasSuffix(label, "relu") { // beta's register holds the +0 (no beta here)
			xor := "VXORPS"
			if k.reg == "Z" {
				xor = "VPXORD" // VXORPS on 512 bits needs AVX512DQ
			}
			p("\t%s %s, %s, %s", xor, beta, beta, beta)
		}
		for i := 0; i < k.mr; i++ {
			if strings.HasPrefix(label, "bias") {
				p("\t%s %d(BX), %s", k.bcast(), i*es, bias)
			}
			for v := 0; v < k.nv; v++ {
				p("\tVMUL%s %s, %s, %s", k.sfx(), alpha, k.acc(i, v), k.acc(i, v))
				body(i, v)
				p("\tVMOVUPS %s, %d(DX)", k.acc(i, v), v*vb)
			}
			p("\tADDQ R8, DX")
		}
		p("\tJMP %s_done", k.name)
	}
	addC := func(i, v int) { p("\tVADD%s %d(DX), %s, %s", k.sfx(), v*vb, k.acc(i, v), k.acc(i, v)) }
	addBias := func(i, v int) { p("\tVADD%s %s, %s, %s", k.sfx(), bias, k.acc(i, v), k.acc(i, v)) }
	// mode 0: overwrite C (beta == 0: never read C, so NaNs in it do not leak through).
	epi("zero", func(i, v int) {})
	epi("add", addC)         // mode 1: beta == 1
	p("%s_general:", k.name) // mode 2: any other beta
	p("\t%s beta+%d(FP), %s", k.bcast(), betaOff, beta)
	for i := 0; i < k.mr; i++ {
		for v := 0; v < k.nv; v++ {
			p("\tVMUL%s %s, %s, %s", k.sfx(), alpha, k.acc(i, v), k.acc(i, v))
			p("\tVFMADD231%s %d(DX), %s, %s", k.sfx(), v*vb, beta, k.acc(i, v))
			p("\tVMOVUPS %s, %d(DX)", k.acc(i, v), v*vb)
		}
		p("\tADDQ R8, DX")
	}
	p("\tJMP %s_done", k.name)
	epi("bias0", addBias)                                      // mode 3
	epi("bias1", func(i, v int) { addC(i, v); addBias(i, v) }) // mode 4
	relu := func(i, v int) { p("\tVMAX%s %s, %s, %s", k.sfx(), beta, k.acc(i, v), k.acc(i, v)) }
	addRes := func(i, v int) { p("\tVADD%s %d(DX)(R10*1), %s, %s", k.sfx(), v*vb, k.acc(i, v), k.acc(i, v)) }
	epi("bias0relu", func(i, v int) { addBias(i, v); relu(i, v) })                              // mode 5
	epi("bias1relu", func(i, v int) { addC(i, v); addBias(i, v); relu(i, v) })                  // mode 6
	epi("bias0resrelu", func(i, v int) { addBias(i, v); addRes(i, v); relu(i, v) })             // mode 7
	epi("bias1resrelu", func(i, v int) { addC(i, v); addBias(i, v); addRes(i, v); relu(i, v) }) // mode 8
	p("%s_done:", k.name)
	if k.walk == "across" {
		p("\tADDQ $%d, R12", nr*es)
	}
	if k.walk != "" {
		p("\tINCQ R11")
		p("\tCMPQ R11, tiles+%d(FP)", tilesOff)
		p("\tJLT %s_tile", k.name)
	}
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// bcast writes a kernel of convBcast (gemmKernS6x16AVX2Bcast, gemmKernS8x32AVX512Bcast and
// its 7-row twin, whose tiles cover 7 × 7 and 14 × 14 planes exactly):
// C's rows are mr output positions of a convolution and its columns nv vectors of output
// channels, so A — the image — is broadcast element by element, read in place at x + pos[i]
// + offs[p] bytes (row i, step p), and B is the weights packed k×nr. Because A's values are
// broadcast, not loaded as vectors, a stride or dilation costs nothing (the vector kernels
// would gather). The k loop is the packed kernel's (one FMA chain per accumulator, in p
// order), so the bits are the same; the store is mode 0 (C = acc) or 1 (C += acc), without
// alpha, beta or bias.
func bcast(name string, mr, nv int, reg string, lanes int) {
	// A row's base address each (x + pos[i]); R9 holds x until the last one is formed.
	bases := []string{"SI", "AX", "BX", "DX", "R8", "R13", "R15", "R9"}[:mr]
	if mr < 6 || mr > 8 || mr*nv+nv+2 > map[string]int{"Y": 16, "Z": 32}[reg] {
		panic("bcast: 6 to 8 rows, and the accumulators, B and two broadcasts in the registers")
	}
	if mr == 6 {
		bases[5] = "R13"
	}
	r := func(i int) string { return fmt.Sprintf("%s%d", reg, i) }
	acc := func(i, v int) string { return r(i*nv + v) }
	vb, nr := 4*lanes, nv*lanes
	at := func(off int) string { // (DX) as the hand-written AVX2 kernel had it, off(DX)
		if off == 0 {
			return "(DX)"
		}
		return fmt.Sprintf("%d(DX)", off)
	}
	bstep := 4 * nr
	step := func(u int) {
		p("\tMOVQ %d(R11), R12", u*8)
		for v := 0; v < nv; v++ {
			p("\tVMOVUPS %d(DI), %s", u*bstep+v*vb, r(mr*nv+v))
		}
		for i, b := range bases {
			a := r(mr*nv + nv + i%2)
			p("\tVBROADCASTSS (%s)(R12*1), %s", b, a)
			for v := 0; v < nv; v++ {
				p("\tVFMADD231PS %s, %s, %s", r(mr*nv+v), a, acc(i, v))
			}
		}
	}
	p("// func %s(k int, x, pos, b, c unsafe.Pointer, ldc, mode int, offs unsafe.Pointer)", name)
	p("// C[0:%d, 0:%d] = (C +) Σ_p x[pos[i] + offs[p]]·B[p, 0:%d]: pos %d int64 and offs k int64", mr, nr, nr, mr)
	p("// byte offsets into x, B packed k×%d, C row-major with ldc elements; mode 0 or 1.", nr)
	p("TEXT ·%s(SB), NOSPLIT, $0-64", name)
	p("\tMOVQ c+32(FP), DX")
	p("\tMOVQ ldc+40(FP), R8")
	p("\tSHLQ $2, R8")
	for i := 0; i < mr; i++ { // touch C early so its lines arrive while the k loop runs
		p("\tPREFETCHT0 (DX)")
		p("\tPREFETCHT0 %d(DX)", bstep-1)
		p("\tADDQ R8, DX")
	}
	for i := 0; i < mr*nv; i++ {
		if reg == "Z" {
			p("\tVPXORD %s, %s, %s", r(i), r(i), r(i))
		} else {
			p("\tVXORPS %s, %s, %s", r(i), r(i), r(i))
		}
	}
	p("\tMOVQ k+0(FP), CX")
	p("\tMOVQ x+8(FP), R9")
	p("\tMOVQ pos+16(FP), R12")
	p("\tMOVQ b+24(FP), DI")
	p("\tMOVQ offs+56(FP), R11")
	for i, b := range bases {
		if b == "R9" {
			p("\tADDQ %d(R12), R9", i*8)
			continue
		}
		p("\tMOVQ %d(R12), %s", i*8, b)
		p("\tADDQ R9, %s", b)
	}
	// B's lines 64 steps ahead: a late layer's weights (9 MiB on ResNet's 512-channel 3×3
	// layers) come from memory, a sliver's first tile taking each line's miss. Against 16
	// steps ahead, ResNet-50's 3×3 and 7×7 layers in turn: 1.01–1.02× at one and two threads
	// (Zen 5, medians of five and seven alternating runs), as the packed kernels' A.
	pre := func(u int) {
		if (u*bstep)%64 == 0 {
			for l := 0; l < (bstep+63)/64; l++ {
				p("\tPREFETCHT0 %d(DI)", (64+u)*bstep+64*l)
			}
		}
	}
	kLoop(name, "store", pre, step, func(n int) {
		p("\tADDQ $%d, R11", 8*n)
		p("\tADDQ $%d, DI", n*bstep)
	})
	p("%s_store:", name)
	p("\tMOVQ c+32(FP), DX")
	p("\tMOVQ ldc+40(FP), R8")
	p("\tSHLQ $2, R8")
	p("\tMOVQ mode+48(FP), AX")
	p("\tTESTQ AX, AX")
	p("\tJNZ %s_add", name)
	for i := 0; i < mr; i++ {
		for v := 0; v < nv; v++ {
			p("\tVMOVUPS %s, %s", acc(i, v), at(v*vb))
		}
		p("\tADDQ R8, DX")
	}
	p("\tJMP %s_done", name)
	p("%s_add:", name)
	for i := 0; i < mr; i++ {
		for v := 0; v < nv; v++ {
			p("\tVADDPS %s, %s, %s", at(v*vb), acc(i, v), acc(i, v))
		}
		for v := 0; v < nv; v++ {
			p("\tVMOVUPS %s, %s", acc(i, v), at(v*vb))
		}
		p("\tADDQ R8, DX")
	}
	p("%s_done:", name)
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// colKernel emits gemmColS<s>AVX2 (rows 6) and gemmColS<s>AVX512 (rows 8, for the AVX-512
// kernel's slivers; the instructions are AVX2's): one column of C for s rows-row A slivers at
// once — a GEMM's last columns when they are few (n mod nr of 1 to gemmColOne, after the
// half kernel's nr/2: a 7 × 7 plane's 49th column), where a tile kernel spent as long on
// the one column as on nr/2 or nr. Lanes are rows: step p loads the sliver's values of A
// (six rows: its 8-wide load's last two lanes are the next step's and are never stored)
// and multiplies them by B's one value, broadcast. Each row is one FMA chain in p order
// from zero, as in the tile kernels, so the values are theirs bit for bit; s independent
// chains (8 for full speed) hide the FMA's latency, where a tile kernel's accumulators
// could not. With six rows the last step's loads and the stores are masked to six lanes,
// so nothing past the last sliver's k steps or past t[6s) is touched. t gets row r of
// sliver i at t[rows·i + r], unscaled: the caller applies alpha, beta and bias.
func colKernel(s, rows int) {
	name := fmt.Sprintf("gemmColS%dAVX2", s)
	bstep := 64 // B's row: the packed sliver's nr values
	if rows == 8 {
		name, bstep = fmt.Sprintf("gemmColS%dAVX512", s), 128
	}
	astep := 4 * rows
	masked := rows != 8
	// Sliver i's current step: SI + i·astride, from three moving bases.
	addr := []string{"(SI)", "(SI)(R9*1)", "(SI)(R9*2)", "(R13)", "(R12)", "(R12)(R9*1)", "(R12)(R9*2)", "(R13)(R9*4)"}
	at := func(i, off int) string {
		if off == 0 {
			return addr[i]
		}
		return fmt.Sprintf("%d%s", off, addr[i])
	}
	adv := func(n int) {
		p("\tADDQ $%d, SI", astep*n)
		if s > 4 {
			p("\tADDQ $%d, R12", astep*n)
		}
		if s > 3 {
			p("\tADDQ $%d, R13", astep*n)
		}
		p("\tADDQ $%d, DI", bstep*n)
	}
	p("// func %s(k int, a, b unsafe.Pointer, astride int, t unsafe.Pointer)", name)
	p("// t[%di + r] = Σ_p A_i[p, r]·B[p] for %d slivers A_i (packed k×%d, astride bytes apart) and B", rows, s, rows)
	p("// a column of the %d-wide packed B sliver (k values %d bytes apart); k ≥ 1.", bstep/4, bstep)
	p("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	p("\tMOVQ k+0(FP), CX")
	p("\tMOVQ a+8(FP), SI")
	p("\tMOVQ b+16(FP), DI")
	p("\tMOVQ astride+24(FP), R9")
	if s > 4 {
		p("\tLEAQ (SI)(R9*4), R12")
	}
	if s > 3 {
		p("\tLEAQ (SI)(R9*2), R13")
		p("\tADDQ R9, R13")
	}
	for i := 0; i < s; i++ {
		p("\tVXORPS Y%d, Y%d, Y%d", i, i, i)
	}
	if masked {
		p("\tVPCMPEQD Y14, Y14, Y14") // lanes 0-5 set, 6-7 clear
		p("\tVXORPS Y13, Y13, Y13")
		p("\tVBLENDPS $0xc0, Y13, Y14, Y14")
		p("\tDECQ CX") // the last step is the masked one
	}
	kLoop(name, "last", nil, func(u int) {
		p("\tVBROADCASTSS %d(DI), Y15", bstep*u)
		for i := 0; i < s; i++ {
			p("\tVFMADD231PS %s, Y15, Y%d", at(i, astep*u), i)
		}
	}, adv)
	p("%s_last:", name)
	if masked {
		p("\tVBROADCASTSS (DI), Y15")
		for i := 0; i < s; i++ {
			p("\tVMASKMOVPS %s, Y14, Y13", at(i, 0))
			p("\tVFMADD231PS Y13, Y15, Y%d", i)
		}
	}
	p("\tMOVQ t+32(FP), DX")
	for i := 0; i < s; i++ {
		if masked {
			p("\tVMASKMOVPS Y%d, Y14, %d(DX)", i, 24*i)
		} else {
			p("\tVMOVUPS Y%d, %d(DX)", i, 32*i)
		}
	}
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// col4Kernel emits gemmCol4S<s>AVX512: four columns of C for s 8-row A slivers at once — a
// GEMM's last three or four columns (a 14 × 14 plane's 196 = 6·32 + 4), which the 8×16 half
// tile computed at nearly a full tile's cost (its eight broadcasts a step feed eight FMAs,
// twelve of its sixteen columns wasted) and the one-column kernel reads the A block for
// four times. Lanes are rows: step p loads each sliver's eight values of A once and
// multiplies them by B's four values, each broadcast, into 4s accumulators (Y0…Y15; A in
// Y16…, B in Y20…, which need AVX-512VL). Each row and column is one FMA chain in p order
// from zero, as in the tile kernels, so the values are theirs bit for bit. t gets column j
// of sliver i's rows at t[8s·j + 8i], unscaled: the caller applies alpha, beta and bias.
// B's four columns must lie in one packed sliver (a panel's last columns start at a
// multiple of nr/2).
func col4Kernel(s int) {
	name := fmt.Sprintf("gemmCol4S%dAVX512", s)
	const bstep, astep = 128, 32
	addr := []string{"(SI)", "(SI)(R9*1)", "(SI)(R9*2)", "(R13)"}
	at := func(i, off int) string {
		if off == 0 {
			return addr[i]
		}
		return fmt.Sprintf("%d%s", off, addr[i])
	}
	step := func(u int) {
		for i := 0; i < s; i++ {
			p("\tVMOVUPS %s, Y%d", at(i, astep*u), 16+i)
		}
		for j := 0; j < 4; j++ {
			p("\tVBROADCASTSS %d(DI), Y%d", bstep*u+4*j, 20+j)
			for i := 0; i < s; i++ {
				p("\tVFMADD231PS Y%d, Y%d, Y%d", 16+i, 20+j, 4*i+j)
			}
		}
	}
	adv := func(n int) {
		p("\tADDQ $%d, SI", astep*n)
		if s > 3 {
			p("\tADDQ $%d, R13", astep*n)
		}
		p("\tADDQ $%d, DI", bstep*n)
	}
	p("// func %s(k int, a, b unsafe.Pointer, astride int, t unsafe.Pointer)", name)
	p("// t[%dj + 8i + r] = Σ_p A_i[p, r]·B[p, j] for %d slivers A_i (packed k×8, astride bytes", 8*s, s)
	p("// apart) and four columns B[·, j] of the 32-wide packed B sliver (rows 128 bytes apart); k ≥ 1.")
	p("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	p("\tMOVQ k+0(FP), CX")
	p("\tMOVQ a+8(FP), SI")
	p("\tMOVQ b+16(FP), DI")
	p("\tMOVQ astride+24(FP), R9")
	if s > 3 {
		p("\tLEAQ (SI)(R9*2), R13")
		p("\tADDQ R9, R13")
	}
	for i := 0; i < 4*s; i++ {
		p("\tVXORPS Y%d, Y%d, Y%d", i, i, i)
	}
	kLoop(name, "store", nil, step, adv)
	p("%s_store:", name)
	p("\tMOVQ t+32(FP), DX")
	for j := 0; j < 4; j++ {
		for i := 0; i < s; i++ {
			p("\tVMOVUPS Y%d, %d(DX)", 4*i+j, 4*(8*s*j+8*i))
		}
	}
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// copyRows emits gemmCopyRowsAVX's loops (its dispatch is in main's text above): each run
// of a row is loaded whole and then stored, from SI to DI, SI and DI then advanced by DX and
// R8 bytes, CX times. The copyY and copyX loops end with a vector at BX, the run's end minus
// a vector, overlapping the one before.
func copyRows() {
	type move struct{ op, at, reg string }
	y := func(at string, reg int) move { return move{"VMOVUPS", at, fmt.Sprintf("Y%d", reg)} }
	loops := []struct {
		label string
		moves []move
	}{
		{"copyY4", []move{y("(%s)", 0), y("32(%s)", 1), y("64(%s)", 2), y("(%s)(BX*1)", 3)}},
		{"copyY3", []move{y("(%s)", 0), y("32(%s)", 1), y("(%s)(BX*1)", 3)}},
		{"copyY2", []move{y("(%s)", 0), y("(%s)(BX*1)", 3)}},
		{"copyX2", []move{{"VMOVUPS", "(%s)", "X0"}, {"VMOVUPS", "(%s)(BX*1)", "X3"}}},
		{"copy128", []move{y("(%s)", 0), y("32(%s)", 1), y("64(%s)", 2), y("96(%s)", 3)}},
		{"copy64", []move{y("(%s)", 0), y("32(%s)", 1)}},
		{"copy24", []move{{"VMOVUPS", "(%s)", "X0"}, {"VMOVSD", "16(%s)", "X1"}}},
		{"copy48", []move{y("(%s)", 0), {"VMOVUPS", "32(%s)", "X1"}}},
	}
	for i, l := range loops {
		if l.label == "copyX2" { // 16 to 31 bytes: the last vector is a 16-byte one
			p("copyX:")
			p("\tLEAQ -16(AX), BX")
		}
		p("%s:", l.label)
		for _, m := range l.moves {
			p("\t%s %s, %s", m.op, fmt.Sprintf(m.at, "SI"), m.reg)
		}
		for _, m := range l.moves {
			p("\t%s %s, %s", m.op, m.reg, fmt.Sprintf(m.at, "DI"))
		}
		p("\tADDQ DX, SI")
		p("\tADDQ R8, DI")
		p("\tDECQ CX")
		p("\tJNZ %s", l.label)
		if i < len(loops)-1 {
			p("\tJMP copy_done")
		}
	}
	p("copy_done:")
	p("\tVZEROUPPER")
	p("\tRET")
	p("\n")
}

// loop4 splits the CX steps of a k loop into R10 rounds of four (the unrolled NAME_loop4,
// which starts here) and CX single steps after them (NAME_tail).
func loop4(name string) {
	p("\tMOVQ CX, R10")
	p("\tSHRQ $2, R10")
	p("\tANDQ $3, CX")
	p("\tTESTQ R10, R10")
	p("\tJZ %s_tail", name)
	p("%s_loop4:", name)
}

// kLoop emits a kernel's k loop of CX steps: loop4's rounds of four, step(0) … step(3) each
// after pre(u) (prefetches; nil: none) and then adv(4), and the single steps after them,
// step(0) then adv(1). It ends where the loop is done, which the single steps' count jumps
// to (NAME_after) when it is zero: the caller's next label.
func kLoop(name, after string, pre, step func(u int), adv func(n int)) {
	loop4(name)
	for u := 0; u < 4; u++ {
		if pre != nil {
			pre(u)
		}
		step(u)
	}
	adv(4)
	p("\tDECQ R10")
	p("\tJNZ %s_loop4", name)
	p("%s_tail:", name)
	p("\tTESTQ CX, CX")
	p("\tJZ %s_%s", name, after)
	p("%s_loop1:", name)
	step(0)
	adv(1)
	p("\tDECQ CX")
	p("\tJNZ %s_loop1", name)
}

// peak emits a loop of 2*n independent FMAs per iteration, used by the benchmarks to measure
// the core's FMA throughput (the denominator of "fraction of peak").
func peak(name, reg string, n int) {
	p("// func %s(iters int)", name)
	p("TEXT ·%s(SB), NOSPLIT, $0-8", name)
	p("\tMOVQ iters+0(FP), CX")
	for i := 0; i < n+1; i++ {
		if reg == "Z" {
			p("\tVPXORD %s%d, %s%d, %s%d", reg, i, reg, i, reg, i)
		} else {
			p("\tVXORPS %s%d, %s%d, %s%d", reg, i, reg, i, reg, i)
		}
	}
	p("%s_loop:", name)
	for r := 0; r < 2; r++ {
		for i := 0; i < n; i++ {
			p("\tVFMADD231PS %s%d, %s%d, %s%d", reg, n, reg, n, reg, i)
		}
	}
	p("\tDECQ CX")
	p("\tJNZ %s_loop", name)
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// packA writes gemmPackA<rows>AVX (rows 8 or 6): rows float32 rows (lda bytes apart) packed
// into a rows-row A sliver, 8 columns at a time: dst[p·rows + i] = row i's element p for
// p < 8·blocks. Each block is an 8×8 transpose (unpack, shuffle, 128-bit permute), stored as
// whole vectors where the scalar interleave writes element by element. With 6 rows, rows 4
// and 5 stand in for the absent 6 and 7: each output column's lanes 6 and 7 are junk that
// the next column's store, 24 bytes on, overwrites, and the last column is stored as 16 + 8
// bytes so that nothing is written past the block.
//
// With strided set it writes gemmPackT8AVX(dst, src, lda, ldd, blocks) instead: 8 rows, each
// packed column stored ldd bytes after the previous one, so that a transposed B operand's 8
// rows become 8 of the columns of a wider sliver (dst[p·ldd/4 + i] = row i's element p).
// With bias set too it writes convBcastOutAVX(dst, src, lda, ldd, blocks, bias): the same
// transpose with bias[8b … 8b+7] added to each row's block b as it is loaded (convBcast's
// Cᵀ into y: each output element v + bias[channel], the scalar loop's one addition).
func packA(rows int, strided, bias bool) {
	name := fmt.Sprintf("gemmPackA%dAVX", rows)
	l := fmt.Sprintf("packa%d", rows)
	if bias {
		name, l = "convBcastOutAVX", "bcastout"
		p("// func %s(dst, src unsafe.Pointer, lda, ldd, blocks int, bias unsafe.Pointer)", name)
		p("TEXT ·%s(SB), NOSPLIT, $0-48", name)
		p("\tMOVQ ldd+24(FP), R9")
		p("\tMOVQ blocks+32(FP), CX")
		p("\tMOVQ bias+40(FP), BX")
	} else if strided {
		name, l = "gemmPackT8AVX", "packt8"
		p("// func %s(dst, src unsafe.Pointer, lda, ldd, blocks int)", name)
		p("TEXT ·%s(SB), NOSPLIT, $0-40", name)
		p("\tMOVQ ldd+24(FP), R9")
		p("\tMOVQ blocks+32(FP), CX")
	} else {
		p("// func %s(dst, src unsafe.Pointer, lda, blocks int)", name)
		p("TEXT ·%s(SB), NOSPLIT, $0-32", name)
		p("\tMOVQ blocks+24(FP), CX")
	}
	p("\tMOVQ dst+0(FP), DI")
	p("\tMOVQ src+8(FP), SI")
	p("\tMOVQ lda+16(FP), R8")
	p("\tLEAQ (R8)(R8*2), R10")
	p("\tTESTQ CX, CX")
	p("\tJZ %s_done", l)
	p("%s_loop:", l)
	p("\tLEAQ (SI)(R8*4), R11")
	for i, a := range []string{"(SI)", "(SI)(R8*1)", "(SI)(R8*2)", "(SI)(R10*1)", "(R11)", "(R11)(R8*1)", "(R11)(R8*2)", "(R11)(R10*1)"}[:rows] {
		p("\tVMOVUPS %s, Y%d", a, i)
		if bias {
			p("\tVADDPS (BX), Y%d, Y%d", i, i)
		}
	}
	// Rows 6 and 7 (absent with 6 rows) are rows 4 and 5 again.
	hi := func(r int) int { return min(r, rows-4+r%2+2) }
	for i := 0; i < 4; i++ {
		p("\tVUNPCKLPS Y%d, Y%d, Y%d", hi(2*i+1), hi(2*i), 8+2*i)
		p("\tVUNPCKHPS Y%d, Y%d, Y%d", hi(2*i+1), hi(2*i), 9+2*i)
	}
	for i := 0; i < 4; i++ {
		lo, up := 8+4*(i/2)+i%2, 10+4*(i/2)+i%2
		p("\tVSHUFPS $0x44, Y%d, Y%d, Y%d", up, lo, 2*i)
		p("\tVSHUFPS $0xEE, Y%d, Y%d, Y%d", up, lo, 2*i+1)
	}
	for i := 0; i < 4; i++ {
		p("\tVPERM2F128 $0x20, Y%d, Y%d, Y%d", 4+i, i, 8+i)
	}
	for i := 0; i < 4; i++ {
		p("\tVPERM2F128 $0x31, Y%d, Y%d, Y%d", 4+i, i, 12+i)
	}
	es := 4 * rows // bytes a packed column
	for j := 0; j < 8; j++ {
		if strided {
			p("\tVMOVUPS Y%d, (DI)", 8+j)
			p("\tADDQ R9, DI")
			continue
		}
		if rows == 8 || j < 7 {
			p("\tVMOVUPS Y%d, %d(DI)", 8+j, j*es)
			continue
		}
		p("\tVMOVUPS X%d, %d(DI)", 8+j, j*es)
		p("\tVEXTRACTF128 $1, Y%d, X%d", 8+j, 8+j)
		p("\tVMOVSD X%d, %d(DI)", 8+j, j*es+16)
	}
	p("\tADDQ $32, SI")
	if bias {
		p("\tADDQ $32, BX")
	}
	if !strided {
		p("\tADDQ $%d, DI", 8*es)
	}
	p("\tDECQ CX")
	p("\tJNZ %s_loop", l)
	p("%s_done:", l)
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

func main() {
	p("// Code generated by gemm_asmgen.go; DO NOT EDIT.")
	p("")
	p("//go:build amd64 && !purego")
	p("")
	p("#include \"textflag.h\"")
	p("")
	p(`// func gemmCPUID(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·gemmCPUID(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func gemmCopyRowsAVX(dst, src unsafe.Pointer, dstStride, srcStride, rows, width int)
// Copies rows runs of width bytes (16 to 128) from src to dst, advancing src by srcStride
// and dst by dstStride bytes per run: packing full-width GEMM slivers (and scattering a row
// across slivers), and a small plane's rows into its padded copy. 24, 48, 64 and 128 (the
// slivers: 24 and 48 are the AVX2 kernels' 6-row A slivers, transposed A, float32 and
// float64) have loops of their own; other widths copy whole vectors and one more that ends
// at the run's end, overlapping the one before (its loads all come before its stores).
TEXT ·gemmCopyRowsAVX(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ dstStride+16(FP), R8
	MOVQ srcStride+24(FP), DX
	MOVQ rows+32(FP), CX
	MOVQ width+40(FP), AX
	TESTQ CX, CX
	JZ copy_done
	CMPQ AX, $64
	JEQ copy64
	CMPQ AX, $24
	JEQ copy24
	CMPQ AX, $48
	JEQ copy48
	CMPQ AX, $128
	JEQ copy128
	LEAQ -32(AX), BX
	CMPQ AX, $32
	JLT copyX
	CMPQ AX, $64
	JLE copyY2
	CMPQ AX, $96
	JLE copyY3`)
	copyRows()
	packA(8, false, false)
	packA(6, false, false)
	packA(8, true, false)
	packA(8, true, true)
	p(`// func gemmXGETBV() (eax, edx uint32)
TEXT ·gemmXGETBV(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
`)
	for _, k := range []kernel{
		{name: "gemmKernS6x16AVX2", mr: 6, nv: 2, reg: "Y", lanes: 8},
		{name: "gemmKernD6x8AVX2", mr: 6, nv: 2, reg: "Y", lanes: 4, double: true},
		{name: "gemmKernS6x8AVX2", mr: 6, nv: 1, reg: "Y", lanes: 8, bvecs: 2},
		{name: "gemmKernD6x4AVX2", mr: 6, nv: 1, reg: "Y", lanes: 4, double: true, bvecs: 2},
		{name: "gemmKernS8x32AVX512", mr: 8, nv: 2, reg: "Z", lanes: 16},
		{name: "gemmKernD8x16AVX512", mr: 8, nv: 2, reg: "Z", lanes: 8, double: true},
		{name: "gemmKernS6x16AVX2Ind", mr: 6, nv: 2, reg: "Y", lanes: 8, indirect: true},
		{name: "gemmKernS6x16AVX2Down", mr: 6, nv: 2, reg: "Y", lanes: 8, walk: "down"},
		{name: "gemmKernS6x16AVX2Across", mr: 6, nv: 2, reg: "Y", lanes: 8, walk: "across"},
		{name: "gemmKernS8x32AVX512Ind", mr: 8, nv: 2, reg: "Z", lanes: 16, indirect: true},
		{name: "gemmKernS8x16AVX512Ind", mr: 8, nv: 1, reg: "Z", lanes: 16, indirect: true},
		{name: "gemmKernS8x48AVX512Ind", mr: 8, nv: 3, reg: "Z", lanes: 16, indirect: true},
		{name: "gemmKernS8x16AVX512", mr: 8, nv: 1, reg: "Z", lanes: 16, bvecs: 2},
		{name: "gemmKernS2x32AVX2", mr: 2, nv: 4, reg: "Y", lanes: 8, astep: 6, bsl: 2},
		{name: "gemmKernS8x48AVX512", mr: 8, nv: 3, reg: "Z", lanes: 16, bsl: 2},
		{name: "gemmKernS4x16AVX2", mr: 4, nv: 2, reg: "Y", lanes: 8, astep: 6},
	} {
		k.gen()
	}
	bcast("gemmKernS6x16AVX2Bcast", 6, 2, "Y", 8)
	bcast("gemmKernS8x32AVX512Bcast", 8, 2, "Z", 16)
	bcast("gemmKernS7x32AVX512Bcast", 7, 2, "Z", 16)
	for _, rows := range []int{6, 8} {
		for _, s := range []int{8, 4, 2, 1} {
			colKernel(s, rows)
		}
	}
	for _, s := range []int{4, 2, 1} {
		col4Kernel(s)
	}
	peak("gemmPeakAVX2", "Y", 12)
	peak("gemmPeakAVX512", "Z", 24)
	if err := os.WriteFile("gemm_amd64.s", out.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
