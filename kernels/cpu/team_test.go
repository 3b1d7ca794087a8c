package cpu

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every task of a region runs exactly once, whatever the task and worker counts, on one
// core or several.
func TestTeamRunsEveryTaskOnce(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		old := runtime.GOMAXPROCS(procs)
		for _, tasks := range []int{0, 1, 2, 3, 7, 64, 1000} {
			for _, workers := range []int{1, 2, 3, 8} {
				counts := make([]atomic.Int32, tasks)
				parallelTasks(tasks, workers, func(i int) { counts[i].Add(1) })
				for i := range counts {
					if n := counts[i].Load(); n != 1 {
						t.Fatalf("GOMAXPROCS %d, %d tasks on %d workers: task %d ran %d times", procs, tasks, workers, i, n)
					}
				}
			}
		}
		runtime.GOMAXPROCS(old)
	}
}

// A worker runs its own part of the tasks first, in order, and then what the others left,
// each from where it stopped: worker 1 of 3 over 10 tasks (parts 0–2, 3–5, 6–9) takes 3, 4
// and 5, then 6–9 and 0–2; after worker 0 has run tasks 0 and 1, worker 2 takes 6–9, then
// 2, then 3–5.
func TestJobWorkOwnPartFirst(t *testing.T) {
	var ran []int
	record := func(t int) { ran = append(ran, t) }
	newJob(record, 10, 3).work(1)
	if want := []int{3, 4, 5, 6, 7, 8, 9, 0, 1, 2}; !slices.Equal(ran, want) {
		t.Errorf("worker 1 alone ran %v, want %v", ran, want)
	}
	ran = nil
	j := newJob(record, 10, 3)
	j.next[0].Add(2) // worker 0 took tasks 0 and 1
	j.work(2)
	if want := []int{6, 7, 8, 9, 2, 3, 4, 5}; !slices.Equal(ran, want) {
		t.Errorf("worker 2 after worker 0's first two ran %v, want %v", ran, want)
	}
}

// A task that opens a region of its own, and regions opened from several goroutines at
// once, find the team busy and start goroutines instead: every task still runs once.
func TestTeamNestedAndConcurrentRegions(t *testing.T) {
	old := runtime.GOMAXPROCS(3)
	defer runtime.GOMAXPROCS(old)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := 0; rep < 50; rep++ {
				var sum atomic.Int64
				parallelTasks(6, 3, func(i int) {
					Parallel(10, 1, func(lo, hi int) {
						for j := lo; j < hi; j++ {
							sum.Add(int64(100*i + j))
						}
					})
				})
				if want := int64(10*100*15 + 6*45); sum.Load() != want {
					t.Errorf("nested sum %d, want %d", sum.Load(), want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// After the helpers have stopped spinning and blocked, a region still gets its helpers:
// two tasks that each wait for the other to start can only finish if they run at once.
func TestTeamWakesParkedHelpers(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	parallelTasks(2, 2, func(int) {}) // start the team
	deadline := time.Now().Add(5 * time.Second)
	for theTeam.parked.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no helper blocked after idling")
		}
		time.Sleep(teamSpin)
	}
	for rep := 0; rep < 3; rep++ {
		var started atomic.Int32
		ok := make([]bool, 2)
		parallelTasks(2, 2, func(i int) {
			started.Add(1)
			end := time.Now().Add(2 * time.Second)
			for started.Load() < 2 && time.Now().Before(end) {
				runtime.Gosched()
			}
			ok[i] = started.Load() == 2
		})
		if !ok[0] || !ok[1] {
			t.Fatalf("round %d: the two tasks did not run at the same time (no helper joined)", rep)
		}
		time.Sleep(3 * teamSpin) // let them block again
	}
}

// WakeHelpers wakes helpers that have blocked (they spin again, for teamSpin, and then
// block again), except where other goroutines share the cores.
func TestWakeHelpers(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	parallelTasks(2, 2, func(int) {}) // start the team
	h := theTeam.helpers[0]           // the one a region of two workers uses
	waitParked := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for h.state.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no helper blocked after idling")
			}
			time.Sleep(teamSpin)
		}
	}
	waitParked()
	SetSharedCores(true)
	WakeHelpers()
	time.Sleep(teamSpin / 5)
	if h.state.Load() == 0 {
		t.Fatal("WakeHelpers woke a helper while the cores are shared")
	}
	SetSharedCores(false)
	for rep := 0; rep < 3; rep++ {
		WakeHelpers()
		deadline := time.Now().Add(5 * time.Second)
		for h.state.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the helper stayed blocked after WakeHelpers", rep)
			}
			runtime.Gosched()
		}
		waitParked() // and they block again
	}
}

// With other goroutines sharing the cores (SetSharedCores), helpers block as soon as a
// region ends, and a region's caller blocks, not spins, until its helpers' tasks finish:
// every task has finished when the region returns.
func TestTeamSharedCores(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	SetSharedCores(true)
	defer SetSharedCores(false)
	for rep := 0; rep < 20; rep++ {
		var done [4]atomic.Bool
		parallelTasks(4, 2, func(i int) {
			if i%2 == 1 {
				time.Sleep(200 * time.Microsecond)
			}
			done[i].Store(true)
		})
		for i := range done {
			if !done[i].Load() {
				t.Fatalf("round %d: the region returned before task %d finished", rep, i)
			}
		}
	}
	deadline := time.Now().Add(time.Second)
	for int(theTeam.parked.Load()) < len(theTeam.helpers) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d helpers blocked a second after the last region", theTeam.parked.Load(), len(theTeam.helpers))
		}
		time.Sleep(100 * time.Microsecond)
	}
}
