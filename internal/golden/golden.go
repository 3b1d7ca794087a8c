package golden

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"ppc.dev/ppc/ir"
)

// TB is the part of testing.TB the helpers report through.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Case is one `// -----`-separated part of a golden file. Src is padded with empty lines so
// positions in diagnostics are positions in the file; FirstLine is its first line (1-based).
type Case struct {
	FirstLine int
	Src       string
}

// Split cuts a golden file's text into cases.
func Split(text string) []Case {
	var out []Case
	lines := strings.SplitAfter(text, "\n")
	start := 0
	for i := 0; i <= len(lines); i++ {
		if i == len(lines) || strings.TrimSpace(lines[i]) == "// -----" {
			out = append(out, Case{FirstLine: start + 1, Src: strings.Repeat("\n", start) + strings.Join(lines[start:i], "")})
			start = i + 1
		}
	}
	return out
}

var errorRE = regexp.MustCompile(`//\s*ERROR\s+"((?:[^"\\]|\\.)*)"`)

// Expected is one `// ERROR "regex"` expectation.
type Expected struct {
	Line    int
	RE      *regexp.Regexp
	matched bool
}

// Expectations reads the ERROR expectations of a case. As in Go's test/ harness the pattern
// is a raw regexp; only \" is unescaped.
func Expectations(file, src string) ([]*Expected, error) {
	var want []*Expected
	for n, line := range strings.Split(src, "\n") {
		for _, m := range errorRE.FindAllStringSubmatch(line, -1) {
			re, err := regexp.Compile(strings.ReplaceAll(m[1], `\"`, `"`))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: bad ERROR pattern: %v", file, n+1, err)
			}
			want = append(want, &Expected{Line: n + 1, RE: re})
		}
	}
	return want, nil
}

// CheckErrors matches a failed run's diagnostics against the expectations: every diagnostic
// must be expected on its line, and every expectation met.
func CheckErrors(t TB, file string, firstLine int, err error, want []*Expected) {
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
		t.Errorf("case at %s:%d: error without a source position: %v", file, firstLine, err)
		return
	}
	for _, d := range diags {
		found := false
		for _, w := range want {
			if w.Line == d.Loc.Line && w.RE.MatchString(d.Msg) {
				w.matched, found = true, true
			}
		}
		if !found {
			t.Errorf("%s:%d: unexpected error: %s", file, d.Loc.Line, d.Msg)
		}
	}
	for _, w := range want {
		if !w.matched {
			t.Errorf("%s:%d: expected an error matching %q; got:\n%v", file, w.Line, w.RE, err)
		}
	}
}

// CheckSucceeded reports expectations that a successful run did not meet.
func CheckSucceeded(t TB, file string, want []*Expected) {
	t.Helper()
	for _, w := range want {
		t.Errorf("%s:%d: expected an error matching %q, but the case succeeded", file, w.Line, w.RE)
	}
}

// Files returns every file under dir by its path relative to dir, with its content, leaving
// out files named in skip (a lock file).
func Files(dir string, skip ...string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		for _, s := range skip {
			if d.Name() == s {
				return nil
			}
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	return out, err
}
