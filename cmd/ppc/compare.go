package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
)

func init() {
	commands = append(commands, &command{
		name: "compare", args: "A B [--rtol R] [--atol A] [-v]",
		summary: "Compare two safetensors checkpoints (files or checkpoint directories), or two single tensors (.npy or ONNX TensorProto .pb, e.g. an infer output against a test set's output_N.pb), tensor by tensor; list the tensors that differ (a value beyond atol + rtol·|b|, a dtype, a shape, a missing tensor), note checkpoints of different steps, models or sources, and exit 1 when any tensor differs.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			rtol := fs.Float64("rtol", 1e-5, "relative tolerance `R`")
			atol := fs.Float64("atol", 1e-8, "absolute tolerance `A`")
			verbose := fs.Bool("v", false, "list every tensor, not only those that differ")
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
				a, metaA, err := loadTensors(args[0])
				if err != nil {
					return err
				}
				b, metaB, err := loadTensors(args[1])
				if err != nil {
					return err
				}
				return compareTensors(e, a, b, metaA, metaB, tolerance{*rtol, *atol}, *verbose)
			}
		},
	})
}

// isNpy reports a single-tensor file: .npy, or an ONNX TensorProto .pb.
func isNpy(path string) bool {
	ext := strings.ToLower(filepath.Ext(path))
	return ext == ".npy" || ext == ".pb"
}

// loadTensors reads a .npy file, a safetensors file, or a checkpoint directory, with the
// safetensors metadata (nil for a single tensor).
func loadTensors(path string) (map[string]device.Tensor, map[string]string, error) {
	if isNpy(path) {
		t, err := compiler.ReadTensorFile(path)
		if err != nil {
			return nil, nil, trimPathError(err)
		}
		return map[string]device.Tensor{filepath.Base(path): t}, nil, nil
	}
	// A checkpoint directory or its index, as ppc run --resume reads them; any other file
	// is safetensors, whatever wrote it.
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		// An older checkpoint directory holds one safetensors file.
		legacy := filepath.Join(path, checkpoint.SingleFile)
		if _, err := os.Stat(filepath.Join(path, checkpoint.IndexFile)); err != nil {
			if _, err := os.Stat(legacy); err == nil {
				path = legacy
			}
		}
	}
	if st, err := os.Stat(path); err == nil && (st.IsDir() || strings.HasSuffix(path, ".json")) {
		t, m, err := checkpoint.Read(path)
		if err != nil {
			return nil, nil, err
		}
		return t, map[string]string{"step": strconv.Itoa(m.Step), "model": m.Model, "source_hash": m.SourceHash}, nil
	}
	t, m, err := checkpoint.ReadSafetensors(path)
	return t, m, trimPathError(err)
}

// tolerance is compare's test of one element pair: |a − b| ≤ atol + rtol·|b|.
type tolerance struct{ rtol, atol float64 }

// tensorDiff is how one tensor compares.
type tensorDiff struct {
	maxAbs, maxRel float64
	bad            int // elements beyond tolerance
	n              int
}

// compareElems compares two tensors of the same shape element by element. NaN matches only
// NaN and an infinity only the same infinity (rtol·|Inf| would let any value pass). The
// relative error of a pair is |a − b| / max(|a|, |b|), taken only where that magnitude is
// above atol: below it the absolute error is what the tolerance judges, and a relative
// error of tiny values (1e-30 against 0 is 100%) or of 0 against 0 (0/0) says nothing. So
// the figures are finite whenever the verdict is ok.
func compareElems(va, vb []float64, tol tolerance) tensorDiff {
	d := tensorDiff{n: len(va)}
	for i := range va {
		a, b := va[i], vb[i]
		var diff float64
		switch {
		case math.IsNaN(a) || math.IsNaN(b):
			if math.IsNaN(a) != math.IsNaN(b) {
				diff = math.Inf(1)
			}
		case math.IsInf(a, 0) || math.IsInf(b, 0):
			if a != b {
				diff = math.Inf(1)
			}
		default:
			diff = math.Abs(a - b)
		}
		if diff > tol.atol+tol.rtol*math.Abs(b) || math.IsInf(diff, 1) {
			d.bad++
		}
		d.maxAbs = math.Max(d.maxAbs, diff)
		if m := math.Max(math.Abs(a), math.Abs(b)); diff > 0 && (m > tol.atol || math.IsInf(diff, 1)) {
			d.maxRel = math.Max(d.maxRel, diff/m)
			if math.IsInf(diff, 1) || math.IsNaN(d.maxRel) {
				d.maxRel = math.Inf(1)
			}
		}
	}
	return d
}

// checkpointNotes says how two checkpoints' metadata differ: another step is expected when
// comparing a run against its continuation, so it is a note, not a failure; the tensors
// decide that.
func checkpointNotes(a, b map[string]string) []string {
	if a == nil || b == nil {
		return nil
	}
	var notes []string
	for _, k := range []struct{ key, what string }{
		{"step", "at different steps"},
		{"model", "of different models"},
		{"source_hash", "compiled from different sources (source hash)"},
	} {
		if va, vb := a[k.key], b[k.key]; va != vb {
			notes = append(notes, fmt.Sprintf("note: the checkpoints are %s: %s and %s", k.what, orUnknown(va), orUnknown(vb)))
		}
	}
	return notes
}

func orUnknown(s string) string {
	if s == "" {
		return "(not recorded)"
	}
	return s
}

func compareTensors(e *env, a, b map[string]device.Tensor, metaA, metaB map[string]string, tol tolerance, verbose bool) error {
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
	names := runtime.SortedNames(a, b)
	bad := 0
	var worstAbs, worstRel float64
	header := false
	row := func(name, abs, rel, verdict string) {
		if !header {
			fmt.Fprintf(e.stdout, "%-40s %14s %14s\n", "tensor", "max abs err", "max rel err")
			header = true
		}
		fmt.Fprintf(e.stdout, "%-40s %14s %14s  %s\n", name, abs, rel, verdict)
	}
	for _, n := range names {
		ta, okA := a[n]
		tb, okB := b[n]
		switch {
		case !okA || !okB:
			where := "first"
			if okA {
				where = "second"
			}
			row(n, "-", "-", "MISSING from the "+where)
			bad++
			continue
		case ta.Type.DType != tb.Type.DType:
			// i64 token ids against f32 values can be numerically equal and still not
			// the same tensor.
			row(n, "-", "-", fmt.Sprintf("DTYPE %s vs %s", ta.Type, tb.Type))
			bad++
			continue
		case !ta.Type.Shape.Equal(tb.Type.Shape):
			row(n, "-", "-", fmt.Sprintf("SHAPE %s vs %s", ta.Type, tb.Type))
			bad++
			continue
		}
		d := compareElems(data.Float64s(ta), data.Float64s(tb), tol)
		worstAbs, worstRel = math.Max(worstAbs, d.maxAbs), math.Max(worstRel, d.maxRel)
		switch {
		case d.bad > 0:
			bad++
			row(n, fmt.Sprintf("%.3e", d.maxAbs), fmt.Sprintf("%.3e", d.maxRel), fmt.Sprintf("DIFFERS (%d of %d elements)", d.bad, d.n))
		case verbose:
			row(n, fmt.Sprintf("%.3e", d.maxAbs), fmt.Sprintf("%.3e", d.maxRel), "ok")
		}
	}
	for _, note := range checkpointNotes(metaA, metaB) {
		fmt.Fprintln(e.stdout, note)
	}
	if bad > 0 {
		hint := ""
		if !verbose && bad < len(names) {
			hint = " (-v lists every tensor)"
		}
		return checkFailed{fmt.Errorf("%d of %d tensors differ beyond rtol %g, atol %g%s", bad, len(names), tol.rtol, tol.atol, hint)}
	}
	_, err := fmt.Fprintf(e.stdout, "all %d tensors agree within rtol %g, atol %g (max abs err %.3e, max rel err %.3e)\n", len(names), tol.rtol, tol.atol, worstAbs, worstRel)
	return err
}
