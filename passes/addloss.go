package passes

import (
	"fmt"
	"slices"
	"strconv"

	"ppc.dev/ppc/ir"
)

// AddLoss gives a model without a loss (an ONNX model) a labels input and a loss.
var AddLoss = &Pass{
	Name: "add-loss",
	Doc: "Give @forward a loss when it has none (an imported ONNX model): add a labels argument after the last " +
		"{input} argument and a loss on result `output` of @forward, which becomes the only result, marked {loss}; " +
		"the other results are dropped (the ops computing only them are left for dce). kind=ce: the output must " +
		"be floating-point logits [..., C]; the labels are %labels: i64[...] {input, label, range = [0, C]} and the " +
		"loss is cross_entropy (mean over the rows). kind=mse: the labels have the output's type, {input, label}, " +
		"and the loss is mse (mean). The argument is named labels, or labels.1, labels.2… when that name is taken. " +
		"The loss op takes the stage and location of the op defining the output. A @forward that already has a " +
		"{loss} result is left unchanged (not an error), so the pass can run on every model.",
	Options: []Option{
		{Name: "kind", Default: "ce", Doc: "ce (softmax cross-entropy against class indices) or mse (mean squared error)"},
		{Name: "output", Default: "0", Doc: "index of the @forward result the loss is computed on"},
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
	switch {
	case !t.DType.IsFloat():
		return errf("kind=%s needs a floating-point output, but result %d is %s", kind, idx, t)
	case kind == "ce" && t.Rank() == 0:
		return errf("kind=ce needs logits with a class dim, but result %d is the scalar %s", idx, t)
	case kind == "ce":
		labelType = ir.Type{DType: ir.I64, Shape: slices.Clone(t.Shape[:t.Rank()-1])}
		attrs = append(attrs, ir.NamedAttr{Name: "range", Value: ir.Ints(0, t.Shape[t.Rank()-1])})
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
	loss := b.Op1(op, nil, out, labels)
	if err := b.Err(); err != nil {
		return errf("%v", err)
	}
	loss.Name = "loss"
	f.Results = []*ir.Value{loss}
	f.ResultAttrs = []ir.Attrs{{{Name: ir.AttrLoss, Value: ir.Unit{}}}}
	return nil
}

// uniqueArgName returns base, or base.1, base.2… when an argument already has that name.
func uniqueArgName(f *ir.Func, base string) string {
	name := base
	for i := 1; f.Arg(name) != nil; i++ {
		name = base + "." + strconv.Itoa(i)
	}
	return name
}
