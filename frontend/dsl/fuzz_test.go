package dsl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ppc.dev/ppc/ir"
)

// FuzzLoad feeds arbitrary text (and options) to the parser and the lowering: they must
// never panic or hang, every error must be a positioned *ir.Error (or ir.ErrorList), and
// every module they accept must print IR that parses back.
//
//	go test -fuzz=FuzzLoad -fuzztime=5m ./frontend/dsl/
//
// Crashers land in testdata/fuzz/FuzzLoad and run as regression tests with go test.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(modelsDir, "*.ppm"))
	golden, _ := filepath.Glob("../../testdata/dsl/*.ppm")
	for _, file := range append(seeds, golden...) {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		// Golden files hold several cases: seed each.
		for _, c := range strings.Split(string(src), "// -----") {
			f.Add([]byte(c), "", "", uint8(0))
		}
	}
	f.Add([]byte(errModel), "tiny", "d=2*h", uint8(4))
	// Hostile shapes of input: runaway repeats, huge splits and dims, deep nesting, recursion.
	for _, body := range []string{
		"repeat 100000 { repeat 100000 { y = x } }",
		"y1, y2 = split(zeros(f32[1125899906842624]), 1125899906842624)",
		"y = zeros(f32[1099511627776, 1099511627776])",
		"y = " + strings.Repeat("(", 150) + "x" + strings.Repeat(")", 150),
		"y = " + strings.Repeat("-", 150) + "x",
		"y = r(x)",
	} {
		src := "model m\ninput x: f32[4]\nblock r(v) { return r(v) }\nforward {\n  " + body + "\n  loss mean(x)\n}\n"
		f.Add([]byte(src), "", "", uint8(0))
	}
	f.Add([]byte("model m\nconfig { batch = 8 }\ninput x: f32[batch]\nforward { loss mean(x) }\n"), "", "batch=batch*2", uint8(8))

	defer func(n int) { maxWork = n }(maxWork)
	maxWork = 20_000 // keep each input fast; the limit itself is what is being tested
	f.Fuzz(func(t *testing.T, src []byte, preset, set string, micro uint8) {
		opts := Options{Preset: preset, Microbatches: int(micro % 20)}
		if k, v, ok := strings.Cut(set, "="); ok {
			opts.Set = map[string]string{k: v}
		}
		done := make(chan string, 1)
		go func() { done <- checkLoad(src, opts) }()
		select {
		case msg := <-done:
			if msg != "" {
				t.Fatal(msg)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Load hangs on %q with %+v", src, opts)
		}
	})
}

// checkLoad loads src and describes what is wrong with the outcome ("" if nothing).
func checkLoad(src []byte, opts Options) string {
	m, err := Load("f.ppm", src, opts)
	if err != nil {
		var e *ir.Error
		var list ir.ErrorList
		if !errors.As(err, &e) && !errors.As(err, &list) {
			return fmt.Sprintf("error %T is not an ir diagnostic: %v", err, err)
		}
		if err.Error() == "" {
			return "empty error message"
		}
		return ""
	}
	text := m.String()
	if _, err := ir.ParseAndVerify("f.ir", text); err != nil {
		return fmt.Sprintf("printed IR does not parse back: %v\n%s", err, text)
	}
	return ""
}
