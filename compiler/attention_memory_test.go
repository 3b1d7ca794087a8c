//go:build linux

package compiler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"ppc.dev/ppc/runtime"
)

// longContext is a one-layer tiny GPT at seq 4096 with one head of 64: the decomposed chain's
// scores are one 4096 × 4096 f32 matrix per layer (64 MiB) per tensor it keeps of them.
var longContext = map[string]string{"n_layers": "1", "seq": "4096", "batch": "1", "n_heads": "1", "d_model": "64", "vocab": "256"}

const longSeq, longHeads = 4096, 1

func longContextOptions(fused bool) Options {
	set := map[string]string{}
	for k, v := range longContext {
		set[k] = v
	}
	if !fused {
		set["fused_attention"] = "false"
	}
	return Options{Load: LoadOptions{Set: set}, Microbatches: 1, Optimizer: "sgd{lr=0.01}"}
}

// TestFusedAttentionMemory: a seq-4096 training step's peak memory with the fused op is below
// the decomposed chain's by at least the bytes of the s² scores — in the memory plan (the
// compiler's peak for the rank), and measured: the maximum resident set of a process that
// runs one training step (this test binary, re-run for each variant).
func TestFusedAttentionMemory(t *testing.T) {
	if v := os.Getenv("PPC_ATTENTION_STEP"); v != "" {
		runLongContextStep(t, v == "fused")
		return
	}
	if testing.Short() {
		t.Skip("runs two seq-4096 training steps in child processes; run without -short")
	}
	scores := int64(longSeq) * longSeq * 4 * longHeads
	model := filepath.Join("..", "testdata", "models", "gpt.ppm")
	peak := map[bool]int64{}
	for _, fused := range []bool{true, false} {
		res, err := Compile(model, longContextOptions(fused))
		if err != nil {
			t.Fatal(err)
		}
		peak[fused] = res.Output.Plan.Programs[0].PeakBytes
	}
	if saved := peak[false] - peak[true]; saved < scores {
		t.Errorf("memory plan: peak %d bytes fused, %d decomposed: %d saved, less than the scores' %d", peak[true], peak[false], saved, scores)
	}
	rss := map[bool]int64{}
	for _, fused := range []bool{true, false} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFusedAttentionMemory$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("PPC_ATTENTION_STEP=%s", map[bool]string{true: "fused", false: "decomposed"}[fused]))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child (fused=%v): %v\n%s", fused, err, out)
		}
		rss[fused] = cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024 // KiB on Linux
	}
	t.Logf("seq %d: plan peak %.1f MiB fused, %.1f MiB decomposed; max RSS %.1f MiB fused, %.1f MiB decomposed; scores %.1f MiB",
		longSeq, mib(peak[true]), mib(peak[false]), mib(rss[true]), mib(rss[false]), mib(scores))
	if saved := rss[false] - rss[true]; saved < scores {
		t.Errorf("measured: max RSS %d bytes fused, %d decomposed: %d saved, less than the scores' %d", rss[true], rss[false], saved, scores)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// runLongContextStep is the child: compile, load and run one training step.
func runLongContextStep(t *testing.T, fused bool) {
	_, job := initJob(t, filepath.Join("..", "testdata", "models", "gpt.ppm"), longContextOptions(fused), 1)
	r, err := job.Step(runtime.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loss %.4f", r.Loss)
}
