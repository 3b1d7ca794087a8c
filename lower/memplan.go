package lower

import (
	"math"
	"sort"
)

// Alignment of every buffer in an arena, in bytes (cache line, and enough for any vector
// load of any element type).
const Alignment = 64

// Interval is a buffer's lifetime in instruction indices: live from Start through End
// (inclusive), of Size bytes.
type Interval struct {
	Start, End int
	Size       int64
}

// PlanMemory assigns each interval an offset in one arena so that buffers live at the same
// time never overlap, and returns the offsets and the arena size (peak). It places them two
// ways and keeps the smaller arena: greedy best-fit in order of start time (each buffer in
// the smallest free gap that holds it), which on the stack-like lifetimes of training steps
// comes close to the lower bound (the peak of live bytes, also returned for reporting); and,
// for programs of up to bySizeMax buffers (it is quadratic), largest first, each at the
// lowest offset clear of the buffers placed before it that live at the same time — better
// where long lifetimes interleave with short ones: reshapes as views (codegen) merged
// lifetimes that start order packed 49 MiB worse on a GPT-2-width plan.
func PlanMemory(iv []Interval) (offsets []int64, arena, liveBound int64) {
	offsets, arena, liveBound = planByStart(iv)
	if len(iv) <= bySizeMax {
		if off, a := planBySize(iv); a < arena {
			offsets, arena = off, a
		}
	}
	return offsets, arena, liveBound
}

// bySizeMax bounds planBySize's quadratic work (8,192 buffers: tens of milliseconds).
const bySizeMax = 8192

// planBySize places the intervals largest first, each at the lowest aligned offset where it
// overlaps no interval already placed that is live at the same time.
func planBySize(iv []Interval) (offsets []int64, arena int64) {
	offsets = make([]int64, len(iv))
	order := orderBy(iv, func(x, y Interval) bool { return x.Size > y.Size || x.Size == y.Size && x.Start < y.Start })
	type placed struct {
		off, size  int64
		start, end int
	}
	var done []placed // sorted by offset
	for _, i := range order {
		cur := iv[i]
		size := (cur.Size + Alignment - 1) / Alignment * Alignment
		at := int64(0)
		for _, p := range done {
			if p.end < cur.Start || cur.End < p.start {
				continue // not live at the same time
			}
			if p.off >= at+size {
				break // the gap before p holds it
			}
			at = max(at, p.off+p.size)
		}
		offsets[i] = at
		arena = max(arena, at+size)
		k := sort.Search(len(done), func(k int) bool { return done[k].off > at })
		done = append(done, placed{})
		copy(done[k+1:], done[k:])
		done[k] = placed{at, size, cur.Start, cur.End}
	}
	return offsets, arena
}

// orderBy is the intervals' indices in the order less gives (stable: equal ones by index).
func orderBy(iv []Interval, less func(x, y Interval) bool) []int {
	order := make([]int, len(iv))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return less(iv[order[a]], iv[order[b]]) })
	return order
}

// planByStart is greedy best-fit in order of start time. It skips the two scans over the live
// buffers where they cannot change anything — retiring when none has ended (the smallest live
// end is kept), looking for a gap when none is large enough (an upper bound on the largest gap
// is kept: a placement only shrinks or splits gaps, a retirement recomputes it) — and stops at
// a gap that fits exactly (no later one can be smaller): the offsets are those of the plain
// scan (TestPlanByStartMatchesScan), which was a seventh of planning GPT-3 175B's
// configurations (the search compiles every candidate for its memory).
func planByStart(iv []Interval) (offsets []int64, arena, liveBound int64) {
	offsets = make([]int64, len(iv))
	order := orderBy(iv, func(x, y Interval) bool { return x.Start < y.Start || x.Start == y.Start && x.Size > y.Size })
	type placed struct {
		off, size int64
		end       int
	}
	var live []placed // sorted by offset
	var liveBytes int64
	minEnd := math.MaxInt // the smallest end among live
	var gapBound int64    // at least the largest gap below or between live buffers
	var top int64         // the highest end among live
	for _, i := range order {
		cur := iv[i]
		size := (cur.Size + Alignment - 1) / Alignment * Alignment
		// Retire buffers that ended before this one starts.
		if minEnd < cur.Start {
			kept := live[:0]
			minEnd, gapBound, top = math.MaxInt, 0, 0
			for _, p := range live {
				if p.end >= cur.Start {
					kept = append(kept, p)
					minEnd = min(minEnd, p.end)
					gapBound = max(gapBound, p.off-top)
					top = max(top, p.off+p.size)
				} else {
					liveBytes -= p.size
				}
			}
			live = kept
		}
		// Best fit among the gaps between live buffers.
		best, bestGap := int64(-1), int64(-1)
		if gapBound >= size {
			prevEnd := int64(0)
			for _, p := range live {
				if gap := p.off - prevEnd; gap >= size && (bestGap < 0 || gap < bestGap) {
					best, bestGap = prevEnd, gap
					if gap == size {
						break
					}
				}
				prevEnd = max(prevEnd, p.off+p.size)
			}
		}
		if best < 0 {
			best = top
		}
		offsets[i] = best
		arena = max(arena, best+size)
		liveBytes += size
		liveBound = max(liveBound, liveBytes)
		minEnd = min(minEnd, cur.End)
		top = max(top, best+size)
		at := sort.Search(len(live), func(k int) bool { return live[k].off > best })
		live = append(live, placed{})
		copy(live[at+1:], live[at:])
		live[at] = placed{best, size, cur.End}
	}
	return offsets, arena, liveBound
}

// PeakLive is the most bytes (each buffer rounded up to Alignment, as PlanMemory places it)
// that the intervals hold at any one instruction. Over a subset of a rank's buffers it says how
// much of the arena that subset needs, e.g. the forward activations; over all of them it is
// PlanMemory's live bound.
func PeakLive(iv []Interval) int64 {
	type event struct {
		at    int
		delta int64
	}
	ev := make([]event, 0, 2*len(iv))
	for _, b := range iv {
		size := (b.Size + Alignment - 1) / Alignment * Alignment
		ev = append(ev, event{b.Start, size}, event{b.End + 1, -size})
	}
	// At one instruction, buffers that ended before it go first.
	sort.Slice(ev, func(i, j int) bool {
		if ev[i].at != ev[j].at {
			return ev[i].at < ev[j].at
		}
		return ev[i].delta < ev[j].delta
	})
	var live, peak int64
	for _, e := range ev {
		live += e.delta
		peak = max(peak, live)
	}
	return peak
}
