package codegen

import (
	"fmt"
	"slices"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/lower"
	"ppc.dev/ppc/passes"
)

// RunMemory is what one run of a per-stage function (F, I or W of a stage, as split-stages
// writes it) needs in the arena beyond the values other runs hand it. It is measured on code
// generation's own lowering of the run (instance: the same buffers, aliases and lifetimes a
// rank program gives it), the way planMemory measures a rank's arena, so that a model of a
// whole step built from runs (the planner's) adds up the buffers ppc compile places.
type RunMemory struct {
	// Peak is the most bytes the run's own buffers — its temporaries, its results, the model
	// inputs it loads — hold at once, each rounded up as the arena places it.
	Peak int64
	// Args and Results are the bytes of the run's port arguments (values another run made:
	// stashed by its F, held from its I, received) and port results, rounded as placed.
	Args, Results map[string]int64
	// PeakWithArgs is Peak with the run's port arguments counted too, each from the run's
	// start until its last use in the run — or to the run's end when a later run of the
	// stage reads it as well (a stash I and W both read): what the run needs on top of
	// everything else live when it starts.
	PeakWithArgs int64
	// Grads is the bytes of the weight gradients the run returns, rounded as placed: Peak
	// holds each only until it is accumulated, right after its launch, but ZeRO-2 keeps them
	// all for the reduce-scatter after the run.
	Grads int64
	// Before and After split PeakWithArgs at the run's first all-gather over dp (ZeRO-3's
	// gather of the first parameters it reads, passes.ParamGather): the peak before it and
	// from it on. A run without one has both equal to PeakWithArgs. In a stage of several
	// layers the copies of the next layer are gathered there, and this layer's were gathered
	// before the run, so the planner adds each to its side.
	Before, After int64
}

// RunMemories measures one run of every per-stage function of m, a module after
// split-stages (no rank programs needed), by function name.
func RunMemories(m *ir.Module) (map[string]RunMemory, error) {
	g := &gen{m: m, funcs: map[string]*ir.Func{}, blocks: map[string]*lower.Block{}, microbatches: 1}
	ranks := 1
	for _, a := range m.Mesh() {
		if a.Name == "pp" {
			ranks = a.Size
		}
	}
	mesh, err := moduleMesh(m, ranks)
	if err != nil {
		return nil, err
	}
	g.mesh = mesh
	for _, f := range m.Funcs {
		g.funcs[f.Name] = f
	}
	if err := g.collectShardings(); err != nil {
		return nil, err
	}
	pm, err := passes.PortsOf(m)
	if err != nil {
		return nil, err
	}
	order := map[string]int{passes.KindF: 0, passes.KindI: 1, passes.KindW: 2}
	// later says whether a port that f reads is read by a later run of f's stage too.
	later := func(f *ir.Func, port string) bool {
		for _, name := range pm.Consumers[port] {
			c := g.funcs[name]
			if c != nil && c != f && c.Attrs.Int("stage", 0) == f.Attrs.Int("stage", 0) && c.Attrs.Int("slice", -1) == f.Attrs.Int("slice", -1) &&
				order[c.Attrs.Str("kind", "")] > order[f.Attrs.Str("kind", "")] {
				return true
			}
		}
		return false
	}
	out := map[string]RunMemory{}
	for _, f := range m.Funcs {
		kind := f.Attrs.Str("kind", "")
		if kind == "" {
			continue
		}
		b, err := lower.Func(f)
		if err != nil {
			return nil, err
		}
		rg := &rankGen{g: g, prog: &pb.Program{}, kernels: map[string]int{}, named: map[string]int{}, inputs: map[portKey]int{},
			ports: map[portKey]int{}, consts: map[*ir.Dense]int{}, values: map[*ir.Value]int{}, first: map[int]int{}, last: map[int]int{}, alias: map[int32]int32{},
			fwd: map[int]bool{}, perMB: map[string]bool{}, pending: map[string]int{}, gathered: map[string]bool{}, blocks: map[string]int{}}
		rm := RunMemory{Args: map[string]int64{}, Results: map[string]int64{}}
		given := map[int]bool{}
		persists := map[int]bool{}
		for i, a := range f.Args {
			if p := f.ArgAttrs[i].Str(passes.AttrPort, ""); p != "" {
				buf := rg.newBuffer(p, a.Type, pb.Role_ACTIVATION)
				rg.ports[portKey{p, 0}] = buf
				given[buf] = true
				persists[buf] = later(f, p)
				rm.Args[p] = placed(a.Type.Bytes())
			}
		}
		for i, r := range f.Results {
			if p := f.ResultAttrs[i].Str(passes.AttrPort, ""); p != "" {
				rm.Results[p] = placed(r.Type.Bytes())
			} else if f.ResultAttrs[i].Has(ir.AttrGrad) {
				rm.Grads += placed(r.Type.Bytes())
			}
		}
		if err := rg.instance(f, b, f.Attrs.Int("stage", 0), 0, kind); err != nil {
			return nil, fmt.Errorf("@%s: %v", f.Name, err)
		}
		// A port result outlives the run (its consumer runs later, or a send follows it):
		// it holds its bytes from when the run writes it to the run's end.
		end := len(rg.prog.Instrs) - 1
		for i := range f.Results {
			if f.ResultAttrs[i].Has(passes.AttrPort) {
				if buf, ok := rg.ports[portKey{f.ResultAttrs[i].Str(passes.AttrPort, ""), 0}]; ok && !given[buf] {
					rg.last[buf] = max(rg.last[buf], end)
				}
			}
		}
		rg.aliasReshapes()
		rg.aliasConcats()
		var own, all []lower.Interval
		for id, first := range rg.first {
			if !given[id] {
				own = append(own, lower.Interval{Start: first, End: rg.last[id], Size: rg.typeOf(id).Bytes()})
			}
		}
		for id := range given {
			last, used := rg.last[id]
			if !used || persists[id] {
				last = end
			}
			all = append(all, lower.Interval{Start: 0, End: last, Size: rg.typeOf(id).Bytes()})
		}
		rm.Peak = lower.PeakLive(own)
		rm.PeakWithArgs = lower.PeakLive(append(all, own...))
		rm.Before, rm.After = rm.PeakWithArgs, rm.PeakWithArgs
		if g0 := slices.IndexFunc(rg.prog.Instrs, func(in *pb.Instr) bool { return in.Kind == pb.Instr_ALL_GATHER && in.Axis == "dp" }); g0 >= 0 {
			clip := func(lo, hi int) []lower.Interval {
				var out []lower.Interval
				for _, x := range append(all, own...) {
					if x.End >= lo && x.Start <= hi {
						x.Start, x.End = max(x.Start, lo), min(x.End, hi)
						out = append(out, x)
					}
				}
				return out
			}
			rm.Before, rm.After = lower.PeakLive(clip(0, g0-1)), lower.PeakLive(clip(g0, end))
		}
		out[f.Name] = rm
	}
	return out, nil
}

// placed is n bytes rounded up to the arena's alignment.
func placed(n int64) int64 { return (n + lower.Alignment - 1) / lower.Alignment * lower.Alignment }

// StageHeld is what one micro-batch of each stage of m (a module after split-stages) holds
// between its runs, each port placed as the arena places it: stash, the forward values a
// backward reads (F's results the stage's I or W reads, received ones included), from its F
// to its backward; held, what its W reads of them plus what an I hands W (the linears' output
// gradients), from its I to its W. schedule.CapHeld runs W's earlier where held outgrows
// stash; the planner's stageMem counts the same ports.
func StageHeld(m *ir.Module) (stash, held []int64, err error) {
	pm, err := passes.PortsOf(m)
	if err != nil {
		return nil, nil, err
	}
	funcs := map[string]*ir.Func{}
	size := map[string]int64{}
	stages := 0
	for _, f := range m.Funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue
		}
		funcs[f.Name] = f
		stages = max(stages, f.Attrs.Int("stage", 0)+1)
		for i, r := range f.Results {
			if p := f.ResultAttrs[i].Str(passes.AttrPort, ""); p != "" {
				size[p] = placed(r.Type.Bytes())
			}
		}
	}
	stash, held = make([]int64, stages), make([]int64, stages)
	for p, consumers := range pm.Consumers {
		prod := funcs[pm.Producer[p]]
		if prod == nil {
			continue
		}
		pk := prod.Attrs.Str("kind", "")
		readI, readW := map[int]bool{}, map[int]bool{}
		for _, name := range consumers {
			if c := funcs[name]; c != nil {
				switch c.Attrs.Str("kind", "") {
				case passes.KindI:
					readI[c.Attrs.Int("stage", 0)] = true
				case passes.KindW:
					readW[c.Attrs.Int("stage", 0)] = true
				}
			}
		}
		for cs := range stages {
			switch {
			case pk == passes.KindF && (readI[cs] || readW[cs]):
				stash[cs] += size[p]
				if readW[cs] {
					held[cs] += size[p]
				}
			case pk == passes.KindI && readW[cs]:
				held[cs] += size[p]
			}
		}
	}
	return stash, held, nil
}
