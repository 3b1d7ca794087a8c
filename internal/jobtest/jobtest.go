package jobtest

import (
	"io"
	"net"
	"os"
	"sync"
	"testing"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/dist"
)

// Compile compiles a model into a temporary plan directory.
func Compile(t testing.TB, path string, opts compiler.Options) string {
	t.Helper()
	res, err := compiler.Compile(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := res.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// GPT is the tiny GPT (testdata/models/gpt.ppm, --preset tiny) on the given mesh, with 4
// micro-batches and AdamW.
func GPT(pp, dp, tp, zero int) compiler.Options {
	return compiler.Options{Load: compiler.LoadOptions{Preset: "tiny"}, PP: pp, DP: dp, TP: tp, Zero: zero, Microbatches: 4,
		Optimizer: "adamw{lr=1e-2}"}
}

// FailingWriter passes the first N bytes through to W and then fails with Err, like a disk
// that fills up (or a process interrupted) part-way through a save.
type FailingWriter struct {
	W   io.Writer
	N   int
	Err error
}

func (f *FailingWriter) Write(p []byte) (int, error) {
	if len(p) <= f.N {
		f.N -= len(p)
		return f.W.Write(p)
	}
	k, _ := f.W.Write(p[:f.N])
	f.N = 0
	return k, f.Err
}

// Join loads every rank of the plan in dir as its own job and joins them over loopback TCP
// with the options o (each rank's Rank, World, Master and, for rank 0, StoreListener set;
// Token "test-token" unless given). The processes close when the test ends.
func Join(t testing.TB, dir string, o dist.JoinOptions) ([]*runtime.Job, []*dist.Process) {
	return JoinUnder(t, dir, o, nil)
}

// JoinUnder is Join with hostile(the rendezvous's address) running alongside the rendezvous
// and the ranks' joining.
func JoinUnder(t testing.TB, dir string, o dist.JoinOptions, hostile func(addr string)) ([]*runtime.Job, []*dist.Process) {
	t.Helper()
	plan, err := runtime.Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	world := plan.Plan.World
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jobs, procs := make([]*runtime.Job, world), make([]*dist.Process, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	if hostile != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hostile(ln.Addr().String())
		}()
	}
	for r := range world {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			j, err := runtime.LoadRank(dir, cpu.New(), r)
			if err != nil {
				errs[r] = err
				return
			}
			opts := o
			opts.Rank, opts.World, opts.Master = r, world, ln.Addr().String()
			if r == 0 {
				opts.StoreListener = ln
			}
			if opts.Token == "" {
				opts.Token = "test-token"
			}
			p, err := j.Join(opts)
			jobs[r], procs[r], errs[r] = j, p, err
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p != nil {
				go p.Close()
			}
		}
	})
	return jobs, procs
}

// StepAll runs one step on every process's job concurrently.
func StepAll(jobs []*runtime.Job, opts runtime.Options) ([]runtime.StepResult, []error) {
	res, errs := make([]runtime.StepResult, len(jobs)), make([]error, len(jobs))
	var wg sync.WaitGroup
	for r, j := range jobs {
		wg.Add(1)
		go func(r int, j *runtime.Job) {
			defer wg.Done()
			res[r], errs[r] = j.Step(opts)
		}(r, j)
	}
	wg.Wait()
	return res, errs
}

// DirNames lists the names in dir (a checkpoint's files, a plan directory), sorted.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
