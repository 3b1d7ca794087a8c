package compiler

import (
	"testing"

	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
)

func TestSmokeForward(t *testing.T) {
	res, err := Compile("../testdata/ir/mlp.ir", Options{ForwardOnly: true, Microbatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := res.Write(dir); err != nil {
		t.Fatal(err)
	}
	job, err := runtime.Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Init(1); err != nil {
		t.Fatal(err)
	}
	r, err := job.Step(runtime.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loss %v", r.Loss)
}
