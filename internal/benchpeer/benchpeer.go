// Package benchpeer runs a peer (onnxruntime, numpy's OpenBLAS) in its own process beside a
// benchmark, one measurement at a time, so that ppc and the peer can be timed in turn in the
// same minutes: on a shared machine, whole runs of each taken in turn swung by 20–40% as the
// neighbours came and went. bench/cpu.sh's CNN and GEMM rows are measured this way.
//
// The protocol is a line each way: the peer prints "ready" once warm; then for every line it
// reads on stdin it does its work once and prints the time that took, in ms.
package benchpeer

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Start starts cmd and waits for its "ready"; it returns the function that asks for one
// measurement (ms). The process's stdin is closed and it is waited for when b ends.
func Start(b testing.TB, cmd *exec.Cmd) func() float64 {
	b.Helper()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	out := bufio.NewScanner(outPipe)
	if !out.Scan() || out.Text() != "ready" {
		b.Fatalf("%s did not start: %q %v", cmd.Path, out.Text(), out.Err())
	}
	return func() float64 {
		if _, err := io.WriteString(in, "\n"); err != nil {
			b.Fatal(err)
		}
		if !out.Scan() {
			b.Fatalf("%s stopped: %v", cmd.Path, out.Err())
		}
		ms, err := strconv.ParseFloat(out.Text(), 64)
		if err != nil {
			b.Fatalf("%s printed %q, not a time in ms", cmd.Path, out.Text())
		}
		return ms
	}
}

// Alternate runs ours and then peer, each after pause (which lets the other side's idle
// threads stop spinning), for every iteration of b.Loop, and returns each side's times in ms,
// sorted: the median at len/2, the fastest at 0.
func Alternate(b *testing.B, pause time.Duration, ours, peer func() float64) (oursMs, peerMs []float64) {
	for b.Loop() {
		time.Sleep(pause)
		oursMs = append(oursMs, ours())
		time.Sleep(pause)
		peerMs = append(peerMs, peer())
	}
	slices.Sort(oursMs)
	slices.Sort(peerMs)
	return oursMs, peerMs
}

// Blocks is one side's times from AlternateBlocks, each sorted (the median at len/2, the
// fastest at 0): Idle the first run of every block, after the pause; Steady the others.
type Blocks struct{ Idle, Steady []float64 }

// AlternateBlocks is Alternate with each side running block (≥ 2) times in a row after its
// pause. A run after the machine has idled is not a run of a busy one: on the virtual
// machines these benchmarks run on, a core that has idled for 100 ms came back 0.3–4 ms
// late and ran slowly for a while after (bench/cpu.sh's CNN steps: ppc's GoogLeNet 12.2 ms
// back to back, 16.3 after idling). The first run of each block measures the one, the
// others a steady state — the runs of a server kept busy — still in turn with the peer's.
func AlternateBlocks(b *testing.B, pause time.Duration, block int, ours, peer func() float64) (o, p Blocks) {
	if block < 2 {
		b.Fatalf("AlternateBlocks: block %d, want at least 2", block)
	}
	run := func(side *Blocks, f func() float64) {
		time.Sleep(pause)
		side.Idle = append(side.Idle, f())
		for i := 1; i < block; i++ {
			side.Steady = append(side.Steady, f())
		}
	}
	for b.Loop() {
		run(&o, ours)
		run(&p, peer)
	}
	for _, x := range [][]float64{o.Idle, o.Steady, p.Idle, p.Steady} {
		slices.Sort(x)
	}
	return o, p
}

// Median sorts xs (so xs[0] is then the least) and returns its middle element (xs must not
// be empty).
func Median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
