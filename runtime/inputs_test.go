package runtime_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/compiler"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/fault"
)

// TestLoaderChecksProgramChecksum: a program that still decodes and validates, but is not
// the one plan.json was written with, is refused.
func TestLoaderChecksProgramChecksum(t *testing.T) {
	dir := compileIR(t, "../testdata/ir/mlp.ir", compiler.Options{ForwardOnly: true, Microbatches: 1})
	bad := corrupt(t, dir, func(p *pb.Program) { p.Buffers[len(p.Buffers)-1].Name += "x" })
	// corrupt records the changed program's checksum; put back the plan.json it was not
	// compiled with.
	plan, _ := os.ReadFile(filepath.Join(dir, "plan.json"))
	if err := os.WriteFile(filepath.Join(bad, "plan.json"), plan, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad, cpu.New())
	var ie *fault.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "rank-00000.ppx: does not match plan.json") {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(dir, cpu.New()); err != nil {
		t.Fatalf("the untouched plan: %v", err)
	}
}

// TestResumeNeedsSeed: the seed picks the data of the remaining steps, so a checkpoint
// without one cannot continue a run.
func TestResumeNeedsSeed(t *testing.T) {
	dir := compileIR(t, "../testdata/ir/mlp.ir", compiler.Options{Microbatches: 1})
	job, err := Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	ck := t.TempDir()
	if err := WriteSafetensors(filepath.Join(ck, CheckpointFile), map[string]device.Tensor{}, map[string]string{"step": "2"}); err != nil {
		t.Fatal(err)
	}
	var ie *fault.InputError
	if _, err := job.Resume(ck, false); !errors.As(err, &ie) || !strings.Contains(err.Error(), "metadata has no valid seed") {
		t.Fatalf("got %v", err)
	}
}
