package cpu

import "unsafe"

// ConvFilter is a convolution's weights packed once into the GEMM micro-kernel's A slivers
// (every group, every kc slab: gemmPackA's layout), for weights that do not change between
// calls — an inference program's parameters. Conv packs the weights at every call: at batch
// 1 that pass reads every weight from memory (ResNet-50's 100 MB per image, more than the
// caches hold) only to write them again in another order, a tenth or more of a late layer's
// time (BenchmarkConvBatch1/…/filter). A filter's convolution computes the bits of Conv —
// packing only moves elements, and the micro-kernel calls are the same — except where
// PackConvFilter chose the Winograd path (conv_winograd.go: 3×3 stride-1 float32 layers with
// enough channels), whose result differs from Conv's by rounding.
//
// Where convBcast applies the weights are packed for it instead, as its B operand.
//
// The filter keeps a reference to the weights (depthwise groups read them directly, and a
// micro-kernel other than the one it was packed for reads them through Conv's path): they
// must not change while the filter is used. Memory: about the weights' size again (rows
// rounded up to the micro-kernel's mr).
type ConvFilter[T Float] struct {
	p    *ConvParams
	w    []T
	impl *gemmImpl // the micro-kernel the slivers were packed for
	mPad int       // each group's rows rounded up to impl.mr
	a    []T       // group gr's packed weights at gr·kdim·mPad (nil: depthwise or Winograd, none packed)
	wino []T       // group gr's Winograd U_ξ, packed (winoPack; nil: the direct path)
	bt   []T       // group gr's weights packed for convBcast at gr·kdim·nPad (convBcastPack; nil: none)
	nPad int       // each group's output channels rounded up to impl.bcastNR, with bt
}

// PackConvFilter packs w (p.WLen() elements) for p's convolutions.
//
// Preconditions (panics otherwise): p.Init succeeded; len(w) ≥ p.WLen().
func PackConvFilter[T Float](p *ConvParams, w []T) *ConvFilter[T] {
	g := &p.g
	g.mustInit("PackConvFilter")
	needLen("PackConvFilter", "w", len(w), p.WLen())
	impl := gemmImplFor(unsafe.Sizeof(T(0)))
	f := &ConvFilter[T]{p: p, w: w, impl: impl}
	if g.direct() {
		return f
	}
	m, k, mr, kc := g.ocg, g.kdim, impl.mr, impl.kc
	f.mPad = gemmSplit(m, 1, mr)
	if g.winograd() && isFloat32Type[T]() {
		f.wino = winoPack(g, w, impl, f.mPad)
		return f
	}
	if g.bc != nil && isFloat32Type[T]() && impl.kernBcast != nil && !convBcastOff {
		f.nPad = gemmSplit(m, 1, impl.bcastNR)
		f.bt = make([]T, g.groups*k*f.nPad)
		for gr := 0; gr < g.groups; gr++ {
			convBcastPack(impl, f32s(w[gr*m*k:(gr+1)*m*k]), k, m, f32s(f.bt[gr*k*f.nPad:(gr+1)*k*f.nPad]), 1)
		}
		return f
	}
	f.a = make([]T, g.groups*k*f.mPad)
	Parallel(g.groups*((k+kc-1)/kc), 1, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			gr, pc := t/((k+kc-1)/kc), t%((k+kc-1)/kc)*kc
			kb := min(kc, k-pc)
			wg := w[gr*m*k : (gr+1)*m*k]
			gemmPackA(false, wg, k, 0, pc, m, kb, mr, f.a[gr*k*f.mPad+pc*f.mPad:])
		}
	})
	return f
}

// group is group gr's packed weights for the GEMM, nil where there are none (a nil filter,
// depthwise groups, or a micro-kernel other than the one they were packed for: tests
// switch kernels).
func (f *ConvFilter[T]) group(gr int) *gemmPacked[T] {
	if f == nil || f.a == nil || f.impl != gemmImplFor(unsafe.Sizeof(T(0))) {
		return nil
	}
	size := f.p.g.kdim * f.mPad
	return &gemmPacked[T]{p: f.a[gr*size : (gr+1)*size], mPad: f.mPad}
}

// bcastGroup is group gr's weights packed for convBcast, nil where there are none (as group).
func (f *ConvFilter[T]) bcastGroup(gr int) []T {
	if f == nil || f.bt == nil || f.impl != gemmImplFor(unsafe.Sizeof(T(0))) {
		return nil
	}
	size := f.p.g.kdim * f.nPad
	return f.bt[gr*size : (gr+1)*size]
}

// Conv is Conv(p, x, w, bias, y) with the filter's p and w, reading the packed weights.
//
// Preconditions (panics otherwise): those of Conv.
func (f *ConvFilter[T]) Conv(x, bias, y []T) {
	f.ConvEpi(x, bias, y, Epilogue[T]{})
}

// ConvEpi is ConvEpi(p, x, w, bias, y, epi) with the filter's p and w, reading the packed
// weights.
//
// Preconditions (panics otherwise): those of Conv.
func (f *ConvFilter[T]) ConvEpi(x, bias, y []T, epi Epilogue[T]) {
	f.ConvPreEpi(x, nil, bias, y, epi)
}

// ConvPreEpi is ConvPreEpi(p, x, pre, w, bias, y, epi) with the filter's p and w, reading
// the packed weights.
//
// Preconditions (panics otherwise): those of ConvPreEpi.
func (f *ConvFilter[T]) ConvPreEpi(x []T, pre *ConvPre[T], bias, y []T, epi Epilogue[T]) {
	convCheck(f.p, x, pre, bias, y, epi)
	convForward(&f.p.g, x, pre, f.w, f, bias, y, epi)
}
