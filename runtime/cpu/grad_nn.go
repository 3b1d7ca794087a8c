package cpu

import (
	"fmt"
	"math"
	"slices"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Kernels of the nn gradient ops (ir/ops_grad.go): the backward of convolutions, pooling,
// the normalisations, lrn, pad, resize, gather_elements and the extra reductions, and the
// elementwise derivatives of the ONNX activations (on the fused engine). They run the adjoint
// routines of kernels/cpu on the geometry the forward kernels use (ConvBackwardFilter,
// MaxPoolBackward after recomputing the argmax with MaxPool, AvgPoolBackward, ResizeBackward,
// GatherElementsBackward), so a gradient always sees the positions and weights its forward used;
// what kernels/cpu lacks (lrn, the inference batch norm, pad's accumulation, reduce_prod) is
// computed here in float64.

func init() {
	registerElementwise("elu_grad", floatBinary(func(at ir.Attrs) func(x, dy float64) float64 {
		alpha := at.Float("alpha", 1)
		return func(x, dy float64) float64 { return dy * k.EluGrad(x, alpha) }
	}))
	registerElementwise("selu_grad", floatBinary(func(at ir.Attrs) func(x, dy float64) float64 {
		alpha, gamma := at.Float("alpha", k.SeluAlpha), at.Float("gamma", k.SeluGamma)
		return func(x, dy float64) float64 { return dy * gamma * k.EluGrad(x, alpha) }
	}))
	registerElementwise("leaky_relu_grad", floatBinary(func(at ir.Attrs) func(x, dy float64) float64 {
		alpha := at.Float("alpha", 0.01)
		return func(x, dy float64) float64 { return dy * k.LeakyReluGrad(x, alpha) }
	}))
	registerElementwise("softplus_grad", floatBinary(func(ir.Attrs) func(x, dy float64) float64 {
		return func(x, dy float64) float64 { return dy * k.SoftplusGrad(x) }
	}))
	registerElementwise("hard_sigmoid_grad", floatBinary(func(at ir.Attrs) func(x, dy float64) float64 {
		alpha, beta := at.Float("alpha", 0.2), at.Float("beta", 0.5)
		return func(x, dy float64) float64 { return dy * k.HardSigmoidGrad(x, alpha, beta) }
	}))
	registerElementwise("shrink_grad", floatBinary(func(at ir.Attrs) func(x, dy float64) float64 {
		lambd := at.Float("lambd", 0.5)
		return func(x, dy float64) float64 {
			if x > lambd || x < -lambd {
				return dy
			}
			return 0
		}
	}))

	register("conv_grad_filter", prepareConvGradFilter)
	register("max_pool_grad", preparePoolGrad(false))
	register("avg_pool_grad", preparePoolGrad(true))
	register("batch_norm_grad_input", prepareBatchNormGradInput)
	register("batch_norm_grad_params", prepareBatchNormGradParams)
	register("instance_norm_grad_input", prepareInstanceNormGradInput)
	register("instance_norm_grad_params", prepareInstanceNormGradParams)
	register("lrn_grad", prepareLRNGrad)
	register("pad_grad", preparePadGrad)
	register("resize_grad", prepareResizeGrad)
	register("gather_elements_grad", prepareGatherElementsGrad)
	register("reduce_min_grad", prepareReduceMaxGrad) // the same rule: dy to the first x equal to y
	register("reduce_prod_grad", prepareReduceProdGrad)
}

// prepareConvGradFilter: operands x, dy; the result is the weight gradient of filter_shape.
func prepareConvGradFilter(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	x, dy, dw := s.In[0], s.In[1], s.Out[0]
	if x.Rank() < 3 || dw.Rank() != x.Rank() || dy.Rank() != x.Rank() {
		return nil, fmt.Errorf("conv_grad_filter needs x, dy and the filter of one rank >= 3, got %s, %s, %s", x, dy, dw)
	}
	wp, err := ir.Window(s.Attrs, x.Rank()-2, slices.Clone(dw.Shape[2:]))
	if err != nil {
		return nil, err
	}
	if dw.Shape[1]*wp.Groups != x.Shape[1] {
		return nil, fmt.Errorf("conv_grad_filter filter %s does not match %d input channels in %d groups", dw, x.Shape[1], wp.Groups)
	}
	p := &k.ConvParams{Batch: x.Shape[0], InC: x.Shape[1], OutC: dw.Shape[0], Groups: wp.Groups,
		Spatial: slices.Clone(x.Shape[2:]), Kernel: wp.Kernel, Stride: wp.Strides, Dilation: wp.Dilations,
		PadBegin: wp.PadsBegin, PadEnd: wp.PadsEnd}
	if err := p.Init(); err != nil {
		return nil, err
	}
	if want := append([]int{p.Batch, p.OutC}, p.OutSpatial...); !dy.Shape.Equal(want) {
		return nil, fmt.Errorf("conv_grad_filter dy %s does not match the conv's result %v", dy, want)
	}
	return byDType(d, convGradFilterImpl[float32](p), convGradFilterImpl[float64](p)), nil
}

func convGradFilterImpl[T k.Float](p *k.ConvParams) device.Impl {
	return func(in, out []device.Tensor) error {
		k.ConvBackwardFilter(p, floats[T](in[0]), floats[T](in[1]), floats[T](out[0]), nil)
		return nil
	}
}

// poolParams builds the pooling geometry of the window attributes for an input of shape x.
func poolParams(s *device.Spec, x ir.Shape) (*k.PoolParams, error) {
	if len(x) < 3 {
		return nil, fmt.Errorf("%s needs an input [N, C, D1..], got %v", s.Name(), x)
	}
	wp, err := ir.Window(s.Attrs, len(x)-2, s.Attrs.Ints("kernel"))
	if err != nil {
		return nil, err
	}
	p := &k.PoolParams{Batch: x[0], Channels: x[1], Spatial: slices.Clone(x[2:]),
		Kernel: wp.Kernel, Stride: wp.Strides, Dilation: wp.Dilations, PadBegin: wp.PadsBegin, PadEnd: wp.PadsEnd,
		CeilMode: wp.CeilMode, CountIncludePad: s.Attrs.Bool("count_include_pad", false)}
	if err := p.Init(); err != nil {
		return nil, fmt.Errorf("%s: %v", s.Name(), err)
	}
	return p, nil
}

// preparePoolGrad handles max_pool_grad (x, dy) and avg_pool_grad (dy, with input_shape).
func preparePoolGrad(avg bool) builder {
	return func(s *device.Spec) (device.Impl, error) {
		d, err := allFloat(s, s.In, s.Out)
		if err != nil {
			return nil, err
		}
		dy, dx := s.In[len(s.In)-1], s.Out[0]
		if !avg && !s.In[0].Equal(dx) {
			return nil, fmt.Errorf("max_pool_grad of %s into %s", s.In[0], dx)
		}
		p, err := poolParams(s, dx.Shape)
		if err != nil {
			return nil, err
		}
		if want := append([]int{p.Batch, p.Channels}, p.OutSpatial...); !dy.Shape.Equal(want) {
			return nil, fmt.Errorf("%s dy %s does not match the pooled shape %v", s.Name(), dy, want)
		}
		if avg {
			return byDType(d, avgPoolGradImpl[float32](p), avgPoolGradImpl[float64](p)), nil
		}
		if p.XLen() > math.MaxInt32 {
			return nil, fmt.Errorf("max_pool_grad input %s is too large for int32 argmax indices", dx)
		}
		return byDType(d, maxPoolGradImpl[float32](p), maxPoolGradImpl[float64](p)), nil
	}
}

// maxPoolGradImpl recomputes the forward's argmax (its tie and NaN rule included) with MaxPool
// and scatters dy onto it.
func maxPoolGradImpl[T k.Float](p *k.PoolParams) device.Impl {
	return func(in, out []device.Tensor) error {
		y, argmax := make([]T, p.YLen()), make([]int32, p.YLen())
		k.MaxPool(p, floats[T](in[0]), y, argmax)
		k.MaxPoolBackward(p, floats[T](in[1]), argmax, floats[T](out[0]))
		return nil
	}
}

func avgPoolGradImpl[T k.Float](p *k.PoolParams) device.Impl {
	return func(in, out []device.Tensor) error {
		k.AvgPoolBackward(p, floats[T](in[0]), floats[T](out[0]))
		return nil
	}
}

// checkChannelOperands checks that x is [N, C, …] (at least minRank dims), that the operands
// listed in same have x's shape and those in perChannel are [C].
func checkChannelOperands(s *device.Spec, x ir.Type, minRank int, same, perChannel []ir.Type) error {
	if x.Rank() < minRank {
		return fmt.Errorf("%s needs x [N, C, …] of rank >= %d, got %s", s.Name(), minRank, x)
	}
	for _, t := range same {
		if !t.Shape.Equal(x.Shape) {
			return fmt.Errorf("%s operand %s does not match %s", s.Name(), t, x)
		}
	}
	for _, t := range perChannel {
		if !t.Shape.Equal(ir.Shape{x.Shape[1]}) {
			return fmt.Errorf("%s per-channel operand %s must be [%d]", s.Name(), t, x.Shape[1])
		}
	}
	return nil
}

// prepareBatchNormGradInput: operands dy, scale, var; dx = dy·scale/√(var + eps).
func prepareBatchNormGradInput(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	dy := s.In[0]
	if err := checkChannelOperands(s, dy, 2, s.Out, s.In[1:]); err != nil {
		return nil, err
	}
	n, c, sp := channelGeometry(dy)
	eps := s.Attrs.Float("eps", 1e-5)
	return byDType(d, batchNormGradInputImpl[float32](n, c, sp, eps), batchNormGradInputImpl[float64](n, c, sp, eps)), nil
}

func batchNormGradInputImpl[T k.Float](n, c, sp int, eps float64) device.Impl {
	return func(in, out []device.Tensor) error {
		dy, scale, variance, dx := floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), floats[T](out[0])
		k.Parallel(n*c, max(1, 16384/max(1, sp)), func(lo, hi int) {
			for u := lo; u < hi; u++ {
				ch := u % c
				f := float64(scale[ch]) / math.Sqrt(float64(variance[ch])+eps)
				for i, g := range dy[u*sp : (u+1)*sp] {
					dx[u*sp+i] = T(float64(g) * f)
				}
			}
		})
		return nil
	}
}

// prepareBatchNormGradParams: operands x, dy, mean, var; results dscale, dbias.
func prepareBatchNormGradParams(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	x := s.In[0]
	if len(s.Out) != 2 {
		return nil, fmt.Errorf("batch_norm_grad_params has 2 results, not %d", len(s.Out))
	}
	if err := checkChannelOperands(s, x, 2, s.In[1:2], append(slices.Clone(s.In[2:]), s.Out...)); err != nil {
		return nil, err
	}
	n, c, sp := channelGeometry(x)
	eps := s.Attrs.Float("eps", 1e-5)
	return byDType(d, batchNormGradParamsImpl[float32](n, c, sp, eps), batchNormGradParamsImpl[float64](n, c, sp, eps)), nil
}

func batchNormGradParamsImpl[T k.Float](n, c, sp int, eps float64) device.Impl {
	return func(in, out []device.Tensor) error {
		x, dy, mean, variance := floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), floats[T](in[3])
		dscale, dbias := floats[T](out[0]), floats[T](out[1])
		k.Parallel(c, max(1, 16384/max(1, n*sp)), func(lo, hi int) {
			for ch := lo; ch < hi; ch++ {
				mu, r := float64(mean[ch]), 1/math.Sqrt(float64(variance[ch])+eps)
				var sdy, sdyx float64
				for b := 0; b < n; b++ {
					off := (b*c + ch) * sp
					xs := x[off : off+sp]
					for i, g := range dy[off : off+sp] {
						sdy += float64(g)
						sdyx += float64(g) * (float64(xs[i]) - mu)
					}
				}
				dscale[ch], dbias[ch] = T(sdyx*r), T(sdy)
			}
		})
		return nil
	}
}

// prepareInstanceNormGradInput: operands x, dy, scale. Each instance (n, c) is a row of the
// layer-norm kernels: dx is LayerNormBackward of g = dy·scale[c] (built in dx, which the kernel
// allows to alias its dy) with the statistics the layer-norm forward recomputes.
func prepareInstanceNormGradInput(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	x := s.In[0]
	if err := checkChannelOperands(s, x, 3, []ir.Type{s.In[1], s.Out[0]}, s.In[2:]); err != nil {
		return nil, err
	}
	n, c, sp := channelGeometry(x)
	eps := s.Attrs.Float("eps", 1e-5)
	return byDType(d, instanceNormGradInputImpl[float32](n, c, sp, eps), instanceNormGradInputImpl[float64](n, c, sp, eps)), nil
}

func instanceNormGradInputImpl[T k.Float](n, c, sp int, eps float64) device.Impl {
	return func(in, out []device.Tensor) error {
		x, dy, scale, dx := floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), floats[T](out[0])
		rows := n * c
		mean, rstd := make([]T, rows), make([]T, rows)
		normStats(x, mean, rstd, rows, sp, T(eps), false)
		k.Parallel(rows, max(1, 16384/max(1, sp)), func(lo, hi int) {
			for u := lo; u < hi; u++ {
				f := scale[u%c]
				for i, g := range dy[u*sp : (u+1)*sp] {
					dx[u*sp+i] = g * f
				}
			}
		})
		k.LayerNormBackward(x, nil, mean, rstd, dx, dx, nil, nil, rows, sp)
		return nil
	}
}

// prepareInstanceNormGradParams: operands x, dy; results dscale, dbias.
func prepareInstanceNormGradParams(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	x := s.In[0]
	if len(s.Out) != 2 {
		return nil, fmt.Errorf("instance_norm_grad_params has 2 results, not %d", len(s.Out))
	}
	if err := checkChannelOperands(s, x, 3, s.In[1:2], s.Out); err != nil {
		return nil, err
	}
	n, c, sp := channelGeometry(x)
	eps := s.Attrs.Float("eps", 1e-5)
	return byDType(d, instanceNormGradParamsImpl[float32](n, c, sp, eps), instanceNormGradParamsImpl[float64](n, c, sp, eps)), nil
}

func instanceNormGradParamsImpl[T k.Float](n, c, sp int, eps float64) device.Impl {
	return func(in, out []device.Tensor) error {
		x, dy := floats[T](in[0]), floats[T](in[1])
		dscale, dbias := floats[T](out[0]), floats[T](out[1])
		rows := n * c
		mean, rstd := make([]T, rows), make([]T, rows)
		normStats(x, mean, rstd, rows, sp, T(eps), false)
		k.Parallel(c, max(1, 16384/max(1, n*sp)), func(lo, hi int) {
			for ch := lo; ch < hi; ch++ {
				var sdy, sdyx float64
				for b := 0; b < n; b++ {
					u := b*c + ch
					mu, r := float64(mean[u]), float64(rstd[u])
					xs := x[u*sp : (u+1)*sp]
					for i, g := range dy[u*sp : (u+1)*sp] {
						sdy += float64(g)
						sdyx += float64(g) * (float64(xs[i]) - mu) * r
					}
				}
				dscale[ch], dbias[ch] = T(sdyx), T(sdy)
			}
		})
		return nil
	}
}

// prepareLRNGrad: operands x, dy (see lrn_grad's Doc for the formula).
func prepareLRNGrad(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	x := s.In[0]
	if err := checkChannelOperands(s, x, 2, []ir.Type{s.In[1], s.Out[0]}, nil); err != nil {
		return nil, err
	}
	size := s.Attrs.Int("size", 0)
	if size < 1 {
		return nil, fmt.Errorf("lrn_grad size must be positive, got %d", size)
	}
	p := lrnParams{size: size, alpha: s.Attrs.Float("alpha", 1e-4), beta: s.Attrs.Float("beta", 0.75), bias: s.Attrs.Float("bias", 1)}
	p.n, p.c, p.spatial = channelGeometry(x)
	return byDType(d, lrnGradImpl[float32](p), lrnGradImpl[float64](p)), nil
}

// lrnGradImpl works on one image at a time, in float64: D for every channel, then
// t = dy·x·D^(−β−1), then dx = dy·D^(−β) − (2αβ/size)·x·Σ t over the channels whose window
// holds the channel.
func lrnGradImpl[T k.Float](p lrnParams) device.Impl {
	before := (p.size - 1) / 2
	after := p.size - 1 - before
	coef := 2 * p.alpha * p.beta / float64(p.size)
	return func(in, out []device.Tensor) error {
		x, dy, dx := floats[T](in[0]), floats[T](in[1]), floats[T](out[0])
		sp, c := p.spatial, p.c
		k.Parallel(p.n, 1, func(lo, hi int) {
			den := make([]float64, c*sp) // D, then D^(−β)
			t := make([]float64, c*sp)
			acc := make([]float64, sp)
			for b := lo; b < hi; b++ {
				img := b * c * sp
				xi, dyi, dxi := x[img:img+c*sp], dy[img:img+c*sp], dx[img:img+c*sp]
				for ch := 0; ch < c; ch++ {
					clear(acc)
					for j := max(0, ch-before); j <= min(c-1, ch+after); j++ {
						for i, v := range xi[j*sp : (j+1)*sp] {
							acc[i] += float64(v) * float64(v)
						}
					}
					for i, a := range acc {
						dn := p.bias + p.alpha/float64(p.size)*a
						pw := math.Pow(dn, -p.beta)
						den[ch*sp+i] = pw
						t[ch*sp+i] = float64(dyi[ch*sp+i]) * float64(xi[ch*sp+i]) * pw / dn
					}
				}
				for ch := 0; ch < c; ch++ {
					clear(acc)
					for j := max(0, ch-after); j <= min(c-1, ch+before); j++ {
						for i, v := range t[j*sp : (j+1)*sp] {
							acc[i] += v
						}
					}
					for i, a := range acc {
						q := ch*sp + i
						dxi[q] = T(float64(dyi[q])*den[q] - coef*float64(xi[q])*a)
					}
				}
			}
		})
		return nil
	}
}

// preparePadGrad: pad is separable — the product of one pad per dim — so its adjoint adds dy
// back one dim at a time: along dim i, every result position j whose source is m[j] ≥ 0 adds
// into m[j]. The maps m come from the forward kernel itself (Pad of the indices 0..d−1 with the
// fill −1), so they agree with it for every mode and for crops.
func preparePadGrad(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	dy, dx := s.In[0], s.Out[0]
	r := dx.Rank()
	pads := s.Attrs.Ints("pads")
	mode, ok := padModes[s.Attrs.Str("mode", "constant")]
	if !ok || len(pads) != 2*r || dy.Rank() != r {
		return nil, fmt.Errorf("pad_grad of %s into %s with pads %v, mode %s", dy, dx, pads, s.Attrs.Str("mode", ""))
	}
	out, err := k.PadShape(dx.Shape, pads)
	if err != nil {
		return nil, err
	}
	if !dy.Shape.Equal(out) {
		return nil, fmt.Errorf("pad_grad dy %s is not the pad %v of %s", dy, out, dx)
	}
	var steps []padStep
	shape := slices.Clone([]int(dy.Shape)) // the current tensor's shape, dims 0..i−1 already done
	for i, n := range dx.Shape {
		b, e := pads[i], pads[r+i]
		if b == 0 && e == 0 {
			continue
		}
		if n == 0 && mode != k.PadConstant {
			return nil, fmt.Errorf("pad_grad: %s padding of the empty dim %d of %s", mode, i, dx)
		}
		if mode == k.PadReflect && (b >= n || e >= n) {
			return nil, fmt.Errorf("pad_grad: reflect pads %v must be smaller than dim %d of %s", pads, i, dx)
		}
		src := make([]int, n)
		for j := range src {
			src[j] = j
		}
		m := make([]int, shape[i])
		k.Pad(src, []int{n}, []int{b, e}, mode, -1, m)
		steps = append(steps, padStep{outer: shapeProd(shape[:i]), inner: shapeProd(shape[i+1:]), from: shape[i], to: n, src: m})
		shape[i] = n
	}
	return byDType(d, padGradImpl[float32](steps), padGradImpl[float64](steps)), nil
}

// padStep is the adjoint of the pad of one dim: a tensor [outer, from, inner] becomes
// [outer, to, inner] with cur[o, j, i] added into next[o, src[j], i] (src[j] < 0: dropped).
type padStep struct {
	outer, inner, from, to int
	src                    []int
}

func padGradImpl[T k.Float](steps []padStep) device.Impl {
	return func(in, out []device.Tensor) error {
		dy, dx := floats[T](in[0]), floats[T](out[0])
		if len(steps) == 0 {
			copy(dx, dy)
			return nil
		}
		cur := make([]float64, len(dy))
		for i, v := range dy {
			cur[i] = float64(v)
		}
		for _, st := range steps {
			next := make([]float64, st.outer*st.to*st.inner)
			k.Parallel(st.outer, max(1, 16384/max(1, st.from*st.inner)), func(lo, hi int) {
				for o := lo; o < hi; o++ {
					for j, m := range st.src {
						if m < 0 {
							continue
						}
						dst := next[(o*st.to+m)*st.inner : (o*st.to+m+1)*st.inner]
						for i, v := range cur[(o*st.from+j)*st.inner : (o*st.from+j+1)*st.inner] {
							dst[i] += v
						}
					}
				}
			})
			cur = next
		}
		for i, v := range cur {
			dx[i] = T(v)
		}
		return nil
	}
}

// prepareResizeGrad runs ResizeBackward on the geometry of the forward resize (see
// prepareResize); cubic_coeff_a = 0, which kernels/cpu cannot express, runs the adjoint of
// resize.go's separable resampler instead.
func prepareResizeGrad(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	dy, dx := s.In[0], s.Out[0]
	sizes := s.Attrs.Ints("sizes")
	if len(sizes) != dx.Rank() || !dy.Shape.Equal(sizes) {
		return nil, fmt.Errorf("resize_grad of %s (sizes %v) into %s", dy, sizes, dx)
	}
	scales, err := ir.ResizeScales(s.Attrs, dx)
	if err != nil {
		return nil, err
	}
	mode := s.Attrs.Str("mode", "nearest")
	if dy.NumElements() == 0 || dx.NumElements() == 0 {
		return func(in, out []device.Tensor) error {
			clear(out[0].Data)
			return nil
		}, nil
	}
	if mode == "cubic" && s.Attrs.Float("cubic_coeff_a", -0.75) == 0 {
		axes := make([]resizeAxis, dx.Rank())
		for i, n := range dx.Shape {
			sc := float64(sizes[i]) / float64(n)
			if scales != nil {
				sc = scales[i]
			}
			axes[i] = buildResizeAxis(s.Attrs, n, sizes[i], sc)
		}
		return byDType(d, resizeInterpGrad[float32](dy.Shape, axes), resizeInterpGrad[float64](dy.Shape, axes)), nil
	}
	p := &k.ResizeParams{InShape: slices.Clone(dx.Shape), OutShape: slices.Clone(dy.Shape), Scales: scales,
		Mode: k.ResizeMode(mode), CoordMode: k.ResizeCoordMode(s.Attrs.Str("coordinate_transformation_mode", "half_pixel")),
		NearestMode: k.ResizeNearestMode(s.Attrs.Str("nearest_mode", "round_prefer_floor")),
		CubicCoeffA: s.Attrs.Float("cubic_coeff_a", -0.75), ExcludeOutside: s.Attrs.Bool("exclude_outside", false)}
	if err := p.Init(); err != nil {
		return nil, err
	}
	return byDType(d, resizeGradKernel[float32](p), resizeGradKernel[float64](p)), nil
}

func resizeGradKernel[T k.Float](p *k.ResizeParams) device.Impl {
	return func(in, out []device.Tensor) error {
		k.ResizeBackward(p, floats[T](in[0]), floats[T](out[0]))
		return nil
	}
}

// resizeInterpGrad is the adjoint of resizeInterp: the transposed resampling of one
// non-identity dim at a time, last dim first.
func resizeInterpGrad[T k.Float](outShape ir.Shape, axes []resizeAxis) device.Impl {
	return func(in, out []device.Tensor) error {
		dy, dx := floats[T](in[0]), floats[T](out[0])
		cur := make([]float64, len(dy))
		for i, v := range dy {
			cur[i] = float64(v)
		}
		shape := slices.Clone([]int(outShape))
		for d := len(axes) - 1; d >= 0; d-- {
			ax := axes[d]
			if ax.identity {
				continue
			}
			outer, inner := shapeProd(shape[:d]), shapeProd(shape[d+1:])
			next := make([]float64, outer*ax.in*inner)
			k.Parallel(outer, max(1, 8192/max(1, ax.out*inner*ax.taps)), func(lo, hi int) {
				for o := lo; o < hi; o++ {
					for j := 0; j < ax.out; j++ {
						src := cur[(o*ax.out+j)*inner : (o*ax.out+j+1)*inner]
						for t := 0; t < ax.taps; t++ {
							w := ax.w[j*ax.taps+t]
							if w == 0 {
								continue
							}
							dst := next[(o*ax.in+ax.idx[j*ax.taps+t])*inner:][:inner]
							for i, v := range src {
								dst[i] += w * v
							}
						}
					}
				}
			})
			cur = next
			shape[d] = ax.in
		}
		for i, v := range cur {
			dx[i] = T(v)
		}
		return nil
	}
}

// prepareGatherElementsGrad: operands indices, dy; the result has the data's shape.
func prepareGatherElementsGrad(s *device.Spec) (device.Impl, error) {
	idx, dy, dx := s.In[0], s.In[1], s.Out[0]
	d, err := floatOnly(s, dy, dx)
	if err != nil {
		return nil, err
	}
	if !idx.DType.IsInt() || !dy.Shape.Equal(idx.Shape) || dx.Rank() != idx.Rank() || dx.Rank() == 0 {
		return nil, fmt.Errorf("gather_elements_grad of indices %s and dy %s into %s", idx, dy, dx)
	}
	axis := s.Attrs.Int("axis", 0)
	if axis < 0 || axis >= dx.Rank() {
		return nil, fmt.Errorf("gather_elements_grad axis %d out of range for %s", axis, dx)
	}
	for i := range dx.Shape {
		if i != axis && idx.Shape[i] > dx.Shape[i] {
			return nil, fmt.Errorf("gather_elements_grad indices %s exceed %s along dim %d", idx, dx, i)
		}
	}
	if dx.Shape[axis] == 0 && idx.NumElements() > 0 {
		return nil, fmt.Errorf("gather_elements_grad into the empty dim %d of %s", axis, dx)
	}
	shape, idxShape := slices.Clone([]int(dx.Shape)), slices.Clone([]int(idx.Shape))
	return byDType(d, gatherElementsGradImpl[float32](shape, axis, idxShape), gatherElementsGradImpl[float64](shape, axis, idxShape)), nil
}

func gatherElementsGradImpl[T k.Float](shape []int, axis int, idxShape []int) device.Impl {
	return func(in, out []device.Tensor) error {
		return k.GatherElementsBackward(floats[T](in[1]), shape, axis, indicesOf(in[0]), idxShape, floats[T](out[0]))
	}
}

// prepareReduceProdGrad: operands x, dy. Reduced axes that are not adjacent are transposed to
// the end first (as the forward does) and the gradient transposed back.
func prepareReduceProdGrad(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	x, dy := s.In[0], s.In[1]
	red, err := ir.ReduceAxes(s.Attrs, x.Rank())
	if err != nil {
		return nil, err
	}
	if !s.Out[0].Equal(x) {
		return nil, fmt.Errorf("reduce_prod_grad of %s into %s", x, s.Out[0])
	}
	outer, n, inner, perm := reduceLayout(x.Shape, red)
	if dy.NumElements() != outer*inner {
		return nil, fmt.Errorf("reduce_prod_grad dy %s does not match the reduction of %s", dy, x)
	}
	var pshape, inv []int
	if perm != nil {
		inv = make([]int, len(perm))
		for i, p := range perm {
			pshape = append(pshape, x.Shape[p])
			inv[p] = i
		}
	}
	shape, size := slices.Clone(x.Shape), x.DType.Size()
	impl := func(prod func(x, dy, dx []byte)) device.Impl {
		return func(in, out []device.Tensor) error {
			if perm == nil {
				prod(in[0].Data, in[1].Data, out[0].Data)
				return nil
			}
			tmp := alignedBytes(len(out[0].Data))
			prod(permuted(in[0].Data, size, shape, perm), in[1].Data, tmp)
			k.TransposeBytes(tmp, size, pshape, inv, out[0].Data)
			return nil
		}
	}
	return byDType(d, impl(reduceProdGrad[float32](outer, n, inner)), impl(reduceProdGrad[float64](outer, n, inner))), nil
}

// reduceProdGrad gives x[o, j, i] the gradient dy[o, i]·Π_{j' ≠ j} x[o, j', i], from prefix and
// suffix products in float64.
func reduceProdGrad[T k.Float](outer, n, inner int) func(xb, dyb, dxb []byte) {
	return func(xb, dyb, dxb []byte) {
		x, dy, dx := words[T](xb), words[T](dyb), words[T](dxb)
		k.Parallel(outer, max(1, 16384/max(1, n*inner)), func(lo, hi int) {
			pre := make([]float64, n)
			for o := lo; o < hi; o++ {
				for i := 0; i < inner; i++ {
					p := 1.0
					for j := 0; j < n; j++ {
						pre[j] = p
						p *= float64(x[(o*n+j)*inner+i])
					}
					g, suf := float64(dy[o*inner+i]), 1.0
					for j := n - 1; j >= 0; j-- {
						q := (o*n+j)*inner + i
						dx[q] = T(g * pre[j] * suf)
						suf *= float64(x[q])
					}
				}
			}
		})
	}
}
