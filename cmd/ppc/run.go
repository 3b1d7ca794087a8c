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
	"sync"
	"sync/atomic"
	"syscall"
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
			save := fs.String("save", "", "write a safetensors checkpoint of parameters and optimizer state to `DIR` at the end (atomically; the directory is locked for the run)")
			resume := fs.String("resume", "", "continue from a checkpoint: its `DIR` (what --save wrote) or its .safetensors file")
			partial := fs.Bool("allow-partial-resume", false, "with --resume, load the checkpoint's tensors that match the plan and keep the others as initialised, instead of refusing a checkpoint that differs")
			trace := fs.String("trace", "", "write a Chrome trace (Perfetto) of the executed instructions to `FILE`")
			logJSON := fs.String("log-json", "", "append one JSON record per step to `FILE`")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one plan directory, got %d arguments", len(args))
				}
				if *steps < 0 {
					return usagef("--steps must be non-negative")
				}
				if *partial && *resume == "" {
					return usagef("--allow-partial-resume applies to --resume")
				}
				// SIGINT and SIGTERM stop the run between steps, with the trace and checkpoint
				// written, from here on.
				intr := watchInterrupts(e)
				defer intr.close()
				// Claim the save directory before any work: a second run saving there fails
				// now, naming the holder, rather than replacing this run's checkpoint (or this
				// run replacing its) at the end. The lock also proves the directory writable.
				if *save != "" {
					lock, err := runtime.LockDir(*save)
					if err != nil {
						return fmt.Errorf("--save: %v", trimPathError(err))
					}
					defer lock.Unlock()
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
					r, err := job.Resume(*resume, *partial)
					var me *runtime.MismatchError
					if errors.As(err, &me) && me.Matching > 0 {
						return fmt.Errorf("%w\nto load the %d tensors that match and keep the others as initialised, add --allow-partial-resume", err, me.Matching)
					}
					if err != nil {
						return err
					}
					if r.Warning != "" {
						fmt.Fprintf(e.stderr, "ppc run: warning: %s\n", r.Warning)
					}
					if *partial {
						fmt.Fprintf(e.stderr, "ppc run: partial resume from %s: loaded %d tensors; %d left as initialised; %d of the checkpoint's not in the plan\n",
							*resume, r.Loaded, r.Kept, r.Ignored)
					}
					// The seed also draws the synthetic data: keep the checkpoint's, so that
					// resuming continues the run that saved it.
					switch {
					case !setFlags(fs)["seed"]:
						*seed = r.Seed
					case r.Seed != *seed:
						fmt.Fprintf(e.stderr, "ppc run: warning: --seed %d differs from the checkpoint's seed %d; the data will not continue the saved run's\n", *seed, r.Seed)
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
				var logw io.Writer
				if *logJSON != "" {
					f, err := os.OpenFile(*logJSON, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
					if err != nil {
						return fmt.Errorf("--log-json: %v", trimPathError(err))
					}
					defer f.Close()
					logw = f
				}
				var traceFile *os.File
				if *trace != "" {
					if traceFile, err = os.Create(*trace); err != nil {
						return fmt.Errorf("--trace: %v", trimPathError(err))
					}
					defer traceFile.Close()
					opts.Trace = runtime.NewTrace()
				}
				done, err := train(e, job, opts, *steps, logw, intr)
				if err != nil {
					if traceFile != nil {
						traceFile.Close()
						os.Remove(*trace) // empty: the trace is written at the end
					}
					return err
				}
				// Interrupted or not, what was done is written: the trace of the completed
				// steps, and a checkpoint of the last of them (none when no step completed,
				// so an interruption during start-up leaves the save directory as it was). A
				// signal from here on does not stop the writing, nor make the run interrupted.
				sig := intr.signal()
				var wrote []string
				if traceFile != nil {
					if err := opts.Trace.Write(traceFile); err != nil {
						return err
					}
					if err := traceFile.Close(); err != nil {
						return err
					}
					wrote = append(wrote, "trace written to "+*trace)
				}
				if *save != "" && (done > 0 || sig == nil) {
					if err := job.Save(*save, *seed); err != nil {
						return fmt.Errorf("--save: %v", err)
					}
					fmt.Fprintf(e.stdout, "saved checkpoint to %s\n", *save)
					wrote = append(wrote, fmt.Sprintf("checkpoint of step %d saved to %s", job.StepCount(), *save))
				}
				if sig != nil {
					msg := fmt.Sprintf("interrupted by %s at step %d", signalName(sig), job.StepCount())
					if done == 0 {
						msg = fmt.Sprintf("interrupted by %s before the first step", signalName(sig))
					}
					if len(wrote) == 0 {
						wrote = append(wrote, "nothing saved")
					}
					return interrupted{msg + "; " + strings.Join(wrote, "; ")}
				}
				return nil
			}
		},
	})
}

// interruption turns SIGINT and SIGTERM into a flag that the training loop checks between
// steps, so that a run stops cleanly: the step in progress completes, then the trace and
// the checkpoint are written. It only records the signal: the loop decides what to do.
type interruption struct {
	sig  atomic.Pointer[os.Signal]
	done chan struct{}
	wg   sync.WaitGroup
	stop func()
}

// watchInterrupts starts watching the signals env feeds (none in most tests).
func watchInterrupts(e *env) *interruption {
	in := &interruption{done: make(chan struct{}), stop: func() {}}
	if e.interrupts == nil {
		return in
	}
	sigs, stop := e.interrupts()
	in.stop = stop
	handle := func(s os.Signal) {
		// From now on the signals have their default effect: a second Ctrl-C stops at once
		// (a save in progress then leaves the previous checkpoint intact).
		stop()
		fmt.Fprintf(e.stderr, "ppc run: %s: finishing the step in progress, then writing what is done (interrupt again to stop at once)\n", signalName(s))
		in.sig.Store(&s) // after the message, so that it is printed before the command returns
	}
	// A signal already waiting (a channel fed before the run, as tests do) stops the run
	// before its first step, whatever the goroutine's timing.
	select {
	case s := <-sigs:
		handle(s)
		return in
	default:
	}
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		select {
		case s := <-sigs:
			handle(s)
		case <-in.done:
		}
	}()
	return in
}

// signalName spells the signals ppc run stops on as a user sends them.
func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// signal returns the signal received, or nil.
func (in *interruption) signal() os.Signal {
	if s := in.sig.Load(); s != nil {
		return *s
	}
	return nil
}

func (in *interruption) close() {
	close(in.done)
	in.wg.Wait()
	in.stop()
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

// train runs the steps and prints a line for each; it returns how many it ran, fewer than
// steps when interrupted.
func train(e *env, job *runtime.Job, opts runtime.Options, steps int, logw io.Writer, intr *interruption) (int, error) {
	var bar *progressbar.ProgressBar
	if isTerminal(e.stdout) && steps > 1 {
		bar = progressbar.NewOptions(steps, progressbar.OptionSetWriter(e.stdout), progressbar.OptionShowCount(),
			progressbar.OptionSetDescription("training"), progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(30))
	}
	var firstLoss, lastLoss float64
	var total time.Duration
	done := 0
	for ; done < steps && intr.signal() == nil; done++ {
		i := done
		res, err := job.Step(opts)
		if err != nil {
			return done, err
		}
		hasLoss := !math.IsNaN(res.Loss) || job.Plan.Training
		if job.Plan.Training && (math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0)) {
			if i == 0 {
				// No update has happened yet: the forward pass itself makes it (sqrt or log
				// of negative inputs, say), which "diverged" would misdescribe.
				return done, checkFailed{fmt.Errorf("step %d: loss is %v before any update of this run: the forward pass produces it from these parameters and data", res.Step, res.Loss)}
			}
			return done, checkFailed{fmt.Errorf("step %d: loss is %v (training diverged)", res.Step, res.Loss)}
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
			fmt.Fprintf(logw, "%s\n", b)
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
	if done > 0 {
		mean := roundDuration(total / time.Duration(done))
		if job.Plan.Training || !math.IsNaN(lastLoss) {
			fmt.Fprintf(e.stdout, "ran %d step(s): loss %.4f → %.4f, mean step %s\n", done, firstLoss, lastLoss, mean)
		} else {
			fmt.Fprintf(e.stdout, "ran %d forward pass(es), mean %s\n", done, mean)
		}
	}
	return done, nil
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
