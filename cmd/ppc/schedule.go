package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/schedule"
)

// scheduleFlags select a schedule: a generator or a CSV.
type scheduleFlags struct {
	name            string
	pp, mb, virtual int
	maxInflight     int
}

func (s *scheduleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.name, "schedule", "1f1b", "schedule `S|FILE.csv`: "+strings.Join(schedule.Names(), ", ")+", or a schedule in PyTorch's CSV format (2.4's spelling B/W/BW or the later I/W/B, detected per file)")
	fs.IntVar(&s.pp, "pp", 4, "pipeline ranks `N` (with a FILE.csv schedule: the file's row count; a value given must agree with it)")
	fs.IntVar(&s.mb, "microbatches", 8, "micro-batches `M` (with a FILE.csv schedule: the file's; a value given must agree with it)")
	fs.IntVar(&s.virtual, "virtual-stages", 0, "stages per rank `V`; with a FILE.csv schedule the file's, which a value given must agree with (0: the schedule's default)")
	fs.IntVar(&s.maxInflight, "max-inflight", 0, "micro-batches `K` in flight per rank for zb-auto (default: the pipeline depth)")
}

// csv reports whether the schedule comes from a file.
func (s *scheduleFlags) csv() bool { return schedule.IsCSVName(s.name) }

// load builds the schedule; a cost-aware one (zb-auto) for cost.
func (s *scheduleFlags) load(set map[string]bool, cost schedule.Cost) (*schedule.Schedule, error) {
	if s.pp < 1 || s.mb < 1 || s.virtual < 0 {
		return nil, usagef("--pp and --microbatches must be positive, --virtual-stages non-negative")
	}
	if s.csv() {
		// A CSV has its own shape: flags that describe it must agree (schedule.CheckFileShape).
		sc, err := schedule.ReadCSVFile(s.name)
		if err != nil {
			return nil, err
		}
		given := func(f string, v int) int {
			if set[f] {
				return v
			}
			return 0
		}
		if err := schedule.CheckFileShape(sc, s.name, given("pp", s.pp), given("microbatches", s.mb), given("virtual-stages", s.virtual)); err != nil {
			return nil, usagef("%v", err)
		}
		return sc, nil
	}
	sc, err := schedule.GenerateFor(s.name, s.pp, s.mb, s.virtual, cost, s.maxInflight)
	if err != nil && s.maxInflight != 0 {
		return nil, usagef("%v", err)
	}
	return sc, err
}

// validate checks a schedule; a file's problems are reported with its name.
func (s *scheduleFlags) validate(sc *schedule.Schedule) error {
	if err := schedule.Validate(sc); err != nil {
		if s.csv() {
			err = &compiler.ScheduleError{File: s.name, Dialect: sc.Dialect, Err: err}
		}
		return checkFailed{err}
	}
	return nil
}

// dialectNote says how a CSV file's backward actions were read; "" for a generator's.
func dialectNote(s *schedule.Schedule) string {
	if s.Dialect == schedule.DialectNone {
		return ""
	}
	return fmt.Sprintf("%s: read in the %v", s.Name, s.Dialect)
}

func init() {
	commands = append(commands, &command{
		name: "schedule", args: "--schedule S|FILE.csv [--pp N --microbatches M --virtual-stages V] [--csv|--comms]",
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
				if *csv && *comms {
					return usagef("--csv and --comms choose one output format; give one")
				}
				s, err := sf.load(setFlags(fs), schedule.UnitCost())
				if err != nil {
					return err
				}
				if err := sf.validate(s); err != nil {
					return err
				}
				// The CSV outputs are for PyTorch to read: the note about the dialect goes to
				// standard error there (they are written in the current one).
				note := dialectNote(s)
				switch {
				case *comms || *csv:
					if note != "" {
						fmt.Fprintf(e.stderr, "ppc schedule: %s; writing the %v\n", note, schedule.DialectCurrent)
					}
				case note != "":
					fmt.Fprintf(e.stdout, "# %s\n", note)
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
		name: "simulate", args: "DIR | --schedule S|FILE.csv [--pp N --microbatches M --virtual-stages V] [--token-slices K] [--max-inflight K] [--cost F=1,I=1,W=1,comm=0] [--json] [--trace FILE] [--svg FILE]",
		summary: "Simulate a pipeline schedule: step time, ideal time, bubble ratio and per-rank peak activation memory, with a Chrome trace and an SVG timeline.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			var sf scheduleFlags
			sf.register(fs)
			costFlag := fs.String("cost", "", "per-action costs and link latency `SPEC`, e.g. F=1,I=1,W=1,comm=0.1; wstash=0.43: the part of an activation a pending W holds, as zb-auto counts memory (default: unit costs; for a plan, the cost model's per-stage estimates in seconds)")
			asJSON := fs.Bool("json", false, "print the results as JSON")
			trace := fs.String("trace", "", "write a Chrome trace to `FILE`")
			svg := fs.String("svg", "", "write the timeline as SVG to `FILE`")
			slices := fs.Int("token-slices", 1, "cut each micro-batch into `K` token slices (TeraPipe), each costing 1/K of the stage's F, I, W, bytes and activations (a plan compiled with --token-slices is simulated with its own slices)")
			return func(args []string) error {
				var s *schedule.Schedule
				var err error
				var cost schedule.Cost
				if *slices < 1 {
					return usagef("--token-slices %d: want at least 1", *slices)
				}
				if len(args) > 0 && setFlags(fs)["token-slices"] {
					return usagef("--token-slices describes a schedule to simulate instead of a plan's; a plan's token slices are compiled into it")
				}
				switch len(args) {
				case 0:
					if cost, err = schedule.ParseCost(*costFlag); err != nil {
						return usagef("--cost: %v", err)
					}
					if s, err = sf.load(setFlags(fs), cost); err != nil {
						return err
					}
					if s, err = schedule.SliceTokens(s, *slices); err != nil {
						return usagef("--token-slices: %v", err)
					}
				case 1:
					// A plan has its schedule; flags describing another are a mistake.
					set := setFlags(fs)
					for _, f := range []string{"schedule", "pp", "microbatches", "virtual-stages", "max-inflight"} {
						if set[f] {
							return usagef("--%s describes a schedule to simulate instead of a plan's; give a plan directory or --schedule, not both", f)
						}
					}
					plan, perr := codegen.ReadPlan(args[0])
					if perr != nil {
						return perr
					}
					if s, cost, err = planSchedule(args[0], plan, *costFlag); err != nil {
						return err
					}
				default:
					return usagef("want at most one plan directory")
				}
				if err := sf.validate(s); err != nil {
					return err
				}
				res, err := schedule.Simulate(s, cost)
				var se *schedule.Error
				switch {
				case errors.As(err, &se):
					return checkFailed{err} // the schedule cannot run
				case err != nil:
					return err // the costs: bad input
				}
				if *trace != "" {
					if err := writeWith(*trace, res.WriteTrace); err != nil {
						return fmt.Errorf("--trace: %w", trimPathError(err))
					}
				}
				if *svg != "" {
					if err := writeWith(*svg, res.WriteSVG); err != nil {
						return fmt.Errorf("--svg: %w", trimPathError(err))
					}
				}
				if *asJSON {
					return printJSON(e.stdout, res)
				}
				if s.Slices > 1 {
					fmt.Fprintf(e.stdout, "schedule %s: %d rank(s), %d stage(s), %d micro-batch(es) of %d token slices\n", s.Name, s.Ranks, s.Stages, s.Microbatches/s.Slices, s.Slices)
				} else {
					fmt.Fprintf(e.stdout, "schedule %s: %d rank(s), %d stage(s), %d micro-batch(es)\n", s.Name, s.Ranks, s.Stages, s.Microbatches)
				}
				if sf.csv() {
					fmt.Fprintf(e.stdout, "  read in the %v\n", s.Dialect)
				}
				fmt.Fprintf(e.stdout, "  costs: %s\n", res.CostSource)
				f := res.Unit.Format
				fmt.Fprintf(e.stdout, "  step time     %s\n  ideal time    %s (busiest rank's compute)\n  bubble        %s (ratio %.4g of ideal)\n",
					f(res.StepTime), f(res.IdealTime), f(res.BubbleTime), res.BubbleRatio)
				if res.CollectiveTime > 0 || res.Collectives != nil {
					// The ideal time above is compute only; this is what collectives add.
					fmt.Fprintf(e.stdout, "  collectives   %s (tensor-parallel inside the actions, data-parallel reductions and step-end ones not hidden by compute)\n", f(res.CollectiveTime))
				}
				if res.CommTime > 0 {
					fmt.Fprintf(e.stdout, "  transfers     %s not hidden by compute\n", f(res.CommTime))
				}
				fmt.Fprintf(e.stdout, "  span          %s (longest first start to last end of a rank; bubble rate %.4g of it, the Zero Bubble paper's)\n",
					f(res.SpanTime), res.SpanBubbleRate)
				for r, a := range res.PeakActivations {
					if s.Slices > 1 {
						fmt.Fprintf(e.stdout, "  rank %-3d      peak activations %d token slice(s)", r, a)
					} else {
						fmt.Fprintf(e.stdout, "  rank %-3d      peak activations %d micro-batch(es)", r, a)
					}
					if r < len(res.PeakActivationsHeld) {
						fmt.Fprintf(e.stdout, " (%.4g activations held, wstash %g)", res.PeakActivationsHeld[r], cost.WStash)
					}
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

// planSchedule rebuilds the schedule recorded in a compiled plan. The runtime does not read
// plan.json's schedule: it executes the order baked into each rank's program. It does refuse
// a plan whose programs do not run this schedule (codegen.Plan.CheckSchedule), so what is
// simulated here is what `ppc run` executes, and an edited plan.json cannot make the two
// disagree. (Simulating needs the per-stage costs, which only plan.json has.)
func planSchedule(dir string, plan *codegen.Plan, costFlag string) (*schedule.Schedule, schedule.Cost, error) {
	var b strings.Builder
	for _, row := range plan.Schedule.Actions {
		b.WriteString(strings.Join(row, ","))
		b.WriteString("\n")
	}
	s, err := schedule.ParseCSV(strings.NewReader(b.String()))
	if err != nil {
		return nil, schedule.Cost{}, fmt.Errorf("%s: schedule: %v", filepath.Join(dir, "plan.json"), err)
	}
	s.Name = plan.Schedule.Name
	if n := len(plan.TokenSlices); n > 1 {
		s.Slices = n // the actions count units: slice j of micro-batch mb is mb·n + j
	}
	if cost, ok := compiler.StageCosts(plan); ok && costFlag == "" {
		return s, cost, nil
	}
	cost, err := schedule.ParseCost(costFlag)
	if err != nil {
		return nil, cost, usagef("--cost: %v", err)
	}
	return s, cost, nil
}
