package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// env is a getenv over a map.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestProbeMissing: on a machine without the NVIDIA libraries (this one, and CI), Probe
// reports each as not found with every place it looked, and Usable names the driver.
func TestProbeMissing(t *testing.T) {
	dir := t.TempDir()
	r := Probe(env(map[string]string{"LD_LIBRARY_PATH": dir, "CUDA_HOME": filepath.Join(dir, "cuda")}))
	if r.Libraries[0].Found() {
		t.Skipf("this machine has an NVIDIA driver (%s); the missing-library report is tested where there is none", r.Libraries[0].Path)
	}
	err := r.Usable()
	if err == nil {
		t.Fatal("Usable: no error without a driver")
	}
	for _, want := range []string{"the NVIDIA driver library libcuda.so.1 / libcuda.so not found (looked in: " + dir + ", ",
		filepath.Join(dir, "cuda", "lib64"), "/usr/local/cuda/lib64", "the dynamic loader's default paths"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Usable: %v\nlacks %q", err, want)
		}
	}
}

// fakeLib compiles C source into a shared library at path (skipping without a C compiler).
func fakeLib(t *testing.T, path, src string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build the fake CUDA libraries")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(t.TempDir(), "lib.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", path, c).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
}

// TestProbeFakeLibraries: stand-in libraries with the real entry points (a driver with two
// GPUs on LD_LIBRARY_PATH; NVRTC, cuBLASLt and NCCL in a virtualenv's nvidia/*/lib
// folders, as pip's wheels install them) are found where a user's would be, opened through
// purego, and asked their versions and GPUs with the driver API's calling conventions.
func TestProbeFakeLibraries(t *testing.T) {
	root := t.TempDir()
	drv := filepath.Join(root, "drv")
	venv := filepath.Join(root, "venv")
	site := filepath.Join(venv, "lib", "python3.11", "site-packages", "nvidia")
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeLib(t, filepath.Join(drv, "libcuda.so.1"), `
#include <string.h>
int cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
int cuDeviceGetCount(int *n) { *n = 2; return 0; }
int cuDeviceGet(int *d, int i) { *d = 10 + i; return 0; }
int cuDeviceGetName(char *b, int n, int d) { strncpy(b, d == 10 ? "Fake H100 80GB HBM3" : "Fake A100-SXM4-40GB", n); return 0; }
int cuDeviceTotalMem_v2(unsigned long long *m, int d) { *m = (d == 10 ? 80ULL : 40ULL) << 30; return 0; }
int cuDeviceGetAttribute(int *v, int a, int d) { *v = a == 75 ? (d == 10 ? 9 : 8) : a == 76 ? 0 : -1; return 0; }
`)
	r := Probe(env(map[string]string{"LD_LIBRARY_PATH": drv, "VIRTUAL_ENV": venv}))
	d := r.Libraries[0]
	if d.Path != filepath.Join(drv, "libcuda.so.1") || d.Version != "CUDA 12.4" || r.Driver != 12040 {
		t.Fatalf("driver: %+v (driver version %d)", d, r.Driver)
	}
	if len(r.GPUs) != 2 || r.GPUs[0].Name != "Fake H100 80GB HBM3" || r.GPUs[0].Memory != 80<<30 || r.GPUs[0].Major != 9 || r.GPUs[1].Major != 8 || r.GPUs[1].Memory != 40<<30 {
		t.Fatalf("GPUs: %+v", r.GPUs)
	}
	if l := r.Libraries[1]; l.Found() {
		t.Logf("the dynamic loader finds an NVRTC on this machine (%s): its absence is not checked", l.Path)
	} else if err := r.Usable(); err == nil || !strings.Contains(err.Error(), "NVRTC (libnvrtc.so.13") || !strings.Contains(err.Error(), filepath.Join(site, "cuda_nvrtc", "lib")+", ") {
		t.Fatalf("Usable without NVRTC: %v", err)
	}
	fakeLib(t, filepath.Join(site, "cuda_nvrtc", "lib", "libnvrtc.so.12"), `int nvrtcVersion(int *a, int *b) { *a = 12; *b = 4; return 0; }`)
	fakeLib(t, filepath.Join(site, "cublas", "lib", "libcublasLt.so.12"), `unsigned long cublasLtGetVersion(void) { return 120402; }`)
	r = Probe(env(map[string]string{"LD_LIBRARY_PATH": drv, "VIRTUAL_ENV": venv}))
	if r.Libraries[1].Path != filepath.Join(site, "cuda_nvrtc", "lib", "libnvrtc.so.12") {
		t.Errorf("NVRTC at %s", r.Libraries[1].Path)
	}
	if err := r.Usable(); err != nil {
		t.Errorf("Usable without NCCL (needed only for device-to-device messages): %v", err)
	}
	fakeLib(t, filepath.Join(site, "nccl", "lib", "libnccl.so.2"), `int ncclGetVersion(int *v) { *v = 21903; return 0; }`)
	r = Probe(env(map[string]string{"LD_LIBRARY_PATH": drv, "VIRTUAL_ENV": venv}))
	for i, want := range []string{"CUDA 12.4", "12.4", "12.4.2", "2.19.3"} {
		if l := r.Libraries[i]; !l.Found() || l.Version != want || l.Err != "" {
			t.Errorf("%s: %+v, want version %s", l.Name, l, want)
		}
	}
	if err := r.Usable(); err != nil {
		t.Errorf("Usable with every library: %v", err)
	}
	// Opening the device: a GPU the driver does not have, and a driver without the entry
	// points the device calls, are errors (ppc run exits 2 with them), not panics.
	if _, err := Open(r, 2, false, t.TempDir()); err == nil || err.Error() != "GPU 2: the driver reports 2 GPU(s)" {
		t.Errorf("Open of a third GPU: %v", err)
	}
	if _, err := Open(r, 0, false, t.TempDir()); err == nil || !strings.Contains(err.Error(), "cuDevicePrimaryCtxRetain") {
		t.Errorf("Open with a driver lacking the device's entry points: %v", err)
	}
}

// TestProbeCUDA13Wheels: CUDA 13's pip wheels put NVRTC and cuBLASLt in nvidia/cu13/lib (NCCL
// stays in nvidia/nccl/lib), and PyTorch's images ship a virtualenv that is not activated:
// its python3 is first on PATH. Probe finds the libraries there.
func TestProbeCUDA13Wheels(t *testing.T) {
	venv := filepath.Join(t.TempDir(), "venv")
	site := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia")
	if err := os.MkdirAll(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(venv, "bin", "python3"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fakeLib(t, filepath.Join(site, "cu13", "lib", "libnvrtc.so.13"), `int nvrtcVersion(int *a, int *b) { *a = 13; *b = 0; return 0; }`)
	fakeLib(t, filepath.Join(site, "cu13", "lib", "libcublasLt.so.13"), `unsigned long cublasLtGetVersion(void) { return 130100; }`)
	fakeLib(t, filepath.Join(site, "nccl", "lib", "libnccl.so.2"), `int ncclGetVersion(int *v) { *v = 22703; return 0; }`)
	r := Probe(env(map[string]string{"PATH": "/nonexistent:" + filepath.Join(venv, "bin") + ":/usr/bin"}))
	for i, want := range []string{filepath.Join(site, "cu13", "lib", "libnvrtc.so.13"), filepath.Join(site, "cu13", "lib", "libcublasLt.so.13"), filepath.Join(site, "nccl", "lib", "libnccl.so.2")} {
		if l := r.Libraries[i+1]; l.Path != want || l.Err != "" {
			t.Errorf("%s: %+v, want it at %s", l.Name, l, want)
		}
	}
	if v := r.Libraries[1].Version; v != "13.0" {
		t.Errorf("NVRTC version %q", v)
	}
}
