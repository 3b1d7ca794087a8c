package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"ppc.dev/ppc/ir"
	kernels "ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/device"
)

// emulator is a Driver that runs the CUDA device on the host, for tests without a GPU: the
// Recorder's memory (host slices) and log, each module's CUDA C built for the host through
// ppc_cuda.h's PPC_HOST branch (the module image is the source, where a GPU's is NVRTC's
// PTX), and launches that call the host build's NAME_host with the arguments' device
// addresses translated to host pointers. Blas is a reference GEMM with cuBLASLt's
// column-major semantics, in float64, rounded once to the result's dtype.
type emulator struct {
	*Recorder
	cxx, dir string
	fns      map[Function]hostKernel
	libs     map[Module]uintptr
	// hb, when set, checks the stream order of every call (race_test.go); note is the
	// device's account of the next launch's or GEMM's memory.
	hb   *hbCheck
	note *[2][]span
}

type hostKernel func(in *unsafe.Pointer, out unsafe.Pointer, n int64, grid, block int32)

// newEmulator returns the emulated driver, building modules with the host's C++ compiler
// (a test without one skips) into the test binary's hostModules.
func newEmulator(t testing.TB) *emulator {
	return &emulator{Recorder: NewRecorder(), cxx: hostCompiler(t), dir: hostModules(t), fns: map[Function]hostKernel{}, libs: map[Module]uintptr{}}
}

// hostLibs are the test binary's host-built modules: a library per source hash in one
// directory (made by the first hostModules, removed by TestMain), each built once by the
// first emulator that loads it while the others wait for it, as the device's disk cache and
// its concurrent module builds do. The ranks of a multi-rank run load the same modules at
// once, and each had built its own copy: the package's tests made 101 builds of 63 modules,
// 368 s of compiler time where 196 s were needed.
var hostLibs struct {
	sync.Mutex
	dir    string
	builds map[string]*hostBuild
}

type hostBuild struct {
	done chan struct{}
	err  error
}

func hostModules(t testing.TB) string {
	hostLibs.Lock()
	defer hostLibs.Unlock()
	if hostLibs.dir == "" {
		d, err := os.MkdirTemp("", "ppc-cuda-host-modules-")
		if err != nil {
			t.Fatal(err)
		}
		hostLibs.dir, hostLibs.builds = d, map[string]*hostBuild{}
	}
	return hostLibs.dir
}

// buildOnce runs build for the library so unless another emulator has, or is running it;
// either way it returns when so is built, with the build's error.
func buildOnce(so string, build func() error) error {
	hostLibs.Lock()
	b, ok := hostLibs.builds[so]
	if !ok {
		b = &hostBuild{done: make(chan struct{})}
		hostLibs.builds[so] = b
	}
	hostLibs.Unlock()
	if !ok {
		b.err = build()
		close(b.done)
	}
	<-b.done
	return b.err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if hostLibs.dir != "" {
		os.RemoveAll(hostLibs.dir)
	}
	os.Exit(code)
}

// compile is the emulated device's "NVRTC": the image is the source itself.
func (e *emulator) compile(src string) ([]byte, error) { return []byte(src), nil }

// Workspace: the reference GEMM needs none.
func (e *emulator) Workspace() uint64 { return 0 }

func (e *emulator) LoadModule(src []byte) (Module, error) {
	sum := sha256.Sum256(src)
	so := filepath.Join(e.dir, hex.EncodeToString(sum[:8])+".so")
	err := buildOnce(so, func() error {
		cc, err := os.CreateTemp(e.dir, "*.cc")
		if err != nil {
			return err
		}
		_, err = cc.Write(src)
		if cerr := cc.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if out, err := exec.Command(e.cxx, "-x", "c++", "-std=c++17", "-DPPC_HOST", hostOpt(len(src)), "-fno-fast-math", "-ffp-contract=off", "-shared", "-fPIC", "-o", so, cc.Name()).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", e.cxx, err, out)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	lib, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return 0, err
	}
	m, err := e.Recorder.LoadModule(src)
	e.libs[m] = lib
	return m, err
}

func (e *emulator) Function(m Module, name string) (Function, error) {
	lib, ok := e.libs[m]
	if !ok {
		return 0, fmt.Errorf("module %d not loaded", m)
	}
	sym, err := purego.Dlsym(lib, name+"_host")
	if err != nil {
		return 0, fmt.Errorf("module %d has no kernel %s", m, name)
	}
	var k hostKernel
	purego.RegisterFunc(&k, sym)
	e.objects++
	f := Function(e.objects)
	e.fns[f] = k
	e.logf("function %d %s", f, name)
	return f, nil
}

// Launch runs a generated kernel: its arguments are the operands' addresses, the result's,
// and the index count.
func (e *emulator) Launch(f Function, grid, block uint32, s Stream, args ...uint64) error {
	k, ok := e.fns[f]
	if !ok || len(args) < 2 {
		return fmt.Errorf("launch of function %d with %d arguments", f, len(args))
	}
	if err := e.Recorder.Launch(f, grid, block, s, args...); err != nil {
		return err
	}
	e.noted(s, fmt.Sprintf("launch %d", f))
	ptrs := make([]unsafe.Pointer, len(args)-1)
	for i, a := range args[:len(args)-1] {
		p, err := e.host(DevicePtr(a))
		if err != nil {
			return fmt.Errorf("argument %d: %v", i, err)
		}
		ptrs[i] = p
	}
	in := &ptrs[0]
	if len(ptrs) == 1 {
		in = nil // iota: no operands
	}
	k(in, ptrs[len(ptrs)-1], int64(args[len(args)-1]), int32(grid), int32(block))
	return nil
}

// Matmul is the reference GEMM on the emulated memory.
func (e *emulator) Matmul(g kernels.GemmCall, a, b, d, bias, ws, stream uintptr) error {
	view := func(p uintptr) (device.Tensor, error) {
		if p == 0 {
			return device.Tensor{}, nil
		}
		m, err := e.tail(DevicePtr(p))
		if err != nil {
			return device.Tensor{}, err
		}
		n := len(m) / g.DType.Size()
		return device.Tensor{Type: ir.Type{DType: g.DType, Shape: ir.Shape{n}}, Data: m[:n*g.DType.Size()]}, nil
	}
	var ts [4]device.Tensor
	for i, p := range []uintptr{a, b, bias, d} {
		t, err := view(p)
		if err != nil {
			return err
		}
		ts[i] = t
	}
	e.logf("matmul M %d N %d K %d batch %d stream %d", g.M, g.N, g.K, g.Batch, stream)
	e.noted(Stream(stream), "matmul")
	cudatest.Gemm(g, ts[0], ts[1], ts[2], ts[3])
	return nil
}

var (
	_ Driver = (*emulator)(nil)
	_ Blas   = (*emulator)(nil)
)

// hostOpt is the host build's optimisation level for a module of n bytes of source: -O1, but
// -O0 for the test-case modules of a megabyte or more (every kernel case in one module, the
// attention kernels' fully unrolled tiles), which took 30 s each to optimise and run for
// seconds (TestKernelsOnHost: 35 s at -O1, 4 s at -O0). The results are the same: the
// arithmetic is IEEE either way (-ffp-contract=off, no fast math). The training runs' modules
// (a third of a megabyte) run for much longer and stay optimised.
func hostOpt(n int) string {
	if n >= 1<<20 {
		return "-O0"
	}
	return "-O1"
}
