package passes

import (
	"fmt"
	"math"

	"ppc.dev/ppc/ir"
)

// Mixed precision (ppc compile --precision bf16|fp16): the precision pass rewrites @forward
// to compute in a 16-bit float dtype with 16-bit parameters, whose fp32 main copies the
// optimizer pass keeps as state (Megatron-LM's recipe); the loss-scale pass (lossscale.go)
// adds fp16's dynamic loss scaling to @optimizer.
//
// Before this recipe the parameters stayed fp32 and every use read a cast of one (PyTorch
// autocast's recipe). That priced and ran the cast once per use per micro-batch — about a
// fifth of the compute of a GPT-3-sized step on the cost model — and kept 4 bytes of weights
// per parameter on every rank where Megatron keeps 2 and shards the fp32 copy over dp
// (ZeRO-1). It was removed rather than kept beside the recipe: one way to train in 16 bits.

// AttrMainParam (unit, on a 16-bit {param} argument) marks a parameter whose fp32 main copy
// the optimizer keeps (state "<name>.main_param", AttrMainParamOf naming the parameter): the
// forward reads the 16-bit parameter; the optimizer updates the main copy and rounds it into
// the parameter once per step.
const AttrMainParam = "main_param"

// MainParamState is the state name of parameter name's fp32 main copy in @optimizer.
// Programs and checkpoints name it as the parameter itself (codegen), so a checkpoint holds
// the fp32 weights under the parameter's name in every precision.
func MainParamState(name string) string { return name + "." + AttrMainParam }

// AttrPrecision (string, on the module) records the compute dtype the precision pass chose
// ("bf16" or "f16"); code generation copies it into plan.json.
const AttrPrecision = "precision"

// AttrLossScale (unit, on an f32 scalar argument of @forward) marks the dynamic loss scale:
// autodiff seeds the backward with it instead of 1, so every gradient is the scaled loss's.
// The argument is optimizer state (AttrState) that @optimizer updates.
const AttrLossScale = "loss_scale"

// The loss scaler's state, named as PyTorch's GradScaler names it in its state_dict
// (scale, _growth_tracker), under one prefix that no parameter may use.
const (
	ScalerPrefix = "grad_scaler"
	ScalerScale  = ScalerPrefix + ".scale"
	ScalerGrowth = ScalerPrefix + ".growth_tracker"
	// ScalerOptimizerStep is AdamW's own step count under loss scaling, torch.optim's
	// state["step"]: the steps the scaler did not skip (GradScaler skips optimizer.step()
	// whole). It is not GradScaler's, but lives under its prefix, which no parameter may use.
	ScalerOptimizerStep = ScalerPrefix + ".optimizer_step"
)

// Precision rewrites @forward to compute in bf16 or f16.
var Precision = &Pass{
	Name: "precision",
	Doc: "Mixed precision, Megatron-LM's recipe: rewrite @forward so that its floating-point compute runs in dtype " +
		"(bf16 or f16; f32 leaves the module unchanged). Every f32 {param} argument becomes a dtype argument marked " +
		"{main_param}: the 16-bit parameter the forward reads directly, while the optimizer pass keeps the fp32 main " +
		"parameter as optimizer state, updates it in fp32 and writes the 16-bit parameter from it once per step " +
		"(Megatron's Float16OptimizerWithFloat16Params; checkpoints hold the fp32 main parameter under the " +
		"parameter's name). Imported weights keep their f32 data: it is the main parameter's, and the 16-bit " +
		"parameter starts from it rounded. An f32 {input} is read, per use, as a dtype cast placed with the op using it. f32 " +
		"constants become dtype constants (values " +
		"beyond dtype's range saturate to its largest finite value: an attention mask's −1e9 stays a large " +
		"negative number in f16, not −inf). Ops whose dtype is explicit (cast {to = f32}, iota {type = f32[…]}) " +
		"keep it, and where such an f32 value meets a dtype value in an op it is cast down. The float operands of " +
		"a loss op (cross_entropy, mse) are cast up to f32, so the loss is computed and reported in f32 (Megatron " +
		"casts the logits to fp32 for the cross-entropy likewise); results of @forward keep their dtypes (a result " +
		"computed in dtype is cast back). Result types are re-inferred. Autodiff then differentiates the dtype " +
		"graph: each micro-batch's parameter gradient is dtype, and the rank programs accumulate it in the " +
		"optimizer's gradient dtype (fp32 unless ppc compile --grad-precision bf16). f64 values are left alone. With " +
		"dtype=f16 and a " +
		"{loss} result, @forward gets the argument %grad_scaler.scale: f32[] {loss_scale, state = " +
		"\"grad_scaler.scale\", data = init_scale}: autodiff seeds the backward with it (the loss multiplied by " +
		"the scale before backward, as torch.cuda.amp.GradScaler.scale(loss).backward()), and the loss-scale pass " +
		"unscales the gradients in @optimizer. The module gets the attribute precision = dtype.",
	Options: []Option{
		{Name: "dtype", Default: "f32", Doc: "compute dtype: f32 (no change), bf16 or f16"},
		{Name: "init_scale", Default: "65536", Doc: "f16: the initial loss scale (GradScaler's init_scale, 2^16), a finite f32 > 0"},
	},
	Run: runPrecision,
}

// ParsePrecision maps a compute dtype name to its dtype: f32 (or fp32), bf16, f16 (or
// fp16).
func ParsePrecision(s string) (ir.DType, error) {
	switch s {
	case "f32", "fp32":
		return ir.F32, nil
	case "bf16":
		return ir.BF16, nil
	case "f16", "fp16":
		return ir.F16, nil
	}
	return ir.Invalid, fmt.Errorf("unknown precision %q (want fp32, bf16 or fp16)", s)
}

func runPrecision(m *ir.Module, opts Options) error {
	low, err := ParsePrecision(opts["dtype"])
	if err != nil {
		return fmt.Errorf("precision: dtype: %v", err)
	}
	scale, err := parseFloatOption(opts, "init_scale")
	if err != nil || !(scale > 0) || scale > math.MaxFloat32 {
		return fmt.Errorf("precision: init_scale must be a finite f32 above 0, got %q", opts["init_scale"])
	}
	if low == ir.F32 {
		return nil
	}
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return fmt.Errorf("precision: the module has no @%s function", ir.ForwardFunc)
	}
	if p := m.Attrs.Str(AttrPrecision, ""); p != "" {
		return ir.ErrorAt(m.Source, f.Loc, "precision: the module already computes in %s", p)
	}
	if m.Func(TrainFunc) != nil {
		return ir.ErrorAt(m.Source, f.Loc, "precision: the module already has @%s: run precision before autodiff", TrainFunc)
	}
	hasLoss := false
	for _, ra := range f.ResultAttrs {
		hasLoss = hasLoss || ra.Has(ir.AttrLoss)
	}
	if low == ir.F16 && hasLoss {
		if f.Arg(ScalerScale) != nil {
			return ir.ErrorAt(m.Source, f.Loc, "precision: @%s already has an argument %%%s", ir.ForwardFunc, ScalerScale)
		}
		if p := scalerParam(f); p != "" {
			return ir.ErrorAt(m.Source, f.Loc, "precision: parameter %%%s is named like the loss scaler's state (%s.*)", p, ScalerPrefix)
		}
	}
	if err := lowerPrecision(m, f, low); err != nil {
		return err
	}
	if low == ir.F16 && hasLoss {
		f.AddArg(ScalerScale, ir.T(ir.F32), ir.Attrs{
			{Name: AttrLossScale, Value: ir.Unit{}},
			{Name: AttrState, Value: ir.String(ScalerScale)},
			{Name: ir.AttrData, Value: ir.NewDenseF64(ir.T(ir.F32), []float64{scale})},
		}.Sorted())
	}
	m.Attrs = m.Attrs.Set(AttrPrecision, ir.String(low.String()))
	return nil
}

// scalerParam returns the name of a parameter under the loss scaler's prefix, or "".
func scalerParam(f *ir.Func) string {
	for _, p := range f.Params() {
		if p.Name == ScalerPrefix || len(p.Name) > len(ScalerPrefix) && p.Name[:len(ScalerPrefix)+1] == ScalerPrefix+"." {
			return p.Name
		}
	}
	return ""
}

// parseFloatOption reads a float option.
func parseFloatOption(opts Options, name string) (float64, error) {
	var v float64
	if _, err := fmt.Sscan(opts[name], &v); err != nil {
		return 0, fmt.Errorf("option %s=%q is not a number", name, opts[name])
	}
	return v, nil
}

// lowerPrecision rewrites f in place to compute in low (see Precision's Doc).
func lowerPrecision(m *ir.Module, f *ir.Func, low ir.DType) error {
	isArg := map[*ir.Value]bool{}
	for i, a := range f.Args {
		at := f.ArgAttrs[i]
		if at.Has(ir.AttrParam) && a.Type.DType == ir.F32 {
			// The 16-bit parameter; the optimizer keeps the fp32 main one.
			a.Type.DType = low
			at = at.Set(AttrMainParam, ir.Unit{})
			f.ArgAttrs[i] = at
			continue
		}
		isArg[a] = at.Has(ir.AttrInput)
	}
	resultTypes := make([]ir.Type, len(f.Results))
	for i, r := range f.Results {
		resultTypes[i] = r.Type
	}
	var out []*ir.Op
	b := ir.NewBuilder(f)
	b.Emit = func(op *ir.Op) { out = append(out, op) }
	for _, op := range f.Ops {
		b.Loc, b.Stage, b.Phase = op.Loc, op.Stage, op.Phase
		switch {
		case op.Def.Has(ir.ConstantLike):
			if d, ok := op.Attrs.Get("value").(*ir.Dense); ok && d.Type.DType == ir.F32 && !d.Elided {
				op.Attrs = op.Attrs.Set("value", lowDense(d, low))
				op.Results[0].Type.DType = low
			}
		case op.Def.Has(ir.Loss):
			// The loss in f32: its dtype operands go back up.
			for i, x := range op.Operands {
				if x.Type.DType == low {
					op.Operands[i] = b.Cast(x, ir.F32)
				}
			}
		case op.Def.Name == "cast" || len(op.Operands) == 0:
			// The dtype is explicit (cast, iota): the op keeps it.
		default:
			// Per use, an f32 input is read as its dtype copy; then an op whose float
			// operands mix f32 and dtype computes in dtype.
			mixed := false
			casts := map[*ir.Value]*ir.Value{}
			for i, x := range op.Operands {
				if isArg[x] && x.Type.DType == ir.F32 {
					c := casts[x]
					if c == nil {
						c = b.Cast(x, low)
						casts[x] = c
					}
					op.Operands[i] = c
				}
				mixed = mixed || op.Operands[i].Type.DType == low
			}
			if mixed {
				for i, x := range op.Operands {
					if x.Type.DType == ir.F32 {
						op.Operands[i] = b.Cast(x, low)
					}
				}
			}
		}
		if err := b.Err(); err != nil {
			return ir.ErrorAt(m.Source, op.Loc, "precision: %s: %v", op.Def.Name, err)
		}
		in := make([]ir.Type, len(op.Operands))
		for i, x := range op.Operands {
			in[i] = x.Type
		}
		types, err := op.Def.Infer(in, op.Attrs)
		if err != nil {
			return ir.ErrorAt(m.Source, op.Loc, "precision: %s in %s: %v", op.Def.Name, low, err)
		}
		for i, r := range op.Results {
			r.Type = types[i]
		}
		out = append(out, op)
	}
	// Results keep their dtypes.
	for i, r := range f.Results {
		if r.Type.DType != resultTypes[i].DType && !isArg[r] {
			b.Loc, b.Stage, b.Phase = f.Loc, ir.NoStage, ir.PhaseNone
			if r.Def != nil {
				b.Loc, b.Stage, b.Phase = r.Def.Loc, r.Def.Stage, r.Def.Phase
			}
			c := b.Cast(r, resultTypes[i].DType)
			if err := b.Err(); err != nil {
				return ir.ErrorAt(m.Source, f.Loc, "precision: result %d: %v", i, err)
			}
			c.Name, r.Name = r.Name, ""
			f.Results[i] = c
		}
	}
	f.Ops = out
	return nil
}

// lowDense converts f32 constant data to low, saturating finite values beyond low's range to
// its largest finite value of the same sign.
func lowDense(d *ir.Dense, low ir.DType) *ir.Dense {
	big := maxFinite(low)
	vals := d.Floats()
	if d.Splat {
		vals = vals[:min(len(vals), 1)]
	}
	for i, v := range vals {
		if !math.IsInf(v, 0) && !math.IsNaN(v) {
			vals[i] = math.Max(-big, math.Min(big, v))
		}
	}
	t := ir.Type{DType: low, Shape: d.Type.Shape}
	if d.Splat {
		return ir.Splat(t, vals[0])
	}
	return ir.NewDenseF64(t, vals)
}

// maxFinite is the largest finite value of a 16-bit float dtype (f32's otherwise).
func maxFinite(d ir.DType) float64 {
	switch d {
	case ir.F16:
		return 65504
	case ir.BF16:
		return float64(math.Float32frombits(0x7f7f0000)) // 0x7f7f as bf16
	}
	return math.MaxFloat32
}
