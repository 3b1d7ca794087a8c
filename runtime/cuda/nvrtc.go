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

// NVRTC compiles CUDA C to PTX at load time, on the GPU's own architecture, through libnvrtc
// (found by Probe). Its calls go through purego like the driver's.
type NVRTC struct {
	lib         *Library
	create      func(prog *uintptr, src, name string, nh int32, headers, includes unsafe.Pointer) int32
	compile     func(prog uintptr, nopts int32, opts unsafe.Pointer) int32
	ptxSize     func(prog uintptr, size *uint64) int32
	getPTX      func(prog uintptr, buf *byte) int32
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
		{&n.logSize, "nvrtcGetProgramLogSize"}, {&n.getLog, "nvrtcGetProgramLog"}, {&n.destroy, "nvrtcDestroyProgram"}, {&n.errorString, "nvrtcGetErrorString"}}...); err != nil {
		return nil, err
	}
	return n, nil
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

// Compile compiles src (a translation unit named name) to PTX for arch ("sm_80": the GPU's
// compute capability). A compile error carries NVRTC's log.
func (n *NVRTC) Compile(src, name, arch string) ([]byte, error) {
	var prog uintptr
	if rc := n.create(&prog, src, name, 0, nil, nil); rc != 0 {
		return nil, fmt.Errorf("nvrtcCreateProgram: %s", n.errorString(rc))
	}
	defer n.destroy(&prog)
	opts := []string{"--gpu-architecture=compute_" + strings.TrimPrefix(arch, "sm_"), "--std=c++17", "--fmad=false"}
	ptrs, bufs := cStrings(opts)
	// --fmad=false: no fused multiply-adds, so that a·b + c rounds twice as on the CPU device.
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
		return nil, fmt.Errorf("NVRTC (%s) could not compile %s for %s: %s\n%s", n.lib.Path, name, arch, n.errorString(rc), log)
	}
	var size uint64
	if rc := n.ptxSize(prog, &size); rc != 0 {
		return nil, fmt.Errorf("nvrtcGetPTXSize: %s", n.errorString(rc))
	}
	if size == 0 {
		return nil, fmt.Errorf("NVRTC returned no PTX for %s", name)
	}
	buf := make([]byte, size)
	if rc := n.getPTX(prog, &buf[0]); rc != 0 {
		return nil, fmt.Errorf("nvrtcGetPTX: %s", n.errorString(rc))
	}
	return []byte(strings.TrimRight(string(buf), "\x00")), nil
}

// Cache keeps compiled PTX on disk by the source's hash and the architecture, so that a GPU
// compiles each program's kernels once (NVRTC takes seconds for thousands of kernels).
type Cache struct {
	Dir     string
	Compile func(src, name, arch string) ([]byte, error)
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

// PTX returns the PTX of src for arch, from the cache when it holds it (hit true), else
// compiled and stored. A cache that cannot be written is not an error: the PTX is still
// returned.
func (c *Cache) PTX(src, name, arch string) (ptx []byte, hit bool, err error) {
	sum := sha256.Sum256([]byte(src))
	path := filepath.Join(c.Dir, arch, hex.EncodeToString(sum[:])+".ptx")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return b, true, nil
	}
	ptx, err = c.Compile(src, name, arch)
	if err != nil {
		return nil, false, err
	}
	if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		// Write then rename: a concurrent reader never sees half a file.
		tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
		if os.WriteFile(tmp, ptx, 0o644) == nil {
			_ = os.Rename(tmp, path)
		}
	}
	return ptx, false, nil
}
