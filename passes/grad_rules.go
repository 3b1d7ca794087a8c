package passes

import (
	"fmt"
	"math"

	"ppc.dev/ppc/ir"
)

// gradRule computes the gradients of an op's operands from the gradients of its results.
// dOut has one entry per result: nil for a result the loss does not depend on (only possible
// for multi-result ops; a rule is never called when every entry is nil). The rule returns
// one gradient per operand, each of the operand's exact type, or nil for an operand that
// gets none; it builds ops with g.b and may skip operands for which g.needs is false. A nil
// rule in the table marks an op through which no gradient flows (not an error).
type gradRule func(g *gradCtx, op *ir.Op, dOut []*ir.Value) ([]*ir.Value, error)

// gradCtx is what a rule builds with. The builder's location and stage are the forward op's,
// so every backward op inherits them; its error is sticky and checked after the rule.
type gradCtx struct {
	b    *ir.Builder
	need []bool
}

// needs reports whether operand i needs a gradient (it depends on a parameter and reaches
// the loss through this op).
func (g *gradCtx) needs(i int) bool { return i < len(g.need) && g.need[i] }

// failed reports whether an earlier build step failed; rules that compute shapes from the
// values they built stop early then (the pass reports the builder's error).
func (g *gradCtx) failed() bool { return g.b.Err() != nil }

// scalar is a rank-0 constant of like's dtype (broadcasting against any shape).
func (g *gradCtx) scalar(like *ir.Value, v float64) *ir.Value {
	return scalarConst(g.b, like.Type.DType, v)
}

// scalarConst builds a rank-0 splat constant (printed `dense<f32[]: 1>`).
func scalarConst(b *ir.Builder, dt ir.DType, v float64) *ir.Value {
	return b.Constant(ir.Splat(ir.T(dt), v))
}

// zeros is a splat zero constant of type t.
func (g *gradCtx) zeros(t ir.Type) *ir.Value { return g.b.Constant(ir.Splat(t, 0)) }

// sumTo reduces a broadcast gradient x back to target, a shape x was broadcast from under
// numpy rules: reduce_sum over the leading extra dims and the dims where target has 1 (one op),
// then a reshape when the reduced shape still differs (the kept 1s).
func (g *gradCtx) sumTo(x *ir.Value, target ir.Shape) *ir.Value {
	s := x.Type.Shape
	if g.failed() || s.Equal(target) {
		return x
	}
	lead := len(s) - len(target)
	if lead < 0 {
		g.b.Failf("cannot reduce a %s gradient to shape %s", x.Type, target)
		return x
	}
	var axes []int
	for i := range s {
		if i < lead || target[i-lead] == 1 && s[i] != 1 {
			axes = append(axes, i)
		}
	}
	if len(axes) > 0 {
		x = g.b.Reduce("sum", x, axes, false)
	}
	if !g.failed() && !x.Type.Shape.Equal(target) {
		x = g.b.Reshape(x, target...)
	}
	return x
}

// reshapeTo reshapes x to s unless it already has that shape.
func (g *gradCtx) reshapeTo(x *ir.Value, s ir.Shape) *ir.Value {
	if g.failed() || x.Type.Shape.Equal(s) {
		return x
	}
	return g.b.Reshape(x, s...)
}

func (g *gradCtx) matmul(a, b *ir.Value, ta, tb bool) *ir.Value {
	var at ir.Attrs
	if ta {
		at = append(at, ir.NamedAttr{Name: "transpose_a", Value: ir.BoolAttr(true)})
	}
	if tb {
		at = append(at, ir.NamedAttr{Name: "transpose_b", Value: ir.BoolAttr(true)})
	}
	return g.b.Op1("matmul", at, a, b)
}

// keepAttrs copies the named attributes of op that are present.
func keepAttrs(op *ir.Op, names ...string) ir.Attrs {
	var at ir.Attrs
	for _, n := range names {
		if v := op.Attrs.Get(n); v != nil {
			at = at.Set(n, v)
		}
	}
	return at
}

// gradRules is the gradient table, keyed by op name: the core ops' rules (coreGradRules) and
// the nn ops' (grad_rules_nn.go). Ops absent from it have no rule: one that lies between a
// parameter and the loss is an error naming it.
var gradRules = mergeRules(coreGradRules, nnGradRules, moeGradRules)

var coreGradRules = map[string]gradRule{
	// No gradient flows through these (their results are constants, integers or bools).
	"constant": nil, "iota": nil, "equal": nil, "less": nil, "greater": nil, "and": nil, "or": nil, "not": nil,

	"add": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return binaryRule(g, op, func() *ir.Value { return d[0] }, func() *ir.Value { return d[0] }, false), nil
	},
	"sub": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return binaryRule(g, op, func() *ir.Value { return d[0] }, func() *ir.Value { return d[0] }, true), nil
	},
	"mul": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		a, b := op.Operands[0], op.Operands[1]
		return binaryRule(g, op, func() *ir.Value { return g.b.Mul(d[0], b) }, func() *ir.Value { return g.b.Mul(d[0], a) }, false), nil
	},
	// y = a/b: da = dy/b, db = −dy·y/b.
	"div": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		b, y := op.Operands[1], op.Result()
		return binaryRule(g, op, func() *ir.Value { return g.b.Div(d[0], b) },
			func() *ir.Value { return g.b.Div(g.b.Mul(d[0], y), b) }, true), nil
	},
	// y = a^b: da = dy·b·a^(b−1), db = dy·y·log(a), taken as 0 where a = 0 (as PyTorch does).
	"pow": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		a, b, y := op.Operands[0], op.Operands[1], op.Result()
		return binaryRule(g, op,
			func() *ir.Value {
				return g.b.Mul(g.b.Mul(d[0], b), g.b.Op1("pow", nil, a, g.b.Sub(b, g.scalar(b, 1))))
			},
			func() *ir.Value {
				zero := g.scalar(a, 0)
				ylog := g.b.Mul(y, g.b.Unary("log", a))
				return g.b.Mul(d[0], g.b.Op1("where", nil, g.b.Op1("equal", nil, a, zero), zero, ylog))
			}, false), nil
	},
	// Ties go to the first operand: max sends dy to a where a >= b, min where a <= b.
	"max": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return minMaxRule(g, op, d[0], "less")
	},
	"min": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return minMaxRule(g, op, d[0], "greater")
	},
	"where": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		c := op.Operands[0]
		res := make([]*ir.Value, 3)
		var zero *ir.Value
		for i := 1; i <= 2; i++ {
			if !g.needs(i) {
				continue
			}
			if zero == nil {
				zero = g.scalar(d[0], 0)
			}
			sel := g.b.Op1("where", nil, c, d[0], zero)
			if i == 2 {
				sel = g.b.Op1("where", nil, c, zero, d[0])
			}
			res[i] = g.sumTo(sel, op.Operands[i].Type.Shape)
		}
		return res, nil
	},

	"neg": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value { return g.b.Neg(dy) }),
	// d|x| = sign(x)·dy with sign(0) = 0, as in PyTorch.
	"abs": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value {
		zero := g.scalar(x, 0)
		inner := g.b.Op1("where", nil, g.b.Op1("less", nil, x, zero), g.b.Neg(dy), zero)
		return g.b.Op1("where", nil, g.b.Op1("greater", nil, x, zero), dy, inner)
	}),
	"relu":    fusedRule("relu_grad", false), // from the result (see relu_grad)
	"gelu":    fusedRule("gelu_grad", true, "approximate"),
	"silu":    fusedRule("silu_grad", true),
	"tanh":    fusedRule("tanh_grad", false),
	"sigmoid": fusedRule("sigmoid_grad", false),
	"exp":     unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value { return g.b.Mul(dy, y) }),
	"log":     unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value { return g.b.Div(dy, x) }),
	// d√x = dy·0.5/y.
	"sqrt": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value {
		return g.b.Div(g.b.Mul(dy, g.scalar(x, 0.5)), y)
	}),
	// d(x^−½) = −0.5·dy·y/x.
	"rsqrt": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value {
		return g.b.Mul(g.b.Div(g.b.Mul(dy, y), x), g.scalar(x, -0.5))
	}),
	// d erf(x) = dy·(2/√π)·exp(−x²).
	"erf": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value {
		e := g.b.Unary("exp", g.b.Neg(g.b.Mul(x, x)))
		return g.b.Mul(dy, g.b.Mul(e, g.scalar(x, 2/math.SqrtPi)))
	}),
	"sin": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value { return g.b.Mul(dy, g.b.Unary("cos", x)) }),
	"cos": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value {
		return g.b.Neg(g.b.Mul(dy, g.b.Unary("sin", x)))
	}),
	"softmax":     fusedRule("softmax_grad", false, "axis"),
	"log_softmax": fusedRule("log_softmax_grad", false, "axis"),
	"layer_norm":  normRule("layer_norm_grad_input", "layer_norm_grad_params"),
	"rms_norm":    normRule("rms_norm_grad_input", "rms_norm_grad_params"),

	"matmul": matmulRule,

	// FlashAttention-2's backward: one fused op recomputes the probabilities from the saved
	// log-sum-exp. All three gradients are activation gradients (bwd_in); attention has no
	// weights, so nothing of it runs in W.
	"attention":      attentionRule,
	"ring_attention": ringAttentionRule,

	// The conjugate collectives of tensor and sequence parallelism (see doc.go): a sum over
	// the axis hands every member the same gradient; a replicated value entering a split
	// region gets the sum of the members' partial gradients; gathering and scattering along a
	// dim swap.
	"all_reduce": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		if kind := op.Attrs.Str("op", "sum"); kind != "sum" {
			return nil, fmt.Errorf("no gradient through all_reduce {op = %s}: only sums are differentiable (a max for numerical stability must not reach a parameter)", kind)
		}
		return []*ir.Value{d[0]}, nil
	},
	"stop_gradient": nil,
	"copy_to_axis": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return []*ir.Value{g.b.Op1("all_reduce", ir.Attrs{{Name: "axis", Value: op.Attrs.Get("axis")}}, d[0])}, nil
	},
	"all_gather": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		if op.Attrs.Str("grad", "reduce_scatter") == "slice" {
			// The gradient is whole on every rank: each keeps its own block of it.
			dim := op.Attrs.Int("dim", 0)
			n := op.Operands[0].Type.Shape[dim]
			axis := ir.Attrs{{Name: "axis", Value: op.Attrs.Get("axis")}}
			off := g.b.Mul(g.b.Op1("axis_index", axis), g.b.Scalar(ir.I64, float64(n)))
			idx := g.b.Add(g.b.Op1("iota", ir.Attrs{{Name: "axis", Value: ir.Int(0)}, {Name: "type", Value: ir.TypeAttr(ir.T(ir.I64, n))}}), off)
			return []*ir.Value{g.b.Op1("gather", ir.Attrs{{Name: "axis", Value: ir.Int(dim)}}, d[0], idx)}, nil
		}
		return []*ir.Value{g.b.Op1("reduce_scatter", op.Attrs.Delete("grad"), d[0])}, nil
	},
	// An all_to_all is a permutation of the blocks over the members: its adjoint sends every
	// block back where it came from, the all_to_all with split and concat dims swapped.
	"all_to_all": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		at := op.Attrs.Set("split_dim", op.Attrs.Get("concat_dim")).Set("concat_dim", op.Attrs.Get("split_dim"))
		return []*ir.Value{g.b.Op1("all_to_all", at, d[0])}, nil
	},
	"reduce_scatter": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return []*ir.Value{g.b.Op1("all_gather", op.Attrs, d[0])}, nil
	},

	"reshape": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value { return g.b.Reshape(dy, x.Type.Shape...) }),
	"transpose": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		perm := op.Attrs.Ints("perm")
		inv := make([]int, len(perm))
		for i, p := range perm {
			inv[p] = i
		}
		return []*ir.Value{g.b.Transpose(d[0], inv...)}, nil
	},
	"broadcast": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value { return g.sumTo(dy, x.Type.Shape) }),
	"reduce_sum": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return reduceRule(g, op, d[0], false)
	},
	"reduce_mean": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return reduceRule(g, op, d[0], true)
	},
	"reduce_max": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		x, y := op.Operands[0], op.Result()
		return []*ir.Value{g.b.Op1("reduce_max_grad", keepAttrs(op, "axes", "keepdims"), x, y, d[0])}, nil
	},
	"gather": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		data, idx := op.Operands[0], op.Operands[1]
		axis, err := ir.NormAxis(op.Attrs.Int("axis", 0), data.Type.Rank())
		if err != nil {
			return nil, err
		}
		at := ir.Attrs{{Name: "axis", Value: ir.Int(axis)}, {Name: "dim", Value: ir.Int(data.Type.Shape[axis])}}
		return []*ir.Value{g.b.Op1("gather_grad", at, idx, d[0]), nil}, nil
	},
	"concat": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		if len(op.Operands) == 1 {
			return []*ir.Value{d[0]}, nil
		}
		axis, err := ir.NormAxis(op.Attrs.Int("axis", 0), op.Result().Type.Rank())
		if err != nil {
			return nil, err
		}
		sizes := make([]int, len(op.Operands))
		for i, x := range op.Operands {
			sizes[i] = x.Type.Shape[axis]
		}
		return g.b.Op("split", ir.Attrs{{Name: "axis", Value: ir.Int(axis)}, {Name: "sizes", Value: ir.Ints(sizes...)}}, d[0]), nil
	},
	"slice": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		at := keepAttrs(op, "starts", "ends", "axes", "steps").Set("shape", ir.Ints(op.Operands[0].Type.Shape...))
		return []*ir.Value{g.b.Op1("slice_grad", at, d[0])}, nil
	},
	// The pieces without a gradient contribute zeros.
	"split": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		pieces := make([]*ir.Value, len(d))
		for i, dy := range d {
			if pieces[i] = dy; dy == nil {
				pieces[i] = g.zeros(op.Results[i].Type)
			}
		}
		return []*ir.Value{g.b.Op1("concat", keepAttrs(op, "axis"), pieces...)}, nil
	},
	// Only float→float casts carry a gradient (other casts make no active value).
	"cast": unaryRule(func(g *gradCtx, x, y, dy *ir.Value) *ir.Value { return g.b.Cast(dy, x.Type.DType) }),

	"cross_entropy": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		logits, labels := op.Operands[0], op.Operands[1]
		return []*ir.Value{g.b.Op1("cross_entropy_grad", keepAttrs(op, "reduction", "ignore_index"), logits, labels, d[0]), nil}, nil
	},
	"mse": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		dp := g.b.Op1("mse_grad", keepAttrs(op, "reduction"), op.Operands[0], op.Operands[1], d[0])
		res := []*ir.Value{dp, nil}
		if g.needs(1) {
			res[1] = g.b.Neg(dp)
		}
		return res, nil
	},
}

// unaryRule adapts a one-operand rule written as dx = f(x, y, dy).
func unaryRule(f func(g *gradCtx, x, y, dy *ir.Value) *ir.Value) gradRule {
	return func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return []*ir.Value{f(g, op.Operands[0], op.Result(), d[0])}, nil
	}
}

// fusedRule emits a fused gradient op reading (x, dy) when fromInput, else (y, dy), with the
// forward op's attributes of the given names.
func fusedRule(name string, fromInput bool, attrs ...string) gradRule {
	return func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		v := op.Result()
		if fromInput {
			v = op.Operands[0]
		}
		return []*ir.Value{g.b.Op1(name, keepAttrs(op, attrs...), v, d[0])}, nil
	}
}

// binaryRule is the rule of a broadcasting binary op: da = sumTo(fa()), db = sumTo(fb()) (negated
// after the reduction when negB, where it is cheaper), each built only when needed.
func binaryRule(g *gradCtx, op *ir.Op, fa, fb func() *ir.Value, negB bool) []*ir.Value {
	res := make([]*ir.Value, 2)
	for i, f := range []func() *ir.Value{fa, fb} {
		if !g.needs(i) {
			continue
		}
		v := g.sumTo(f(), op.Operands[i].Type.Shape)
		if i == 1 && negB {
			v = g.b.Neg(v)
		}
		res[i] = v
	}
	return res
}

// minMaxRule routes dy to a where !cmp(a, b), else to b: cmp = less for max, greater for min.
func minMaxRule(g *gradCtx, op *ir.Op, dy *ir.Value, cmp string) ([]*ir.Value, error) {
	a, b := op.Operands[0], op.Operands[1]
	var mask, zero *ir.Value
	sel := func(toA bool) func() *ir.Value {
		return func() *ir.Value {
			if mask == nil {
				mask, zero = g.b.Op1(cmp, nil, a, b), g.scalar(dy, 0)
			}
			if toA {
				return g.b.Op1("where", nil, mask, zero, dy)
			}
			return g.b.Op1("where", nil, mask, dy, zero)
		}
	}
	return binaryRule(g, op, sel(true), sel(false), false), nil
}

// normRule is the rule of layer_norm and rms_norm: the input gradient from one fused op
// (bwd_in) and the parameter gradients from another (bwd_w), each recomputing the statistics.
func normRule(inputOp, paramsOp string) gradRule {
	return func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		x, dy := op.Operands[0], d[0]
		at := keepAttrs(op, "axis", "eps")
		res := make([]*ir.Value, len(op.Operands))
		if g.needs(0) {
			in := []*ir.Value{x, dy}
			if len(op.Operands) > 1 {
				in = append(in, op.Operands[1])
			}
			res[0] = g.b.Op1(inputOp, at, in...)
		}
		if g.needs(1) || g.needs(2) {
			ps := g.b.Op(paramsOp, at, x, dy)
			for i := 1; i < len(op.Operands) && i-1 < len(ps); i++ {
				if g.needs(i) {
					res[i] = ps[i-1]
				}
			}
		}
		return res, nil
	}
}

// reduceRule is the rule of reduce_sum (and reduce_mean, with mean): dy, scaled by 1/N for a
// mean (N = the number of elements reduced into each result), reshaped to keep the reduced
// dims as 1s and broadcast back to x's shape.
func reduceRule(g *gradCtx, op *ir.Op, dy *ir.Value, mean bool) ([]*ir.Value, error) {
	x := op.Operands[0]
	red, err := ir.ReduceAxes(op.Attrs, x.Type.Rank())
	if err != nil {
		return nil, err
	}
	keepShape := make(ir.Shape, x.Type.Rank())
	n := 1
	for i, dim := range x.Type.Shape {
		keepShape[i] = dim
		if red[i] {
			keepShape[i] = 1
			n *= dim
		}
	}
	if mean && n != 1 {
		dy = g.b.Mul(dy, g.scalar(dy, 1/float64(n)))
	}
	dx := g.reshapeTo(dy, keepShape)
	if !keepShape.Equal(x.Type.Shape) {
		dx = g.b.Op1("broadcast", ir.Attrs{{Name: "shape", Value: ir.Ints(x.Type.Shape...)}}, dx)
	}
	return []*ir.Value{dx}, nil
}

// matmulRule differentiates C = op(A)·op(B) (+ bias), op = transpose when transpose_a/b:
//
//	ta=false: dA = dC·op(B)ᵀ = matmul(dC, B, transpose_b = !tb)
//	ta=true:  dA = op(B)·dCᵀ = matmul(B, dC, transpose_a = tb, transpose_b = true)
//	tb=false: dB = op(A)ᵀ·dC = matmul(A, dC, transpose_a = !ta)
//	tb=true:  dB = dCᵀ·op(A) = matmul(dC, A, transpose_a = true, transpose_b = ta)
//
// Rank-1 operands are promoted as numpy does (A [K] → [1, K], B [K] → [K, 1]) by reshapes.
// The products have C's batch dims; an operand with fewer (or broadcast) batch dims gets them
// summed away. When B is a matrix and A (not transposed) has batch dims — a linear layer on
// [batch, seq, features] — dB folds the batch dims into the contraction instead, reshaping A
// to [-1, K] and dC to [-1, N], so that no per-batch copies of dB are made. The bias gradient
// is dC reduced to the bias's shape.
func matmulRule(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
	a, b, dc := op.Operands[0], op.Operands[1], d[0]
	ta, tb := op.Attrs.Bool("transpose_a", false), op.Attrs.Bool("transpose_b", false)
	res := make([]*ir.Value, len(op.Operands))
	if len(op.Operands) == 3 && g.needs(2) {
		res[2] = g.sumTo(dc, op.Operands[2].Type.Shape)
	}
	if !g.needs(0) && !g.needs(1) {
		return res, nil
	}
	aShape, bShape := a.Type.Shape, b.Type.Shape
	a2, b2 := a, b
	if len(aShape) == 1 {
		aShape = ir.Shape{1, aShape[0]}
		a2 = g.b.Reshape(a, aShape...)
	}
	if len(bShape) == 1 {
		bShape = ir.Shape{bShape[0], 1}
		b2 = g.b.Reshape(b, bShape...)
	}
	cShape, err := ir.MatMulShape(aShape, bShape, ta, tb)
	if err != nil {
		return nil, err
	}
	dc2 := g.reshapeTo(dc, cShape)
	if g.needs(0) {
		var da *ir.Value
		if !ta {
			da = g.matmul(dc2, b2, false, !tb)
		} else {
			da = g.matmul(b2, dc2, tb, true)
		}
		res[0] = g.reshapeTo(g.sumTo(da, aShape), a.Type.Shape)
	}
	if g.needs(1) {
		var db *ir.Value
		switch {
		case len(bShape) == 2 && len(aShape) > 2 && !ta:
			k, n := aShape[len(aShape)-1], cShape[len(cShape)-1]
			af, cf := g.b.Reshape(a2, -1, k), g.b.Reshape(dc2, -1, n)
			if !tb {
				db = g.matmul(af, cf, true, false)
			} else {
				db = g.matmul(cf, af, true, false)
			}
		case !tb:
			db = g.matmul(a2, dc2, !ta, false)
		default:
			db = g.matmul(dc2, a2, true, ta)
		}
		res[1] = g.reshapeTo(g.sumTo(db, bShape), b.Type.Shape)
	}
	return res, nil
}

// attentionRule differentiates o, lse = attention(q, k, v [, mask]) with attention_grad,
// which reads the forward's results instead of stashed scores. The log-sum-exp is a
// by-product kept for this rule: a loss that depends on it is refused (its gradient would
// add p·dlse to the scores' gradient, which attention_grad does not compute). The mask gets
// no gradient.
func attentionRule(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
	if d[1] != nil {
		return nil, fmt.Errorf("no gradient through attention's log-sum-exp (its second result): only the output is differentiable")
	}
	in := []*ir.Value{op.Operands[0], op.Operands[1], op.Operands[2], op.Results[0], op.Results[1], d[0]}
	if len(op.Operands) == 4 {
		in = append(in, op.Operands[3])
	}
	grads := g.b.Op("attention_grad", keepAttrs(op, "causal", "scale"), in...)
	res := make([]*ir.Value, len(op.Operands))
	copy(res, grads)
	return res, nil
}
