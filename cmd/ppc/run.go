package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

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
			data := fs.String("data", "", "training data `SOURCE`: a token FILE (raw uint16/uint32 like nanoGPT's train.bin, or a 1-D .npy) for models whose inputs are tokens, or NAME=FILE.npy,NAME=FILE.npy,… with one array per input (first axis: samples)")
			save := fs.String("save", "", "write a safetensors checkpoint of parameters and optimizer state to `DIR` at the end")
			resume := fs.String("resume", "", "continue from the checkpoint in `DIR`")
			trace := fs.String("trace", "", "write a Chrome trace (Perfetto) of the executed instructions to `FILE`")
			logJSON := fs.String("log-json", "", "append one JSON record per step to `FILE`")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one plan directory, got %d arguments", len(args))
				}
				if *steps < 0 {
					return usagef("--steps must be non-negative")
				}
				d, err := openDevice(*dev)
				if err != nil {
					return err
				}
				job, err := runtime.Load(args[0], d)
				if err != nil {
					return err
				}
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
					src, err := runtime.OpenData(*data, job.Plan, *seed)
					if err != nil {
						return err
					}
					opts.Data = src
				}
				// Open every output before training, so a bad path fails now rather than
				// after the last step.
				if *save != "" {
					if err := checkWritableDir(*save); err != nil {
						return fmt.Errorf("--save: %v", err)
					}
				}
				var logw io.Writer
				if *logJSON != "" {
					f, err := os.OpenFile(*logJSON, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
					if err != nil {
						return fmt.Errorf("--log-json: %w", trimPathError(err))
					}
					defer f.Close()
					logw = f
				}
				var traceFile *os.File
				if *trace != "" {
					if traceFile, err = os.Create(*trace); err != nil {
						return fmt.Errorf("--trace: %w", trimPathError(err))
					}
					defer traceFile.Close()
					opts.Trace = runtime.NewTrace()
				}
				if err := train(e, job, opts, *steps, logw); err != nil {
					if traceFile != nil {
						traceFile.Close()
						os.Remove(*trace) // empty: the trace is written at the end
					}
					return err
				}
				if traceFile != nil {
					if err := opts.Trace.Write(traceFile); err != nil {
						return fmt.Errorf("--trace: %w", trimPathError(err))
					}
					if err := traceFile.Close(); err != nil {
						return fmt.Errorf("--trace: %w", trimPathError(err))
					}
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

// isTerminal reports whether w is an interactive terminal (progress bar instead of lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

type stepRecord struct {
	Step        int     `json:"step"`
	Loss        float64 `json:"loss"`
	TimeMS      float64 `json:"time_ms"`
	Samples     int     `json:"samples"`
	SamplesPerS float64 `json:"samples_per_s"`
	TokensPerS  float64 `json:"tokens_per_s,omitempty"`
}

func train(e *env, job *runtime.Job, opts runtime.Options, steps int, logw io.Writer) error {
	var bar *progressbar.ProgressBar
	if isTerminal(e.stdout) && steps > 1 {
		bar = progressbar.NewOptions(steps, progressbar.OptionSetWriter(e.stdout), progressbar.OptionShowCount(),
			progressbar.OptionSetDescription("training"), progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(30))
	}
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
		if logw != nil {
			b, _ := json.Marshal(rec)
			if _, err := fmt.Fprintf(logw, "%s\n", b); err != nil {
				return fmt.Errorf("--log-json: %w", trimPathError(err)) // a full disk: stop rather than lose the log
			}
		}
		line := fmt.Sprintf("step %d loss=%.4f time=%s", res.Step, res.Loss, roundDuration(res.Duration))
		if !hasLoss {
			line = fmt.Sprintf("step %d time=%s", res.Step, roundDuration(res.Duration))
		}
		if rec.TokensPerS > 0 {
			line += fmt.Sprintf(" tokens/s=%.0f", rec.TokensPerS)
		} else if rec.SamplesPerS > 0 {
			line += fmt.Sprintf(" samples/s=%.0f", rec.SamplesPerS)
		}
		if bar != nil {
			bar.Describe(strings.SplitN(line, " time=", 2)[0])
			_ = bar.Add(1)
		} else {
			fmt.Fprintln(e.stdout, line)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
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
