package runtime_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/benchpeer"
	"ppc.dev/ppc/internal/cputime"
	"ppc.dev/ppc/internal/jobtest"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
)

// loadBench loads the plan in dir on dev with weights from seed 1, and opens its data from
// spec (--data's form; nil, synthetic data, where spec is empty).
func loadBench(b *testing.B, dir string, dev device.Device, spec string) (*Job, data.Source) {
	b.Helper()
	job, err := Load(dir, dev)
	if err != nil {
		b.Fatal(err)
	}
	if err := job.Init(1); err != nil {
		b.Fatal(err)
	}
	if spec == "" {
		return job, nil
	}
	src, _, err := data.Open(spec, job.Plan, data.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return job, src
}

// noConstants is the CPU device told that no operand is constant: every convolution packs
// its weights at every call, as before the device kept packed filters.
type noConstants struct{ device.Device }

func (d noConstants) Prepare(s *device.Spec) (device.Impl, error) {
	c := *s
	c.Const = nil
	return d.Device.Prepare(&c)
}

// BenchmarkCNNInference is bench/cpu.sh's batch-1 inference of resnet50, googlenet,
// densenet121 and alexnet (the ONNX files and input.npy it exports into bench/.peers; skipped
// where they are missing), a step at a time on GOMAXPROCS threads, with the convolutions'
// weights packed once (the device's constant operands) and at every call: ms of wall time
// and of CPU time (all threads) per step. Interleave the two with -count and compare
// medians on a shared machine.
func BenchmarkCNNInference(b *testing.B) {
	peers := filepath.Join("..", "bench", ".peers")
	for _, m := range []string{"resnet50", "googlenet", "densenet121", "alexnet"} {
		model, input := filepath.Join(peers, m+".onnx"), filepath.Join(peers, "input.npy")
		if _, err := os.Stat(model); err != nil {
			b.Logf("%s: %v (bash bench/cpu.sh exports it)", m, err)
			continue
		}
		dir := jobtest.Compile(b, model, compiler.Options{ForwardOnly: true, Microbatches: 1})
		for _, v := range []struct {
			name string
			dev  device.Device
		}{{"packed-once", cpu.New()}, {"packed-per-call", noConstants{cpu.New()}}} {
			b.Run(m+"/"+v.name, func(b *testing.B) {
				job, src := loadBench(b, dir, v.dev, "input="+input)
				step := func() {
					if _, err := job.Step(Options{Data: src}); err != nil {
						b.Fatal(err)
					}
				}
				step() // the filters are packed here
				cpu0 := cputime.Process()
				for b.Loop() {
					step()
				}
				b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/step")
				if cpu := cputime.Process() - cpu0; cpu > 0 {
					b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/step")
				}
			})
		}
	}
}

// BenchmarkPlansInterleaved runs the compiled plans in PPC_BENCH_PLANS (directories, comma
// separated; skipped when unset) a step each in turn, on inputs from PPC_BENCH_DATA (--data's
// form; synthetic without), and reports each plan's median ms per step (plan0-ms/step, …).
// On a shared machine, whose speed drifts by tens of percent within minutes, plans compared
// step by step see the same drift; separate processes taken in turn did not (DenseNet-121
// with and without batch-norm prologues: per-process medians 2% apart either way, and the
// same pair interleaved by step faster with prologues in nine runs out of nine, by 0.2–9%).
func BenchmarkPlansInterleaved(b *testing.B) {
	dirs := strings.Split(os.Getenv("PPC_BENCH_PLANS"), ",")
	if dirs[0] == "" {
		b.Skip("PPC_BENCH_PLANS is not set: the plan directories to compare")
	}
	type plan struct {
		job  *Job
		src  data.Source
		step []float64 // ms
	}
	plans := make([]*plan, len(dirs))
	for i, dir := range dirs {
		job, src := loadBench(b, dir, cpu.New(), os.Getenv("PPC_BENCH_DATA"))
		plans[i] = &plan{job: job, src: src}
	}
	run := func(p *plan) time.Duration {
		t0 := time.Now()
		if _, err := p.job.Step(Options{Seed: 1, Data: p.src}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for _, p := range plans {
		run(p) // packs constant weights
	}
	for b.Loop() {
		for _, p := range plans {
			p.step = append(p.step, float64(run(p).Microseconds())/1000)
		}
	}
	for i, p := range plans {
		b.ReportMetric(benchpeer.Median(p.step), fmt.Sprintf("plan%d-ms/step", i))
	}
}

// cnnPause is how long BenchmarkCNNAgainstOnnxruntime lets the machine settle before each
// side's step. onnxruntime's process keeps the cores busy for tens of milliseconds after a run
// returns: ppc's AlexNet step took 31 ms alone, 47 ms 10 ms after an onnxruntime run, 37 ms
// 40 ms after and 28 ms 100 ms after (ppc's helpers spin 0.5 ms).
const cnnPause = 100 * time.Millisecond

// cnnBlock is how many steps each side runs in a row after its pause: the first measures a
// step after idling, the rest the steady state (benchpeer.AlternateBlocks).
const cnnBlock = 4

// BenchmarkCNNAgainstOnnxruntime is bench/cpu.sh's CNN comparison a step at a time: for each
// of its models (PPC_BENCH_MODELS, space separated; default all four) it starts onnxruntime
// (`node PPC_BENCH_ORT MODEL.onnx GOMAXPROCS serve`, bench/cpu_ort.js; skipped when unset)
// beside ppc's plan in this process, and runs a ppc step and an onnxruntime run in turn,
// each side cnnBlock steps in a row after a pause (cnnPause) that leaves both cores to it.
// It reports both sides' steady-state medians (the steps after a block's first),
// onnxruntime's time ÷ ppc's (> 1: ppc faster), the medians of the blocks' first steps (after
// idling) and each side's fastest step: both sides measured in the same minutes, where runs
// of each taken in turn saw this machine's neighbours come and go.
func BenchmarkCNNAgainstOnnxruntime(b *testing.B) {
	script := os.Getenv("PPC_BENCH_ORT")
	if script == "" {
		b.Skip("PPC_BENCH_ORT is not set: bench/cpu_ort.js, with onnxruntime-node beside it (bash bench/cpu.sh installs it)")
	}
	peers := filepath.Join("..", "bench", ".peers")
	models := strings.Fields(os.Getenv("PPC_BENCH_MODELS"))
	if len(models) == 0 {
		models = []string{"resnet50", "googlenet", "densenet121", "alexnet"}
	}
	for _, m := range models {
		model, input := filepath.Join(peers, m+".onnx"), filepath.Join(peers, "input.npy")
		if _, err := os.Stat(model); err != nil {
			b.Logf("%s: %v (bash bench/cpu.sh exports it)", m, err)
			continue
		}
		dir := jobtest.Compile(b, model, compiler.Options{ForwardOnly: true, Microbatches: 1})
		b.Run(m, func(b *testing.B) {
			job, src := loadBench(b, dir, cpu.New(), "input="+input)
			cmd := exec.Command("node", script, model, strconv.Itoa(goruntime.GOMAXPROCS(0)), "serve")
			peer := benchpeer.Start(b, cmd)
			step := func() float64 {
				t0 := time.Now()
				if _, err := job.Step(Options{Data: src}); err != nil {
					b.Fatal(err)
				}
				return float64(time.Since(t0).Microseconds()) / 1000
			}
			step() // the filters are packed here
			ppcMs, ortMs := benchpeer.AlternateBlocks(b, cnnPause, cnnBlock, step, peer)
			p, o := benchpeer.Median(ppcMs.Steady), benchpeer.Median(ortMs.Steady)
			b.ReportMetric(p, "ppc-ms/step")
			b.ReportMetric(o, "ort-ms/step")
			b.ReportMetric(o/p, "ort/ppc")
			// Each side's first step after the pause (the machine idle), and its fastest
			// steady step: the least disturbed by the neighbours, whose interference a side's
			// scheduling may absorb better or worse.
			b.ReportMetric(benchpeer.Median(ppcMs.Idle), "ppc-idle-ms")
			b.ReportMetric(benchpeer.Median(ortMs.Idle), "ort-idle-ms")
			b.ReportMetric(ppcMs.Steady[0], "ppc-best-ms")
			b.ReportMetric(ortMs.Steady[0], "ort-best-ms")
		})
	}
}
