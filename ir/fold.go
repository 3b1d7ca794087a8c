package ir

import (
	"fmt"
	"math"
)

// MaxFoldElements bounds the size of a folded constant: folding must shrink or keep the IR
// small, never materialise large tensors at compile time.
const MaxFoldElements = 1 << 16

// Fold evaluates op with constant operands at compile time. It returns (nil, nil) when the op
// is not foldable (not pure, unsupported, or too large) and an error when evaluation itself
// fails (an out-of-range gather index). Floating-point math runs in float64 and is rounded to
// the result dtype once per op, which for + − × ÷ and sqrt equals IEEE arithmetic in that dtype.
// Both the canonicalize pass and the ONNX importer's shape folding use it.
func Fold(op *Op, in []*Dense) ([]*Dense, error) {
	for _, d := range in {
		if d == nil || d.Elided {
			return nil, nil
		}
	}
	for _, r := range op.Results {
		if !r.Type.Known() || r.Type.NumElements() > MaxFoldElements {
			return nil, nil
		}
	}
	if !op.Def.Has(Pure) || op.Def.Has(ConstantLike) {
		return nil, nil
	}
	out := make([]*Dense, len(op.Results))
	for i, r := range op.Results {
		out[i] = &Dense{Type: r.Type, Data: make([]byte, r.Type.Bytes())}
	}
	ok, err := foldInto(op, in, out)
	if !ok || err != nil {
		return nil, err
	}
	return out, nil
}

var unaryF = map[string]func(float64) float64{
	"neg": func(x float64) float64 { return -x }, "abs": math.Abs,
	"relu": func(x float64) float64 {
		if x > 0 {
			return x
		}
		return 0
	},
	"exp": math.Exp, "log": math.Log, "sin": math.Sin, "cos": math.Cos, "sqrt": math.Sqrt, "tanh": math.Tanh, "erf": math.Erf,
	"rsqrt":   func(x float64) float64 { return 1 / math.Sqrt(x) },
	"sigmoid": func(x float64) float64 { return 1 / (1 + math.Exp(-x)) },
	"silu":    func(x float64) float64 { return x / (1 + math.Exp(-x)) },
}

var binaryF = map[string]func(a, b float64) float64{
	"add": func(a, b float64) float64 { return a + b }, "sub": func(a, b float64) float64 { return a - b },
	"mul": func(a, b float64) float64 { return a * b }, "div": func(a, b float64) float64 { return a / b },
	"pow": math.Pow, "max": math.Max, "min": math.Min,
}

var binaryI = map[string]func(a, b int64) (int64, bool){
	"add": func(a, b int64) (int64, bool) { return a + b, true },
	"sub": func(a, b int64) (int64, bool) { return a - b, true },
	"mul": func(a, b int64) (int64, bool) { return a * b, true },
	"div": func(a, b int64) (int64, bool) { return divI(a, b) },
	"max": func(a, b int64) (int64, bool) { return max(a, b), true },
	"min": func(a, b int64) (int64, bool) { return min(a, b), true },
	"pow": func(a, b int64) (int64, bool) {
		if b < 0 || b > 63 {
			return 0, false
		}
		r := int64(1)
		for i := int64(0); i < b; i++ {
			r *= a
		}
		return r, true
	},
}

func divI(a, b int64) (int64, bool) {
	if b == 0 || (a == math.MinInt64 && b == -1) {
		return 0, false
	}
	return a / b, true
}

var compareF = map[string]func(a, b float64) bool{
	"equal": func(a, b float64) bool { return a == b }, "less": func(a, b float64) bool { return a < b },
	"greater": func(a, b float64) bool { return a > b },
	"and":     func(a, b float64) bool { return a != 0 && b != 0 }, "or": func(a, b float64) bool { return a != 0 || b != 0 },
}

func geluF(tanhApprox bool) func(float64) float64 {
	if tanhApprox {
		return func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}
	}
	return func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }
}

// strides returns row-major strides for shape, with 0 for dims broadcast to out.
func broadcastStrides(shape, out Shape) []int {
	st := make([]int, len(out))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		j := len(out) - len(shape) + i
		if shape[i] != 1 {
			st[j] = s
		}
		s *= shape[i]
	}
	return st
}

// eachIndex calls f with each output linear index and the matching linear index into every
// operand, under numpy broadcasting.
func eachIndex(out Shape, operands []Shape, f func(o int, idx []int)) {
	strides := make([][]int, len(operands))
	for i, s := range operands {
		strides[i] = broadcastStrides(s, out)
	}
	n := out.NumElements()
	coord := make([]int, len(out))
	idx := make([]int, len(operands))
	for o := 0; o < n; o++ {
		f(o, idx)
		// Advance the coordinate odometer and the operand offsets with it.
		for d := len(out) - 1; d >= 0; d-- {
			coord[d]++
			for k := range idx {
				idx[k] += strides[k][d]
			}
			if coord[d] < out[d] {
				break
			}
			for k := range idx {
				idx[k] -= strides[k][d] * coord[d]
			}
			coord[d] = 0
		}
	}
}

func shapesOf(in []*Dense) []Shape {
	s := make([]Shape, len(in))
	for i, d := range in {
		s[i] = d.Type.Shape
	}
	return s
}

func foldInto(op *Op, in []*Dense, out []*Dense) (bool, error) {
	name := op.Def.Name
	o := out[0]
	isF := o.Type.DType.IsFloat()
	switch {
	case unaryF[name] != nil || name == "gelu":
		f := unaryF[name]
		if name == "gelu" {
			f = geluF(op.Attrs.Str("approximate", "none") == "tanh")
		}
		for i := 0; i < o.Len(); i++ {
			if isF {
				o.setF64(i, f(in[0].F64(i)))
			} else {
				o.setI64(i, int64(f(float64(in[0].I64(i)))))
			}
		}
		return true, nil
	case name == "iota":
		axis, _ := NormAxis(op.Attrs.Int("axis", 0), o.Type.Rank())
		forEachCoord(o.Type.Shape, func(k int, c []int) {
			if isF {
				o.setF64(k, float64(c[axis]))
			} else {
				o.setI64(k, int64(c[axis]))
			}
		})
		return true, nil
	case name == "not":
		for i := 0; i < o.Len(); i++ {
			o.setI64(i, 1-in[0].I64(i))
		}
		return true, nil
	case binaryF[name] != nil:
		bad := false
		eachIndex(o.Type.Shape, shapesOf(in), func(k int, idx []int) {
			if isF {
				o.setF64(k, binaryF[name](in[0].F64(idx[0]), in[1].F64(idx[1])))
				return
			}
			v, ok := binaryI[name](in[0].I64(idx[0]), in[1].I64(idx[1]))
			bad = bad || !ok
			o.setI64(k, v)
		})
		return !bad, nil
	case compareF[name] != nil:
		intCmp := !in[0].Type.DType.IsFloat()
		eachIndex(o.Type.Shape, shapesOf(in), func(k int, idx []int) {
			var r bool
			if intCmp && name != "and" && name != "or" {
				a, b := in[0].I64(idx[0]), in[1].I64(idx[1])
				r = name == "equal" && a == b || name == "less" && a < b || name == "greater" && a > b
			} else {
				r = compareF[name](in[0].F64(idx[0]), in[1].F64(idx[1]))
			}
			o.setI64(k, b2i(r))
		})
		return true, nil
	case name == "where":
		eachIndex(o.Type.Shape, shapesOf(in), func(k int, idx []int) {
			src, j := in[2], idx[2]
			if in[0].I64(idx[0]) != 0 {
				src, j = in[1], idx[1]
			}
			copyElem(o, k, src, j)
		})
		return true, nil
	case name == "cast":
		for i := 0; i < o.Len(); i++ {
			switch {
			case o.Type.DType == Bool:
				o.setI64(i, b2i(in[0].F64(i) != 0))
			case isF:
				o.setF64(i, in[0].F64(i))
			case in[0].Type.DType.IsFloat():
				f := in[0].F64(i)
				if f != f || math.IsInf(f, 0) {
					return false, nil
				}
				o.setI64(i, int64(f))
			default:
				o.setI64(i, in[0].I64(i))
			}
		}
		return true, nil
	case name == "reshape":
		for i := 0; i < o.Len(); i++ {
			copyElem(o, i, in[0], i)
		}
		return true, nil
	case name == "broadcast":
		eachIndex(o.Type.Shape, shapesOf(in), func(k int, idx []int) { copyElem(o, k, in[0], idx[0]) })
		return true, nil
	case name == "transpose":
		perm := op.Attrs.Ints("perm")
		src := in[0].Type.Shape
		srcStrides := broadcastStrides(src, src)
		permStrides := make(Shape, len(perm))
		for i, p := range perm {
			permStrides[i] = srcStrides[p]
		}
		forEachCoord(o.Type.Shape, func(k int, c []int) {
			j := 0
			for d, x := range c {
				j += x * permStrides[d]
			}
			copyElem(o, k, in[0], j)
		})
		return true, nil
	case name == "slice":
		dims, err := SliceDims(op.Attrs, in[0].Type.Shape)
		if err != nil {
			return false, nil
		}
		src := in[0].Type.Shape
		st := broadcastStrides(src, src)
		forEachCoord(o.Type.Shape, func(k int, c []int) {
			j := 0
			for d, x := range c {
				j += (dims[d].Start + x*dims[d].Step) * st[d]
			}
			copyElem(o, k, in[0], j)
		})
		return true, nil
	case name == "concat":
		axis, _ := NormAxis(op.Attrs.Int("axis", 0), o.Type.Rank())
		forEachCoord(o.Type.Shape, func(k int, c []int) {
			x := c[axis]
			for _, d := range in {
				if x < d.Type.Shape[axis] {
					c2 := append([]int(nil), c...)
					c2[axis] = x
					copyElem(o, k, d, linear(c2, d.Type.Shape))
					return
				}
				x -= d.Type.Shape[axis]
			}
		})
		return true, nil
	case name == "split":
		axis, _ := NormAxis(op.Attrs.Int("axis", 0), in[0].Type.Rank())
		off := 0
		for _, r := range out {
			forEachCoord(r.Type.Shape, func(k int, c []int) {
				c2 := append([]int(nil), c...)
				c2[axis] += off
				copyElem(r, k, in[0], linear(c2, in[0].Type.Shape))
			})
			off += r.Type.Shape[axis]
		}
		return true, nil
	case name == "gather":
		data, idx := in[0], in[1]
		axis, _ := NormAxis(op.Attrs.Int("axis", 0), data.Type.Rank())
		dim := data.Type.Shape[axis]
		inner := data.Type.Shape[axis+1:].NumElements()
		outer := data.Type.Shape[:axis].NumElements()
		n := idx.Len()
		k := 0
		for a := 0; a < outer; a++ {
			for i := 0; i < n; i++ {
				j := idx.I64(i)
				if j < 0 {
					j += int64(dim)
				}
				if j < 0 || j >= int64(dim) {
					return false, fmt.Errorf("gather index %d out of range for dim of size %d", idx.I64(i), dim)
				}
				for e := 0; e < inner; e++ {
					copyElem(o, k, data, (a*dim+int(j))*inner+e)
					k++
				}
			}
		}
		return true, nil
	case name == "reduce_sum" || name == "reduce_mean" || name == "reduce_max":
		red, err := ReduceAxes(op.Attrs, in[0].Type.Rank())
		if err != nil {
			return false, nil
		}
		src := in[0].Type.Shape
		acc := make([]float64, o.Len())
		cnt := make([]int, o.Len())
		forEachCoord(src, func(k int, c []int) {
			j, s := 0, 1
			for d := len(src) - 1; d >= 0; d-- {
				if !red[d] {
					j += c[d] * s
					s *= src[d]
				}
			}
			v := in[0].F64(k)
			if name == "reduce_max" {
				if cnt[j] == 0 || v > acc[j] {
					acc[j] = v
				}
			} else {
				acc[j] += v
			}
			cnt[j]++
		})
		for j := range acc {
			if name == "reduce_mean" && cnt[j] > 0 {
				acc[j] /= float64(cnt[j])
			}
			o.setF64(j, acc[j])
		}
		return true, nil
	}
	return foldNN(op, in, out)
}

func copyElem(dst *Dense, i int, src *Dense, j int) {
	if dst.Type.DType == src.Type.DType {
		sz := dst.Type.DType.Size()
		copy(dst.Data[i*sz:(i+1)*sz], src.elem(j))
		return
	}
	if dst.Type.DType.IsFloat() {
		dst.setF64(i, src.F64(j))
	} else {
		dst.setI64(i, src.I64(j))
	}
}

func linear(c []int, shape Shape) int {
	j := 0
	for d, x := range c {
		j = j*shape[d] + x
	}
	return j
}

func forEachCoord(shape Shape, f func(k int, c []int)) {
	n := shape.NumElements()
	c := make([]int, len(shape))
	for k := 0; k < n; k++ {
		f(k, c)
		for d := len(shape) - 1; d >= 0; d-- {
			c[d]++
			if c[d] < shape[d] {
				break
			}
			c[d] = 0
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
