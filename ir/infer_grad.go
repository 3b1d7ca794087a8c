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
