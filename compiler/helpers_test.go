package compiler

import (
	"testing"

	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
)

// initJob compiles model, loads the plan on the CPU device and initialises its parameters
// from seed: the start of every test that trains or evaluates a compiled plan.
func initJob(t testing.TB, model string, opts Options, seed uint64) (*Result, *runtime.Job) {
	t.Helper()
	res, err := Compile(model, opts)
	if err != nil {
		t.Fatalf("compile %s: %v", model, err)
	}
	job, err := runtime.New(res.Output, cpu.New())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := job.Init(seed); err != nil {
		t.Fatal(err)
	}
	return res, job
}
