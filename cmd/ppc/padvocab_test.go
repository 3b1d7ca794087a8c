package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/planner"
)

// TestPadVocabCLI: ppc compile pads a vocabulary --tp does not divide instead of refusing it,
// plan.json lists the parameter with its unpadded shape, and a bad
// --make-vocab-size-divisible-by exits 2 from compile and plan.
func TestPadVocabCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plan")
	code, out, errs := ppc(t, "", "compile", gpt, "--preset", "tiny", "--set", "vocab=510", "--tp", "4", "-o", dir)
	if code != 0 {
		t.Fatalf("--tp 4 on a vocabulary of 510: exit %d: %s", code, errs)
	}
	if want := "padded       wte [510, 64] → [512, 64] for --tp 4"; !strings.Contains(out, want) {
		t.Errorf("the summary lacks %q:\n%s", want, out)
	}
	p := readPlan(t, dir)
	i := slices.IndexFunc(p.Params, func(pr codegen.Param) bool { return pr.Name == "wte" })
	if i < 0 || !slices.Equal(p.Params[i].Shape, []int{510, 64}) || !slices.Equal(p.Params[i].Padded, []int{512, 64}) {
		t.Errorf("plan.json's wte: %+v, want the unpadded shape [510 64], padded [512 64]", p.Params)
	}
	out = filepath.Join(t.TempDir(), "x")
	runCases(t, []cliCase{
		{[]string{"compile", gpt, "--preset", "tiny", "--tp", "2", "--make-vocab-size-divisible-by", "0", "-o", out}, exitInput,
			[]string{"--make-vocab-size-divisible-by must be a positive integer, got 0"}, []string{"reproducer"}},
		{[]string{"compile", gpt, "--preset", "tiny", "--tp", "2", "--make-vocab-size-divisible-by", "-128", "-o", out}, exitInput,
			[]string{"--make-vocab-size-divisible-by must be a positive integer, got -128"}, nil},
		{[]string{"compile", gpt, "--preset", "tiny", "--make-vocab-size-divisible-by", "many", "-o", out}, exitInput,
			[]string{`--make-vocab-size-divisible-by "many": want an integer`}, nil},
		{[]string{"plan", gpt, "--gpus", "8", "--gpu", "h100-80gb", "--make-vocab-size-divisible-by", "0"}, exitInput,
			[]string{"--make-vocab-size-divisible-by must be a positive integer, got 0"}, nil},
	})
}

// TestPlanSearchesTPForOddVocab: GPT-2 small's vocabulary of 50257 divides by no tp > 1;
// ppc plan pads it and searches tp > 1, and the command it prints for a fixed --tp 4
// compiles (with the flag's value when it is not the default).
func TestPlanSearchesTPForOddVocab(t *testing.T) {
	r := planJSON(t, gpt, "--preset", "small", "--gpus", "16", "--gpu", "h100-80gb", "--tp", "4", "--make-vocab-size-divisible-by", "64", "--top", "1")
	pl := r.Plans[0]
	if pl.Config.TP != 4 || !strings.Contains(pl.Command, "--make-vocab-size-divisible-by 64") {
		t.Fatalf("plan %+v, command %s", pl.Config, pl.Command)
	}
	args := shellSplit(t, pl.Command)
	args = append(args[1:len(args)-1], filepath.Join(t.TempDir(), "out"))
	if code, _, errs := ppc(t, "", args...); code != 0 {
		t.Fatalf("%s: exit %d: %s", pl.Command, code, errs)
	}
	// Unfixed, the search weighs tp > 1 too; here it wins (pp 2 dp 2 tp 4, 7.85 ms predicted
	// on h100-80gb, where without padding the best was tp 1 at 10.5 ms).
	free := planJSON(t, gpt, "--preset", "small", "--gpus", "16", "--gpu", "h100-80gb", "--top", "5")
	if !slices.ContainsFunc(free.Plans, func(p planner.Plan) bool { return p.Config.TP > 1 }) {
		t.Errorf("no plan with tp > 1 among %d", len(free.Plans))
	}
}

// TestPlan1000GPUsCompiles: ppc plan for GPT-3 175B (vocabulary 50257) on 1000 GPUs with a
// global batch of 1000 succeeds with tp > 1 — the vocabulary is padded — and every command
// it prints compiles.
func TestPlan1000GPUsCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("plans and compiles GPT-3 175B on 1000 GPUs")
	}
	r := planJSON(t, gpt, "--preset", "gpt3-175b", "--gpus", "1000", "--gpu", "h100-80gb", "--global-batch", "1000", "--top", "2")
	for i, pl := range r.Plans {
		if pl.Config.TP == 1 {
			t.Errorf("plan %d: %+v: tp 1, where tp 4 and 8 fit", i+1, pl.Config)
		}
		args := shellSplit(t, pl.Command)
		args = append(args[1:len(args)-1], filepath.Join(t.TempDir(), "out"))
		if code, _, errs := ppc(t, "", args...); code != 0 {
			t.Errorf("plan %d: %s: exit %d: %s", i+1, pl.Command, code, errs)
		}
	}
}
