package runtime_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// layers is the layering doc.go states: each runtime package with the runtime packages it
// may import (its non-test files; a test may run whole jobs from any package). dist,
// checkpoint and data are peers below the executor; device and fault are the bottom; the
// devices implement device alone, and no runtime package imports them.
var layers = map[string][]string{
	"runtime":            {"runtime/dist", "runtime/checkpoint", "runtime/data", "runtime/device", "runtime/fault"},
	"runtime/dist":       {"runtime/device", "runtime/fault"},
	"runtime/checkpoint": {"runtime/device", "runtime/fault"},
	"runtime/data":       {"runtime/device", "runtime/fault"},
	"runtime/device":     {},
	"runtime/fault":      {},
	"runtime/cpu":        {"runtime/device"},
	"runtime/cuda":       {"runtime/device"},
}

// TestLayering reads the imports of every non-test file under runtime/, whatever its build
// constraints (lock_unix.go and lock_other.go alike), and fails on an import of a runtime
// package that the package's layer does not allow — one above it, a peer, or a device — and
// on a package the layering does not place.
func TestLayering(t *testing.T) {
	imports, err := runtimeImports(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"runtime", "runtime/dist", "runtime/checkpoint", "runtime/data", "runtime/device", "runtime/fault"} {
		if _, ok := imports[pkg]; !ok {
			t.Errorf("%s: not found under runtime/ (the layering names it)", pkg)
		}
	}
	for pkg, files := range imports {
		allowed, placed := layers[pkg]
		if !placed {
			t.Errorf("%s is not in the layering: give it a place in runtime/doc.go and in layers", pkg)
			continue
		}
		for file, deps := range files {
			for _, dep := range deps {
				if !slices.Contains(allowed, dep) {
					t.Errorf("%s imports %s, which its layer does not allow (it may import %v)", file, dep, allowed)
				}
			}
		}
	}
}

// runtimeImports maps each package under dir (the runtime's directory) to its non-test files
// and the runtime packages each imports, as "runtime/…" paths.
func runtimeImports(dir string) (map[string]map[string][]string, error) {
	const module = "ppc.dev/ppc/"
	out := map[string]map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != dir {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Join("runtime", filepath.Dir(path)))
		if out[pkg] == nil {
			out[pkg] = map[string][]string{}
		}
		file := filepath.ToSlash(filepath.Join("runtime", path))
		out[pkg][file] = []string{}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if rel, ok := strings.CutPrefix(p, module); ok && (rel == "runtime" || strings.HasPrefix(rel, "runtime/")) {
				out[pkg][file] = append(out[pkg][file], rel)
			}
		}
		return nil
	})
	return out, err
}
