package export

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// opCtx is one IR op being written: its operands' and results' tensor names.
type opCtx struct {
	e   *exporter
	op  *ir.Op
	in  []string
	out []string
}

// lowering writes one IR op as ONNX nodes whose last outputs are c.out.
type lowering func(c *opCtx) error

// lowerings maps every IR op ppc can export to its ONNX form (filled in init: some entries
// are built by helpers). Ops missing here are refused with unmapped's reason, or a generic one.
var lowerings map[string]lowering

// unmapped says why some IR ops that only ppc's own passes put in a module have no ONNX form
// (whyUnmapped covers the others by their traits and names).
var unmapped = map[string]string{
	"stop_gradient": "it only exists for ppc's backward pass (an ONNX graph has none)",
	"run":           "it exists only in a rank's compiled program",
}

func init() {
	lowerings = map[string]lowering{
		// Elementwise, one ONNX op each.
		"add": same("Add"), "sub": same("Sub"), "mul": same("Mul"), "div": same("Div"), "pow": same("Pow"),
		"max": same("Max"), "min": same("Min"), "equal": same("Equal"), "less": same("Less"),
		"greater": same("Greater"), "and": same("And"), "or": same("Or"), "not": same("Not"),
		"where": same("Where"), "neg": same("Neg"), "abs": same("Abs"), "relu": same("Relu"),
		"tanh": same("Tanh"), "sigmoid": same("Sigmoid"), "exp": same("Exp"), "log": same("Log"),
		"sqrt": same("Sqrt"), "erf": same("Erf"), "sin": same("Sin"), "cos": same("Cos"),
		"softplus": same("Softplus"), "sign": same("Sign"), "floor": same("Floor"), "ceil": same("Ceil"),
		"round":        same("Round"),
		"elu":          floats("Elu", "alpha"),
		"selu":         floats("Selu", "alpha", "gamma"),
		"leaky_relu":   floats("LeakyRelu", "alpha"),
		"hard_sigmoid": floats("HardSigmoid", "alpha", "beta"),
		"shrink":       floats("Shrink", "bias", "lambd"),
		"gelu": func(c *opCtx) error {
			c.emit("Gelu", c.in, stringAttr("approximate", c.op.Attrs.Str("approximate", "none")))
			return nil
		},
		"silu": func(c *opCtx) error {
			s := c.e.tmp(c.out[0]+"/sigmoid", "Sigmoid", c.in[:1])
			c.emit("Mul", []string{c.in[0], s})
			return nil
		},
		"rsqrt": func(c *opCtx) error {
			s := c.e.tmp(c.out[0]+"/sqrt", "Sqrt", c.in[:1])
			c.emit("Reciprocal", []string{s})
			return nil
		},
		"cast": func(c *opCtx) error {
			dt, err := onnxDType(c.op.Attrs.DType("to"))
			if err != nil {
				return err
			}
			c.emit("Cast", c.in, intAttr("to", int64(dt)))
			return nil
		},
		"constant": func(c *opCtx) error {
			d, _ := c.op.Attrs.Get("value").(*ir.Dense)
			return c.e.constantTo(c.out[0], d)
		},
		"iota":        lowerIota,
		"softmax":     axisOp("Softmax"),
		"log_softmax": axisOp("LogSoftmax"),
		"layer_norm":  lowerLayerNorm,
		"rms_norm":    lowerRMSNorm,
		"matmul":      lowerMatMul,
		"attention":   lowerAttention,
		"reshape":     lowerReshape,
		"transpose": func(c *opCtx) error {
			c.emit("Transpose", c.in, intsAttr("perm", c.op.Attrs.Ints("perm")))
			return nil
		},
		"broadcast": lowerBroadcast,
		"gather": func(c *opCtx) error {
			c.emit("Gather", c.in, intAttr("axis", int64(c.op.Attrs.Int("axis", 0))))
			return nil
		},
		"gather_elements": func(c *opCtx) error {
			c.emit("GatherElements", c.in, intAttr("axis", int64(c.op.Attrs.Int("axis", 0))))
			return nil
		},
		"concat": func(c *opCtx) error {
			c.emit("Concat", c.in, intAttr("axis", int64(c.op.Attrs.Int("axis", 0))))
			return nil
		},
		"split": func(c *opCtx) error {
			sizes := c.e.ints(c.out[0]+"/split", ints64(c.op.Attrs.Ints("sizes"))...)
			c.emit("Split", []string{c.in[0], sizes}, intAttr("axis", int64(c.op.Attrs.Int("axis", 0))))
			return nil
		},
		"slice":              lowerSlice,
		"pad":                lowerPad,
		"resize":             lowerResize,
		"reduce_sum":         reduce("ReduceSum"),
		"reduce_mean":        reduce("ReduceMean"),
		"reduce_max":         reduce("ReduceMax"),
		"reduce_min":         reduce("ReduceMin"),
		"reduce_prod":        reduce("ReduceProd"),
		"reduce_log_sum_exp": reduce("ReduceLogSumExp"),
		"arg_max":            argReduce("ArgMax"),
		"arg_min":            argReduce("ArgMin"),
		"cross_entropy":      lowerCrossEntropy,
		"mse":                lowerMSE,
		"conv":               lowerConv("Conv"),
		"conv_transpose":     lowerConv("ConvTranspose"),
		"max_pool":           lowerPool("MaxPool"),
		"avg_pool":           lowerPool("AveragePool"),
		"batch_norm": func(c *opCtx) error {
			c.emit("BatchNormalization", c.in, floatAttr("epsilon", c.op.Attrs.Float("eps", 1e-5)))
			return nil
		},
		"instance_norm": func(c *opCtx) error {
			c.emit("InstanceNormalization", c.in, floatAttr("epsilon", c.op.Attrs.Float("eps", 1e-5)))
			return nil
		},
		"lrn": func(c *opCtx) error {
			at := c.op.Attrs
			c.emit("LRN", c.in, intAttr("size", int64(at.Int("size", 1))), floatAttr("alpha", at.Float("alpha", 1e-4)),
				floatAttr("beta", at.Float("beta", 0.75)), floatAttr("bias", at.Float("bias", 1)))
			return nil
		},
	}
}

// op writes the i-th op of @forward.
func (e *exporter) op(i int, op *ir.Op) error {
	low := lowerings[op.Name()]
	if low == nil {
		return e.opError(i, op, "op %s has no ONNX mapping in ppc export: %s", op.Name(), whyUnmapped(op))
	}
	c := &opCtx{e: e, op: op}
	for _, v := range op.Operands {
		c.in = append(c.in, e.name(v))
	}
	for _, r := range op.Results {
		c.out = append(c.out, e.name(r))
	}
	if err := low(c); err != nil {
		return e.opError(i, op, "op %s: %v", op.Name(), err)
	}
	return nil
}

func whyUnmapped(op *ir.Op) string {
	if why, ok := unmapped[op.Name()]; ok {
		return why
	}
	switch {
	case op.Def.Has(ir.Collective):
		return "collectives exist only in a program compiled for several ranks; export the model, not a compiled module"
	case op.Def.Has(ir.P2P):
		return "point-to-point communication exists only in a compiled pipeline"
	}
	if strings.Contains(op.Name(), "_grad") {
		return "it is a gradient kernel of ppc's backward pass; export the forward model"
	}
	return "ppc has no ONNX form for it yet"
}

// opError names the op and where it is: its source position (DSL or IR text, with the line
// and a caret), or its ONNX node, or else its index in @forward.
func (e *exporter) opError(i int, op *ir.Op, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if op.Loc.Line == 0 && op.Loc.Node == "" {
		msg += fmt.Sprintf(" (op %d of @%s, defining %%%s)", i, e.f.Name, resultName(op))
	}
	return ir.ErrorAt(e.m.Source, op.Loc, "%s", msg)
}

func resultName(op *ir.Op) string {
	if len(op.Results) == 0 {
		return "nothing"
	}
	if n := op.Results[0].Name; n != "" {
		return n
	}
	return "?"
}

// emit appends the op's final node, writing its results.
func (c *opCtx) emit(opType string, inputs []string, attrs ...*onnxpb.AttributeProto) {
	c.e.node(opType, inputs, c.out, attrs...)
}

func same(opType string) lowering {
	return func(c *opCtx) error {
		c.emit(opType, c.in)
		return nil
	}
}

// floats maps an op whose float attributes have the same names in ONNX (both default alike,
// so absent attributes stay absent).
func floats(opType string, names ...string) lowering {
	return func(c *opCtx) error {
		var as []*onnxpb.AttributeProto
		for _, n := range names {
			if c.op.Attrs.Has(n) {
				as = append(as, floatAttr(n, c.op.Attrs.Float(n, 0)))
			}
		}
		c.emit(opType, c.in, as...)
		return nil
	}
}

func axisOp(opType string) lowering {
	return func(c *opCtx) error {
		c.emit(opType, c.in, intAttr("axis", int64(c.op.Attrs.Int("axis", -1))))
		return nil
	}
}

// lowerIota: Range(0, n) along the axis, reshaped to put it there and expanded to the type's
// shape (the importer folds them back into a constant).
func lowerIota(c *opCtx) error {
	t := ir.Type(c.op.Attrs.Get("type").(ir.TypeAttr))
	axis, err := ir.NormAxis(c.op.Attrs.Int("axis", 0), t.Rank())
	if err != nil {
		return err
	}
	n := t.Shape[axis]
	// Range takes float, double, int16, int32 and int64; other dtypes cast a range.
	rdt := t.DType
	switch rdt {
	case ir.F32, ir.F64, ir.I32, ir.I64:
	case ir.I8, ir.U8:
		rdt = ir.I64
	default:
		rdt = ir.F32
	}
	base := c.out[0]
	var bounds []string
	for _, v := range []struct {
		name string
		x    float64
	}{{"start", 0}, {"limit", float64(n)}, {"delta", 1}} {
		s, err := c.e.scalar(base+"/"+v.name, rdt, v.x)
		if err != nil {
			return err
		}
		bounds = append(bounds, s)
	}
	// The nodes after Range, each taking the previous one's output first.
	type step struct {
		opType string
		extra  []string
		attrs  []*onnxpb.AttributeProto
	}
	var steps []step
	if t.Rank() > 1 {
		shape := make([]int64, t.Rank())
		for i := range shape {
			shape[i] = 1
		}
		shape[axis] = int64(n)
		steps = append(steps, step{"Reshape", []string{c.e.ints(base+"/reshape_shape", shape...)}, nil})
		if !slices.Equal(shape, dims64(t.Shape)) {
			steps = append(steps, step{"Expand", []string{c.e.ints(base+"/expand_shape", dims64(t.Shape)...)}, nil})
		}
	}
	if rdt != t.DType {
		dt, err := onnxDType(t.DType)
		if err != nil {
			return err
		}
		steps = append(steps, step{"Cast", nil, []*onnxpb.AttributeProto{intAttr("to", int64(dt))}})
	}
	if len(steps) == 0 {
		c.emit("Range", bounds)
		return nil
	}
	v := c.e.tmp(base+"/range", "Range", bounds)
	for i, s := range steps {
		in := append([]string{v}, s.extra...)
		if i == len(steps)-1 {
			c.emit(s.opType, in, s.attrs...)
		} else {
			v = c.e.tmp(base+"/"+s.opType, s.opType, in, s.attrs...)
		}
	}
	return nil
}

// lowerLayerNorm: LayerNormalization (opset 17), whose scale is required: ones when the IR
// op has none.
func lowerLayerNorm(c *opCtx) error {
	x := c.op.Operands[0]
	axis, err := ir.NormAxis(c.op.Attrs.Int("axis", -1), x.Type.Rank())
	if err != nil {
		return err
	}
	in := slices.Clone(c.in)
	if len(in) == 1 {
		ones, err := c.e.constant(c.out[0]+"/scale", ir.Splat(ir.Type{DType: x.Type.DType, Shape: x.Type.Shape[axis:]}, 1))
		if err != nil {
			return err
		}
		in = append(in, ones)
	}
	c.emit("LayerNormalization", in, intAttr("axis", int64(axis)), floatAttr("epsilon", c.op.Attrs.Float("eps", 1e-5)))
	return nil
}

// lowerRMSNorm: x / sqrt(mean(x², over dims axis..) + eps) · scale, the kernel's formula
// (ONNX has RMSNormalization only from opset 23).
func lowerRMSNorm(c *opCtx) error {
	x := c.op.Operands[0]
	r := x.Type.Rank()
	axis, err := ir.NormAxis(c.op.Attrs.Int("axis", -1), r)
	if err != nil {
		return err
	}
	var axes []int64
	for a := axis; a < r; a++ {
		axes = append(axes, int64(a))
	}
	base := c.out[0]
	e := c.e
	sq := e.tmp(base+"/square", "Mul", []string{c.in[0], c.in[0]})
	ms := e.tmp(base+"/mean_square", "ReduceMean", []string{sq, e.ints(base+"/axes", axes...)}, intAttr("keepdims", 1))
	eps, err := e.scalar(base+"/eps", x.Type.DType, c.op.Attrs.Float("eps", 1e-6))
	if err != nil {
		return err
	}
	rms := e.tmp(base+"/rms", "Sqrt", []string{e.tmp(base+"/add_eps", "Add", []string{ms, eps})})
	if len(c.in) == 1 {
		c.emit("Div", []string{c.in[0], rms})
		return nil
	}
	n := e.tmp(base+"/normalized", "Div", []string{c.in[0], rms})
	c.emit("Mul", []string{n, c.in[1]})
	return nil
}

// lowerMatMul: Gemm for two matrices with a bias or a transpose (its own flags), else
// MatMul of operands transposed by Transpose nodes (which ppc's importer folds back into the
// matmul's flags), then Add of the bias.
func lowerMatMul(c *opCtx) error {
	a, b := c.op.Operands[0], c.op.Operands[1]
	ta, tb := c.op.Attrs.Bool("transpose_a", false), c.op.Attrs.Bool("transpose_b", false)
	if a.Type.Rank() == 2 && b.Type.Rank() == 2 && a.Type.DType.IsFloat() && (len(c.in) == 3 || ta || tb) {
		var as []*onnxpb.AttributeProto
		if ta {
			as = append(as, intAttr("transA", 1))
		}
		if tb {
			as = append(as, intAttr("transB", 1))
		}
		c.emit("Gemm", c.in, as...)
		return nil
	}
	swap := func(v *ir.Value, name, suffix string) string {
		r := v.Type.Rank()
		if r < 2 {
			return name
		}
		perm := make([]int, r)
		for i := range perm {
			perm[i] = i
		}
		perm[r-2], perm[r-1] = r-1, r-2
		return c.e.tmp(c.out[0]+suffix, "Transpose", []string{name}, intsAttr("perm", perm))
	}
	x, y := c.in[0], c.in[1]
	if ta {
		x = swap(a, x, "/transpose_a")
	}
	if tb {
		y = swap(b, y, "/transpose_b")
	}
	if len(c.in) == 2 {
		c.emit("MatMul", []string{x, y})
		return nil
	}
	p := c.e.tmp(c.out[0]+"/matmul", "MatMul", []string{x, y})
	c.emit("Add", []string{p, c.in[2]})
	return nil
}

// batchDim0 writes a target shape with its leading dim as 0 (ONNX's "copy the input's dim")
// when the operand's leading dim is the same: exactly the same graph, and one that ppc
// imports for any micro-batch (--microbatches divides the leading dim of the inputs).
func batchDim0(in, out ir.Shape) []int64 {
	s := dims64(out)
	if len(in) > 0 && len(out) > 0 && in[0] == out[0] && out[0] != 0 {
		s[0] = 0
	}
	return s
}

func lowerReshape(c *opCtx) error {
	in, out := c.op.Operands[0].Type.Shape, c.op.Results[0].Type.Shape
	shape := batchDim0(in, out)
	var as []*onnxpb.AttributeProto
	if slices.Contains(out, 0) {
		// An empty dim: 0 must mean 0, not "copy".
		shape = dims64(out)
		as = append(as, intAttr("allowzero", 1))
	}
	c.emit("Reshape", []string{c.in[0], c.e.ints(c.out[0]+"/shape", shape...)}, as...)
	return nil
}

// lowerBroadcast: Expand, with 1 wherever the operand already has the target's dim (Expand
// broadcasts both ways), so the leading batch dim follows the operand's.
func lowerBroadcast(c *opCtx) error {
	in, out := c.op.Operands[0].Type.Shape, c.op.Results[0].Type.Shape
	shape := dims64(out)
	off := len(out) - len(in)
	for i, d := range in {
		if d == out[off+i] && d != 0 {
			shape[off+i] = 1
		}
	}
	c.emit("Expand", []string{c.in[0], c.e.ints(c.out[0]+"/shape", shape...)})
	return nil
}

// lowerSlice writes the normalised slice (every listed axis with explicit start, end and
// step). A backward slice that runs to the start has the IR end -1, which ONNX would read as
// the last element: it is written as INT64_MIN, which ONNX clamps to "before the start".
func lowerSlice(c *opCtx) error {
	dims, err := ir.SliceDims(c.op.Attrs, c.op.Operands[0].Type.Shape)
	if err != nil {
		return err
	}
	var starts, ends, axes, steps []int64
	for ax, d := range dims {
		full := d.Start == 0 && d.Step == 1 && d.Size == c.op.Operands[0].Type.Shape[ax]
		if full {
			continue
		}
		end := int64(d.End)
		if d.Step < 0 && d.End == -1 {
			end = math.MinInt64
		}
		starts, ends, axes, steps = append(starts, int64(d.Start)), append(ends, end), append(axes, int64(ax)), append(steps, int64(d.Step))
	}
	if len(axes) == 0 {
		c.emit("Identity", c.in)
		return nil
	}
	base := c.out[0]
	c.emit("Slice", []string{c.in[0], c.e.ints(base+"/starts", starts...), c.e.ints(base+"/ends", ends...),
		c.e.ints(base+"/axes", axes...), c.e.ints(base+"/steps", steps...)})
	return nil
}

func lowerPad(c *opCtx) error {
	x := c.op.Operands[0]
	base := c.out[0]
	pads := c.e.ints(base+"/pads", ints64(c.op.Attrs.Ints("pads"))...)
	mode := c.op.Attrs.Str("mode", "constant")
	inputs := []string{c.in[0], pads}
	if mode == "constant" {
		v, err := c.e.scalar(base+"/value", x.Type.DType, c.op.Attrs.Float("value", 0))
		if err != nil {
			return err
		}
		inputs = append(inputs, v)
	}
	c.emit("Pad", inputs, stringAttr("mode", mode))
	return nil
}

// lowerResize: Resize by sizes; when the IR op has scales (which set the coordinate mapping),
// by those scales, provided ONNX's floor(in · scale) gives the same sizes.
func lowerResize(c *opCtx) error {
	at := c.op.Attrs
	in := c.op.Operands[0].Type.Shape
	sizes := at.Ints("sizes")
	base := c.out[0]
	var as []*onnxpb.AttributeProto
	for _, n := range []string{"mode", "coordinate_transformation_mode", "nearest_mode"} {
		if at.Has(n) {
			as = append(as, stringAttr(n, at.Str(n, "")))
		}
	}
	if at.Has("cubic_coeff_a") {
		as = append(as, floatAttr("cubic_coeff_a", at.Float("cubic_coeff_a", -0.75)))
	}
	if at.Has("exclude_outside") {
		as = append(as, boolAttr("exclude_outside", at.Bool("exclude_outside", false)))
	}
	if !at.Has("scales") {
		c.emit("Resize", []string{c.in[0], "", "", c.e.ints(base+"/sizes", ints64(sizes)...)}, as...)
		return nil
	}
	l, _ := at.Get("scales").(ir.List)
	scales := make([]float32, len(l))
	for i, v := range l {
		switch v := v.(type) {
		case ir.Float:
			scales[i] = float32(v)
		case ir.Int:
			scales[i] = float32(v)
		}
		if i < len(in) && i < len(sizes) && int(math.Floor(float64(in[i])*float64(scales[i]))) != sizes[i] {
			return fmt.Errorf("scales %v and sizes %v disagree in ONNX's rule (floor(in · scale) = size), so no Resize can hold both", l, sizes)
		}
	}
	st := &onnxpb.TensorProto{Dims: []int64{int64(len(scales))}, DataType: int32(onnxpb.TensorProto_FLOAT), FloatData: scales}
	sc := c.e.tmp(base+"/scales", "Constant", nil, tensorAttr("value", st))
	c.emit("Resize", []string{c.in[0], "", sc}, as...)
	return nil
}

// reduce: Reduce* with the axes as an input (opset 18) and keepdims explicit (ONNX keeps
// dims by default, the IR does not). An explicit empty axes list reduces nothing in the IR.
func reduce(opType string) lowering {
	return func(c *opCtx) error {
		at := c.op.Attrs
		keep := intAttr("keepdims", boolInt(at.Bool("keepdims", false)))
		if !at.Has("axes") {
			c.emit(opType, c.in[:1], keep)
			return nil
		}
		axes := at.Ints("axes")
		if len(axes) == 0 {
			c.emit("Identity", c.in[:1])
			return nil
		}
		c.emit(opType, []string{c.in[0], c.e.ints(c.out[0]+"/axes", ints64(axes)...)}, keep)
		return nil
	}
}

func argReduce(opType string) lowering {
	return func(c *opCtx) error {
		at := c.op.Attrs
		c.emit(opType, c.in, intAttr("axis", int64(at.Int("axis", 0))), intAttr("keepdims", boolInt(at.Bool("keepdims", false))),
			intAttr("select_last_index", boolInt(at.Bool("select_last_index", false))))
		return nil
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// lowerCrossEntropy: SoftmaxCrossEntropyLoss, whose class axis is 1, on the logits flattened
// to [rows, C] and the labels to [rows] (the IR's class axis is the last); the rows' losses
// are reshaped back for reduction none. ignore_index carries over (both means divide by the
// rows not ignored).
func lowerCrossEntropy(c *opCtx) error {
	logits, labels := c.op.Operands[0], c.op.Operands[1]
	base := c.out[0]
	classes := logits.Type.Shape[logits.Type.Rank()-1]
	x, y := c.in[0], c.in[1]
	if logits.Type.Rank() != 2 {
		x = c.e.tmp(base+"/logits_2d", "Reshape", []string{x, c.e.ints(base+"/logits_shape", -1, int64(classes))})
		y = c.e.tmp(base+"/labels_1d", "Reshape", []string{y, c.e.ints(base+"/labels_shape", -1)})
	}
	if labels.Type.DType != ir.I64 && labels.Type.DType != ir.I32 {
		y = c.e.tmp(base+"/labels_i64", "Cast", []string{y}, intAttr("to", int64(onnxpb.TensorProto_INT64)))
	}
	red := c.op.Attrs.Str("reduction", "mean")
	as := []*onnxpb.AttributeProto{stringAttr("reduction", red)}
	if c.op.Attrs.Has("ignore_index") {
		as = append(as, intAttr("ignore_index", int64(c.op.Attrs.Int("ignore_index", 0))))
	}
	if red != "none" || logits.Type.Rank() == 2 {
		c.emit("SoftmaxCrossEntropyLoss", []string{x, y}, as...)
		return nil
	}
	rows := c.e.tmp(base+"/rows", "SoftmaxCrossEntropyLoss", []string{x, y}, as...)
	shape := c.e.tmp(base+"/labels_dims", "Shape", []string{c.in[1]})
	c.emit("Reshape", []string{rows, shape})
	return nil
}

// lowerMSE: (a − b)², then the mean or sum over everything.
func lowerMSE(c *opCtx) error {
	base := c.out[0]
	d := c.e.tmp(base+"/diff", "Sub", c.in)
	switch c.op.Attrs.Str("reduction", "mean") {
	case "none":
		c.emit("Mul", []string{d, d})
	case "sum":
		c.emit("ReduceSum", []string{c.e.tmp(base+"/square", "Mul", []string{d, d})}, intAttr("keepdims", 0))
	default:
		c.emit("ReduceMean", []string{c.e.tmp(base+"/square", "Mul", []string{d, d})}, intAttr("keepdims", 0))
	}
	return nil
}

func lowerConv(opType string) lowering {
	return func(c *opCtx) error {
		at := c.op.Attrs
		w := c.op.Operands[1].Type.Shape
		as := []*onnxpb.AttributeProto{intsAttr("kernel_shape", w[2:])}
		for _, n := range []string{"strides", "pads", "dilations", "output_padding"} {
			if at.Has(n) {
				as = append(as, intsAttr(n, at.Ints(n)))
			}
		}
		if at.Has("groups") {
			as = append(as, intAttr("group", int64(at.Int("groups", 1))))
		}
		c.emit(opType, c.in, as...)
		return nil
	}
}

func lowerPool(opType string) lowering {
	return func(c *opCtx) error {
		at := c.op.Attrs
		as := []*onnxpb.AttributeProto{intsAttr("kernel_shape", at.Ints("kernel"))}
		for _, n := range []string{"strides", "pads", "dilations"} {
			if at.Has(n) {
				as = append(as, intsAttr(n, at.Ints(n)))
			}
		}
		if at.Has("ceil_mode") {
			as = append(as, boolAttr("ceil_mode", at.Bool("ceil_mode", false)))
		}
		if at.Has("count_include_pad") {
			as = append(as, boolAttr("count_include_pad", at.Bool("count_include_pad", false)))
		}
		c.emit(opType, c.in, as...)
		return nil
	}
}

// lowerAttention writes the fused attention as opset 20's chain (ONNX's own Attention op
// arrives with opset 23): kv heads repeated for grouped-query attention (Reshape, Expand,
// Reshape: query head h reads kv head h/(Hq/Hkv)), scores = q·kᵀ·scale, the causal rule
// (key j hidden from query i when j > i + Skv − Sq, from two Ranges, so no s² constant is
// written) and the mask as Where with a large negative score (or Add for an additive mask),
// Softmax, ·v. The log-sum-exp result, when the graph has one, is ReduceLogSumExp of the
// masked scores. A row that sees no key is the only place the chain differs from the op
// (a uniform average of v where the op gives 0).
func lowerAttention(c *opCtx) error {
	q, k, v := c.op.Operands[0].Type, c.op.Operands[1].Type, c.op.Operands[2].Type
	var mask *ir.Type
	if len(c.op.Operands) == 4 {
		mask = &c.op.Operands[3].Type
	}
	d, err := ir.AttentionShape(q, k, v, mask)
	if err != nil {
		return err
	}
	e, base, r := c.e, c.out[0], q.Rank()
	causal := c.op.Attrs.Bool("causal", false)
	scaleV := c.op.Attrs.Float("scale", 1/math.Sqrt(float64(d.D)))
	// Opset 23's Attention is the op itself when the log-sum-exp is not used (ONNX's has no
	// such output) and the causal rule means the same: ONNX aligns it at the top left, ppc at
	// the bottom right, which agree for equal lengths.
	if e.opset >= 23 && !e.used1(c.op) && (!causal || d.Sq == d.Skv) {
		in := slices.Clone(c.in)
		attrs := []*onnxpb.AttributeProto{floatAttr("scale", scaleV)}
		if causal {
			attrs = append(attrs, intAttr("is_causal", 1))
		}
		e.node("Attention", in, []string{c.out[0]}, attrs...)
		return nil
	}
	kin, vin := c.in[1], c.in[2]
	if g := d.Hq / d.Hkv; g > 1 {
		// The leading (batch) dims are written 0 in Reshape (keep the input's) and 1 in Expand
		// (broadcast keeps it), so that a file whose batch is re-dimensioned stays valid.
		repeat := func(name, in string, t ir.Type) string {
			tail := dims64(t.Shape[r-2:])
			shape := func(lead int64, heads ...int64) []int64 {
				out := make([]int64, r-3)
				for i := range out {
					out[i] = lead
				}
				return append(append(out, heads...), tail...)
			}
			x := e.tmp(base+"/"+name+"_groups", "Reshape", []string{in, e.ints(base+"/"+name+"_groups_shape", shape(0, int64(d.Hkv), 1)...)})
			x = e.tmp(base+"/"+name+"_expand", "Expand", []string{x, e.ints(base+"/"+name+"_expand_shape", shape(1, int64(d.Hkv), int64(g))...)})
			return e.tmp(base+"/"+name+"_heads", "Reshape", []string{x, e.ints(base+"/"+name+"_heads_shape", shape(0, int64(d.Hq))...)})
		}
		kin, vin = repeat("k", kin, k), repeat("v", vin, v)
	}
	perm := make([]int, r)
	for i := range perm {
		perm[i] = i
	}
	perm[r-2], perm[r-1] = r-1, r-2
	kt := e.tmp(base+"/k_t", "Transpose", []string{kin}, intsAttr("perm", perm))
	scores := e.tmp(base+"/scores", "MatMul", []string{c.in[0], kt})
	scale, err := e.scalar(base+"/scale", q.DType, scaleV)
	if err != nil {
		return err
	}
	scores = e.tmp(base+"/scaled", "Mul", []string{scores, scale})
	hidden := -1e9
	if q.DType == ir.F16 {
		hidden = -65504 // the f16 lowest: −1e9 would be −∞, and a row of −∞ a NaN
	}
	neg, err := e.scalar(base+"/hidden", q.DType, hidden)
	if err != nil {
		return err
	}
	if causal {
		rng := func(name string, start, n int) (string, error) {
			var in []string
			for _, x := range []struct {
				n string
				v float64
			}{{"start", float64(start)}, {"limit", float64(start + n)}, {"delta", 1}} {
				s, err := e.scalar(base+"/"+name+"_"+x.n, ir.I64, x.v)
				if err != nil {
					return "", err
				}
				in = append(in, s)
			}
			return e.tmp(base+"/"+name, "Range", in), nil
		}
		rows, err := rng("query_pos", d.Skv-d.Sq, d.Sq) // i + Skv − Sq
		if err != nil {
			return err
		}
		rows = e.tmp(base+"/query_col", "Reshape", []string{rows, e.ints(base+"/query_col_shape", int64(d.Sq), 1)})
		cols, err := rng("key_pos", 0, d.Skv)
		if err != nil {
			return err
		}
		future := e.tmp(base+"/future", "Greater", []string{cols, rows})
		scores = e.tmp(base+"/causal", "Where", []string{future, neg, scores})
	}
	if mask != nil {
		if mask.DType == ir.Bool {
			scores = e.tmp(base+"/masked", "Where", []string{c.in[3], scores, neg})
		} else {
			scores = e.tmp(base+"/masked", "Add", []string{scores, c.in[3]})
		}
	}
	probs := e.tmp(base+"/probs", "Softmax", []string{scores}, intAttr("axis", -1))
	if e.used1(c.op) {
		lse := e.tmp(base+"/lse", "ReduceLogSumExp", []string{scores, e.ints(base+"/lse_axes", -1)}, intAttr("keepdims", 1))
		to, err := onnxDType(ir.AttentionLSEType(q.DType))
		if err != nil {
			return err
		}
		e.node("Cast", []string{lse}, []string{c.out[1]}, intAttr("to", int64(to)))
	}
	e.node("MatMul", []string{probs, vin}, []string{c.out[0]})
	return nil
}

// used1 reports whether op's second result is an operand or a result of the function.
func (e *exporter) used1(op *ir.Op) bool {
	if len(op.Results) < 2 {
		return false
	}
	r := op.Results[1]
	if slices.Contains(e.f.Results, r) {
		return true
	}
	for _, o := range e.f.Ops {
		if slices.Contains(o.Operands, r) {
			return true
		}
	}
	return false
}
