package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime/checkpoint"
)

// signalAfter is a stdout that delivers a signal on sigs once the line "step N " is printed,
// as a user pressing Ctrl-C while watching the run would. With handled set (the run's
// stderr), it returns only once the run has taken the signal (its message is there), so
// that the run sees it before its next check; with twice, it then sends a second one and
// waits for the run's answer to that.
type signalAfter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	line    string
	sigs    chan os.Signal
	sent    bool
	handled *syncBuffer
	twice   bool
}

func (w *signalAfter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent && strings.Contains(w.buf.String(), w.line) {
		w.sent = true
		w.sigs <- os.Interrupt
		if w.handled != nil {
			waitUntil(w.handled, "ppc run: SIGINT: ")
			if w.twice {
				w.sigs <- os.Interrupt
				waitUntil(w.handled, "ppc run: SIGINT again: ")
			}
		}
	}
	return len(p), nil
}

// waitUntil waits until out holds s, or gives up after a minute (the caller's checks then
// fail, rather than the test hanging).
func waitUntil(out *syncBuffer, s string) {
	for end := time.Now().Add(time.Minute); !strings.Contains(out.String(), s) && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
}

// traceSteps checks that a trace file is complete JSON and returns how many optimizer steps
// it records.
func traceSteps(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct{ Name string } `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("trace %s is not valid JSON (%d bytes): %v", path, len(b), err)
	}
	n := 0
	for _, e := range tr.TraceEvents {
		if e.Name == "OPT" {
			n++
		}
	}
	return n
}

// TestRunInterrupted delivers SIGINT to an in-process run through the channel its signal
// handler feeds: the run stops after a completed step, says so, writes the trace of the
// steps done and a checkpoint of the last, and exits 130.
func TestRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	ck, tr := filepath.Join(dir, "ck"), filepath.Join(dir, "trace.json")
	sigs := make(chan os.Signal, 1)
	stopped := false
	out := &signalAfter{line: "step 2 ", sigs: sigs}
	var errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: out, stderr: &errb,
		interrupts: func() (<-chan os.Signal, func()) { return sigs, func() { stopped = true } }}
	code := run([]string{"run", plan, "--steps", "100000", "--save", ck, "--trace", tr}, e)
	stderr := errb.String()
	if code != exitInterrupted || !stopped {
		t.Fatalf("exit %d (want %d), handler stopped %v\n%s", code, exitInterrupted, stopped, stderr)
	}
	step := checkpointStep(t, ck)
	want := "ppc run: interrupted by SIGINT at step " + strconv.Itoa(step) + "; trace written to " + tr + "; checkpoint of step " + strconv.Itoa(step) + " saved to " + ck + "\n"
	if step < 2 || step > 1000 || !strings.HasSuffix(stderr, want) || !strings.Contains(stderr, "ppc run: SIGINT: finishing the step in progress") {
		t.Fatalf("checkpoint at step %d; stderr:\n%s\nwant it to end with %q", step, stderr, want)
	}
	if !strings.Contains(out.buf.String(), "ran "+strconv.Itoa(step)+" step(s)") {
		t.Errorf("stdout does not sum up the %d steps run:\n%s", step, out.buf.String())
	}
	if n := traceSteps(t, tr); n != step {
		t.Errorf("the trace records %d steps, the checkpoint %d", n, step)
	}
	if names := jobtest.DirNames(t, ck); len(names) != 2 || names[0] != checkpoint.IndexFile {
		t.Errorf("the save directory holds %v", names)
	}
	// The checkpoint resumes.
	if code, stdout, errOut := ppc(t, "", "run", plan, "--resume", ck, "--steps", "1"); code != 0 || !strings.Contains(stdout, "step "+strconv.Itoa(step+1)+" ") {
		t.Fatalf("resume the interrupted run: %d %s %s", code, stdout, errOut)
	}

	// Interrupted before the first step: nothing is saved, and the save directory is left
	// as it was.
	before := filepath.Join(dir, "before")
	sigs <- syscall.SIGTERM
	errb.Reset()
	e.stdout = io.Discard
	code = run([]string{"run", plan, "--steps", "5", "--save", before}, e)
	if code != exitInterrupted || !strings.HasSuffix(errb.String(), "ppc run: interrupted by SIGTERM before the first step; nothing saved\n") {
		t.Fatalf("interrupted before the first step: %d\n%s", code, errb.String())
	}
	if names := jobtest.DirNames(t, before); len(names) != 0 {
		t.Fatalf("the save directory holds %v", names)
	}
}

// TestRunInterruptedWhileWriting: a signal after the last step, while the trace and the
// checkpoint are written, lets them finish, and the run still ends as interrupted (exit 130,
// with the line saying what it wrote); it used to exit 0 and say nothing.
func TestRunInterruptedWhileWriting(t *testing.T) {
	dir := t.TempDir()
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	ck, tr := filepath.Join(dir, "ck"), filepath.Join(dir, "trace.json")
	sigs := make(chan os.Signal, 1)
	// "ran 3 step(s)" is printed after the last step, before the trace and checkpoint.
	out := &signalAfter{line: "ran 3 step(s)", sigs: sigs}
	var errb syncBuffer
	e := &env{stdin: strings.NewReader(""), stdout: out, stderr: &errb,
		interrupts: func() (<-chan os.Signal, func()) { return sigs, func() {} }}
	code := run([]string{"run", plan, "--steps", "3", "--save", ck, "--trace", tr}, e)
	want := "ppc run: interrupted by SIGINT while writing what was done after step 3; trace written to " + tr + "; checkpoint of step 3 saved to " + ck + "\n"
	if code != exitInterrupted || !strings.HasSuffix(errb.String(), want) {
		t.Fatalf("exit %d (want %d); stderr:\n%s\nwant it to end with %q", code, exitInterrupted, errb.String(), want)
	}
	if step := checkpointStep(t, ck); step != 3 || traceSteps(t, tr) != 3 {
		t.Fatalf("checkpoint of step %d, trace of %d steps", step, traceSteps(t, tr))
	}
}

// TestRunInterruptedAfterPeriodicSave: with --save-every, a run stopped after a step that
// was just saved does not save it a second time (it wrote step-00000002-b, a second copy).
func TestRunInterruptedAfterPeriodicSave(t *testing.T) {
	dir := t.TempDir()
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	ck := filepath.Join(dir, "ck")
	sigs := make(chan os.Signal, 1)
	var errb syncBuffer
	// Step 2's line is printed after its periodic save; the run has the signal before it
	// decides whether to run step 3.
	out := &signalAfter{line: "step 2 ", sigs: sigs, handled: &errb}
	e := &env{stdin: strings.NewReader(""), stdout: out, stderr: &errb,
		interrupts: func() (<-chan os.Signal, func()) { return sigs, func() {} }}
	code := run([]string{"run", plan, "--steps", "5", "--save", ck, "--save-every", "1"}, e)
	if want := "ppc run: interrupted by SIGINT at step 2; checkpoint of step 2 saved to " + ck + "\n"; code != exitInterrupted || !strings.HasSuffix(errb.String(), want) {
		t.Fatalf("exit %d; stderr:\n%s\nwant it to end with %q", code, errb.String(), want)
	}
	if names := jobtest.DirNames(t, ck); len(names) != 2 || names[0] != checkpoint.IndexFile || names[1] != "step-00000002" {
		t.Fatalf("the save directory holds %v", names)
	}
}

// TestRunSecondInterrupt: a second signal ends the process at once with status 130 and says
// so.
func TestRunSecondInterrupt(t *testing.T) {
	dir := t.TempDir()
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	sigs := make(chan os.Signal, 1)
	var errb syncBuffer
	out := &signalAfter{line: "step 2 ", sigs: sigs, handled: &errb, twice: true}
	var exited []int
	e := &env{stdin: strings.NewReader(""), stdout: out, stderr: &errb,
		interrupts: func() (<-chan os.Signal, func()) { return sigs, func() {} },
		// The test's process goes on; the run then ends as after one signal.
		exit: func(code int) { exited = append(exited, code) }}
	run([]string{"run", plan, "--steps", "100000", "--save", filepath.Join(dir, "ck")}, e)
	if len(exited) != 1 || exited[0] != exitInterrupted || !strings.Contains(errb.String(), "ppc run: SIGINT again: stopping at once (a checkpoint being written is abandoned; the previous one stays intact)\n") {
		t.Fatalf("exit calls %v; stderr:\n%s", exited, errb.String())
	}
}

// TestRunSIGINTProcess sends a real SIGINT to a ppc process after its first step line.
func TestRunSIGINTProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the ppc binary")
	}
	if goruntime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build ppc with")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ppc")
	if b, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	plan := compilePlanIn(t, dir, "plan", mlp, "--microbatches", "2")
	ck, tr := filepath.Join(dir, "ck"), filepath.Join(dir, "trace.json")
	cmd := exec.Command(bin, "run", plan, "--steps", "1000000", "--save", ck, "--trace", tr)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	sc := bufio.NewScanner(stdout)
	sent := false
	for sc.Scan() {
		if !sent && strings.HasPrefix(sc.Text(), "step 1 ") {
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			sent = true
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !sent || !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("sent SIGINT: %v; ppc exited with %v (want status %d)\n%s", sent, err, exitInterrupted, errb.String())
	}
	step := checkpointStep(t, ck)
	if want := "ppc run: interrupted by SIGINT at step " + strconv.Itoa(step) + "; trace written to " + tr + "; checkpoint of step " + strconv.Itoa(step) + " saved to " + ck; !strings.Contains(errb.String(), want) {
		t.Fatalf("stderr lacks %q:\n%s", want, errb.String())
	}
	if n := traceSteps(t, tr); n != step {
		t.Errorf("the trace records %d steps, the checkpoint %d", n, step)
	}
	if _, _, err := checkpoint.Read(ck); err != nil {
		t.Fatal(err)
	}
}
