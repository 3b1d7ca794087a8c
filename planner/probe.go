package planner

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
)

// unitCost is one unit of the model (E, a layer tK, L) as a probe compile sees it, for one
// sequence: the partition's per-op estimates and what split-stages decided.
type unitCost struct {
	label       string
	f, i, w     float64 // seconds, collectives included
	fc, ic, wc  float64 // of f, i and w, the tensor-parallel collectives
	recompute   float64 // seconds the backward spends recomputing forward ops
	flops       float64 // forward matmul FLOPs of one tp rank
	act         int64   // bytes of every forward result (the transient high-water mark's bound)
	stash, send int64   // bytes stashed for the backward, sent to the next unit
	paramBytes  int64   // the parameters the unit reads, as one tp rank holds them
	params      []param // those parameters, in order (ZeRO's buckets group them)
	shared      []param // of them, those another unit reads too (a tied embedding)
	mem         unitMem
	// ZeRO-3: the whole copies each of the unit's runs (F, I, W) gathers — a parameter per
	// dtype it is read in (its 16-bit cast is gathered as such) — and the segment the unit's
	// gathers belong to (param-gather's: its parameters' layer; −2: it has none).
	gathers [3][]param
	segment int
	// wgrads are the weight gradients the unit's W returns, as it returns them (ZeRO-2 and 3
	// keep those they reduce-scatter until the run ends).
	wgrads []param
}

// unitMem is what the unit's runs hold in the arena per micro-batch, as code generation lays
// them out (codegen.RunMemories on the probe): the values one run hands another, and each
// run's own peak. The planner replays a rank's runs in schedule order over these to get the
// arena ppc compile plans.
type unitMem struct {
	stash     int64 // forward values the unit's backward reads (its own F's and received ones)
	stashI    int64 // of stash, those only I reads: freed when I ends, the rest when W ends
	recvStash int64 // of stash, the received input
	held      int64 // values I makes or receives for W (output gradients of its linears): held from I to W
	inF, inI  int64 // received values that only F (the input) or I (the gradient) reads
	recvI     int64 // every value another unit's I hands this unit's backward (its output gradient)
	argsI     int64 // of stash, what I reads (stashI and what W reads after it)
	// The most each run holds at once of its own buffers (temporaries, results) and of its
	// inputs until their last use in it (codegen.RunMemory.PeakWithArgs).
	runF, runI, runW int64
	grads            int64 // the weight gradients W returns (compute dtype)
	// The runs' peaks as ZeRO-3 lays them out (passes.GatherAsZero3: the gathered copies from
	// the run's start to their last reader), measured as runF, runI and runW are.
	runF3, runI3, runW3 int64
	// Of each, the peak before the run's first gather and from it on (codegen.RunMemory's
	// Before and After).
	before3, after3 [3]int64
}

type param struct {
	name string
	// id numbers the probe's parameters densely by name (readProbe), so that a
	// configuration's evaluation keeps its sets of them as bits (paramSet) rather than maps
	// by name: the planner evaluates thousands of configurations, each over every parameter
	// (GPT-3 175B has over a thousand tensors), and the maps were a sixth of a search.
	id    int32
	bytes int64
	dim0  int // its first dim as one tp rank holds it (ZeRO shards it over dp, padded; 0 or −1: never)
	// expert: an expert parameter's ep shard, whose gradient is summed over edp = dp/ep only.
	expert bool
}

// paramSet is a set of a probe's parameters, a bit per id.
type paramSet []uint64

// newParamSet is an empty set for the parameters of units.
func newParamSet(units []unitCost) paramSet {
	n := int32(0)
	for _, u := range units {
		for _, pr := range u.params {
			n = max(n, pr.id+1)
		}
	}
	return make(paramSet, (n+63)/64)
}

// add adds pr and reports whether it was not in s yet.
func (s paramSet) add(pr param) bool {
	w, b := pr.id>>6, uint64(1)<<(pr.id&63)
	if s[w]&b != 0 {
		return false
	}
	s[w] |= b
	return true
}

// split reports whether ZeRO over dp replicas splits pr into blocks: every parameter with a
// first dim but the expert shards (passes' optimizer), padded where dp does not divide it.
func (pr param) split(dp int) bool { return dp > 1 && pr.dim0 > 0 && !pr.expert }

// padded is pr's bytes as ZeRO over dp lays them out: ceil(dim0/dp)·dp rows, each rank's
// block 1/dp of it (pr's own bytes where ZeRO does not split it).
func (pr param) padded(dp int) int64 {
	if !pr.split(dp) {
		return pr.bytes
	}
	rows := int64(passes.ZeroBlockRows(pr.dim0, dp)) * int64(dp)
	return pr.bytes / int64(pr.dim0) * rows
}

// probeKey names one probe compile: the tensor-parallel layout, the recompute mode and the
// context-parallel size (a cp rank's units hold its share of each sequence and the ring).
type probeKey struct {
	tp        int
	sp        bool
	recompute string
	cp        int
	ep        int // expert parallelism: the probe runs dp = ep, its experts sharded and exchanged
}

// probe compiles the model through split-stages with one unit per stage, once per
// tensor-parallel layout, split once per recompute mode, at micro-batches of one and of two
// sequences, and reads each unit's costs at both. A micro-batch of b sequences costs the
// affine extrapolation: some work is per micro-batch whatever its size (collectives'
// latencies, a run's fixed costs), the rest grows with it.
//
// Under expert parallelism the probe is a replica of dp = ep ranks with the experts sharded:
// its units read the all_to_alls' costs (priced on NVLink when the ep group stays inside a
// node) and hold the expert parameters /ep; the compute is ep = 1's (each rank runs E/ep
// experts on ep·capacity rows: static shapes, so no rank waits on a busier one).
func (p *planner) probe(tp, cp, ep int, sp bool, modes []string) (map[probeKey][2][]unitCost, error) {
	out := map[probeKey][2][]unitCost{}
	ep = max(ep, 1)
	for b := 1; b <= 2; b++ {
		opts := compiler.Options{Load: p.load(b * ep), PP: p.units, TP: tp, CP: cp, DP: ep, EP: ep, SP: sp, Microbatches: 1, Schedule: "gpipe",
			Precision: p.precision, Partition: "auto", GPU: p.dev.Name, VocabMultiple: p.req.VocabMultiple}
		mods, err := compiler.ProbeSplit(p.req.Model, opts, modes)
		if err != nil {
			return nil, err
		}
		for i, m := range mods {
			u, err := p.readProbe(m, tp)
			if err != nil {
				return nil, err
			}
			k := probeKey{tp, sp, modes[i], cp, ep}
			pair := out[k]
			pair[b-1] = u
			out[k] = pair
		}
	}
	return out, nil
}

// at is the probe's units at micro-batches of b sequences: each figure x(1) + (x(2) −
// x(1))·(b − 1) from the probes at one and two sequences (parameters are the same in both).
func at(pair [2][]unitCost, b int) []unitCost {
	one, two := pair[0], pair[1]
	out := make([]unitCost, len(one))
	k := float64(b - 1)
	lin := func(x, y float64) float64 { return max(0, x+(y-x)*k) }
	lini := func(x, y int64) int64 { return int64(lin(float64(x), float64(y))) }
	for i := range one {
		u, v := one[i], two[i]
		w := u
		w.f, w.i, w.w = lin(u.f, v.f), lin(u.i, v.i), lin(u.w, v.w)
		w.fc, w.ic, w.wc = lin(u.fc, v.fc), lin(u.ic, v.ic), lin(u.wc, v.wc)
		w.recompute, w.flops = lin(u.recompute, v.recompute), lin(u.flops, v.flops)
		w.act, w.stash, w.send = lini(u.act, v.act), lini(u.stash, v.stash), lini(u.send, v.send)
		a, c := u.mem, v.mem
		w.mem = unitMem{stash: lini(a.stash, c.stash), stashI: lini(a.stashI, c.stashI), recvStash: lini(a.recvStash, c.recvStash),
			held: lini(a.held, c.held), inF: lini(a.inF, c.inF), inI: lini(a.inI, c.inI), recvI: lini(a.recvI, c.recvI), argsI: lini(a.argsI, c.argsI),
			runF: lini(a.runF, c.runF), runI: lini(a.runI, c.runI), runW: lini(a.runW, c.runW), grads: a.grads,
			runF3: lini(a.runF3, c.runF3), runI3: lini(a.runI3, c.runI3), runW3: lini(a.runW3, c.runW3)}
		for k := range 3 {
			w.mem.before3[k], w.mem.after3[k] = lini(a.before3[k], c.before3[k]), lini(a.after3[k], c.after3[k])
		}
		out[i] = w
	}
	return out
}

// readProbe reads the units' costs off one probe module.
func (p *planner) readProbe(m *ir.Module, tp int) ([]unitCost, error) {
	part, _ := m.Attrs.Get("partition").(ir.Dict)
	list, _ := ir.Attrs(part).Get("stages").(ir.List)
	if len(list) != p.units {
		return nil, fmt.Errorf("probe compile at tp %d: %d stages for %d units", tp, len(list), p.units)
	}
	split, err := passes.SplitCosts(m, p.dev)
	if err != nil {
		return nil, err
	}
	units := make([]unitCost, p.units)
	for s, e := range list {
		d, _ := e.(ir.Dict)
		at := ir.Attrs(d)
		u := &units[s]
		u.label = at.Str("layers", "")
		u.f, u.i, u.w = at.Float("f", 0), at.Float("i", 0), at.Float("w", 0)
		u.fc, u.ic, u.wc = at.Float("f_comm", 0), at.Float("i_comm", 0), at.Float("w_comm", 0)
		u.flops, u.act = at.Float("flops", 0), int64(at.Int("act_bytes", 0))
		if s < len(split) {
			u.recompute, u.stash, u.send = split[s].Recompute, split[s].Stash, split[s].Send
		}
	}
	if err := readUnitMem(m, units); err != nil {
		return nil, err
	}
	if p.zero3 {
		if err := readZero3(m, units); err != nil {
			return nil, err
		}
	}
	all := make([][]param, len(units))
	uses := map[string]int{}
	expert := map[string]bool{}
	ids := map[string]int32{}
	idOf := func(name string) int32 {
		id, ok := ids[name]
		if !ok {
			id = int32(len(ids))
			ids[name] = id
		}
		return id
	}
	for _, f := range m.Funcs {
		if f.Attrs.Str("kind", "") != passes.KindF {
			continue
		}
		s := f.Attrs.Int("stage", 0)
		if s >= len(units) {
			continue
		}
		for i, a := range f.Args {
			if f.ArgAttrs[i].Has(ir.AttrParam) {
				d0 := 0
				if a.Type.Rank() >= 1 {
					d0 = a.Type.Shape[0]
				}
				pr := param{name: a.Name, id: idOf(a.Name), bytes: a.Type.Bytes(), dim0: d0}
				if sh, _ := ir.ArgSharding(f, i); sh.Uses(passes.EPAxis) {
					// An expert shard: ZeRO leaves it whole (its replicas are edp's), its
					// gradient summed over edp.
					pr.dim0, pr.expert = -1, true
					expert[a.Name] = true
				}
				all[s] = append(all[s], pr)
				units[s].paramBytes += a.Type.Bytes()
				uses[a.Name]++
			}
		}
	}
	for _, f := range m.Funcs {
		if s := f.Attrs.Int("stage", 0); f.Attrs.Str("kind", "") == passes.KindW && s < len(units) {
			for i, r := range f.Results {
				if name := f.ResultAttrs[i].Str(ir.AttrGrad, ""); name != "" && r.Type.Rank() > 0 {
					gr := param{name: name, id: idOf(name), bytes: r.Type.Bytes(), dim0: r.Type.Shape[0]}
					if expert[name] {
						gr.dim0, gr.expert = -1, true
					}
					units[s].wgrads = append(units[s].wgrads, gr)
				}
			}
		}
	}
	for s := range units {
		units[s].params = all[s]
		units[s].segment = -2
		if len(all[s]) > 0 {
			units[s].segment = passes.LayerOfParam(all[s][0].name)
		}
		for _, pr := range all[s] {
			if uses[pr.name] > 1 {
				units[s].shared = append(units[s].shared, pr)
			}
		}
	}
	return units, nil
}

// layoutString writes stage groups of unit labels as a --layout string: "E,t*4|t*4,L".
func layoutString(units []unitCost, bounds []int) string {
	var stages []string
	lo := 0
	for _, hi := range bounds {
		var parts []string
		for k := lo; k < hi; {
			lab := units[k].label
			if strings.HasPrefix(lab, "t") {
				n := 0
				for k < hi && strings.HasPrefix(units[k].label, "t") {
					n, k = n+1, k+1
				}
				if n == 1 {
					parts = append(parts, "t")
				} else {
					parts = append(parts, fmt.Sprintf("t*%d", n))
				}
				continue
			}
			parts = append(parts, lab)
			k++
		}
		stages = append(stages, strings.Join(parts, ","))
		lo = hi
	}
	return strings.Join(stages, "|")
}

// readUnitMem fills each unit's mem from the probe: the runs' own peaks as code generation
// lowers them, and the ports between runs by who makes and who reads them.
func readUnitMem(m *ir.Module, units []unitCost) error {
	runs, err := codegen.RunMemories(m)
	if err != nil {
		return err
	}
	pm, err := passes.PortsOf(m)
	if err != nil {
		return err
	}
	funcs := map[string]*ir.Func{}
	for _, f := range m.Funcs {
		funcs[f.Name] = f
		s := f.Attrs.Int("stage", 0)
		if s >= len(units) {
			continue
		}
		switch f.Attrs.Str("kind", "") {
		case passes.KindF:
			units[s].mem.runF = runs[f.Name].PeakWithArgs
		case passes.KindI:
			units[s].mem.runI = runs[f.Name].PeakWithArgs
		case passes.KindW:
			units[s].mem.runW = runs[f.Name].PeakWithArgs
			units[s].mem.grads = runs[f.Name].Grads
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pm.Consumers)) {
		prod := funcs[pm.Producer[p]]
		if prod == nil {
			continue
		}
		size := runs[prod.Name].Results[p]
		ps, pk := prod.Attrs.Int("stage", 0), prod.Attrs.Str("kind", "")
		type use struct{ f, i, w bool }
		uses := map[int]*use{}
		for _, name := range pm.Consumers[p] {
			cf := funcs[name]
			if cf == nil {
				continue
			}
			cs := cf.Attrs.Int("stage", 0)
			if uses[cs] == nil {
				uses[cs] = &use{}
			}
			switch cf.Attrs.Str("kind", "") {
			case passes.KindF:
				uses[cs].f = true
			case passes.KindI:
				uses[cs].i = true
			case passes.KindW:
				uses[cs].w = true
			}
		}
		for cs, u := range uses {
			if cs >= len(units) {
				continue
			}
			um := &units[cs].mem
			if pk == passes.KindI && cs != ps && (u.i || u.w) && (uses[ps] == nil || !uses[ps].w) {
				// (one the maker's own W reads too is the maker's held already)
				um.recvI += size
			}
			switch {
			case pk == passes.KindF && (u.i || u.w):
				um.stash += size
				if !u.w {
					um.stashI += size
				}
				if u.i {
					um.argsI += size
				}
				if cs != ps {
					um.recvStash += size
				}
			case pk == passes.KindF && cs != ps:
				um.inF += size
			case pk == passes.KindI && u.w:
				// What W reads of I's results is held from I to W: the unit's own I's, or
				// the next unit's when the received output gradient is itself a linear's
				// output gradient (the last layer's, from the final LayerNorm's backward).
				// Counted as inI, the latter went missing from every zero-bubble stage
				// holding that layer: 2.3% of the tiny GPT's last stage under zb-h2.
				um.held += size
			case pk == passes.KindI && cs != ps:
				um.inI += size
			}
		}
	}
	return nil
}

// readZero3 fills in what ZeRO-3 changes about each unit's runs: the copies they gather and
// their peaks with the copies in the arena, measured on a copy of the probe rewritten as
// param-gather rewrites a compile (at dp = 2: the blocks themselves are not in the arena,
// so the measure hardly depends on dp).
func readZero3(m *ir.Module, units []unitCost) error {
	kinds := map[string]int{passes.KindF: 0, passes.KindI: 1, passes.KindW: 2}
	for _, f := range m.Funcs {
		k, ok := kinds[f.Attrs.Str("kind", "")]
		s := f.Attrs.Int("stage", 0)
		if !ok || s >= len(units) {
			continue
		}
		uses := f.Uses()
		for i, a := range f.Args {
			if !f.ArgAttrs[i].Has(ir.AttrParam) || a.Type.Rank() == 0 {
				continue
			}
			var dts []ir.DType
			for _, op := range uses[a] {
				dt := a.Type.DType
				if op.Name() == "cast" {
					dt = op.Results[0].Type.DType
				}
				if !slices.Contains(dts, dt) {
					dts = append(dts, dt)
				}
			}
			for _, dt := range dts {
				units[s].gathers[k] = append(units[s].gathers[k], param{name: a.Name, id: -1, bytes: int64(a.Type.NumElements()) * int64(dt.Size()), dim0: a.Type.Shape[0]})
			}
		}
	}
	z := m.Clone()
	passes.GatherAsZero3(z, 2)
	runs, err := codegen.RunMemories(z)
	if err != nil {
		return err
	}
	for _, f := range z.Funcs {
		s := f.Attrs.Int("stage", 0)
		if s >= len(units) {
			continue
		}
		k, ok := kinds[f.Attrs.Str("kind", "")]
		if !ok {
			continue
		}
		rm := runs[f.Name]
		switch k {
		case 0:
			units[s].mem.runF3 = rm.PeakWithArgs
		case 1:
			units[s].mem.runI3 = rm.PeakWithArgs
		case 2:
			units[s].mem.runW3 = rm.PeakWithArgs
		}
		units[s].mem.before3[k], units[s].mem.after3[k] = rm.Before, rm.After
	}
	return nil
}
