package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/ebitengine/purego"
)

// Library is one of the CUDA libraries ppc opens, as Probe found it.
type Library struct {
	Name    string   `json:"name"`    // driver, NVRTC, cuBLASLt, NCCL
	Sonames []string `json:"sonames"` // file names looked for, in order
	Path    string   `json:"path,omitempty"`
	Version string   `json:"version,omitempty"`
	Err     string   `json:"error,omitempty"` // why it is not usable
	Tried   []string `json:"tried,omitempty"` // every folder looked in, when not found
	handle  uintptr
}

// Found reports whether the library was opened.
func (l Library) Found() bool { return l.handle != 0 }

// GPU is one device the driver reports.
type GPU struct {
	Index        int    `json:"index"`
	Name         string `json:"name"`
	Memory       int64  `json:"memory_bytes"`
	Major, Minor int    // compute capability
}

// Report is what Probe found.
type Report struct {
	Libraries []Library `json:"libraries"` // driver, NVRTC, cuBLASLt, NCCL
	Driver    int       `json:"driver_version,omitempty"`
	GPUs      []GPU     `json:"gpus,omitempty"`
	Err       string    `json:"error,omitempty"` // the driver's own failure (cuInit), if any
}

// libraries lists what ppc needs: the driver first, then the libraries it loads beside it,
// each with its sonames (newest first) and the pip wheel folder that ships it.
var libraries = []struct {
	name    string
	sonames []string
	wheel   string
}{
	{"driver", []string{"libcuda.so.1", "libcuda.so"}, ""},
	{"NVRTC", []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}, "cuda_nvrtc"},
	{"cuBLASLt", []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}, "cublas"},
	{"NCCL", []string{"libnccl.so.2", "libnccl.so"}, "nccl"},
}

// searchDirs are the directories looked in for a library shipped in the given wheel folder
// (nvidia/<wheel>/lib), in order, under the environment getenv.
func searchDirs(getenv func(string) string, wheel string) []string {
	var dirs []string
	for _, d := range filepath.SplitList(getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if h := getenv(v); h != "" {
			dirs = append(dirs, filepath.Join(h, "lib64"), filepath.Join(h, "lib"))
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64")
	if wheel != "" {
		// CUDA 12's wheels put each library in a folder of its own; CUDA 13's put all but
		// NCCL in nvidia/cu13/lib.
		for _, sp := range sitePackages(getenv) {
			dirs = append(dirs, filepath.Join(sp, "nvidia", wheel, "lib"), filepath.Join(sp, "nvidia", "cu13", "lib"))
		}
	}
	seen := map[string]bool{}
	out := dirs[:0]
	for _, d := range dirs {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// sitePackages lists the Python package folders a user's NVIDIA wheels may be in: the
// active virtualenv's and conda environment's, those of the first python3 on PATH (a
// virtualenv's that is not activated, as PyTorch's images ship), the user's, and the
// system's.
func sitePackages(getenv func(string) string) []string {
	var roots []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := getenv(v); p != "" {
			roots = append(roots, filepath.Join(p, "lib", "python3*", "site-packages"))
		}
	}
	for _, d := range filepath.SplitList(getenv("PATH")) {
		if st, err := os.Stat(filepath.Join(d, "python3")); d != "" && err == nil && !st.IsDir() {
			roots = append(roots, filepath.Join(d, "..", "lib", "python3*", "site-packages"))
			break
		}
	}
	if h := getenv("HOME"); h != "" {
		roots = append(roots, filepath.Join(h, ".local", "lib", "python3*", "site-packages"))
	}
	roots = append(roots, "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages", "/usr/lib/python3/dist-packages")
	var out []string
	for _, r := range roots {
		m, _ := filepath.Glob(r)
		sort.Sort(sort.Reverse(sort.StringSlice(m))) // the newest Python first
		out = append(out, m...)
	}
	return out
}

// locate returns the first existing file for the sonames in dirs.
func locate(dirs, sonames []string) string {
	for _, d := range dirs {
		for _, s := range sonames {
			p := filepath.Join(d, s)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
		}
	}
	return ""
}

// open finds and opens one library: the first file found in the search directories, else
// each soname by bare name through the dynamic loader.
func open(getenv func(string) string, name string, sonames []string, wheel string) Library {
	lib := Library{Name: name, Sonames: sonames}
	if runtime.GOOS != "linux" {
		lib.Err = "the CUDA device runs on Linux only"
		return lib
	}
	dirs := searchDirs(getenv, wheel)
	path := locate(dirs, sonames)
	var errs []string
	if path != "" {
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			lib.Path, lib.handle = path, h
			return lib
		}
		errs = append(errs, fmt.Sprintf("%s: %v", path, err))
	}
	for _, s := range sonames {
		h, err := purego.Dlopen(s, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			lib.Path, lib.handle = s+" (from the dynamic loader's paths)", h
			return lib
		}
	}
	lib.Tried = append(dirs, "the dynamic loader's default paths (ld.so.cache)")
	if len(errs) > 0 {
		lib.Err = "found but could not be opened: " + strings.Join(errs, "; ")
	} else {
		lib.Err = "not found"
	}
	return lib
}

// sym binds fn to the library's symbol name, or reports it missing (an older library).
func (l *Library) sym(fn any, name string) error {
	p, err := purego.Dlsym(l.handle, name)
	if err != nil || p == 0 {
		return fmt.Errorf("%s has no %s", l.Path, name)
	}
	purego.RegisterFunc(fn, p)
	return nil
}

// binding is one entry point to bind: a pointer to a func variable and the symbol's name.
type binding struct {
	fn   any
	name string
}

// bind binds every entry point, or reports the first one the library lacks.
func (l *Library) bind(bs ...binding) error {
	for _, b := range bs {
		if err := l.sym(b.fn, b.name); err != nil {
			return err
		}
	}
	return nil
}

// Probe finds the CUDA libraries under the environment getenv (nil: the process's), opens
// them, and asks each its version and the driver its GPUs. It never fails: what is missing
// is in the report.
func Probe(getenv func(string) string) *Report {
	if getenv == nil {
		getenv = os.Getenv
	}
	r := &Report{}
	for _, l := range libraries {
		r.Libraries = append(r.Libraries, open(getenv, l.name, l.sonames, l.wheel))
	}
	r.queryDriver(&r.Libraries[0])
	queryVersions(r.Libraries[1:])
	return r
}

// CUDA driver API constants (cuda.h).
const (
	cudaSuccess                   = 0
	attrComputeCapabilityMajor    = 75
	attrComputeCapabilityMinor    = 76
	cudaErrorNoDevice             = 100
	cudaErrorInsufficientDriver   = 35
	cudaErrorNotInitialized       = 3
	cudaErrorInvalidDevice        = 101
	cudaErrorSystemDriverMismatch = 803
)

// queryDriver initialises the driver and lists its GPUs.
func (r *Report) queryDriver(l *Library) {
	if !l.Found() {
		return
	}
	var (
		cuInit             func(flags uint32) int32
		cuDriverGetVersion func(v *int32) int32
		cuDeviceGetCount   func(n *int32) int32
		cuDeviceGet        func(d *int32, ordinal int32) int32
		cuDeviceGetName    func(buf *byte, n int32, d int32) int32
		cuDeviceTotalMem   func(bytes *uint64, d int32) int32
		cuDeviceGetAttr    func(v *int32, attr int32, d int32) int32
	)
	if err := l.bind([]binding{{&cuInit, "cuInit"}, {&cuDriverGetVersion, "cuDriverGetVersion"}, {&cuDeviceGetCount, "cuDeviceGetCount"}, {&cuDeviceGet, "cuDeviceGet"},
		{&cuDeviceGetName, "cuDeviceGetName"}, {&cuDeviceTotalMem, "cuDeviceTotalMem_v2"}, {&cuDeviceGetAttr, "cuDeviceGetAttribute"}}...); err != nil {
		l.Err = err.Error()
		return
	}
	var v int32
	if cuDriverGetVersion(&v) == cudaSuccess {
		r.Driver = int(v)
		l.Version = fmt.Sprintf("CUDA %d.%d", v/1000, v%1000/10)
	}
	if rc := cuInit(0); rc != cudaSuccess {
		r.Err = fmt.Sprintf("cuInit failed: %s", resultName(rc))
		return
	}
	var n int32
	if rc := cuDeviceGetCount(&n); rc != cudaSuccess {
		r.Err = fmt.Sprintf("cuDeviceGetCount failed: %s", resultName(rc))
		return
	}
	for i := int32(0); i < n; i++ {
		var d int32
		if cuDeviceGet(&d, i) != cudaSuccess {
			continue
		}
		buf := make([]byte, 256)
		g := GPU{Index: int(i)}
		if cuDeviceGetName(&buf[0], int32(len(buf)), d) == cudaSuccess {
			g.Name = cString(buf)
		}
		var mem uint64
		if cuDeviceTotalMem(&mem, d) == cudaSuccess {
			g.Memory = int64(mem)
		}
		var major, minor int32
		cuDeviceGetAttr(&major, attrComputeCapabilityMajor, d)
		cuDeviceGetAttr(&minor, attrComputeCapabilityMinor, d)
		g.Major, g.Minor = int(major), int(minor)
		r.GPUs = append(r.GPUs, g)
	}
}

// queryVersions asks NVRTC, cuBLASLt and NCCL their versions.
func queryVersions(libs []Library) {
	for i := range libs {
		l := &libs[i]
		if !l.Found() {
			continue
		}
		switch l.Name {
		case "NVRTC":
			var fn func(major, minor *int32) int32
			if err := l.sym(&fn, "nvrtcVersion"); err != nil {
				l.Err = err.Error()
				continue
			}
			var a, b int32
			if fn(&a, &b) == 0 {
				l.Version = fmt.Sprintf("%d.%d", a, b)
			}
		case "cuBLASLt":
			var fn func() uintptr
			if err := l.sym(&fn, "cublasLtGetVersion"); err != nil {
				l.Err = err.Error()
				continue
			}
			v := fn() // major·10000 + minor·100 + patch (cuBLAS 11+)
			l.Version = fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
		case "NCCL":
			var fn func(v *int32) int32
			if err := l.sym(&fn, "ncclGetVersion"); err != nil {
				l.Err = err.Error()
				continue
			}
			var v int32
			if fn(&v) == 0 {
				l.Version = fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
			}
		}
	}
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// resultName names a CUresult.
func resultName(rc int32) string {
	switch rc {
	case cudaErrorNoDevice:
		return "CUDA_ERROR_NO_DEVICE (no CUDA-capable GPU)"
	case cudaErrorInsufficientDriver:
		return "CUDA_ERROR_INSUFFICIENT_DRIVER"
	case cudaErrorNotInitialized:
		return "CUDA_ERROR_NOT_INITIALIZED"
	case cudaErrorInvalidDevice:
		return "CUDA_ERROR_INVALID_DEVICE"
	case cudaErrorSystemDriverMismatch:
		return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (the driver library and the kernel module differ)"
	}
	return fmt.Sprintf("CUresult %d", rc)
}

// Usable says whether a CUDA run can start, and if not, exactly what is missing. NCCL is not
// required: without it a multi-process run's messages go through host memory and TCP.
func (r *Report) Usable() error {
	d := r.Libraries[0]
	switch {
	case !d.Found():
		return fmt.Errorf("the NVIDIA driver library %s %s (looked in: %s)", strings.Join(d.Sonames, " / "), d.Err, strings.Join(d.Tried, ", "))
	case d.Err != "":
		return fmt.Errorf("the NVIDIA driver library %s: %s", d.Path, d.Err)
	case r.Err != "":
		return fmt.Errorf("the NVIDIA driver (%s): %s", d.Path, r.Err)
	case len(r.GPUs) == 0:
		return fmt.Errorf("the NVIDIA driver (%s) reports no GPU", d.Path)
	}
	for _, l := range r.Libraries[1:] {
		if !l.Found() && l.Name == "NCCL" {
			continue // only for device-to-device messages; without it they go through the host
		}
		if !l.Found() {
			return fmt.Errorf("%s (%s) %s (looked in: %s); it ships with the CUDA toolkit and in pip's nvidia-* wheels", l.Name, strings.Join(l.Sonames, " / "), l.Err, strings.Join(l.Tried, ", "))
		}
		if l.Err != "" {
			return fmt.Errorf("%s (%s): %s", l.Name, l.Path, l.Err)
		}
	}
	return nil
}
