package cuda_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

// gemmReference runs GemmCalls on float64 slices (cudatest.Gemm).
func gemmReference(calls []cuda.GemmCall, a, b, bias, d []float64) {
	f64 := func(x []float64) device.Tensor {
		if len(x) == 0 {
			return device.Tensor{}
		}
		return device.Tensor{Type: ir.Type{DType: ir.F64, Shape: ir.Shape{len(x)}}, Data: unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 8*len(x))}
	}
	for _, c := range calls {
		cudatest.Gemm(c, f64(a), f64(b), f64(bias), f64(d))
	}
}

// TestPlanMatmulMatchesCPU: the cuBLASLt calls PlanMatmul makes for numpy matmuls — plain,
// transposed, batched, with either operand's batch broadcast (one strided call) or both
// partly broadcast (one call per leading batch index), rank-1 operands, a bias epilogue —
// computed with cuBLASLt's column-major semantics, give the CPU device's matmul.
func TestPlanMatmulMatchesCPU(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type mm struct {
		a, b   []int
		ta, tb bool
		bias   bool
		calls  int
		batch  int64 // of the first call; 0: not checked
	}
	for _, c := range []mm{
		{a: []int{5, 3}, b: []int{3, 7}, calls: 1},
		{a: []int{3, 5}, b: []int{3, 7}, ta: true, calls: 1},
		{a: []int{5, 3}, b: []int{7, 3}, tb: true, calls: 1},
		{a: []int{3, 5}, b: []int{7, 3}, ta: true, tb: true, bias: true, calls: 1},
		{a: []int{4, 5, 3}, b: []int{4, 3, 7}, calls: 1},
		{a: []int{2, 4, 5, 3}, b: []int{3, 7}, bias: true, calls: 1, batch: 1}, // the batch folded into M: one GEMM of 40 rows
		{a: []int{2, 5, 3}, b: []int{7, 3}, tb: true, calls: 1, batch: 1},
		{a: []int{2, 3, 5}, b: []int{3, 7}, ta: true, calls: 1, batch: 2}, // transposed rows do not stack
		{a: []int{5, 3}, b: []int{2, 4, 3, 7}, tb: false, calls: 1},
		{a: []int{2, 1, 5, 3}, b: []int{1, 4, 3, 7}, calls: 2},
		{a: []int{2, 4, 5, 3}, b: []int{4, 3, 7}, calls: 2}, // B repeats every 4 matrices: no single stride
		{a: []int{2, 4, 5, 3}, b: []int{2, 1, 7, 3}, tb: true, calls: 2},
		{a: []int{3}, b: []int{3, 7}, calls: 1},
		{a: []int{2, 5, 3}, b: []int{3}, calls: 1},
	} {
		at, bt := ty(ir.F32, c.a...), ty(ir.F32, c.b...)
		attrs := ir.Attrs{}
		if c.ta {
			attrs = attrs.Set("transpose_a", ir.BoolAttr(true))
		}
		if c.tb {
			attrs = attrs.Set("transpose_b", ir.BoolAttr(true))
		}
		in := []ir.Type{at, bt}
		outs, err := ir.MustLookup("matmul").Infer(in[:2], attrs)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		o := outs[0]
		if c.bias {
			in = append(in, ty(ir.F32, o.Shape[len(o.Shape)-1]))
		}
		spec := &device.Spec{Op: ir.MustLookup("matmul"), Attrs: attrs, In: in, Out: []ir.Type{o}}
		calls, err := cuda.PlanMatmul(spec, false)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if len(calls) != c.calls || calls[0].Compute != "CUBLAS_COMPUTE_32F" || calls[0].Bias != c.bias || c.batch != 0 && calls[0].Batch != c.batch {
			t.Errorf("%+v: %d calls (%+v), want %d", c, len(calls), calls[0], c.calls)
		}
		var tensors []device.Tensor
		var f64s [][]float64
		for _, tt := range in {
			x := cudatest.RandomTensor(rng, tt, false, 0)
			tensors = append(tensors, x)
			v := make([]float64, tt.NumElements())
			for i := range v {
				v[i] = float64(x.F32()[i])
			}
			f64s = append(f64s, v)
		}
		want := device.Tensor{Type: o, Data: make([]byte, o.Bytes())}
		impl, err := cpu.New().Prepare(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := impl(tensors, []device.Tensor{want}); err != nil {
			t.Fatal(err)
		}
		got := make([]float64, o.NumElements())
		var bias []float64
		if c.bias {
			bias = f64s[2]
		}
		gemmReference(calls, f64s[1], f64s[0], bias, got)
		for i, g := range got {
			w := float64(want.F32()[i])
			if math.Abs(g-w) > 1e-5*(1+math.Abs(w)) {
				t.Errorf("%+v: element %d: cuBLASLt plan %v, CPU device %v (calls %+v)", c, i, g, w, calls)
				break
			}
		}
	}
}

// TestPlanMatmulCompute: TF32 only when asked and only for f32; fp32 accumulation for the
// 16-bit dtypes; a bias that is not a vector over the last dim is refused.
func TestPlanMatmulCompute(t *testing.T) {
	spec := func(d ir.DType, bias ...int) *device.Spec {
		in := []ir.Type{ty(d, 4, 3), ty(d, 3, 5)}
		if bias != nil {
			in = append(in, ty(d, bias...))
		}
		return &device.Spec{Op: ir.MustLookup("matmul"), In: in, Out: []ir.Type{ty(d, 4, 5)}}
	}
	for _, c := range []struct {
		d    ir.DType
		tf32 bool
		want string
	}{{ir.F32, false, "CUBLAS_COMPUTE_32F"}, {ir.F32, true, "CUBLAS_COMPUTE_32F_FAST_TF32"}, {ir.BF16, true, "CUBLAS_COMPUTE_32F"},
		{ir.F16, false, "CUBLAS_COMPUTE_32F"}, {ir.F64, true, "CUBLAS_COMPUTE_64F"}} {
		calls, err := cuda.PlanMatmul(spec(c.d), c.tf32)
		if err != nil || calls[0].Compute != c.want {
			t.Errorf("%s tf32=%v: %+v %v, want %s", c.d, c.tf32, calls, err, c.want)
		}
	}
	if _, err := cuda.PlanMatmul(spec(ir.F32, 4, 5), false); err == nil {
		t.Errorf("a [4,5] bias was taken as an epilogue")
	}
	if _, err := cuda.PlanMatmul(spec(ir.I64), false); err == nil {
		t.Errorf("an i64 matmul was planned")
	}
}
