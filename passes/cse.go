package passes

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
)

// CSE merges pure ops that compute the same thing.
var CSE = &Pass{
	Name: "cse",
	Doc: "Common-subexpression elimination: a pure op with the same name, operands, attributes and " +
		"annotations as an earlier one is replaced by it (commutative operands are compared unordered; " +
		"ops in different stages or phases are kept apart so no value crosses a stage boundary).",
	Run: func(m *ir.Module, _ Options) error {
		for _, f := range m.Funcs {
			cse(f)
		}
		return nil
	},
}

func cse(f *ir.Func) {
	ids := make(map[*ir.Value]int, len(f.Args)+len(f.Ops))
	next := 0
	id := func(v *ir.Value) int {
		if n, ok := ids[v]; ok {
			return n
		}
		next++
		ids[v] = next
		return next
	}
	seen := make(map[string]*ir.Op)
	repl := make(map[*ir.Value]*ir.Value)
	out := f.Ops[:0]
	var key strings.Builder
	for _, op := range f.Ops {
		// Rewrite operands first so chains of duplicates collapse in one sweep.
		for i, v := range op.Operands {
			if r, ok := repl[v]; ok {
				op.Operands[i] = r
			}
		}
		if !op.Def.Has(ir.Pure) {
			out = append(out, op)
			continue
		}
		key.Reset()
		key.WriteString(op.Def.Name)
		operands := make([]int, len(op.Operands))
		for i, v := range op.Operands {
			operands[i] = id(v)
		}
		if op.Def.Has(ir.Commutative) && len(operands) == 2 && operands[0] > operands[1] {
			operands[0], operands[1] = operands[1], operands[0]
		}
		fmt.Fprint(&key, operands)
		key.WriteString(ir.AttrString(ir.Dict(op.Attrs)))
		key.WriteString(ir.AttrString(ir.Dict(op.Annotations())))
		for _, r := range op.Results {
			key.WriteString(r.Type.String())
		}
		k := key.String()
		if prev, ok := seen[k]; ok {
			for i, r := range op.Results {
				repl[r] = prev.Results[i]
			}
			continue
		}
		seen[k] = op
		out = append(out, op)
	}
	f.Ops = out
	for i, v := range f.Results {
		if r, ok := repl[v]; ok {
			f.Results[i] = r
		}
	}
}
