package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime"
)

// loadFlags are the frontend flags shared by import, compile and infer.
type loadFlags struct {
	dims, sets listFlag
	preset     string
}

func (l *loadFlags) register(fs *flag.FlagSet) {
	fs.Var(&l.dims, "dim", "bind an ONNX symbolic dim: `NAME=VALUE` (repeatable)")
	fs.Var(&l.sets, "set", "override a DSL config constant: `NAME=VALUE` (repeatable)")
	fs.StringVar(&l.preset, "preset", "", "DSL preset `NAME`")
}

func (l *loadFlags) options() (compiler.LoadOptions, error) {
	o := compiler.LoadOptions{Preset: l.preset}
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
			fs.IntVar(&opts.PP, "pp", 1, "pipeline-parallel `STAGES` (ranks)")
			fs.IntVar(&opts.Microbatches, "microbatches", 1, "micro-batches per step (the global batch is split into M)")
			fs.StringVar(&opts.Schedule, "schedule", "1f1b", "pipeline schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv, dualpipev, or a PyTorch `FILE.csv`")
			fs.IntVar(&opts.VirtualStages, "virtual-stages", 0, "stages per rank for interleaved and V-shaped schedules (0: the schedule's default)")
			fs.BoolVar(&opts.ForwardOnly, "forward-only", false, "compile inference (no backward, no optimizer)")
			fs.StringVar(&opts.Partition, "partition", "", "how to cut the model into stages: markers, layout or auto (default: markers when the model has any, else auto)")
			fs.StringVar(&opts.Layout, "layout", "", "stage layout for --partition layout, e.g. \"E,t*4|t*4|t*4|t*4,L\"")
			mem := fs.String("mem", "", "memory per device for --partition auto, e.g. 80GiB (default: unlimited)")
			fs.StringVar(&opts.Recompute, "recompute", "none", "activation recomputation: none, selective (attention internals) or full (stash only stage inputs)")
			fs.StringVar(&opts.Loss, "loss", "ce", "loss for ONNX models without one: ce or mse")
			fs.IntVar(&opts.LossOutput, "loss-output", 0, "which model output the loss applies to")
			fs.StringVar(&opts.Optimizer, "optimizer", "adamw", "optimizer: adamw or sgd, with options as adamw{lr=3e-4,weight_decay=0.1}")
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
				if *mem != "" {
					if opts.Mem, err = parseBytes(*mem); err != nil {
						return usagef("--mem: %v", err)
					}
				}
				if opts.Layout != "" && opts.Partition == "" {
					opts.Partition = "layout"
				}
				switch opts.Partition {
				case "", "markers", "layout", "auto":
				default:
					return usagef("--partition must be markers, layout or auto, got %q", opts.Partition)
				}
				switch opts.Recompute {
				case "none", "selective", "full":
				default:
					return usagef("--recompute must be none, selective or full, got %q", opts.Recompute)
				}
				if opts.Loss != "ce" && opts.Loss != "mse" {
					return usagef("--loss must be ce or mse, got %q", opts.Loss)
				}
				if opts.Microbatches < 1 || opts.PP < 1 {
					return usagef("--pp and --microbatches must be at least 1")
				}
				if opts.Passes, err = pf.config(e); err != nil {
					return err
				}
				res, err := compiler.Compile(args[0], opts)
				if err != nil {
					return err
				}
				if err := res.Write(*out); err != nil {
					return err
				}
				printSummary(e.stdout, res, *out)
				return nil
			}
		},
	})
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
	fs.StringVar(&p.dumpDir, "dump-dir", "", "write the IR after each pass to `DIR`/NN-pass.ir")
	return p
}

func (p *passFlags) config(e *env) (cfg passesConfig, err error) {
	for _, name := range append(append([]string{}, p.before...), p.after...) {
		if !knownPass(name) {
			return cfg, usagef("--print-ir-before/after: unknown pass %q", name)
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
	var flops int64
	for _, r := range p.Ranks {
		flops += r.FLOPs
	}
	kind := "training"
	if !p.Training {
		kind = "inference"
	}
	fmt.Fprintf(w, "compiled %s (%s) into %s\n", p.Model, kind, dir)
	fmt.Fprintf(w, "  parameters   %s (%d tensors)\n", groupDigits(params), len(p.Params))
	fmt.Fprintf(w, "  mesh         pp=%d dp=%d tp=%d: %d rank(s), %d stage(s), schedule %s, %d micro-batch(es)\n",
		p.Mesh.PP, p.Mesh.DP, p.Mesh.TP, p.World, p.Stages, p.Schedule.Name, p.Microbatches)
	fmt.Fprintf(w, "  FLOPs/step   %s (matmuls and convolutions)\n", formatFLOPs(flops))
	for _, r := range p.Ranks {
		fmt.Fprintf(w, "  rank %-3d     peak %s = params %s + grads %s + optimizer %s + activations %s; %d instructions\n",
			r.Rank, formatBytes(r.PeakBytes), formatBytes(r.ParamBytes), formatBytes(r.GradBytes), formatBytes(r.StateBytes),
			formatBytes(r.ArenaBytes), r.Instructions)
	}
	if len(p.StageInfo) > 1 {
		printStages(w, p)
	}
	if e := p.Estimate; e != nil && p.World > 1 {
		fmt.Fprintf(w, "  simulated step (cost model): %s, bubble %.1f%% of the busiest rank's compute, peak stashed micro-batches per rank %v\n",
			time.Duration(e.StepSeconds*1e9), 100*e.BubbleRatio, e.PeakActivations)
	}
}

// printStages prints the stage table: where each stage runs, what it holds, and how balanced
// the cost model thinks it is.
func printStages(w io.Writer, p *codegen.Plan) {
	var sum, worst float64
	for _, s := range p.StageInfo {
		t := s.F + s.I + s.W
		sum += t
		worst = max(worst, t)
	}
	mean := sum / float64(len(p.StageInfo))
	fmt.Fprintf(w, "\n  %-5s %-4s %-14s %12s %12s %14s %10s\n", "stage", "rank", "layers", "params", "FLOPs/mb", "stash/mb", "imbalance")
	for _, s := range p.StageInfo {
		imb := 0.0
		if mean > 0 {
			imb = ((s.F + s.I + s.W) - mean) / mean * 100
		}
		fmt.Fprintf(w, "  %-5d %-4d %-14s %12s %12s %14s %+9.1f%%\n", s.Stage, s.Rank, s.Layers, groupDigits(s.Params),
			formatFLOPs(int64(s.FLOPs)), formatBytes(s.StashBytes), imb)
	}
	if mean > 0 {
		fmt.Fprintf(w, "  bottleneck stage %.1f%% above the mean (cost model)\n", (worst-mean)/mean*100)
	}
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
