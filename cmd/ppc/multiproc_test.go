package main

import (
	"flag"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ppc.dev/ppc/internal/golden"
	"ppc.dev/ppc/runtime/checkpoint"
)

// compileGPT compiles gpt tiny for the given layout into a temporary plan directory.
func compileGPT(t *testing.T, layout ...string) string {
	t.Helper()
	return compileModel(t, "../../testdata/models/gpt.ppm", layout...)
}

// compileModel compiles a model's tiny preset with 4 micro-batches (a layout's --microbatches
// wins) in the layout given.
func compileModel(t *testing.T, model string, layout ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plan")
	args := append([]string{"compile", model, "--preset", "tiny", "--microbatches", "4", "-o", dir}, layout...)
	if code, _, errOut := ppc(t, "", args...); code != 0 {
		t.Fatalf("compile %v: exit %d\n%s", layout, code, errOut)
	}
	return dir
}

var lossLine = regexp.MustCompile(`(?m)^step (\d+) loss=(\S+)`)

// losses are the step lines' losses of a run's stdout.
func losses(out string) []string {
	var l []string
	for _, m := range lossLine.FindAllStringSubmatch(out, -1) {
		l = append(l, m[2])
	}
	return l
}

// nprocLayouts are the plans the multi-process tests run: pipeline, tensor-, data- (with
// ZeRO-1 and ZeRO-3, and ZeRO-2 and 3 with padded blocks at dp 3), context-parallel (the ring's transfers between cp ranks over TCP) and
// expert-parallel (the mixture-of-experts model's all-to-alls over TCP), on 2, 3 and 4
// processes; model is gpt.ppm unless named.
var nprocLayouts = []struct {
	world  int
	layout []string
	model  string
}{{2, []string{"--pp", "2"}, ""}, {4, []string{"--pp", "4"}, ""}, {4, []string{"--pp", "2", "--tp", "2"}, ""}, {4, []string{"--pp", "2", "--dp", "2", "--zero", "1"}, ""},
	{4, []string{"--pp", "2", "--dp", "2", "--zero", "3"}, ""}, {4, []string{"--pp", "2", "--cp", "2"}, ""},
	{4, []string{"--dp", "4", "--ep", "2", "--microbatches", "1"}, moePPM},
	// dp 3 divides no first dim of tiny GPT: every ZeRO block is padded.
	{3, []string{"--dp", "3", "--zero", "2", "--set", "batch=12", "--microbatches", "2"}, ""},
	{3, []string{"--dp", "3", "--zero", "3", "--set", "batch=12", "--microbatches", "2"}, ""}}

const moePPM = "../../testdata/models/moe.ppm"

// compile compiles the layout's model in it (with no layout: on one device).
func compileLayout(t *testing.T, model string, layout ...string) string {
	t.Helper()
	if model == "" {
		return compileGPT(t, layout...)
	}
	return compileModel(t, model, layout...)
}

// TestNprocMatchesInProcess: ppc run --nproc N (one process per rank, TCP between them)
// prints the in-process run's losses for pipeline, tensor- and data-parallel plans.
func TestNprocMatchesInProcess(t *testing.T) {
	for _, c := range nprocLayouts {
		t.Run(strings.Join(c.layout, ""), func(t *testing.T) {
			plan := compileLayout(t, c.model, c.layout...)
			code, want, errOut := ppc(t, "", "run", plan, "--steps", "3")
			if code != 0 {
				t.Fatalf("in-process: exit %d\n%s", code, errOut)
			}
			code, got, errOut := ppc(t, "", "run", plan, "--steps", "3", "--nproc", strconv.Itoa(c.world))
			if code != 0 {
				t.Fatalf("--nproc: exit %d\n%s", code, errOut)
			}
			if w, g := losses(want), losses(got); len(w) != 3 || strings.Join(w, " ") != strings.Join(g, " ") {
				t.Fatalf("losses %v, in-process %v\n%s", g, w, got)
			}
		})
	}
}

// freePort finds a loopback port nobody listens on (for hand-started runs: a launcher picks
// MASTER_PORT this way too).
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// handRun is a multi-process run started the way torchrun starts ppc: every process with
// RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (and no token: one is derived).
type handRun struct {
	cmds []*exec.Cmd
	out  []*syncBuffer
	errs []*syncBuffer
}

func startHandRun(t *testing.T, world int, env []string, args ...string) *handRun {
	t.Helper()
	port := freePort(t)
	h := &handRun{}
	for r := range world {
		c := exec.Command(os.Args[0], append([]string{"run"}, args...)...)
		c.Env = append(os.Environ(), "PPC_TEST_AS_PPC=1", "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(world), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		c.Env = append(c.Env, env...)
		o, e := &syncBuffer{}, &syncBuffer{}
		c.Stdout, c.Stderr = o, e
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		h.cmds, h.out, h.errs = append(h.cmds, c), append(h.out, o), append(h.errs, e)
	}
	t.Cleanup(func() {
		for _, c := range h.cmds {
			c.Process.Kill()
		}
	})
	return h
}

// wait returns each process's exit status.
func (h *handRun) wait() []int {
	codes := make([]int, len(h.cmds))
	for r, c := range h.cmds {
		c.Wait()
		codes[r] = c.ProcessState.ExitCode()
	}
	return codes
}

// TestTorchrunStyleLaunch: processes started by hand with torchrun's variables run the plan
// as one run, with the in-process losses and checkpoint, and only rank 0 printing steps.
func TestTorchrunStyleLaunch(t *testing.T) {
	plan := compileGPT(t, "--pp", "2", "--tp", "2")
	dir := t.TempDir()
	_, want, _ := ppc(t, "", "run", plan, "--steps", "2", "--save", filepath.Join(dir, "in"))
	h := startHandRun(t, 4, nil, plan, "--steps", "2", "--save", filepath.Join(dir, "hand"))
	for r, code := range h.wait() {
		if code != 0 {
			t.Fatalf("rank %d: exit %d\n%s", r, code, h.errs[r])
		}
	}
	if g, w := losses(h.out[0].String()), losses(want); strings.Join(g, " ") != strings.Join(w, " ") || len(w) != 2 {
		t.Fatalf("rank 0 printed losses %v, in-process %v", g, w)
	}
	for r := 1; r < 4; r++ {
		if h.out[r].String() != "" {
			t.Errorf("rank %d printed %q: only rank 0 prints the steps", r, h.out[r])
		}
	}
	sameCheckpoint(t, "hand-started", filepath.Join(dir, "in"), filepath.Join(dir, "hand"))
}

// TestWorkerKilled: a worker killed with SIGKILL mid-run stops every other within 60 s, each
// exiting 1 with a message naming the dead rank.
func TestWorkerKilled(t *testing.T) {
	plan := compileGPT(t, "--pp", "4")
	h := startHandRun(t, 4, nil, plan, "--steps", "100000")
	waitFor(t, h.out[0], `(?m)^step 3 `, 1)
	killed := time.Now()
	h.cmds[2].Process.Signal(syscall.SIGKILL)
	codes := h.wait()
	if d := time.Since(killed); d > 60*time.Second {
		t.Errorf("the others took %s to stop", d)
	}
	for _, r := range []int{0, 1, 3} {
		if codes[r] != exitFailed || !strings.Contains(h.errs[r].String(), "rank 2 (") {
			t.Errorf("rank %d: exit %d, stderr:\n%s", r, codes[r], h.errs[r])
		}
	}
	t.Logf("rank 0 said:\n%s", h.errs[0])
}

// TestNprocTraceAndLog: --trace from every rank is merged into one Perfetto file (a process
// per rank, every rank's instructions), and --log-json records each rank's step time.
func TestNprocTraceAndLog(t *testing.T) {
	plan := compileGPT(t, "--pp", "2")
	dir := t.TempDir()
	tr, lg := filepath.Join(dir, "t.json"), filepath.Join(dir, "l.jsonl")
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "2", "--nproc", "2", "--trace", tr, "--log-json", lg); code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	trace := readTrace(t, tr) // the merged file is one JSON trace
	spans := map[int]int{}
	for _, ev := range trace.TraceEvents {
		if ev.Ph == "X" {
			spans[ev.Pid]++
		}
	}
	if spans[0] == 0 || spans[1] == 0 {
		t.Fatalf("spans per rank: %v", spans)
	}
	recs := readLog(t, lg)
	n := len(recs)
	for _, rec := range recs {
		if len(rec.RankTimesMS) != 2 {
			t.Fatalf("record %+v: want two rank times", rec)
		}
	}
	if n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}

// startByHand starts one process of a run per argument list, rank r with args[r], as a user
// starts them by hand (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, no launcher), and
// returns them with their standard errors.
func startByHand(t *testing.T, args ...[]string) ([]*exec.Cmd, []*syncBuffer) {
	t.Helper()
	port := strconv.Itoa(freePort(t))
	var cmds []*exec.Cmd
	var errs []*syncBuffer
	for r, a := range args {
		c := exec.Command(os.Args[0], a...)
		c.Env = append(os.Environ(), "PPC_TEST_AS_PPC=1", "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(len(args)), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
		e := &syncBuffer{}
		c.Stderr = e
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, errs = append(cmds, c), append(errs, e)
	}
	return cmds, errs
}

// TestHandRunPlanMismatch: processes started on different plans of the same world size are
// refused at the rendezvous with both plans named, and every process exits 2 (bad input).
func TestHandRunPlanMismatch(t *testing.T) {
	a := compileGPT(t, "--pp", "2")
	b := compileGPT(t, "--pp", "2", "--recompute", "full")
	cmds, errs := startByHand(t, []string{"run", a, "--steps", "1"}, []string{"run", b, "--steps", "1"})
	for r, c := range cmds {
		c.Wait()
		msg := errs[r].String()
		if code := c.ProcessState.ExitCode(); code != exitInput || !regexp.MustCompile(`rank 1 \(.*\) runs plan [0-9a-f]{12} with world size 2, but rank 0 runs plan [0-9a-f]{12} with world size 2`).MatchString(msg) {
			t.Errorf("rank %d: exit %d\n%s", r, code, msg)
		}
	}
}

// TestNprocInterrupted: SIGTERM to the launcher stops every worker after the same step; they
// save the checkpoint of that step and exit 130, and the launcher too.
func TestNprocInterrupted(t *testing.T) {
	plan := compileGPT(t, "--pp", "2")
	ck := filepath.Join(t.TempDir(), "ck")
	sigs := make(chan os.Signal, 1)
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := make(chan int)
	go func() {
		done <- run([]string{"run", plan, "--nproc", "2", "--steps", "100000", "--save", ck}, &env{stdout: out, stderr: errOut,
			interrupts: func() (<-chan os.Signal, func()) { return sigs, func() {} }})
	}()
	waitFor(t, out, `(?m)^step 2 `, 1)
	sigs <- syscall.SIGTERM
	code := <-done
	msg := errOut.String()
	if code != exitInterrupted || !regexp.MustCompile(`\[rank 1\] ppc run: interrupted by SIGTERM at step (\d+)`).MatchString(msg) {
		t.Fatalf("exit %d\n%s", code, msg)
	}
	m0 := regexp.MustCompile(`\[rank 0\] ppc run: interrupted by SIGTERM at step (\d+)`).FindStringSubmatch(msg)
	m1 := regexp.MustCompile(`\[rank 1\] ppc run: interrupted by SIGTERM at step (\d+)`).FindStringSubmatch(msg)
	if m0 == nil || m1 == nil || m0[1] != m1[1] {
		t.Fatalf("the ranks did not stop after the same step:\n%s", msg)
	}
	// Both ranks wrote their part of the checkpoint of that step, and rank 0 the index.
	if _, meta, err := checkpoint.Read(ck); err != nil || strconv.Itoa(meta.Step) != m0[1] {
		t.Fatalf("checkpoint after the interrupt: step %d, %v; the ranks stopped at step %s", meta.Step, err, m0[1])
	}
}

// dirSnapshot is every file under dir by relative path, with its content (the lock aside).
func dirSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := golden.Files(dir, checkpoint.LockFile)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func sameCheckpoint(t *testing.T, what, a, b string) {
	t.Helper()
	sa, sb := dirSnapshot(t, a), dirSnapshot(t, b)
	if !maps.Equal(sa, sb) {
		t.Fatalf("%s: the checkpoints differ: %v and %v", what, slices.Sorted(maps.Keys(sa)), slices.Sorted(maps.Keys(sb)))
	}
	if code, out, _ := ppc(t, "", "compare", a, b, "--rtol", "0", "--atol", "0"); code != 0 {
		t.Fatalf("%s: ppc compare:\n%s", what, out)
	}
}

// TestNprocCheckpoints: a checkpoint saved by N processes (each rank writes its own tensors,
// rank 0 the index) is, file for file and byte for byte, the one the in-process run saves;
// each resumes into the other, and into another layout.
func TestNprocCheckpoints(t *testing.T) {
	for _, c := range nprocLayouts {
		t.Run(strings.Join(c.layout, ""), func(t *testing.T) {
			plan := compileLayout(t, c.model, c.layout...)
			dir := t.TempDir()
			at := func(name string) string { return filepath.Join(dir, name) }
			nproc := strconv.Itoa(c.world)
			ppcAll(t, [][]string{
				{"run", plan, "--steps", "3", "--save", at("in")},
				{"run", plan, "--steps", "3", "--save", at("multi"), "--nproc", nproc},
				{"run", plan, "--steps", "2", "--resume", at("multi"), "--save", at("multi-in")},
				{"run", plan, "--steps", "2", "--resume", at("in"), "--save", at("in-multi"), "--nproc", nproc},
			})
			sameCheckpoint(t, "3 steps", at("in"), at("multi"))
			sameCheckpoint(t, "3 + 2 steps", at("multi-in"), at("in-multi"))
			// Another layout resumes it.
			one := compileLayout(t, c.model, "--microbatches", "4")
			if code, _, errOut := ppc(t, "", "run", one, "--steps", "1", "--resume", at("multi")); code != 0 {
				t.Fatalf("resume into one device: %s", errOut)
			}
		})
	}
}

// TestKilledRunResumes: a multi-process run with --save-every whose worker is killed leaves
// the last complete checkpoint; resuming from it finishes exactly as an uninterrupted run.
func TestKilledRunResumes(t *testing.T) {
	plan := compileGPT(t, "--pp", "2", "--dp", "2")
	dir := t.TempDir()
	ck, straight := filepath.Join(dir, "ck"), filepath.Join(dir, "straight")
	const total = 12
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", strconv.Itoa(total), "--save", straight); code != 0 {
		t.Fatal(errOut)
	}
	h := startHandRun(t, 4, nil, plan, "--steps", "100000", "--save", ck, "--save-every", "2")
	waitFor(t, h.out[0], `(?m)^step 4 .*\(saved\)`, 1)
	h.cmds[1].Process.Signal(syscall.SIGKILL)
	for r, code := range h.wait() {
		if r != 1 && code != exitFailed {
			t.Errorf("rank %d exited %d:\n%s", r, code, h.errs[r])
		}
	}
	_, meta, err := checkpoint.Read(ck)
	if err != nil {
		t.Fatalf("the killed run's checkpoint: %v", err)
	}
	if meta.Step < 4 || meta.Step%2 != 0 || meta.Step >= total {
		t.Fatalf("checkpoint at step %d", meta.Step)
	}
	if code, _, errOut := ppc(t, "", "run", plan, "--nproc", "4", "--resume", ck, "--save", ck, "--steps", strconv.Itoa(total-meta.Step)); code != 0 {
		t.Fatalf("resume: %s", errOut)
	}
	sameCheckpoint(t, "killed and resumed", straight, ck)
}

// TestWorkerUsageErrors: a rank whose launcher started the wrong number of processes, and a
// --timeout that is not positive, are bad input (exit 2) with a message, before any rank
// waits for another.
func TestWorkerUsageErrors(t *testing.T) {
	plan := compileGPT(t, "--pp", "2")
	launched := func(k string) string {
		return map[string]string{"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(freePort(t))}[k]
	}
	var out, errb syncBuffer
	code := run([]string{"run", plan, "--steps", "1"}, &env{stdout: &out, stderr: &errb, getenv: launched})
	if code != exitInput || !strings.Contains(errb.String(), "[rank 0] ppc run: the launcher started 3 processes, the plan has 2 ranks (pp 2 × dp 1 × tp 1): start one process per rank") {
		t.Fatalf("world mismatch: exit %d\n%s", code, errb.String())
	}
	for _, v := range []string{"0s", "-5m"} {
		code, _, errOut := ppc(t, "", "run", plan, "--steps", "1", "--timeout", v)
		if code != exitInput || !strings.Contains(errOut, "--timeout must be positive") {
			t.Errorf("--timeout %s: exit %d\n%s", v, code, errOut)
		}
	}
}

// TestHandRunFlagMismatch: processes of one run started with different flags (another
// --seed would train silently wrong; other --steps would leave the ranks with more steps
// waiting) are refused at the rendezvous, naming both ranks and both values, and every
// process exits 2.
func TestHandRunFlagMismatch(t *testing.T) {
	plan := compileGPT(t, "--pp", "2")
	for _, c := range []struct {
		rank1 []string
		want  string
	}{
		{[]string{"--seed", "2"}, "--seed=2, but rank 0 with --seed=1"},
		{[]string{"--steps", "3"}, "--steps=3, but rank 0 with --steps=2"},
	} {
		args := []string{"run", plan, "--steps", "2"}
		cmds, errs := startByHand(t, args, append(append([]string{}, args...), c.rank1...))
		re := regexp.MustCompile(`rank 1 \(.*\) was started with ` + regexp.QuoteMeta(c.want) + `: every process of a run must be started with the same flags`)
		for r, cmd := range cmds {
			cmd.Wait()
			msg := errs[r].String()
			if code := cmd.ProcessState.ExitCode(); code != exitInput || !re.MatchString(msg) {
				t.Errorf("%v: rank %d: exit %d\n%s", c.rank1, r, code, msg)
			}
		}
	}
}

// TestRunFlags: the flags the ranks compare are every flag of ppc run but --log-json and
// --nproc, at their values whether given or not; --seed left out with --resume is the
// checkpoint's.
func TestRunFlags(t *testing.T) {
	flags := func(args ...string) []string {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		findCommand("run").setup(fs, &env{})
		if _, err := parseArgs(fs, args); err != nil {
			t.Fatal(err)
		}
		return runFlags(fs)
	}
	a := flags("--steps", "10", "--log-json", "a.jsonl")
	b := flags("--nproc", "2")
	if !slices.Equal(a, b) {
		t.Errorf("--steps 10 given and left at its default differ:\n%v\n%v", a, b)
	}
	if slices.ContainsFunc(a, func(f string) bool { return strings.HasPrefix(f, "log-json=") || strings.HasPrefix(f, "nproc=") }) {
		t.Errorf("per-process flags compared: %v", a)
	}
	for _, want := range []string{"steps=10", "seed=1", "data=", "timeout=auto", "save-every=0"} {
		if !slices.Contains(a, want) {
			t.Errorf("%v lacks %s", a, want)
		}
	}
	if r := flags("--resume", "ck"); !slices.Contains(r, "seed=(the checkpoint's)") {
		t.Errorf("--resume without --seed: %v", r)
	}
	if r := flags("--resume", "ck", "--seed", "1"); !slices.Contains(r, "seed=1") {
		t.Errorf("--resume with --seed 1: %v", r)
	}
}
