package ir

import "slices"

// Clone returns a deep copy of the module: new functions, ops and values with the same
// structure. Attribute values are immutable by convention and are shared.
func (m *Module) Clone() *Module {
	out := &Module{Name: m.Name, Attrs: slices.Clone(m.Attrs), Source: m.Source}
	for _, f := range m.Funcs {
		out.Funcs = append(out.Funcs, f.Clone())
	}
	return out
}

// Clone returns a deep copy of the function.
func (f *Func) Clone() *Func {
	g := &Func{Name: f.Name, Attrs: slices.Clone(f.Attrs), Loc: f.Loc,
		ArgAttrs: slices.Clone(f.ArgAttrs), ResultAttrs: slices.Clone(f.ResultAttrs)}
	vmap := make(map[*Value]*Value, len(f.Args)+len(f.Ops))
	mapped := func(v *Value) *Value {
		if w, ok := vmap[v]; ok {
			return w
		}
		return v // a value from outside the function: keep it so the verifier still sees it
	}
	for _, a := range f.Args {
		c := *a
		g.Args = append(g.Args, &c)
		vmap[a] = &c
	}
	g.Ops = make([]*Op, len(f.Ops))
	for i, op := range f.Ops {
		c := *op
		c.Operands = make([]*Value, len(op.Operands))
		for j, v := range op.Operands {
			c.Operands[j] = mapped(v)
		}
		c.Results = make([]*Value, len(op.Results))
		for j, r := range op.Results {
			rc := *r
			rc.Def = &c
			c.Results[j] = &rc
			vmap[r] = &rc
		}
		g.Ops[i] = &c
	}
	for _, r := range f.Results {
		g.Results = append(g.Results, mapped(r))
	}
	return g
}
