package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/schedule"
)

// loadFlags are the frontend flags shared by import, compile and infer.
type loadFlags struct {
	dims, sets listFlag
	preset     string
	batch      int
}

func (l *loadFlags) register(fs *flag.FlagSet) {
	fs.Var(&l.dims, "dim", "bind an ONNX symbolic dim: `NAME=VALUE` (repeatable)")
	fs.Var(&l.sets, "set", "override a DSL config constant: `NAME=VALUE` (repeatable)")
	fs.StringVar(&l.preset, "preset", "", "DSL preset `NAME` (the model file lists them)")
	fs.IntVar(&l.batch, "batch", 0, "re-batch an ONNX model exported with a fixed batch of 1 to `N` samples: its inputs' leading dims and the Reshape shapes that carry the batch (0: as exported)")
}

func (l *loadFlags) options() (compiler.LoadOptions, error) {
	o := compiler.LoadOptions{Preset: l.preset, Batch: l.batch}
	if l.batch < 0 {
		return o, usagef("--batch must be positive (0: the model's own batch), got %d", l.batch)
	}
	for _, kv := range l.dims {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || k == "" || err != nil || n < 1 {
			return o, usagef("--dim %q: want NAME=VALUE with a positive integer", kv)
		}
		if o.Dims == nil {
			o.Dims = map[string]int{}
		}
		o.Dims[k] = n
	}
	for _, kv := range l.sets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return o, usagef("--set %q: want NAME=VALUE", kv)
		}
		if o.Set == nil {
			o.Set = map[string]string{}
		}
		o.Set[k] = v
	}
	return o, nil
}

func init() {
	commands = append(commands, &command{
		name: "compile", args: "MODEL -o DIR [flags]",
		summary: "Compile a model (.onnx, .ppm or .ir) into a plan and one program per rank, and print a summary.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			out := fs.String("o", "", "output `DIR` for plan.json and rank-NNNNN.ppx")
			var opts compiler.Options
			fs.IntVar(&opts.PP, "pp", 1, "pipeline-parallel ranks `N` (with a FILE.csv schedule: the file's row count; a value given must agree with it)")
			fs.IntVar(&opts.TP, "tp", 1, "tensor-parallel ranks `N` per stage (Megatron's column/row-parallel layers, vocab-parallel embedding and loss)")
			fs.IntVar(&opts.VocabMultiple, "make-vocab-size-divisible-by", compiler.DefaultVocabMultiple, "with --tp, pad a vocabulary that tp does not divide to the next multiple of `N`·tp, as Megatron-LM does (exact: the padded logits are masked out, checkpoints and exports hold the unpadded tensors); 1 pads to the next multiple of tp")
			fs.BoolVar(&opts.SP, "sp", false, "sequence parallelism with --tp: norms, dropout and residuals split along the sequence over the tp ranks")
			fs.IntVar(&opts.CP, "cp", 1, "context-parallel ranks `N`: each sequence split over N ranks, attention computed as ring attention (K/V blocks passed around the cp ring, merged by log-sum-exp); parameters replicated, their gradients summed over dp × cp")
			fs.StringVar(&opts.CPSplit, "cp-split", "zigzag", "how --cp splits a sequence: zigzag (2·cp chunks, rank i holding chunks i and 2·cp−1−i: equal causal attention work) or contiguous (rank i holds block i)")
			fs.IntVar(&opts.DP, "dp", 1, "data-parallel replicas `N`: each runs --microbatches micro-batches of the global batch, and gradients are summed over them")
			fs.IntVar(&opts.EP, "ep", 1, "expert-parallel ranks `N` (Megatron-Core's --expert-model-parallel-size): each mixture-of-experts layer's experts sharded over N ranks carved from the --dp ranks (N divides dp; ep varies fastest inside dp), tokens sent to their experts and back by all-to-all; expert gradients summed over the dp/N ranks holding the same experts")
			fs.IntVar(&opts.Zero, "zero", 0, "ZeRO `STAGE` with --dp: 1 shards optimizer state over the dp replicas, 2 also gradients, 3 also parameters (FSDP)")
			fs.IntVar(&opts.Microbatches, "microbatches", 0, "micro-batches `M` per step: the model's global batch is split M ways (an .ir file's shapes are already one micro-batch's) (0: a FILE.csv schedule's count, an .ir file's microbatches attribute, or 1; with a FILE.csv schedule a value given must agree with the file)")
			fs.StringVar(&opts.Schedule, "schedule", "", "pipeline schedule `S|FILE.csv`: "+strings.Join(schedule.Names(), ", ")+", or a schedule in PyTorch's CSV format (2.4's spelling B/W/BW or the later I/W/B, detected per file) (default 1f1b; gpipe with --token-slices and fewer micro-batches than ranks)")
			fs.IntVar(&opts.VirtualStages, "virtual-stages", 0, "stages per rank `V` for interleaved and V-shaped schedules; with a FILE.csv schedule the file's, which a value given must agree with (0: the schedule's default)")
			fs.BoolVar(&opts.ForwardOnly, "forward-only", false, "compile inference (no loss, no backward, no optimizer)")
			fs.StringVar(&opts.Partition, "partition", "", "how to cut the model into stages, `MODE`: markers, layout or auto (default: layout with --layout, auto with --mem, else markers when the model has any, else auto)")
			fs.StringVar(&opts.Layout, "layout", "", "Megatron-style stage `LAYOUT` for --partition layout, e.g. \"E,t*4|t*4|t*4|t*4,L\"")
			mem := fs.String("mem", "", "memory per device for --partition auto, `BYTES` with a unit, e.g. 80GiB (default: unlimited)")
			fs.IntVar(&opts.MaxInflight, "max-inflight", 0, "micro-batches `K` in flight per rank for --schedule zb-auto (default: the pipeline depth, ZB-H1's memory; 2·pp−1 is ZB-H2's)")
			fs.StringVar(&opts.GPU, "gpu", "", "device `PROFILE` the cost model's estimates assume: "+passes.DeviceNames()+", with figures overridden as h100-80gb{inter_node_bandwidth=25e9,gpus_per_node=4} (default a100-like)")
			fs.StringVar(&opts.TokenSlices, "token-slices", "", "cut each micro-batch's sequence into token slices (TeraPipe) for a causal model: `N|L1,L2,…|auto` (a count, explicit lengths summing to the sequence, or the cost model's choice)")
			fs.StringVar(&opts.Recompute, "recompute", "none", "activation recomputation `MODE`: none, selective (attention internals) or full (stash each layer's input, rebuild one layer at a time in the backward, as Megatron's --recompute-granularity full)")
			fs.StringVar(&opts.RecomputeMethod, "recompute-method", "uniform", "with --recompute full, as Megatron's: `METHOD` uniform (rebuild chunks of --recompute-num-layers consecutive layers from each chunk's input) or block (rebuild only the first --recompute-num-layers layers of each stage, stash the rest)")
			fs.IntVar(&opts.RecomputeLayers, "recompute-num-layers", 1, "with --recompute full: layers `N` per rebuilt chunk (uniform) or rebuilt per stage (block); the embedding and the loss head count as layers")
			loss := fs.String("loss", "ce", "loss `KIND` for models without one (ONNX models without a scalar output named loss, which is their loss): ce (softmax cross-entropy against class labels) or mse; ce{axis=N} names the class axis, by default the last, or 1 for [N,C,1,…,1] logits of rank ≥ 4 (a pooled convolutional classifier)")
			fs.IntVar(&opts.LossOutput, "loss-output", 0, "which model output `N` the loss applies to (models without a loss)")
			fs.StringVar(&opts.Optimizer, "optimizer", "adamw", "optimizer `SPEC`: adamw or sgd, with options as adamw{lr=3e-4,weight_decay=0.1} (see 'ppc passes')")
			clipGrad := fs.String("clip-grad", "", "clip the gradients to global L2 norm `NORM` each step (torch.nn.utils.clip_grad_norm_: over every rank's gradients, each parameter counted once)")
			lrSchedule := fs.String("lr-schedule", "", "learning-rate `SCHEDULE` after the warmup: constant (the default), linear or cosine decay to --min-lr at --lr-decay-steps (Megatron-LM's; the step count comes from the checkpoint on resume)")
			warmup := fs.String("warmup-steps", "", "steps `N` of linear warmup from 0 to the optimizer's lr (default 0)")
			decay := fs.String("lr-decay-steps", "", "with --lr-schedule linear or cosine: the step `N` at which the rate reaches --min-lr")
			minLR := fs.String("min-lr", "", "with --lr-schedule linear or cosine: the final learning rate `LR` (default 0)")
			fs.StringVar(&opts.Precision, "precision", "fp32", "compute `DTYPE`: fp32, bf16 or fp16 (mixed precision, Megatron-LM's recipe: 16-bit parameters, fp32 main parameters and optimizer state held by the optimizer; fp16 with dynamic loss scaling)")
			fs.StringVar(&opts.GradPrecision, "grad-precision", "fp32", "`DTYPE` gradients accumulate over micro-batches and reduce over dp in: fp32 (Megatron's --accumulate-allreduce-grads-in-fp32) or, with --precision bf16|fp16, that dtype")
			pf := registerPassFlags(fs)
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one model file, got %d arguments", len(args))
				}
				if *out == "" {
					return usagef("-o DIR is required")
				}
				lo, err := lf.options()
				if err != nil {
					return err
				}
				opts.Load = lo
				set := setFlags(fs)
				if opts.VocabMultiple < 1 {
					return usagef("--make-vocab-size-divisible-by must be a positive integer, got %d (1 pads to the next multiple of --tp)", opts.VocabMultiple)
				}
				switch opts.Partition {
				case "", "markers", "layout", "auto":
				default:
					return usagef("--partition must be markers, layout or auto, got %q", opts.Partition)
				}
				// Flags that only apply to one partitioning mode imply it, and conflict with
				// another: the partitioner would otherwise ignore them without a word.
				if opts.Layout != "" {
					if opts.Partition != "" && opts.Partition != "layout" {
						return usagef("--layout applies to --partition layout, not --partition %s", opts.Partition)
					}
					opts.Partition = "layout"
				} else if opts.Partition == "layout" {
					return usagef("--partition layout needs --layout, e.g. --layout \"E,t*4|t*4,L\"")
				}
				if set["mem"] {
					if opts.Mem, err = parseBytes(*mem); err != nil {
						return usagef("--mem: %v", err)
					}
					if opts.Partition != "" && opts.Partition != "auto" {
						return usagef("--mem applies to --partition auto, not --partition %s", opts.Partition)
					}
					opts.Partition = "auto"
				}
				switch opts.Precision {
				case "fp32", "bf16", "fp16":
				default:
					return usagef("--precision must be fp32, bf16 or fp16, got %q", opts.Precision)
				}
				if opts.GradPrecision != "fp32" && opts.GradPrecision != opts.Precision {
					return usagef("--grad-precision must be fp32 or the --precision dtype (%s), got %q", opts.Precision, opts.GradPrecision)
				}
				switch opts.Recompute {
				case "none", "selective", "full":
				default:
					return usagef("--recompute must be none, selective or full, got %q", opts.Recompute)
				}
				switch opts.RecomputeMethod {
				case passes.RecomputeUniform, passes.RecomputeBlock:
				default:
					return usagef("--recompute-method must be uniform or block, got %q", opts.RecomputeMethod)
				}
				if opts.RecomputeLayers < 1 {
					return usagef("--recompute-num-layers must be at least 1, got %d", opts.RecomputeLayers)
				}
				if (set["recompute-method"] || set["recompute-num-layers"]) && opts.Recompute != "full" {
					return usagef("--recompute-method and --recompute-num-layers apply to --recompute full (got --recompute %s)", opts.Recompute)
				}
				if err := compiler.CheckLoss(*loss); err != nil {
					return usageError{err.Error()}
				}
				if set["loss"] {
					opts.Loss = *loss // unset: the compiler's default, and no complaint for models with a loss
				}
				if opts.ForwardOnly {
					for _, f := range []string{"optimizer", "loss", "loss-output", "clip-grad", "lr-schedule", "warmup-steps", "lr-decay-steps", "min-lr"} {
						if set[f] {
							return usagef("--%s does not apply to --forward-only (no loss, no backward, no optimizer)", f)
						}
					}
					if opts.Recompute != "none" {
						return usagef("--recompute does not apply to --forward-only (no backward to recompute for)")
					}
				}
				if !opts.ForwardOnly {
					var sched [][2]string
					for _, o := range [][3]string{{"clip-grad", "clip", *clipGrad}, {"lr-schedule", "schedule", *lrSchedule}, {"warmup-steps", "warmup", *warmup}, {"lr-decay-steps", "decay_steps", *decay}, {"min-lr", "min_lr", *minLR}} {
						if set[o[0]] {
							sched = append(sched, [2]string{o[1], o[2]})
						}
					}
					spec, err := compiler.WithOptimizerOptions(opts.Optimizer, sched)
					if err != nil {
						return usagef("%v", err)
					}
					opts.Optimizer = spec
					if err := compiler.CheckOptimizer(opts.Optimizer); err != nil {
						return usageError{err.Error()}
					}
				}
				if (set["microbatches"] && opts.Microbatches < 1) || opts.PP < 1 || opts.TP < 1 || opts.DP < 1 || opts.EP < 1 {
					return usagef("--pp, --tp, --dp, --ep and --microbatches must be at least 1")
				}
				if opts.CP < 1 {
					return usagef("--cp must be at least 1 (1: no context parallelism), got %d", opts.CP)
				}
				if opts.CPSplit != passes.CPZigzag && opts.CPSplit != passes.CPContiguous {
					return usagef("--cp-split %q: want zigzag or contiguous", opts.CPSplit)
				}

				if set["pp"] && schedule.IsCSVName(opts.Schedule) {
					// The compiler takes --pp 1, the default, for "not given"; an explicit
					// one must agree with the file too (schedule.CheckFileShape). A file that
					// does not read is reported by the compile.
					if s, err := schedule.ReadCSVFile(opts.Schedule); err == nil {
						if err := schedule.CheckFileShape(s, opts.Schedule, opts.PP, 0, 0); err != nil {
							return usagef("%v", err)
						}
					}
				}
				if opts.SP && opts.TP < 2 {
					return usagef("--sp splits the sequence over the tensor-parallel ranks: it needs --tp 2 or more")
				}
				switch {
				case opts.Zero < 0 || opts.Zero > 3:
					return usagef("--zero must be 1, 2 or 3 (0: off), got %d", opts.Zero)
				case opts.Zero > 0 && opts.DP < 2:
					return usagef("--zero %d shards over the data-parallel replicas: it needs --dp 2 or more", opts.Zero)
				case opts.Zero > 0 && opts.ForwardOnly:
					return usagef("--zero does not apply to --forward-only (no optimizer)")
				}
				if opts.Passes, err = pf.config(e); err != nil {
					return err
				}
				// A big model takes a while to compile: find out now whether -o can be a directory.
				if err := checkOutputDir(*out); err != nil {
					return fmt.Errorf("-o: %v", err)
				}
				res, err := compiler.Compile(args[0], opts)
				if err != nil {
					return err
				}
				if err := res.Write(*out); err != nil {
					return fmt.Errorf("-o: %w", trimPathError(err))
				}
				printSummary(e.stdout, res, *out)
				return nil
			}
		},
	})
}

// checkOutputDir checks, without creating anything, that dir is a directory or can be made
// one: it, or its nearest existing ancestor, must be a directory.
func checkOutputDir(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s is a file, not a directory", p)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(p) == p {
			return trimPathError(err)
		}
	}
}

// passFlags are the pass-manager flags of compile.
type passFlags struct {
	verifyEach, afterAll, afterChange bool
	before, after                     listFlag
	dumpDir                           string
}

func registerPassFlags(fs *flag.FlagSet) *passFlags {
	p := &passFlags{}
	fs.BoolVar(&p.verifyEach, "verify-each", true, "verify the IR after every pass")
	fs.BoolVar(&p.afterAll, "print-ir-after-all", false, "print the IR after every pass (to standard error)")
	fs.BoolVar(&p.afterChange, "print-ir-after-change", false, "print the IR after each pass that changed it")
	fs.Var(&p.before, "print-ir-before", "print the IR before the named `PASS` (repeatable)")
	fs.Var(&p.after, "print-ir-after", "print the IR after the named `PASS` (repeatable)")
	fs.StringVar(&p.dumpDir, "dump-dir", "", "write the IR after each pass to `DIR`/NN-pass.ir, replacing the NN-*.ir files an earlier run wrote there (other files stay)")
	return p
}

func (p *passFlags) config(e *env) (cfg passesConfig, err error) {
	for _, name := range append(append([]string{}, p.before...), p.after...) {
		if !knownPass(name) {
			return cfg, usagef("--print-ir-before/after: unknown pass %q", name)
		}
	}
	if p.dumpDir != "" {
		if err := checkWritableDir(p.dumpDir); err != nil {
			return cfg, fmt.Errorf("--dump-dir: %v", err)
		}
	}
	cfg.VerifyEach, cfg.PrintAfterAll, cfg.PrintAfterChange = p.verifyEach, p.afterAll, p.afterChange
	cfg.PrintBefore, cfg.PrintAfter, cfg.DumpDir, cfg.Out = p.before, p.after, p.dumpDir, e.stderr
	cfg.PrintOptions = ir.PrintOptions{ElideAbove: 64}
	return cfg, nil
}

func printSummary(w io.Writer, res *compiler.Result, dir string) {
	p := res.Output.Plan
	var params int64
	for _, pr := range p.Params {
		n := int64(1)
		for _, d := range pr.Shape {
			n *= int64(d)
		}
		params += n
	}
	// Every replica of a pipeline rank runs its program: the step's FLOPs count each.
	var flops int64
	for _, pr := range p.Programs {
		flops += pr.FLOPs * int64(p.Replicas())
	}
	kind := "training"
	if !p.Training {
		kind = "inference"
	}
	fmt.Fprintf(w, "compiled %s (%s) into %s\n", p.Model, kind, dir)
	fmt.Fprintf(w, "  parameters   %s (%d tensors)\n", groupDigits(params), len(p.Params))
	if p.MoE != nil {
		printExperts(w, p, params)
	}
	for _, pr := range p.Params {
		if pr.Padded != nil {
			fmt.Fprintf(w, "  padded       %s %s → %s for --tp %d (checkpoints and exports hold %s; the padded logits are masked out)\n",
				pr.Name, shapeText(pr.Shape), shapeText(pr.Padded), p.Mesh.Size("tp"), shapeText(pr.Shape))
		}
	}
	mb := fmt.Sprintf("%d micro-batch(es)", p.Microbatches)
	if p.Mesh.DP > 1 {
		mb = fmt.Sprintf("%d micro-batch(es) per replica, %d in all", p.Microbatches, p.GlobalMicrobatches())
	}
	cpText := ""
	if p.Mesh.CP > 1 {
		cpText = fmt.Sprintf(" cp=%d", p.Mesh.CP)
	}
	epText := ""
	if p.Mesh.EP > 1 {
		epText = fmt.Sprintf(" (ep=%d inside it, edp=%d)", p.Mesh.EP, p.Mesh.DP/p.Mesh.EP)
	}
	fmt.Fprintf(w, "  mesh         pp=%d dp=%d%s%s tp=%d: %d rank(s) running %d program(s), %d stage(s), schedule %s, %s\n",
		p.Mesh.PP, p.Mesh.DP, epText, cpText, p.Mesh.TP, p.World, len(p.Programs), p.Stages, p.Schedule.Name, mb)
	if p.Mesh.EP > 1 {
		fmt.Fprintf(w, "  ep           experts sharded over ep=%d ranks carved from dp (Megatron-Core's order: rank = tp + TP·(cp + CP·(ep + EP·(edp + EDP·pp)))), tokens exchanged by all-to-all; expert gradients summed over edp=%d, the others over dp=%d\n",
			p.Mesh.EP, p.Mesh.DP/p.Mesh.EP, p.Mesh.DP)
	}
	if c := p.CP; c != nil {
		printCPBalance(w, *c)
	}
	if s := res.Schedule; s != nil && s.Dialect != schedule.DialectNone {
		fmt.Fprintf(w, "  schedule     %s, read in the %v\n", p.Schedule.Name, s.Dialect)
	}
	if tp := p.TokenPlan; tp != nil {
		how := "as given"
		if tp.Auto {
			how = "chosen by the cost model"
		}
		f := schedule.Seconds.Format
		fmt.Fprintf(w, "  token slices %s per micro-batch (%s): predicted pipeline latency %s, against %s for the best uniform slicing %s and %s without slicing (TeraPipe's m·Σt + (K−1)·max t, %d micro-batch(es), %d stages, %s)\n",
			sliceList(tp.Lengths), how, f(tp.Latency), f(tp.UniformLatency), sliceList(tp.Uniform), f(tp.Unsliced), tp.Microbatches, tp.Stages, tp.Device)
	}
	fmt.Fprintf(w, "  FLOPs/step   %s (matmuls and convolutions)\n", formatFLOPs(flops))
	// One line per program: its dp × tp replicas (consecutive ranks) have the same memory.
	reps := p.Replicas()
	var memBytes int64
	if p.Device != nil {
		memBytes = p.Device.MemBytes
	}
	for _, r := range p.Programs {
		label, each := fmt.Sprintf("rank %d", r.PP), ""
		if reps > 1 {
			first := r.PP * reps
			label = fmt.Sprintf("pp %d", r.PP)
			each = fmt.Sprintf(" (each of ranks %d–%d: × %d %s replicas)", first, first+reps-1, reps, replicaAxes(p.Mesh))
		}
		mem := r.Memory(memBytes)
		fmt.Fprintf(w, "  %-12s %s; %d instructions%s\n", label, mem, r.Instructions, each)
		if memBytes > 0 && mem.Peak() > memBytes {
			fmt.Fprintf(w, "  %-12s does not fit: %s needs %s more than the %s of %s\n", "", label, formatBytes(mem.Peak()-memBytes), formatBytes(memBytes), p.Device.Name)
		}
	}
	if p.Recipe != "" {
		fmt.Fprintf(w, "  recipe       %s\n", p.Recipe)
	} else if p.Precision != "" {
		fmt.Fprintf(w, "  precision    %s compute, %s parameters\n", p.Precision, p.Precision)
	}
	if len(p.StageInfo) > 1 {
		printStages(w, p, params)
	}
	if p.PartitionNote != "" {
		fmt.Fprintf(w, "  note: %s\n", p.PartitionNote)
	}
	if p.LossNote != "" {
		fmt.Fprintf(w, "  note: %s\n", p.LossNote)
	}
	if e := p.Estimate; e != nil && p.World > 1 {
		dev := "an unrecorded device profile"
		if p.Device != nil {
			dev = "device profile " + p.Device.String()
		}
		sec := schedule.Seconds.Format
		fmt.Fprintf(w, "  estimate     for %s, by the cost model:\n", dev)
		// Collectives exist only on a dp or tp mesh; a pipeline alone keeps its short line.
		coll := ""
		if p.Mesh.DP > 1 || p.Mesh.TP > 1 || p.Mesh.CP > 1 {
			coll = " + collectives " + sec(e.CollectiveSeconds)
		}
		fmt.Fprintf(w, "               step %s = ideal %s (the busiest rank's compute) + bubble %s (%.3g%% of ideal)%s + transfers not hidden %s\n",
			sec(e.StepSeconds), sec(e.IdealSeconds), sec(e.BubbleSeconds), 100*e.BubbleRatio, coll, sec(e.CommSeconds))
		if coll != "" {
			fmt.Fprintf(w, "               (ideal: compute only; collectives: tp ones inside the passes, dp gradient reductions and ZeRO's optimizer ones, as far as compute does not hide them)\n")
		}
		if len(p.TokenSlices) > 1 {
			// Each slice keeps its own activations (its K/V pieces too, which later slices read).
			fmt.Fprintf(w, "               peak stashed token slices per rank %v (%d per micro-batch)\n", e.PeakActivations, len(p.TokenSlices))
		} else {
			fmt.Fprintf(w, "               peak stashed micro-batches per rank %v\n", e.PeakActivations)
		}
	}
}

// replicaAxes names the axes whose replicas share a program: "dp·tp", or "dp·cp·tp" with cp.
func replicaAxes(m codegen.Mesh) string {
	if m.CP > 1 {
		return "dp·cp·tp"
	}
	return "dp·tp"
}

// printCPBalance prints how context parallelism split the sequence and each cp rank's share
// of the attention work (query–key pairs a causal mask leaves), beside the other split's: the
// zig-zag split's point is that a causal model's ranks get equal shares.
func printCPBalance(w io.Writer, c passes.CPSplit) {
	shares := func(split string) string {
		s := c
		s.Split = split
		var out []string
		for _, x := range s.Work() {
			out = append(out, fmt.Sprintf("%.1f%%", 100*x))
		}
		return strings.Join(out, " ")
	}
	other := passes.CPContiguous
	if c.Split == passes.CPContiguous {
		other = passes.CPZigzag
	}
	kind := "causal attention"
	if !c.Causal {
		kind = "attention (not causal: every split is even)"
	}
	fmt.Fprintf(w, "  cp           %d ranks × %d tokens of %d, %s split; %s work per cp rank: %s (%s split: %s)\n",
		c.Size, c.Seq/c.Size, c.Seq, c.Split, kind, shares(c.Split), other, shares(other))
}

// printExperts splits a mixture of experts' parameters into the dense ones, which every
// token reads, and the experts', of which a token reads top_k/experts (each layer's experts
// being equal in size): the active parameters per token, as MoE models are described
// (Mixtral-8x7B: 46.7B parameters, 12.9B active).
func printExperts(w io.Writer, p *codegen.Plan, total int64) {
	var experts int64
	for _, pr := range p.Params {
		if pr.Expert {
			n := int64(1)
			for _, d := range pr.Shape {
				n *= int64(d)
			}
			experts += n
		}
	}
	m := p.MoE
	active := total - experts + experts*int64(m.TopK)/int64(max(m.Experts, 1))
	limit := ""
	if m.Groups > 1 {
		limit = fmt.Sprintf(" within %d of %d groups (node-limited)", m.TopKGroups, m.Groups)
	}
	fmt.Fprintf(w, "  experts      %s of them in %d MoE layer(s) of %d experts, top %d per token%s: %s active per token (%s dense + %s of the experts')\n",
		groupDigits(experts), m.Layers, m.Experts, m.TopK, limit, groupDigits(active), groupDigits(total-experts), groupDigits(active-(total-experts)))
}

// printStages prints the stage table: where each stage runs, what it holds, and how balanced
// the cost model thinks it is. A weight tied across stages is counted once per rank holding
// it, and a footnote says so when the column therefore sums to more than the model's
// parameter count (total).
//
// The imbalance is computed from the time/mb column, the cost model's F + I + W of the stage
// per micro-batch: what the partitioner balances and the simulator runs. FLOPs alone do not
// decide it: the cost model charges each op the larger of its compute time and its memory
// time, so a stage of memory-bound convolutions and elementwise ops can take as long as one
// of three times its FLOPs — and the table must show the cost its imbalance is of.
func printStages(w io.Writer, p *codegen.Plan, total int64) {
	var sum, worst float64
	var column int64
	for _, s := range p.StageInfo {
		t := s.F + s.I + s.W
		sum += t
		worst = max(worst, t)
		column += s.Params
	}
	mean := sum / float64(len(p.StageInfo))
	// Under tensor parallelism a rank holds its shards: a column says how much that is. The
	// rank column is the pipeline rank, which every dp × tp replica of it shares.
	perRank := p.Mesh.TP > 1
	// Collective time per stage, apart from compute: tensor-parallel per micro-batch (inside
	// F, I and W, and in the imbalance), data-parallel per step (gradient reductions and
	// ZeRO's optimizer collectives, outside them).
	tpComm, dpComm := p.Mesh.TP > 1, (p.Mesh.DP > 1 || p.Mesh.TP > 1) && p.Training
	fmt.Fprintf(w, "\n  %-5s %-4s %-14s %12s", "stage", "rank", "layers", "params")
	moe := p.MoE != nil
	if moe {
		fmt.Fprintf(w, " %12s", "of experts")
	}
	if perRank {
		fmt.Fprintf(w, " %12s", "params/rank")
	}
	fmt.Fprintf(w, " %12s %14s", "FLOPs/mb", "stash/mb")
	sliced := len(p.TokenSlices) > 1
	if sliced {
		fmt.Fprintf(w, " %12s", "K/V cache/mb")
	}
	if tpComm {
		fmt.Fprintf(w, " %11s", "tp comm/mb")
	}
	if dpComm {
		fmt.Fprintf(w, " %12s", "comm/step")
	}
	fmt.Fprintf(w, " %10s %10s\n", "time/mb", "imbalance")
	for _, s := range p.StageInfo {
		imb := 0.0
		if mean > 0 {
			imb = ((s.F + s.I + s.W) - mean) / mean * 100
		}
		fmt.Fprintf(w, "  %-5d %-4d %-14s %12s", s.Stage, s.Rank, s.Layers, groupDigits(s.Params))
		if moe {
			fmt.Fprintf(w, " %12s", groupDigits(s.ExpertParams))
		}
		if perRank {
			fmt.Fprintf(w, " %12s", groupDigits(s.RankParams))
		}
		fmt.Fprintf(w, " %12s %14s", formatFLOPs(int64(s.FLOPs)), formatBytes(s.StashBytes))
		if sliced {
			fmt.Fprintf(w, " %12s", formatBytes(s.KVBytes))
		}
		if tpComm {
			fmt.Fprintf(w, " %11s", schedule.Seconds.Format(s.TPComm()))
		}
		if dpComm {
			fmt.Fprintf(w, " %12s", schedule.Seconds.Format(s.StepComm(p.Microbatches)))
		}
		fmt.Fprintf(w, " %10s %+9.1f%%\n", schedule.Seconds.Format(s.F+s.I+s.W), imb)
	}
	for _, pr := range p.Params {
		if len(pr.Stages) < 2 {
			continue
		}
		n := int64(1)
		for _, d := range pr.Shape {
			n *= int64(d)
		}
		// Param.Ranks are pipeline ranks: say so when each stands for several replicas.
		ranks, rank := "ranks", "rank"
		if p.Replicas() > 1 {
			ranks, rank = "pipeline ranks", "pipeline rank"
		}
		if len(pr.Ranks) > 1 {
			fmt.Fprintf(w, "  tied: %s (%s) is used by stages %s and held on %s %s, counted in each\n",
				pr.Name, groupDigits(n), joinInts(pr.Stages), ranks, joinInts(pr.Ranks))
		} else {
			fmt.Fprintf(w, "  tied: %s (%s) is used by stages %s, held once on %s %s\n",
				pr.Name, groupDigits(n), joinInts(pr.Stages), rank, joinInts(pr.Ranks))
		}
	}
	if column != total {
		fmt.Fprintf(w, "  params column: %s = %s parameters + %s held on more than one rank\n",
			groupDigits(column), groupDigits(total), groupDigits(column-total))
	}
	if mean > 0 {
		fmt.Fprintf(w, "  bottleneck stage %.1f%% above the mean time/mb (cost model: F+I+W, each op the larger of its compute and memory time)\n", (worst-mean)/mean*100)
	}
}

// joinInts writes 0, 3 as "0 and 3" and 0, 3, 5 as "0, 3 and 5".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func formatFLOPs(f int64) string {
	v := float64(f)
	for _, u := range []string{"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"} {
		if v < 1000 {
			return fmt.Sprintf("%.3g %s", v, u)
		}
		v /= 1000
	}
	return fmt.Sprintf("%.3g EFLOP", v)
}

func formatBytes(n int64) string { return runtime.FormatBytes(n) }

// parseBytes reads a byte count with an optional unit: 1073741824, 80GiB, 80GB, 512MiB.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mul := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mul = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mul
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 || v*float64(mul) > 1<<62 {
		return 0, fmt.Errorf("%q is not a byte count (e.g. 80GiB)", s)
	}
	return int64(v * float64(mul)), nil
}

// sliceList writes token slice lengths compactly: [512, 384×2, 256].
func sliceList(v []int) string {
	var parts []string
	for i := 0; i < len(v); {
		j := i
		for j < len(v) && v[j] == v[i] {
			j++
		}
		if j-i > 1 {
			parts = append(parts, fmt.Sprintf("%d×%d", v[i], j-i))
		} else {
			parts = append(parts, fmt.Sprint(v[i]))
		}
		i = j
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// shapeText is a shape as [a, b].
func shapeText(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
