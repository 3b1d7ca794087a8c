package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/runtime/data"
)

func init() {
	commands = append(commands, &command{
		name: "infer", args: "MODEL [--dim k=v]… [--input NAME=FILE]… [--pp N] [--tp N] [--cp N] --output-dir DIR",
		summary: "Run a model's forward pass on CPU: inputs from ONNX TensorProto .pb or .npy files (missing ones drawn at random and saved), each output written as DIR/NAME.npy; a .ppm or IR model whose only output is its loss writes the prediction its loss is computed from (the logits) too, as ppc export outputs it.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			var inputs listFlag
			fs.Var(&inputs, "input", "an input's data: `NAME=FILE` (.pb or .npy; NAME is the model's input name, or the IR argument's; repeatable)")
			outDir := fs.String("output-dir", "", "write outputs (and generated inputs) under `DIR`")
			seed := fs.Uint64("seed", 1, "random seed `N` of generated inputs and of parameters without data")
			var mesh compiler.InferMesh
			fs.IntVar(&mesh.PP, "pp", 1, "run the forward pass as a pipeline of `N` stages (every rank in this process)")
			fs.IntVar(&mesh.TP, "tp", 1, "split the forward pass over `N` tensor-parallel ranks (Megatron's layout, as ppc compile --tp)")
			fs.IntVar(&mesh.CP, "cp", 1, "split each sequence over `N` context-parallel ranks, attention as ring attention (as ppc compile --cp)")
			fs.StringVar(&mesh.CPSplit, "cp-split", "zigzag", "how --cp splits a sequence: zigzag or contiguous (as ppc compile --cp-split)")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one model file, got %d arguments", len(args))
				}
				if *outDir == "" {
					return usagef("--output-dir DIR is required")
				}
				if mesh.PP < 1 || mesh.TP < 1 || mesh.CP < 1 {
					return usagef("--pp, --tp and --cp must be at least 1")
				}
				lo, err := lf.options()
				if err != nil {
					return err
				}
				given := map[string]string{}
				for _, kv := range inputs {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" || v == "" {
						return usagef("--input %q: want NAME=FILE", kv)
					}
					if _, dup := given[k]; dup {
						return usagef("--input %s given twice", k)
					}
					given[k] = v
				}
				if err := checkOutputDir(*outDir); err != nil {
					return fmt.Errorf("--output-dir: %v", err)
				}
				outs, gen, err := compiler.Infer(args[0], lo, mesh, given, *seed)
				if err != nil {
					return err
				}
				if err := os.MkdirAll(*outDir, 0o755); err != nil {
					return fmt.Errorf("--output-dir: %w", trimPathError(err))
				}
				if len(gen) > 0 {
					if err := os.MkdirAll(filepath.Join(*outDir, "inputs"), 0o755); err != nil {
						return err
					}
				}
				for name, t := range gen {
					p := filepath.Join(*outDir, "inputs", sanitize(name)+".npy")
					if err := data.WriteNpy(p, t); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "input  %-24s %-16s generated, saved to %s\n", name, t.Type, p)
				}
				for _, o := range outs {
					p := filepath.Join(*outDir, sanitize(o.Name)+".npy")
					if err := data.WriteNpy(p, o.Tensor); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "output %-24s %-16s %s\n", o.Name, o.Tensor.Type, p)
				}
				return nil
			}
		},
	})
}

// sanitize maps a tensor name to a file name: every character outside [A-Za-z0-9._-]
// becomes '_'.
func sanitize(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}
