package onnx

import (
	"fmt"
	"math"
	"slices"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// handlers maps each supported ONNX op type (default domain) to its lowering. The table is
// filled in init because several handlers refer to it indirectly (checkSupported).
var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		// Elementwise arithmetic and logic.
		"Add": binOp("add"), "Sub": binOp("sub"), "Mul": binOp("mul"), "Div": binOp("div"),
		"Pow": lowerPow, "Equal": binOp("equal"), "Less": binOp("less"), "Greater": binOp("greater"),
		"LessOrEqual": cmpOrEqual("less"), "GreaterOrEqual": cmpOrEqual("greater"),
		"And": binOp("and"), "Or": binOp("or"), "Xor": lowerXor, "Not": unary("not"),
		"Where": lowerWhere, "Max": variadic("max"), "Min": variadic("min"), "Sum": variadic("add"), "Mean": lowerMean,

		// Elementwise math and activations.
		"Abs": unary("abs"), "Neg": unary("neg"), "Relu": unary("relu"), "Sigmoid": unary("sigmoid"),
		"Tanh": unary("tanh"), "Exp": unary("exp"), "Log": unary("log"), "Sqrt": unary("sqrt"),
		"Erf": unary("erf"), "Sin": unary("sin"), "Cos": unary("cos"), "Floor": unary("floor"),
		"Ceil": unary("ceil"), "Round": unary("round"), "Sign": unary("sign"), "Softplus": unary("softplus"),
		"Elu":             unaryAttrs("elu", fattr{"alpha", "alpha", 1}),
		"Selu":            unaryAttrs("selu", fattr{"alpha", "alpha", 1.67326319217681884765625}, fattr{"gamma", "gamma", 1.05070102214813232421875}),
		"LeakyRelu":       unaryAttrs("leaky_relu", fattr{"alpha", "alpha", 0.01}),
		"HardSigmoid":     unaryAttrs("hard_sigmoid", fattr{"alpha", "alpha", 0.2}, fattr{"beta", "beta", 0.5}),
		"Shrink":          unaryAttrs("shrink", fattr{"bias", "bias", 0}, fattr{"lambd", "lambd", 0.5}),
		"HardSwish":       lowerHardSwish,
		"Softsign":        lowerSoftsign,
		"Reciprocal":      lowerReciprocal,
		"ThresholdedRelu": lowerThresholdedRelu,
		"Celu":            lowerCelu,
		"Mish":            lowerMish,
		"Gelu":            lowerGelu,
		"PRelu":           lowerPRelu,
		"Clip":            lowerClip,
		"Identity":        lowerIdentity,
		"Dropout":         lowerDropout,
		"Cast":            lowerCast,
		"CastLike":        lowerCastLike,

		// Linear algebra.
		"MatMul": lowerMatMul, "Gemm": lowerGemm,

		// Convolution, pooling, normalisation.
		"Conv": lowerConv, "ConvTranspose": lowerConvTranspose,
		"MaxPool": pool("max_pool", false), "AveragePool": pool("avg_pool", false),
		"GlobalMaxPool": pool("max_pool", true), "GlobalAveragePool": pool("avg_pool", true),
		"BatchNormalization": lowerBatchNorm, "InstanceNormalization": lowerInstanceNorm,
		"LayerNormalization": lowerLayerNorm, "LRN": lowerLRN, "Attention": lowerAttention,
		"Softmax": softmax("softmax"), "LogSoftmax": softmax("log_softmax"),
		"SoftmaxCrossEntropyLoss": lowerSoftmaxCrossEntropyLoss,

		// Reductions.
		"ReduceSum": reduce("sum"), "ReduceMean": reduce("mean"), "ReduceMax": reduce("max"),
		"ReduceMin": reduce("min"), "ReduceProd": reduce("prod"), "ReduceL1": reduce("l1"),
		"ReduceL2": reduce("l2"), "ReduceSumSquare": reduce("sum_square"), "ReduceLogSum": reduce("log_sum"),
		"ReduceLogSumExp": reduce("log_sum_exp"), "ArgMax": argReduce("arg_max"), "ArgMin": argReduce("arg_min"),

		// Shapes and data movement.
		"Reshape": lowerReshape, "Flatten": lowerFlatten, "Squeeze": lowerSqueeze, "Unsqueeze": lowerUnsqueeze,
		"Transpose": lowerTranspose, "Concat": lowerConcat, "Split": lowerSplit, "Slice": lowerSlice,
		"Gather": lowerGather, "GatherElements": lowerGatherElements, "Expand": lowerExpand, "Tile": lowerTile,
		"Pad": lowerPad, "DepthToSpace": lowerDepthToSpace, "SpaceToDepth": lowerSpaceToDepth,
		"Resize": lowerResize, "Upsample": lowerResize,

		// Compile-time values.
		"Constant": lowerConstant, "Shape": lowerShape, "Size": lowerSize, "ConstantOfShape": lowerConstantOfShape,
		"Range": lowerRange,
	}
}

func unary(name string) handler {
	return func(c *nodeCtx) error {
		x, err := c.in(0)
		if err != nil {
			return err
		}
		c.set(0, c.b().Unary(name, x))
		return nil
	}
}

// fattr maps an ONNX float attribute to an IR one with the ONNX default.
type fattr struct {
	onnx, ir string
	def      float64
}

func unaryAttrs(name string, fs ...fattr) handler {
	return func(c *nodeCtx) error {
		x, err := c.in(0)
		if err != nil {
			return err
		}
		var at ir.Attrs
		for _, f := range fs {
			v, err := c.attrFloat(f.onnx, f.def)
			if err != nil {
				return err
			}
			if v != f.def {
				at = append(at, ir.NamedAttr{Name: f.ir, Value: ir.Float(v)})
			}
		}
		c.set(0, c.b().Op1(name, at, x))
		return nil
	}
}

// binaryOperands returns the two operands of an elementwise op, applying the opset < 7
// broadcast rule (B's dims align with A's starting at axis when broadcast = 1).
func (c *nodeCtx) binaryOperands() (*ir.Value, *ir.Value, error) {
	a, err := c.in(0)
	if err != nil {
		return nil, nil, err
	}
	b, err := c.in(1)
	if err != nil {
		return nil, nil, err
	}
	if c.opset >= 7 || c.n.OpType == "PRelu" {
		return a, b, nil
	}
	bc, err := c.attrInt("broadcast", 0)
	if err != nil {
		return nil, nil, err
	}
	ra, rb := a.Type.Rank(), b.Type.Rank()
	if bc == 0 {
		if !a.Type.Shape.Equal(b.Type.Shape) {
			return nil, nil, c.errorf("inconsistent shapes %s and %s (opset %d broadcasts only with broadcast = 1)", a.Type.Shape, b.Type.Shape, c.opset)
		}
		return a, b, nil
	}
	axis, err := c.attrInt("axis", ra-rb)
	if err != nil {
		return nil, nil, err
	}
	if axis < 0 {
		axis += ra
	}
	if axis < 0 || axis+rb > ra {
		return nil, nil, c.errorf("broadcast axis %d does not fit %s against %s", axis, b.Type.Shape, a.Type.Shape)
	}
	if trail := ra - axis - rb; trail > 0 {
		shape := slices.Clone([]int(b.Type.Shape))
		for range trail {
			shape = append(shape, 1)
		}
		b = c.b().Reshape(b, shape...)
	}
	return a, b, nil
}

func binOp(name string) handler {
	return func(c *nodeCtx) error {
		a, b, err := c.binaryOperands()
		if err != nil {
			return err
		}
		c.set(0, c.b().Op1(name, nil, a, b))
		return nil
	}
}

func lowerPow(c *nodeCtx) error {
	a, b, err := c.binaryOperands()
	if err != nil {
		return err
	}
	if b.Type.DType != a.Type.DType {
		b = c.b().Cast(b, a.Type.DType)
	}
	c.set(0, c.b().Op1("pow", nil, a, b))
	return nil
}

func cmpOrEqual(name string) handler {
	return func(c *nodeCtx) error {
		a, b, err := c.binaryOperands()
		if err != nil {
			return err
		}
		c.set(0, c.b().Op1("or", nil, c.b().Op1(name, nil, a, b), c.b().Op1("equal", nil, a, b)))
		return nil
	}
}

func lowerXor(c *nodeCtx) error {
	a, b, err := c.binaryOperands()
	if err != nil {
		return err
	}
	c.set(0, c.b().Unary("not", c.b().Op1("equal", nil, a, b)))
	return nil
}

func lowerWhere(c *nodeCtx) error {
	vs, err := c.ins(0)
	if err != nil {
		return err
	}
	if len(vs) != 3 {
		return c.errorf("Where needs 3 inputs, got %d", len(vs))
	}
	c.set(0, c.b().Op1("where", nil, vs...))
	return nil
}

func variadic(name string) handler {
	return func(c *nodeCtx) error {
		vs, err := c.ins(0)
		if err != nil {
			return err
		}
		if len(vs) == 0 {
			return c.errorf("%s needs at least one input", c.n.OpType)
		}
		acc := vs[0]
		for _, v := range vs[1:] {
			acc = c.b().Op1(name, nil, acc, v)
		}
		c.set(0, acc)
		return nil
	}
}

func lowerMean(c *nodeCtx) error {
	if err := variadic("add")(c); err != nil {
		return err
	}
	if n := c.nIn(); n > 1 && c.outs[0] != nil {
		c.outs[0] = c.b().Div(c.outs[0], c.scalar(c.outs[0].Type.DType, float64(n)))
	}
	return nil
}

func lowerHardSwish(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	hs := c.b().Op1("hard_sigmoid", ir.Attrs{{Name: "alpha", Value: ir.Float(float64(float32(1.0 / 6)))}}, x)
	c.set(0, c.b().Mul(x, hs))
	return nil
}

func lowerSoftsign(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	c.set(0, c.b().Div(x, c.b().Add(c.b().Unary("abs", x), c.scalar(x.Type.DType, 1))))
	return nil
}

func lowerReciprocal(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	c.set(0, c.b().Div(c.scalar(x.Type.DType, 1), x))
	return nil
}

func lowerThresholdedRelu(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	alpha, err := c.attrFloat("alpha", 1)
	if err != nil {
		return err
	}
	dt := x.Type.DType
	c.set(0, c.b().Op1("where", nil, c.b().Op1("greater", nil, x, c.scalar(dt, alpha)), x, c.scalar(dt, 0)))
	return nil
}

func lowerCelu(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	alpha, err := c.attrFloat("alpha", 1)
	if err != nil {
		return err
	}
	if alpha == 0 {
		return c.errorf("Celu alpha must not be 0")
	}
	b, dt := c.b(), x.Type.DType
	a := c.scalar(dt, alpha)
	neg := b.Mul(a, b.Sub(b.Unary("exp", b.Div(x, a)), c.scalar(dt, 1)))
	c.set(0, b.Add(b.Op1("max", nil, x, c.scalar(dt, 0)), b.Op1("min", nil, neg, c.scalar(dt, 0))))
	return nil
}

func lowerMish(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	c.set(0, c.b().Mul(x, c.b().Unary("tanh", c.b().Unary("softplus", x))))
	return nil
}

func lowerGelu(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	approx, err := c.attrString("approximate", "none")
	if err != nil {
		return err
	}
	var at ir.Attrs
	switch approx {
	case "none":
	case "tanh":
		at = ir.Attrs{{Name: "approximate", Value: ir.Ident("tanh")}}
	default:
		return c.errorf("Gelu approximate must be none or tanh, got %q", approx)
	}
	c.set(0, c.b().Op1("gelu", at, x))
	return nil
}

// lowerPRelu: where(x < 0, x·slope, x). Before opset 7 a 1-D slope of C values is per
// channel (dim 1), so it is reshaped to [C, 1, …] for numpy broadcasting.
func lowerPRelu(c *nodeCtx) error {
	x, slope, err := c.binaryOperands()
	if err != nil {
		return err
	}
	r := x.Type.Rank()
	if c.opset < 7 && slope.Type.Rank() == 1 && r > 2 && slope.Type.Shape[0] == x.Type.Shape[1] && slope.Type.Shape[0] != 1 {
		shape := []int{slope.Type.Shape[0]}
		for i := 2; i < r; i++ {
			shape = append(shape, 1)
		}
		slope = c.b().Reshape(slope, shape...)
	}
	if bs, err := ir.BroadcastShapes(x.Type.Shape, slope.Type.Shape); err != nil || !bs.Equal(x.Type.Shape) {
		return c.errorf("slope %s does not broadcast to the input %s", slope.Type.Shape, x.Type.Shape)
	}
	b := c.b()
	c.set(0, b.Op1("where", nil, b.Op1("less", nil, x, c.scalar(x.Type.DType, 0)), b.Mul(x, slope), x))
	return nil
}

// lowerClip: max(x, min) then min(·, max); opset < 11 takes the bounds as attributes.
func lowerClip(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	dt := x.Type.DType
	var lo, hi *ir.Value
	if c.opset < 11 {
		if c.hasAttr("min") {
			v, err := c.attrFloat("min", 0)
			if err != nil {
				return err
			}
			lo = c.scalar(dt, v)
		}
		if c.hasAttr("max") {
			v, err := c.attrFloat("max", 0)
			if err != nil {
				return err
			}
			hi = c.scalar(dt, v)
		}
	} else {
		for i, p := range []**ir.Value{&lo, &hi} {
			if !c.has(1 + i) {
				continue
			}
			v, err := c.in(1 + i)
			if err != nil {
				return err
			}
			if v.Type.Rank() != 0 && v.Type.NumElements() != 1 {
				return c.errorf("Clip bound %q must be a scalar, got %s", c.n.Input[1+i], v.Type)
			}
			if v.Type.Rank() != 0 {
				v = c.b().Reshape(v)
			}
			*p = v
		}
	}
	y := x
	if lo != nil {
		y = c.b().Op1("max", nil, y, lo)
	}
	if hi != nil {
		y = c.b().Op1("min", nil, y, hi)
	}
	c.set(0, y)
	return nil
}

func lowerIdentity(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	c.set(0, x)
	return nil
}

// lowerDropout: inference dropout is the identity; its mask output is all true.
func lowerDropout(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	if c.opset >= 12 && c.has(2) {
		tm, err := c.constIn(2, "training_mode")
		if err != nil {
			return err
		}
		if tm.Len() > 0 && tm.I64(0) != 0 {
			return c.errorf("training-mode Dropout is not supported (ppc imports inference graphs)")
		}
	}
	if c.opset < 7 {
		if t, err := c.attrInt("is_test", 0); err != nil {
			return err
		} else if t == 0 && len(c.n.Output) > 1 && c.n.Output[1] != "" {
			return c.errorf("training-mode Dropout (is_test = 0) is not supported")
		}
	}
	c.set(0, x)
	if len(c.n.Output) > 1 && c.n.Output[1] != "" {
		c.set(1, c.b().Constant(&ir.Dense{Type: ir.Type{DType: ir.Bool, Shape: x.Type.Shape}, Splat: true, Data: []byte{1}}))
	}
	return nil
}

func (c *nodeCtx) dtypeAttr(name string) (ir.DType, error) {
	a, err := c.attr(name, onnxpb.AttributeProto_INT)
	if err != nil {
		return ir.Invalid, err
	}
	if a == nil {
		return ir.Invalid, c.errorf("%s needs attribute %s", c.n.OpType, name)
	}
	if a.I < 0 || a.I > math.MaxInt32 {
		return ir.Invalid, c.errorf("attribute %s: unknown data type %d", name, a.I)
	}
	dt, err := irDType(int32(a.I))
	if err != nil {
		return ir.Invalid, c.errorf("attribute %s: %v", name, err)
	}
	return dt, nil
}

func lowerCast(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	to, err := c.dtypeAttr("to")
	if err != nil {
		return err
	}
	if to == x.Type.DType {
		c.set(0, x)
	} else {
		c.set(0, c.b().Cast(x, to))
	}
	return nil
}

func lowerCastLike(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	like, err := c.in(1)
	if err != nil {
		return err
	}
	if like.Type.DType == x.Type.DType {
		c.set(0, x)
	} else {
		c.set(0, c.b().Cast(x, like.Type.DType))
	}
	return nil
}

func lowerMatMul(c *nodeCtx) error {
	a, err := c.in(0)
	if err != nil {
		return err
	}
	b, err := c.in(1)
	if err != nil {
		return err
	}
	c.set(0, c.b().MatMul(a, b))
	return nil
}

// lowerGemm: alpha·op(A)·op(B) + beta·C as matmul with transpose flags; C is the matmul's bias
// operand when alpha = beta = 1, else the products are explicit.
func lowerGemm(c *nodeCtx) error {
	a, err := c.in(0)
	if err != nil {
		return err
	}
	bm, err := c.in(1)
	if err != nil {
		return err
	}
	if a.Type.Rank() != 2 || bm.Type.Rank() != 2 {
		return c.errorf("Gemm needs 2-D operands, got %s and %s", a.Type, bm.Type)
	}
	var cv *ir.Value
	if c.has(2) {
		if cv, err = c.in(2); err != nil {
			return err
		}
	}
	ta, err := c.attrInt("transA", 0)
	if err != nil {
		return err
	}
	tb, err := c.attrInt("transB", 0)
	if err != nil {
		return err
	}
	alpha, err := c.attrFloat("alpha", 1)
	if err != nil {
		return err
	}
	beta, err := c.attrFloat("beta", 1)
	if err != nil {
		return err
	}
	var at ir.Attrs
	if ta != 0 {
		at = append(at, ir.NamedAttr{Name: "transpose_a", Value: ir.BoolAttr(true)})
	}
	if tb != 0 {
		at = append(at, ir.NamedAttr{Name: "transpose_b", Value: ir.BoolAttr(true)})
	}
	b, dt := c.b(), a.Type.DType
	if cv != nil && alpha == 1 && beta == 1 {
		c.set(0, b.Op1("matmul", at, a, bm, cv))
		return nil
	}
	y := b.Op1("matmul", at, a, bm)
	if alpha != 1 {
		y = b.Mul(y, c.scalar(dt, alpha))
	}
	if cv != nil && beta != 0 {
		if beta != 1 {
			cv = b.Mul(cv, c.scalar(dt, beta))
		}
		y = b.Add(y, cv)
	}
	c.set(0, y)
	return nil
}

// window reads the attributes shared by Conv, ConvTranspose and the pools and resolves
// auto_pad into explicit pads. kernel is the kernel extent per spatial dim.
type windowAttrs struct {
	strides, dilations, pads []int
	autoPad                  string
}

func (c *nodeCtx) windowAttrs(x *ir.Value, kernel []int, dilations bool) (*windowAttrs, error) {
	k := len(kernel)
	w := &windowAttrs{}
	var err error
	get := func(name string, n, def int) ([]int, error) {
		v, err := c.attrInts(name)
		if err != nil {
			return nil, err
		}
		if v == nil || len(v) == 0 {
			v = make([]int, n)
			for i := range v {
				v[i] = def
			}
		}
		if len(v) != n {
			return nil, c.errorf("%s %v needs %d entries (one per spatial dim of %s)", name, v, n, x.Type)
		}
		return v, nil
	}
	if w.strides, err = get("strides", k, 1); err != nil {
		return nil, err
	}
	w.dilations = make([]int, k)
	for i := range w.dilations {
		w.dilations[i] = 1
	}
	if dilations {
		if w.dilations, err = get("dilations", k, 1); err != nil {
			return nil, err
		}
	}
	if w.pads, err = get("pads", 2*k, 0); err != nil {
		return nil, err
	}
	for i := range k {
		if w.strides[i] < 1 || w.dilations[i] < 1 || w.strides[i] > 1<<30 || w.dilations[i] > 1<<30 {
			return nil, c.errorf("strides %v and dilations %v must be positive", w.strides, w.dilations)
		}
		if w.pads[i] < 0 || w.pads[k+i] < 0 || w.pads[i] > 1<<30 || w.pads[k+i] > 1<<30 {
			return nil, c.errorf("bad pads %v", w.pads)
		}
	}
	if w.autoPad, err = c.attrString("auto_pad", "NOTSET"); err != nil {
		return nil, err
	}
	return w, nil
}

// resolveAutoPad computes explicit pads for SAME_UPPER / SAME_LOWER / VALID windows.
func (c *nodeCtx) resolveAutoPad(w *windowAttrs, in, kernel []int) error {
	k := len(kernel)
	switch w.autoPad {
	case "NOTSET", "":
	case "VALID":
		w.pads = make([]int, 2*k)
	case "SAME_UPPER", "SAME_LOWER":
		w.pads = make([]int, 2*k)
		for i := range k {
			out := (in[i] + w.strides[i] - 1) / w.strides[i]
			total := max((out-1)*w.strides[i]+(kernel[i]-1)*w.dilations[i]+1-in[i], 0)
			small := total / 2
			if w.autoPad == "SAME_UPPER" {
				w.pads[i], w.pads[k+i] = small, total-small
			} else {
				w.pads[i], w.pads[k+i] = total-small, small
			}
		}
	default:
		return c.errorf("unknown auto_pad %q", w.autoPad)
	}
	return nil
}

func windowIRAttrs(w *windowAttrs, groups int) ir.Attrs {
	var at ir.Attrs
	if slices.ContainsFunc(w.strides, func(v int) bool { return v != 1 }) {
		at = append(at, ir.NamedAttr{Name: "strides", Value: ir.Ints(w.strides...)})
	}
	if slices.ContainsFunc(w.pads, func(v int) bool { return v != 0 }) {
		at = append(at, ir.NamedAttr{Name: "pads", Value: ir.Ints(w.pads...)})
	}
	if slices.ContainsFunc(w.dilations, func(v int) bool { return v != 1 }) {
		at = append(at, ir.NamedAttr{Name: "dilations", Value: ir.Ints(w.dilations...)})
	}
	if groups != 1 {
		at = append(at, ir.NamedAttr{Name: "groups", Value: ir.Int(groups)})
	}
	return at
}

// convOperands reads x, w and the optional bias, checking ranks and kernel_shape.
func (c *nodeCtx) convOperands() (x, w, bias *ir.Value, kernel []int, err error) {
	if x, err = c.in(0); err != nil {
		return
	}
	if w, err = c.in(1); err != nil {
		return
	}
	if c.has(2) {
		if bias, err = c.in(2); err != nil {
			return
		}
	}
	if x.Type.Rank() < 3 {
		err = c.errorf("input %s must be [N, C, D1, ...] with at least one spatial dim", x.Type)
		return
	}
	if w.Type.Rank() != x.Type.Rank() {
		err = c.errorf("weight shape %s does not match input %s (ranks differ)", w.Type.Shape, x.Type)
		return
	}
	kernel = []int(w.Type.Shape[2:])
	ks, err := c.attrInts("kernel_shape")
	if err != nil {
		return
	}
	if ks != nil && !slices.Equal(ks, kernel) {
		err = c.errorf("kernel_shape %s does not match weight shape %s", intList(ks), intList(w.Type.Shape))
	}
	return
}

func intList(v []int) string {
	s := "["
	for i, x := range v {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(x)
	}
	return s + "]"
}

func lowerConv(c *nodeCtx) error {
	x, w, bias, kernel, err := c.convOperands()
	if err != nil {
		return err
	}
	wa, err := c.windowAttrs(x, kernel, true)
	if err != nil {
		return err
	}
	if err := c.resolveAutoPad(wa, x.Type.Shape[2:], kernel); err != nil {
		return err
	}
	groups, err := c.attrInt("group", 1)
	if err != nil {
		return err
	}
	if groups < 1 || x.Type.Shape[1] != w.Type.Shape[1]*groups {
		return c.errorf("input channels %d do not match weight shape %s with group = %d", x.Type.Shape[1], intList(w.Type.Shape), groups)
	}
	ops := []*ir.Value{x, w}
	if bias != nil {
		ops = append(ops, bias)
	}
	c.set(0, c.b().Op1("conv", windowIRAttrs(wa, groups), ops...))
	return nil
}

func lowerConvTranspose(c *nodeCtx) error {
	x, w, bias, kernel, err := c.convOperands()
	if err != nil {
		return err
	}
	wa, err := c.windowAttrs(x, kernel, true)
	if err != nil {
		return err
	}
	groups, err := c.attrInt("group", 1)
	if err != nil {
		return err
	}
	if groups < 1 || x.Type.Shape[1] != w.Type.Shape[0] || w.Type.Shape[0]%groups != 0 {
		return c.errorf("input channels %d do not match weight shape %s with group = %d", x.Type.Shape[1], intList(w.Type.Shape), groups)
	}
	k := len(kernel)
	outPad, err := c.attrInts("output_padding")
	if err != nil {
		return err
	}
	if len(outPad) == 0 {
		outPad = make([]int, k)
	}
	if len(outPad) != k {
		return c.errorf("output_padding %v needs %d entries", outPad, k)
	}
	outShape, err := c.attrInts("output_shape")
	if err != nil {
		return err
	}
	if len(outShape) == k+2 {
		outShape = outShape[2:]
	}
	in := x.Type.Shape[2:]
	if outShape == nil && (wa.autoPad == "SAME_UPPER" || wa.autoPad == "SAME_LOWER") {
		for i := range k {
			outShape = append(outShape, in[i]*wa.strides[i])
		}
	}
	if wa.autoPad == "VALID" {
		wa.pads = make([]int, 2*k)
	}
	if outShape != nil {
		if len(outShape) != k {
			return c.errorf("output_shape %v needs %d entries", outShape, k)
		}
		for i := range k {
			if outPad[i] < 0 || outPad[i] > 1<<30 || outShape[i] < 0 || outShape[i] > 1<<40 {
				return c.errorf("bad output_padding %v or output_shape %v", outPad, outShape)
			}
			full := wa.strides[i]*(in[i]-1) + outPad[i] + (kernel[i]-1)*wa.dilations[i] + 1
			total := full - outShape[i]
			if total < 0 {
				return c.errorf("output_shape %v is larger than the full transposed convolution (%d at dim %d)", outShape, full, i)
			}
			if wa.autoPad == "SAME_UPPER" {
				wa.pads[i], wa.pads[k+i] = total/2, total-total/2
			} else {
				wa.pads[i], wa.pads[k+i] = total-total/2, total/2
			}
		}
	}
	at := windowIRAttrs(wa, groups)
	if slices.ContainsFunc(outPad, func(v int) bool { return v != 0 }) {
		at = append(at, ir.NamedAttr{Name: "output_padding", Value: ir.Ints(outPad...)})
	}
	ops := []*ir.Value{x, w}
	if bias != nil {
		ops = append(ops, bias)
	}
	c.set(0, c.b().Op1("conv_transpose", at, ops...))
	return nil
}

func pool(name string, global bool) handler {
	return func(c *nodeCtx) error {
		x, err := c.in(0)
		if err != nil {
			return err
		}
		if x.Type.Rank() < 3 {
			return c.errorf("input %s must be [N, C, D1, ...] with at least one spatial dim", x.Type)
		}
		spatial := []int(x.Type.Shape[2:])
		if global {
			c.set(0, c.b().Op1(name, ir.Attrs{{Name: "kernel", Value: ir.Ints(spatial...)}}, x))
			return nil
		}
		kernel, err := c.attrInts("kernel_shape")
		if err != nil {
			return err
		}
		if len(kernel) != len(spatial) {
			return c.errorf("kernel_shape %v needs %d entries for input %s", kernel, len(spatial), x.Type)
		}
		for _, k := range kernel {
			if k < 1 || k > 1<<30 {
				return c.errorf("bad kernel_shape %v", kernel)
			}
		}
		dil := name == "max_pool" && c.opset >= 10 || name == "avg_pool" && c.opset >= 19
		wa, err := c.windowAttrs(x, kernel, dil)
		if err != nil {
			return err
		}
		if err := c.resolveAutoPad(wa, spatial, kernel); err != nil {
			return err
		}
		at := windowIRAttrs(wa, 1)
		at = append(at, ir.NamedAttr{Name: "kernel", Value: ir.Ints(kernel...)})
		if c.opset >= 10 {
			cm, err := c.attrInt("ceil_mode", 0)
			if err != nil {
				return err
			}
			if cm != 0 {
				at = append(at, ir.NamedAttr{Name: "ceil_mode", Value: ir.BoolAttr(true)})
			}
		}
		if name == "avg_pool" && c.opset >= 7 {
			cip, err := c.attrInt("count_include_pad", 0)
			if err != nil {
				return err
			}
			if cip != 0 {
				at = append(at, ir.NamedAttr{Name: "count_include_pad", Value: ir.BoolAttr(true)})
			}
		}
		c.set(0, c.b().Op1(name, at, x))
		return nil
	}
}

func (c *nodeCtx) epsAttr() (ir.Attrs, error) {
	eps, err := c.attrFloat("epsilon", 1e-5)
	if err != nil {
		return nil, err
	}
	return ir.Attrs{{Name: "eps", Value: ir.Float(float64(float32(eps)))}}, nil
}

func lowerBatchNorm(c *nodeCtx) error {
	vs, err := c.ins(0)
	if err != nil {
		return err
	}
	if len(vs) != 5 {
		return c.errorf("BatchNormalization needs 5 inputs (X, scale, B, mean, var), got %d", len(vs))
	}
	if c.opset < 9 {
		if sp, err := c.attrInt("spatial", 1); err != nil {
			return err
		} else if sp != 1 {
			return c.errorf("BatchNormalization with spatial = 0 is not supported")
		}
	}
	if c.opset >= 14 {
		if tm, err := c.attrInt("training_mode", 0); err != nil {
			return err
		} else if tm != 0 {
			return c.errorf("training-mode BatchNormalization is not supported (ppc imports inference graphs)")
		}
	}
	at, err := c.epsAttr()
	if err != nil {
		return err
	}
	c.set(0, c.b().Op1("batch_norm", at, vs...))
	return nil
}

func lowerInstanceNorm(c *nodeCtx) error {
	vs, err := c.ins(0)
	if err != nil {
		return err
	}
	if len(vs) != 3 {
		return c.errorf("InstanceNormalization needs 3 inputs (input, scale, B), got %d", len(vs))
	}
	at, err := c.epsAttr()
	if err != nil {
		return err
	}
	c.set(0, c.b().Op1("instance_norm", at, vs...))
	return nil
}

func lowerLayerNorm(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	ax, err := c.axisAttr(-1, x.Type.Rank())
	if err != nil {
		return err
	}
	at, err := c.epsAttr()
	if err != nil {
		return err
	}
	if ax != x.Type.Rank()-1 {
		at = append(at, ir.NamedAttr{Name: "axis", Value: ir.Int(ax)})
	}
	norm := x.Type.Shape[ax:]
	ops := []*ir.Value{x}
	for i := 1; i <= 2; i++ {
		if !c.has(i) {
			break
		}
		p, err := c.in(i)
		if err != nil {
			return err
		}
		if !p.Type.Shape.Equal(norm) {
			p = c.b().Op1("broadcast", ir.Attrs{{Name: "shape", Value: ir.Ints(norm...)}}, p)
		}
		ops = append(ops, p)
	}
	c.set(0, c.b().Op1("layer_norm", at, ops...))
	return nil
}

func lowerLRN(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	size, err := c.attrInt("size", 0)
	if err != nil {
		return err
	}
	if size < 1 {
		return c.errorf("LRN needs a positive size attribute")
	}
	at := ir.Attrs{{Name: "size", Value: ir.Int(size)}}
	for _, f := range []fattr{{"alpha", "alpha", 1e-4}, {"beta", "beta", 0.75}, {"bias", "bias", 1}} {
		v, err := c.attrFloat(f.onnx, f.def)
		if err != nil {
			return err
		}
		if float32(v) != float32(f.def) {
			at = append(at, ir.NamedAttr{Name: f.ir, Value: ir.Float(v)})
		}
	}
	c.set(0, c.b().Op1("lrn", at, x))
	return nil
}

// softmax lowers Softmax / LogSoftmax. Before opset 13 the op flattens its input to 2-D at
// axis (default 1) and normalises the second dim; that is reshape + softmax + reshape
// unless axis is already the last dim.
func softmax(name string) handler {
	return func(c *nodeCtx) error {
		x, err := c.in(0)
		if err != nil {
			return err
		}
		def := -1
		if c.opset < 13 {
			def = 1
		}
		axis, err := c.attrInt("axis", def)
		if err != nil {
			return err
		}
		r := x.Type.Rank()
		if r == 0 {
			return c.errorf("%s of a scalar", c.n.OpType)
		}
		ax, err := ir.NormAxis(axis, r)
		if err != nil {
			return c.errorf("%v", err)
		}
		if c.opset >= 13 {
			var at ir.Attrs
			if ax != r-1 {
				at = ir.Attrs{{Name: "axis", Value: ir.Int(ax)}}
			}
			c.set(0, c.b().Op1(name, at, x))
			return nil
		}
		if ax == r-1 {
			c.set(0, c.b().Op1(name, nil, x))
			return nil
		}
		flat := c.b().Reshape(x, x.Type.Shape[:ax].NumElements(), x.Type.Shape[ax:].NumElements())
		c.set(0, c.b().Reshape(c.b().Op1(name, nil, flat), x.Type.Shape...))
		return nil
	}
}

// reduceAxes reads a Reduce op's axes (attribute, or input 1 from opset 13 for ReduceSum and
// 18 for the others); nil means all axes, and ok = false means the op is the identity
// (noop_with_empty_axes with no axes).
func (c *nodeCtx) reduceAxes(x *ir.Value) (axes []int, ok bool, err error) {
	fromInput := c.opset >= 18 || c.n.OpType == "ReduceSum" && c.opset >= 13
	if fromInput {
		if c.has(1) {
			if axes, err = c.constInts(1, "axes"); err != nil {
				return nil, false, err
			}
		}
	} else if axes, err = c.attrInts("axes"); err != nil {
		return nil, false, err
	}
	if len(axes) == 0 {
		noop, err := c.attrInt("noop_with_empty_axes", 0)
		if err != nil {
			return nil, false, err
		}
		return nil, noop == 0, nil
	}
	r := x.Type.Rank()
	seen := map[int]bool{}
	for i, a := range axes {
		n, err := ir.NormAxis(a, r)
		if err != nil {
			return nil, false, c.errorf("axes %v: %v", axes, err)
		}
		if seen[n] {
			return nil, false, c.errorf("axes %v repeat axis %d", axes, n)
		}
		seen[n] = true
		axes[i] = n
	}
	slices.Sort(axes)
	return axes, true, nil
}

func reduce(kind string) handler {
	return func(c *nodeCtx) error {
		x, err := c.in(0)
		if err != nil {
			return err
		}
		axes, ok, err := c.reduceAxes(x)
		if err != nil {
			return err
		}
		if !ok {
			c.set(0, x)
			return nil
		}
		kd, err := c.attrInt("keepdims", 1)
		if err != nil {
			return err
		}
		keep := kd != 0
		b := c.b()
		var y *ir.Value
		switch kind {
		case "sum", "mean", "max", "min", "prod", "log_sum_exp":
			y = b.Reduce(kind, x, axes, keep)
		case "l1":
			y = b.Reduce("sum", b.Unary("abs", x), axes, keep)
		case "l2":
			y = b.Unary("sqrt", b.Reduce("sum", b.Mul(x, x), axes, keep))
		case "sum_square":
			y = b.Reduce("sum", b.Mul(x, x), axes, keep)
		case "log_sum":
			y = b.Unary("log", b.Reduce("sum", x, axes, keep))
		}
		c.set(0, y)
		return nil
	}
}

func argReduce(name string) handler {
	return func(c *nodeCtx) error {
		x, err := c.in(0)
		if err != nil {
			return err
		}
		ax, err := c.axisAttr(0, x.Type.Rank())
		if err != nil {
			return err
		}
		kd, err := c.attrInt("keepdims", 1)
		if err != nil {
			return err
		}
		last, err := c.attrInt("select_last_index", 0)
		if err != nil {
			return err
		}
		at := ir.Attrs{{Name: "axis", Value: ir.Int(ax)}}
		if kd != 0 {
			at = append(at, ir.NamedAttr{Name: "keepdims", Value: ir.BoolAttr(true)})
		}
		if last != 0 {
			at = append(at, ir.NamedAttr{Name: "select_last_index", Value: ir.BoolAttr(true)})
		}
		c.set(0, c.b().Op1(name, at, x))
		return nil
	}
}

// lowerAttention maps ONNX's Attention (opset 23) onto ppc's fused attention: 4-D Q, K, V
// ([batch, heads, seq, head_dim]; K and V may have fewer heads, grouped-query attention with
// ONNX's grouping, query head h over kv head h/(Hq/Hkv)), the optional attn_mask (bool, true
// attends, or added to the scores), is_causal and scale (default 1/√head_dim). What a
// training graph does not have is refused by name: a KV cache (past_key, past_value and the
// present outputs), the QK product output, softcap, and 3-D inputs. ONNX aligns its causal
// mask at the top left, ppc's at the bottom right: they agree when queries and keys have one
// length, the only causal case accepted.
func lowerAttention(c *nodeCtx) error {
	if c.has(4) || c.has(5) {
		return c.errorf("Attention with past_key/past_value (a KV cache for inference) is not supported")
	}
	for i := 1; i < len(c.n.Output); i++ {
		if c.n.Output[i] != "" {
			return c.errorf("Attention output %d (the present key/value or the QK product) is not supported; ppc computes Y only", i)
		}
	}
	var ops []*ir.Value
	for i := range 3 {
		x, err := c.in(i)
		if err != nil {
			return err
		}
		if x.Type.Rank() != 4 {
			return c.errorf("Attention input %d is %s: ppc takes 4-D Q, K and V [batch, heads, seq, head_dim], not the 3-D form with q_num_heads/kv_num_heads", i, x.Type)
		}
		ops = append(ops, x)
	}
	softcap, err := c.attrFloat("softcap", 0)
	if err != nil {
		return err
	}
	if softcap != 0 {
		return c.errorf("Attention with softcap %g is not supported", softcap)
	}
	causal, err := c.attrInt("is_causal", 0)
	if err != nil {
		return err
	}
	var at ir.Attrs
	if causal != 0 {
		if sq, skv := ops[0].Type.Shape[2], ops[1].Type.Shape[2]; sq != skv {
			return c.errorf("Attention is_causal with %d queries over %d keys: ONNX aligns the causal mask at the top left and ppc at the bottom right, so only equal lengths are supported", sq, skv)
		}
		at = append(at, ir.NamedAttr{Name: "causal", Value: ir.BoolAttr(true)})
	}
	if c.hasAttr("scale") {
		scale, err := c.attrFloat("scale", 0)
		if err != nil {
			return err
		}
		at = append(at, ir.NamedAttr{Name: "scale", Value: ir.Float(scale)})
	}
	if c.has(3) {
		m, err := c.in(3)
		if err != nil {
			return err
		}
		if m.Type.DType != ir.Bool && m.Type.DType != ops[0].Type.DType {
			m = c.b().Cast(m, ops[0].Type.DType)
		}
		ops = append(ops, m)
	}
	if _, err := ir.AttentionShape(ops[0].Type, ops[1].Type, ops[2].Type, maskType(ops)); err != nil {
		return c.errorf("Attention: %v", err)
	}
	rs := c.b().Op("attention", at.Sorted(), ops...)
	if len(rs) > 0 {
		c.set(0, rs[0])
	}
	return nil
}

func maskType(ops []*ir.Value) *ir.Type {
	if len(ops) < 4 {
		return nil
	}
	return &ops[3].Type
}
