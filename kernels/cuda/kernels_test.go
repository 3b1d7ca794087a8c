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

// TestKernelsCompileToPTX: every generated kernel compiles to PTX for sm_80 (A100) and
// sm_90 (H100) with clang and no CUDA SDK (CI installs clang), each an entry point, and none
// of the attention kernels keeps a per-thread array in local memory (their scores and
// accumulators must be registers: a local array is a load and store per FMA). A clang too
// old for an architecture (Debian 12's clang 14 knows no sm_90) skips it, saying so.
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
	for _, arch := range []string{"sm_80", "sm_90"} {
		ptx := filepath.Join(dir, arch+".ptx")
		out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch="+arch, "-O2", "-S", "-o", ptx, src).CombinedOutput()
		if err != nil && strings.Contains(string(out), "unsupported CUDA gpu architecture") {
			t.Logf("%s: clang does not know %s; not checked", clang, arch)
			continue
		}
		if err != nil {
			t.Fatalf("clang --cuda-gpu-arch=%s: %v\n%s", arch, err, out)
		}
		text, err := os.ReadFile(ptx)
		if err != nil {
			t.Fatal(err)
		}
		entries := strings.Split(string(text), ".entry ")
		for _, k := range ks {
			found := false
			for _, e := range entries[1:] {
				if !strings.HasPrefix(e, k.Name+"(") {
					continue
				}
				found = true
				if k.Block > 0 && strings.Contains(e, ".local") {
					t.Errorf("%s: tile kernel %s keeps an array in local memory", arch, k.Name)
				}
			}
			if !found {
				t.Errorf("the %s PTX has no entry %s", arch, k.Name)
			}
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
