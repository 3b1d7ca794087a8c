package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExport: `ppc export` writes an .onnx (creating its directory) that `ppc compile` trains
// without --loss, and refuses --loss for it; `ppc infer` runs it.
func TestExport(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "sub", "mlp.onnx")
	code, stdout, errOut := ppc(t, "", "export", "../../testdata/models/mlp.ppm", "--preset", "tiny", "--seed", "3", "-o", out)
	if code != 0 {
		t.Fatalf("export: exit %d\n%s", code, errOut)
	}
	for _, w := range []string{"ONNX opset 20", "inputs x, y", "outputs logits, loss"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("export output lacks %q:\n%s", w, stdout)
		}
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "sub", ".*"))
	if len(leftovers) > 0 {
		t.Errorf("export left %v behind", leftovers)
	}
	code, stdout, errOut = ppc(t, "", "compile", out, "--microbatches", "2", "-o", filepath.Join(dir, "plan"))
	if code != 0 || !strings.Contains(stdout, "(training)") {
		t.Fatalf("compile the exported model without --loss: exit %d\n%s%s", code, stdout, errOut)
	}
	code, _, errOut = ppc(t, "", "compile", out, "--loss", "mse", "-o", filepath.Join(dir, "plan2"))
	if code != exitInput || !strings.Contains(errOut, "the model computes its own loss") || !strings.Contains(errOut, "scalar output named loss") {
		t.Errorf("compile with --loss: exit %d\n%s", code, errOut)
	}
	code, stdout, errOut = ppc(t, "", "infer", out, "--output-dir", filepath.Join(dir, "infer"))
	if code != 0 || !strings.Contains(stdout, "output logits") || !strings.Contains(stdout, "output loss") {
		t.Errorf("infer the exported model: exit %d\n%s%s", code, stdout, errOut)
	}
}

// TestExportErrors: bad command lines and models exit 2 with a message that names the
// problem (an op with no ONNX form: the op and its line, with a caret), and write nothing.
func TestExportErrors(t *testing.T) {
	dir := t.TempDir()
	grad := writeFile(t, "grad.ir", `func @forward(%x: f32[2,3] {input}) -> (f32[2,3] {name = "y"}) {
  %s = softmax %x : f32[2,3]
  %g = softmax_grad %s, %x : f32[2,3]
  return %g
}
`)
	notDir := writeFile(t, "file.txt", "")
	isDir := filepath.Join(dir, "d.onnx")
	if err := os.Mkdir(isDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mlp := "../../testdata/models/mlp.ppm"
	out := filepath.Join(dir, "out.onnx")
	runCases(t, []cliCase{
		{[]string{"export", grad, "-o", out}, exitInput, []string{"grad.ir:3:8: op softmax_grad has no ONNX mapping", "gradient kernel", "\n           ^"}, nil},
		{[]string{"export", mlp}, exitInput, []string{"-o FILE.onnx is required", "usage: ppc export"}, nil},
		{[]string{"export", mlp, "-o", filepath.Join(dir, "out.pb")}, exitInput, []string{"the file name must end in .onnx"}, nil},
		{[]string{"export", mlp, "-o", filepath.Join(dir, "x.onnx"), "--opset", "24"}, exitInput, []string{"--opset 24: ppc export writes opsets 20 to 23", "usage: ppc export"}, nil},
		{[]string{"export", mlp, "-o", filepath.Join(notDir, "x.onnx")}, exitInput, []string{"file.txt is a file, not a directory"}, nil},
		{[]string{"export", mlp, "-o", isDir}, exitInput, []string{"d.onnx is a directory"}, nil},
		{[]string{"export", mlp, grad, "-o", out}, exitInput, []string{"want one model file, got 2"}, nil},
		{[]string{"export", filepath.Join(dir, "missing.ppm"), "-o", out}, exitInput, []string{"missing.ppm: no such file"}, nil},
		{[]string{"export", grad, "--preset", "tiny", "-o", out}, exitInput, []string{"do not apply to IR files"}, nil},
		{[]string{"export", mlp, "--preset", "huge", "-o", out}, exitInput, []string{"huge"}, nil},
		{[]string{"export", "../../testdata/models/gpt.ppm", "--preset", "gpt3-175b", "-o", out}, exitInput, []string{"gpt.ppm: the parameters take 650.5 GiB", "an ONNX file holds at most 2 GiB"}, nil},
	})
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed export wrote %s", out)
	}
}
