package dsl

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"ppc.dev/ppc/internal/filecheck"
	"ppc.dev/ppc/ir"
)

// TestGolden imports every testdata/dsl/*.ppm file. A file may start with
// `// RUN: [--preset P] [--set k=v]… [--microbatches M]`; cases are split by `// -----`
// (each a whole model, positions kept). A case's printed module must match its CHECK lines;
// lines carrying `// ERROR "regex"` must each get a diagnostic on that line matching the
// regex, and then every diagnostic must be expected (the convention of passes/golden_test.go).
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("../../testdata/dsl/*.ppm")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runGoldenFile(t, file) })
	}
}

var (
	runRE   = regexp.MustCompile(`^// RUN:(.*)$`)
	errorRE = regexp.MustCompile(`//\s*ERROR\s+"((?:[^"\\]|\\.)*)"`)
)

func runGoldenFile(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	first, _, _ := strings.Cut(text, "\n")
	var opts Options
	if m := runRE.FindStringSubmatch(strings.TrimSpace(first)); m != nil {
		if opts, err = parseRunLine(m[1]); err != nil {
			t.Fatalf("%s:1: %v", file, err)
		}
	}
	lines := strings.SplitAfter(text, "\n")
	start := 0
	for i := 0; i <= len(lines); i++ {
		if i == len(lines) || strings.TrimSpace(lines[i]) == "// -----" {
			src := strings.Repeat("\n", start) + strings.Join(lines[start:i], "")
			runGoldenCase(t, file, start+1, src, opts)
			start = i + 1
		}
	}
}

func parseRunLine(s string) (Options, error) {
	var o Options
	f := strings.Fields(s)
	for i := 0; i < len(f); i++ {
		if i+1 >= len(f) {
			return o, errors.New("RUN: flag " + f[i] + " needs a value")
		}
		switch f[i] {
		case "--preset":
			o.Preset = f[i+1]
		case "--set":
			k, v, ok := strings.Cut(f[i+1], "=")
			if !ok {
				return o, errors.New("RUN: --set wants name=value")
			}
			if o.Set == nil {
				o.Set = map[string]string{}
			}
			o.Set[k] = v
		case "--microbatches":
			n, err := strconv.Atoi(f[i+1])
			if err != nil {
				return o, err
			}
			o.Microbatches = n
		default:
			return o, errors.New("RUN: unknown flag " + f[i])
		}
		i++
	}
	return o, nil
}

type expectedError struct {
	line    int
	re      *regexp.Regexp
	matched bool
}

func runGoldenCase(t *testing.T, file string, firstLine int, src string, opts Options) {
	t.Helper()
	var want []*expectedError
	for n, line := range strings.Split(src, "\n") {
		for _, m := range errorRE.FindAllStringSubmatch(line, -1) {
			re, err := regexp.Compile(strings.ReplaceAll(m[1], `\"`, `"`))
			if err != nil {
				t.Fatalf("%s:%d: bad ERROR pattern: %v", file, n+1, err)
			}
			want = append(want, &expectedError{line: n + 1, re: re})
		}
	}
	dirs, err := filecheck.Parse(file, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(file, []byte(src), opts)
	if err != nil {
		checkGoldenErrors(t, file, firstLine, err, want)
		return
	}
	for _, w := range want {
		t.Errorf("%s:%d: expected an error matching %q, but the case succeeded", file, w.line, w.re)
	}
	if len(dirs) == 0 {
		t.Errorf("case at %s:%d has neither CHECK nor ERROR lines", file, firstLine)
		return
	}
	if err := filecheck.Match(dirs, m.String()); err != nil {
		t.Errorf("case at %s:%d:\n%v", file, firstLine, err)
	}
}

func checkGoldenErrors(t *testing.T, file string, firstLine int, err error, want []*expectedError) {
	t.Helper()
	var diags []*ir.Error
	var one *ir.Error
	var list ir.ErrorList
	switch {
	case errors.As(err, &list):
		diags = list
	case errors.As(err, &one):
		diags = []*ir.Error{one}
	}
	if len(diags) == 0 {
		t.Errorf("case at %s:%d: error without a position: %v", file, firstLine, err)
		return
	}
	for _, d := range diags {
		found := false
		for _, w := range want {
			if w.line == d.Loc.Line && w.re.MatchString(d.Msg) {
				w.matched, found = true, true
			}
		}
		if !found {
			t.Errorf("%s:%d: unexpected error: %s", file, d.Loc.Line, d.Msg)
		}
	}
	for _, w := range want {
		if !w.matched {
			t.Errorf("%s:%d: expected an error matching %q; got:\n%v", file, w.line, w.re, err)
		}
	}
}
