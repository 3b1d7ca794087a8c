package passes

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
)

// Recomputation methods under recompute=full, as Megatron's --recompute-method.
const (
	// RecomputeUniform rebuilds every unit: chunks of N consecutive units of a stage, each
	// chunk's input stashed and the chunk rebuilt right before its backward.
	RecomputeUniform = "uniform"
	// RecomputeBlock rebuilds the first N units of each stage, one at a time, and stashes
	// every value the backward of the others uses.
	RecomputeBlock = "block"
)

// recomputePlan is what split-stages' backward functions rebuild instead of reading from a
// stash.
type recomputePlan struct {
	remat map[*ir.Op]bool // forward ops the backward recomputes
	// checkpoint: results of remat ops that are nevertheless stashed, because they cross from
	// one recompute group to another (a layer's input). A rebuild stops at them.
	checkpoint map[*ir.Value]bool
}

// fullRecompute plans full recomputation per unit, as Megatron does it per transformer layer:
// the forward ops of @train are cut into units — the partition's units (E, each layer tK, L
// by parameter namespace, or the points where one activation crosses) — and the units of
// each stage into groups, chunks of n consecutive units (uniform) or the first n units one
// by one (block, the others not recomputed). A value defined in one group and read by a
// forward op of another is a checkpoint, which F stashes, unless it depends on no model
// input. Every other result of a recomputed
// group is rebuilt by the backward when it first needs one, from the group's checkpoints, so
// at most one group's rebuilt values are live at once beside the stash.
func fullRecompute(m *ir.Module, src *ir.Func, method string, n int) (recomputePlan, error) {
	p := recomputePlan{remat: alwaysRemat(src), checkpoint: map[*ir.Value]bool{}}
	view := &ir.Func{Name: src.Name, Args: src.Args, ArgAttrs: src.ArgAttrs}
	for _, op := range src.Ops {
		if opKind(op) == KindF {
			view.Ops = append(view.Ops, op)
		}
	}
	if len(view.Ops) == 0 {
		return p, nil
	}
	dev, err := ModuleDevice(m)
	if err != nil {
		return p, err
	}
	_, unitOf := analyse(m, view, dev).layerUnits()
	type place struct{ stage, slice int }
	first := map[place]int{} // each stage's (and token slice's) first unit
	for _, op := range view.Ops {
		k := place{opStage(op), op.Slice}
		if u, ok := first[k]; !ok || unitOf[op] < u {
			first[k] = unitOf[op]
		}
	}
	// group numbers a recomputed chunk ≥ 0 and a unit left stashed < 0, unique per stage.
	group := map[*ir.Op]int{}
	for _, op := range view.Ops {
		local := unitOf[op] - first[place{opStage(op), op.Slice}]
		switch method {
		case RecomputeBlock:
			if local < n {
				group[op] = local
			} else {
				group[op] = -1 - local
			}
		default:
			group[op] = local / n
		}
		if group[op] >= 0 {
			p.remat[op] = true
		}
	}
	// A value that depends on no model input (a causal mask, a transposed weight) is the
	// same for every micro-batch: each group rebuilds it where it needs it rather than stash
	// a copy per micro-batch in flight.
	data := map[*ir.Value]bool{}
	for i, a := range src.Args {
		data[a] = src.ArgAttrs[i].Has(ir.AttrInput)
	}
	for _, op := range view.Ops {
		d := false
		for _, x := range op.Operands {
			d = d || data[x]
		}
		for _, r := range op.Results {
			data[r] = d
		}
	}
	for _, op := range view.Ops {
		for _, x := range op.Operands {
			d := x.Def
			if d == nil || opKind(d) != KindF || opStage(d) != opStage(op) || d.Slice != op.Slice || !data[x] {
				continue
			}
			if group[d] != group[op] && !alwaysRematOp(d, src) {
				p.checkpoint[x] = true
			}
		}
	}
	return p, nil
}

// alwaysRemat is the forward ops every recompute mode rebuilds (alwaysRematOp).
func alwaysRemat(f *ir.Func) map[*ir.Op]bool {
	out := map[*ir.Op]bool{}
	for _, op := range f.Ops {
		if alwaysRematOp(op, f) {
			out[op] = true
		}
	}
	return out
}

// alwaysRematOp: a cast of a parameter (mixed precision's 16-bit copy of a weight, see the
// precision pass) is recomputed by the backward in every mode: it is the same for every
// micro-batch, so stashing it would hold one copy of the weight per micro-batch in flight,
// while recomputing it costs one pass over the weight. So is an op a pass asked to recompute
// (token slicing's concatenation of the K/V pieces).
func alwaysRematOp(op *ir.Op, f *ir.Func) bool {
	if opKind(op) != KindF {
		return false
	}
	if op.Remat {
		return true
	}
	if op.Def.Name != "cast" || op.Operands[0].Def != nil {
		return false
	}
	for i, a := range f.Args {
		if a == op.Operands[0] {
			return f.ArgAttrs[i].Has(ir.AttrParam)
		}
	}
	return false
}

// parseRecomputeOptions checks split-stages' recompute, method and layers options.
func parseRecomputeOptions(opts Options) (mode, method string, n int, err error) {
	mode, method = opts["recompute"], opts["method"]
	if mode == "" {
		mode = "none"
	}
	if method == "" {
		method = RecomputeUniform
	}
	if mode != "none" && mode != "full" && mode != "selective" {
		return "", "", 0, fmt.Errorf("recompute must be none, selective or full, got %q", mode)
	}
	if method != RecomputeUniform && method != RecomputeBlock {
		return "", "", 0, fmt.Errorf("method must be %s or %s, got %q", RecomputeUniform, RecomputeBlock, method)
	}
	n = 1
	if s := strings.TrimSpace(opts["layers"]); s != "" {
		if n, err = opts.Int("layers"); err != nil {
			return "", "", 0, err
		}
		if n < 1 {
			return "", "", 0, fmt.Errorf("layers must be at least 1, got %d", n)
		}
	}
	if mode != "full" && (opts["method"] != "" && opts["method"] != RecomputeUniform || n != 1) {
		return "", "", 0, fmt.Errorf("method and layers apply to recompute=full only (recompute=%s)", mode)
	}
	return mode, method, n, nil
}
