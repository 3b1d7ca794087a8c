package runtime_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/ir"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
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
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "rank-00000.ppx: does not match plan.json") {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(dir, cpu.New()); err != nil {
		t.Fatalf("the untouched plan: %v", err)
	}
}

func f32Tensor(vals ...float32) device.Tensor {
	t := device.Tensor{Type: ir.Type{DType: ir.F32, Shape: ir.Shape{len(vals)}}, Data: make([]byte, 4*len(vals))}
	copy(t.F32(), vals)
	return t
}

// TestReadNpySize: the .npy reader under ReadNpy pads short files with zeros; ReadNpy must
// refuse a file whose size does not match its header.
func TestReadNpySize(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.npy")
	if err := WriteNpy(good, f32Tensor(1, 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(good)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"short.npy", data[:len(data)-3], "truncated: shape [4] needs 16 data bytes, the file holds 13"},
		{"long.npy", append(append([]byte{}, data...), 0, 0, 0, 0), "4 bytes follow the data of shape [4]"},
	} {
		p := filepath.Join(dir, c.name)
		os.WriteFile(p, c.data, 0o644)
		if _, err := ReadNpy(p); err == nil || !strings.Contains(err.Error(), p+": "+c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if tt, err := ReadNpy(good); err != nil || tt.F32()[3] != 4 {
		t.Fatalf("good file: %v %v", tt, err)
	}
}

// TestOpenDataChecksValues: bad values in --data files are reported when the data is opened,
// with the file and the sample, not at the step that first draws them.
func TestOpenDataChecksValues(t *testing.T) {
	dir := t.TempDir()
	plan := &codegen.Plan{Microbatches: 1, Inputs: []codegen.Input{
		{Name: "x", DType: "f32", MicrobatchShape: []int{2}},
		{Name: "y", DType: "i64", MicrobatchShape: []int{2}, Range: []int{0, 3}, Label: true},
	}}
	write := func(name string, vals ...float32) string {
		p := filepath.Join(dir, name)
		if err := WriteNpy(p, f32Tensor(vals...)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	x := write("x.npy", 0.5, 0.25, 1, 2)
	for _, c := range []struct{ y, want string }{
		{write("big.npy", 0, 1, 2, 3), "big.npy: sample 3: value 3 is outside [0, 3), the range of input \"y\""},
		{write("frac.npy", 0, 0.5, 1, 1), "frac.npy: sample 1: value 0.5 is not an integer"},
		{write("nan.npy", float32(math.NaN()), 0, 1, 1), "nan.npy: sample 0: value NaN is not an integer"},
	} {
		_, err := OpenData("x="+x+",y="+c.y, plan, 1)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	if _, err := OpenData(" x="+x+" , y="+write("ok.npy", 0, 1, 2, 2), plan, 1); err != nil {
		t.Fatalf("good data with spaces: %v", err)
	}

	tokens := &codegen.Plan{Microbatches: 1, Inputs: []codegen.Input{
		{Name: "tokens", DType: "i64", MicrobatchShape: []int{1, 4}, Range: []int{0, 8}},
		{Name: "labels", DType: "i64", MicrobatchShape: []int{1, 4}, Range: []int{0, 8}, Label: true, ShiftOf: "tokens"},
	}}
	for _, c := range []struct {
		vals []float32
		want string
	}{
		{[]float32{1, 2, -1, 3, 4, 5, 6}, "token -1 at position 2 is not a token id in [0, 8)"},
		{[]float32{1, 2, 3, 2.5, 4, 5, 6}, "token 2.5 at position 3 is not a token id"},
		{[]float32{1, 2, 3, 4, float32(math.NaN()), 5, 6}, "token NaN at position 4"},
	} {
		_, err := OpenData(write("toks.npy", c.vals...), tokens, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// TestScalarInputs: an input without a batch dim (a class label for one row of logits) is
// one sample per micro-batch, for synthetic data and for arrays.
func TestScalarInputs(t *testing.T) {
	in := codegen.Input{Name: "y", DType: "i64", MicrobatchShape: []int{}, Range: []int{0, 5}, Label: true}
	plan := &codegen.Plan{Microbatches: 2, Inputs: []codegen.Input{in}}
	tt := device.Tensor{Type: ir.Type{DType: ir.I64}, Data: make([]byte, 8)}
	if err := (&Synthetic{Seed: 1, Plan: plan}).Fill(in, 1, 1, tt); err != nil || tt.I64()[0] < 0 || tt.I64()[0] >= 5 {
		t.Fatalf("synthetic: %v %v", tt.I64(), err)
	}
	p := filepath.Join(t.TempDir(), "y.npy")
	if err := WriteNpy(p, f32Tensor(1, 4, 2)); err != nil {
		t.Fatal(err)
	}
	src, err := OpenData("y="+p, plan, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Fill(in, 1, 1, tt); err != nil || tt.I64()[0] != 4 {
		t.Fatalf("array: %v %v", tt.I64(), err)
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
	var ie *InputError
	if _, _, err := job.Resume(ck); !errors.As(err, &ie) || !strings.Contains(err.Error(), "metadata has no valid seed") {
		t.Fatalf("got %v", err)
	}
}
