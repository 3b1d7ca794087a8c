package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDisCUDACompilesToPTX: `ppc dis --cuda` writes the CUDA C of every elementwise and fused
// launch site of the tiny GPT and Llama plans at several pp/tp/dp settings and precisions,
// and clang compiles all of it to PTX for sm_80 without the CUDA SDK, one entry per kernel;
// every launch site of these models has a kernel (or cuBLASLt calls). clang compiles without
// optimisation: the check is that the source is valid CUDA and lowers to PTX, which -O0 does
// in 6 s where -O1 took 13 (a 110,000-line file), and this was CI's slowest test; the
// optimising compile a run does is NVRTC's, checked in runtime/cuda
// (TestKernelsCompileWithNVRTC).
func TestDisCUDACompilesToPTX(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("clang is not installed (.ci/run installs it): the PTX compile is not checked here")
	}
	models := filepath.Join("..", "..", "testdata", "models")
	for _, c := range [][]string{
		{filepath.Join(models, "gpt.ppm"), "--pp", "2", "--microbatches", "2"},
		{filepath.Join(models, "gpt.ppm"), "--pp", "2", "--tp", "2", "--sp", "--dp", "2", "--microbatches", "2", "--precision", "bf16"},
		{filepath.Join(models, "llama.ppm"), "--tp", "2", "--precision", "fp16"},
	} {
		dir := filepath.Join(t.TempDir(), "plan")
		if code, _, errs := ppc(t, "", append([]string{"compile", "-o", dir}, c...)...); code != 0 {
			t.Fatalf("compile %v: %s", c, errs)
		}
		code, src, errs := ppc(t, "", "dis", "--cuda", dir)
		if code != 0 {
			t.Fatalf("dis --cuda %v: exit %d: %s", c, code, errs)
		}
		cu := filepath.Join(t.TempDir(), "k.cu")
		if err := os.WriteFile(cu, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ptx := filepath.Join(t.TempDir(), "k.ptx")
		if out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80", "-O0", "-S", "-o", ptx, cu).CombinedOutput(); err != nil {
			t.Fatalf("%v: clang: %v\n%s", c, err, out)
		}
		text, _ := os.ReadFile(ptx)
		// The PTX's entry points, read once: tens of MB searched once per kernel took half
		// the test's time.
		entries := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)\.entry (\w+)\(`).FindAllSubmatch(text, -1) {
			entries[string(m[1])] = true
		}
		kernels := regexp.MustCompile(`(?m)^PPC_GLOBAL void (rank_\d+_k\d+(?:_pre)?(?:_r\d+)?)\(`).FindAllStringSubmatch(src, -1)
		if len(kernels) < 20 {
			t.Fatalf("%v: only %d kernels", c, len(kernels))
		}
		for _, k := range kernels {
			if !entries[k[1]] {
				t.Errorf("%v: no PTX entry for %s", c, k[1])
			}
		}
		if !strings.Contains(src, "cuBLASLt call(s) for the matmul launch sites") || !strings.Contains(src, ": cuBLASLt CUBLAS_COMPUTE_32F, op(A) ") {
			t.Errorf("%v: the matmuls are not listed as cuBLASLt calls", c)
		}
		if i := strings.Index(src, "without a CUDA kernel"); i >= 0 {
			t.Errorf("%v: launch sites without a CUDA kernel:%s", c, src[i:])
		}
		// With tensor parallelism the collectives' own kernels (NCCL runs' ordered folds and
		// permutes) are printed and compile too.
		colls := regexp.MustCompile(`(?m)^PPC_GLOBAL void ((?:fold|permute)_\w+)\(`).FindAllStringSubmatch(src, -1)
		colls = slices.DeleteFunc(colls, func(m []string) bool { return strings.HasSuffix(m[1], "_host") })
		if slices.Contains(c, "--tp") && len(colls) == 0 {
			t.Errorf("%v: no collective kernels", c)
		}
		for _, k := range colls {
			if !entries[k[1]] {
				t.Errorf("%v: no PTX entry for %s", c, k[1])
			}
		}
		t.Logf("%v: %d kernels (%d of collectives) compiled to PTX", c, len(kernels)+len(colls), len(colls))
	}
}

// An inference plan's prologue sites (a batch norm and its ReLU inside a pointwise
// convolution's launch) are the batch norm's kernels and then the convolution's, as the CUDA
// device runs them through scratch memory: `ppc dis --cuda` prints both, and no site lacks a
// kernel.
func TestDisCUDAPrologues(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plan")
	if code, _, errs := ppc(t, "", "compile", "--forward-only", "-o", dir, filepath.Join("..", "..", "testdata", "ir", "preact.ir")); code != 0 {
		t.Fatalf("compile: %s", errs)
	}
	code, src, errs := ppc(t, "", "dis", "--cuda", dir)
	if code != 0 {
		t.Fatalf("dis --cuda: exit %d: %s", code, errs)
	}
	if i := strings.Index(src, "without a CUDA kernel"); i >= 0 {
		t.Fatalf("launch sites without a CUDA kernel:%s", src[i:])
	}
	pre := regexp.MustCompile(`(?m)^PPC_GLOBAL void (rank_\d+_k(\d+)_pre)\(`).FindAllStringSubmatch(src, -1)
	if len(pre) != 3 {
		t.Fatalf("%d prologue kernels, want 3 (the plan's batch norms)", len(pre))
	}
	for _, m := range pre {
		if !regexp.MustCompile(`(?m)^PPC_GLOBAL void rank_\d+_k` + m[2] + `\(`).MatchString(src) {
			t.Errorf("%s has no convolution kernel after it", m[1])
		}
	}
}
