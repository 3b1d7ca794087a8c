package ir

import (
	"slices"
	"strconv"
)

// Shape is a static tensor shape; a scalar has rank 0.
type Shape []int

// NumElements is the product of the dims (1 for a scalar).
func (s Shape) NumElements() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether two shapes have the same dims.
func (s Shape) Equal(t Shape) bool { return slices.Equal(s, t) }

func (s Shape) String() string { return string(s.appendTo(nil)) }

func (s Shape) appendTo(b []byte) []byte {
	b = append(b, '[')
	for i, d := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(d), 10)
	}
	return append(b, ']')
}

// Type is a tensor type: element dtype and static shape. The zero Type is unknown (printed
// `?`): hand-written IR may leave result types to the shape-infer pass.
type Type struct {
	DType DType
	Shape Shape
}

// T is shorthand for constructing a Type.
func T(d DType, dims ...int) Type { return Type{DType: d, Shape: Shape(dims)} }

// Known reports whether the type has a concrete dtype.
func (t Type) Known() bool { return t.DType != Invalid }

// Rank is the number of dims.
func (t Type) Rank() int { return len(t.Shape) }

// NumElements is the number of elements.
func (t Type) NumElements() int { return t.Shape.NumElements() }

// Bytes is the storage size of a value of this type.
func (t Type) Bytes() int64 { return int64(t.Shape.NumElements()) * int64(t.DType.Size()) }

// Equal compares dtype and shape.
func (t Type) Equal(u Type) bool { return t.DType == u.DType && t.Shape.Equal(u.Shape) }

func (t Type) String() string { return string(t.appendTo(nil)) }

func (t Type) appendTo(b []byte) []byte {
	if !t.Known() {
		return append(b, '?')
	}
	b = append(b, t.DType.String()...)
	return t.Shape.appendTo(b)
}
