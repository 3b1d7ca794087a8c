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
	if axis == EDPAxis { // a sub-axis of dp: the ranks holding the same experts
		return meshSize(m, "dp") / meshSize(m, EPAxis)
	}
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

// layoutPlan is the outcome of propagation over one function. It keeps each op's share of
// the totals so that a change to a few parameters' layouts can be re-propagated through the
// ops it reaches alone (shard-annotate tries every weight of a 96-layer model, and a whole
// propagation per try made it quadratic: 4.5 s for GPT-3 175B at tp 8).
type layoutPlan struct {
	tp      int
	sp      bool
	relaxed bool
	f       *ir.Func
	lays    map[*ir.Value]lay
	reqs    map[*ir.Op][]lay
	gathers int      // split values that must be gathered whole (a layout the model cannot keep)
	misfits []misfit // dims that would have been split had tp divided them
	// Per op: its misfits and its gathers.
	opMisfits map[*ir.Op][]misfit
	opGathers map[*ir.Op]int
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
	p := &layoutPlan{tp: tp, sp: sp, relaxed: relaxed, f: f, lays: map[*ir.Value]lay{}, reqs: map[*ir.Op][]lay{},
		opMisfits: map[*ir.Op][]misfit{}, opGathers: map[*ir.Op]int{}}
	for _, a := range f.Args {
		p.lays[a] = replicated
		if l, ok := params[a]; ok {
			p.lays[a] = l
		}
	}
	for _, op := range f.Ops {
		req, out, mfs, g := p.eval(op, func(v *ir.Value) lay { return p.lays[v] })
		p.misfits = append(p.misfits, mfs...)
		p.reqs[op], p.opMisfits[op], p.opGathers[op] = req, mfs, g
		p.gathers += g
		for i, r := range op.Results {
			p.lays[r] = out[min(i, len(out)-1)]
		}
	}
	for _, r := range f.Results {
		if p.lays[r].dim >= 0 {
			p.gathers++
		}
	}
	return p
}

// eval runs op's rule on the layouts of its operands in lays: what it requires of them, the
// layouts of its results, its misfits and the operands it gathers whole.
func (p *layoutPlan) eval(op *ir.Op, layOf func(*ir.Value) lay) (req, out []lay, mfs []misfit, gathers int) {
	c := &ruleCtx{op: op, tp: p.tp, sp: p.sp, relaxed: p.relaxed}
	for _, x := range op.Operands {
		c.in = append(c.in, layOf(x))
	}
	req, out = ruleFor(op)(c)
	for _, mf := range c.misfits {
		mfs = append(mfs, misfit{op, mf[0], mf[1]})
	}
	for i := range req {
		if c.in[i].dim >= 0 && req[i].dim != c.in[i].dim {
			gathers++
		}
	}
	return req, out, mfs, gathers
}

// overlay is a set of layouts that differ from a plan's.
type overlay map[*ir.Value]lay

// reach re-evaluates, in order, the ops that read a value whose layout changes reaches
// (changed, a few parameters), calling visit with each op's new outcome; it returns every
// changed layout. Ops no change reaches keep their outcome.
func (p *layoutPlan) reach(changed overlay, visit func(op *ir.Op, req []lay, mfs []misfit, gathers int)) overlay {
	view := func(v *ir.Value) lay {
		if l, ok := changed[v]; ok {
			return l
		}
		return p.lays[v]
	}
	for _, op := range p.f.Ops {
		touched := false
		for _, x := range op.Operands {
			if _, ok := changed[x]; ok {
				touched = true
				break
			}
		}
		if !touched {
			continue
		}
		req, out, mfs, g := p.eval(op, view)
		visit(op, req, mfs, g)
		for i, r := range op.Results {
			if l := out[min(i, len(out)-1)]; l != view(r) {
				changed[r] = l
			}
		}
	}
	return changed
}

// try is the gathers and misfit count p would have with the parameter layouts changes
// (p itself is unchanged).
func (p *layoutPlan) try(changes overlay) (gathers, misfits int) {
	gathers, misfits = p.gathers, len(p.misfits)
	ch := overlay{}
	for k, v := range changes {
		ch[k] = v
	}
	ch = p.reach(ch, func(op *ir.Op, _ []lay, mfs []misfit, g int) {
		gathers += g - p.opGathers[op]
		misfits += len(mfs) - len(p.opMisfits[op])
	})
	for _, r := range p.f.Results {
		if l, ok := ch[r]; ok {
			gathers += b2i(l.dim >= 0) - b2i(p.lays[r].dim >= 0)
		}
	}
	return gathers, misfits
}

// update applies the parameter layouts changes to p in place and returns the ops whose
// outcome it re-evaluated.
func (p *layoutPlan) update(changes overlay) []*ir.Op {
	var touched []*ir.Op
	ch := p.reach(changes, func(op *ir.Op, req []lay, mfs []misfit, g int) {
		touched = append(touched, op)
		p.gathers += g - p.opGathers[op]
		p.reqs[op], p.opMisfits[op], p.opGathers[op] = req, mfs, g
	})
	for _, r := range p.f.Results {
		if l, ok := ch[r]; ok {
			p.gathers += b2i(l.dim >= 0) - b2i(p.lays[r].dim >= 0)
		}
	}
	for v, l := range ch {
		p.lays[v] = l
	}
	// The misfits in op order, as a whole propagation lists them.
	p.misfits = p.misfits[:0]
	for _, op := range p.f.Ops {
		p.misfits = append(p.misfits, p.opMisfits[op]...)
	}
	return touched
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
