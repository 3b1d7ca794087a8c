package cpu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
	"unsafe"
)

// ConvParams describes an N-d convolution (ONNX Conv semantics) on NC(D)HW tensors:
// x is [Batch, InC, Spatial...], w is [OutC, InC/Groups, Kernel...], bias is [OutC] and
// y is [Batch, OutC, OutSpatial...], all flat row-major.
//
//	out[i] = floor((Spatial[i] + PadBegin[i] + PadEnd[i] - Dilation[i]·(Kernel[i]-1) - 1) / Stride[i]) + 1
//
// Fill in the exported fields and call Init, which validates them, defaults nil Stride and
// Dilation to 1, nil pads to 0 and Groups 0 to 1, and computes OutSpatial. auto_pad is resolved by the
// caller into explicit pads. A Params value may be reused for many calls but not modified
// after Init; calls with the same Params may run concurrently.
type ConvParams struct {
	Batch, InC, OutC, Groups int
	Spatial                  []int // input spatial dims
	Kernel, Stride, Dilation []int
	PadBegin, PadEnd         []int
	OutSpatial               []int // computed by Init

	g convGeom
}

// convGeom is the shape arithmetic shared by Conv, its adjoints and ConvTranspose.
type convGeom struct {
	batch, inC, outC, groups int
	cg, ocg                  int // channels per group, in and out
	inSize, outSize, kSize   int // products of spatial dims
	kdim                     int // cg·kSize: rows of the im2col matrix
	pointwise                bool
	lastStride               int
	// segs lists, for every kernel tap and output line (all spatial axes but the last),
	// the run of output positions along the last axis whose input lies inside x.
	segs     []convSeg
	segStart []int32  // segs[segStart[k]:segStart[k+1]] are tap k's, in output order
	ind      *convInd // convIndirect's geometry; nil where it does not apply
	sub      *convSub // convSubsampled's geometry; nil where it does not apply
	bc       *convBc  // convBcast's geometry; nil where it does not apply
	wino     bool     // 2-d, 3×3, stride 1, dilation 1: Winograd F(2×2, 3×3) applies (conv_winograd.go)
	init     bool
}

// convInd is the geometry of convIndirect: a 2-d convolution computed on the zero-padded
// image split into its s0·s1 stride phases — phase (py, px) of channel c is the hq × wq plane
// of padded positions (i·s0 + py, j·s1 + px) — so that output (oy, ox) under tap (ky, kx)
// reads phase ((ky·dh) mod s0, (kx·dw) mod s1) at (oy + ky·dh div s0, ox + kx·dw div s1). On
// an output grid of ho rows of wq columns (the last wq − wo of each row discarded), column j
// of the im2col matrix's row (c, ky, kx) is then the phase buffer at a fixed offset plus j:
// every row a shifted view, read in place by the micro-kernel. With stride 1 there is one
// phase, the padded image itself.
type convInd struct {
	h, w, pb0, pb1 int
	s0, s1         int
	hp, wp         int // the padded rows and columns the windows cover
	hq, wq         int // a phase plane
	ho, wo         int
	// Only the phases some tap reads are stored (a 1×1/2 kernel reads one of four): phaseY[py]
	// is row phase py's index among them, or −1; likewise phaseX; nx is how many column
	// phases are stored, phases the number stored.
	phaseY, phaseX []int
	nx, phases     int
	offs           []int64 // byte offsets (float32) of im2col row p = c·kSize + tap
}

// convSub is the geometry of convSubsampled: a 2-d 1×1 convolution with strides s0, s1 and no
// padding reads input (oy·s0, ox·s1) of a w-column image for output (oy, ox) of ho × wo.
type convSub struct{ w, s0, s1, ho, wo int }

// convSeg says: for kernel tap k, outputs yOff..yOff+n-1 (plane offsets) read inputs
// xOff, xOff+s, ... where s is the last axis's stride.
type convSeg struct{ k, yOff, xOff, n int32 }

func defaultInts(v []int, rank, def int, name string) ([]int, error) {
	if v == nil {
		v = make([]int, rank)
		for i := range v {
			v[i] = def
		}
		return v, nil
	}
	if len(v) != rank {
		return nil, fmt.Errorf("%s has %d entries, want %d (one per spatial axis)", name, len(v), rank)
	}
	return v, nil
}

// maxConvElems bounds spatial plane sizes so offsets fit the int32 segment table.
const maxConvElems = math.MaxInt32

// sizeOK reports whether the product of dims fits in an int with room to spare (computed
// in float64 so the check itself cannot overflow, on 32-bit platforms too).
func sizeOK(dims ...int) bool {
	p := 1.0
	for _, d := range dims {
		p *= float64(d)
	}
	return p < float64(math.MaxInt)/16
}

// Init validates the parameters and computes OutSpatial.
func (p *ConvParams) Init() error {
	rank := len(p.Spatial)
	if rank == 0 {
		return errors.New("conv: no spatial dimensions")
	}
	var err error
	if len(p.Kernel) != rank {
		return fmt.Errorf("conv: Kernel has %d entries, want %d", len(p.Kernel), rank)
	}
	if p.Stride, err = defaultInts(p.Stride, rank, 1, "conv: Stride"); err != nil {
		return err
	}
	if p.Dilation, err = defaultInts(p.Dilation, rank, 1, "conv: Dilation"); err != nil {
		return err
	}
	if p.PadBegin, err = defaultInts(p.PadBegin, rank, 0, "conv: PadBegin"); err != nil {
		return err
	}
	if p.PadEnd, err = defaultInts(p.PadEnd, rank, 0, "conv: PadEnd"); err != nil {
		return err
	}
	if p.Groups == 0 {
		p.Groups = 1
	}
	out := make([]int, rank)
	for i := 0; i < rank; i++ {
		if p.Spatial[i] < 1 || p.Kernel[i] < 1 || p.Stride[i] < 1 || p.Dilation[i] < 1 {
			return fmt.Errorf("conv: axis %d: spatial %d, kernel %d, stride %d, dilation %d must all be ≥ 1", i, p.Spatial[i], p.Kernel[i], p.Stride[i], p.Dilation[i])
		}
		if p.PadBegin[i] < 0 || p.PadEnd[i] < 0 {
			return fmt.Errorf("conv: axis %d: negative padding %d, %d", i, p.PadBegin[i], p.PadEnd[i])
		}
		ext := p.Dilation[i]*(p.Kernel[i]-1) + 1
		span := p.Spatial[i] + p.PadBegin[i] + p.PadEnd[i] - ext
		if span < 0 {
			return fmt.Errorf("conv: axis %d: dilated kernel %d larger than padded input %d", i, ext, p.Spatial[i]+p.PadBegin[i]+p.PadEnd[i])
		}
		out[i] = span/p.Stride[i] + 1
	}
	p.OutSpatial = out
	return p.g.setup(p.Batch, p.InC, p.OutC, p.Groups, p.Spatial, out, p.Kernel, p.Stride, p.Dilation, p.PadBegin)
}

// setup fills the geometry for a convolution mapping spatial dims in → out (out may be
// given explicitly, as ConvTranspose does).
func (g *convGeom) setup(batch, inC, outC, groups int, in, out, kernel, stride, dil, pb []int) error {
	if batch < 0 || inC < 1 || outC < 1 {
		return fmt.Errorf("conv: batch %d, input channels %d, output channels %d invalid", batch, inC, outC)
	}
	if groups < 1 || inC%groups != 0 || outC%groups != 0 {
		return fmt.Errorf("conv: groups %d must be ≥ 1 and divide channels %d and %d", groups, inC, outC)
	}
	*g = convGeom{batch: batch, inC: inC, outC: outC, groups: groups, cg: inC / groups, ocg: outC / groups}
	g.inSize, g.outSize, g.kSize = 1, 1, 1
	g.pointwise = true
	for i := range in {
		if !sizeOK(g.inSize, in[i]) || !sizeOK(g.outSize, out[i]) || !sizeOK(g.kSize, kernel[i]) {
			return errors.New("conv: spatial size too large")
		}
		g.inSize *= in[i]
		g.outSize *= out[i]
		g.kSize *= kernel[i]
		if g.inSize >= maxConvElems || g.outSize >= maxConvElems || g.kSize >= maxConvElems {
			return errors.New("conv: spatial size too large")
		}
		if kernel[i] != 1 || stride[i] != 1 || pb[i] != 0 || in[i] != out[i] {
			g.pointwise = false
		}
	}
	g.kdim = g.cg * g.kSize
	if !sizeOK(batch, inC, g.inSize) || !sizeOK(batch, outC, g.outSize) || !sizeOK(outC, g.kdim) || !sizeOK(g.kdim, g.outSize) {
		return errors.New("conv: tensor too large")
	}
	r := len(in)
	g.lastStride = stride[r-1]
	// Enumerate segments: for each tap (k multi-index) and each output line (o multi-index
	// over the leading r-1 axes) whose leading input coordinates are all inside x, the
	// valid range of the last output coordinate.
	kIdx := make([]int, r)
	oIdx := make([]int, r)
	lines := g.outSize / out[r-1]
	g.segStart = make([]int32, g.kSize+1)
	for k := 0; k < g.kSize; k++ {
		g.segStart[k] = int32(len(g.segs))
		// kIdx = multi-index of k
		for i, rem := r-1, k; i >= 0; i-- {
			kIdx[i] = rem % kernel[i]
			rem /= kernel[i]
		}
		off := kIdx[r-1]*dil[r-1] - pb[r-1] // input = o·s + off along the last axis
		s, iw, ow := stride[r-1], in[r-1], out[r-1]
		lo := 0
		if off < 0 {
			lo = (-off + s - 1) / s
		}
		hi := 0
		if iw-1-off >= 0 {
			hi = min(ow, (iw-1-off)/s+1)
		}
		if lo >= hi {
			continue
		}
		for line := 0; line < lines; line++ {
			for i, rem := r-2, line; i >= 0; i-- {
				oIdx[i] = rem % out[i]
				rem /= out[i]
			}
			xOff, ok := 0, true
			for i := 0; i < r-1; i++ {
				pos := oIdx[i]*stride[i] + kIdx[i]*dil[i] - pb[i]
				if pos < 0 || pos >= in[i] {
					ok = false
					break
				}
				xOff = xOff*in[i] + pos
			}
			if !ok {
				continue
			}
			xOff = xOff*iw + lo*s + off
			g.segs = append(g.segs, convSeg{k: int32(k), yOff: int32(line*ow + lo), xOff: int32(xOff), n: int32(hi - lo)})
		}
	}
	g.segStart[g.kSize] = int32(len(g.segs))
	// Strided convolutions of many channels stay with the im2col GEMM: each im2col row of
	// theirs is another channel's phase plane, and the micro-kernel's loads from that many
	// planes measured slower than packed slivers (ResNet's 1×1/2 and 3×3/2 layers); a stem's
	// three channels gain (its im2col packing was every other element).
	if r == 2 && (stride[0] == 1 && stride[1] == 1 || g.cg <= 4) {
		d := &convInd{h: in[0], w: in[1], pb0: pb[0], pb1: pb[1], s0: stride[0], s1: stride[1], ho: out[0], wo: out[1]}
		d.hp = (out[0]-1)*stride[0] + dil[0]*(kernel[0]-1) + 1
		d.wp = (out[1]-1)*stride[1] + dil[1]*(kernel[1]-1) + 1
		d.hq, d.wq = (d.hp+d.s0-1)/d.s0, (d.wp+d.s1-1)/d.s1
		if sizeOK(g.cg, d.s0*d.hq, d.s1*d.wq) {
			used := func(s, k, dil int) ([]int, int) {
				idx := make([]int, s)
				for i := range idx {
					idx[i] = -1
				}
				n := 0
				for t := 0; t < k; t++ {
					if r := t * dil % s; idx[r] < 0 {
						idx[r] = 0
					}
				}
				for r := range idx { // in residue order, so phases are stored in order
					if idx[r] == 0 {
						idx[r] = n
						n++
					}
				}
				return idx, n
			}
			var ny int
			d.phaseY, ny = used(d.s0, kernel[0], dil[0])
			d.phaseX, d.nx = used(d.s1, kernel[1], dil[1])
			d.phases = ny * d.nx
			d.offs = make([]int64, g.kdim)
			plane := d.hq * d.wq
			for c := 0; c < g.cg; c++ {
				for ky := 0; ky < kernel[0]; ky++ {
					for kx := 0; kx < kernel[1]; kx++ {
						y, x := ky*dil[0], kx*dil[1]
						phase := d.phaseY[y%d.s0]*d.nx + d.phaseX[x%d.s1]
						d.offs[(c*kernel[0]+ky)*kernel[1]+kx] = 4 * int64((phase*g.cg+c)*plane+(y/d.s0)*d.wq+x/d.s1)
					}
				}
			}
			g.ind = d
			g.wino = kernel[0] == 3 && kernel[1] == 3 && stride[0] == 1 && stride[1] == 1 && dil[0] == 1 && dil[1] == 1
		}
	}
	// A strided 1×1 convolution that reads no padding (ResNet's downsampling layers) is a
	// pointwise one on the subsampled image: convSubsampled.
	if r == 2 && g.ind == nil && kernel[0] == 1 && kernel[1] == 1 && pb[0] == 0 && pb[1] == 0 &&
		(out[0]-1)*stride[0] < in[0] && (out[1]-1)*stride[1] < in[1] {
		g.sub = &convSub{w: in[1], s0: stride[0], s1: stride[1], ho: out[0], wo: out[1]}
	}
	// convBcast where it measured faster: strided convolutions of many channels (the im2col
	// packer's gathers) and output rows under 32 columns (convIndirect's grid of 16-column
	// tiles), but not where convSubsampled applies (a packed filter holds one packing, and
	// the 1×1/2 layers are GEMM-speed already); stems' few channels make too short a k loop
	// for it (the 7×7/2 stem ran 0.6× as fast as convIndirect).
	if r == 2 && !g.pointwise && g.sub == nil && g.cg > 4 && (stride[0] > 1 || stride[1] > 1 || out[1] < 32) {
		g.convBcastSetup(in, out, kernel, stride, dil, pb)
	}
	g.init = true
	return nil
}

// XLen, WLen and YLen are the element counts Conv requires of x, w and y (bias needs OutC).
func (p *ConvParams) XLen() int { return p.Batch * p.InC * p.g.inSize }
func (p *ConvParams) WLen() int { return p.OutC * p.g.kdim }
func (p *ConvParams) YLen() int { return p.Batch * p.OutC * p.g.outSize }

func (g *convGeom) mustInit(op string) {
	if !g.init {
		panic("cpu." + op + ": params not initialised (call Init and check its error)")
	}
}

func needLen(op, name string, have, want int) {
	if have < want {
		panic(fmt.Sprintf("cpu.%s: len(%s) = %d, need %d", op, name, have, want))
	}
}

// convCols is the im2col matrix of one image and group — kdim × outSize, row (c, k) holding
// for each output position the input under kernel tap k of channel c (0 in the padding) —
// as a GEMM B operand (transposed when trans). It is packed straight from x, so the
// matrix, often far larger than the image, is never written out.
type convCols[T Float] struct {
	g     *convGeom
	x     []T // the group's first input channel onwards
	trans bool
}

// row writes col[r, from:from+n] to dst[:n].
func (cc *convCols[T]) row(r, from, n int, dst []T) {
	g := cc.g
	c, k := r/g.kSize, r%g.kSize
	xc := cc.x[c*g.inSize : (c+1)*g.inSize]
	dst = dst[:n]
	clear(dst)
	s := g.lastStride
	g.visit(k, from, n, func(dOff, xOff, cnt int) {
		d := dst[dOff : dOff+cnt]
		src := xc[xOff:]
		if s == 1 {
			copyShort(d, src[:len(d)])
			return
		}
		gatherStride(d, src, s)
	})
}

// gatherStride writes src[0], src[s], src[2s], … to d. Stride 2 (downsampling layers) goes
// in one AVX-512 call (gatherEvenRows32, a row of one), else four at a time with one bounds
// check for the four: element by element, the checks and the index arithmetic made the
// gather cost 2–4× its loads.
func gatherStride[T Float](d, src []T, s int) {
	if s == 2 && isFloat32Type[T]() && gatherEvenRowsVec32(f32s(d), f32s(src), len(d), 1, 0) {
		return
	}
	i := 0
	if s == 2 {
		for ; i+4 <= len(d); i += 4 {
			o, r := d[i:i+4:i+4], src[2*i:2*i+7:2*i+7]
			o[0], o[1], o[2], o[3] = r[0], r[2], r[4], r[6]
		}
	}
	for ; i < len(d); i++ {
		d[i] = src[i*s]
	}
}

func (cc *convCols[T]) pack(pc, jc, kb, nb, nr int, dst, tmp []T) {
	if !cc.trans {
		// Fill convPackRows col rows in scratch, then move them into the slivers with one
		// vector copy per sliver: a sliver holds consecutive rows contiguously, so each copy
		// writes convPackRows·nr elements in one run. Measured alternatives that were
		// slower: writing the runs straight into the slivers split at sliver ends (many
		// more, shorter copies, -20%), one strided copy call per row (stores 32 KB apart
		// alias the scratch loads, -15%), and one row at a time (a copy call per nr
		// elements).
		for p0 := 0; p0 < kb; p0 += convPackRows {
			rows := min(convPackRows, kb-p0)
			for i := range rows {
				cc.row(pc+p0+i, jc, nb, tmp[i*nb:])
			}
			for s := 0; s < nb; s += nr {
				d := dst[s*kb+p0*nr : s*kb+(p0+rows)*nr]
				if nb-s >= nr && gemmFastCopy(d, nr, tmp[s:], nb, rows, nr) {
					continue
				}
				for i := range rows {
					n := copy(d[i*nr:(i+1)*nr], tmp[i*nb+s:i*nb+min(s+nr, nb)])
					clear(d[i*nr+n : (i+1)*nr])
				}
			}
		}
		return
	}
	// op(B) = colᵀ: op(B)[p, j] = col[j, p], so each sliver column is a stretch of a col row.
	for s := 0; s < nb; s += nr {
		cols := min(nr, nb-s)
		d := dst[s*kb : s*kb+nr*kb]
		for j0 := 0; j0 < cols; j0 += 8 { // eight col rows at a time (tmp holds 8·kc)
			n := min(8, cols-j0)
			for i := 0; i < n; i++ {
				cc.row(jc+s+j0+i, pc, kb, tmp[i*kb:])
			}
			gemmInterleave(d[j0:], nr, n, kb, func(i int) []T { return tmp[i*kb : (i+1)*kb] })
		}
		for j := cols; j < nr; j++ {
			for p := 0; p < kb; p++ {
				d[p*nr+j] = 0
			}
		}
	}
}

// ConvPre is a prologue of a pointwise convolution (ConvParams.Pointwise), per input
// channel: the convolution reads relu(x·Mul[c] + Add[c]) (without the ReLU when Relu is
// false) in place of x — an inference batch norm and ReLU before a 1×1 convolution, as in
// DenseNet's pre-activation layers, applied while the GEMM packs its B panels instead of
// in a pass that writes and reads back the whole normalised input. The values are
// scaleShiftRow's (scaleShiftReluRow's): the same roundings as BatchNormInference (and the
// ReLU after it) writing them, so the same bits.
type ConvPre[T Float] struct {
	Mul, Add []T // [InC]
	Relu     bool
}

// gemmPreB is a pointwise convolution's input under a ConvPre, as a GEMM B operand: row p of
// b (input channel p of the group) scaled and shifted by mul[p] and add[p], as it is packed.
type gemmPreB[T Float] struct {
	b        []T
	ldb      int
	mul, add []T
	relu     bool
}

// pack packs the panel as gemmMatrixB does, then applies each row's scale and shift (and
// ReLU) to the slivers in place: 16 columns of a row at a time from two broadcasts, where
// transforming the rows into scratch first (scaleShiftRow over each row, then the sliver
// copies) cost a call per row and a second pass, and made DenseNet's 1×1 layers on 14 × 14
// and 7 × 7 planes slower than the batch norm's own pass had been. Columns past nb keep their
// zeros (a lane mask in the last sliver: a 7 × 7 plane's last sliver holds one column).
func (s *gemmPreB[T]) pack(pc, jc, kb, nb, nr int, dst, _ []T) {
	gemmPackB(false, s.b, s.ldb, pc, jc, kb, nb, nr, dst)
	mul, add := s.mul[pc:pc+kb], s.add[pc:pc+kb]
	for c := 0; c < nb; c += nr {
		d := dst[c*kb : (c+nr)*kb]
		cols := min(nr, nb-c)
		if isFloat32Type[T]() && nr%16 == 0 {
			done := true
			for h := 0; h < nr && done; h += 16 {
				done = scaleShiftColsVec32(f32s(d[h:]), nr, max(0, cols-h), f32s(mul), f32s(add), s.relu)
			}
			if done {
				continue
			}
		}
		for p := range kb {
			row := d[p*nr : p*nr+cols]
			if s.relu {
				scaleShiftReluRow(row, row, mul[p], add[p])
			} else {
				scaleShiftRow(row, row, mul[p], add[p])
			}
		}
	}
}

// visit calls f(dOff, xOff, cnt) for each run of output positions from+dOff ..
// from+dOff+cnt-1 (within [from, from+n)) whose input under tap k lies inside the image,
// starting at plane offset xOff and advancing by the last axis's stride.
func (g *convGeom) visit(k, from, n int, f func(dOff, xOff, cnt int)) {
	segs := g.segs[g.segStart[k]:g.segStart[k+1]]
	i := sort.Search(len(segs), func(i int) bool { return int(segs[i].yOff+segs[i].n) > from })
	end := from + n
	for ; i < len(segs); i++ {
		sg := segs[i]
		y0 := int(sg.yOff)
		if y0 >= end {
			break
		}
		a, b := max(y0, from), min(y0+int(sg.n), end)
		f(a-from, int(sg.xOff)+(a-y0)*g.lastStride, b-a)
	}
}

// convCol2imCols adds columns [from, from+n) of a column matrix (held in col with row
// stride n) back onto the input positions they were read from: the adjoint of im2col,
// restricted to a block of output positions. x is the group's first input channel.
func convCol2imCols[T Float](g *convGeom, col []T, from, n int, x []T) {
	s := g.lastStride
	for r := 0; r < g.kdim; r++ {
		c, k := r/g.kSize, r%g.kSize
		xc := x[c*g.inSize : (c+1)*g.inSize]
		cr := col[r*n : (r+1)*n]
		g.visit(k, from, n, func(dOff, xOff, cnt int) {
			src := cr[dOff : dOff+cnt]
			if s == 1 {
				dst := xc[xOff : xOff+cnt]
				for i, v := range src {
					dst[i] += v
				}
				return
			}
			dst := xc[xOff:]
			for i, v := range src {
				dst[i*s] += v
			}
		})
	}
}

// convPackRows is how many im2col rows the packer gathers before copying them into the
// slivers (gemmGetScratch's row buffer holds that many of nc elements).
const convPackRows = 8

// convBuf is pooled scratch memory (im2col matrices, partial gradients) viewed as []T.
type convBuf struct{ raw []float64 }

var convPool sync.Pool

func convGetBuf[T Float](n int) (*convBuf, []T) {
	b, _ := convPool.Get().(*convBuf)
	if b == nil {
		b = new(convBuf)
	}
	words := max(1, (n*int(unsafe.Sizeof(T(0)))+7)/8)
	if cap(b.raw) < words {
		b.raw = make([]float64, words)
	}
	return b, unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b.raw[:words]))), n)
}

func convPutBuf(b *convBuf) { convPool.Put(b) }

// convColBlock bounds the elements of the column-matrix block ConvBackwardData works
// through at a time (so its scratch stays a few MB however large the image). Smaller
// blocks would stay in L2 but re-pack Wᵀ for every block, which measured slower.
var convColBlock = 1 << 20

// direct reports whether a group is better computed by direct loops than by GEMM: with
// one input channel per group (depthwise) the GEMM would have m = ocg rows, so almost all
// of each mr-row register tile would be wasted.
func (g *convGeom) direct() bool { return g.cg == 1 && g.ocg <= 4 && !g.pointwise }

// convSchedule runs task(t, innerWorkers) for t in [0, tasks): spread over the cores when
// there are enough independent tasks to balance (each then uses one core), otherwise one
// after another, each using every core inside its GEMM.
func convSchedule(tasks int, small bool, task func(t, inner int)) {
	workers := runtime.GOMAXPROCS(0)
	if workers == 1 || tasks == 1 && !small {
		for t := 0; t < tasks; t++ {
			task(t, workers)
		}
		return
	}
	if small || tasks%workers == 0 || tasks >= 4*workers {
		Parallel(tasks, 1, func(lo, hi int) {
			for t := lo; t < hi; t++ {
				task(t, 1)
			}
		})
		return
	}
	for t := 0; t < tasks; t++ {
		task(t, workers)
	}
}

// Conv computes y = conv(x, w) + bias (ONNX Conv). bias may be nil. It uses im2col plus a
// GEMM per image and group (the GEMM alone for 1×1 stride-1 unpadded kernels, and direct
// loops for depthwise groups). Scratch: one im2col matrix (InC/Groups·prod(Kernel) ×
// prod(OutSpatial) elements) per worker, pooled.
//
// Preconditions (panics otherwise): p.Init succeeded; len(x) ≥ XLen(), len(w) ≥ WLen(),
// len(y) ≥ YLen(), bias nil or len(bias) ≥ OutC; y does not overlap x or w.
func Conv[T Float](p *ConvParams, x, w, bias, y []T) {
	ConvEpi(p, x, w, bias, y, Epilogue[T]{})
}

// Epilogue is what a forward convolution does to its result's elements once they are final
// (ConvEpi): a residual add and a ReLU, or a ReLU, then Func.
type Epilogue[T Float] struct {
	// Relu replaces each element v by max(v, 0), +0 for −0 and NaN (ReluRow's bits): in the
	// GEMM micro-kernel's store where the convolution is pointwise — no pass over y at all —
	// else on each of Func's ranges before Func.
	Relu bool
	// Res (nil: none; only with Relu) is a residual of y's shape added to each element before
	// the ReLU, y = max((conv + bias) + Res, 0), each step rounded as separate passes would
	// round it (ResNet's add and ReLU after a block's last convolution): in the pointwise
	// GEMM's store, which reads it beside y, else with the ReLU. It must not overlap y.
	Res []T
	// Func (nil: none) is called on ranges of y's elements that partition y, each as soon as
	// its values are final — while they are still in cache — and possibly concurrently on
	// disjoint ranges. It may rewrite y[lo:hi] (a residual add); it must not read or write y
	// outside its range.
	Func func(lo, hi int)
}

// ConvEpi is Conv followed by an epilogue (Epilogue).
//
// Preconditions (panics otherwise): those of Conv.
func ConvEpi[T Float](p *ConvParams, x, w, bias, y []T, epi Epilogue[T]) {
	ConvPreEpi(p, x, nil, w, bias, y, epi)
}

// ConvPreEpi is ConvEpi on the input under a prologue pre (nil: none).
//
// Preconditions (panics otherwise): those of Conv; pre nil, or p.Pointwise() and pre's
// slices of InC elements.
func ConvPreEpi[T Float](p *ConvParams, x []T, pre *ConvPre[T], w, bias, y []T, epi Epilogue[T]) {
	g := &p.g
	g.mustInit("Conv")
	needLen("Conv", "w", len(w), p.WLen())
	convCheck(p, x, pre, bias, y, epi)
	convForward(g, x, pre, w, nil, bias, y, epi)
}

// Pointwise reports whether the convolution is 1×1, stride 1 and unpadded: a GEMM on the
// input as it lies (the convolutions a ConvPre applies to). p.Init must have succeeded.
func (p *ConvParams) Pointwise() bool { return p.g.pointwise }

// Overlap reports whether two slices share memory.
func Overlap[T Float](a, b []T) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	sz := unsafe.Sizeof(a[0])
	return a0 < b0+uintptr(len(b))*sz && b0 < a0+uintptr(len(a))*sz
}

// convCheck checks a forward convolution's operands other than the weights.
func convCheck[T Float](p *ConvParams, x []T, pre *ConvPre[T], bias, y []T, epi Epilogue[T]) {
	needLen("Conv", "x", len(x), p.XLen())
	needLen("Conv", "y", len(y), p.YLen())
	if epi.Res != nil {
		needLen("Conv", "epi.Res", len(epi.Res), p.YLen())
		if !epi.Relu {
			panic("cpu.Conv: an epilogue's residual without its ReLU")
		}
		if Overlap(epi.Res[:p.YLen()], y[:p.YLen()]) {
			panic("cpu.Conv: an epilogue's residual overlaps y")
		}
	}
	if bias != nil {
		needLen("Conv", "bias", len(bias), p.OutC)
	}
	if pre != nil {
		if !p.g.pointwise {
			panic("cpu.Conv: a prologue on a convolution that is not pointwise")
		}
		needLen("Conv", "pre.Mul", len(pre.Mul), p.InC)
		needLen("Conv", "pre.Add", len(pre.Add), p.InC)
	}
}

func convForward[T Float](g *convGeom, x []T, pre *ConvPre[T], w []T, f *ConvFilter[T], bias, y []T, epi Epilogue[T]) {
	small := g.direct() || gemmWork(g.ocg, g.outSize, g.kdim) < gemmParallelWork
	convSchedule(g.batch*g.groups, small, func(t, inner int) {
		n, gr := t/g.groups, t%g.groups
		xg := x[(n*g.inC+gr*g.cg)*g.inSize:][:g.cg*g.inSize]
		yOff := (n*g.outC + gr*g.ocg) * g.outSize
		yg := y[yOff:][:g.ocg*g.outSize]
		// e is epi on the group's ranges (nil without one), eFunc its Func alone: what is
		// left where the GEMM's micro-kernel applies the ReLU.
		var e, eFunc func(lo, hi int)
		if epi.Func != nil {
			eFunc = func(lo, hi int) { epi.Func(yOff+lo, yOff+hi) }
		}
		e = eFunc
		var resg []T // the group's residual (epi.Res)
		if epi.Res != nil {
			resg = epi.Res[yOff:][:g.ocg*g.outSize]
		}
		if epi.Relu {
			e = func(lo, hi int) {
				yr := y[yOff+lo : yOff+hi]
				if resg != nil {
					ArithVV(OpAdd, yr, resg[lo:hi], yr)
				}
				ReluRow(yr, yr)
				if eFunc != nil {
					eFunc(lo, hi)
				}
			}
		}
		wg := w[gr*g.ocg*g.kdim:][:g.ocg*g.kdim]
		var bg []T // the group's bias, added by the GEMM's micro-kernel as it stores C
		if bias != nil {
			bg = bias[gr*g.ocg : (gr+1)*g.ocg]
		}
		if u := f.winoGroup(gr); u != nil {
			convWinograd(g, xg, u, f.mPad, bg, yg, inner, e)
			return
		}
		pa := f.group(gr) // the group's packed weights (nil: packed here)
		switch {
		case g.direct():
			clear(yg)
			s := g.lastStride
			for j := 0; j < g.ocg; j++ {
				yj := yg[j*g.outSize : (j+1)*g.outSize]
				wj := wg[j*g.kSize : (j+1)*g.kSize]
				for _, sg := range g.segs {
					wv := wj[sg.k]
					dst := yj[sg.yOff:][:sg.n]
					if s == 1 {
						src := xg[sg.xOff:][:len(dst)]
						for i, v := range src {
							dst[i] += wv * v
						}
						continue
					}
					src := xg[sg.xOff:]
					for i := range dst {
						dst[i] += wv * src[i*s]
					}
				}
				if bg != nil {
					bv := bg[j]
					for i := range yj {
						yj[i] += bv
					}
				}
			}
		case g.pointwise || g.sub != nil && !convSubsampledOff:
			// The ReLU in the micro-kernel's store, after the bias (modes 5 and 6: a separate
			// ReLU's bits), and a residual before it (modes 7 and 8). A pass over y after the
			// GEMM, whose result had left the caches by then, cost ResNet-50's 32 pointwise
			// layers 7% at two threads (Zen 5) for the ReLU. The residual's add and ReLU in
			// the store, its tiles prefetched a tile ahead, took ResNet-50's 16 convolutions
			// with a residual from 6.39 to 6.17 ms (fastest launches of 30 steps; medians
			// 7.29 → 6.93) at two threads; without the prefetch it ran slower than the pass.
			if epi.Relu {
				if bg == nil { // v + 0 and then the ReLU: the ReLU's bits, −0 included
					buf, zeros := convGetBuf[T](g.ocg)
					defer convPutBuf(buf)
					clear(zeros)
					bg = zeros
				}
				e = eFunc
			}
			ge := gemmEpi[T]{bias: bg, relu: epi.Relu, res: resg}
			if !g.pointwise { // a strided 1×1 layer: the pointwise GEMM on the subsampled image
				convSubsampled(g, xg, wg, pa, ge, yg, inner)
				break
			}
			var src gemmBSource[T] = &gemmMatrixB[T]{b: xg, ldb: g.inSize}
			if pre != nil {
				c0 := gr * g.cg
				src = &gemmPreB[T]{b: xg, ldb: g.inSize, mul: pre.Mul[c0 : c0+g.cg], add: pre.Add[c0 : c0+g.cg], relu: pre.Relu}
			}
			gemmRunSrc(false, g.ocg, g.outSize, g.cg, 1, wg, g.kdim, pa, src, 0, yg, g.outSize, ge, inner)
		default:
			if convBcast(g, xg, wg, f.bcastGroup(gr), bg, yg, inner, e) {
				return // it ran the epilogue as it copied its result out
			}
			// A lone ReLU goes to convIndirect, whose kernels store it where they write y itself
			// (the stems); a residual's add is e's.
			relu, ie := epi.Relu && resg == nil, e
			if relu {
				ie = eFunc
			}
			if convIndirect(g, xg, wg, pa, bg, yg, inner, relu, ie) {
				return // it ran the epilogue as it stored or copied its result out
			}
			gemmRunSrc(false, g.ocg, g.outSize, g.kdim, 1, wg, g.kdim, pa, &convCols[T]{g, xg, false}, 0, yg, g.outSize, gemmEpi[T]{bias: bg}, inner)
		}
		if e != nil {
			// Right after the GEMM, while its result is in cache: by channel ranges, one a core.
			convChunks(g.ocg, g.outSize, inner, func(j0, j1 int) { e(j0*g.outSize, j1*g.outSize) })
		}
	})
}

// copyShort is copy(dst, src) for the short rows of small planes: an inlined loop where copy
// calls memmove, whose call cost more than a row of 7 to 28 elements.
func copyShort[T Float](dst, src []T) {
	if len(src) >= 32 {
		copy(dst, src)
		return
	}
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = v
	}
}

// convSubsampledOff turns convSubsampled off (tests compare it with the im2col GEMM).
var convSubsampledOff bool

// convSubsampled computes one image and group of a strided 1×1 convolution (convSub) as the
// pointwise GEMM on a copy of the input positions it reads, storing with epi (the pointwise
// GEMM's bias, residual and ReLU). The im2col packer gathered them
// element by element as it packed each panel, channel after channel (its reads jumping
// between planes), and spent a fifth of ResNet-50's 1×1/2 layers there; the copy reads each
// plane's rows in order, once, shared out by channels. B then holds the same values as the
// im2col matrix, and the GEMM's k slabs and micro-kernel calls are the same, so the bits are
// the im2col GEMM's. With AVX-512 a stride-2 plane is gathered in one call (gatherEvenRows32,
// masked for each row's last wo mod 16 outputs): a call a row of 28, 14 or 7 outputs had cost
// 12% of ResNet-50's 256 → 512 layer on 56 × 56, and its three such layers run 1.07–1.13×
// faster with one call a plane (two threads, Zen 5).
func convSubsampled[T Float](g *convGeom, x, w []T, pa *gemmPacked[T], epi gemmEpi[T], y []T, workers int) {
	d := g.sub
	buf, xs := convGetBuf[T](g.cg * g.outSize)
	defer convPutBuf(buf)
	convChunks(g.cg, g.outSize, workers, func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			xc := x[c*g.inSize : (c+1)*g.inSize]
			dst := xs[c*g.outSize : (c+1)*g.outSize]
			if d.s1 == 2 && isFloat32Type[T]() && gatherEvenRowsVec32(f32s(dst), f32s(xc), d.wo, d.ho, d.s0*d.w) {
				continue
			}
			for oy := 0; oy < d.ho; oy++ {
				gatherStride(dst[oy*d.wo:(oy+1)*d.wo], xc[oy*d.s0*d.w:], d.s1)
			}
		}
	})
	gemmRunSrc(false, g.ocg, g.outSize, g.cg, 1, w, g.kdim, pa, &gemmMatrixB[T]{b: xs, ldb: g.outSize}, 0, y, g.outSize, epi, workers)
}

// convPhases scatters the input rows and columns the windows read (rows × cols of channels
// c0 … c1−1 of cg, inSize apart in x) into the stored stride phases of xp (convInd's layout),
// whose planes of those channels are zero.
func convPhases(d *convInd, c0, c1, cg, plane, rows, cols int, x []float32, inSize int, xp []float32) {
	for c := c0; c < c1; c++ {
		for r := 0; r < rows; r++ {
			src := x[c*inSize+r*d.w:][:cols]
			y := r + d.pb0
			iy := d.phaseY[y%d.s0]
			if iy < 0 { // a row no tap reads
				continue
			}
			for px := 0; px < d.s1; px++ { // the row's columns, phase by phase
				x0 := (px - d.pb1%d.s1 + d.s1) % d.s1 // first input column of phase px
				ix := d.phaseX[px]
				if x0 >= cols || ix < 0 {
					continue
				}
				n := (cols - x0 + d.s1 - 1) / d.s1 // the phase's columns in this row
				gatherStride(xp[((iy*d.nx+ix)*cg+c)*plane+(y/d.s0)*d.wq+(x0+d.pb1)/d.s1:][:n], src[x0:], d.s1)
			}
		}
	}
}

// convIndirectMax bounds convIndirect's scratch (the padded image and the padded result of
// one image and group) to 16 MiB of float32, which ImageNet-sized layers stay far below;
// larger images take the im2col GEMM, whose scratch is a few panels whatever the size.
const convIndirectMax = 1 << 22

// convIndirectOff turns convIndirect off (tests compare it with the im2col GEMM).
var convIndirectOff bool

// convIndirect computes one image and group of a 2-d float32 convolution without an im2col
// matrix: the image is copied once into a zero-padded buffer split into its stride phases,
// and the micro-kernel (kernInd) reads each im2col row as a shifted view of it (convInd), so
// the only packing is the weights' (A). Packing the im2col matrix fed only 2·ocg flops per element packed: at
// batch 1 with few output channels (DenseNet's 3×3 128 → 32 layers, 55% of its convolution
// time) it cost more than the arithmetic; with stride 2 (the stems, ResNet's downsampling)
// the packer gathered every other element. The result is computed on a grid of wq-wide rows,
// every tile full (rows padded to mr, columns to nr, the extra rows' weights zero), then
// copied into y. The k loop, its kc slabs, the modes and the bias are the GEMM's, so the
// bits are the im2col GEMM's (TestConvIndirectMatchesIm2col). Work is shared out by rows of C
// (each task packs only its rows of A; B is not packed), and by columns too when there are
// fewer than two row blocks a worker. Scratch: the padded image and the padded result, at most
// convIndirectMax elements. It reports false, computing nothing, where it does not apply
// (other convolutions, float64, CPUs without the kernel, larger scratch). With relu the
// result's ReLU comes before epi: in the kernels' store where they write y (modes 5 and 6),
// else as the result is copied out. A pass over the 7×7/2 stem's 3.2 MB result after the
// kernels, which had left it in L3, made it 1.14× slower at two threads and 1.06× at one
// (its ReLU, outputs rotating over eight buffers as in a network; Zen 5, medians of nine and
// five alternating runs).
func convIndirect[T Float](g *convGeom, x, w []T, pa *gemmPacked[T], bias, y []T, workers int, relu bool, epi func(lo, hi int)) bool {
	impl := gemmImplFor(unsafe.Sizeof(T(0)))
	d := g.ind
	if d == nil || !isFloat32Type[T]() || impl.kernInd == nil || convIndirectOff {
		return false
	}
	mr, nr, kc, mc := impl.mr, impl.nr, impl.kc, impl.mc
	m, k := g.ocg, g.kdim
	plane := d.hq * d.wq
	n := d.ho * d.wq
	mPad, nPad := gemmSplit(m, 1, mr), gemmSplit(n, 1, nr)
	// Where each output row is whole tiles (wo a multiple of nr: the stems' 112 columns on
	// AVX2), or whole tiles and a half one (112 = 3·32 + 16 on AVX-512: kernIndHalf), the
	// tiles are stored straight into y — the tiles of each output row, tpr of them, tile t at
	// row t / tpr, column (t mod tpr)·nr, reading the grid there — and there is no padded
	// result to copy out (on the 7×7/2 stem the copy and the result's writes were a sixth of
	// the time). Where kernIndWide exists, a row's last whole tile and its half one are one
	// wide tile (the half tile cost nearly a whole one): the 7×7/2 stem 1.07–1.10× at one
	// and two threads (Zen 5, medians of nine alternating runs).
	intoY := d.wo%nr == 0 || impl.kernIndHalf != nil && d.wo%nr == nr/2
	wide := intoY && impl.kernIndWide != nil && d.wo%nr == nr/2 && d.wo > nr
	tpr := (d.wo + nr - 1) / nr // tiles a row, intoY
	cpLen := mPad * nPad
	if intoY {
		nPad, cpLen = d.ho*tpr*nr, 0
	}
	xLen := d.phases*g.cg*plane + nr // the last tiles read up to nr − 1 past the last plane
	if xLen+cpLen > convIndirectMax {
		return false
	}
	buf, s := convGetBuf[float32](xLen + cpLen + mPad)
	defer convPutBuf(buf)
	xp, cp, bp := s[:xLen], s[xLen:xLen+cpLen], s[xLen+cpLen:]
	y32 := f32s(y)
	x32 := f32s(x)
	rows, cols := min(d.h, d.hp-d.pb0), min(d.w, d.wp-d.pb1) // the input the windows read
	// The copies into xp, and out of cp below, are shared out by channels too: on one core
	// they were a tenth of a 2-thread 3×3 layer's time (ResNet's 64 → 64 on 56 × 56).
	convChunks(g.cg, plane, workers, func(c0, c1 int) {
		if d.s0 == 1 && d.s1 == 1 { // one phase: the padded image itself
			padPlanes(xp, x32, c0, c1, d.hq, d.wq, d.pb0, d.pb1, rows, cols, d.w, g.inSize)
			return
		}
		for ph := 0; ph < d.phases; ph++ {
			clear(xp[(ph*g.cg+c0)*plane : (ph*g.cg+c1)*plane])
		}
		convPhases(d, c0, c1, g.cg, plane, rows, cols, x32, g.inSize, xp)
	})
	clear(xp[d.phases*g.cg*plane:])
	var bip []float32
	if bias != nil || relu && intoY { // zeros before a ReLU in the store: the ReLU's bits
		clear(bp)
		if bias != nil {
			copy(bp, f32s(bias))
		}
		bip = bp
	}
	w32 := f32s(w)
	mTiles, nTiles := mPad/mr, nPad/nr
	// Row tasks of at least an mc block, so that each B sliver loaded into L1 serves many
	// row tiles; where that leaves too few tasks (DenseNet's 32 output channels: one), columns
	// are split too, each column task packing its rows of A again (small when M is).
	rowTasks := min((mTiles*mr+mc-1)/mc, gemmTasksPerWorker*workers)
	colTasks := 1
	if workers > 1 && rowTasks < 2*workers {
		colTasks = max(1, min(nTiles/2, (gemmTasksPerWorker*workers+rowTasks-1)/rowTasks))
	}
	rowsPer, colsPer := gemmSplit(mPad, rowTasks, mr), gemmSplit(nPad, colTasks, nr)
	rowTasks, colTasks = (mPad+rowsPer-1)/rowsPer, (nPad+colsPer-1)/colsPer
	parallelTasks(rowTasks*colTasks, workers, func(t int) {
		i0, j0 := (t/colTasks)*rowsPer, (t%colTasks)*colsPer
		i1, j1 := min(mPad, i0+rowsPer), min(nPad, j0+colsPer)
		// wideAt: the tile at jr (rows from row) and the half one after it as one wide tile
		// (kernIndWide), where both are this task's and the rows whole.
		wideAt := func(jr, row int) bool {
			return wide && jr >= j0 && jr+nr < j1 && jr/nr%tpr*nr+nr+nr/2 == d.wo && row+mr <= m
		}
		sc := gemmGetScratch[float32](impl, i1-i0, j1-j0, k)
		ap := unsafe.Slice((*float32)(sc.ap), min(mc, i1-i0)*min(kc, k))
		tmp := unsafe.Slice((*float32)(sc.tmp), mr*nr)
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			mode := 0
			if pc > 0 {
				mode = 1
			}
			if bip != nil && pc+kb >= k {
				mode += 3
				if relu && intoY {
					mode += 2
				}
			}
			offs := unsafe.Pointer(&d.offs[pc])
			for ic := i0; ic < i1; ic += mc {
				mb := min(mc, i1-ic)
				ap := ap
				if pa != nil {
					ap = f32s(pa.slab(pc, kb)[ic*kb:])
				} else {
					gemmPackA(false, w32, k, ic, pc, min(mb, max(0, m-ic)), kb, mr, ap)
				}
				tile := func(ir, jr int) {
					var bs unsafe.Pointer
					if bip != nil {
						bs = unsafe.Pointer(&bip[ic+ir])
					}
					if !intoY {
						impl.kernInd(kb, unsafe.Pointer(&ap[ir*kb]), unsafe.Pointer(&xp[jr]), unsafe.Pointer(&cp[(ic+ir)*nPad+jr]), nPad, 1, float32(mode%3), mode, bs, offs)
						return
					}
					r, c := jr/nr/tpr, jr/nr%tpr*nr // the tile's output row and column
					bx, yo := unsafe.Pointer(&xp[r*d.wq+c]), r*d.wo+c
					kern, w, row := impl.kernInd, nr, ic+ir
					switch {
					case c+nr > d.wo && wideAt(jr-nr, row): // taken with the tile before it
						return
					case c+nr > d.wo:
						kern, w = impl.kernIndHalf, nr/2
					case wideAt(jr, row):
						kern, w = impl.kernIndWide, nr+nr/2
					}
					if row+mr <= m {
						kern(kb, unsafe.Pointer(&ap[ir*kb]), bx, unsafe.Pointer(&y32[row*g.outSize+yo]), g.outSize, 1, float32(mode%3), mode, bs, offs)
					} else { // the last rows: the tile in tmp, then the GEMM's edge-tile store
						kern(kb, unsafe.Pointer(&ap[ir*kb]), bx, unsafe.Pointer(&tmp[0]), nr, 1, 0, 0, nil, offs)
						for i := 0; i < m-row; i++ {
							var b float32
							if mode >= 3 {
								b = bip[row+i]
							}
							gemmStoreEdge(y32[(row+i)*g.outSize+yo:][:w], tmp[i*nr:][:w], mode, 1, 1, b, 0)
						}
					}
				}
				if intoY {
					// Straight into y, a row tile (mr channels) along the task's positions
					// before the next: in the GEMM's order each B sliver's tiles wrote 128
					// bytes into each of the m channel planes in turn, m write streams at
					// once, and the 7×7/2 stem (64 channels) ran 1.12× faster at two
					// threads this way (Zen 5, medians of eleven alternating runs; even at
					// one), the B slivers now read from L2 once per row tile.
					for ir := 0; ir < mb; ir += mr {
						for jr := j0; jr < j1; jr += nr {
							tile(ir, jr)
						}
					}
					continue
				}
				// The GEMM's order: a column sliver of B (kb scattered rows of nr) stays in L1
				// while every row tile of the A block (in L2) passes over it.
				for jr := j0; jr < j1; jr += nr {
					for ir := 0; ir < mb; ir += mr {
						tile(ir, jr)
					}
				}
			}
		}
		gemmPutScratch(sc)
	})
	if intoY {
		if epi != nil { // y is final only now
			convChunks(m, g.outSize, workers, func(j0, j1 int) { epi(j0*g.outSize, j1*g.outSize) })
		}
		return true
	}
	convChunks(m, g.outSize, workers, func(j0, j1 int) {
		for j := j0; j < j1; j++ {
			for r := 0; r < d.ho; r++ {
				copy(y32[j*g.outSize+r*d.wo:][:d.wo], cp[j*nPad+r*d.wq:])
			}
		}
		if relu {
			ReluRow(y32[j0*g.outSize:j1*g.outSize], y32[j0*g.outSize:j1*g.outSize])
		}
		if epi != nil {
			epi(j0*g.outSize, j1*g.outSize)
		}
	})
	return true
}

// convChunkMin is the fewest elements worth handing to another worker in convChunks.
const convChunkMin = 1 << 14

// convChunks runs f over ranges of [0, n) — n items of size elements each — on up to workers
// cores, in ranges of at least convChunkMin elements.
func convChunks(n, size, workers int, f func(lo, hi int)) {
	per := max(1, convChunkMin/max(size, 1))
	tasks := min(workers, (n+per-1)/per)
	if tasks <= 1 {
		f(0, n)
		return
	}
	step := (n + tasks - 1) / tasks
	parallelTasks((n+step-1)/step, workers, func(t int) { f(t*step, min(n, (t+1)*step)) })
}

// ConvBackwardData computes dx, the gradient of the loss with respect to Conv's input x,
// from dy (shaped like y) and w: dx = convᵀ(dy, w). dx is overwritten.
//
// Preconditions (panics otherwise): p.Init succeeded; len(dy) ≥ YLen(), len(w) ≥ WLen(),
// len(dx) ≥ XLen(); dx does not overlap dy or w.
func ConvBackwardData[T Float](p *ConvParams, dy, w, dx []T) {
	g := &p.g
	g.mustInit("ConvBackwardData")
	needLen("ConvBackwardData", "dy", len(dy), p.YLen())
	needLen("ConvBackwardData", "w", len(w), p.WLen())
	needLen("ConvBackwardData", "dx", len(dx), p.XLen())
	convBackwardData(g, dy, w, dx)
}

func convBackwardData[T Float](g *convGeom, dy, w, dx []T) {
	small := g.direct() || gemmWork(g.kdim, g.outSize, g.ocg) < gemmParallelWork
	convSchedule(g.batch*g.groups, small, func(t, inner int) {
		n, gr := t/g.groups, t%g.groups
		dyg := dy[(n*g.outC+gr*g.ocg)*g.outSize:][:g.ocg*g.outSize]
		dxg := dx[(n*g.inC+gr*g.cg)*g.inSize:][:g.cg*g.inSize]
		wg := w[gr*g.ocg*g.kdim:][:g.ocg*g.kdim]
		switch {
		case g.direct():
			clear(dxg)
			s := g.lastStride
			for j := 0; j < g.ocg; j++ {
				dyj := dyg[j*g.outSize : (j+1)*g.outSize]
				wj := wg[j*g.kSize : (j+1)*g.kSize]
				for _, sg := range g.segs {
					wv := wj[sg.k]
					src := dyj[sg.yOff:][:sg.n]
					if s == 1 {
						dst := dxg[sg.xOff:][:len(src)]
						for i, v := range src {
							dst[i] += wv * v
						}
						continue
					}
					dst := dxg[sg.xOff:]
					for i, v := range src {
						dst[i*s] += wv * v
					}
				}
			}
		case g.pointwise:
			gemmRun(true, false, g.cg, g.outSize, g.ocg, 1, wg, g.kdim, dyg, g.outSize, 0, dxg, g.inSize, inner)
		default:
			// dcol = Wᵀ·dy, computed a block of output positions at a time, then added back
			// onto the image positions it came from (col2im).
			cb := min(g.outSize, max(64, convColBlock/g.kdim/64*64))
			buf, col := convGetBuf[T](g.kdim * cb)
			clear(dxg)
			for j0 := 0; j0 < g.outSize; j0 += cb {
				n := min(cb, g.outSize-j0)
				gemmRun(true, false, g.kdim, n, g.ocg, 1, wg, g.kdim, dyg[j0:], g.outSize, 0, col, n, inner)
				convCol2imCols(g, col, j0, n, dxg)
			}
			convPutBuf(buf)
		}
	})
}

// ConvBackwardFilter computes dw, the gradient with respect to Conv's weights, summed over
// the batch: dw = Σₙ dyₙ · im2col(xₙ)ᵀ per group. dw is overwritten. If db is non-nil it
// receives the bias gradient (dy summed over batch and space), as ConvBiasGrad computes.
// Scratch: an im2col matrix per worker, plus one dw-sized partial sum per extra worker
// when the batch rather than the groups is split across cores.
//
// Preconditions (panics otherwise): p.Init succeeded; len(x) ≥ XLen(), len(dy) ≥ YLen(),
// len(dw) ≥ WLen(), db nil or len(db) ≥ OutC.
func ConvBackwardFilter[T Float](p *ConvParams, x, dy, dw, db []T) {
	g := &p.g
	g.mustInit("ConvBackwardFilter")
	needLen("ConvBackwardFilter", "x", len(x), p.XLen())
	needLen("ConvBackwardFilter", "dy", len(dy), p.YLen())
	needLen("ConvBackwardFilter", "dw", len(dw), p.WLen())
	convBackwardFilter(g, x, dy, dw)
	if db != nil {
		needLen("ConvBackwardFilter", "db", len(db), p.OutC)
		ConvBiasGrad(dy, p.Batch, p.OutC, g.outSize, db)
	}
}

// convFilterImage adds (beta = 1) or writes (beta = 0) one image's contribution to one
// group's weight gradient dwg.
func convFilterImage[T Float](g *convGeom, xg, dyg, dwg []T, beta T, inner int) {
	switch {
	case g.direct():
		if beta == 0 {
			clear(dwg)
		}
		s := g.lastStride
		for j := 0; j < g.ocg; j++ {
			dyj := dyg[j*g.outSize : (j+1)*g.outSize]
			dwj := dwg[j*g.kSize : (j+1)*g.kSize]
			for _, sg := range g.segs {
				src := dyj[sg.yOff:][:sg.n]
				var acc T
				if s == 1 {
					for i, v := range xg[sg.xOff:][:len(src)] {
						acc += src[i] * v
					}
				} else {
					xs := xg[sg.xOff:]
					for i, v := range src {
						acc += v * xs[i*s]
					}
				}
				dwj[sg.k] += acc
			}
		}
	case g.pointwise:
		gemmRun(false, true, g.ocg, g.cg, g.outSize, 1, dyg, g.outSize, xg, g.inSize, beta, dwg, g.kdim, inner)
	default:
		gemmRunSrc(false, g.ocg, g.kdim, g.outSize, 1, dyg, g.outSize, nil, &convCols[T]{g, xg, true}, beta, dwg, g.kdim, gemmEpi[T]{}, inner)
	}
}

func convBackwardFilter[T Float](g *convGeom, x, dy, dw []T) {
	workers := runtime.GOMAXPROCS(0)
	wlen := g.ocg * g.kdim
	group := func(gr int, n0, n1 int, dwg []T, inner int) {
		for n := n0; n < n1; n++ {
			xg := x[(n*g.inC+gr*g.cg)*g.inSize:][:g.cg*g.inSize]
			dyg := dy[(n*g.outC+gr*g.ocg)*g.outSize:][:g.ocg*g.outSize]
			beta := T(1)
			if n == n0 {
				beta = 0
			}
			convFilterImage(g, xg, dyg, dwg, beta, inner)
		}
		if n0 == n1 {
			clear(dwg)
		}
	}
	if g.groups >= workers || workers == 1 || g.batch < 2 {
		small := g.groups >= workers || g.direct()
		convSchedule(g.groups, small, func(gr, inner int) {
			group(gr, 0, g.batch, dw[gr*wlen:(gr+1)*wlen], inner)
		})
		return
	}
	// Few groups, several images: each worker sums a share of the batch into its own
	// partial gradient (worker 0 straight into dw), then the partials are added up.
	parts := min(workers, g.batch)
	for gr := 0; gr < g.groups; gr++ {
		dwg := dw[gr*wlen : (gr+1)*wlen]
		bufs := make([]*convBuf, parts)
		partial := make([][]T, parts)
		partial[0] = dwg
		for i := 1; i < parts; i++ {
			bufs[i], partial[i] = convGetBuf[T](wlen)
		}
		Parallel(parts, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				group(gr, i*g.batch/parts, (i+1)*g.batch/parts, partial[i], 1)
			}
		})
		for i := 1; i < parts; i++ {
			for j, v := range partial[i] {
				dwg[j] += v
			}
			convPutBuf(bufs[i])
		}
	}
}

// ConvBiasGrad sums dy ([n, c, spatial]) over the batch and spatial axes into db ([c]),
// the gradient of a per-channel bias. db is overwritten.
func ConvBiasGrad[T Float](dy []T, n, c, spatial int, db []T) {
	needLen("ConvBiasGrad", "dy", len(dy), n*c*spatial)
	needLen("ConvBiasGrad", "db", len(db), c)
	Parallel(c, max(1, 4096/max(1, n*spatial)), func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			var s float64
			for b := 0; b < n; b++ {
				var part T
				for _, v := range dy[(b*c+ch)*spatial : (b*c+ch+1)*spatial] {
					part += v
				}
				s += float64(part)
			}
			db[ch] = T(s)
		}
	})
}
