package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/device"
)

func f32s(vals ...float32) device.Tensor {
	t := device.Tensor{Type: ir.T(ir.F32, len(vals)), Data: make([]byte, 4*len(vals))}
	copy(t.F32(), vals)
	return t
}

func writeCheckpoint(t *testing.T, dir string, tensors map[string]device.Tensor, meta map[string]string) string {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, checkpoint.SingleFile), tensors, meta); err != nil {
		t.Fatal(err)
	}
	return dir
}

// compare lists only the tensors that differ, -v all of them, and the verdict last.
func TestCompareListsDifferences(t *testing.T) {
	dir := t.TempDir()
	meta := map[string]string{"step": "2", "model": "m", "source_hash": "abc"}
	a := writeCheckpoint(t, filepath.Join(dir, "a"), map[string]device.Tensor{"alpha": f32s(1, 2), "beta": f32s(3, 4), "gamma": f32s(5, 6)}, meta)
	b := writeCheckpoint(t, filepath.Join(dir, "b"), map[string]device.Tensor{"alpha": f32s(1, 2), "beta": f32s(3, 4.5), "gamma": f32s(5, 6)}, meta)
	code, stdout, errOut := ppc(t, "", "compare", a, b)
	if code != exitFailed || !strings.Contains(stdout, "beta") || !strings.Contains(stdout, "DIFFERS (1 of 2 elements)") ||
		strings.Contains(stdout, "alpha") || strings.Contains(stdout, "gamma") ||
		!strings.Contains(errOut, "1 of 3 tensors differ beyond rtol 1e-05, atol 1e-08 (-v lists every tensor)") {
		t.Fatalf("exit %d\n%s%s", code, stdout, errOut)
	}
	code, stdout, _ = ppc(t, "", "compare", a, b, "-v")
	if code != exitFailed || !strings.Contains(stdout, "alpha") || !strings.Contains(stdout, "gamma") || strings.Count(stdout, "  ok") != 2 {
		t.Fatalf("-v: exit %d\n%s", code, stdout)
	}
	// All equal: no table, one line.
	code, stdout, _ = ppc(t, "", "compare", a, a)
	if code != 0 || strings.Count(stdout, "\n") != 1 || !strings.HasPrefix(stdout, "all 3 tensors agree") {
		t.Fatalf("same: exit %d\n%s", code, stdout)
	}
}

// An i64 tensor is not an f32 tensor with the same values.
func TestCompareDTypeMismatch(t *testing.T) {
	dir := t.TempDir()
	i := writeNpy(t, dir, "i.npy", "<i8", "3,", []float64{1, 2, 3})
	f := writeNpy(t, dir, "f.npy", "<f4", "3,", []float64{1, 2, 3})
	code, stdout, errOut := ppc(t, "", "compare", i, f)
	if code != exitFailed || !strings.Contains(stdout, "DTYPE i64[3] vs f32[3]") || !strings.Contains(errOut, "1 of 1 tensors differ") {
		t.Fatalf("exit %d\n%s%s", code, stdout, errOut)
	}
}

// 0 against 0 and tiny values within atol give finite figures beside ok; a value against an
// infinity differs whatever rtol is.
func TestCompareRelativeErrorIsFinite(t *testing.T) {
	dir := t.TempDir()
	a := writeNpy(t, dir, "a.npy", "<f8", "4,", []float64{0, 1e-30, 1, -2})
	b := writeNpy(t, dir, "b.npy", "<f8", "4,", []float64{0, 0, 1, -2})
	code, stdout, _ := ppc(t, "", "compare", a, b, "-v")
	if code != 0 || strings.Contains(stdout, "Inf") || strings.Contains(stdout, "NaN") || !strings.Contains(stdout, "0.000e+00  ok") {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	c := writeNpy(t, dir, "c.npy", "<f8", "4,", []float64{0, 0, 1, -2.5})
	code, stdout, _ = ppc(t, "", "compare", a, c, "-v")
	if code != exitFailed || !strings.Contains(stdout, "5.000e-01      2.000e-01  DIFFERS (1 of 4 elements)") {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	inf := writeNpy(t, dir, "inf.npy", "<f8", "4,", []float64{0, 0, math.Inf(1), -2})
	if code, stdout, _ := ppc(t, "", "compare", b, inf, "--rtol", "1"); code != exitFailed || !strings.Contains(stdout, "DIFFERS (1 of 4 elements)") {
		t.Fatalf("1 against +Inf: exit %d\n%s", code, stdout)
	}
}

// Checkpoints of different steps (a run and its continuation) compare tensor by tensor with a
// note; the tensors decide the exit status.
func TestCompareCheckpointMetadata(t *testing.T) {
	dir := t.TempDir()
	ts := map[string]device.Tensor{"w": f32s(1, 2)}
	a := writeCheckpoint(t, filepath.Join(dir, "a"), ts, map[string]string{"step": "1", "model": "m", "source_hash": "abc"})
	b := writeCheckpoint(t, filepath.Join(dir, "b"), ts, map[string]string{"step": "2", "model": "m", "source_hash": "abc"})
	c := writeCheckpoint(t, filepath.Join(dir, "c"), map[string]device.Tensor{"w": f32s(1, 3)}, map[string]string{"step": "2", "model": "other", "source_hash": "def"})
	code, stdout, _ := ppc(t, "", "compare", a, b)
	if code != 0 || !strings.Contains(stdout, "note: the checkpoints are at different steps: 1 and 2") || !strings.Contains(stdout, "all 1 tensors agree") ||
		strings.Contains(stdout, "different models") {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	code, stdout, _ = ppc(t, "", "compare", b, c)
	for _, want := range []string{"note: the checkpoints are of different models: m and other", "compiled from different sources (source hash): abc and def", "DIFFERS"} {
		if code != exitFailed || !strings.Contains(stdout, want) {
			t.Errorf("exit %d, want %q in\n%s", code, want, stdout)
		}
	}
	if strings.Contains(stdout, "different steps") {
		t.Errorf("equal steps noted:\n%s", stdout)
	}
}
