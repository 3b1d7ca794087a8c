package cpu

import (
	"fmt"
	"math"
	"slices"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Kernels of the nn ops (ir/ops_nn.go): convolutions, pooling, normalisations, padding,
// gather_elements, the extra reductions, arg_max/arg_min and the ONNX activation functions
// (elementwise, so they run on the fused engine). resize is in resize.go.

func init() {
	register("conv", prepareConv)
	register("conv_transpose", prepareConvTranspose)
	register("max_pool", preparePool(false))
	register("avg_pool", preparePool(true))
	register("batch_norm", prepareBatchNorm)
	register("instance_norm", prepareInstanceNorm)
	register("lrn", prepareLRN)
	register("pad", preparePad)
	register("resize", prepareResize)
	register("gather_elements", prepareGatherElements)
	register("reduce_min", prepareReduceExtra("min"))
	register("reduce_prod", prepareReduceExtra("prod"))
	register("reduce_log_sum_exp", prepareReduceExtra("log_sum_exp"))
	register("arg_max", prepareArg(false))
	register("arg_min", prepareArg(true))

	registerElementwise("elu", floatUnary(func(at ir.Attrs) func(float64) float64 {
		alpha := at.Float("alpha", 1)
		return func(x float64) float64 { return k.Elu(x, alpha) }
	}))
	registerElementwise("selu", floatUnary(func(at ir.Attrs) func(float64) float64 {
		alpha, gamma := at.Float("alpha", k.SeluAlpha), at.Float("gamma", k.SeluGamma)
		return func(x float64) float64 { return gamma * k.Elu(x, alpha) }
	}))
	registerElementwise("leaky_relu", floatUnary(func(at ir.Attrs) func(float64) float64 {
		alpha := at.Float("alpha", 0.01)
		return func(x float64) float64 { return k.LeakyRelu(x, alpha) }
	}))
	registerElementwise("softplus", floatUnary(func(ir.Attrs) func(float64) float64 { return k.Softplus[float64] }))
	registerElementwise("hard_sigmoid", floatUnary(func(at ir.Attrs) func(float64) float64 {
		alpha, beta := at.Float("alpha", 0.2), at.Float("beta", 0.5)
		return func(x float64) float64 { return k.HardSigmoid(x, alpha, beta) }
	}))
	registerElementwise("floor", floatUnary(func(ir.Attrs) func(float64) float64 { return math.Floor }))
	registerElementwise("ceil", floatUnary(func(ir.Attrs) func(float64) float64 { return math.Ceil }))
	registerElementwise("round", floatUnary(func(ir.Attrs) func(float64) float64 { return math.RoundToEven }))
	registerElementwise("shrink", numericUnary(func(at ir.Attrs) func(float64) float64 {
		bias, lambd := at.Float("bias", 0), at.Float("lambd", 0.5)
		return func(x float64) float64 {
			switch {
			case x > lambd:
				return x - bias
			case x < -lambd:
				return x + bias
			case x != x:
				return x
			}
			return 0
		}
	}))
	registerElementwise("sign", numericUnary(func(ir.Attrs) func(float64) float64 {
		return func(x float64) float64 {
			switch {
			case x > 0:
				return 1
			case x < 0:
				return -1
			case x == 0:
				return 0
			}
			return x // NaN
		}
	}))
}

// floatUnary builds an elementwise op defined on floating-point operands only.
func floatUnary(mk func(ir.Attrs) func(float64) float64) ewBuilder {
	return func(at ir.Attrs, out ir.DType) (ewFunc, error) {
		if !out.IsFloat() {
			return nil, fmt.Errorf("supports floating-point operands, not %s", out)
		}
		return unary(mk(at))(at, out)
	}
}

// numericUnary builds an elementwise op defined on numbers (not bool).
func numericUnary(mk func(ir.Attrs) func(float64) float64) ewBuilder {
	return func(at ir.Attrs, out ir.DType) (ewFunc, error) {
		if out == ir.Bool {
			return nil, fmt.Errorf("supports numeric operands, not bool")
		}
		return unary(mk(at))(at, out)
	}
}

// windowOperands checks x and w of conv/conv_transpose and returns the window attributes.
func windowOperands(s *device.Spec) (ir.DType, *ir.WindowParams, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return 0, nil, err
	}
	x, w := s.In[0], s.In[1]
	if x.Rank() < 3 || w.Rank() != x.Rank() {
		return 0, nil, fmt.Errorf("%s needs x [N, C, D1..] and w of the same rank, got %s and %s", s.Name(), x, w)
	}
	wp, err := ir.Window(s.Attrs, x.Rank()-2, slices.Clone(w.Shape[2:]))
	if err != nil {
		return 0, nil, err
	}
	return d, wp, nil
}

// checkOutSpatial compares a kernel's computed output geometry with the result type.
func checkOutSpatial(s *device.Spec, lead []int, spatial []int) error {
	want := append(slices.Clone(lead), spatial...)
	if !s.Out[0].Shape.Equal(want) {
		return fmt.Errorf("%s computes %v but the result is %s", s.Name(), want, s.Out[0])
	}
	return nil
}

func prepareConv(s *device.Spec) (device.Impl, error) {
	p, bias, d, err := convSetup(s)
	if err != nil {
		return nil, err
	}
	return byDType(d, convImpl[float32](nil, p, bias, false, nil), convImpl[float64](nil, p, bias, false, nil)), nil
}

// convSetup checks a conv launch site and returns its kernel parameters, whether it has a
// bias and its dtype.
func convSetup(s *device.Spec) (p *k.ConvParams, bias bool, d ir.DType, err error) {
	d, wp, err := windowOperands(s)
	if err != nil {
		return nil, false, d, err
	}
	x, w := s.In[0], s.In[1]
	p = &k.ConvParams{Batch: x.Shape[0], InC: x.Shape[1], OutC: w.Shape[0], Groups: wp.Groups,
		Spatial: slices.Clone(x.Shape[2:]), Kernel: wp.Kernel, Stride: wp.Strides, Dilation: wp.Dilations,
		PadBegin: wp.PadsBegin, PadEnd: wp.PadsEnd}
	if w.Shape[1]*wp.Groups != x.Shape[1] {
		return nil, false, d, fmt.Errorf("conv weight %s does not match %d input channels in %d groups", w, x.Shape[1], wp.Groups)
	}
	if err := p.Init(); err != nil {
		return nil, false, d, err
	}
	if err := checkOutSpatial(s, []int{p.Batch, p.OutC}, p.OutSpatial); err != nil {
		return nil, false, d, err
	}
	return p, len(s.In) == 3, d, nil
}

// convImpl is a conv launch: with constW, its weights (a constant operand) packed at the
// first launch and reused (constant.go); with run, followed by its epilogue (epilogue.go) on
// the operands after x, w and the bias.
func convImpl[T k.Float](d *Device, p *k.ConvParams, bias, constW bool, run convEpiRunner[T]) device.Impl {
	conv := convRunner(d, p, bias, constW, run)
	return func(in, out []device.Tensor) error { return conv(in, out, nil) }
}

// convRun is a conv launch (convImpl's) on its input under a prologue (nil: none).
type convRun[T k.Float] func(in, out []device.Tensor, pre *k.ConvPre[T]) error

func convRunner[T k.Float](d *Device, p *k.ConvParams, bias, constW bool, run convEpiRunner[T]) convRun[T] {
	var c constForm[*k.ConvFilter[T]]
	nOp := 2
	if bias {
		nOp = 3
	}
	return func(in, out []device.Tensor, pre *k.ConvPre[T]) error {
		x, y := floats[T](in[0]), floats[T](out[0])
		var b []T
		if bias {
			b = floats[T](in[2])
		}
		var epi k.Epilogue[T]
		if run != nil {
			epi = run(y, in[nOp:])
		}
		if constW {
			f := c.get(d, in[1], func() *k.ConvFilter[T] { return k.PackConvFilter(p, floats[T](in[1])) })
			f.ConvPreEpi(x, pre, b, y, epi)
			return nil
		}
		k.ConvPreEpi(p, x, pre, floats[T](in[1]), b, y, epi)
		return nil
	}
}

func prepareConvTranspose(s *device.Spec) (device.Impl, error) {
	d, wp, err := windowOperands(s)
	if err != nil {
		return nil, err
	}
	x, w := s.In[0], s.In[1]
	p := &k.ConvTransposeParams{Batch: x.Shape[0], InC: x.Shape[1], OutC: w.Shape[1] * wp.Groups, Groups: wp.Groups,
		Spatial: slices.Clone(x.Shape[2:]), Kernel: wp.Kernel, Stride: wp.Strides, Dilation: wp.Dilations,
		PadBegin: wp.PadsBegin, PadEnd: wp.PadsEnd, OutputPadding: wp.OutputPadding}
	if w.Shape[0] != x.Shape[1] {
		return nil, fmt.Errorf("conv_transpose weight %s does not match %d input channels", w, x.Shape[1])
	}
	if err := p.Init(); err != nil {
		return nil, err
	}
	if err := checkOutSpatial(s, []int{p.Batch, p.OutC}, p.OutSpatial); err != nil {
		return nil, err
	}
	bias := len(s.In) == 3
	return byDType(d, convTransposeImpl[float32](p, bias), convTransposeImpl[float64](p, bias)), nil
}

func convTransposeImpl[T k.Float](p *k.ConvTransposeParams, bias bool) device.Impl {
	return func(in, out []device.Tensor) error {
		var b []T
		if bias {
			b = floats[T](in[2])
		}
		k.ConvTranspose(p, floats[T](in[0]), floats[T](in[1]), b, floats[T](out[0]))
		return nil
	}
}

func preparePool(avg bool) builder {
	return func(s *device.Spec) (device.Impl, error) {
		d, err := floatOnly(s, s.In[0], s.Out[0])
		if err != nil {
			return nil, err
		}
		x := s.In[0]
		if x.Rank() < 3 {
			return nil, fmt.Errorf("%s needs x [N, C, D1..], got %s", s.Name(), x)
		}
		wp, err := ir.Window(s.Attrs, x.Rank()-2, s.Attrs.Ints("kernel"))
		if err != nil {
			return nil, err
		}
		p := &k.PoolParams{Batch: x.Shape[0], Channels: x.Shape[1], Spatial: slices.Clone(x.Shape[2:]),
			Kernel: wp.Kernel, Stride: wp.Strides, Dilation: wp.Dilations, PadBegin: wp.PadsBegin, PadEnd: wp.PadsEnd,
			CeilMode: wp.CeilMode, CountIncludePad: s.Attrs.Bool("count_include_pad", false)}
		if err := p.Init(); err != nil {
			return nil, fmt.Errorf("%s: %v", s.Name(), err)
		}
		if err := checkOutSpatial(s, []int{p.Batch, p.Channels}, p.OutSpatial); err != nil {
			return nil, err
		}
		if avg {
			return byDType(d, avgPoolImpl[float32](p), avgPoolImpl[float64](p)), nil
		}
		return byDType(d, maxPoolImpl[float32](p), maxPoolImpl[float64](p)), nil
	}
}

func maxPoolImpl[T k.Float](p *k.PoolParams) device.Impl {
	return func(in, out []device.Tensor) error {
		k.MaxPool(p, floats[T](in[0]), floats[T](out[0]), nil)
		return nil
	}
}

func avgPoolImpl[T k.Float](p *k.PoolParams) device.Impl {
	return func(in, out []device.Tensor) error {
		k.AvgPool(p, floats[T](in[0]), floats[T](out[0]))
		return nil
	}
}

// channelGeometry views x [N, C, …] as (n, c, spatial).
func channelGeometry(x ir.Type) (n, c, spatial int) {
	return x.Shape[0], x.Shape[1], x.Shape[2:].NumElements()
}

func prepareBatchNorm(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	if s.In[0].Rank() < 2 {
		return nil, fmt.Errorf("batch_norm needs x [N, C, …], got %s", s.In[0])
	}
	n, c, sp := channelGeometry(s.In[0])
	eps := s.Attrs.Float("eps", 1e-5)
	return byDType(d, batchNormImpl[float32](n, c, sp, eps, nil), batchNormImpl[float64](n, c, sp, eps, nil)), nil
}

// batchNormImpl is batch_norm, followed by its epilogue (epilogue.go) on the operands after
// its five with run.
func batchNormImpl[T k.Float](n, c, sp int, eps float64, run epiRunner[T]) device.Impl {
	return func(in, out []device.Tensor) error {
		y := floats[T](out[0])
		var epi func(lo, hi int)
		if run != nil {
			epi = run(y, in[5:])
		}
		k.BatchNormInference(floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), floats[T](in[3]), floats[T](in[4]),
			T(eps), n, c, sp, y, epi)
		return nil
	}
}

// batchNormReluImpl is batch norm with its ReLU epilogue in one pass (BatchNormReluInference):
// the bits of the chain runner's ReLU after it.
func batchNormReluImpl[T k.Float](n, c, sp int, eps float64) device.Impl {
	return func(in, out []device.Tensor) error {
		k.BatchNormReluInference(floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), floats[T](in[3]), floats[T](in[4]),
			T(eps), n, c, sp, floats[T](out[0]))
		return nil
	}
}

// prepareInstanceNorm runs BatchNormTraining on x viewed as one image of N·C channels: the
// per-channel batch statistics of that view are exactly the per-(n, c) instance statistics.
func prepareInstanceNorm(s *device.Spec) (device.Impl, error) {
	d, err := allFloat(s, s.In, s.Out)
	if err != nil {
		return nil, err
	}
	if s.In[0].Rank() < 3 {
		return nil, fmt.Errorf("instance_norm needs x [N, C, D1..], got %s", s.In[0])
	}
	n, c, sp := channelGeometry(s.In[0])
	eps := s.Attrs.Float("eps", 1e-5)
	return byDType(d, instanceNormImpl[float32](n, c, sp, eps), instanceNormImpl[float64](n, c, sp, eps)), nil
}

func instanceNormImpl[T k.Float](n, c, sp int, eps float64) device.Impl {
	return func(in, out []device.Tensor) error {
		scale, bias := floats[T](in[1]), floats[T](in[2])
		buf := make([]T, 4*n*c)
		sc, bi, mean, variance := buf[:n*c], buf[n*c:2*n*c], buf[2*n*c:3*n*c], buf[3*n*c:]
		for b := 0; b < n; b++ {
			copy(sc[b*c:], scale)
			copy(bi[b*c:], bias)
		}
		k.BatchNormTraining(floats[T](in[0]), sc, bi, T(eps), 1, n*c, sp, floats[T](out[0]), mean, variance)
		return nil
	}
}

func prepareLRN(s *device.Spec) (device.Impl, error) {
	d, err := floatOnly(s, s.In[0], s.Out[0])
	if err != nil {
		return nil, err
	}
	if s.In[0].Rank() < 2 {
		return nil, fmt.Errorf("lrn needs x [N, C, …], got %s", s.In[0])
	}
	size := s.Attrs.Int("size", 0)
	if size < 1 {
		return nil, fmt.Errorf("lrn size must be positive, got %d", size)
	}
	p := lrnParams{size: size, alpha: s.Attrs.Float("alpha", 1e-4), beta: s.Attrs.Float("beta", 0.75), bias: s.Attrs.Float("bias", 1)}
	p.n, p.c, p.spatial = channelGeometry(s.In[0])
	return byDType(d, lrnImpl[float32](p), lrnImpl[float64](p)), nil
}

type lrnParams struct {
	n, c, spatial, size int
	alpha, beta, bias   float64
}

// lrnImpl computes LRN in float64: for each image and channel, the sum of squares over the
// channel window is accumulated for every spatial position at once (kernels/cpu has no LRN).
func lrnImpl[T k.Float](p lrnParams) device.Impl {
	before := (p.size - 1) / 2
	after := p.size - 1 - before
	return func(in, out []device.Tensor) error {
		x, y := floats[T](in[0]), floats[T](out[0])
		sp := p.spatial
		k.Parallel(p.n*p.c, max(1, 8192/max(1, sp*p.size)), func(lo, hi int) {
			sq := make([]float64, sp)
			for u := lo; u < hi; u++ {
				b, ch := u/p.c, u%p.c
				clear(sq)
				for j := max(0, ch-before); j <= min(p.c-1, ch+after); j++ {
					for i, v := range x[(b*p.c+j)*sp : (b*p.c+j+1)*sp] {
						sq[i] += float64(v) * float64(v)
					}
				}
				xr, yr := x[u*sp:(u+1)*sp], y[u*sp:(u+1)*sp]
				for i, v := range xr {
					yr[i] = T(float64(v) / math.Pow(p.bias+p.alpha/float64(p.size)*sq[i], p.beta))
				}
			}
		})
		return nil
	}
}

var padModes = map[string]k.PadMode{"constant": k.PadConstant, "reflect": k.PadReflect, "edge": k.PadEdge, "wrap": k.PadWrap}

// preparePad pads any dtype with the byte kernel; the constant value is rounded to the dtype
// as the elementwise engine rounds (truncated for integers, nonzero is true for bool).
func preparePad(s *device.Spec) (device.Impl, error) {
	x := s.In[0]
	pads := s.Attrs.Ints("pads")
	if len(pads) != 2*x.Rank() {
		return nil, fmt.Errorf("pad: pads %v need %d entries for %s", pads, 2*x.Rank(), x)
	}
	mode, ok := padModes[s.Attrs.Str("mode", "constant")]
	if !ok {
		return nil, fmt.Errorf("pad: unknown mode %s", s.Attrs.Str("mode", ""))
	}
	out, err := k.PadShape(x.Shape, pads)
	if err != nil {
		return nil, err
	}
	if !s.Out[0].Shape.Equal(out) {
		return nil, fmt.Errorf("pad computes %v but the result is %s", out, s.Out[0])
	}
	for i, dim := range x.Shape {
		b, e := pads[i], pads[x.Rank()+i]
		if mode == k.PadReflect && (b >= dim || e >= dim) && (b > 0 || e > 0) {
			return nil, fmt.Errorf("pad: reflect pads %v must be smaller than dim %d of %s", pads, i, x)
		}
		if mode != k.PadConstant && dim == 0 && (b > 0 || e > 0) {
			return nil, fmt.Errorf("pad: %s padding of the empty dim %d of %s", mode, i, x)
		}
	}
	value, err := scalarBytes(x.DType, s.Attrs.Float("value", 0))
	if err != nil {
		return nil, fmt.Errorf("pad: %v", err)
	}
	shape, size := slices.Clone(x.Shape), x.DType.Size()
	return func(in, out []device.Tensor) error {
		k.PadBytes(in[0].Data, size, shape, pads, mode, value, out[0].Data)
		return nil
	}, nil
}

// prepareGatherElements gathers any dtype through the generic kernel on words of the element
// size.
func prepareGatherElements(s *device.Spec) (device.Impl, error) {
	x, idx := s.In[0], s.In[1]
	if !idx.DType.IsInt() {
		return nil, fmt.Errorf("gather_elements indices must be integers, got %s", idx)
	}
	if x.Rank() != idx.Rank() || x.Rank() == 0 {
		return nil, fmt.Errorf("gather_elements operands must have equal rank >= 1, got %s and %s", x, idx)
	}
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), x.Rank())
	if err != nil {
		return nil, err
	}
	for d := range x.Shape {
		if d != axis && idx.Shape[d] > x.Shape[d] {
			return nil, fmt.Errorf("gather_elements indices %s exceed data %s along dim %d", idx, x, d)
		}
	}
	if x.Shape[axis] == 0 && idx.NumElements() > 0 {
		return nil, fmt.Errorf("gather_elements from the empty dim %d of %s", axis, x)
	}
	shape, idxShape := slices.Clone(x.Shape), slices.Clone(idx.Shape)
	var g func(data, out []byte, ind []int64) error
	switch x.DType.Size() {
	case 1:
		g = func(data, out []byte, ind []int64) error {
			return k.GatherElements(data, shape, axis, ind, idxShape, out)
		}
	case 2:
		g = gatherElementsWords[uint16](shape, axis, idxShape)
	case 4:
		g = gatherElementsWords[uint32](shape, axis, idxShape)
	case 8:
		g = gatherElementsWords[uint64](shape, axis, idxShape)
	default:
		return nil, unsupported(s, "dtypes of 1, 2, 4 and 8 bytes", x.DType)
	}
	return func(in, out []device.Tensor) error { return g(in[0].Data, out[0].Data, indicesOf(in[1])) }, nil
}

func gatherElementsWords[W any](shape []int, axis int, idxShape []int) func(data, out []byte, ind []int64) error {
	return func(data, out []byte, ind []int64) error {
		return k.GatherElements(words[W](data), shape, axis, ind, idxShape, words[W](out))
	}
}

// prepareReduceExtra handles reduce_min, reduce_prod (floats through the kernels, integers
// here) and reduce_log_sum_exp (floats), over any set of axes: non-adjacent axes are first
// transposed to the end.
func prepareReduceExtra(kind string) builder {
	return func(s *device.Spec) (device.Impl, error) {
		x := s.In[0]
		if x.DType != s.Out[0].DType {
			return nil, fmt.Errorf("%s of %s into %s", s.Name(), x.DType, s.Out[0].DType)
		}
		red, err := ir.ReduceAxes(s.Attrs, x.Rank())
		if err != nil {
			return nil, err
		}
		outer, n, inner, perm := reduceLayout(x.Shape, red)
		shape, size := slices.Clone(x.Shape), x.DType.Size()
		switch {
		case x.DType == ir.F32 || x.DType == ir.F64:
			f32, f64 := floatReducer[float32](kind), floatReducer[float64](kind)
			return byDType(x.DType,
				func(in, out []device.Tensor) error {
					f32(words[float32](permuted(in[0].Data, size, shape, perm)), outer, n, inner, out[0].F32())
					return nil
				},
				func(in, out []device.Tensor) error {
					f64(words[float64](permuted(in[0].Data, size, shape, perm)), outer, n, inner, out[0].F64())
					return nil
				}), nil
		case intDType(x.DType) && kind != "log_sum_exp":
			r := intReducer(x.DType, kind)
			return func(in, out []device.Tensor) error {
				r(permuted(in[0].Data, size, shape, perm), outer, n, inner, out[0].Data)
				return nil
			}, nil
		case kind == "log_sum_exp":
			return nil, unsupported(s, "f32 and f64", x.DType)
		}
		return nil, unsupported(s, "f32, f64, i64, i32, i8 and u8", x.DType)
	}
}

// floatReducer returns the kernel of a float reduction kind.
func floatReducer[T k.Float](kind string) func(x []T, outer, n, inner int, y []T) {
	switch kind {
	case "sum":
		return k.ReduceSum[T]
	case "mean":
		return k.ReduceMean[T]
	case "max":
		return k.ReduceMax[T]
	case "min":
		return k.ReduceMin[T]
	case "prod":
		return k.ReduceProd[T]
	case "log_sum_exp":
		return k.ReduceLogSumExp[T]
	}
	panic("runtime/cpu: unknown reduction " + kind)
}

type integer interface {
	~int64 | ~int32 | ~int8 | ~uint8
}

// intReducer returns a reduction of integer tensors in their own arithmetic (products wrap
// around like numpy's); the minimum of an empty set is the dtype's largest value.
func intReducer(d ir.DType, kind string) func(x []byte, outer, n, inner int, y []byte) {
	switch d {
	case ir.I64:
		return intReduceBytes[int64](kind, math.MaxInt64)
	case ir.I32:
		return intReduceBytes[int32](kind, math.MaxInt32)
	case ir.I8:
		return intReduceBytes[int8](kind, math.MaxInt8)
	}
	return intReduceBytes[uint8](kind, math.MaxUint8)
}

func intReduceBytes[T integer](kind string, maxValue T) func(x []byte, outer, n, inner int, y []byte) {
	return func(xb []byte, outer, n, inner int, yb []byte) {
		x, y := words[T](xb), words[T](yb)
		k.Parallel(outer, max(1, 16384/max(1, n*inner)), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				ys := y[o*inner : (o+1)*inner]
				init := maxValue
				if kind == "prod" {
					init = 1
				}
				for i := range ys {
					ys[i] = init
				}
				for j := 0; j < n; j++ {
					row := x[(o*n+j)*inner : (o*n+j+1)*inner]
					if kind == "prod" {
						for i, v := range row {
							ys[i] *= v
						}
					} else {
						for i, v := range row {
							ys[i] = min(ys[i], v)
						}
					}
				}
			}
		})
	}
}

func prepareArg(isMin bool) builder {
	return func(s *device.Spec) (device.Impl, error) {
		x := s.In[0]
		if s.Out[0].DType != ir.I64 {
			return nil, fmt.Errorf("%s result must be i64, got %s", s.Name(), s.Out[0])
		}
		axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), x.Rank())
		if err != nil {
			return nil, err
		}
		outer, n, inner := outerInner(x.Shape, axis)
		if n == 0 {
			return nil, fmt.Errorf("%s over the empty dim %d of %s", s.Name(), axis, x)
		}
		last := s.Attrs.Bool("select_last_index", false)
		switch x.DType {
		case ir.F32:
			return argImpl(func(in device.Tensor, y []int64) { argFloat(in.F32(), outer, n, inner, y, last, isMin) }), nil
		case ir.F64:
			return argImpl(func(in device.Tensor, y []int64) { argFloat(in.F64(), outer, n, inner, y, last, isMin) }), nil
		case ir.I64:
			return argImpl(func(in device.Tensor, y []int64) { argInt(in.I64(), outer, n, inner, y, last, isMin) }), nil
		case ir.I32:
			return argImpl(func(in device.Tensor, y []int64) { argInt(in.I32(), outer, n, inner, y, last, isMin) }), nil
		case ir.I8:
			return argImpl(func(in device.Tensor, y []int64) { argInt(words[int8](in.Data), outer, n, inner, y, last, isMin) }), nil
		case ir.U8:
			return argImpl(func(in device.Tensor, y []int64) { argInt(in.Data, outer, n, inner, y, last, isMin) }), nil
		}
		return nil, unsupported(s, "f32, f64, i64, i32, i8 and u8", x.DType)
	}
}

func argImpl(f func(x device.Tensor, y []int64)) device.Impl {
	return func(in, out []device.Tensor) error {
		f(in[0], out[0].I64())
		return nil
	}
}

func argFloat[T k.Float](x []T, outer, n, inner int, y []int64, last, isMin bool) {
	if isMin {
		k.ArgMin(x, outer, n, inner, y, last)
	} else {
		k.ArgMax(x, outer, n, inner, y, last)
	}
}

// argInt is ArgMax/ArgMin for integers (kernels/cpu's are float only).
func argInt[T integer](x []T, outer, n, inner int, y []int64, last, isMin bool) {
	k.Parallel(outer, max(1, 16384/max(1, n*inner)), func(lo, hi int) {
		best := make([]T, inner)
		for o := lo; o < hi; o++ {
			ys := y[o*inner : (o+1)*inner]
			copy(best, x[o*n*inner:(o*n+1)*inner])
			clear(ys)
			for j := 1; j < n; j++ {
				for i, v := range x[(o*n+j)*inner : (o*n+j+1)*inner] {
					m := best[i]
					better := v > m || (last && v == m)
					if isMin {
						better = v < m || (last && v == m)
					}
					if better {
						best[i], ys[i] = v, int64(j)
					}
				}
			}
		}
	})
}
