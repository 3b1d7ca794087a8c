package passes

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"ppc.dev/ppc/ir"
)

// OptimizerFunc is the name of the function the optimizer pass adds: one parameter update,
// run once per step after the last micro-batch's gradients have been accumulated.
const OptimizerFunc = "optimizer"

// Attributes of @optimizer's arguments and results.
const (
	// AttrState (string, on an argument) marks optimizer state and names it
	// "<param>.<PyTorch state name>", e.g. "layers.0.wq.exp_avg".
	AttrState = "state"
	// AttrUpdate (string, on a result) names the parameter or state the result replaces.
	AttrUpdate = "update"
	// AttrStep (unit, on an argument) marks the 1-based step count, an f32 scalar.
	AttrStep = "step"
	// AttrMicrobatches (int, on the module) is the number of micro-batches per step.
	AttrMicrobatches = ir.AttrMicrobatches
)

// Optimizer adds @optimizer, the parameter update, to a module that has @train.
var Optimizer = &Pass{
	Name: "optimizer",
	Doc: "Add func @optimizer (every op phase = opt): for each {param} argument of @train, in order, the arguments " +
		"%<name> {param}, %d.<name> {grad = \"<name>\"} (the gradient summed over the step's micro-batches) and the " +
		"state %<name>.<state> {init = \"zeros\", state = \"<name>.<state>\"} — adamw: exp_avg, exp_avg_sq; sgd with " +
		"momentum > 0: momentum_buffer; plain sgd (momentum 0, the default): none (PyTorch's state names) — then one argument %step: f32[] " +
		"{step}, the 1-based step count the runtime provides. Results, per parameter: the new parameter " +
		"{update = \"<name>\"}, then each new state {update = \"<name>.<state>\"}. Gradients and state are fp32 " +
		"(f64 for an f64 parameter); a parameter of another dtype is cast to fp32 for the update and back; a " +
		"parameter's shard attribute is copied to its gradient and state arguments (they are laid out as it is). The " +
		"gradient is first divided by M·dp, the module attribute microbatches (default 1) times the mesh's dp size " +
		"(default 1; the gradient arrives summed over the dp replicas), so that the step follows " +
		"the mean loss over the global batch. adamw follows torch.optim.AdamW op by op: p ← p·(1 − lr·wd); " +
		"m ← m + (1 − β1)·(g − m); v ← v·β2 + (1 − β2)·g·g; p ← p − (lr/(1 − β1^t))·m/(√v/√(1 − β2^t) + eps), the " +
		"per-step scalars computed in f64 from %step as PyTorch does in Python floats; when @train is loss-scaled " +
		"(an argument {loss_scale}), t is AdamW's own count instead, the state argument %grad_scaler.optimizer_step: " +
		"f32[] {global, init = \"zeros\"} plus 1, written back as a result, so that a step the loss-scale pass skips " +
		"does not advance it (torch.optim's state[\"step\"] under GradScaler). sgd follows torch.optim.SGD " +
		"(no dampening, no Nesterov): g ← g + wd·p; buf ← buf·momentum + g; p ← p − lr·buf (with the zero-initialised " +
		"buffer the first step gives buf = g exactly, PyTorch's clone). The op order is fixed, so the update is " +
		"bitwise reproducible for every partitioning. Options not given take the kind's defaults (PyTorch's, but for " +
		"sgd's lr); each must be finite in f32, the precision of the update. With zero=1 or 2 (ZeRO stage 1 or 2) on a " +
		"mesh with dp > 1, each replica keeps and updates one dp block of dim 0 of every parameter that has one " +
		"(@optimizer gets the attribute zero = 1 or 2): the gradient argument is the block of the global sum (shard over " +
		"dp on dim 0), the state arguments are that block, the parameter's block is taken with axis_index, and the " +
		"result {update = <name>} is the new block, which each rank's program all-gathers into the whole parameter; " +
		"scalars and expert shards are updated whole. Where dp does not divide the rows, a block is ceil(rows/dp) rows " +
		"and the last ranks' are padded with zeros (the arguments carry zero_rows = rows, the block of the parameter is " +
		"taken from it padded, and the rank programs pad a gradient before its reduce-scatter and drop the padding " +
		"after the gather): FSDP's and Megatron's padding, whose rows' gradient, state and update stay zero. " +
		"@optimizer holds no collective: the rank programs reduce-scatter the " +
		"gradients (rank-optimizer, before the step, for ZeRO-1; grad-reduce, each micro-batch's, for ZeRO-2, which " +
		"accumulates only the block) and all-gather the new blocks (rank-optimizer). With zero=3 (ZeRO-3, FSDP) the " +
		"parameter itself is held as that block (its argument is the block, shard over dp on dim 0, and no block is " +
		"taken): the update replaces the block in place and nothing gathers it after the step — the next step's " +
		"per-stage functions gather it where they read it (param-gather); gradients are reduce-scattered as ZeRO-2's. " +
		"A 16-bit parameter marked " +
		"{main_param} (the precision pass) gets one more state argument before its moments, %<name>.main_param: f32 " +
		"{main_param, state = \"<name>.main_param\"} with the parameter's init (or data), the fp32 main parameter — " +
		"a dp block under ZeRO, as Megatron's distributed optimizer shards it; the update reads and writes it " +
		"(result {update = \"<name>.main_param\"}) and the result {update = \"<name>\"} is it cast to the " +
		"parameter's dtype, the one rounding per step. Its gradient argument is f32, or with grad_dtype the " +
		"parameter's dtype (cast to f32 for the update), and the module gets grad_dtype.",
	Options: []Option{
		{Name: "kind", Doc: "adamw (the default) or sgd"},
		{Name: "lr", Doc: "learning rate, >= 0 (default 1e-3 for adamw, 0.01 for sgd)"},
		{Name: "beta1", Doc: "adamw: first-moment decay in [0, 1) (default 0.9)"},
		{Name: "beta2", Doc: "adamw: second-moment decay in [0, 1) (default 0.999)"},
		{Name: "eps", Doc: "adamw: denominator term, >= 0 (default 1e-8)"},
		{Name: "weight_decay", Doc: "adamw: decoupled weight decay (default 0.01); sgd: L2 term added to the gradient (default 0); >= 0"},
		{Name: "momentum", Doc: "sgd: momentum, >= 0 (default 0, as torch.optim.SGD: no state; > 0 keeps a momentum_buffer per parameter)"},
		{Name: "grad_dtype", Default: "f32", Doc: "the dtype {main_param} parameters' gradients are accumulated over micro-batches and reduced over dp in: f32 (Megatron's --accumulate-allreduce-grads-in-fp32) or the parameters' 16-bit dtype (ppc compile --grad-precision)"},
		{Name: "zero", Default: "0", Doc: "ZeRO stage over the mesh's dp axis: 1 shards optimizer state, 2 also gradients, 3 also parameters (ppc compile --zero)"},
		{Name: "clip", Doc: "clip the gradients to this global L2 norm, > 0 (torch.nn.utils.clip_grad_norm_; see passes/clip.go; ppc compile --clip-grad)"},
		{Name: "schedule", Doc: "learning-rate schedule: constant (the default), linear or cosine (see ScheduledLR; ppc compile --lr-schedule)"},
		{Name: "warmup", Doc: "steps of linear warmup from 0 to lr, >= 0 (default 0; ppc compile --warmup-steps)"},
		{Name: "decay_steps", Doc: "linear and cosine: the step at which the rate reaches min_lr, > warmup (ppc compile --lr-decay-steps)"},
		{Name: "min_lr", Doc: "linear and cosine: the rate after decay_steps, in [0, lr] (default 0; ppc compile --min-lr)"},
	},
	Run: func(m *ir.Module, opts Options) error {
		cfg, err := parseOptimizerOptions(opts)
		if err != nil {
			return err
		}
		if cfg.zero, err = opts.Int("zero"); err != nil || cfg.zero < 0 || cfg.zero > 3 {
			return fmt.Errorf("optimizer: zero must be 0, 1, 2 or 3, got %q", opts["zero"])
		}
		if cfg.gradDType, err = ParsePrecision(opts["grad_dtype"]); err != nil {
			return fmt.Errorf("optimizer: grad_dtype: %v", err)
		}
		if p := m.Attrs.Str(AttrPrecision, ""); cfg.gradDType != ir.F32 && p != cfg.gradDType.String() {
			if p == "" {
				p = "f32"
			}
			return fmt.Errorf("optimizer: grad_dtype=%s needs %s parameters (precision %s): gradients are accumulated in fp32 or in the parameters' 16-bit dtype", cfg.gradDType, cfg.gradDType, p)
		}
		return addOptimizer(m, cfg)
	},
}

// CheckOptimizerOptions validates the optimizer pass's options without a module, so that a
// bad --optimizer is reported before anything is compiled.
func CheckOptimizerOptions(o Options) error {
	_, err := parseOptimizerOptions(o)
	return err
}

// OptimizerLR is the peak learning rate the optimizer pass's options give (the kind's
// default when lr is not set); ScheduledLR gives the rate of each step.
func OptimizerLR(o Options) (float64, error) {
	c, err := parseOptimizerOptions(o)
	return c.lr, err
}

// ScheduledLR is the learning rate of step t (1-based) under the optimizer pass's options —
// the value @optimizer computes from %step, by the same f64 operations in the same order:
//
//	t ≤ warmup:          lr·t/warmup                         (linear warmup from 0)
//	after, constant:     lr
//	after, linear:       min_lr + (lr − min_lr)·(1 − p)
//	after, cosine:       min_lr + (lr − min_lr)·½(1 + cos(π·p))
//	with p = min(max((t − warmup)/(decay_steps − warmup), 0), 1)
//
// — Megatron-LM's schedule (warmup, then decay to min_lr at decay_steps, flat after), which
// nanoGPT's get_lr also follows up to its 0-based step count.
func ScheduledLR(o Options, t int) (float64, error) {
	c, err := parseOptimizerOptions(o)
	if err != nil {
		return 0, err
	}
	return c.lrAt(float64(t)), nil
}

func (c optConfig) lrAt(t float64) float64 {
	after := c.lr
	if c.schedule != "constant" {
		p := math.Min(math.Max((t-float64(c.warmup))/float64(c.decaySteps-c.warmup), 0), 1)
		var f float64
		if c.schedule == "linear" {
			f = 1 - p
		} else {
			f = 0.5 * (1 + math.Cos(math.Pi*p))
		}
		after = c.minLR + (c.lr-c.minLR)*f
	}
	if c.warmup > 0 && t < float64(c.warmup)+0.5 {
		return c.lr * t / float64(c.warmup)
	}
	return after
}

// scheduled reports whether the rate changes from step to step.
func (c optConfig) scheduled() bool { return c.schedule != "constant" || c.warmup > 0 }

// optConfig is a parsed optimizer configuration.
type optConfig struct {
	kind                                         string
	lr, beta1, beta2, eps, weightDecay, momentum float64
	zero                                         int
	gradDType                                    ir.DType // main_param parameters' gradients: f32, or their own 16-bit dtype
	clip                                         float64  // the global gradient norm to clip to (0: no clipping)
	// The learning-rate schedule (ScheduledLR).
	schedule           string
	warmup, decaySteps int
	minLR              float64
}

func parseOptimizerOptions(o Options) (optConfig, error) {
	c := optConfig{kind: o["kind"]}
	if c.kind == "" {
		c.kind = "adamw"
	}
	type opt struct {
		name string
		dst  *float64
		def  float64
	}
	var own, other []opt
	switch c.kind {
	case "adamw":
		own = []opt{{"lr", &c.lr, 1e-3}, {"beta1", &c.beta1, 0.9}, {"beta2", &c.beta2, 0.999}, {"eps", &c.eps, 1e-8}, {"weight_decay", &c.weightDecay, 0.01}}
		other = []opt{{name: "momentum"}}
	case "sgd":
		own = []opt{{"lr", &c.lr, 0.01}, {"momentum", &c.momentum, 0}, {"weight_decay", &c.weightDecay, 0}}
		other = []opt{{name: "beta1"}, {name: "beta2"}, {name: "eps"}}
	default:
		return c, fmt.Errorf("optimizer: unknown kind %q (want adamw or sgd)", c.kind)
	}
	for _, x := range other {
		if o[x.name] != "" {
			return c, fmt.Errorf("optimizer: option %s does not apply to kind=%s", x.name, c.kind)
		}
	}
	for _, x := range own {
		*x.dst = x.def
		s := o[x.name]
		if s == "" {
			continue
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return c, fmt.Errorf("optimizer: option %s=%q is not a finite number", x.name, s)
		}
		// The update runs in f32 (for every parameter but f64 ones): a value beyond f32's
		// range would be an infinite constant in it, and every parameter NaN after a step.
		if math.Abs(v) > math.MaxFloat32 {
			return c, fmt.Errorf("optimizer: option %s=%s is infinite in f32, the precision of the update (largest %.4g)", x.name, s, math.MaxFloat32)
		}
		*x.dst = v
	}
	switch {
	case c.lr < 0:
		return c, fmt.Errorf("optimizer: lr must be >= 0, got %g", c.lr)
	case c.beta1 < 0 || c.beta1 >= 1:
		return c, fmt.Errorf("optimizer: beta1 must be in [0, 1), got %g", c.beta1)
	case c.beta2 < 0 || c.beta2 >= 1:
		return c, fmt.Errorf("optimizer: beta2 must be in [0, 1), got %g", c.beta2)
	case c.eps < 0:
		return c, fmt.Errorf("optimizer: eps must be >= 0, got %g", c.eps)
	case c.weightDecay < 0:
		return c, fmt.Errorf("optimizer: weight_decay must be >= 0, got %g", c.weightDecay)
	case c.momentum < 0:
		return c, fmt.Errorf("optimizer: momentum must be >= 0, got %g", c.momentum)
	case c.lr != 0 && float32(c.lr) == 0:
		return c, fmt.Errorf("optimizer: lr=%g is 0 in f32, the precision of the update: no parameter would change", c.lr)
	}
	if err := c.parseSchedule(o); err != nil {
		return c, err
	}
	if s := o["clip"]; s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0) || v > math.MaxFloat32 {
			return c, fmt.Errorf("optimizer: clip=%q must be a positive number (the global gradient norm to clip to)", s)
		}
		c.clip = v
	}
	// Constants derived from the options must be finite in f32 too: AdamW's decay factor
	// 1 − lr·wd and its first step size lr/(1 − β1).
	if c.kind == "adamw" {
		if d := 1 - c.lr*c.weightDecay; math.Abs(d) > math.MaxFloat32 {
			return c, fmt.Errorf("optimizer: lr·weight_decay = %.4g is infinite in f32, the precision of the update", c.lr*c.weightDecay)
		}
		if s := c.lr / (1 - c.beta1); s > math.MaxFloat32 {
			return c, fmt.Errorf("optimizer: the first step size lr/(1 − beta1) = %.4g is infinite in f32, the precision of the update", s)
		}
	}
	return c, nil
}

// parseSchedule reads the learning-rate schedule's options.
func (c *optConfig) parseSchedule(o Options) error {
	c.schedule = o["schedule"]
	if c.schedule == "" {
		c.schedule = "constant"
	}
	switch c.schedule {
	case "constant", "linear", "cosine":
	default:
		return fmt.Errorf("optimizer: unknown schedule %q (want constant, linear or cosine)", c.schedule)
	}
	steps := func(name string) (int, error) {
		s := o[name]
		if s == "" {
			return 0, nil
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("optimizer: %s=%q is not a non-negative number of steps", name, s)
		}
		return v, nil
	}
	var err error
	if c.warmup, err = steps("warmup"); err != nil {
		return err
	}
	if c.decaySteps, err = steps("decay_steps"); err != nil {
		return err
	}
	if s := o["min_lr"]; s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v >= 0) || v > c.lr || math.IsInf(v, 0) {
			return fmt.Errorf("optimizer: min_lr=%q must be a number in [0, lr=%g]", s, c.lr)
		}
		c.minLR = v
	}
	switch {
	case c.schedule == "constant" && (o["decay_steps"] != "" || o["min_lr"] != ""):
		return fmt.Errorf("optimizer: decay_steps and min_lr apply to the linear and cosine schedules, not constant")
	case c.schedule != "constant" && c.decaySteps <= c.warmup:
		return fmt.Errorf("optimizer: the %s schedule needs decay_steps (the step at which the rate reaches min_lr) greater than warmup=%d, got %d", c.schedule, c.warmup, c.decaySteps)
	}
	return nil
}

// stateNames lists the per-parameter state of an optimizer configuration (PyTorch's names).
func (c optConfig) stateNames() []string {
	switch {
	case c.kind == "adamw":
		return []string{"exp_avg", "exp_avg_sq"}
	case c.momentum != 0:
		return []string{"momentum_buffer"}
	}
	return nil
}

// Microbatches returns the module's micro-batch count M (default 1).
func Microbatches(m *ir.Module) (int, error) {
	a := m.Attrs.Get(AttrMicrobatches)
	if a == nil {
		return 1, nil
	}
	n, ok := a.(ir.Int)
	if !ok || n < 1 {
		return 0, fmt.Errorf("module attribute %s must be a positive integer, got %s", AttrMicrobatches, ir.AttrString(a))
	}
	return int(n), nil
}

// optParam is one parameter's arguments in @optimizer.
type optParam struct {
	p, g  *ir.Value
	main  *ir.Value // the fp32 main parameter (state) of a 16-bit {main_param} parameter
	state []*ir.Value
	names []string // state names, parallel to state
	zero  bool     // updated by blocks over dp (ZeRO)
}

// AttrZero (int, on @optimizer) is the ZeRO stage its updates are split by: 1 (the gradient
// accumulates whole and is reduce-scattered before the update), 2 (each micro-batch's
// gradient is reduce-scattered and only the block accumulates) or 3 (as 2, and the parameter
// itself is held as its block, gathered where a per-stage function reads it: param-gather).
const AttrZero = "zero"

// zeroBlocks maps each parameter whose optimizer update ZeRO splits over dp — @optimizer's
// gradient argument is a block over dp — to the ZeRO stage, and returns the mesh's dp size.
func zeroBlocks(m *ir.Module) (map[string]int, int) {
	out := map[string]int{}
	dp := meshSize(m, "dp")
	f := m.Func(OptimizerFunc)
	if f == nil {
		return out, dp
	}
	stage := f.Attrs.Int(AttrZero, 0)
	for i := range f.Args {
		name := f.ArgAttrs[i].Str(ir.AttrGrad, "")
		if s, _ := ir.ArgSharding(f, i); name != "" && s != nil && s.Uses("dp") {
			out[name] = stage
		}
	}
	return out, dp
}

// ZeroBlockRows is the rows of a ZeRO block of a dim of the given rows split over dp: all
// of them padded to a multiple of dp (FSDP's and Megatron's distributed optimizer's
// padding), ceil(rows/dp).
func ZeroBlockRows(rows, dp int) int { return (rows + dp - 1) / dp }

// zeroBlock is this dp replica's block of dim 0 of p, n rows: the rows axis_index(dp)·n …
// of p padded with zeros to n·dp rows when dp does not divide its rows.
func zeroBlock(b *ir.Builder, p *ir.Value, n, dp int) *ir.Value {
	if extra := n*dp - p.Type.Shape[0]; extra > 0 {
		pads := make([]int, 2*p.Type.Rank())
		pads[p.Type.Rank()] = extra
		p = b.Op1("pad", ir.Attrs{{Name: "pads", Value: ir.Ints(pads...)}}, p)
	}
	off := b.Mul(b.Op1("axis_index", ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}}), b.Scalar(ir.I64, float64(n)))
	idx := b.Add(b.Op1("iota", ir.Attrs{{Name: "axis", Value: ir.Int(0)}, {Name: "type", Value: ir.TypeAttr(ir.T(ir.I64, n))}}), off)
	return b.Op1("gather", ir.Attrs{{Name: "axis", Value: ir.Int(0)}}, p, idx)
}

// zeroSharding is the sharding of a ZeRO block of a tensor of the given rank laid out as
// shard: dp splits dim 0, innermost (after tp, when tp splits dim 0 too).
func zeroSharding(shard ir.Attr, rank int) *ir.Sharding {
	s := &ir.Sharding{Dims: make([][]string, rank)}
	if shard != nil {
		if t, err := ir.ShardingFromAttr(shard); err == nil && len(t.Dims) == rank {
			for i, d := range t.Dims {
				s.Dims[i] = slices.Clone(d)
			}
		}
	}
	s.Dims[0] = append(s.Dims[0], "dp")
	return s
}

func addOptimizer(m *ir.Module, c optConfig) error {
	train := m.Func(TrainFunc)
	if train == nil {
		return fmt.Errorf("optimizer: the module has no @%s function; run autodiff first", TrainFunc)
	}
	errf := func(format string, args ...any) error {
		return ir.ErrorAt(m.Source, train.Loc, "optimizer: "+format, args...)
	}
	if m.Func(OptimizerFunc) != nil {
		return errf("the module already has an @%s function", OptimizerFunc)
	}
	nmb, err := Microbatches(m)
	if err != nil {
		return errf("%v", err)
	}
	// Each of the dp replicas accumulates M micro-batches and the replicas' sums are
	// all-reduced: the gradient is a sum over M·dp micro-batches, the global batch.
	dp := 1
	for _, a := range m.Mesh() {
		if a.Name == "dp" {
			dp = a.Size
		}
	}
	nmb *= dp
	hasGrad := map[string]bool{}
	for _, ra := range train.ResultAttrs {
		if name := ra.Str(ir.AttrGrad, ""); name != "" {
			hasGrad[name] = true
		}
	}
	f := ir.NewFunc(OptimizerFunc)
	f.Loc = train.Loc
	var ps []optParam
	for _, p := range train.Params() {
		if !hasGrad[p.Name] {
			return errf("@%s returns no gradient for parameter %%%s", TrainFunc, p.Name)
		}
		ct := computeType(p.Type)
		// A tensor-parallel shard of a parameter has the same shard of gradient and state:
		// they carry its shard attribute, so that code generation lays them out (and
		// checkpoints merge them) as the parameter.
		var shard ir.Attr
		if m.Attrs.Has(ir.AttrPartitioned) { // elsewhere a shard is a request, shapes are whole
			shard = train.ArgAttrs[p.Index].Get(ir.AttrShard)
		}
		// A padded parameter (pad-vocab) keeps its user-visible shape on its state too, which
		// checkpoints hold unpadded likewise.
		unpadded := train.ArgAttrs[p.Index].Get(ir.AttrUnpadded)
		laidOut := func(as ir.Attrs) ir.Attrs {
			if shard != nil {
				as = as.Set(ir.AttrShard, shard)
			}
			if unpadded != nil {
				as = as.Set(ir.AttrUnpadded, unpadded)
			}
			return as
		}
		gAttrs := laidOut(ir.Attrs{{Name: ir.AttrGrad, Value: ir.String(p.Name)}})
		st, stShard := ct, shard
		// An expert shard (ep-partition) is not ZeRO's: its replicas are the edp ranks, not dp.
		expert := false
		if shard != nil {
			s, _ := ir.ShardingFromAttr(shard)
			expert = s.Uses(EPAxis)
		}
		// Every parameter with a first dim is split, whether or not dp divides it: each rank
		// holds ceil(rows/dp) rows, the last ranks' blocks padded with zeros (zero_rows), as
		// FSDP and Megatron's distributed optimizer pad. The padding's gradient, state and
		// update stay exactly zero (a zero gradient moves neither AdamW nor SGD from zero).
		zero := c.zero >= 1 && dp > 1 && ct.Rank() >= 1 && !expert
		gt := ct
		var zeroRows ir.Attr // the rows a padded block splits (nil: dp divides them)
		pa := train.ArgAttrs[p.Index]
		main := pa.Has(AttrMainParam)
		if main && c.gradDType == p.Type.DType {
			gt.DType = p.Type.DType // gradients accumulated and reduced in 16 bits
		}
		if zero {
			// ZeRO: the state is this replica's block of dim 0 (inside the tp block, when tp
			// splits dim 0 too: the dp axis comes second, innermost).
			st.Shape = slices.Clone(ct.Shape)
			st.Shape[0] = ZeroBlockRows(ct.Shape[0], dp)
			stShard = zeroSharding(shard, ct.Rank()).Attr()
			gt.Shape = st.Shape // the gradient arrives as the block of the global sum
			gAttrs = gAttrs.Set(ir.AttrShard, stShard)
			if ct.Shape[0]%dp != 0 {
				zeroRows = ir.Int(ct.Shape[0])
				gAttrs = gAttrs.Set(ir.AttrZeroRows, zeroRows)
			}
			f.Attrs = f.Attrs.Set(AttrZero, ir.Int(c.zero))
		}
		pt, pAttrs := p.Type, laidOut(ir.Attrs{{Name: ir.AttrParam, Value: ir.Unit{}}})
		if zero && c.zero == 3 {
			// ZeRO-3: the parameter is held as its block, laid out as its state.
			pt.Shape = slices.Clone(pt.Shape)
			pt.Shape[0] = st.Shape[0]
			pAttrs = pAttrs.Set(ir.AttrShard, stShard)
			if zeroRows != nil {
				pAttrs = pAttrs.Set(ir.AttrZeroRows, zeroRows)
			}
		}
		op := optParam{
			p:    f.AddArg(p.Name, pt, pAttrs),
			g:    f.AddArg("d."+p.Name, gt, gAttrs),
			zero: zero,
		}
		if main {
			// The fp32 main parameter: state, a dp block under ZeRO (Megatron's distributed
			// optimizer shards it with the moments), starting where the parameter starts.
			as := laidOut(ir.Attrs{{Name: AttrState, Value: ir.String(MainParamState(p.Name))}, {Name: AttrMainParam, Value: ir.Unit{}}})
			if stShard != nil {
				as = as.Set(ir.AttrShard, stShard)
			}
			if zeroRows != nil {
				as = as.Set(ir.AttrZeroRows, zeroRows)
			}
			if d := pa.Get(ir.AttrData); d != nil {
				as = as.Set(ir.AttrData, d)
			} else {
				as = as.Set(ir.AttrInit, ir.String(pa.Str(ir.AttrInit, "zeros")))
			}
			op.main = f.AddArg(MainParamState(p.Name), st, as.Sorted())
		}
		for _, s := range c.stateNames() {
			name := p.Name + "." + s
			op.names = append(op.names, name)
			as := ir.Attrs{{Name: ir.AttrInit, Value: ir.String("zeros")}, {Name: AttrState, Value: ir.String(name)}}
			if stShard != nil {
				as = as.Set(ir.AttrShard, stShard)
			}
			if unpadded != nil {
				as = as.Set(ir.AttrUnpadded, unpadded)
			}
			if zeroRows != nil {
				as = as.Set(ir.AttrZeroRows, zeroRows)
			}
			op.state = append(op.state, f.AddArg(name, st, as))
		}
		ps = append(ps, op)
	}
	step := f.AddArg("step", ir.T(ir.F32), ir.Attrs{{Name: AttrStep, Value: ir.Unit{}}})
	// Under loss scaling a step may be skipped, and torch.optim then skips AdamW's own
	// count too (GradScaler does not call optimizer.step()), while the learning-rate schedule
	// still follows the steps run (the scheduler steps every iteration). So AdamW's bias
	// correction reads a count of its own, global state the loss-scale pass keeps on a
	// skipped step like every other.
	var ownStep *ir.Value
	if c.kind == "adamw" && slices.ContainsFunc(train.ArgAttrs, func(a ir.Attrs) bool { return a.Has(AttrLossScale) }) {
		ownStep = f.AddArg(ScalerOptimizerStep, ir.T(ir.F32), ir.Attrs{{Name: AttrGlobal, Value: ir.Unit{}},
			{Name: ir.AttrInit, Value: ir.String("zeros")}, {Name: AttrState, Value: ir.String(ScalerOptimizerStep)}}.Sorted())
	}
	var sumsq *ir.Value
	if c.clip > 0 {
		sumsq = f.AddArg("grad_sumsq", ir.T(ir.F32), ir.Attrs{{Name: AttrGradSumSq, Value: ir.Unit{}}})
	}

	b := ir.NewBuilder(f)
	b.Phase = ir.Opt
	ob := &optBuilder{b: b, c: c, step: step, adamStep: step, sumsq: sumsq, nmb: nmb, scalars: map[ir.DType]*adamScalars{}, consts: map[optConst]*ir.Value{}}
	if ownStep != nil {
		ob.adamStep = b.Add(ownStep, ob.k(ir.F32, 1)) // 1-based, as %step
		ob.adamStep.Name = "new." + ScalerOptimizerStep
	}
	for _, op := range ps {
		g := op.g
		ct := computeType(op.p.Type).DType
		if g.Type.DType != ct {
			g = b.Cast(g, ct) // a 16-bit gradient, updated in fp32
		}
		p := op.p
		switch {
		case op.main != nil:
			p = op.main // already this replica's block under ZeRO
		case op.zero && c.zero < 3:
			if p.Type.DType != ct {
				p = b.Cast(p, ct)
			}
			p = zeroBlock(b, p, g.Type.Shape[0], dp) // this replica's block, as its gradient is
		case p.Type.DType != ct:
			p = b.Cast(p, ct)
		}
		if nmb != 1 {
			g = b.Div(g, ob.k(ct, float64(nmb)))
		}
		if c.clip > 0 {
			g = b.Mul(g, ob.clipCoef(ct))
		}
		var newP *ir.Value
		var newState []*ir.Value
		if c.kind == "adamw" {
			newP, newState = ob.adamw(p, g, op.state[0], op.state[1])
		} else {
			newP, newState = ob.sgd(p, g, op.state)
		}
		if op.main != nil {
			newP.Name = "new." + op.main.Name
			f.AddResult(newP, ir.Attrs{{Name: AttrUpdate, Value: ir.String(MainParamState(op.p.Name))}})
		}
		if newP.Type.DType != op.p.Type.DType {
			newP = b.Cast(newP, op.p.Type.DType) // the 16-bit parameter, once per step
		}
		newP.Name = "new." + op.p.Name
		f.AddResult(newP, ir.Attrs{{Name: AttrUpdate, Value: ir.String(op.p.Name)}})
		for i, s := range newState {
			s.Name = "new." + op.names[i]
			f.AddResult(s, ir.Attrs{{Name: AttrUpdate, Value: ir.String(op.names[i])}})
		}
	}
	if ownStep != nil {
		f.AddResult(ob.adamStep, ir.Attrs{{Name: AttrUpdate, Value: ir.String(ScalerOptimizerStep)}})
	}
	if c.clip > 0 {
		// The step's norm and whether it clipped, for the logs (every rank computes them).
		ob.clipCoef(ir.F32)
		clipped := b.Op1("where", nil, b.Op1("less", nil, ob.coef, ob.k(ir.F32, 1)), ob.k(ir.F32, 1), ob.k(ir.F32, 0))
		f.AddResult(ob.norm, ir.Attrs{{Name: AttrMetric, Value: ir.String(MetricGradNorm)}})
		f.AddResult(clipped, ir.Attrs{{Name: AttrMetric, Value: ir.String(MetricClipped)}})
	}
	if err := b.Err(); err != nil {
		return errf("%v", err)
	}
	m.Funcs = append(m.Funcs, f)
	if c.gradDType != ir.F32 {
		m.Attrs = m.Attrs.Set(AttrGradDType, ir.String(c.gradDType.String()))
	}
	return nil
}

// AttrGradDType (string, on the module) is the 16-bit dtype in which the rank programs
// accumulate and reduce the gradients of parameters of that dtype (absent: fp32); the
// optimizer pass sets it from its grad_dtype option, code generation reads it.
const AttrGradDType = "grad_dtype"

// computeType is the type gradients, state and update math use for a parameter of type t:
// f32, or f64 for an f64 parameter.
func computeType(t ir.Type) ir.Type {
	if t.DType == ir.F64 {
		return t
	}
	return ir.Type{DType: ir.F32, Shape: t.Shape}
}

type optBuilder struct {
	b    *ir.Builder
	c    optConfig
	step *ir.Value
	// adamStep is the count AdamW's bias correction reads: %step, or under loss scaling
	// its own count of the steps taken.
	adamStep *ir.Value
	lrv      *ir.Value // the scheduled learning rate (f64), once built
	sumsq    *ir.Value // clipping: the global sum of squares of the gradients
	nmb      int       // micro-batches per step (the gradients are sums over them)
	coef     *ir.Value // clipping: the f32 factor every gradient is multiplied by, once built
	norm     *ir.Value // clipping: the global norm of the mean gradient
	scalars  map[ir.DType]*adamScalars
	consts   map[optConst]*ir.Value
}

type optConst struct {
	dt ir.DType
	v  float64
}

// adamScalars are AdamW's per-step scalars, shared by every parameter of one dtype.
type adamScalars struct{ stepSize, bc2Sqrt *ir.Value }

// k returns a scalar constant, built once per dtype and value and shared by every parameter.
func (o *optBuilder) k(dt ir.DType, v float64) *ir.Value {
	key := optConst{dt, v}
	if c := o.consts[key]; c != nil {
		return c
	}
	c := scalarConst(o.b, dt, v)
	o.consts[key] = c
	return c
}

// clipCoef is clip_grad_norm_'s factor min(1, clip/(‖g‖ + 1e-6)) in dt, ‖g‖ the global norm
// of the mean gradient: √sumsq/M for gradients summed over M micro-batches. f32, as torch
// computes it for f32 gradients.
func (o *optBuilder) clipCoef(dt ir.DType) *ir.Value {
	b := o.b
	if o.coef == nil {
		norm := b.Unary("sqrt", o.sumsq)
		if o.nmb != 1 {
			norm = b.Div(norm, o.k(ir.F32, float64(o.nmb)))
		}
		norm.Name = "grad_norm"
		coef := b.Op1("min", nil, b.Div(o.k(ir.F32, o.c.clip), b.Add(norm, o.k(ir.F32, 1e-6))), o.k(ir.F32, 1))
		coef.Name = "clip_coef"
		o.norm, o.coef = norm, coef
	}
	if dt != ir.F32 {
		return b.Cast(o.coef, dt)
	}
	return o.coef
}

// lr is the step's learning rate, an f64 scalar: the constant lr, or the schedule computed
// from %step (ScheduledLR, whose operations it mirrors one for one).
func (o *optBuilder) lr() *ir.Value {
	c, b := o.c, o.b
	if !c.scheduled() {
		return o.k(ir.F64, c.lr)
	}
	if o.lrv != nil {
		return o.lrv
	}
	t := b.Cast(o.step, ir.F64)
	f64 := func(v float64) *ir.Value { return o.k(ir.F64, v) }
	after := f64(c.lr)
	if c.schedule != "constant" {
		p := b.Div(b.Sub(t, f64(float64(c.warmup))), f64(float64(c.decaySteps-c.warmup)))
		p = b.Op1("min", nil, b.Op1("max", nil, p, f64(0)), f64(1))
		var f *ir.Value
		if c.schedule == "linear" {
			f = b.Sub(f64(1), p)
		} else {
			f = b.Mul(f64(0.5), b.Add(f64(1), b.Unary("cos", b.Mul(f64(math.Pi), p))))
		}
		after = b.Add(f64(c.minLR), b.Mul(f64(c.lr-c.minLR), f))
	}
	if c.warmup > 0 {
		warm := b.Div(b.Mul(f64(c.lr), t), f64(float64(c.warmup)))
		after = b.Op1("where", nil, b.Op1("less", nil, t, f64(float64(c.warmup)+0.5)), warm, after)
	}
	after.Name = "lr"
	o.lrv = after
	return after
}

// lrIn is the step's learning rate in dt, and 1 − lr·wd (AdamW's decay factor) likewise.
func (o *optBuilder) lrIn(dt ir.DType) *ir.Value {
	if !o.c.scheduled() {
		return o.k(dt, o.c.lr)
	}
	return o.b.Cast(o.lr(), dt)
}

func (o *optBuilder) decayIn(dt ir.DType) *ir.Value {
	c := o.c
	if !c.scheduled() {
		return o.k(dt, 1-c.lr*c.weightDecay)
	}
	return o.b.Cast(o.b.Sub(o.k(ir.F64, 1), o.b.Mul(o.lr(), o.k(ir.F64, c.weightDecay))), dt)
}

// adamScalars computes, in f64 from AdamW's step count t, step_size = lr/(1 − β1^t) and
// √(1 − β2^t), rounded once to dt — as PyTorch computes them in Python floats.
func (o *optBuilder) adamScalars(dt ir.DType) *adamScalars {
	if s := o.scalars[dt]; s != nil {
		return s
	}
	b := o.b
	t := b.Cast(o.adamStep, ir.F64)
	one := o.k(ir.F64, 1)
	bc1 := b.Sub(one, b.Op1("pow", nil, o.k(ir.F64, o.c.beta1), t))
	bc2 := b.Sub(one, b.Op1("pow", nil, o.k(ir.F64, o.c.beta2), t))
	s := &adamScalars{stepSize: b.Div(o.lr(), bc1), bc2Sqrt: b.Unary("sqrt", bc2)}
	if dt != ir.F64 {
		s.stepSize, s.bc2Sqrt = b.Cast(s.stepSize, dt), b.Cast(s.bc2Sqrt, dt)
	}
	s.stepSize.Name, s.bc2Sqrt.Name = "step_size", "bias_correction2_sqrt" // PyTorch's names
	o.scalars[dt] = s
	return s
}

// adamw is one torch.optim.AdamW step (single-tensor, non-amsgrad, not maximising).
func (o *optBuilder) adamw(p, g, m, v *ir.Value) (*ir.Value, []*ir.Value) {
	b, c, dt := o.b, o.c, g.Type.DType
	if c.lr*c.weightDecay != 0 {
		p = b.Mul(p, o.decayIn(dt)) // param.mul_(1 - lr*weight_decay)
	}
	m1 := b.Add(m, b.Mul(b.Sub(g, m), o.k(dt, 1-c.beta1)))                          // exp_avg.lerp_(grad, 1 - beta1)
	v1 := b.Add(b.Mul(v, o.k(dt, c.beta2)), b.Mul(b.Mul(g, o.k(dt, 1-c.beta2)), g)) // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
	s := o.adamScalars(dt)
	denom := b.Add(b.Div(b.Unary("sqrt", v1), s.bc2Sqrt), o.k(dt, c.eps)) // (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
	p1 := b.Sub(p, b.Mul(b.Div(m1, denom), s.stepSize))                   // param.addcdiv_(exp_avg, denom, value=-step_size)
	return p1, []*ir.Value{m1, v1}
}

// sgd is one torch.optim.SGD step (no dampening, no Nesterov, not maximising).
func (o *optBuilder) sgd(p, g *ir.Value, state []*ir.Value) (*ir.Value, []*ir.Value) {
	b, c, dt := o.b, o.c, g.Type.DType
	if c.weightDecay != 0 {
		g = b.Add(g, b.Mul(p, o.k(dt, c.weightDecay))) // grad.add(param, alpha=weight_decay)
	}
	var out []*ir.Value
	if c.momentum != 0 {
		g = b.Add(b.Mul(state[0], o.k(dt, c.momentum)), g) // buf.mul_(momentum).add_(grad)
		out = append(out, g)
	}
	return b.Sub(p, b.Mul(g, o.lrIn(dt))), out // param.add_(buf, alpha=-lr)
}
