package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Float is the element type of the floating-point kernels.
type Float interface{ ~float32 | ~float64 }

// Parallel splits [0, n) into contiguous chunks of at least grain items and runs f on each,
// using up to GOMAXPROCS goroutines. It runs f inline when the work is too small to split,
// because spawning goroutines for tiny loops costs more than it saves.
func Parallel(n, grain int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	workers := runtime.GOMAXPROCS(0)
	if max := (n + grain - 1) / grain; workers > max {
		workers = max
	}
	if workers <= 1 {
		f(0, n)
		return
	}
	chunk := (n + workers - 1) / workers
	parallelTasks((n+chunk-1)/chunk, workers, func(t int) { f(t*chunk, min((t+1)*chunk, n)) })
}

// parallelTasks runs f(t) for t in [0, tasks) on up to workers goroutines. Each worker takes
// the tasks of its own contiguous part first and then the others' leftovers (job.work), so
// a task stays with one core region after region, and unlike fixed shares a worker that is
// descheduled leaves its remaining tasks to the others. The order in which tasks run
// varies; callers' tasks must be independent.
func parallelTasks(tasks, workers int, f func(t int)) {
	workers = min(workers, tasks)
	if workers <= 1 {
		for t := 0; t < tasks; t++ {
			f(t)
		}
		return
	}
	if theTeam.run(tasks, workers, f) {
		return
	}
	var next atomic.Int64
	run := func() {
		for {
			t := int(next.Add(1) - 1)
			if t >= tasks {
				return
			}
			f(t)
		}
	}
	var wg sync.WaitGroup
	wg.Add(workers - 1)
	for w := 1; w < workers; w++ {
		go func() {
			defer wg.Done()
			run()
		}()
	}
	unpark()
	run()
	wg.Wait()
}

// unpark makes the helper goroutines just started stealable at once by the idle cores the
// runtime woke for them, where a region could not have the team (team.go). Go puts a new
// goroutine in its parent's P's runnext slot, and another P takes a goroutine from there only
// after a 3 µs sleep (runqgrab: so that a goroutine that readies another and then blocks
// keeps it) that coarse guest timers stretch: a helper measured 120–180 µs late. Starting
// one more, empty goroutine moves the last helper from runnext to the run queue, which idle
// Ps steal from without the sleep (40–95 µs late: the rest is waking the core); the empty
// one runs when this goroutine waits.
func unpark() { go func() {}() }
