package compiler

import (
	"runtime"
	"testing"

	rt "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
)

// BenchmarkCompileGPT3 is the pipeline issue's budget: gpt.ppm --preset gpt3-175b, pp 8, 32
// micro-batches, 1F1B — forward, backward and optimizer — with all 8 rank programs written
// (under 2 s and 1 GiB). It reports the peak heap in use as peak-MiB.
func BenchmarkCompileGPT3(b *testing.B) {
	dir := b.TempDir()
	var peak uint64
	for b.Loop() {
		res, err := Compile("../testdata/models/gpt.ppm", Options{Load: LoadOptions{Preset: "gpt3-175b"}, PP: 8, Microbatches: 32, Schedule: "1f1b"})
		if err != nil {
			b.Fatal(err)
		}
		if err := res.Write(dir); err != nil {
			b.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
}

func benchmarkTrainStep(b *testing.B, opts Options) {
	res, err := Compile("../testdata/models/gpt.ppm", opts)
	if err != nil {
		b.Fatal(err)
	}
	job, err := rt.New(res.Output, cpu.New())
	if err != nil {
		b.Fatal(err)
	}
	if err := job.Init(1); err != nil {
		b.Fatal(err)
	}
	var tokens int
	for b.Loop() {
		r, err := job.Step(rt.Options{Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		tokens = r.Tokens
	}
	b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkTrainStepTiny: one training step of gpt.ppm --preset tiny (global batch 16 of 32
// tokens), one micro-batch, on CPU.
func BenchmarkTrainStepTiny(b *testing.B) {
	benchmarkTrainStep(b, Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 1})
}

// BenchmarkTrainStepSmall: one training step of GPT-2 124M (--preset small) at micro-batch 1:
// one sequence of 1024 tokens.
func BenchmarkTrainStepSmall(b *testing.B) {
	benchmarkTrainStep(b, Options{Load: LoadOptions{Preset: "small", Set: map[string]string{"batch": "1"}}, Microbatches: 1})
}
