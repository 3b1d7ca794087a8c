package cpu

import (
	"runtime"
	"sync"
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
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, hi)
	}
	f(0, min(chunk, n))
	wg.Wait()
}
