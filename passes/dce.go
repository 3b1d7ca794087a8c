package passes

import "ppc.dev/ppc/ir"

// DCE removes pure ops whose results are never used.
var DCE = &Pass{
	Name: "dce",
	Doc:  "Dead-code elimination: remove pure ops and collectives none of whose results is used or returned (one backward sweep); every member of a collective's group runs the same function, so all drop it alike.",
	Run: func(m *ir.Module, _ Options) error {
		for _, f := range m.Funcs {
			RemoveDead(f)
		}
		return nil
	},
}

// RemoveDead deletes unused pure ops and collectives from f. One backward sweep suffices because ops are in
// topological order: when an op is reached, all its users have already been decided.
func RemoveDead(f *ir.Func) {
	live := make(map[*ir.Value]bool, len(f.Ops))
	for _, r := range f.Results {
		live[r] = true
	}
	keep := make([]bool, len(f.Ops))
	n := 0
	for i := len(f.Ops) - 1; i >= 0; i-- {
		op := f.Ops[i]
		// A collective with results is dead when they are: every member of its group runs
		// the same function (SPMD), so every member drops it alike and no one waits.
		needed := !op.Def.Has(ir.Pure) && !(op.Def.Has(ir.Collective) && len(op.Results) > 0)
		for _, r := range op.Results {
			needed = needed || live[r]
		}
		if !needed {
			continue
		}
		keep[i] = true
		n++
		for _, v := range op.Operands {
			live[v] = true
		}
	}
	out := make([]*ir.Op, 0, n)
	for i, op := range f.Ops {
		if keep[i] {
			out = append(out, op)
		}
	}
	f.Ops = out
}
