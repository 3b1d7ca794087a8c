package dist_test

import (
	"errors"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	. "ppc.dev/ppc/runtime/dist"
	"ppc.dev/ppc/runtime/fault"
)

// The start-up and failure handling of multi-process runs: the rendezvous, the peers'
// connections, the automatic hang limit, saves that fail, ranks that leave. Every limit is
// made short here (JoinOptions, or the hooks of export_test.go); the failsafes below only
// turn a hang into a failure instead of a test binary that never ends.

// joining is a rendezvous under way in a test: ranks joining as goroutines of this process,
// each process's results under the order it was started in (two may claim one rank).
type joining struct {
	t      *testing.T
	dir    string
	master string
	ln     net.Listener
	mu     sync.Mutex
	logs   []string
	wg     sync.WaitGroup
	n      int
	jobs   map[int]*runtime.Job
	procs  map[int]*Process
	errs   map[int]error
}

func newJoining(t *testing.T, dir string) *joining {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	j := &joining{t: t, dir: dir, master: ln.Addr().String(), ln: ln, jobs: map[int]*runtime.Job{}, procs: map[int]*Process{}, errs: map[int]error{}}
	t.Cleanup(func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, p := range j.procs {
			if p != nil {
				go p.Close()
			}
		}
	})
	return j
}

func (j *joining) log(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.logs = append(j.logs, s)
}

func (j *joining) logText() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.logs, "\n")
}

// start joins rank after delay; its results are under the number start returns (0, 1, …).
func (j *joining) start(rank, world int, delay time.Duration, o JoinOptions) int {
	j.wg.Add(1)
	id := j.n
	j.n++
	go func() {
		defer j.wg.Done()
		time.Sleep(delay)
		job, err := runtime.LoadRank(j.dir, cpu.New(), rank)
		var p *Process
		if err == nil {
			o.Rank, o.World, o.Master = rank, world, j.master
			if rank == 0 {
				o.StoreListener = j.ln
			}
			if o.Token == "" {
				o.Token = "test-token"
			}
			o.Log = j.log
			p, err = job.Join(o)
		}
		j.mu.Lock()
		j.jobs[id], j.procs[id], j.errs[id] = job, p, err
		j.mu.Unlock()
	}()
	return id
}

// wait waits for every started rank's Join, failing the test after limit.
func (j *joining) wait(limit time.Duration) {
	done := make(chan struct{})
	go func() { j.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		j.t.Fatalf("the ranks did not return from Join within %s; log:\n%s", limit, j.logText())
	}
}

// TestJoinLateRank: a rank that joins well after the heartbeat limit (3 s late, heartbeat
// 1 s) joins, and the run trains: the ranks waiting for it are not declared dead, since they
// send nothing until the run starts. Meanwhile the waiting rank says whom it waits for.
func TestJoinLateRank(t *testing.T) {
	defer SetJoinNotes(1500*time.Millisecond, 500*time.Millisecond)() // the store pings each second
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	j := newJoining(t, dir)
	o := JoinOptions{Heartbeat: time.Second, JoinTimeout: 30 * time.Second}
	j.start(0, 2, 0, o)
	j.start(1, 2, 3*time.Second, o)
	j.wait(time.Minute)
	for r, err := range j.errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	jobs := []*runtime.Job{j.jobs[0], j.jobs[1]}
	for _, job := range jobs {
		job.Init(1)
	}
	if _, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1}); errs[0] != nil || errs[1] != nil {
		t.Fatalf("step after a late join: %v", errs)
	}
	if log := j.logText(); !strings.Contains(log, "rank 0: joined the rendezvous") || !strings.Contains(log, "waiting for rank 1 to join (1 of 2 joined)") {
		t.Errorf("rank 0 did not say it waits for rank 1:\n%s", log)
	}
}

// TestJoinMissingRank: when a rank never joins (its process died before, or a RANK typo
// started two processes as one rank and none as another), every rank that did stops at the
// join limit, naming the missing rank and the process refused meanwhile — not a live rank
// "stopped responding" at the heartbeat limit.
func TestJoinMissingRank(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(3, 1, 1, 0))
	j := newJoining(t, dir)
	o := JoinOptions{Heartbeat: time.Second, JoinTimeout: 4 * time.Second}
	j.start(0, 3, 0, o)
	j.start(1, 3, 0, o)
	j.start(1, 3, 500*time.Millisecond, o) // the typo: a second rank 1
	j.wait(time.Minute)
	// The rank 1 that came second was refused alone, as bad input; rank 0 and the other
	// rank 1 name rank 2.
	re := regexp.MustCompile(`^rank 2 did not join the rendezvous within 4s \(ranks 0, 1 did\): start one process per rank, 0 to 2, each with its own RANK; refused meanwhile: rank 1 \(.*\): rank 1 \(.*\) joined first$`)
	refused, named := 0, 0
	for id, err := range j.errs {
		var remote *RemoteError
		var ie *fault.InputError
		switch {
		case errors.As(err, &ie) && strings.Contains(err.Error(), "refused by the rendezvous") && strings.Contains(err.Error(), "joined first"):
			refused++
		case errors.As(err, &remote) && re.MatchString(err.Error()):
			named++
		default:
			t.Errorf("process %d: %v", id, err)
		}
	}
	if refused != 1 || named != 2 {
		t.Errorf("%d refused, %d named the missing rank; want 1 and 2", refused, named)
	}
	if !strings.Contains(j.logText(), "joined first") {
		t.Errorf("the refusal was not logged:\n%s", j.logText())
	}
}

// TestJoinRendezvousAbsent: a rank whose rendezvous does not answer (rank 0's process is
// late, or gone) says so while it retries, and gives up at the join limit naming it.
func TestJoinRendezvousAbsent(t *testing.T) {
	defer SetJoinNotes(300*time.Millisecond, 500*time.Millisecond)()
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	job, err := runtime.LoadRank(dir, cpu.New(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	_, err = job.Join(JoinOptions{Rank: 1, World: 2, Master: addr, Token: "t", JoinTimeout: 2 * time.Second, Log: func(s string) { logs = append(logs, s) }})
	if err == nil || !strings.Contains(err.Error(), "rank 1 cannot reach the rendezvous at "+addr) {
		t.Fatalf("got %v", err)
	}
	log := strings.Join(logs, "\n")
	if !regexp.MustCompile(`rank 1: waited \d+s for the rendezvous at ` + regexp.QuoteMeta(addr) + `, which rank 0's process serves \(.*connection refused\); trying until 2s`).MatchString(log) {
		t.Fatalf("rank 1 did not say what it waits for:\n%s", log)
	}
}

// TestPeerPortIdleConnections: connections to a rank's peer port that never complete a
// handshake (anyone who can reach the port) do not delay the real peers: each handshake runs
// on its own. Eight idle connections with a 2 s handshake limit would take 16 s one after
// the other, past the 3 s join limit (+5 s of the rank's own).
func TestPeerPortIdleConnections(t *testing.T) {
	defer SetHandshakeWait(2 * time.Second)()
	var idle []net.Conn
	var idleMu sync.Mutex
	defer SetPeerListening(func(rank int, addr string) {
		if rank != 0 { // rank 0 accepts rank 1's connection
			return
		}
		for range 8 {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				idleMu.Lock()
				idle = append(idle, c)
				idleMu.Unlock()
			}
		}
	})()
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	j := newJoining(t, dir)
	o := JoinOptions{JoinTimeout: 3 * time.Second}
	j.start(0, 2, 0, o)
	j.start(1, 2, 0, o)
	j.wait(time.Minute)
	if j.errs[0] != nil || j.errs[1] != nil {
		t.Fatalf("join with idle connections at rank 0's peer port: %v, %v", j.errs[0], j.errs[1])
	}
	idleMu.Lock()
	n := len(idle)
	idleMu.Unlock()
	if n != 8 {
		t.Fatalf("%d idle connections made, want 8", n)
	}
	jobs := []*runtime.Job{j.jobs[0], j.jobs[1]}
	for _, job := range jobs {
		job.Init(1)
	}
	if _, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
}

// TestStrangerRefusedAfterStart: once the run has started, a process holding the token but
// running another plan, or started with other flags, is refused alone: the run goes on.
// (While the run starts, the same process stops it: TestHandRunPlanMismatch, cmd/ppc.)
func TestStrangerRefusedAfterStart(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	full := jobtest.GPT(2, 1, 1, 0)
	full.Recompute = "full"
	other := jobtest.Compile(t, gptPPM, full)
	var master string
	flags := []string{"seed=1", "steps=10"}
	jobs, _ := jobtest.JoinUnder(t, dir, JoinOptions{Flags: flags}, func(addr string) { master = addr })
	for _, job := range jobs {
		job.Init(1)
	}
	for _, c := range []struct {
		plan  string
		flags []string
		want  string
	}{
		{other, flags, "runs plan"},
		{dir, []string{"seed=2", "steps=10"}, "was started with --seed=2, but rank 0 with --seed=1"},
	} {
		stranger, err := runtime.LoadRank(c.plan, cpu.New(), 1)
		if err != nil {
			t.Fatal(err)
		}
		_, err = stranger.Join(JoinOptions{Rank: 1, World: 2, Master: master, Token: "test-token", Flags: c.flags, JoinTimeout: 5 * time.Second})
		var ie *fault.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "refused by the rendezvous") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("stranger: %v, want refused (%s)", err, c.want)
		}
		if _, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1}); errs[0] != nil || errs[1] != nil {
			t.Fatalf("the run after a stranger (%s) was refused: %v", c.want, errs)
		}
	}
}

// TestTCPAutoTimeout: without a --timeout, a wait for a peer fails after the automatic limit
// — the first step's, and after a step, the larger of the minimum and a multiple of the
// slowest step — with a message saying where the limit came from.
func TestTCPAutoTimeout(t *testing.T) {
	defer SetHangLimits(2*time.Second, time.Second, 10)()
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	hang := func(jobs []*runtime.Job) error {
		res := make(chan error, 1)
		go func() { _, err := jobs[0].Step(runtime.Options{Seed: 1}); res <- err }() // rank 1 never runs its step
		select {
		case err := <-res:
			return err
		case <-time.After(time.Minute):
			t.Fatal("no hang detected within a minute")
			return nil
		}
	}
	t.Run("first-step", func(t *testing.T) {
		jobs, _ := jobtest.Join(t, dir, JoinOptions{})
		jobs[0].Init(1)
		err := hang(jobs)
		if err == nil || !regexp.MustCompile(`rank 0 waited 2s for recv from rank 1 \(tag \d+\), and rank 1 sent nothing \(a hang, or far behind; the limit is 2s in the first step; ppc run --timeout sets another\)`).MatchString(err.Error()) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("after-a-step", func(t *testing.T) {
		jobs, _ := jobtest.Join(t, dir, JoinOptions{})
		for _, j := range jobs {
			j.Init(1)
		}
		if _, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1}); errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		err := hang(jobs)
		if err == nil || !regexp.MustCompile(`rank 0 waited \d+s for recv from rank 1 \(tag \d+\), and rank 1 sent nothing \(a hang, or far behind; the limit is 10× the slowest step so far \(.*\), at least 1s; ppc run --timeout sets another\)`).MatchString(err.Error()) {
			t.Fatalf("got %v", err)
		}
	})
}

// TestHangLimit: the automatic limit's defaults, as the README states them: 5 minutes in
// the first step, then 10 times the slowest step, at least a minute.
func TestHangLimit(t *testing.T) {
	for _, c := range []struct{ slowest, want time.Duration }{
		{0, 5 * time.Minute},
		{50 * time.Millisecond, time.Minute},
		{6 * time.Second, time.Minute},
		{30 * time.Second, 5 * time.Minute},
		{2 * time.Minute, 20 * time.Minute},
	} {
		if got := HangLimit(c.slowest); got != c.want {
			t.Errorf("HangLimit(%s) = %s, want %s", c.slowest, got, c.want)
		}
	}
}

// TestTCPRankLeaves: a rank that finishes its run while another still has steps to run
// (they were started with different step counts) does not leave that rank waiting for it:
// its step fails at once, naming the rank that left.
func TestTCPRankLeaves(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	jobs, procs := jobtest.Join(t, dir, JoinOptions{Timeout: 30 * time.Second})
	for _, j := range jobs {
		j.Init(1)
	}
	if _, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	closed := make(chan error, 1)
	go func() { closed <- procs[1].Close() }() // rank 1 is done after step 1
	res := make(chan error, 1)
	go func() { _, err := jobs[0].Step(runtime.Options{Seed: 1}); res <- err }()
	select {
	case err := <-res:
		if err == nil || !regexp.MustCompile(`^step 2: rank 1 \(.*\) finished its run \(after step 1\) and left, but rank 0 had steps left to run$`).MatchString(err.Error()) {
			t.Fatalf("rank 0's step: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("rank 0 still waits for the rank that left")
	}
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("rank 1's Close did not return")
	}
}

// TestAbortNamesCause: the error a rank gets when another stopped the run names that rank,
// and whether it stopped responding (a stopped process, which will not exit by itself) or
// died.
func TestAbortNamesCause(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	for _, frozen := range []bool{true, false} {
		jobs, procs := jobtest.Join(t, dir, JoinOptions{Heartbeat: time.Second})
		for _, j := range jobs {
			j.Init(1)
		}
		if frozen {
			procs[1].Freeze()
		} else {
			procs[1].Kill()
		}
		_, err := jobs[0].Step(runtime.Options{Seed: 1})
		var re *RemoteError
		if !errors.As(err, &re) || re.Rank != 1 || re.Unresponsive != frozen {
			t.Errorf("frozen %v: %v (%+v), want rank 1 named, unresponsive %v", frozen, err, re, frozen)
		}
	}
}
