package cpu

import "unsafe"

// Winograd F(2×2, 3×3) for the 3×3 stride-1 convolutions of inference (ConvFilter: weights
// that do not change between calls). Each 2×2 block of outputs ("tile") of an output channel
// is Aᵀ·[Σ_c U_oc ⊙ V_c]·A, where V_c = Bᵀ·d·B is the transform of the 4×4 input patch d of
// channel c under the tile and U = G·g·Gᵀ that of the 3×3 filter g — so the 36
// multiplications a tile of a channel pair costs directly become 16, and those are 16
// independent GEMMs, one per point ξ of the 4×4 transform: M_ξ (ocg × tiles) = U_ξ (ocg ×
// cg) · V_ξ (cg × tiles), run by the blocked GEMM with U_ξ packed once (ConvFilter). The
// transforms are additions only (B and A hold 0 and ±1; G also ½, applied to the weights
// once, in float64), so the result differs from the direct convolution's by rounding alone:
// TestConvWinogradMatchesDirect bounds it by a few units in the last place of Σ|w|·|x|. It
// is not the direct convolution's bits, and that is why it serves only constant weights:
// training's forward and backward stay the GEMM's, bit for bit the same in every layout.
//
// The larger F(4×4, 3×3) saves 4× instead of 2.25×, but its transforms hold 2, 4 and 5 and
// its error grows with them; F(2×2, 3×3) was enough to take the 3×3 layers past the direct
// path (BenchmarkConvBatch1's 3×3 cases).

// convWinoMin bounds where the Winograd path pays: the transforms cost in proportion to
// cg + ocg a tile and the multiplications they save to cg·ocg, so a group takes it when
// cg·ocg ≥ convWinoMin·(cg + ocg) — or convWinoMin/3 where the assembly transforms run
// (AVX2, eight tiles at once: planes of at least 16 output columns). Measured at batch 1,
// two threads (BenchmarkConvWinograd, medians of interleaved runs, 2-core AVX2 EPYC,
// 2026-11-28), against the direct path: with the Go transforms (14 × 14 and 7 × 7 planes),
// 128 → 32 channels (26 by this measure) and 32 → 128 ran 0.75–0.8×, 64 → 192 (48)
// 1.2×, 96 → 128 (55) 1.15×, 128 → 128 (64) 1.3–1.4×, 256 → 256 and 512 → 512 1.3–1.5×;
// with the assembly ones, 32 → 32 on 56 × 56 (16) ran 1.45×, 128 → 32 1.2× on 56 × 56
// and 28 × 28, 64 → 64 1.2–1.35×, 64 → 192 1.7×. A variable so tests can send small cases
// through it.
var convWinoMin = 48

// convWinoFill is the least fraction of the products' columns that are tiles: they are the
// plane's tiles padded to the micro-kernel's nr, and a 7 × 7 plane's 16 fill the AVX2
// kernel's 16 columns but half the AVX-512 kernel's 32, where the direct path (convBcast)
// measured 1.0–2.5× faster (512 → 512 and 160 → 320 channels; BenchmarkConvWinograd, Zen 5,
// two threads). A 14 × 14 plane's 49 tiles fill 64 columns, 77%. A variable so tests can
// send small planes through the path.
var convWinoFill = 0.6

// convWinoOff turns the Winograd path off for filters packed while it is set (benchmarks
// compare the two paths).
var convWinoOff bool

// winograd reports whether g's groups take the Winograd path when their weights are packed
// for it.
func (g *convGeom) winograd() bool {
	if !g.wino || convWinoOff {
		return false
	}
	if tiles := (g.ind.ho + 1) / 2 * ((g.ind.wo + 1) / 2); float64(tiles) < convWinoFill*float64(gemmSplit(tiles, 1, gemmImplFor(4).nr)) {
		return false
	}
	if g.bc != nil && g.cg < convWinoBcastCg {
		return false
	}
	least := convWinoMin
	if winoVec && (g.ind.wo+1)/2 >= 8 {
		least = convWinoMin / 3
	}
	return g.cg*g.ocg >= least*(g.cg+g.ocg)
}

// convWinoBcastCg is the fewest input channels a group needs to take the Winograd path where
// the direct one is convBcast (planes under 32 columns wide): the transformed GEMMs' k loops
// are cg steps long, and on 28 × 28 planes the direct path ran faster up to 48 channels —
// 24 → 64 1.7×, 32 → 96 (GoogLeNet's) 1.65×, 32 → 256 1.4×, 48 → 96 1.3×, 48 → 128 1.1×
// — and even or slower from 64 (64 → 64 even, 64 → 128 0.93×, 128 → 32 even; two threads,
// Zen 5, three runs each, 2026-11-29). On 56 × 56 planes, whose direct path is convIndirect,
// Winograd stayed ahead at 32 channels (32 → 32 1.1×, 32 → 64 1.05×). A variable so tests can
// send small cases through the path.
var convWinoBcastCg = 64

// winoPack transforms every group's filters (w: groups × ocg × cg × 3 × 3) into U and packs
// each group's 16 matrices U_ξ (ocg × cg) into the micro-kernel's A slivers: group gr, point
// ξ at (gr·16 + ξ)·cg·mPad, gemmPackA's layout for all rows and every kc slab.
func winoPack[T Float](g *convGeom, w []T, impl *gemmImpl, mPad int) []T {
	m, k := g.ocg, g.cg
	out := make([]T, g.groups*16*k*mPad)
	Parallel(g.groups, 1, func(lo, hi int) {
		u := make([]T, 16*m*k) // one group's U_ξ, row-major ocg × cg each
		for gr := lo; gr < hi; gr++ {
			for o := 0; o < m; o++ {
				for c := 0; c < k; c++ {
					f := w[((gr*m+o)*k+c)*9:][:9]
					var t [4][3]float64 // G·g
					for j := 0; j < 3; j++ {
						g0, g1, g2 := float64(f[j]), float64(f[3+j]), float64(f[6+j])
						t[0][j], t[1][j], t[2][j], t[3][j] = g0, (g0+g1+g2)/2, (g0-g1+g2)/2, g2
					}
					for i := 0; i < 4; i++ { // (G·g)·Gᵀ
						t0, t1, t2 := t[i][0], t[i][1], t[i][2]
						for xi, v := range [4]float64{t0, (t0 + t1 + t2) / 2, (t0 - t1 + t2) / 2, t2} {
							u[((i*4+xi)*m+o)*k+c] = T(v)
						}
					}
				}
			}
			for xi := 0; xi < 16; xi++ {
				dst := out[(gr*16+xi)*k*mPad:]
				for pc := 0; pc < k; pc += impl.kc {
					gemmPackA(false, u[xi*m*k:(xi+1)*m*k], k, 0, pc, m, min(impl.kc, k-pc), impl.mr, dst[pc*mPad:])
				}
			}
		}
	})
	return out
}

// winoGroup is group gr's packed U_ξ for the current micro-kernel, nil where the filter has
// none (another path, or a micro-kernel other than the one they were packed for).
func (f *ConvFilter[T]) winoGroup(gr int) []T {
	if f == nil || f.wino == nil || f.impl != gemmImplFor(unsafe.Sizeof(T(0))) {
		return nil
	}
	size := 16 * f.p.g.cg * f.mPad
	return f.wino[gr*size : (gr+1)*size]
}

// convWinoBlockBytes bounds a block's V (16·cg·tiles float32s): a block of tile rows is
// transformed, multiplied and transformed back while its V and M are still in L2. Whole
// images of 64 channels of 56 × 56 (3.2 MB of V, then 3.2 MB of M) spent most of their time
// in the transforms' cache misses. A variable so tests can make blocks of one tile row.
var convWinoBlockBytes = 256 << 10

// convWinoUMax is the size of U (one group's, bytes) above which blocks hold at least 64
// tiles (convWinograd).
const convWinoUMax = 1 << 20

// convWinograd computes one image and group (x: cg planes, y: ocg planes) from the group's
// packed U (u), adding bias (nil: none) and running epi on ranges of y as they are done. The
// tiles are taken in blocks of whole tile rows, each block's three stages run back to back
// on one worker while its V and M stay in cache; where there are too few blocks to share
// out (small planes), one block of every tile row runs each stage on every worker. Scratch:
// V and M of a block, 16·(cg + mPad)·tiles elements (tiles rounded up to nr), pooled.
func convWinograd[T Float](g *convGeom, x []T, u []T, mPad int, bias, y []T, workers int, epi func(lo, hi int)) {
	d := g.ind
	th, tw := (d.ho+1)/2, (d.wo+1)/2
	br := max(1, convWinoBlockBytes/(4*16*g.cg*tw)) // tile rows a block
	// Every block reads all of U again: where U is larger than the caches hold near a core
	// (256 → 256 channels: 4 MiB), blocks of at least 64 tiles, so that U's bytes stay
	// a small fraction of the products' (AlexNet's 384 → 256 on 13 × 13 in blocks of 7
	// tiles ran 1.1× slower than the direct path).
	if 16*g.ocg*g.cg*int(unsafe.Sizeof(T(0))) > convWinoUMax {
		br = max(br, (64+tw-1)/tw)
	}
	br = winoRows(br, th, tw, gemmImplFor(unsafe.Sizeof(T(0))).nr, 2*convWinoBlockBytes/(4*16*g.cg*tw))
	if blocks := (th + br - 1) / br; workers == 1 && blocks == 1 || workers > 1 && blocks < 2*workers {
		convWinoBlock(g, x, u, mPad, bias, y, 0, th, workers, epi)
		return
	}
	parallelTasks((th+br-1)/br, workers, func(t int) {
		convWinoBlock(g, x, u, mPad, bias, y, t*br, min(th, (t+1)*br), 1, epi)
	})
}

// winoRows is the tile rows a block takes, from br up to most: the fewest that pad the
// blocks' tiles, the products' columns, least in all to whole nr-column slivers. A 14 × 14
// plane's 7 rows of 7 tiles in blocks of two were 4 blocks of 14, 14, 14 and 7 tiles, each
// 32 columns of the AVX-512 kernel, 38% of them tiles; in blocks of four, 28 and 21 tiles,
// 77%. Zen 5, medians of five alternating runs: 256 → 256 on 14 × 14 1.06–1.20× at one
// thread (within the noise at two), 96 → 128 on 28 × 28 (blocks of 3 rows of 14 tiles
// before, 4 now) 1.16–1.23× at one and two.
func winoRows(br, th, tw, nr, most int) int {
	padded := func(b int) int {
		n := 0
		for i := 0; i < th; i += b {
			n += gemmSplit(min(b, th-i)*tw, 1, nr)
		}
		return n
	}
	best, least := br, padded(br)
	for b := br + 1; b <= min(th, most); b++ {
		if p := padded(b); p < least {
			best, least = b, p
		}
	}
	return best
}

// convWinoBlock is convWinograd on tile rows i0 … i1−1, each stage shared out over workers.
// V is written straight in the micro-kernel's packed B layout (nr-tile slivers, every
// channel), so the products need no packing pass (it was a sixth of the time).
func convWinoBlock[T Float](g *convGeom, x []T, u []T, mPad int, bias, y []T, i0, i1, workers int, epi func(lo, hi int)) {
	d := g.ind
	impl := gemmImplFor(unsafe.Sizeof(T(0)))
	mr, nr, kc, mc := impl.mr, impl.nr, impl.kc, impl.mc
	th, tw := i1-i0, (d.wo+1)/2
	nT, m, k := th*tw, g.ocg, g.cg
	nTp := gemmSplit(nT, 1, nr)
	// V_ξ (k × nTp) and M_ξ (mPad × nTp) lie sv and sm elements apart, an odd number of
	// cache lines: the transforms read or write all 16 at once, and at a multiple of 4 KiB
	// apart (64 channels of 28 × 28 tiles) the 16 streams fell into one L1 set and the
	// transforms ran 3× slower.
	sv, sm := winoStride(k*nTp), winoStride(mPad*nTp)
	buf, s := convGetBuf[T](16 * (sv + sm))
	defer convPutBuf(buf)
	v, mt := s[:16*sv], s[16*sv:]
	// The input transform, by channels: the rows the block's patches cover (padded rows
	// 2·i0 … 2·i1+1, columns 0 … 2·tw+1) copied into a zero-padded plane, then transformed.
	ph, pw := 2*th+2, 2*tw+2
	r0, r1 := max(0, 2*i0-d.pb0), min(d.h, 2*i0+ph-d.pb0) // the input rows inside
	cols := min(d.w, pw-d.pb1)
	convChunks(k, 16*nT, workers, func(c0, c1 int) {
		pb, pl := convGetBuf[T](ph * pw)
		defer convPutBuf(pb)
		clear(pl)
		if nT < nTp {
			// The last sliver's columns past the tiles, which the transform leaves: the
			// range's rows of that sliver cleared whole, one run a point, before the
			// transform writes the tiles' columns. (A clear of each row's few columns, 16
			// calls a channel, took a sixth of DenseNet's 3×3 layers on 56 × 56.)
			q := nT / nr * k * nr
			for xi := 0; xi < 16; xi++ {
				clear(v[xi*sv+q+c0*nr : xi*sv+q+c1*nr])
			}
		}
		for c := c0; c < c1; c++ {
			for r := r0; r < r1; r++ {
				copy(pl[(r+d.pb0-2*i0)*pw+d.pb1:][:cols], x[c*g.inSize+r*d.w:][:cols])
			}
			winoInput(pl, pw, th, tw, v[c*nr:], sv, k*nr, nr)
		}
	})
	// The 16 products M_ξ = U_ξ·V_ξ, one a task, in the GEMM's loop order (gemmSlab) with
	// every tile full: U's rows are padded to mr with zeros, V's columns to nr — except the
	// last A sliver's where it holds 2 or 4 of U's rows and a kernel for as many rows
	// exists. DenseNet's 32 output channels spent a sixth of the products, two thirds of a
	// tile, on zeros: with the AVX2 kernels (two threads, Zen 5, a call each in turn) 128 →
	// 32 channels on 56 × 56 and 28 × 28 ran 6–14% faster, 64 → 64 on 56 × 56 3–8%; 256 →
	// 256 on 14 × 14 (one sliver in 43) within the noise (±3%).
	short := m - (mPad - mr) // U's rows in the last sliver
	if !(short == 2 && impl.kernRows2 != nil || short == 4 && impl.kernRows4 != nil) {
		short = 0
	}
	parallelTasks(16, workers, func(xi int) {
		ux, vx, cx := u[xi*k*mPad:(xi+1)*k*mPad], v[xi*sv:], mt[xi*sm:]
		for pc := 0; pc < k; pc += kc {
			kb, mode := min(kc, k-pc), min(pc, 1)
			ap := ux[pc*mPad:]
			for ic := 0; ic < mPad; ic += mc {
				mb := min(mc, mPad-ic)
				tiles, rows := mb/mr, 0 // full tiles, then a short one of rows rows
				if ic+mb == mPad && short > 0 {
					tiles, rows = tiles-1, short
				}
				var as unsafe.Pointer // the short tile's A, and its first row of C
				cs := (ic + tiles*mr) * nTp
				if rows > 0 {
					as = unsafe.Pointer(&ap[(ic+tiles*mr)*kb])
				}
				for j := 0; j < nTp; j += nr {
					bs := unsafe.Pointer(&vx[j*k+pc*nr])
					if impl.kernDown != nil && tiles > 0 { // the column's tiles in one call
						impl.kernDown(kb, unsafe.Pointer(&ap[ic*kb]), bs, unsafe.Pointer(&cx[ic*nTp+j]), nTp, 1, float64(mode), mode, nil, tiles)
					} else {
						for ir := 0; ir < tiles*mr; ir += mr {
							impl.kern(kb, unsafe.Pointer(&ap[(ic+ir)*kb]), bs, unsafe.Pointer(&cx[(ic+ir)*nTp+j]), nTp, 1, float64(mode), mode, nil)
						}
					}
					switch {
					case rows == 4:
						impl.kernRows4(kb, as, bs, unsafe.Pointer(&cx[cs+j]), nTp, 1, float64(mode), mode, nil)
					case rows == 2 && j/nr%2 == 0 && j+nr < nTp: // with the next sliver
						impl.kernRows2(kb, as, bs, unsafe.Pointer(&cx[cs+j]), nTp, 1, float64(mode), mode, nil, k*nr)
					case rows == 2 && j/nr%2 == 0: // the last sliver, alone: a whole tile
						impl.kern(kb, as, bs, unsafe.Pointer(&cx[cs+j]), nTp, 1, float64(mode), mode, nil)
					}
				}
			}
		}
	})
	// The output transform, by output channels, each range's epilogue right after it: the
	// block's output rows 2·i0 … of each channel.
	y0, y1 := 2*i0, min(d.ho, 2*i1)
	convChunks(m, g.outSize, workers, func(o0, o1 int) {
		for o := o0; o < o1; o++ {
			var b T
			if bias != nil {
				b = bias[o]
			}
			plane := y[o*g.outSize : (o+1)*g.outSize]
			winoOutput(mt[o*nTp:], sm, th, tw, b, plane[y0*d.wo:y1*d.wo], y1-y0, d.wo)
			if epi != nil && (y0 > 0 || y1 < d.ho) {
				epi(o*g.outSize+y0*d.wo, o*g.outSize+y1*d.wo)
			}
		}
		if epi != nil && y0 == 0 && y1 == d.ho {
			epi(o0*g.outSize, o1*g.outSize)
		}
	})
}

// winoStride is n rounded up to an odd number of 64-byte lines of float32.
func winoStride(n int) int {
	n = (n + 15) &^ 15
	if n/16%2 == 0 {
		n += 16
	}
	return n
}

// winoInput writes V = Bᵀ·d·B for every tile of a padded plane pl (rows pw apart; tile (i, j)
// covers rows 2i … 2i+3, columns 2j … 2j+3) to dst in packed B slivers: point ξ of tile
// t = i·tw + j at dst[ξ·stride + (t / nr)·sliver + t mod nr]. Bᵀ = [1 0 −1 0; 0 1 1 0;
// 0 −1 1 0; 0 1 0 −1].
func winoInput[T Float](pl []T, pw, th, tw int, dst []T, stride, sliver, nr int) {
	vec := winoVec && isFloat32Type[T]() && nr%8 == 0
	var o [16][]T
	for xi := range o {
		o[xi] = dst[xi*stride:]
	}
	for i := 0; i < th; i++ {
		r0 := pl[(2*i)*pw:][:2*tw+2]
		r1 := pl[(2*i+1)*pw:][:2*tw+2]
		r2 := pl[(2*i+2)*pw:][:2*tw+2]
		r3 := pl[(2*i+3)*pw:][:2*tw+2]
		for j := 0; j < tw; {
			// Eight or four tiles at once where they lie in one sliver; where fewer than four
			// are left, the row's last four, doing some tiles before them again (the same
			// values): a 14 × 14 plane's rows of 7 tiles are two fours, not a four and three
			// tiles in Go, which were a tenth of GoogLeNet's 14 × 14 layers' time.
			if vec {
				if n := winoGroup(i*tw, j, tw, nr, 8, false); n >= 0 {
					t := i*tw + n
					q := t/nr*sliver + t%nr
					_ = o[15][q+7] // bounds: the assembly writes q … q+7 of every point
					winoIn8AVX(unsafe.Pointer(&r0[2*n]), unsafe.Pointer(&r1[2*n]), unsafe.Pointer(&r2[2*n]), unsafe.Pointer(&r3[2*n]), unsafe.Pointer(&o[0][q]), 4*stride)
					j = n + 8
					continue
				}
				if n := winoGroup(i*tw, j, tw, nr, 4, j+4 > tw); n >= 0 {
					t := i*tw + n
					q := t/nr*sliver + t%nr
					_ = o[15][q+3]
					winoIn4AVX(unsafe.Pointer(&r0[2*n]), unsafe.Pointer(&r1[2*n]), unsafe.Pointer(&r2[2*n]), unsafe.Pointer(&r3[2*n]), unsafe.Pointer(&o[0][q]), 4*stride)
					j = n + 4
					continue
				}
			}
			t, c := i*tw+j, 2*j
			q := t/nr*sliver + t%nr
			// Bᵀ·d: the patch's columns.
			a0, a1, a2, a3 := r0[c]-r2[c], r1[c]+r2[c], r2[c]-r1[c], r1[c]-r3[c]
			b0, b1, b2, b3 := r0[c+1]-r2[c+1], r1[c+1]+r2[c+1], r2[c+1]-r1[c+1], r1[c+1]-r3[c+1]
			e0, e1, e2, e3 := r0[c+2]-r2[c+2], r1[c+2]+r2[c+2], r2[c+2]-r1[c+2], r1[c+2]-r3[c+2]
			f0, f1, f2, f3 := r0[c+3]-r2[c+3], r1[c+3]+r2[c+3], r2[c+3]-r1[c+3], r1[c+3]-r3[c+3]
			// (Bᵀ·d)·B: each row.
			o[0][q], o[1][q], o[2][q], o[3][q] = a0-e0, b0+e0, e0-b0, b0-f0
			o[4][q], o[5][q], o[6][q], o[7][q] = a1-e1, b1+e1, e1-b1, b1-f1
			o[8][q], o[9][q], o[10][q], o[11][q] = a2-e2, b2+e2, e2-b2, b2-f2
			o[12][q], o[13][q], o[14][q], o[15][q] = a3-e3, b3+e3, e3-b3, b3-f3
			j++
		}
	}
}

// winoGroup is where a group of n tiles that covers tile j of a row of tw (its first tile
// t0 = i·tw) starts: j, or with back where fewer than n are left tw − n, so that the group
// ends the row — or −1 where it does not fit the row or its tiles cross a sliver of nr.
func winoGroup(t0, j, tw, nr, n int, back bool) int {
	s := j
	if j+n > tw {
		if !back || tw < n {
			return -1
		}
		s = tw - n
	}
	if (t0+s)/nr != (t0+s+n-1)/nr {
		return -1
	}
	return s
}

// winoOutput writes Y = Aᵀ·M·A + b for every tile of one output channel (point ξ of tile
// i·tw + j at src[ξ·stride + i·tw + j]) into y, ho × wo: tile (i, j) is outputs 2i … 2i+1,
// 2j … 2j+1, those past the plane's edge dropped. Aᵀ = [1 1 1 0; 0 1 −1 −1].
func winoOutput[T Float](src []T, stride, th, tw int, b T, y []T, ho, wo int) {
	vec := winoVec && isFloat32Type[T]()
	var s [16][]T
	for i := 0; i < th; i++ {
		for xi := range s {
			s[xi] = src[xi*stride+i*tw:][:tw]
		}
		y0 := y[2*i*wo:][:wo]
		var y1 []T
		if 2*i+1 < ho {
			y1 = y[(2*i+1)*wo:][:wo]
		}
		for j := 0; j < tw; {
			// Eight or four tiles at once; where fewer than four fit, the row's last four
			// (as winoInput's), writing some outputs again with the same bits.
			if vec && y1 != nil {
				if j+8 <= tw && 2*j+16 <= wo {
					n := j
					_ = s[15][n+7] // bounds: the assembly reads n … n+7 of every point
					_ = y1[2*n+15]
					winoOut8AVX(unsafe.Pointer(&s[0][n]), 4*stride, unsafe.Pointer(&y0[2*n]), unsafe.Pointer(&y1[2*n]), float32(b))
					j = n + 8
					continue
				}
				if n := min(j, wo/2-4, tw-4); n >= 0 && n+4 > j {
					_ = s[15][n+3]
					_ = y1[2*n+7]
					winoOut4AVX(unsafe.Pointer(&s[0][n]), 4*stride, unsafe.Pointer(&y0[2*n]), unsafe.Pointer(&y1[2*n]), float32(b))
					j = n + 4
					continue
				}
			}
			// Aᵀ·M: the tile's columns.
			u00, u01, u02, u03 := s[0][j]+s[4][j]+s[8][j], s[1][j]+s[5][j]+s[9][j], s[2][j]+s[6][j]+s[10][j], s[3][j]+s[7][j]+s[11][j]
			u10, u11, u12, u13 := s[4][j]-s[8][j]-s[12][j], s[5][j]-s[9][j]-s[13][j], s[6][j]-s[10][j]-s[14][j], s[7][j]-s[11][j]-s[15][j]
			// (Aᵀ·M)·A: each row.
			c := 2 * j
			j++
			if c+1 < wo {
				y0[c], y0[c+1] = u00+u01+u02+b, u01-u02-u03+b
				if y1 != nil {
					y1[c], y1[c+1] = u10+u11+u12+b, u11-u12-u13+b
				}
				continue
			}
			y0[c] = u00 + u01 + u02 + b
			if y1 != nil {
				y1[c] = u10 + u11 + u12 + b
			}
		}
	}
}
