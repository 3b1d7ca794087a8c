package cpu

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// TestLowPrecisionIsF32Rounded: a launch with bf16 or f16 operands gives, bit for bit, the
// op's f32 kernel on the same values with its float results rounded to their dtypes — for
// kernels that take f32 and f64 only (run widened: matmul, norms, softmax, reductions, losses,
// gradient kernels) and for those that move elements of any size (run as they are). Each case
// runs twice on new values, so a widened copy left over from the first launch (the scratch
// is reused) would show; the garbage runOp writes into outputs first catches an element the
// rounding skips.
func TestLowPrecisionIsF32Rounded(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	labels := func(shape []int, n int) device.Tensor {
		v := make([]int64, prod(shape))
		for i := range v {
			v[i] = int64(r.IntN(n))
		}
		return i64T(shape, v...)
	}
	type operand struct {
		shape []int
		int   func() device.Tensor // an integer operand (indices, labels), kept as is
	}
	f := func(shape ...int) operand { return operand{shape: shape} }
	cases := []struct {
		op  string
		as  ir.Attrs
		ops []operand
	}{
		{"matmul", nil, []operand{f(3, 5, 7), f(7, 4)}},
		{"matmul", attrs("transpose_b", true), []operand{f(2, 6, 8), f(2, 5, 8), f(5)}},
		{"softmax", nil, []operand{f(4, 9)}},
		{"log_softmax", attrs("axis", 0), []operand{f(4, 9)}},
		{"layer_norm", attrs("eps", 1e-5), []operand{f(3, 16), f(16), f(16)}},
		{"rms_norm", nil, []operand{f(3, 16), f(16)}},
		{"reduce_sum", attrs("axes", []int{1}), []operand{f(3, 50)}},
		{"reduce_mean", nil, []operand{f(3, 50)}},
		{"reduce_max", attrs("axes", []int{0}), []operand{f(3, 50)}},
		{"cross_entropy", nil, []operand{f(6, 10), {int: func() device.Tensor { return labels([]int{6}, 10) }}}},
		{"mse", nil, []operand{f(4, 5), f(4, 5)}},
		{"softmax_grad", nil, []operand{f(4, 9), f(4, 9)}},
		{"layer_norm_grad_input", attrs("eps", 1e-5), []operand{f(3, 16), f(3, 16), f(16)}},
		{"slice_grad", attrs("shape", []int{6, 4}, "starts", []int{1}, "ends", []int{5}), []operand{f(4, 4)}},
		{"gather", nil, []operand{f(10, 4), {int: func() device.Tensor { return labels([]int{3, 2}, 10) }}}},
		{"transpose", attrs("perm", []int{1, 0, 2}), []operand{f(2, 3, 4)}},
		{"concat", attrs("axis", 1), []operand{f(2, 3), f(2, 5)}},
		{"reshape", attrs("shape", []int{6, 2}), []operand{f(3, 4)}},
	}
	for _, dt := range []ir.DType{ir.BF16, ir.F16} {
		for _, c := range cases {
			for round := 0; round < 2; round++ {
				var low, wide []device.Tensor
				for _, o := range c.ops {
					if o.int != nil {
						x := o.int()
						low, wide = append(low, x), append(wide, x)
						continue
					}
					vals := randVals(r, prod(o.shape), -3, 3)
					x := tensorOf(dt, o.shape, vals) // the values dt holds
					low = append(low, x)
					wide = append(wide, tensorOf(ir.F32, o.shape, values(x)))
				}
				got := runOp(t, c.op, c.as, low...)
				want := runOp(t, c.op, c.as, wide...)
				for i := range got {
					g, w := values(got[i]), values(want[i])
					if got[i].Type.DType == ir.F32 { // a loss: f32 in, f32 out
						w = values(tensorOf(ir.F32, want[i].Type.Shape, w))
					} else if got[i].Type.DType.IsFloat() {
						w = values(tensorOf(got[i].Type.DType, want[i].Type.Shape, w))
					}
					for j := range g {
						if math.Float64bits(g[j]) != math.Float64bits(w[j]) && !(math.IsNaN(g[j]) && math.IsNaN(w[j])) {
							t.Fatalf("%s %v in %s (run %d): result %d[%d] = %v, want the f32 kernel's value rounded, %v", c.op, c.as, dt, round, i, j, g[j], w[j])
						}
					}
				}
			}
		}
	}
}

// TestLowPrecisionConcurrent: one prepared widened launch called from several goroutines
// (the Impl contract allows it on distinct tensors) gives each caller its own result.
func TestLowPrecisionConcurrent(t *testing.T) {
	impl, out, err := prepare("softmax", nil, ir.T(ir.BF16, 64, 33))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		x := tensorOf(ir.BF16, []int{64, 33}, randVals(r, 64*33, -4, 4))
		want := run1(t, "softmax", nil, x)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				y := newTensor(out[0])
				if err := impl([]device.Tensor{x}, []device.Tensor{y}); err != nil {
					t.Error(err)
					return
				}
				for j, v := range values(y) {
					if v != want[j] {
						t.Errorf("goroutine %d, call %d: element %d = %v, want %v", g, i, j, v, want[j])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
