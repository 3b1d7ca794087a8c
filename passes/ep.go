package passes

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// Expert parallelism (--ep N): ep-partition shards each mixture-of-experts layer's experts
// over the ep ranks, which are carved from the data-parallel ranks (Megatron-Core's
// --expert-model-parallel-size). See passes/doc.go, "Expert parallelism".

// EPAxis is the mesh axis of expert parallelism: the ep ranks of one expert-data-parallel
// replica (consecutive dp coordinates). EDPAxis is the expert-data-parallel axis: the ranks
// that hold the same experts (dp coordinates ≡ mod ep), over which expert gradients are
// summed. Both are sub-axes of dp: dp coordinate d is ep coordinate d mod ep and edp
// coordinate d / ep.
const (
	EPAxis  = "ep"
	EDPAxis = "edp"
)

// EPPartition shards the experts of @forward over the ep ranks.
var EPPartition = &Pass{
	Name: "ep-partition",
	Doc: "Expert parallelism: each rank routes its own micro-batches' tokens (moe_slots, moe_dispatch as on one " +
		"device), then an `all_to_all {axis = ep, split_dim = 0, concat_dim = 1}` sends expert block k of its " +
		"[experts, capacity, d] dispatch buffer to ep rank k, which runs its experts/ep experts on the " +
		"[experts/ep, ep·capacity, d] rows every ep rank sent it; a second all_to_all (split_dim = 1, " +
		"concat_dim = 0) returns the rows before moe_combine. The parameters the experts' ops read with the " +
		"experts as their first dim are held as [experts/ep, …] shards (`shard = [ep, …]`); their gradients are " +
		"summed over the expert-data-parallel ranks (edp) only, the other parameters' over all of dp " +
		"(grad-reduce). Autodiff differentiates each all_to_all as the reverse exchange. Refused: a model without " +
		"moe_dispatch, experts ep does not divide, a parameter read both by the experts and elsewhere. Runs after " +
		"the tp passes (the expert buffer stays replicated over tp) and before partition.",
	Options: []Option{{Name: "size", Default: "1", Doc: "ep ranks"}},
	Run:     runEPPartition,
}

func runEPPartition(m *ir.Module, opts Options) error {
	n, err := opts.Int("size")
	if err != nil {
		return err
	}
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return fmt.Errorf("module has no @%s", ir.ForwardFunc)
	}
	if n <= 1 {
		return nil
	}
	var dispatches []*ir.Op
	for _, op := range f.Ops {
		if op.Name() == "moe_dispatch" {
			dispatches = append(dispatches, op)
		}
	}
	if len(dispatches) == 0 {
		return ir.ErrorAt(m.Source, f.Loc, "--ep %d: the model has no mixture-of-experts layer (moe_dispatch); expert parallelism shards experts: use --ep 1", n)
	}
	uses := f.Uses()
	argIndex := map[*ir.Value]int{}
	for i, a := range f.Args {
		argIndex[a] = i
	}
	region := map[*ir.Op]bool{}     // the experts' ops: between a dispatch and its combine
	experts := map[int]bool{}       // argument index → an expert parameter
	before := map[*ir.Op][]*ir.Op{} // ops to insert right before an op
	after := map[*ir.Op][]*ir.Op{}
	a2a := ir.MustLookup("all_to_all")
	// exchange is an all_to_all of v of result type t (the function is re-inferred after).
	exchange := func(v *ir.Value, split, concat int, t ir.Type, at *ir.Op) *ir.Op {
		attrs := ir.Attrs{{Name: "axis", Value: ir.Ident(EPAxis)}, {Name: "concat_dim", Value: ir.Int(concat)},
			{Name: "parts", Value: ir.Int(n)}, {Name: "split_dim", Value: ir.Int(split)}}
		op := ir.NewOp(a2a, []*ir.Value{v}, attrs, []ir.Type{t})
		op.Stage, op.Slice, op.Phase, op.Loc = at.Stage, at.Slice, at.Phase, at.Loc
		return op
	}
	for _, d := range dispatches {
		e := d.Attrs.Int("experts", 0)
		if e%n != 0 {
			return ir.ErrorAt(m.Source, d.Loc, "--ep %d: the layer has %d experts, which %d ep ranks do not divide; the nearest that do: %s",
				n, e, n, nearestDivisors(e, n))
		}
		buf := d.Result()
		// The experts' ops: everything that depends on the buffer up to the combines that
		// read it (their operand 0).
		var combines []*ir.Op
		seen := map[*ir.Value]bool{buf: true}
		work := []*ir.Value{buf}
		for len(work) > 0 {
			v := work[0]
			work = work[1:]
			for _, u := range uses[v] {
				if u.Name() == "moe_combine" {
					if u.Operands[0] != v {
						return ir.ErrorAt(m.Source, u.Loc, "--ep: moe_combine reads the experts' buffer as its slots or weights")
					}
					if !slices.Contains(combines, u) {
						combines = append(combines, u)
					}
					continue
				}
				if region[u] {
					continue
				}
				region[u] = true
				for _, r := range u.Results {
					if !seen[r] {
						seen[r] = true
						work = append(work, r)
					}
				}
			}
		}
		if len(combines) == 0 {
			return ir.ErrorAt(m.Source, d.Loc, "--ep: the experts' buffer reaches no moe_combine")
		}
		// The buffer's type is [experts, capacity, …]; the rows each rank receives are
		// [experts/ep, ep·capacity, …].
		if buf.Type.Rank() < 2 {
			return ir.ErrorAt(m.Source, d.Loc, "--ep: the experts' buffer %s has no capacity dim", buf.Type)
		}
		rows := slices.Clone(buf.Type.Shape)
		rows[0], rows[1] = e/n, rows[1]*n
		in := exchange(buf, 0, 1, ir.Type{DType: buf.Type.DType, Shape: rows}, d)
		after[d] = append(after[d], in)
		for _, u := range uses[buf] {
			if u.Name() == "moe_combine" {
				return ir.ErrorAt(m.Source, u.Loc, "--ep: moe_combine reads the dispatch buffer with no expert between them")
			}
		}
		for _, op := range f.Ops {
			if region[op] {
				for i, v := range op.Operands {
					if v == buf {
						op.Operands[i] = in.Result()
					}
				}
			}
		}
		for _, c := range combines {
			h := c.Operands[0]
			out := exchange(h, 1, 0, h.Type, c) // back to [experts, capacity, …]
			before[c] = append(before[c], out)
			c.Operands[0] = out.Result()
		}
		// The expert parameters: arguments with the experts as their first dim that the
		// region reads, directly or through single-operand ops (a 16-bit cast).
		for op := range region {
			for _, v := range op.Operands {
				for v.Def != nil && !region[v.Def] && len(v.Def.Operands) == 1 {
					v = v.Def.Operands[0]
				}
				i, ok := argIndex[v]
				if v.Def != nil || !ok || !f.ArgAttrs[i].Has(ir.AttrParam) {
					continue
				}
				if v.Type.Rank() == 0 || v.Type.Shape[0] != e {
					return ir.ErrorAt(m.Source, op.Loc, "--ep: the experts read parameter %%%s %s, whose first dim is not the %d experts",
						v.Name, v.Type, e)
				}
				experts[i] = true
			}
		}
	}
	// A parameter the experts read must not be read elsewhere: its other readers would see
	// only this rank's experts.
	for i := range experts {
		a := f.Args[i]
		for _, u := range uses[a] {
			if !region[u] && !onlyFeedsRegion(u, uses, region) {
				return ir.ErrorAt(m.Source, u.Loc, "--ep: parameter %%%s is read by the experts and by this %s outside them", a.Name, u.Name())
			}
		}
		s, err := ir.ArgSharding(f, i)
		if err != nil {
			return err
		}
		if s.Replicated() {
			s = &ir.Sharding{Dims: make([][]string, a.Type.Rank())}
		} else {
			s = &ir.Sharding{Dims: slices.Clone(s.Dims), Partial: s.Partial}
		}
		if len(s.Dims[0]) > 0 {
			return ir.ErrorAt(m.Source, f.Loc, "--ep: expert parameter %%%s is already split on its experts dim (%s)", a.Name, s)
		}
		s.Dims[0] = []string{EPAxis}
		f.ArgAttrs[i] = f.ArgAttrs[i].Set(ir.AttrShard, s.Attr())
		sh := slices.Clone(a.Type.Shape)
		sh[0] /= n
		a.Type = ir.Type{DType: a.Type.DType, Shape: sh}
	}
	ops := make([]*ir.Op, 0, len(f.Ops)+2*len(dispatches))
	for _, op := range f.Ops {
		ops = append(ops, before[op]...)
		ops = append(ops, op)
		ops = append(ops, after[op]...)
	}
	f.Ops = ops
	if err := InferFunc(m, f); err != nil {
		return fmt.Errorf("--ep %d: the experts' ops do not take the [experts/ep, ep·capacity, …] rows: %w", n, err)
	}
	m.Attrs = m.Attrs.Set(ir.AttrPartitioned, ir.Unit{})
	return nil
}

// onlyFeedsRegion reports whether op is a cast of an expert weight (the precision pass's
// per-use cast) read only by the experts' ops.
func onlyFeedsRegion(op *ir.Op, uses map[*ir.Value][]*ir.Op, region map[*ir.Op]bool) bool {
	if op.Name() != "cast" {
		return false
	}
	for _, u := range uses[op.Result()] {
		if !region[u] {
			return false
		}
	}
	return len(uses[op.Result()]) > 0
}

// nearestDivisors names the divisors of e nearest n ("2 or 4").
func nearestDivisors(e, n int) string {
	var near []string
	for d := 1; d <= e && len(near) < 2; d++ {
		for _, c := range []int{n - d, n + d} {
			if c >= 1 && c <= e && e%c == 0 && len(near) < 2 {
				near = append(near, fmt.Sprintf("--ep %d", c))
			}
		}
	}
	return joinOr(near)
}

// ExpertParams are the parameters ep-partition sharded over ep (their first dim), by name.
func ExpertParams(m *ir.Module) map[string]bool {
	out := map[string]bool{}
	for _, f := range m.Funcs {
		for i, a := range f.Args {
			if s, err := ir.ArgSharding(f, i); err == nil && s != nil && len(s.Dims) > 0 && slices.Contains(s.Dims[0], EPAxis) {
				out[a.Name] = true
			}
		}
	}
	return out
}
