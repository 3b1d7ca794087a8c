package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	kernels "ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/kernels/cuda/cudatest"
)

// fakeNVRTC is a stand-in libnvrtc with the real entry points: it "compiles" a source by
// checking the options and prefixing the architecture, fails on #error with a log, and
// counts its compiles.
const fakeNVRTC = `
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
typedef struct { char *src; char *ptx; char *log; } prog;
static int compiles;
int fake_compiles(void) { return compiles; }
int nvrtcCreateProgram(prog **p, const char *src, const char *name, int nh, const char *const *h, const char *const *inc) {
  *p = calloc(1, sizeof(prog)); (*p)->src = strdup(src); return 0;
}
int nvrtcCompileProgram(prog *p, int n, const char *const *opts) {
  compiles++;
  const char *arch = 0;
  for (int i = 0; i < n; i++) if (strncmp(opts[i], "--gpu-architecture=", 19) == 0) arch = opts[i] + 19;
  if (!arch) { p->log = strdup("no --gpu-architecture"); return 7; }
  if (strstr(p->src, "#error")) { p->log = strdup("kernel.cu(3): error: boom"); return 6; }
  p->ptx = malloc(strlen(p->src) + 64);
  sprintf(p->ptx, "// PTX for %s\n%s", arch, p->src);
  return 0;
}
int nvrtcGetPTXSize(prog *p, size_t *n) { *n = strlen(p->ptx) + 1; return 0; }
int nvrtcGetPTX(prog *p, char *buf) { strcpy(buf, p->ptx); return 0; }
int nvrtcGetCUBINSize(prog *p, size_t *n) { if (strncmp(p->ptx, "// PTX for sm_", 14)) return 5; *n = strlen(p->ptx); return 0; }
int nvrtcGetCUBIN(prog *p, char *buf) { memcpy(buf, "ELF", 3); memcpy(buf + 3, p->ptx + 3, strlen(p->ptx) - 3); return 0; }
int nvrtcGetNumSupportedArchs(int *n) { *n = 3; return 0; }
int nvrtcGetSupportedArchs(int *a) { a[0] = 75; a[1] = 80; a[2] = 90; return 0; }
int nvrtcGetProgramLogSize(prog *p, size_t *n) { *n = p->log ? strlen(p->log) + 1 : 1; return 0; }
int nvrtcGetProgramLog(prog *p, char *buf) { strcpy(buf, p->log ? p->log : ""); return 0; }
int nvrtcDestroyProgram(prog **p) { free((*p)->src); free((*p)->ptx); free((*p)->log); free(*p); *p = 0; return 0; }
const char *nvrtcGetErrorString(int rc) { return rc == 6 ? "NVRTC_ERROR_COMPILATION" : rc == 0 ? "NVRTC_SUCCESS" : "NVRTC_ERROR"; }
`

// TestNVRTCCache: kernels compile through NVRTC's API (a stand-in library, opened and
// called through purego) to the GPU's machine code, or to PTX for an architecture NVRTC does
// not know, once per source and target: the images are cached on disk by source hash and
// target; a compile error carries NVRTC's log.
func TestNVRTCCache(t *testing.T) {
	root := t.TempDir()
	fakeLib(t, filepath.Join(root, "libnvrtc.so.12"), fakeNVRTC)
	lib := open(env(map[string]string{"LD_LIBRARY_PATH": root}), "NVRTC", []string{"libnvrtc.so.12"}, "")
	n, err := OpenNVRTC(&lib)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		major, minor int
		want, err    string
	}{{8, 0, "sm_80", ""}, {9, 0, "sm_90", ""}, {8, 6, "compute_80", ""}, {12, 0, "compute_90", ""}, {7, 0, "", "none at or below the GPU's sm_70"}} {
		got, err := n.Target(c.major, c.minor)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("Target(%d, %d) = %q, %v; want %q, %q", c.major, c.minor, got, err, c.want, c.err)
		}
	}
	var count func() int32
	if err := lib.sym(&count, "fake_compiles"); err != nil {
		t.Fatal(err)
	}
	cache := &Cache{Dir: filepath.Join(root, "cache"), Compile: n.Compile}
	k, err := kernels.Elementwise(cudatest.Cases()[0].Spec, "k_add")
	if err != nil {
		t.Fatal(err)
	}
	src := kernels.Source(k)
	img, hit, err := cache.Image(src, "kernels.cu", "sm_80")
	if err != nil || hit || !strings.HasPrefix(string(img), "ELFPTX for sm_80\n") || !strings.Contains(string(img), "PPC_GLOBAL void k_add(") || count() != 1 {
		t.Fatalf("first compile: hit %v, %d compiles, err %v\n%.80s", hit, count(), err, img)
	}
	again, hit, err := cache.Image(src, "kernels.cu", "sm_80")
	if err != nil || !hit || string(again) != string(img) || count() != 1 {
		t.Fatalf("second compile: hit %v, %d compiles, err %v", hit, count(), err)
	}
	ptx, hit, err := cache.Image(src, "kernels.cu", "compute_90")
	if err != nil || hit || count() != 2 || !strings.HasPrefix(string(ptx), "// PTX for compute_90\n") {
		t.Fatalf("another target: hit %v, %d compiles, err %v\n%.80s", hit, count(), err, ptx)
	}
	files, _ := filepath.Glob(filepath.Join(root, "cache", "*", "*"))
	if len(files) != 2 {
		t.Errorf("cache files %v, want one per target", files)
	}
	_, _, err = cache.Image(src+"\n#error boom\n", "bad.cu", "sm_80")
	if err == nil || !strings.Contains(err.Error(), "could not compile bad.cu for sm_80: NVRTC_ERROR_COMPILATION") || !strings.Contains(err.Error(), "kernel.cu(3): error: boom") {
		t.Errorf("compile error: %v", err)
	}
	// A cache that cannot be written still returns the image.
	ro := &Cache{Dir: filepath.Join(root, "file"), Compile: n.Compile}
	if err := os.WriteFile(ro.Dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if img, _, err := ro.Image(src, "kernels.cu", "sm_80"); err != nil || len(img) == 0 {
		t.Errorf("unwritable cache: %v", err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PPC_CUDA_CACHE": "/c", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/c"},
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/ppc/cuda"},
		{map[string]string{"HOME": "/h"}, "/h/.cache/ppc/cuda"},
	} {
		if got := DefaultCacheDir(env(c.env)); got != c.want {
			t.Errorf("%v: %s, want %s", c.env, got, c.want)
		}
	}
}
