package ir

import (
	"fmt"
	"slices"
)

// Shape inference for the fused gradient ops of ops_grad.go. Like every inference function it
// returns an error, never panics, on any operand types and attributes that passed the table's
// count and kind checks.

// sameFloat checks that every operand has the first one's floating-point type.
func sameFloat(in []Type) error {
	if !in[0].DType.IsFloat() {
		return fmt.Errorf("operand must be floating point, got %s", in[0])
	}
	for _, t := range in[1:] {
		if !t.Equal(in[0]) {
			return fmt.Errorf("operand types differ: %s and %s", in[0], t)
		}
	}
	return nil
}

func inferGradElementwise(in []Type, _ Attrs) ([]Type, error) {
	if err := sameFloat(in); err != nil {
		return nil, err
	}
	return one(in[0])
}

func inferAxisGrad(in []Type, at Attrs) ([]Type, error) {
	if err := sameFloat(in); err != nil {
		return nil, err
	}
	if _, err := NormAxis(at.Int("axis", -1), in[0].Rank()); err != nil {
		return nil, err
	}
	return one(in[0])
}

// inferNormGradInput checks (x, dy [, scale]) of layer_norm_grad_input and rms_norm_grad_input.
func inferNormGradInput(in []Type, at Attrs) ([]Type, error) {
	if err := sameFloat(in[:2]); err != nil {
		return nil, err
	}
	x := in[0]
	axis, err := NormAxis(at.Int("axis", -1), x.Rank())
	if err != nil {
		return nil, err
	}
	if len(in) == 3 && (in[2].DType != x.DType || !in[2].Shape.Equal(x.Shape[axis:])) {
		return nil, fmt.Errorf("scale %s must be %s%s (the normalised dims)", in[2], x.DType, x.Shape[axis:])
	}
	return one(x)
}

// inferNormGradParams checks (x, dy) and returns n results of the normalised dims' shape.
func inferNormGradParams(n int) InferFunc {
	return func(in []Type, at Attrs) ([]Type, error) {
		if err := sameFloat(in); err != nil {
			return nil, err
		}
		axis, err := NormAxis(at.Int("axis", -1), in[0].Rank())
		if err != nil {
			return nil, err
		}
		out := make([]Type, n)
		for i := range out {
			out[i] = Type{in[0].DType, slices.Clone(in[0].Shape[axis:])}
		}
		return out, nil
	}
}

// lossGrad checks that dloss has the type the loss op would produce from the first two operands.
func lossGrad(in []Type, at Attrs, infer InferFunc) ([]Type, error) {
	want, err := infer(in[:2], at)
	if err != nil {
		return nil, err
	}
	if !in[2].Equal(want[0]) {
		return nil, fmt.Errorf("dloss must be %s (the loss's type), got %s", want[0], in[2])
	}
	return one(in[0])
}

func inferCrossEntropyGrad(in []Type, at Attrs) ([]Type, error) {
	return lossGrad(in, at, inferCrossEntropy)
}

func inferMSEGrad(in []Type, at Attrs) ([]Type, error) { return lossGrad(in, at, inferMSE) }

func inferGatherGrad(in []Type, at Attrs) ([]Type, error) {
	idx, dy := in[0], in[1]
	if !idx.DType.IsInt() {
		return nil, fmt.Errorf("gather_grad indices must be integers, got %s", idx)
	}
	if !dy.DType.IsFloat() {
		return nil, fmt.Errorf("gather_grad dy must be floating point, got %s", dy)
	}
	rank := dy.Rank() - idx.Rank() + 1 // the rank of gather's data
	if rank < 1 {
		return nil, fmt.Errorf("dy %s has too few dims for indices %s", dy, idx)
	}
	axis := at.Int("axis", 0)
	if axis < 0 || axis >= rank {
		return nil, fmt.Errorf("axis %d out of range [0, %d)", axis, rank)
	}
	dim := at.Int("dim", 0)
	if dim < 0 {
		return nil, fmt.Errorf("negative dim %d", dim)
	}
	if !dy.Shape[axis : axis+idx.Rank()].Equal(idx.Shape) {
		return nil, fmt.Errorf("dy %s does not hold indices %s at axis %d", dy, idx, axis)
	}
	s := slices.Concat(dy.Shape[:axis], Shape{dim}, dy.Shape[axis+idx.Rank():])
	return one(Type{dy.DType, s})
}

func inferReduceMaxGrad(in []Type, at Attrs) ([]Type, error) {
	x := in[0]
	if !x.DType.IsFloat() {
		return nil, fmt.Errorf("operand must be floating point, got %s", x)
	}
	want, err := inferReduce(in[:1], at)
	if err != nil {
		return nil, err
	}
	for _, t := range in[1:] {
		if !t.Equal(want[0]) {
			return nil, fmt.Errorf("y and dy must be %s (the reduced type), got %s", want[0], t)
		}
	}
	return one(x)
}

func inferSliceGrad(in []Type, at Attrs) ([]Type, error) {
	dy := in[0]
	if !dy.DType.IsFloat() {
		return nil, fmt.Errorf("operand must be floating point, got %s", dy)
	}
	shape := Shape(at.Ints("shape"))
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("bad shape %s", shape)
		}
	}
	dims, err := SliceDims(at, shape)
	if err != nil {
		return nil, err
	}
	got := make(Shape, len(dims))
	for i, d := range dims {
		got[i] = d.Size
	}
	if !got.Equal(dy.Shape) {
		return nil, fmt.Errorf("the slice of %s is %s, but dy is %s", shape, got, dy)
	}
	return one(Type{dy.DType, slices.Clone(shape)})
}

// Inference of the nn gradient ops: each checks its operands against the forward op's own
// inference (the shape the forward would produce from the recorded operand shape), so the
// two can never disagree about the geometry.

// floatLike checks that t is floating point and, when like is given, of like's dtype.
func floatLike(what string, t Type, like ...Type) error {
	if !t.DType.IsFloat() {
		return fmt.Errorf("%s must be floating point, got %s", what, t)
	}
	for _, l := range like {
		if l.DType != t.DType {
			return fmt.Errorf("%s %s must have dtype %s", what, t, l.DType)
		}
	}
	return nil
}

// shapeAttr reads an ints attribute holding a tensor shape and checks its size.
func shapeAttr(at Attrs, name string) (Shape, error) {
	s := Shape(slices.Clone(at.Ints(name)))
	if err := CheckShapeSize(s); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return s, nil
}

// matchForward checks that the forward op's inference gives want for the operand types in.
func matchForward(what string, infer InferFunc, in []Type, at Attrs, got Type) error {
	want, err := infer(in, at)
	if err != nil {
		return err
	}
	if !want[0].Equal(got) {
		return fmt.Errorf("%s must be %s (the forward result for %s), got %s", what, want[0], in[0], got)
	}
	return nil
}

func inferConvGradFilter(in []Type, at Attrs) ([]Type, error) {
	x, dy := in[0], in[1]
	if err := floatLike("conv_grad_filter x", x); err != nil {
		return nil, err
	}
	fs, err := shapeAttr(at, "filter_shape")
	if err != nil {
		return nil, err
	}
	w := Type{x.DType, fs}
	if err := matchForward("dy", inferConv, []Type{x, w}, at, dy); err != nil {
		return nil, err
	}
	return one(w)
}

func inferMaxPoolGrad(in []Type, at Attrs) ([]Type, error) {
	x, dy := in[0], in[1]
	if err := floatLike("max_pool_grad x", x); err != nil {
		return nil, err
	}
	if err := matchForward("dy", inferPool, in[:1], at, dy); err != nil {
		return nil, err
	}
	return one(x)
}

func inferAvgPoolGrad(in []Type, at Attrs) ([]Type, error) {
	dy := in[0]
	if err := floatLike("avg_pool_grad dy", dy); err != nil {
		return nil, err
	}
	s, err := shapeAttr(at, "input_shape")
	if err != nil {
		return nil, err
	}
	x := Type{dy.DType, s}
	if err := matchForward("dy", inferPool, []Type{x}, at, dy); err != nil {
		return nil, err
	}
	return one(x)
}

func inferBatchNormGradInput(in []Type, _ Attrs) ([]Type, error) {
	if err := channelParams(in, "batch_norm_grad_input"); err != nil {
		return nil, err
	}
	return one(in[0])
}

// channelGradParams checks (x, dy, per-channel operands…) and returns dscale, dbias of [C].
func channelGradParams(in []Type, what string, minRank int) ([]Type, error) {
	x := in[0]
	if !in[1].Equal(x) {
		return nil, fmt.Errorf("%s dy %s must have x's type %s", what, in[1], x)
	}
	if err := channelParams(append([]Type{x}, in[2:]...), what); err != nil {
		return nil, err
	}
	if x.Rank() < minRank {
		return nil, fmt.Errorf("%s operand needs a spatial dim, got %s", what, x)
	}
	c := Type{x.DType, Shape{x.Shape[1]}}
	return []Type{c, c}, nil
}

func inferBatchNormGradParams(in []Type, _ Attrs) ([]Type, error) {
	return channelGradParams(in, "batch_norm_grad_params", 2)
}

func inferInstanceNormGradInput(in []Type, _ Attrs) ([]Type, error) {
	if _, err := channelGradParams(in, "instance_norm_grad_input", 3); err != nil {
		return nil, err
	}
	return one(in[0])
}

func inferInstanceNormGradParams(in []Type, _ Attrs) ([]Type, error) {
	return channelGradParams(in, "instance_norm_grad_params", 3)
}

func inferLRNGrad(in []Type, at Attrs) ([]Type, error) {
	if err := sameFloat(in); err != nil {
		return nil, err
	}
	return inferLRN(in[:1], at)
}

func inferPadGrad(in []Type, at Attrs) ([]Type, error) {
	dy := in[0]
	if err := floatLike("pad_grad dy", dy); err != nil {
		return nil, err
	}
	r := dy.Rank()
	pads := at.Ints("pads")
	if len(pads) != 2*r {
		return nil, fmt.Errorf("pads %v needs %d entries for %s", pads, 2*r, dy)
	}
	const lim = 1 << 40
	s := make(Shape, r)
	for i, d := range dy.Shape {
		b, e := pads[i], pads[r+i]
		if b > lim || e > lim || b < -lim || e < -lim {
			return nil, fmt.Errorf("pads %v out of range", pads)
		}
		if s[i] = d - b - e; s[i] < 0 {
			return nil, fmt.Errorf("pads %v exceed dim %d of %s", pads, i, dy)
		}
	}
	x := Type{dy.DType, s}
	if err := CheckShapeSize(s); err != nil {
		return nil, err
	}
	if err := matchForward("dy", inferPad, []Type{x}, at, dy); err != nil {
		return nil, err
	}
	return one(x)
}

func inferResizeGrad(in []Type, at Attrs) ([]Type, error) {
	dy := in[0]
	if err := floatLike("resize_grad dy", dy); err != nil {
		return nil, err
	}
	s, err := shapeAttr(at, "input_shape")
	if err != nil {
		return nil, err
	}
	x := Type{dy.DType, s}
	if err := matchForward("dy", inferResize, []Type{x}, at, dy); err != nil {
		return nil, err
	}
	return one(x)
}

func inferGatherElementsGrad(in []Type, at Attrs) ([]Type, error) {
	idx, dy := in[0], in[1]
	if !idx.DType.IsInt() {
		return nil, fmt.Errorf("gather_elements_grad indices must be integers, got %s", idx)
	}
	if err := floatLike("gather_elements_grad dy", dy); err != nil {
		return nil, err
	}
	if !dy.Shape.Equal(idx.Shape) {
		return nil, fmt.Errorf("dy %s must have the indices' shape %s", dy, idx.Shape)
	}
	s, err := shapeAttr(at, "shape")
	if err != nil {
		return nil, err
	}
	if len(s) != idx.Rank() || len(s) == 0 {
		return nil, fmt.Errorf("shape %s must have the indices' rank %d >= 1", s, idx.Rank())
	}
	axis := at.Int("axis", 0)
	if axis < 0 || axis >= len(s) {
		return nil, fmt.Errorf("axis %d out of range [0, %d)", axis, len(s))
	}
	for d := range s {
		if d != axis && idx.Shape[d] > s[d] {
			return nil, fmt.Errorf("indices %s exceed the data shape %s along dim %d", idx, s, d)
		}
	}
	if s[axis] == 0 && idx.NumElements() > 0 {
		return nil, fmt.Errorf("gather_elements_grad into the empty dim %d of %s", axis, s)
	}
	return one(Type{dy.DType, s})
}

func inferReduceProdGrad(in []Type, at Attrs) ([]Type, error) {
	x, dy := in[0], in[1]
	if err := floatLike("reduce_prod_grad x", x); err != nil {
		return nil, err
	}
	if err := matchForward("dy", inferReduce, in[:1], at, dy); err != nil {
		return nil, err
	}
	return one(x)
}
