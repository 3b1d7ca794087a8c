package cpu

import (
	"fmt"
	"unsafe"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Helpers shared by the kernels of nn.go, grad.go and resize.go.

// floats views a tensor as []T for the float type T (f32 or f64; the builder has checked the
// dtype).
func floats[T k.Float](t device.Tensor) []T {
	var z T
	if _, ok := any(z).(float32); ok {
		return any(t.F32()).([]T)
	}
	return any(t.F64()).([]T)
}

// optFloats is floats of in[i], or nil when the optional operand i is absent.
func optFloats[T k.Float](in []device.Tensor, i int) []T {
	if i >= len(in) {
		return nil
	}
	return floats[T](in[i])
}

// words views buffer bytes as a slice of W (an unsigned integer of the element's size).
func words[W any](b []byte) []W {
	var z W
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*W)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// indicesOf returns an integer tensor's contents as int64, converting (into a fresh slice, so
// that concurrent launches never share scratch) when the dtype is narrower.
func indicesOf(t device.Tensor) []int64 {
	if t.Type.DType == ir.I64 {
		return t.I64()
	}
	return indices64(t, make([]int64, t.Type.NumElements()))
}

// scalarBytes encodes v as one element of dtype d, rounded as the elementwise engine rounds.
func scalarBytes(d ir.DType, v float64) ([]byte, error) {
	r, err := rounder(d)
	if err != nil {
		return nil, err
	}
	st, err := storer(d)
	if err != nil {
		return nil, err
	}
	vals := []float64{v}
	r(vals)
	b := alignedBytes(d.Size())
	st(b, 0, vals)
	return b, nil
}

// allFloat checks that the listed types share one dtype, f32 or f64, naming the op otherwise.
func allFloat(s *device.Spec, types ...[]ir.Type) (ir.DType, error) {
	var all []ir.Type
	for _, ts := range types {
		all = append(all, ts...)
	}
	return floatOnly(s, all...)
}

// intDType reports whether d is an integer dtype the integer kernels of this package handle.
func intDType(d ir.DType) bool {
	return d == ir.I64 || d == ir.I32 || d == ir.I8 || d == ir.U8
}

// unsupported is the error of a dtype an op does not run on.
func unsupported(s *device.Spec, what string, d ir.DType) error {
	return fmt.Errorf("%s supports %s, not %s", s.Name(), what, d)
}

// shapeProd is the element count of a dims slice.
func shapeProd(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// rowMajorStrides returns the element strides of a row-major tensor of the shape.
func rowMajorStrides(shape []int) []int {
	st := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}

// reduceLayout maps a reduction of shape over the axes marked in red onto the (outer, n,
// inner) view the reduction kernels take. When the reduced axes are not adjacent, perm is the
// permutation (kept axes in order, then the reduced ones) after which they are: the caller
// transposes x by perm and reduces with inner = 1, and the result has the kept axes in their
// original order, the layout of the op's result.
func reduceLayout(shape ir.Shape, red []bool) (outer, n, inner int, perm []int) {
	var axes []int
	for i, r := range red {
		if r {
			axes = append(axes, i)
		}
	}
	if o, nn, in, ok := k.ReduceAxes(shape, axes); ok {
		return o, nn, in, nil
	}
	outer, n = 1, 1
	for i, d := range shape {
		if !red[i] {
			perm = append(perm, i)
			outer *= d
		}
	}
	for _, a := range axes {
		perm = append(perm, a)
		n *= shape[a]
	}
	return outer, n, 1, perm
}

// permuted returns x's bytes transposed by perm (a fresh buffer), or x itself for nil perm.
func permuted(x []byte, size int, shape ir.Shape, perm []int) []byte {
	if perm == nil {
		return x
	}
	y := alignedBytes(len(x))
	k.TransposeBytes(x, size, shape, perm, y)
	return y
}

// alignedBytes allocates n bytes aligned for any element type.
func alignedBytes(n int) []byte {
	w := make([]uint64, (n+7)/8)
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}
