package onnx

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// nodeCtx is what an op handler sees: the node, its attributes, the opset version and the
// builder, plus the slots for its outputs.
type nodeCtx struct {
	imp   *importer
	n     *onnxpb.NodeProto
	attrs map[string]*onnxpb.AttributeProto
	opset int64
	outs  []*ir.Value
}

type handler func(c *nodeCtx) error

func (c *nodeCtx) b() *ir.Builder { return c.imp.b }

func (c *nodeCtx) errorf(format string, args ...any) error {
	return &ir.Error{Loc: c.imp.loc, Msg: fmt.Sprintf(format, args...)}
}

// nIn is the number of inputs, counting omitted optional ones written as "".
func (c *nodeCtx) nIn() int { return len(c.n.Input) }

func (c *nodeCtx) has(i int) bool { return i < len(c.n.Input) && c.n.Input[i] != "" }

// in returns required input i.
func (c *nodeCtx) in(i int) (*ir.Value, error) {
	if !c.has(i) {
		return nil, c.errorf("%s needs input %d", c.n.OpType, i)
	}
	return c.imp.value(c.n.Input[i])
}

// ins returns inputs from..len as values (all required).
func (c *nodeCtx) ins(from int) ([]*ir.Value, error) {
	var out []*ir.Value
	for i := from; i < c.nIn(); i++ {
		v, err := c.in(i)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// constIn returns input i's compile-time value; what names it in the error.
func (c *nodeCtx) constIn(i int, what string) (*ir.Dense, error) {
	if !c.has(i) {
		return nil, c.errorf("%s needs input %d (%s)", c.n.OpType, i, what)
	}
	name := c.n.Input[i]
	if d := c.imp.constValue(name); d != nil {
		return d, nil
	}
	if _, err := c.imp.value(name); err != nil {
		return nil, err
	}
	return nil, &NeedsConstantError{Tensor: name, Err: c.errorf("input %q (%s) must be a compile-time constant (ppc needs static shapes), but it depends on graph inputs", name, what)}
}

// NeedsConstantError reports a tensor that must be known at compile time (a shape) but is
// computed from graph inputs. A caller that knows the value of such a graph input (ppc infer
// given the input's data) can import again with it in Options.Frozen.
type NeedsConstantError struct {
	Tensor string
	Err    error
}

func (e *NeedsConstantError) Error() string { return e.Err.Error() }
func (e *NeedsConstantError) Unwrap() error { return e.Err }

// constInts returns input i as a list of integers.
func (c *nodeCtx) constInts(i int, what string) ([]int, error) {
	d, err := c.constIn(i, what)
	if err != nil {
		return nil, err
	}
	if d.Type.Rank() > 1 {
		return nil, c.errorf("%s must be a scalar or 1-D, got %s", what, d.Type)
	}
	// Integer operands (shapes, pads, axes, slice bounds) have a handful of elements; a
	// splat can claim 2^50 from a few bytes of input, so the count is bounded before reading.
	if d.Len() > ir.MaxFoldElements {
		return nil, c.errorf("%s has %d elements; at most %d are read at compile time", what, d.Len(), ir.MaxFoldElements)
	}
	return clampInts(d), nil
}

// clampInts reads integer data, clamping to ±2^62 so that later arithmetic cannot overflow
// (ONNX uses INT64_MAX/INT64_MIN for "to the end").
func clampInts(d *ir.Dense) []int {
	out := make([]int, d.Len())
	for i := range out {
		v := d.I64(i)
		if d.Type.DType.IsFloat() {
			f := d.F64(i)
			switch {
			case f != f:
				v = 0
			case f >= 1<<62:
				v = 1 << 62
			case f <= -(1 << 62):
				v = -(1 << 62)
			}
		}
		out[i] = int(max(min(v, 1<<62), -(1 << 62)))
	}
	return out
}

func (c *nodeCtx) set(i int, v *ir.Value) {
	if i < len(c.outs) {
		c.outs[i] = v
	}
}

func (c *nodeCtx) attr(name string, typ onnxpb.AttributeProto_AttributeType) (*onnxpb.AttributeProto, error) {
	a := c.attrs[name]
	if a == nil {
		return nil, nil
	}
	if a.Type != typ && !(a.Type == onnxpb.AttributeProto_UNDEFINED && legacyMatches(a, typ)) {
		return nil, c.errorf("attribute %s must be %s, got %s", name, typ, a.Type)
	}
	return a, nil
}

// legacyMatches accepts attributes written without a type tag by very old exporters.
func legacyMatches(a *onnxpb.AttributeProto, typ onnxpb.AttributeProto_AttributeType) bool {
	switch typ {
	case onnxpb.AttributeProto_INTS:
		return len(a.Ints) > 0
	case onnxpb.AttributeProto_FLOATS:
		return len(a.Floats) > 0
	case onnxpb.AttributeProto_STRING:
		return len(a.S) > 0
	case onnxpb.AttributeProto_TENSOR:
		return a.T != nil
	}
	return true
}

func (c *nodeCtx) attrInt(name string, def int) (int, error) {
	a, err := c.attr(name, onnxpb.AttributeProto_INT)
	if a == nil || err != nil {
		return def, err
	}
	if a.I > 1<<40 || a.I < -(1<<40) {
		return 0, c.errorf("attribute %s = %d is out of range", name, a.I)
	}
	return int(a.I), nil
}

func (c *nodeCtx) attrFloat(name string, def float64) (float64, error) {
	a, err := c.attr(name, onnxpb.AttributeProto_FLOAT)
	if a == nil || err != nil {
		return def, err
	}
	return float64(a.F), nil
}

func (c *nodeCtx) attrString(name, def string) (string, error) {
	a, err := c.attr(name, onnxpb.AttributeProto_STRING)
	if a == nil || err != nil {
		return def, err
	}
	return string(a.S), nil
}

// attrInts returns an INTS attribute, or nil when absent.
func (c *nodeCtx) attrInts(name string) ([]int, error) {
	a, err := c.attr(name, onnxpb.AttributeProto_INTS)
	if a == nil || err != nil {
		return nil, err
	}
	out := make([]int, len(a.Ints))
	for i, v := range a.Ints {
		out[i] = int(max(min(v, 1<<62), -(1 << 62)))
	}
	return out, nil
}

func (c *nodeCtx) attrFloats(name string) ([]float64, error) {
	a, err := c.attr(name, onnxpb.AttributeProto_FLOATS)
	if a == nil || err != nil {
		return nil, err
	}
	out := make([]float64, len(a.Floats))
	for i, v := range a.Floats {
		out[i] = float64(v)
	}
	return out, nil
}

func (c *nodeCtx) hasAttr(name string) bool { return c.attrs[name] != nil }

// scalar builds a rank-0 constant of x's dtype.
func (c *nodeCtx) scalar(dt ir.DType, v float64) *ir.Value { return c.b().Scalar(dt, v) }

// checkSupported rejects a node whose op ppc does not import, saying why.
func (imp *importer) checkSupported(n *onnxpb.NodeProto) error {
	loc := nodeLoc(imp.file, n)
	dom := n.Domain
	if dom == "ai.onnx" {
		dom = ""
	}
	if dom != "" {
		why := fmt.Sprintf("operator domain %s is not supported", dom)
		if dom == "ai.onnx.preview.training" {
			why = "training ops are not supported"
		}
		return imp.errf(loc, "unsupported op %s.%s (%s)", dom, n.OpType, why)
	}
	if handlers[n.OpType] != nil {
		return nil
	}
	return imp.errf(loc, "unsupported op %s (%s)", n.OpType, unsupportedReason(n.OpType))
}

func unsupportedReason(op string) string {
	switch {
	case strings.Contains(op, "Sequence") || strings.HasPrefix(op, "Optional"):
		if op != "ReverseSequence" {
			return "sequence ops are not supported"
		}
	case op == "If" || op == "Loop" || op == "Scan":
		return "control-flow ops are not supported"
	case strings.HasPrefix(op, "String") || op == "RegexFullMatch" || op == "TfIdfVectorizer":
		return "string ops are not supported"
	case op == "Gradient" || op == "Adagrad" || op == "Adam" || op == "Momentum":
		return "training ops are not supported"
	}
	return "not implemented by ppc's ONNX importer"
}

// axisAttr reads the node's `axis` attribute (def when absent) and normalises it for a value
// of the given rank.
func (c *nodeCtx) axisAttr(def, rank int) (int, error) {
	axis, err := c.attrInt("axis", def)
	if err != nil {
		return 0, err
	}
	ax, err := ir.NormAxis(axis, rank)
	if err != nil {
		return 0, c.errorf("%v", err)
	}
	return ax, nil
}
