package schedule

// Held is what one micro-batch of each stage holds between its runs, in bytes: Stash from
// its F to its backward, and Held from its I to its W — what W still reads of the stash plus
// the output gradients I hands it (CapHeld).
type Held struct {
	Stash, Held []int64
}

// CapHeld runs W's earlier where a rank would otherwise hold more activation memory than
// the layout promises, and returns s unchanged when no rank would.
//
// The zero-bubble layouts (ZB-H1, ZB-H2, ZB-V, DualPipeV's split backward) defer W's to fill
// the time a rank would wait, and the papers count their memory as micro-batches in flight:
// each holds its activation from F to W, so deferring a W costs nothing as long as what it
// holds after I is no more than F stashed. Under tensor and sequence parallelism it is more
// (every linear's output gradient joins the inputs W reads: one GPT layer at tp 2 holds
// 114,688 bytes after I against 86,528 stashed), so a rank deferring many W's — ZB-V's last
// ranks in the cool-down, ZB-H1's last ranks throughout — grows past the busiest rank of the
// paper's count, and its workspace with the pipeline rank (5.5 GiB on the last of 16 ranks of
// GPT-3 175B at tp 4 with sp).
//
// The cap is that count: the most any rank of s holds with every micro-batch in flight
// counted as min(Stash, Held) after its I (the layout's memory as the papers give it). Each
// rank is replayed in order; before an action that would take its memory past the cap, the
// rank runs the W's it deferred whose I's are done, earliest first, until it fits or none is
// left. A W only moves earlier, and W's keep their order, so every stage accumulates its
// gradients in the same micro-batch order (bit-identical training) and the schedule stays
// valid (a W needs only its own I). The price is bubble: the W's no longer fill the waits
// they were deferred to, and the simulator charges it.
func CapHeld(s *Schedule, h Held) *Schedule {
	if len(h.Stash) != s.Stages || len(h.Held) != s.Stages || s.Slices > 1 {
		return s
	}
	grow := false
	for st := range s.Stages {
		grow = grow || h.Held[st] > h.Stash[st]
	}
	if !grow {
		return s
	}
	// delta is what a computation changes: the papers' count (paper) or the bytes (real).
	delta := func(c Action, paper bool) int64 {
		if c.Stage < 0 || c.Stage >= s.Stages {
			return 0
		}
		stash, held := h.Stash[c.Stage], h.Held[c.Stage]
		if paper {
			held = min(held, stash)
		}
		switch c.Kind {
		case Forward:
			return stash
		case BackwardInput:
			return held - stash
		case BackwardWeight:
			return -held
		case FullBackward:
			return -stash
		}
		return 0
	}
	// rise is the most an action adds at any point of its computations.
	rise := func(a Action, paper bool) (top, net int64) {
		for _, c := range a.Computes() {
			net += delta(c, paper)
			top = max(top, net)
		}
		return top, net
	}
	var limit int64
	for _, acts := range s.Actions {
		var live int64
		for _, a := range acts {
			top, net := rise(a, true)
			limit = max(limit, live+top)
			live += net
		}
	}
	out := *s
	out.Actions = make([][]Action, len(s.Actions))
	changed := false
	type key struct{ stage, mb int }
	for r, acts := range s.Actions {
		row := make([]Action, 0, len(acts))
		early := map[key]bool{} // W's run ahead of their place
		iDone := map[key]bool{}
		var live int64
		for i, a := range acts {
			if a.Kind == BackwardWeight && early[key{a.Stage, a.Microbatch}] {
				continue
			}
			top, net := rise(a, false)
			for j := i + 1; live+top > limit && j < len(acts); j++ {
				w := acts[j]
				k := key{w.Stage, w.Microbatch}
				if w.Kind != BackwardWeight || !iDone[k] || early[k] {
					continue
				}
				early[k], changed = true, true
				row = append(row, w)
				live += delta(w, false)
			}
			for _, c := range a.Computes() {
				if c.Kind == BackwardInput {
					iDone[key{c.Stage, c.Microbatch}] = true
				}
			}
			row = append(row, a)
			live += net
		}
		out.Actions[r] = row
	}
	if !changed {
		return s
	}
	return &out
}
