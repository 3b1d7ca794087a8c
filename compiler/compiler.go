package compiler

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	PP int
	TP int  // tensor-parallel ranks per stage
	SP bool // sequence parallelism over the tp ranks
	// CP is context parallelism: each sequence split over CP ranks, attention as a ring
	// (passes.CPPartition); CPSplit is zigzag (the default) or contiguous.
	CP      int
	CPSplit string
	// VocabMultiple is Megatron's --make-vocab-size-divisible-by: a vocabulary tp does not
	// divide is padded to the next multiple of VocabMultiple·tp (passes.PadVocab; 0: 128).
	VocabMultiple int
	DP            int // data-parallel replicas
	// EP is expert parallelism (passes.EPPartition): each mixture-of-experts layer's experts
	// sharded over EP ranks carved from the DP ones (EP divides DP; DP/EP replicas of each
	// expert shard).
	EP            int
	Zero          int // ZeRO stage (0–3) over the dp replicas
	Microbatches  int
	Schedule      string // generator name, or a .csv file in PyTorch's format
	VirtualStages int
	Partition     string // markers, layout or auto ("": markers when the model has any, else auto)
	Layout        string // for Partition == "layout"
	Mem           int64  // bytes per device for auto partitioning (0: unlimited)
	// Recompute: none, selective or full.
	Recompute string
	// RecomputeMethod and RecomputeLayers shape full recomputation as Megatron's
	// --recompute-method and --recompute-num-layers: uniform (the default) rebuilds chunks of
	// RecomputeLayers units (0: 1), block only the first RecomputeLayers units of each stage.
	RecomputeMethod string
	RecomputeLayers int
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
	// held is what each stage's micro-batch holds between its runs (from a probe compile), for
	// schedule.CapHeld.
	held *schedule.Held
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
	// Precision is the compute dtype: fp32 (or ""), bf16 or fp16 (mixed precision,
	// Megatron-LM's recipe: 16-bit parameters, fp32 main parameters and optimizer state held
	// by the optimizer; fp16 with dynamic loss scaling).
	Precision string
	// GradPrecision is the dtype gradients are accumulated over micro-batches and reduced
	// over dp in: fp32 (or "", Megatron's --accumulate-allreduce-grads-in-fp32) or, under
	// mixed precision, its 16-bit dtype.
	GradPrecision string
	// Pass manager.
	Passes passes.Config
}

// DefaultVocabMultiple is Megatron-LM's default --make-vocab-size-divisible-by.
const DefaultVocabMultiple = 128

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

// A compile is a sequence of named steps (compile), each a method of the compilation, which
// carries what the steps before it resolved. The passes step runs the pass pipeline,
// compilePasses: each pass by the name `ppc passes`, --print-ir-after and --dump-dir use. A
// step returns a Result when the compile ends there: a probe that stops after a pass
// (StopAfter), or a compile that restarts with what a probe found (zb-auto's stage costs,
// --token-slices auto).
type compilation struct {
	model     string
	opts      Options
	optStep   string   // the optimizer pass's step ("": inference)
	precision ir.DType // the compute dtype
	gradDType ir.DType // the dtype gradients accumulate in (--grad-precision)
	fromModel bool     // no micro-batch count given: the model's, or 1
	lo        LoadOptions
	m         *ir.Module
	src       []byte
	hasLoss   bool        // the model computes its own loss
	loss      passes.Step // add-loss's step, for a model without one
	sched     *schedule.Schedule
	slices    []int // token slice lengths (TeraPipe), if any
	cs        codegen.Schedule
	out       *codegen.Output
}

// compile runs the steps of a compile in order; a step that returns a Result ends it.
func compile(model string, opts Options) (*Result, error) {
	c := &compilation{model: model, opts: opts}
	for _, step := range []func() (*Result, error){
		c.resolveOptions, // defaults; the optimizer and precision flags
		c.load,           // the model, by its frontend
		c.checkModel,     // refuse what would train nothing
		c.probe,          // zb-auto's stage costs, --token-slices auto: compile again
		c.buildSchedule,  // the pipeline schedule, the mesh, the token slices
		c.runPasses,      // compilePasses, up to the rank programs (a probe: up to its pass)
		c.checkCPU,       // a CPU kernel for every op, in its dtypes
		c.generate,       // the rank programs lowered to programs and plan.json
		c.estimateStep,   // the schedule simulated with the cost model
	} {
		if res, err := step(); err != nil || res != nil {
			return res, err
		}
	}
	return &Result{Module: c.m, Output: c.out, Schedule: c.sched}, nil
}

// training reports whether the compile trains (else it is inference).
func (c *compilation) training() bool { return !c.opts.ForwardOnly }

// compilePasses is the pass pipeline of a compile, in order: each pass with the step it runs
// as (its options), or "" where this compile does not run it.
var compilePasses = []struct {
	pass string
	step func(*compilation) string
}{
	{"canonicalize", always("canonicalize")},
	{"cse", always("cse")},
	{"dce", always("dce")},
	// Mixture of experts: which parameters are experts' (reports count them apart).
	{"mark-experts", func(c *compilation) string { return when(hasOp(c.m, "moe_dispatch"), "mark-experts") }},
	{"add-loss", func(c *compilation) string { return when(c.training() && !c.hasLoss, c.loss.String()) }},
	// Before sharding and partitioning, so that they and the cost model see the real dtypes
	// and byte sizes.
	{"precision", func(c *compilation) string {
		return when(c.precision != ir.F32, fmt.Sprintf("precision{dtype=%s}", c.precision))
	}},
	// Context parallelism: @forward becomes one cp rank's, holding its share of every
	// sequence, before the tp passes split that rank's work further.
	{"cp-partition", func(c *compilation) string {
		return when(c.opts.CP > 1, fmt.Sprintf("cp-partition{size=%d,split=%s}", c.opts.CP, c.opts.CPSplit))
	}},
	// Tensor (and sequence) parallelism: each stage becomes the program of one tp rank before
	// pipeline partitioning, so stages, costs and autodiff see local shapes.
	// A vocabulary tp does not divide is padded (exactly: masked logits, unpadded
	// checkpoints) before the tp passes split it.
	{"pad-vocab", func(c *compilation) string {
		return when(c.splitsTP(), fmt.Sprintf("pad-vocab{multiple=%d}", c.opts.VocabMultiple))
	}},
	{"shard-annotate", func(c *compilation) string { return when(c.splitsTP(), "shard-annotate") }},
	{"shard-propagate", func(c *compilation) string {
		return when(c.splitsTP(), fmt.Sprintf("shard-propagate{sp=%t}", c.opts.SP))
	}},
	{"spmd-partition", func(c *compilation) string { return when(c.splitsTP(), "spmd-partition") }},
	// Expert parallelism: the experts' buffer exchanged over ep by all_to_alls and the
	// expert weights held as ep shards, on one tp rank's program, before partition and
	// autodiff (which differentiates the exchanges as the reverse ones).
	{"ep-partition", func(c *compilation) string {
		return when(c.opts.EP > 1, fmt.Sprintf("ep-partition{size=%d}", c.opts.EP))
	}},
	{"partition", (*compilation).partitionStep},
	{"token-slice", func(c *compilation) string {
		return when(c.slices != nil, fmt.Sprintf("token-slice{lengths=%q}", joinInts(c.slices)))
	}},
	{"autodiff", func(c *compilation) string { return when(c.training(), "autodiff") }},
	{"optimizer", (*compilation).optimizerStep},
	{"loss-scale", func(c *compilation) string { return when(c.training() && c.precision == ir.F16, "loss-scale") }},
	{"cse", func(c *compilation) string { return when(c.training(), "cse") }},
	{"dce", func(c *compilation) string { return when(c.training(), "dce") }},
	{"split-stages", func(c *compilation) string {
		if r := c.opts.Recompute; r != "" && r != "none" {
			step := "split-stages{recompute=" + r
			if m := c.opts.RecomputeMethod; m != "" && m != passes.RecomputeUniform {
				step += ",method=" + m
			}
			if n := c.opts.RecomputeLayers; n > 1 {
				step += fmt.Sprintf(",layers=%d", n)
			}
			return step + "}"
		}
		return "split-stages"
	}},
	// ZeRO-3: parameters held as dp blocks, gathered where each per-stage function reads them.
	{"param-gather", func(c *compilation) string { return when(c.training() && c.opts.Zero == 3, "param-gather") }},
	// The rings' steps, forward and backward, once autodiff has differentiated each ring as
	// one op and split-stages has chosen what to stash and recompute (a recomputed ring
	// sends its blocks round again).
	{"ring-attention", func(c *compilation) string { return when(c.opts.CP > 1, "ring-attention") }},
	// Each pipeline rank's step as IR (send/recv explicit), which code generation lowers:
	// its runs, its gradients' reductions, a tied weight's exchange, its optimizer step.
	{"rank-programs", always("rank-programs")},
	{"grad-reduce", func(c *compilation) string { return when(c.training(), "grad-reduce") }},
	{"tied-grads", func(c *compilation) string { return when(c.training(), "tied-grads") }},
	{"rank-optimizer", func(c *compilation) string { return when(c.training(), "rank-optimizer") }},
}

func always(step string) func(*compilation) string { return func(*compilation) string { return step } }

// when is step when cond holds, else "" (the pass does not run).
func when(cond bool, step string) string {
	if cond {
		return step
	}
	return ""
}

// splitsTP reports whether the compile partitions the model for tensor parallelism (an IR
// file may come partitioned already).
func (c *compilation) splitsTP() bool { return c.opts.TP > 1 && !c.m.Attrs.Has(ir.AttrPartitioned) }

func (c *compilation) partitionStep() string {
	part := fmt.Sprintf("partition{pp=%d,virtual=%d,mem=%d", c.sched.Ranks, c.sched.Stages/c.sched.Ranks, c.opts.Mem)
	if c.opts.Partition != "" {
		part += ",mode=" + c.opts.Partition
	}
	if c.opts.Layout != "" {
		part += `,layout="` + c.opts.Layout + `"`
	}
	return part + "}"
}

func (c *compilation) optimizerStep() string {
	step := c.optStep
	if !c.training() {
		return step
	}
	var extra []string
	if c.opts.Zero != 0 {
		extra = append(extra, fmt.Sprintf("zero=%d", c.opts.Zero))
	}
	if c.gradDType != ir.F32 {
		extra = append(extra, "grad_dtype="+c.gradDType.String())
	}
	if len(extra) == 0 {
		return step
	}
	if !strings.Contains(step, "{") {
		return "optimizer{" + strings.Join(extra, ",") + "}"
	}
	return strings.TrimSuffix(step, "}") + "," + strings.Join(extra, ",") + "}"
}

// pipeline is the compile's pass pipeline, up to and including the pass stopAfter ("": all).
func (c *compilation) pipeline(stopAfter string) []string {
	var out []string
	for _, p := range compilePasses {
		if s := p.step(c); s != "" {
			out = append(out, s)
		}
		if p.pass == stopAfter {
			break
		}
	}
	return out
}

// resolveOptions fills in the defaults and checks the optimizer and precision flags before
// anything is compiled: a typo in a flag is not a failure of the pass it configures (which
// would leave a reproducer behind).
func (c *compilation) resolveOptions() (*Result, error) {
	o := &c.opts
	o.PP = max(o.PP, 1)
	o.TP, o.DP, o.CP, o.EP = max(o.TP, 1), max(o.DP, 1), max(o.CP, 1), max(o.EP, 1)
	if o.DP%o.EP != 0 {
		return nil, fmt.Errorf("--ep %d: expert parallelism carves its ranks from the %d data-parallel ranks, which it does not divide; %s", o.EP, o.DP, nearestEP(o.DP, o.EP))
	}
	switch o.CPSplit {
	case "":
		o.CPSplit = passes.CPZigzag
	case passes.CPZigzag, passes.CPContiguous:
	default:
		return nil, fmt.Errorf("--cp-split %q: want zigzag (the default: balanced causal attention) or contiguous", o.CPSplit)
	}
	switch {
	case o.VocabMultiple == 0:
		o.VocabMultiple = DefaultVocabMultiple
	case o.VocabMultiple < 0:
		return nil, fmt.Errorf("--make-vocab-size-divisible-by %d: want a positive integer (1 pads to the next multiple of tp)", o.VocabMultiple)
	}
	if o.Microbatches < 1 {
		// Not given: a CSV schedule says how many micro-batches it runs (a bad file is
		// reported when the schedule is loaded); else an IR file's `microbatches` attribute,
		// read once the file is loaded; else 1.
		o.Microbatches = 1
		c.fromModel = true
		if schedule.IsCSVName(o.Schedule) {
			if s, err := schedule.ReadCSVFile(o.Schedule); err == nil {
				o.Microbatches = s.Microbatches
				c.fromModel = false
			}
		}
	}
	if c.training() {
		var err error
		if c.optStep, err = optimizerStep(o.Optimizer); err != nil {
			return nil, err
		}
	}
	c.precision = ir.F32
	if o.Precision != "" {
		var err error
		if c.precision, err = passes.ParsePrecision(o.Precision); err != nil {
			return nil, err
		}
	}
	c.gradDType = ir.F32
	if o.GradPrecision != "" {
		var err error
		if c.gradDType, err = passes.ParsePrecision(o.GradPrecision); err != nil {
			return nil, fmt.Errorf("--grad-precision: %v", err)
		}
		if c.gradDType != ir.F32 && c.gradDType != c.precision {
			return nil, fmt.Errorf("--grad-precision %s needs --precision %s: gradients accumulate in fp32 or in the parameters' 16-bit dtype", o.GradPrecision, o.GradPrecision)
		}
	}
	return nil, nil
}

// load reads the model with its frontend. The model's batch is the global batch: each of the
// dp replicas runs M micro-batches of it, so the frontend cuts it into M·dp micro-batches.
func (c *compilation) load() (*Result, error) {
	c.lo = c.opts.Load
	c.lo.Microbatches, c.lo.Replicas = c.opts.Microbatches*c.opts.DP, c.opts.DP
	m, src, err := Load(c.model, c.lo)
	if err != nil {
		return nil, err
	}
	if n := m.Attrs.Int("microbatches", 0); c.fromModel && n >= 1 && strings.HasSuffix(c.model, ".ir") {
		// IR text describes one micro-batch and may say how many a step runs (the parser
		// has checked the value); --microbatches, when given, overrides it.
		c.opts.Microbatches = n
	}
	if m.Name == "" {
		// IR text may leave the module unnamed; the plan and summaries name the file.
		m.Name = strings.TrimSuffix(filepath.Base(c.model), filepath.Ext(c.model))
	}
	c.m, c.src = m, src
	return nil, nil
}

// checkModel checks the model has a forward pass, and, for training, a loss that can train
// and parameters to train; it records the micro-batch count and the device profile.
func (c *compilation) checkModel() (*Result, error) {
	model, opts, m := c.model, c.opts, c.m
	fwd := m.Func(ir.ForwardFunc)
	if fwd == nil {
		return nil, fmt.Errorf("%s: the model has no func @%s (its forward pass) to compile", model, ir.ForwardFunc)
	}
	for _, ra := range fwd.ResultAttrs {
		c.hasLoss = c.hasLoss || ra.Has(ir.AttrLoss)
	}
	if opts.ForwardOnly {
		addPrediction(fwd)
	}
	var err error
	c.loss, err = lossStep(opts.Loss, opts.LossOutput)
	if err != nil && c.training() {
		return nil, err
	}
	switch {
	case c.hasLoss && c.training() && (opts.Loss != "" || opts.LossOutput != 0):
		// Refused rather than ignored: the flag would not say which loss trains.
		return nil, fmt.Errorf("%s: the model computes its own loss; --loss and --loss-output apply to models without one (an ONNX model's scalar output named loss is its loss)", model)
	case !c.hasLoss && c.training() && (opts.LossOutput < 0 || opts.LossOutput >= len(fwd.Results)):
		return nil, fmt.Errorf("%s: --loss-output %d: the model has %d output(s), numbered from 0", model, opts.LossOutput, len(fwd.Results))
	case !c.hasLoss && c.training() && !fwd.Results[opts.LossOutput].Type.DType.IsFloat():
		return nil, fmt.Errorf("%s: output %d is %s; a loss needs a floating-point output (choose another with --loss-output, or compile inference with --forward-only)",
			model, opts.LossOutput, fwd.Results[opts.LossOutput].Type)
	}
	if c.training() && !c.hasLoss {
		if err := checkLossOutput(model, fwd, opts.LossOutput, c.loss); err != nil {
			return nil, err
		}
	}
	if c.training() && len(fwd.Params()) == 0 {
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
	return nil, nil
}

// probe compiles again with what a probe compile, stopped after partitioning, finds: zb-auto
// is built for the stages' costs, and --token-slices auto runs TeraPipe's dynamic
// program on the cost model (choosing the micro-batch count with the slices when none was
// given: the batch/token split of the paper).
func (c *compilation) probe() (*Result, error) {
	model, opts := c.model, c.opts
	userSchedule := opts.Schedule
	if schedule.CostAware(opts.Schedule) && opts.zbCost == nil && opts.StopAfter == "" && strings.TrimSpace(opts.TokenSlices) != "auto" {
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
	if opts.held == nil && opts.StopAfter == "" && opts.TokenSlices == "" && c.training() && defersW(opts) {
		// A schedule that defers W's is capped by what its stages hold (schedule.CapHeld),
		// measured on the stages split-stages makes.
		probe := opts
		probe.StopAfter = "split-stages"
		pr, err := Compile(model, probe)
		if err != nil {
			return nil, err
		}
		stash, held, err := codegen.StageHeld(pr.Module)
		if err != nil {
			return nil, err
		}
		again := opts
		again.held = &schedule.Held{Stash: stash, Held: held}
		return Compile(model, again)
	}
	if opts.TokenSlices != "" && opts.Schedule == "" && opts.Microbatches < opts.PP {
		// The default 1F1B needs a micro-batch per rank; token slices fill the pipeline
		// with fewer, in GPipe's order (TeraPipe's schedule).
		c.opts.Schedule = "gpipe"
		opts.Schedule = "gpipe"
	}
	if strings.TrimSpace(opts.TokenSlices) != "auto" || opts.StopAfter != "" {
		return nil, nil
	}
	probe := opts
	probe.StopAfter, probe.TokenSlices = "partition", ""
	if c.fromModel {
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
	tp, err := passes.PlanTokens(pr.Module, dev, "auto", c.fromModel)
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

// buildSchedule makes the pipeline schedule — before partitioning, since it decides how many
// stages each rank holds (interleaved and V-shaped schedules default to two) — gives the
// module its device mesh, and resolves the token slices.
func (c *compilation) buildSchedule() (*Result, error) {
	var err error
	if c.sched, err = loadSchedule(&c.opts); err != nil {
		return nil, err
	}
	// The mesh, in the axis names shardings and collectives use (ir.MeshOrder numbers the
	// ranks: tp fastest, pp slowest).
	if err := setMesh(c.m, c.model, c.sched.Ranks, c.opts); err != nil {
		return nil, err
	}
	if c.opts.TokenSlices == "" || c.opts.StopAfter == "partition" {
		return nil, nil // a probe stopped at partitioning prices the model unsliced
	}
	if c.opts.CP > 1 {
		return nil, fmt.Errorf("--token-slices with --cp: context parallelism already splits every sequence over the cp ranks, and a slice's attention over the earlier slices' keys has no ring form; use one or the other")
	}
	if c.opts.SP {
		return nil, fmt.Errorf("--token-slices with --sp: sequence parallelism already splits the sequence over the tp ranks; use one or the other")
	}
	T, err := passes.SequenceLength(c.m.Func(ir.ForwardFunc))
	if err != nil {
		return nil, fmt.Errorf("%s: --token-slices: %v", c.model, err)
	}
	c.slices, err = ResolveTokenSlices(c.opts.TokenSlices, T)
	return nil, err
}

// runPasses runs compilePasses — for a probe, up to the pass it stops after. A full compile
// first records the schedule's compute actions in the module for rank-programs.
func (c *compilation) runPasses() (*Result, error) {
	switch c.opts.StopAfter {
	case "partition":
		return runProbe(c.m, c.pipeline("partition"), c.sched)
	case "split-stages":
		// With cp, the rings' steps too: the probe's memory (codegen.RunMemories) holds the
		// K/V blocks in flight and the dK/dV partial sums.
		ring := when(c.opts.CP > 1, "ring-attention")
		pl := c.pipeline("split-stages")
		if len(c.opts.recomputeModes) == 0 {
			if ring != "" {
				pl = append(pl, ring)
			}
			return runProbe(c.m, pl, c.sched)
		}
		// One probe up to split-stages, split once per recompute mode.
		res, err := runProbe(c.m, pl[:len(pl)-1], c.sched)
		if err != nil {
			return nil, err
		}
		for _, mode := range c.opts.recomputeModes {
			m := c.m.Clone()
			steps := []string{fmt.Sprintf("split-stages{recompute=%s}", mode)}
			if ring != "" {
				steps = append(steps, ring)
			}
			if _, err := runProbe(m, steps, c.sched); err != nil {
				return nil, err
			}
			res.Probes = append(res.Probes, m)
		}
		return res, nil
	}
	var err error
	if len(c.slices) > 1 {
		if c.sched, err = schedule.SliceTokens(c.sched, len(c.slices)); err != nil {
			return nil, err
		}
	}
	if c.cs, err = codegenSchedule(c.sched, c.sched.Stages); err != nil {
		return nil, err
	}
	passes.SetSchedule(c.m, c.cs.Placement, c.cs.Actions)
	pl, err := passes.ParsePipeline(strings.Join(c.pipeline(""), ","))
	if err != nil {
		return nil, err
	}
	return nil, passes.Run(c.m, pl, c.opts.Passes)
}

// checkCPU checks that the CPU runtime has a kernel for every op in its dtypes, so that an op
// it lacks is a compile error at its position in the model, not a load error of a program.
func (c *compilation) checkCPU() (*Result, error) {
	if err := checkKernels(c.m); err != nil {
		return nil, err
	}
	_, err := codegenSchedule(c.sched, c.m.Attrs.Int("stages", 1))
	return nil, err
}

// generate lowers the rank programs to one program per pipeline rank and plan.json.
func (c *compilation) generate() (*Result, error) {
	optName := ""
	if c.training() {
		optName = c.opts.Optimizer
		if optName == "" {
			optName = "adamw"
		}
	}
	var err error
	c.out, err = codegen.Generate(c.m, codegen.Options{Schedule: c.cs, Optimizer: optName, Source: modelIdentity(c.src, c.lo), Recompute: c.opts.Recompute})
	return nil, err
}

// estimateStep records the plan's estimate: its schedule simulated with the cost model.
func (c *compilation) estimateStep() (*Result, error) {
	if est, err := estimate(c.sched, c.out.Plan); err == nil {
		c.out.Plan.Estimate = est
	}
	return nil, nil
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
			FColl: st.FComm, IColl: st.IComm, WColl: st.WComm, FAllToAll: st.FAllToAll, IAllToAll: st.IAllToAll,
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

// loadSchedule makes the pipeline schedule: a generator by name — its W's run earlier where
// the stages hold more after I than F stashed (opts.held, schedule.CapHeld) — or a PyTorch
// CSV, run as written (whose rank count then sets --pp; Compile takes its micro-batch count
// when none is given).
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
		s, err := schedule.GenerateFor(name, opts.PP, opts.Microbatches, opts.VirtualStages, cost, opts.MaxInflight)
		if err == nil && opts.held != nil {
			s = schedule.CapHeld(s, *opts.held)
		}
		return s, err
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

// defersW reports whether the generated schedule opts names runs W's apart from their I's on
// more than one pipeline rank (a CSV schedule is run as written).
func defersW(opts Options) bool {
	if opts.PP < 2 || schedule.IsCSVName(opts.Schedule) {
		return false
	}
	s, err := loadSchedule(&opts)
	if err != nil {
		return false // the compile reports it
	}
	for _, acts := range s.Actions {
		for _, a := range acts {
			if a.Kind == schedule.BackwardWeight {
				return true
			}
		}
	}
	return false
}

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

// nearestEP names the ep sizes nearest ep that divide dp (--ep), or the dp sizes ep divides.
func nearestEP(dp, ep int) string {
	var near []string
	for d := 1; d <= max(dp, ep) && len(near) < 2; d++ {
		for _, c := range []int{ep - d, ep + d} {
			if c >= 1 && dp%c == 0 && len(near) < 2 {
				near = append(near, fmt.Sprintf("--ep %d", c))
			}
		}
	}
	return fmt.Sprintf("the nearest that divide it: %s (or --dp %d)", strings.Join(near, " or "), (dp+ep-1)/ep*ep)
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
	axes := []ir.MeshAxis{{Name: "pp", Size: pp}, {Name: "dp", Size: opts.DP}, {Name: "tp", Size: opts.TP}}
	if opts.CP > 1 {
		// Only when used, so that the IR of every other compile reads as before.
		axes = slices.Insert(axes, 2, ir.MeshAxis{Name: "cp", Size: opts.CP})
	}
	if opts.EP > 1 {
		// A sub-axis of dp (dp stays the whole data-parallel size): passes.EPAxis.
		axes = slices.Insert(axes, 2, ir.MeshAxis{Name: passes.EPAxis, Size: opts.EP})
	}
	m.SetMesh(axes)
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

// hasOp reports whether @forward has an op of the given name.
func hasOp(m *ir.Module, name string) bool {
	if f := m.Func(ir.ForwardFunc); f != nil {
		for _, op := range f.Ops {
			if op.Name() == name {
				return true
			}
		}
	}
	return false
}
