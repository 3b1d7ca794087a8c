package main

import (
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/device"
)

func init() {
	commands = append(commands, &command{
		name: "compare", args: "A B [--rtol R] [--atol A]",
		summary: "Compare two safetensors checkpoints (files or checkpoint directories), or two single tensors (.npy or ONNX TensorProto .pb, e.g. an infer output against a test set's output_0.pb), tensor by tensor; exit 1 when any element differs beyond atol + rtol·|b|.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			rtol := fs.Float64("rtol", 1e-5, "relative tolerance `R`")
			atol := fs.Float64("atol", 1e-8, "absolute tolerance `A`")
			return func(args []string) error {
				if len(args) != 2 {
					return usagef("want two files, got %d arguments", len(args))
				}
				// NaN compares false with everything, so a NaN tolerance would pass any input.
				if !(*rtol >= 0) || !(*atol >= 0) {
					return usagef("tolerances must be non-negative numbers")
				}
				if isNpy(args[0]) != isNpy(args[1]) {
					return usagef("compare two tensor files (.npy, .pb) or two checkpoints, not one of each")
				}
				a, err := loadTensors(args[0])
				if err != nil {
					return err
				}
				b, err := loadTensors(args[1])
				if err != nil {
					return err
				}
				return compareTensors(e, a, b, *rtol, *atol)
			}
		},
	})
}

// isNpy reports a single-tensor file: .npy, or an ONNX TensorProto .pb.
func isNpy(path string) bool {
	ext := strings.ToLower(filepath.Ext(path))
	return ext == ".npy" || ext == ".pb"
}

// loadTensors reads a .npy file, a safetensors file, or a checkpoint directory.
func loadTensors(path string) (map[string]device.Tensor, error) {
	if isNpy(path) {
		t, err := compiler.ReadTensorFile(path)
		if err != nil {
			return nil, trimPathError(err)
		}
		return map[string]device.Tensor{filepath.Base(path): t}, nil
	}
	// The same resolution as ppc run --resume.
	path, err := runtime.CheckpointPath(path)
	if err != nil {
		return nil, trimPathError(err)
	}
	t, _, err := runtime.ReadSafetensors(path)
	return t, err
}

func compareTensors(e *env, a, b map[string]device.Tensor, rtol, atol float64) error {
	// Two tensor files compare by position, whatever their names.
	if len(a) == 1 && len(b) == 1 {
		for ka := range a {
			for kb := range b {
				if isNpy(ka) && isNpy(kb) {
					b = map[string]device.Tensor{ka: b[kb]}
				}
			}
		}
	}
	var names []string
	for n := range a {
		names = append(names, n)
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	bad := 0
	fmt.Fprintf(e.stdout, "%-40s %14s %14s  %s\n", "tensor", "max abs err", "max rel err", "")
	for _, n := range names {
		ta, okA := a[n]
		tb, okB := b[n]
		switch {
		case !okA || !okB:
			where := "first"
			if okA {
				where = "second"
			}
			fmt.Fprintf(e.stdout, "%-40s %14s %14s  MISSING from the %s\n", n, "-", "-", where)
			bad++
			continue
		case !ta.Type.Shape.Equal(tb.Type.Shape):
			fmt.Fprintf(e.stdout, "%-40s %14s %14s  SHAPE %s vs %s\n", n, "-", "-", ta.Type, tb.Type)
			bad++
			continue
		}
		va, vb := runtime.Float64s(ta), runtime.Float64s(tb)
		var maxAbs, maxRel float64
		ok := true
		for i := range va {
			d := math.Abs(va[i] - vb[i])
			if math.IsNaN(va[i]) != math.IsNaN(vb[i]) {
				d = math.Inf(1)
			} else if math.IsNaN(d) {
				d = 0
			}
			maxAbs = math.Max(maxAbs, d)
			if vb[i] != 0 {
				maxRel = math.Max(maxRel, d/math.Abs(vb[i]))
			} else if d > 0 {
				maxRel = math.Inf(1)
			}
			if d > atol+rtol*math.Abs(vb[i]) {
				ok = false
			}
		}
		verdict := "ok"
		if !ok {
			verdict = "DIFFERS"
			bad++
		}
		fmt.Fprintf(e.stdout, "%-40s %14.3e %14.3e  %s\n", n, maxAbs, maxRel, verdict)
	}
	if bad > 0 {
		return checkFailed{fmt.Errorf("%d of %d tensors differ beyond rtol %g, atol %g", bad, len(names), rtol, atol)}
	}
	fmt.Fprintf(e.stdout, "all %d tensors agree within rtol %g, atol %g\n", len(names), rtol, atol)
	return nil
}
