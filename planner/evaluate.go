package planner

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/schedule"
)

// evaluation is one candidate configuration being priced.
type evaluation struct {
	p          *planner
	c          Config
	units      []unitCost
	bounds     []int // each stage's end unit (exclusive)
	placement  []int // stage → pipeline rank
	cost       schedule.Cost
	bound      float64
	rankMem    []codegen.Memory // per pipeline rank, activations at their least (one micro-batch)
	oneMB      []int64          // per rank: one micro-batch's stash over its stages
	stageMem   []stageMem       // per stage: its runs' arena use, per micro-batch
	work       []int64          // per rank: the static workspace estimate in rankMem (its largest run)
	stepEnd    []int64          // per rank: the arena the step's end needs (optimizer, ZeRO's blocks)
	gather     [][3]float64     // per stage: ZeRO-3's gathers in one run of F, I and W (seconds)
	flopsTotal float64
	// compiled is ppc compile's memory per pipeline rank for a token-sliced configuration
	// (compiledMemory), which replaces the replay's.
	compiled []codegen.Memory
}

// gathered is the bytes of the copies of ps that ZeRO-3 over dp gathers (every one with a
// first dim, padded to a multiple of dp rows: the gathered copy is, its rows a view of it)
// and the cost model's time to gather them, one collective each.
func (e *evaluation) gathered(ps []param) (bytes int64, t float64) {
	c := e.c
	if c.Zero != 3 || c.DP < 2 {
		return 0, 0
	}
	for _, pr := range ps {
		if pr.split(c.DP) {
			bytes += pr.padded(c.DP)
			t += e.p.dev.AxisCollectiveTime("all_gather", float64(pr.padded(c.DP)), c.DP, "dp")
		}
	}
	return bytes, t
}

// split cuts units into s contiguous stages, minimising the largest stage time
// (f + i + w + recompute per sequence): the binary search over the bound with a greedy
// packing that partition's balance uses, without its memory and transfer tie-breaks (the
// planner prints the layout, so ppc compile reproduces this split exactly).
func split(units []unitCost, s int) []int {
	t := make([]float64, len(units))
	total, most := 0.0, 0.0
	for i, u := range units {
		t[i] = u.f + u.i + u.w + u.recompute
		total += t[i]
		most = max(most, t[i])
	}
	pack := func(limit float64) []int {
		var ends []int
		acc := 0.0
		for i := range units {
			// Leave at least one unit for each stage still to come.
			left := len(units) - i
			need := s - len(ends)
			if acc > 0 && (acc+t[i] > limit || left < need) {
				ends = append(ends, i)
				acc = 0
			}
			acc += t[i]
		}
		return append(ends, len(units))
	}
	lo, hi := most, total
	for range 60 {
		mid := (lo + hi) / 2
		if len(pack(mid)) <= s {
			hi = mid
		} else {
			lo = mid
		}
	}
	ends := pack(hi)
	// Fewer groups than stages: cut the longest groups until there are s.
	for len(ends) < s {
		best, at := -1, 0
		lo := 0
		for g, e := range ends {
			if e-lo >= 2 && (best < 0 || e-lo > best) {
				best, at = e-lo, g
			}
			lo = e
		}
		start := 0
		if at > 0 {
			start = ends[at-1]
		}
		mid := start + (ends[at]-start)/2
		ends = append(ends[:at], append([]int{mid}, ends[at:]...)...)
	}
	return ends
}

// prepare prices c without simulating it: stage costs, its lower bound and the memory that
// does not depend on timing. nil when its probe could not be compiled.
func (p *planner) prepare(c *candidate) *evaluation {
	units := p.unitsAt(c.key, c.MicrobatchSize)
	if units == nil {
		return nil
	}
	e := &evaluation{p: p, c: c.Config, units: units}
	S := c.PP * c.V
	cacheKey := splitKey{c.key, c.MicrobatchSize, S}
	p.mu.Lock()
	ends, ok := p.splits[cacheKey]
	if !ok {
		ends = split(units, S)
		p.splits[cacheKey] = ends
	}
	p.mu.Unlock()
	e.bounds = ends
	if c.Schedule == "zbv" || c.Schedule == "dualpipev" {
		e.placement = schedule.VPlacement(c.PP)
	} else {
		e.placement = schedule.LoopPlacement(c.PP, c.V)
	}
	dev := p.dev
	rb := p.recipeBytes()
	e.cost = schedule.Cost{F: 1, I: 1, W: 1, Comm: dev.LinkLatency, Bandwidth: dev.LinkBandwidth, Unit: schedule.Seconds,
		Source: "ppc plan: cost model on " + dev.Name}
	// Parameter bytes per rank, a tied parameter once on each rank that holds it.
	rankParams := make([]int64, c.PP)
	rankShared := make([][]param, c.PP)
	work := make([]int64, c.PP)
	tiedGrads := make([]int64, c.PP)
	tiedUnsharded := make([]int64, c.PP) // of tiedGrads, those ZeRO cannot shard
	tiedBlocks := make([]int64, c.PP)    // of tiedGrads, the dp blocks of those ZeRO shards
	rankSizes := make([][]int64, c.PP)
	// The parameters each rank holds, and of them (each once) the bytes of those ZeRO splits
	// over dp and their blocks.
	rankSet := make([]paramSet, c.PP)
	splitBytes, splitBlocks := make([]int64, c.PP), make([]int64, c.PP)
	noParams := newParamSet(units)
	for r := range rankSet {
		rankSet[r] = slices.Clone(noParams)
	}
	var firstUse []tiedUse   // the rank of each tied parameter's first use (its partial 0)
	var stageSplit [][]param // per stage, the parameters ZeRO splits over dp, in order (ZeRO-1 and 2)
	// Per-stage lists, reused from stage to stage: the planner evaluates thousands of
	// configurations, and these were half of the bytes its search allocated.
	var sizes, splitOnce, splitUses, wholeUses, all, whole []int64
	var stageParams []param
	e.oneMB = make([]int64, c.PP)
	busy := make([]float64, c.PP)
	lo := 0
	for s, hi := range ends {
		var sc schedule.StageCost
		var pbytes int64
		var stageShared []param
		sizes, stageParams = sizes[:0], stageParams[:0] // the stage's parameter tensors, each once
		for _, u := range units[lo:hi] {
			sc.F += u.f
			sc.I += u.i + u.recompute
			sc.W += u.w
			sc.FColl += u.fc
			sc.IColl += u.ic
			sc.WColl += u.wc
			sc.ActBytes += float64(u.stash)
			pbytes += u.paramBytes
			for _, pr := range u.params {
				if !slices.Contains(u.shared, pr) || !slices.Contains(stageShared, pr) {
					sizes = append(sizes, pr.bytes)
					stageParams = append(stageParams, pr)
				}
			}
			for _, pr := range u.shared {
				if slices.Contains(stageShared, pr) {
					pbytes -= pr.bytes
				} else {
					stageShared = append(stageShared, pr)
				}
			}
			e.flopsTotal += u.flops / float64(c.MicrobatchSize) // per sequence
		}
		// ZeRO-3: each run gathers its units' parameters, and waits for them (the
		// prefetch's overlap with compute is not credited, as ppc compile's estimate).
		var gt [3]float64
		for _, u := range units[lo:hi] {
			for k := range gt {
				_, t := e.gathered(u.gathers[k])
				gt[k] += t
			}
			if c.Zero == 3 && c.DP > 1 {
				// W reduce-scatters each gradient of a block parameter as it computes it, in
				// the accumulation dtype (param-gather widens a 16-bit one first). Priced in
				// bf16, a GPT-3 step at dp 128 was 2.3 s a micro-batch short of ppc compile's.
				for _, gr := range u.wgrads {
					if gr.split(c.DP) {
						gt[2] += dev.AxisCollectiveTime("reduce_scatter", float64(gr.padded(c.DP))*rb.grads, c.DP, "dp")
					}
				}
			}
		}
		e.gather = append(e.gather, gt)
		sc.F, sc.I, sc.W = sc.F+gt[0], sc.I+gt[1], sc.W+gt[2]
		sc.FColl, sc.IColl, sc.WColl = sc.FColl+gt[0], sc.IColl+gt[1], sc.WColl+gt[2]
		sc.CommBytes = float64(units[hi-1].send)
		if hi == len(units) {
			sc.CommBytes = 0
		}
		// Data parallelism as the rank programs do it (passes' grad-reduce and
		// rank-optimizer): gradients all-reduced once per step in 25 MiB buckets (ZeRO 0);
		// reduce-scattered before the optimizer and the new blocks all-gathered after it
		// (ZeRO 1); reduce-scattered each micro-batch and the blocks all-gathered (ZeRO 2) —
		// the stage's tensors in buckets of up to 25 MiB, a larger tensor alone.
		if c.CP > 1 {
			// The cp replicas' gradients are summed first (grad-reduce), every bucket
			// all-reduced over cp after the stage's last W — under ZeRO-2 the dp blocks.
			g := float64(pbytes)
			if c.Zero >= 2 && c.DP > 1 {
				g /= float64(c.DP)
			}
			sc.GradReduce += bucketed(g, func(x float64) float64 { return dev.AxisCollectiveTime("all_reduce", x, c.CP, "cp") })
		}
		// Expert shards (ep) are summed over edp = dp/ep only, in their own buckets, and
		// never ZeRO's; the rest over dp.
		var experts int64
		dense, expertSizes := sizes, []int64(nil)
		if c.EP > 1 {
			dense = nil
			for _, u := range units[lo:hi] {
				for _, pr := range u.params {
					if pr.expert {
						experts += pr.bytes
						expertSizes = append(expertSizes, pr.bytes)
					} else {
						dense = append(dense, pr.bytes)
					}
				}
			}
		}
		edp := c.DP / max(c.EP, 1)
		if c.DP > 1 {
			if edp > 1 && experts > 0 {
				sc.GradReduce += bucketed(float64(experts)*rb.grads, func(x float64) float64 { return dev.AxisCollectiveTime("all_reduce", x, edp, "dp") })
			}
			// The dense gradients as grad-reduce and rank-optimizer reduce them: a tied
			// weight's partials each (one per use in the stage: at pp 1 the embedding's and
			// the head's), a parameter dp does not split (a scalar) all-reduced after its
			// stage's last W whatever the ZeRO stage; under ZeRO-1 the split ones (padded to
			// a multiple of dp rows) reduce-scattered once, their partials summed first,
			// under ZeRO-2 each run's as it computes them.
			splitOnce, splitUses, wholeUses = splitOnce[:0], splitUses[:0], wholeUses[:0]
			seen := slices.Clone(noParams)
			for _, u := range units[lo:hi] {
				for _, pr := range u.params {
					if pr.expert {
						continue
					}
					if !pr.split(c.DP) {
						wholeUses = append(wholeUses, pr.bytes)
						continue
					}
					splitUses = append(splitUses, pr.padded(c.DP))
					if seen.add(pr) {
						splitOnce = append(splitOnce, pr.padded(c.DP))
					}
				}
			}
			coll := func(kind string, x float64) float64 { return dev.AxisCollectiveTime(kind, x, c.DP, "dp") }
			// Gradients are reduced in their accumulation dtype, the new 16-bit parameter
			// blocks all-gathered, each bucket one collective.
			inBuckets := func(kind string, sizes []int64, scale float64) float64 {
				var t float64
				for _, b := range bucketBytes(scaled(sizes, scale)) {
					t += coll(kind, b)
				}
				return t
			}
			switch c.Zero {
			case 0:
				sc.GradReduce += inBuckets("all_reduce", append(slices.Clone(splitUses), wholeUses...), rb.grads)
			case 1:
				sc.GradReduce += inBuckets("all_reduce", wholeUses, rb.grads)
				sc.StepEnd = inBuckets("reduce_scatter", splitOnce, rb.grads) + inBuckets("all_gather", splitOnce, 1)
			case 2:
				sc.GradReduce += inBuckets("all_reduce", wholeUses, rb.grads)
				sc.GradReduceMB = inBuckets("reduce_scatter", splitUses, rb.grads)
				sc.StepEnd = inBuckets("all_gather", splitOnce, 1)
			case 3:
				// The gathers and reduce-scatters are in the runs (above).
				sc.GradReduce += inBuckets("all_reduce", wholeUses, rb.grads)
			}
		}
		e.cost.Stages = append(e.cost.Stages, sc)
		r := e.placement[s]
		rankParams[r] += pbytes
		rankSizes[r] = append(rankSizes[r], sizes...)
		for _, u := range units[lo:hi] {
			for _, pr := range u.params {
				if rankSet[r].add(pr) && pr.split(c.DP) {
					splitBytes[r] += pr.bytes
					splitBlocks[r] += pr.padded(c.DP) / int64(c.DP)
				}
			}
		}
		for _, pr := range stageShared {
			if !slices.ContainsFunc(firstUse, func(u tiedUse) bool { return u.id == pr.id }) {
				firstUse = append(firstUse, tiedUse{pr.id, r})
			}
			if slices.Contains(rankShared[r], pr) {
				rankParams[r] -= pr.bytes // held by an earlier stage of this rank
				tiedGrads[r] += pr.bytes  // but each use accumulates its own partial
				if pr.split(c.DP) {
					tiedBlocks[r] += pr.padded(c.DP) / int64(c.DP)
				} else {
					tiedUnsharded[r] += pr.bytes
				}
			} else {
				// A tied parameter's gradient is accumulated per use; the parts are summed
				// into the first use's accumulator (codegen's grad_sum), so the first use on
				// a rank is the parameter's own gradient and needs no more.
				rankShared[r] = append(rankShared[r], pr)
			}
		}
		// The stage's runs as the arena sees them.
		sm := stageMemOf(units[lo:hi], e.gathered, e.padGrow)
		if c.Zero == 2 && c.DP > 1 {
			// ZeRO-2 keeps the run's gradients it reduce-scatters (those of the
			// parameters dp splits; the others are accumulated as they come) for the
			// reduce-scatter after it, whose first bucket is packed while they are all still
			// there; 16-bit gradients reduced in fp32 are widened first (codegen), and it is
			// the widened ones that are packed.
			var g int64
			var split []int64
			for _, u := range units[lo:hi] {
				g += u.mem.grads
				for _, gr := range u.wgrads {
					if !gr.split(c.DP) {
						g -= gr.bytes
					}
				}
			}
			for _, pr := range rankSetOf(units[lo:hi], slices.Clone(noParams)) {
				if pr.split(c.DP) {
					split = append(split, pr.padded(c.DP)) // packed in padded blocks
				}
			}
			wide := scaled(split, rb.grads)
			var bucket float64
			if bs := bucketBytes(wide); len(bs) > 0 {
				bucket = bs[0]
			}
			if rb.grads != 1 {
				g = sum(wide) // each 16-bit gradient is dead once widened
			}
			sm.afterW = g + int64(bucket)
		}
		// After the stage's last W, grad-reduce sums its gradients over dp in buckets, each
		// packed into one flat buffer for its collective (a lone tensor is reduced in place,
		// from its accumulator): all of them under ZeRO-0, under ZeRO-1 only those dp does
		// not split — the others are reduce-scattered at the step's end (rank-optimizer),
		// when the pipeline has freed its activations. Counting ZeRO-1's reduce-scatter here,
		// and the whole ones in it, over-predicted a rank whose other stage still holds its
		// activations then (interleaved: 7%) and one whose tied embedding dp does not split.
		all, whole = all[:0], whole[:0]
		for i, n := range sizes {
			pr := stageParams[i]
			if pr.expert {
				continue
			}
			g := int64(float64(n) * rb.grads)
			all = append(all, g)
			if !pr.split(c.DP) {
				whole = append(whole, g)
			}
		}
		if c.CP > 1 {
			sm.lastW = packedMax(all) // the cp sum of every accumulator (the dp sum reuses the layout)
		}
		if edp > 1 || c.CP > 1 {
			sm.lastW = max(sm.lastW, packedMax(expertSizes))
		}
		if c.DP > 1 {
			switch c.Zero {
			case 0:
				sm.lastW = max(sm.lastW, packedMax(all))
			case 1:
				sm.lastW = max(sm.lastW, packedMax(whole))
			}
		}
		if c.DP > 1 && (c.Zero == 1 || c.Zero == 2) {
			var split []param // as ZeRO lays them out: padded
			for _, pr := range stageParams {
				if pr.split(c.DP) {
					pr.bytes = pr.padded(c.DP)
					split = append(split, pr)
				}
			}
			stageSplit = append(stageSplit, split)
		}
		sm.send, sm.recvI = units[hi-1].send, units[hi-1].mem.recvI
		e.stageMem = append(e.stageMem, sm)
		// Before the schedule is known: what F needs beyond its own stash, or I beyond the
		// stash it reads, is the least the rank needs beyond one micro-batch's stash (the
		// static condition must not prune a configuration that fits).
		work[r] = max(work[r], sm.runF-sm.stash, sm.runI-sm.argsI)
		e.oneMB[r] += int64(sc.ActBytes)
		busy[r] += float64(c.Microbatches) * (sc.F + sc.I + sc.W)
		lo = hi
	}
	// A lower bound on the step: each rank computes for busy[r], cannot start before the
	// first micro-batch's forward has reached its first stage (stage r under every
	// placement ppc has) and ends with its step-end collectives (ZeRO's).
	warm := 0.0
	for r := range c.PP {
		end := 0.0
		for s, rr := range e.placement {
			if rr == r {
				end += e.cost.Stages[s].StepEnd
			}
		}
		e.bound = max(e.bound, warm+busy[r]+end)
		warm += e.cost.Stages[r].F
	}
	// The step's end, once the pipeline has freed its activations. The optimizer updates
	// every parameter and state in place (codegen), so an update holds nothing new in the
	// arena but a new 16-bit parameter block under ZeRO 1 and 2, kept until it is
	// all-gathered. ZeRO-1 first reduce-scatters the gradients dp splits, bucket by bucket
	// (packed, and the rank's block of it), and keeps the blocks until the optimizer reads
	// them; the all-gather packs a bucket's new blocks and gathers the whole bucket. A
	// parameter dp does not split is updated whole, in place.
	e.stepEnd = make([]int64, c.PP)
	if c.DP > 1 && (c.Zero == 1 || c.Zero == 2) {
		dp := int64(c.DP)
		for r := range c.PP {
			// The rank's split parameters in stage order (a tied one once, where it
			// first appears), each stage bucketed apart.
			var stages [][]int64
			var P, largest int64
			seen := slices.Clone(noParams)
			for s, rr := range e.placement {
				if rr != r || s >= len(stageSplit) {
					continue
				}
				var sizes []int64
				for _, pr := range stageSplit[s] {
					if seen.add(pr) {
						sizes = append(sizes, pr.bytes)
						P += pr.bytes
						largest = max(largest, pr.bytes)
					}
				}
				stages = append(stages, sizes)
			}
			// A tied parameter dp does not split whose first use (partial 0) is on another
			// rank: that partial is received (tied-grads) before the last bucket is
			// reduce-scattered, and the sum is formed in it (grad_sum adds into the first
			// part), held until the optimizer reads it.
			var recv int64
			for _, pr := range rankShared[r] {
				if !pr.split(c.DP) && !slices.Contains(firstUse, tiedUse{pr.id, r}) {
					recv += int64(float64(pr.bytes) * rb.grads)
				}
			}
			var peak, blocks int64
			if c.Zero == 1 {
				// Reduce-scatter, bucket by bucket: the blocks so far, the bucket packed
				// (a lone tensor is scattered from its accumulator) and its blocks.
				var last int64
				for _, sizes := range stages {
					for _, b := range bucketsOf(scaled(sizes, rb.grads)) {
						last = blocks + b.packed() + b.bytes/dp
						peak = max(peak, last)
						blocks += b.bytes / dp
					}
				}
				// The optimizer reads each gradient block once and makes the parameter's
				// new block: at most all the gradient blocks and the first new block.
				peak = max(peak, last+recv, blocks+largest/dp+recv)
			}
			// The all-gather, bucket by bucket: the new blocks not yet gathered, and the
			// whole bucket gathered (a lone tensor straight into its parameter).
			pending := P / dp
			for _, sizes := range stages {
				for _, b := range bucketsOf(sizes) {
					peak = max(peak, pending+b.packed())
					pending -= b.bytes / dp
				}
			}
			e.stepEnd[r] = max(peak, P/dp)
		}
	}
	e.work = work
	e.rankMem = make([]codegen.Memory, c.PP)
	for r := range e.rankMem {
		pb := rankParams[r]
		gr := func(x int64) int64 { return int64(float64(x) * rb.grads) }
		st := func(x int64) int64 { return int64(float64(x) * rb.state) }
		m := codegen.Memory{Params: pb, Grads: gr(pb + tiedGrads[r]), Optimizer: st(pb), Workspace: work[r], Activations: e.oneMB[r]}
		// ZeRO shards a parameter's state (and under ZeRO-2 its gradient) over dp in
		// blocks of ceil(rows/dp) rows; scalars and expert shards stay whole (passes'
		// optimizer).
		held := pb - splitBytes[r] + splitBlocks[r] // the rank's parameters as ZeRO holds them
		if c.Zero >= 1 && c.DP > 1 {
			m.Optimizer = st(held)
		}
		if c.Zero >= 2 && c.DP > 1 {
			m.Grads = gr(held + tiedBlocks[r] + tiedUnsharded[r])
		}
		if c.Zero == 3 && c.DP > 1 {
			m.Params = held
		}
		e.rankMem[r] = m
	}
	return e
}

// padGrow is what ZeRO-3's W run of unit u holds beyond its probe's measure (taken at dp 2,
// readZero3) around its gradients' reduce-scatters: a gradient dp splits is live whole (in
// the accumulation dtype) with, where dp does not divide its rows, its copy padded to
// ceil(rows/dp)·dp rows (param-gather's pad), else its reduce-scattered block. The run's
// peak around them moves by the difference of the largest such pair at dp and at 2.
func (e *evaluation) padGrow(u unitCost) int64 {
	c := e.c
	if c.Zero != 3 || c.DP < 2 {
		return 0
	}
	scale := e.p.recipeBytes().grads
	pair := func(gr param, dp int) int64 {
		whole, padded := float64(gr.bytes)*scale, float64(gr.padded(dp))*scale
		if gr.dim0%dp != 0 {
			return int64(whole + padded)
		}
		return int64(whole + padded/float64(dp))
	}
	var at, probe int64
	for _, gr := range u.wgrads {
		if gr.split(c.DP) {
			at, probe = max(at, pair(gr, c.DP)), max(probe, pair(gr, 2))
		}
	}
	return at - probe
}

// stageMem is one stage's runs as the arena holds them, per micro-batch: what F leaves
// stashed, what I frees of it and holds for W, and the most each run needs: F on top of
// what is live when it starts, I and W on top of what is live less the inputs they read
// (argsI, argsW: they free those as they go; codegen.RunMemory.PeakWithArgs). For a stage of
// several units the units' values made or freed earlier in the same run are included.
type stageMem struct {
	stash, stashI, held int64
	argsI, argsW        int64
	runF, runI, runW    int64
	afterW              int64 // what follows W once it has freed its inputs (ZeRO-2's reduce-scatter)
	lastW               int64 // what follows the stage's last W (its gradients' dp reduction)
	// send is what F hands the next stage, recvI what the next stage's I hands this one's
	// backward: held in the arena in between when both stages are on one rank (ZB-V's turn).
	send, recvI int64
}

// stageMemOf composes a stage from its units, as one run of the stage's function runs theirs:
// F in unit order (each unit's stash stays as the next one runs), I and W in reverse (I holds
// each unit's values for W and frees what only it read as it goes; W frees both). Under full
// recomputation each unit is rebuilt from its stashed inputs right before its own backward
// (split-stages rebuilds one layer at a time, in I and again in W), which its probe's runs
// already hold: the units before it hold only their inputs.
//
// Under ZeRO-3 (gathered gives the bytes a unit's run gathers; 0 otherwise) each run is its
// ZeRO-3 measure, and the copies gathered ahead of it are added: param-gather gathers a
// segment's parameters before the previous segment's first reader, so while a unit runs,
// the next segment's copies (the previous one's, in I and W, which run the units in
// reverse) and the later units of its own segment are already there.
func stageMemOf(units []unitCost, gathered func([]param) (int64, float64), padGrow func(unitCost) int64) stageMem {
	var sm stageMem
	var made int64
	n := len(units)
	// ahead[k] is what is gathered while unit k runs beyond its own copies, per kind.
	var ahead [3][]int64
	z3 := false
	first := [3]int{-1, -1, -1} // the first unit each kind's run gathers for
	for k := range 3 {
		ahead[k] = make([]int64, n)
		g := make([]int64, n)
		for j := range units {
			g[j], _ = gathered(units[j].gathers[k])
			z3 = z3 || g[j] > 0
		}
		dir, j0 := 1, 0 // F runs the units in order, I and W in reverse
		if k > 0 {
			dir, j0 = -1, n-1
		}
		for j := j0; j >= 0 && j < n; j += dir {
			if g[j] > 0 {
				first[k] = j
				break
			}
		}
		for j := range units {
			if g[j] == 0 {
				// A gather is placed right before a reader of the copies: a unit that
				// reads none (a unit with no parameters but scalars) issues none,
				// and the next segment's copies are gathered in the next unit's run.
				continue
			}
			// The later units of j's segment, then the next segment's (units without
			// parameters belong to no segment).
			seg, next := units[j].segment, 0
			for i := j + dir; i >= 0 && i < n; i += dir {
				s := units[i].segment
				if s == -2 {
					continue
				}
				if s != seg {
					if next > 0 {
						break
					}
					seg, next = s, 1
				}
				ahead[k][j] += g[i]
			}
		}
	}
	// A unit's run under ZeRO-3: before its first gather it holds its own copies too (unless
	// its segment is the first the run gathers, gathered there as in the probe), from it on
	// the copies gathered ahead.
	run := func(k, j int, plain int64) int64 {
		if !z3 {
			return plain
		}
		m := units[j].mem
		var own int64
		if first[k] >= 0 && units[j].segment != units[first[k]].segment {
			own, _ = gathered(units[j].gathers[k])
		}
		// The probe gathered its copies padded for dp 2 (readZero3); at this dp their
		// padding, and so the copies, differ by grow.
		all, _ := gathered(units[j].gathers[k])
		var probe int64
		for _, pr := range units[j].gathers[k] {
			probe += pr.padded(2)
		}
		grow := all - probe
		if k == 2 {
			grow += padGrow(units[j])
		}
		return max(m.before3[k]+own, m.after3[k]+grow+ahead[k][j])
	}
	for j, u := range units {
		m := u.mem
		sm.runF = max(sm.runF, made+run(0, j, m.runF))
		made += m.stash
		sm.stash += m.stash
		sm.stashI += m.stashI
		sm.held += m.held
		sm.argsI += m.argsI
		sm.argsW += m.stash - m.stashI + m.held
	}
	before := make([]int64, len(units)) // unprocessed units' inputs
	beforeW := make([]int64, len(units))
	for k := 1; k < len(units); k++ {
		p := units[k-1].mem
		before[k] = before[k-1] + p.argsI
		beforeW[k] = beforeW[k-1] + p.stash - p.stashI + p.held
	}
	var done int64 // processed units: what their I left (held, and inputs W still reads)
	for k := len(units) - 1; k >= 0; k-- {
		m := units[k].mem
		sm.runI = max(sm.runI, before[k]+done+run(1, k, m.runI))
		done += m.held + m.argsI - m.stashI
		sm.runW = max(sm.runW, beforeW[k]+run(2, k, m.runW))
	}
	return sm
}

// held is what one micro-batch of each stage holds from its F and from its I to its W, as
// ppc compile measures it (codegen.StageHeld) to cap the W's a schedule defers.
func (e *evaluation) held() schedule.Held {
	h := schedule.Held{Stash: make([]int64, len(e.stageMem)), Held: make([]int64, len(e.stageMem))}
	for i, sm := range e.stageMem {
		h.Stash[i], h.Held[i] = sm.stash, sm.stash-sm.stashI+sm.held
	}
	return h
}

// arena replays each rank's runs in schedule order over the stages' stageMem: the most
// bytes the arena holds at once (peak) and the most of them forward runs made (fwd) — ppc
// compile's arena, and its split into activations and workspace. A token-sliced schedule's
// units are its slices, each holding its share of the micro-batch's bytes.
func (e *evaluation) arena(s *schedule.Schedule) (peak, fwd []int64) {
	peak, fwd = make([]int64, s.Ranks), make([]int64, s.Ranks)
	runs := e.c.Microbatches * max(1, len(e.c.TokenSlices)) // W runs of a stage per step
	frac := func(unit int) float64 { return 1 }
	if n := len(e.c.TokenSlices); n > 1 {
		T := 0
		for _, l := range e.c.TokenSlices {
			T += l
		}
		frac = func(unit int) float64 { return float64(e.c.TokenSlices[unit%n]) / float64(T) }
	}
	for r, acts := range s.Actions {
		if r < len(e.stepEnd) {
			peak[r] = e.stepEnd[r]
		}
		var live, liveF int64
		ws := map[int]int{} // W runs so far, per stage
		for _, a := range acts {
			for _, c := range a.Computes() {
				if c.Stage < 0 || c.Stage >= len(e.stageMem) {
					continue
				}
				sm, f := e.stageMem[c.Stage], frac(c.Microbatch)
				sc := func(x int64) int64 { return int64(float64(x) * f) }
				// A value passed between two stages of this rank stays in the arena from
				// the run making it to the run reading it (whose peak counts it).
				prevHere := c.Stage > 0 && e.placement[c.Stage-1] == r
				nextHere := c.Stage+1 < len(e.stageMem) && e.placement[c.Stage+1] == r
				backI := func() {
					if nextHere {
						live -= sc(sm.recvI)
					}
					peak[r] = max(peak[r], live-sc(sm.argsI)+sc(sm.runI))
					live += sc(sm.held - sm.stashI)
					liveF -= sc(sm.stashI)
					if prevHere {
						live += sc(e.stageMem[c.Stage-1].recvI)
					}
				}
				backW := func() {
					peak[r] = max(peak[r], live-sc(sm.argsW)+sc(sm.runW))
					live -= sc(sm.stash - sm.stashI + sm.held)
					liveF -= sc(sm.stash - sm.stashI)
					peak[r] = max(peak[r], live+sc(sm.afterW))
					if ws[c.Stage]++; ws[c.Stage] == runs {
						peak[r] = max(peak[r], live+sm.lastW)
					}
				}
				switch c.Kind {
				case schedule.Forward:
					if prevHere {
						in := sc(e.stageMem[c.Stage-1].send)
						live, liveF = live-in, liveF-in
					}
					peak[r] = max(peak[r], live+sc(sm.runF))
					fwd[r] = max(fwd[r], liveF+sc(sm.runF))
					live += sc(sm.stash)
					liveF += sc(sm.stash)
					if nextHere {
						live, liveF = live+sc(sm.send), liveF+sc(sm.send)
					}
				case schedule.BackwardInput:
					backI()
				case schedule.BackwardWeight:
					backW()
				case schedule.FullBackward:
					backI()
					backW()
				}
			}
		}
	}
	return peak, fwd
}

type splitKey struct {
	k    probeKey
	b, s int
}

type scaledKey struct {
	k probeKey
	b int
}

// unitsAt is the units of probe k at micro-batches of b sequences (nil: no probe).
func (p *planner) unitsAt(k probeKey, b int) []unitCost {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u, ok := p.scaled[scaledKey{k, b}]; ok {
		return u
	}
	pair, ok := p.probes[k]
	if !ok {
		return nil
	}
	u := at(pair, b)
	p.scaled[scaledKey{k, b}] = u
	return u
}

// bucketBytes are the sizes of the buckets the rank programs group tensors of these sizes
// into, in order: up to BucketBytes each, a larger tensor alone (passes' buckets).
// recipeBytesPer is the model state per byte of the parameters the forward reads
// (passes.CompileRecipe with AdamW and fp32 gradients, what ppc plan's commands compile):
// gradient accumulators and the optimizer's state (fp32 main parameters included).
type recipeBytesPer struct{ grads, state float64 }

func (p *planner) recipeBytes() recipeBytesPer {
	r := p.recipe()
	return recipeBytesPer{grads: r.Grads / r.Weights, state: (r.Master + r.Optimizer) / r.Weights}
}

// scaled multiplies each size by f.
func scaled(sizes []int64, f float64) []int64 {
	out := make([]int64, len(sizes))
	for i, n := range sizes {
		out[i] = int64(float64(n) * f)
	}
	return out
}

func sum(xs []int64) int64 {
	var t int64
	for _, x := range xs {
		t += x
	}
	return t
}

func bucketBytes(sizes []int64) []float64 {
	var out []float64
	var cur int64
	for _, n := range sizes {
		if cur > 0 && cur+n > passes.BucketBytes {
			out = append(out, float64(cur))
			cur = 0
		}
		cur += n
	}
	if cur > 0 {
		out = append(out, float64(cur))
	}
	return out
}

// bucket is one gradient bucket: its bytes and how many tensors it holds.
type bucket struct {
	bytes int64
	n     int
}

// packed is the flat buffer the bucket is packed into for its collective: none for a lone
// tensor, reduced or gathered in place.
func (b bucket) packed() int64 {
	if b.n > 1 {
		return b.bytes
	}
	return 0
}

// bucketsOf groups sizes (in order) as bucketBytes does.
func bucketsOf(sizes []int64) []bucket {
	var out []bucket
	var cur bucket
	for _, x := range sizes {
		if cur.bytes > 0 && cur.bytes+x > passes.BucketBytes {
			out = append(out, cur)
			cur = bucket{}
		}
		cur.bytes += x
		cur.n++
	}
	if cur.n > 0 {
		out = append(out, cur)
	}
	return out
}

// packedMax is the largest flat buffer the buckets of sizes (in order, as bucketBytes forms
// them) are packed into: a bucket of one tensor is reduced or gathered in place, packing
// nothing.
func packedMax(sizes []int64) int64 {
	var most int64
	for _, b := range bucketsOf(sizes) {
		most = max(most, b.packed())
	}
	return most
}

// bucketed is a collective over g bytes sent in BucketBytes buckets, each paying latency.
func bucketed(g float64, t func(float64) float64) float64 {
	n := max(1, int((g+passes.BucketBytes-1)/passes.BucketBytes))
	return float64(n) * t(g/float64(n))
}

// sliceStages chooses the token slices (TeraPipe's dynamic program on the slice cost
// model, or the fixed lengths) and gives each stage its per-slice costs; false when the
// model cannot be sliced at this tp or the slicing fails.
func (e *evaluation) sliceStages() bool {
	p, c := e.p, &e.c
	p.mu.Lock()
	sl := p.slicers[c.TP]
	p.mu.Unlock()
	if sl == nil {
		return false
	}
	T := float64(p.seq)
	// parts is stage s's seconds for slice (l, ctx): its units' forward and backward, the
	// recomputation's share, and the transfer into its first unit. Units of one group (the
	// layers) price alike: each group's slice is priced once per search.
	parts := func(s, b, l, ctx int) passes.SliceTimes {
		lo := 0
		if s > 0 {
			lo = e.bounds[s-1]
		}
		var t passes.SliceTimes
		for k := lo; k < e.bounds[s]; k++ {
			u := p.sliceParts(sl, c.TP, k, b, l, ctx)
			t.F, t.I, t.W = t.F+u.F, t.I+u.I+e.units[k].recompute*float64(l)/T, t.W+u.W
			if k == lo {
				t.Transfer = u.Transfer
			}
		}
		return t
	}
	lengths := p.fixedSlices
	if lengths == nil {
		memo := map[[3]int]float64{}
		cost := func(b, l, ctx int) float64 {
			if v, ok := memo[[3]int{b, l, ctx}]; ok {
				return v
			}
			worst := 0.0
			for s := range e.bounds {
				t := parts(s, b, l, ctx)
				worst = max(worst, t.F+t.I+t.W+t.Transfer)
			}
			memo[[3]int{b, l, ctx}] = worst
			return worst
		}
		plan, err := schedule.PlanTokenSlices(p.seq, c.MicrobatchSize*c.Microbatches, c.PP, cost, schedule.TokenPlanOptions{Microbatches: c.Microbatches})
		if err != nil || len(plan.Lengths) < 2 {
			return false // one slice: the unsliced candidate already is this configuration
		}
		lengths = plan.Lengths
	}
	c.TokenSlices = lengths
	for s := range e.cost.Stages {
		sc := &e.cost.Stages[s]
		whole := *sc
		sc.F, sc.I, sc.W, sc.Slices = 0, 0, 0, nil
		ctx := 0
		for _, l := range lengths {
			t := parts(s, c.MicrobatchSize, l, ctx)
			if s < len(e.gather) { // each slice's run gathers its parameters (ZeRO-3)
				t.F, t.I, t.W = t.F+e.gather[s][0], t.I+e.gather[s][1], t.W+e.gather[s][2]
			}
			frac := float64(l) / T
			sc.Slices = append(sc.Slices, schedule.StageCost{F: t.F, I: t.I, W: t.W,
				FColl: whole.FColl * frac, IColl: whole.IColl * frac, WColl: whole.WColl * frac,
				CommBytes: whole.CommBytes * frac, ActBytes: whole.ActBytes * frac})
			sc.F, sc.I, sc.W = sc.F+t.F, sc.I+t.I, sc.W+t.W
			ctx += l
		}
	}
	return true
}

// sliceParts is sl.Parts (the model at tp) for unit k, cached by the unit's group.
func (p *planner) sliceParts(sl *passes.SliceCostModel, tp, k, b, l, ctx int) passes.SliceTimes {
	key := [5]int{tp, sl.Group(k), b, l, ctx}
	p.mu.Lock()
	t, ok := p.sliceCache[key]
	p.mu.Unlock()
	if ok {
		return t
	}
	t = sl.Parts(k, b, l, ctx)
	p.mu.Lock()
	p.sliceCache[key] = t
	p.mu.Unlock()
	return t
}

// withMargin is m with the GPU's margin.
func (e *evaluation) withMargin(m codegen.Memory) codegen.Memory {
	m.Margin = 0
	m.Margin = codegen.MemoryMargin(m.Peak(), e.p.dev.MemBytes)
	return m
}

// staticPeak is the largest rank's memory with one micro-batch's activations.
func (e *evaluation) staticPeak() int64 {
	var most int64
	for _, m := range e.rankMem {
		most = max(most, e.withMargin(m).Peak())
	}
	return most
}

// fitsStatic says whether every rank fits with one micro-batch's activations (a necessary
// condition: every schedule stashes at least one).
func (e *evaluation) fitsStatic() bool { return e.staticPeak() <= e.p.dev.MemBytes }

// unsimulated is the plan with only its bound and memory known.
func (e *evaluation) unsimulated() Plan {
	pl := Plan{Config: e.c, Ideal: e.bound}
	pl.Config.Layout = layoutString(e.units, e.bounds)
	for _, m := range e.rankMem {
		m = e.withMargin(m)
		pl.Memory = append(pl.Memory, m)
		pl.PeakMemory = append(pl.PeakMemory, m.Peak())
	}
	pl.Command = e.p.command(pl.Config)
	return pl
}

// simulate builds the schedule for the stage costs and simulates it: the step time and its
// parts, and the activations each rank stashes at its peak. fits is false when a rank does
// not fit; built is false when the configuration turned out not to exist (its schedule or
// its token slicing could not be made). full breaks the step time down (three simulations
// instead of one).
func (e *evaluation) simulate(full bool) (pl Plan, fits, built bool) {
	if e.c.sliced && e.c.TokenSlices == nil && !e.sliceStages() {
		// The slicing is chosen only for the candidates worth simulating: their bound
		// (the unsliced compute) is the sliced one's too, less the K/V copies.
		return Plan{}, false, false
	}
	pl = e.unsimulated()
	c := e.c
	p := e.p
	s, err := p.schedule(c, e.cost, full)
	if err != nil {
		return pl, false, false
	}
	s = schedule.CapHeld(s, e.held())
	sim := schedule.SimulateStep
	if full {
		sim = schedule.Simulate
	}
	res, err := sim(s, e.cost)
	if err != nil {
		return pl, false, false
	}
	pl.StepTime, pl.Ideal, pl.BubbleTime, pl.Collectives, pl.Transfers = res.StepTime, res.IdealTime, res.BubbleTime, res.CollectiveTime, res.CommTime
	pl.TokensPerSec = float64(p.batch*p.seq) / res.StepTime
	// The model FLOPs: three times the forward's matmuls (flopsTotal, per sequence and tp
	// rank) over the global batch; recomputation does not count.
	flops := 3 * e.flopsTotal * float64(c.TP) * float64(max(c.CP, 1)) * float64(p.batch)
	pl.TFLOPsPerGPU = flops / res.StepTime / float64(p.req.GPUs) / 1e12
	pl.MFU = flops / res.StepTime / float64(p.req.GPUs) / p.peakRate()
	pl.BubbleRatio = res.BubbleRatio
	fits = true
	pl.Memory, pl.PeakMemory = nil, nil
	if e.compiled != nil {
		for _, m := range e.compiled {
			pl.Memory = append(pl.Memory, m)
			pl.PeakMemory = append(pl.PeakMemory, m.Peak())
			fits = fits && m.Peak() <= p.dev.MemBytes
		}
		return pl, fits, true
	}
	peak, fwd := e.arena(s)
	for r, m := range e.rankMem {
		if r < len(peak) {
			// The arena as ppc compile splits it: the forward runs' buffers at their most,
			// and the rest (what the backward holds beyond them; ZeRO-2's block stays).
			m.Workspace += peak[r] - fwd[r] - e.work[r]
			m.Activations = fwd[r]
		}
		m = e.withMargin(m)
		pl.Memory = append(pl.Memory, m)
		pl.PeakMemory = append(pl.PeakMemory, m.Peak())
		fits = fits && m.Peak() <= p.dev.MemBytes
	}
	return pl, fits, true
}

// schedule builds c's schedule: the hand-written ones once per shape, zb-auto for the costs.
// In the search (exact false) the hand-written layout zb-auto is never slower than stands in
// for it — ZB-H1 at its default memory — since building zb-auto for thousands of candidates
// would dominate the search; the plans printed are built for their costs and simulated again.
func (p *planner) schedule(c Config, cost schedule.Cost, exact bool) (*schedule.Schedule, error) {
	if !schedule.CostAware(c.Schedule) {
		return p.handLayout(c)
	}
	if !exact && len(c.TokenSlices) < 2 {
		proxy := c
		proxy.Schedule = "zb-h1"
		if s, err := p.handLayout(proxy); err == nil {
			return s, nil
		}
	}
	s, err := schedule.GenerateFor(c.Schedule, c.PP, c.Microbatches, c.V, cost, 0)
	if err == nil && len(c.TokenSlices) > 1 {
		s, err = schedule.SliceTokens(s, len(c.TokenSlices))
	}
	return s, err
}

// handLayout is the unit-cost layout of c's schedule (token-sliced as c says), built once
// per shape.
func (p *planner) handLayout(c Config) (*schedule.Schedule, error) {
	k := schedKey{c.Schedule, c.PP, c.Microbatches, c.V, len(c.TokenSlices)}
	p.mu.Lock()
	e, ok := p.scheds[k]
	p.mu.Unlock()
	if ok {
		return e.s, e.err
	}
	sc, err := schedule.Generate(c.Schedule, c.PP, c.Microbatches, c.V)
	if err == nil && len(c.TokenSlices) > 1 {
		sc, err = schedule.SliceTokens(sc, len(c.TokenSlices))
	}
	p.mu.Lock()
	p.scheds[k] = schedEntry{sc, err}
	p.mu.Unlock()
	return sc, err
}

type schedKey struct {
	name           string
	pp, m, v, cuts int // cuts: token slices
}

type schedEntry struct {
	s   *schedule.Schedule
	err error
}

// command is the ppc compile command line that builds c.
func (p *planner) command(c Config) string {
	args := []string{"ppc", "compile", shellQuote(p.req.Model)}
	if p.req.Load.Preset != "" {
		args = append(args, "--preset", shellQuote(p.req.Load.Preset))
	}
	for _, k := range sortedKeys(p.req.Load.Set) {
		if k == "batch" || (k == "seq" && p.req.Seq > 0) {
			continue // set below
		}
		args = append(args, "--set", shellQuote(k+"="+p.req.Load.Set[k]))
	}
	args = append(args, "--set", fmt.Sprintf("batch=%d", p.batch))
	if p.req.Seq > 0 {
		args = append(args, "--set", fmt.Sprintf("seq=%d", p.req.Seq))
	}
	args = append(args, "--gpu", shellQuote(p.dev.Name), "--precision", p.precision,
		"--pp", fmt.Sprint(c.PP), "--dp", fmt.Sprint(c.DP), "--tp", fmt.Sprint(c.TP))
	if c.CP > 1 {
		args = append(args, "--cp", fmt.Sprint(c.CP))
	}
	if c.EP > 1 {
		args = append(args, "--ep", fmt.Sprint(c.EP))
	}
	if c.SP {
		args = append(args, "--sp")
	}
	if m := p.req.VocabMultiple; c.TP > 1 && m > 0 && m != compiler.DefaultVocabMultiple {
		args = append(args, "--make-vocab-size-divisible-by", fmt.Sprint(m))
	}
	args = append(args, "--microbatches", fmt.Sprint(c.Microbatches), "--schedule", c.Schedule)
	if c.V > 1 {
		args = append(args, "--virtual-stages", fmt.Sprint(c.V))
	}
	if c.Recompute != "none" {
		args = append(args, "--recompute", c.Recompute)
	}
	if c.Zero > 0 {
		args = append(args, "--zero", fmt.Sprint(c.Zero))
	}
	if len(c.TokenSlices) > 1 {
		parts := make([]string, len(c.TokenSlices))
		for i, l := range c.TokenSlices {
			parts[i] = fmt.Sprint(l)
		}
		args = append(args, "--token-slices", strings.Join(parts, ","))
	}
	if c.PP > 1 {
		args = append(args, "--partition", "layout", "--layout", shellQuote(c.Layout))
	}
	return strings.Join(append(args, "-o", "out"), " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ',' || r == '+' || r == ':' ||
			r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// tiedUse is the rank of a tied parameter's first use (its partial 0).
type tiedUse struct {
	id   int32
	rank int
}

// rankSetOf is the parameters units read, each once, in order; seen is an empty set for
// them.
func rankSetOf(units []unitCost, seen paramSet) []param {
	var out []param
	for _, u := range units {
		for _, pr := range u.params {
			if seen.add(pr) {
				out = append(out, pr)
			}
		}
	}
	return out
}

// compiledMemory compiles c as the command the planner prints for it does and returns ppc
// compile's memory per pipeline rank (with its margin). The planner's own memory for token
// slices is the unsliced stages' scaled by each slice's share of the tokens, which misses
// what slicing adds: the K/V prefixes each slice's attention joins and rebuilds, the
// per-slice runs' activations (2.4× the replay's on the tiny GPT at 8 slices). So each
// sliced configuration the search ranks among those it prints is compiled, and its memory is
// compile's: what `ppc plan` prints for it is what `ppc compile` plans, by construction, and
// one that does not fit is not printed. (Inside the search the replay stands in: a compile
// of GPT-3 175B at pp 48 with 32 slices takes over a minute on a loaded 2-core machine.)
func (p *planner) compiledMemory(c Config) ([]codegen.Memory, error) {
	key := p.command(c)
	p.mu.Lock()
	m, ok := p.compiledMem[key]
	p.mu.Unlock()
	if ok {
		return m.mem, m.err
	}
	lengths := make([]string, len(c.TokenSlices))
	for i, l := range c.TokenSlices {
		lengths[i] = fmt.Sprint(l)
	}
	opts := compiler.Options{Load: p.load(p.batch), PP: c.PP, DP: c.DP, TP: c.TP, CP: c.CP, EP: c.EP, SP: c.SP,
		VocabMultiple: p.req.VocabMultiple, Microbatches: c.Microbatches, Schedule: c.Schedule, VirtualStages: c.V,
		Recompute: c.Recompute, Zero: c.Zero, TokenSlices: strings.Join(lengths, ","), Precision: p.precision, GPU: p.dev.Name}
	if c.PP > 1 {
		opts.Partition, opts.Layout = "layout", c.Layout
	}
	var mem []codegen.Memory
	res, err := compiler.Compile(p.req.Model, opts)
	if err == nil {
		mem = make([]codegen.Memory, c.PP)
		for _, prog := range res.Output.Plan.Programs {
			if prog.PP >= 0 && prog.PP < c.PP {
				mem[prog.PP] = prog.Memory(p.dev.MemBytes)
			}
		}
	}
	p.mu.Lock()
	p.compiledMem[key] = compiledEntry{mem, err}
	p.mu.Unlock()
	return mem, err
}

type compiledEntry struct {
	mem []codegen.Memory
	err error
}
