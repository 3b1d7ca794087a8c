package lower

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// planByStartScan is planByStart as first written, scanning every live buffer at every
// placement: the reference its faster form must equal offset for offset.
func planByStartScan(iv []Interval) (offsets []int64, arena, liveBound int64) {
	offsets = make([]int64, len(iv))
	order := orderBy(iv, func(x, y Interval) bool { return x.Start < y.Start || x.Start == y.Start && x.Size > y.Size })
	type placed struct {
		off, size int64
		end       int
	}
	var live []placed
	var liveBytes int64
	for _, i := range order {
		cur := iv[i]
		size := (cur.Size + Alignment - 1) / Alignment * Alignment
		kept := live[:0]
		for _, p := range live {
			if p.end >= cur.Start {
				kept = append(kept, p)
			} else {
				liveBytes -= p.size
			}
		}
		live = kept
		best, bestGap := int64(-1), int64(-1)
		prevEnd := int64(0)
		for _, p := range live {
			if gap := p.off - prevEnd; gap >= size && (bestGap < 0 || gap < bestGap) {
				best, bestGap = prevEnd, gap
			}
			prevEnd = max(prevEnd, p.off+p.size)
		}
		if best < 0 {
			best = prevEnd
		}
		offsets[i] = best
		arena = max(arena, best+size)
		liveBytes += size
		liveBound = max(liveBound, liveBytes)
		at := sort.Search(len(live), func(k int) bool { return live[k].off > best })
		live = append(live, placed{})
		copy(live[at+1:], live[at:])
		live[at] = placed{best, size, cur.End}
	}
	return offsets, arena, liveBound
}

// planByStart places every buffer where the plain scan does: random programs with
// stack-like and long lifetimes, repeated sizes (exact fits), zero-sized buffers and many
// buffers starting at one instruction.
func TestPlanByStartMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		n := 1 + r.IntN(400)
		steps := 1 + r.IntN(2*n)
		sizes := []int64{0, 1, 64, 100, 128, 4096, 5000}
		iv := make([]Interval, n)
		for i := range iv {
			start := r.IntN(steps)
			end := start + r.IntN(1+r.IntN(steps))
			if r.IntN(8) == 0 {
				end = start + steps // lives to the end
			}
			size := sizes[r.IntN(len(sizes))]
			if r.IntN(3) == 0 {
				size = r.Int64N(20000)
			}
			iv[i] = Interval{start, end, size}
		}
		off, arena, bound := planByStart(iv)
		wOff, wArena, wBound := planByStartScan(iv)
		if arena != wArena || bound != wBound {
			t.Fatalf("trial %d: arena %d bound %d, scan %d %d", trial, arena, bound, wArena, wBound)
		}
		for i := range off {
			if off[i] != wOff[i] {
				t.Fatalf("trial %d: buffer %d %+v at %d, scan places it at %d", trial, i, iv[i], off[i], wOff[i])
			}
		}
	}
}
