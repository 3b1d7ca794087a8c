package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/planner"
)

// shellSplit splits a command line the planner printed (words, single-quoted words).
func shellSplit(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	in, word := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			in, word = !in, true
		case r == ' ' && !in:
			if word {
				out = append(out, cur.String())
				cur.Reset()
			}
			word = false
		default:
			cur.WriteRune(r)
			word = true
		}
	}
	if in {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if word {
		out = append(out, cur.String())
	}
	return out
}

func planJSON(t *testing.T, args ...string) *planner.Result {
	t.Helper()
	code, out, errs := ppc(t, "", append([]string{"plan", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("ppc plan %v: exit %d: %s", args, code, errs)
	}
	var r planner.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("ppc plan --json: %v\n%s", err, out)
	}
	return &r
}

// TestPlanChoiceFitsCompile: with a memory limit just below what the unconstrained winner
// needs, the planner's choices compile, with the exact commands it prints, into plans whose
// memory report (ppc compile's, from its memory plan) fits the limit on every rank, and
// whose step-time estimates agree with the planner's predictions: for the tiny GPT on 8
// GPUs, and for one long sequence, where every plan printed is token-sliced.
func TestPlanChoiceFitsCompile(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	t.Run("batch", func(t *testing.T) {
		planChoiceFits(t, []string{gpt, "--gpus", "8", "--top", "3"}, "a100-80gb")
	})
	t.Run("token-slices", func(t *testing.T) {
		planChoiceFits(t, []string{gpt, "--set", "seq=512", "--set", "d_model=512", "--set", "n_heads=8", "--gpus", "8",
			"--global-batch", "1", "--precision", "fp16", "--top", "3"}, "v100-16gb")
	})
}

func planChoiceFits(t *testing.T, base []string, gpu string) {
	free := planJSON(t, append(base, "--gpu", gpu)...)
	var peak int64
	for _, m := range free.Plans[0].PeakMemory {
		peak = max(peak, m)
	}
	limit := peak - 1
	spec := fmt.Sprintf("%s{mem_bytes=%d}", gpu, limit)
	tight := planJSON(t, append(base, "--gpu", spec)...)
	if fmt.Sprint(tight.Plans[0].Config) == fmt.Sprint(free.Plans[0].Config) {
		t.Fatalf("the limit %d (one byte below the winner's peak) did not change the choice %+v", limit, tight.Plans[0].Config)
	}
	for i, pl := range tight.Plans {
		args := shellSplit(t, pl.Command)
		if args[0] != "ppc" || args[len(args)-2] != "-o" {
			t.Fatalf("command %q", pl.Command)
		}
		dir := t.TempDir()
		args = append(args[1:len(args)-1], dir)
		code, out, errs := ppc(t, "", args...)
		if code != 0 {
			t.Fatalf("plan %d: %s: exit %d: %s", i+1, pl.Command, code, errs)
		}
		if strings.Contains(out, "does not fit") {
			t.Errorf("plan %d: ppc compile says it does not fit:\n%s", i+1, out)
		}
		p := readPlan(t, dir)
		for _, prog := range p.Programs {
			m := prog.Memory(limit)
			if m.Peak() > limit {
				t.Errorf("plan %d (%s): pp %d needs %d bytes in ppc compile's report, over the limit %d", i+1, pl.Command, prog.PP, m.Peak(), limit)
			}
			if pred := pl.Memory[prog.PP]; pred.Peak() < m.Peak() {
				t.Logf("plan %d pp %d: predicted %+v, compile reports %+v", i+1, prog.PP, pred, m)
			}
		}
		if p.Estimate == nil {
			t.Fatalf("plan %d: no estimate in plan.json", i+1)
		}
		ratio := pl.StepTime / p.Estimate.StepSeconds
		t.Logf("plan %d %+v: predicted %.4g s, ppc compile estimates %.4g s (×%.3f)", i+1, pl.Config, pl.StepTime, p.Estimate.StepSeconds, ratio)
		if ratio < 0.8 || ratio > 1.25 {
			t.Errorf("plan %d: predicted %.4g s, ppc compile's estimate %.4g s", i+1, pl.StepTime, p.Estimate.StepSeconds)
		}
		// One bubble: the planner's is a fraction of the ideal time, as ppc compile's.
		t.Logf("plan %d: bubble %.4g of ideal, ppc compile %.4g", i+1, pl.BubbleRatio, p.Estimate.BubbleRatio)
		if d := pl.BubbleRatio - p.Estimate.BubbleRatio; d > 0.25*p.Estimate.BubbleRatio+0.01 || -d > 0.25*p.Estimate.BubbleRatio+0.01 {
			t.Errorf("plan %d: bubble %.4g of ideal predicted, ppc compile's estimate %.4g", i+1, pl.BubbleRatio, p.Estimate.BubbleRatio)
		}
	}
}

// TestPlanTokenSlicesCompile: for a single long sequence the planner cuts it into token
// slices, and the command it prints compiles into a plan with those slices whose estimate
// agrees with the prediction and whose memory per pipeline rank is the one ppc plan printed
// (the planner compiles a sliced configuration to know its memory).
func TestPlanTokenSlicesCompile(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	r := planJSON(t, gpt, "--set", "seq=512", "--set", "d_model=512", "--set", "n_heads=8", "--gpus", "8", "--gpu", "v100-16gb",
		"--global-batch", "1", "--precision", "fp16", "--top", "1")
	pl := r.Plans[0]
	if len(pl.Config.TokenSlices) < 2 || !strings.Contains(pl.Command, "--token-slices ") {
		t.Fatalf("no token slices for one 512-token sequence on 8 GPUs: %+v\n%s", pl.Config, pl.Command)
	}
	args := shellSplit(t, pl.Command)
	dir := t.TempDir()
	code, out, errs := ppc(t, "", append(args[1:len(args)-1], dir)...)
	if code != 0 || !strings.Contains(out, "token slices") {
		t.Fatalf("%s: exit %d\n%s%s", pl.Command, code, out, errs)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p codegen.Plan
	if err := json.Unmarshal(raw, &p); err != nil || p.Estimate == nil {
		t.Fatalf("plan.json: %v", err)
	}
	ratio := pl.StepTime / p.Estimate.StepSeconds
	t.Logf("%+v: predicted %.4g s, ppc compile estimates %.4g s (×%.3f)", pl.Config, pl.StepTime, p.Estimate.StepSeconds, ratio)
	if ratio < 0.8 || ratio > 1.25 {
		t.Errorf("predicted %.4g s, ppc compile's estimate %.4g s", pl.StepTime, p.Estimate.StepSeconds)
	}
	for _, prog := range p.Programs {
		if got, want := pl.Memory[prog.PP], prog.Memory(r.DeviceMem); got != want {
			t.Errorf("pp %d: ppc plan printed %s, ppc compile plans %s", prog.PP, got, want)
		}
	}
}

// TestPlanErrors: bad input to ppc plan exits 2 and says what would work.
func TestPlanErrors(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{gpt, "--gpu", "h100-80gb"}, "--gpu and --gpus are required"},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100"}, `unknown device profile "h100" (known: a100-like, v100-16gb`},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb{nvlink=1}"}, `unknown figure "nvlink" (known: collective_efficiency, gemm_efficiency, gpus_per_node, inter_node_bandwidth`},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb{mem_bytes=-1}"}, "mem_bytes=-1: want a positive number"},
		{[]string{gpt, "--gpus", "8", "--gpu", "a100-like"}, "has no memory size; name a GPU"},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb{mem_bytes=1e6}"}, "nothing fits in the 976.6 KiB of a h100-80gb{mem_bytes=1000000}: the least memory any configuration needs is"},
		// Absurd sizes are answered with what limits them, not with GPU counts or batches.
		{[]string{gpt, "--gpus", "1024", "--gpu", "h100-80gb", "--pp", "100000"}, "--pp 100000: the model has 10 units to cut into pipeline stages (E, t0 … L): --pp 10 at most"},
		{[]string{gpt, "--gpus", "16", "--gpu", "h100-80gb", "--pp", "16"}, "--pp 16: the model has 10 units"},
		{[]string{gpt, "--gpus", "16", "--gpu", "h100-80gb", "--pp", "4", "--virtual-stages", "4"}, "--pp 4 --virtual-stages 4 needs 16 stages, but the model has 10 units to cut into pipeline stages (E, t0 … L): --pp 2 at most with 4 stages per rank"},
		{[]string{gpt, "--gpus", "16", "--gpu", "h100-80gb", "--pp", "3"}, "--pp 3 does not divide --gpus 16"},
		{[]string{gpt, "--gpus", "16", "--gpu", "h100-80gb", "--pp", "2", "--dp", "2", "--tp", "2"}, "--pp 2 --dp 2 --tp 2 make 8 GPUs, not --gpus 16"},
		{[]string{gpt, "--gpus", "32", "--gpu", "h100-80gb", "--dp", "32"}, "--dp 32 is more than the global batch of 16 sequences"},
		{[]string{gpt, "--gpus", "1024", "--gpu", "h100-80gb", "--gpus-per-node", "3"}, "--gpus 1024 is not a whole number of nodes of 3 GPUs (h100-80gb{gpus_per_node=3}): 341 nodes hold 1023, 342 nodes hold 1026"},
		{[]string{gpt, "--gpus", "12", "--gpu", "h100-80gb"}, "--gpus 12 is not a whole number of nodes of 8 GPUs (h100-80gb): 1 node holds 8, 2 nodes hold 16"},
		{[]string{gpt, "--gpus", "4", "--gpu", "h100-80gb", "--global-batch", "3", "--pp", "1", "--tp", "1"}, "can split the global batch of 3 sequences (--pp 1 --tp 1): the data-parallel size must divide it; try --gpus 3 or 8 or --global-batch 4"},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb", "--tp", "16"}, "--tp 16: tensor parallelism must divide --gpus 8 and stay inside a node of 8 GPUs"},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb", "--tp", "8"}, "--tp 8 cannot split"},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb", "--zero", "4"}, "--zero must be 0, 1, 2 or 3, got 4"},
		// dp 3 divides no first dim of the tiny GPT: ZeRO-3 pads its blocks, and the refusal
		// names the least configuration as it is (no note that dp splits nothing).
		{[]string{gpt, "--gpus", "3", "--gpu", "a100-80gb{mem_bytes=1e6}", "--global-batch", "3", "--zero", "3"}, "per GPU (pp 1, dp 3, tp 1, 1f1b, 1 micro-batches of 1, recompute full, ZeRO 3); use more GPUs"},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb", "--schedule", "2f2b"}, `--schedule "2f2b": want one of gpipe`},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb", "--gpus-per-node", "0"}, "--gpus-per-node must be at least 1"},
		{[]string{gpt, "--gpus", "8", "--gpu", "h100-80gb", "--token-slices", "40"}, "--token-slices 40: the sequence has 32 tokens, so at most 32 slices"},
		{[]string{filepath.Join("..", "..", "testdata", "models", "gpt-tiny.onnx"), "--gpus", "8", "--gpu", "h100-80gb"}, "ppc plan reads .ppm models"},
	} {
		code, _, errs := ppc(t, "", append([]string{"plan"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("ppc plan %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}
}

// TestPlanText: the table, the winner's memory in compile's format, the runner-up's
// explanation and the commands.
func TestPlanText(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	code, out, errs := ppc(t, "", "plan", gpt, "--gpus", "8", "--gpu", "h100-80gb", "--gpus-per-node", "4", "--top", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"on 8 × h100-80gb{gpus_per_node=4}, global batch 16 × 32 tokens", "  1  ", "  2  ", " bubble/ideal ", "% of ideal) + collectives ",
		"peak ", " = params ", " + margin ", "why not plan 2: ", "% slower", "1: ppc compile ", "--gpu 'h100-80gb{gpus_per_node=4}'"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPlanFullRecomputeActivationsAgreeWithCompile: under --recompute full, what ppc plan predicts
// each rank holds of forward activations — every layer's input, per micro-batch in flight,
// and the run in progress — is what ppc compile's memory plan holds for the same
// configuration, within 2%, and the stash alone is below it.
func TestPlanFullRecomputeActivationsAgreeWithCompile(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	res := planJSON(t, gpt, "--preset", "small", "--gpus", "4", "--gpu", "a100-80gb", "--pp", "4", "--dp", "1", "--tp", "1",
		"--schedule", "1f1b", "--microbatches", "8", "--token-slices", "1", "--recompute", "full", "--top", "1")
	pl := res.Plans[0]
	args := shellSplit(t, pl.Command)
	dir := t.TempDir()
	args = append(args[1:len(args)-1], dir)
	if code, _, errs := ppc(t, "", args...); code != 0 {
		t.Fatalf("%s: exit %d: %s", pl.Command, code, errs)
	}
	p := readPlan(t, dir)
	if p.Recompute != "full" || p.Estimate == nil {
		t.Fatalf("plan.json: recompute %q, estimate %v", p.Recompute, p.Estimate)
	}
	for _, prog := range p.Programs {
		var stash int64
		for _, s := range prog.Stages {
			stash += p.StageInfo[s].StashBytes
		}
		stashed := stash * int64(p.Estimate.PeakActivations[prog.PP])
		got := prog.Memory(res.DeviceMem).Activations
		want := pl.Memory[prog.PP].Activations
		t.Logf("rank %d: stash %d (%d per micro-batch × %d in flight), compile's activations %d, plan's %d", prog.PP, stashed, stash, p.Estimate.PeakActivations[prog.PP], got, want)
		if rel := float64(want-got) / float64(got); rel > 0.02 || rel < -0.02 || stashed > got {
			t.Errorf("rank %d: ppc compile holds %d bytes of activations (%d of them stashed), ppc plan predicts %d (%+.2f%%)", prog.PP, got, stashed, want, 100*rel)
		}
	}
}
