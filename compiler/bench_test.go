package compiler

import (
	"fmt"
	"os"
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

// BenchmarkCompileGPT3DP is the data-parallel budget of the SPMD issue without tensor
// parallelism: gpt.ppm --preset gpt3-175b, pp 8, dp 16 (128 ranks), 32 micro-batches per
// replica (512 in the global batch), 1F1B. The 16 replicas of each pipeline rank share one
// program file, so it writes 8 programs. It reports the peak heap in use (peak-MiB) and the
// size of the plan directory (output-MiB).
func BenchmarkCompileGPT3DP(b *testing.B) {
	benchmarkCompileGPT3(b, Options{Load: LoadOptions{Preset: "gpt3-175b"}, PP: 8, DP: 16, Microbatches: 32, Schedule: "1f1b"}, 128)
}

// BenchmarkCompileGPT3Mesh is the budget: gpt3-175b on a 3-D mesh of 1024 ranks
// (pp 8 × dp 16 × tp 8, sequence parallel), 8 program files. The vocabulary is padded to
// 50304 (a multiple of tp, as Megatron pads it): 50257 rows do not split 8 ways.
func BenchmarkCompileGPT3Mesh(b *testing.B) {
	benchmarkCompileGPT3(b, Options{Load: LoadOptions{Preset: "gpt3-175b", Set: map[string]string{"vocab": "50304"}},
		PP: 8, DP: 16, TP: 8, SP: true, Microbatches: 32, Schedule: "1f1b"}, 1024)
}

func benchmarkCompileGPT3(b *testing.B, opts Options, world int) {
	dir := b.TempDir()
	var peak uint64
	for b.Loop() {
		res, err := Compile("../testdata/models/gpt.ppm", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := res.Write(dir); err != nil {
			b.Fatal(err)
		}
		if n := len(res.Output.Programs); n != 8 || res.Output.Plan.World != world {
			b.Fatalf("%d programs for %d ranks", n, res.Output.Plan.World)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	var size int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			size += info.Size()
		}
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
	b.ReportMetric(float64(size)/(1<<20), "output-MiB")
}

func benchmarkTrainStep(b *testing.B, opts Options) {
	benchmarkTrainStepOf(b, "../testdata/models/gpt.ppm", opts)
}

func benchmarkTrainStepOf(b *testing.B, model string, opts Options) {
	res := benchmarkSteps(b, model, opts)
	pr := res.Output.Plan.Programs[0]
	b.ReportMetric(float64(pr.ParamBytes)/1024, "param-KiB/rank")
	b.ReportMetric(float64(pr.ParamBytes+pr.GradBytes+pr.StateBytes+pr.LiveBytes)/1024, "live-KiB/rank")
}

// benchmarkSteps compiles model, times its training steps (tokens/s) and returns the compile.
func benchmarkSteps(b *testing.B, model string, opts Options) *Result {
	res, err := Compile(model, opts)
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
	return res
}

// BenchmarkTrainStepTinyZero: the tiny GPT's training step at dp 2 (two micro-batches per
// replica, in-process) under each ZeRO stage: throughput, and each rank's parameter bytes and
// live memory (parameters, gradients, optimizer state and the arena's live bytes).
func BenchmarkTrainStepTinyZero(b *testing.B) {
	for z := range 4 {
		b.Run(fmt.Sprintf("zero%d", z), func(b *testing.B) {
			benchmarkTrainStep(b, Options{Load: LoadOptions{Preset: "tiny"}, DP: 2, Zero: z, Microbatches: 2})
		})
	}
}

// BenchmarkTrainStepTinyMoEEP: the tiny mixture-of-experts model's training step at dp 4
// (one micro-batch per replica, dropless, in-process) with the experts replicated (ep 1) and
// sharded over 2 and 4 ranks: throughput, and each rank's parameter bytes and live memory —
// the expert shards' parameters, gradients and state /ep.
func BenchmarkTrainStepTinyMoEEP(b *testing.B) {
	for _, ep := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("ep%d", ep), func(b *testing.B) {
			benchmarkTrainStepOf(b, moePPM, Options{Load: LoadOptions{Set: map[string]string{"capacity_factor": "0"}}, DP: 4, EP: ep, Microbatches: 1})
		})
	}
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

// BenchmarkCPStep: one training step of llama.ppm at a 4,096-token sequence (batch 2) with
// context parallelism 1, 2 and 4, every cp rank in this process; it reports tokens/s and the
// peak bytes of one rank from the memory plan (peak-MiB/rank), which falls as 1/cp: each rank
// holds its share of the sequence and the ring's blocks in flight.
func BenchmarkCPStep(b *testing.B) {
	for _, cp := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("cp%d", cp), func(b *testing.B) {
			res := benchmarkSteps(b, "../testdata/models/llama.ppm", Options{Load: LoadOptions{Set: map[string]string{"seq": "4096", "batch": "2"}}, Microbatches: 1, CP: cp})
			b.ReportMetric(float64(res.Output.Plan.Programs[0].PeakBytes)/(1<<20), "peak-MiB/rank")
		})
	}
}
