package cpu

import (
	"fmt"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Kernels of the core (transformer) ops that are not elementwise.

// floatOnly checks that every operand and result listed is f32 or f64 and all the same, and
// returns that dtype.
func floatOnly(s *device.Spec, types ...ir.Type) (ir.DType, error) {
	d := types[0].DType
	for _, t := range types {
		if t.DType != d {
			return 0, fmt.Errorf("mixed dtypes %s and %s", d, t.DType)
		}
	}
	if d != ir.F32 && d != ir.F64 {
		return 0, fmt.Errorf("%s supports f32 and f64, not %s", s.Name(), d)
	}
	return d, nil
}

// byDType returns f32 or f64 depending on d.
func byDType(d ir.DType, f32, f64 device.Impl) device.Impl {
	if d == ir.F64 {
		return f64
	}
	return f32
}

// outerInner views an axis of a shape as (outer, n, inner).
func outerInner(shape ir.Shape, axis int) (outer, n, inner int) {
	outer, inner = 1, 1
	for i, d := range shape {
		switch {
		case i < axis:
			outer *= d
		case i > axis:
			inner *= d
		}
	}
	return outer, shape[axis], inner
}

func init() {
	register("matmul", prepareMatMul)
	register("softmax", prepareSoftmax(false))
	register("log_softmax", prepareSoftmax(true))
	register("layer_norm", prepareLayerNorm)
	register("rms_norm", prepareRMSNorm)
	register("reshape", prepareCopy)
	register("transpose", prepareTranspose)
	register("broadcast", prepareBroadcast)
	register("reduce_sum", prepareReduce("sum"))
	register("reduce_mean", prepareReduce("mean"))
	register("reduce_max", prepareReduce("max"))
	register("gather", prepareGather)
	register("concat", prepareConcat)
	register("slice", prepareSlice)
	register("split", prepareSplit)
	register("constant", prepareConstant)
	register("iota", prepareIota)
	register("cross_entropy", prepareCrossEntropy)
	register("mse", prepareMSE)
}

func prepareCopy(s *device.Spec) (device.Impl, error) {
	return func(in, out []device.Tensor) error {
		copy(out[0].Data, in[0].Data)
		return nil
	}, nil
}

// prepareMatMul handles numpy matmul: batch dims broadcast, rank-1 operands promoted,
// optional transposes of the last two dims, optional bias broadcast onto the result.
func prepareMatMul(s *device.Spec) (device.Impl, error) {
	types := append([]ir.Type{}, s.In...)
	d, err := floatOnly(s, append(types, s.Out[0])...)
	if err != nil {
		return nil, err
	}
	ta, tb := s.Attrs.Bool("transpose_a", false), s.Attrs.Bool("transpose_b", false)
	a, b := s.In[0].Shape, s.In[1].Shape
	// Promote rank-1 operands to matrices.
	if len(a) == 1 {
		a = ir.Shape{1, a[0]}
	}
	if len(b) == 1 {
		b = ir.Shape{b[0], 1}
	}
	m, kk := a[len(a)-2], a[len(a)-1]
	if ta {
		m, kk = kk, m
	}
	n := b[len(b)-1]
	if tb {
		n = b[len(b)-2]
	}
	batchA, batchB := a[:len(a)-2], b[:len(b)-2]
	batch, err := ir.BroadcastShapes(batchA, batchB)
	if err != nil {
		return nil, err
	}
	nb := batch.NumElements()
	lda, ldb := a[len(a)-1], b[len(b)-1]
	// Each batch element's operand offsets under broadcasting.
	offA := batchOffsets(batchA, batch, m*kk)
	offB := batchOffsets(batchB, batch, kk*n)
	var biasLoad func([]byte) loader
	if len(s.In) == 3 {
		biasLoad, err = makeLoader(s.In[2], s.Out[0].Shape)
		if err != nil {
			return nil, err
		}
	}
	run := func(in, out []device.Tensor, gemm func(beta float64, i int)) error {
		beta := 0.0
		if biasLoad != nil {
			// Start from the bias broadcast onto the result, then accumulate the product.
			storeAll(out[0], biasLoad(in[2].Data))
			beta = 1
		}
		if canStride(offA) && canStride(offB) {
			gemm(beta, -1)
			return nil
		}
		for i := 0; i < nb; i++ {
			gemm(beta, i)
		}
		return nil
	}
	f32 := func(in, out []device.Tensor) error {
		A, B, C := in[0].F32(), in[1].F32(), out[0].F32()
		return run(in, out, func(beta float64, i int) {
			if i < 0 {
				k.BatchedGemm(nb, ta, tb, m, n, kk, 1, A, lda, stride(offA), B, ldb, stride(offB), float32(beta), C, n, m*n)
				return
			}
			k.Gemm(ta, tb, m, n, kk, 1, A[offA[i]:], lda, B[offB[i]:], ldb, float32(beta), C[i*m*n:], n)
		})
	}
	f64 := func(in, out []device.Tensor) error {
		A, B, C := in[0].F64(), in[1].F64(), out[0].F64()
		return run(in, out, func(beta float64, i int) {
			if i < 0 {
				k.BatchedGemm(nb, ta, tb, m, n, kk, 1, A, lda, stride(offA), B, ldb, stride(offB), beta, C, n, m*n)
				return
			}
			k.Gemm(ta, tb, m, n, kk, 1, A[offA[i]:], lda, B[offB[i]:], ldb, beta, C[i*m*n:], n)
		})
	}
	return byDType(d, f32, f64), nil
}

// batchOffsets returns the element offset of each batch element's matrix in an operand whose
// batch dims (src) broadcast to batch.
func batchOffsets(src, batch ir.Shape, matrix int) []int {
	n := batch.NumElements()
	out := make([]int, n)
	strides := k.BroadcastStrides(src, batch)
	coord := make([]int, len(batch))
	for i := 0; i < n; i++ {
		o := 0
		for d := range batch {
			o += coord[d] * strides[d]
		}
		out[i] = o * matrix
		for d := len(batch) - 1; d >= 0; d-- {
			coord[d]++
			if coord[d] < batch[d] {
				break
			}
			coord[d] = 0
		}
	}
	return out
}

// canStride reports whether offsets form an arithmetic sequence (one strided batched GEMM).
func canStride(off []int) bool {
	for i := 2; i < len(off); i++ {
		if off[i]-off[i-1] != off[1]-off[0] {
			return false
		}
	}
	return true
}

func stride(off []int) int {
	if len(off) < 2 {
		return 0
	}
	return off[1] - off[0]
}

// storeAll writes a whole broadcast input into t (used to seed a result with a bias).
func storeAll(t device.Tensor, l loader) {
	n := t.Type.NumElements()
	st, _ := storer(t.Type.DType)
	buf := make([]float64, chunk)
	for lo := 0; lo < n; lo += chunk {
		c := buf[:min(chunk, n-lo)]
		l(c, lo)
		st(t.Data, lo, c)
	}
}

func prepareSoftmax(logOf bool) builder {
	return func(s *device.Spec) (device.Impl, error) {
		d, err := floatOnly(s, s.In[0], s.Out[0])
		if err != nil {
			return nil, err
		}
		axis, err := ir.NormAxis(s.Attrs.Int("axis", -1), s.In[0].Rank())
		if err != nil {
			return nil, err
		}
		outer, n, inner := outerInner(s.In[0].Shape, axis)
		if logOf {
			return byDType(d,
				func(in, out []device.Tensor) error {
					k.LogSoftmax(in[0].F32(), out[0].F32(), outer, n, inner)
					return nil
				},
				func(in, out []device.Tensor) error {
					k.LogSoftmax(in[0].F64(), out[0].F64(), outer, n, inner)
					return nil
				}), nil
		}
		return byDType(d,
			func(in, out []device.Tensor) error { k.Softmax(in[0].F32(), out[0].F32(), outer, n, inner); return nil },
			func(in, out []device.Tensor) error { k.Softmax(in[0].F64(), out[0].F64(), outer, n, inner); return nil }), nil
	}
}

// normRows returns (rows, n) for a normalisation over dims axis.. of x.
func normRows(s *device.Spec) (rows, n int, err error) {
	axis, err := ir.NormAxis(s.Attrs.Int("axis", -1), s.In[0].Rank())
	if err != nil {
		return 0, 0, err
	}
	n = s.In[0].Shape[axis:].NumElements()
	return s.In[0].NumElements() / max(n, 1), n, nil
}

func prepareLayerNorm(s *device.Spec) (device.Impl, error) {
	d, err := floatOnly(s, append(append([]ir.Type{}, s.In...), s.Out[0])...)
	if err != nil {
		return nil, err
	}
	rows, n, err := normRows(s)
	if err != nil {
		return nil, err
	}
	eps := s.Attrs.Float("eps", 1e-5)
	return byDType(d,
		func(in, out []device.Tensor) error {
			var g, b []float32
			if len(in) > 1 {
				g = in[1].F32()
			}
			if len(in) > 2 {
				b = in[2].F32()
			}
			k.LayerNorm(in[0].F32(), g, b, out[0].F32(), nil, nil, rows, n, float32(eps))
			return nil
		},
		func(in, out []device.Tensor) error {
			var g, b []float64
			if len(in) > 1 {
				g = in[1].F64()
			}
			if len(in) > 2 {
				b = in[2].F64()
			}
			k.LayerNorm(in[0].F64(), g, b, out[0].F64(), nil, nil, rows, n, eps)
			return nil
		}), nil
}

func prepareRMSNorm(s *device.Spec) (device.Impl, error) {
	d, err := floatOnly(s, append(append([]ir.Type{}, s.In...), s.Out[0])...)
	if err != nil {
		return nil, err
	}
	rows, n, err := normRows(s)
	if err != nil {
		return nil, err
	}
	eps := s.Attrs.Float("eps", 1e-6)
	return byDType(d,
		func(in, out []device.Tensor) error {
			var g []float32
			if len(in) > 1 {
				g = in[1].F32()
			}
			k.RMSNorm(in[0].F32(), g, out[0].F32(), nil, rows, n, float32(eps))
			return nil
		},
		func(in, out []device.Tensor) error {
			var g []float64
			if len(in) > 1 {
				g = in[1].F64()
			}
			k.RMSNorm(in[0].F64(), g, out[0].F64(), nil, rows, n, eps)
			return nil
		}), nil
}

func prepareTranspose(s *device.Spec) (device.Impl, error) {
	perm := s.Attrs.Ints("perm")
	shape := s.In[0].Shape
	size := s.In[0].DType.Size()
	return func(in, out []device.Tensor) error {
		k.TransposeBytes(in[0].Data, size, shape, perm, out[0].Data)
		return nil
	}, nil
}

func prepareBroadcast(s *device.Spec) (device.Impl, error) {
	shape, outShape := s.In[0].Shape, s.Out[0].Shape
	size := s.In[0].DType.Size()
	return func(in, out []device.Tensor) error {
		k.ExpandBytes(in[0].Data, size, shape, out[0].Data, outShape)
		return nil
	}, nil
}

// rowReducers reduce the middle axis of an (outer, n, inner) view.
var rowReducers = map[string]struct {
	f32 func(x []float32, outer, n, inner int, y []float32)
	f64 func(x []float64, outer, n, inner int, y []float64)
}{
	"sum":  {k.ReduceSum[float32], k.ReduceSum[float64]},
	"mean": {k.ReduceMean[float32], k.ReduceMean[float64]},
	"max":  {k.ReduceMax[float32], k.ReduceMax[float64]},
}

func prepareReduce(kind string) builder {
	return func(s *device.Spec) (device.Impl, error) {
		d, err := floatOnly(s, s.In[0], s.Out[0])
		if err != nil {
			return nil, err
		}
		red, err := ir.ReduceAxes(s.Attrs, s.In[0].Rank())
		if err != nil {
			return nil, err
		}
		var axes []int
		for i, r := range red {
			if r {
				axes = append(axes, i)
			}
		}
		shape := s.In[0].Shape
		if outer, n, inner, ok := k.ReduceAxes(shape, axes); ok {
			r := rowReducers[kind]
			return byDType(d,
				func(in, out []device.Tensor) error { r.f32(in[0].F32(), outer, n, inner, out[0].F32()); return nil },
				func(in, out []device.Tensor) error { r.f64(in[0].F64(), outer, n, inner, out[0].F64()); return nil }), nil
		}
		if kind == "max" {
			// Non-adjacent axes: transpose the reduced axes to the end, then reduce rows.
			outer, n, inner, perm := reduceLayout(shape, red)
			size := s.In[0].DType.Size()
			return byDType(d,
				func(in, out []device.Tensor) error {
					k.ReduceMax(words[float32](permuted(in[0].Data, size, shape, perm)), outer, n, inner, out[0].F32())
					return nil
				},
				func(in, out []device.Tensor) error {
					k.ReduceMax(words[float64](permuted(in[0].Data, size, shape, perm)), outer, n, inner, out[0].F64())
					return nil
				}), nil
		}
		count := 1
		for _, a := range axes {
			count *= shape[a]
		}
		scale := 1.0
		if kind == "mean" {
			scale = 1 / float64(max(count, 1))
		}
		return byDType(d,
			func(in, out []device.Tensor) error {
				y := out[0].F32()
				k.ReduceSumAxes(in[0].F32(), shape, axes, y)
				if scale != 1 {
					for i := range y {
						y[i] = float32(float64(y[i]) * scale)
					}
				}
				return nil
			},
			func(in, out []device.Tensor) error {
				y := out[0].F64()
				k.ReduceSumAxes(in[0].F64(), shape, axes, y)
				if scale != 1 {
					for i := range y {
						y[i] *= scale
					}
				}
				return nil
			}), nil
	}
}

// indices64 returns integer tensor contents as int64 (converting i32 and smaller types).
func indices64(t device.Tensor, scratch []int64) []int64 {
	switch t.Type.DType {
	case ir.I64:
		return t.I64()
	case ir.I32:
		for i, v := range t.I32() {
			scratch[i] = int64(v)
		}
	case ir.I8:
		for i, v := range t.Data {
			scratch[i] = int64(int8(v))
		}
	default:
		for i, v := range t.Data {
			scratch[i] = int64(v)
		}
	}
	return scratch
}

func prepareGather(s *device.Spec) (device.Impl, error) {
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), s.In[0].Rank())
	if err != nil {
		return nil, err
	}
	shape, idxShape := s.In[0].Shape, s.In[1].Shape
	size := s.In[0].DType.Size()
	return func(in, out []device.Tensor) error {
		return k.GatherBytes(in[0].Data, size, shape, axis, indicesOf(in[1]), idxShape, out[0].Data)
	}, nil
}

func prepareConcat(s *device.Spec) (device.Impl, error) {
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), s.Out[0].Rank())
	if err != nil {
		return nil, err
	}
	shapes := make([][]int, len(s.In))
	for i, t := range s.In {
		shapes[i] = t.Shape
	}
	size := s.Out[0].DType.Size()
	return func(in, out []device.Tensor) error {
		xs := make([][]byte, len(in))
		for i, t := range in {
			xs[i] = t.Data
		}
		k.ConcatBytes(xs, size, shapes, axis, out[0].Data)
		return nil
	}, nil
}

func prepareSlice(s *device.Spec) (device.Impl, error) {
	dims, err := ir.SliceDims(s.Attrs, s.In[0].Shape)
	if err != nil {
		return nil, err
	}
	start := make([]int, len(dims))
	step := make([]int, len(dims))
	for i, d := range dims {
		start[i], step[i] = d.Start, d.Step
	}
	shape, outShape := s.In[0].Shape, s.Out[0].Shape
	size := s.In[0].DType.Size()
	return func(in, out []device.Tensor) error {
		k.SliceBytes(in[0].Data, size, shape, start, step, out[0].Data, outShape)
		return nil
	}, nil
}

func prepareSplit(s *device.Spec) (device.Impl, error) {
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), s.In[0].Rank())
	if err != nil {
		return nil, err
	}
	sizes := s.Attrs.Ints("sizes")
	shape := s.In[0].Shape
	size := s.In[0].DType.Size()
	return func(in, out []device.Tensor) error {
		ys := make([][]byte, len(out))
		for i, t := range out {
			ys[i] = t.Data
		}
		k.SplitBytes(in[0].Data, size, shape, axis, sizes, ys)
		return nil
	}, nil
}

func prepareConstant(s *device.Spec) (device.Impl, error) {
	d := s.Attrs.Get("value").(*ir.Dense)
	if d.Elided {
		return nil, fmt.Errorf("constant data was elided")
	}
	return func(in, out []device.Tensor) error {
		if d.Splat {
			for i := 0; i < len(out[0].Data); i += len(d.Data) {
				copy(out[0].Data[i:], d.Data)
			}
			return nil
		}
		copy(out[0].Data, d.Data)
		return nil
	}, nil
}

func prepareIota(s *device.Spec) (device.Impl, error) {
	t := s.Out[0]
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), t.Rank())
	if err != nil {
		return nil, err
	}
	outer, n, inner := outerInner(t.Shape, axis)
	vals := make([]float64, t.NumElements())
	for o := 0; o < outer; o++ {
		for i := 0; i < n; i++ {
			for j := 0; j < inner; j++ {
				vals[(o*n+i)*inner+j] = float64(i)
			}
		}
	}
	st, err := storer(t.DType)
	if err != nil {
		return nil, err
	}
	return func(in, out []device.Tensor) error {
		st(out[0].Data, 0, vals)
		return nil
	}, nil
}

func prepareCrossEntropy(s *device.Spec) (device.Impl, error) {
	logits := s.In[0]
	d, err := floatOnly(s, logits, s.Out[0])
	if err != nil {
		return nil, err
	}
	classes := logits.Shape[logits.Rank()-1]
	rows := logits.NumElements() / max(classes, 1)
	reduction := s.Attrs.Str("reduction", "mean")
	ignore := int64(s.Attrs.Int("ignore_index", -1<<62))
	if !s.Attrs.Has("ignore_index") {
		ignore = -1 << 62 // no label is ignored
	}
	return byDType(d,
		func(in, out []device.Tensor) error {
			loss := make([]float32, rows)
			valid, err := k.CrossEntropy(in[0].F32(), indicesOf(in[1]), rows, classes, loss, ignore)
			if err != nil {
				return err
			}
			reduceLoss(loss, valid, reduction, out[0].F32())
			return nil
		},
		func(in, out []device.Tensor) error {
			loss := make([]float64, rows)
			valid, err := k.CrossEntropy(in[0].F64(), indicesOf(in[1]), rows, classes, loss, ignore)
			if err != nil {
				return err
			}
			reduceLoss(loss, valid, reduction, out[0].F64())
			return nil
		}), nil
}

// reduceLoss applies a loss reduction, summing in row order in float64 (deterministic).
func reduceLoss[T k.Float](loss []T, valid int, reduction string, out []T) {
	switch reduction {
	case "none":
		copy(out, loss)
	default:
		var sum float64
		for _, v := range loss {
			sum += float64(v)
		}
		if reduction == "mean" {
			sum /= float64(max(valid, 1))
		}
		out[0] = T(sum)
	}
}

func prepareMSE(s *device.Spec) (device.Impl, error) {
	d, err := floatOnly(s, s.In[0], s.In[1], s.Out[0])
	if err != nil {
		return nil, err
	}
	reduction := s.Attrs.Str("reduction", "mean")
	n := s.In[0].NumElements()
	return byDType(d,
		func(in, out []device.Tensor) error {
			loss := make([]float32, n)
			k.MSE(in[0].F32(), in[1].F32(), loss)
			reduceLoss(loss, n, reduction, out[0].F32())
			return nil
		},
		func(in, out []device.Tensor) error {
			loss := make([]float64, n)
			k.MSE(in[0].F64(), in[1].F64(), loss)
			reduceLoss(loss, n, reduction, out[0].F64())
			return nil
		}), nil
}
