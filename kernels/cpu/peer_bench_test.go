package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"ppc.dev/ppc/internal/benchpeer"
)

// blasPause is how long BenchmarkGemmAgainstOpenBLAS lets the machine settle before each
// side's calls. OpenBLAS's threads spin after a call returns (its thread timeout, about 2²⁸
// cycles: a tenth of a second here) and ppc's helpers spin for up to 0.5 ms, so a side that
// started at once would share the cores with the other's idle threads.
const blasPause = 150 * time.Millisecond

// BenchmarkGemmAgainstOpenBLAS is bench/cpu.sh's GEMM comparison a measurement at a time: for
// each size N (PPC_BENCH_SIZES, space separated; default 512 1024 2048 4096) it starts numpy
// (`python3 PPC_BENCH_NUMPY gemm --n N --reps R --serve`, bench/cpu_peers.py; skipped when
// unset) with OPENBLAS_NUM_THREADS = GOMAXPROCS, and runs R float32 N³ calls of ppc's Gemm and
// R of numpy's matmul in turn, each after blasPause. It reports both medians in GFLOP/s,
// ppc's ÷ OpenBLAS's (> 1: ppc faster) and each side's fastest measurement: both sides in
// the same minutes, where whole runs of each taken in turn had swung by 20–40% on this
// machine.
func BenchmarkGemmAgainstOpenBLAS(b *testing.B) {
	script := os.Getenv("PPC_BENCH_NUMPY")
	if script == "" {
		b.Skip("PPC_BENCH_NUMPY is not set: bench/cpu_peers.py, run by a python3 with numpy (bash bench/cpu.sh installs it)")
	}
	python := os.Getenv("PPC_BENCH_PYTHON")
	if python == "" {
		python = "python3"
	}
	sizes := strings.Fields(os.Getenv("PPC_BENCH_SIZES"))
	if len(sizes) == 0 {
		sizes = []string{"512", "1024", "2048", "4096"}
	}
	threads := runtime.GOMAXPROCS(0)
	for _, s := range sizes {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("PPC_BENCH_SIZES: %q is not a size", s)
		}
		// At least ~0.1 s of work a measurement on two threads: a 512³ call is under a
		// millisecond, and a single one measures the helpers' wake-up more than the GEMM.
		calls := max(1, 40*512*512/(n*n))
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			cmd := exec.Command(python, script, "gemm", "--n", s, "--reps", strconv.Itoa(calls), "--serve")
			cmd.Env = append(os.Environ(), fmt.Sprintf("OPENBLAS_NUM_THREADS=%d", threads), fmt.Sprintf("OMP_NUM_THREADS=%d", threads))
			peer := benchpeer.Start(b, cmd)
			r := rand.New(rand.NewPCG(1, 1))
			x, y, z := randSlice[float32](r, n*n), randSlice[float32](r, n*n), make([]float32, n*n)
			Gemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n) // faults z in, fills the scratch pool
			ours := func() float64 {
				t0 := time.Now()
				for range calls {
					Gemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n)
				}
				return time.Since(t0).Seconds() * 1e3 / float64(calls)
			}
			ppcMs, blasMs := benchpeer.Alternate(b, blasPause, ours, peer)
			gflop := 2 * float64(n) * float64(n) * float64(n) / 1e9
			p, o := gflop/benchpeer.Median(ppcMs)*1e3, gflop/benchpeer.Median(blasMs)*1e3
			b.ReportMetric(p, "ppc-GFLOP/s")
			b.ReportMetric(o, "blas-GFLOP/s")
			b.ReportMetric(p/o, "ppc/blas")
			// Each side's fastest measurement too: the least disturbed by the neighbours.
			b.ReportMetric(gflop/ppcMs[0]*1e3, "ppc-best-GFLOP/s")
			b.ReportMetric(gflop/blasMs[0]*1e3, "blas-best-GFLOP/s")
		})
	}
}
