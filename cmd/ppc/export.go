package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/frontend/onnx/export"
)

func init() {
	commands = append(commands, &command{
		name: "export", args: "MODEL -o FILE.onnx [--preset P] [--set k=v]… [--dim k=v]… [--seed N] [--opset N]",
		summary: fmt.Sprintf("Write a model (.ppm, .ir or .onnx) as a standard ONNX file (opset %d unless --opset says another): its forward pass and loss over the whole batch, "+
			"the weights ppc run --seed N starts from as initializers, the labels as an input and the loss as an output named loss.", export.Opset),
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			out := fs.String("o", "", "output `FILE.onnx`")
			seed := fs.Uint64("seed", 1, "write the parameters as ppc run --seed `N` initialises them (imported weights as they are)")
			opset := fs.Int("opset", export.Opset, fmt.Sprintf("ONNX opset `N` to write, %d to %d: from 23 the fused attention is ONNX's Attention op, before it the decomposed chain", export.Opset, export.MaxOpset))
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one model file, got %d arguments", len(args))
				}
				if *out == "" {
					return usagef("-o FILE.onnx is required")
				}
				// ppc reads a model by its extension: a file named otherwise could not be
				// compiled back.
				if !strings.EqualFold(filepath.Ext(*out), ".onnx") {
					return usagef("-o %s: the file name must end in .onnx", *out)
				}
				lo, err := lf.options()
				if err != nil {
					return err
				}
				if *opset < export.Opset || *opset > export.MaxOpset {
					return usagef("--opset %d: ppc export writes opsets %d to %d", *opset, export.Opset, export.MaxOpset)
				}
				if st, err := os.Stat(*out); err == nil && st.IsDir() {
					return fmt.Errorf("-o: %s is a directory", *out)
				}
				// Find out before the export whether the file's directory exists or can be made.
				dir := filepath.Dir(*out)
				if err := checkOutputDir(dir); err != nil {
					return fmt.Errorf("-o: %v", err)
				}
				mp, err := compiler.Export(args[0], lo, *seed, version, *opset)
				if err != nil {
					return err
				}
				data, err := proto.MarshalOptions{Deterministic: true}.Marshal(mp)
				if err != nil {
					return err
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return fmt.Errorf("-o: %w", trimPathError(err))
				}
				if err := writeFileReplacing(*out, data); err != nil {
					return fmt.Errorf("-o: %w", trimPathError(err))
				}
				g := mp.Graph
				fmt.Fprintf(e.stdout, "exported %s to %s (ONNX opset %d, IR version %d): %d node(s), %d initializer(s), inputs %s, outputs %s\n",
					args[0], *out, mp.OpsetImport[0].Version, mp.IrVersion, len(g.Node), len(g.Initializer), valueNames(g.Input), valueNames(g.Output))
				return nil
			}
		},
	})
}

func valueNames[T interface{ GetName() string }](vs []T) string {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.GetName()
	}
	return strings.Join(names, ", ")
}

// writeFileReplacing writes data to a temporary file beside path and renames it over path,
// so that a failed write (a full disk) leaves no truncated model behind, nor destroys the
// file it was to replace.
func writeFileReplacing(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
