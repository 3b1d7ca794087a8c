package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// A convolution with an epilogue gives the bits of the convolution's launch followed by the
// chain's: the ReLU, residual add and add + ReLU inside the convolution (f32 and f64, packed
// and unpacked weights, with and without bias; on a 3×3 convolution, and on a pointwise one
// and a strided 1×1, which are GEMMs), a chain the convolution cannot
// run (tanh) as the two launches in place, bf16 through the widened kernels, and a chain
// writing two results.
func TestConvEpilogue(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	conv := ir.Lookup("conv")
	step := func(op string, ty ir.Type, args ...int) device.FusedStep {
		return device.FusedStep{Op: ir.Lookup(op), Args: args, Type: ty}
	}
	for _, geo := range []struct {
		k  int
		as ir.Attrs
	}{{3, attrs("pads", []int{1, 1, 1, 1})}, {1, nil}, {1, attrs("strides", []int{2, 2})}} {
		as := geo.as
		for _, d := range []ir.DType{ir.F32, ir.F64, ir.BF16} {
			xs, ws := []int{2, 37, 9, 11}, []int{45, 37, geo.k, geo.k}
			x := tensorOf(d, xs, randVals(r, prod(xs), -1, 1))
			w := tensorOf(d, ws, randVals(r, prod(ws), -1, 1))
			b := tensorOf(d, []int{45}, randVals(r, 45, -1, 1))
			out, err := conv.Infer([]ir.Type{x.Type, w.Type, b.Type}, as)
			if err != nil {
				t.Fatal(err)
			}
			yt := out[0]
			res := tensorOf(d, yt.Shape, randVals(r, yt.NumElements(), -1, 1))
			for _, c := range []struct {
				name    string
				steps   []device.FusedStep
				outputs []int
				bias    bool
			}{
				{"relu", []device.FusedStep{step("relu", yt, 0)}, nil, true},
				{"relu, no bias", []device.FusedStep{step("relu", yt, 0)}, nil, false},
				{"add relu", []device.FusedStep{step("add", yt, 1, 0), step("relu", yt, 2)}, nil, true},
				{"add relu, no bias", []device.FusedStep{step("add", yt, 0, 1), step("relu", yt, 2)}, nil, false},
				{"add", []device.FusedStep{step("add", yt, 0, 1)}, nil, true},
				{"tanh", []device.FusedStep{step("tanh", yt, 0)}, nil, true},
				{"two results", []device.FusedStep{step("add", yt, 0, 1), step("relu", yt, 2)}, []int{0, 1}, true},
			} {
				opIn := []device.Tensor{x, w}
				if c.bias {
					opIn = append(opIn, b)
				}
				extra := []device.Tensor{}
				if c.steps[0].Op.Name == "add" {
					extra = append(extra, res)
				}
				types := func(ts []device.Tensor) []ir.Type {
					var tys []ir.Type
					for _, t := range ts {
						tys = append(tys, t.Type)
					}
					return tys
				}
				nOut := max(1, len(c.outputs))
				// The reference: the convolution, then the chain, as two launches.
				y := newTensor(yt)
				convImpl, err := testDev.Prepare(&device.Spec{Op: conv, Attrs: as, In: types(opIn), Out: []ir.Type{yt}})
				if err != nil {
					t.Fatal(err)
				}
				if err := convImpl(opIn, []device.Tensor{y}); err != nil {
					t.Fatal(err)
				}
				chainIn := append([]device.Tensor{y}, extra...)
				outTypes := make([]ir.Type, nOut)
				for i := range outTypes {
					outTypes[i] = yt
				}
				chain, err := testDev.Prepare(&device.Spec{Fused: c.steps, Outputs: c.outputs, In: types(chainIn), Out: outTypes})
				if err != nil {
					t.Fatal(err)
				}
				want := make([]device.Tensor, nOut)
				for i := range want {
					want[i] = newTensor(yt)
				}
				if err := chain(chainIn, want); err != nil {
					t.Fatal(err)
				}
				for _, constW := range []bool{false, true} {
					in := append(append([]device.Tensor{}, opIn...), extra...)
					s := &device.Spec{Op: conv, Attrs: as, Fused: c.steps, Outputs: c.outputs, OpInputs: len(opIn), In: types(in), Out: outTypes}
					if constW {
						s.Const = make([]bool, len(in))
						s.Const[1] = true
					}
					impl, err := New().Prepare(s)
					if err != nil {
						t.Fatal(err)
					}
					got := make([]device.Tensor, nOut)
					for i := range got {
						got[i] = newTensor(yt)
					}
					if err := impl(in, got); err != nil {
						t.Fatal(err)
					}
					for o := range got {
						g, wv := values(got[o]), values(want[o])
						for i := range wv {
							if math.Float64bits(g[i]) != math.Float64bits(wv[i]) {
								t.Fatalf("%d×%d %v %s %s (constant weights %v) result %d: y[%d] = %v, separate launches give %v", geo.k, geo.k, as, d, c.name, constW, o, i, g[i], wv[i])
							}
						}
					}
				}
			}
		}
	}
}

// A residual add and ReLU whose residual is the launch's own result (the same memory) runs
// as the chain after the convolution — the kernel's fused residual, which reads it beside the
// result as it stores, would refuse it — so it gives relu(y + y) as the two launches in place.
func TestConvEpilogueResidualInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	conv := ir.Lookup("conv")
	x := tensorOf(ir.F32, []int{1, 16, 5, 7}, randVals(r, 16*35, -1, 1))
	w := tensorOf(ir.F32, []int{24, 16, 1, 1}, randVals(r, 24*16, -1, 1))
	b := tensorOf(ir.F32, []int{24}, randVals(r, 24, -1, 1))
	yt := ir.T(ir.F32, 1, 24, 5, 7)
	steps := []device.FusedStep{
		{Op: ir.Lookup("add"), Args: []int{0, 1}, Type: yt},
		{Op: ir.Lookup("relu"), Args: []int{2}, Type: yt},
	}
	in := []ir.Type{x.Type, w.Type, b.Type, yt}
	impl, err := New().Prepare(&device.Spec{Op: conv, Fused: steps, OpInputs: 3, In: in, Out: []ir.Type{yt}})
	if err != nil {
		t.Fatal(err)
	}
	y := newTensor(yt)
	if err := impl([]device.Tensor{x, w, b, y}, []device.Tensor{y}); err != nil {
		t.Fatal(err)
	}
	want := newTensor(yt)
	plain, err := New().Prepare(&device.Spec{Op: conv, In: in[:3], Out: []ir.Type{yt}})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain([]device.Tensor{x, w, b}, []device.Tensor{want}); err != nil {
		t.Fatal(err)
	}
	wv, got := want.F32(), y.F32()
	for i := range wv {
		v := wv[i] + wv[i]
		if v < 0 || v != v {
			v = 0
		}
		if math.Float32bits(got[i]) != math.Float32bits(v) {
			t.Fatalf("y[%d] = %v, relu(y + y) = %v", i, got[i], v)
		}
	}
}

// A spec's name says what an epilogue launch runs (traces show it).
func TestEpilogueName(t *testing.T) {
	ty := ir.T(ir.F32, 1, 2, 3, 3)
	s := &device.Spec{Op: ir.Lookup("conv"), OpInputs: 2, Fused: []device.FusedStep{{Op: ir.Lookup("add"), Args: []int{1, 0}, Type: ty}, {Op: ir.Lookup("relu"), Args: []int{2}, Type: ty}}}
	if got := fmt.Sprint(s.Name()); got != "conv+add+relu" {
		t.Fatalf("name %q", got)
	}
}

// batch_norm with a ReLU (or add + ReLU) epilogue gives the bits of the two launches, f32,
// f64 and bf16 (through the widened kernels and the launches in place).
func TestBatchNormEpilogue(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	bn := ir.Lookup("batch_norm")
	for _, d := range []ir.DType{ir.F32, ir.F64, ir.BF16} {
		xs := []int{2, 5, 7, 9}
		x := tensorOf(d, xs, randVals(r, prod(xs), -2, 2))
		res := tensorOf(d, xs, randVals(r, prod(xs), -2, 2))
		params := []device.Tensor{x}
		for i := 0; i < 4; i++ {
			params = append(params, tensorOf(d, []int{5}, randVals(r, 5, 0.5, 1.5)))
		}
		yt := x.Type
		var tys []ir.Type
		for _, p := range params {
			tys = append(tys, p.Type)
		}
		for _, steps := range [][]device.FusedStep{
			{{Op: ir.Lookup("relu"), Args: []int{0}, Type: yt}},
			{{Op: ir.Lookup("add"), Args: []int{0, 1}, Type: yt}, {Op: ir.Lookup("relu"), Args: []int{2}, Type: yt}},
		} {
			extra := []device.Tensor{}
			if len(steps) == 2 {
				extra = append(extra, res)
			}
			y := newTensor(yt)
			opImpl, err := testDev.Prepare(&device.Spec{Op: bn, In: tys, Out: []ir.Type{yt}})
			if err != nil {
				t.Fatal(err)
			}
			if err := opImpl(params, []device.Tensor{y}); err != nil {
				t.Fatal(err)
			}
			chainIn := append([]device.Tensor{y}, extra...)
			chainTys := []ir.Type{yt}
			for range extra {
				chainTys = append(chainTys, yt)
			}
			chain, err := testDev.Prepare(&device.Spec{Fused: steps, In: chainTys, Out: []ir.Type{yt}})
			if err != nil {
				t.Fatal(err)
			}
			want := newTensor(yt)
			if err := chain(chainIn, []device.Tensor{want}); err != nil {
				t.Fatal(err)
			}
			in := append(append([]device.Tensor{}, params...), extra...)
			impl, err := testDev.Prepare(&device.Spec{Op: bn, Fused: steps, OpInputs: 5, In: append(append([]ir.Type{}, tys...), chainTys[1:]...), Out: []ir.Type{yt}})
			if err != nil {
				t.Fatal(err)
			}
			got := newTensor(yt)
			if err := impl(in, []device.Tensor{got}); err != nil {
				t.Fatal(err)
			}
			g, w := values(got), values(want)
			for i := range w {
				if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
					t.Fatalf("%s batch_norm+%d steps: y[%d] = %v, separate launches give %v", d, len(steps), i, g[i], w[i])
				}
			}
		}
	}
}
