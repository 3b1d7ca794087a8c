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
