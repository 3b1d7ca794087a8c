package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"
)

// NVRTC compiles CUDA C at load time through libnvrtc (found by Probe): to machine code
// (CUBIN) for the GPU's own architecture, so that the driver loads it without compiling PTX
// again, or to PTX for a virtual one. Its calls go through purego like the driver's.
type NVRTC struct {
	lib         *Library
	create      func(prog *uintptr, src, name string, nh int32, headers, includes unsafe.Pointer) int32
	compile     func(prog uintptr, nopts int32, opts unsafe.Pointer) int32
	ptxSize     func(prog uintptr, size *uint64) int32
	getPTX      func(prog uintptr, buf *byte) int32
	cubinSize   func(prog uintptr, size *uint64) int32
	getCUBIN    func(prog uintptr, buf *byte) int32
	numArchs    func(n *int32) int32
	archs       func(out *int32) int32
	logSize     func(prog uintptr, size *uint64) int32
	getLog      func(prog uintptr, buf *byte) int32
	destroy     func(prog *uintptr) int32
	errorString func(rc int32) string
}

// OpenNVRTC binds the NVRTC entry points of an opened library.
func OpenNVRTC(l *Library) (*NVRTC, error) {
	if !l.Found() {
		return nil, fmt.Errorf("NVRTC is not available: %s", l.Err)
	}
	n := &NVRTC{lib: l}
	if err := l.bind([]binding{{&n.create, "nvrtcCreateProgram"}, {&n.compile, "nvrtcCompileProgram"}, {&n.ptxSize, "nvrtcGetPTXSize"}, {&n.getPTX, "nvrtcGetPTX"},
		{&n.logSize, "nvrtcGetProgramLogSize"}, {&n.getLog, "nvrtcGetProgramLog"}, {&n.destroy, "nvrtcDestroyProgram"}, {&n.errorString, "nvrtcGetErrorString"},
		{&n.cubinSize, "nvrtcGetCUBINSize"}, {&n.getCUBIN, "nvrtcGetCUBIN"}, {&n.numArchs, "nvrtcGetNumSupportedArchs"}, {&n.archs, "nvrtcGetSupportedArchs"}}...); err != nil {
		return nil, fmt.Errorf("%v (ppc needs NVRTC 11.2 or newer)", err)
	}
	return n, nil
}

// Target is what to compile for a GPU of compute capability major.minor: its own machine
// code (sm_XY) when this NVRTC knows the architecture, else PTX for the newest one it knows
// (compute_XY), which the driver compiles at load.
func (n *NVRTC) Target(major, minor int) (string, error) {
	var cnt int32
	if rc := n.numArchs(&cnt); rc != 0 || cnt <= 0 {
		return "", fmt.Errorf("nvrtcGetNumSupportedArchs: %s", n.errorString(rc))
	}
	archs := make([]int32, cnt)
	if rc := n.archs(&archs[0]); rc != 0 {
		return "", fmt.Errorf("nvrtcGetSupportedArchs: %s", n.errorString(rc))
	}
	want := int32(10*major + minor)
	best := int32(0)
	for _, a := range archs {
		if a == want {
			return fmt.Sprintf("sm_%d", a), nil
		}
		if a < want && a > best {
			best = a
		}
	}
	if best == 0 {
		return "", fmt.Errorf("NVRTC (%s) supports architectures %v, none at or below the GPU's sm_%d", n.lib.Path, archs, want)
	}
	return fmt.Sprintf("compute_%d", best), nil
}

// cStrings makes a C array of NUL-terminated strings; keep the result alive across the call.
func cStrings(ss []string) ([]*byte, [][]byte) {
	bufs := make([][]byte, len(ss))
	ptrs := make([]*byte, len(ss))
	for i, s := range ss {
		bufs[i] = append([]byte(s), 0)
		ptrs[i] = &bufs[i][0]
	}
	return ptrs, bufs
}

// Compile compiles src (a translation unit named name) for target: "sm_90" gives the
// machine code of that architecture (CUBIN), "compute_90" PTX. A compile error carries
// NVRTC's log.
func (n *NVRTC) Compile(src, name, target string) ([]byte, error) {
	var prog uintptr
	if rc := n.create(&prog, src, name, 0, nil, nil); rc != 0 {
		return nil, fmt.Errorf("nvrtcCreateProgram: %s", n.errorString(rc))
	}
	defer n.destroy(&prog)
	// --fmad=false: no fused multiply-adds, so that a·b + c rounds twice as on the CPU device.
	opts := []string{"--gpu-architecture=" + target, "--std=c++17", "--fmad=false"}
	ptrs, bufs := cStrings(opts)
	rc := n.compile(prog, int32(len(opts)), unsafe.Pointer(&ptrs[0]))
	runtime.KeepAlive(bufs)
	if rc != 0 {
		var size uint64
		log := ""
		if n.logSize(prog, &size) == 0 && size > 1 {
			buf := make([]byte, size)
			if n.getLog(prog, &buf[0]) == 0 {
				log = strings.TrimRight(string(buf), "\x00\n")
			}
		}
		return nil, fmt.Errorf("NVRTC (%s) could not compile %s for %s: %s\n%s", n.lib.Path, name, target, n.errorString(rc), log)
	}
	sizeOf, get, what := n.ptxSize, n.getPTX, "PTX"
	if strings.HasPrefix(target, "sm_") {
		sizeOf, get, what = n.cubinSize, n.getCUBIN, "CUBIN"
	}
	var size uint64
	if rc := sizeOf(prog, &size); rc != 0 {
		return nil, fmt.Errorf("nvrtcGet%sSize: %s", what, n.errorString(rc))
	}
	if size == 0 {
		return nil, fmt.Errorf("NVRTC returned no %s for %s", what, name)
	}
	buf := make([]byte, size)
	if rc := get(prog, &buf[0]); rc != 0 {
		return nil, fmt.Errorf("nvrtcGet%s: %s", what, n.errorString(rc))
	}
	if what == "PTX" {
		buf = []byte(strings.TrimRight(string(buf), "\x00"))
	}
	return buf, nil
}

// Cache keeps compiled kernels on disk by the source's hash and the target, so that a GPU
// compiles each program's kernels once (NVRTC takes seconds for thousands of kernels).
type Cache struct {
	Dir     string
	Compile func(src, name, target string) ([]byte, error)
}

// DefaultCacheDir is $PPC_CUDA_CACHE, else $XDG_CACHE_HOME/ppc/cuda, else
// $HOME/.cache/ppc/cuda.
func DefaultCacheDir(getenv func(string) string) string {
	if d := getenv("PPC_CUDA_CACHE"); d != "" {
		return d
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "ppc", "cuda")
	}
	return filepath.Join(getenv("HOME"), ".cache", "ppc", "cuda")
}

// Image returns the compiled src for target, from the cache when it holds it (hit true),
// else compiled and stored. A cache that cannot be written is not an error: the image is
// still returned. Safe for concurrent use.
func (c *Cache) Image(src, name, target string) (img []byte, hit bool, err error) {
	sum := sha256.Sum256([]byte(src))
	path := filepath.Join(c.Dir, target, hex.EncodeToString(sum[:]))
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return b, true, nil
	}
	img, err = c.Compile(src, name, target)
	if err != nil {
		return nil, false, err
	}
	if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		// Write then rename: a concurrent reader never sees half a file.
		if f, err := os.CreateTemp(filepath.Dir(path), "*.tmp"); err == nil {
			_, werr := f.Write(img)
			if cerr := f.Close(); werr == nil && cerr == nil {
				_ = os.Rename(f.Name(), path)
			}
			_ = os.Remove(f.Name())
		}
	}
	return img, false, nil
}
