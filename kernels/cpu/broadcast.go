package cpu

import (
	"fmt"
	"math"
)

// Numpy-style broadcasting. Shapes align at the right; a dimension broadcasts when it is 1 (or
// missing). The kernels collapse the iteration space first: dimensions of size 1 are dropped and
// neighbouring dimensions that are contiguous for every operand are merged, so same-shape,
// scalar and row-vector cases all become a few long rows whose operands each have stride 1
// (a vector) or 0 (a broadcast scalar). Outputs are split across goroutines by rows, or by fixed
// chunks of one long row; each output element is computed independently, so results never depend
// on the split.

const binaryGrain = 16384 // elements per goroutine

// BroadcastShape returns the broadcast of shapes a and b, or an error naming the clashing
// dimension.
func BroadcastShape(a, b []int) ([]int, error) {
	return BroadcastShapes(a, b)
}

// BroadcastShapes returns the broadcast of any number of shapes.
func BroadcastShapes(shapes ...[]int) ([]int, error) {
	rank := 0
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	out := make([]int, rank)
	for i := range out {
		out[i] = 1
	}
	for k, s := range shapes {
		for i, d := range s {
			j := rank - len(s) + i
			switch {
			case d < 0:
				return nil, fmt.Errorf("broadcast: negative dimension %d in shape %v", d, s)
			case d == out[j] || d == 1:
			case out[j] == 1:
				out[j] = d
			default:
				return nil, fmt.Errorf("broadcast: shape %v (operand %d) dimension %d is %d, incompatible with %d",
					s, k, i, d, out[j])
			}
		}
	}
	return out, nil
}

// BroadcastStrides returns, for each dimension of outShape, the element stride of a row-major
// tensor of the given shape when broadcast to outShape: its ordinary stride, or 0 where the
// dimension is broadcast (size 1 or missing). It panics if shape does not broadcast to outShape.
func BroadcastStrides(shape, outShape []int) []int {
	if len(shape) > len(outShape) {
		panic(fmt.Sprintf("cpu.BroadcastStrides: shape %v has higher rank than %v", shape, outShape))
	}
	st := make([]int, len(outShape))
	s := 1
	off := len(outShape) - len(shape)
	for i := len(shape) - 1; i >= 0; i-- {
		d, o := shape[i], outShape[off+i]
		switch {
		case d == o && d != 1:
			st[off+i] = s
		case d == 1:
			// broadcast (or size-1 both): stride 0
		default:
			panic(fmt.Sprintf("cpu.BroadcastStrides: shape %v does not broadcast to %v", shape, outShape))
		}
		s *= d
	}
	return st
}

// collapse drops the size-1 dimensions of outShape and merges neighbours that every operand
// walks contiguously (stride[d−1] == stride[d]·dim[d], which also covers broadcast runs). The
// result always has at least one dimension.
func bcastCollapse(outShape []int, strides [][]int) ([]int, [][]int) {
	dims := make([]int, 0, len(outShape))
	st := make([][]int, len(strides))
	for d, n := range outShape {
		if n == 1 {
			continue
		}
		if k := len(dims) - 1; k >= 0 {
			merge := true
			for op := range strides {
				if st[op][k] != strides[op][d]*n {
					merge = false
					break
				}
			}
			if merge {
				dims[k] *= n
				for op := range strides {
					st[op][k] = strides[op][d]
				}
				continue
			}
		}
		dims = append(dims, n)
		for op := range strides {
			st[op] = append(st[op], strides[op][d])
		}
	}
	if len(dims) == 0 {
		dims = append(dims, 1)
		for op := range st {
			st[op] = append(st[op], 0)
		}
	}
	return dims, st
}

// broadcastRows runs row(offsets, n) over the collapsed iteration space of outShape, where
// offsets[k] is operand k's element offset (the output is operand 0) and every operand's
// stride within the row is strides[k] (0 or 1, returned by setup). Rows longer than
// binaryGrain are cut into fixed chunks.
func broadcastRows(name string, outShape []int, shapes [][]int, lens []int,
	row func(off []int, inner []int, n int)) {
	if len(lens) != len(shapes) {
		panic("cpu." + name + ": internal: operand count")
	}
	for k, s := range shapes {
		if lens[k] != elemCount(s) {
			panic(fmt.Sprintf("cpu.%s: operand %d has %d elements, shape %v", name, k, lens[k], s))
		}
	}
	total := elemCount(outShape)
	if total == 0 {
		return
	}
	strides := make([][]int, len(shapes))
	for k, s := range shapes {
		strides[k] = BroadcastStrides(s, outShape)
	}
	dims, st := bcastCollapse(outShape, strides)
	r := len(dims) - 1
	L := dims[r]
	inner := make([]int, len(st))
	for k := range st {
		inner[k] = st[k][r]
	}
	odims := dims[:r]
	ost := make([][]int, len(st))
	for k := range st {
		ost[k] = st[k][:r]
	}
	rows := elemCount(odims)
	if L > 2*binaryGrain {
		// Few long rows: cut each into chunks.
		chunk := binaryGrain
		nch := (L + chunk - 1) / chunk
		Parallel(rows*nch, 1, func(lo, hi int) {
			off := make([]int, len(st))
			for u := lo; u < hi; u++ {
				rw, c := u/nch, u%nch
				j0 := c * chunk
				for k := range st {
					off[k] = linOffset(rw, odims, ost[k]) + j0*inner[k]
				}
				row(off, inner, min(chunk, L-j0))
			}
		})
		return
	}
	Parallel(rows, max(1, binaryGrain/L), func(lo, hi int) {
		off := make([]int, len(st))
		base := make([]int, len(st))
		idx := make([]int, len(odims))
		rem := lo
		for d := len(odims) - 1; d >= 0; d-- {
			idx[d] = rem % odims[d]
			rem /= odims[d]
		}
		for k := range st {
			base[k] = linOffset(lo, odims, ost[k])
		}
		for rw := lo; rw < hi; rw++ {
			copy(off, base)
			row(off, inner, L)
			// advance the multi-index over odims
			for d := len(odims) - 1; d >= 0; d-- {
				idx[d]++
				for k := range st {
					base[k] += ost[k][d]
				}
				if idx[d] < odims[d] {
					break
				}
				for k := range st {
					base[k] -= idx[d] * ost[k][d]
				}
				idx[d] = 0
			}
		}
	})
}

// BinaryTo sets out = op(a, b) with numpy broadcasting of aShape and bShape to outShape, for
// operands and result of different element types (comparisons, integer powers, …). out must
// not overlap an operand that is broadcast.
func BinaryTo[A, B, O any](op func(a A, b B) O, a []A, aShape []int, b []B, bShape []int, out []O, outShape []int) {
	broadcastRows("Binary", outShape, [][]int{outShape, aShape, bShape}, []int{len(out), len(a), len(b)},
		func(off, st []int, n int) {
			o := out[off[0] : off[0]+n]
			switch {
			case st[1] == 1 && st[2] == 1:
				as, bs := a[off[1]:off[1]+n], b[off[2]:off[2]+n]
				for i := range o {
					o[i] = op(as[i], bs[i])
				}
			case st[1] == 1:
				as, bv := a[off[1]:off[1]+n], b[off[2]]
				for i := range o {
					o[i] = op(as[i], bv)
				}
			case st[2] == 1:
				av, bs := a[off[1]], b[off[2]:off[2]+n]
				for i := range o {
					o[i] = op(av, bs[i])
				}
			default:
				v := op(a[off[1]], b[off[2]])
				for i := range o {
					o[i] = v
				}
			}
		})
}

// Binary sets out = op(a, b) with numpy broadcasting (see BinaryTo). For float arithmetic
// Arith is faster: it avoids the call through op per element.
func Binary[T any](op func(a, b T) T, a []T, aShape []int, b []T, bShape []int, out []T, outShape []int) {
	BinaryTo(op, a, aShape, b, bShape, out, outShape)
}

// Where sets out = cond ? a : b with three-way broadcasting (ONNX Where).
func Where[T any](cond []bool, condShape []int, a []T, aShape []int, b []T, bShape []int, out []T, outShape []int) {
	broadcastRows("Where", outShape, [][]int{outShape, condShape, aShape, bShape}, []int{len(out), len(cond), len(a), len(b)},
		func(off, st []int, n int) {
			o := out[off[0] : off[0]+n]
			ci, ai, bi := off[1], off[2], off[3]
			cs, as, bs := st[1], st[2], st[3]
			for i := range o {
				if cond[ci] {
					o[i] = a[ai]
				} else {
					o[i] = b[bi]
				}
				ci += cs
				ai += as
				bi += bs
			}
		})
}

// Ternary sets out = op(a, b, c) with three-way broadcasting.
func Ternary[A, B, C, O any](op func(A, B, C) O, a []A, aShape []int, b []B, bShape []int, c []C, cShape []int, out []O, outShape []int) {
	broadcastRows("Ternary", outShape, [][]int{outShape, aShape, bShape, cShape}, []int{len(out), len(a), len(b), len(c)},
		func(off, st []int, n int) {
			o := out[off[0] : off[0]+n]
			ai, bi, ci := off[1], off[2], off[3]
			as, bs, cs := st[1], st[2], st[3]
			for i := range o {
				o[i] = op(a[ai], b[bi], c[ci])
				ai += as
				bi += bs
				ci += cs
			}
		})
}

// Expand copies x (of shape) into out broadcast to outShape (ONNX Expand / numpy broadcast_to
// materialised). Works for any element type.
func Expand[T any](x []T, shape []int, out []T, outShape []int) {
	broadcastRows("Expand", outShape, [][]int{outShape, shape}, []int{len(out), len(x)},
		func(off, st []int, n int) {
			o := out[off[0] : off[0]+n]
			if st[1] == 1 {
				copy(o, x[off[1]:off[1]+n])
				return
			}
			v := x[off[1]]
			for i := range o {
				o[i] = v
			}
		})
}

// ArithOp selects an arithmetic operation of Arith.
type ArithOp int

// The Arith operations. Max and Min propagate NaN (numpy maximum/minimum).
const (
	OpAdd ArithOp = iota
	OpSub
	OpMul
	OpDiv
	OpMax
	OpMin
	OpPow
)

func (op ArithOp) String() string {
	switch op {
	case OpAdd:
		return "add"
	case OpSub:
		return "sub"
	case OpMul:
		return "mul"
	case OpDiv:
		return "div"
	case OpMax:
		return "max"
	case OpMin:
		return "min"
	case OpPow:
		return "pow"
	}
	return fmt.Sprintf("ArithOp(%d)", int(op))
}

func fmaxNaN[T Float](a, b T) T {
	if a > b || a != a {
		return a
	}
	return b
}

func fminNaN[T Float](a, b T) T {
	if a < b || a != a {
		return a
	}
	return b
}

// powT is a**b; b == 2 is a·a exactly (math.Pow may differ by an ulp).
func powT[T Float](a, b T) T {
	if b == 2 {
		return a * a
	}
	return T(math.Pow(float64(a), float64(b)))
}

// Arith sets out = a op b with broadcasting, using a specialised loop per operation and
// operand kind (vector/vector, vector/scalar, scalar/vector).
func Arith[T Float](op ArithOp, a []T, aShape []int, b []T, bShape []int, out []T, outShape []int) {
	if op < OpAdd || op > OpPow {
		panic(fmt.Sprintf("cpu.Arith: unknown op %d", int(op)))
	}
	broadcastRows("Arith", outShape, [][]int{outShape, aShape, bShape}, []int{len(out), len(a), len(b)},
		func(off, st []int, n int) {
			o := out[off[0] : off[0]+n]
			switch {
			case st[1] == 1 && st[2] == 1:
				arithVV(op, a[off[1]:off[1]+n], b[off[2]:off[2]+n], o)
			case st[1] == 1:
				arithVS(op, a[off[1]:off[1]+n], b[off[2]], o)
			case st[2] == 1:
				arithSV(op, a[off[1]], b[off[2]:off[2]+n], o)
			default:
				arithVS(op, a[off[1]:off[1]+1], b[off[2]], o[:1])
				for i := range o {
					o[i] = o[0]
				}
			}
		})
}

// ArithVV sets o[i] = a[i] op b[i] (a and b at least as long as o; o may alias either).
func ArithVV[T Float](op ArithOp, a, b, o []T) { arithVV(op, a, b, o) }

// The row loops. float32 add, sub, mul and div run the AVX assembly (arith_amd64.s) up to the
// last multiple of 8 elements and these loops on the rest: the same IEEE operations, so the
// same bits.

func arithVV[T Float](op ArithOp, a, b, o []T) {
	a, b = a[:len(o)], b[:len(o)]
	if isFloat32Type[T]() {
		i := arithVVVec32(op, f32s(a), f32s(b), f32s(o))
		a, b, o = a[i:], b[i:], o[i:]
	}
	switch op {
	case OpAdd:
		for i := range o {
			o[i] = a[i] + b[i]
		}
	case OpSub:
		for i := range o {
			o[i] = a[i] - b[i]
		}
	case OpMul:
		for i := range o {
			o[i] = a[i] * b[i]
		}
	case OpDiv:
		for i := range o {
			o[i] = a[i] / b[i]
		}
	case OpMax:
		for i := range o {
			o[i] = fmaxNaN(a[i], b[i])
		}
	case OpMin:
		for i := range o {
			o[i] = fminNaN(a[i], b[i])
		}
	case OpPow:
		for i := range o {
			o[i] = powT(a[i], b[i])
		}
	}
}

func arithVS[T Float](op ArithOp, a []T, b T, o []T) {
	a = a[:len(o)]
	if isFloat32Type[T]() {
		i := arithVSVec32(op, f32s(a), float32(b), f32s(o))
		a, o = a[i:], o[i:]
	}
	switch op {
	case OpAdd:
		for i := range o {
			o[i] = a[i] + b
		}
	case OpSub:
		for i := range o {
			o[i] = a[i] - b
		}
	case OpMul:
		for i := range o {
			o[i] = a[i] * b
		}
	case OpDiv:
		for i := range o {
			o[i] = a[i] / b
		}
	case OpMax:
		for i := range o {
			o[i] = fmaxNaN(a[i], b)
		}
	case OpMin:
		for i := range o {
			o[i] = fminNaN(a[i], b)
		}
	case OpPow:
		for i := range o {
			o[i] = powT(a[i], b)
		}
	}
}

func arithSV[T Float](op ArithOp, a T, b, o []T) {
	b = b[:len(o)]
	if isFloat32Type[T]() {
		i := arithSVVec32(op, float32(a), f32s(b), f32s(o))
		b, o = b[i:], o[i:]
	}
	switch op {
	case OpAdd:
		for i := range o {
			o[i] = a + b[i]
		}
	case OpSub:
		for i := range o {
			o[i] = a - b[i]
		}
	case OpMul:
		for i := range o {
			o[i] = a * b[i]
		}
	case OpDiv:
		for i := range o {
			o[i] = a / b[i]
		}
	case OpMax:
		for i := range o {
			o[i] = fmaxNaN(a, b[i])
		}
	case OpMin:
		for i := range o {
			o[i] = fminNaN(a, b[i])
		}
	case OpPow:
		for i := range o {
			o[i] = powT(a, b[i])
		}
	}
}
