package cpu

import (
	"fmt"
	"math"
	"slices"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// resize follows the IR op's Doc (ir/ops_nn.go). linear and cubic run kernels/cpu.Resize,
// which implements the same coordinate transforms, on f32 and f64. nearest copies elements
// through per-dim index tables built here, for every dtype (bit-exact; kernels/cpu.Resize is
// float only, and nearest resize of integers and bools is valid IR). The one attribute value
// kernels/cpu cannot express, cubic_coeff_a = 0 (it reads 0 as "the default −0.75"), runs a
// separable float64 resampler here.

// resizeAxis is the interpolation table of one dim: out·taps source indices and weights.
type resizeAxis struct {
	in, out, taps int
	idx           []int
	w             []float64
	identity      bool
}

// resizeSource maps output index o to the input coordinate (coordinate_transformation_mode).
func resizeSource(mode string, o, in, out int, s float64) float64 {
	x, fin := float64(o), float64(in)
	switch mode {
	case "pytorch_half_pixel":
		if out == 1 {
			return 0
		}
		return (x+0.5)/s - 0.5
	case "align_corners":
		if out == 1 {
			return 0
		}
		return x * (fin - 1) / float64(out-1)
	case "asymmetric":
		return x / s
	case "tf_half_pixel_for_nn":
		return (x + 0.5) / s
	case "half_pixel_symmetric":
		adj := float64(out) / (s * fin)
		return fin/2*(1-adj) + (x+0.5)/s - 0.5
	}
	return (x+0.5)/s - 0.5 // half_pixel
}

// cubicWeights are Keys' cubic convolution weights of the four taps around fraction t.
func cubicWeights(a, t float64) [4]float64 {
	return [4]float64{
		((a*(t+1)-5*a)*(t+1)+8*a)*(t+1) - 4*a,
		((a+2)*t-(a+3))*t*t + 1,
		((a+2)*(1-t)-(a+3))*(1-t)*(1-t) + 1,
		((a*(2-t)-5*a)*(2-t)+8*a)*(2-t) - 4*a,
	}
}

func buildResizeAxis(at ir.Attrs, in, out int, s float64) resizeAxis {
	mode := at.Str("mode", "nearest")
	coord := at.Str("coordinate_transformation_mode", "half_pixel")
	nearest := at.Str("nearest_mode", "round_prefer_floor")
	a := at.Float("cubic_coeff_a", -0.75)
	exclude := at.Bool("exclude_outside", false)
	taps := map[string]int{"nearest": 1, "linear": 2, "cubic": 4}[mode]
	ax := resizeAxis{in: in, out: out, taps: taps, idx: make([]int, out*taps), w: make([]float64, out*taps)}
	clampIdx := func(j int) int { return min(max(j, 0), in-1) }
	for o := 0; o < out; o++ {
		x := resizeSource(coord, o, in, out, s)
		fl := math.Floor(x)
		fr := x - fl
		i0 := int(max(min(fl, 1<<40), -1<<40))
		idx, w := ax.idx[o*taps:(o+1)*taps], ax.w[o*taps:(o+1)*taps]
		switch mode {
		case "nearest":
			j := i0
			switch nearest {
			case "round_prefer_floor":
				if fr > 0.5 {
					j++
				}
			case "round_prefer_ceil":
				if fr >= 0.5 {
					j++
				}
			case "ceil":
				if fr > 0 {
					j++
				}
			}
			idx[0], w[0] = clampIdx(j), 1
		case "linear":
			idx[0], idx[1] = clampIdx(i0), clampIdx(i0+1)
			w[0], w[1] = 1-fr, fr
		case "cubic":
			cw := cubicWeights(a, fr)
			sum := 0.0
			for t := 0; t < 4; t++ {
				j := i0 - 1 + t
				if exclude && (j < 0 || j >= in) {
					cw[t] = 0
				}
				sum += cw[t]
				idx[t] = clampIdx(j)
			}
			if exclude && sum != 0 {
				for t := range cw {
					cw[t] /= sum
				}
			}
			copy(w, cw[:])
		}
	}
	// An identity dim (every output reads its own index with weight 1) is skipped.
	ax.identity = in == out
	for o := 0; o < out && ax.identity; o++ {
		for t := 0; t < taps; t++ {
			if i, w := ax.idx[o*taps+t], ax.w[o*taps+t]; w != 0 && (i != o || w != 1) {
				ax.identity = false
			}
		}
	}
	return ax
}

func prepareResize(s *device.Spec) (device.Impl, error) {
	x, y := s.In[0], s.Out[0]
	sizes := s.Attrs.Ints("sizes")
	if len(sizes) != x.Rank() || !y.Shape.Equal(sizes) || x.DType != y.DType {
		return nil, fmt.Errorf("resize of %s to sizes %v into %s", x, sizes, y)
	}
	scales, err := ir.ResizeScales(s.Attrs, x)
	if err != nil {
		return nil, err
	}
	mode := s.Attrs.Str("mode", "nearest")
	if mode != "nearest" && mode != "linear" && mode != "cubic" {
		return nil, fmt.Errorf("resize: unknown mode %s", mode)
	}
	if mode != "nearest" && x.DType != ir.F32 && x.DType != ir.F64 {
		return nil, fmt.Errorf("%s resize supports f32 and f64, not %s", mode, x.DType)
	}
	if y.NumElements() == 0 {
		return func(in, out []device.Tensor) error { return nil }, nil
	}
	axes := make([]resizeAxis, x.Rank())
	for i, in := range x.Shape {
		if in == 0 {
			return nil, fmt.Errorf("resize of the empty dim %d of %s", i, x)
		}
		sc := float64(sizes[i]) / float64(in)
		if scales != nil {
			sc = scales[i]
		}
		axes[i] = buildResizeAxis(s.Attrs, in, sizes[i], sc)
	}
	switch {
	case mode == "nearest":
		return resizeNearest(x, y, axes)
	case mode == "cubic" && s.Attrs.Float("cubic_coeff_a", -0.75) == 0:
		return byDType(x.DType, resizeInterp[float32](x.Shape, axes), resizeInterp[float64](x.Shape, axes)), nil
	}
	p := &k.ResizeParams{InShape: slices.Clone(x.Shape), OutShape: slices.Clone(y.Shape), Scales: scales,
		Mode: k.ResizeMode(mode), CoordMode: k.ResizeCoordMode(s.Attrs.Str("coordinate_transformation_mode", "half_pixel")),
		CubicCoeffA: s.Attrs.Float("cubic_coeff_a", -0.75), ExcludeOutside: s.Attrs.Bool("exclude_outside", false)}
	if err := p.Init(); err != nil {
		return nil, err
	}
	return byDType(x.DType, resizeKernel[float32](p), resizeKernel[float64](p)), nil
}

func resizeKernel[T k.Float](p *k.ResizeParams) device.Impl {
	return func(in, out []device.Tensor) error {
		k.Resize(p, floats[T](in[0]), floats[T](out[0]))
		return nil
	}
}

// resizeNearest copies elements: the source of each output is the product of the per-dim
// nearest indices. It walks the output one line (along the last dim) at a time.
func resizeNearest(x, y ir.Type, axes []resizeAxis) (device.Impl, error) {
	r := len(axes)
	if r == 0 {
		return prepareCopy(nil)
	}
	strides := rowMajorStrides(x.Shape)
	last := axes[r-1].idx
	lineLen := y.Shape[r-1]
	lines := y.NumElements() / lineLen
	outShape := slices.Clone(y.Shape)
	run := func(line func(dst, src, lineNo int)) {
		k.Parallel(lines, max(1, 16384/lineLen), func(lo, hi int) {
			for ln := lo; ln < hi; ln++ {
				src, rem := 0, ln
				for d := r - 2; d >= 0; d-- {
					o := rem % outShape[d]
					rem /= outShape[d]
					src += axes[d].idx[o] * strides[d]
				}
				line(ln*lineLen, src, ln)
			}
		})
	}
	switch x.DType.Size() {
	case 1:
		return nearestWords[uint8](run, last), nil
	case 2:
		return nearestWords[uint16](run, last), nil
	case 4:
		return nearestWords[uint32](run, last), nil
	case 8:
		return nearestWords[uint64](run, last), nil
	}
	return nil, fmt.Errorf("resize of %s is not supported", x.DType)
}

func nearestWords[W any](run func(func(dst, src, line int)), last []int) device.Impl {
	return func(in, out []device.Tensor) error {
		xs, ys := words[W](in[0].Data), words[W](out[0].Data)
		run(func(dst, src, _ int) {
			yl := ys[dst : dst+len(last)]
			for o, j := range last {
				yl[o] = xs[src+j]
			}
		})
		return nil
	}
}

// resizeInterp resamples one non-identity dim at a time in float64 (for cubic_coeff_a = 0).
func resizeInterp[T k.Float](inShape ir.Shape, axes []resizeAxis) device.Impl {
	return func(in, out []device.Tensor) error {
		x, y := floats[T](in[0]), floats[T](out[0])
		cur := make([]float64, len(x))
		for i, v := range x {
			cur[i] = float64(v)
		}
		shape := slices.Clone([]int(inShape))
		for d, ax := range axes {
			if ax.identity {
				continue
			}
			outer, inner := shapeProd(shape[:d]), shapeProd(shape[d+1:])
			next := make([]float64, outer*ax.out*inner)
			resampleAxis(cur, next, outer, inner, ax)
			cur = next
			shape[d] = ax.out
		}
		for i, v := range cur {
			y[i] = T(v)
		}
		return nil
	}
}

// resampleAxis sets dst[o, j, i] = Σ_t w[j, t]·src[o, idx[j, t], i].
func resampleAxis(src, dst []float64, outer, inner int, ax resizeAxis) {
	k.Parallel(outer*ax.out, max(1, 8192/max(1, inner*ax.taps)), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			o, j := u/ax.out, u%ax.out
			d := dst[u*inner : (u+1)*inner]
			clear(d)
			for t := 0; t < ax.taps; t++ {
				w := ax.w[j*ax.taps+t]
				if w == 0 {
					continue
				}
				base := (o*ax.in + ax.idx[j*ax.taps+t]) * inner
				for i, v := range src[base : base+inner] {
					d[i] += w * v
				}
			}
		}
	})
}
