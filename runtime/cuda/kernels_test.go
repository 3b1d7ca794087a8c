package cuda

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ppc.dev/ppc/ir"
	kernels "ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

var f32 = ir.F32

func ty(d ir.DType, s ...int) ir.Type { return ir.Type{DType: d, Shape: ir.Shape(s)} }

// compiler finds a C++ compiler for the host build.
func hostCompiler(t testing.TB) string {
	for _, c := range []string{"clang++", "c++", "g++"} {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	t.Skip("no C++ compiler to build the kernels for the host")
	return ""
}

// TestKernelsCompileWithNVRTC: every generated kernel compiles with a real NVRTC, the
// compiler a GPU run uses (ppc_cuda.h's NVRTC branch: no SDK headers, no __builtin_huge_val),
// to Hopper's machine code, each an entry point. It runs where the dynamic loader or the
// usual folders find libnvrtc (CI installs Debian's, from CUDA 11.8), and skips elsewhere.
// It is here, beside the NVRTC binding, so that kernels/cuda opens no library.
func TestKernelsCompileWithNVRTC(t *testing.T) {
	l := Probe(nil).Libraries[1]
	if !l.Found() {
		t.Skipf("no NVRTC on this machine (%s): the NVRTC compile is checked where there is one (.ci/run installs it)", l.Err)
	}
	nv, err := OpenNVRTC(&l)
	if err != nil {
		t.Fatal(err)
	}
	target, err := nv.Target(9, 0)
	if err != nil {
		t.Fatal(err)
	}
	ks := cudatest.Kernels(t)
	// As the device builds them: modules of a few dozen kernels, compiled concurrently. The
	// kernels are dealt out to the modules in turn: in case order the attention kernels
	// (4–15 s each in NVRTC) filled the last two modules, and one core compiled them alone
	// for minutes after the others had finished.
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	n := (len(ks) + 63) / 64
	for i := range n {
		var chunk []kernels.Kernel
		for j := i; j < len(ks); j += n {
			chunk = append(chunk, ks[j])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			img, err := nv.Compile(kernels.Source(chunk...), "kernels.cu", target)
			if err != nil {
				t.Error(err)
				return
			}
			for _, k := range chunk {
				if !bytes.Contains(img, []byte(k.Name+"\x00")) {
					t.Errorf("NVRTC's %s image has no kernel %s", target, k.Name)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d kernels compiled by NVRTC %s (%s) for %s", len(ks), l.Version, l.Path, target)
}

// TestKernelsOnHost: every generated kernel, built for the host through ppc_cuda.h and run
// by the CUDA device over the emulated driver with grids that do not divide the size (3
// blocks of 32 threads, 4 of 64, one thread), gives the CPU device's results on random
// inputs: bit for bit where the arithmetic is IEEE, within a few ulps for transcendentals.
// The attention cases, the largest kernels to build, are TestAttentionKernelsOnHost's.
func TestKernelsOnHost(t *testing.T) {
	e := newEmulator(t)
	dev, err := NewDevice(e, e, e.compile, false)
	if err != nil {
		t.Fatal(err)
	}
	cases := slices.DeleteFunc(cudatest.Cases(), func(c cudatest.Case) bool { return strings.Contains(c.Name, "attention") })
	checkKernels(t, cases, dev)
}

// TestKernelsInSeveralModules: a build split into modules (as a GPU's, whose modules NVRTC
// compiles concurrently) runs every kernel as one module does: each kernel is looked up in
// its own module, and the modules are compiled at once.
func TestKernelsInSeveralModules(t *testing.T) {
	e := newEmulator(t)
	var mu sync.Mutex
	inFlight, most := 0, 0
	compile := func(src string) ([]byte, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		time.Sleep(50 * time.Millisecond) // as NVRTC takes time: the workers overlap
		return e.compile(src)
	}
	dev, err := NewDevice(e, e, compile, false)
	if err != nil {
		t.Fatal(err)
	}
	dev.ModuleBytes = 3000
	cases := cudatest.Cases()[:16]
	checkKernels(t, cases, dev)
	modules := 0
	for _, l := range e.Log {
		if strings.HasPrefix(l, "module ") {
			modules++
		}
	}
	// The cases' kernels are ~11 KB of source: several modules of at least 3,000 bytes, fewer
	// than one per kernel.
	if n := len(cudatest.CaseKernels(t, cases)); modules < 2 || modules >= n {
		t.Errorf("%d modules for %d kernels in modules of at least 3,000 bytes of source", modules, n)
	}
	if most < 2 && runtime.GOMAXPROCS(0) > 1 {
		t.Errorf("at most %d module compiled at once", most)
	}
}

// checkKernels runs every case on dev (the CUDA device, over the emulated driver or a GPU)
// on random inputs with grids that do not divide the size (3 blocks of 32 threads, 4 of 64,
// one thread) and compares each result with the CPU device's, within the case's tolerance.
// Every case is prepared before the first launch, so their kernels build as one module.
func checkKernels(t *testing.T, cases []cudatest.Case, dev *Device) {
	t.Helper()
	ref := cpu.New()
	rng := rand.New(rand.NewPCG(1, 2))
	impls := make([]device.Impl, len(cases))
	start := time.Now()
	for ci, c := range cases {
		impl, err := dev.Prepare(c.Spec)
		if err != nil {
			t.Fatalf("%s: CUDA device: %v", c.Name, err)
		}
		impls[ci] = impl
	}
	// Progress and where the time goes, under -v as it happens: on the GPU the whole list
	// has run past its time limit without saying why.
	t.Logf("%d cases prepared in %v", len(cases), time.Since(start).Round(time.Millisecond))
	slowest, slowestAt := time.Duration(0), ""
	onDevice := func(x device.Tensor) device.Tensor { return upload(t, dev, x) }
	t0, prev := time.Now(), ""
	for ci, c := range cases {
		if d := time.Since(t0); d > slowest && prev != "" {
			slowest, slowestAt = d, prev
		}
		t0, prev = time.Now(), c.Name
		if ci%50 == 49 {
			t.Logf("%d of %d cases checked, %v; slowest %s (%v)", ci, len(cases), time.Since(start).Round(time.Millisecond), slowestAt, slowest.Round(time.Millisecond))
		}
		impl, err := ref.Prepare(c.Spec)
		if err != nil {
			t.Fatalf("%s: CPU device: %v", c.Name, err)
		}
		name := kernels.Describe(c.Spec)
		// Sums of positive values: no cancellation to make the summation order matter more
		// than a few ulps per term.
		positive := strings.Contains(name, "log") && !strings.Contains(name, "softmax") || strings.Contains(name, "sqrt") || strings.Contains(name, "pow") || strings.HasPrefix(name, "reduce")
		var in, din []device.Tensor
		for _, t := range c.Spec.In {
			in = append(in, cudatest.RandomTensor(rng, t, positive, c.Labels))
		}
		if c.Fix != nil {
			c.Fix(in)
		}
		for _, x := range in {
			din = append(din, onDevice(x))
		}
		var want, got, dout []device.Tensor
		for _, o := range c.Spec.Out {
			want = append(want, device.Tensor{Type: o, Data: make([]byte, o.Bytes())})
			got = append(got, device.Tensor{Type: o, Data: make([]byte, o.Bytes())})
			dout = append(dout, onDevice(got[len(got)-1]))
		}
		if err := impl(in, want); err != nil {
			t.Fatalf("%s: CPU device: %v", c.Name, err)
		}
		for _, g := range [][2]uint32{{3, 32}, {4, 64}, {1, 1}} {
			dev.Geometry = func(int64) (uint32, uint32) { return g[0], g[1] }
			dev.RowGeometry = func(int64, int64) (uint32, uint32) { return g[0], g[1] }
			if err := impls[ci](din, dout); err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			bad := 0
			for r := range dout {
				if err := dev.Read(got[r].Data, dout[r]); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < got[r].Type.NumElements(); i++ {
					w, ulp := cudatest.Value(want[r], i)
					v, _ := cudatest.Value(got[r], i)
					if v == w || (math.IsNaN(v) && math.IsNaN(w)) || math.Abs(v-w) <= c.ULPs*ulp || math.Abs(v-w) <= c.Abs {
						continue
					}
					if bad++; bad <= 3 {
						t.Errorf("%s (%s, grid %d×%d): result %d element %d = %v, the CPU device gives %v (%.1f ulps; allowed %g)", c.Name, name, g[0], g[1], r, i, v, w, math.Abs(v-w)/ulp, c.ULPs)
					}
				}
			}
		}
	}
	dev.Geometry, dev.RowGeometry = DefaultGeometry, DefaultRowGeometry
}

// upload copies a host tensor into a new allocation of dev.
func upload(t testing.TB, dev device.Device, x device.Tensor) device.Tensor {
	t.Helper()
	m, err := dev.Alloc(x.Type.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	d := m.At(0, x.Type)
	if err := dev.Write(d, x.Data); err != nil {
		t.Fatal(err)
	}
	return d
}
