package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ppc runs the CLI in-process and returns its exit status and outputs.
func ppc(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	// An internal pass failure writes a reproducer to the temporary directory: keep it in the
	// test's.
	t.Setenv("TMPDIR", t.TempDir())
	var out, errb bytes.Buffer
	code := run(args, &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb})
	if strings.Contains(errb.String(), "goroutine ") || strings.Contains(errb.String(), "panic:") {
		t.Fatalf("ppc %v printed a Go panic:\n%s", args, errb.String())
	}
	return code, out.String(), errb.String()
}

// ppcAll runs command lines one after the other, each of which must succeed.
func ppcAll(t *testing.T, cmds [][]string) {
	t.Helper()
	for _, r := range cmds {
		if code, _, errOut := ppc(t, "", r...); code != 0 {
			t.Fatalf("ppc %v: exit %d\n%s", r, code, errOut)
		}
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelp(t *testing.T) {
	code, out, _ := ppc(t, "", "--help")
	if code != 0 || !strings.Contains(out, "opt ") || !strings.Contains(out, "passes ") || !strings.Contains(out, "version ") {
		t.Fatalf("help: %d\n%s", code, out)
	}
	if code, _, _ := ppc(t, ""); code != exitInput {
		t.Fatalf("no command exits %d, want 2", code)
	}
	for _, c := range commands {
		code, out, _ := ppc(t, "", c.name, "--help")
		if code != 0 || !strings.HasPrefix(out, "usage: ppc "+c.name) {
			t.Errorf("ppc %s --help: %d\n%s", c.name, code, out)
		}
		code2, out2, _ := ppc(t, "", "help", c.name)
		if code2 != 0 || out2 != out {
			t.Errorf("ppc help %s differs from --help", c.name)
		}
	}
}

func TestVersionAndPasses(t *testing.T) {
	code, out, _ := ppc(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "ppc ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %d %q", code, out)
	}
	code, out, _ = ppc(t, "", "passes")
	if code != 0 {
		t.Fatal(code)
	}
	for _, p := range []string{"shape-infer\n", "canonicalize\n", "cse\n", "dce\n"} {
		if !strings.Contains(out, p) {
			t.Errorf("ppc passes lacks %q", p)
		}
	}
	if strings.Index(out, "canonicalize\n") > strings.Index(out, "dce\n") {
		t.Error("passes not in table order")
	}
}

func TestOptExample(t *testing.T) {
	code, out, errOut := ppc(t, "", "opt", "../../testdata/ir/mlp.ir", "--passes=canonicalize,cse,dce", "--print-ir-after-all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "%unused") || strings.Contains(out, "reshape") || strings.Count(out, "add") != 1 {
		t.Fatalf("pipeline did not clean the example:\n%s", out)
	}
	for _, h := range []string{"IR after canonicalize", "IR after cse", "IR after dce"} {
		if !strings.Contains(errOut, h) {
			t.Errorf("--print-ir-after-all lacks %q", h)
		}
	}
	// The result parses back and is stable under the same pipeline.
	p := writeFile(t, "out.ir", out)
	code, out2, _ := ppc(t, "", "opt", p, "--passes=canonicalize,cse,dce")
	if code != 0 || out2 != out {
		t.Fatalf("not a fixed point:\n%s\n---\n%s", out, out2)
	}
}

func TestOptStdinAndDumpDir(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := ppc(t, "func @f(%x: f32[2]) -> (f32[2]) {\n  %0 = relu %x : f32[2]\n  return %x\n}\n", "opt", "-", "--passes", "dce", "--dump-dir", dir)
	if code != 0 || strings.Contains(out, "relu") {
		t.Fatalf("exit %d, out %s, err %s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "01-dce.ir")); err != nil {
		t.Fatal(err)
	}
}

func TestOptErrors(t *testing.T) {
	bad := writeFile(t, "bad.ir", "func @f(%a: f32[4]) -> (f32[4]) {\n  %1 = add %a, %a : f32[5]\n  return %a\n}\n")
	cases := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"opt", bad, "--passes=cse"}, exitInput, []string{"bad.ir:2:8: add: result 0 declared f32[5], but the operands give f32[4]", "  %1 = add %a, %a : f32[5]", "       ^"}},
		{[]string{"opt", "../../testdata/ir/mlp.ir", "--passes=cse,nope"}, exitInput, []string{`unknown pass "nope"`, "usage: ppc opt"}},
		{[]string{"opt", "--passes=cse"}, exitInput, []string{"want one IR file, got 0 arguments"}},
		{[]string{"opt", "a.ir", "b.ir"}, exitInput, []string{"want one IR file, got 2"}},
		{[]string{"opt", "/no/such/file.ir"}, exitInput, []string{"/no/such/file.ir: no such file or directory"}},
		{[]string{"opt", "x.ir", "--bogus"}, exitInput, []string{"unknown flag --bogus"}},
		{[]string{"opt", "x.ir", "--passes"}, exitInput, []string{"flag --passes needs a value"}},
		{[]string{"opt", "x.ir", "--print-ir-after=nope"}, exitInput, []string{`unknown pass "nope"`}},
		{[]string{"frobnicate"}, exitInput, []string{`unknown command "frobnicate"`}},
		{[]string{"version", "extra"}, exitInput, []string{"takes no arguments"}},
	}
	for _, c := range cases {
		code, _, errOut := ppc(t, "", c.args...)
		if code != c.code {
			t.Errorf("ppc %v: exit %d, want %d\n%s", c.args, code, c.code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("ppc %v: stderr lacks %q:\n%s", c.args, w, errOut)
			}
		}
	}
}

// A pass's error about the user's IR names the position and leaves no reproducer: those are
// for bugs in ppc (passes.TestReproducer).
func TestOptFailingPassWritesNoReproducer(t *testing.T) {
	in := writeFile(t, "oob.ir", "func @f() -> (f32[1]) {\n  %c = constant {value = dense<f32[2]: [1, 2]>} : f32[2]\n  %i = constant {value = dense<i64[1]: [7]>} : i64[1]\n  %0 = gather %c, %i : f32[1]\n  return %0\n}\n")
	dir := t.TempDir()
	code, _, errOut := ppc(t, "", "opt", in, "--passes=canonicalize", "--dump-dir", dir)
	if code != exitInput || !strings.Contains(errOut, "pass canonicalize: ") || !strings.Contains(errOut, "oob.ir:4:8: gather: gather index 7 out of range") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	if strings.Contains(errOut, "reproducer") {
		t.Fatalf("a reproducer for the user's own mistake:\n%s", errOut)
	}
	noRepro(t, dir)
	noRepro(t, os.TempDir())
}

// noRepro fails when dir holds a reproducer.
func noRepro(t *testing.T, dir string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(dir, "ppc-repro-*")); len(m) > 0 {
		t.Errorf("reproducer(s) written for a user error: %v", m)
	}
}
