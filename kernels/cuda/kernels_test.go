package cuda_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

var (
	f32 = ir.F32
	bf  = ir.BF16
)

func ty(d ir.DType, s ...int) ir.Type { return ir.Type{DType: d, Shape: ir.Shape(s)} }

// TestKernelsCompileToPTX: every generated kernel compiles to PTX for sm_80 with clang
// and no CUDA SDK (CI installs clang), each an entry point.
func TestKernelsCompileToPTX(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("clang is not installed (.ci/run installs it): the kernels' PTX compile is not checked here")
	}
	ks := cudatest.Kernels(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "kernels.cu")
	if err := os.WriteFile(src, []byte(cuda.Source(ks...)), 0o644); err != nil {
		t.Fatal(err)
	}
	ptx := filepath.Join(dir, "kernels.ptx")
	out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80", "-O2", "-S", "-o", ptx, src).CombinedOutput()
	if err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	text, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if !strings.Contains(string(text), ".entry "+k.Name+"(") {
			t.Errorf("the PTX has no entry %s", k.Name)
		}
	}
}

// TestEveryCPUOpHasACUDAKernel: the CUDA device covers every op the CPU device implements,
// and every one is among the cases checked against it (matmul and constant have their own
// tests: TestPlanMatmulMatchesCPU, runtime/cuda's TestDeviceMemory).
func TestEveryCPUOpHasACUDAKernel(t *testing.T) {
	tested := map[string]bool{"matmul": true, "constant": true}
	for _, c := range cudatest.Cases() {
		if c.Spec.Op != nil {
			tested[c.Spec.Op.Name] = true
		}
	}
	for _, op := range cpu.Ops() {
		if !cuda.HasKernel(op) {
			t.Errorf("op %s has a CPU kernel and no CUDA kernel", op)
		} else if !tested[op] {
			t.Errorf("op %s has no kernel case", op)
		}
	}
}

// TestReducePlannedInChunks: a bias's gradient (the sum of [8, 1024, 768] over its first two
// axes) is two kernels, a thread per chunk of 64 rows and column and then one per column,
// not 768 threads reading 8,192 elements each; a reduction with many results stays one.
func TestReducePlannedInChunks(t *testing.T) {
	for _, c := range []struct {
		in, out ir.Shape
		axes    []int
		steps   int
	}{{ir.Shape{8, 1024, 768}, ir.Shape{768}, []int{0, 1}, 2}, {ir.Shape{3, 5, 7}, ir.Shape{3, 5}, []int{-1}, 1}, {ir.Shape{70000, 600}, ir.Shape{70000}, []int{1}, 1}} {
		s := &device.Spec{Op: ir.MustLookup("reduce_sum"), Attrs: ir.Attrs{{Name: "axes", Value: ir.Ints(c.axes...)}},
			In: []ir.Type{{DType: ir.BF16, Shape: c.in}}, Out: []ir.Type{{DType: ir.BF16, Shape: c.out}}}
		p, err := cuda.PlanSite(s, "k")
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Steps) != c.steps {
			t.Errorf("reduce_sum %v over %v: %d kernels, want %d", c.in, c.axes, len(p.Steps), c.steps)
		}
		if c.steps == 2 && (len(p.Scratch) != 1 || p.Scratch[0].NumElements() != 128*768 || p.Steps[0].Kernel.N != 128*768) {
			t.Errorf("reduce_sum %v: scratch %v, first kernel over %d indices; want 128 chunks × 768", c.in, p.Scratch, p.Steps[0].Kernel.N)
		}
	}
}
