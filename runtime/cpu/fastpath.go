package cpu

import (
	"math"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Fast paths of the elementwise engine. Each computes bit for bit what the engine computes
// (float64 arithmetic rounded to the step's dtype), only without the float64 round trip:
// for + − × ÷, IEEE arithmetic in f32 equals the float64 result rounded once to f32 (the
// float64 significand holds more than twice f32's plus two bits, so the double rounding is
// innocuous), and in f64 it is the engine's own arithmetic. (NaN payloads are outside the
// contract, in the engine too: with two NaN operands the result carries one of their payloads
// by operand order, which the compiler may choose either way for a commutative op.)

var arithOps = map[string]k.ArithOp{"add": k.OpAdd, "sub": k.OpSub, "mul": k.OpMul, "div": k.OpDiv}

// arithFastPath returns the kernel of a lone add, sub, mul or div (an op, or a one-step fused
// chain) whose operands and result are all f32 or all f64, with any numpy broadcasting; nil
// when the launch is not of that form.
func arithFastPath(s *device.Spec) device.Impl {
	if len(s.Out) != 1 || len(s.Outputs) > 0 {
		return nil
	}
	out := s.Out[0]
	var name string
	var args []int
	switch {
	case s.Op != nil && len(s.Fused) == 0:
		if len(s.In) != 2 {
			return nil
		}
		name, args = s.Op.Name, []int{0, 1}
	case s.Op == nil && len(s.Fused) == 1:
		st := s.Fused[0]
		if st.Op == nil || !st.Type.Equal(out) {
			return nil
		}
		name, args = st.Op.Name, st.Args
	default:
		return nil
	}
	op, ok := arithOps[name]
	if !ok || len(args) != 2 || (out.DType != ir.F32 && out.DType != ir.F64) {
		return nil
	}
	for _, a := range args {
		if a < 0 || a >= len(s.In) || s.In[a].DType != out.DType {
			return nil
		}
		if b, err := ir.BroadcastShapes(s.In[a].Shape, out.Shape); err != nil || !b.Equal(out.Shape) {
			return nil
		}
	}
	ia, ib := args[0], args[1]
	aShape, bShape, oShape := s.In[ia].Shape, s.In[ib].Shape, out.Shape
	return byDType(out.DType,
		func(in, outs []device.Tensor) error {
			k.Arith(op, in[ia].F32(), aShape, in[ib].F32(), bShape, outs[0].F32(), oShape)
			return nil
		},
		func(in, outs []device.Tensor) error {
			k.Arith(op, in[ia].F64(), aShape, in[ib].F64(), bShape, outs[0].F64(), oShape)
			return nil
		})
}

// chainOps are the ops of arithChainFastPath: each is exact or correctly rounded in IEEE
// arithmetic of the operands' own width (+ − × ÷ and √ are correctly rounded; neg, abs and
// relu are exact), so computing it in f32 gives the engine's float64 result rounded to f32.
var chainOps = map[string]int{"add": 2, "sub": 2, "mul": 2, "div": 2, "neg": 1, "abs": 1, "sqrt": 1, "relu": 1}

// chainChunk is the number of elements a typed chain processes at a time.
const chainChunk = 1024

// arithChainFastPath returns the kernel of a fused chain whose inputs, steps and results all
// have one dtype, f32 or f64, and whose steps are all chainOps: it runs the chain in that
// dtype over chunks of the output, reading same-shape inputs in place. nil when the chain is
// not of that form.
func arithChainFastPath(s *device.Spec) device.Impl {
	if len(s.Out) == 0 {
		return nil
	}
	out := s.Out[0]
	var outSteps []int // nil: the last step alone
	fused := s.Fused
	if s.Op != nil { // a lone op is a chain of one step
		args := make([]int, len(s.In))
		for i := range args {
			args[i] = i
		}
		fused = []device.FusedStep{{Op: s.Op, Args: args, Attrs: s.Attrs, Type: out}}
	}
	if len(fused) == 0 {
		return nil
	}
	if len(s.Outputs) > 0 {
		outSteps = s.OutputSteps()
	} else if len(s.Out) != 1 {
		return nil
	}
	d := out.DType
	if d != ir.F32 && d != ir.F64 {
		return nil
	}
	nIn := len(s.In)
	for _, t := range s.In {
		if t.DType != d {
			return nil
		}
		if b, err := ir.BroadcastShapes(t.Shape, out.Shape); err != nil || !b.Equal(out.Shape) {
			return nil
		}
	}
	steps := chainSteps(fused, nIn, out)
	if steps == nil {
		return nil
	}
	if d == ir.F32 {
		return typedChain[float32](s.In, out.Shape, steps, outSteps)
	}
	return typedChain[float64](s.In, out.Shape, steps, outSteps)
}

// chainSteps returns fused's steps when each is a chainOp with result type out reading nIn
// inputs and earlier steps, else nil.
func chainSteps(fused []device.FusedStep, nIn int, out ir.Type) []chainStep {
	steps := make([]chainStep, len(fused))
	for i, st := range fused {
		if st.Op == nil || !st.Type.Equal(out) {
			return nil
		}
		n, ok := chainOps[st.Op.Name]
		if !ok || len(st.Args) != n {
			return nil
		}
		for _, a := range st.Args {
			if a < 0 || a >= nIn+i {
				return nil
			}
		}
		steps[i] = chainStep{st.Op.Name, st.Args}
	}
	return steps
}

type chainStep struct {
	op   string
	args []int
}

// typedLoader returns a chunk [lo, lo+n) of an input broadcast to the output, either a window
// of the input itself (same shape) or buf filled with the broadcast values.
type typedLoader[T k.Float] func(buf []T, lo, n int) []T

func makeTypedLoader[T k.Float](src []T, shape, out ir.Shape) typedLoader[T] {
	n := len(src)
	switch {
	case shape.Equal(out):
		return func(_ []T, lo, m int) []T { return src[lo : lo+m] }
	case n == 1:
		return func(buf []T, _, m int) []T {
			b := buf[:m]
			for i := range b {
				b[i] = src[0]
			}
			return b
		}
	case isSuffix(shape, out):
		return func(buf []T, lo, m int) []T {
			b := buf[:m]
			j := lo % n
			for i := 0; i < m; {
				c := copy(b[i:], src[j:])
				i += c
				j = 0
			}
			return b
		}
	}
	strides := k.BroadcastStrides(shape, out)
	return func(buf []T, lo, m int) []T {
		b := buf[:m]
		coord := make([]int, len(out))
		rem := lo
		for d := len(out) - 1; d >= 0; d-- {
			coord[d] = rem % out[d]
			rem /= out[d]
		}
		p := 0
		for d := range out {
			p += coord[d] * strides[d]
		}
		for i := range b {
			b[i] = src[p]
			for d := len(out) - 1; d >= 0; d-- {
				coord[d]++
				p += strides[d]
				if coord[d] < out[d] {
					break
				}
				p -= strides[d] * coord[d]
				coord[d] = 0
			}
		}
		return b
	}
}

// typedChain runs steps over chunks of out. With outSteps (a chain writing several results)
// every step is computed into the chunk's buffers and the results copied out after the last,
// so that a result written over an input (an in-place update) is never read back as that
// input; otherwise the last step writes the result directly.
func typedChain[T k.Float](inTypes []ir.Type, out ir.Shape, steps []chainStep, outSteps []int) device.Impl {
	nIn := len(inTypes)
	total := out.NumElements()
	return func(in, outs []device.Tensor) error {
		loads := make([]typedLoader[T], nIn)
		for i, t := range in {
			loads[i] = makeTypedLoader(floats[T](t), inTypes[i].Shape, out)
		}
		y := floats[T](outs[0])
		nChunks := (total + chainChunk - 1) / chainChunk
		k.Parallel(nChunks, max(1, 16384/chainChunk), func(c0, c1 int) {
			backing := make([]T, chainChunk*(nIn+len(steps)))
			bufs := make([][]T, nIn+len(steps))
			for i := range bufs {
				bufs[i] = backing[i*chainChunk : (i+1)*chainChunk]
			}
			vals := make([][]T, nIn+len(steps))
			// A broadcast scalar (an optimizer's learning rate, a bias correction) fills its
			// buffer once per worker rather than once per chunk.
			scalar := make([]bool, nIn)
			for i, t := range inTypes {
				if scalar[i] = t.NumElements() == 1 && !t.Shape.Equal(out); scalar[i] {
					loads[i](bufs[i], 0, chainChunk)
				}
			}
			for c := c0; c < c1; c++ {
				lo := c * chainChunk
				n := min(chainChunk, total-lo)
				for i, l := range loads {
					if scalar[i] {
						vals[i] = bufs[i][:n]
						continue
					}
					vals[i] = l(bufs[i], lo, n)
				}
				for j, st := range steps {
					dst := bufs[nIn+j][:n]
					if j == len(steps)-1 && outSteps == nil {
						dst = y[lo : lo+n]
					}
					chainOp(st.op, dst, vals[st.args[0]], vals[st.args[len(st.args)-1]])
					vals[nIn+j] = dst
				}
				for o, j := range outSteps {
					copy(floats[T](outs[o])[lo:lo+n], vals[nIn+j])
				}
			}
		})
		return nil
	}
}

// chainOp computes one step in T; b is a's slice for unary ops. The arithmetic, √ and relu
// are kernels/cpu's row kernels (vectorised for f32).
func chainOp[T k.Float](op string, d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	switch op {
	case "add":
		k.ArithVV(k.OpAdd, a, b, d)
	case "sub":
		k.ArithVV(k.OpSub, a, b, d)
	case "mul":
		k.ArithVV(k.OpMul, a, b, d)
	case "div":
		k.ArithVV(k.OpDiv, a, b, d)
	case "neg":
		for i := range d {
			d[i] = -a[i]
		}
	case "abs":
		for i := range d {
			d[i] = T(math.Abs(float64(a[i])))
		}
	case "sqrt":
		k.SqrtRow(a, d)
	case "relu":
		k.ReluRow(a, d)
	}
}
