//go:build amd64 && !purego && linux

// Opt-in measurement tools, skipped by default. The machines this project runs on are
// shared, so wall-clock benchmarks swing with other load; these report rates per second
// of the measuring thread's own CPU time (CLOCK_THREAD_CPUTIME_ID, single-threaded, best
// of a few runs), which are stable enough to tune blocking parameters and compare kernels:
//
//	PPC_TUNE=1      go test -run TuneReport -v ./kernels/cpu   # GEMM kernels + FMA peak
//	PPC_TUNE=sweep  go test -run TuneSweep  -v ./kernels/cpu   # kc/mc/nc grid (PPC_KERN=avx2)
//	PPC_TUNE=trans  go test -run TuneTrans  -v ./kernels/cpu   # transposed operands
//	PPC_TUNE=conv   go test -run TuneConv   -v ./kernels/cpu   # ResNet 3×3 conv passes
//	PPC_TUNE=others go test -run TuneOthers -v ./kernels/cpu   # depthwise, pools, resize, BN
//	PPC_TUNE=pool   go test -run TunePool   -v ./kernels/cpu

package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// threadCPU returns the calling OS thread's CPU time (user+system).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// cpuRate runs f (single-threaded) reps times and returns flops per thread-CPU-second of
// the best run: robust to other processes stealing the core, unlike wall-clock time.
func cpuRate(flops float64, reps int, f func()) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	f()
	best := 0.0
	for i := 0; i < reps; i++ {
		t0 := threadCPU()
		f()
		if d := (threadCPU() - t0).Seconds(); d > 0 && flops/d > best {
			best = flops / d
		}
	}
	return best / 1e9
}

func TestTuneReport(t *testing.T) {
	if os.Getenv("PPC_TUNE") == "" {
		t.Skip("set PPC_TUNE=1 to print CPU-time GEMM rates")
	}
	r := rand.New(rand.NewPCG(1, 1))
	shapes := [][3]int{{1024, 1024, 1024}, {64, 3136, 576}, {2048, 3072, 768}}
	for _, sh := range shapes {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c := randSlice[float32](r, m*k), randSlice[float32](r, k*n), make([]float32, m*n)
		for _, impl := range gemmAvailable(4)[1:] {
			withImpl[float32](impl, func() {
				g := cpuRate(2*float64(m*n*k), 5, func() { Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n) })
				fmt.Printf("%v %-14s %6.1f GFLOP/s (thread CPU time)\n", sh, impl.name, g)
			})
		}
	}
	for _, sh := range shapes[:2] {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c := randSlice[float64](r, m*k), randSlice[float64](r, k*n), make([]float64, m*n)
		for _, impl := range gemmAvailable(8)[1:] {
			withImpl[float64](impl, func() {
				g := cpuRate(2*float64(m*n*k), 5, func() { Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n) })
				fmt.Printf("f64 %v %-14s %6.1f GFLOP/s (thread CPU time)\n", sh, impl.name, g)
			})
		}
	}
	fmt.Printf("peak avx2 %.1f\n", cpuRate(24*8*2*(1<<20), 5, func() { gemmPeakAVX2(1 << 20) }))
	if gemmHasAVX512 {
		fmt.Printf("peak avx512 %.1f\n", cpuRate(48*16*2*(1<<20), 5, func() { gemmPeakAVX512(1 << 20) }))
	}
}

func TestTuneSweep(t *testing.T) {
	if os.Getenv("PPC_TUNE") != "sweep" {
		t.Skip("set PPC_TUNE=sweep")
	}
	r := rand.New(rand.NewPCG(1, 1))
	shapes := [][3]int{{1024, 1024, 1024}, {64, 3136, 576}, {2048, 3072, 768}}
	type data struct{ a, b, c []float32 }
	ds := make([]data, len(shapes))
	for i, sh := range shapes {
		ds[i] = data{randSlice[float32](r, sh[0]*sh[2]), randSlice[float32](r, sh[2]*sh[1]), make([]float32, sh[0]*sh[1])}
	}
	base := gemmAVX512S
	if s := os.Getenv("PPC_KERN"); s == "avx2" {
		base = gemmAVX2S
	}
	for _, kc := range []int{128, 192, 256, 384} {
		for _, mcf := range []int{8, 16, 32, 64} {
			for _, nc := range []int{768, 1536, 3072} {
				impl := base
				impl.kc, impl.mc, impl.nc = kc, mcf*impl.mr, nc
				line := fmt.Sprintf("kc=%d mc=%d nc=%d:", kc, impl.mc, nc)
				sum := 0.0
				withImpl[float32](&impl, func() {
					for i, sh := range shapes {
						m, n, k := sh[0], sh[1], sh[2]
						d := ds[i]
						g := cpuRate(2*float64(m*n*k), 3, func() { Gemm(false, false, m, n, k, 1, d.a, k, d.b, n, 0, d.c, n) })
						sum += g
						line += fmt.Sprintf(" %6.1f", g)
					}
				})
				fmt.Printf("%s avg %.1f\n", line, sum/3)
			}
		}
	}
}

func TestTuneConv(t *testing.T) {
	if os.Getenv("PPC_TUNE") != "conv" {
		t.Skip("set PPC_TUNE=conv")
	}
	p := &ConvParams{Batch: 8, InC: 64, OutC: 64, Groups: 1, Spatial: []int{56, 56}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	x := randSlice[float32](r, p.XLen())
	w := randSlice[float32](r, p.WLen())
	y := make([]float32, p.YLen())
	dw := make([]float32, p.WLen())
	flops := 2.0 * float64(p.YLen()) * float64(p.WLen()/p.OutC)
	fmt.Printf("conv forward %.1f GFLOP/s\n", cpuRate(flops, 3, func() { Conv(p, x, w, nil, y) }))
	for _, cb := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20} {
		convColBlock = cb
		fmt.Printf("conv backward-data block %d: %.1f GFLOP/s\n", cb, cpuRate(flops, 3, func() { ConvBackwardData(p, y, w, x) }))
	}
	fmt.Printf("conv backward-filter %.1f GFLOP/s\n", cpuRate(flops, 3, func() { ConvBackwardFilter(p, x, y, dw, nil) }))
}

func TestTuneOthers(t *testing.T) {
	if os.Getenv("PPC_TUNE") != "others" {
		t.Skip("set PPC_TUNE=others")
	}
	r := rand.New(rand.NewPCG(1, 1))
	dp := &ConvParams{Batch: 8, InC: 128, OutC: 128, Groups: 128, Spatial: []int{56, 56}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := dp.Init(); err != nil {
		t.Fatal(err)
	}
	x, w, y := randSlice[float32](r, dp.XLen()), randSlice[float32](r, dp.WLen()), make([]float32, dp.YLen())
	fmt.Printf("depthwise fwd %.2f GFLOP/s\n", cpuRate(2*9*float64(dp.YLen()), 3, func() { Conv(dp, x, w, nil, y) }))
	fmt.Printf("depthwise bwd-data %.2f GFLOP/s\n", cpuRate(2*9*float64(dp.YLen()), 3, func() { ConvBackwardData(dp, y, w, x) }))
	fmt.Printf("depthwise bwd-filter %.2f GFLOP/s\n", cpuRate(2*9*float64(dp.YLen()), 3, func() { ConvBackwardFilter(dp, x, y, w, nil) }))
	pp := PoolParams{Batch: 8, Channels: 64, Spatial: []int{112, 112}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := pp.Init(); err != nil {
		t.Fatal(err)
	}
	px, py, arg := randSlice[float32](r, pp.XLen()), make([]float32, pp.YLen()), make([]int32, pp.YLen())
	fmt.Printf("maxpool %.2f Gelem-in/s\n", cpuRate(float64(pp.XLen()), 3, func() { MaxPool(&pp, px, py, arg) }))
	fmt.Printf("avgpool %.2f Gelem-in/s\n", cpuRate(float64(pp.XLen()), 3, func() { AvgPool(&pp, px, py) }))
	fmt.Printf("maxpool bwd %.2f Gelem-in/s\n", cpuRate(float64(pp.XLen()), 3, func() { MaxPoolBackward(&pp, py, arg, px) }))
	rp := ResizeParams{InShape: []int{8, 64, 56, 56}, OutShape: []int{8, 64, 112, 112}, Mode: ResizeLinear}
	if err := rp.Init(); err != nil {
		t.Fatal(err)
	}
	rx, ry := randSlice[float32](r, rp.XLen()), make([]float32, rp.YLen())
	fmt.Printf("resize linear 2x %.2f Gelem-out/s\n", cpuRate(float64(rp.YLen()), 3, func() { Resize(&rp, rx, ry) }))
	rn := ResizeParams{InShape: []int{8, 64, 56, 56}, OutShape: []int{8, 64, 112, 112}}
	if err := rn.Init(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("resize nearest 2x %.2f Gelem-out/s\n", cpuRate(float64(rn.YLen()), 3, func() { Resize(&rn, rx, ry) }))
	n, c, sp := 8, 64, 56*56
	bx, by := randSlice[float32](r, n*c*sp), make([]float32, n*c*sp)
	s, b, m, v := randSlice[float32](r, c), randSlice[float32](r, c), make([]float32, c), make([]float32, c)
	fmt.Printf("batchnorm train fwd %.2f Gelem/s\n", cpuRate(float64(n*c*sp), 3, func() { BatchNormTraining(bx, s, b, 1e-5, n, c, sp, by, m, v) }))
	fmt.Printf("batchnorm inference %.2f Gelem/s\n", cpuRate(float64(n*c*sp), 3, func() { BatchNormInference(bx, s, b, m, v, 1e-5, n, c, sp, by, nil) }))
}

func TestTunePool(t *testing.T) {
	if os.Getenv("PPC_TUNE") != "pool" {
		t.Skip("set PPC_TUNE=pool")
	}
	r := rand.New(rand.NewPCG(1, 1))
	pp := PoolParams{Batch: 8, Channels: 64, Spatial: []int{112, 112}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := pp.Init(); err != nil {
		t.Fatal(err)
	}
	px, py, arg := randSlice[float32](r, pp.XLen()), make([]float32, pp.YLen()), make([]int32, pp.YLen())
	fmt.Printf("x %d y %d\n", pp.XLen(), pp.YLen())
	fmt.Printf("maxpool noarg %.3f Gout/s\n", cpuRate(float64(pp.YLen()), 5, func() { MaxPool(&pp, px, py, nil) }))
	fmt.Printf("maxpool arg %.3f Gout/s\n", cpuRate(float64(pp.YLen()), 5, func() { MaxPool(&pp, px, py, arg) }))
	fmt.Printf("avgpool %.3f Gout/s\n", cpuRate(float64(pp.YLen()), 5, func() { AvgPool(&pp, px, py) }))
}

func TestTuneTrans(t *testing.T) {
	if os.Getenv("PPC_TUNE") != "trans" {
		t.Skip("set PPC_TUNE=trans")
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, tc := range []struct {
		tA, tB  bool
		m, n, k int
	}{{false, false, 2048, 3072, 768}, {false, true, 2048, 768, 3072}, {true, false, 768, 3072, 2048}, {true, true, 1024, 1024, 1024}} {
		lda, ldb := tc.k, tc.n
		if tc.tA {
			lda = tc.m
		}
		if tc.tB {
			ldb = tc.k
		}
		a, b, c := randSlice[float32](r, tc.m*tc.k), randSlice[float32](r, tc.k*tc.n), make([]float32, tc.m*tc.n)
		g := cpuRate(2*float64(tc.m*tc.n*tc.k), 3, func() { Gemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, 1, a, lda, b, ldb, 0, c, tc.n) })
		fmt.Printf("tA=%v tB=%v %dx%dx%d: %.1f GFLOP/s\n", tc.tA, tc.tB, tc.m, tc.n, tc.k, g)
	}
}
