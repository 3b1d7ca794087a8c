package cpu

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Kernels of the fused gradient ops (ir/ops_grad.go) the autodiff emits. The elementwise ones
// run on the fused engine; the others recompute what they need from the forward's input (the
// normalisation statistics) with the forward kernels themselves, so that the backward sees the
// very mean and rstd the forward used.

func init() {
	registerElementwise("relu_grad", floatBinary(func(ir.Attrs) func(x, dy float64) float64 {
		return func(x, dy float64) float64 {
			if x > 0 {
				return dy
			}
			return 0
		}
	}))
	registerElementwise("gelu_grad", func(at ir.Attrs, out ir.DType) (ewFunc, error) {
		// bf16 and f16 results are rounded from f32 values, as gelu's (elementwise.go).
		f32 := out == ir.F32 || out == ir.BF16 || out == ir.F16
		switch {
		case !out.IsFloat():
			return nil, fmt.Errorf("supports floating-point operands, not %s", out)
		case at.Str("approximate", "none") == "tanh" && f32:
			return geluTanhGradF32, nil // vectorised float64 (gelu_tanh.go)
		case at.Str("approximate", "none") == "tanh":
			return binary(func(x, dy float64) float64 { return dy * k.GeluTanhGrad(x) })(at, out)
		case f32:
			return geluGradF32, nil // the same values, rounded to f32 (gelu.go)
		}
		return binary(func(x, dy float64) float64 { return dy * k.GeluGrad(x) })(at, out)
	})
	registerElementwise("silu_grad", floatBinary(func(ir.Attrs) func(x, dy float64) float64 {
		return func(x, dy float64) float64 { return dy * k.SiluGrad(x) }
	}))
	registerElementwise("sigmoid_grad", floatBinary(func(ir.Attrs) func(y, dy float64) float64 {
		return func(y, dy float64) float64 { return dy * y * (1 - y) }
	}))
	registerElementwise("tanh_grad", floatBinary(func(ir.Attrs) func(y, dy float64) float64 {
		return func(y, dy float64) float64 { return dy * (1 - y*y) }
	}))

	register("softmax_grad", prepareSoftmaxGrad(false))
	register("log_softmax_grad", prepareSoftmaxGrad(true))
	register("layer_norm_grad_input", prepareNormGradInput(false))
	register("rms_norm_grad_input", prepareNormGradInput(true))
	register("layer_norm_grad_params", prepareNormGradParams(false))
	register("rms_norm_grad_params", prepareNormGradParams(true))
	register("cross_entropy_grad", prepareCrossEntropyGrad)
	register("mse_grad", prepareMSEGrad)
	register("gather_grad", prepareGatherGrad)
	register("reduce_max_grad", prepareReduceMaxGrad)
	register("slice_grad", prepareSliceGrad)
}

// floatBinary builds a two-operand elementwise op on floating-point operands.
func floatBinary(mk func(ir.Attrs) func(a, b float64) float64) ewBuilder {
	return func(at ir.Attrs, out ir.DType) (ewFunc, error) {
		if !out.IsFloat() {
			return nil, fmt.Errorf("supports floating-point operands, not %s", out)
		}
		return binary(mk(at))(at, out)
	}
}

func prepareSoftmaxGrad(logOf bool) builder {
	return func(s *device.Spec) (device.Impl, error) {
		d, err := allFloat(s, s.In, s.Out)
		if err != nil {
			return nil, err
		}
		axis, err := ir.NormAxis(s.Attrs.Int("axis", -1), s.In[0].Rank())
		if err != nil {
			return nil, err
		}
		outer, n, inner := outerInner(s.In[0].Shape, axis)
		return byDType(d, softmaxGradImpl[float32](logOf, outer, n, inner), softmaxGradImpl[float64](logOf, outer, n, inner)), nil
	}
}

func softmaxGradImpl[T k.Float](logOf bool, outer, n, inner int) device.Impl {
	return func(in, out []device.Tensor) error {
		y, dy, dx := floats[T](in[0]), floats[T](in[1]), floats[T](out[0])
		if logOf {
			k.LogSoftmaxBackward(y, dy, dx, outer, n, inner)
		} else {
			k.SoftmaxBackward(y, dy, dx, outer, n, inner)
		}
		return nil
	}
}

// normEps is the eps default of layer_norm and rms_norm (as their forward kernels in core.go).
func normEps(s *device.Spec, rms bool) float64 {
	if rms {
		return s.Attrs.Float("eps", 1e-6)
	}
	return s.Attrs.Float("eps", 1e-5)
}

// normStatsBlock is the number of elements normStats normalises at a time into its scratch.
const normStatsBlock = 1 << 18

// normStats recomputes the per-row statistics of the forward kernel (LayerNorm: mean and
// rstd; RMSNorm: rstd, mean nil) by running it on blocks of rows into a bounded scratch.
func normStats[T k.Float](x, mean, rstd []T, rows, n int, eps T, rms bool) {
	if rows == 0 || n == 0 {
		return
	}
	block := max(1, normStatsBlock/n)
	scratch := make([]T, min(block, rows)*n)
	for r0 := 0; r0 < rows; r0 += block {
		r1 := min(r0+block, rows)
		xs, ys := x[r0*n:r1*n], scratch[:(r1-r0)*n]
		if rms {
			k.RMSNorm(xs, nil, ys, rstd[r0:r1], r1-r0, n, eps)
		} else {
			k.LayerNorm(xs, nil, nil, ys, mean[r0:r1], rstd[r0:r1], r1-r0, n, eps)
		}
	}
}

// prepareNormGradInput handles layer_norm_grad_input and rms_norm_grad_input: operands x, dy
// [, scale].
func prepareNormGradInput(rms bool) builder {
	return func(s *device.Spec) (device.Impl, error) {
		d, err := allFloat(s, s.In, s.Out)
		if err != nil {
			return nil, err
		}
		rows, n, err := normRows(s)
		if err != nil {
			return nil, err
		}
		if !s.In[1].Equal(s.In[0]) || len(s.In) == 3 && s.In[2].NumElements() != n {
			return nil, fmt.Errorf("%s operands %v do not match", s.Name(), s.In)
		}
		eps := normEps(s, rms)
		return byDType(d, normGradInputImpl[float32](rms, rows, n, eps), normGradInputImpl[float64](rms, rows, n, eps)), nil
	}
}

func normGradInputImpl[T k.Float](rms bool, rows, n int, eps float64) device.Impl {
	return func(in, out []device.Tensor) error {
		x, dy, scale, dx := floats[T](in[0]), floats[T](in[1]), optFloats[T](in, 2), floats[T](out[0])
		rstd := make([]T, rows)
		if rms {
			normStats(x, nil, rstd, rows, n, T(eps), true)
			k.RMSNormBackward(x, scale, rstd, dy, dx, nil, rows, n)
			return nil
		}
		mean := make([]T, rows)
		normStats(x, mean, rstd, rows, n, T(eps), false)
		k.LayerNormBackward(x, scale, mean, rstd, dy, dx, nil, nil, rows, n)
		return nil
	}
}

// prepareNormGradParams handles layer_norm_grad_params (dscale, dbias) and
// rms_norm_grad_params (dscale): operands x, dy. The kernels sum the rows in fixed chunks of
// 64 rows, each in increasing row order, and add the chunk sums in order: deterministic for
// any core count.
func prepareNormGradParams(rms bool) builder {
	return func(s *device.Spec) (device.Impl, error) {
		d, err := allFloat(s, s.In, s.Out)
		if err != nil {
			return nil, err
		}
		rows, n, err := normRows(s)
		if err != nil {
			return nil, err
		}
		want := 2
		if rms {
			want = 1
		}
		if len(s.Out) != want || !s.In[1].Equal(s.In[0]) {
			return nil, fmt.Errorf("%s of %v into %v", s.Name(), s.In, s.Out)
		}
		eps := normEps(s, rms)
		return byDType(d, normGradParamsImpl[float32](rms, rows, n, eps), normGradParamsImpl[float64](rms, rows, n, eps)), nil
	}
}

func normGradParamsImpl[T k.Float](rms bool, rows, n int, eps float64) device.Impl {
	return func(in, out []device.Tensor) error {
		x, dy, dscale := floats[T](in[0]), floats[T](in[1]), floats[T](out[0])
		rstd := make([]T, rows)
		if rms {
			normStats(x, nil, rstd, rows, n, T(eps), true)
			k.RMSNormBackward(x, nil, rstd, dy, nil, dscale, rows, n)
			return nil
		}
		mean := make([]T, rows)
		normStats(x, mean, rstd, rows, n, T(eps), false)
		k.LayerNormBackward(x, nil, mean, rstd, dy, nil, dscale, floats[T](out[1]), rows, n)
		return nil
	}
}

func prepareCrossEntropyGrad(s *device.Spec) (device.Impl, error) {
	logits, labels := s.In[0], s.In[1]
	d, err := floatOnly(s, logits, s.In[2], s.Out[0])
	if err != nil {
		return nil, err
	}
	if !labels.DType.IsInt() || logits.Rank() < 1 || !labels.Shape.Equal(logits.Shape[:logits.Rank()-1]) {
		return nil, fmt.Errorf("cross_entropy_grad labels %s do not match logits %s", labels, logits)
	}
	classes := logits.Shape[logits.Rank()-1]
	rows := logits.NumElements() / max(classes, 1)
	reduction := s.Attrs.Str("reduction", "mean")
	if want := lossShape(reduction, labels.Shape); !s.In[2].Shape.Equal(want) {
		return nil, fmt.Errorf("cross_entropy_grad dloss %s does not match reduction %s", s.In[2], reduction)
	}
	ignore := int64(-1 << 62) // no label is ignored
	if s.Attrs.Has("ignore_index") {
		ignore = int64(s.Attrs.Int("ignore_index", 0))
	}
	return byDType(d, crossEntropyGradImpl[float32](rows, classes, reduction, ignore),
		crossEntropyGradImpl[float64](rows, classes, reduction, ignore)), nil
}

func crossEntropyGradImpl[T k.Float](rows, classes int, reduction string, ignore int64) device.Impl {
	return func(in, out []device.Tensor) error {
		labels, dloss := indicesOf(in[1]), floats[T](in[2])
		w := make([]T, rows)
		switch reduction {
		case "none":
			copy(w, dloss)
		case "sum":
			for i := range w {
				w[i] = dloss[0]
			}
		default: // mean over the rows that are not ignored, as the forward divides
			valid := 0
			for _, l := range labels {
				if l != ignore {
					valid++
				}
			}
			v := T(float64(dloss[0]) / float64(max(valid, 1)))
			for i := range w {
				w[i] = v
			}
		}
		return k.CrossEntropyBackward(floats[T](in[0]), labels, w, floats[T](out[0]), rows, classes, ignore)
	}
}

func prepareMSEGrad(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	n := s.In[0].NumElements()
	reduction := s.Attrs.Str("reduction", "mean")
	if !s.In[1].Equal(s.In[0]) || !s.In[2].Shape.Equal(lossShape(reduction, s.In[0].Shape)) {
		return nil, fmt.Errorf("mse_grad operands %v do not match reduction %s", s.In, reduction)
	}
	return byDType(d, mseGradImpl[float32](n, reduction), mseGradImpl[float64](n, reduction)), nil
}

// lossShape is the shape of a loss's result (and of its gradient dloss): per element for
// reduction none, else a scalar.
func lossShape(reduction string, elems ir.Shape) ir.Shape {
	if reduction == "none" {
		return elems
	}
	return ir.Shape{}
}

func mseGradImpl[T k.Float](n int, reduction string) device.Impl {
	return func(in, out []device.Tensor) error {
		dloss := floats[T](in[2])
		switch reduction {
		case "none":
		case "sum":
			dloss = dloss[:1]
		default:
			dloss = []T{T(float64(dloss[0]) / float64(max(n, 1)))}
		}
		k.MSEBackward(floats[T](in[0]), floats[T](in[1]), dloss, floats[T](out[0]))
		return nil
	}
}

func prepareGatherGrad(s *device.Spec) (device.Impl, error) {
	idx, dy, dx := s.In[0], s.In[1], s.Out[0]
	d, err := floatOnly(s, dy, dx)
	if err != nil {
		return nil, err
	}
	if !idx.DType.IsInt() {
		return nil, fmt.Errorf("gather_grad indices must be integers, got %s", idx)
	}
	axis, dim := s.Attrs.Int("axis", 0), s.Attrs.Int("dim", 0)
	if axis < 0 || axis >= dx.Rank() || dx.Shape[axis] != dim {
		return nil, fmt.Errorf("gather_grad axis %d, dim %d do not match the result %s", axis, dim, dx)
	}
	shape := slices.Clone([]int(dx.Shape))
	if dim == 0 && idx.NumElements() > 0 && dy.NumElements() > 0 {
		return nil, fmt.Errorf("gather_grad into the empty dim %d of %s", axis, dx)
	}
	return byDType(d, gatherGradImpl[float32](shape, axis), gatherGradImpl[float64](shape, axis)), nil
}

func gatherGradImpl[T k.Float](shape []int, axis int) device.Impl {
	return func(in, out []device.Tensor) error {
		return k.GatherBackward(floats[T](in[1]), shape, axis, indicesOf(in[0]), floats[T](out[0]))
	}
}

func prepareReduceMaxGrad(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	x := s.In[0]
	red, err := ir.ReduceAxes(s.Attrs, x.Rank())
	if err != nil {
		return nil, err
	}
	if !s.Out[0].Equal(x) || s.In[1].NumElements() != s.In[2].NumElements() {
		return nil, fmt.Errorf("reduce_max_grad of %v into %s", s.In, s.Out[0])
	}
	outer, n, inner, perm := reduceLayout(x.Shape, red)
	if perm == nil {
		return byDType(d, reduceMaxGradImpl[float32](outer, n, inner), reduceMaxGradImpl[float64](outer, n, inner)), nil
	}
	// Non-adjacent axes: walk x in row-major order; ystride maps x's coordinates to y's index.
	ystride := make([]int, x.Rank())
	acc := 1
	for i := x.Rank() - 1; i >= 0; i-- {
		if !red[i] {
			ystride[i] = acc
			acc *= x.Shape[i]
		}
	}
	shape := slices.Clone([]int(x.Shape))
	return byDType(d, reduceMaxGradStrided[float32](shape, ystride), reduceMaxGradStrided[float64](shape, ystride)), nil
}

// reduceMaxGradImpl gives, in each group x[o, :, i], dy[o, i] to the first j with x = y.
func reduceMaxGradImpl[T k.Float](outer, n, inner int) device.Impl {
	return func(in, out []device.Tensor) error {
		x, y, dy, dx := floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), floats[T](out[0])
		k.Parallel(outer, max(1, 16384/max(1, n*inner)), func(lo, hi int) {
			clear(dx[lo*n*inner : hi*n*inner])
			for o := lo; o < hi; o++ {
				for i := 0; i < inner; i++ {
					m := y[o*inner+i]
					for j := 0; j < n; j++ {
						if p := (o*n+j)*inner + i; x[p] == m {
							dx[p] = dy[o*inner+i]
							break
						}
					}
				}
			}
		})
		return nil
	}
}

func reduceMaxGradStrided[T k.Float](shape, ystride []int) device.Impl {
	return func(in, out []device.Tensor) error {
		x, y, dy, dx := floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), floats[T](out[0])
		clear(dx)
		done := make([]bool, len(y))
		coord := make([]int, len(shape))
		yi := 0
		for p, v := range x {
			if !done[yi] && v == y[yi] {
				dx[p], done[yi] = dy[yi], true
			}
			for d := len(shape) - 1; d >= 0; d-- {
				coord[d]++
				yi += ystride[d]
				if coord[d] < shape[d] {
					break
				}
				yi -= ystride[d] * coord[d]
				coord[d] = 0
			}
		}
		return nil
	}
}

func prepareSliceGrad(s *device.Spec) (device.Impl, error) {
	d, err := floatOnly(s, s.In[0], s.Out[0])
	if err != nil {
		return nil, err
	}
	shape := s.Out[0].Shape
	dims, err := ir.SliceDims(s.Attrs, shape)
	if err != nil {
		return nil, err
	}
	sizes := make([]int, len(dims))
	start := 0
	strides := rowMajorStrides(shape)
	steps := make([]int, len(dims))
	for i, dm := range dims {
		sizes[i] = dm.Size
		start += dm.Start * strides[i]
		steps[i] = dm.Step * strides[i]
	}
	if !s.In[0].Shape.Equal(sizes) {
		return nil, fmt.Errorf("slice_grad dy %s does not match the slice %v of %s", s.In[0], sizes, shape)
	}
	return byDType(d, sliceGradImpl[float32](sizes, start, steps), sliceGradImpl[float64](sizes, start, steps)), nil
}

// sliceGradImpl zeroes dx and writes each dy element to the position the slice read it from:
// start + Σ i_d·step_d (steps already multiplied by dx's strides).
func sliceGradImpl[T k.Float](sizes []int, start int, steps []int) device.Impl {
	r := len(sizes)
	return func(in, out []device.Tensor) error {
		dy, dx := floats[T](in[0]), floats[T](out[0])
		k.Parallel(len(dx), 1<<16, func(lo, hi int) { clear(dx[lo:hi]) })
		if len(dy) == 0 {
			return nil
		}
		if r == 0 {
			dx[0] = dy[0]
			return nil
		}
		lineLen, last := sizes[r-1], steps[r-1]
		k.Parallel(len(dy)/lineLen, max(1, 16384/lineLen), func(lo, hi int) {
			for ln := lo; ln < hi; ln++ {
				p, rem := start, ln
				for d := r - 2; d >= 0; d-- {
					p += rem % sizes[d] * steps[d]
					rem /= sizes[d]
				}
				for j, v := range dy[ln*lineLen : (ln+1)*lineLen] {
					dx[p+j*last] = v
				}
			}
		})
		return nil
	}
}
