package compiler

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"ppc.dev/ppc/ir"
)

// LoadOptions are the frontend options.
type LoadOptions struct {
	Dims         map[string]int    // ONNX symbolic dims
	Set          map[string]string // DSL config overrides
	Preset       string            // DSL preset
	Microbatches int
	Replicas     int                  // data-parallel replicas among the Microbatches (messages)
	Frozen       map[string]*ir.Dense // ONNX graph inputs fixed at compile time (shapes)
	Batch        int                  // ONNX models exported with a batch of 1: the batch to re-batch them to (0: as exported)
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
		if len(opts.Dims) > 0 || len(opts.Set) > 0 || opts.Preset != "" || opts.Batch > 0 {
			return nil, nil, fmt.Errorf("%s: --dim, --set, --preset and --batch do not apply to IR files", path)
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

// modelIdentity is what the plan's source hash covers: the resolved model, so that a
// checkpoint of `--set n_layers=8` is known to be of another model than `--set n_layers=4`
// compiled from the same file. It is the source followed by the frontend options that shape
// the model (preset, --set, --dim, --batch, frozen inputs) in a canonical order, and not the printed
// IR of the loaded module, because the frontends build @forward for one micro-batch: that
// IR changes with --microbatches, a layout choice that checkpoints survive (any layout
// resumes any other), and so does --pp, which the frontends never see. The cost is that
// restating a default (`--set n_layers=8` where 8 is the default) changes the hash too;
// that is harmless, as Resume compares the tensors themselves and a different hash over
// matching tensors is only a warning.
func modelIdentity(src []byte, opts LoadOptions) []byte {
	// A digest, written as it goes: a model file can be gigabytes of weights, which a copy
	// into one buffer would double in memory.
	b := sha256.New()
	b.Write(src)
	io.WriteString(b, "\x00ppc model options\n")
	if opts.Preset != "" {
		fmt.Fprintf(b, "preset %q\n", opts.Preset)
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Set)) {
		fmt.Fprintf(b, "set %q = %q\n", k, strings.TrimSpace(opts.Set[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Dims)) {
		fmt.Fprintf(b, "dim %q = %d\n", k, opts.Dims[k])
	}
	if opts.Batch > 0 {
		fmt.Fprintf(b, "batch %d\n", opts.Batch)
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Frozen)) {
		d := opts.Frozen[k]
		fmt.Fprintf(b, "frozen %q %s splat=%v %d\n", k, d.Type, d.Splat, len(d.Data))
		b.Write(d.Data)
	}
	return b.Sum(nil)
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
