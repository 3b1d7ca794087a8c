package cpu

import (
	"math/rand/v2"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// A conv whose weights are marked constant computes the bits of the ordinary kernel, keeps
// them across launches, and after ForgetConstants, or given another weight buffer, reads the
// new weights — never a filter packed from bytes that changed. f32 and f64; bf16 falls back
// to the widened kernel.
func TestConvConstantWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	as := attrs("pads", []int{1, 1, 1, 1})
	for _, d := range []ir.DType{ir.F32, ir.F64, ir.BF16} {
		xs, ws := []int{1, 37, 9, 11}, []int{45, 37, 3, 3} // k = 333: two slabs; 45 rows: an edge sliver
		x := tensorOf(d, xs, randVals(r, prod(xs), -1, 1))
		w := tensorOf(d, ws, randVals(r, prod(ws), -1, 1))
		w2 := tensorOf(d, ws, randVals(r, prod(ws), -1, 1))
		b := tensorOf(d, []int{45}, randVals(r, 45, -1, 1))
		in := []device.Tensor{x, w, b}
		op := ir.Lookup("conv")
		types := []ir.Type{x.Type, w.Type, b.Type}
		out, err := op.Infer(types, as)
		if err != nil {
			t.Fatal(err)
		}
		dev := New()
		constImpl, err := dev.Prepare(&device.Spec{Op: op, Attrs: as, In: types, Out: out, Const: []bool{false, true, true}})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := dev.Prepare(&device.Spec{Op: op, Attrs: as, In: types, Out: out})
		if err != nil {
			t.Fatal(err)
		}
		run := func(impl device.Impl, in []device.Tensor) []float64 {
			y := newTensor(out[0])
			if err := impl(in, []device.Tensor{y}); err != nil {
				t.Fatal(err)
			}
			return values(y)
		}
		same := func(what string, got, want []float64) {
			t.Helper()
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s %s: y[%d] = %v, want %v", d, what, i, got[i], want[i])
				}
			}
		}
		want := run(plain, in)
		same("first launch", run(constImpl, in), want)
		same("second launch", run(constImpl, in), want)
		// The runtime rewrote the weights in place (a checkpoint loaded) and said so.
		saved := append([]byte(nil), w.Data...)
		copy(w.Data, w2.Data)
		dev.ForgetConstants()
		want2 := run(plain, in)
		same("after ForgetConstants", run(constImpl, in), want2)
		copy(w.Data, saved)
		dev.ForgetConstants()
		same("weights restored", run(constImpl, in), want)
		// Another buffer at the launch site.
		same("another weight buffer", run(constImpl, []device.Tensor{x, w2, b}), want2)
	}
}
