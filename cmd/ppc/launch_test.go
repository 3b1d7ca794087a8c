package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/dist"
)

// fakeWorkerVar makes this test binary act as a worker of `ppc run --nproc` (the
// supervisor starts os.Executable, which is the test binary): its value picks the behaviour.
// fakeLauncherVar makes it run `ppc run DIR --nproc 2` on the plan directory it names.
const (
	fakeWorkerVar   = "PPC_TEST_FAKE_WORKER"
	fakeLauncherVar = "PPC_TEST_FAKE_LAUNCHER"
)

// Without fakeWorkerVar, a worker is a real `ppc run` of this test binary, as ppc's main
// would run it.
func TestMain(m *testing.M) {
	// PPC_TEST_AS_PPC: a process started by hand the way a launcher starts ppc (the
	// torchrun-style tests of multiproc_test.go).
	if os.Getenv(envLauncher) == "ppc" || os.Getenv("PPC_TEST_AS_PPC") != "" {
		if mode := os.Getenv(fakeWorkerVar); mode != "" {
			os.Exit(fakeWorker(mode))
		}
		os.Exit(run(os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, interrupts: notifySignals}))
	}
	if dir := os.Getenv(fakeLauncherVar); dir != "" {
		os.Exit(run([]string{"run", dir, "--nproc", "2"}, &env{stdout: os.Stdout, stderr: os.Stderr, interrupts: notifySignals}))
	}
	os.Exit(m.Run())
}

// fakeWorker is a worker of `ppc run --nproc`: it reports what the launcher gave it, writes
// a line to stderr in two pieces and one it prefixed itself, then behaves as mode says.
func fakeWorker(mode string) int {
	li, err := detectLaunch(os.Getenv)
	if err != nil || li == nil {
		fmt.Fprintf(os.Stderr, "fake worker: detectLaunch: %v %v\n", li, err)
		return 3
	}
	fmt.Printf("launch %s rank=%d world=%d local=%d/%d master=%s:%d token=%d runid=%d fd=%d pid=%d pgleader=%v args=%q\n",
		li.Launcher, li.Rank, li.World, li.LocalRank, li.LocalWorld, li.MasterAddr, li.MasterPort,
		len(li.Token), len(li.RunID), li.StoreFD, os.Getpid(), processGroupLeader(), os.Args[1:])
	fmt.Fprint(os.Stderr, "log ")
	time.Sleep(10 * time.Millisecond)
	fmt.Fprintln(os.Stderr, "line")
	fmt.Fprintf(os.Stderr, "[rank %d] prefixed by the worker\n", li.Rank)
	last := li.Rank == li.World-1
	switch mode {
	case "ok":
		return 0
	case "fail", "bad":
		if last {
			fmt.Fprintln(os.Stderr, "ppc run: something went wrong")
			if mode == "bad" {
				return exitInput
			}
			return exitFailed
		}
		return 0
	case "kill":
		if last {
			p, _ := os.FindProcess(os.Getpid())
			p.Kill()
			time.Sleep(time.Minute)
		}
		return 0
	case "hang":
		if last {
			return exitFailed
		}
		time.Sleep(time.Minute)
		return 0
	case "cause":
		// The last rank fails first, but exits last (as a rank may, writing its trace and
		// closing): the others report its failure as the cause, as the rendezvous told them.
		if last {
			time.Sleep(300 * time.Millisecond)
			fmt.Fprintln(os.Stderr, "ppc run: something went wrong")
			reportExit(li, errors.New("something went wrong"))
			return exitFailed
		}
		reportExit(li, &dist.RemoteError{Msg: "rank N failed", Rank: li.World - 1})
		return exitFailed
	case "unresponsive":
		// The last rank is stopped (SIGSTOP, a wedged process): the others report it.
		if last {
			time.Sleep(time.Minute)
			return 0
		}
		reportExit(li, &dist.RemoteError{Msg: "rank N stopped responding", Rank: li.World - 1, Unresponsive: true})
		return exitFailed
	case "term", "stubborn":
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
		fmt.Println("ready")
		var got []string
		deadline := time.After(time.Minute)
		for {
			select {
			case s := <-sigs:
				got = append(got, signalName(s))
				fmt.Printf("got %s\n", signalName(s))
				if mode == "term" && len(got) == 1 {
					// Linger to see a second signal, if the launcher sent one.
					deadline = time.After(300 * time.Millisecond)
				}
			case <-deadline:
				fmt.Printf("received %d signal(s): %s\n", len(got), strings.Join(got, " "))
				if len(got) > 0 {
					return exitInterrupted
				}
				return 4
			}
		}
	case "port-closes":
		// Rank 0 exits at once; then nothing may listen on its port, or the others'
		// connections would wait in the backlog of a socket nobody accepts on.
		if li.Rank == 0 {
			return 0
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			c, err := net.Dial("tcp", net.JoinHostPort(li.MasterAddr, strconv.Itoa(li.MasterPort)))
			if err != nil {
				fmt.Println("connection refused once rank 0 exited")
				return 0
			}
			c.Close()
		}
		fmt.Println("the store's port accepts connections 10 s after rank 0 exited")
		return 1
	case "store":
		if li.Rank != 0 {
			return 0
		}
		ln, err := net.FileListener(os.NewFile(uintptr(li.StoreFD), "store"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "fd %d: %v\n", li.StoreFD, err)
			return 1
		}
		fmt.Printf("store listening on %s\n", ln.Addr())
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(time.Minute))
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Printf("store received %q\n", line)
		return 0
	}
	fmt.Fprintf(os.Stderr, "fake worker: unknown mode %q\n", mode)
	return 3
}

// syncBuffer is an output the test reads while the launcher writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until out holds n matches of re and returns them.
func waitFor(t *testing.T, out *syncBuffer, re string, n int) [][]string {
	t.Helper()
	rx := regexp.MustCompile(re)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := rx.FindAllStringSubmatch(out.String(), -1); len(m) >= n {
			return m
		}
	}
	t.Fatalf("no %d lines matching %q in:\n%s", n, re, out.String())
	return nil
}

// fakePlans compiles plans of 2 and 3 ranks once for the launcher tests.
var fakePlans = sync.OnceValues(func() (map[int]string, error) {
	dir, err := os.MkdirTemp("", "ppc-launch-test-")
	if err != nil {
		return nil, err
	}
	plans := map[int]string{}
	for _, pp := range []int{2, 3} {
		out := filepath.Join(dir, "pp"+strconv.Itoa(pp))
		var errb bytes.Buffer
		if code := run([]string{"compile", mlp, "--pp", strconv.Itoa(pp), "--microbatches", "4", "-o", out}, &env{stdout: &bytes.Buffer{}, stderr: &errb}); code != 0 {
			return nil, errors.New(errb.String())
		}
		plans[pp] = out
	}
	return plans, nil
})

func fakePlan(t *testing.T, world int) string {
	t.Helper()
	plans, err := fakePlans()
	if err != nil {
		t.Fatal(err)
	}
	return plans[world]
}

// launchFake runs `ppc run PLAN --nproc n --steps 3` with fake workers of the given mode;
// sigs feeds the interrupts hook (nil: none).
type launchRun struct {
	code           int
	stdout, stderr *syncBuffer
	elapsed        time.Duration
}

func startFake(t *testing.T, mode string, n int, sigs chan os.Signal) (*launchRun, <-chan struct{}) {
	t.Helper()
	t.Setenv(fakeWorkerVar, mode)
	plan := fakePlan(t, n)
	r := &launchRun{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	e := &env{stdout: r.stdout, stderr: r.stderr}
	if sigs != nil {
		e.interrupts = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		r.code = run([]string{"run", plan, "--nproc", strconv.Itoa(n), "--steps", "3"}, e)
		r.elapsed = time.Since(start)
	}()
	return r, done
}

func launchFake(t *testing.T, mode string, n int) *launchRun {
	t.Helper()
	r, done := startFake(t, mode, n, nil)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("ppc run --nproc did not return\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	return r
}

// Every worker gets the torchrun variables of its rank, the run's token, the plan's
// arguments without --nproc and its own process group; rank 0's stdout passes unprefixed,
// the rest line by line with the rank's prefix (once).
func TestNprocAllSucceed(t *testing.T) {
	r := launchFake(t, "ok", 3)
	out, errOut := r.stdout.String(), r.stderr.String()
	if r.code != 0 || errOut == "" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, out, errOut)
	}
	plan := fakePlan(t, 3)
	m := waitFor(t, r.stdout, `(?m)^(\[rank \d\] )?launch ppc rank=(\d) world=3 local=(\d)/3 master=127\.0\.0\.1:(\d+) token=64 runid=16 fd=(-?\d) pid=\d+ pgleader=true args=(.*)$`, 3)
	ports := map[string]bool{}
	for _, l := range m {
		prefix, rank, local, port, fd, args := l[1], l[2], l[3], l[4], l[5], l[6]
		wantPrefix, wantFD := "[rank "+rank+"] ", "-1"
		if rank == "0" {
			wantPrefix, wantFD = "", "3"
		}
		if prefix != wantPrefix || local != rank || fd != wantFD || args != fmt.Sprintf("[\"run\" %q \"--steps=3\"]", plan) {
			t.Errorf("rank %s: prefix %q, local rank %s, store fd %s, args %s", rank, prefix, local, fd, args)
		}
		ports[port] = true
	}
	if len(ports) != 1 {
		t.Errorf("the workers were told different ports: %v", ports)
	}
	for rank := range 3 {
		for _, want := range []string{fmt.Sprintf("[rank %d] log line\n", rank), fmt.Sprintf("[rank %d] prefixed by the worker\n", rank)} {
			if strings.Count(errOut, want) != 1 {
				t.Errorf("stderr holds %q %d times:\n%s", want, strings.Count(errOut, want), errOut)
			}
		}
	}
	for _, l := range strings.SplitAfter(errOut, "\n") {
		if l != "" && !regexp.MustCompile(`^\[rank \d\] [^\[]*\n$`).MatchString(l) {
			t.Errorf("stderr line %q is not one whole line of one rank", l)
		}
	}
}

// Real workers (this test binary as ppc) train the plan.
func TestNprocRealWorkers(t *testing.T) {
	code, out, errOut := ppc(t, "", "run", fakePlan(t, 2), "--nproc", "2", "--steps", "2")
	if code != 0 || !regexp.MustCompile(`(?m)^step 2 loss=`).MatchString(out) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// A failed worker fails the run, named; a worker's bad-input exit is the run's.
func TestNprocWorkerFails(t *testing.T) {
	r := launchFake(t, "fail", 3)
	errOut := r.stderr.String()
	if r.code != exitFailed || !strings.Contains(errOut, "[rank 2] ppc run: something went wrong\n") ||
		!regexp.MustCompile(`ppc run: 1 of 3 workers failed: rank 2 \(pid \d+\) exited with status 1\n$`).MatchString(errOut) {
		t.Fatalf("exit %d, stderr:\n%s", r.code, errOut)
	}
	r = launchFake(t, "bad", 2)
	errOut = r.stderr.String()
	if r.code != exitInput || !regexp.MustCompile(`ppc run: 1 of 2 workers failed: rank 1 \(pid \d+\) exited with status 2\n$`).MatchString(errOut) || strings.Contains(errOut, "usage:") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, errOut)
	}
}

func TestNprocWorkerKilled(t *testing.T) {
	r := launchFake(t, "kill", 3)
	errOut := r.stderr.String()
	if r.code != exitFailed || !regexp.MustCompile(`ppc run: 1 of 3 workers failed: rank 2 \(pid \d+\) was killed by SIGKILL\n$`).MatchString(errOut) {
		t.Fatalf("exit %d, stderr:\n%s", r.code, errOut)
	}
}

// A worker that outlives the grace period after another failed is killed, and says so.
func TestNprocGracePeriod(t *testing.T) {
	defer func(g time.Duration) { workerGrace = g }(workerGrace)
	workerGrace = 300 * time.Millisecond
	r := launchFake(t, "hang", 2)
	errOut := r.stderr.String()
	for _, re := range []string{
		`ppc run: rank 1 \(pid \d+\) exited with status 1; waiting up to 300ms for the other ranks to stop\n`,
		`ppc run: killing rank 0 \(pid \d+\): still running 300ms after rank 1 \(pid \d+\) failed\n`,
		`ppc run: 2 of 2 workers failed: rank 1 \(pid \d+\) exited with status 1; then rank 0 \(pid \d+\) was killed by SIGKILL\n$`,
	} {
		if !regexp.MustCompile(re).MatchString(errOut) {
			t.Errorf("stderr lacks %s", re)
		}
	}
	if r.code != exitFailed || r.elapsed > 30*time.Second {
		t.Fatalf("exit %d after %s, stderr:\n%s", r.code, r.elapsed, errOut)
	}
}

// The summary names first the rank whose failure came first, as the workers report it, not
// the first to exit.
func TestNprocNamesFirstFailure(t *testing.T) {
	r := launchFake(t, "cause", 2)
	errOut := r.stderr.String()
	for _, re := range []string{
		`ppc run: rank 0 \(pid \d+\) exited with status 1 after rank 1 \(pid \d+\) failed; waiting up to 1m30s for the other ranks to stop\n`,
		`ppc run: 2 of 2 workers failed: rank 1 \(pid \d+\) exited with status 1; then rank 0 \(pid \d+\) exited with status 1\n$`,
	} {
		if !regexp.MustCompile(re).MatchString(errOut) {
			t.Errorf("stderr lacks %s", re)
		}
	}
	if r.code != exitFailed {
		t.Fatalf("exit %d, stderr:\n%s", r.code, errOut)
	}
}

// A worker the others report as not responding (stopped, wedged: it will not exit on its
// own) is killed at once, not after the grace period.
func TestNprocKillsUnresponsive(t *testing.T) {
	defer func(g time.Duration) { workerGrace = g }(workerGrace)
	workerGrace = time.Hour
	r := launchFake(t, "unresponsive", 2)
	errOut := r.stderr.String()
	for _, re := range []string{
		`ppc run: rank 0 \(pid \d+\) exited with status 1 after rank 1 \(pid \d+\) stopped responding; waiting up to 1h0m0s for the other ranks to stop\n`,
		`ppc run: killing rank 1 \(pid \d+\): rank 0 \(pid \d+\) found it not responding\n`,
		`ppc run: 2 of 2 workers failed: rank 1 \(pid \d+\) was killed by SIGKILL; then rank 0 \(pid \d+\) exited with status 1\n$`,
	} {
		if !regexp.MustCompile(re).MatchString(errOut) {
			t.Errorf("stderr lacks %s", re)
		}
	}
	if r.code != exitFailed {
		t.Fatalf("exit %d, stderr:\n%s", r.code, errOut)
	}
}

// A worker's failure report names the rank the rendezvous blamed (and whether it stopped
// responding), or the worker itself for its own failure; an interrupt is not a failure.
func TestReportExit(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{errors.New("a kernel failed"), `{"cause":2}`},
		{&runtime.RunError{Step: 3, Err: &dist.RemoteError{Msg: "rank 1 died", Rank: 1}}, `{"cause":1}`},
		{&dist.RemoteError{Msg: "rank 0 stopped responding", Rank: 0, Unresponsive: true}, `{"cause":0,"unresponsive":true}`},
		{&dist.RemoteError{Msg: "not every rank joined", Rank: -1}, `{"cause":2}`},
		{interrupted{"interrupted by SIGTERM"}, ``},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		fd, err := syscall.Dup(int(w.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		reportExit(&launchInfo{Rank: 2, ReportFD: fd}, c.err)
		if c.want == "" {
			syscall.Close(fd)
		}
		r.SetReadDeadline(time.Now().Add(5 * time.Second)) // a report that never ends fails, not hangs
		b, _ := io.ReadAll(r)
		r.Close()
		if got := strings.TrimSpace(string(b)); got != c.want {
			t.Errorf("%v: reported %q, want %q", c.err, got, c.want)
		}
	}
}

// An interrupt reaches every worker once, as SIGTERM; they exit 130, and so does the run.
// A second interrupt kills workers that do not stop, without a second SIGTERM. (Two
// SIGTERMs sent back to back may reach a worker as one: the kernel does not queue them.)
func TestNprocInterrupt(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	r, done := startFake(t, "term", 2, sigs)
	waitFor(t, r.stdout, `(?m)ready$`, 2)
	sigs <- os.Interrupt
	<-done
	out, errOut := r.stdout.String(), r.stderr.String()
	if r.code != exitInterrupted || !strings.Contains(errOut, "ppc run: SIGINT: stopping the workers") ||
		!strings.HasSuffix(errOut, "ppc run: interrupted by SIGINT; the workers stopped (their messages above say what each wrote)\n") {
		t.Fatalf("exit %d\nstderr:\n%s", r.code, errOut)
	}
	for _, want := range []string{"received 1 signal(s): SIGTERM\n", "[rank 1] received 1 signal(s): SIGTERM\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}

	r, done = startFake(t, "stubborn", 2, sigs)
	waitFor(t, r.stdout, `(?m)ready$`, 2)
	sigs <- os.Interrupt
	waitFor(t, r.stdout, `(?m)got SIGTERM$`, 2)
	sigs <- syscall.SIGTERM
	<-done
	errOut = r.stderr.String()
	if n := strings.Count(r.stdout.String(), "got SIGTERM\n"); n != 2 {
		t.Errorf("the 2 workers got SIGTERM %d times:\n%s", n, r.stdout)
	}
	if r.code != exitInterrupted || !strings.Contains(errOut, "ppc run: SIGTERM again: killing the workers\n") ||
		!strings.HasSuffix(errOut, "ppc run: interrupted by SIGINT; the workers were killed (their messages above say what each wrote)\n") {
		t.Fatalf("exit %d\nstderr:\n%s", r.code, errOut)
	}
}

// Rank 0 inherits the listening socket of MASTER_PORT as fd 3: a connection to the port
// reaches it.
func TestNprocStoreSocket(t *testing.T) {
	r, done := startFake(t, "store", 2, nil)
	m := waitFor(t, r.stdout, `(?m)^launch ppc rank=0 .*master=127\.0\.0\.1:(\d+) `, 1)
	port := m[0][1]
	waitFor(t, r.stdout, `(?m)^store listening on 127\.0\.0\.1:`+port+`$`, 1)
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(c, "hello")
	c.Close()
	<-done
	if r.code != 0 || !strings.Contains(r.stdout.String(), "store received \"hello\\n\"\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}

	// The launcher closed its copy of the socket: with rank 0 gone, nothing listens on the
	// port, even while the launcher still runs.
	r = launchFake(t, "port-closes", 2)
	if r.code != 0 || !strings.Contains(r.stdout.String(), "[rank 1] connection refused once rank 0 exited\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestNprocUsage(t *testing.T) {
	plan := fakePlan(t, 2)
	runCases(t, []cliCase{
		{args: []string{"run", plan, "--nproc", "3"}, code: exitInput,
			want: []string{"--nproc 3: the plan " + plan + " has 2 ranks (pp 2 × dp 1 × tp 1); use --nproc 2, or recompile for 3 ranks", "usage: ppc run"}},
		{args: []string{"run", plan, "--nproc", "-1"}, code: exitInput, want: []string{"--nproc must be positive, got -1"}},
		{args: []string{"run", plan, "--nproc", "two"}, code: exitInput, want: []string{`--nproc "two": want an integer`}},
		{args: []string{"run", filepath.Join(plan, "missing"), "--nproc", "2"}, code: exitInput, want: []string{"no such plan directory"}},
	})
	// Started by a launcher as one of several: --nproc would start the plan once per process.
	t.Setenv("RANK", "1")
	t.Setenv("WORLD_SIZE", "2")
	t.Setenv("MASTER_ADDR", "10.0.0.1")
	t.Setenv("MASTER_PORT", "29500")
	runCases(t, []cliCase{{args: []string{"run", plan, "--nproc", "2"}, code: exitInput,
		want: []string{"--nproc starts every rank on this machine, but torchrun started this process as rank 1 of 2; let torchrun start one ppc run per rank, without --nproc"}}})
}

// A worker that cannot be started fails the run (exit 1), after stopping those started.
func TestNprocCannotStart(t *testing.T) {
	defer func(f func() (string, error)) { workerExecutable = f }(workerExecutable)
	workerExecutable = func() (string, error) { return filepath.Join(t.TempDir(), "no-ppc"), nil }
	code, _, errOut := ppc(t, "", "run", fakePlan(t, 2), "--nproc", "2")
	if code != exitFailed || !strings.Contains(errOut, "ppc run: --nproc: starting rank 0: fork/exec ") || !strings.Contains(errOut, "no-ppc: no such file or directory") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
}

// A failing run shows what each rank said, prefixed, then the summary (an example for the
// reader, and a check of the whole stderr).
func TestNprocOutputExample(t *testing.T) {
	r := launchFake(t, "fail", 2)
	got := regexp.MustCompile(`pid \d+`).ReplaceAllString(r.stderr.String(), "pid N")
	// The ranks' lines come in any order; the supervisor says it waits for rank 0 when rank
	// 1 exits first.
	var lines, ranks []string
	for _, l := range strings.Split(got, "\n") {
		switch {
		case strings.HasPrefix(l, "[rank "):
			ranks = append(ranks, l)
		case l != "ppc run: rank 1 (pid N) exited with status 1; waiting up to 1m30s for the other ranks to stop":
			lines = append(lines, l)
		}
	}
	sort.Strings(ranks)
	lines = append(ranks, lines...)
	want := `
[rank 0] log line
[rank 0] prefixed by the worker
[rank 1] log line
[rank 1] ppc run: something went wrong
[rank 1] prefixed by the worker
ppc run: 1 of 2 workers failed: rank 1 (pid N) exited with status 1
`
	if strings.Join(lines, "\n") != want[1:] {
		t.Fatalf("stderr:\n%s\nwant (sorted):\n%s", got, want[1:])
	}
}

func TestLineWriter(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	w := &lineWriter{mu: &mu, w: &out, prefix: "[rank 1] "}
	w.Write([]byte("a"))
	w.Write([]byte("b\nc\n[rank 1] d\n[rank 2] e\nf"))
	if out.String() != "[rank 1] ab\n[rank 1] c\n[rank 1] d\n[rank 1] [rank 2] e\n" {
		t.Fatalf("%q", out.String())
	}
	w.flush()
	if !strings.HasSuffix(out.String(), "[rank 1] f\n") {
		t.Fatalf("the last line without its newline: %q", out.String())
	}
	// A line longer than maxLine is cut into whole lines, each prefixed.
	out.Reset()
	w.Write(bytes.Repeat([]byte("x"), maxLine+10))
	w.Write([]byte("\n"))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "[rank 1] "+strings.Repeat("x", maxLine) || lines[1] != "[rank 1] "+strings.Repeat("x", 10) {
		t.Fatalf("%d lines of %d bytes", len(lines), len(lines[0]))
	}
}

// detectLaunch, launcher by launcher.
func TestDetectLaunch(t *testing.T) {
	torchrun := map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
		"MASTER_ADDR": "node01", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "job7"}
	slurm := map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
		"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[07-09,12]"}
	ompi := map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
		"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "OMPI_MCA_ess_base_jobid": "4711"}
	pmi := map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "1234"}
	ppcw := map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
		"MASTER_PORT": "40000", "PPC_LAUNCHER": "ppc", "PPC_RUN_TOKEN": "secret", "PPC_RUN_ID": "abcd", "PPC_STORE_FD": "3"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want *launchInfo // Token not compared
	}{
		{"nothing", map[string]string{"HOME": "/root", "MASTER_ADDR": "x", "LOCAL_RANK": "0"}, nil},
		{"ppc --nproc", ppcw, &launchInfo{Launcher: "ppc", Rank: 0, World: 2, LocalRank: 0, LocalWorld: 2, MasterAddr: "127.0.0.1", MasterPort: 40000, RunID: "abcd", StoreFD: 3}},
		{"ppc inside torchrun and slurm", with(ppcw, "SLURM_PROCID", "3", "SLURM_STEP_ID", "0", "SLURM_NTASKS", "4", "TORCHELASTIC_RUN_ID", "x"),
			&launchInfo{Launcher: "ppc", Rank: 0, World: 2, LocalRank: 0, LocalWorld: 2, MasterAddr: "127.0.0.1", MasterPort: 40000, RunID: "abcd", StoreFD: 3}},
		{"torchrun", torchrun, &launchInfo{Launcher: "torchrun", Rank: 3, World: 8, LocalRank: 1, LocalWorld: 2, MasterAddr: "node01", MasterPort: 29400, RunID: "job7", StoreFD: -1}},
		{"torchrun by hand, no local rank", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "::1", "MASTER_PORT": "1"},
			&launchInfo{Launcher: "torchrun", Rank: 0, World: 1, LocalRank: -1, MasterAddr: "::1", MasterPort: 1, StoreFD: -1}},
		{"torchrun inside an srun step", with(slurm, "RANK", "3", "WORLD_SIZE", "8", "MASTER_ADDR", "node01", "MASTER_PORT", "29400"),
			&launchInfo{Launcher: "torchrun", Rank: 3, World: 8, LocalRank: -1, MasterAddr: "node01", MasterPort: 29400, StoreFD: -1}},
		{"slurm", slurm, &launchInfo{Launcher: "slurm", Rank: 5, World: 8, LocalRank: 1, LocalWorld: 2, MasterAddr: "gpu07", MasterPort: 10000 + 123456%20000, RunID: "123456", StoreFD: -1}},
		{"slurm, last node", with(slurm, "SLURM_NODEID", "3", "SLURM_LOCALID", "0", "SLURM_PROCID", "7"),
			&launchInfo{Launcher: "slurm", Rank: 7, World: 8, LocalRank: 0, LocalWorld: 1, MasterAddr: "gpu07", MasterPort: 10000 + 123456%20000, RunID: "123456", StoreFD: -1}},
		{"slurm, step variables and MASTER_*", with(slurm, "SLURM_STEP_NUM_TASKS", "6", "SLURM_STEP_TASKS_PER_NODE", "3(x2)", "SLURM_NODEID", "1",
			"SLURM_STEP_NODELIST", "a[1-2]b", "MASTER_PORT", "29500"),
			&launchInfo{Launcher: "slurm", Rank: 5, World: 6, LocalRank: 1, LocalWorld: 3, MasterAddr: "a1b", MasterPort: 29500, RunID: "123456", StoreFD: -1}},
		{"slurm, MASTER_ADDR wins over the node list", with(slurm, "MASTER_ADDR", "login1", "SLURM_JOB_NODELIST", "", "SLURM_TASKS_PER_NODE", "", "SLURM_NTASKS_PER_NODE", "2"),
			&launchInfo{Launcher: "slurm", Rank: 5, World: 8, LocalRank: 1, LocalWorld: 2, MasterAddr: "login1", MasterPort: 10000 + 123456%20000, RunID: "123456", StoreFD: -1}},
		{"slurm batch script (no step)", with(slurm, "SLURM_STEP_ID", "", "SLURM_PROCID", "0"), nil},
		{"slurm extern step", with(slurm, "SLURM_STEP_ID", "extern"), nil},
		{"slurm batch step by number", with(slurm, "SLURM_STEP_ID", "4294967291"), nil},
		{"slurm, one task (srun --pty bash)", with(slurm, "SLURM_NTASKS", "1", "SLURM_PROCID", "0"), nil},
		{"open mpi", ompi, &launchInfo{Launcher: "mpi", Rank: 2, World: 4, LocalRank: 0, LocalWorld: 2, MasterAddr: "10.0.0.1", MasterPort: 29500, RunID: "4711", StoreFD: -1}},
		{"open mpi inside an sbatch job", with(ompi, "SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_STEP_ID", "0"),
			&launchInfo{Launcher: "mpi", Rank: 2, World: 4, LocalRank: 0, LocalWorld: 2, MasterAddr: "10.0.0.1", MasterPort: 29500, RunID: "4711", StoreFD: -1}},
		{"intel mpi", pmi, &launchInfo{Launcher: "mpi", Rank: 1, World: 2, LocalRank: 1, LocalWorld: 2, MasterAddr: "h0", MasterPort: 1234, StoreFD: -1}},
		{"mpich, PMI_LOCAL_*", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "3", "PMI_LOCAL_RANK": "0", "PMI_LOCAL_SIZE": "3", "MASTER_ADDR": "h0", "PMI_JOBID": "j"},
			&launchInfo{Launcher: "mpi", Rank: 0, World: 3, LocalRank: 0, LocalWorld: 3, MasterAddr: "h0", MasterPort: 29500, RunID: "j", StoreFD: -1}},
		{"srun --mpi=pmi2: slurm", with(slurm, "PMI_RANK", "5", "PMI_SIZE", "8"),
			&launchInfo{Launcher: "slurm", Rank: 5, World: 8, LocalRank: 1, LocalWorld: 2, MasterAddr: "gpu07", MasterPort: 10000 + 123456%20000, RunID: "123456", StoreFD: -1}},
		{"mpiexec inside an allocation: mpi", with(slurm, "PMI_RANK", "1", "PMI_SIZE", "16", "MASTER_ADDR", "gpu07"),
			&launchInfo{Launcher: "mpi", Rank: 1, World: 16, LocalRank: -1, MasterAddr: "gpu07", MasterPort: 29500, StoreFD: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := detectLaunch(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil || got == nil {
				if got != tc.want {
					t.Fatalf("got %+v, want %+v", got, tc.want)
				}
				return
			}
			if len(got.Token) < 6 {
				t.Errorf("token %q", got.Token)
			}
			got.Token = ""
			if *got != *tc.want {
				t.Fatalf("got  %+v\nwant %+v", *got, *tc.want)
			}
		})
	}
}

// Tokens: PPC_RUN_TOKEN wins; a derived one is the same for every process of a job and
// differs between jobs.
func TestRunToken(t *testing.T) {
	token := func(kv ...string) string {
		m := map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "a"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		li, err := detectLaunch(func(k string) string { return m[k] })
		if err != nil {
			t.Fatal(err)
		}
		return li.Token
	}
	base := token()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(base) || token("RANK", "1", "LOCAL_RANK", "1") != base {
		t.Fatalf("derived token %q differs between ranks of one job", base)
	}
	for _, kv := range [][]string{{"TORCHELASTIC_RUN_ID", "b"}, {"MASTER_PORT", "2"}, {"MASTER_ADDR", "g"}, {"WORLD_SIZE", "3"}} {
		if token(kv...) == base {
			t.Errorf("%s=%s gives the same token", kv[0], kv[1])
		}
	}
	if got := token("PPC_RUN_TOKEN", "s3cret"); got != "s3cret" {
		t.Errorf("PPC_RUN_TOKEN: token %q", got)
	}
	slurmTok := func(step string) string {
		m := map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": step, "SLURM_NODELIST": "n1"}
		li, err := detectLaunch(func(k string) string { return m[k] })
		if err != nil {
			t.Fatal(err)
		}
		return li.Token
	}
	if slurmTok("0") == slurmTok("1") {
		t.Error("two steps of a Slurm job share a token")
	}
}

func TestDetectLaunchErrors(t *testing.T) {
	torchrun := []string{"RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "29500"}
	slurm := []string{"SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_STEP_ID", "0", "SLURM_JOB_ID", "77", "SLURM_JOB_NODELIST", "n[1-2]"}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"RANK", "1"}, "RANK=1 is set but WORLD_SIZE is not: set both, or neither"},
		{[]string{"WORLD_SIZE", "4"}, "WORLD_SIZE=4 is set but RANK is not"},
		{append(torchrun, "RANK", "x"), `RANK="x": want a non-negative integer`},
		{append(torchrun, "RANK", "-1"), `RANK="-1": want a non-negative integer`},
		{append(torchrun, "WORLD_SIZE", "1.5"), `WORLD_SIZE="1.5": want a non-negative integer`},
		{append(torchrun, "WORLD_SIZE", "99999999999"), `WORLD_SIZE="99999999999": larger than any run`},
		{append(torchrun, "RANK", "2"), "RANK=2 is not below WORLD_SIZE=2"},
		{append(torchrun, "WORLD_SIZE", "0", "RANK", "0"), "WORLD_SIZE=0: a run needs at least one process"},
		{append(torchrun, "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2"), "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
		{append(torchrun, "LOCAL_RANK", "a"), `LOCAL_RANK="a": want a non-negative integer`},
		{append(torchrun, "MASTER_ADDR", ""), "RANK=1 and WORLD_SIZE=2 are set but MASTER_ADDR is not: export MASTER_ADDR=<host of rank 0> MASTER_PORT=29500"},
		{append(torchrun, "MASTER_PORT", ""), "MASTER_ADDR=h is set but MASTER_PORT is not: export MASTER_PORT=29500"},
		{append(torchrun, "MASTER_PORT", "65536"), `MASTER_PORT="65536": want a TCP port, 1 to 65535`},
		{append(torchrun, "MASTER_PORT", "0"), `MASTER_PORT="0": want a TCP port`},
		{append(torchrun, "MASTER_PORT", "http"), `MASTER_PORT="http": want a TCP port`},
		{append(torchrun, "MASTER_ADDR", "http://h"), `MASTER_ADDR="http://h": want the host name or IP address of rank 0`},
		{append(torchrun, "PPC_LAUNCHER", "deepspeed"), `PPC_LAUNCHER="deepspeed": the only launcher that sets it is ppc run --nproc`},
		{append(torchrun, "PPC_LAUNCHER", "ppc"), "PPC_LAUNCHER=ppc is set but PPC_RUN_TOKEN is not"},
		{append(torchrun, "PPC_LAUNCHER", "ppc", "PPC_RUN_TOKEN", "t", "PPC_STORE_FD", "3"), "PPC_STORE_FD=3 is set for RANK=1: only rank 0 serves the store"},
		{append(torchrun, "PPC_LAUNCHER", "ppc", "PPC_RUN_TOKEN", "t", "RANK", "0", "PPC_STORE_FD", "1"), `PPC_STORE_FD="1": want a file descriptor number, 3 or more`},
		{[]string{"OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2"}, "started by MPI as OMPI_COMM_WORLD_RANK=1 of OMPI_COMM_WORLD_SIZE=2, which gives no rendezvous address: run `export MASTER_ADDR=$(hostname)` on the host of rank 0 before starting, and pass it on to every rank (mpirun -np 4 -x MASTER_ADDR ppc run DIR); MASTER_PORT defaults to 29500"},
		{[]string{"OMPI_COMM_WORLD_SIZE", "2"}, "OMPI_COMM_WORLD_SIZE=2 is set but OMPI_COMM_WORLD_RANK is not"},
		{[]string{"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "2", "MASTER_ADDR", "h"}, "OMPI_COMM_WORLD_RANK=3 is not below OMPI_COMM_WORLD_SIZE=2"},
		{[]string{"PMI_RANK", "0", "PMI_SIZE", "2"}, "started by MPI as PMI_RANK=0 of PMI_SIZE=2, which gives no rendezvous address: run `export MASTER_ADDR=$(hostname)`"},
		{[]string{"PMI_RANK", "0", "PMI_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "-5"}, `MASTER_PORT="-5": want a TCP port`},
		{[]string{"PMI_RANK", "0", "PMI_SIZE", "2", "MASTER_ADDR", "h", "MPI_LOCALNRANKS", "0"}, "MPI_LOCALNRANKS=0: a machine of the run has at least one process"},
		{[]string{"SLURM_PROCID", "1", "SLURM_STEP_ID", "0"}, "SLURM_PROCID=1 is set but SLURM_NTASKS is not"},
		{append(slurm, "SLURM_PROCID", "2"), "SLURM_PROCID=2 is not below SLURM_NTASKS=2"},
		{append(slurm, "SLURM_JOB_NODELIST", "n[1-2"), `SLURM_JOB_NODELIST="n[1-2": [ at offset 1 is not closed; export MASTER_ADDR=<host of task 0> to bypass it`},
		{append(slurm, "SLURM_JOB_NODELIST", ""), "started by srun as SLURM_PROCID=1 of 2, but neither MASTER_ADDR nor SLURM_JOB_NODELIST is set"},
		{append(slurm, "SLURM_JOB_ID", "7_3"), `SLURM_JOB_ID="7_3" gives no default rendezvous port: export MASTER_PORT=29500`},
		{append(slurm, "SLURM_TASKS_PER_NODE", "2(3)"), `SLURM_TASKS_PER_NODE="2(3)": "2(3)" is not COUNT or COUNT(xREPEAT)`},
		{append(slurm, "SLURM_NODEID", "one", "SLURM_TASKS_PER_NODE", "2"), `SLURM_NODEID="one": want a non-negative integer`},
		{append(slurm, "SLURM_LOCALID", "-1"), `SLURM_LOCALID="-1": want a non-negative integer`},
		{append(slurm, "MASTER_PORT", "99999"), `MASTER_PORT="99999": want a TCP port`},
	} {
		m := map[string]string{}
		for i := 0; i < len(tc.env); i += 2 {
			m[tc.env[i]] = tc.env[i+1]
		}
		li, err := detectLaunch(func(k string) string { return m[k] })
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %+v, %v\nwant the usage error %q", tc.env, li, err, tc.want)
		}
	}
}

func TestFirstHost(t *testing.T) {
	for _, tc := range []struct{ list, want, err string }{
		{"node[01-04,07],gpu5", "node01", ""},
		{"gpu5,node[01-04,07]", "gpu5", ""},
		{"a[1-2]b", "a1b", ""},
		{"a[1-2]b[3-4]", "a1b3", ""},
		{"a[1-2]b,c", "a1b", ""},
		{"[7,1-3]x", "7x", ""},
		{"n[007]", "n007", ""},
		{"host.example.com", "host.example.com", ""},
		{"login-1_a", "login-1_a", ""},
		{"", "", "empty host name"},
		{"a,,b", "", "empty host name"},
		{"a,", "", "empty host name"},
		{"a[1-2", "", "[ at offset 1 is not closed"},
		{"a1-2]", "", "] without [ at offset 4"},
		{"a[1[2]]", "", "[ inside [ at offset 3"},
		{"a[]", "", "empty []"},
		{"a[x-y]", "", `[x-y]: "x-y" is not N or N-M`},
		{"a[1-]", "", `[1-]: "1-" is not N or N-M`},
		{"a[1,,2]", "", `[1,,2]: "" is not N or N-M`},
		{"a[1-2-3]", "", `"1-2-3" is not N or N-M`},
		{"a[+1]", "", `"+1" is not N or N-M`},
		{"a[4-2]", "", "[4-2]: range 4-2 runs backwards"},
		{"a b", "", `character ' ' in host name "a b"`},
		{"ok,bad[2-1]", "", "range 2-1 runs backwards"},
	} {
		got, err := firstHost(tc.list)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("firstHost(%q) = %q, %v; want error %q", tc.list, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("firstHost(%q) = %q, %v; want %q", tc.list, got, err, tc.want)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	got, err := parseTasksPerNode("4(x2),3")
	if err != nil || fmt.Sprint(got) != "[4 4 3]" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "4(x0)", "0", "x", "4(2)", "4(x2", "4,,3", "4(x99999999)"} {
		if _, err := parseTasksPerNode(bad); err == nil {
			t.Errorf("%q parses", bad)
		}
	}
}

// FuzzLaunchLists: Slurm's compressed host lists and tasks-per-node strings, as the
// environment gives them, parse without a panic; a host list that parses names a host.
func FuzzLaunchLists(f *testing.F) {
	for _, s := range []string{"node[01-04,07],gpu5", "a[1-2]b[3-4]", "n[", "4(x2),3", "x[9-1]", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if h, err := firstHost(s); err == nil && h == "" {
			t.Fatalf("firstHost(%q) is empty without an error", s)
		}
		parseTasksPerNode(s)
	})
}
