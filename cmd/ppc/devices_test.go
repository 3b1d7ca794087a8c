package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/runtime/cuda"
)

// TestDevicesAndCUDARun: `ppc devices` lists the CPU and, on a machine without the NVIDIA
// libraries, which ones are missing; `ppc run --device cuda` there exits 2 naming the
// driver library and where it looked, never a panic.
func TestDevicesAndCUDARun(t *testing.T) {
	empty := t.TempDir()
	getenv := func(k string) string {
		if k == "LD_LIBRARY_PATH" {
			return empty
		}
		return ""
	}
	var out, errb bytes.Buffer
	if code := run([]string{"devices"}, &env{stdout: &out, stderr: &errb, getenv: getenv}); code != 0 {
		t.Fatalf("ppc devices: exit %d: %s", code, errb.String())
	}
	if strings.Contains(out.String(), "cuda   usable") {
		t.Skip("this machine has the CUDA libraries; the missing-library path is tested where it has none")
	}
	wants := []string{"cpu    available: ", " cores, GEMM kernel ", "cuda   not available: the NVIDIA driver library libcuda.so.1 / libcuda.so not found (looked in: " + empty}
	// A library the dynamic loader finds anyway (CI installs Debian's NVRTC) is listed as found.
	for _, l := range cuda.Probe(getenv).Libraries[1:] {
		if l.Found() {
			wants = append(wants, fmt.Sprintf("%-9s %-12s %s", l.Name, l.Version, l.Path))
		} else {
			wants = append(wants, fmt.Sprintf("%-9s not found", l.Name))
		}
	}
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ppc devices lacks %q:\n%s", want, out.String())
		}
	}
	dir := filepath.Join(t.TempDir(), "mlp")
	if code, _, errs := ppc(t, "", "compile", filepath.Join("..", "..", "testdata", "models", "mlp.ppm"), "-o", dir); code != 0 {
		t.Fatal(errs)
	}
	out.Reset()
	errb.Reset()
	code := run([]string{"run", dir, "--device", "cuda"}, &env{stdout: &out, stderr: &errb, getenv: getenv})
	if code != exitInput || !strings.Contains(errb.String(), "--device cuda: the NVIDIA driver library libcuda.so.1 / libcuda.so not found (looked in: "+empty) ||
		!strings.Contains(errb.String(), "'ppc devices' lists what was found; use --device cpu") || strings.Contains(errb.String(), "panic") {
		t.Errorf("ppc run --device cuda: exit %d\n%s", code, errb.String())
	}
}

// TestDevicesAndDisCUDAErrors: bad usage of ppc devices, ppc dis --cuda and the CUDA flags of
// ppc run exits 2 with a message, never a panic.
func TestDevicesAndDisCUDAErrors(t *testing.T) {
	notProgram := writeFile(t, "x.ppx", "not a program")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"devices", "extra"}, "takes no arguments, got 1"},
		{[]string{"dis", "--cuda", filepath.Join(t.TempDir(), "missing.ppx")}, "no such file or directory"},
		{[]string{"dis", "--cuda", notProgram}, "not a ppc program"},
		{[]string{"run", t.TempDir(), "--tf32"}, "--tf32 applies to --device cuda"},
	} {
		code, _, errs := ppc(t, "", c.args...)
		if code != exitInput || !strings.Contains(errs, c.want) {
			t.Errorf("ppc %v: exit %d, %q; want exit 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// TestPlaceOnGPU: each process drives the GPU of its local rank; with more processes than
// GPUs (a multi-process layout tried on one GPU) they share GPUs round robin and are told
// that messages go through the host, which NCCL's refusal of two members on one GPU needs.
func TestPlaceOnGPU(t *testing.T) {
	for _, c := range []struct{ lr, local, n, gpu int }{{0, 1, 1, 0}, {3, 8, 8, 3}, {1, 2, 1, 0}, {5, 6, 4, 1}, {2, 3, 2, 0}} {
		gpu, note := placeOnGPU(c.lr, c.local, c.n)
		if gpu != c.gpu || (note != "") != (c.local > c.n) {
			t.Errorf("local rank %d of %d on %d GPU(s): GPU %d, note %q; want GPU %d", c.lr, c.local, c.n, gpu, note, c.gpu)
		}
		if note != "" && !strings.Contains(note, fmt.Sprintf("%d processes share this machine's %d GPU(s)", c.local, c.n)) {
			t.Errorf("note %q", note)
		}
	}
}
