package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

func init() {
	commands = append(commands, &command{
		name: "run", args: "DIR [flags]",
		summary: "Run a compiled plan: every rank in this process, training for --steps steps.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			steps := fs.Int("steps", 10, "training steps `N` to run")
			seed := fs.Uint64("seed", 1, "random seed `N` of parameter initialisation and synthetic data (with --resume, the checkpoint's unless given)")
			dev := fs.String("device", "cpu", "the `DEVICE` to run on: cpu or cuda")
			data := fs.String("data", "", "training data `SOURCE`: a token FILE (raw tokens of --data-dtype like nanoGPT's train.bin, or a 1-D .npy) for models whose inputs are tokens, or NAME=FILE.npy,NAME=FILE.npy,… with one array per input (first axis: samples, the same number in every array)")
			dataDType := fs.String("data-dtype", "uint16", "element type `T` of a raw token file given to --data: uint16 (nanoGPT's) or uint32; a .npy carries its own")
			save := fs.String("save", "", "write a safetensors checkpoint of parameters and optimizer state to `DIR` at the end")
			resume := fs.String("resume", "", "continue from the checkpoint in `DIR`")
			trace := fs.String("trace", "", "write a Chrome trace (Perfetto) of the executed instructions to `FILE`")
			traceSteps := fs.String("trace-steps", "", "trace only steps `A:B` (inclusive; 2:3, :5, 4:)")
			logJSON := fs.String("log-json", "", "append one JSON record per step to `FILE`, with a run id, the time and the learning rate")
			return func(args []string) error {
				start := time.Now()
				if len(args) != 1 {
					return usagef("want one plan directory, got %d arguments", len(args))
				}
				if *steps < 0 {
					return usagef("--steps must be non-negative")
				}
				set := setFlags(fs)
				if err := checkDataFlags(set, *data, *dataDType); err != nil {
					return err
				}
				traceFirst, traceLast, err := traceStepFlags(set, *trace, *traceSteps)
				if err != nil {
					return err
				}
				d, err := openDevice(*dev)
				if err != nil {
					return err
				}
				noteLoadingPlan(e, args[0])
				job, err := runtime.Load(args[0], d)
				if err != nil {
					return err
				}
				startupNote(e, "initialising parameters…")
				if err := job.Init(*seed); err != nil {
					return err
				}
				if *resume != "" {
					_, ckSeed, err := job.Resume(*resume)
					var ie *runtime.InputError
					if errors.As(err, &ie) {
						return err
					}
					if err != nil {
						fmt.Fprintf(e.stderr, "ppc run: %v\n", err)
					}
					// The seed also draws the synthetic data: keep the checkpoint's, so that
					// resuming continues the run that saved it.
					switch {
					case !setFlags(fs)["seed"]:
						*seed = ckSeed
					case ckSeed != *seed:
						fmt.Fprintf(e.stderr, "ppc run: warning: --seed %d differs from the checkpoint's seed %d; the data will not continue the saved run's\n", *seed, ckSeed)
					}
				}
				opts := runtime.Options{Seed: *seed}
				if *data != "" {
					dopts := runtime.DataOptions{Seed: *seed}
					if set["data-dtype"] {
						dopts.TokenDType = *dataDType
					}
					src, warnings, err := runtime.OpenData(*data, job.Plan, dopts)
					if err != nil {
						return err
					}
					for _, w := range warnings {
						fmt.Fprintf(e.stderr, "ppc run: warning: %s\n", w)
					}
					opts.Data = src
				}
				if err := checkTraceRange(set, *traceSteps, traceFirst, traceLast, job.StepsDone(), *steps); err != nil {
					return err
				}
				// Open every output before training, so a bad path fails now rather than
				// after the last step.
				if *save != "" {
					if err := checkWritableDir(*save); err != nil {
						return fmt.Errorf("--save: %v", err)
					}
				}
				var log *stepLog
				if *logJSON != "" {
					f, err := os.OpenFile(*logJSON, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
					if err != nil {
						return fmt.Errorf("--log-json: %v", trimPathError(err))
					}
					defer f.Close()
					log = newStepLog(f, job.Plan, start)
				}
				if *trace != "" {
					f, err := os.Create(*trace)
					if err != nil {
						return fmt.Errorf("--trace: %v", trimPathError(err))
					}
					if opts.Trace, err = runtime.NewTrace(f, len(job.Ranks), traceFirst, traceLast); err != nil {
						f.Close()
						return fmt.Errorf("--trace: %v", err)
					}
				}
				err = train(e, job, opts, *steps, log)
				if opts.Trace != nil {
					// Closed even when a step failed: the steps up to the failure are
					// what one looks at.
					if terr := opts.Trace.Close(); terr != nil && err == nil {
						err = fmt.Errorf("--trace: %v", terr)
					}
				}
				if err != nil {
					return err
				}
				if *save != "" {
					if err := job.Save(*save, *seed); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "saved checkpoint to %s\n", *save)
				}
				return nil
			}
		},
	})
}

// checkWritableDir creates dir if needed and checks that files can be created in it.
func checkWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return trimPathError(err)
	}
	f, err := os.CreateTemp(dir, ".ppc-write-check-*")
	if err != nil {
		return trimPathError(err)
	}
	f.Close()
	return os.Remove(f.Name())
}

func openDevice(name string) (device.Device, error) {
	switch name {
	case "cpu":
		return cpu.New(), nil
	case "cuda":
		return nil, fmt.Errorf("--device cuda: no CUDA device is available to this build (libcuda could not be opened); use --device cpu")
	}
	return nil, usagef("--device must be cpu or cuda, got %q", name)
}

func train(e *env, job *runtime.Job, opts runtime.Options, steps int, log *stepLog) error {
	prog := newProgress(e.stdout, job.StepsDone()+1, steps)
	defer prog.finish()
	var firstLoss, lastLoss float64
	var total time.Duration
	for i := 0; i < steps; i++ {
		res, err := job.Step(opts)
		if err != nil {
			return err
		}
		hasLoss := !math.IsNaN(res.Loss) || job.Plan.Training
		if job.Plan.Training && (math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0)) {
			if i == 0 {
				// No update has happened yet: the forward pass itself makes it (sqrt or log
				// of negative inputs, say), which "diverged" would misdescribe.
				return checkFailed{fmt.Errorf("step %d: loss is %v before any update of this run: the forward pass produces it from these parameters and data", res.Step, res.Loss)}
			}
			return checkFailed{fmt.Errorf("step %d: loss is %v (training diverged)", res.Step, res.Loss)}
		}
		if i == 0 {
			firstLoss = res.Loss
		}
		lastLoss = res.Loss
		total += res.Duration
		rec := stepRecord{Step: res.Step, Loss: res.Loss, TimeMS: float64(res.Duration.Microseconds()) / 1000, Samples: res.Samples}
		secs := res.Duration.Seconds()
		if secs > 0 {
			rec.SamplesPerS = float64(res.Samples) / secs
			rec.TokensPerS = float64(res.Tokens) / secs
		}
		if err := log.write(rec); err != nil {
			return fmt.Errorf("--log-json: %v", err)
		}
		loss, line := "", fmt.Sprintf("step %d", res.Step)
		if hasLoss {
			loss = fmt.Sprintf("loss=%.4f", res.Loss)
			line += " " + loss
		}
		line += fmt.Sprintf(" time=%s", roundDuration(res.Duration))
		if rec.TokensPerS > 0 {
			line += fmt.Sprintf(" tokens/s=%.0f", rec.TokensPerS)
		} else if rec.SamplesPerS > 0 {
			line += fmt.Sprintf(" samples/s=%.0f", rec.SamplesPerS)
		}
		prog.step(res.Step, line, loss)
	}
	prog.finish()
	if steps > 0 {
		mean := roundDuration(total / time.Duration(steps))
		if job.Plan.Training || !math.IsNaN(lastLoss) {
			fmt.Fprintf(e.stdout, "ran %d step(s): loss %.4f → %.4f, mean step %s\n", steps, firstLoss, lastLoss, mean)
		} else {
			fmt.Fprintf(e.stdout, "ran %d forward pass(es), mean %s\n", steps, mean)
		}
	}
	return nil
}

// roundDuration keeps three or four significant digits of a step time.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Millisecond:
		return d.Round(time.Microsecond)
	case d < 10*time.Second:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
