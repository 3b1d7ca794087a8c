package compiler

import (
	"fmt"
	"os"
	"path/filepath"
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
	Microbatches  int
	Schedule      string // generator name, or a .csv file in PyTorch's format
	VirtualStages int
	Partition     string // markers, layout or auto ("": markers when the model has any, else auto)
	Layout        string // for Partition == "layout"
	Mem           int64  // bytes per device for auto partitioning (0: unlimited)
	// Recompute: none, selective or full.
	Recompute string
	// Training.
	ForwardOnly bool
	Loss        string // ONNX models without a loss: "ce" or "mse"
	LossOutput  int
	Optimizer   string // pass options, e.g. "adamw" or "sgd{lr=0.1}"
	// Pass manager.
	Passes passes.Config
}

// Result is a compiled job.
type Result struct {
	Module *ir.Module
	Output *codegen.Output
}

// Compile loads the model and produces the job in memory.
func Compile(model string, opts Options) (*Result, error) {
	if opts.PP < 1 {
		opts.PP = 1
	}
	if opts.Microbatches < 1 {
		opts.Microbatches = 1
	}
	lo := opts.Load
	lo.Microbatches = opts.Microbatches
	m, src, err := Load(model, lo)
	if err != nil {
		return nil, err
	}
	m.Attrs = m.Attrs.Set("microbatches", ir.Int(opts.Microbatches))
	pipeline := []string{"canonicalize", "cse", "dce"}
	hasLoss := false
	if f := m.Func(ir.ForwardFunc); f != nil {
		for _, ra := range f.ResultAttrs {
			hasLoss = hasLoss || ra.Has(ir.AttrLoss)
		}
	}
	if !opts.ForwardOnly && !hasLoss {
		kind := opts.Loss
		if kind == "" {
			kind = "ce"
		}
		pipeline = append(pipeline, fmt.Sprintf("add-loss{kind=%s,output=%d}", kind, opts.LossOutput))
	}
	// The schedule decides how many stages each rank holds (interleaved and V-shaped
	// schedules default to two), so build it before partitioning.
	sched, err := loadSchedule(&opts)
	if err != nil {
		return nil, err
	}
	part := fmt.Sprintf("partition{pp=%d,virtual=%d,mem=%d", sched.Ranks, sched.Stages/sched.Ranks, opts.Mem)
	if opts.Partition != "" {
		part += ",mode=" + opts.Partition
	}
	if opts.Layout != "" {
		part += `,layout="` + opts.Layout + `"`
	}
	pipeline = append(pipeline, part+"}")
	if !opts.ForwardOnly {
		opt := opts.Optimizer
		if opt == "" {
			opt = "adamw"
		}
		if !strings.HasPrefix(opt, "optimizer") {
			name, rest, _ := strings.Cut(opt, "{")
			opt = "optimizer{kind=" + name
			if rest != "" {
				opt += "," + rest
			} else {
				opt += "}"
			}
		}
		pipeline = append(pipeline, "autodiff", opt, "cse", "dce")
	}
	split := "split-stages"
	if opts.Recompute != "" && opts.Recompute != "none" {
		split = fmt.Sprintf("split-stages{recompute=%s}", opts.Recompute)
	}
	pipeline = append(pipeline, split)
	pl, err := passes.ParsePipeline(strings.Join(pipeline, ","))
	if err != nil {
		return nil, err
	}
	if err := passes.Run(m, pl, opts.Passes); err != nil {
		return nil, err
	}
	cs, err := codegenSchedule(sched, m.Attrs.Int("stages", 1))
	if err != nil {
		return nil, err
	}
	optName := ""
	if !opts.ForwardOnly {
		optName = opts.Optimizer
		if optName == "" {
			optName = "adamw"
		}
	}
	out, err := codegen.Generate(m, codegen.Options{Schedule: cs, Optimizer: optName, Source: src, Recompute: opts.Recompute})
	if err != nil {
		return nil, err
	}
	if est, err := estimate(sched, out.Plan); err == nil {
		out.Plan.Estimate = est
	}
	return &Result{Module: m, Output: out}, nil
}

// StageCosts turns a plan's per-stage cost-model estimates into simulator costs (seconds,
// with the link model of passes.CostConstants). ok is false when the plan has no estimates.
func StageCosts(plan *codegen.Plan) (schedule.Cost, bool) {
	if len(plan.StageInfo) != plan.Stages || plan.Stages == 0 {
		return schedule.Cost{}, false
	}
	cc := passes.CostConstants
	cost := schedule.Cost{F: 1, I: 1, W: 1, Comm: cc.LinkLatency, Bandwidth: cc.LinkBandwidth}
	for _, st := range plan.StageInfo {
		cost.Stages = append(cost.Stages, schedule.StageCost{F: st.F, I: st.I, W: st.W,
			CommBytes: float64(st.SendBytes), ActBytes: float64(st.StashBytes)})
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
	return &codegen.Estimate{StepSeconds: res.StepTime, BubbleRatio: res.BubbleRatio, PeakActivations: res.PeakActivations}, nil
}

// loadSchedule makes the pipeline schedule: a generator by name, or a PyTorch CSV (whose
// rank count then sets --pp).
func loadSchedule(opts *Options) (*schedule.Schedule, error) {
	name := opts.Schedule
	if name == "" {
		name = "1f1b"
	}
	if !strings.HasSuffix(name, ".csv") {
		return schedule.Generate(name, opts.PP, opts.Microbatches, opts.VirtualStages)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := schedule.ParseCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if err := schedule.Validate(s); err != nil {
		return nil, &ScheduleError{File: name, Err: err}
	}
	if opts.PP > 1 && opts.PP != s.Ranks {
		return nil, fmt.Errorf("%s has %d ranks, --pp is %d", name, s.Ranks, opts.PP)
	}
	if s.Microbatches != opts.Microbatches {
		return nil, fmt.Errorf("%s has %d micro-batches, --microbatches is %d", name, s.Microbatches, opts.Microbatches)
	}
	if s.Stages%s.Ranks != 0 {
		return nil, fmt.Errorf("%s places %d stages on %d ranks; ppc needs the same number of stages on every rank", name, s.Stages, s.Ranks)
	}
	opts.PP = s.Ranks
	return s, nil
}

// ScheduleError is a schedule that fails validation (a failed check: exit status 1).
type ScheduleError struct {
	File string
	Err  error
}

func (e *ScheduleError) Error() string { return fmt.Sprintf("%s: %v", e.File, e.Err) }
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

// Write writes plan.json and the rank programs into dir.
func (r *Result) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, p := range r.Output.Programs {
		data, err := proto.Marshal(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, codegen.ProgramFile(i)), data, 0o644); err != nil {
			return err
		}
	}
	return codegen.WritePlan(dir, r.Output.Plan)
}
