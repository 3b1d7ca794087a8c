package compiler

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
)

func writeModel(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const noLossIR = "func @forward(%x: f32[4,3] {input}, %w: f32[3,2] {init = \"normal(0.1)\", param}) -> (f32[4,2]) {\n  %0 = matmul %x, %w : f32[4,2]\n  return %0\n}\n"

// TestCompileOptionErrors: options that cannot apply are reported before any pass runs, so
// no reproducer is written for what is a mistake on the command line.
func TestCompileOptionErrors(t *testing.T) {
	noLoss := writeModel(t, "noloss.ir", noLossIR)
	empty := writeModel(t, "empty.ir", "")
	intOut := writeModel(t, "int.ir", "func @forward(%x: f32[4] {input}) -> (i64[4]) {\n  %0 = cast %x {to = i64} : i64[4]\n  return %0\n}\n")
	for _, c := range []struct {
		model string
		opts  Options
		want  string
	}{
		{"../testdata/ir/mlp.ir", Options{Optimizer: "sgd{lr=abc}"}, `--optimizer "sgd{lr=abc}": option lr="abc" is not a finite number`},
		{"../testdata/ir/mlp.ir", Options{Optimizer: "lamb"}, `--optimizer "lamb": unknown kind "lamb"`},
		{"../testdata/ir/mlp.ir", Options{Optimizer: "sgd{bogus=1}"}, `no option "bogus"`},
		{"../testdata/ir/mlp.ir", Options{Optimizer: "sgd{kind=adamw}"}, `--optimizer "sgd{kind=adamw}": option kind=adamw: sgd{…} already names the kind`},
		{"../testdata/ir/mlp.ir", Options{Optimizer: "adamw{lr=0.1,lr=0.2}"}, `--optimizer "adamw{lr=0.1,lr=0.2}": option lr given twice`},
		{"../testdata/ir/mlp.ir", Options{Optimizer: "sgd{lr=1e39}"}, `--optimizer "sgd{lr=1e39}": option lr=1e39 is infinite in f32`},
		{"../testdata/ir/mlp.ir", Options{Loss: "mse"}, "the model computes its own loss"},
		{noLoss, Options{LossOutput: 1}, "--loss-output 1: the model has 1 output(s)"},
		{noLoss, Options{LossOutput: -1}, "--loss-output -1"},
		{empty, Options{}, "empty.ir: the model has no func @forward"},
		{intOut, Options{}, "int.ir: output 0 is i64[4]; a loss needs a floating-point output"},
	} {
		repro := t.TempDir()
		c.opts.Passes.ReproDir = repro
		_, err := Compile(c.model, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: got %v, want %q", c.model, c.opts, err, c.want)
		}
		if files, _ := os.ReadDir(repro); len(files) > 0 {
			t.Errorf("%s %+v: wrote a reproducer for an option error", c.model, c.opts)
		}
	}
	// Forward-only compiles ignore the training options' defaults.
	if _, err := Compile("../testdata/ir/mlp.ir", Options{ForwardOnly: true}); err != nil {
		t.Fatal(err)
	}
}

// TestCompileCSVDefaults: a CSV schedule gives the micro-batch count when none is set, and
// names the schedule in the plan.
func TestCompileCSVDefaults(t *testing.T) {
	csv := writeModel(t, "two.csv", "0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n")
	res, err := Compile("../testdata/models/mlp.ppm", Options{Schedule: csv})
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Output.Plan; p.Microbatches != 4 || p.World != 2 || p.Schedule.Name != "two.csv" {
		t.Fatalf("plan: %d micro-batches, %d ranks, schedule %q", p.Microbatches, p.World, p.Schedule.Name)
	}
	if _, err := Compile("../testdata/models/mlp.ppm", Options{Schedule: csv, Microbatches: 2}); err == nil || !strings.Contains(err.Error(), "two.csv has 4 micro-batches, --microbatches is 2") {
		t.Fatalf("explicit mismatch: %v", err)
	}
	if _, err := Compile("../testdata/models/mlp.ppm", Options{Schedule: csv, VirtualStages: 2}); err == nil || !strings.Contains(err.Error(), "two.csv places 1 stage(s) on each rank, --virtual-stages is 2") {
		t.Fatalf("virtual stages: %v", err)
	}
}

// TestWriteChecksumsAndCleansUp: plan.json records each program's SHA-256, and writing a plan
// with fewer ranks into a directory removes the old extra programs (and nothing else).
func TestWriteChecksumsAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	two, err := Compile("../testdata/ir/mlp.ir", Options{PP: 2, Microbatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := two.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, r := range two.Output.Plan.Programs {
		if len(r.ProgramSHA256) != 64 {
			t.Fatalf("%s: checksum %q", r.File, r.ProgramSHA256)
		}
	}
	keep := filepath.Join(dir, "rank-notes.ppx")
	os.WriteFile(keep, []byte("mine"), 0o644)
	one, err := Compile("../testdata/ir/mlp.ir", Options{Microbatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := one.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "rank-00001.ppx")); err == nil {
		t.Fatal("rank-00001.ppx of the two-rank plan is still there")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("removed a file that is not a program: %v", err)
	}
}

// TestCompileIsDeterministic: compiling the same job twice writes the same bytes (a map's
// order once decided the order of each function's constant buffers).
func TestCompileIsDeterministic(t *testing.T) {
	opts := Options{Load: LoadOptions{Preset: "tiny"}, PP: 2, DP: 2, Microbatches: 2, Optimizer: "adamw{lr=3e-4}", Precision: "fp16"}
	var first []string
	for range 3 {
		res, err := Compile("../testdata/models/gpt.ppm", opts)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := res.Write(dir); err != nil {
			t.Fatal(err)
		}
		var sums []string
		for _, p := range res.Output.Plan.Programs {
			sums = append(sums, p.ProgramSHA256)
		}
		if first == nil {
			first = sums
		} else if !slices.Equal(sums, first) {
			t.Fatalf("program checksums %v, then %v", first, sums)
		}
	}
}

// TestInferScalarInputAndRange: a model input without a batch dim runs (it used to crash the
// data generator), and a given input outside the model's range names the file.
func TestInferScalarInputAndRange(t *testing.T) {
	scalar := writeModel(t, "scalar.ir", "func @forward(%x: f32[] {input}, %w: f32[] {init = \"ones\", param}) -> (f32[] {loss}) {\n  %0 = mul %x, %w : f32[]\n  return %0\n}\n")
	outs, gen, err := Infer(scalar, LoadOptions{}, InferMesh{}, nil, 1)
	if err != nil || len(outs) != 1 || len(gen) != 1 {
		t.Fatalf("scalar input: %v %v %v", outs, gen, err)
	}
	labels := device.Tensor{Type: ir.Type{DType: ir.I64, Shape: ir.Shape{16}}, Data: make([]byte, 8*16)}
	labels.I64()[5] = 10
	path := filepath.Join(t.TempDir(), "labels.npy")
	if err := data.WriteNpy(path, labels); err != nil {
		t.Fatal(err)
	}
	_, _, err = Infer("../testdata/ir/mlp.ir", LoadOptions{}, InferMesh{}, map[string]string{"labels": path}, 1)
	if err == nil || !strings.Contains(err.Error(), `input "labels": `+path+` holds 10 at element 5, outside the model's range [0, 10)`) {
		t.Fatalf("label out of range: %v", err)
	}
}
