package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
)

const gpt = "../../testdata/models/gpt.ppm"
const mlp = "../../testdata/models/mlp.ppm"

// TestCompileRunSimulate drives the main job through the CLI: compile a pipelined plan, print
// its stage table, run it, simulate it, disassemble a program, and compare checkpoints.
func TestCompileRunSimulate(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "plan")
	code, stdout, stderr := ppc(t, "", "compile", gpt, "--preset", "tiny", "--pp", "2", "--microbatches", "4", "-o", out)
	if code != 0 {
		t.Fatalf("compile: %d %s", code, stderr)
	}
	for _, want := range []string{"parameters   434,816", "pp=2", "stage rank layers", "E,t0-t3", "t4-t7,L", "imbalance"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("compile summary lacks %q:\n%s", want, stdout)
		}
	}
	ck := filepath.Join(dir, "ck")
	code, stdout, stderr = ppc(t, "", "run", out, "--steps", "2", "--save", ck, "--log-json", filepath.Join(dir, "log.jsonl"), "--trace", filepath.Join(dir, "trace.json"))
	if code != 0 || !strings.Contains(stdout, "step 2 loss=") || !strings.Contains(stdout, "tokens/s=") {
		t.Fatalf("run: %d %s %s", code, stdout, stderr)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "log.jsonl"))
	if strings.Count(string(log), `"loss":`) != 2 {
		t.Fatalf("log-json: %s", log)
	}
	trace, _ := os.ReadFile(filepath.Join(dir, "trace.json"))
	if !strings.Contains(string(trace), `"traceEvents"`) || !strings.Contains(string(trace), `"F0 s0"`) {
		t.Fatalf("trace lacks events")
	}
	code, stdout, _ = ppc(t, "", "simulate", out, "--json")
	if code != 0 || !strings.Contains(stdout, `"bubble_ratio"`) || !strings.Contains(stdout, `"peak_activations"`) {
		t.Fatalf("simulate: %d %s", code, stdout)
	}
	code, stdout, _ = ppc(t, "", "dis", filepath.Join(out, "rank-00001.ppx"))
	if code != 0 || !strings.Contains(stdout, "program of pipeline rank 1") || !strings.Contains(stdout, "recv from pp 0") {
		t.Fatalf("dis: %d %s", code, stdout[:min(len(stdout), 500)])
	}
	code, stdout, _ = ppc(t, "", "compare", ck, ck)
	if code != 0 || !strings.Contains(stdout, "agree") {
		t.Fatalf("compare same: %d %s", code, stdout)
	}
}

func TestPipelineBadInput(t *testing.T) {
	dir := t.TempDir()
	deadlock := filepath.Join(dir, "deadlock.csv")
	// Each rank waits for the other's forward output first.
	os.WriteFile(deadlock, []byte("0RECV_B0,0F0,0SEND_F0,0B0\n1RECV_F0,1SEND_B0,1F0,1B0\n"), 0o644)
	garbage := filepath.Join(dir, "garbage.csv")
	os.WriteFile(garbage, []byte("0F0,0X9\n"), 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"compile", gpt, "--preset", "tiny", "--pp", "16", "--microbatches", "16", "-o", dir}, exitInput, "the model marks 8 stages; pp=16 × virtual=1 needs 16"},
		{[]string{"compile", gpt, "--preset", "tiny", "--pp", "16", "--microbatches", "16", "--partition", "auto", "-o", dir}, exitInput, "16 stages, but the model has only 10 partitionable layers"},
		{[]string{"compile", gpt, "--preset", "tiny", "--pp", "4", "--microbatches", "2", "-o", dir}, exitInput, "needs at least 4 micro-batches"},
		{[]string{"compile", gpt, "--preset", "tiny", "--pp", "2", "--microbatches", "2", "--layout", "E,t*3|t*4,L", "-o", dir}, exitInput, "does not cover the model exactly"},
		{[]string{"compile", gpt, "--preset", "tiny", "--pp", "2", "--microbatches", "2", "--partition", "auto", "--mem", "1MiB", "-o", dir}, exitInput, "fits mem="},
		{[]string{"compile", gpt, "--preset", "tiny", "--pp", "2", "--microbatches", "1", "--schedule", deadlock, "-o", dir}, exitFailed, "deadlock"},
		{[]string{"compile", gpt, "--preset", "tiny", "--schedule", garbage, "-o", dir}, exitInput, "garbage.csv"},
		{[]string{"compile", gpt, "--preset", "tiny", "--schedule", "nosuch", "-o", dir}, exitInput, "unknown schedule"},
		{[]string{"compile", gpt, "--preset", "tiny", "--recompute", "most", "-o", dir}, exitInput, "--recompute must be none, selective or full"},
		{[]string{"compile", gpt, "--preset", "tiny", "--recompute", "full", "--recompute-method", "chunk", "-o", dir}, exitInput, "--recompute-method must be uniform or block"},
		{[]string{"compile", gpt, "--preset", "tiny", "--recompute", "full", "--recompute-num-layers", "0", "-o", dir}, exitInput, "--recompute-num-layers must be at least 1"},
		{[]string{"compile", gpt, "--preset", "tiny", "--recompute", "selective", "--recompute-method", "block", "-o", dir}, exitInput, "apply to --recompute full"},
		{[]string{"compile", gpt, "--preset", "tiny", "--recompute-num-layers", "2", "-o", dir}, exitInput, "apply to --recompute full (got --recompute none)"},
		{[]string{"compile", gpt, "--preset", "tiny", "--partition", "magic", "-o", dir}, exitInput, "--partition must be"},
		{[]string{"schedule", "--schedule", deadlock}, exitFailed, "deadlock"},
		{[]string{"simulate", "--schedule", deadlock}, exitFailed, "deadlock"},
		{[]string{"simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "2"}, exitInput, "micro-batches"},
		{[]string{"simulate", "--schedule", "gpipe", "--cost", "F=x"}, exitInput, "--cost"},
	}
	for _, c := range cases {
		code, _, stderr := ppc(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("ppc %v: exit %d (want %d)\n%s\nwant message containing %q", c.args, code, c.code, stderr, c.want)
		}
	}
}

func TestScheduleCommand(t *testing.T) {
	code, out, _ := ppc(t, "", "schedule", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--csv")
	if code != 0 || !strings.HasPrefix(out, "0F0,0F1,0F2,0F3,0I0,0W0") {
		t.Fatalf("zb-h1 csv: %d %q", code, out[:min(len(out), 80)])
	}
	code, out, _ = ppc(t, "", "schedule", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "--comms")
	if code != 0 || !strings.Contains(out, "SEND_F") {
		t.Fatalf("comms csv: %d %q", code, out)
	}
	code, out, _ = ppc(t, "", "simulate", "--schedule", "gpipe", "--pp", "4", "--microbatches", "4", "--json")
	if code != 0 || !strings.Contains(out, `"bubble_ratio": 0.75`) {
		t.Fatalf("gpipe simulate: %d %s", code, out)
	}
	svg := filepath.Join(t.TempDir(), "t.svg")
	code, _, _ = ppc(t, "", "simulate", "--schedule", "zbv", "--pp", "2", "--microbatches", "4", "--svg", svg)
	if b, err := os.ReadFile(svg); code != 0 || err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("svg: %d %v", code, err)
	}
}

// `ppc dis DIR` disassembles every rank of a plan; a program with one byte flipped is
// reported as not matching plan.json's checksum, by dis and by run, rather than as a
// protobuf parse error.
func TestDisPlanDirAndChecksum(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plan")
	if code, _, errOut := ppc(t, "", "compile", mlp, "--pp", "2", "--microbatches", "2", "-o", dir); code != 0 {
		t.Fatal(errOut)
	}
	code, stdout, errOut := ppc(t, "", "dis", dir)
	i0, i1 := strings.Index(stdout, "program of pipeline rank 0"), strings.Index(stdout, "program of pipeline rank 1")
	if code != 0 || i0 < 0 || i1 < i0 {
		t.Fatalf("dis DIR: exit %d\n%s%s", code, stdout[:min(len(stdout), 300)], errOut)
	}
	_, one, _ := ppc(t, "", "dis", filepath.Join(dir, "rank-00001.ppx"))
	if !strings.HasSuffix(stdout, one) {
		t.Error("dis DIR does not end with rank 1's program as dis FILE prints it")
	}
	prog := filepath.Join(dir, "rank-00001.ppx")
	data, _ := os.ReadFile(prog)
	data[len(data)/3] ^= 0x20
	os.WriteFile(prog, data, 0o644)
	want := "rank-00001.ppx: does not match plan.json (its SHA-256 differs): the file is corrupted"
	runCases(t, []cliCase{
		{[]string{"dis", dir}, exitInput, []string{want}, []string{"proto", "cannot parse"}},
		{[]string{"dis", prog}, exitInput, []string{want}, []string{"proto", "cannot parse"}},
		{[]string{"run", dir, "--steps", "1"}, exitInput, []string{want}, []string{"proto", "cannot parse"}},
		{[]string{"dis", filepath.Dir(dir)}, exitInput, []string{"not a plan directory (no plan.json)"}, nil},
	})
}

// TestIRMicrobatchesAttribute: an .ir file's microbatches attribute is the default count, and
// --microbatches overrides it.
func TestIRMicrobatchesAttribute(t *testing.T) {
	src, err := os.ReadFile("../../testdata/ir/mlp.ir")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "mb.ir")
	text := strings.Replace(string(src), "module @mlp attributes {microbatches = 1}", "module @mlp attributes {microbatches = 3}", 1)
	if text == string(src) {
		t.Fatal("mlp.ir's module line changed; update the test")
	}
	if err := os.WriteFile(model, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags []string
		want  int
	}{{nil, 3}, {[]string{"--microbatches", "2"}, 2}} {
		out := filepath.Join(dir, fmt.Sprint("plan", c.want))
		code, _, errOut := ppc(t, "", append([]string{"compile", model, "-o", out}, c.flags...)...)
		if code != 0 {
			t.Fatalf("compile %v: %s", c.flags, errOut)
		}
		p, err := codegen.ReadPlan(out)
		if err != nil {
			t.Fatal(err)
		}
		if p.Microbatches != c.want {
			t.Errorf("compile %v: %d micro-batches, want %d", c.flags, p.Microbatches, c.want)
		}
	}
}
