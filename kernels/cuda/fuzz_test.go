package cuda_test

import (
	"fmt"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// fuzzSpec builds, from the fuzzer's bytes, a launch site the op table accepts: an op that
// has a CUDA kernel, operands of small random shapes and dtypes, attributes of each spec's
// kind with small values, and the result types the op's inference gives — what a validated
// program can bring to the CUDA device. ok is false when the op's inference refuses it.
func fuzzSpec(data []byte) (s *device.Spec, ok bool) {
	next := func(n int) int {
		if len(data) == 0 || n <= 0 {
			return 0
		}
		v := int(data[0]) % n
		data = data[1:]
		return v
	}
	var ops []*ir.OpDef
	for _, d := range ir.Ops() {
		if cuda.HasKernel(d.Name) && d.Name != "constant" && !d.Has(ir.Collective) {
			ops = append(ops, d)
		}
	}
	op := ops[next(len(ops))]
	dtypes := []ir.DType{ir.F32, ir.F64, ir.BF16, ir.F16, ir.I64, ir.I32, ir.Bool}
	n := op.MinOperands + next(3)
	if op.MaxOperands >= 0 && n > op.MaxOperands {
		n = op.MaxOperands
	}
	rank := next(5)
	base := make(ir.Shape, rank)
	for d := range base {
		base[d] = 1 + next(4)
	}
	var in []ir.Type
	for i := 0; i < n; i++ {
		shape := append(ir.Shape{}, base...)
		if next(3) == 0 && len(shape) > 0 { // another rank or extent now and then
			shape = shape[next(len(shape)):]
		}
		in = append(in, ir.Type{DType: dtypes[next(len(dtypes))], Shape: shape})
	}
	var attrs ir.Attrs
	small := func() int { return next(7) - 3 }
	for _, a := range op.Attrs {
		if a.Optional && next(2) == 0 {
			continue
		}
		var v ir.Attr
		switch a.Kind {
		case ir.KindInt:
			v = ir.Int(small())
		case ir.KindFloat:
			v = ir.Float([]float64{1e-5, 0.5, 2, 0}[next(4)])
		case ir.KindBool:
			v = ir.BoolAttr(next(2) == 1)
		case ir.KindEnum:
			if len(a.Enum) == 0 {
				continue
			}
			v = ir.Ident(a.Enum[next(len(a.Enum))])
		case ir.KindDType:
			v = ir.Ident(dtypes[next(len(dtypes))].String())
		case ir.KindInts:
			l := make([]int, next(2*rank+2))
			for i := range l {
				l[i] = small()
			}
			v = ir.Ints(l...)
		case ir.KindFloats:
			v = ir.List{ir.Float(1), ir.Float(2)}
		case ir.KindType:
			v = ir.TypeAttr(ir.Type{DType: dtypes[next(len(dtypes))], Shape: base})
		default:
			continue
		}
		attrs = append(attrs, ir.NamedAttr{Name: a.Name, Value: v})
	}
	attrs = attrs.Sorted()
	if _, err := op.CheckAttrs(attrs); err != nil {
		return nil, false
	}
	out, err := func() (out []ir.Type, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		return op.Infer(in, attrs)
	}()
	if err != nil {
		return nil, false
	}
	return &device.Spec{Op: op, Attrs: attrs, In: in, Out: out}, true
}

// FuzzKernels: no launch site the op table accepts makes a kernel generator panic; each is
// planned as kernels or refused with an error (runtime/cuda's Device.Prepare also recovers, so
// a panic found here is a generator bug that would otherwise surface as a refused program).
func FuzzKernels(f *testing.F) {
	for _, seed := range [][]byte{{0, 1, 2, 3, 2, 0, 1, 1}, {5, 0, 3, 2, 2, 1, 1, 0, 2}, {9, 1, 2, 4, 3, 3, 0, 0, 1, 1}, {17, 2, 1, 1, 0}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, ok := fuzzSpec(data)
		if !ok {
			return
		}
		if _, err := cuda.PlanSite(s, "k"); err != nil {
			return
		}
	})
}
