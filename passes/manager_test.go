package passes

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

const twoAdds = `func @f(%x: f32[4]) -> (f32[4]) {
  %0 = add %x, %x : f32[4]
  %1 = add %x, %x : f32[4]
  %2 = mul %0, %1 : f32[4]
  %3 = relu %2 : f32[4]
  return %2
}
`

func mustParse(t *testing.T, src string) *ir.Module {
	t.Helper()
	m, err := ir.ParseAndVerify("in.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParsePipeline(t *testing.T) {
	pl, err := ParsePipeline(" canonicalize , cse,dce ")
	if err != nil || pl.String() != "canonicalize,cse,dce" {
		t.Fatalf("got %v, %v", pl, err)
	}
	for in, want := range map[string]string{
		"cse,nope":    `unknown pass "nope"`,
		"cse,":        "pipeline ends with ','",
		"cse{x=1}":    `pass cse has no option "x" (it takes none)`,
		"cse{":        "unterminated '{'",
		"cse dce":     `unknown pass "cse dce"`,
		"canonical":   "did you mean canonicalize?",
		"cse{novalue": "unterminated",
		"cse,,dce":    "empty pass name in the pipeline",
		",cse":        "empty pass name in the pipeline",
	} {
		if _, err := ParsePipeline(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePipeline(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

func TestPrintAfterAllAndChange(t *testing.T) {
	pl, _ := ParsePipeline("cse,canonicalize,dce")
	var out bytes.Buffer
	if err := Run(mustParse(t, twoAdds), pl, Config{VerifyEach: true, PrintAfterAll: true, Out: &out}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, h := range []string{"// === IR after cse ===", "// === IR after canonicalize ===", "// === IR after dce ==="} {
		if !strings.Contains(s, h) {
			t.Errorf("missing %q in:\n%s", h, s)
		}
	}
	out.Reset()
	// canonicalize changes nothing here, so after-change prints only cse and dce.
	if err := Run(mustParse(t, twoAdds), pl, Config{VerifyEach: true, PrintAfterChange: true, Out: &out}); err != nil {
		t.Fatal(err)
	}
	s = out.String()
	if !strings.Contains(s, "after cse") || strings.Contains(s, "after canonicalize") || !strings.Contains(s, "after dce") {
		t.Errorf("print-ir-after-change printed the wrong passes:\n%s", s)
	}
	out.Reset()
	if err := Run(mustParse(t, twoAdds), pl, Config{PrintBefore: []string{"dce"}, PrintAfter: []string{"cse"}, Out: &out}); err != nil {
		t.Fatal(err)
	}
	s = out.String()
	if strings.Count(s, "// === IR") != 2 || !strings.Contains(s, "IR before dce") || !strings.Contains(s, "IR after cse") {
		t.Errorf("print-before/after printed:\n%s", s)
	}
}

func TestDumpDir(t *testing.T) {
	dir := t.TempDir()
	// An earlier run with a longer pipeline, and files that are not ppc's dumps.
	longer, _ := ParsePipeline("canonicalize,cse,dce,cse")
	if err := Run(mustParse(t, twoAdds), longer, Config{VerifyEach: true, DumpDir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []string{"notes.ir", "1-mine.ir", "04-Mine.ir"} {
		os.WriteFile(filepath.Join(dir, keep), []byte("x"), 0o644)
	}
	pl, _ := ParsePipeline("cse,dce")
	if err := Run(mustParse(t, twoAdds), pl, Config{VerifyEach: true, DumpDir: dir}); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "[0-9][0-9]-[a-z]*.ir"))
	var base []string
	for _, n := range names {
		base = append(base, filepath.Base(n))
	}
	if strings.Join(base, " ") != "00-input.ir 01-cse.ir 02-dce.ir" {
		t.Fatalf("dump files: %v (the earlier run's 03-dce.ir and 04-cse.ir must go)", base)
	}
	for _, keep := range []string{"notes.ir", "1-mine.ir", "04-Mine.ir"} {
		if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
			t.Errorf("a file that is not a dump was removed: %v", err)
		}
	}
	last, _ := os.ReadFile(filepath.Join(dir, "02-dce.ir"))
	if strings.Contains(string(last), "relu") || strings.Count(string(last), "add") != 1 {
		t.Fatalf("dce dump:\n%s", last)
	}
	// Every dump parses back.
	for _, n := range names {
		b, _ := os.ReadFile(n)
		if _, err := ir.ParseAndVerify(n, string(b)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// A pass that breaks the IR is caught by the verifier, and its reproducer replays the failure.
func TestReproducer(t *testing.T) {
	dir := t.TempDir()
	breaker := &Pass{Name: "breaker", Doc: "corrupts result types", Run: func(m *ir.Module, _ Options) error {
		m.Funcs[0].Ops[0].Results[0].Type = ir.T(ir.F32, 5)
		return nil
	}}
	panicker := &Pass{Name: "panicker", Doc: "panics", Run: func(m *ir.Module, _ Options) error {
		var ops []*ir.Op
		_ = ops[3]
		return nil
	}}
	cseStep := Pipeline{{Pass: CSE, Options: Options{}}}
	for _, c := range []struct {
		pass *Pass
		want string
	}{{breaker, "internal error in pass breaker: the IR it produced does not verify"}, {panicker, "internal error in pass panicker: panic: runtime error: index out of range"}} {
		pl := append(cseStep, Step{Pass: c.pass, Options: Options{}})
		err := Run(mustParse(t, twoAdds), pl, Config{VerifyEach: true, ReproDir: dir})
		pe, ok := err.(*PassError)
		if !ok || !strings.Contains(err.Error(), c.want) || !pe.Internal {
			t.Fatalf("got %v", err)
		}
		repro, rerr := os.ReadFile(pe.Reproducer)
		if rerr != nil {
			t.Fatalf("no reproducer: %v", rerr)
		}
		first, rest, _ := strings.Cut(string(repro), "\n")
		if first != "// RUN: passes="+c.pass.Name {
			t.Fatalf("reproducer RUN line %q", first)
		}
		// The reproducer holds the failing pass's input: after cse, one add.
		m, perr := ir.ParseAndVerify(pe.Reproducer, rest)
		if perr != nil || strings.Count(m.String(), "add") != 1 {
			t.Fatalf("reproducer input wrong: %v\n%s", perr, rest)
		}
	}
}

// A pass's error about its input (here: a constant index out of range) is the user's to fix:
// it names the position and writes no reproducer.
func TestInputErrorWritesNoReproducer(t *testing.T) {
	dir := t.TempDir()
	m := mustParse(t, "func @f(%x: f32[2]) -> (f32[1]) {\n  %i = constant {value = dense<i64[1]: [7]>} : i64[1]\n  %c = constant {value = dense<f32[2]: [1, 2]>} : f32[2]\n  %0 = gather %c, %i : f32[1]\n  return %0\n}\n")
	pl, _ := ParsePipeline("dce,canonicalize")
	err := Run(m, pl, Config{VerifyEach: true, ReproDir: dir})
	pe, ok := err.(*PassError)
	if !ok || pe.Internal || pe.Reproducer != "" || !strings.Contains(err.Error(), "pass canonicalize: in.ir:4:8: gather: gather index 7 out of range") ||
		strings.Contains(err.Error(), "reproducer") {
		t.Fatalf("got %#v: %v", pe, err)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("a reproducer was written for an input error: %v", files)
	}
}

// The reproducer of an internal failure is a golden test that replays the failure.
func TestReproducerRunsAsGoldenTest(t *testing.T) {
	breaker := &Pass{Name: "breaker", Doc: "corrupts result types", Run: func(m *ir.Module, _ Options) error {
		m.Funcs[0].Ops[0].Results[0].Type = ir.T(ir.F32, 5)
		return nil
	}}
	// The golden harness finds passes by name: list the broken pass for this test only.
	byName[breaker.Name] = breaker
	t.Cleanup(func() { delete(byName, breaker.Name) })
	dir := t.TempDir()
	pl, _ := ParsePipeline("dce,breaker")
	err := Run(mustParse(t, twoAdds), pl, Config{VerifyEach: true, ReproDir: dir})
	pe, ok := err.(*PassError)
	if !ok || !pe.Internal || pe.Reproducer == "" {
		t.Fatalf("got %v", err)
	}
	rec := &recorder{}
	// Replaying the failure writes a reproducer of its own to the temporary directory.
	t.Setenv("TMPDIR", t.TempDir())
	func() {
		defer func() {
			if r := recover(); r != nil && r != rec {
				panic(r)
			}
		}()
		RunGoldenFile(rec, pe.Reproducer)
	}()
	if !strings.Contains(rec.String(), "internal error in pass breaker: the IR it produced does not verify") {
		t.Fatalf("reproducer did not replay the failure:\n%s", rec.String())
	}
}

func TestTableValidation(t *testing.T) {
	good := &Pass{Name: "ok", Doc: "d", Run: func(*ir.Module, Options) error { return nil }}
	for _, bad := range [][]*Pass{
		{good, good},
		{{Name: "Bad_Name", Doc: "d", Run: good.Run}},
		{{Name: "nodoc", Run: good.Run}},
		{{Name: "opt", Doc: "d", Run: good.Run, Options: []Option{{Name: "x"}}}},
	} {
		if validateTable(bad) == nil {
			t.Errorf("table %v validated", bad)
		}
	}
	if err := validateTable(table); err != nil {
		t.Fatal(err)
	}
}
