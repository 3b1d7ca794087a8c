package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"
	"time"

	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/dist"
	"ppc.dev/ppc/runtime/fault"
)

// joinRun connects this process's rank to the other processes of its run, as the launcher's
// environment describes it; flags are the run flags every process must share (runFlags).
func joinRun(e *env, job *runtime.Job, li *launchInfo, timeout time.Duration, flags []string) (*dist.Process, error) {
	o := dist.JoinOptions{Rank: li.Rank, World: li.World, Master: net.JoinHostPort(li.MasterAddr, strconv.Itoa(li.MasterPort)),
		Token: li.Token, Timeout: timeout, Flags: flags, Log: func(msg string) { fmt.Fprintf(e.stderr, "ppc run: warning: %s\n", msg) }}
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
		var ie *fault.InputError
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
func openTrace(path string, job *runtime.Job, proc *dist.Process, first, last int) (*runtime.Trace, error) {
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
	return runtime.NewRankTrace(proc, first, last)
}

func closeTrace(t *runtime.Trace, path string, proc *dist.Process) error {
	if proc == nil {
		return t.Close()
	}
	return runtime.MergeTrace(proc, t, path)
}

// runFlags are the flags of ppc run that every process of a multi-process run must share, as
// "name=value": all of them but --log-json (rank 0 alone writes the log) and --nproc (the
// launcher's), each with the value it has whether given or left at its default, so that a
// process given --steps 10 agrees with one that relied on the default 10. --seed left out
// with --resume means the checkpoint's seed, whatever the default says, and is spelled so.
// A process whose flags differ from rank 0's is refused at the rendezvous (a run whose ranks
// train different steps, seeds or data would be silently wrong, or hang).
func runFlags(fs *flag.FlagSet) []string {
	set := setFlags(fs)
	resume := fs.Lookup("resume")
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		switch {
		case f.Name == "log-json" || f.Name == "nproc":
			return
		case f.Name == "seed" && !set["seed"] && resume != nil && resume.Value.String() != "":
			v = "(the checkpoint's)"
		}
		out = append(out, f.Name+"="+v)
	})
	return out
}

// autoDuration is a duration flag whose default, "auto", leaves the value to ppc (0).
type autoDuration time.Duration

func (d *autoDuration) String() string {
	if *d == 0 {
		return "auto"
	}
	return time.Duration(*d).String()
}

func (d *autoDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 90s or 10m")
	}
	*d = autoDuration(v)
	return nil
}

// failureReport is what a worker of ppc run --nproc tells its launcher as it exits with an
// error: the rank whose failure stopped the run — its own, or the one the rendezvous named
// (the first failure anywhere) — and whether that rank stopped responding (its process is
// stopped or wedged, and will not exit on its own). The launcher names that rank first, and
// kills an unresponsive one at once instead of waiting out its grace period.
type failureReport struct {
	Cause        int  `json:"cause"`
	Unresponsive bool `json:"unresponsive,omitempty"`
}

// reportExit writes the failure report of a worker that exits with err to the launcher's
// pipe (PPC_REPORT_FD), if it has one.
func reportExit(li *launchInfo, err error) {
	var ie interrupted
	if li == nil || li.ReportFD <= 0 || err == nil || errors.As(err, &ie) {
		return
	}
	r := failureReport{Cause: li.Rank}
	var re *dist.RemoteError
	if errors.As(err, &re) && re.Rank >= 0 {
		r.Cause, r.Unresponsive = re.Rank, re.Unresponsive
	}
	f := os.NewFile(uintptr(li.ReportFD), "report")
	defer f.Close()
	json.NewEncoder(f).Encode(r) // a launcher that stopped reading changes nothing here
}
