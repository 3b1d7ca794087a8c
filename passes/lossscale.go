package passes

import (
	"fmt"
	"math"

	"ppc.dev/ppc/ir"
)

// Attributes of the loss scaler's arguments and results in @optimizer.
const (
	// AttrGlobal (unit, on an @optimizer state argument) marks state that belongs to no
	// parameter (the loss scaler's): every pipeline rank holds it whole and updates it
	// identically, so rank-optimizer keeps its update in every rank's slice of @optimizer.
	AttrGlobal = "global"
	// AttrFoundInf (unit, on an f32 scalar argument of @optimizer) is 1 when some element of
	// some gradient is not finite on any rank of the mesh, else 0. It is not computed in
	// @optimizer, which every rank runs only a slice of: each rank's program computes it from
	// the gradients the rank's slice reads (rank-optimizer: NonFiniteCheck) and reduces it
	// over every mesh axis before the optimizer runs.
	AttrFoundInf = "found_inf"
	// AttrMetric is ir.AttrMetric: on an @optimizer result, a value every rank agrees on
	// (the loss scale), reported once.
	AttrMetric = ir.AttrMetric
)

// The metrics the loss-scale pass reports.
const (
	MetricOverflow  = "overflow"   // 1 when the step was skipped, else 0
	MetricLossScale = "loss_scale" // the scale this step's backward used
)

// LossScale adds dynamic loss scaling (fp16) to @optimizer.
var LossScale = &Pass{
	Name: "loss-scale",
	Doc: "Dynamic loss scaling, as torch.cuda.amp.GradScaler: when @train has an argument marked {loss_scale} " +
		"(the precision pass adds it for f16, and autodiff seeds the backward with it, so the gradients arriving " +
		"in @optimizer are those of the loss times the scale), rewrite @optimizer: add the state arguments " +
		"%grad_scaler.scale (its initial value that of the {loss_scale} argument) and %grad_scaler.growth_tracker " +
		"(zeros), both {global}: held whole by every pipeline rank, which update them identically and which " +
		"checkpoints carry; and %found_inf: f32[] {found_inf}, which each rank's program computes before the optimizer " +
		"runs (rank-optimizer): 1 when any element of any gradient is not finite on any rank — each rank checks the gradients its " +
		"slice of @optimizer reads and the flag is all-reduced (max) over tp, dp and pp — else 0. Every gradient " +
		"argument is first multiplied by 1/scale (computed in f64 and rounded to f32, as GradScaler's inv_scale), " +
		"so whatever @optimizer does with gradients (clipping, the update) sees unscaled ones. Every result " +
		"{update = X} becomes where(found_inf == 0, new X, old X) (old X's dp block where ZeRO updates a block): a step with an overflow anywhere changes no " +
		"parameter and no state on any rank — AdamW's own step count included (%grad_scaler.optimizer_step, which " +
		"the optimizer pass adds under loss scaling), so its bias correction counts the steps taken as torch.optim's " +
		"does when GradScaler skips optimizer.step(), while a learning-rate schedule follows %step, every step run, " +
		"as a scheduler stepped each iteration does. The scale " +
		"follows GradScaler's update: on overflow it is multiplied by backoff_factor and the growth tracker reset; " +
		"otherwise the tracker counts the step and, when it reaches growth_interval, is reset and the scale " +
		"multiplied by growth_factor unless that is not finite in f32. The results gain the new scale and tracker " +
		"{update = …} and two metrics the runtime reports each step: found_inf {metric = \"overflow\"} and the " +
		"step's scale {metric = \"loss_scale\"}. Without a {loss_scale} argument the pass changes nothing.",
	Options: []Option{
		{Name: "growth_factor", Default: "2", Doc: "factor the scale grows by after growth_interval steps without overflow (> 1)"},
		{Name: "backoff_factor", Default: "0.5", Doc: "factor the scale shrinks by on overflow (in (0, 1))"},
		{Name: "growth_interval", Default: "2000", Doc: "consecutive steps without overflow before the scale grows (1 … 2^24)"},
	},
	Run: runLossScale,
}

func runLossScale(m *ir.Module, opts Options) error {
	growth, err1 := parseFloatOption(opts, "growth_factor")
	backoff, err2 := parseFloatOption(opts, "backoff_factor")
	interval, err3 := opts.Int("growth_interval")
	switch {
	case err1 != nil || !(growth > 1) || growth > math.MaxFloat32:
		return fmt.Errorf("loss-scale: growth_factor must be a finite number above 1, got %q", opts["growth_factor"])
	case err2 != nil || !(backoff > 0 && backoff < 1):
		return fmt.Errorf("loss-scale: backoff_factor must be in (0, 1), got %q", opts["backoff_factor"])
	case err3 != nil || interval < 1 || interval > 1<<24:
		// The tracker counts in f32, exact up to 2^24.
		return fmt.Errorf("loss-scale: growth_interval must be an integer in [1, 2^24], got %q", opts["growth_interval"])
	}
	train := m.Func(TrainFunc)
	if train == nil {
		return nil // nothing was differentiated, so nothing is scaled
	}
	var scaleAttrs ir.Attrs
	for i := range train.Args {
		if train.ArgAttrs[i].Has(AttrLossScale) {
			scaleAttrs = train.ArgAttrs[i]
		}
	}
	if scaleAttrs == nil {
		return nil
	}
	f := m.Func(OptimizerFunc)
	if f == nil {
		return ir.ErrorAt(m.Source, train.Loc, "loss-scale: @%s is scaled but the module has no @%s; run the optimizer pass first", TrainFunc, OptimizerFunc)
	}
	if f.Arg(ScalerScale) != nil {
		return ir.ErrorAt(m.Source, f.Loc, "loss-scale: @%s already has the loss scaler's state", OptimizerFunc)
	}
	if name := scaleAttrs.Str(AttrState, ""); name != ScalerScale {
		return ir.ErrorAt(m.Source, train.Loc, "loss-scale: the {%s} argument of @%s is state %q; the scaler's state is %q", AttrLossScale, TrainFunc, name, ScalerScale)
	}
	global := ir.Attrs{{Name: AttrGlobal, Value: ir.Unit{}}}
	scaleAt := global.Set(AttrState, ir.String(ScalerScale))
	if d := scaleAttrs.Get(ir.AttrData); d != nil {
		scaleAt = scaleAt.Set(ir.AttrData, d)
	}
	scale := f.AddArg(ScalerScale, ir.T(ir.F32), scaleAt.Sorted())
	tracker := f.AddArg(ScalerGrowth, ir.T(ir.F32), global.Set(AttrState, ir.String(ScalerGrowth)).Set(ir.AttrInit, ir.String("zeros")).Sorted())
	found := f.AddArg("found_inf", ir.T(ir.F32), ir.Attrs{{Name: AttrFoundInf, Value: ir.Unit{}}})

	// Unscale first: the new ops go before @optimizer's own, which read the unscaled
	// gradients instead of the arguments.
	var pre []*ir.Op
	b := ir.NewBuilder(f)
	b.Phase = ir.Opt
	b.Emit = func(op *ir.Op) { pre = append(pre, op) }
	// inv_scale = 1/scale in f64, rounded to f32 (GradScaler: scale.double().reciprocal().float()).
	inv := b.Cast(b.Div(scalarConst(b, ir.F64, 1), b.Cast(scale, ir.F64)), ir.F32)
	inv.Name = "inv_scale"
	invOf := map[ir.DType]*ir.Value{ir.F32: inv}
	repl := map[*ir.Value]*ir.Value{}
	for i, g := range f.Args {
		if !f.ArgAttrs[i].Has(ir.AttrGrad) {
			continue
		}
		k := invOf[g.Type.DType]
		if k == nil {
			k = b.Cast(inv, g.Type.DType)
			invOf[g.Type.DType] = k
		}
		u := b.Mul(g, k)
		u.Name = g.Name + ".unscaled"
		repl[g] = u
	}
	// Clipping's sum of squares is of the scaled gradients: unscale it too (by inv_scale²).
	for i, a := range f.Args {
		if f.ArgAttrs[i].Has(AttrGradSumSq) {
			u := b.Mul(b.Mul(a, inv), inv)
			u.Name = a.Name + ".unscaled"
			repl[a] = u
		}
	}
	f.Replace(repl)
	// Each gradient is unscaled right before the first op reading it, not all of them at the
	// top: there every unscaled gradient would be live until the update that reads it, a
	// second copy of all the gradients at the step's end (what the planner does not count).
	unscaled := map[*ir.Value]*ir.Op{}
	isArg := map[*ir.Value]bool{}
	for _, a := range f.Args {
		isArg[a] = true
	}
	var head []*ir.Op
	for _, op := range pre {
		if u := op.Results[0]; op.Def.Name == "mul" && u.Name != "" && len(op.Operands) == 2 && isArg[op.Operands[0]] {
			unscaled[u] = op
			continue
		}
		head = append(head, op)
	}
	ops := head
	for _, op := range f.Ops {
		for _, x := range op.Operands {
			if u, ok := unscaled[x]; ok {
				ops = append(ops, u)
				delete(unscaled, x)
			}
		}
		ops = append(ops, op)
	}
	for _, u := range pre { // unread ones (a gradient no update reads), in order
		if _, ok := unscaled[u.Results[0]]; ok {
			ops = append(ops, u)
		}
	}
	f.Ops = ops

	// Skip on overflow: every update keeps the old value. Each where goes right after the
	// op computing the new value, so that the old value's buffer and the new one are not
	// all live at once until the end of @optimizer (a whole second copy of the parameters
	// and optimizer state at the step's end).
	var selects []*ir.Op
	b = ir.NewBuilder(f)
	b.Phase = ir.Opt
	b.Emit = func(op *ir.Op) { selects = append(selects, op) }
	ok := b.Op1("equal", nil, found, scalarConst(b, ir.F32, 0))
	ok.Name = "step_ok"
	head = append(head[:0], selects...)
	selects = nil
	old := map[string]*ir.Value{}
	zeroed := map[string]bool{} // parameters updated by their dp block (ZeRO)
	for i, a := range f.Args {
		at := f.ArgAttrs[i]
		switch {
		case at.Has(ir.AttrParam):
			old[a.Name] = a
		case at.Has(AttrState):
			old[at.Str(AttrState, "")] = a
		case at.Has(ir.AttrGrad):
			if s, _ := ir.ArgSharding(f, i); s != nil && s.Uses("dp") {
				zeroed[at.Str(ir.AttrGrad, "")] = true
			}
		}
	}
	for i, r := range f.Results {
		if f.ResultAttrs[i].Has(AttrMetric) {
			continue // clipping's metrics report the step as it was
		}
		target := f.ResultAttrs[i].Str(AttrUpdate, "")
		prev := old[target]
		if prev != nil && zeroed[target] && r.Type.Rank() > 0 && !prev.Type.Equal(r.Type) {
			prev = zeroBlock(b, prev, r.Type.Shape[0], meshSize(m, "dp")) // the new value is a block: keep the old block
		}
		if prev == nil || !prev.Type.Equal(r.Type) {
			return ir.ErrorAt(m.Source, f.Loc, "loss-scale: @%s result %d updates %q, which is not an argument of its type", OptimizerFunc, i, target)
		}
		name := r.Name
		f.Results[i] = b.Op1("where", nil, ok, r, prev)
		f.Results[i].Name, r.Name = name, ""
	}
	// head (step_ok), then what reads only arguments and constants (ZeRO's old blocks, the
	// constants, wheres of an argument), then @optimizer's ops each followed by the wheres
	// of the values it computes; any where left over (its value computed by none of those
	// ops) goes last, as before.
	after := map[*ir.Op][]*ir.Op{}
	var rest []*ir.Op
	for _, op := range selects {
		if op.Def.Name == "where" && len(op.Operands) == 3 && op.Operands[1].Def != nil {
			after[op.Operands[1].Def] = append(after[op.Operands[1].Def], op)
		} else {
			rest = append(rest, op)
		}
	}
	ops = append(append([]*ir.Op(nil), head...), rest...)
	for _, op := range f.Ops {
		ops = append(ops, op)
		ops = append(ops, after[op]...)
		delete(after, op)
	}
	for _, op := range selects {
		if op.Def.Name == "where" && len(op.Operands) == 3 && op.Operands[1].Def != nil {
			if _, left := after[op.Operands[1].Def]; left {
				ops = append(ops, op)
			}
		}
	}
	f.Ops = ops
	b = ir.NewBuilder(f)
	b.Phase = ir.Opt

	// GradScaler's update of the scale and its growth tracker.
	zero, one := scalarConst(b, ir.F32, 0), scalarConst(b, ir.F32, 1)
	counted := b.Add(tracker, one)
	grow := b.Op1("not", nil, b.Op1("less", nil, counted, scalarConst(b, ir.F32, float64(interval))))
	grown := b.Mul(scale, scalarConst(b, ir.F32, growth))
	finite := b.Op1("not", nil, b.Op1("greater", nil, grown, scalarConst(b, ir.F32, math.MaxFloat32)))
	kept := b.Op1("where", nil, b.Op1("and", nil, grow, finite), grown, scale)
	newScale := b.Op1("where", nil, ok, kept, b.Mul(scale, scalarConst(b, ir.F32, backoff)))
	newTracker := b.Op1("where", nil, ok, b.Op1("where", nil, grow, zero, counted), zero)
	newScale.Name, newTracker.Name = "new."+ScalerScale, "new."+ScalerGrowth
	f.AddResult(newScale, ir.Attrs{{Name: AttrUpdate, Value: ir.String(ScalerScale)}})
	f.AddResult(newTracker, ir.Attrs{{Name: AttrUpdate, Value: ir.String(ScalerGrowth)}})
	f.AddResult(found, ir.Attrs{{Name: AttrMetric, Value: ir.String(MetricOverflow)}})
	f.AddResult(scale, ir.Attrs{{Name: AttrMetric, Value: ir.String(MetricLossScale)}})
	if err := b.Err(); err != nil {
		return ir.ErrorAt(m.Source, f.Loc, "loss-scale: %v", err)
	}
	return nil
}

// NonFiniteCheck builds the function rank-optimizer calls before a rank's slice of a
// loss-scaled @optimizer: @name(grads…) → f32[] {port = "found_inf"}, 1 when an element of
// some argument is not finite (±inf or NaN), else 0, which the rank program then all-reduces
// with max over tp, dp and pp, so every rank of the mesh skips or applies the same step. Each
// gradient g contributes reduce_sum(g·0), which is 0 when every element is finite and NaN
// otherwise (0·±inf is NaN, and NaN survives the sum — a plain sum of g could overflow to inf
// on finite values). A rank with no gradients contributes 0 and still takes part in the
// reductions.
func NonFiniteCheck(name string, grads []GradArg) (*ir.Func, error) {
	f := ir.NewFunc(name)
	b := ir.NewBuilder(f)
	b.Phase = ir.Opt
	var acc *ir.Value
	for i, ga := range grads {
		t := ga.Type
		if !t.DType.IsFloat() {
			return nil, fmt.Errorf("gradient %d (%s) is %s, not floating point", i, ga.Name, t)
		}
		g := f.AddArg("d."+ga.Name, t, ir.Attrs{{Name: ir.AttrGrad, Value: ir.String(ga.Name)}})
		s := b.Reduce("sum", b.Mul(g, scalarConst(b, t.DType, 0)), nil, false)
		if t.DType != ir.F32 {
			s = b.Cast(s, ir.F32)
		}
		if acc == nil {
			acc = s
		} else {
			acc = b.Add(acc, s)
		}
	}
	zero := scalarConst(b, ir.F32, 0)
	flag := zero
	if acc != nil {
		flag = b.Op1("where", nil, b.Op1("equal", nil, acc, zero), zero, scalarConst(b, ir.F32, 1))
	}
	f.AddResult(flag, ir.Attrs{{Name: AttrPort, Value: ir.String(AttrFoundInf)}})
	return f, b.Err()
}

// IsGlobalState reports whether argument i of @optimizer is state every rank holds.
func IsGlobalState(f *ir.Func, i int) bool {
	return f.ArgAttrs[i].Has(AttrState) && f.ArgAttrs[i].Has(AttrGlobal)
}
