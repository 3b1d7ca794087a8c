package runtime_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/passes"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/cpu"
)

// TestResumeFP16CheckpointWithoutAdamWCount: a checkpoint of an fp16 AdamW run saved before
// AdamW counted its own steps (no grad_scaler.optimizer_step) resumes with the count at the
// checkpoint's step — what that version's bias correction used — and says so.
func TestResumeFP16CheckpointWithoutAdamWCount(t *testing.T) {
	plan := jobtest.Compile(t, "../testdata/ir/amp.ir", compiler.Options{Precision: "fp16", Optimizer: "adamw{lr=1e-3}"})
	job, err := Load(plan, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	job.Init(1)
	for range 3 {
		if _, err := job.Step(Options{Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := job.Save(dir, 1); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, checkpoint.IndexFile)
	b, _ := os.ReadFile(index)
	var idx map[string]any
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	tensors := idx["tensors"].(map[string]any)
	if _, ok := tensors[passes.ScalerOptimizerStep]; !ok {
		t.Fatalf("the checkpoint has no %s", passes.ScalerOptimizerStep)
	}
	delete(tensors, passes.ScalerOptimizerStep)
	b, _ = json.Marshal(idx)
	os.WriteFile(index, b, 0o644)

	fresh, err := Load(plan, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	fresh.Init(1)
	r, err := fresh.Resume(dir, false)
	if err != nil || !strings.Contains(r.Warning, "predates AdamW's own step count under fp16 loss scaling (grad_scaler.optimizer_step): it starts at the checkpoint's step, 3") {
		t.Fatalf("resume: %+v %v", r, err)
	}
	for i, buf := range fresh.Ranks[0].Prog.Buffers {
		if buf.Name == passes.ScalerOptimizerStep {
			if got := fresh.Ranks[0].Bufs[i].F32()[0]; got != 3 {
				t.Errorf("%s = %v, want the checkpoint's step 3", buf.Name, got)
			}
			return
		}
	}
	t.Fatalf("the plan has no %s buffer", passes.ScalerOptimizerStep)
}
