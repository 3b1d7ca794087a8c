package cuda

import (
	"testing"
	"time"

	"ppc.dev/ppc/compiler"
	kernels "ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime"
)

// nullDriver accepts every call and does nothing: device memory is addresses only, kernels
// never run. Over it, the CUDA device measures what the host spends queueing a step.
type nullDriver struct{ next uint64 }

func (n *nullDriver) MemAlloc(b uint64) (DevicePtr, error) {
	p := n.next + 0x10000
	n.next += (b + 255) &^ 255
	return DevicePtr(p), nil
}
func (*nullDriver) MemFree(DevicePtr) error                             { return nil }
func (*nullDriver) CopyHtoD(DevicePtr, []byte, Stream) error            { return nil }
func (*nullDriver) CopyDtoH([]byte, DevicePtr, Stream) error            { return nil }
func (*nullDriver) CopyDtoD(DevicePtr, DevicePtr, uint64, Stream) error { return nil }
func (*nullDriver) Memset(DevicePtr, uint64, Stream) error              { return nil }
func (*nullDriver) MemInfo() (uint64, uint64, error)                    { return 1 << 50, 1 << 50, nil }
func (*nullDriver) HostAlloc(b uint64) ([]byte, error)                  { return make([]byte, b), nil }
func (*nullDriver) HostFree([]byte) error                               { return nil }
func (*nullDriver) LoadModule([]byte) (Module, error)                   { return 1, nil }
func (*nullDriver) Function(Module, string) (Function, error)           { return 1, nil }
func (*nullDriver) Launch(Function, uint32, uint32, Stream, ...uint64) error {
	return nil
}
func (*nullDriver) StreamCreate() (Stream, error)   { return 1, nil }
func (*nullDriver) EventCreate() (Event, error)     { return 1, nil }
func (*nullDriver) EventRecord(Event, Stream) error { return nil }
func (*nullDriver) StreamWait(Stream, Event) error  { return nil }
func (*nullDriver) StreamSync(Stream) error         { return nil }
func (*nullDriver) EventSync(Event) error           { return nil }
func (*nullDriver) EventDestroy(Event) error        { return nil }
func (*nullDriver) Bound(call func() error) error   { return call() }
func (*nullDriver) Workspace() uint64               { return 0 }
func (*nullDriver) Matmul(kernels.GemmCall, uintptr, uintptr, uintptr, uintptr, uintptr, uintptr) error {
	return nil
}

// BenchmarkHostQueuesGPT2SmallStep: the host's side of a GPT-2-small training step (8 × 1024
// tokens, bf16, AdamW, one rank) on the CUDA device, over a driver that does nothing: every
// launch generated, ordered and queued, every cuBLASLt call planned, the runtime's loop. A
// GPU step cannot be faster than this, and as long as the GPU's own time is longer the host
// is not what limits it (the work is queued asynchronously).
func BenchmarkHostQueuesGPT2SmallStep(b *testing.B) {
	drv := &nullDriver{}
	dev, err := NewDevice(drv, drv, func(src string) ([]byte, error) { return nil, nil }, false)
	if err != nil {
		b.Fatal(err)
	}
	job, res := loadJob(b, dev, "../../testdata/models/gpt.ppm", compiler.Options{Load: compiler.LoadOptions{Preset: "small"}, Microbatches: 1, Precision: "bf16"}, 1)
	if _, err := job.Step(runtime.Options{Seed: 1}); err != nil {
		b.Fatal(err)
	}
	n := len(res.Output.Programs[0].Instrs)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := job.Step(runtime.Options{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
	per := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(per.Microseconds())/1e3, "ms/step")
	b.ReportMetric(float64(per.Nanoseconds())/float64(n)/1e3, "µs/instr")
	b.ReportMetric(float64(n), "instrs")
}
