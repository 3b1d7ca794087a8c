package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
// into a temporary directory (a test without one skips); dir, when given, is that directory
// (emulators sharing one build identical modules once).
func newEmulator(t testing.TB, dir ...string) *emulator {
	d := ""
	if len(dir) > 0 {
		d = dir[0]
	} else {
		d = t.TempDir()
	}
	return &emulator{Recorder: NewRecorder(), cxx: hostCompiler(t), dir: d, fns: map[Function]hostKernel{}, libs: map[Module]uintptr{}}
}

// compile is the emulated device's "NVRTC": the image is the source itself.
func (e *emulator) compile(src string) ([]byte, error) { return []byte(src), nil }

// Workspace: the reference GEMM needs none.
func (e *emulator) Workspace() uint64 { return 0 }

func (e *emulator) LoadModule(src []byte) (Module, error) {
	sum := sha256.Sum256(src)
	so := filepath.Join(e.dir, hex.EncodeToString(sum[:8])+".so")
	if _, err := os.Stat(so); err != nil {
		cc, err := os.CreateTemp(e.dir, "*.cc")
		if err != nil {
			return 0, err
		}
		_, err = cc.Write(src)
		if cerr := cc.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
		// Built under a name of its own, then renamed: emulators sharing the directory never
		// open a half-written library.
		tmp, err := os.CreateTemp(e.dir, "*.so")
		if err != nil {
			return 0, err
		}
		tmp.Close()
		if out, err := exec.Command(e.cxx, "-x", "c++", "-std=c++17", "-DPPC_HOST", "-O1", "-fno-fast-math", "-ffp-contract=off", "-shared", "-fPIC", "-o", tmp.Name(), cc.Name()).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("%s: %v\n%s", e.cxx, err, out)
		}
		if err := os.Rename(tmp.Name(), so); err != nil {
			return 0, err
		}
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
