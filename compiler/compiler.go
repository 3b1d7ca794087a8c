package compiler

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/schedule"
)

// Options describe one compile.
type Options struct {
	// Model loading (see Load).
	Load LoadOptions
	// Parallelism and schedule.
	PP            int
	TP            int  // tensor-parallel ranks per stage
	SP            bool // sequence parallelism over the tp ranks
	DP            int  // data-parallel replicas
	Zero          int  // ZeRO stage (0, 1 or 2) over the dp replicas
	Microbatches  int
	Schedule      string // generator name, or a .csv file in PyTorch's format
	VirtualStages int
	Partition     string // markers, layout or auto ("": markers when the model has any, else auto)
	Layout        string // for Partition == "layout"
	Mem           int64  // bytes per device for auto partitioning (0: unlimited)
	// Recompute: none, selective or full.
	Recompute string
	// TokenSlices cuts each micro-batch's sequence into slices (TeraPipe): "" (none), a
	// count N (near-equal slices, longer first), explicit lengths "120,120,112", or "auto"
	// (the slicing the cost model predicts fastest; see PlanTokenSlices).
	TokenSlices string
	// GPU names the device profile the cost model's estimates assume (passes.Devices; ""
	// the default a100-like).
	GPU string
	// MaxInflight bounds the micro-batches a zb-auto schedule keeps in flight per rank (0:
	// the pipeline depth, ZB-H1's memory).
	MaxInflight int
	// zbCost are the stage costs a zb-auto schedule is built for (from a probe compile).
	zbCost *schedule.Cost
	// StopAfter makes Compile return the module right after the named pass, "partition"
	// (the probe that prices token slices for --token-slices auto and zb-auto's stages) or
	// "split-stages" (the planner's probe of stashes), without code generation.
	StopAfter string
	// recomputeModes, with StopAfter "split-stages", splits one probe once per mode
	// (ProbeSplit).
	recomputeModes []string
	// Training.
	ForwardOnly bool
	Loss        string // models without a loss (ONNX models without a scalar output named loss): "ce", "mse", or with options as ce{axis=1} (see CheckLoss)
	LossOutput  int
	Optimizer   string // pass options, e.g. "adamw" or "sgd{lr=0.1}"
	// Precision is the compute dtype: fp32 (or ""), bf16 or fp16 (mixed precision: fp32
	// master weights, gradients and optimizer state; fp16 with dynamic loss scaling).
	Precision string
	// Pass manager.
	Passes passes.Config
}

// Result is a compiled job.
type Result struct {
	Module *ir.Module
	// Probes are ProbeSplit's modules, one per recompute mode.
	Probes   []*ir.Module
	Output   *codegen.Output
	Schedule *schedule.Schedule // as generated, or as read from a CSV file (its Dialect says how)
}

// Compile loads the model and produces the job in memory.
func Compile(model string, opts Options) (*Result, error) {
	res, err := compile(model, opts)
	if err != nil && opts.PP > 1 {
		// A pipeline deeper than the model can be cut is the first thing to fix. The batch
		// division and the schedule are checked before partitioning, and asking for
		// --pp 100000 would otherwise be answered with a batch size or a micro-batch count
		// to try, which cannot help; say how many stages the model has instead.
		if serr := stageCountError(model, opts); serr != nil {
			return nil, serr
		}
	}
	return res, err
}

// stageCountError partitions the model alone (one micro-batch, no schedule) into opts.PP ×
// opts.VirtualStages stages and returns the partition pass's error, or nil when the model
// has stages enough (or cannot be loaded that way: the compile's own error stands).
func stageCountError(model string, opts Options) error {
	lo := opts.Load
	lo.Microbatches, lo.Replicas = 1, 1
	m, _, err := Load(model, lo)
	if err != nil || m.Func(ir.ForwardFunc) == nil {
		return nil
	}
	part := fmt.Sprintf("partition{pp=%d,virtual=%d", opts.PP, max(opts.VirtualStages, 1))
	if opts.Partition != "" {
		part += ",mode=" + opts.Partition
	}
	if opts.Layout != "" {
		part += `,layout="` + opts.Layout + `"`
	}
	pl, err := passes.ParsePipeline("canonicalize,cse,dce," + part + "}")
	if err != nil {
		return nil
	}
	err = passes.Run(m, pl, passes.Config{NoReproducer: true})
	var pe *passes.PassError
	if errors.As(err, &pe) && pe.Pass == "partition" && !pe.Internal {
		return err
	}
	return nil
}

func compile(model string, opts Options) (*Result, error) {
	if opts.PP < 1 {
		opts.PP = 1
	}
	opts.TP, opts.DP = max(opts.TP, 1), max(opts.DP, 1)
	fromModel := false
	if opts.Microbatches < 1 {
		// Not given: a CSV schedule says how many micro-batches it runs (a bad file is
		// reported by loadSchedule below); else an IR file's `microbatches` attribute, read
		// once the file is loaded; else 1.
		opts.Microbatches = 1
		fromModel = true
		if schedule.IsCSVName(opts.Schedule) {
			if s, err := schedule.ReadCSVFile(opts.Schedule); err == nil {
				opts.Microbatches = s.Microbatches
				fromModel = false
			}
		}
	}
	// Check the optimizer spec before anything is compiled: a typo in a flag is not a
	// failure of the optimizer pass (which would leave a reproducer behind).
	optStep := ""
	if !opts.ForwardOnly {
		var err error
		if optStep, err = optimizerStep(opts.Optimizer); err != nil {
			return nil, err
		}
	}
	precision := ir.F32
	if opts.Precision != "" {
		var err error
		if precision, err = passes.ParsePrecision(opts.Precision); err != nil {
			return nil, err
		}
	}
	lo := opts.Load
	// The model's batch is the global batch: each of the dp replicas runs M micro-batches of
	// it, so the frontend cuts it into M·dp micro-batches.
	lo.Microbatches, lo.Replicas = opts.Microbatches*opts.DP, opts.DP
	m, src, err := Load(model, lo)
	if err != nil {
		return nil, err
	}
	if n := m.Attrs.Int("microbatches", 0); fromModel && n >= 1 && strings.HasSuffix(model, ".ir") {
		// IR text describes one micro-batch and may say how many a step runs (the parser
		// has checked the value); --microbatches, when given, overrides it.
		opts.Microbatches = n
	}
	if m.Name == "" {
		// IR text may leave the module unnamed; the plan and summaries name the file.
		m.Name = strings.TrimSuffix(filepath.Base(model), filepath.Ext(model))
	}
	fwd := m.Func(ir.ForwardFunc)
	if fwd == nil {
		return nil, fmt.Errorf("%s: the model has no func @%s (its forward pass) to compile", model, ir.ForwardFunc)
	}
	hasLoss := false
	for _, ra := range fwd.ResultAttrs {
		hasLoss = hasLoss || ra.Has(ir.AttrLoss)
	}
	if opts.ForwardOnly {
		addPrediction(fwd)
	}
	lossOpts, err := lossStep(opts.Loss, opts.LossOutput)
	if err != nil && !opts.ForwardOnly {
		return nil, err
	}
	switch {
	case hasLoss && !opts.ForwardOnly && (opts.Loss != "" || opts.LossOutput != 0):
		// Refused rather than ignored: the flag would not say which loss trains.
		return nil, fmt.Errorf("%s: the model computes its own loss; --loss and --loss-output apply to models without one (an ONNX model's scalar output named loss is its loss)", model)
	case !hasLoss && !opts.ForwardOnly && (opts.LossOutput < 0 || opts.LossOutput >= len(fwd.Results)):
		return nil, fmt.Errorf("%s: --loss-output %d: the model has %d output(s), numbered from 0", model, opts.LossOutput, len(fwd.Results))
	case !hasLoss && !opts.ForwardOnly && !fwd.Results[opts.LossOutput].Type.DType.IsFloat():
		return nil, fmt.Errorf("%s: output %d is %s; a loss needs a floating-point output (choose another with --loss-output, or compile inference with --forward-only)",
			model, opts.LossOutput, fwd.Results[opts.LossOutput].Type)
	}
	if !opts.ForwardOnly && !hasLoss {
		if err := checkLossOutput(model, fwd, opts.LossOutput, lossOpts); err != nil {
			return nil, err
		}
	}
	if !opts.ForwardOnly && len(fwd.Params()) == 0 {
		return nil, noParamsError(model, fwd)
	}
	m.Attrs = m.Attrs.Set("microbatches", ir.Int(opts.Microbatches))
	if opts.GPU != "" {
		dev, err := passes.ParseDevice(opts.GPU)
		if err != nil {
			return nil, fmt.Errorf("--gpu: %v", err)
		}
		m.Attrs = m.Attrs.Set(passes.AttrDevice, ir.String(dev.Name))
	}
	userSchedule := opts.Schedule
	if schedule.CostAware(opts.Schedule) && opts.zbCost == nil && opts.StopAfter == "" && strings.TrimSpace(opts.TokenSlices) != "auto" {
		// zb-auto and zb-h2 are built for the stages' costs: partition once to learn them
		// (a probe compile), then compile with the schedule made for them.
		probe := opts
		probe.StopAfter, probe.TokenSlices = "partition", ""
		pr, err := Compile(model, probe)
		if err != nil {
			return nil, err
		}
		cost, err := partitionCosts(pr.Module)
		if err != nil {
			return nil, err
		}
		again := opts
		again.zbCost = &cost
		return Compile(model, again)
	}
	if opts.TokenSlices != "" && opts.Schedule == "" && opts.Microbatches < opts.PP {
		// The default 1F1B needs a micro-batch per rank; token slices fill the pipeline
		// with fewer, in GPipe's order (TeraPipe's schedule).
		opts.Schedule = "gpipe"
	}
	if strings.TrimSpace(opts.TokenSlices) == "auto" && opts.StopAfter == "" {
		// TeraPipe's dynamic program on the cost model, over the partitioned model: a probe
		// compile stops after partitioning; without --microbatches the micro-batch count is
		// chosen with the slices (the batch/token split of the paper), and the compile
		// starts again with both fixed.
		probe := opts
		probe.StopAfter, probe.TokenSlices = "partition", ""
		if fromModel {
			probe.Microbatches = 1
		}
		pr, err := Compile(model, probe)
		if err != nil {
			return nil, err
		}
		dev, err := passes.ModuleDevice(pr.Module)
		if err != nil {
			return nil, err
		}
		tp, err := passes.PlanTokens(pr.Module, dev, "auto", fromModel)
		if err != nil {
			return nil, fmt.Errorf("%s: --token-slices auto: %v", model, err)
		}
		again := opts
		again.TokenSlices, again.Microbatches, again.Schedule = joinInts(tp.Lengths), tp.Microbatches, userSchedule
		if len(tp.Lengths) == 1 {
			again.TokenSlices = "1" // one slice: the sequence whole (a lone length would read as a count)
		}
		res, err := Compile(model, again)
		if err != nil {
			return nil, err
		}
		if p := res.Output.Plan.TokenPlan; p != nil {
			p.Auto = true
		}
		return res, nil
	}
	pipeline := []string{"canonicalize", "cse", "dce"}
	if !opts.ForwardOnly && !hasLoss {
		pipeline = append(pipeline, lossOpts.String())
	}
	if precision != ir.F32 {
		// Before sharding and partitioning, so that they and the cost model see the real
		// dtypes and byte sizes.
		pipeline = append(pipeline, fmt.Sprintf("precision{dtype=%s}", precision))
	}
	// The schedule decides how many stages each rank holds (interleaved and V-shaped
	// schedules default to two), so build it before partitioning.
	sched, err := loadSchedule(&opts)
	if err != nil {
		return nil, err
	}
	// The device mesh, in the axis names shardings and collectives use (ir.MeshOrder numbers
	// the ranks: tp fastest, pp slowest).
	if err := setMesh(m, model, sched.Ranks, opts); err != nil {
		return nil, err
	}
	if opts.TP > 1 && !m.Attrs.Has(ir.AttrPartitioned) {
		// Tensor (and sequence) parallelism: each stage becomes the program of one tp rank
		// before pipeline partitioning, so stages, costs and autodiff see local shapes.
		pipeline = append(pipeline, "shard-annotate", fmt.Sprintf("shard-propagate{sp=%t}", opts.SP), "spmd-partition")
	}
	part := fmt.Sprintf("partition{pp=%d,virtual=%d,mem=%d", sched.Ranks, sched.Stages/sched.Ranks, opts.Mem)
	if opts.Partition != "" {
		part += ",mode=" + opts.Partition
	}
	if opts.Layout != "" {
		part += `,layout="` + opts.Layout + `"`
	}
	pipeline = append(pipeline, part+"}")
	if opts.StopAfter == "partition" {
		return runProbe(m, pipeline, sched)
	}
	var slices []int
	if opts.TokenSlices != "" {
		if opts.SP {
			return nil, fmt.Errorf("--token-slices with --sp: sequence parallelism already splits the sequence over the tp ranks; use one or the other")
		}
		T, err := passes.SequenceLength(fwd)
		if err != nil {
			return nil, fmt.Errorf("%s: --token-slices: %v", model, err)
		}
		if slices, err = ResolveTokenSlices(opts.TokenSlices, T); err != nil {
			return nil, err
		}
		pipeline = append(pipeline, fmt.Sprintf("token-slice{lengths=%q}", joinInts(slices)))
	}
	if !opts.ForwardOnly {
		if opts.Zero > 0 {
			optStep = strings.TrimSuffix(optStep, "}") + fmt.Sprintf(",zero=%d}", opts.Zero)
			if !strings.Contains(optStep, "{") {
				optStep = fmt.Sprintf("optimizer{zero=%d}", opts.Zero)
			}
		}
		pipeline = append(pipeline, "autodiff", optStep)
		if precision == ir.F16 {
			pipeline = append(pipeline, "loss-scale")
		}
		pipeline = append(pipeline, "cse", "dce")
	}
	split := "split-stages"
	if opts.Recompute != "" && opts.Recompute != "none" {
		split = fmt.Sprintf("split-stages{recompute=%s}", opts.Recompute)
	}
	if opts.StopAfter == "split-stages" && len(opts.recomputeModes) > 0 {
		// One probe up to split-stages, split once per recompute mode.
		res, err := runProbe(m, pipeline, sched)
		if err != nil {
			return nil, err
		}
		for _, mode := range opts.recomputeModes {
			c := m.Clone()
			if _, err := runProbe(c, []string{fmt.Sprintf("split-stages{recompute=%s}", mode)}, sched); err != nil {
				return nil, err
			}
			res.Probes = append(res.Probes, c)
		}
		return res, nil
	}
	pipeline = append(pipeline, split)
	if opts.StopAfter == "split-stages" {
		return runProbe(m, pipeline, sched)
	}
	// Each pipeline rank's step as IR (send/recv explicit), which code generation lowers.
	if len(slices) > 1 {
		if sched, err = schedule.SliceTokens(sched, len(slices)); err != nil {
			return nil, err
		}
	}
	cs, err := codegenSchedule(sched, sched.Stages)
	if err != nil {
		return nil, err
	}
	passes.SetSchedule(m, cs.Placement, cs.Actions)
	pipeline = append(pipeline, "rank-programs")
	if !opts.ForwardOnly {
		pipeline = append(pipeline, "grad-reduce", "tied-grads", "rank-optimizer")
	}
	pl, err := passes.ParsePipeline(strings.Join(pipeline, ","))
	if err != nil {
		return nil, err
	}
	if err := passes.Run(m, pl, opts.Passes); err != nil {
		return nil, err
	}
	if err := checkKernels(m); err != nil {
		return nil, err
	}
	if _, err := codegenSchedule(sched, m.Attrs.Int("stages", 1)); err != nil {
		return nil, err
	}
	optName := ""
	if !opts.ForwardOnly {
		optName = opts.Optimizer
		if optName == "" {
			optName = "adamw"
		}
	}
	out, err := codegen.Generate(m, codegen.Options{Schedule: cs, Optimizer: optName, Source: modelIdentity(src, lo), Recompute: opts.Recompute})
	if err != nil {
		return nil, err
	}
	if est, err := estimate(sched, out.Plan); err == nil {
		out.Plan.Estimate = est
	}
	return &Result{Module: m, Output: out, Schedule: sched}, nil
}

// ProbeSplit compiles the model up to split-stages once and splits it once per recompute
// mode, returning the modules in the modes' order: the planner's probe of stage costs,
// stashes and recomputation without compiling the model three times.
func ProbeSplit(model string, opts Options, modes []string) ([]*ir.Module, error) {
	opts.StopAfter, opts.recomputeModes, opts.Recompute = "split-stages", modes, ""
	res, err := Compile(model, opts)
	if err != nil {
		return nil, err
	}
	return res.Probes, nil
}

// runProbe runs pipeline on m for a probe compile (StopAfter).
func runProbe(m *ir.Module, pipeline []string, sched *schedule.Schedule) (*Result, error) {
	pl, err := passes.ParsePipeline(strings.Join(pipeline, ","))
	if err != nil {
		return nil, err
	}
	if err := passes.Run(m, pl, passes.Config{NoReproducer: true}); err != nil {
		return nil, err
	}
	return &Result{Module: m, Schedule: sched}, nil
}

// CheckLoss checks a --loss value without compiling anything, so that a command line can
// report it as a usage error.
func CheckLoss(spec string) error {
	_, err := lossStep(spec, 0)
	return err
}

// lossStep turns a --loss value (ce, mse, or with add-loss's options as ce{axis=1}) and the
// --loss-output index into the add-loss pass's pipeline step, checking its options.
func lossStep(spec string, output int) (passes.Step, error) {
	if spec == "" {
		spec = "ce"
	}
	kind, pl, err := flagSpec(spec, "add-loss")
	switch {
	case kind != "ce" && kind != "mse":
		err = fmt.Errorf("want ce or mse, with options as ce{axis=1}")
	case err == nil && (len(pl) != 1 || pl[0].Pass != passes.AddLoss):
		err = fmt.Errorf("want ce or mse, with options as ce{axis=1}")
	case err != nil:
	case pl[0].Options["kind"] != "ce":
		err = fmt.Errorf("option kind: %s{…} already names the kind", kind)
	case pl[0].Options["output"] != "0":
		err = fmt.Errorf("option output: the output is chosen with --loss-output, not in --loss")
	case kind != "ce" && pl[0].Options["axis"] != "auto":
		err = fmt.Errorf("option axis applies to ce (the class axis)")
	}
	if err == nil && pl[0].Options["axis"] != "auto" {
		if _, aerr := strconv.Atoi(strings.TrimSpace(pl[0].Options["axis"])); aerr != nil {
			err = fmt.Errorf("option axis=%q is not an integer", pl[0].Options["axis"])
		}
	}
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "pass add-loss ")
		msg = strings.TrimPrefix(strings.TrimPrefix(msg, "pass add-loss: "), "add-loss: ")
		return passes.Step{}, fmt.Errorf("--loss %q: %s", spec, msg)
	}
	pl[0].Options["kind"] = kind
	pl[0].Options["output"] = strconv.Itoa(output)
	return pl[0], nil
}

// checkLossOutput refuses a cross-entropy that cannot train: a class axis of size 1 (an
// image classifier's [N, C, 1, 1] read on its last axis, a one-unit output) has a
// cross-entropy of exactly 0 whatever the weights, so the model would "train" on a loss of
// 0 without a word. The message names the output and its shape, and what to do instead.
func checkLossOutput(model string, fwd *ir.Func, idx int, step passes.Step) error {
	if step.Options["kind"] != "ce" {
		return nil
	}
	out := fwd.Results[idx]
	what := fmt.Sprintf("output %d", idx)
	if name := fwd.ResultAttrs[idx].Str(ir.AttrName, ""); name != "" {
		what += fmt.Sprintf(" (%q)", name)
	}
	axis, err := passes.ClassAxis(out.Type, step.Options["axis"])
	var one *passes.OneClassError
	switch {
	case errors.As(err, &one):
		how := "use --loss mse, or give the model an output with a class axis of two or more classes"
		if out.Def != nil && out.Def.Def.Name == "sigmoid" {
			how = "it is a sigmoid, a one-unit probability: use --loss mse against targets in [0, 1], or give the model a two-class output [N, 2] for ce"
		}
		if step.Options["axis"] == "auto" {
			for i, d := range out.Type.Shape {
				if d >= 2 && i > 0 {
					how += fmt.Sprintf("; or name the class axis, e.g. --loss 'ce{axis=%d}'", i)
					break
				}
			}
		}
		return fmt.Errorf("%s: --loss ce: %s is %s and its class axis %d has size 1: a cross-entropy over one class is always 0, so nothing would train; %s",
			model, what, out.Type, axis, how)
	case err != nil:
		return fmt.Errorf("%s: --loss ce: %s: %v", model, what, err)
	}
	return nil
}

// noParamsError explains a training compile of a model with nothing to train: every weight
// of it is a constant (or it has none), so the optimizer would update nothing.
func noParamsError(model string, fwd *ir.Func) error {
	floats, ints := 0, 0
	for _, op := range fwd.Ops {
		if op.Def.Name != "constant" || op.Results[0].Type.Rank() == 0 || op.Results[0].Type.NumElements() < 2 {
			continue
		}
		if op.Results[0].Type.DType.IsFloat() {
			floats++
		} else {
			ints++
		}
	}
	why := "it has no weights at all"
	switch {
	case floats > 0:
		why = fmt.Sprintf("its %d floating-point tensor(s) are constants: an ONNX initializer or Constant tensor is a parameter when it feeds a weight operand (not only shape, index, bounds or statistics operands), and a Constant's also when it holds two or more finite values below 1e4 in magnitude (not an epsilon or an attention mask)", floats)
	case ints > 0:
		why = fmt.Sprintf("its %d weight tensor(s) are integer data (a quantized model?), which ppc does not train", ints)
	}
	return fmt.Errorf("%s: nothing to train: the model has no trainable parameters (%s); compile it for inference with --forward-only", model, why)
}

// CheckOptimizer checks an --optimizer value without compiling anything, so that a command
// line can report it as a usage error.
func CheckOptimizer(spec string) error {
	_, err := optimizerStep(spec)
	return err
}

// flagSpec parses a flag value written kind{opt=v,…} (--loss, --optimizer) as a step of
// pass with those options, returning the kind before the braces.
func flagSpec(spec, pass string) (string, passes.Pipeline, error) {
	kind, rest, hasOpts := strings.Cut(spec, "{")
	if hasOpts {
		pass += "{" + rest
	}
	pl, err := passes.ParsePipeline(pass)
	return strings.TrimSpace(kind), pl, err
}

// optimizerStep turns an --optimizer value (adamw, sgd{lr=0.1}, or the pass's own
// optimizer{kind=…}) into the optimizer pass's pipeline step, checking its options.
func optimizerStep(spec string) (string, error) {
	if spec == "" {
		spec = "adamw"
	}
	name, pl, err := flagSpec(spec, "optimizer")
	if err == nil && (len(pl) != 1 || pl[0].Pass != passes.Optimizer) {
		err = fmt.Errorf("want adamw or sgd, with options as adamw{lr=3e-4}")
	}
	if err == nil && name != passes.Optimizer.Name {
		// The name before '{' is the kind: sgd{kind=adamw} contradicts itself.
		if k := pl[0].Options["kind"]; k != "" {
			err = fmt.Errorf("option kind=%s: %s{…} already names the kind", k, name)
		}
		pl[0].Options["kind"] = name
	}
	if err == nil && pl[0].Options["zero"] != "0" {
		err = fmt.Errorf("option zero: ZeRO is chosen with --zero, not in --optimizer")
	}
	if err == nil {
		err = passes.CheckOptimizerOptions(pl[0].Options)
	}
	if err != nil {
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "pass optimizer: "), "optimizer: ")
		return "", fmt.Errorf("--optimizer %q: %s", spec, msg)
	}
	return pl[0].String(), nil
}

// LearningRate is the learning rate of step t (1-based) under an --optimizer value, as
// plan.json records it in Optimizer, schedule included: for the step logs of a run.
func LearningRate(spec string, t int) (float64, error) {
	step, err := optimizerStep(spec)
	if err != nil {
		return 0, err
	}
	pl, err := passes.ParsePipeline(step)
	if err != nil {
		return 0, err
	}
	return passes.ScheduledLR(pl[0].Options, t)
}

// WithOptimizerOptions adds optimizer options given by their own flags (ppc compile's
// --clip-grad, --lr-schedule, --warmup-steps, --lr-decay-steps, --min-lr: clip, schedule,
// warmup, decay_steps, min_lr) to an --optimizer value. An option the value already sets is
// an error: one way to say each.
func WithOptimizerOptions(spec string, opts [][2]string) (string, error) {
	if len(opts) == 0 {
		return spec, nil
	}
	if spec == "" {
		spec = "adamw"
	}
	name, rest, hasOpts := strings.Cut(spec, "{")
	var have passes.Options
	if hasOpts {
		pl, err := passes.ParsePipeline("optimizer{" + rest)
		if err != nil {
			return "", fmt.Errorf("--optimizer %q: %v", spec, err)
		}
		have = pl[0].Options
	}
	var kv []string
	for _, o := range opts {
		if have[o[0]] != "" {
			return "", fmt.Errorf("--optimizer %q already sets %s; give it once", spec, o[0])
		}
		kv = append(kv, o[0]+"="+o[1])
	}
	if hasOpts {
		rest = strings.TrimSuffix(strings.TrimSpace(rest), "}")
		if strings.TrimSpace(rest) != "" {
			rest += ","
		}
		return name + "{" + rest + strings.Join(kv, ",") + "}", nil
	}
	return name + "{" + strings.Join(kv, ",") + "}", nil
}

// StageCosts turns a plan's per-stage cost-model estimates into simulator costs: seconds on
// the plan's device profile, whose links carry the activations. The collectives go with
// them: the tensor-parallel part of F, I and W, and the data-parallel ones the simulator
// places after the W that issues them (a gradient's all-reduce, ZeRO-2's reduce-scatters)
// or at the step's end (ZeRO's optimizer). ok is false when the plan has no estimates.
func StageCosts(plan *codegen.Plan) (schedule.Cost, bool) {
	if len(plan.StageInfo) != plan.Stages || plan.Stages == 0 {
		return schedule.Cost{}, false
	}
	dev := passes.DefaultDevice // plans from before devices were recorded
	if plan.Device != nil {
		dev = *plan.Device
	}
	cost := schedule.Cost{F: 1, I: 1, W: 1, Comm: dev.LinkLatency, Bandwidth: dev.LinkBandwidth, Unit: schedule.Seconds,
		Source: "cost model, device profile " + dev.Name + ", per-stage estimates from plan.json"}
	for _, st := range plan.StageInfo {
		sc := schedule.StageCost{F: st.F, I: st.I, W: st.W,
			CommBytes: float64(st.SendBytes), ActBytes: float64(st.StashBytes),
			FColl: st.FComm, IColl: st.IComm, WColl: st.WComm,
			GradReduce: st.DPReduce + st.TPReduce, GradReduceMB: st.DPReduceMB, StepEnd: st.OptimizerComm}
		for _, sl := range st.Slices {
			sc.Slices = append(sc.Slices, schedule.StageCost{F: sl.F, I: sl.I, W: sl.W, CommBytes: float64(sl.SendBytes), ActBytes: float64(sl.StashBytes)})
		}
		cost.Stages = append(cost.Stages, sc)
	}
	return cost, true
}

// estimate simulates the plan's schedule with the cost model.
func estimate(s *schedule.Schedule, plan *codegen.Plan) (*codegen.Estimate, error) {
	cost, ok := StageCosts(plan)
	if !ok || !plan.Training {
		return nil, fmt.Errorf("no estimate")
	}
	res, err := schedule.Simulate(s, cost)
	if err != nil {
		return nil, err
	}
	return &codegen.Estimate{StepSeconds: res.StepTime, IdealSeconds: res.IdealTime, BubbleSeconds: res.BubbleTime,
		BubbleRatio: res.BubbleRatio, CollectiveSeconds: res.CollectiveTime, CommSeconds: res.CommTime,
		PeakActivations: res.PeakActivations}, nil
}

// loadSchedule makes the pipeline schedule: a generator by name, or a PyTorch CSV (whose
// rank count then sets --pp; Compile takes its micro-batch count when none is given).
func loadSchedule(opts *Options) (*schedule.Schedule, error) {
	name := opts.Schedule
	if name == "" {
		name = "1f1b"
	}
	if !schedule.IsCSVName(name) {
		cost := schedule.UnitCost()
		if opts.zbCost != nil {
			cost = *opts.zbCost
		}
		return schedule.GenerateFor(name, opts.PP, opts.Microbatches, opts.VirtualStages, cost, opts.MaxInflight)
	}
	if opts.MaxInflight != 0 {
		return nil, fmt.Errorf("--max-inflight applies to zb-auto, whose layout it bounds; %s has its own", name)
	}
	s, err := schedule.ReadCSVFile(name)
	if err != nil {
		return nil, err
	}
	if err := schedule.Validate(s); err != nil {
		return nil, &ScheduleError{File: name, Dialect: s.Dialect, Err: err}
	}
	// PP 1 is the default, and a CSV has its own count: only more is a request to check
	// (the command line checks an explicit --pp 1 itself).
	pp := opts.PP
	if pp == 1 {
		pp = 0
	}
	if err := schedule.CheckFileShape(s, name, pp, opts.Microbatches, opts.VirtualStages); err != nil {
		return nil, err
	}
	if s.Stages%s.Ranks != 0 {
		return nil, fmt.Errorf("%s places %d stages on %d ranks; ppc needs the same number of stages on every rank", name, s.Stages, s.Ranks)
	}
	opts.PP = s.Ranks
	return s, nil
}

// ScheduleError is a schedule that fails validation (a failed check: exit status 1).
type ScheduleError struct {
	File    string
	Dialect schedule.Dialect
	Err     error
}

func (e *ScheduleError) Error() string {
	if e.Dialect == schedule.DialectPyTorch24 {
		// B means the input backward there: say so, or a missing W reads as nonsense.
		return fmt.Sprintf("%s, read in the %v: %v", e.File, e.Dialect, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}
func (e *ScheduleError) Unwrap() error { return e.Err }

// codegenSchedule keeps the compute actions of a schedule for code generation.
func codegenSchedule(s *schedule.Schedule, stages int) (codegen.Schedule, error) {
	if s.Stages != stages {
		return codegen.Schedule{}, fmt.Errorf("schedule %s has %d stages, the model is split into %d", s.Name, s.Stages, stages)
	}
	cs := codegen.Schedule{Name: s.Name, Placement: s.Placement}
	for _, acts := range s.Actions {
		var row []codegen.Action
		for _, a := range acts {
			row = append(row, computeActions(a)...)
		}
		cs.Actions = append(cs.Actions, row)
	}
	return cs, nil
}

// computeActions keeps the compute part of a schedule action (communication is derived by
// code generation from the data flow).
func computeActions(a schedule.Action) []codegen.Action {
	switch a.Kind {
	case schedule.Forward:
		return []codegen.Action{{Kind: "F", Stage: a.Stage, Microbatch: a.Microbatch}}
	case schedule.BackwardInput:
		return []codegen.Action{{Kind: "I", Stage: a.Stage, Microbatch: a.Microbatch}}
	case schedule.BackwardWeight:
		return []codegen.Action{{Kind: "W", Stage: a.Stage, Microbatch: a.Microbatch}}
	case schedule.FullBackward:
		return []codegen.Action{{Kind: "B", Stage: a.Stage, Microbatch: a.Microbatch}}
	case schedule.OverlapFB:
		var out []codegen.Action
		for _, sub := range a.Sub {
			out = append(out, computeActions(sub)...)
		}
		return out
	}
	return nil
}

// Write writes plan.json and the programs (one per pipeline rank) into dir.
func (r *Result) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	plan := r.Output.Plan
	if len(plan.Programs) != len(r.Output.Programs) {
		return fmt.Errorf("internal error: %d programs for %d program entries", len(r.Output.Programs), len(plan.Programs))
	}
	files := map[string]bool{}
	for i, p := range r.Output.Programs {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		plan.Programs[i].ProgramSHA256 = hex.EncodeToString(sum[:])
		files[plan.Programs[i].File] = true
		if err := os.WriteFile(filepath.Join(dir, plan.Programs[i].File), data, 0o644); err != nil {
			return err
		}
	}
	// Recompiling into a directory that held another plan would leave its programs behind,
	// looking like part of this plan: remove them.
	old, _ := filepath.Glob(filepath.Join(dir, "rank-*.ppx"))
	for _, path := range old {
		var n int
		base := filepath.Base(path)
		if _, err := fmt.Sscanf(base, "rank-%d.ppx", &n); err == nil && base == codegen.ProgramFile(n) && !files[base] {
			if err := os.Remove(path); err != nil {
				return err
			}
		}
	}
	return codegen.WritePlan(dir, plan)
}

// setMesh gives the module its device mesh, in the axis names shardings and collectives use
// (ir.MeshOrder numbers the ranks: tp fastest, pp slowest). A module that is already
// partitioned for tensor parallelism (IR text written per rank) must be compiled for the tp
// size it was written for.
func setMesh(m *ir.Module, model string, pp int, opts Options) error {
	if m.Attrs.Has(ir.AttrPartitioned) {
		tp := 1
		for _, a := range m.Mesh() {
			if a.Name == "tp" {
				tp = a.Size
			}
		}
		if tp != opts.TP {
			return fmt.Errorf("%s: the module is partitioned for tp = %d (its shapes are per rank); compile it with --tp %d", model, tp, tp)
		}
	}
	// Data parallelism needs nothing of the module but the mesh: every replica runs the same
	// per-micro-batch functions on its own micro-batches, the optimizer divides the gradient
	// by M·dp, and code generation all-reduces the gradients over dp. ZeRO would shard the
	// optimizer state over dp, which nothing does yet: refuse it rather than ignore it.
	m.SetMesh([]ir.MeshAxis{{Name: "pp", Size: pp}, {Name: "dp", Size: opts.DP}, {Name: "tp", Size: opts.TP}})
	return nil
}

// ResolveTokenSlices turns a --token-slices value into slice lengths for a sequence of T
// tokens: a count N (near-equal, longer slices first) or explicit lengths.
func ResolveTokenSlices(spec string, T int) ([]int, error) {
	spec = strings.TrimSpace(spec)
	if n, err := strconv.Atoi(spec); err == nil {
		switch {
		case n < 1:
			return nil, fmt.Errorf("--token-slices %d: want at least 1 slice", n)
		case n > T:
			return nil, fmt.Errorf("--token-slices %d: the sequence has %d tokens, so at most %d slices", n, T, T)
		}
		return schedule.UniformSlices(T, n)
	}
	lengths, err := passes.ParseSliceLengths(spec)
	if err != nil {
		return nil, fmt.Errorf("--token-slices %q: %v (want a count, lengths such as 120,120,112, or auto)", spec, err)
	}
	sum := 0
	for _, l := range lengths {
		sum += l
	}
	if sum != T {
		return nil, fmt.Errorf("--token-slices %q: the lengths sum to %d, the sequence has %d tokens", spec, sum, T)
	}
	return lengths, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// partitionCosts are the per-stage F, I and W seconds the partition pass recorded, with the
// device's link latency between stages: what a cost-aware schedule is built for.
func partitionCosts(m *ir.Module) (schedule.Cost, error) {
	dev, err := passes.ModuleDevice(m)
	if err != nil {
		return schedule.Cost{}, err
	}
	c := schedule.Cost{Comm: dev.LinkLatency, Unit: schedule.Seconds}
	part, _ := m.Attrs.Get("partition").(ir.Dict)
	list, _ := ir.Attrs(part).Get("stages").(ir.List)
	for _, e := range list {
		d, _ := e.(ir.Dict)
		at := ir.Attrs(d)
		c.Stages = append(c.Stages, schedule.StageCost{F: at.Float("f", 0), I: at.Float("i", 0), W: at.Float("w", 0)})
	}
	if len(c.Stages) == 0 {
		return c, fmt.Errorf("zb-auto: the partition recorded no stage costs")
	}
	return c, nil
}

// addPrediction makes an inference compile of a model whose only result is its loss output
// the loss op's prediction (the logits) too, before the loss, as ONNX export does: inference
// is run for the predictions. It is named after its IR value ("logits"), or "prediction".
// An ONNX model's outputs (named results) are the ones its graph declares, and stay so.
func addPrediction(fwd *ir.Func) {
	pred := fwd.Prediction()
	if pred == nil || pred.Def == nil || fwd.ResultAttrs[0].Has(ir.AttrName) {
		return
	}
	name := pred.Name
	if name == "" || name == fwd.ResultAttrs[0].Str(ir.AttrName, "loss") || strings.Trim(name, "0123456789") == "" {
		name = "prediction"
	}
	fwd.Results = append([]*ir.Value{pred}, fwd.Results...)
	fwd.ResultAttrs = append([]ir.Attrs{{{Name: ir.AttrName, Value: ir.String(name)}}}, fwd.ResultAttrs...)
}
