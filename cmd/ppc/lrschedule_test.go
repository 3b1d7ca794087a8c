package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/compiler"
)

// TestLRSchedule: --lr-schedule, --warmup-steps, --lr-decay-steps and --min-lr reach the
// update (the first warmup step of lr 0.1 over 2 steps is the step of a constant lr 0.05, bit
// for bit); --log-json records each step's rate; a run resumed mid-schedule ends exactly as
// an uninterrupted one; mistakes are usage errors.
func TestLRSchedule(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	sched := compilePlanIn(t, dir, "sched", mlp, "--microbatches", "2", "--optimizer", "sgd{lr=0.1}",
		"--lr-schedule", "cosine", "--warmup-steps", "2", "--lr-decay-steps", "5", "--min-lr", "0.01")
	half := compilePlanIn(t, dir, "half", mlp, "--microbatches", "2", "--optimizer", "sgd{lr=0.05}")
	ppcAll(t, [][]string{
		{"run", sched, "--steps", "1", "--save", at("s1")},
		{"run", half, "--steps", "1", "--save", at("h1")},
		{"run", sched, "--steps", "6", "--save", at("straight"), "--log-json", at("log.jsonl")},
		{"run", sched, "--steps", "3", "--save", at("split")},
		{"run", sched, "--steps", "3", "--resume", at("split"), "--save", at("split")},
	})
	if code, out, _ := ppc(t, "", "compare", at("s1"), at("h1"), "--rtol", "0", "--atol", "0"); code != 0 {
		t.Fatalf("the first warmup step is not lr/2's step:\n%s", out)
	}
	if code, out, _ := ppc(t, "", "compare", at("straight"), at("split"), "--rtol", "0", "--atol", "0"); code != 0 {
		t.Fatalf("3 + 3 steps differ from 6:\n%s", out)
	}
	// The checkpoint records the schedule: resuming it under another says so.
	if code, _, errOut := ppc(t, "", "run", half, "--steps", "1", "--resume", at("straight")); code != 0 ||
		!strings.Contains(errOut, "warning: the checkpoint was trained with optimizer sgd{") || !strings.Contains(errOut, "continue from step 6 under the plan's") {
		t.Fatalf("resume under another schedule: exit %d\n%s", code, errOut)
	}
	plan, err := os.ReadFile(filepath.Join(sched, "plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct{ Optimizer string }
	json.Unmarshal(plan, &p)
	recs := readLog(t, at("log.jsonl"))
	n := len(recs)
	for _, rec := range recs {
		want, _ := compiler.LearningRate(p.Optimizer, rec.Step)
		// Steps 1-2 warm up (0.05, 0.1); 3-5 decay by cosine; 6 is min_lr.
		byHand := []float64{0.05, 0.1, 0.01 + 0.09*0.5*(1+math.Cos(math.Pi/3)), 0.01 + 0.09*0.5*(1+math.Cos(2*math.Pi/3)), 0.01, 0.01}[rec.Step-1]
		if rec.LR == nil || *rec.LR != want || math.Abs(want-byHand) > 1e-15 {
			t.Errorf("step %d: lr %v, want %v (by hand %v)", rec.Step, rec.LR, want, byHand)
		}
	}
	if n != 6 {
		t.Fatalf("%d log records", n)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lr-schedule", "step"}, `unknown schedule "step"`},
		{[]string{"--lr-schedule", "cosine"}, "needs decay_steps"},
		{[]string{"--warmup-steps", "x"}, "not a non-negative number of steps"},
		{[]string{"--optimizer", "sgd{lr=0.1}", "--lr-schedule", "linear", "--lr-decay-steps", "9", "--min-lr", "1"}, "must be a number in [0, lr=0.1]"},
		{[]string{"--optimizer", "adamw{warmup=3}", "--warmup-steps", "3"}, "already sets warmup; give it once"},
		{[]string{"--forward-only", "--lr-schedule", "cosine"}, "--lr-schedule does not apply to --forward-only"},
	} {
		code, _, errOut := ppc(t, "", append([]string{"compile", mlp, "-o", at("bad")}, c.args...)...)
		if code != exitInput || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d\n%s", c.args, code, errOut)
		}
	}
}

// TestClipGrad: --clip-grad NORM clips (the log records each step's norm and that it
// clipped), resumes bit-exactly mid-run, and its mistakes are usage errors.
func TestClipGrad(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	plan := compilePlanIn(t, dir, "plan", gpt, "--preset", "tiny", "--microbatches", "2", "--pp", "2", "--tp", "2",
		"--optimizer", "sgd{lr=0.05}", "--clip-grad", "0.5", "--warmup-steps", "2")
	ppcAll(t, [][]string{
		{"run", plan, "--steps", "4", "--save", at("straight"), "--log-json", at("log.jsonl")},
		{"run", plan, "--steps", "2", "--save", at("split")},
		{"run", plan, "--steps", "2", "--resume", at("split"), "--save", at("split")},
	})
	if code, out, _ := ppc(t, "", "compare", at("straight"), at("split"), "--rtol", "0", "--atol", "0"); code != 0 {
		t.Fatalf("2 + 2 clipped steps differ from 4:\n%s", out)
	}
	for _, rec := range readLog(t, at("log.jsonl")) {
		if rec.GradNorm == nil || *rec.GradNorm <= 0.5 || !rec.Clipped {
			t.Errorf("step %d: grad_norm %v, clipped %v; want a norm above 0.5, clipped", rec.Step, rec.GradNorm, rec.Clipped)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--clip-grad", "0"}, `clip="0" must be a positive number`},
		{[]string{"--clip-grad", "x"}, `clip="x" must be a positive number`},
		{[]string{"--optimizer", "adamw{clip=1}", "--clip-grad", "1"}, "already sets clip; give it once"},
		{[]string{"--forward-only", "--clip-grad", "1"}, "--clip-grad does not apply to --forward-only"},
	} {
		code, _, errOut := ppc(t, "", append([]string{"compile", mlp, "-o", at("bad")}, c.args...)...)
		if code != exitInput || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d\n%s", c.args, code, errOut)
		}
	}
}
