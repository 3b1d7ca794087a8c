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
	"ppc.dev/ppc/internal/golden"
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

var runRE = regexp.MustCompile(`^// RUN:(.*)$`)

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
	for _, c := range golden.Split(text) {
		runGoldenCase(t, file, c.FirstLine, c.Src, opts)
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

func runGoldenCase(t *testing.T, file string, firstLine int, src string, opts Options) {
	t.Helper()
	want, err := golden.Expectations(file, src)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := filecheck.Parse(file, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(file, []byte(src), opts)
	if err != nil {
		golden.CheckErrors(t, file, firstLine, err, want)
		return
	}
	golden.CheckSucceeded(t, file, want)
	if len(dirs) == 0 {
		t.Errorf("case at %s:%d has neither CHECK nor ERROR lines", file, firstLine)
		return
	}
	if err := filecheck.Match(dirs, m.String()); err != nil {
		t.Errorf("case at %s:%d:\n%v", file, firstLine, err)
	}
}
