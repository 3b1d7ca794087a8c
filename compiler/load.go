package compiler

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"ppc.dev/ppc/ir"
)

// LoadOptions are the frontend options.
type LoadOptions struct {
	Dims         map[string]int    // ONNX symbolic dims
	Set          map[string]string // DSL config overrides
	Preset       string            // DSL preset
	Microbatches int
	Frozen       map[string]*ir.Dense // ONNX graph inputs fixed at compile time (shapes)
}

// Load reads a model by its extension: .onnx (ONNX), .ppm (the model DSL) or .ir (IR text).
// It returns the module and the source bytes (hashed into the plan).
func Load(path string, opts LoadOptions) (*ir.Module, []byte, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		// "model.onnx: is a directory", not "read model.onnx: is a directory".
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, nil, fmt.Errorf("%s: %v", path, pe.Err)
		}
		return nil, nil, err
	}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".ir":
		if len(opts.Dims) > 0 || len(opts.Set) > 0 || opts.Preset != "" {
			return nil, nil, fmt.Errorf("%s: --dim, --set and --preset do not apply to IR files", path)
		}
		m, err := ir.ParseAndVerify(path, string(src))
		return m, src, err
	default:
		if l := frontends[ext]; l != nil {
			m, err := l(path, src, opts)
			return m, src, err
		}
		return nil, nil, fmt.Errorf("%s: unknown model format %q (want .onnx, .ppm or .ir)", path, ext)
	}
}

// frontends maps extensions to loaders; frontends.go fills it.
var frontends = map[string]func(path string, src []byte, opts LoadOptions) (*ir.Module, error){}

func dirOf(path string) string {
	d := filepath.Dir(path)
	if d == "" {
		return "."
	}
	return d
}
