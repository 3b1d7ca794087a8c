package cpu

import (
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// ResizeMode is ONNX Resize's mode attribute.
type ResizeMode string

// ResizeCoordMode is ONNX Resize's coordinate_transformation_mode attribute.
type ResizeCoordMode string

// ResizeNearestMode is ONNX Resize's nearest_mode attribute.
type ResizeNearestMode string

// The attribute values, spelled as in ONNX so an importer can convert strings directly.
const (
	ResizeNearest ResizeMode = "nearest"
	ResizeLinear  ResizeMode = "linear"
	ResizeCubic   ResizeMode = "cubic"

	ResizeHalfPixel          ResizeCoordMode = "half_pixel"
	ResizeHalfPixelSymmetric ResizeCoordMode = "half_pixel_symmetric"
	ResizePytorchHalfPixel   ResizeCoordMode = "pytorch_half_pixel"
	ResizeAlignCorners       ResizeCoordMode = "align_corners"
	ResizeAsymmetric         ResizeCoordMode = "asymmetric"
	ResizeTFHalfPixelForNN   ResizeCoordMode = "tf_half_pixel_for_nn"
	ResizeTFCropAndResize    ResizeCoordMode = "tf_crop_and_resize"

	ResizeRoundPreferFloor ResizeNearestMode = "round_prefer_floor"
	ResizeRoundPreferCeil  ResizeNearestMode = "round_prefer_ceil"
	ResizeFloor            ResizeNearestMode = "floor"
	ResizeCeil             ResizeNearestMode = "ceil"
)

// ResizeParams describes an ONNX Resize of a tensor of any rank (typically NCHW with N and C
// unchanged). Every axis is interpolated independently and the results combined
// separably, as ONNX defines for N-d "linear" and "cubic".
//
// Scales[i] is the ONNX scale of axis i; nil means OutShape[i]/InShape[i] (the case where
// the model gives sizes). The output shape is the caller's (ONNX: floor(in·scale), or the
// given sizes); scales only enter the coordinate transform. Empty Mode, CoordMode and
// NearestMode take the ONNX defaults (nearest, half_pixel, round_prefer_floor);
// CubicCoeffA 0 means the default −0.75. Roi (tf_crop_and_resize only) holds the starts
// for all axes followed by the ends, normalised to [0, 1]. Antialiasing (opset 18) is not
// supported.
//
// Coordinate transforms follow the ONNX operator text and ONNX Runtime (and the project's
// IR resize op), with out the integer output extent and s the axis's scale:
//
//	half_pixel           (o+0.5)/s − 0.5
//	pytorch_half_pixel   (o+0.5)/s − 0.5, or 0 when out = 1
//	align_corners        o·(in−1)/(out−1), or 0 when out = 1
//	asymmetric           o/s
//	tf_half_pixel_for_nn (o+0.5)/s
//	half_pixel_symmetric in/2·(1 − out/(s·in)) + (o+0.5)/s − 0.5
//	tf_crop_and_resize   start·(in−1) + o·(end−start)·(in−1)/(out−1), or (start+end)/2·(in−1) when out = 1
//
// (The ONNX Python reference implementation differs where out = 1 and takes s·in rather
// than out as the resized length; the two agree whenever s = out/in.) Out-of-range source
// coordinates clamp to the edge, except under tf_crop_and_resize, where an output whose
// coordinate on any axis falls outside the input takes ExtrapolationValue.
type ResizeParams struct {
	InShape, OutShape  []int
	Scales             []float64
	Mode               ResizeMode
	CoordMode          ResizeCoordMode
	NearestMode        ResizeNearestMode
	CubicCoeffA        float64
	ExcludeOutside     bool
	Roi                []float64
	ExtrapolationValue float64

	axes            []resizeAxis
	inSize, outSize int
	par             int // leading axes copied unchanged: independent slabs for parallelism
	init            bool
}

// resizeAxis holds, per output coordinate, nt source indices and weights (nt taps per
// output), and whether the coordinate lies outside the input (tf_crop_and_resize).
type resizeAxis struct {
	nt         int
	idx        []int // len out·nt, already multiplied by the axis stride
	w          []float64
	w32        []float32 // w rounded once, for float32 fast paths
	outside    []bool
	anyOutside bool
	identity   bool
}

// Init validates the parameters and builds the per-axis interpolation tables.
func (p *ResizeParams) Init() error {
	r := len(p.InShape)
	if r == 0 || len(p.OutShape) != r {
		return fmt.Errorf("resize: input rank %d, output rank %d", r, len(p.OutShape))
	}
	if p.Mode == "" {
		p.Mode = ResizeNearest
	}
	if p.CoordMode == "" {
		p.CoordMode = ResizeHalfPixel
	}
	if p.NearestMode == "" {
		p.NearestMode = ResizeRoundPreferFloor
	}
	if p.CubicCoeffA == 0 {
		p.CubicCoeffA = -0.75
	}
	switch p.Mode {
	case ResizeNearest, ResizeLinear, ResizeCubic:
	default:
		return fmt.Errorf("resize: unknown mode %q", p.Mode)
	}
	switch p.CoordMode {
	case ResizeHalfPixel, ResizeHalfPixelSymmetric, ResizePytorchHalfPixel, ResizeAlignCorners, ResizeAsymmetric, ResizeTFHalfPixelForNN:
	case ResizeTFCropAndResize:
		if len(p.Roi) != 2*r {
			return fmt.Errorf("resize: tf_crop_and_resize needs %d roi values, have %d", 2*r, len(p.Roi))
		}
	default:
		return fmt.Errorf("resize: unknown coordinate_transformation_mode %q", p.CoordMode)
	}
	switch p.NearestMode {
	case ResizeRoundPreferFloor, ResizeRoundPreferCeil, ResizeFloor, ResizeCeil:
	default:
		return fmt.Errorf("resize: unknown nearest_mode %q", p.NearestMode)
	}
	if p.Scales != nil && len(p.Scales) != r {
		return fmt.Errorf("resize: %d scales for rank %d", len(p.Scales), r)
	}
	p.inSize, p.outSize = 1, 1
	for i := 0; i < r; i++ {
		if p.InShape[i] < 1 || p.OutShape[i] < 0 {
			return fmt.Errorf("resize: axis %d: input %d, output %d", i, p.InShape[i], p.OutShape[i])
		}
		if p.Scales != nil && !(p.Scales[i] > 0) || math.IsInf(p.scale(i), 0) {
			return fmt.Errorf("resize: axis %d: scale must be positive and finite", i)
		}
		if !sizeOK(p.inSize, p.InShape[i]) || !sizeOK(p.outSize, p.OutShape[i]) {
			return errors.New("resize: tensor too large")
		}
		p.inSize *= p.InShape[i]
		p.outSize *= p.OutShape[i]
	}
	p.axes = make([]resizeAxis, r)
	stride := 1
	for i := r - 1; i >= 0; i-- {
		p.axes[i] = p.buildAxis(i, stride)
		stride *= p.InShape[i]
	}
	p.par = 0
	for p.par < r-1 && p.axes[p.par].identity {
		p.par++
	}
	p.init = true
	return nil
}

func (p *ResizeParams) scale(i int) float64 {
	if p.Scales != nil {
		return p.Scales[i]
	}
	return float64(p.OutShape[i]) / float64(p.InShape[i])
}

// source maps output coordinate x on axis i to the input coordinate (ONNX
// coordinate_transformation_mode); ok is false when tf_crop_and_resize falls outside.
func (p *ResizeParams) source(i, x int) (float64, bool) {
	in, out, s := float64(p.InShape[i]), float64(p.OutShape[i]), p.scale(i)
	xf := float64(x)
	switch p.CoordMode {
	case ResizeAlignCorners:
		if out == 1 {
			return 0, true
		}
		return xf * (in - 1) / (out - 1), true
	case ResizeAsymmetric:
		return xf / s, true
	case ResizePytorchHalfPixel:
		if out == 1 {
			return 0, true
		}
		return (xf+0.5)/s - 0.5, true
	case ResizeTFHalfPixelForNN:
		return (xf + 0.5) / s, true
	case ResizeHalfPixelSymmetric:
		adj := out / (s * in)
		return in/2*(1-adj) + (xf+0.5)/s - 0.5, true
	case ResizeTFCropAndResize:
		r := len(p.InShape)
		start, end := p.Roi[i], p.Roi[r+i]
		var v float64
		if out == 1 {
			v = (start + end) / 2 * (in - 1)
		} else {
			v = start*(in-1) + xf*(end-start)*(in-1)/(out-1)
		}
		return v, v >= 0 && v <= in-1
	default: // half_pixel
		return (xf+0.5)/s - 0.5, true
	}
}

func (p *ResizeParams) buildAxis(i, stride int) resizeAxis {
	in, out := p.InShape[i], p.OutShape[i]
	nt := map[ResizeMode]int{ResizeNearest: 1, ResizeLinear: 2, ResizeCubic: 4}[p.Mode]
	ax := resizeAxis{nt: nt, idx: make([]int, out*nt), w: make([]float64, out*nt), outside: make([]bool, out)}
	clampIdx := func(j int) int { return min(max(j, 0), in-1) }
	for o := 0; o < out; o++ {
		x, ok := p.source(i, o)
		ax.outside[o] = !ok
		fl := math.Floor(x)
		fr := x - fl
		i0 := int(fl)
		taps, ws := ax.idx[o*nt:(o+1)*nt], ax.w[o*nt:(o+1)*nt]
		switch p.Mode {
		case ResizeNearest:
			j := i0
			switch {
			case fr == 0:
			case p.NearestMode == ResizeRoundPreferFloor && fr > 0.5, p.NearestMode == ResizeRoundPreferCeil && fr >= 0.5, p.NearestMode == ResizeCeil:
				j = i0 + 1
			}
			taps[0], ws[0] = clampIdx(j), 1
		case ResizeLinear:
			taps[0], taps[1] = clampIdx(i0), clampIdx(i0+1)
			ws[0], ws[1] = 1-fr, fr
		case ResizeCubic:
			a := p.CubicCoeffA
			t := fr
			ws[0] = ((a*(t+1)-5*a)*(t+1)+8*a)*(t+1) - 4*a
			ws[1] = ((a+2)*t-(a+3))*t*t + 1
			ws[2] = ((a+2)*(1-t)-(a+3))*(1-t)*(1-t) + 1
			ws[3] = ((a*(2-t)-5*a)*(2-t)+8*a)*(2-t) - 4*a
			sum := 0.0
			for k := 0; k < 4; k++ {
				j := i0 - 1 + k
				if p.ExcludeOutside && (j < 0 || j >= in) {
					ws[k] = 0
				}
				sum += ws[k]
				taps[k] = clampIdx(j)
			}
			if p.ExcludeOutside && sum != 0 {
				for k := range ws {
					ws[k] /= sum
				}
			}
		}
	}
	// Collapse to one tap per output when every output has a single non-zero weight (e.g.
	// an unchanged N or C axis, or integer-aligned linear resizes): fewer taps to combine.
	single := true
	for o := 0; o < out && single; o++ {
		nz := 0
		for k := 0; k < nt; k++ {
			if ax.w[o*nt+k] != 0 {
				nz++
			}
		}
		single = nz <= 1
	}
	if single && nt > 1 {
		idx, w := make([]int, out), make([]float64, out)
		for o := 0; o < out; o++ {
			idx[o] = ax.idx[o*nt]
			for k := 0; k < nt; k++ {
				if ax.w[o*nt+k] != 0 {
					idx[o], w[o] = ax.idx[o*nt+k], ax.w[o*nt+k]
				}
			}
		}
		ax.nt, ax.idx, ax.w = 1, idx, w
	}
	ax.identity = in == out && ax.nt == 1
	ax.w32 = make([]float32, len(ax.w))
	for i, v := range ax.w {
		ax.w32[i] = float32(v)
	}
	for _, o := range ax.outside {
		ax.anyOutside = ax.anyOutside || o
	}
	for o := 0; o < out; o++ {
		if ax.identity && (ax.idx[o] != o || ax.w[o] != 1 || ax.outside[o]) {
			ax.identity = false
		}
		for k := 0; k < ax.nt; k++ {
			ax.idx[o*ax.nt+k] *= stride
		}
	}
	return ax
}

// XLen and YLen are the element counts Resize requires of x and y.
func (p *ResizeParams) XLen() int { return p.inSize }
func (p *ResizeParams) YLen() int { return p.outSize }

func (p *ResizeParams) check(op string, x, y int) {
	if !p.init {
		panic("cpu." + op + ": params not initialised (call Init and check its error)")
	}
	needLen(op, "x", x, p.XLen())
	needLen(op, "y", y, p.YLen())
}

// resizeLines walks the output one line (run along the last axis) at a time. For each
// line it lists the source combinations of the leading axes, as (offset, weight) pairs,
// and calls f with them; out reports that the line is outside the crop box. Lines are
// spread over the cores in slabs of the leading unchanged axes when scatter is set (so
// that writes to x from different workers never collide), else freely.
func (p *ResizeParams) resizeLines(scatter bool, f func(line int, offs []int, ws []float64, out bool)) {
	r := len(p.axes)
	last := p.OutShape[r-1]
	if last == 0 || p.outSize == 0 {
		return
	}
	lines := p.outSize / last
	units, perUnit := lines, 1
	if scatter {
		units = 1
		for i := 0; i < p.par; i++ {
			units *= p.OutShape[i]
		}
		perUnit = lines / units
	}
	Parallel(units, max(1, 1024/max(1, last*perUnit)), func(lo, hi int) {
		coord := make([]int, r)
		var offs []int
		var ws []float64
		for line := lo * perUnit; line < hi*perUnit; line++ {
			for i, rem := r-2, line; i >= 0; i-- {
				coord[i] = rem % p.OutShape[i]
				rem /= p.OutShape[i]
			}
			offs, ws = append(offs[:0], 0), append(ws[:0], 1)
			out := false
			for i := 0; i < r-1; i++ {
				ax := &p.axes[i]
				o := coord[i]
				out = out || ax.outside[o]
				n := len(offs)
				for k := 1; k < ax.nt; k++ { // replicate the combinations for each extra tap
					for c := 0; c < n; c++ {
						offs = append(offs, offs[c]+ax.idx[o*ax.nt+k])
						ws = append(ws, ws[c]*ax.w[o*ax.nt+k])
					}
				}
				for c := 0; c < n; c++ {
					offs[c] += ax.idx[o*ax.nt]
					ws[c] *= ax.w[o*ax.nt]
				}
			}
			f(line, offs, ws, out)
		}
	})
}

// Resize resamples x (shape p.InShape) into y (shape p.OutShape) as ONNX Resize does.
//
// Preconditions (panics otherwise): p.Init succeeded; len(x) ≥ XLen(), len(y) ≥ YLen().
func Resize[T Float](p *ResizeParams, x, y []T) {
	p.check("Resize", len(x), len(y))
	ax := &p.axes[len(p.axes)-1]
	last := p.OutShape[len(p.axes)-1]
	ext := T(p.ExtrapolationValue)
	var wl []T // the last axis's weights in T
	if unsafe.Sizeof(T(0)) == 4 {
		wl = unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(ax.w32))), len(ax.w32))
	} else {
		wl = unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(ax.w))), len(ax.w))
	}
	p.resizeLines(false, func(line int, offs []int, ws []float64, out bool) {
		yl := y[line*last : (line+1)*last]
		if out {
			for i := range yl {
				yl[i] = ext
			}
			return
		}
		// Fast paths for the usual cases (nearest, and linear along the last axis with one
		// or two source rows), in T arithmetic: a float32 lerp needs no float64 detour.
		switch {
		case ax.anyOutside:
		case ax.nt == 1 && len(offs) == 1:
			xs, a := x[offs[0]:], T(ws[0])
			if a == 1 {
				for o := range yl {
					yl[o] = xs[ax.idx[o]]
				}
			} else {
				for o := range yl {
					yl[o] = a * wl[o] * xs[ax.idx[o]]
				}
			}
			return
		case ax.nt == 2 && len(offs) == 1:
			xs, a := x[offs[0]:], T(ws[0])
			idx, w := ax.idx[:2*len(yl)], wl[:2*len(yl)]
			for o := range yl {
				yl[o] = a * (w[2*o]*xs[idx[2*o]] + w[2*o+1]*xs[idx[2*o+1]])
			}
			return
		case ax.nt == 2 && len(offs) == 2:
			x0, x1, a0, a1 := x[offs[0]:], x[offs[1]:], T(ws[0]), T(ws[1])
			idx, w := ax.idx[:2*len(yl)], wl[:2*len(yl)]
			for o := range yl {
				i0, i1, w0, w1 := idx[2*o], idx[2*o+1], w[2*o], w[2*o+1]
				yl[o] = a0*(w0*x0[i0]+w1*x0[i1]) + a1*(w0*x1[i0]+w1*x1[i1])
			}
			return
		}
		for o := range yl {
			if ax.outside[o] {
				yl[o] = ext
				continue
			}
			var s float64
			for k := 0; k < ax.nt; k++ {
				j, wk := ax.idx[o*ax.nt+k], ax.w[o*ax.nt+k]
				for c, off := range offs {
					s += ws[c] * wk * float64(x[off+j])
				}
			}
			yl[o] = T(s)
		}
	})
}

// ResizeBackward is Resize's adjoint: it scatters each dy back onto the inputs it was
// interpolated from, with the same weights (nearest: onto the chosen input). dx is
// overwritten; outputs set to ExtrapolationValue contribute nothing.
//
// Preconditions (panics otherwise): p.Init succeeded; len(dy) ≥ YLen(), len(dx) ≥ XLen().
func ResizeBackward[T Float](p *ResizeParams, dy, dx []T) {
	p.check("ResizeBackward", len(dx), len(dy))
	clear(dx[:p.inSize])
	ax := &p.axes[len(p.axes)-1]
	last := p.OutShape[len(p.axes)-1]
	p.resizeLines(true, func(line int, offs []int, ws []float64, out bool) {
		if out {
			return
		}
		gl := dy[line*last : (line+1)*last]
		for o, g := range gl {
			if ax.outside[o] {
				continue
			}
			for k := 0; k < ax.nt; k++ {
				j, wk := ax.idx[o*ax.nt+k], ax.w[o*ax.nt+k]*float64(g)
				for c, off := range offs {
					dx[off+j] += T(ws[c] * wk)
				}
			}
		}
	})
}
