package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrecisionFlag: --precision takes fp32, bf16 or fp16; anything else is a usage error
// (exit 2) naming the choices. The summary says how a mixed-precision plan lays out its bytes.
func TestPrecisionFlag(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"fp8", "FP16", "f16", "half", ""} {
		code, _, stderr := ppc(t, "", "compile", gpt, "--preset", "tiny", "--precision", bad, "-o", dir)
		if code != exitInput || !strings.Contains(stderr, "--precision must be fp32, bf16 or fp16") {
			t.Errorf("--precision %q: exit %d (want %d)\n%s", bad, code, exitInput, stderr)
		}
	}
	code, out, stderr := ppc(t, "", "compile", gpt, "--preset", "tiny", "--precision", "bf16", "-o", dir)
	if code != 0 || !strings.Contains(out, "recipe       Megatron mixed precision: bf16 params, fp32 grads, fp32 main params + AdamW state; 18 B/param (2 params + 4 grads + 12 main params and optimizer state)") {
		t.Fatalf("--precision bf16: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = ppc(t, "", "compile", gpt, "--preset", "tiny", "--precision", "bf16", "--grad-precision", "bf16", "--dp", "2", "--zero", "1", "-o", dir)
	if code != 0 || !strings.Contains(out, "recipe       Megatron mixed precision: bf16 params, bf16 grads, fp32 main params + AdamW state; 4 + 12/d = 10 B/param at dp 2") {
		t.Fatalf("--precision bf16 --grad-precision bf16 --dp 2 --zero 1: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = ppc(t, "", "compile", gpt, "--preset", "tiny", "-o", dir)
	if code != 0 || !strings.Contains(out, "recipe       fp32 params, fp32 grads, fp32 AdamW state; 16 B/param") {
		t.Errorf("fp32 (the default): exit %d, the summary's recipe:\n%s", code, out)
	}
}

// TestGradPrecisionFlag: --grad-precision is fp32 or the --precision dtype; anything else is
// a usage error (exit 2) naming the flag.
func TestGradPrecisionFlag(t *testing.T) {
	dir := t.TempDir()
	for _, c := range [][]string{{"fp32", "bf16"}, {"bf16", "fp16"}, {"fp16", "bf16"}, {"bf16", "f32"}, {"bf16", ""}} {
		code, _, stderr := ppc(t, "", "compile", gpt, "--preset", "tiny", "--precision", c[0], "--grad-precision", c[1], "-o", dir)
		if code != exitInput || !strings.Contains(stderr, "--grad-precision must be fp32 or the --precision dtype") {
			t.Errorf("--precision %s --grad-precision %q: exit %d (want %d)\n%s", c[0], c[1], code, exitInput, stderr)
		}
	}
}

// readLog reads --log-json records.
func readLog(t *testing.T, path string) []stepRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []stepRecord
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var rec stepRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("record %q: %v", sc.Text(), err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// TestFP16SkippedStepsReported: a step skipped for an overflow says so on its line
// ("skipped (overflow)") and in --log-json ("skipped": true, with the loss scale the step
// used, halved at each skip) — in one process at --pp 2 --dp 2, and with --nproc 2, where the
// flag travels from each rank's process through the end-of-step agreement.
func TestFP16SkippedStepsReported(t *testing.T) {
	model := "../../testdata/ir/amp.ir" // it overflows in fp16 on its first pipeline stage only
	for _, c := range []struct {
		name   string
		layout []string
		run    []string
	}{
		{"in-process", []string{"--pp", "2", "--dp", "2"}, nil},
		{"nproc", []string{"--pp", "2"}, []string{"--nproc", "2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			plan, lg := filepath.Join(dir, "plan"), filepath.Join(dir, "log.jsonl")
			args := append([]string{"compile", model, "--precision", "fp16", "--optimizer", "adamw{lr=1e-3}", "-o", plan}, c.layout...)
			if code, _, stderr := ppc(t, "", args...); code != 0 {
				t.Fatalf("compile: exit %d\n%s", code, stderr)
			}
			args = append([]string{"run", plan, "--steps", "3", "--log-json", lg}, c.run...)
			code, out, stderr := ppc(t, "", args...)
			if code != 0 || strings.Count(out, "skipped (overflow)") != 3 {
				t.Fatalf("run: exit %d, want 3 steps skipped (overflow):\n%s%s", code, out, stderr)
			}
			recs := readLog(t, lg)
			if len(recs) != 3 {
				t.Fatalf("%d records, want 3", len(recs))
			}
			for i, r := range recs {
				want := 65536.0 / float64(int(1)<<i)
				if !r.Skipped || r.LossScale == nil || *r.LossScale != want {
					t.Errorf("step %d: skipped %v, loss_scale %v, want true and %v", r.Step, r.Skipped, r.LossScale, want)
				}
			}
		})
	}
	// bf16 has no loss scaling: no scale in the log, nothing skipped.
	dir := t.TempDir()
	plan, lg := filepath.Join(dir, "plan"), filepath.Join(dir, "log.jsonl")
	if code, _, stderr := ppc(t, "", "compile", model, "--precision", "bf16", "-o", plan); code != 0 {
		t.Fatalf("compile: exit %d\n%s", code, stderr)
	}
	if code, out, stderr := ppc(t, "", "run", plan, "--steps", "1", "--log-json", lg); code != 0 || strings.Contains(out, "skipped") {
		t.Fatalf("bf16 run: exit %d\n%s%s", code, out, stderr)
	}
	if b, _ := os.ReadFile(lg); strings.Contains(string(b), "skipped") || strings.Contains(string(b), "loss_scale") {
		t.Errorf("bf16 log: %s", b)
	}
}
