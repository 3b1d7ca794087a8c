package cuda

import (
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	kernels "ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// fakeCublasLt records every call ppc makes, with its arguments, in a log the test reads.
const fakeCublasLt = `
#include <stdio.h>
#include <string.h>
#include <stdint.h>
static char logbuf[1 << 16];
static int n;
static int id;
#define LOG(...) (n += snprintf(logbuf + n, sizeof(logbuf) - n, __VA_ARGS__))
const char *fake_log(void) { return logbuf; }
void fake_reset(void) { n = 0; logbuf[0] = 0; id = 0; }
int cublasLtCreate(void **h) { *h = (void *)0x100; LOG("create\n"); return 0; }
int cublasLtMatmulDescCreate(void **d, int compute, int scale) { *d = (void *)(uintptr_t)(0x200 + ++id); LOG("desc compute=%d scale=%d\n", compute, scale); return 0; }
int cublasLtMatmulDescSetAttribute(void *d, int attr, const void *buf, size_t size) {
  if (attr == 8) LOG("desc attr=%d ptr=%#lx\n", attr, (unsigned long)*(const uintptr_t *)buf);
  else LOG("desc attr=%d value=%d\n", attr, *(const int *)buf);
  return 0;
}
int cublasLtMatmulDescDestroy(void *d) { LOG("desc destroy\n"); return 0; }
int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  *l = (void *)(uintptr_t)(0x300 + ++id); LOG("layout %d type=%d rows=%llu cols=%llu ld=%lld\n", id, type, (unsigned long long)rows, (unsigned long long)cols, (long long)ld); return 0;
}
int cublasLtMatrixLayoutSetAttribute(void *l, int attr, const void *buf, size_t size) {
  if (attr == 5) LOG("layout %d batch=%d\n", (int)((uintptr_t)l - 0x300), *(const int *)buf);
  else LOG("layout %d stride=%lld\n", (int)((uintptr_t)l - 0x300), *(const long long *)buf);
  return 0;
}
int cublasLtMatrixLayoutDestroy(void *l) { LOG("layout destroy\n"); return 0; }
int cublasLtMatmulPreferenceCreate(void **p) { *p = (void *)0x400; return 0; }
int cublasLtMatmulPreferenceSetAttribute(void *p, int attr, const void *buf, size_t size) { LOG("pref attr=%d value=%llu\n", attr, *(const unsigned long long *)buf); return 0; }
int cublasLtMatmulPreferenceDestroy(void *p) { return 0; }
int cublasLtMatmulAlgoGetHeuristic(void *h, void *desc, void *a, void *b, void *c, void *d, void *pref, int req, char *results, int *ret) {
  memset(results, 0, 96); results[0] = 42; *ret = 1; LOG("heuristic requested=%d\n", req); return 0;
}
int cublasLtMatmul(void *h, void *desc, const float *alpha, const void *A, void *adesc, const void *B, void *bdesc, const float *beta,
                   const void *C, void *cdesc, void *D, void *ddesc, const char *algo, void *ws, size_t wsSize, void *stream) {
  LOG("matmul alpha=%g beta=%g A=%#lx B=%#lx C=%#lx D=%#lx algo=%d ws=%#lx/%zu stream=%#lx\n", *alpha, *beta, (unsigned long)A, (unsigned long)B,
      (unsigned long)C, (unsigned long)D, algo[0], (unsigned long)ws, wsSize, (unsigned long)stream);
  return 0;
}
const char *cublasLtGetStatusString(int rc) { return "CUBLAS_STATUS_NOT_SUPPORTED"; }
`

// TestCublasLtCalls: a planned matmul becomes exactly the cuBLASLt calls it should — the
// compute and scale types, op(A) and op(B), the bias epilogue and its pointer, the stored
// shapes, leading dims, batch counts and strides of A, B and D, a workspace limit, one
// heuristic query, and the matmul on the offset device pointers — recorded by a stand-in
// libcublasLt called through purego.
func TestCublasLtCalls(t *testing.T) {
	root := t.TempDir()
	fakeLib(t, filepath.Join(root, "libcublasLt.so.12"), fakeCublasLt)
	lib := open(env(map[string]string{"LD_LIBRARY_PATH": root}), "cuBLASLt", []string{"libcublasLt.so.12"}, "")
	lt, err := OpenCublasLt(&lib)
	if err != nil {
		t.Fatal(err)
	}
	var logOf func() string
	var reset func()
	if err := lib.sym(&logOf, "fake_log"); err != nil {
		t.Fatal(err)
	}
	if err := lib.sym(&reset, "fake_reset"); err != nil {
		t.Fatal(err)
	}
	// x [4, 5, 3] @ wᵀ with w [7, 3], bias [7], bf16: M 7, K 3, and x's 4 × 5 rows one
	// GEMM's N (kernels.PlanMatmul folds a batch against one weight into its rows).
	spec := &device.Spec{Op: ir.MustLookup("matmul"), Attrs: ir.Attrs{{Name: "transpose_b", Value: ir.BoolAttr(true)}},
		In: []ir.Type{ty(ir.BF16, 4, 5, 3), ty(ir.BF16, 7, 3), ty(ir.BF16, 7)}, Out: []ir.Type{ty(ir.BF16, 4, 5, 7)}}
	calls, err := kernels.PlanMatmul(spec, false)
	if err != nil || len(calls) != 1 {
		t.Fatalf("plan: %v %+v", err, calls)
	}
	reset()
	lt.WorkspaceBytes = 1 << 22
	if err := lt.Matmul(calls[0], 0x10000, 0x20000, 0x30000, 0x40000, 0x50000, 0x60000); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"desc compute=68 scale=0",
		"desc attr=3 value=1", // op(A) = T: the IR's w is [7,3], read transposed
		"desc attr=4 value=0",
		"desc attr=7 value=4", // the bias epilogue
		"desc attr=8 ptr=0x40000",
		"layout 2 type=14 rows=3 cols=7 ld=3",  // A stored K×M (transposed), bf16
		"layout 3 type=14 rows=3 cols=20 ld=3", // B: x's rows, K×N
		"layout 4 type=14 rows=7 cols=20 ld=7",
		"pref attr=1 value=4194304",
		"heuristic requested=1",
		"matmul alpha=1 beta=0 A=0x10000 B=0x20000 C=0x30000 D=0x30000 algo=42 ws=0x50000/4194304 stream=0x60000",
	}
	got := logOf()
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("the calls lack %q:\n%s", w, got)
		}
	}
	// The same call again reuses the descriptors and the algorithm: only the bias pointer
	// (the launch's) and the matmul.
	reset()
	if err := lt.Matmul(calls[0], 0x10000, 0x20000, 0x30000, 0x48000, 0x50000, 0x60000); err != nil {
		t.Fatal(err)
	}
	if got := logOf(); got != "desc attr=8 ptr=0x48000\nmatmul alpha=1 beta=0 A=0x10000 B=0x20000 C=0x30000 D=0x30000 algo=42 ws=0x50000/4194304 stream=0x60000\n" {
		t.Errorf("a repeated call:\n%s", got)
	}
	reset()
	lt.Close()
	if got := logOf(); strings.Count(got, "destroy") != 4 {
		t.Errorf("Close destroys the descriptor and three layouts:\n%s", got)
	}
	if strings.Contains(got, "batch=") {
		t.Errorf("a folded batch set batch attributes:\n%s", got)
	}
	// A call with element offsets (a batch the strides cannot express) moves the pointers;
	// within it, a strided batch of 4 with x's matrix repeated.
	spec = &device.Spec{Op: ir.MustLookup("matmul"), In: []ir.Type{ty(ir.F32, 2, 1, 5, 3), ty(ir.F32, 1, 4, 3, 7)}, Out: []ir.Type{ty(ir.F32, 2, 4, 5, 7)}}
	calls, err = kernels.PlanMatmul(spec, true)
	if err != nil || len(calls) != 2 {
		t.Fatalf("plan: %v %+v", err, calls)
	}
	reset()
	if err := lt.Matmul(calls[1], 0x10000, 0x20000, 0x30000, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	got = logOf()
	if !strings.Contains(got, "desc compute=77 scale=0\n") || !strings.Contains(got, "desc attr=7 value=1\n") ||
		!strings.Contains(got, "A=0x10000 B=0x2003c C=0x30230 D=0x30230") {
		t.Errorf("offset call (tf32 asked for):\n%s", got)
	}
	for _, w := range []string{"layout 2 batch=4", "layout 2 stride=21", "layout 3 batch=4", "layout 3 stride=0", "layout 4 batch=4", "layout 4 stride=35"} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("the batched call lacks %q:\n%s", w, got)
		}
	}
}
