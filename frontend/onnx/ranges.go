package onnx

import (
	"ppc.dev/ppc/ir"
)

// inputRanges gives each integer graph input the range of values the model can take, as a
// model file's `in [lo, hi)` does: ONNX declares none, and without one synthetic data draws
// 0s and 1s, which no language model learns from, and a token file cannot feed the model.
//
//   - An input that indexes a table (Gather, an embedding) holds rows of it: [0, rows). An
//     input that indexes several tables takes the smallest.
//   - An input that a cross-entropy compares against (SoftmaxCrossEntropyLoss's labels) holds
//     classes, [0, C), and is marked {label}; not when the loss ignores a label outside that
//     range (ignore_index = -100), which a range could not express.
//
// The input may reach those ops through ops that move values without changing them
// (reshape, transpose, slice, broadcast, integer casts). Labels that then match one token
// input are linked to it as its next tokens (ir.LinkNextTokens).
func inputRanges(f *ir.Func) {
	uses := f.Uses()
	for i, a := range f.Args {
		at := f.ArgAttrs[i]
		if !at.Has(ir.AttrInput) || at.Has(ir.AttrRange) || !a.Type.DType.IsInt() {
			continue
		}
		hi, label := indexBound(a, uses)
		if hi <= 0 {
			continue
		}
		at = at.Set(ir.AttrRange, ir.Ints(0, hi))
		if label {
			at = at.Set(ir.AttrLabel, ir.Unit{})
		}
		f.ArgAttrs[i] = at.Sorted()
	}
	ir.LinkNextTokens(f)
}

// indexBound follows v through value-preserving ops to the tables it indexes and the losses
// it labels, returning the bound its values must stay below (0: none found) and whether it
// is a loss's labels. A value used both ways takes the smaller bound.
func indexBound(v *ir.Value, uses map[*ir.Value][]*ir.Op) (hi int, label bool) {
	seen := map[*ir.Value]bool{}
	bound := func(n int, isLabel bool) {
		if n > 0 && (hi == 0 || n < hi) {
			hi = n
		}
		label = label || isLabel
	}
	var walk func(v *ir.Value)
	walk = func(v *ir.Value) {
		if seen[v] {
			return
		}
		seen[v] = true
		for _, op := range uses[v] {
			switch op.Name() {
			case "gather":
				if len(op.Operands) == 2 && op.Operands[1] == v && op.Operands[0] != v {
					t := op.Operands[0].Type
					ax := op.Attrs.Int("axis", 0)
					if ax < 0 {
						ax += t.Rank()
					}
					if ax >= 0 && ax < t.Rank() {
						bound(t.Shape[ax], false)
					}
				}
			case "cross_entropy":
				if len(op.Operands) == 2 && op.Operands[1] == v && op.Operands[0] != v {
					t := op.Operands[0].Type
					c := t.Shape[t.Rank()-1]
					if ii, ok := op.Attrs.Get("ignore_index").(ir.Int); ok && (int(ii) < 0 || int(ii) >= c) {
						continue
					}
					bound(c, true)
				}
			case "reshape", "transpose", "slice", "broadcast":
				if op.Operands[0] == v {
					walk(op.Results[0])
				}
			case "cast":
				if op.Operands[0] == v && op.Results[0].Type.DType.IsInt() {
					walk(op.Results[0])
				}
			}
		}
	}
	walk(v)
	return hi, label
}
