package dsl

import (
	"os"
	"strings"

	"ppc.dev/ppc/ir"
)

// Options are the command-line choices that shape an import.
type Options struct {
	// Set overrides config constants (`--set d_model=1024`); each value is a DSL expression,
	// which may name other config constants.
	Set map[string]string
	// Preset selects a named preset (`--preset tiny`).
	Preset string
	// Microbatches, when above 1, divides the config constant `batch` (the global batch)
	// before anything else is evaluated, so @forward describes one micro-batch. It is an
	// error if the model has no `batch` or Microbatches does not divide it.
	Microbatches int
	// Replicas, when above 1, says that Microbatches counts the micro-batches of all the
	// data-parallel replicas (Replicas of them, Microbatches/Replicas each), for messages.
	Replicas int
}

// Load parses a model, lowers it to an IR module and verifies the module. Errors are
// *ir.Error (or ir.ErrorList) values that print file:line:col, the source line and a caret.
func Load(filename string, src []byte, opts Options) (*ir.Module, error) {
	// Editors on Windows may start a file with a UTF-8 byte-order mark; it is not a model.
	text := strings.TrimPrefix(string(src), "\ufeff")
	srcs := sources{filename: text}
	f, err := parseFile(filename, text, srcs)
	if err != nil {
		return nil, err
	}
	l := newLowerer(filename, srcs, f, opts)
	m, err := l.lower()
	if err != nil {
		return nil, err
	}
	if err := ir.Verify(m); err != nil {
		return nil, err
	}
	return m, nil
}

// LoadFile reads and loads a model file.
func LoadFile(path string, opts Options) (*ir.Module, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Load(path, src, opts)
}

// Presets returns the names of the model's presets in the order they are declared.
func Presets(filename string, src []byte) ([]string, error) {
	text := strings.TrimPrefix(string(src), "\ufeff")
	f, err := parseFile(filename, text, sources{filename: text})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range f.Decls {
		if d.Preset != nil {
			names = append(names, presetName(d.Preset))
		}
	}
	return names, nil
}
