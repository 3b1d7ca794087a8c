package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"ppc.dev/ppc/internal/cputime"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Benchmarks through the device's public API. Elementwise benchmarks report the bytes read and
// written per launch (GB/s); matmul and conv report GFLOP/s.

// benchKernel prepares spec and runs it b.N times on random inputs.
func benchKernel(b *testing.B, s *device.Spec, bytesPerOp int64, flops float64) {
	b.Helper()
	impl, err := testDev.Prepare(s)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	in := make([]device.Tensor, len(s.In))
	for i, t := range s.In {
		in[i] = newTensor(t)
		switch t.DType {
		case ir.F32:
			for j := range in[i].F32() {
				in[i].F32()[j] = float32(r.Float64()*2 - 1)
			}
		case ir.F64:
			for j := range in[i].F64() {
				in[i].F64()[j] = r.Float64()*2 - 1
			}
		}
	}
	out := make([]device.Tensor, len(s.Out))
	for i, t := range s.Out {
		out[i] = newTensor(t)
	}
	if err := impl(in, out); err != nil { // warm up (pools, page faults)
		b.Fatal(err)
	}
	b.SetBytes(bytesPerOp)
	cpu0 := cputime.Process()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := impl(in, out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// CPU time per launch (all threads): on a shared machine it varies less than wall time.
	b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if flops > 0 {
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
}

func opSpec(name string, as ir.Attrs, in ...ir.Type) *device.Spec {
	op := ir.MustLookup(name)
	out, err := op.Infer(in, as)
	if err != nil {
		panic(err)
	}
	return &device.Spec{Op: op, Attrs: as, In: in, Out: out}
}

type ewBench struct {
	name  string
	spec  *device.Spec
	bytes int64
}

// elementwiseBenchCases are the fused-engine workloads on f32 tensors of 1M and 16M elements
// (inputs uniform in [−1, 1]): same-shape and bias-row adds, gelu and gelu_grad (exact and
// tanh), and the chains
// x·y + bias and x·y + bias → gelu.
func elementwiseBenchCases() []ewBench {
	var cases []ewBench
	for _, n := range []int{1 << 20, 16 << 20} {
		rows, cols := n/1024, 1024
		x := ir.T(ir.F32, rows, cols)
		row := ir.T(ir.F32, cols)
		size := fmt.Sprintf("%dM", n>>20)
		add := ir.MustLookup("add")
		mul := ir.MustLookup("mul")
		gelu := ir.MustLookup("gelu")
		cases = append(cases,
			ewBench{"add_same/" + size, opSpec("add", nil, x, x), 12 * int64(n)},
			ewBench{"add_bias_row/" + size, opSpec("add", nil, x, row), 8 * int64(n)},
			ewBench{"gelu/" + size, opSpec("gelu", nil, x), 8 * int64(n)},
			ewBench{"gelu_grad/" + size, opSpec("gelu_grad", nil, x, x), 12 * int64(n)},
			ewBench{"gelu_tanh/" + size, opSpec("gelu", tanhGelu, x), 8 * int64(n)},
			ewBench{"gelu_tanh_grad/" + size, opSpec("gelu_grad", tanhGelu, x, x), 12 * int64(n)},
			ewBench{"chain_mul_add/" + size, &device.Spec{
				Fused: []device.FusedStep{
					{Op: mul, Args: []int{0, 1}, Type: x},
					{Op: add, Args: []int{3, 2}, Type: x},
				},
				In: []ir.Type{x, x, row}, Out: []ir.Type{x},
			}, 12 * int64(n)},
			ewBench{"chain_mul_add_gelu/" + size, &device.Spec{
				Fused: []device.FusedStep{
					{Op: mul, Args: []int{0, 1}, Type: x},
					{Op: add, Args: []int{3, 2}, Type: x},
					{Op: gelu, Args: []int{4}, Type: x},
				},
				In: []ir.Type{x, x, row}, Out: []ir.Type{x},
			}, 12 * int64(n)})
	}
	return cases
}

var tanhGelu = attrs("approximate", "tanh")

func BenchmarkElementwise(b *testing.B) {
	for _, c := range elementwiseBenchCases() {
		b.Run(c.name, func(b *testing.B) { benchKernel(b, c.spec, c.bytes, 0) })
	}
}

func BenchmarkMatMul(b *testing.B) {
	for _, n := range []int{256, 1024} {
		t := ir.T(ir.F32, n, n)
		b.Run(fmt.Sprintf("f32_%d", n), func(b *testing.B) {
			benchKernel(b, opSpec("matmul", nil, t, t), 12*int64(n*n), 2*float64(n)*float64(n)*float64(n))
		})
	}
}

// BenchmarkConv runs ResNet-50-like layers (batch 8): the 7×7/2 stem, a 3×3 layer of stage 2
// and a 1×1 bottleneck projection.
func BenchmarkConv(b *testing.B) {
	cases := []struct {
		name                 string
		n, c, hw, m, k, s, p int
	}{
		{"stem_7x7s2_3to64_224", 8, 3, 224, 64, 7, 2, 3},
		{"3x3_64to64_56", 8, 64, 56, 64, 3, 1, 1},
		{"1x1_256to64_56", 8, 256, 56, 64, 1, 1, 0},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			x := ir.T(ir.F32, c.n, c.c, c.hw, c.hw)
			w := ir.T(ir.F32, c.m, c.c, c.k, c.k)
			as := attrs("strides", []int{c.s, c.s}, "pads", []int{c.p, c.p, c.p, c.p})
			s := opSpec("conv", as, x, w, ir.T(ir.F32, c.m))
			o := s.Out[0].Shape
			flops := 2 * float64(o.NumElements()) * float64(c.c*c.k*c.k)
			benchKernel(b, s, x.Bytes()+s.Out[0].Bytes(), flops)
		})
	}
}

func BenchmarkNorms(b *testing.B) {
	x := ir.T(ir.F32, 8*512, 1024)
	g := ir.T(ir.F32, 1024)
	bytes := 2 * x.Bytes()
	b.Run("layer_norm_4096x1024", func(b *testing.B) { benchKernel(b, opSpec("layer_norm", nil, x, g, g), bytes, 0) })
	b.Run("layer_norm_grad_input_4096x1024", func(b *testing.B) {
		benchKernel(b, opSpec("layer_norm_grad_input", nil, x, x, g), 3*x.Bytes(), 0)
	})
	b.Run("softmax_4096x1024", func(b *testing.B) { benchKernel(b, opSpec("softmax", nil, x), bytes, 0) })
	b.Run("softmax_grad_4096x1024", func(b *testing.B) { benchKernel(b, opSpec("softmax_grad", nil, x, x), 3*x.Bytes(), 0) })
	// DenseNet-121's pre-activation batch norm at batch 1 (block 2's widest input, 480 × 28 × 28).
	xb, cb := ir.T(ir.F32, 1, 480, 28, 28), ir.T(ir.F32, 480)
	b.Run("batch_norm_480x28x28", func(b *testing.B) { benchKernel(b, opSpec("batch_norm", nil, xb, cb, cb, cb, cb), 2*xb.Bytes(), 0) })
}
