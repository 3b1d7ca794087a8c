package cuda

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDriver is a stand-in libcuda for the driver API's memory, module, launch, stream and
// event calls: "device" memory is host memory, launches and stream operations are logged.
const fakeDriver = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
static char logbuf[1 << 16];
static int n;
#define LOG(...) (n += snprintf(logbuf + n, sizeof(logbuf) - n, __VA_ARGS__))
const char *fake_log(void) { return logbuf; }
int cuInit(unsigned f) { return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return i == 0 ? 0 : 101; }
int cuDevicePrimaryCtxRetain(void **ctx, int d) { *ctx = (void *)0x77; return 0; }
int cuCtxSetCurrent(void *ctx) { LOG("ctx %p\n", ctx); return 0; }
int cuMemAlloc_v2(uint64_t *p, uint64_t bytes) { if (bytes > (1ull << 40)) return 2; *p = (uint64_t)(uintptr_t)calloc(1, bytes); LOG("alloc %llu\n", (unsigned long long)bytes); return 0; }
int cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); LOG("free\n"); return 0; }
int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n_, void *s) { memcpy((void *)(uintptr_t)dst, src, n_); LOG("h2d %zu stream %p\n", n_, s); return 0; }
int cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n_, void *s) { memcpy(dst, (void *)(uintptr_t)src, n_); LOG("d2h %zu stream %p\n", n_, s); return 0; }
int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n_, void *s) { memcpy((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n_); LOG("d2d %zu stream %p\n", n_, s); return 0; }
int cuMemsetD8Async(uint64_t p, unsigned char v, size_t n_, void *s) { memset((void *)(uintptr_t)p, v, n_); LOG("memset %zu stream %p\n", n_, s); return 0; }
int cuMemGetInfo_v2(size_t *free_, size_t *total) { *free_ = 3ull << 30; *total = 4ull << 30; return 0; }
int cuMemAllocHost_v2(void **p, size_t bytes) { *p = calloc(1, bytes); LOG("host alloc %zu\n", bytes); return 0; }
int cuMemFreeHost(void *p) { free(p); LOG("host free\n"); return 0; }
int cuEventSynchronize(void *e) { LOG("sync event %p\n", e); return 0; }
int cuEventDestroy_v2(void *e) { LOG("destroy event %p\n", e); return 0; }
int cuModuleLoadData(void **m, const void *image) { *m = (void *)0x500; LOG("module %.20s\n", (const char *)image); return 0; }
int cuModuleGetFunction(void **f, void *m, const char *name) { if (!strstr(name, "k")) return 500; *f = (void *)0x600; LOG("function %s\n", name); return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, void *s, void **params, void **extra) {
  LOG("launch %p grid %u,%u,%u block %u,%u,%u stream %p params %llx %llx %lld\n", f, gx, gy, gz, bx, by, bz, s,
      (unsigned long long)*(uint64_t *)params[0], (unsigned long long)*(uint64_t *)params[1], (long long)*(int64_t *)params[2]);
  return 0;
}
int cuStreamCreate(void **s, unsigned flags) { static uintptr_t k = 0x900; *s = (void *)++k; LOG("stream flags %u\n", flags); return 0; }
int cuEventCreate(void **e, unsigned flags) { *e = (void *)0xe00; LOG("event flags %u\n", flags); return 0; }
int cuEventRecord(void *e, void *s) { LOG("record %p on %p\n", e, s); return 0; }
int cuStreamWaitEvent(void *s, void *e, unsigned flags) { LOG("wait %p for %p\n", s, e); return 0; }
int cuStreamSynchronize(void *s) { LOG("sync %p\n", s); return 0; }
int cuGetErrorName(int rc, const char **name) { *name = rc == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : rc == 500 ? "CUDA_ERROR_NOT_FOUND" : "CUDA_ERROR_UNKNOWN"; return 0; }
`

// scenario drives a Driver through what the executor does: one allocation, an upload, a
// module and its function, a launch on a compute stream, an event the copy stream waits
// for, and the download.
func scenario(t *testing.T, d Driver) []byte {
	t.Helper()
	buf, err := d.MemAlloc(1024)
	if err != nil {
		t.Fatal(err)
	}
	compute, err := d.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	copyS, _ := d.StreamCreate()
	in := []byte("ppc on a GPU, one arena per rank")
	if err := d.CopyHtoD(buf+64, in, compute); err != nil {
		t.Fatal(err)
	}
	m, err := d.LoadModule([]byte(".version 7.0\n.visible .entry k_add(\n"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := d.Function(m, "k_add")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(f, 3, 256, compute, uint64(buf+64), uint64(buf+512), 105); err != nil {
		t.Fatal(err)
	}
	ev, _ := d.EventCreate()
	if err := d.EventRecord(ev, compute); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamWait(copyS, ev); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(in))
	if err := d.CopyDtoH(out, buf+64, copyS); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamSync(copyS); err != nil {
		t.Fatal(err)
	}
	if err := d.MemFree(buf); err != nil {
		t.Fatal(err)
	}
	return out
}

// extras drives the rest of the Driver: a device-to-device copy, a memset, the free memory,
// page-locked host memory as a copy's destination, and waiting on an event; it returns the
// bytes read back.
func extras(t *testing.T, d Driver) []byte {
	t.Helper()
	buf, err := d.MemAlloc(512)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := d.StreamCreate()
	if err := d.CopyHtoD(buf, []byte("abcdefgh"), s); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoD(buf+256, buf, 8, s); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(buf+258, 3, s); err != nil {
		t.Fatal(err)
	}
	pinned, err := d.HostAlloc(8)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoH(pinned, buf+256, s); err != nil {
		t.Fatal(err)
	}
	e, _ := d.EventCreate()
	if err := d.EventRecord(e, s); err != nil {
		t.Fatal(err)
	}
	if err := d.EventSync(e); err != nil {
		t.Fatal(err)
	}
	out := append([]byte{}, pinned...)
	if free, total, err := d.MemInfo(); err != nil || free > total || total == 0 {
		t.Errorf("MemInfo: %d free of %d, %v", free, total, err)
	}
	for _, err := range []error{d.EventDestroy(e), d.HostFree(pinned), d.MemFree(buf)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestDriverThroughPurego: the driver API calls, through purego, on a stand-in libcuda:
// memory round-trips, the launch passes its grid, block, stream and each parameter by
// value, events order the streams, and a failing call names the driver's error.
func TestDriverThroughPurego(t *testing.T) {
	root := t.TempDir()
	fakeLib(t, filepath.Join(root, "libcuda.so.1"), fakeDriver)
	lib := open(env(map[string]string{"LD_LIBRARY_PATH": root}), "driver", []string{"libcuda.so.1"}, "")
	d, err := OpenDriver(&lib, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := scenario(t, d)
	if !bytes.Equal(out, []byte("ppc on a GPU, one arena per rank")) {
		t.Errorf("round trip: %q", out)
	}
	if out := extras(t, d); string(out) != "ab\x00\x00\x00fgh" {
		t.Errorf("copy, memset and pinned read-back: %q", out)
	}
	var logOf func() string
	if err := lib.sym(&logOf, "fake_log"); err != nil {
		t.Fatal(err)
	}
	got := logOf()
	for _, w := range []string{"ctx 0x77\n", "alloc 1024\n", "stream flags 1\n", "h2d 32 stream 0x901\n", "module .version 7.0\n.visibl\n", "function k_add\n",
		"launch 0x600 grid 3,1,1 block 256,1,1 stream 0x901 params ", " 105\n", "event flags 2\n", "record 0xe00 on 0x901\n", "wait 0x902 for 0xe00\n",
		"d2h 32 stream 0x902\n", "sync 0x902\n", "free\n", "d2d 8 stream ", "memset 3 stream ", "host alloc 8\n", "sync event 0xe00\n",
		"destroy event 0xe00\n", "host free\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("the driver calls lack %q:\n%s", w, got)
		}
	}
	// cuBLASLt's and NCCL's calls run with the context current on their thread.
	before := len(logOf())
	var inside string
	if err := d.Bound(func() error { inside = logOf()[before:]; return errors.New("the library failed") }); err == nil || err.Error() != "the library failed" {
		t.Errorf("Bound's error: %v", err)
	}
	if inside != "ctx 0x77\n" {
		t.Errorf("calls before a bound call: %q, want the context made current", inside)
	}
	if _, err := d.MemAlloc(1 << 41); err == nil || err.Error() != "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("a failed allocation: %v", err)
	}
	if _, err := OpenDriver(&lib, 3); err == nil || !strings.Contains(err.Error(), "cuDeviceGet: CUDA_ERROR_UNKNOWN") {
		t.Errorf("a missing GPU ordinal: %v", err)
	}
}

// TestRecorder: the recording driver keeps memory like a device (bounds checked per
// allocation) and logs the same scenario in order.
func TestRecorder(t *testing.T) {
	r := NewRecorder()
	if out := scenario(t, r); string(out) != "ppc on a GPU, one arena per rank" {
		t.Errorf("round trip: %q", out)
	}
	want := []string{"alloc 0x10000 1024", "stream 1", "stream 2", "h2d 0x10040 32 stream 1", "module 3 (36 bytes)", "function 4 k_add",
		"launch 4 grid 3 block 256 stream 1 (0x10040, 0x10200, 0x69)", "event 5", "record event 5 on stream 1", "stream 2 waits for event 5",
		"d2h 0x10040 32 stream 2", "sync stream 2", "free 0x10000"}
	if strings.Join(r.Log, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(r.Log, "\n"), strings.Join(want, "\n"))
	}
	r.Log = nil
	r.Total = 1 << 20
	if out := extras(t, r); string(out) != "ab\x00\x00\x00fgh" {
		t.Errorf("copy, memset and pinned read-back: %q", out)
	}
	want = []string{"alloc 0x10400 512", "stream 6", "h2d 0x10400 8 stream 6", "d2d 0x10500 0x10400 8 stream 6", "memset 0x10502 3 stream 6", "host alloc 8",
		"d2h 0x10500 8 stream 6", "event 7", "record event 7 on stream 6", "sync event 7", "destroy event 7", "host free 8", "free 0x10400"}
	if strings.Join(r.Log, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(r.Log, "\n"), strings.Join(want, "\n"))
	}
	p, _ := r.MemAlloc(16)
	if err := r.CopyHtoD(p+8, make([]byte, 16), 0); err == nil {
		t.Errorf("a copy past the allocation was accepted")
	}
	if _, err := r.Function(3, "missing"); err == nil {
		t.Errorf("a function the module lacks was found")
	}
}
