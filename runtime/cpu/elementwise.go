package cpu

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// chunk is the number of elements each elementwise step processes at a time: large enough
// to amortise the per-step dispatch, small enough for the chunk buffers to stay in L1/L2.
const chunk = 512

// ewFunc computes one elementwise step over a chunk: dst[i] = f(args[0][i], args[1][i], …).
type ewFunc func(dst []float64, args [][]float64)

// ewBuilder prepares an elementwise op for its attributes and result dtype.
type ewBuilder func(attrs ir.Attrs, out ir.DType) (ewFunc, error)

// elementwiseOps holds every elementwise op the CPU runs. Ops of other files (ONNX ops,
// gradient ops) add themselves with registerElementwise.
var elementwiseOps = map[string]ewBuilder{}

func registerElementwise(name string, b ewBuilder) {
	if elementwiseOps[name] != nil {
		panic("runtime/cpu: elementwise op " + name + " registered twice")
	}
	elementwiseOps[name] = b
}

// unary wraps a scalar function as a builder.
func unary(f func(float64) float64) ewBuilder {
	return func(ir.Attrs, ir.DType) (ewFunc, error) {
		return func(dst []float64, a [][]float64) {
			x := a[0][:len(dst)]
			for i := range dst {
				dst[i] = f(x[i])
			}
		}, nil
	}
}

func binary(f func(x, y float64) float64) ewBuilder {
	return func(ir.Attrs, ir.DType) (ewFunc, error) {
		return func(dst []float64, a [][]float64) {
			x, y := a[0][:len(dst)], a[1][:len(dst)]
			for i := range dst {
				dst[i] = f(x[i], y[i])
			}
		}, nil
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func init() {
	registerElementwise("add", func(ir.Attrs, ir.DType) (ewFunc, error) {
		return func(dst []float64, a [][]float64) {
			x, y := a[0][:len(dst)], a[1][:len(dst)]
			for i := range dst {
				dst[i] = x[i] + y[i]
			}
		}, nil
	})
	registerElementwise("sub", binary(func(x, y float64) float64 { return x - y }))
	registerElementwise("mul", func(ir.Attrs, ir.DType) (ewFunc, error) {
		return func(dst []float64, a [][]float64) {
			x, y := a[0][:len(dst)], a[1][:len(dst)]
			for i := range dst {
				dst[i] = x[i] * y[i]
			}
		}, nil
	})
	registerElementwise("div", func(_ ir.Attrs, out ir.DType) (ewFunc, error) {
		if out.IsInt() {
			return func(dst []float64, a [][]float64) {
				for i := range dst {
					if a[1][i] == 0 {
						dst[i] = 0 // integer division by zero: defined as 0 rather than a crash
						continue
					}
					dst[i] = math.Trunc(a[0][i] / a[1][i])
				}
			}, nil
		}
		return binary(func(x, y float64) float64 { return x / y })(nil, out)
	})
	registerElementwise("pow", binary(math.Pow))
	registerElementwise("max", binary(math.Max))
	registerElementwise("min", binary(math.Min))
	registerElementwise("equal", binary(func(x, y float64) float64 { return b2f(x == y) }))
	registerElementwise("less", binary(func(x, y float64) float64 { return b2f(x < y) }))
	registerElementwise("greater", binary(func(x, y float64) float64 { return b2f(x > y) }))
	registerElementwise("and", binary(func(x, y float64) float64 { return b2f(x != 0 && y != 0) }))
	registerElementwise("or", binary(func(x, y float64) float64 { return b2f(x != 0 || y != 0) }))
	registerElementwise("not", unary(func(x float64) float64 { return b2f(x == 0) }))
	registerElementwise("where", func(ir.Attrs, ir.DType) (ewFunc, error) {
		return func(dst []float64, a [][]float64) {
			for i := range dst {
				if a[0][i] != 0 {
					dst[i] = a[1][i]
				} else {
					dst[i] = a[2][i]
				}
			}
		}, nil
	})
	registerElementwise("neg", unary(func(x float64) float64 { return -x }))
	registerElementwise("stop_gradient", unary(func(x float64) float64 { return x }))
	registerElementwise("abs", unary(math.Abs))
	registerElementwise("relu", unary(func(x float64) float64 {
		if x > 0 {
			return x
		}
		return 0
	}))
	registerElementwise("gelu", func(at ir.Attrs, out ir.DType) (ewFunc, error) {
		// bf16 and f16 results are rounded from f32 values, as a GPU's 16-bit kernels
		// compute them in f32: they take the f32 routines.
		f32 := out == ir.F32 || out == ir.BF16 || out == ir.F16
		if at.Str("approximate", "none") == "tanh" {
			if f32 {
				return geluTanhF32, nil // vectorised float64 (gelu_tanh.go)
			}
			return unary(k.GeluTanh[float64])(nil, 0)
		}
		if f32 {
			return geluF32, nil // the same values, rounded to f32 (gelu.go)
		}
		return unary(k.Gelu[float64])(nil, 0)
	})
	registerElementwise("silu", unary(k.Silu[float64]))
	registerElementwise("tanh", unary(math.Tanh))
	registerElementwise("sigmoid", unary(k.Sigmoid[float64]))
	registerElementwise("exp", unary(math.Exp))
	registerElementwise("log", unary(math.Log))
	registerElementwise("sqrt", unary(math.Sqrt))
	registerElementwise("rsqrt", unary(func(x float64) float64 { return 1 / math.Sqrt(x) }))
	registerElementwise("erf", unary(math.Erf))
	registerElementwise("sin", unary(math.Sin))
	registerElementwise("cos", unary(math.Cos))
	registerElementwise("cast", unary(func(x float64) float64 { return x })) // rounding to the dtype does the cast
}

// loader copies a chunk of one input, broadcast to the output shape, into float64.
type loader func(dst []float64, lo int)

func makeLoader(t ir.Type, out ir.Shape) (func(data []byte) loader, error) {
	get, err := getter(t.DType)
	if err != nil {
		return nil, err
	}
	n := t.NumElements()
	switch {
	case t.Shape.Equal(out):
		return func(data []byte) loader {
			switch t.DType {
			case ir.F32:
				src := f32view(data)
				return func(dst []float64, lo int) {
					s := src[lo : lo+len(dst)]
					for i := range dst {
						dst[i] = float64(s[i])
					}
				}
			case ir.F64:
				src := device.Tensor{Data: data}.F64()
				return func(dst []float64, lo int) { copy(dst, src[lo:lo+len(dst)]) }
			case ir.BF16:
				src := device.Tensor{Data: data}.U16()
				return func(dst []float64, lo int) {
					s := src[lo : lo+len(dst)]
					for i := range dst {
						dst[i] = float64(math.Float32frombits(uint32(s[i]) << 16))
					}
				}
			case ir.F16:
				src := device.Tensor{Data: data}.U16()
				return func(dst []float64, lo int) { k.F16ToF64Slice(src[lo:lo+len(dst)], dst) }
			}
			return func(dst []float64, lo int) {
				for i := range dst {
					dst[i] = get(data, lo+i)
				}
			}
		}, nil
	case n == 1:
		return func(data []byte) loader {
			return func(dst []float64, lo int) {
				v := get(data, 0)
				for i := range dst {
					dst[i] = v
				}
			}
		}, nil
	}
	// Trailing-dims broadcast (a row vector such as a bias): source index = e mod n.
	if isSuffix(t.Shape, out) {
		return func(data []byte) loader {
			switch t.DType {
			case ir.F32:
				return suffixLoader(f32view(data)[:n])
			case ir.F64:
				return suffixLoader(device.Tensor{Data: data}.F64()[:n])
			}
			return func(dst []float64, lo int) {
				j := lo % n
				for i := range dst {
					dst[i] = get(data, j)
					j++
					if j == n {
						j = 0
					}
				}
			}
		}, nil
	}
	strides := k.BroadcastStrides(t.Shape, out)
	return func(data []byte) loader {
		return func(dst []float64, lo int) {
			// Odometer over output coordinates starting at lo.
			coord := make([]int, len(out))
			rem := lo
			for d := len(out) - 1; d >= 0; d-- {
				if out[d] > 0 {
					coord[d] = rem % out[d]
					rem /= out[d]
				}
			}
			src := 0
			for d := range out {
				src += coord[d] * strides[d]
			}
			for i := range dst {
				dst[i] = get(data, src)
				for d := len(out) - 1; d >= 0; d-- {
					coord[d]++
					src += strides[d]
					if coord[d] < out[d] {
						break
					}
					src -= strides[d] * coord[d]
					coord[d] = 0
				}
			}
		}
	}, nil
}

// suffixLoader loads a row src repeated along the output (source index = e mod len(src)) in
// runs of contiguous elements.
func suffixLoader[T k.Float](src []T) loader {
	n := len(src)
	return func(dst []float64, lo int) {
		j := lo % n
		for i := 0; i < len(dst); {
			run := src[j:min(n, j+len(dst)-i)]
			d := dst[i : i+len(run)]
			for t, v := range run {
				d[t] = float64(v)
			}
			i += len(run)
			j = 0
		}
	}
}

// isSuffix reports whether s (rank ≤ out's, no leading-dim broadcast inside) equals the
// trailing dims of out after dropping its leading 1s.
func isSuffix(s, out ir.Shape) bool {
	i := 0
	for i < len(s) && s[i] == 1 {
		i++
	}
	s = s[i:]
	if len(s) > len(out) {
		return false
	}
	return s.Equal(out[len(out)-len(s):])
}

func f32view(b []byte) []float32 {
	return device.Tensor{Data: b}.F32()
}

// getter reads element i of a buffer of dtype d as float64.
func getter(d ir.DType) (func(b []byte, i int) float64, error) {
	switch d {
	case ir.F32:
		return func(b []byte, i int) float64 {
			return float64(math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
		}, nil
	case ir.F64:
		return func(b []byte, i int) float64 {
			return device.Tensor{Data: b}.F64()[i]
		}, nil
	case ir.F16:
		return func(b []byte, i int) float64 { return float64(ir.F16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)) }, nil
	case ir.BF16:
		return func(b []byte, i int) float64 { return float64(ir.BF16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)) }, nil
	case ir.I64:
		return func(b []byte, i int) float64 { return float64(device.Tensor{Data: b}.I64()[i]) }, nil
	case ir.I32:
		return func(b []byte, i int) float64 { return float64(device.Tensor{Data: b}.I32()[i]) }, nil
	case ir.I8:
		return func(b []byte, i int) float64 { return float64(int8(b[i])) }, nil
	case ir.U8, ir.Bool:
		return func(b []byte, i int) float64 { return float64(b[i]) }, nil
	}
	return nil, fmt.Errorf("dtype %s not supported", d)
}

// rounder rounds float64 values to what dtype d can hold (the step's own arithmetic).
func rounder(d ir.DType) (func([]float64), error) {
	switch d {
	case ir.F64:
		return func([]float64) {}, nil
	case ir.F32:
		return func(v []float64) {
			for i, x := range v {
				v[i] = float64(float32(x))
			}
		}, nil
	case ir.F16:
		return func(v []float64) {
			for i, x := range v {
				v[i] = float64(ir.F16ToF32(ir.F32ToF16(float32(x))))
			}
		}, nil
	case ir.BF16:
		return func(v []float64) {
			for i, x := range v {
				v[i] = float64(ir.BF16ToF32(ir.F32ToBF16(float32(x))))
			}
		}, nil
	case ir.I64, ir.I32, ir.I8, ir.U8:
		return func(v []float64) {
			for i, x := range v {
				if x != x {
					v[i] = 0
				} else {
					v[i] = math.Trunc(x)
				}
			}
		}, nil
	case ir.Bool:
		return func(v []float64) {
			for i, x := range v {
				v[i] = b2f(x != 0)
			}
		}, nil
	}
	return nil, fmt.Errorf("dtype %s not supported", d)
}

// storer writes a float64 chunk (already rounded) into the output.
func storer(d ir.DType) (func(data []byte, lo int, v []float64), error) {
	switch d {
	case ir.F32:
		return func(data []byte, lo int, v []float64) {
			dst := f32view(data)[lo : lo+len(v)]
			for i, x := range v {
				dst[i] = float32(x)
			}
		}, nil
	case ir.F64:
		return func(data []byte, lo int, v []float64) { copy(device.Tensor{Data: data}.F64()[lo:], v) }, nil
	case ir.F16:
		return func(data []byte, lo int, v []float64) {
			k.F32RoundedToF16Slice(v, device.Tensor{Data: data}.U16()[lo:lo+len(v)])
		}, nil
	case ir.BF16:
		return func(data []byte, lo int, v []float64) {
			k.F32RoundedToBF16Slice(v, device.Tensor{Data: data}.U16()[lo:lo+len(v)])
		}, nil
	case ir.I64:
		return func(data []byte, lo int, v []float64) {
			dst := device.Tensor{Data: data}.I64()[lo:]
			for i, x := range v {
				dst[i] = int64(x)
			}
		}, nil
	case ir.I32:
		return func(data []byte, lo int, v []float64) {
			dst := device.Tensor{Data: data}.I32()[lo:]
			for i, x := range v {
				dst[i] = int32(x)
			}
		}, nil
	case ir.I8:
		return func(data []byte, lo int, v []float64) {
			for i, x := range v {
				data[lo+i] = byte(int8(x))
			}
		}, nil
	case ir.U8, ir.Bool:
		return func(data []byte, lo int, v []float64) {
			for i, x := range v {
				data[lo+i] = byte(x)
			}
		}, nil
	}
	return nil, fmt.Errorf("dtype %s not supported", d)
}

// prepareElementwise builds the kernel of a fused chain or a single elementwise op: a fast
// path when one applies (they compute exactly what the engine computes), else the engine.
func prepareElementwise(s *device.Spec) (device.Impl, error) {
	if impl := arithFastPath(s); impl != nil {
		return impl, nil
	}
	if impl := arithChainFastPath(s); impl != nil {
		return impl, nil
	}
	whole, err := prepareEngine(s)
	if err != nil {
		return nil, err
	}
	if split := splitAtOutputs(s, whole); split != nil {
		return split, nil
	}
	return whole, nil
}

// splitAtOutputs runs a chain writing several results as one launch per result, each reading
// the results before it from their buffers, so that every part takes its own fast path (a
// bias add before a GELU is the f32 fast path's broadcast add; the engine would widen it to
// float64). The same steps on the same values: the same bits. Where a result is written over
// an input (the optimizer's in-place updates) a later part could read it as that input, so
// such a launch runs the whole chain (whole); nil when a later part reads a step of an
// earlier part that is not a result.
func splitAtOutputs(s *device.Spec, whole device.Impl) device.Impl {
	outs := s.OutputSteps()
	if s.Op != nil || len(outs) < 2 || !slices.IsSorted(outs) {
		return nil
	}
	nIn := len(s.In)
	type part struct {
		impl device.Impl
		uses []int // the results before it that it reads, as its inputs after s.In
	}
	var parts []part
	lo := 0
	for o, j := range outs {
		// Step k of the chain is the part's value: an input, an earlier result, or its own step.
		remap := map[int]int{}
		in := slices.Clone(s.In)
		var uses []int
		var steps []device.FusedStep
		for k := lo; k <= j; k++ {
			st := s.Fused[k]
			args := make([]int, len(st.Args))
			for a, x := range st.Args {
				switch {
				case x < nIn:
					args[a] = x
				case x-nIn >= lo:
					args[a] = -1 - (x - nIn - lo) // this part's step, fixed up below
				default:
					r := slices.Index(outs[:o], x-nIn)
					if r < 0 {
						return nil // an earlier part's intermediate
					}
					if _, ok := remap[r]; !ok {
						remap[r] = len(in)
						in = append(in, s.Out[r])
						uses = append(uses, r)
					}
					args[a] = remap[r]
				}
			}
			steps = append(steps, device.FusedStep{Op: st.Op, Args: args, Attrs: st.Attrs, Type: st.Type})
		}
		for i := range steps {
			for a, x := range steps[i].Args {
				if x < 0 {
					steps[i].Args[a] = len(in) + (-1 - x)
				}
			}
		}
		one := &device.Spec{Fused: steps, In: in, Out: []ir.Type{s.Out[o]}}
		impl := arithFastPath(one)
		if impl == nil {
			impl = arithChainFastPath(one)
		}
		if impl == nil {
			var err error
			if impl, err = prepareEngine(one); err != nil {
				return nil
			}
		}
		parts = append(parts, part{impl, uses})
		lo = j + 1
	}
	return func(in, outs []device.Tensor) error {
		for _, o := range outs {
			for _, x := range in {
				if overlap(o.Data, x.Data) {
					return whole(in, outs)
				}
			}
		}
		for o, p := range parts {
			args := in
			if len(p.uses) > 0 {
				args = slices.Clone(in)
				for _, r := range p.uses {
					args = append(args, outs[r])
				}
			}
			if err := p.impl(args, outs[o:o+1]); err != nil {
				return err
			}
		}
		return nil
	}
}

// prepareEngine builds the fused engine for a chain or a single elementwise op.
func prepareEngine(s *device.Spec) (device.Impl, error) {
	steps := s.Fused
	if s.Op != nil {
		args := make([]int, len(s.In))
		for i := range args {
			args[i] = i
		}
		if len(s.Out) != 1 {
			return nil, fmt.Errorf("elementwise %s with %d results", s.Op.Name, len(s.Out))
		}
		steps = []device.FusedStep{{Op: s.Op, Args: args, Attrs: s.Attrs, Type: s.Out[0]}}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("fused kernel without steps")
	}
	// The chain runs over its last step's elements and writes its output steps' values once
	// every step of a chunk is computed: a result written over an input is never read back.
	outSteps := []int{len(steps) - 1}
	if s.Op == nil {
		outSteps = s.OutputSteps()
	}
	if len(outSteps) != len(s.Out) {
		return nil, fmt.Errorf("fused kernel writes %d steps into %d results", len(outSteps), len(s.Out))
	}
	out := steps[len(steps)-1].Type
	nIn := len(s.In)
	type step struct {
		f     ewFunc
		round func([]float64)
		args  []int
	}
	prepared := make([]step, len(steps))
	for i, st := range steps {
		b := elementwiseOps[st.Op.Name]
		if b == nil {
			return nil, fmt.Errorf("no CPU kernel for elementwise op %s", st.Op.Name)
		}
		f, err := b(st.Attrs, st.Type.DType)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", st.Op.Name, err)
		}
		r, err := rounder(st.Type.DType)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", st.Op.Name, err)
		}
		for _, a := range st.Args {
			if a < 0 || a >= nIn+i {
				return nil, fmt.Errorf("fused step %d reads value %d", i, a)
			}
			if a < nIn && !out.Shape.Equal(s.In[a].Shape) {
				if _, err := ir.BroadcastShapes(s.In[a].Shape, out.Shape); err != nil {
					return nil, fmt.Errorf("input %d %s does not broadcast to %s", a, s.In[a], out)
				}
			}
		}
		if i == len(steps)-1 && st.Type.DType.IsFloat() && len(outSteps) == 1 {
			// The store rounds a float result to its dtype exactly as the rounder would
			// (f32 and f64 directly; f16 and bf16 through f32 in both), so skip the pass.
			r = nil
		}
		prepared[i] = step{f, r, st.Args}
	}
	loaders := make([]func([]byte) loader, nIn)
	for i, t := range s.In {
		l, err := makeLoader(t, out.Shape)
		if err != nil {
			return nil, fmt.Errorf("input %d: %v", i, err)
		}
		loaders[i] = l
	}
	stores := make([]func([]byte, int, []float64), len(outSteps))
	for o, j := range outSteps {
		if j < 0 || j >= len(steps) || !steps[j].Type.Equal(s.Out[o]) || !s.Out[o].Shape.Equal(out.Shape) {
			return nil, fmt.Errorf("fused kernel output %d (step %d) does not match its result %s", o, j, s.Out[o])
		}
		st, err := storer(s.Out[o].DType)
		if err != nil {
			return nil, err
		}
		stores[o] = st
	}
	total := out.NumElements()
	return func(in, outs []device.Tensor) error {
		loads := make([]loader, nIn)
		for i, l := range loaders {
			loads[i] = l(in[i].Data)
		}
		nChunks := (total + chunk - 1) / chunk
		k.Parallel(nChunks, max(1, 16384/chunk), func(c0, c1 int) {
			sc := getScratch(nIn + len(prepared))
			defer scratchPool.Put(sc)
			vals, args := sc.vals, sc.args
			for c := c0; c < c1; c++ {
				lo := c * chunk
				n := min(chunk, total-lo)
				for i, l := range loads {
					l(vals[i][:n], lo)
				}
				for j, st := range prepared {
					args = args[:0]
					for _, a := range st.args {
						args = append(args, vals[a][:n])
					}
					dst := vals[nIn+j][:n]
					st.f(dst, args)
					if st.round != nil {
						st.round(dst)
					}
				}
				for o, j := range outSteps {
					stores[o](outs[o].Data, lo, vals[nIn+j][:n])
				}
			}
		})
		return nil
	}, nil
}

// scratch is one worker's chunk buffers; pooled because the engine runs thousands of small
// launches a step and allocating them each time showed up as GC work.
type scratch struct {
	backing []float64
	vals    [][]float64
	args    [][]float64
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

func getScratch(n int) *scratch {
	sc := scratchPool.Get().(*scratch)
	if cap(sc.backing) < n*chunk {
		sc.backing = make([]float64, n*chunk)
	}
	sc.vals = sc.vals[:0]
	for i := 0; i < n; i++ {
		sc.vals = append(sc.vals, sc.backing[i*chunk:(i+1)*chunk])
	}
	sc.args = sc.args[:0]
	return sc
}

// overlap reports whether two byte slices share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}
