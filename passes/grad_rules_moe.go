package passes

import (
	"ppc.dev/ppc/ir"
)

// moeGradRules are the gradient rules of the mixture-of-experts ops (ir/ops_moe.go), merged
// into gradRules:
//
//	top_k         dx = gather_elements_grad(indices, dvalues): each chosen element gets its
//	              value's gradient, the others 0; the indices are integers
//	moe_slots     integer results: nothing flows back (routing is a choice, as arg_max)
//	moe_dispatch  dx = moe_combine(dbuf, slots, weights), dweights = moe_weights_grad(x, dbuf, slots)
//	moe_combine   dy = moe_dispatch(dout, slots, weights), dweights = moe_weights_grad(dout, y, slots)
//
// dispatch and combine are each other's adjoints, so the backward of a layer is the same two
// ops in the other order (and expert parallelism's all-to-all pairs reverse with them). Every
// gradient here is an activation's (bwd_in): the ops have no weights.
var moeGradRules = map[string]gradRule{
	"moe_slots": nil,
	"top_k": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		x := op.Operands[0]
		axis, err := ir.NormAxis(op.Attrs.Int("axis", -1), x.Type.Rank())
		if err != nil {
			return nil, err
		}
		at := ir.Attrs{{Name: "axis", Value: ir.Int(axis)}, {Name: "shape", Value: ir.Ints(x.Type.Shape...)}}
		return []*ir.Value{g.b.Op1("gather_elements_grad", at, op.Results[1], d[0])}, nil
	},
	"moe_dispatch": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		x, slots := op.Operands[0], op.Operands[1]
		res := make([]*ir.Value, len(op.Operands))
		if g.needs(0) {
			res[0] = g.b.Op1("moe_combine", nil, append([]*ir.Value{d[0]}, op.Operands[1:]...)...)
		}
		if g.needs(2) {
			res[2] = g.b.Op1("moe_weights_grad", nil, x, d[0], slots)
		}
		return res, nil
	},
	"moe_combine": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		y, slots := op.Operands[0], op.Operands[1]
		res := make([]*ir.Value, len(op.Operands))
		if g.needs(0) {
			at := ir.Attrs{{Name: "capacity", Value: ir.Int(y.Type.Shape[1])}, {Name: "experts", Value: ir.Int(y.Type.Shape[0])}}
			res[0] = g.b.Op1("moe_dispatch", at, append([]*ir.Value{d[0]}, op.Operands[1:]...)...)
		}
		if g.needs(2) {
			res[2] = g.b.Op1("moe_weights_grad", nil, d[0], y, slots)
		}
		return res, nil
	},
}
