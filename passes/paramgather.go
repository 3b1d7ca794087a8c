package passes

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// ParamGather writes ZeRO-3's parameter gathers into the per-stage functions.
var ParamGather = &Pass{
	Name: "param-gather",
	Doc: "After split-stages, under ZeRO-3 (@optimizer {zero = 3}: every parameter whose first dim dp divides is held " +
		"by each dp replica as its block of dim 0, @optimizer's argument for it the block): each per-stage function " +
		"(F, I, W, and so every recomputation, which I and W do inside them) takes such a parameter as the block — " +
		"its argument's type and shard become @optimizer's — and all-gathers it over dp where it reads it, " +
		"`%<name>.gathered = all_gather %<name> {axis = dp, dim = 0, parts = dp}`, so the whole parameter lives in " +
		"the arena only from its gather to its last reader in that run (the memory plan frees it there) and is gathered " +
		"again by the next function that reads it — FSDP's gather before the forward and again before the backward. " +
		"The gathers are grouped by layer (the partition's parameter namespaces: h3.*, layers.3.*; parameters " +
		"outside the layers group with their neighbours in first-use order) and each group's gathers are placed just " +
		"before the first op reading the group before it, so the next layer's gather is issued while this layer " +
		"computes (FSDP's prefetch; collectives run on their own stream where the device has one) and at most two " +
		"layers are whole at once. A parameter read only through casts to one dtype (mixed precision's 16-bit copy) " +
		"is cast as a block and gathered in that dtype: half the bytes, the same values. The gradient leaves W whole " +
		"and is reduce-scattered after the run as ZeRO-2's (grad-reduce); the optimizer updates the block in place and " +
		"nothing is gathered after it (rank-optimizer). Other parameters (dp does not divide dim 0) are held whole.",
	Run: runParamGather,
}

// zero3Blocks maps each parameter ZeRO-3 holds as a dp block to @optimizer's argument for it
// (the block's type and shard attribute), and returns the dp size.
func zero3Blocks(m *ir.Module) (map[string]int, int) {
	zero, dp := zeroBlocks(m)
	opt := m.Func(OptimizerFunc)
	out := map[string]int{}
	if opt == nil || dp <= 1 {
		return out, dp
	}
	for i, a := range opt.Args {
		if opt.ArgAttrs[i].Has(ir.AttrParam) && zero[a.Name] == 3 {
			out[a.Name] = i
		}
	}
	return out, dp
}

func runParamGather(m *ir.Module, _ Options) error {
	blocks, dp := zero3Blocks(m)
	if len(blocks) == 0 {
		return nil
	}
	opt := m.Func(OptimizerFunc)
	gather := ir.MustLookup("all_gather")
	cast := ir.MustLookup("cast")
	for _, f := range m.Funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue
		}
		uses := f.Uses()
		first := map[*ir.Value]int{} // a block parameter → the index of the first op reading it
		var params []*ir.Value
		for i, a := range f.Args {
			j, ok := blocks[a.Name]
			if !ok || !f.ArgAttrs[i].Has(ir.AttrParam) || len(uses[a]) == 0 {
				continue
			}
			oa := opt.Args[j]
			if whole := oa.Type.Shape[0] * dp; a.Type.Rank() == 0 || a.Type.Shape[0] != whole || !slices.Equal(a.Type.Shape[1:], oa.Type.Shape[1:]) {
				return fmt.Errorf("@%s: parameter %%%s is %s, @%s's block %s is not 1/%d of it", f.Name, a.Name, a.Type, OptimizerFunc, oa.Type, dp)
			}
			a.Type = oa.Type
			f.ArgAttrs[i] = f.ArgAttrs[i].Set(ir.AttrShard, opt.ArgAttrs[j].Get(ir.AttrShard))
			params = append(params, a)
			first[a] = slices.IndexFunc(f.Ops, func(op *ir.Op) bool { return slices.Contains(op.Operands, a) })
		}
		if len(params) == 0 {
			continue
		}
		slices.SortStableFunc(params, func(x, y *ir.Value) int { return first[x] - first[y] })
		// Groups of consecutive parameters (in first-use order) of one layer.
		var groups [][]*ir.Value
		for k, p := range params {
			if k == 0 || layerOfParam(p.Name) != layerOfParam(params[k-1].Name) {
				groups = append(groups, nil)
			}
			groups[len(groups)-1] = append(groups[len(groups)-1], p)
		}
		before := map[int][]*ir.Op{} // op index → the gathers placed before it
		dead := map[*ir.Op]bool{}
		repl := map[*ir.Value]*ir.Value{}
		for g, grp := range groups {
			at := first[grp[0]] // the first group: right before its own first reader
			if g > 0 {
				at = first[groups[g-1][0]] // prefetch: while the group before it computes
			}
			anchor := f.Ops[first[grp[0]]]
			for _, p := range grp {
				src := p
				var casts []*ir.Op
				if to, ok := onlyCastsTo(uses[p]); ok {
					// Cast the block and gather the 16-bit copy the readers read.
					c := ir.NewOp(cast, []*ir.Value{p}, ir.Attrs{{Name: "to", Value: ir.Ident(to.String())}}, []ir.Type{{DType: to, Shape: p.Type.Shape}})
					annotate(c, anchor)
					before[at] = append(before[at], c)
					src, casts = c.Results[0], uses[p]
				}
				t := src.Type
				t.Shape = slices.Clone(t.Shape)
				t.Shape[0] *= dp
				op := ir.NewOp(gather, []*ir.Value{src}, ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}, {Name: "dim", Value: ir.Int(0)}, {Name: "parts", Value: ir.Int(dp)}}, []ir.Type{t})
				op.Results[0].Name = p.Name + ".gathered"
				annotate(op, anchor)
				before[at] = append(before[at], op)
				if casts == nil {
					repl[p] = op.Results[0]
					continue
				}
				for _, c := range casts {
					dead[c] = true
					repl[c.Results[0]] = op.Results[0]
				}
			}
		}
		f.Replace(repl) // before the gathers join the op list: they read the blocks
		ops := make([]*ir.Op, 0, len(f.Ops)+2*len(params))
		for i, op := range f.Ops {
			ops = append(ops, before[i]...)
			if !dead[op] {
				ops = append(ops, op)
			}
		}
		f.Ops = ops
	}
	return nil
}

// onlyCastsTo reports whether every op in uses is a cast to one dtype, and that dtype.
func onlyCastsTo(uses []*ir.Op) (ir.DType, bool) {
	var to ir.DType
	for k, op := range uses {
		if op.Name() != "cast" {
			return to, false
		}
		dt := op.Attrs.DType("to")
		if k > 0 && dt != to {
			return to, false
		}
		to = dt
	}
	return to, len(uses) > 0
}

// annotate gives an op the stage, token slice and phase of the op it serves.
func annotate(op, like *ir.Op) {
	op.Stage, op.Slice, op.Phase = like.Stage, like.Slice, like.Phase
}
