package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/device"
)

// The GPU budget of the CUDA device (README, "CUDA device"): one command on a GPU machine,
// bench/gpu.sh, runs these and PyTorch eager's step of the same model (bench/gpt2_pytorch.py)
// and prints the ratio. Without a GPU they skip.

// gpuPeak is the dense bf16 peak of the GPU's profile (0: unknown), for MFU.
func gpuPeak(name string, memory int64) float64 {
	n := strings.ToLower(name)
	profile := ""
	switch {
	case strings.Contains(n, "h200"):
		profile = "h200"
	case strings.Contains(n, "h100"):
		profile = "h100-80gb"
	case strings.Contains(n, "a100") && memory > 50<<30:
		profile = "a100-80gb"
	case strings.Contains(n, "a100"):
		profile = "a100-40gb"
	case strings.Contains(n, "v100"):
		profile = "v100-16gb"
	}
	d, ok := passes.LookupDevice(profile)
	if !ok {
		return 0
	}
	return d.PeakBF16
}

// BenchmarkGPT2SmallStep: a training step of GPT-2 small (124M parameters, 8 sequences of
// 1024 tokens, bf16 mixed precision, AdamW) on GPU 0, with tokens/s and MFU (6·N + 12·L·d·T
// FLOPs per token, PaLM's count, over the GPU profile's dense bf16 peak).
func BenchmarkGPT2SmallStep(b *testing.B) {
	dev, gpu := gpuDevice(b)
	job, _ := loadJob(b, dev, "../../testdata/models/gpt.ppm", compiler.Options{Load: compiler.LoadOptions{Preset: "small"}, Microbatches: 1, Precision: "bf16"}, 1)
	if _, err := job.Step(runtime.Options{Seed: 1}); err != nil { // compiles and caches the kernels
		b.Fatal(err)
	}
	params, err := job.Buffers(pb.Role_PARAM)
	if err != nil {
		b.Fatal(err)
	}
	var n int
	for _, p := range params {
		n += p.Type.NumElements()
	}
	b.ResetTimer()
	var tokens int
	for i := 0; i < b.N; i++ {
		st, err := job.Step(runtime.Options{Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		tokens += st.Tokens
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(tokens)/sec, "tokens/s")
	b.ReportMetric(1000*sec/float64(b.N), "ms/step")
	flops := float64(6*n+12*12*768*1024) * float64(tokens) / sec
	if peak := gpuPeak(gpu.Name, gpu.Memory); peak > 0 {
		b.ReportMetric(100*flops/peak, "MFU%")
	}
	b.ReportMetric(flops/1e12, "TFLOP/s")
}

// benchSite times one launch site on GPU 0 over random bf16 operands (zeros run faster than
// real data on these GPUs), after three warm-up launches, and reports the rate: flops (0:
// none) as TFLOP/s, and the operands' and results' bytes, each moved once, as GB/s.
func benchSite(b *testing.B, spec *device.Spec, flops float64) {
	dev, _ := gpuDevice(b)
	impl, err := dev.Prepare(spec)
	if err != nil {
		b.Fatal(err)
	}
	var in, out []device.Tensor
	var bytes int64
	rng := rand.New(rand.NewPCG(1, 2))
	for i, t := range append(append([]ir.Type{}, spec.In...), spec.Out...) {
		mem, err := dev.Alloc(t.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		defer dev.Release(mem)
		bytes += t.Bytes()
		if i >= len(spec.In) {
			out = append(out, mem.At(0, t))
			continue
		}
		host := make([]byte, t.Bytes())
		for j := 0; j+1 < len(host); j += 2 {
			binary.LittleEndian.PutUint16(host[j:], uint16(math.Float32bits(2*rng.Float32()-1)>>16)) // bf16: the high half
		}
		if err := dev.Write(mem.At(0, t), host); err != nil {
			b.Fatal(err)
		}
		in = append(in, mem.At(0, t))
	}
	for range 3 {
		if err := impl(in, out); err != nil {
			b.Fatal(err)
		}
	}
	if err := dev.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := impl(in, out); err != nil {
			b.Fatal(err)
		}
	}
	if err := dev.Sync(); err != nil {
		b.Fatal(err)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	if flops > 0 {
		b.ReportMetric(flops/sec/1e12, "TFLOP/s")
	}
	b.ReportMetric(float64(bytes)/sec/1e9, "GB/s")
}

// BenchmarkGEMM: ppc's matmul launch (PlanMatmul and the cuBLASLt call with its
// descriptors, as a step makes it) in bf16 with fp32 accumulation, in TFLOP/s: n³ at 4096
// and 8192, and GPT-2's tied head (8192 tokens × 768 → 50,257 logits, whose odd row length
// rules out the aligned kernels), to set beside torch.matmul's figures on the same GPU
// (bench/gpu.sh; the budget: at least 0.9×).
func BenchmarkGEMM(b *testing.B) {
	bf := func(s ...int) ir.Type { return ir.Type{DType: ir.BF16, Shape: s} }
	for _, n := range []int{4096, 8192} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			benchSite(b, &device.Spec{Op: ir.MustLookup("matmul"), In: []ir.Type{bf(n, n), bf(n, n)}, Out: []ir.Type{bf(n, n)}}, 2*math.Pow(float64(n), 3))
		})
	}
	// GPT-2 small's tied head as the step runs it, on [8, 1024, ·] activations: the logits,
	// their gradient with respect to the activations, and the head's gradient (a product per
	// sequence, summed after). Run 6 timed only the first, as one 8192-row GEMM, while the
	// step's own two gradients ran on cuBLASLt's 2-byte kernels at 6.1 ms each.
	tb := ir.Attrs{{Name: "transpose_b", Value: ir.BoolAttr(true)}}
	ta := ir.Attrs{{Name: "transpose_a", Value: ir.BoolAttr(true)}}
	mm := ir.MustLookup("matmul")
	for _, c := range []struct {
		name  string
		attrs ir.Attrs
		in    []ir.Type
		out   ir.Type
	}{
		{"head", tb, []ir.Type{bf(8, 1024, 768), bf(50257, 768)}, bf(8, 1024, 50257)},
		{"head_dx", nil, []ir.Type{bf(8, 1024, 50257), bf(50257, 768)}, bf(8, 1024, 768)},
		{"head_dw", ta, []ir.Type{bf(8, 1024, 50257), bf(8, 1024, 768)}, bf(8, 50257, 768)},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchSite(b, &device.Spec{Op: mm, Attrs: c.attrs, In: c.in, Out: []ir.Type{c.out}}, 2*8192*768*50257)
		})
	}
}

// BenchmarkSoftmax: GPT-2 small's attention softmax, [8, 12, 1024, 1024] in bf16 (a row
// kernel), in GB/s of its operand read and result written once.
func BenchmarkSoftmax(b *testing.B) {
	t := ir.Type{DType: ir.BF16, Shape: ir.Shape{8, 12, 1024, 1024}}
	benchSite(b, &device.Spec{Op: ir.MustLookup("softmax"), In: []ir.Type{t}, Out: []ir.Type{t}}, 0)
}

// BenchmarkAttention: the fused attention's forward and backward (kernels/cuda's tile
// kernels) at GPT-2 small's head sizes, 12 heads of 64, causal, bf16, over 8192 tokens per
// call (8192/S sequences of S) for S = 1024, 4096 and 8192, in ms and TFLOP/s with
// FlashAttention-2's count (4·S²·d per head forward, 2.5 times that backward, halved for
// causal masking), to set beside PyTorch's SDPA on the same GPU (bench/gpu.sh prints the
// ratio).
func BenchmarkAttention(b *testing.B) {
	for _, s := range []int{1024, 4096, 8192} {
		b.Run(fmt.Sprint(s), func(b *testing.B) {
			dev, _ := gpuDevice(b)
			batch, heads, d := max(8192/s, 1), 12, 64
			bf := ir.Type{DType: ir.BF16, Shape: ir.Shape{batch, heads, s, d}}
			lse := ir.Type{DType: ir.F32, Shape: ir.Shape{batch, heads, s, 1}}
			at := ir.Attrs{{Name: "causal", Value: ir.BoolAttr(true)}}
			fwd, err := dev.Prepare(&device.Spec{Op: ir.MustLookup("attention"), Attrs: at, In: []ir.Type{bf, bf, bf}, Out: []ir.Type{bf, lse}})
			if err != nil {
				b.Fatal(err)
			}
			bwd, err := dev.Prepare(&device.Spec{Op: ir.MustLookup("attention_grad"), Attrs: at, In: []ir.Type{bf, bf, bf, bf, lse, bf}, Out: []ir.Type{bf, bf, bf}})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			alloc := func(t ir.Type, random bool) device.Tensor {
				mem, err := dev.Alloc(t.Bytes())
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { dev.Release(mem) })
				x := mem.At(0, t)
				if random {
					host := make([]byte, t.Bytes())
					for j := 0; j+1 < len(host); j += 2 {
						binary.LittleEndian.PutUint16(host[j:], uint16(math.Float32bits(2*rng.Float32()-1)>>16))
					}
					if err := dev.Write(x, host); err != nil {
						b.Fatal(err)
					}
				}
				return x
			}
			q, k, v, do := alloc(bf, true), alloc(bf, true), alloc(bf, true), alloc(bf, true)
			o, l, dq, dk, dv := alloc(bf, false), alloc(lse, false), alloc(bf, false), alloc(bf, false), alloc(bf, false)
			step := func() {
				if err := fwd([]device.Tensor{q, k, v}, []device.Tensor{o, l}); err != nil {
					b.Fatal(err)
				}
				if err := bwd([]device.Tensor{q, k, v, o, l, do}, []device.Tensor{dq, dk, dv}); err != nil {
					b.Fatal(err)
				}
			}
			for range 3 {
				step()
			}
			if err := dev.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			if err := dev.Sync(); err != nil {
				b.Fatal(err)
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(sec*1e3, "ms")
			b.ReportMetric(3.5*4*float64(batch*heads*s*s*d)/2/sec/1e12, "TFLOP/s")
		})
	}
}
