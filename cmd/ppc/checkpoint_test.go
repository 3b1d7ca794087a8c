package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime/checkpoint"
)

// compilePlanIn compiles a model into the plan directory dir/name.
func compilePlanIn(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	if code, _, errOut := ppc(t, "", append(append([]string{"compile"}, args...), "-o", out)...); code != 0 {
		t.Fatalf("compile %v: %s", args, errOut)
	}
	return out
}

func sourceHash(t *testing.T, plan string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(plan, "plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p codegen.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p.SourceHash
}

func checkpointStep(t *testing.T, path string) int {
	t.Helper()
	_, meta, err := checkpoint.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return meta.Step
}

// TestResumeDifferentModel: a checkpoint of a 2-layer GPT does not resume silently into a
// 1-layer one (nor the other way), --set is part of the model's hash, and
// --allow-partial-resume loads what matches.
func TestResumeDifferentModel(t *testing.T) {
	dir := t.TempDir()
	two := compilePlanIn(t, dir, "two", gpt, "--preset", "tiny", "--set", "n_layers=2")
	one := compilePlanIn(t, dir, "one", gpt, "--preset", "tiny", "--set", "n_layers=1")
	// Same model, another layout: the hash is the model's, not the layout's.
	twoPP := compilePlanIn(t, dir, "two-pp", gpt, "--preset", "tiny", "--set", "n_layers=2", "--pp", "2", "--microbatches", "2")
	// Same tensors, another model: twice the heads of half the size.
	heads := compilePlanIn(t, dir, "heads", gpt, "--preset", "tiny", "--set", "n_layers=2", "--set", "n_heads=8")
	if h1, h2 := sourceHash(t, two), sourceHash(t, one); h1 == h2 {
		t.Fatalf("--set n_layers=1 and =2 give the same source hash %s", h1)
	}
	if h1, h2 := sourceHash(t, two), sourceHash(t, twoPP); h1 != h2 {
		t.Fatalf("--pp 2 --microbatches 2 changes the source hash: %s, %s", h1, h2)
	}
	ck2, ck1 := filepath.Join(dir, "ck2"), filepath.Join(dir, "ck1")
	for _, r := range [][]string{{two, ck2}, {one, ck1}} {
		if code, _, errOut := ppc(t, "", "run", r[0], "--steps", "1", "--save", r[1]); code != 0 {
			t.Fatal(errOut)
		}
	}
	// Each layer has 16 parameters, each with AdamW's two states: 48 tensors.
	runCases(t, []cliCase{
		{[]string{"run", one, "--resume", ck2}, exitInput, []string{"ck2 does not match the plan (60 of the plan's 60 tensors match)",
			"differently configured model gpt", "48 in the checkpoint, not in the plan:", "layers.1.attn.bo: f32[64]", "… and 28 more",
			"to load the 60 tensors that match and keep the others as initialised, add --allow-partial-resume"}, []string{"step 2"}},
		{[]string{"run", two, "--resume", ck1}, exitInput, []string{"does not match the plan (60 of the plan's 108 tensors match)",
			"48 missing from the checkpoint:", "layers.1.attn.bo: parameter f32[64]", "layers.1.attn.bo.exp_avg: optimizer state f32[64]"}, nil},
		{[]string{"run", one, "--allow-partial-resume"}, exitInput, []string{"--allow-partial-resume applies to --resume"}, nil},
	})
	code, stdout, errOut := ppc(t, "", "run", one, "--resume", ck2, "--allow-partial-resume", "--steps", "1")
	if code != 0 || !strings.Contains(errOut, "partial resume from "+ck2+": loaded 60 tensors; 0 left as initialised; 48 of the checkpoint's not in the plan") ||
		!strings.Contains(stdout, "step 2 loss=") {
		t.Fatalf("partial resume 2 → 1 layers: %d\n%s%s", code, stdout, errOut)
	}
	code, _, errOut = ppc(t, "", "run", two, "--resume", ck1, "--allow-partial-resume", "--steps", "1")
	if code != 0 || !strings.Contains(errOut, "loaded 60 tensors; 48 left as initialised; 0 of the checkpoint's not in the plan") {
		t.Fatalf("partial resume 1 → 2 layers: %d\n%s", code, errOut)
	}
	code, _, errOut = ppc(t, "", "run", twoPP, "--resume", ck2, "--steps", "1")
	if code != 0 || errOut != "" {
		t.Fatalf("resume into another layout: %d\n%s", code, errOut)
	}
	code, _, errOut = ppc(t, "", "run", heads, "--resume", ck2, "--steps", "1")
	if code != 0 || !strings.Contains(errOut, "warning: the checkpoint's tensors match, but it was saved from a differently configured model") {
		t.Fatalf("resume into n_heads=8: %d\n%s", code, errOut)
	}
	// The list of differences is bounded: the tiny preset's 8 layers into 1.
	eight := compilePlanIn(t, dir, "eight", gpt, "--preset", "tiny")
	ck8 := filepath.Join(dir, "ck8")
	if code, _, errOut := ppc(t, "", "run", eight, "--steps", "0", "--save", ck8); code != 0 {
		t.Fatal(errOut)
	}
	code, _, errOut = ppc(t, "", "run", one, "--resume", ck8)
	if code != exitInput || !strings.Contains(errOut, "336 in the checkpoint, not in the plan:") || !strings.Contains(errOut, "… and 316 more") || strings.Count(errOut, "\n") > 30 {
		t.Fatalf("8 layers into 1: %d\n%s", code, errOut)
	}
}

// TestResumeAndSaveOneDirectory: --resume and --save may name the same checkpoint (the
// common pattern), as a directory or as the file; the result equals an uninterrupted run.
func TestResumeAndSaveOneDirectory(t *testing.T) {
	dir := t.TempDir()
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	straight, ck := filepath.Join(dir, "straight"), filepath.Join(dir, "ck")
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "3", "--save", straight); code != 0 {
		t.Fatal(errOut)
	}
	for _, args := range [][]string{{"--save", ck}, {"--resume", ck, "--save", ck}, {"--resume", filepath.Join(ck, checkpoint.IndexFile), "--save", ck}} {
		if code, _, errOut := ppc(t, "", append([]string{"run", plan, "--steps", "1"}, args...)...); code != 0 {
			t.Fatalf("run %v: %s", args, errOut)
		}
	}
	if step := checkpointStep(t, ck); step != 3 {
		t.Fatalf("checkpoint at step %d, want 3", step)
	}
	if code, stdout, _ := ppc(t, "", "compare", straight, ck, "--rtol", "0", "--atol", "0"); code != 0 {
		t.Fatalf("1+1+1 steps through one directory differ from 3:\n%s", stdout)
	}
	if names := jobtest.DirNames(t, ck); len(names) != 2 || names[0] != checkpoint.IndexFile || names[1] != "step-00000003" {
		t.Fatalf("the checkpoint directory holds %v", names)
	}
	// A forward-only plan takes a training checkpoint's parameters, without its optimizer
	// state; a partial resume that would load nothing is refused.
	fwd := compilePlanIn(t, dir, "fwd", mlp, "--microbatches", "2", "--forward-only")
	if code, _, errOut := ppc(t, "", "run", fwd, "--resume", ck, "--steps", "1"); code != 0 || errOut != "" {
		t.Fatalf("forward-only plan from a training checkpoint: %d %s", code, errOut)
	}
	other := compilePlanIn(t, dir, "other", gpt, "--preset", "tiny", "--set", "n_layers=1")
	runCases(t, []cliCase{
		{[]string{"run", other, "--resume", ck, "--allow-partial-resume"}, exitInput, []string{"does not match the plan (0 of the plan's 60 tensors match)",
			"it is a checkpoint of model mlp, the plan is model gpt"}, []string{"add --allow-partial-resume"}},
		{[]string{"run", plan, "--resume", dir}, exitInput, []string{dir + ": not a checkpoint directory (no checkpoint.json"}, nil},
		{[]string{"run", plan, "--resume", filepath.Join(dir, "nope")}, exitInput, []string{"nope: no such file or directory"}, nil},
	})
}

// TestSaveDirectoryLocked: a run saving into a directory another run holds is refused before
// it trains, naming the directory and the holder.
func TestSaveDirectoryLocked(t *testing.T) {
	dir := t.TempDir()
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	ck := filepath.Join(dir, "ck")
	lock, err := checkpoint.LockDir(ck)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, errOut := ppc(t, "", "run", plan, "--steps", "1", "--save", ck)
	if code != exitInput || strings.Contains(stdout, "step 1") ||
		!strings.Contains(errOut, "--save: "+ck+" is in use: process "+strconv.Itoa(os.Getpid())+" (another ppc run?) holds its lock") {
		t.Fatalf("save into a locked directory: %d\n%s%s", code, stdout, errOut)
	}
	lock.Unlock()
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "1", "--save", ck); code != 0 {
		t.Fatalf("save once the lock is released: %s", errOut)
	}
	if names := jobtest.DirNames(t, ck); len(names) != 2 || names[0] != checkpoint.IndexFile {
		t.Fatalf("the run left %v", names)
	}
}

// TestSaveEvery: --save-every N saves after steps N, 2N, … and at the end, keeping only the
// latest checkpoint; its mistakes are usage errors.
func TestSaveEvery(t *testing.T) {
	dir := t.TempDir()
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	ck := filepath.Join(dir, "ck")
	code, stdout, errOut := ppc(t, "", "run", plan, "--steps", "5", "--save", ck, "--save-every", "2")
	if code != 0 || strings.Count(stdout, "(saved)") != 2 || !regexp.MustCompile(`(?m)^step 4 .*\(saved\)$`).MatchString(stdout) {
		t.Fatalf("exit %d\n%s%s", code, stdout, errOut)
	}
	if names := jobtest.DirNames(t, ck); len(names) != 2 || names[0] != checkpoint.IndexFile || names[1] != "step-00000005" {
		t.Fatalf("the save directory holds %v", names)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--save-every", "2"}, "--save-every applies to --save"},
		{[]string{"--save", ck, "--save-every", "0"}, "--save-every must be a positive number of steps"},
		{[]string{"--save", ck, "--save-every", "-3"}, "--save-every must be a positive number of steps"},
	} {
		code, _, errOut := ppc(t, "", append([]string{"run", plan, "--steps", "1"}, c.args...)...)
		if code != exitInput || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d\n%s", c.args, code, errOut)
		}
	}
}

// TestRunUntilStep: with --resume, --steps counts more steps (and the run's first line says
// which), --until-step a total; the two are exclusive and a total already passed is refused.
func TestRunUntilStep(t *testing.T) {
	dir := t.TempDir()
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	ck := filepath.Join(dir, "ck")
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "4", "--save", ck); code != 0 {
		t.Fatal(errOut)
	}
	stepsRun := func(stdout string) []string {
		var s []string
		for _, m := range regexp.MustCompile(`(?m)^step (\d+) `).FindAllStringSubmatch(stdout, -1) {
			s = append(s, m[1])
		}
		return s
	}
	for _, c := range []struct {
		args  []string
		first string
		steps string
	}{
		{[]string{"--steps", "3"}, "resumed from " + ck + " at step 4: running steps 5 to 7 (--steps 3 counts from the checkpoint; --until-step N runs until step N)", "5 6 7"},
		{[]string{"--until-step", "6"}, "resumed from " + ck + " at step 4: running steps 5 to 6 (--until-step 6)", "5 6"},
		{[]string{"--until-step", "4"}, "resumed from " + ck + " at step 4: no step to run (--until-step 4)", ""},
	} {
		code, stdout, errOut := ppc(t, "", append([]string{"run", plan, "--resume", ck}, c.args...)...)
		if got := strings.Join(stepsRun(stdout), " "); code != 0 || !strings.HasPrefix(stdout, c.first+"\n") || got != c.steps {
			t.Errorf("%v: exit %d, steps %q (want %q)\n%s%s", c.args, code, got, c.steps, stdout, errOut)
		}
	}
	// Without --resume, the total is the number of steps.
	if code, stdout, errOut := ppc(t, "", "run", plan, "--until-step", "2"); code != 0 || strings.Join(stepsRun(stdout), " ") != "1 2" || strings.Contains(stdout, "resumed") {
		t.Errorf("--until-step 2: exit %d\n%s%s", code, stdout, errOut)
	}
	runCases(t, []cliCase{
		{[]string{"run", plan, "--resume", ck, "--until-step", "3"}, exitInput, []string{"--until-step 3: the checkpoint " + ck + " is already at step 4", "usage: ppc run"}, []string{"step 5"}},
		{[]string{"run", plan, "--steps", "2", "--until-step", "3"}, exitInput, []string{"--steps and --until-step both say how long to run"}, nil},
		{[]string{"run", plan, "--until-step", "-1"}, exitInput, []string{"--until-step must be non-negative"}, nil},
	})
	if _, out, _ := ppc(t, "", "run", "--help"); !strings.Contains(out, "--until-step N") || !strings.Contains(out, "with --resume, N more after the checkpoint's") {
		t.Errorf("run --help does not explain --steps and --until-step:\n%s", out)
	}
}
