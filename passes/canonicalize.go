package passes

import (
	"ppc.dev/ppc/ir"
)

// Canonicalize folds constants and applies algebraic identities.
var Canonicalize = &Pass{
	Name: "canonicalize",
	Doc: "Fold ops whose operands are all constants (up to 65536 elements) and apply algebraic identities: " +
		"x+0, x-0, x*1, x/1, x^1 → x; neg(neg x) → x; max/min(x, x) → x; reshape, broadcast, cast and " +
		"transpose that change nothing are removed; reshape∘reshape and transpose∘transpose compose; " +
		"a one-operand concat and a full slice are removed. Replaced ops are erased; operands they leave " +
		"unused are left to dce.",
	Run: func(m *ir.Module, _ Options) error {
		for _, f := range m.Funcs {
			if err := canonicalize(m, f); err != nil {
				return err
			}
		}
		return nil
	},
}

func canonicalize(m *ir.Module, f *ir.Func) error {
	consts := map[*ir.Value]*ir.Dense{}
	repl := map[*ir.Value]*ir.Value{}
	out := make([]*ir.Op, 0, len(f.Ops))
	constDef := ir.MustLookup("constant")
	for _, op := range f.Ops {
		for i, v := range op.Operands {
			if r, ok := repl[v]; ok {
				op.Operands[i] = r
			}
		}
		if op.Def == constDef {
			consts[op.Results[0]] = op.Attrs.Get("value").(*ir.Dense)
			out = append(out, op)
			continue
		}
		// Constant folding.
		if in, ok := constOperands(op, consts); ok {
			folded, err := ir.Fold(op, in)
			if err != nil {
				return ir.ErrorAt(m.Source, op.Loc, "%s: %v", op.Def.Name, err)
			}
			if folded != nil {
				for i, d := range folded {
					c := ir.NewOp(constDef, nil, ir.Attrs{{Name: "value", Value: d}}, []ir.Type{d.Type})
					c.CopyAnnotations(op)
					c.Loc = op.Loc
					c.Results[0].Name = op.Results[i].Name
					consts[c.Results[0]] = d
					repl[op.Results[i]] = c.Results[0]
					out = append(out, c)
				}
				continue
			}
		}
		if r, fresh := simplify(op, consts); r != nil {
			repl[op.Results[0]] = r
			if fresh != nil {
				out = append(out, fresh)
			}
			continue
		}
		out = append(out, op)
	}
	f.Ops = out
	for i, v := range f.Results {
		if r, ok := repl[v]; ok {
			f.Results[i] = r
		}
	}
	return nil
}

func constOperands(op *ir.Op, consts map[*ir.Value]*ir.Dense) ([]*ir.Dense, bool) {
	if len(op.Operands) == 0 {
		return nil, false
	}
	in := make([]*ir.Dense, len(op.Operands))
	for i, v := range op.Operands {
		d, ok := consts[v]
		if !ok {
			return nil, false
		}
		in[i] = d
	}
	return in, true
}

// simplify returns a value that replaces op's single result, or nil. A non-nil fresh op
// defines that value and must be emitted in op's place.
func simplify(op *ir.Op, consts map[*ir.Value]*ir.Dense) (v *ir.Value, fresh *ir.Op) {
	if len(op.Results) != 1 {
		return nil, nil
	}
	res := op.Results[0]
	same := func(v *ir.Value) *ir.Value {
		if v.Type.Equal(res.Type) {
			return v
		}
		return nil
	}
	isConst := func(v *ir.Value, x float64) bool {
		d, ok := consts[v]
		return ok && d.IsSplatOf(x)
	}
	ops := op.Operands
	defName := func(v *ir.Value) string {
		if v.Def == nil {
			return ""
		}
		return v.Def.Def.Name
	}
	switch op.Def.Name {
	case "add":
		if isConst(ops[1], 0) {
			return same(ops[0]), nil
		}
		if isConst(ops[0], 0) {
			return same(ops[1]), nil
		}
	case "sub":
		if isConst(ops[1], 0) {
			return same(ops[0]), nil
		}
	case "mul":
		if isConst(ops[1], 1) {
			return same(ops[0]), nil
		}
		if isConst(ops[0], 1) {
			return same(ops[1]), nil
		}
	case "div", "pow":
		if isConst(ops[1], 1) {
			return same(ops[0]), nil
		}
	case "max", "min":
		if ops[0] == ops[1] {
			return same(ops[0]), nil
		}
	case "neg":
		if defName(ops[0]) == "neg" {
			return same(ops[0].Def.Operands[0]), nil
		}
	case "cast", "broadcast":
		return same(ops[0]), nil
	case "reshape":
		if v := same(ops[0]); v != nil {
			return v, nil
		}
		if defName(ops[0]) == "reshape" {
			inner := ops[0].Def.Operands[0]
			if inner.Type.Equal(res.Type) {
				return inner, nil
			}
			return rebuild(op, inner, op.Attrs)
		}
	case "transpose":
		perm := op.Attrs.Ints("perm")
		if isIdentity(perm) {
			return ops[0], nil
		}
		if defName(ops[0]) == "transpose" {
			innerPerm := ops[0].Def.Attrs.Ints("perm")
			composed := make([]int, len(perm))
			for i, p := range perm {
				composed[i] = innerPerm[p]
			}
			inner := ops[0].Def.Operands[0]
			if isIdentity(composed) {
				return inner, nil
			}
			return rebuild(op, inner, ir.Attrs{{Name: "perm", Value: ir.Ints(composed...)}})
		}
	case "concat":
		if len(ops) == 1 {
			return ops[0], nil
		}
	case "slice":
		return same(ops[0]), nil
	}
	return nil, nil
}

// rebuild makes a copy of op reading from a different operand with new attributes, keeping
// its annotations, location and result name.
func rebuild(op *ir.Op, operand *ir.Value, attrs ir.Attrs) (*ir.Value, *ir.Op) {
	n := ir.NewOp(op.Def, []*ir.Value{operand}, attrs, []ir.Type{op.Results[0].Type})
	n.CopyAnnotations(op)
	n.Loc = op.Loc
	n.Results[0].Name = op.Results[0].Name
	return n.Results[0], n
}

func isIdentity(perm []int) bool {
	for i, p := range perm {
		if i != p {
			return false
		}
	}
	return true
}
