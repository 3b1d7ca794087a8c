package passes

import (
	"ppc.dev/ppc/ir"
)

// ShapeInfer recomputes every op's result types from its operands and attributes, in order.
var ShapeInfer = &Pass{
	Name: "shape-infer",
	Doc: "Recompute every result type from operand types and attributes, in program order. " +
		"Fills in types written as `?` and propagates changed argument types (e.g. after " +
		"micro-batching changes the batch dim); reports the first op whose operands no longer fit it.",
	Run: func(m *ir.Module, _ Options) error {
		for _, f := range m.Funcs {
			if err := InferFunc(m, f); err != nil {
				return err
			}
		}
		return nil
	},
}

// InferFunc re-infers the result types of every op in f. Returned values keep their identity,
// so the function's result types follow.
func InferFunc(m *ir.Module, f *ir.Func) error {
	in := make([]ir.Type, 0, 8)
	for _, op := range f.Ops {
		in = in[:0]
		for _, v := range op.Operands {
			if !v.Type.Known() {
				return ir.ErrorAt(m.Source, op.Loc, "%s: operand type unknown", op.Def.Name)
			}
			in = append(in, v.Type)
		}
		types, err := op.Def.Infer(in, op.Attrs)
		if err != nil {
			return ir.ErrorAt(m.Source, op.Loc, "%s: %v", op.Def.Name, err)
		}
		if len(types) != len(op.Results) {
			return ir.ErrorAt(m.Source, op.Loc, "op %s produces %d results, but %d are declared", op.Def.Name, len(types), len(op.Results))
		}
		for i, r := range op.Results {
			r.Type = types[i]
		}
	}
	return nil
}
