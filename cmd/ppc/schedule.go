package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/schedule"
)

// scheduleFlags select a schedule: a generator or a CSV.
type scheduleFlags struct {
	name            string
	pp, mb, virtual int
}

func (s *scheduleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.name, "schedule", "1f1b", "schedule: "+strings.Join(schedule.Names(), ", ")+", or a PyTorch `FILE.csv`")
	fs.IntVar(&s.pp, "pp", 4, "pipeline ranks")
	fs.IntVar(&s.mb, "microbatches", 8, "micro-batches")
	fs.IntVar(&s.virtual, "virtual-stages", 0, "stages per rank (0: the schedule's default)")
}

func (s *scheduleFlags) load() (*schedule.Schedule, error) {
	if strings.HasSuffix(s.name, ".csv") {
		f, err := os.Open(s.name)
		if err != nil {
			return nil, trimPathError(err)
		}
		defer f.Close()
		sc, err := schedule.ParseCSV(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", s.name, err)
		}
		return sc, nil
	}
	if s.pp < 1 || s.mb < 1 || s.virtual < 0 {
		return nil, usagef("--pp and --microbatches must be positive, --virtual-stages non-negative")
	}
	return schedule.Generate(s.name, s.pp, s.mb, s.virtual)
}

func init() {
	commands = append(commands, &command{
		name: "schedule", args: "--schedule S --pp N --microbatches M [--virtual-stages V] [--csv|--comms]",
		summary: "Generate (or load) a pipeline schedule, validate it, and print it as a grid or as PyTorch CSV.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var sf scheduleFlags
			sf.register(fs)
			csv := fs.Bool("csv", false, "print PyTorch's compute_only CSV")
			comms := fs.Bool("comms", false, "print PyTorch's compute_comms CSV (with SEND/RECV)")
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("takes no arguments")
				}
				s, err := sf.load()
				if err != nil {
					return err
				}
				if err := schedule.Validate(s); err != nil {
					return checkFailed{err}
				}
				switch {
				case *comms:
					if !s.HasComms() {
						if s, err = schedule.LowerComm(s); err != nil {
							return checkFailed{err}
						}
					}
					return s.WriteCSV(e.stdout, true)
				case *csv:
					return schedule.ComputeOnly(s).WriteCSV(e.stdout, false)
				}
				fmt.Fprint(e.stdout, s.Grid())
				return nil
			}
		},
	})
	commands = append(commands, &command{
		name: "simulate", args: "DIR | --schedule S|FILE.csv --pp N --microbatches M [--virtual-stages V] --cost F=1,I=1,W=1[,comm=0] [--json] [--trace FILE] [--svg FILE]",
		summary: "Simulate a pipeline schedule: step time, ideal time, bubble ratio and per-rank peak activation memory, with a Chrome trace and an SVG timeline.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var sf scheduleFlags
			sf.register(fs)
			costFlag := fs.String("cost", "", "per-action costs and link latency, e.g. F=1,I=1,W=1,comm=0.1 (default: unit costs; for a plan, the cost model's per-stage estimates in seconds)")
			asJSON := fs.Bool("json", false, "print the results as JSON")
			trace := fs.String("trace", "", "write a Chrome trace to `FILE`")
			svg := fs.String("svg", "", "write the timeline as SVG to `FILE`")
			return func(args []string) error {
				var s *schedule.Schedule
				var err error
				var cost schedule.Cost
				switch len(args) {
				case 0:
					if s, err = sf.load(); err != nil {
						return err
					}
					spec := *costFlag
					if spec == "" {
						spec = "F=1,I=1,W=1"
					}
					if cost, err = schedule.ParseCost(spec); err != nil {
						return usagef("--cost: %v", err)
					}
				case 1:
					plan, perr := codegen.ReadPlan(args[0])
					if perr != nil {
						return perr
					}
					if s, cost, err = planSchedule(plan, *costFlag); err != nil {
						return err
					}
				default:
					return usagef("want at most one plan directory")
				}
				if err := schedule.Validate(s); err != nil {
					return checkFailed{err}
				}
				res, err := schedule.Simulate(s, cost)
				if err != nil {
					return checkFailed{err}
				}
				if *trace != "" {
					if err := writeWith(*trace, res.WriteTrace); err != nil {
						return err
					}
				}
				if *svg != "" {
					if err := writeWith(*svg, res.WriteSVG); err != nil {
						return err
					}
				}
				if *asJSON {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(res)
				}
				fmt.Fprintf(e.stdout, "schedule %s: %d ranks, %d stages, %d micro-batches\n", s.Name, s.Ranks, s.Stages, s.Microbatches)
				unit := func(v float64) string { return fmt.Sprintf("%.4g", v) }
				if len(args) == 1 && *costFlag == "" {
					unit = func(v float64) string { return time.Duration(v * 1e9).String() }
					fmt.Fprintf(e.stdout, "  (cost model estimates per micro-batch and stage; see plan.json stage_info)\n")
				}
				fmt.Fprintf(e.stdout, "  step time     %s\n  ideal time    %s (busiest rank's compute)\n  bubble        %s (ratio %.4f of ideal)\n",
					unit(res.StepTime), unit(res.IdealTime), unit(res.BubbleTime), res.BubbleRatio)
				for r, a := range res.PeakActivations {
					fmt.Fprintf(e.stdout, "  rank %-3d      peak activations %d micro-batch(es)", r, a)
					if r < len(res.PeakActivationBytes) {
						fmt.Fprintf(e.stdout, ", %s", formatBytes(int64(res.PeakActivationBytes[r])))
					}
					fmt.Fprintln(e.stdout)
				}
				return nil
			}
		},
	})
}

func writeWith(path string, write func(w io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// planSchedule rebuilds the schedule recorded in a compiled plan.
func planSchedule(plan *codegen.Plan, costFlag string) (*schedule.Schedule, schedule.Cost, error) {
	var b strings.Builder
	for _, row := range plan.Schedule.Actions {
		b.WriteString(strings.Join(row, ","))
		b.WriteString("\n")
	}
	s, err := schedule.ParseCSV(strings.NewReader(b.String()))
	if err != nil {
		return nil, schedule.Cost{}, fmt.Errorf("plan's schedule: %v", err)
	}
	s.Name = plan.Schedule.Name
	if _, ok := compiler.StageCosts(plan); costFlag != "" || !ok {
		if costFlag == "" {
			costFlag = "F=1,I=1,W=1"
		}
		cost, err := schedule.ParseCost(costFlag)
		if err != nil {
			return nil, cost, usagef("--cost: %v", err)
		}
		return s, cost, nil
	}
	cost, _ := compiler.StageCosts(plan)
	return s, cost, nil
}
