package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"
	"time"

	"ppc.dev/ppc/runtime"
)

// joinRun connects this process's rank to the other processes of its run, as the launcher's
// environment describes it.
func joinRun(e *env, job *runtime.Job, li *launchInfo, timeout time.Duration) (*runtime.Process, error) {
	o := runtime.JoinOptions{Rank: li.Rank, World: li.World, Master: net.JoinHostPort(li.MasterAddr, strconv.Itoa(li.MasterPort)),
		Token: li.Token, Timeout: timeout, Log: func(msg string) { fmt.Fprintf(e.stderr, "ppc run: warning: %s\n", msg) }}
	if li.StoreFD >= 0 && li.Rank == 0 {
		// ppc run --nproc opened the store's port and handed it over.
		f := os.NewFile(uintptr(li.StoreFD), "rendezvous")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("PPC_STORE_FD=%d: not a listening socket: %v", li.StoreFD, err)
		}
		o.StoreListener = ln
	}
	// Several ranks share this machine's cores (as torchrun sets OMP_NUM_THREADS=1): each
	// process's kernels use its share, unless GOMAXPROCS says otherwise.
	if li.LocalWorld > 1 && os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(max(1, goruntime.NumCPU()/li.LocalWorld))
	}
	startupNote(e, "joining the %d-process run at %s…", li.World, o.Master)
	p, err := job.Join(o)
	if err != nil {
		var ie *runtime.InputError
		if errors.As(err, &ie) {
			return nil, err
		}
		return nil, checkFailed{err} // the input is fine; the processes could not meet
	}
	if p.Transport != "" {
		startupNote(e, "%s", p.Transport)
	}
	return p, nil
}

// openTrace starts --trace: the file itself for an in-process run; in a multi-process run
// each rank records its own events on the run's common clock in a file beside it, which
// closeTrace merges into FILE at rank 0.
func openTrace(path string, job *runtime.Job, proc *runtime.Process, first, last int) (*runtime.Trace, error) {
	if proc == nil {
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		t, err := runtime.NewTrace(f, len(job.Ranks), first, last)
		if err != nil {
			f.Close()
		}
		return t, err
	}
	return proc.NewTrace(first, last)
}

func closeTrace(t *runtime.Trace, path string, proc *runtime.Process) error {
	if proc == nil {
		return t.Close()
	}
	return proc.MergeTrace(t, path)
}
