package passes

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ppc.dev/ppc/internal/filecheck"
	"ppc.dev/ppc/internal/golden"
	"ppc.dev/ppc/ir"
)

// TestGolden runs every testdata/passes/*.ir file: the `// RUN: passes=…` pipeline over each
// `// -----` case, with the verifier after every pass, then FileCheck on the printed IR and
// the `// ERROR "regex"` expectations against the diagnostics.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("../testdata/passes/*.ir")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	covered := map[string]bool{}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			pl := RunGoldenFile(t, file)
			for _, s := range pl {
				covered[s.Pass.Name] = true
			}
		})
	}
	for _, p := range All() {
		if !covered[p.Name] {
			t.Errorf("pass %s has no golden test under testdata/passes", p.Name)
		}
	}
}

var runRE = regexp.MustCompile(`^// RUN: passes=(.*)$`)

// RunGoldenFile runs one golden file and returns its pipeline.
func RunGoldenFile(t tb, file string) Pipeline {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v", err)
	}
	text := string(data)
	first, _, _ := strings.Cut(text, "\n")
	m := runRE.FindStringSubmatch(strings.TrimSpace(first))
	if m == nil {
		t.Fatalf("%s:1: first line must be `// RUN: passes=PIPELINE`", file)
	}
	pl, err := ParsePipeline(m[1])
	if err != nil {
		t.Fatalf("%s:1: %v", file, err)
	}
	for _, c := range golden.Split(text) {
		runCase(t, file, c.FirstLine, c.Src, pl)
	}
	return pl
}

func runCase(t tb, file string, firstLine int, src string, pl Pipeline) {
	t.Helper()
	want, err := golden.Expectations(file, src)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	dirs, err := filecheck.Parse(file, src, 0)
	if err != nil {
		t.Error(err)
		return
	}
	mod, err := ir.Parse(file, src)
	if err == nil {
		err = Run(mod, pl, Config{VerifyEach: true, ReproDir: t.TempDir()})
	}
	if err != nil {
		golden.CheckErrors(t, file, firstLine, err, want)
		return
	}
	golden.CheckSucceeded(t, file, want)
	if err := filecheck.Match(dirs, mod.String()); err != nil {
		t.Errorf("case at %s:%d:\n%v", file, firstLine, err)
	}
}

func TestGoldenHarnessCatchesWrongChecks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct{ file, text, want string }{
		{"check.ir", "// RUN: passes=dce\n// CHECK: relu\nfunc @f(%a: f32[2]) -> (f32[2]) {\n  %0 = relu %a : f32[2]\n  return %a\n}\n",
			"check.ir:2: CHECK: relu"},
		{"unexpected.ir", "// RUN: passes=dce\nfunc @f(%a: f32[2]) -> (f32[2]) {\n  %0 = relu %a : f32[3] // ERROR \"nothing like this\"\n  return %a\n}\n",
			"unexpected.ir:3: unexpected error"},
		{"missing.ir", "// RUN: passes=dce\nfunc @f(%a: f32[2]) -> (f32[2]) { // ERROR \"never happens\"\n  return %a\n}\n",
			`expected an error matching "never happens", but the case succeeded`},
		{"norun.ir", "func @f() -> () {\n  return\n}\n", "first line must be `// RUN: passes=PIPELINE`"},
		{"split.ir", "// RUN: passes=dce\n// CHECK: func @a\nfunc @a() -> () {\n  return\n}\n// -----\n// CHECK: func @a\nfunc @b() -> () {\n  return\n}\n",
			"split.ir:7: CHECK: func @a"},
	}
	for _, c := range cases {
		rec := &recorder{}
		func() {
			defer func() {
				if r := recover(); r != nil && r != rec {
					panic(r)
				}
			}()
			RunGoldenFile(rec, write(c.file, c.text))
		}()
		if !strings.Contains(rec.String(), c.want) {
			t.Errorf("%s: harness did not report %q; it reported:\n%s", c.file, c.want, rec.String())
		}
	}
}

// tb is the part of testing.TB the harness uses, so that its own failures can be observed.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Error(args ...any)
	TempDir() string
}

// recorder collects a harness run's failures; Fatalf unwinds with the recorder as the value.
type recorder struct{ strings.Builder }

func (r *recorder) Helper()                           {}
func (r *recorder) Errorf(format string, args ...any) { fmt.Fprintf(r, format+"\n", args...) }
func (r *recorder) Fatalf(format string, args ...any) { fmt.Fprintf(r, format+"\n", args...); panic(r) }
func (r *recorder) Error(args ...any)                 { fmt.Fprintln(r, args...) }
func (r *recorder) TempDir() string                   { return os.TempDir() }
