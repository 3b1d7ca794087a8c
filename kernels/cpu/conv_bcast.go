package cpu

import "unsafe"

// convBc is the geometry of convBcast: a 2-d convolution whose GEMM is turned around — C's
// rows are the ho·wo output positions and its columns the output channels — so that A is
// the image, read in place by the micro-kernel's broadcasts, and B the weights. Output
// position q (oy, ox) under im2col row p = (c, ky, kx) reads the (padded) image at byte
// offset pos[q] + offs[p]: pos[q] = 4·(oy·s0·row + ox·s1), offs[p] = 4·(c·plane + ky·dh·row
// + kx·dw), whatever the stride or dilation.
type convBc struct {
	h, w, pb0, pb1 int
	hp, wp         int  // the padded rows and columns the windows cover
	inPlace        bool // no padding read: the kernel reads x itself (row w, plane h·w)
	pos            []int64
	offs           []int64
	p              int // output positions, ho·wo
}

// convBcastPosPad rounds pos up to whole tiles of every kernBcast's rows (6, 7 or 8).
const convBcastPosPad = 168

// convBcastSetup builds g.bc for a 2-d convolution.
func (g *convGeom) convBcastSetup(in, out, kernel, stride, dil, pb []int) {
	d := &convBc{h: in[0], w: in[1], pb0: pb[0], pb1: pb[1], p: out[0] * out[1]}
	d.hp = (out[0]-1)*stride[0] + dil[0]*(kernel[0]-1) + 1
	d.wp = (out[1]-1)*stride[1] + dil[1]*(kernel[1]-1) + 1
	if !sizeOK(g.cg, d.hp, d.wp) || d.hp*d.wp >= maxConvElems {
		return
	}
	d.inPlace = pb[0] == 0 && pb[1] == 0 && d.hp <= d.h && d.wp <= d.w
	row, plane := d.wp, d.hp*d.wp
	if d.inPlace {
		row, plane = d.w, g.inSize
	}
	d.pos = make([]int64, (d.p+convBcastPosPad-1)/convBcastPosPad*convBcastPosPad)
	for q := range d.pos {
		oy, ox := min(q, d.p-1)/out[1], min(q, d.p-1)%out[1] // the last tile's extra rows repeat the last position
		d.pos[q] = 4 * int64(oy*stride[0]*row+ox*stride[1])
	}
	d.offs = make([]int64, g.kdim)
	for c := 0; c < g.cg; c++ {
		for ky := 0; ky < kernel[0]; ky++ {
			for kx := 0; kx < kernel[1]; kx++ {
				d.offs[(c*kernel[0]+ky)*kernel[1]+kx] = 4 * int64(c*plane+ky*dil[0]*row+kx*dil[1])
			}
		}
	}
	g.bc = d
}

// convBcastOff turns convBcast off (tests compare it with the im2col GEMM).
var convBcastOff bool

// convBcastBlock is the row tiles (of the kernel's bcastMR positions) a task takes: each B
// sliver's slab (kc × bcastNR weights, in L1) serves all of them before the next is loaded.
const convBcastBlock = 16

// convBcast computes one image and group of a 2-d float32 convolution as the turned-around
// GEMM of convBc: Cᵀ = im2colᵀ · Wᵀ, with the im2col matrix never formed — the micro-kernel
// (kernBcast) broadcasts its elements from the image — and Cᵀ transposed into y at the end,
// the bias added there. The k slabs are the GEMM's and each element's sum is the same FMA
// chain in the same order, so the bits are the im2col GEMM's (TestConvBcastMatchesIm2col).
// Because nothing is loaded as a vector from the image, a stride costs nothing (the im2col
// packer gathers every other element, a quarter of ResNet-50's 3×3/2 layers' time), and
// the tiles cover positions, not padded output rows, so small planes waste nothing
// (convIndirect's 16-column grid computes 1.3× the useful flops on 14 × 14). bt is the
// weights packed by convBcastPack, or nil to pack them here. Scratch: the padded image
// (unless no padding is read), Cᵀ, and the packed weights, at most convIndirectMax
// elements. It reports false, computing nothing, where it does not apply.
func convBcast[T Float](g *convGeom, x, w, bt []T, bias, y []T, workers int, epi func(lo, hi int)) bool {
	impl := gemmImplFor(unsafe.Sizeof(T(0)))
	d := g.bc
	if d == nil || !isFloat32Type[T]() || impl.kernBcast == nil || convBcastOff {
		return false
	}
	mr, nr, kern := impl.bcastMR, impl.bcastNR, impl.kernBcast
	if a := impl.bcastAltMR; impl.kernBcastAlt != nil && gemmSplit(d.p, 1, a) < gemmSplit(d.p, 1, mr) {
		mr, kern = a, impl.kernBcastAlt
	}
	k, n := g.kdim, g.ocg
	nPad := gemmSplit(n, 1, nr)
	pPad := gemmSplit(d.p, 1, mr)
	xLen := 0
	if !d.inPlace {
		xLen = g.cg * d.hp * d.wp
	}
	tiles, slivers := pPad/mr, nPad/nr
	blocks := (tiles + convBcastBlock - 1) / convBcastBlock
	// Without packed weights they are packed here: all at once where several blocks of
	// positions share them, slab by slab as each task reaches it where one or two do — a late
	// layer's weights (9 MiB on ResNet-50's 3×3/2 512-channel layer) then pass through the
	// caches once instead of being written out to memory and read back.
	btLen, perSlab := 0, bt == nil && blocks <= 2
	if bt == nil && !perSlab {
		btLen = k * nPad
	}
	if xLen+pPad*nPad+btLen > convIndirectMax {
		return false
	}
	buf, s := convGetBuf[float32](xLen + pPad*nPad + btLen)
	defer convPutBuf(buf)
	xp, ct, b32 := s[:xLen], s[xLen:xLen+pPad*nPad], f32s(bt)
	if btLen > 0 {
		b32 = s[xLen+pPad*nPad:]
		convBcastPack(impl, f32s(w), k, n, b32, workers)
	}
	x32 := f32s(x)
	if d.inPlace {
		xp = x32
	} else {
		rows, cols := min(d.h, d.hp-d.pb0), min(d.w, d.wp-d.pb1) // the input the windows read
		convChunks(g.cg, d.hp*d.wp, workers, func(c0, c1 int) {
			padPlanes(xp, x32, c0, c1, d.hp, d.wp, d.pb0, d.pb1, rows, cols, d.w, g.inSize)
		})
	}
	xBase := unsafe.Pointer(&xp[0])
	kc := impl.kc
	colTasks := 1
	if workers > 1 && blocks < 2*workers {
		colTasks = min(slivers, (2*workers+blocks-1)/blocks)
	}
	perCol := (slivers + colTasks - 1) / colTasks
	colTasks = (slivers + perCol - 1) / perCol
	// Tasks go column range by column range (task t: block t mod blocks of column range t /
	// blocks), so that each worker's own part (job.work) is whole column ranges: the weights
	// of its output channels, read once, where block by block each worker read every
	// range's weights — all of a 3×3/2 layer's 2.4 MiB on 28 × 28 — for half the positions.
	// ResNet-50's 3×3/2 256-channel layer 1.07× at two threads alone (Zen 5, medians of seven
	// alternating runs) and 1.08–1.1× in the network (its fastest of 30 steps 777 → 699 µs);
	// the others with column ranges within ±1.5%.
	parallelTasks(blocks*colTasks, workers, func(t int) {
		t0, j0 := t%blocks*convBcastBlock, t/blocks*perCol
		t1, j1 := min(tiles, t0+convBcastBlock), min(slivers, j0+perCol)
		var sliver []float32 // perSlab: the slab's sliver being used
		if perSlab {
			sb, sl := convGetBuf[float32](min(kc, k) * nr)
			defer convPutBuf(sb)
			sliver = sl
		}
		w32 := f32s(w)
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			mode := min(pc, 1)
			offs := unsafe.Pointer(&d.offs[pc])
			for j := j0; j < j1; j++ {
				var bs unsafe.Pointer
				if perSlab {
					gemmPackB(true, w32, k, pc, j*nr, kb, min(nr, n-j*nr), nr, sliver)
					bs = unsafe.Pointer(&sliver[0])
				} else {
					bs = unsafe.Pointer(&b32[pc*nPad+j*kb*nr])
				}
				for tile := t0; tile < t1; tile++ {
					kern(kb, xBase, unsafe.Pointer(&d.pos[tile*mr]), bs, unsafe.Pointer(&ct[tile*mr*nPad+j*nr]), nPad, mode, offs)
				}
			}
		}
	})
	y32 := f32s(y)
	var b []float32
	if bias != nil {
		b = f32s(bias)
	}
	// Cᵀ into y by channel ranges, the bias added as the GEMM's last store adds it.
	convChunks(n, d.p, workers, func(j0, j1 int) {
		convBcastOut(ct, nPad, d.p, j0, j1, b, y32)
		if epi != nil {
			epi(j0*d.p, j1*d.p)
		}
	})
	return true
}

// convBcastOut writes channels j0 … j1−1 of convBcast's result Cᵀ (ct: p positions × nPad
// channels) into y (channels × p positions), adding bias[j] (nil: none) to channel j: 8 × 8
// blocks by vector transposes where the CPU has AVX2 (convBcastOutFast), the rest element
// by element, each value v + bias[j] either way. The loop of scalar stores, a plane apart,
// was 4% of ResNet-50's 3×3/2 256-channel layer.
func convBcastOut(ct []float32, nPad, p, j0, j1 int, bias, y []float32) {
	q0 := convBcastOutFast(ct, nPad, p, j0, j1, bias, y)
	jv := j0 + (j1-j0)&^7 // channels the transposes covered up to q0
	if q0 == 0 {
		jv = j0
	}
	for q := 0; q < p; q++ {
		js := j0
		if q < q0 {
			js = jv
		}
		row := ct[q*nPad:][js:j1]
		for j, v := range row {
			if bias != nil {
				v += bias[js+j]
			}
			y[(js+j)*p+q] = v
		}
	}
}

// convBcastPack packs the m × k weights w (row-major) as convBcast's B: Wᵀ, slab by slab of
// kc rows, each slab's bcastNR-column slivers kb × bcastNR (channels past m zero).
func convBcastPack(impl *gemmImpl, w []float32, k, m int, dst []float32, workers int) {
	nPad := gemmSplit(m, 1, impl.bcastNR)
	slabs := (k + impl.kc - 1) / impl.kc
	parallelTasks(slabs, workers, func(t int) {
		pc := t * impl.kc
		kb := min(impl.kc, k-pc)
		gemmPackB(true, w, k, pc, 0, kb, m, impl.bcastNR, dst[pc*nPad:pc*nPad+kb*nPad])
	})
}

// padPlanes copies rows × cols of channels c0 … c1−1 of x (planes inSize apart, rows w
// apart) into the zero-padded hp × wp planes of xp, at row pb0 and column pb1, clearing only
// the pads. Short rows (28 × 28, 14 × 14 and 7 × 7 planes) clear the planes in one call and
// copy a channel's rows in one call of vector moves (gemmFastCopy), or an inlined loop where
// there are none: a memmove and two clears a row of 14 were a sixth of DenseNet's 3×3
// 128 → 32 layers on 14 × 14 (one thread), all call overhead, and the inlined loop still
// 15% of their CPU time at two threads.
func padPlanes(xp, x []float32, c0, c1, hp, wp, pb0, pb1, rows, cols, w, inSize int) {
	plane := hp * wp
	if cols < 32 {
		clear(xp[c0*plane : c1*plane])
		for c := c0; c < c1; c++ {
			if gemmFastCopy(xp[c*plane+pb0*wp+pb1:], wp, x[c*inSize:], w, rows, cols) {
				continue
			}
			for r := 0; r < rows; r++ {
				copyShort(xp[c*plane+(r+pb0)*wp+pb1:], x[c*inSize+r*w:][:cols])
			}
		}
		return
	}
	for c := c0; c < c1; c++ {
		pl := xp[c*plane : (c+1)*plane]
		clear(pl[:pb0*wp])
		for r := 0; r < rows; r++ {
			row := pl[(r+pb0)*wp : (r+pb0+1)*wp]
			clear(row[:pb1])
			copy(row[pb1:], x[c*inSize+r*w:][:cols])
			clear(row[pb1+cols:])
		}
		clear(pl[(rows+pb0)*wp:])
	}
}
