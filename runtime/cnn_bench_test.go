package runtime_test

import (
	"os"
	"path/filepath"
	"testing"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/cputime"
	"ppc.dev/ppc/internal/jobtest"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
)

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
				job, err := Load(dir, v.dev)
				if err != nil {
					b.Fatal(err)
				}
				if err := job.Init(1); err != nil {
					b.Fatal(err)
				}
				src, _, err := data.Open("input="+input, job.Plan, data.Options{})
				if err != nil {
					b.Fatal(err)
				}
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
