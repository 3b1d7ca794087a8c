package passes

import (
	"fmt"

	"ppc.dev/ppc/ir"
)

// tpAxis is the mesh axis that splits tensors inside a function.
const tpAxis = "tp"

// AttrSequenceParallel (unit, on a module) records that shard-propagate laid @forward out
// with sequence parallelism.
const AttrSequenceParallel = "sequence_parallel"

// ShardPropagate annotates every op of @forward with the layout of its results over tp.
var ShardPropagate = &Pass{
	Name: "shard-propagate",
	Doc: "Carry the tp shardings of @forward's parameters (the `shard` argument attribute) through every " +
		"op, in order, by one rule table keyed by op (passes/spmd_rules.go): elementwise ops and broadcasting, " +
		"reshape and transpose by dim factorisation, matmul (a split contracting dim gives a partial sum; " +
		"column- and row-parallel), reductions, softmax, layer/RMS norm, gather from a table split along " +
		"the gathered dim (vocab-parallel embedding), cross-entropy over split classes. Each op gets the " +
		"`shard` annotation of its results (none when whole); spmd-partition reads them. With sp=true, " +
		"partial sums of [batch, seq, …] activations are reduced into a split of the sequence dim " +
		"(Megatron's sequence parallelism) rather than into whole values, and the module attribute " +
		"`sequence_parallel` records it. A module without a tp axis larger than 1 is left alone.",
	Options: []Option{{Name: "sp", Default: "false", Doc: "sequence parallelism"}},
	Run:     runShardPropagate,
}

func runShardPropagate(m *ir.Module, opts Options) error {
	f, tp := spmdForward(m)
	if f == nil {
		return nil
	}
	params, err := paramLayouts(f)
	if err != nil {
		return err
	}
	sp := opts["sp"] == "true"
	p := propagateLayouts(f, params, tp, sp, false)
	if sp {
		// spmd-partition asks the rules again for what each op needs of its operands.
		m.Attrs = m.Attrs.Set(AttrSequenceParallel, ir.Unit{})
	}
	for _, op := range f.Ops {
		if len(op.Results) > 0 {
			op.Shard = p.lays[op.Results[0]].sharding(op.Results[0].Type.Rank(), tpAxis)
		}
	}
	return nil
}

// spmdForward returns @forward and the tp size when the SPMD passes have work: a tp axis
// larger than 1 and a forward function (nil otherwise).
func spmdForward(m *ir.Module) (*ir.Func, int) {
	tp := meshSize(m, tpAxis)
	f := m.Func(ir.ForwardFunc)
	if tp <= 1 {
		return nil, tp
	}
	return f, tp
}

func meshSize(m *ir.Module, axis string) int {
	for _, a := range m.Mesh() {
		if a.Name == axis {
			return a.Size
		}
	}
	return 1
}

// paramLayouts reads the layouts of f's arguments from their shard attributes.
func paramLayouts(f *ir.Func) (map[*ir.Value]lay, error) {
	out := map[*ir.Value]lay{}
	for i, a := range f.Args {
		s, err := ir.ArgSharding(f, i)
		if err != nil {
			return nil, fmt.Errorf("argument %%%s: %v", a.Name, err)
		}
		l, err := layOf(s, tpAxis)
		if err != nil {
			return nil, fmt.Errorf("argument %%%s: %v", a.Name, err)
		}
		if l.partial {
			return nil, fmt.Errorf("argument %%%s: an argument cannot be a partial sum", a.Name)
		}
		out[a] = l
	}
	return out, nil
}

// layoutPlan is the outcome of propagation over one function.
type layoutPlan struct {
	tp      int
	sp      bool
	lays    map[*ir.Value]lay
	reqs    map[*ir.Op][]lay
	gathers int      // split values that must be gathered whole (a layout the model cannot keep)
	misfits []misfit // dims that would have been split had tp divided them
}

// misfit is a dim that tp does not divide where a rule would have split it.
type misfit struct {
	op   *ir.Op
	dim  int
	size int
}

// propagateLayouts runs the rules over f in order. relaxed pretends tp divides every dim,
// to tell a pattern that does not divide from one that is no pattern at all.
func propagateLayouts(f *ir.Func, params map[*ir.Value]lay, tp int, sp, relaxed bool) *layoutPlan {
	p := &layoutPlan{tp: tp, sp: sp, lays: map[*ir.Value]lay{}, reqs: map[*ir.Op][]lay{}}
	for _, a := range f.Args {
		p.lays[a] = replicated
		if l, ok := params[a]; ok {
			p.lays[a] = l
		}
	}
	for _, op := range f.Ops {
		c := &ruleCtx{op: op, tp: tp, sp: sp, relaxed: relaxed}
		for _, x := range op.Operands {
			c.in = append(c.in, p.lays[x])
		}
		req, out := ruleFor(op)(c)
		for _, mf := range c.misfits {
			p.misfits = append(p.misfits, misfit{op, mf[0], mf[1]})
		}
		p.reqs[op] = req
		for i, r := range op.Results {
			p.lays[r] = out[min(i, len(out)-1)]
		}
		for i := range req {
			if c.in[i].dim >= 0 && req[i].dim != c.in[i].dim {
				p.gathers++
			}
		}
	}
	for _, r := range f.Results {
		if p.lays[r].dim >= 0 {
			p.gathers++
		}
	}
	return p
}
