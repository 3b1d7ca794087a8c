package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeTerminal is a buffer that says it is a terminal, to see what a person would.
type fakeTerminal struct{ bytes.Buffer }

func (*fakeTerminal) IsTerminal() bool { return true }

// compilePlan compiles a model into a temporary plan directory.
func compilePlan(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plan")
	if code, _, errOut := ppc(t, "", append(append([]string{"compile"}, args...), "-o", dir)...); code != 0 {
		t.Fatalf("compile %v: %s", args, errOut)
	}
	return dir
}

// TestRunProgressOnTerminal: on a terminal the loss history stays on the screen (a line
// every few steps, about 20 a run) above a bar that shows step N/total and the time left,
// and start-up says what it is doing.
func TestRunProgressOnTerminal(t *testing.T) {
	plan := compilePlan(t, mlp, "--microbatches", "2")
	var out, errOut fakeTerminal
	code := run([]string{"run", plan, "--steps", "50"}, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	// What stays on the screen: each line as it ends up after carriage returns and erases.
	var kept []string
	for _, l := range strings.Split(out.String(), "\n") {
		if i := strings.LastIndex(l, eraseLine); i >= 0 {
			l = l[i+len(eraseLine):]
		}
		if l != "" {
			kept = append(kept, l)
		}
	}
	// A loss of five significant digits (formatLoss): the mlp's falls below 1e-4 by step 50.
	const lossRe = `(\d+\.\d{4}|0\.\d{5,}|\d\.\d{4}e-\d+)`
	stepLine := regexp.MustCompile(`^step (\d+) loss=` + lossRe + ` time=`)
	var steps []string
	for _, l := range kept[:len(kept)-1] {
		m := stepLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("kept line %q is not a step line; screen:\n%s", l, strings.Join(kept, "\n"))
		}
		steps = append(steps, m[1])
	}
	// 50 steps, a line every 3: steps 1, 3, 6, …, 48 and the last.
	if len(steps) != 18 || steps[0] != "1" || steps[1] != "3" || steps[len(steps)-1] != "50" {
		t.Fatalf("kept step lines %v", steps)
	}
	if !strings.HasPrefix(kept[len(kept)-1], "ran 50 step(s): loss ") {
		t.Fatalf("last line %q", kept[len(kept)-1])
	}
	// The bar (redrawn at most ten times a second, so which steps it shows depends on speed):
	// the step of the total, the loss, the fraction done and elapsed:remaining time.
	if bar := regexp.MustCompile(`step \d+/50 loss=` + lossRe + ` +\d+% \|[^|]*\| +\[\d+s:\d+s\]`); !bar.MatchString(out.String()) {
		t.Errorf("no bar with step N/50, loss and elapsed:remaining time:\n%q", out.String()[:min(out.Len(), 2000)])
	}
	if !strings.HasSuffix(out.String(), eraseLine+kept[len(kept)-1]+"\n") {
		t.Errorf("the bar is not erased before the summary")
	}
	if want := "loading plan " + plan + " (1 rank(s))…\ninitialising parameters…\n"; errOut.String() != want {
		t.Errorf("start-up notes %q, want %q", errOut.String(), want)
	}

	// Off a terminal, every step gets a plain line and start-up is silent.
	code, stdout, stderr := ppc(t, "", "run", plan, "--steps", "3")
	if code != 0 || strings.Count(stdout, "\n") != 4 || strings.Contains(stdout, "\r") || stderr != "" {
		t.Fatalf("not a terminal: %d %q %q", code, stdout, stderr)
	}
}

// TestRunProgressBarInStep: every frame of the bar shows the step just finished with its
// own fraction done (it showed "step 1/4 … 0%" after step 1, a step behind), and each of a
// short run's steps but the last (whose line ends the run) is shown.
func TestRunProgressBarInStep(t *testing.T) {
	plan := compilePlan(t, mlp, "--microbatches", "2")
	for _, steps := range []int{4, 30} {
		var out, errOut fakeTerminal
		code := run([]string{"run", plan, "--steps", fmt.Sprint(steps)}, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut})
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		frames := regexp.MustCompile(`step (\d+)/(\d+) loss=\S+ +(\d+)% \|`).FindAllStringSubmatch(out.String(), -1)
		seen := map[string]bool{}
		for _, f := range frames {
			var n, total, pct int
			fmt.Sscan(f[1]+" "+f[2]+" "+f[3], &n, &total, &pct)
			if total != steps || pct != n*100/steps {
				t.Errorf("%d steps: frame %q shows %d%%, want %d%%", steps, f[0], pct, n*100/steps)
			}
			seen[f[1]] = true
		}
		if steps == 4 && (len(seen) != 3 || !seen["1"] || !seen["3"]) {
			t.Errorf("4 steps: frames of steps %v, want 1 to 3:\n%q", seen, out.String())
		}
	}
}

// TestRunLogJSONTellsRunsApart: every record carries its run's id, the wall time, the time
// since the start and the learning rate; two runs appending to one file differ in id.
func TestRunLogJSONTellsRunsApart(t *testing.T) {
	plan := compilePlan(t, mlp, "--microbatches", "2", "--optimizer", "sgd{lr=0.05}")
	log := filepath.Join(t.TempDir(), "log.jsonl")
	for i := 0; i < 2; i++ {
		if code, _, errOut := ppc(t, "", "run", plan, "--steps", "2", "--log-json", log); code != 0 {
			t.Fatal(errOut)
		}
	}
	data, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d records:\n%s", len(lines), data)
	}
	var ids []string
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		id, _ := rec["run_id"].(string)
		ts, _ := rec["time"].(string)
		when, err := time.Parse("2006-01-02T15:04:05.000Z07:00", ts)
		elapsed, _ := rec["elapsed_s"].(float64)
		if len(id) != 16 || err != nil || time.Since(when) > time.Hour || !strings.Contains(ts, ".") || elapsed <= 0 || rec["lr"] != 0.05 {
			t.Fatalf("record %s", l)
		}
		ids = append(ids, id)
	}
	if ids[0] != ids[1] || ids[2] != ids[3] || ids[0] == ids[2] {
		t.Fatalf("run ids %v: want one per run", ids)
	}
	// A forward-only plan has no learning rate; the default adamw's is 1e-3.
	for _, c := range []struct {
		args []string
		lr   string
	}{{[]string{"--forward-only"}, ""}, {nil, `"lr":0.001,`}} {
		log := filepath.Join(t.TempDir(), "log.jsonl")
		plan := compilePlan(t, append([]string{mlp}, c.args...)...)
		if code, _, errOut := ppc(t, "", "run", plan, "--steps", "1", "--log-json", log); code != 0 {
			t.Fatal(errOut)
		}
		data, _ := os.ReadFile(log)
		if strings.Contains(string(data), `"lr"`) != (c.lr != "") || !strings.Contains(string(data), c.lr) {
			t.Errorf("%v: %s", c.args, data)
		}
	}
}

// TestRunLogJSONWithoutLoss: a forward-only plan of a model without a loss logs its steps
// with no "loss" field (JSON has no NaN), and the step lines print none either.
func TestRunLogJSONWithoutLoss(t *testing.T) {
	plan := compilePlan(t, filepath.Join("..", "..", "testdata", "models", "gpt-tiny.onnx"), "--dim", "batch=4", "--forward-only")
	log := filepath.Join(t.TempDir(), "log.jsonl")
	code, stdout, errOut := ppc(t, "", "run", plan, "--steps", "2", "--log-json", log)
	if code != 0 || strings.Contains(stdout, "loss") {
		t.Fatalf("exit %d\n%s%s", code, stdout, errOut)
	}
	data, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records:\n%s", len(lines), data)
	}
	for i, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if _, has := rec["loss"]; has || rec["step"] != float64(i+1) || rec["samples"] != float64(4) {
			t.Errorf("record %s", l)
		}
	}
}

// TestRunTraceSteps: --trace-steps limits the trace to a range of steps, and is checked.
func TestRunTraceSteps(t *testing.T) {
	plan := compilePlan(t, mlp, "--microbatches", "2", "--pp", "2")
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.json")
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "4", "--trace", trace, "--trace-steps", "2:3"); code != 0 {
		t.Fatal(errOut)
	}
	data, _ := os.ReadFile(trace)
	var tf struct {
		TraceEvents []struct {
			Ph   string         `json:"ph"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &tf); err != nil {
		t.Fatal(err)
	}
	n := map[float64]int{}
	for _, ev := range tf.TraceEvents {
		if ev.Ph == "X" {
			n[ev.Args["step"].(float64)]++
		}
	}
	if len(n) != 2 || n[2] == 0 || n[3] != n[2] {
		t.Fatalf("events per step %v", n)
	}
	ck := filepath.Join(dir, "ck")
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "2", "--save", ck); code != 0 {
		t.Fatal(errOut)
	}
	with := func(extra ...string) []string {
		return append([]string{"run", plan, "--steps", "3", "--trace", trace}, extra...)
	}
	runCases(t, []cliCase{
		{with("--trace-steps", "2"), exitInput, []string{`--trace-steps "2": want FIRST:LAST`, "usage: ppc run"}, nil},
		{with("--trace-steps", "x:3"), exitInput, []string{`--trace-steps "x:3": want FIRST:LAST`}, nil},
		{with("--trace-steps", "0:3"), exitInput, []string{`--trace-steps "0:3": want FIRST:LAST`}, nil},
		{with("--trace-steps", "3:2"), exitInput, []string{`--trace-steps "3:2": the last step is before the first`}, nil},
		{with("--trace-steps", "4:"), exitInput, []string{"--trace-steps 4: records no step: this run runs steps 1 to 3"}, nil},
		// A resumed run continues the count.
		{with("--trace-steps", ":2", "--resume", ck), exitInput, []string{"--trace-steps :2 records no step: this run runs steps 3 to 5"}, nil},
		{[]string{"run", plan, "--trace-steps", "1:2"}, exitInput, []string{"--trace-steps needs --trace"}, nil},
		{[]string{"run", plan, "--steps", "0", "--trace", trace, "--trace-steps", "1:"}, exitInput, []string{"--trace-steps 1:: --steps 0 runs no step"}, nil},
	})
	if code, _, errOut := ppc(t, "", with("--trace-steps", ":3", "--resume", ck)...); code != 0 {
		t.Fatalf("a range that overlaps the resumed run: %s", errOut)
	}
}

// TestRunDataCounts: arrays that would pair samples wrongly, or not fill one batch, are
// refused with the counts.
func TestRunDataCounts(t *testing.T) {
	plan := compilePlan(t, mlp, "--microbatches", "2")
	dir := t.TempDir()
	x32 := writeNpy(t, dir, "x32.npy", "<f4", "32, 64", make([]float64, 32*64))
	x40 := writeNpy(t, dir, "x40.npy", "<f4", "40, 64", make([]float64, 40*64))
	x20 := writeNpy(t, dir, "x20.npy", "<f4", "20, 64", make([]float64, 20*64))
	y32 := writeNpy(t, dir, "y32.npy", "<i8", "32,", make([]float64, 32))
	y20 := writeNpy(t, dir, "y20.npy", "<i8", "20,", make([]float64, 20))
	runCases(t, []cliCase{
		{[]string{"run", plan, "--data", "x=" + x40 + ",y=" + y32}, exitInput, []string{"the inputs have different numbers of samples: x has 40 (" + x40 + "), y has 32 (" + y32 + ")"}, nil},
		{[]string{"run", plan, "--data", "x=" + x20 + ",y=" + y20}, exitInput, []string{x20 + ` holds 20 sample(s) of input "x", fewer than one batch needs: 32 (16 per micro-batch × 2 micro-batches)`}, nil},
	})
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "2", "--data", "x="+x32+",y="+y32); code != 0 {
		t.Fatalf("one batch of data: %s", errOut)
	}
}

// TestRunTokenWidth: a uint32 token file of a small vocabulary trains with --data-dtype
// uint32; read as uint16 (the default) it is flagged; the flag is checked.
func TestRunTokenWidth(t *testing.T) {
	plan := compilePlan(t, gpt, "--preset", "tiny", "--microbatches", "2")
	dir := t.TempDir()
	// One batch is 16 sequences of 32+1 tokens: 528.
	u32 := make([]byte, 4*600)
	for i := 0; i < 600; i++ {
		binary.LittleEndian.PutUint32(u32[4*i:], uint32(1+i*7%511))
	}
	bin := filepath.Join(dir, "train.bin")
	os.WriteFile(bin, u32, 0o644)
	code, stdout, errOut := ppc(t, "", "run", plan, "--steps", "1", "--data", bin, "--data-dtype", "uint32")
	if code != 0 || errOut != "" || !strings.Contains(stdout, "step 1 loss=") {
		t.Fatalf("as uint32: %d %s %s", code, stdout, errOut)
	}
	code, _, errOut = ppc(t, "", "run", plan, "--steps", "1", "--data", bin)
	if code != 0 || !strings.Contains(errOut, "ppc run: warning: "+bin+": every other uint16 token is 0") || !strings.Contains(errOut, "give --data-dtype uint32") {
		t.Fatalf("as uint16: %d %s", code, errOut)
	}
	short := filepath.Join(dir, "short.bin")
	os.WriteFile(short, u32[:4*527], 0o644)
	odd := filepath.Join(dir, "odd.bin")
	os.WriteFile(odd, u32[:4*600-2], 0o644)
	oov := filepath.Join(dir, "oov.bin")
	bad := append([]byte{}, u32...)
	binary.LittleEndian.PutUint32(bad[4*77:], 512)
	os.WriteFile(oov, bad, 0o644)
	toks := make([]float64, 600)
	for i := range toks {
		toks[i] = float64(i % 512)
	}
	i64 := writeNpy(t, dir, "toks.npy", "<i8", "600,", toks)
	runCases(t, []cliCase{
		{[]string{"run", plan, "--data", short, "--data-dtype", "uint32"}, exitInput, []string{"short.bin: 527 tokens, fewer than one batch needs: 16 sequences (8 per micro-batch × 2 micro-batches) of 32+1 tokens = 528"}, nil},
		{[]string{"run", plan, "--data", odd, "--data-dtype", "uint32"}, exitInput, []string{fmt.Sprintf("odd.bin: %d bytes is not a whole number of 4-byte uint32 tokens", 4*600-2)}, nil},
		{[]string{"run", plan, "--data", oov, "--data-dtype", "uint32"}, exitInput, []string{"oov.bin: token 512 at position 77 is outside the vocabulary of 512"}, nil},
		{[]string{"run", plan, "--data", i64, "--data-dtype", "uint16"}, exitInput, []string{"--data-dtype uint16: " + i64 + " holds int64 tokens; --data-dtype is for raw token files"}, nil},
		{[]string{"run", plan, "--data", bin, "--data-dtype", "u32"}, exitInput, []string{`--data-dtype "u32": want uint16 or uint32`, "usage: ppc run"}, nil},
		{[]string{"run", plan, "--data-dtype", "uint32"}, exitInput, []string{"--data-dtype applies to --data"}, nil},
		{[]string{"run", plan, "--data", "tokens=" + i64, "--data-dtype", "uint32"}, exitInput, []string{"--data-dtype applies to a token file"}, nil},
	})
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "1", "--data", i64); code != 0 {
		t.Fatalf("an int64 .npy token file: %s", errOut)
	}
	if _, out, _ := ppc(t, "", "run", "--help"); !strings.Contains(out, "--data-dtype T\n") || !strings.Contains(out, "(default uint16)") {
		t.Errorf("run --help does not document --data-dtype:\n%s", out)
	}
}

// TestRunOutputsOnFullDisk: a trace or step log that cannot be written stops the run with
// the reason (a full disk is /dev/full).
func TestRunOutputsOnFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	plan := compilePlan(t, mlp)
	for _, flag := range []string{"--trace", "--log-json"} {
		code, stdout, errOut := ppc(t, "", "run", plan, "--steps", "2", flag, "/dev/full")
		if code == 0 || !strings.Contains(errOut, flag+": ") || !strings.Contains(errOut, "no space left on device") || strings.Contains(stdout, "step 2") {
			t.Errorf("%s /dev/full: exit %d\n%s%s", flag, code, stdout, errOut)
		}
	}
}

// TestFormatLoss: a loss prints with five significant digits whatever its size, so that a
// small loss that falls shows it (four decimals printed 2e-4 and 1.4e-4 both as 0.0002).
func TestFormatLoss(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{6.25051, "6.2505"}, {12.5, "12.5000"}, {0, "0.0000"},
		{0.5, "0.50000"}, {0.99999, "0.99999"},
		{2.1234e-4, "0.00021234"}, {1.4e-4, "0.00014000"}, {-0.03125, "-0.031250"},
		{2.5e-5, "2.5000e-05"}, {1e-12, "1.0000e-12"},
	} {
		if got := formatLoss(c.v); got != c.want {
			t.Errorf("formatLoss(%g) = %q, want %q", c.v, got, c.want)
		}
	}
}
