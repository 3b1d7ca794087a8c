package benchpeer

import (
	"os/exec"
	"testing"
)

// A peer that answers each line with the number of lines it has read: Start waits for its
// "ready" and reads one answer per request, in order; Alternate calls both sides once per
// iteration and returns their times sorted.
func TestStartAndAlternate(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh:", err)
	}
	res := testing.Benchmark(func(b *testing.B) {
		peer := Start(b, exec.Command("sh", "-c", `echo ready; n=0; while read l; do n=$((n+1)); echo "$n.5"; done`))
		if got := peer(); got != 1.5 {
			b.Fatalf("first answer %v, want 1.5", got)
		}
		ours := 10.0
		o, p := Alternate(b, 0, func() float64 { ours--; return ours }, peer)
		if len(o) != b.N || len(p) != b.N {
			b.Fatalf("%d and %d times for %d iterations", len(o), len(p), b.N)
		}
		if b.N > 1 && (o[0] > o[1] || p[0] > p[1]) {
			b.Fatalf("times not sorted: %v %v", o, p)
		}
		if p[0] != 2.5 || o[len(o)-1] != 9 {
			b.Fatalf("peer's fastest %v (want 2.5), ours' slowest %v (want 9)", p[0], o[len(o)-1])
		}
		if m := Median([]float64{3, 1, 2}); m != 2 {
			b.Fatalf("Median(3, 1, 2) = %v", m)
		}
	})
	if res.N == 0 {
		t.Fatal("the benchmark did not run")
	}
}

// AlternateBlocks runs each side block times an iteration, the peer's after ours, and files
// the first of each block as the run after idle and the others as the steady state.
func TestAlternateBlocks(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh:", err)
	}
	res := testing.Benchmark(func(b *testing.B) {
		peer := Start(b, exec.Command("sh", "-c", `echo ready; n=0; while read l; do n=$((n+1)); echo "$n"; done`))
		calls := 0
		o, p := AlternateBlocks(b, 0, 3, func() float64 { calls++; return float64(100 * calls) }, peer)
		if len(o.Idle) != b.N || len(o.Steady) != 2*b.N || len(p.Idle) != b.N || len(p.Steady) != 2*b.N {
			b.Fatalf("%d+%d and %d+%d times for %d iterations of blocks of 3", len(o.Idle), len(o.Steady), len(p.Idle), len(p.Steady), b.N)
		}
		// Ours count 100, 200, 300 in the first block, the peer 1, 2, 3: firsts are 100·(3i+1)
		// and 3i+1.
		for i := 0; i < b.N; i++ {
			if o.Idle[i] != float64(100*(3*i+1)) || p.Idle[i] != float64(3*i+1) {
				b.Fatalf("block %d: first runs %v and %v", i, o.Idle[i], p.Idle[i])
			}
		}
		if o.Steady[0] != 200 || p.Steady[0] != 2 || o.Steady[1] != 300 {
			b.Fatalf("steady runs %v, %v", o.Steady, p.Steady)
		}
	})
	if res.N == 0 {
		t.Fatal("the benchmark did not run")
	}
	res = testing.Benchmark(func(b *testing.B) {
		AlternateBlocks(b, 0, 1, func() float64 { return 1 }, func() float64 { return 1 })
	})
	if res.N != 0 {
		t.Fatal("a block of 1 ran")
	}
}
