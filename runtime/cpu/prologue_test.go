package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// A launch with a prologue gives the bits of the prologue's launch followed by the op's: a
// batch norm with and without its ReLU inside a pointwise convolution (f32 and f64, packed
// and unpacked weights, with and without bias, with a ReLU or residual add + ReLU
// epilogue), and through scratch memory where the convolution cannot take it (bf16, a 3×3
// convolution, a prologue other than a batch norm).
func TestPrologue(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	conv, bn := ir.Lookup("conv"), ir.Lookup("batch_norm")
	step := func(op string, ty ir.Type, args ...int) device.FusedStep {
		return device.FusedStep{Op: ir.Lookup(op), Args: args, Type: ty}
	}
	types := func(ts []device.Tensor) []ir.Type {
		var tys []ir.Type
		for _, t := range ts {
			tys = append(tys, t.Type)
		}
		return tys
	}
	run := func(s *device.Spec, in []device.Tensor) device.Tensor {
		t.Helper()
		impl, err := New().Prepare(s)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		y := newTensor(s.Out[len(s.Out)-1])
		if err := impl(in, []device.Tensor{y}); err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		return y
	}
	for _, d := range []ir.DType{ir.F32, ir.F64, ir.BF16} {
		xs := []int{2, 37, 9, 11}
		x := tensorOf(d, xs, randVals(r, prod(xs), -2, 2))
		bnIn := []device.Tensor{x}
		for i := 0; i < 4; i++ {
			bnIn = append(bnIn, tensorOf(d, []int{37}, randVals(r, 37, 0.5, 1.5)))
		}
		for _, c := range []struct {
			name       string
			preRelu    bool
			preOp      string // batch_norm, or an op on x alone
			k, outC    int
			bias       bool
			epi        string // "", relu, add+relu
			wantInside bool   // run inside the convolution (else through scratch)
		}{
			{"bn+relu > conv+relu", true, "batch_norm", 1, 45, true, "relu", true},
			{"bn > conv", false, "batch_norm", 1, 20, false, "", true},
			{"bn+relu > conv+add+relu", true, "batch_norm", 1, 45, true, "add+relu", true},
			{"bn+relu > 3×3 conv", true, "batch_norm", 3, 45, true, "relu", false},
			{"tanh > conv", false, "tanh", 1, 45, true, "", false},
		} {
			ws := []int{c.outC, 37, c.k, c.k}
			as := attrs()
			if c.k == 3 {
				as = attrs("pads", []int{1, 1, 1, 1})
			}
			w := tensorOf(d, ws, randVals(r, prod(ws), -1, 1))
			opIn := []device.Tensor{w}
			if c.bias {
				opIn = append(opIn, tensorOf(d, []int{c.outC}, randVals(r, c.outC, -1, 1)))
			}
			// The prologue's spec and launch on its own.
			pre := &device.Spec{Op: bn, In: types(bnIn), Out: []ir.Type{x.Type}}
			preIn := bnIn
			if c.preOp != "batch_norm" {
				pre = &device.Spec{Op: ir.Lookup(c.preOp), In: []ir.Type{x.Type}, Out: []ir.Type{x.Type}}
				preIn = bnIn[:1]
			}
			if c.preRelu {
				pre.Fused, pre.OpInputs = []device.FusedStep{step("relu", x.Type, 0)}, len(preIn)
			}
			xn := run(pre, preIn)
			// The op's, on its result.
			yt, err := conv.Infer(append([]ir.Type{x.Type}, types(opIn)...), as)
			if err != nil {
				t.Fatal(err)
			}
			op := &device.Spec{Op: conv, Attrs: as, In: append([]ir.Type{x.Type}, types(opIn)...), Out: yt}
			var extra []device.Tensor
			switch c.epi {
			case "relu":
				op.Fused, op.OpInputs = []device.FusedStep{step("relu", yt[0], 0)}, len(op.In)
			case "add+relu":
				extra = []device.Tensor{tensorOf(d, yt[0].Shape, randVals(r, yt[0].NumElements(), -1, 1))}
				op.Fused, op.OpInputs = []device.FusedStep{step("add", yt[0], 1, 0), step("relu", yt[0], 2)}, len(op.In)
				op.In = append(op.In, extra[0].Type)
			}
			want := run(op, append(append([]device.Tensor{xn}, opIn...), extra...))
			// The launch with the prologue.
			in := append(append(append([]device.Tensor{}, preIn...), opIn...), extra...)
			preSpec := *pre
			preSpec.In, preSpec.Out = nil, nil
			s := &device.Spec{Op: conv, Attrs: as, Fused: op.Fused, Pre: &preSpec, PreInputs: len(preIn), In: types(in), Out: yt}
			if op.Epilogue() {
				s.OpInputs = op.OpInputs - 1 + len(preIn)
			}
			for _, constW := range []bool{false, true} {
				s.Const = nil
				if constW {
					s.Const = make([]bool, len(in))
					s.Const[len(preIn)] = true
				}
				_, inside := New().batchNormConvFor(t, s)
				if want := c.wantInside && d != ir.BF16; inside != want {
					t.Fatalf("%s %s: inside the convolution %v, want %v", d, c.name, inside, want)
				}
				got := run(s, in)
				g, wv := values(got), values(want)
				for i := range wv {
					if math.Float64bits(g[i]) != math.Float64bits(wv[i]) {
						t.Fatalf("%s %s (constant weights %v): y[%d] = %v, separate launches give %v", d, c.name, constW, i, g[i], wv[i])
					}
				}
			}
		}
	}
}

// batchNormConvFor reports whether s runs as the fused batch norm and convolution.
func (d *Device) batchNormConvFor(t *testing.T, s *device.Spec) (device.Impl, bool) {
	t.Helper()
	pre, op, err := s.SplitPrologue()
	if err != nil {
		t.Fatal(err)
	}
	impl := d.batchNormConv(pre, op)
	return impl, impl != nil
}

// A spec's name says what a prologue launch runs (traces show it), and a malformed
// prologue is an error, not a panic.
func TestPrologueSpec(t *testing.T) {
	x, ch, w := ir.T(ir.F32, 1, 4, 3, 3), ir.T(ir.F32, 4), ir.T(ir.F32, 2, 4, 1, 1)
	y := ir.T(ir.F32, 1, 2, 3, 3)
	pre := &device.Spec{Op: ir.Lookup("batch_norm"), OpInputs: 5, Fused: []device.FusedStep{{Op: ir.Lookup("relu"), Args: []int{0}, Type: x}}}
	s := &device.Spec{Op: ir.Lookup("conv"), Pre: pre, PreInputs: 5, In: []ir.Type{x, ch, ch, ch, ch, w}, Out: []ir.Type{y}}
	if got := s.Name(); got != "batch_norm+relu>conv" {
		t.Fatalf("name %q", got)
	}
	p, op, err := s.SplitPrologue()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.In) != 5 || !p.Out[0].Equal(x) || len(op.In) != 2 || !op.In[0].Equal(x) || !op.In[1].Equal(w) {
		t.Fatalf("split into %+v and %+v", p, op)
	}
	for _, bad := range []struct {
		name string
		edit func(s *device.Spec)
	}{
		{"no operands", func(s *device.Spec) { s.PreInputs = 0 }},
		{"past the operands", func(s *device.Spec) { s.PreInputs = 7 }},
		{"nested", func(s *device.Spec) { q := *s.Pre; q.Pre = pre; s.Pre = &q }},
	} {
		b := *s
		bad.edit(&b)
		if _, _, err := b.SplitPrologue(); err == nil {
			t.Errorf("%s: split", bad.name)
		}
		if _, err := New().Prepare(&b); err == nil {
			t.Errorf("%s: prepared", bad.name)
		}
	}
}
