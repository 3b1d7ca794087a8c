package passes

import (
	"fmt"
	"maps"

	"ppc.dev/ppc/ir"
)

// nnGradRules are the gradient rules of the nn ops (ir/ops_nn.go), merged into gradRules. As
// for the core ops, an input gradient (bwd_in) and a weight gradient (bwd_w) are always built by
// separate ops, so that the autodiff's phase classification can schedule them apart:
//
//	conv            dx = conv_transpose(dy, w) (its adjoint; output_padding restores input
//	                positions past the last window), dw = conv_grad_filter(x, dy), db = Σ dy
//	conv_transpose  dx = conv(dy, w), dw = conv_grad_filter(dy, x), db = Σ dy
//	max_pool        max_pool_grad(x, dy): recomputes the argmax instead of keeping indices
//	avg_pool        avg_pool_grad(dy) (global pooling is avg_pool with kernel = the spatial dims)
//	batch_norm      batch_norm_grad_input(dy, scale, var); batch_norm_grad_params(x, dy, mean,
//	                var) → dscale, dbias (mean and var are constants of the inference form)
//	instance_norm   instance_norm_grad_input / _params, recomputing the statistics
//	pad             constant: pad(dy) with the pads negated (crop what was added, zero-fill
//	                what was cropped); reflect, edge, wrap: pad_grad, which accumulates
//	resize          resize_grad (the adjoint of the interpolation)
//	reduce_log_sum_exp  dx = dy·exp(x − y), from core ops
//
// and fused elementwise ops for the activations. sign, floor, ceil and round have zero
// derivatives almost everywhere, and arg_max/arg_min integer results: nothing flows back.
var nnGradRules = map[string]gradRule{
	"sign": nil, "floor": nil, "ceil": nil, "round": nil, "arg_max": nil, "arg_min": nil,

	"conv":           convRule,
	"conv_transpose": convTransposeRule,
	"max_pool": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		at := keepAttrs(op, "kernel", "strides", "pads", "dilations", "ceil_mode")
		return []*ir.Value{g.b.Op1("max_pool_grad", at, op.Operands[0], d[0])}, nil
	},
	"avg_pool": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		at := keepAttrs(op, "kernel", "strides", "pads", "dilations", "ceil_mode", "count_include_pad").
			Set("input_shape", ir.Ints(op.Operands[0].Type.Shape...))
		return []*ir.Value{g.b.Op1("avg_pool_grad", at, d[0])}, nil
	},
	"batch_norm":    batchNormRule,
	"instance_norm": instanceNormRule,
	"lrn":           fusedRule("lrn_grad", true, "size", "alpha", "beta", "bias"),
	"pad":           padRule,
	"resize": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		at := keepAttrs(op, "sizes", "scales", "mode", "coordinate_transformation_mode", "nearest_mode",
			"cubic_coeff_a", "exclude_outside").Set("input_shape", ir.Ints(op.Operands[0].Type.Shape...))
		return []*ir.Value{g.b.Op1("resize_grad", at, d[0])}, nil
	},
	"gather_elements": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		data, idx := op.Operands[0], op.Operands[1]
		axis, err := ir.NormAxis(op.Attrs.Int("axis", 0), data.Type.Rank())
		if err != nil {
			return nil, err
		}
		at := ir.Attrs{{Name: "axis", Value: ir.Int(axis)}, {Name: "shape", Value: ir.Ints(data.Type.Shape...)}}
		return []*ir.Value{g.b.Op1("gather_elements_grad", at, idx, d[0]), nil}, nil
	},

	"elu":          fusedRule("elu_grad", true, "alpha"),
	"selu":         fusedRule("selu_grad", true, "alpha", "gamma"),
	"leaky_relu":   fusedRule("leaky_relu_grad", true, "alpha"),
	"softplus":     fusedRule("softplus_grad", true),
	"hard_sigmoid": fusedRule("hard_sigmoid_grad", true, "alpha", "beta"),
	"shrink":       fusedRule("shrink_grad", true, "lambd"),

	"reduce_min": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		x, y := op.Operands[0], op.Result()
		return []*ir.Value{g.b.Op1("reduce_min_grad", keepAttrs(op, "axes", "keepdims"), x, y, d[0])}, nil
	},
	"reduce_prod": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		return []*ir.Value{g.b.Op1("reduce_prod_grad", keepAttrs(op, "axes", "keepdims"), op.Operands[0], d[0])}, nil
	},
	// dx = dy·exp(x − y), with y and dy reshaped to keep the reduced dims as 1s so that the
	// elementwise ops broadcast them back over each group.
	"reduce_log_sum_exp": func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
		x, y := op.Operands[0], op.Result()
		red, err := ir.ReduceAxes(op.Attrs, x.Type.Rank())
		if err != nil {
			return nil, err
		}
		keep := make(ir.Shape, len(red))
		for i, r := range red {
			if keep[i] = x.Type.Shape[i]; r {
				keep[i] = 1
			}
		}
		p := g.b.Unary("exp", g.b.Sub(x, g.reshapeTo(y, keep)))
		return []*ir.Value{g.b.Mul(p, g.reshapeTo(d[0], keep))}, nil
	},
}

// convAttrNames are the attributes conv and conv_transpose share with their gradient ops.
var convAttrNames = []string{"strides", "pads", "dilations", "groups"}

// channelAxes are the axes of [N, C, D1..Dk] other than the channel: a bias gradient sums over
// them.
func channelAxes(rank int) []int {
	axes := []int{0}
	for i := 2; i < rank; i++ {
		axes = append(axes, i)
	}
	return axes
}

// convRule: dx = conv_transpose(dy, w) with output_padding = (D + pads − span) mod stride per
// spatial dim (the input positions no window reaches, which get zeros); dw = conv_grad_filter;
// db = Σ dy over the batch and spatial dims.
func convRule(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
	x, w, dy := op.Operands[0], op.Operands[1], d[0]
	at := keepAttrs(op, convAttrNames...)
	res := make([]*ir.Value, len(op.Operands))
	if g.needs(0) {
		k := x.Type.Rank() - 2
		p, err := ir.Window(op.Attrs, k, w.Type.Shape[2:])
		if err != nil {
			return nil, err
		}
		outPad, ragged := make([]int, k), false
		for i := range k {
			span := x.Type.Shape[2+i] + p.PadsBegin[i] + p.PadsEnd[i] - ((p.Kernel[i]-1)*p.Dilations[i] + 1)
			outPad[i] = span % p.Strides[i]
			ragged = ragged || outPad[i] != 0
		}
		tat := at
		if ragged {
			tat = tat.Set("output_padding", ir.Ints(outPad...))
		}
		res[0] = g.b.Op1("conv_transpose", tat, dy, w)
	}
	if g.needs(1) {
		res[1] = g.b.Op1("conv_grad_filter", at.Set("filter_shape", ir.Ints(w.Type.Shape...)), x, dy)
	}
	if len(op.Operands) == 3 && g.needs(2) {
		res[2] = g.b.Reduce("sum", dy, channelAxes(dy.Type.Rank()), false)
	}
	return res, nil
}

// convTransposeRule: conv_transpose is the adjoint of the conv from its result's shape to its
// input's, so dx = conv(dy, w) and dw = conv_grad_filter(dy, x). An output_padding of a stride
// or more (which ONNX forbids) leaves result positions that conv maps past x's end; the rule
// refuses it rather than slicing.
func convTransposeRule(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
	x, w, dy := op.Operands[0], op.Operands[1], d[0]
	at := keepAttrs(op, convAttrNames...)
	res := make([]*ir.Value, len(op.Operands))
	if g.needs(0) || g.needs(1) {
		p, err := ir.Window(op.Attrs, x.Type.Rank()-2, w.Type.Shape[2:])
		if err != nil {
			return nil, err
		}
		for i, o := range p.OutputPadding {
			if o >= p.Strides[i] {
				return nil, fmt.Errorf("output_padding %v must be smaller than the strides %v", p.OutputPadding, p.Strides)
			}
		}
	}
	if g.needs(0) {
		res[0] = g.b.Op1("conv", at, dy, w)
	}
	if g.needs(1) {
		res[1] = g.b.Op1("conv_grad_filter", at.Set("filter_shape", ir.Ints(w.Type.Shape...)), dy, x)
	}
	if len(op.Operands) == 3 && g.needs(2) {
		res[2] = g.b.Reduce("sum", dy, channelAxes(dy.Type.Rank()), false)
	}
	return res, nil
}

// batchNormRule: operands x, scale, bias, mean, var; mean and var get no gradient.
func batchNormRule(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
	x, scale, mean, variance, dy := op.Operands[0], op.Operands[1], op.Operands[3], op.Operands[4], d[0]
	at := keepAttrs(op, "eps")
	res := make([]*ir.Value, len(op.Operands))
	if g.needs(0) {
		res[0] = g.b.Op1("batch_norm_grad_input", at, dy, scale, variance)
	}
	if g.needs(1) || g.needs(2) {
		ps := g.b.Op("batch_norm_grad_params", at, x, dy, mean, variance)
		for i := 1; i <= 2 && i-1 < len(ps); i++ {
			if g.needs(i) {
				res[i] = ps[i-1]
			}
		}
	}
	return res, nil
}

// instanceNormRule: operands x, scale, bias.
func instanceNormRule(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
	x, scale, dy := op.Operands[0], op.Operands[1], d[0]
	at := keepAttrs(op, "eps")
	res := make([]*ir.Value, len(op.Operands))
	if g.needs(0) {
		res[0] = g.b.Op1("instance_norm_grad_input", at, x, dy, scale)
	}
	if g.needs(1) || g.needs(2) {
		ps := g.b.Op("instance_norm_grad_params", at, x, dy)
		for i := 1; i <= 2 && i-1 < len(ps); i++ {
			if g.needs(i) {
				res[i] = ps[i-1]
			}
		}
	}
	return res, nil
}

// padRule: in constant mode the pad is a copy of the operand into a window of the result, so
// its gradient is the pad of dy with the pads negated; in the other modes the padding copies
// operand elements too, and pad_grad adds those copies' gradients back.
func padRule(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
	pads := op.Attrs.Ints("pads")
	if op.Attrs.Str("mode", "constant") == "constant" {
		neg := make([]int, len(pads))
		for i, p := range pads {
			neg[i] = -p
		}
		return []*ir.Value{g.b.Op1("pad", ir.Attrs{{Name: "pads", Value: ir.Ints(neg...)}}, d[0])}, nil
	}
	return []*ir.Value{g.b.Op1("pad_grad", keepAttrs(op, "pads", "mode"), d[0])}, nil
}

// mergeRules joins rule tables into one; an op in two tables is a programming error.
func mergeRules(tables ...map[string]gradRule) map[string]gradRule {
	out := map[string]gradRule{}
	for _, t := range tables {
		for name := range t {
			if _, dup := out[name]; dup {
				panic("passes: two gradient rules for op " + name)
			}
		}
		maps.Copy(out, t)
	}
	return out
}
