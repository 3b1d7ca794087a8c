package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/planner"
	"ppc.dev/ppc/schedule"
)

func init() {
	commands = append(commands, &command{
		name: "plan", args: "MODEL.ppm --gpus N --gpu G [--global-batch B] [--seq S] [flags]",
		summary: "Choose pp × dp × tp, sp, schedule, virtual stages, micro-batches, recompute and ZeRO for a cluster: the top configurations by predicted step time, each with its memory per rank and the ppc compile command that builds it.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			var req planner.Request
			gpu := fs.String("gpu", "", "device `PROFILE`: "+passes.DeviceNames()+", with figures overridden as h100-80gb{inter_node_bandwidth=25e9} (required)")
			fs.IntVar(&req.GPUs, "gpus", 0, "GPUs `N` in the cluster (required)")
			perNode := fs.Int("gpus-per-node", 0, "GPUs `N` per node, sharing NVLink; --gpus must be a whole number of nodes, or fewer GPUs than one (default: the profile's, 8)")
			fs.IntVar(&req.GlobalBatch, "global-batch", 0, "global batch `B` in sequences per step (default: the model's batch)")
			fs.IntVar(&req.Seq, "seq", 0, "sequence length `S` in tokens (default: the model's seq)")
			fs.IntVar(&req.Top, "top", 5, "print the best `K` configurations")
			asJSON := fs.Bool("json", false, "print the plans as JSON")
			fs.StringVar(&req.Precision, "precision", "bf16", "compute `DTYPE`: fp32, bf16 or fp16")
			// The dimensions, with ppc compile's flags: given, they are fixed.
			fx := &req.Fix
			fs.IntVar(&fx.PP, "pp", 0, "fix the pipeline-parallel size `N`")
			fs.IntVar(&fx.DP, "dp", 0, "fix the data-parallel size `N`")
			fs.IntVar(&fx.TP, "tp", 0, "fix the tensor-parallel size `N`")
			fs.IntVar(&fx.EP, "ep", 0, "fix the expert-parallel size `N`, carved from dp (default: searched for a mixture-of-experts model among the sizes dividing its experts and dp whose ep group stays inside a node; 1: none)")
			fs.IntVar(&fx.CP, "cp", 0, fmt.Sprintf("fix the context-parallel size `N` (default: searched where each cp rank keeps at least %d tokens of a sequence; 1: none)", planner.MinCPTokens))
			fs.IntVar(&req.VocabMultiple, "make-vocab-size-divisible-by", compiler.DefaultVocabMultiple, "under tp, pad a vocabulary tp does not divide to the next multiple of `N`·tp, as ppc compile does (the printed commands repeat a value other than the default)")
			sp := fs.Bool("sp", false, "fix sequence parallelism on (--sp=false: off)")
			fs.IntVar(&fx.V, "virtual-stages", 0, "fix the stages per rank `V` (interleaved-1f1b)")
			fs.IntVar(&fx.Microbatches, "microbatches", 0, "fix the micro-batches `M` per replica")
			fs.IntVar(&fx.MicrobatchSize, "microbatch-size", 0, "fix the sequences `B` per micro-batch")
			fs.StringVar(&fx.Schedule, "schedule", "", "fix the schedule `S`: "+strings.Join(schedule.Names(), ", "))
			fs.StringVar(&fx.Recompute, "recompute", "", "fix recomputation `MODE`: none, selective or full")
			zero := fs.Int("zero", 0, "fix the ZeRO `STAGE`: 0, 1, 2 or 3")
			fs.StringVar(&fx.TokenSlices, "token-slices", "", "fix token slices (TeraPipe): `1|N|L1,L2,…|auto` (1: none; auto: on, TeraPipe's slicing; default: tried where micro-batches alone cannot fill the pipeline)")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one model file, got %d arguments", len(args))
				}
				set := setFlags(fs)
				if *gpu == "" || req.GPUs == 0 {
					return usagef("--gpu and --gpus are required, e.g. --gpus 128 --gpu h100-80gb")
				}
				dev, err := passes.ParseDevice(*gpu)
				if err != nil {
					return usagef("--gpu: %v", err)
				}
				if set["gpus-per-node"] {
					if *perNode < 1 {
						return usagef("--gpus-per-node must be at least 1, got %d", *perNode)
					}
					if dev, err = passes.ParseDevice(fmt.Sprintf("%s,gpus_per_node=%d}", strings.TrimSuffix(withBrace(dev.Name), "}"), *perNode)); err != nil {
						return usagef("--gpus-per-node: %v", err)
					}
				}
				req.Device = dev
				if req.GPUs < 1 || req.GlobalBatch < 0 || req.Seq < 0 || req.Top < 1 {
					return usagef("--gpus and --top must be at least 1, --global-batch and --seq positive")
				}
				if req.VocabMultiple < 1 {
					return usagef("--make-vocab-size-divisible-by must be a positive integer, got %d (1 pads to the next multiple of tp)", req.VocabMultiple)
				}
				for _, f := range []struct {
					name string
					v    int
				}{{"pp", fx.PP}, {"dp", fx.DP}, {"tp", fx.TP}, {"cp", fx.CP}, {"ep", fx.EP}, {"virtual-stages", fx.V}, {"microbatches", fx.Microbatches}, {"microbatch-size", fx.MicrobatchSize}} {
					if set[f.name] && f.v < 1 {
						return usagef("--%s must be at least 1, got %d", f.name, f.v)
					}
				}
				fx.SP, fx.Zero = -1, -1
				if set["sp"] {
					fx.SP = 0
					if *sp {
						fx.SP = 1
					}
				}
				if set["zero"] {
					if *zero < 0 || *zero > 3 {
						return usagef("--zero must be 0, 1, 2 or 3, got %d", *zero)
					}
					fx.Zero = *zero
				}
				switch fx.Recompute {
				case "", "none", "selective", "full":
				default:
					return usagef("--recompute must be none, selective or full, got %q", fx.Recompute)
				}
				switch req.Precision {
				case "fp32", "bf16", "fp16":
				default:
					return usagef("--precision must be fp32, bf16 or fp16, got %q", req.Precision)
				}
				if fx.Schedule != "" {
					known := false
					for _, n := range schedule.Names() {
						known = known || strings.EqualFold(n, fx.Schedule)
					}
					if !known {
						return usagef("--schedule %q: want one of %s", fx.Schedule, strings.Join(schedule.Names(), ", "))
					}
				}
				if req.Load, err = lf.options(); err != nil {
					return err
				}
				req.Model = args[0]
				res, err := planner.Search(req)
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(e.stdout, res)
				}
				printPlans(e.stdout, res)
				return nil
			}
		},
	})
}

// withBrace is a device spec ready for more overrides: "h100-80gb" → "h100-80gb{}".
func withBrace(spec string) string {
	if strings.HasSuffix(spec, "}") {
		return spec
	}
	return spec + "{}"
}

// printPlans prints the search's outcome: the table, the winner's memory per rank, why the
// runner-up lost, and the commands.
func printPlans(w io.Writer, r *planner.Result) {
	fmt.Fprintf(w, "ppc plan: %s (%s parameters) on %d × %s, global batch %d × %d tokens\n",
		r.Model, formatCount(r.Params), r.GPUs, r.Device, r.Batch, r.Seq)
	fmt.Fprintf(w, "  searched %d configurations (%d fit in memory, %d simulated) in %.2f s\n\n", r.Searched, r.Fit, r.Simulated, r.Seconds)
	// A cp column when a plan splits sequences (the tables of other searches read as before).
	cpCol := slices.ContainsFunc(r.Plans, func(p planner.Plan) bool { return p.Config.CP > 1 })
	epCol := slices.ContainsFunc(r.Plans, func(p planner.Plan) bool { return p.Config.EP > 1 })
	epCell := func(v string) string {
		if !epCol {
			return ""
		}
		return fmt.Sprintf("%-4s ", v)
	}
	cpCell := func(v string) string {
		if !cpCol {
			return ""
		}
		return fmt.Sprintf("%-4s ", v)
	}
	fmt.Fprintf(w, "  #  %-4s %-4s %s%s%-4s %-3s %-22s %-5s %-6s %-10s %-5s %9s %10s %11s %6s %12s %11s\n",
		"pp", "dp", epCell("ep"), cpCell("cp"), "tp", "sp", "schedule", "mbs", "m", "recompute", "zero", "step", "tokens/s", "TFLOP/s/GPU", "MFU", "bubble/ideal", "peak mem")
	for i, p := range r.Plans {
		c := p.Config
		sp := "-"
		if c.SP {
			sp = "✓"
		}
		sched := c.Schedule
		if c.V > 1 {
			sched += fmt.Sprintf(" v%d", c.V)
		}
		if n := len(c.TokenSlices); n > 1 {
			sched += fmt.Sprintf(" %d slices", n)
		}
		var peak int64
		for _, m := range p.PeakMemory {
			peak = max(peak, m)
		}
		fmt.Fprintf(w, "  %-2d %-4d %-4d %s%s%-4d %-3s %-22s %-5d %-6d %-10s %-5d %9s %10s %11.0f %5.1f%% %11.1f%% %11s\n", i+1, c.PP, c.DP, epCell(fmt.Sprint(max(c.EP, 1))), cpCell(fmt.Sprint(max(c.CP, 1))), c.TP, sp, sched,
			c.MicrobatchSize, c.Microbatches, c.Recompute, c.Zero, schedule.Seconds.Format(p.StepTime), formatCount(int64(p.TokensPerSec)),
			p.TFLOPsPerGPU, 100*p.MFU, 100*p.BubbleRatio, codegen.FormatBytes(peak))
	}
	best := r.Plans[0]
	f := schedule.Seconds.Format
	fmt.Fprintf(w, "\n  plan 1: step %s = ideal %s + bubble %s (%.1f%% of ideal) + collectives %s + transfers not hidden %s\n", f(best.StepTime), f(best.Ideal), f(best.BubbleTime), 100*best.BubbleRatio, f(best.Collectives), f(best.Transfers))
	if best.Config.CP > 1 {
		fmt.Fprintf(w, "  memory per pipeline rank (each of its dp × cp × tp GPUs):\n")
	} else {
		fmt.Fprintf(w, "  memory per pipeline rank (each of its dp × tp GPUs):\n")
	}
	// Consecutive ranks with the same memory share a line.
	for i := 0; i < len(best.Memory); {
		j := i + 1
		for j < len(best.Memory) && best.Memory[j] == best.Memory[i] {
			j++
		}
		label := fmt.Sprint(i)
		if j-i > 1 {
			label = fmt.Sprintf("%d–%d", i, j-1)
		}
		fmt.Fprintf(w, "    pp %-6s %s\n", label, best.Memory[i])
		i = j
	}
	if rt := r.Routing; rt != nil {
		printRouting(w, rt, max(best.Config.EP, 1))
	}
	if len(r.Plans) > 1 {
		fmt.Fprintf(w, "  why not plan 2: %s\n", explain(best, r.Plans[1]))
	}
	if u := r.Unfit; u != nil {
		var peak int64
		for _, m := range u.PeakMemory {
			peak = max(peak, m)
		}
		needs := "needs"
		if u.StepTime == 0 {
			needs = "needs at least" // not simulated: one micro-batch's activations
		}
		fmt.Fprintf(w, "  faster but does not fit: %s %s %s per GPU, over the %s of a %s\n", describe(u.Config), needs, codegen.FormatBytes(peak), codegen.FormatBytes(r.DeviceMem), r.Device)
	}
	fmt.Fprintf(w, "\n  commands:\n")
	for i, p := range r.Plans {
		fmt.Fprintf(w, "  %d: %s\n", i+1, p.Command)
	}
	fmt.Fprintf(w, "\n  assumptions: %s\n", r.Assumption)
}

// printRouting says what plan 1's all-to-alls move for a mixture of experts: with
// node-limited routing, on how many nodes a token's experts lie; across nodes, the bytes each
// dispatch sends off its node — the static buffer, which the cost model prices — beside
// what a dispatch sending one copy per (token, node) would, which ppc's does not.
func printRouting(w io.Writer, rt *planner.Routing, ep int) {
	limit := ""
	if rt.Groups > 1 {
		limit = fmt.Sprintf("node-limited (each token's %d experts within %d of %d groups); ", rt.TopK, rt.TopKGroups, rt.Groups)
	}
	if rt.Nodes == 1 {
		fmt.Fprintf(w, "  routing: %splan 1's ep group (ep %d) is inside one node, so its all-to-alls stay on NVLink\n", limit, ep)
		return
	}
	b := codegen.FormatBytes
	fmt.Fprintf(w, "  routing: %sa token's experts on up to %d of the ep group's %d nodes; each all-to-all sends %s of a rank's %s dispatch buffer off its node per layer and micro-batch whatever the router chooses (priced), where one copy per (token, node) would send at most %s (ppc's dispatch does not deduplicate)\n",
		limit, min(rt.FanOut, rt.Nodes), rt.Nodes, b(int64(rt.OffNode)), b(int64(rt.Buffer)), b(int64(rt.Dedup)))
}

// explain says why b lost to a: how much slower, and which parts of the step differ most.
func explain(a, b planner.Plan) string {
	f := schedule.Seconds.Format
	parts := []struct {
		name string
		d    float64
	}{{"compute", b.Ideal - a.Ideal}, {"bubble", b.BubbleTime - a.BubbleTime}, {"collectives", b.Collectives - a.Collectives}, {"transfers", b.Transfers - a.Transfers}}
	var diffs []string
	for _, p := range parts {
		if abs(p.d) >= 0.005*a.StepTime {
			sign := "+"
			if p.d < 0 {
				sign = "−"
			}
			diffs = append(diffs, fmt.Sprintf("%s %s%s", p.name, sign, f(abs(p.d))))
		}
	}
	why := strings.Join(diffs, ", ")
	if why == "" {
		why = "the parts differ by less than 0.5% each"
	}
	return fmt.Sprintf("%s is %.1f%% slower (%s): %s", describe(b.Config), 100*(b.StepTime/a.StepTime-1), f(b.StepTime), why)
}

func describe(c planner.Config) string {
	s := fmt.Sprintf("pp %d dp %d tp %d", c.PP, c.DP, c.TP)
	if c.CP > 1 {
		s = fmt.Sprintf("pp %d dp %d cp %d tp %d", c.PP, c.DP, c.CP, c.TP)
	}
	if c.EP > 1 {
		s = strings.Replace(s, fmt.Sprintf("dp %d", c.DP), fmt.Sprintf("dp %d ep %d", c.DP, c.EP), 1)
	}
	if c.SP {
		s += " sp"
	}
	s += " " + c.Schedule
	if c.V > 1 {
		s += fmt.Sprintf(" v%d", c.V)
	}
	if len(c.TokenSlices) > 1 {
		s += fmt.Sprintf(" with token slices %v", c.TokenSlices)
	}
	return s + fmt.Sprintf(", %d×%d sequences, recompute %s, ZeRO %d", c.Microbatches, c.MicrobatchSize, c.Recompute, c.Zero)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// formatCount writes 175e9 as 175.0G and 57600 as 57.6k.
func formatCount(n int64) string {
	f := float64(n)
	for _, u := range []string{"", "k", "M", "G", "T"} {
		if f < 1000 {
			if u == "" {
				return fmt.Sprintf("%d", n)
			}
			return fmt.Sprintf("%.1f%s", f, u)
		}
		f /= 1000
	}
	return fmt.Sprintf("%.1fP", f)
}
