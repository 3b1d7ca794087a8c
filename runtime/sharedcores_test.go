package runtime_test

import (
	"os"
	"path/filepath"
	"testing"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
)

// sharedRecorder is the CPU device, noting what the runtime last said about shared cores.
type sharedRecorder struct {
	*cpu.Device
	calls  int
	shared bool
}

func (r *sharedRecorder) SetSharedCores(shared bool) {
	r.calls++
	r.shared = shared
	r.Device.SetSharedCores(shared)
}

// Before each step the runtime tells the device whether several ranks share this process's
// cores: with two data-parallel ranks in one process yes, with one no (the CPU device's
// kernel helpers then stop spinning between regions, which slowed an 8-rank job by 25%).
func TestStepSaysWhetherRanksShareCores(t *testing.T) {
	src := filepath.Join(t.TempDir(), "convnet.ir")
	if err := os.WriteFile(src, []byte(convNet), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dp := range []int{1, 2} {
		dir := jobtest.Compile(t, src, compiler.Options{DP: dp, Microbatches: 1})
		rec := &sharedRecorder{Device: cpu.New()}
		job, err := runtime.Load(dir, rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := job.Init(3); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := job.Step(runtime.Options{Seed: 3}); err != nil {
				t.Fatal(err)
			}
		}
		if rec.calls != 2 || rec.shared != (dp > 1) {
			t.Fatalf("dp %d (%d ranks): %d calls, shared %v", dp, len(job.Ranks), rec.calls, rec.shared)
		}
	}
	cpu.New().SetSharedCores(false)
}
