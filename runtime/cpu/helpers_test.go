package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Test helpers: tensors, attribute dictionaries, and running one op through the device's
// public API (Spec → Prepare → Impl), with result types from the op table's inference.

var testDev = New()

// attrs builds an attribute dictionary from name, value pairs: int, float64, bool, string
// (an identifier), []int and []float64.
func attrs(kv ...any) ir.Attrs {
	var as ir.Attrs
	for i := 0; i < len(kv); i += 2 {
		name := kv[i].(string)
		var v ir.Attr
		switch x := kv[i+1].(type) {
		case int:
			v = ir.Int(x)
		case float64:
			v = ir.Float(x)
		case bool:
			v = ir.BoolAttr(x)
		case string:
			v = ir.Ident(x)
		case []int:
			v = ir.Ints(x...)
		case []float64:
			l := ir.List{}
			for _, f := range x {
				l = append(l, ir.Float(f))
			}
			v = l
		case ir.Attr:
			v = x
		default:
			panic(fmt.Sprintf("attrs: unsupported %T", x))
		}
		as = as.Set(name, v)
	}
	return as
}

func newTensor(t ir.Type) device.Tensor {
	return device.Tensor{Type: t, Data: alignedBytes(int(t.Bytes()))}
}

// tensorOf builds a tensor of dtype d from float64 values (rounded as the engine rounds).
func tensorOf(d ir.DType, shape []int, vals []float64) device.Tensor {
	t := newTensor(ir.Type{DType: d, Shape: ir.Shape(slices.Clone(shape))})
	if len(vals) != t.Type.NumElements() {
		panic(fmt.Sprintf("tensorOf: %d values for %s", len(vals), t.Type))
	}
	r, _ := rounder(d)
	st, _ := storer(d)
	v := slices.Clone(vals)
	r(v)
	st(t.Data, 0, v)
	return t
}

func f64T(shape []int, vals []float64) device.Tensor { return tensorOf(ir.F64, shape, vals) }

func i64T(shape []int, vals ...int64) device.Tensor {
	t := newTensor(ir.T(ir.I64, shape...))
	copy(t.I64(), vals)
	return t
}

// values reads any tensor as float64.
func values(t device.Tensor) []float64 {
	get, err := getter(t.Type.DType)
	if err != nil {
		panic(err)
	}
	out := make([]float64, t.Type.NumElements())
	for i := range out {
		out[i] = get(t.Data, i)
	}
	return out
}

// prepare builds the Spec of op name for the operand types and prepares it.
func prepare(name string, as ir.Attrs, in ...ir.Type) (device.Impl, []ir.Type, error) {
	op := ir.Lookup(name)
	if op == nil {
		return nil, nil, fmt.Errorf("no op %s", name)
	}
	if _, err := op.CheckAttrs(as); err != nil {
		return nil, nil, err
	}
	out, err := op.Infer(in, as)
	if err != nil {
		return nil, nil, err
	}
	impl, err := testDev.Prepare(&device.Spec{Op: op, Attrs: as, In: in, Out: out})
	return impl, out, err
}

// runOpErr runs op name on the tensors and returns its results or the error of any stage.
func runOpErr(name string, as ir.Attrs, in ...device.Tensor) ([]device.Tensor, error) {
	types := make([]ir.Type, len(in))
	for i, t := range in {
		types[i] = t.Type
	}
	impl, outTypes, err := prepare(name, as, types...)
	if err != nil {
		return nil, err
	}
	out := make([]device.Tensor, len(outTypes))
	for i, t := range outTypes {
		out[i] = newTensor(t)
		for j := range out[i].Data {
			out[i].Data[j] = 0xA5 // garbage, so a kernel that skips an element is caught
		}
	}
	if err := impl(in, out); err != nil {
		return nil, err
	}
	return out, nil
}

func runOp(tb testing.TB, name string, as ir.Attrs, in ...device.Tensor) []device.Tensor {
	tb.Helper()
	out, err := runOpErr(name, as, in...)
	if err != nil {
		tb.Fatalf("%s %v: %v", name, as, err)
	}
	return out
}

// run1 runs op name and returns its single result as float64.
func run1(tb testing.TB, name string, as ir.Attrs, in ...device.Tensor) []float64 {
	tb.Helper()
	return values(runOp(tb, name, as, in...)[0])
}

func randVals(r *rand.Rand, n int, lo, hi float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + (hi-lo)*r.Float64()
	}
	return v
}

func randShape(r *rand.Rand, rank, lo, hi int) []int {
	s := make([]int, rank)
	for i := range s {
		s[i] = lo + r.IntN(hi-lo+1)
	}
	return s
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// strides returns row-major strides.
func strides(shape []int) []int {
	st := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}

// unravel returns the coordinates of flat index i in shape.
func unravel(i int, shape []int) []int {
	c := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			c[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return c
}

func ravel(c, shape []int) int {
	i := 0
	for d := range shape {
		i = i*shape[d] + c[d]
	}
	return i
}

// relErr is the normwise relative error max|got − want| / max(max|want|, floor).
func relErr(got, want []float64, floor float64) float64 {
	var num, den float64
	for i := range want {
		num = max(num, math.Abs(got[i]-want[i]))
		den = max(den, math.Abs(want[i]))
	}
	if num == 0 {
		return 0
	}
	return num / max(den, floor)
}

// closeTo fails when got and want differ: NaNs and infinities must match exactly, finite
// values to tol relative to each element's magnitude (with an absolute floor of tol).
func closeTo(tb testing.TB, what string, got, want []float64, tol float64) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		g, w := got[i], want[i]
		ok := g == w || (math.IsNaN(g) && math.IsNaN(w)) ||
			(!math.IsInf(w, 0) && math.Abs(g-w) <= tol*max(1, math.Abs(w)))
		if !ok {
			if bad < 5 {
				tb.Errorf("%s: [%d] = %v, want %v", what, i, g, w)
			}
			bad++
		}
	}
	if bad > 0 {
		tb.Fatalf("%s: %d of %d values differ", what, bad, len(want))
	}
}

// fdGrad returns the central finite difference of L at x, element by element.
func fdGrad(x []float64, h float64, L func(x []float64) float64) []float64 {
	g := make([]float64, len(x))
	xp := slices.Clone(x)
	for i := range x {
		xp[i] = x[i] + h
		lp := L(xp)
		xp[i] = x[i] - h
		lm := L(xp)
		xp[i] = x[i]
		g[i] = (lp - lm) / (2 * h)
	}
	return g
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// checkFD compares an analytic gradient with finite differences (float64, relative error
// below 1e-6 in the max norm).
func checkFD(tb testing.TB, what string, analytic, fd []float64) {
	tb.Helper()
	if e := relErr(analytic, fd, 1e-12); e >= 1e-6 || math.IsNaN(e) {
		tb.Fatalf("%s: relative error %.3g vs finite differences\n analytic %v\n fd       %v", what, e, head(analytic), head(fd))
	}
}

func head(v []float64) []float64 { return v[:min(len(v), 8)] }

// TestEveryOpHasAKernel is the completeness check: every op of the IR table except the
// communication ops (which the runtime executes itself) and a rank program's runs, calls and
// ops on its gradients (code generation lowers them to launches, copies and collectives)
// has a CPU kernel. ring_attention and its gradient need none either: the ring-attention pass
// always rewrites them into their steps (fused attention per block, ring_send/ring_recv, the
// log-sum-exp merge) before code generation, so no program holds them.
func TestEveryOpHasAKernel(t *testing.T) {
	var missing []string
	for _, op := range ir.Ops() {
		if op.Traits&(ir.Collective|ir.P2P|ir.Calls|ir.State) != 0 || op.Name == "ring_attention" || op.Name == "ring_attention_grad" {
			continue
		}
		if !Supports(op) {
			missing = append(missing, op.Name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("ops without a CPU kernel: %v", missing)
	}
}

// TestNoKernelForUnknownOps checks that every registered kernel names an op of the table, so
// a renamed op cannot leave a stale kernel behind.
func TestNoKernelForUnknownOps(t *testing.T) {
	for name := range builders {
		if ir.Lookup(name) == nil {
			t.Errorf("kernel %s registered for an op the IR does not define", name)
		}
	}
	for name := range elementwiseOps {
		if op := ir.Lookup(name); op == nil || !op.Has(ir.Elementwise) {
			t.Errorf("elementwise kernel %s registered for a non-elementwise or unknown op", name)
		}
	}
}
