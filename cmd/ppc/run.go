package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/cuda"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/dist"
)

func init() {
	commands = append(commands, &command{
		name: "run", args: "DIR [flags]",
		summary: "Run a compiled plan for --steps steps: every rank in this process, one process per rank with --nproc N, or one rank of a run that torchrun, srun or mpirun started.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			steps := fs.Int("steps", 10, "training steps `N` to run: with --resume, N more after the checkpoint's (a step-4 checkpoint and --steps 3 run steps 5 to 7); --until-step gives a total")
			until := fs.Int("until-step", 0, "run until step `N`, counting the checkpoint's steps with --resume (Megatron's --train-iters): a step-4 checkpoint and --until-step 7 run steps 5 to 7; instead of --steps")
			seed := fs.Uint64("seed", 1, "random seed `N` of parameter initialisation and synthetic data (with --resume, the checkpoint's unless given)")
			dev := fs.String("device", "cpu", "the `DEVICE` to run on: cpu or cuda (one GPU per process: LOCAL_RANK's in a launched run, else GPU 0)")
			tf32 := fs.Bool("tf32", false, "with --device cuda, let f32 matmuls round their operands to TF32 on tensor cores (faster; results then differ from the CPU device's by about 1e-3 relative)")
			dataSpec := fs.String("data", "", "training data `SOURCE`: a token FILE (raw tokens of --data-dtype like nanoGPT's train.bin, or a 1-D .npy) for models whose inputs are tokens, or NAME=FILE.npy,NAME=FILE.npy,… with one array per input (first axis: samples, the same number in every array)")
			dataDType := fs.String("data-dtype", "uint16", "element type `T` of a raw token file given to --data: uint16 (nanoGPT's) or uint32; a .npy carries its own")
			save := fs.String("save", "", "write a checkpoint of parameters and optimizer state (safetensors, a file per rank and an index) to `DIR` at the end (atomically; the directory is locked for the run)")
			saveEvery := fs.Int("save-every", 0, "with --save, also save after every `N`-th step, keeping the latest complete checkpoint (0: only at the end)")
			resume := fs.String("resume", "", "continue from a checkpoint: its `DIR` (what --save wrote) or its .safetensors file")
			partial := fs.Bool("allow-partial-resume", false, "with --resume, load the checkpoint's tensors that match the plan and keep the others as initialised, instead of refusing a checkpoint that differs")
			trace := fs.String("trace", "", "write a Chrome trace (Perfetto) of the executed instructions to `FILE`")
			traceSteps := fs.String("trace-steps", "", "trace only steps `A:B` (inclusive; 2:3, :5, 4:)")
			logJSON := fs.String("log-json", "", "append one JSON record per step to `FILE`, with a run id, the time and the learning rate")
			var timeout autoDuration
			fs.Var(&timeout, "timeout", "in a multi-process run, how long a rank waits for a peer's message before it stops the run as hung: a `DURATION` such as 90s or 10m (auto: 5m in the first step, then 10× the slowest step so far, at least 1m)")
			nproc := fs.Int("nproc", 0, "run the plan's ranks as `N` worker processes on this machine, supervised by this one (0: every rank in this process; else N must be the plan's world size)")
			return func(args []string) (err error) {
				start := time.Now()
				if len(args) != 1 {
					return usagef("want one plan directory, got %d arguments", len(args))
				}
				if *nproc != 0 {
					return superviseWorkers(e, *nproc, workerArgs(fs, args[0]))
				}
				// A process started by a launcher (torchrun, srun, mpirun, ppc run --nproc) is
				// one rank of a multi-process run.
				li, err := detectLaunch(e.getenvFunc())
				if err != nil {
					return err
				}
				if li != nil {
					// A worker of ppc run --nproc tells the launcher whose failure stopped it.
					defer func() { reportExit(li, err) }()
					// Every line this process writes to stderr, the final error included, says
					// which rank wrote it; only rank 0 prints the steps.
					e.stderr = &lineWriter{mu: new(sync.Mutex), w: e.stderr, prefix: fmt.Sprintf("[rank %d] ", li.Rank)}
					if li.Rank != 0 {
						e.stdout = io.Discard
					}
				}
				if *steps < 0 {
					return usagef("--steps must be non-negative")
				}
				set := setFlags(fs)
				switch {
				case set["until-step"] && set["steps"]:
					return usagef("--steps and --until-step both say how long to run: --steps counts the steps this run runs, --until-step the step it ends at; give one")
				case set["until-step"] && *until < 0:
					return usagef("--until-step must be non-negative")
				}
				if err := checkDataFlags(set, *dataSpec, *dataDType); err != nil {
					return err
				}
				traceFirst, traceLast, err := traceStepFlags(set, *trace, *traceSteps)
				if err != nil {
					return err
				}
				if *partial && *resume == "" {
					return usagef("--allow-partial-resume applies to --resume")
				}
				if set["timeout"] && timeout <= 0 {
					return usagef("--timeout must be positive")
				}
				switch {
				case set["save-every"] && *save == "":
					return usagef("--save-every applies to --save")
				case set["save-every"] && *saveEvery <= 0:
					return usagef("--save-every must be a positive number of steps")
				}
				// SIGINT and SIGTERM stop the run between steps, with the trace and checkpoint
				// written, from here on.
				intr := watchInterrupts(e)
				defer intr.close()
				// Claim the save directory before any work: a second run saving there fails
				// now, naming the holder, rather than replacing this run's checkpoint (or this
				// run replacing its) at the end. The lock also proves the directory writable.
				// In a multi-process run, rank 0 holds it for all (--save is one directory every
				// rank sees).
				if *save != "" && (li == nil || li.Rank == 0) {
					lock, err := checkpoint.LockDir(*save)
					if err != nil {
						return fmt.Errorf("--save: %w", trimPathError(err))
					}
					defer lock.Unlock()
				}
				if *tf32 && *dev != "cuda" {
					return usagef("--tf32 applies to --device cuda")
				}
				gpu, local := 0, 1
				if li != nil && li.LocalRank >= 0 {
					gpu, local = li.LocalRank, li.LocalWorld
				}
				d, note, err := openDevice(*dev, e.getenvFunc(), gpu, local, *tf32)
				if err != nil {
					return err
				}
				if note != "" && gpu == 0 {
					fmt.Fprintf(e.stderr, "ppc run: %s\n", note)
				}
				noteLoadingPlan(e, args[0])
				var job *runtime.Job
				if li == nil {
					job, err = runtime.Load(args[0], d)
				} else {
					job, err = runtime.LoadRank(args[0], d, li.Rank)
				}
				if err != nil {
					return err
				}
				defer job.Close()
				gcHeadroom(e.getenvFunc())
				var proc *dist.Process
				if li != nil {
					if proc, err = joinRun(e, job, li, time.Duration(timeout), runFlags(fs)); err != nil {
						return err
					}
					defer proc.Close()
					// From here on a failure of this process stops the others at once,
					// with its message.
					defer func() {
						if err != nil {
							proc.Abort(err)
						}
					}()
				}
				startupNote(e, "initialising parameters…")
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
				if *dataSpec != "" {
					dopts := data.Options{Seed: *seed}
					if set["data-dtype"] {
						dopts.TokenDType = *dataDType
					}
					src, warnings, err := data.Open(*dataSpec, job.Plan, dopts)
					if err != nil {
						return err
					}
					for _, w := range warnings {
						fmt.Fprintf(e.stderr, "ppc run: warning: %s\n", w)
					}
					opts.Data = src
				}
				if set["until-step"] {
					if *until < job.StepsDone() {
						return usagef("--until-step %d: the checkpoint %s is already at step %d", *until, *resume, job.StepsDone())
					}
					*steps = *until - job.StepsDone()
				}
				if *resume != "" {
					// --steps counts from the checkpoint: say which steps run, before any does.
					how := fmt.Sprintf("--steps %d counts from the checkpoint; --until-step N runs until step N", *steps)
					if set["until-step"] {
						how = fmt.Sprintf("--until-step %d", *until)
					}
					if *steps == 0 {
						fmt.Fprintf(e.stdout, "resumed from %s at step %d: no step to run (%s)\n", *resume, job.StepsDone(), how)
					} else {
						fmt.Fprintf(e.stdout, "resumed from %s at step %d: running steps %d to %d (%s)\n", *resume, job.StepsDone(), job.StepsDone()+1, job.StepsDone()+*steps, how)
					}
				}
				if err := checkTraceRange(set, *traceSteps, traceFirst, traceLast, job.StepsDone(), *steps); err != nil {
					return err
				}
				// Open every output before training, so a bad path fails now rather than
				// after the last step.
				var log *stepLog
				if *logJSON != "" && (li == nil || li.Rank == 0) { // rank 0 logs for every rank
					f, err := os.OpenFile(*logJSON, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
					if err != nil {
						return fmt.Errorf("--log-json: %w", trimPathError(err))
					}
					defer f.Close()
					log = newStepLog(f, job.Plan, start)
				}
				if *trace != "" {
					if opts.Trace, err = openTrace(*trace, job, proc, traceFirst, traceLast); err != nil {
						return fmt.Errorf("--trace: %w", trimPathError(err))
					}
				}
				opts.StopRequested = func() bool { return intr.signal() != nil }
				// --save-every: a checkpoint after every N-th step but the last (the final save
				// below writes that one).
				var afterStep func(step int, last bool) (string, error)
				savedStep := -1 // the step of the checkpoint last saved, if any
				if *saveEvery > 0 {
					afterStep = func(step int, last bool) (string, error) {
						if step%*saveEvery != 0 || last {
							return "", nil
						}
						if err := job.SaveAll(*save, *seed); err != nil {
							return "", fmt.Errorf("--save: %w", err)
						}
						savedStep = step
						return " (saved)", nil
					}
				}
				done, stoppedBy, err := train(e, job, opts, *steps, log, intr, afterStep)
				// Interrupted or not, what was done is written: the trace of the completed
				// steps (closed even when a step failed: the steps up to the failure are what
				// one looks at), and a checkpoint of the last of them (none when no step
				// completed, so an interruption during start-up leaves the save directory as
				// it was). A signal from here on does not stop the writing (a second one does,
				// at once), but the run still ends as interrupted.
				intr.writing.Store(true)
				stepsSig := intr.signal()
				var wrote []string
				if opts.Trace != nil {
					if terr := closeTrace(opts.Trace, *trace, proc); terr != nil && err == nil {
						err = fmt.Errorf("--trace: %w", trimPathError(terr))
					}
					wrote = append(wrote, "trace written to "+*trace)
				}
				if err != nil {
					return err
				}
				stopped := stepsSig != nil || stoppedBy != ""
				if *save != "" && (done > 0 || !stopped) {
					// A periodic save of the step the run stopped after (an interrupt during
					// it) is the final checkpoint: not written twice.
					if savedStep != job.StepCount() {
						if err := job.SaveAll(*save, *seed); err != nil {
							return fmt.Errorf("--save: %w", err)
						}
					}
					fmt.Fprintf(e.stdout, "saved checkpoint to %s\n", *save)
					wrote = append(wrote, fmt.Sprintf("checkpoint of step %d saved to %s", job.StepCount(), *save))
				}
				sig := intr.settle()
				if sig != nil || stoppedBy != "" {
					by := stoppedBy
					if sig != nil {
						by = signalName(sig)
					}
					var msg string
					switch {
					case !stopped:
						msg = fmt.Sprintf("interrupted by %s while writing what was done after step %d", by, job.StepCount())
					case done == 0:
						msg = fmt.Sprintf("interrupted by %s before the first step", by)
					default:
						msg = fmt.Sprintf("interrupted by %s at step %d", by, job.StepCount())
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
// the checkpoint are written. It only records the first signal: the loop decides what to
// do. A second signal ends the process at once with status 130, whatever the signal's
// inherited disposition (a run started in the background of a script ignores SIGINT once
// signal.Stop restores it, so the default effect cannot be relied on).
type interruption struct {
	e       *env
	sig     atomic.Pointer[os.Signal]
	writing atomic.Bool // the steps are over: the trace and checkpoint are being written
	sigs    <-chan os.Signal
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	stop    func()
}

// watchInterrupts starts watching the signals env feeds (none in most tests).
func watchInterrupts(e *env) *interruption {
	in := &interruption{e: e, done: make(chan struct{}), stop: func() {}}
	if e.interrupts == nil {
		return in
	}
	in.sigs, in.stop = e.interrupts()
	// A signal already waiting (a channel fed before the run, as tests do) stops the run
	// before its first step, whatever the goroutine's timing.
	select {
	case s := <-in.sigs:
		in.handle(s)
	default:
	}
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		for {
			select {
			case s := <-in.sigs:
				in.handle(s)
			case <-in.done:
				return
			}
		}
	}()
	return in
}

func (in *interruption) handle(s os.Signal) {
	if in.signal() != nil {
		fmt.Fprintf(in.e.stderr, "ppc run: %s again: stopping at once (a checkpoint being written is abandoned; the previous one stays intact)\n", signalName(s))
		in.e.exitNow(exitInterrupted)
		return
	}
	// Stored before the message (settle waits for this handler, so the message is still
	// printed before the command returns): once it is printed, the run has seen the signal.
	in.sig.Store(&s)
	if in.writing.Load() {
		fmt.Fprintf(in.e.stderr, "ppc run: %s: the steps are done; finishing writing the trace and checkpoint (interrupt again to stop at once)\n", signalName(s))
	} else {
		fmt.Fprintf(in.e.stderr, "ppc run: %s: finishing the step in progress, then writing what is done (interrupt again to stop at once)\n", signalName(s))
	}
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

// settle stops watching and returns the signal received, counting one delivered but not
// yet handled: a signal that came while the run wrote what it did still makes it
// interrupted. From here on the signals have their default effect.
func (in *interruption) settle() os.Signal {
	in.close()
	if in.sigs != nil {
		select {
		case s := <-in.sigs:
			if in.signal() == nil {
				in.handle(s)
			}
		default:
		}
	}
	return in.signal()
}

func (in *interruption) close() {
	in.once.Do(func() {
		close(in.done)
		in.wg.Wait()
		in.stop()
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

// openDevice opens the device of the process with local rank gpu among local processes on
// its machine. With more processes than GPUs, they share GPUs round robin (a test of a
// multi-process layout on one GPU), messages go through the host, and note says so.
func openDevice(name string, getenv func(string) string, gpu, local int, tf32 bool) (d device.Device, note string, err error) {
	switch name {
	case "cpu":
		return cpu.New(), "", nil
	case "cuda":
		// What is missing on this machine is bad input (exit 2), as is a driver that will
		// not open the GPU.
		r := cuda.Probe(getenv)
		if err := r.Usable(); err != nil {
			return nil, "", fmt.Errorf("--device cuda: %v; 'ppc devices' lists what was found; use --device cpu", err)
		}
		gpu, note = placeOnGPU(gpu, local, len(r.GPUs))
		c, err := cuda.Open(r, gpu, tf32, cuda.DefaultCacheDir(getenv))
		if err != nil {
			return nil, "", fmt.Errorf("--device cuda: %v", err)
		}
		if note != "" {
			c.Collectives = nil
		}
		return c, note, nil
	}
	return nil, "", usagef("--device must be cpu or cuda, got %q", name)
}

// placeOnGPU picks the GPU of the process with local rank lr among local processes on a
// machine with n GPUs: its own, or with more processes than GPUs one shared round robin, and
// then a note that messages go through the host.
func placeOnGPU(lr, local, n int) (gpu int, note string) {
	if local <= n {
		return lr, ""
	}
	return lr % n, fmt.Sprintf("%d processes share this machine's %d GPU(s): messages go through host memory and TCP, since NCCL does not run two members of a communicator on one GPU", local, n)
}

// train runs the steps and prints a line for each; it returns how many it ran, fewer than
// steps when interrupted. In a multi-process run every process stops after the same step:
// the first at whose end any of them has been interrupted (stoppedBy then says so when it
// was another process).
//
// afterStep, when set, runs after each step (a periodic checkpoint), told whether the step is
// the run's last; what it returns is appended to the step's line.
func train(e *env, job *runtime.Job, opts runtime.Options, steps int, log *stepLog, intr *interruption, afterStep func(step int, last bool) (string, error)) (done int, stoppedBy string, err error) {
	prog := newProgress(e.stdout, job.StepsDone()+1, steps)
	defer prog.finish()
	var firstLoss, lastLoss float64
	var total time.Duration
	multi := job.Process() != nil
	for ; done < steps && (multi || intr.signal() == nil) && stoppedBy == ""; done++ {
		i := done
		res, err := job.Step(opts)
		if err != nil {
			return done, "", err
		}
		if res.Stop && intr.signal() == nil {
			stoppedBy = "a signal to another rank"
		}
		if res.Stop && intr.signal() != nil {
			stoppedBy = signalName(intr.signal())
		}
		hasLoss := !math.IsNaN(res.Loss) || job.Plan.Training
		if job.Plan.Training && (math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0)) {
			if i == 0 {
				// No update has happened yet: the forward pass itself makes it (sqrt or log
				// of negative inputs, say), which "diverged" would misdescribe.
				return done, "", checkFailed{fmt.Errorf("step %d: loss is %v before any update of this run: the forward pass produces it from these parameters and data", res.Step, res.Loss)}
			}
			return done, "", checkFailed{fmt.Errorf("step %d: loss is %v (training diverged)", res.Step, res.Loss)}
		}
		if i == 0 {
			firstLoss = res.Loss
		}
		lastLoss = res.Loss
		total += res.Duration
		rec := stepRecord{Step: res.Step, TimeMS: float64(res.Duration.Microseconds()) / 1000, Samples: res.Samples}
		for _, d := range res.RankTimes {
			rec.RankTimesMS = append(rec.RankTimesMS, float64(d.Microseconds())/1000)
		}
		if hasLoss {
			rec.Loss = &res.Loss
		}
		if s, ok := res.Metrics[passes.MetricLossScale]; ok {
			rec.LossScale = &s
		}
		rec.Skipped = res.Metrics[passes.MetricOverflow] != 0
		if n, ok := res.Metrics[passes.MetricGradNorm]; ok {
			rec.GradNorm = &n
			rec.Clipped = res.Metrics[passes.MetricClipped] != 0
		}
		rec.Metrics = res.Counts
		secs := res.Duration.Seconds()
		if secs > 0 {
			rec.SamplesPerS = float64(res.Samples) / secs
			rec.TokensPerS = float64(res.Tokens) / secs
		}
		if err := log.write(rec); err != nil {
			return done, "", fmt.Errorf("--log-json: %w", trimPathError(err)) // a full disk: stop rather than lose the log
		}
		loss, line := "", fmt.Sprintf("step %d", res.Step)
		if hasLoss {
			loss = "loss=" + formatLoss(res.Loss)
			line += " " + loss
		}
		if rec.Skipped {
			// fp16 loss scaling: an overflow on some rank, so no rank updated anything.
			line += " skipped (overflow)"
		}
		for _, k := range slices.Sorted(maps.Keys(res.Counts)) {
			line += fmt.Sprintf(" %s=%g", k, res.Counts[k])
		}
		line += fmt.Sprintf(" time=%s", roundDuration(res.Duration))
		if rec.TokensPerS > 0 {
			line += fmt.Sprintf(" tokens/s=%.0f", rec.TokensPerS)
		} else if rec.SamplesPerS > 0 {
			line += fmt.Sprintf(" samples/s=%.0f", rec.SamplesPerS)
		}
		if afterStep != nil {
			note, err := afterStep(res.Step, done+1 == steps || stoppedBy != "" || (!multi && intr.signal() != nil))
			if err != nil {
				return done + 1, stoppedBy, err
			}
			line += note
		}
		prog.step(res.Step, line, loss)
	}
	prog.finish()
	if done > 0 {
		mean := roundDuration(total / time.Duration(done))
		if job.Plan.Training || !math.IsNaN(lastLoss) {
			fmt.Fprintf(e.stdout, "ran %d step(s): loss %s → %s, mean step %s\n", done, formatLoss(firstLoss), formatLoss(lastLoss), mean)
		} else {
			fmt.Fprintf(e.stdout, "ran %d forward pass(es), mean %s\n", done, mean)
		}
	}
	return done, stoppedBy, nil
}

// formatLoss prints a loss with at least five significant digits: four decimals from 1 up
// (6.2505, as the README shows), more below 1 so that a small loss still shows its changes
// (0.00021234, where four decimals would print 0.0002 while it falls by a third), and an
// exponent below 1e-4.
func formatLoss(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1 || a == 0 || math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', 4, 64)
	case a >= 1e-4:
		return strconv.FormatFloat(v, 'f', 4-int(math.Floor(math.Log10(a))), 64)
	}
	return strconv.FormatFloat(v, 'e', 4, 64)
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

// gcHeadroomBytes is how far the Go heap may grow past its live bytes before a collection in
// `ppc run`.
const gcHeadroomBytes = 16 << 20

// gcHeadroom sets the collector's headroom to gcHeadroomBytes once the plan's memory is
// allocated. GOGC's default lets the heap grow by 100% of the live heap, which on the CPU
// device is now mostly the arena (one noscan allocation that a collection does not walk):
// garbage from initialisation and the steps could grow by the arena's size before the first
// collection, and the resident set with it (~25 MiB of a GPT-2-width run's peak). A GOGC the
// user set is left alone.
func gcHeadroom(getenv func(string) string) {
	if getenv("GOGC") != "" {
		return
	}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	if pct := int(100 * gcHeadroomBytes / max(ms.HeapAlloc, 1)); pct < 100 {
		debug.SetGCPercent(max(pct, 1))
	}
}
