package passes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
)

// AddLoss gives a model without a loss (an ONNX model) a labels input and a loss.
var AddLoss = &Pass{
	Name: "add-loss",
	Doc: "Give @forward a loss when it has none (an imported ONNX model): add a labels argument after the last " +
		"{input} argument and a loss on result `output` of @forward, which becomes the only result, marked {loss}; " +
		"the other results are dropped (the ops computing only them are left for dce). kind=ce: the output must " +
		"be floating-point logits with C ≥ 2 classes on the class axis (option axis; see ClassAxis for its default); " +
		"the labels are the output's shape without that axis, %labels: i64[...] {input, label, range = [0, C]}, and " +
		"the loss is cross_entropy (mean over the rows), after a transpose that moves the class axis last when it " +
		"is not. When the output is a softmax over the class axis (probabilities), the cross-entropy is taken of the softmax's input, the logits, so the loss is −log p[label] rather than a second softmax over probabilities, and the module attribute loss_note says so (a log_softmax output needs nothing: the softmax cross-entropy of log-probabilities is that of the logits). A class axis of size 1 is an error: the cross-entropy of one class is always 0. kind=mse: the labels have the output's type, {input, label}, " +
		"and the loss is mse (mean). The argument is named labels, or labels.1, labels.2… when that name is taken. " +
		"Labels of the shape and range of exactly one token input are marked as its next tokens (shift_of; ir.LinkNextTokens). " +
		"The loss op takes the stage and location of the op defining the output. A @forward that already has a " +
		"{loss} result is left unchanged (not an error), so the pass can run on every model.",
	Options: []Option{
		{Name: "kind", Default: "ce", Doc: "ce (softmax cross-entropy against class indices) or mse (mean squared error)"},
		{Name: "output", Default: "0", Doc: "index of the @forward result the loss is computed on"},
		{Name: "axis", Default: "auto", Doc: "kind=ce: the class axis of the output (negative counts from the end); auto: 1 for [N, C, 1, …, 1] logits of rank 4 or more, else the last"},
	},
	Run: addLoss,
}

func addLoss(m *ir.Module, opts Options) error {
	kind := opts["kind"]
	if kind != "ce" && kind != "mse" {
		return fmt.Errorf("add-loss: unknown kind %q (want ce or mse)", kind)
	}
	idx, err := opts.Int("output")
	if err != nil {
		return fmt.Errorf("add-loss: %v", err)
	}
	if kind != "ce" && opts["axis"] != "auto" {
		return fmt.Errorf("add-loss: option axis applies to kind=ce")
	}
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return fmt.Errorf("add-loss: the module has no @%s function", ir.ForwardFunc)
	}
	errf := func(format string, args ...any) error {
		return ir.ErrorAt(m.Source, f.Loc, "add-loss: "+format, args...)
	}
	for _, ra := range f.ResultAttrs {
		if ra.Has(ir.AttrLoss) {
			return nil
		}
	}
	if idx < 0 || idx >= len(f.Results) {
		return errf("output=%d is out of range: @%s has %d results", idx, ir.ForwardFunc, len(f.Results))
	}
	out := f.Results[idx]
	t := out.Type
	var labelType ir.Type
	attrs := ir.Attrs{{Name: ir.AttrInput, Value: ir.Unit{}}, {Name: ir.AttrLabel, Value: ir.Unit{}}}
	axis := -1
	switch {
	case !t.DType.IsFloat():
		return errf("kind=%s needs a floating-point output, but result %d is %s", kind, idx, t)
	case kind == "ce" && t.Rank() == 0:
		return errf("kind=ce needs logits with a class dim, but result %d is the scalar %s", idx, t)
	case kind == "ce":
		if axis, err = ClassAxis(t, opts["axis"]); err != nil {
			return errf("result %d: %v", idx, err)
		}
		labelType = ir.Type{DType: ir.I64, Shape: slices.Delete(slices.Clone(t.Shape), axis, axis+1)}
		attrs = append(attrs, ir.NamedAttr{Name: ir.AttrRange, Value: ir.Ints(0, t.Shape[axis])})
	default:
		labelType = t
	}

	// The labels argument goes after the last input.
	pos := 0
	for i := range f.Args {
		if f.ArgAttrs[i].Has(ir.AttrInput) {
			pos = i + 1
		}
	}
	labels := &ir.Value{Name: uniqueArgName(f, "labels"), Type: labelType}
	f.Args = slices.Insert(f.Args, pos, labels)
	f.ArgAttrs = slices.Insert(f.ArgAttrs, pos, attrs.Sorted())
	for i, a := range f.Args {
		a.Index = i
	}

	b := ir.NewBuilder(f)
	if out.Def != nil {
		b.Loc, b.Stage, b.Phase = out.Def.Loc, out.Def.Stage, out.Def.Phase
	}
	op := "cross_entropy"
	if kind == "mse" {
		op = "mse"
	}
	logits := out
	if sm := out.Def; kind == "ce" && sm != nil && sm.Name() == "softmax" && softmaxAxis(sm) == axis {
		// The output is already probabilities (exporters often end a classifier with its
		// softmax): a cross-entropy over them applies a second softmax, which is nearly
		// uniform over values in [0, 1], so the loss cannot fall far below ln(C).
		// The cross-entropy of the probabilities, −log p[label], is the softmax
		// cross-entropy of the softmax's input, which is computed instead (as Keras does for
		// a softmax output); the softmax is left to dce.
		logits = sm.Operands[0]
		where := ""
		if sm.Loc.Node != "" {
			where = " (node " + sm.Loc.Node + ")"
		}
		m.Attrs = m.Attrs.Set(AttrLossNote, ir.String(fmt.Sprintf(
			"output %d is a softmax%s, probabilities: --loss ce computes −log p[label] as the softmax cross-entropy of its input (a cross-entropy over the probabilities would apply a second softmax and stay near ln %d)",
			idx, where, t.Shape[axis])))
	}
	if kind == "ce" && axis != t.Rank()-1 {
		// cross_entropy takes the classes on the last axis: move them there, keeping the
		// order of the other axes, which is the labels' order.
		perm := make([]int, 0, t.Rank())
		for i := range t.Rank() {
			if i != axis {
				perm = append(perm, i)
			}
		}
		logits = b.Transpose(logits, append(perm, axis)...)
	}
	loss := b.Op1(op, nil, logits, labels)
	if err := b.Err(); err != nil {
		return errf("%v", err)
	}
	loss.Name = "loss"
	f.Results = []*ir.Value{loss}
	f.ResultAttrs = []ir.Attrs{{{Name: ir.AttrLoss, Value: ir.Unit{}}}}
	// Labels over the vocabulary of a token input, of its shape, are a language model's
	// next tokens: synthetic data and token files then feed them as such.
	ir.LinkNextTokens(f)
	return nil
}

// AttrLossNote (string, on the module) is what add-loss tells the user about the loss it
// added (the compile summary prints it).
const AttrLossNote = "loss_note"

// softmaxAxis is a softmax op's axis, counted from the front.
func softmaxAxis(op *ir.Op) int {
	ax := op.Attrs.Int("axis", -1)
	if ax < 0 {
		ax += op.Results[0].Type.Rank()
	}
	return ax
}

// ClassAxis resolves add-loss's axis option (kind=ce) for logits of type t and checks that
// the axis holds at least two classes.
//
// The default ("auto") is the last axis, where [N, C] classifiers and [N, T, V] language
// models keep their classes, except for logits [N, C, 1, …, 1] of rank 4 or more: the
// output of a convolutional classifier after global pooling (ONNX's NCHW layout), whose
// classes are on axis 1 and whose last axis has size 1. Rank 3 [N, C, 1] is not taken for
// such a classifier: it is as often one unit per position [N, T, 1], where a cross-entropy
// over axis 1 would silently run over the sequence; it is refused instead, like every
// class axis of size 1, whose cross-entropy is always 0.
func ClassAxis(t ir.Type, opt string) (int, error) {
	r := t.Rank()
	if r == 0 {
		return 0, fmt.Errorf("kind=ce needs logits with a class dim, not the scalar %s", t)
	}
	axis := r - 1
	if opt == "" || opt == "auto" {
		pooled := r >= 4 && t.Shape[1] >= 2
		for _, d := range t.Shape[2:] {
			pooled = pooled && d == 1
		}
		if pooled {
			axis = 1
		}
	} else {
		n, err := strconv.Atoi(strings.TrimSpace(opt))
		if err != nil {
			return 0, fmt.Errorf("option axis=%q is not an integer (or auto)", opt)
		}
		if n < -r || n >= r {
			return 0, fmt.Errorf("axis=%d is out of range for %s (axes %d to %d)", n, t, -r, r-1)
		}
		axis = (n + r) % r
	}
	if t.Shape[axis] < 2 {
		return axis, &OneClassError{Type: t, Axis: axis}
	}
	return axis, nil
}

// OneClassError is a cross-entropy over a class axis of size 1: the softmax of one class is
// 1 and the loss is 0 whatever the weights, so training would change nothing.
type OneClassError struct {
	Type ir.Type
	Axis int
}

func (e *OneClassError) Error() string {
	return fmt.Sprintf("class axis %d of %s has size %d: a cross-entropy over one class is always 0", e.Axis, e.Type, e.Type.Shape[e.Axis])
}

// uniqueArgName returns base, or base.1, base.2… when an argument already has that name.
func uniqueArgName(f *ir.Func, base string) string {
	name := base
	for i := 1; f.Arg(name) != nil; i++ {
		name = base + "." + strconv.Itoa(i)
	}
	return name
}
