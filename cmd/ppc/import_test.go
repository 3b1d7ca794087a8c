package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestImport(t *testing.T) {
	code, out, errOut := ppc(t, "", "import", gpt, "--preset", "small")
	if code != 0 || !strings.Contains(out, "module @gpt") || !strings.Contains(out, "func @forward(%tokens: i64[8,1024]") {
		t.Fatalf("import gpt small: %d %s %s", code, out[:min(200, len(out))], errOut)
	}
	code, out, _ = ppc(t, "", "import", gpt, "--preset", "tiny", "--microbatches", "8", "--set", "n_layers=2")
	if code != 0 || !strings.Contains(out, "%tokens: i64[2,32]") || strings.Contains(out, "layers.2.") {
		t.Fatalf("import with --set and --microbatches: %d", code)
	}
	onnxModel := "../../../shared/testdata/onnx-backend/pytorch-converted/test_Conv2d/model.onnx"
	if _, err := os.Stat(onnxModel); err == nil {
		code, out, _ = ppc(t, "", "import", onnxModel)
		if code != 0 || !strings.Contains(out, "conv %arg0, %arg1, %arg2") || !strings.Contains(out, "elided") {
			t.Fatalf("import onnx: %d %s", code, out)
		}
	}
}

func TestImportErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	syntax := write("bad.ppm", "model m\nforward {\n  x = @ y\n}\n")
	shape := write("shape.ppm", "model m\ninput x: f32[2, 3]\nforward {\n  param w: f32[4, 5] = zeros\n  y = x @ w\n  loss sum(y)\n}\n")
	random := write("random.onnx", "\x08\x01\x12\x03abc\xff\xff\xff")
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"import", syntax}, []string{"bad.ppm:3:"}},
		{[]string{"import", shape}, []string{"shape.ppm:5:", "f32[2,3] @ f32[4,5]", "^"}},
		{[]string{"import", gpt, "--preset", "huge"}, []string{`unknown preset "huge"`, "tiny", "small"}},
		{[]string{"import", gpt, "--set", "nonsense=3"}, []string{"nonsense"}},
		{[]string{"import", gpt, "--set", "noequals"}, []string{`--set "noequals": want NAME=VALUE`}},
		{[]string{"import", random}, []string{"random.onnx", "not a valid ONNX model"}},
		{[]string{"import", write("x.txt", "")}, []string{`unknown model format ".txt"`}},
		{[]string{"import", filepath.Join(dir, "missing.onnx")}, []string{"no such file"}},
		{[]string{"import", gpt, "--dim", "batch=x"}, []string{"--dim", "positive integer"}},
		{[]string{"import", gpt, "--dim", "batch=4"}, []string{"--dim applies to ONNX models"}},
	}
	for _, c := range cases {
		code, _, errOut := ppc(t, "", c.args...)
		if code != exitInput {
			t.Errorf("ppc %v: exit %d, want 2\n%s", c.args, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("ppc %v: stderr lacks %q:\n%s", c.args, w, errOut)
			}
		}
	}
}

func TestInferAndRunErrors(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if code, _, errOut := ppc(t, "", "compile", mlp, "-o", plan, "--microbatches", "2"); code != 0 {
		t.Fatal(errOut)
	}
	prog := filepath.Join(plan, "rank-00000.ppx")
	data, _ := os.ReadFile(prog)
	os.WriteFile(prog, data[:len(data)/2], 0o644)
	lone := filepath.Join(dir, "lone.ppx") // no plan.json beside it
	os.WriteFile(lone, data[:len(data)/2], 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", plan, "--steps", "1"}, exitInput, "rank-00000.ppx: does not match plan.json (its SHA-256 differs)"},
		{[]string{"run", filepath.Join(dir, "nothing")}, exitInput, "no such plan directory"},
		{[]string{"run", plan, "--device", "tpu"}, exitInput, "--device must be cpu or cuda"},
		{[]string{"dis", filepath.Join(dir, "nothing.ppx")}, exitInput, "no such file"},
		{[]string{"dis", prog}, exitInput, "rank-00000.ppx: does not match plan.json"},
		{[]string{"dis", lone}, exitInput, "lone.ppx: not a ppc program"},
		{[]string{"infer", mlp, "--output-dir", dir, "--input", "x=" + filepath.Join(dir, "none.npy")}, exitInput, "none.npy"},
		{[]string{"infer", mlp, "--output-dir", dir, "--input", "zz=" + prog}, exitInput, ""},
		{[]string{"compare", filepath.Join(dir, "a.npy"), filepath.Join(dir, "b.npy")}, exitInput, "a.npy"},
	}
	for _, c := range cases {
		code, _, errOut := ppc(t, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("ppc %v: exit %d (want %d)\n%s\nwant %q", c.args, code, c.code, errOut, c.want)
		}
	}
}

// TestInferAndCompare runs a model forward from .npy inputs and compares outputs.
func TestInferAndCompare(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := ppc(t, "", "infer", "../../testdata/ir/mlp.ir", "--output-dir", dir)
	if code != 0 || !strings.Contains(out, "generated, saved to") {
		t.Fatalf("infer: %d %s %s", code, out, errOut)
	}
	// Feed the saved inputs back: the output must be the same.
	dir2 := t.TempDir()
	code, _, errOut = ppc(t, "", "infer", "../../testdata/ir/mlp.ir", "--output-dir", dir2,
		"--input", "x="+filepath.Join(dir, "inputs", "x.npy"), "--input", "labels="+filepath.Join(dir, "inputs", "labels.npy"))
	if code != 0 {
		t.Fatal(errOut)
	}
	// The model's only result is its loss; inference writes the logits it is computed from too.
	outs, _ := filepath.Glob(filepath.Join(dir, "*.npy"))
	if len(outs) != 2 || filepath.Base(outs[0]) != "logits.npy" || filepath.Base(outs[1]) != "loss.npy" {
		t.Fatalf("outputs: %v, want logits.npy and loss.npy", outs)
	}
	if !strings.Contains(out, "output logits                   f32[16,10]") {
		t.Errorf("infer does not list the logits:\n%s", out)
	}
	for _, o := range outs {
		code, stdout, _ := ppc(t, "", "compare", o, filepath.Join(dir2, filepath.Base(o)), "--rtol", "0", "--atol", "0")
		if code != 0 {
			t.Fatalf("same inputs, different outputs:\n%s", stdout)
		}
	}
	// A wrong-shape input is refused.
	code, _, errOut = ppc(t, "", "infer", "../../testdata/ir/mlp.ir", "--output-dir", dir2, "--input", "x="+filepath.Join(dir, "inputs", "labels.npy"))
	if code != exitInput || !strings.Contains(errOut, "the model needs f32[16,32]") {
		t.Fatalf("wrong shape: %d %s", code, errOut)
	}
}

// ppc compare reads ONNX TensorProto files, so an infer output checks directly against a
// backend test set's expected output.
func TestCompareAgainstONNXOutput(t *testing.T) {
	d := "../../../shared/testdata/onnx-backend/pytorch-converted/test_Conv2d"
	if _, err := os.Stat(d); err != nil {
		t.Skipf("ONNX backend data not found at %s: the shared folder is absent", d)
	}
	out := t.TempDir()
	code, _, errOut := ppc(t, "", "infer", d+"/model.onnx", "--input", "0="+d+"/test_data_set_0/input_0.pb", "--output-dir", out)
	if code != 0 {
		t.Fatal(errOut)
	}
	code, stdout, _ := ppc(t, "", "compare", filepath.Join(out, "3.npy"), d+"/test_data_set_0/output_0.pb", "--rtol", "1e-4", "--atol", "1e-5")
	if code != 0 || !strings.Contains(stdout, "agree") {
		t.Fatalf("infer output vs output_0.pb: %d\n%s", code, stdout)
	}
	// Against the wrong expected output the check fails with exit 1.
	code, _, _ = ppc(t, "", "compare", filepath.Join(out, "3.npy"), d+"/test_data_set_0/input_0.pb")
	if code != exitFailed {
		t.Fatalf("mismatched tensors: exit %d, want 1", code)
	}
}
