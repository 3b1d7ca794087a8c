package dist_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	. "ppc.dev/ppc/runtime/dist"
)

const gptPPM = "../../testdata/models/gpt.ppm"

// TestTCPMatchesInProcess: the same plans run as one job per rank over TCP give the in-process
// run's losses and every rank's parameters, optimizer state and gradients bit for bit —
// pipeline sends, tp all-reduces and all-gathers, dp gradient buckets and ZeRO's
// reduce-scatters all cross sockets, and so do expert parallelism's all-to-alls (the
// mixture-of-experts model at dp 4 × ep 2 and pp 2 × dp 2 × ep 2).
func TestTCPMatchesInProcess(t *testing.T) {
	type layout struct {
		name, model string
		opts        compiler.Options
	}
	var layouts []layout
	for _, c := range []struct{ pp, dp, tp, zero int }{{2, 1, 1, 0}, {4, 1, 1, 0}, {2, 1, 2, 0}, {1, 2, 2, 0}, {2, 2, 1, 1}, {1, 4, 1, 2}} {
		layouts = append(layouts, layout{fmt.Sprintf("pp%d-dp%d-tp%d-zero%d", c.pp, c.dp, c.tp, c.zero), gptPPM, jobtest.GPT(c.pp, c.dp, c.tp, c.zero)})
	}
	moe := compiler.Options{Load: compiler.LoadOptions{Set: map[string]string{"capacity_factor": "0.5"}}, DP: 4, EP: 2, Microbatches: 1, Optimizer: "adamw{lr=1e-2}"}
	layouts = append(layouts, layout{"moe-dp4-ep2", "../../testdata/models/moe.ppm", moe})
	moe.PP, moe.DP, moe.Microbatches = 2, 2, 2
	layouts = append(layouts, layout{"moe-pp2-dp2-ep2", "../../testdata/models/moe.ppm", moe})
	for _, c := range layouts {
		t.Run(c.name, func(t *testing.T) {
			dir := jobtest.Compile(t, c.model, c.opts)
			ref, err := runtime.Load(dir, cpu.New())
			if err != nil {
				t.Fatal(err)
			}
			if err := ref.Init(3); err != nil {
				t.Fatal(err)
			}
			jobs, _ := jobtest.Join(t, dir, JoinOptions{})
			for _, j := range jobs {
				if err := j.Init(3); err != nil {
					t.Fatal(err)
				}
			}
			for step := 1; step <= 3; step++ {
				want, err := ref.Step(runtime.Options{Seed: 3})
				if err != nil {
					t.Fatal(err)
				}
				got, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 3})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("step %d, rank %d: %v", step, r, err)
					}
					if got[r].Loss != want.Loss {
						t.Fatalf("step %d: rank %d reports loss %v, in-process %v", step, r, got[r].Loss, want.Loss)
					}
				}
			}
			for r, j := range jobs {
				a, b := ref.Ranks[r], j.Ranks[0]
				for i, buf := range a.Prog.Buffers {
					switch buf.Role {
					case pb.Role_PARAM, pb.Role_STATE, pb.Role_GRAD:
						if !bytes.Equal(a.Bufs[i].Data, b.Bufs[i].Data) {
							t.Fatalf("rank %d: %s differs from the in-process run", r, buf.Name)
						}
					}
				}
			}
		})
	}
}

// TestTCPPeerDeath: a rank whose connections close mid-run stops every other rank with an
// error naming it, well within the heartbeat.
func TestTCPPeerDeath(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(4, 1, 1, 0))
	jobs, procs := jobtest.Join(t, dir, JoinOptions{})
	for _, j := range jobs {
		j.Init(1)
	}
	if _, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	procs[2].Kill() // rank 2's process dies: every connection it has closes
	start := time.Now()
	_, errs := jobtest.StepAll(append(jobs[:2:2], jobs[3]), runtime.Options{Seed: 1})
	for i, err := range errs {
		t.Logf("survivor %d: %v", i, err)
		if err == nil || !strings.Contains(err.Error(), "rank 2") {
			t.Errorf("survivor %d: %v, want an error naming rank 2", i, err)
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the survivors took %s to stop", d)
	}
}

// TestTCPHostileConnections: random bytes, a port scanner's idle connections, a handshake
// with a wrong token and a stale worker of another run (another token) joining as rank 1,
// all at the rendezvous while the real ranks join and train: nothing panics, the intruders
// are dropped, and the run's result is the in-process run's, bit for bit.
func TestTCPHostileConnections(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	ref, err := runtime.Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	ref.Init(1)
	var want []float64
	for range 2 {
		r, err := ref.Step(runtime.Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.Loss)
	}
	var logMu sync.Mutex
	var logs []string
	o := JoinOptions{Log: func(s string) { logMu.Lock(); logs = append(logs, s); logMu.Unlock() }}
	hostile := func(addr string) {
		rng := rand.New(rand.NewPCG(1, 2))
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Add(1)
			size := 1 + rng.IntN(300)
			go func(i int) {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer c.Close()
				junk := make([]byte, size)
				for k := range junk {
					junk[k] = byte(i * k)
				}
				if i%3 == 0 {
					c.Read(make([]byte, 40)) // the greeting, then a hello-sized forgery
					junk = make([]byte, 112)
				}
				c.Write(junk)
				c.Read(make([]byte, 64))
			}(i)
		}
		// A worker of an older run, with its own token, claims rank 1.
		stale, err := runtime.LoadRank(dir, cpu.New(), 1)
		if err == nil {
			_, err = stale.Join(JoinOptions{Rank: 1, World: 2, Master: addr, Token: "old-run", JoinTimeout: 3 * time.Second})
		}
		if err == nil || !strings.Contains(err.Error(), "token") {
			t.Errorf("stale worker: %v, want refused for its token", err)
		}
		wg.Wait()
	}
	jobs, _ := jobtest.JoinUnder(t, dir, o, hostile)
	for _, j := range jobs {
		j.Init(1)
	}
	for step, w := range want {
		res, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1})
		for r := range jobs {
			if errs[r] != nil || res[r].Loss != w {
				t.Fatalf("step %d rank %d: loss %v (%v), want %v", step+1, r, res[r].Loss, errs[r], w)
			}
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if len(logs) == 0 || !strings.Contains(strings.Join(logs, "\n"), "dropped a connection") {
		t.Errorf("no dropped connection logged: %q", logs)
	}
}

// TestTCPFrozenPeer: a rank that stops responding without closing its connections (a
// stopped or wedged process) is declared dead by the store after the heartbeat timeout, and
// every other rank stops with a message naming it and what it was doing.
func TestTCPFrozenPeer(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	jobs, procs := jobtest.Join(t, dir, JoinOptions{Heartbeat: 2 * time.Second})
	for _, j := range jobs {
		j.Init(1)
	}
	procs[1].Freeze()
	start := time.Now()
	_, err := jobs[0].Step(runtime.Options{Seed: 1})
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "stopped responding") {
		t.Fatalf("got %v, want rank 1 reported as not responding", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}

// TestTCPTimeout: a rank that waits for a peer longer than the timeout (the peer is alive and
// heartbeating, but never sends: a hang) stops the run, saying what it waited for.
func TestTCPTimeout(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	jobs, _ := jobtest.Join(t, dir, JoinOptions{Timeout: time.Second})
	jobs[0].Init(1)
	start := time.Now()
	_, err := jobs[0].Step(runtime.Options{Seed: 1}) // rank 1 never runs its step
	if err == nil || !regexp.MustCompile(`rank 0 waited 1s for recv from rank 1 \(tag \d+\), and rank 1 sent nothing`).MatchString(err.Error()) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}
