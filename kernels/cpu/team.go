package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A team is the helper goroutines that parallel regions (Parallel, parallelTasks) share.
// Between regions a helper spins for a while (teamSpin) watching for the next one, and only
// then blocks: starting a goroutine for each region, as the kernels did, measured 15–30 µs
// for the go statement and 40–180 µs before the helper ran on the VMs these benchmarks run
// on (waking a parked thread there means waking an idle virtual CPU, and Go's scheduler
// takes a new goroutine from another core's runnext slot only after a 3 µs sleep that the
// guest's timers stretched to hundreds of µs: time.Sleep(1 µs) measured 324 µs). A batch-1
// network runs a region every 50–300 µs, so the helpers were late to most of them, and
// GoogLeNet's 1×1 convolutions ran no faster on two cores than on one. Spinning helpers
// join a region within about a microsecond. OpenMP runtimes and OpenBLAS's threads spin
// between regions for the same reason.
//
// The team serves one region at a time; a region that starts while another runs (a task
// that opens a region of its own, or two ranks in one process) starts goroutines as before.
// Which goroutine runs a task never changes a result: tasks are independent.
//
// Spinning pays only while the cores would otherwise idle. Where several goroutines issue
// kernels at once (the ranks of a plan run in one process, SetSharedCores), a spinning
// helper holds a core another rank could use: the README's 8-rank job on two cores ran 25%
// slower with spinning helpers. Then helpers block as soon as a region ends and a region's
// caller blocks while its helpers finish.
type team struct {
	busy    atomic.Bool         // a region holds the team
	cur     atomic.Pointer[job] // the latest region's job
	mu      sync.Mutex          // guards helpers and grows the team
	helpers []*helper           // started lazily, up to the region's workers − 1
	parked  atomic.Int32        // helpers blocked in park
}

// job is one region's work, a fresh object each region so a helper that arrives after it
// ended finds its tasks all taken instead of another region's state.
type job struct {
	f       func(t int)
	tasks   int64
	parts   int64          // workers: worker w's own tasks are part w (job.part)
	next    []atomic.Int64 // next[w]: part w's next task to take
	running atomic.Int32   // helpers inside the job
	waiting atomic.Bool    // the caller blocks on done until running is 0
	done    chan struct{}
}

type helper struct {
	w     int64        // the worker it is in every region with more than w workers
	state atomic.Int32 // 0 spinning, 1 parked
	wake  chan struct{}
}

// teamSpin is how long a helper watches for the next region before it blocks, and teamYield
// how often a spinning goroutine lets others queued on its core run: yielding takes the
// scheduler's lock, and doing it every few hundred spins measured 2–3% of a network's time
// in the runtime's lock and scheduling functions.
const (
	teamSpin  = 500 * time.Microsecond
	teamYield = 50 * time.Microsecond
)

var theTeam team

// teamShared: other goroutines compete for the cores (SetSharedCores).
var teamShared atomic.Bool

// SetSharedCores says whether several goroutines call the kernels at once (the ranks of a
// plan running in one process): then the helper goroutines of parallel regions block between
// regions instead of spinning, leaving the cores to the other callers. Results do not depend
// on it.
func SetSharedCores(shared bool) { teamShared.Store(shared) }

// run runs f(t) for t in [0, tasks) on this goroutine and up to workers − 1 helpers and
// reports true, or reports false, running nothing, when the team is serving another region.
func (tm *team) run(tasks, workers int, f func(t int)) bool {
	if !tm.busy.CompareAndSwap(false, true) {
		return false
	}
	defer tm.busy.Store(false)
	if len(tm.helpers) < workers-1 {
		tm.grow(workers - 1)
	}
	j := newJob(f, tasks, workers)
	tm.cur.Store(j)
	tm.wake(workers - 1)
	j.work(0)
	// Every task is taken; wait for the helpers still running one: spinning (yielding now
	// and then, as the helpers do, should another goroutine wait for this core), or blocked
	// where other goroutines want the cores.
	if teamShared.Load() {
		j.waiting.Store(true)
		if j.running.Load() != 0 {
			<-j.done
		}
		return true
	}
	var since time.Time
	for spins := 1; j.running.Load() != 0; spins++ {
		if spins&1023 == 0 {
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > teamYield {
				runtime.Gosched()
				since = time.Now()
			}
		}
	}
	return true
}

// wake readies the first n helpers that are parked, if any. A readied goroutine goes to
// this P's runnext slot, which the idle Ps woken for it take from only after the stretched
// sleep unpark describes: unpark moves it to the run queue.
func (tm *team) wake(n int) {
	if tm.parked.Load() == 0 {
		return
	}
	woke := false
	for i, h := range tm.helpers {
		if i >= n {
			break
		}
		if h.state.CompareAndSwap(1, 0) {
			select {
			case h.wake <- struct{}{}:
				woke = true
			default:
			}
		}
	}
	if woke {
		unpark()
	}
}

// WakeHelpers readies the helper goroutines of parallel regions ahead of a burst of kernels
// (a step): after a pause they have blocked (teamSpin), and the first region found them late
// — ResNet-50's 7 × 7 stem, the step's first kernel, ran at a median 5.8 ms 100 ms after the
// last step against 2.0 back to back. Woken here, they spin while the step's inputs load
// and join its first region at once; where nothing comes within teamSpin they block again.
// Where other goroutines share the cores (SetSharedCores) it does nothing.
func WakeHelpers() {
	if teamShared.Load() || !theTeam.busy.CompareAndSwap(false, true) {
		return
	}
	defer theTeam.busy.Store(false)
	n := runtime.GOMAXPROCS(0) - 1
	if len(theTeam.helpers) < n {
		theTeam.grow(n)
	}
	theTeam.wake(n)
}

// newJob is a region's job: tasks for workers, each part's counter at its first task.
func newJob(f func(t int), tasks, workers int) *job {
	j := &job{f: f, tasks: int64(tasks), parts: int64(workers), next: make([]atomic.Int64, workers), done: make(chan struct{}, 1)}
	for w := range j.next {
		j.next[w].Store(j.part(int64(w)))
	}
	return j
}

// part is the first task of part w (w ≤ parts): the tasks are cut into parts contiguous
// ranges, one a worker (the caller 0, helper i i+1).
func (j *job) part(w int64) int64 { return w * j.tasks / j.parts }

// work takes and runs the job's tasks until none are left: worker w's own part first, in
// order, then what is left of the others'. So each worker runs the same tasks region after
// region wherever none is late, and a kernel's task t — the same rows or columns of its
// output each call — stays with one core's caches: where they changed hands at random
// (a shared counter), ResNet's 3×3 layer on 56 × 56 spent 3× as long in its output
// transform at two threads as at one, writing lines the other core held. A late or
// descheduled worker's tasks are still taken by the others.
func (j *job) work(w int64) {
	for i := int64(0); i < j.parts; i++ {
		p := (w + i) % j.parts
		end := j.part(p + 1)
		for {
			t := j.next[p].Add(1) - 1
			if t >= end {
				break
			}
			j.f(int(t))
		}
	}
}

func (tm *team) grow(n int) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for len(tm.helpers) < n {
		h := &helper{w: int64(len(tm.helpers) + 1), wake: make(chan struct{}, 1)}
		tm.helpers = append(tm.helpers, h)
		go tm.loop(h)
	}
}

// loop is a helper's life: join each new job that has a seat, spin between jobs, block
// after teamSpin without one.
func (tm *team) loop(h *helper) {
	var last *job
	for {
		start := time.Now()
		yielded := start
		for spins := 0; ; spins++ {
			if j := tm.cur.Load(); j != last {
				last = j
				if h.w < j.parts {
					j.running.Add(1)
					j.work(h.w)
					if j.running.Add(-1) == 0 && j.waiting.Load() {
						select {
						case j.done <- struct{}{}:
						default:
						}
					}
				}
				start, yielded = time.Now(), time.Now()
				continue
			}
			if spins&1023 != 1023 {
				continue
			}
			if now := time.Now(); now.Sub(start) < teamSpin && !teamShared.Load() {
				if now.Sub(yielded) > teamYield {
					runtime.Gosched() // let anything else queued on this core run
					yielded = now
				}
				continue
			}
			// Park. A region that starts after state is 1 sends a wake; one that started
			// before is seen by the check below.
			h.state.Store(1)
			tm.parked.Add(1)
			if tm.cur.Load() == last {
				<-h.wake
			}
			h.state.Store(0)
			tm.parked.Add(-1)
			start = time.Now()
		}
	}
}
