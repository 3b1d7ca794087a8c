package cpu

import (
	"errors"
	"fmt"
	"math"
)

// PoolParams describes an N-d pooling window (ONNX MaxPool, AveragePool, LpPool) on
// NC(D)HW tensors: x is [Batch, Channels, Spatial...], y is [Batch, Channels, OutSpatial...].
// With ext = Dilation·(Kernel-1) + 1,
//
//	out[i] = floor((Spatial[i] + PadBegin[i] + PadEnd[i] - ext[i]) / Stride[i]) + 1
//
// or with ceil instead of floor when CeilMode is set; in ceil mode a last window that would
// start inside the end padding is dropped (as ONNX Runtime and PyTorch do), so every window
// starts inside the input or the begin padding. Windows that run past the end padding in
// ceil mode are clipped there.
//
// CountIncludePad (AveragePool) divides by the number of window taps inside the padded
// input (input plus explicit pads, not the ceil-mode overhang) instead of only the taps
// inside the input. P is LpPool's norm order (0 means 2). Init validates, defaults nil
// Stride/Dilation to 1 and nil pads to 0, and computes OutSpatial. Up to 3 spatial axes.
type PoolParams struct {
	Batch, Channels          int
	Spatial                  []int
	Kernel, Stride, Dilation []int
	PadBegin, PadEnd         []int
	CeilMode                 bool
	CountIncludePad          bool
	P                        int
	OutSpatial               []int // computed by Init

	// Per axis, padded to 3 axes with unit leading dims: input/output sizes, and for each
	// output position the first valid input coordinate, the number of valid taps, and the
	// number of taps inside the padded input.
	in, out, dil    [3]int
	first, cnt, pad [3][]int
	inSize, outSize int
	// Along the last axis, tap t reads input o·stride + off[t] for outputs o in [lo[t], hi[t]).
	k2, s2         int
	lo2, hi2, off2 []int
	init           bool
}

// Init validates the parameters and computes OutSpatial.
func (p *PoolParams) Init() error {
	r := len(p.Spatial)
	if r == 0 || r > 3 {
		return fmt.Errorf("pool: %d spatial axes, want 1 to 3", r)
	}
	if p.Batch < 0 || p.Channels < 1 {
		return fmt.Errorf("pool: batch %d, channels %d invalid", p.Batch, p.Channels)
	}
	if len(p.Kernel) != r {
		return fmt.Errorf("pool: Kernel has %d entries, want %d", len(p.Kernel), r)
	}
	var err error
	for _, f := range []struct {
		v    *[]int
		def  int
		name string
	}{{&p.Stride, 1, "Stride"}, {&p.Dilation, 1, "Dilation"}, {&p.PadBegin, 0, "PadBegin"}, {&p.PadEnd, 0, "PadEnd"}} {
		if *f.v, err = defaultInts(*f.v, r, f.def, "pool: "+f.name); err != nil {
			return err
		}
	}
	if p.P == 0 {
		p.P = 2
	}
	if p.P < 0 {
		return errors.New("pool: negative Lp order")
	}
	p.OutSpatial = make([]int, r)
	p.inSize, p.outSize = 1, 1
	for a := 0; a < 3; a++ {
		p.in[a], p.out[a], p.dil[a] = 1, 1, 1
		p.first[a], p.cnt[a], p.pad[a] = []int{0}, []int{1}, []int{1}
	}
	for i := 0; i < r; i++ {
		in, k, s, d, pb, pe := p.Spatial[i], p.Kernel[i], p.Stride[i], p.Dilation[i], p.PadBegin[i], p.PadEnd[i]
		if in < 1 || k < 1 || s < 1 || d < 1 {
			return fmt.Errorf("pool: axis %d: spatial %d, kernel %d, stride %d, dilation %d must all be ≥ 1", i, in, k, s, d)
		}
		if pb < 0 || pe < 0 {
			return fmt.Errorf("pool: axis %d: negative padding", i)
		}
		ext := d*(k-1) + 1
		span := in + pb + pe - ext
		if span < 0 {
			return fmt.Errorf("pool: axis %d: dilated kernel %d larger than padded input %d", i, ext, in+pb+pe)
		}
		out := span/s + 1
		if p.CeilMode {
			// Drop an extra ceil-mode window that would start in the end padding, but never
			// go below the floor-mode count (whose windows all lie inside the padded input).
			if c := (span+s-1)/s + 1; c > out && (c-1)*s < in+pb {
				out = c
			}
		}
		p.OutSpatial[i] = out
		a := 3 - r + i
		p.in[a], p.out[a], p.dil[a] = in, out, d
		p.first[a], p.cnt[a], p.pad[a] = make([]int, out), make([]int, out), make([]int, out)
		for o := 0; o < out; o++ {
			start := o*s - pb
			valid, padded, first := 0, 0, -1
			for t := 0; t < k; t++ {
				pos := start + t*d
				if pos >= -pb && pos < in+pe {
					padded++
				}
				if pos >= 0 && pos < in {
					if first < 0 {
						first = pos
					}
					valid++
				}
			}
			p.first[a][o], p.cnt[a][o], p.pad[a][o] = max(first, 0), valid, padded
		}
		p.inSize *= in
		p.outSize *= out
		if i == r-1 {
			p.k2, p.s2 = k, s
			p.lo2, p.hi2, p.off2 = make([]int, k), make([]int, k), make([]int, k)
			for t := 0; t < k; t++ {
				off := t*d - pb
				lo := 0
				if off < 0 {
					lo = (-off + s - 1) / s
				}
				hi := 0
				if in-1-off >= 0 {
					hi = min(out, (in-1-off)/s+1)
				}
				p.lo2[t], p.hi2[t], p.off2[t] = lo, max(lo, hi), off
			}
		}
	}
	if !sizeOK(p.Batch, p.Channels, p.inSize) {
		return errors.New("pool: tensor too large")
	}
	p.init = true
	return nil
}

// XLen and YLen are the element counts the pooling kernels require of x and y.
func (p *PoolParams) XLen() int { return p.Batch * p.Channels * p.inSize }
func (p *PoolParams) YLen() int { return p.Batch * p.Channels * p.outSize }

func (p *PoolParams) check(op string, x, y int) {
	if !p.init {
		panic("cpu." + op + ": params not initialised (call Init and check its error)")
	}
	needLen(op, "x", x, p.XLen())
	needLen(op, "y", y, p.YLen())
}

// planes runs f(plane) for every (image, channel) plane in parallel.
func (p *PoolParams) planes(f func(pl int)) {
	Parallel(p.Batch*p.Channels, max(1, 2048/max(1, p.outSize)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			f(pl)
		}
	})
}

// forEachWindow calls f(yi, o) for every output position of a plane: yi is its plane
// offset and o its coordinates (3-axis form).
func (p *PoolParams) forEachWindow(f func(yi int, o [3]int)) {
	yi := 0
	for o0 := 0; o0 < p.out[0]; o0++ {
		for o1 := 0; o1 < p.out[1]; o1++ {
			for o2 := 0; o2 < p.out[2]; o2++ {
				f(yi, [3]int{o0, o1, o2})
				yi++
			}
		}
	}
}

// taps calls g(xi) for the plane offset of every window tap of output o inside the input.
func (p *PoolParams) taps(o [3]int, g func(xi int)) {
	f0, f1, f2 := p.first[0][o[0]], p.first[1][o[1]], p.first[2][o[2]]
	c0, c1, c2 := p.cnt[0][o[0]], p.cnt[1][o[1]], p.cnt[2][o[2]]
	d0, d1, d2 := p.dil[0], p.dil[1], p.dil[2]
	for t0 := 0; t0 < c0; t0++ {
		r0 := (f0 + t0*d0) * p.in[1]
		for t1 := 0; t1 < c1; t1++ {
			r1 := (r0 + f1 + t1*d1) * p.in[2]
			for t2 := 0; t2 < c2; t2++ {
				g(r1 + f2 + t2*d2)
			}
		}
	}
}

// outRows calls f(yOff, rows, div) for every output row (a run along the last axis) of a
// plane: yOff is its plane offset, rows the plane offsets of the starts of the input rows
// its windows cover (inside the input), and div[o] AvgPool's divisor for output o. Kernels then sweep whole rows per tap, whose
// iterations are independent, instead of reducing each small window serially.
func (p *PoolParams) outRows(f func(yOff int, rows []int, div []int)) {
	rows := make([]int, 0, 16)
	div := make([]int, p.out[2])
	c2 := p.cnt[2]
	if p.CountIncludePad {
		c2 = p.pad[2]
	}
	in1, in2 := p.in[1], p.in[2]
	d0, d1 := p.dil[0], p.dil[1]
	yOff := 0
	for o0 := 0; o0 < p.out[0]; o0++ {
		f0, c0 := p.first[0][o0], p.cnt[0][o0]
		for o1 := 0; o1 < p.out[1]; o1++ {
			f1, c1 := p.first[1][o1], p.cnt[1][o1]
			rows = rows[:0]
			for t0 := 0; t0 < c0; t0++ {
				for t1 := 0; t1 < c1; t1++ {
					rows = append(rows, ((f0+t0*d0)*in1+f1+t1*d1)*in2)
				}
			}
			c01 := p.cnt[0][o0] * p.cnt[1][o1]
			if p.CountIncludePad {
				c01 = p.pad[0][o0] * p.pad[1][o1]
			}
			for o := range div {
				div[o] = c01 * c2[o]
			}
			f(yOff, rows, div)
			yOff += p.out[2]
		}
	}
}

// MaxPool computes y = max over each window (ONNX MaxPool; padding never wins). NaN
// inputs propagate. If argmax is non-nil it receives, for every output, the flat index
// into x of the maximum (ONNX Indices with storage_order 0: n·C·prod(Spatial) + c·
// prod(Spatial) + spatial offset), which MaxPoolBackward consumes; a window with no tap
// inside the input (only possible with unusual pads and dilations) yields -Inf and -1.
//
// Preconditions (panics otherwise): p.Init succeeded; len(x) ≥ XLen(), len(y) ≥ YLen(),
// argmax nil or len(argmax) ≥ YLen() and XLen() ≤ MaxInt32.
func MaxPool[T Float](p *PoolParams, x, y []T, argmax []int32) {
	p.check("MaxPool", len(x), len(y))
	if argmax != nil {
		needLen("MaxPool", "argmax", len(argmax), p.YLen())
		if p.XLen() > math.MaxInt32 {
			panic("cpu.MaxPool: input too large for int32 argmax")
		}
	}
	if argmax == nil && maxPoolFlat(p, x, y) {
		return
	}
	p.planes(func(pl int) {
		xp := x[pl*p.inSize : (pl+1)*p.inSize]
		yp := y[pl*p.outSize : (pl+1)*p.outSize]
		var ap []int32
		if argmax != nil {
			ap = argmax[pl*p.outSize : (pl+1)*p.outSize]
		}
		base := int32(pl * p.inSize)
		in2, d2 := p.in[2], p.dil[2]
		p.outRows(func(yOff int, rows []int, div []int) {
			yr := yp[yOff : yOff+p.out[2]]
			for i := range yr {
				yr[i] = T(math.Inf(-1))
			}
			for _, r := range rows {
				xr := xp[r : r+in2]
				for t := 0; t < p.k2; t++ {
					off, lo, hi := p.off2[t], p.lo2[t], p.hi2[t]
					if p.s2 == 1 && lo < hi { // contiguous taps: the vectorised row max
						maxIntoRow(yr[lo:hi], xr[lo+off:hi+off])
						continue
					}
					for o := lo; o < hi; o++ {
						yr[o] = max(yr[o], xr[o*p.s2+off]) // builtin max: NaN propagates
					}
				}
			}
			if ap == nil {
				return
			}
			// The first tap (in row-major window order) holding the maximum; for a NaN
			// maximum, the first NaN.
			ar := ap[yOff : yOff+p.out[2]]
			for o, best := range yr {
				bi := int32(-1)
				nan := best != best
				f2, c2 := p.first[2][o], p.cnt[2][o]
			search:
				for _, r := range rows {
					for t := 0; t < c2; t++ {
						if v := xp[r+f2+t*d2]; v == best || (nan && v != v) {
							bi = base + int32(r+f2+t*d2)
							break search
						}
					}
				}
				ar[o] = bi
			}
		})
	})
}

// maxPoolFlat is MaxPool without argmax for 2-d windows of dilation 1 (every 2-d max pool
// the CNNs run at inference: Inception's 3×3 stride-1 pools, the 3×3 and 2×2 stride-2 ones
// after stems and stages). The window max is separable — the max over the window is the max
// over its k1 columns of each column's max over the window's k0 rows — so each output row
// takes two vectorised passes (maxTapsRow: three taps a pass) instead of a scalar max per tap
// and output:
//   - v = the max of the window's input rows (those inside x), into a row padded to wp = the
//     columns the windows cover, the padding (and ceil mode's overhang) −∞;
//   - h[j] = max(v[j], …, v[j+k1−1]), the shifted row maxima, straight into y for stride 1,
//     else into scratch of which y takes every s1-th element; a 3-wide window of stride 2
//     (every CNN's strided max pool) straight into y in one pass (max3s2Row).
//
// The maximum is the builtin's (NaN propagates, +0 beats −0), which is commutative and
// associative, so the order of taps changes no value; padding (−∞) never wins, and a window
// wholly in the padding gives −∞ as the general path does. Scratch: two rows per worker,
// allocated per call. Stride-1 pools take maxPoolFlatPlane instead. It reports false,
// computing nothing, for other pools.
func maxPoolFlat[T Float](p *PoolParams, x, y []T) bool {
	if len(p.Spatial) != 2 || p.Dilation[0] != 1 || p.Dilation[1] != 1 {
		return false
	}
	if maxPool2x2s2(p, x, y) || maxPool3x3s2(p, x, y) || maxPool3x3(p, x, y) {
		return true
	}
	if p.Stride[0] == 1 && p.Stride[1] == 1 {
		return maxPoolFlatPlane(p, x, y)
	}
	h, w := p.Spatial[0], p.Spatial[1]
	k0, k1 := p.Kernel[0], p.Kernel[1]
	s0, s1 := p.Stride[0], p.Stride[1]
	oh, ow := p.OutSpatial[0], p.OutSpatial[1]
	pb0, pb1 := p.PadBegin[0], p.PadBegin[1]
	// The columns the windows cover, from the first window's first tap (padded coordinates);
	// input columns past them are read by no window.
	wp := (ow-1)*s1 + k1
	cols := min(w, wp-pb1)
	if cols <= 0 {
		return false
	}
	hn := (ow-1)*s1 + 1 // the shifted maxima y reads
	inf := T(math.Inf(-1))
	Parallel(p.Batch*p.Channels, max(1, 2048/max(1, p.outSize)), func(lo, hi int) {
		v := make([]T, wp)
		hs := make([]T, hn)
		for i := range v {
			v[i] = inf
		}
		vx := v[pb1 : pb1+cols]
		for pl := lo; pl < hi; pl++ {
			xp := x[pl*p.inSize : (pl+1)*p.inSize]
			yp := y[pl*p.outSize : (pl+1)*p.outSize]
			for o := range oh {
				r0, r1 := max(0, o*s0-pb0), min(h, o*s0-pb0+k0)
				if r0 >= r1 { // a window row wholly in the padding
					for i := range vx {
						vx[i] = inf
					}
				} else {
					maxTapsRow(vx, xp[r0*w:], r1-r0, w)
				}
				yr := yp[o*ow : (o+1)*ow]
				if k1 == 3 && s1 == 2 { // the stride-2 window in one pass (maxNaN3s2_32)
					max3s2Row(yr, v)
					continue
				}
				hr := hs
				if s1 == 1 {
					hr = yr
				}
				maxTapsRow(hr, v, k1, 1)
				if s1 != 1 {
					for j := range yr {
						yr[j] = hs[j*s1]
					}
				}
			}
		}
	})
	return true
}

// poolBlocks runs f over planes whole planes of plane elements, in blocks of up to block
// planes spread over the workers: f(b0, b1, n, bs, scratch) for planes b0 … b1−1 (n
// elements), with scratch of size(bs) elements from conv.go's pool, bs being a full block's
// elements (fewer where a worker has fewer planes), which f writes before it reads.
func poolBlocks[T Float](planes, plane, block int, size func(bs int) int, f func(b0, b1, n, bs int, scratch []T)) {
	Parallel(planes, block, func(lo, hi int) {
		bs := min(block, hi-lo) * plane
		buf, scratch := convGetBuf[T](size(bs))
		defer convPutBuf(buf)
		for b0 := lo; b0 < hi; b0 += block {
			b1 := min(hi, b0+block)
			f(b0, b1, (b1-b0)*plane, bs, scratch)
		}
	})
}

// maxPool2x2s2 is maxPoolFlat for 2 × 2 stride-2 windows without padding on planes of even
// height and width, which they tile exactly (GoogLeNet's last pool, 832 × 14 × 14, whose ceil
// mode then changes nothing). maxPoolFlat's three calls an output row cost more than their
// arithmetic on such planes — 289 µs of GoogLeNet's step at two threads, where onnxruntime
// took 42 — so a block of planes takes two long passes, vs[i] = max(x[i], x[i+w]) and then
// g[t] = max(vs[2t], vs[2t+1]) (max2s2Row), and each output row is a run of g, copied out
// with vector moves (picking every other of the pairs' maxima one by one took most of the
// time). Padding
// never enters and the builtin max is commutative and associative, so the bits are the
// general path's (TestMaxPoolFlatMatchesGeneral). It reports false, computing nothing, for
// other pools.
func maxPool2x2s2[T Float](p *PoolParams, x, y []T) bool {
	h, w := p.Spatial[0], p.Spatial[1]
	oh, ow := p.OutSpatial[0], p.OutSpatial[1]
	if p.Kernel[0] != 2 || p.Kernel[1] != 2 || p.Stride[0] != 2 || p.Stride[1] != 2 ||
		p.PadBegin[0] != 0 || p.PadBegin[1] != 0 || h%2 != 0 || w%2 != 0 || oh != h/2 || ow != w/2 {
		return false
	}
	plane, oPlane := h*w, oh*ow
	block := max(1, 4096/plane)
	poolBlocks(p.Batch*p.Channels, plane, block, func(bs int) int { return bs + bs/2 }, func(b0, b1, n, bs int, scratch []T) {
		vs, g := scratch[:n-w], scratch[bs:bs+(n-w)/2]
		maxTapsRow(vs, x[b0*plane:b1*plane], 2, w)
		max2s2Row(g, vs) // every other of g's w-long rows is an output row, as w is even
		for pl := b0; pl < b1; pl++ {
			gp, yp := g[(pl-b0)*plane/2:], y[pl*oPlane:(pl+1)*oPlane]
			if !gemmFastCopy(yp, ow, gp, w, oh, ow) {
				for o := 0; o < oh; o++ {
					copyShort(yp[o*ow:(o+1)*ow], gp[o*w:o*w+ow])
				}
			}
		}
	})
	return true
}

// maxPool3x3s2Wide is the narrowest plane on which maxPool3x3s2 computes the column maxima
// of the output rows' windows only, a call a row (see there).
const maxPool3x3s2Wide = 96

// maxPool3x3s2 is maxPoolFlat for 3 × 3 stride-2 windows without padding on planes of even
// width whose windows reach at most one column and one row past the input (ceil mode's
// overhang: GoogLeNet's 3×3 pools after its stem and between its stages). Per-row calls cost
// more than their arithmetic on narrow planes (28, 14 or 7 outputs a row), so a block of
// planes takes two long passes: the column maxima of every three rows (vs[i] = max(x[i],
// x[i+w], x[i+2w]), the rows the input's last row cuts redone over the two inside), then the
// 3-wide stride-2 row maxima of all of vs at once (g[t] = max(vs[2t], vs[2t+1], vs[2t+2]):
// every other of g's w-long rows is an output row, as w is even), after which each output row
// is a copy out of g, its last window redone over the two columns inside where it hangs over.
// From maxPool3x3s2Wide columns up a call a row is cheap next to the row, and vs holds the
// output rows' column maxima only (half the passes' work); in ceil mode (w/2 outputs a row)
// g's rows are then y's, and the row pass writes y itself. GoogLeNet's first pool (64 × 112 ×
// 112, maxPoolFlat's per-row calls before) ran 1.28–1.32× faster (one and two threads, Zen 5,
// medians of seven alternating runs; a call a row on 56 × 56 planes: 0.91×). Padding never wins and the
// builtin max is commutative and associative, so the bits are the general path's
// (TestMaxPoolFlatMatchesGeneral). Interleaved medians, µs, one / two threads (2026-11-28):
// a 3×3 pool on 832 × 14 × 14 246 / 149 → 156 / 88 (maxPool3x3 before; GoogLeNet's pool on
// those planes is 2×2, maxPool2x2s2), GoogLeNet's 480 × 28 × 28 one 402 / 246 → 265 / 182
// (maxPoolFlat's per-row calls before). Its output rows were a copy call each, 60% of the
// time on 192 × 56 × 56 planes, which therefore stayed with maxPoolFlat; copied a plane at a
// time by vector moves (gemmFastCopy), that pool ran 1.6× faster than maxPoolFlat and the 480
// × 28 × 28 one 1.2× (Zen 5, one and two threads, medians of five alternating runs,
// 2026-11-29). It reports false, computing nothing, for other pools.
func maxPool3x3s2[T Float](p *PoolParams, x, y []T) bool {
	h, w := p.Spatial[0], p.Spatial[1]
	oh, ow := p.OutSpatial[0], p.OutSpatial[1]
	if p.Kernel[0] != 3 || p.Kernel[1] != 3 || p.Stride[0] != 2 || p.Stride[1] != 2 ||
		p.PadBegin[0] != 0 || p.PadBegin[1] != 0 || w%2 != 0 || h < 3 || w < 4 {
		return false
	}
	rowOver, colOver := 2*oh+1-h, 2*ow+1-w // taps past the last row and column: at most one
	if rowOver > 1 || colOver > 1 {
		return false
	}
	plane, oPlane := h*w, oh*ow
	// vs holds the window column maxima: on narrow planes of every input row (one call for
	// the block), output row o's at row 2o; on wide ones of the output rows only (a call each,
	// half the work), output row o's at row o. vr is the rows from one output row's to the
	// next's.
	vr := 2 * w
	if w >= maxPool3x3s2Wide {
		vr = w
	}
	vPlane := oh * vr
	if vr == 2*w {
		vPlane = plane
	}
	direct := vr == w && ow == w/2 // ceil mode: the stride-2 row maxima of vs are y's rows, back to back
	block := max(1, 4096/plane)
	poolBlocks(p.Batch*p.Channels, plane, block, func(bs int) int { n := bs / plane * vPlane; return n + n/2 }, func(b0, b1, n, bs int, scratch []T) {
		nb, most := b1-b0, bs/plane*vPlane
		xs, vs := x[b0*plane:b1*plane], scratch[:nb*vPlane]
		if vr == 2*w {
			max3Row(vs[:n-2*w], xs[:n-2*w], xs[w:n-w], xs[2*w:])
		} else {
			for pl := b0; pl < b1; pl++ {
				xp, vp := x[pl*plane:(pl+1)*plane], vs[(pl-b0)*vPlane:]
				for o := 0; o < oh-rowOver; o++ {
					r := 2 * o * w
					max3Row(vp[o*w:(o+1)*w], xp[r:r+w], xp[r+w:r+2*w], xp[r+2*w:r+3*w])
				}
			}
		}
		if rowOver == 1 { // the last output row's windows: input rows h−2 and h−1 only
			for pl := 0; pl < nb; pl++ {
				r, v := pl*plane+plane-2*w, vs[pl*vPlane+(oh-1)*vr:][:w]
				copy(v, xs[r:r+w])
				maxIntoRow(v, xs[r+w:r+2*w])
			}
		}
		g := scratch[most : most+nb*vPlane/2-1]
		if direct { // the block's last output is the last row's overhanging window, redone below
			g = y[b0*oPlane : b1*oPlane-1]
		}
		max3s2Row(g, vs)
		for pl := b0; pl < b1; pl++ {
			vp, yp := vs[(pl-b0)*vPlane:], y[pl*oPlane:(pl+1)*oPlane]
			if !direct {
				// The output rows, every (vr/2)-th run of g: in one call of vector moves
				// where the rows are 16 to 128 bytes (a copy a row was 60% of the 192 × 56 ×
				// 56 pool).
				gp := g[(pl-b0)*vPlane/2:]
				if !gemmFastCopy(yp, ow, gp, vr/2, oh, ow) {
					for o := 0; o < oh; o++ {
						copyShort(yp[o*ow:(o+1)*ow], gp[o*vr/2:o*vr/2+ow])
					}
				}
			}
			if colOver == 1 {
				for o := 0; o < oh; o++ {
					yp[o*ow+ow-1] = max(vp[o*vr+w-2], vp[o*vr+w-1])
				}
			}
		}
	})
	return true
}

// maxPool3x3 is maxPoolFlat for 3 × 3 windows whose centres lie inside the input (pads of at
// most 1 on each side; every CNN's 3×3 max pool: ResNet's stem, GoogLeNet's ceil-mode stride-2
// pools, each Inception block's stride-1 pool). It computes the 3 × 3 max centred on every
// input element, a window the input's edge cuts taking the taps inside — each separable pass
// one long vectorised three-way max over a block of whole planes, read in place
// (h[i] = max(x[i−1], x[i], x[i+1]), then max(h[i−w], h[i], h[i+w])), after which each row's
// first and last column and each plane's first and last row are computed again over the taps
// inside — and takes y from the window centres: all of it for stride 1 with pad 1 (written
// straight into y), every s-th element otherwise. The per-row calls of maxPoolFlat and
// maxPoolFlatPlane cost more than the arithmetic on small planes (GoogLeNet's 832 × 7 × 7
// pool: 250 µs at two threads, onnxruntime 23 µs at one), so the extra centres a stride skips
// are cheaper to compute than to avoid. Padding never wins and the builtin max is
// commutative and associative, so the bits are the general path's. Blocks of about 8 KiB of x
// stay in L1 with their scratch (from conv.go's pool). It reports false, computing nothing,
// for other pools, and for strided ones on rows wider than maxPool3x3Strided.
func maxPool3x3[T Float](p *PoolParams, x, y []T) bool {
	h, w := p.Spatial[0], p.Spatial[1]
	oh, ow := p.OutSpatial[0], p.OutSpatial[1]
	s0, s1, pb0, pb1 := p.Stride[0], p.Stride[1], p.PadBegin[0], p.PadBegin[1]
	if p.Kernel[0] != 3 || p.Kernel[1] != 3 || h < 2 || w < 2 || pb0 > 1 || pb1 > 1 ||
		(oh-1)*s0-pb0+1 >= h || (ow-1)*s1-pb1+1 >= w {
		return false
	}
	plane, oPlane := h*w, oh*ow
	direct := s0 == 1 && s1 == 1 && pb0 == 1 && pb1 == 1 // y is every centre
	if !direct && w > maxPool3x3Strided {
		return false
	}
	block := max(1, 2048/plane)
	poolBlocks(p.Batch*p.Channels, plane, block, func(bs int) int { return 2 * bs }, func(b0, b1, n, bs int, scratch []T) {
		xs, hs, fs := x[b0*plane:b1*plane], scratch[:n], scratch[bs:bs+n]
		if direct {
			fs = y[b0*plane : b1*plane]
		}
		max3Row(hs[1:n-1], xs[:n-2], xs[1:n-1], xs[2:])
		for r := 0; r < n; r += w {
			hs[r] = max(xs[r], xs[r+1])
			hs[r+w-1] = max(xs[r+w-2], xs[r+w-1])
		}
		if n > 2*w {
			max3Row(fs[w:n-w], hs[:n-2*w], hs[w:n-w], hs[2*w:])
		}
		for pl := 0; pl < n; pl += plane {
			first, last := pl, pl+plane-w
			copy(fs[first:first+w], hs[first:first+w])
			maxIntoRow(fs[first:first+w], hs[first+w:first+2*w])
			copy(fs[last:last+w], hs[last:last+w])
			maxIntoRow(fs[last:last+w], hs[last-w:last])
		}
		if direct {
			return
		}
		for pl := b0; pl < b1; pl++ {
			fp, yp := fs[(pl-b0)*plane:], y[pl*oPlane:(pl+1)*oPlane]
			for o := 0; o < oh; o++ {
				fr, yr := fp[(o*s0-pb0+1)*w+1-pb1:], yp[o*ow:(o+1)*ow]
				for j := range yr {
					yr[j] = fr[j*s1]
				}
			}
		}
	})
	return true
}

// maxPool3x3Strided is the widest rows on which maxPool3x3 takes a strided pool: computing
// every centre cost more than maxPoolFlat's calls a row on wider ones (one thread, µs:
// GoogLeNet's 832 × 14 × 14 3×3/2 pool 298 → 207, its 480 × 28 × 28 one 374 → 390, 192 × 56
// × 56 427 → 550, ResNet's 64 × 112 × 112 stem pool 443 → 775). Since maxPoolFlat takes a
// 3-wide stride-2 window in one pass (max3s2Row) the wide ones are faster still: the stem
// pool 450 → 310–326, 192 × 56 × 56 430–444 → 289–302 (BenchmarkMaxPoolInference).
const maxPool3x3Strided = 16

// maxPoolFlatPlane is maxPoolFlat's stride-1 form: an Inception block's rows are short (28
// or 14 outputs), so a pass per output row would be mostly call overhead. Each plane is
// copied into a scratch plane with its padding as −∞ and rows widened to the padded width
// wp; then both separable passes run over the whole flat plane: the row maxima over k1
// shifts by one (values straddling a row end fall in columns no window starts at), the
// column maxima over k0 shifts by wp, and y takes the first ow columns of each row.
func maxPoolFlatPlane[T Float](p *PoolParams, x, y []T) bool {
	h, w := p.Spatial[0], p.Spatial[1]
	k0, k1 := p.Kernel[0], p.Kernel[1]
	oh, ow := p.OutSpatial[0], p.OutSpatial[1]
	pb0, pb1 := p.PadBegin[0], p.PadBegin[1]
	hp, wp := oh+k0-1, ow+k1-1 // the rows and columns the windows cover
	rows, cols := min(h, hp-pb0), min(w, wp-pb1)
	if rows <= 0 || cols <= 0 {
		return false
	}
	n := hp * wp
	inf := T(math.Inf(-1))
	Parallel(p.Batch*p.Channels, max(1, 2048/max(1, p.outSize)), func(lo, hi int) {
		xs := make([]T, n+k1-1)     // plus the elements the last shifts read past the plane
		buf, hs := convGetBuf[T](n) // every element written before it is read
		defer convPutBuf(buf)
		vs := make([]T, oh*wp)
		for i := range xs {
			xs[i] = inf
		}
		for pl := lo; pl < hi; pl++ {
			xp := x[pl*p.inSize : (pl+1)*p.inSize]
			for r := range rows {
				copy(xs[(r+pb0)*wp+pb1:], xp[r*w:r*w+cols])
			}
			maxTapsRow(hs, xs, k1, 1)
			maxTapsRow(vs, hs, k0, wp)
			yp := y[pl*p.outSize : (pl+1)*p.outSize]
			for r := range oh {
				copy(yp[r*ow:(r+1)*ow], vs[r*wp:])
			}
		}
	})
	return true
}

// MaxPoolBackward scatters dy onto the positions MaxPool selected: dx = 0, then
// dx[argmax[i]] += dy[i]. dx is overwritten.
//
// Preconditions (panics otherwise): p.Init succeeded; len(dy), len(argmax) ≥ YLen(),
// len(dx) ≥ XLen(); argmax as produced by MaxPool with the same p.
func MaxPoolBackward[T Float](p *PoolParams, dy []T, argmax []int32, dx []T) {
	p.check("MaxPoolBackward", len(dx), len(dy))
	needLen("MaxPoolBackward", "argmax", len(argmax), p.YLen())
	// Each plane's argmax entries point into the same plane, so planes are independent.
	p.planes(func(pl int) {
		clear(dx[pl*p.inSize : (pl+1)*p.inSize])
		for i := pl * p.outSize; i < (pl+1)*p.outSize; i++ {
			if j := argmax[i]; j >= 0 {
				dx[j] += dy[i]
			}
		}
	})
}

// AvgPool computes y = the mean of each window (ONNX AveragePool), dividing by the taps
// inside the input, or inside the padded input when p.CountIncludePad. A window without
// any counted tap yields 0.
//
// Preconditions (panics otherwise): p.Init succeeded; len(x) ≥ XLen(), len(y) ≥ YLen().
func AvgPool[T Float](p *PoolParams, x, y []T) {
	p.check("AvgPool", len(x), len(y))
	if p.global() {
		avgPoolGlobal(p, x, y)
		return
	}
	if avgPoolInside(p, x, y) {
		return
	}
	p.planes(func(pl int) {
		xp := x[pl*p.inSize : (pl+1)*p.inSize]
		yp := y[pl*p.outSize : (pl+1)*p.outSize]
		in2 := p.in[2]
		p.outRows(func(yOff int, rows []int, div []int) {
			yr := yp[yOff : yOff+p.out[2]]
			clear(yr)
			for _, r := range rows {
				xr := xp[r : r+in2]
				for t := 0; t < p.k2; t++ {
					off := p.off2[t]
					for o := p.lo2[t]; o < p.hi2[t]; o++ {
						yr[o] += xr[o*p.s2+off]
					}
				}
			}
			for o, n := range div {
				if n > 0 {
					yr[o] /= T(n)
				}
			}
		})
	})
}

// avgPoolInside is AvgPool for 2-d windows of dilation 1 that all lie inside the input (no
// padding, no ceil-mode overhang: DenseNet's 2×2/2 transition pools): each output sums its
// window's taps in the general path's order — from +0, row by row — and divides by the
// window's size once, in one pass per output row instead of the general path's pass per tap
// and row set-up per output row (DenseNet-121's three transition pools: 1 ms of a 38 ms step
// at two threads, onnxruntime 0.23). Dividing by a power of two is multiplying by its
// reciprocal exactly, so those sizes multiply. It reports false, computing nothing, for
// other pools.
func avgPoolInside[T Float](p *PoolParams, x, y []T) bool {
	if len(p.Spatial) != 2 || p.Dilation[0] != 1 || p.Dilation[1] != 1 {
		return false
	}
	h, w := p.Spatial[0], p.Spatial[1]
	k0, k1, s0, s1 := p.Kernel[0], p.Kernel[1], p.Stride[0], p.Stride[1]
	oh, ow := p.OutSpatial[0], p.OutSpatial[1]
	if p.PadBegin[0] != 0 || p.PadBegin[1] != 0 || (oh-1)*s0+k0 > h || (ow-1)*s1+k1 > w {
		return false
	}
	n := k0 * k1
	div, mul := T(n), T(0)
	if n&(n-1) == 0 {
		mul = 1 / T(n)
	}
	p.planes(func(pl int) {
		xp := x[pl*p.inSize : (pl+1)*p.inSize]
		yp := y[pl*p.outSize : (pl+1)*p.outSize]
		for o := 0; o < oh; o++ {
			yr := yp[o*ow : (o+1)*ow]
			rows := xp[o*s0*w:]
			if k0 == 2 && k1 == 2 && s1 == 2 {
				r0, r1 := rows[:2*ow], rows[w:w+2*ow]
				for j := range yr {
					s := T(0) + r0[2*j]
					s += r0[2*j+1]
					s += r1[2*j]
					s += r1[2*j+1]
					yr[j] = s * mul
				}
				continue
			}
			for j := range yr {
				s := T(0)
				for t0 := 0; t0 < k0; t0++ {
					for _, v := range rows[t0*w+j*s1 : t0*w+j*s1+k1] {
						s += v
					}
				}
				if mul != 0 {
					yr[j] = s * mul
				} else {
					yr[j] = s / div
				}
			}
		}
	})
	return true
}

// global reports whether every window is its whole plane: one output a plane, no padding
// (a CNN's global average pool before its classifier).
func (p *PoolParams) global() bool {
	for i, in := range p.Spatial {
		if p.OutSpatial[i] != 1 || p.Kernel[i] != in || p.PadBegin[i] != 0 || p.PadEnd[i] != 0 || p.Dilation[i] != 1 {
			return false
		}
	}
	return true
}

// avgPoolGlobal is AvgPool where every window is its plane: each plane summed in order from
// 0, as the general path sums its window's taps (row by row, so the same bits), four planes
// at a time so that their independent sums overlap, then divided by the plane's size. The
// general path's per-plane set-up cost more than the sums (GoogLeNet's 1024 × 7 × 7: 390 µs,
// onnxruntime 50).
func avgPoolGlobal[T Float](p *PoolParams, x, y []T) {
	n := p.inSize
	Parallel(p.Batch*p.Channels, max(1, 4096/max(1, n)), func(lo, hi int) {
		pl := lo
		for ; pl+4 <= hi; pl += 4 {
			a, b, c, d := x[pl*n:(pl+1)*n], x[(pl+1)*n:(pl+2)*n], x[(pl+2)*n:(pl+3)*n], x[(pl+3)*n:(pl+4)*n]
			var sa, sb, sc, sd T
			for i := range a {
				sa += a[i]
				sb += b[i]
				sc += c[i]
				sd += d[i]
			}
			y[pl], y[pl+1], y[pl+2], y[pl+3] = sa/T(n), sb/T(n), sc/T(n), sd/T(n)
		}
		for ; pl < hi; pl++ {
			var s T
			for _, v := range x[pl*n : (pl+1)*n] {
				s += v
			}
			y[pl] = s / T(n)
		}
	})
}

// AvgPoolBackward is AvgPool's adjoint: each dy is spread evenly (with AvgPool's divisor)
// over its window's taps inside the input. dx is overwritten.
//
// Preconditions (panics otherwise): p.Init succeeded; len(dy) ≥ YLen(), len(dx) ≥ XLen().
func AvgPoolBackward[T Float](p *PoolParams, dy, dx []T) {
	p.check("AvgPoolBackward", len(dx), len(dy))
	p.planes(func(pl int) {
		dxp := dx[pl*p.inSize : (pl+1)*p.inSize]
		dyp := dy[pl*p.outSize : (pl+1)*p.outSize]
		clear(dxp)
		in2 := p.in[2]
		g := make([]T, p.out[2])
		p.outRows(func(yOff int, rows []int, div []int) {
			for o, n := range div {
				g[o] = 0
				if n > 0 {
					g[o] = dyp[yOff+o] / T(n)
				}
			}
			for _, r := range rows {
				xr := dxp[r : r+in2]
				for t := 0; t < p.k2; t++ {
					off := p.off2[t]
					for o := p.lo2[t]; o < p.hi2[t]; o++ {
						xr[o*p.s2+off] += g[o]
					}
				}
			}
		})
	})
}

// LpPool computes y = (Σ |x|^P)^(1/P) over each window (ONNX LpPool; padding contributes
// zeros).
//
// Preconditions (panics otherwise): p.Init succeeded; len(x) ≥ XLen(), len(y) ≥ YLen().
func LpPool[T Float](p *PoolParams, x, y []T) {
	p.check("LpPool", len(x), len(y))
	order := float64(p.P)
	p.planes(func(pl int) {
		xp := x[pl*p.inSize : (pl+1)*p.inSize]
		yp := y[pl*p.outSize : (pl+1)*p.outSize]
		p.forEachWindow(func(yi int, o [3]int) {
			var s float64
			switch p.P {
			case 1:
				p.taps(o, func(xi int) { s += math.Abs(float64(xp[xi])) })
			case 2:
				p.taps(o, func(xi int) { v := float64(xp[xi]); s += v * v })
				s = math.Sqrt(s)
			default:
				p.taps(o, func(xi int) { s += math.Pow(math.Abs(float64(xp[xi])), order) })
				s = math.Pow(s, 1/order)
			}
			yp[yi] = T(s)
		})
	})
}

// LpPoolBackward is LpPool's gradient: dx = Σ dy·|x|^(P-1)·sign(x) / y^(P-1) over the
// windows containing each input (0 where y is 0). dx is overwritten.
func LpPoolBackward[T Float](p *PoolParams, x, y, dy, dx []T) {
	p.check("LpPoolBackward", len(x), len(y))
	p.check("LpPoolBackward", len(dx), len(dy))
	order := float64(p.P)
	p.planes(func(pl int) {
		xp := x[pl*p.inSize : (pl+1)*p.inSize]
		dxp := dx[pl*p.inSize : (pl+1)*p.inSize]
		yp := y[pl*p.outSize : (pl+1)*p.outSize]
		dyp := dy[pl*p.outSize : (pl+1)*p.outSize]
		clear(dxp)
		p.forEachWindow(func(yi int, o [3]int) {
			yv := float64(yp[yi])
			if yv == 0 {
				return
			}
			g := float64(dyp[yi]) / math.Pow(yv, order-1)
			p.taps(o, func(xi int) {
				v := float64(xp[xi])
				d := math.Pow(math.Abs(v), order-1)
				if v < 0 {
					d = -d
				}
				dxp[xi] += T(g * d)
			})
		})
	})
}

// GlobalAvgPool averages each of the n·c planes of x ([n, c, spatial]) into y ([n, c]).
func GlobalAvgPool[T Float](x []T, n, c, spatial int, y []T) {
	globalPool("GlobalAvgPool", x, n, c, spatial, y, func(p []T) T {
		var s float64
		for _, v := range p {
			s += float64(v)
		}
		return T(s / float64(max(1, len(p))))
	})
}

// GlobalMaxPool takes the maximum of each of the n·c planes of x ([n, c, spatial]) into y
// ([n, c]); NaNs propagate, an empty plane gives -Inf.
func GlobalMaxPool[T Float](x []T, n, c, spatial int, y []T) {
	globalPool("GlobalMaxPool", x, n, c, spatial, y, func(p []T) T {
		best := T(math.Inf(-1))
		for _, v := range p {
			if v > best || v != v {
				best = v
				if v != v {
					break
				}
			}
		}
		return best
	})
}

// GlobalAvgPoolBackward spreads dy ([n, c]) evenly over each plane of dx ([n, c, spatial]).
func GlobalAvgPoolBackward[T Float](dy []T, n, c, spatial int, dx []T) {
	needLen("GlobalAvgPoolBackward", "dy", len(dy), n*c)
	needLen("GlobalAvgPoolBackward", "dx", len(dx), n*c*spatial)
	Parallel(n*c, max(1, 4096/max(1, spatial)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := dy[i] / T(spatial)
			p := dx[i*spatial : (i+1)*spatial]
			for j := range p {
				p[j] = g
			}
		}
	})
}

func globalPool[T Float](op string, x []T, n, c, spatial int, y []T, f func([]T) T) {
	if n < 0 || c < 0 || spatial < 0 {
		panic(fmt.Sprintf("cpu.%s: negative shape %d, %d, %d", op, n, c, spatial))
	}
	needLen(op, "x", len(x), n*c*spatial)
	needLen(op, "y", len(y), n*c)
	Parallel(n*c, max(1, 4096/max(1, spatial)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] = f(x[i*spatial : (i+1)*spatial])
		}
	})
}
