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

// BenchmarkGEMM: ppc's matmul launch (PlanMatmul and the cuBLASLt call with its
// descriptors, as a step makes it) of n³ in bf16 with fp32 accumulation, in TFLOP/s, on
// random operands (zeros run faster than real data on these GPUs): to set beside
// torch.matmul's figure on the same GPU (bench/gpu.sh; the budget: at least 0.9×).
func BenchmarkGEMM(b *testing.B) {
	dev, _ := gpuDevice(b)
	for _, n := range []int64{4096, 8192} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			t := ir.Type{DType: ir.BF16, Shape: ir.Shape{int(n), int(n)}}
			impl, err := dev.Prepare(&device.Spec{Op: ir.MustLookup("matmul"), In: []ir.Type{t, t}, Out: []ir.Type{t}})
			if err != nil {
				b.Fatal(err)
			}
			mem, err := dev.Alloc(3 * t.Bytes())
			if err != nil {
				b.Fatal(err)
			}
			defer dev.Release(mem)
			x, y, z := mem.At(0, t), mem.At(t.Bytes(), t), mem.At(2*t.Bytes(), t)
			rng := rand.New(rand.NewPCG(1, 2))
			host := make([]byte, t.Bytes())
			for _, op := range []device.Tensor{x, y} {
				for i := 0; i < len(host); i += 2 {
					binary.LittleEndian.PutUint16(host[i:], uint16(math.Float32bits(2*rng.Float32()-1)>>16)) // bf16: the high half
				}
				if err := dev.Write(op, host); err != nil {
					b.Fatal(err)
				}
			}
			run := func() {
				if err := impl([]device.Tensor{x, y}, []device.Tensor{z}); err != nil {
					b.Fatal(err)
				}
			}
			for range 3 {
				run()
			}
			if err := dev.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run()
			}
			if err := dev.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(2*math.Pow(float64(n), 3)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
	}
}
