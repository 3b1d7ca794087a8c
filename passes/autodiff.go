package passes

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// TrainFunc is the name of the function autodiff produces from @forward: one micro-batch's
// forward and backward.
const TrainFunc = "train"

// Autodiff differentiates @forward into @train.
var Autodiff = &Pass{
	Name: "autodiff",
	Doc: "Reverse-mode differentiation of @forward with respect to every {param} argument; @forward is renamed " +
		"@train in place (one micro-batch's forward and backward). Arguments are unchanged. Results: the loss " +
		"(the one result marked {loss}, a floating-point scalar; other results of @forward are dropped) first, " +
		"then one gradient per parameter in parameter order, each marked {grad = \"<param name>\"} and named " +
		"%d.<param name>; a parameter that does not influence the loss gets a zeros constant. {input} arguments " +
		"get no gradient (integers are not differentiable, float inputs are data). The backward is seeded with " +
		"constant 1.0 of the loss's dtype, or with the argument marked {loss_scale} (an f32 scalar: dynamic loss scaling, " +
		"see the precision pass) cast to it; contributions to one value are summed with add in reverse program " +
		"order; gradients of named values are named %d.<name>. Phases: every forward op gets phase = fwd; a " +
		"backward op gets bwd_in (\"I\"/\"B\" in schedules) when it is needed to compute the gradient of an " +
		"activation — a forward value that depends on a data argument — and bwd_w (\"W\") otherwise: ops needed only " +
		"for parameter gradients (dW = xᵀ·dy matmuls, bias reductions, embedding scatter-adds, the norm-parameter " +
		"kernels, the sums combining the uses of a tied parameter, and the gradients of values computed from " +
		"parameters and constants alone, such as a cast or transpose of a weight). The split is computed on the " +
		"final graph by backward reachability from the activation gradients. A backward op inherits the stage and " +
		"location of the forward op it differentiates; the sum of several contributions to a value gets the stage " +
		"of the value's defining op (of a parameter's first user); the seed gets the loss's stage. Gradient rules " +
		"are a table keyed by op name (grad_rules.go for the core ops, grad_rules_nn.go for convolution, pooling and the other ONNX ops); broadcasting operands get reduce_sum over the broadcast dims " +
		"(then a reshape), max/min send ties to the first operand, reduce_max to the first maximal element. An op " +
		"between a parameter and the loss without a rule is an error naming the op and its location. Forward ops " +
		"no longer needed (they fed only dropped results) are removed.",
	Run: func(m *ir.Module, _ Options) error { return autodiff(m) },
}

// differ holds the state of one differentiation.
type differ struct {
	m *ir.Module
	f *ir.Func
	b *ir.Builder

	active    map[*ir.Value]bool      // floating point and dependent on a parameter
	needed    map[*ir.Value]bool      // active and on a path to the loss
	paramSide map[*ir.Value]bool      // computed from parameters and constants alone
	source    map[*ir.Value]*ir.Value // a parameter an active value depends on (for messages)
	contrib   map[*ir.Value][]*ir.Value
	grad      map[*ir.Value]*ir.Value // the summed gradient of each value, once computed
	backward  map[*ir.Value]bool      // values defined by backward ops
	bwdOps    []*ir.Op
}

func autodiff(m *ir.Module) error {
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		if m.Func(TrainFunc) != nil {
			return fmt.Errorf("autodiff: the module has @%s but no @%s: autodiff has already run", TrainFunc, ir.ForwardFunc)
		}
		return fmt.Errorf("autodiff: the module has no @%s function", ir.ForwardFunc)
	}
	errf := func(format string, args ...any) error {
		return ir.ErrorAt(m.Source, f.Loc, "autodiff: "+format, args...)
	}
	if m.Func(TrainFunc) != nil {
		return errf("the module already has a @%s function", TrainFunc)
	}
	lossIdx := -1
	for i, ra := range f.ResultAttrs {
		if ra.Has(ir.AttrLoss) {
			if lossIdx >= 0 {
				return errf("@%s has two results marked {%s} (%d and %d); a model has one loss", ir.ForwardFunc, ir.AttrLoss, lossIdx, i)
			}
			lossIdx = i
		}
	}
	if lossIdx < 0 {
		return errf("@%s has no result marked {%s}; a model without a loss (an ONNX model) needs the add-loss pass first", ir.ForwardFunc, ir.AttrLoss)
	}
	loss := f.Results[lossIdx]
	if !loss.Type.DType.IsFloat() || loss.Type.Rank() != 0 {
		return errf("the loss must be a floating-point scalar, got %s (reduce it with reduce_mean or reduce_sum first)", loss.Type)
	}
	var scale *ir.Value
	for i, a := range f.Args {
		if !f.ArgAttrs[i].Has(AttrLossScale) {
			continue
		}
		switch {
		case scale != nil:
			return errf("@%s has two arguments marked {%s} (%%%s and %%%s)", ir.ForwardFunc, AttrLossScale, scale.Name, a.Name)
		case !a.Type.Equal(ir.T(ir.F32)) || f.ArgAttrs[i].Has(ir.AttrParam) || f.ArgAttrs[i].Has(ir.AttrInput):
			return errf("the loss scale %%%s must be an f32 scalar that is neither a parameter nor an input, got %s", a.Name, a.Type)
		}
		scale = a
	}
	params := f.Params()
	for _, p := range params {
		if !p.Type.DType.IsFloat() {
			return errf("parameter %%%s has type %s; only floating-point parameters can be trained", p.Name, p.Type)
		}
	}

	d := &differ{m: m, f: f,
		active: map[*ir.Value]bool{}, needed: map[*ir.Value]bool{}, paramSide: map[*ir.Value]bool{},
		source: map[*ir.Value]*ir.Value{}, contrib: map[*ir.Value][]*ir.Value{}, grad: map[*ir.Value]*ir.Value{},
		backward: map[*ir.Value]bool{}}
	d.b = ir.NewBuilder(f)
	d.b.Phase = ir.BwdIn // provisional; classify sets the final phase
	d.b.Emit = func(op *ir.Op) {
		d.bwdOps = append(d.bwdOps, op)
		for _, r := range op.Results {
			d.backward[r] = true
		}
	}
	fwd := slices.Clone(f.Ops)
	d.analyse(fwd, loss)

	// The seed, then the reverse sweep.
	d.b.Loc, d.b.Stage, d.b.Slice = f.Loc, ir.NoStage, ir.NoSlice
	if loss.Def != nil {
		d.b.Loc, d.b.Stage, d.b.Slice = loss.Def.Loc, loss.Def.Stage, loss.Def.Slice
	}
	if d.needed[loss] {
		seed := scalarConst(d.b, loss.Type.DType, 1)
		if scale != nil {
			// Dynamic loss scaling: the gradients are those of the scaled loss.
			seed = scale
			if scale.Type.DType != loss.Type.DType {
				seed = d.b.Cast(scale, loss.Type.DType)
			}
		}
		d.contrib[loss] = []*ir.Value{seed}
	}
	for i := len(fwd) - 1; i >= 0; i-- {
		if err := d.differentiate(fwd[i]); err != nil {
			return err
		}
	}

	// Parameter gradients, in parameter order.
	var results []*ir.Value
	var resultAttrs []ir.Attrs
	results = append(results, loss)
	resultAttrs = append(resultAttrs, f.ResultAttrs[lossIdx])
	uses := f.Uses()
	for _, p := range params {
		// The sum of a parameter's contributions goes with its first use: in a token-sliced
		// module that is slice 0, whose backward runs last.
		stage, slice := ir.NoStage, ir.NoSlice
		if us := uses[p]; len(us) > 0 {
			stage, slice = us[0].Stage, us[0].Slice
		}
		g := d.total(p, stage, slice, f.Loc)
		if g == nil {
			d.b.Loc, d.b.Stage, d.b.Slice = f.Loc, stage, slice
			g = d.b.Constant(ir.Splat(p.Type, 0))
		}
		if err := d.b.Err(); err != nil {
			return err
		}
		g.Name = "d." + p.Name
		results = append(results, g)
		resultAttrs = append(resultAttrs, ir.Attrs{{Name: ir.AttrGrad, Value: ir.String(p.Name)}})
	}
	// The model's metrics (`metric NAME EXPR`) stay results: forward values the step reports.
	for i, ra := range f.ResultAttrs {
		if ra.Has(ir.AttrMetric) && i != lossIdx {
			results = append(results, f.Results[i])
			resultAttrs = append(resultAttrs, ra)
		}
	}
	// Success: only now is the function changed.
	for _, op := range fwd {
		op.Phase = ir.Fwd
	}
	f.Ops = append(fwd, d.bwdOps...)
	f.Results, f.ResultAttrs = results, resultAttrs
	RemoveDead(f)
	d.classify(fwd)
	f.Name = TrainFunc
	return nil
}

// analyse computes activity (float values depending on a parameter), which of those lie on
// a path to the loss, and which values are computed from parameters and constants alone.
func (d *differ) analyse(fwd []*ir.Op, loss *ir.Value) {
	for i, a := range d.f.Args {
		if d.f.ArgAttrs[i].Has(ir.AttrParam) {
			d.paramSide[a] = true
			if a.Type.DType.IsFloat() {
				d.active[a], d.source[a] = true, a
			}
		}
	}
	for _, op := range fwd {
		var src *ir.Value
		side := true
		for _, x := range op.Operands {
			if d.active[x] && src == nil {
				src = d.source[x]
			}
			side = side && d.paramSide[x]
		}
		for _, r := range op.Results {
			d.paramSide[r] = side
			if src != nil && r.Type.DType.IsFloat() {
				d.active[r], d.source[r] = true, src
			}
		}
	}
	d.needed[loss] = d.active[loss]
	for i := len(fwd) - 1; i >= 0; i-- {
		op := fwd[i]
		if !slices.ContainsFunc(op.Results, func(r *ir.Value) bool { return d.needed[r] }) {
			continue
		}
		for _, x := range op.Operands {
			if d.active[x] {
				d.needed[x] = true
			}
		}
	}
}

// total sums the gradient contributions to v (nil when there are none), names the sum after v
// and remembers it as v's gradient.
func (d *differ) total(v *ir.Value, stage, slice int, loc ir.Loc) *ir.Value {
	if g, ok := d.grad[v]; ok {
		return g
	}
	cs := d.contrib[v]
	if len(cs) == 0 {
		return nil
	}
	d.b.Loc, d.b.Stage, d.b.Slice = loc, stage, slice
	g := cs[0]
	for _, c := range cs[1:] {
		g = d.b.Add(g, c)
	}
	if v.Name != "" && !isAllDigits(v.Name) && d.backward[g] && g.Name == "" {
		g.Name = "d." + v.Name
	}
	d.grad[v] = g
	return g
}

// differentiate applies op's gradient rule, adding the gradients of its operands.
func (d *differ) differentiate(op *ir.Op) error {
	dOut := make([]*ir.Value, len(op.Results))
	flows := false
	for i, r := range op.Results {
		if d.needed[r] {
			dOut[i] = d.total(r, op.Stage, op.Slice, op.Loc)
			flows = flows || dOut[i] != nil
		}
	}
	if err := d.b.Err(); err != nil {
		return err
	}
	if !flows {
		return nil
	}
	rule, ok := gradRules[op.Name()]
	if !ok {
		return d.opError(op, "no gradient rule for op %q (it lies between parameter %%%s and the loss)", op.Name(), d.paramOf(op))
	}
	if rule == nil {
		return nil // not differentiable: nothing flows back
	}
	need := make([]bool, len(op.Operands))
	for i, x := range op.Operands {
		need[i] = d.needed[x]
	}
	d.b.Loc, d.b.Stage, d.b.Slice = op.Loc, op.Stage, op.Slice
	g := &gradCtx{b: d.b, need: need}
	dIn, err := rule(g, op, dOut)
	if err == nil {
		err = d.b.Err()
	}
	if err != nil {
		msg := err.Error()
		if e, ok := err.(*ir.Error); ok {
			msg = e.Msg // the builder's error carries op's location already
		}
		return d.opError(op, "gradient of %s: %s", op.Name(), msg)
	}
	if len(dIn) != len(op.Operands) {
		return d.opError(op, "internal error: the %s rule returned %d gradients for %d operands", op.Name(), len(dIn), len(op.Operands))
	}
	for i, dx := range dIn {
		x := op.Operands[i]
		if dx == nil || !need[i] {
			continue
		}
		if !dx.Type.Equal(x.Type) {
			return d.opError(op, "internal error: the %s rule made a %s gradient for operand %d of type %s", op.Name(), dx.Type, i, x.Type)
		}
		d.contrib[x] = append(d.contrib[x], dx)
	}
	return nil
}

func (d *differ) paramOf(op *ir.Op) string {
	for _, x := range op.Operands {
		if p := d.source[x]; p != nil {
			return p.Name
		}
	}
	return "?"
}

// opError reports a problem at op's location; without a known position it quotes the op.
func (d *differ) opError(op *ir.Op, format string, args ...any) error {
	msg := "autodiff: " + fmt.Sprintf(format, args...)
	if op.Loc.Line == 0 && op.Loc.Node == "" {
		msg += "\n    in @" + d.f.Name + ": " + op.String()
	}
	return ir.ErrorAt(d.m.Source, op.Loc, "%s", msg)
}

// classify sets the phase of every backward op: bwd_in when it is needed to compute the
// gradient of an activation (a forward value that is not parameter-side), bwd_w otherwise.
func (d *differ) classify(fwd []*ir.Op) {
	isFwd := make(map[*ir.Op]bool, len(fwd))
	for _, op := range fwd {
		isFwd[op] = true
	}
	live := make(map[*ir.Op]bool, len(d.f.Ops))
	for _, op := range d.f.Ops {
		live[op] = true
	}
	inB := map[*ir.Op]bool{}
	var stack []*ir.Op
	push := func(v *ir.Value) {
		if v != nil && v.Def != nil && live[v.Def] && !isFwd[v.Def] && !inB[v.Def] {
			inB[v.Def] = true
			stack = append(stack, v.Def)
		}
	}
	for v, g := range d.grad {
		if v.Def != nil && !d.paramSide[v] {
			push(g)
		}
	}
	for len(stack) > 0 {
		op := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, x := range op.Operands {
			push(x)
		}
	}
	for _, op := range d.f.Ops {
		switch {
		case isFwd[op]:
		case inB[op]:
			op.Phase = ir.BwdIn
		default:
			op.Phase = ir.BwdW
		}
	}
}

func isAllDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
