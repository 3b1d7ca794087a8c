package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/frontend/onnx"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

func init() {
	commands = append(commands, &command{
		name: "infer", args: "MODEL [--dim k=v]… [--input NAME=FILE]… --output-dir DIR",
		summary: "Run a model's forward pass on CPU: inputs from ONNX TensorProto .pb or .npy files (missing ones drawn at random and saved), each output written as DIR/NAME.npy.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			var inputs listFlag
			fs.Var(&inputs, "input", "an input's data: `NAME=FILE` (.pb or .npy; repeatable)")
			outDir := fs.String("output-dir", "", "write outputs (and generated inputs) under `DIR`")
			seed := fs.Uint64("seed", 1, "seed of generated inputs and parameters without data")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one model file, got %d arguments", len(args))
				}
				if *outDir == "" {
					return usagef("--output-dir DIR is required")
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
					given[k] = v
				}
				outs, gen, err := Infer(args[0], lo, given, *seed)
				if err != nil {
					return err
				}
				if err := os.MkdirAll(*outDir, 0o755); err != nil {
					return err
				}
				if len(gen) > 0 {
					if err := os.MkdirAll(filepath.Join(*outDir, "inputs"), 0o755); err != nil {
						return err
					}
				}
				for name, t := range gen {
					p := filepath.Join(*outDir, "inputs", sanitize(name)+".npy")
					if err := runtime.WriteNpy(p, t); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "input  %-24s %-16s generated, saved to %s\n", name, t.Type, p)
				}
				for _, o := range outs {
					p := filepath.Join(*outDir, sanitize(o.name)+".npy")
					if err := runtime.WriteNpy(p, o.t); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "output %-24s %-16s %s\n", o.name, o.t.Type, p)
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

type namedTensor struct {
	name string
	t    device.Tensor
}

// Infer compiles the model for inference and runs it once. given maps input names (the
// model's own names, or IR argument names) to .pb/.npy files; the rest are generated and
// returned so the caller can save them.
func Infer(model string, lo compiler.LoadOptions, given map[string]string, seed uint64) ([]namedTensor, map[string]device.Tensor, error) {
	res, err := compiler.Compile(model, compiler.Options{Load: lo, ForwardOnly: true, Microbatches: 1})
	if err != nil {
		return nil, nil, err
	}
	job, err := runtime.New(res.Output, cpu.New())
	if err != nil {
		return nil, nil, err
	}
	if err := job.Init(seed); err != nil {
		return nil, nil, err
	}
	plan := job.Plan
	data := runtime.Fixed{}
	generated := map[string]device.Tensor{}
	used := map[string]bool{}
	synth := &runtime.Synthetic{Seed: seed, Plan: plan}
	for _, in := range plan.Inputs {
		name := in.ModelName
		if name == "" {
			name = in.Name
		}
		dt, _ := ir.ParseDType(in.DType)
		want := ir.Type{DType: dt, Shape: ir.Shape(in.MicrobatchShape)}
		path, ok := given[name]
		if !ok {
			path, ok = given[in.Name]
			used[in.Name] = ok
		} else {
			used[name] = true
		}
		if !ok {
			t := device.Tensor{Type: want, Data: make([]byte, want.Bytes())}
			if err := synth.Fill(in, 1, 0, t); err != nil {
				return nil, nil, err
			}
			data[in.Name] = t
			generated[name] = t
			continue
		}
		t, err := readInputFile(path)
		if err != nil {
			return nil, nil, err
		}
		if !t.Type.Equal(want) {
			return nil, nil, fmt.Errorf("input %q: %s holds %s, the model needs %s", name, path, t.Type, want)
		}
		data[in.Name] = t
	}
	for name := range given {
		if !used[name] {
			var names []string
			for _, in := range plan.Inputs {
				n := in.ModelName
				if n == "" {
					n = in.Name
				}
				names = append(names, n)
			}
			return nil, nil, fmt.Errorf("--input %s: the model has no such input (inputs: %s)", name, strings.Join(names, ", "))
		}
	}
	if _, err := job.Step(runtime.Options{Seed: seed, Data: data}); err != nil {
		return nil, nil, err
	}
	outs := job.Outputs(0)
	var result []namedTensor
	for _, name := range plan.Outputs {
		result = append(result, namedTensor{name, outs[name]})
	}
	return result, generated, nil
}

func readInputFile(path string) (device.Tensor, error) {
	if strings.EqualFold(filepath.Ext(path), ".npy") {
		return runtime.ReadNpy(path)
	}
	_, d, err := onnx.ReadTensor(path)
	if err != nil {
		return device.Tensor{}, err
	}
	data := d.Data
	if d.Splat {
		data = make([]byte, 0, d.Type.Bytes())
		for i := 0; i < d.Type.NumElements(); i++ {
			data = append(data, d.Data...)
		}
	}
	return device.Tensor{Type: d.Type, Data: append([]byte(nil), data...)}, nil
}
