package passes

import (
	"fmt"
	"maps"
	"slices"

	"ppc.dev/ppc/ir"
)

// TiedGrads forms each tied weight's gradient in the rank programs.
var TiedGrads = &Pass{
	Name: "tied-grads",
	Doc: "After rank-programs: a parameter used in several places (a tied weight) leaves split-stages with one gradient " +
		"result per use, `{grad = W, partial = k}` in forward order, each accumulated on the rank that computes it as the " +
		"gradient \"W#k\". At the end of the program of every pipeline rank holding W (computing one of its partials), " +
		"append: the partials it computes sent to each other rank holding W (`grad_send {grad = \"W#k\", peer, tag}`), " +
		"the others' received (`grad_recv {…, type}`), and W's gradient formed as their sum in partial order " +
		"(`grad_sum {grad = W, parts = [\"W#0\", \"W#1\", …]}`) — the same additions in the same order as on one device, " +
		"whatever the split, so the weights stay bit-identical (an all-reduce would sum in another order). Tied " +
		"parameters are taken in name order; the tag of partial k of the i-th is −1 − 4096·i − k, below every " +
		"activation's tag. A ZeRO-2 partial is its dp block (see grad-reduce). The data-parallel reductions of the " +
		"partials come before, at their last contribution (grad-reduce).",
	Run: runTiedGrads,
}

// tiedPartials maps each tied parameter to the pipeline rank computing each of its partials,
// and each parameter with a gradient to the sorted pipeline ranks computing (part of) it.
func tiedPartials(m *ir.Module, placement []int) (partials map[string][]int, holders map[string][]int, err error) {
	partials, holders = map[string][]int{}, map[string][]int{}
	loc := map[string]*ir.Func{} // a function computing a partial, for errors
	for _, f := range m.Funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue
		}
		st := f.Attrs.Int("stage", 0)
		if st < 0 || st >= len(placement) {
			return nil, nil, ir.ErrorAt(m.Source, f.Loc, "@%s is stage %d, but the schedule places %d stage(s)", f.Name, st, len(placement))
		}
		r := placement[st]
		for i := range f.Results {
			at := f.ResultAttrs[i]
			name := at.Str(ir.AttrGrad, "")
			if name == "" {
				continue
			}
			if !slices.Contains(holders[name], r) {
				holders[name] = append(holders[name], r)
			}
			if at.Has(AttrPartial) {
				k := at.Int(AttrPartial, 0)
				if k < 0 || k > 4095 {
					return nil, nil, ir.ErrorAt(m.Source, f.Loc, "@%s: gradient %q has partial %d (0 … 4095)", f.Name, name, k)
				}
				if loc[name] == nil {
					loc[name] = f
				}
				for len(partials[name]) <= k {
					partials[name] = append(partials[name], -1)
				}
				partials[name][k] = r
			}
		}
	}
	for _, rs := range holders {
		slices.Sort(rs)
	}
	for name, parts := range partials {
		f := loc[name]
		if k := slices.Index(parts, -1); k >= 0 {
			return nil, nil, ir.ErrorAt(m.Source, f.Loc, "no per-stage function computes partial %d of the gradient of %q (@%s computes another)", k, name, f.Name)
		}
		for _, r := range holders[name] {
			if !slices.Contains(parts, r) {
				return nil, nil, ir.ErrorAt(m.Source, f.Loc, "pipeline rank %d computes a gradient of %q but none of its partials (@%s computes one)", r, name, f.Name)
			}
		}
	}
	return partials, holders, nil
}

// gradTypes maps each gradient accumulator ("w", or "w#k" for a tied weight's partial) to
// its type: fp32 (fp64 for an fp64 gradient) of the shape a per-stage function gives it, or
// of its dp block when ZeRO-2 accumulates only the block.
func gradTypes(m *ir.Module) map[string]ir.Type {
	blocks, dp := zeroBlocks(m)
	out := map[string]ir.Type{}
	for _, f := range m.Funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue
		}
		for i, r := range f.Results {
			key := GradKey(f.ResultAttrs[i])
			if key == "" {
				continue
			}
			t := accType(m, r.Type)
			if blocks[f.ResultAttrs[i].Str(ir.AttrGrad, "")] == 2 { // ZeRO-3's functions return the blocks
				t.Shape = slices.Clone(t.Shape)
				t.Shape[0] = ZeroBlockRows(t.Shape[0], dp)
			}
			out[key] = t
		}
	}
	return out
}

// GradKey names the accumulator of a per-stage function's result that is a parameter
// gradient ("" for other results): the parameter, or "w#k" for partial k of a tied weight's.
func GradKey(at ir.Attrs) string {
	name := at.Str(ir.AttrGrad, "")
	if name == "" {
		return ""
	}
	if at.Has(AttrPartial) {
		return fmt.Sprintf("%s#%d", name, at.Int(AttrPartial, 0))
	}
	return name
}

// accType is the type a gradient of type t accumulates in: fp32, fp64 for fp64, or its own
// 16-bit dtype when the module accumulates gradients so (AttrGradDType).
func accType(m *ir.Module, t ir.Type) ir.Type {
	if t.DType == ir.F64 || t.DType.String() == m.Attrs.Str(AttrGradDType, "") {
		return t
	}
	return ir.Type{DType: ir.F32, Shape: t.Shape}
}

// rankPrograms returns the module's rank programs by pipeline rank.
func rankPrograms(m *ir.Module, pass string) ([]*ir.Func, error) {
	var progs []*ir.Func
	for _, f := range m.Funcs {
		if IsRankProgram(f) {
			r := f.Attrs.Int("rank", -1)
			if r != len(progs) {
				return nil, ir.ErrorAt(m.Source, f.Loc, "rank program @%s is rank %d, expected rank %d (in order)", f.Name, r, len(progs))
			}
			progs = append(progs, f)
		}
	}
	if len(progs) == 0 {
		return nil, fmt.Errorf("the module has no rank programs: run rank-programs before %s", pass)
	}
	return progs, nil
}

func runTiedGrads(m *ir.Module, _ Options) error {
	progs, err := rankPrograms(m, "tied-grads")
	if err != nil {
		return err
	}
	placement, _, err := ReadSchedule(m)
	if err != nil {
		return err
	}
	partials, holders, err := tiedPartials(m, placement)
	if err != nil {
		return err
	}
	types := gradTypes(m)
	sendDef, recvDef, sumDef := ir.MustLookup("grad_send"), ir.MustLookup("grad_recv"), ir.MustLookup("grad_sum")
	for pi, name := range slices.Sorted(maps.Keys(partials)) {
		parts := partials[name]
		keys := make([]string, len(parts))
		var t ir.Type
		for k := range parts {
			keys[k] = fmt.Sprintf("%s#%d", name, k)
			t = types[keys[k]]
		}
		tag := func(k int) ir.Int { return ir.Int(-1 - pi*4096 - k) }
		for _, r := range holders[name] {
			if r >= len(progs) {
				return fmt.Errorf("%q is held by pipeline rank %d, which has no rank program", name, r)
			}
			prog := progs[r]
			for k, owner := range parts {
				if owner != r {
					continue
				}
				for _, h := range holders[name] {
					if h != r {
						prog.Ops = append(prog.Ops, ir.NewOp(sendDef, nil, ir.Attrs{{Name: "grad", Value: ir.String(keys[k])},
							{Name: "peer", Value: ir.Int(h)}, {Name: "tag", Value: tag(k)}}, nil))
					}
				}
			}
			for k, owner := range parts {
				if owner != r {
					prog.Ops = append(prog.Ops, ir.NewOp(recvDef, nil, ir.Attrs{{Name: "grad", Value: ir.String(keys[k])},
						{Name: "peer", Value: ir.Int(owner)}, {Name: "tag", Value: tag(k)}, {Name: "type", Value: ir.TypeAttr(t)}}, nil))
				}
			}
			prog.Ops = append(prog.Ops, ir.NewOp(sumDef, nil, ir.Attrs{{Name: "grad", Value: ir.String(name)}, {Name: "parts", Value: ir.Strings(keys...)}}, nil))
		}
	}
	return nil
}
