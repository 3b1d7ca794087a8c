package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"

	"ppc.dev/ppc/codegen"
)

// terminal is implemented by writers that say whether they are an interactive terminal;
// tests implement it to see what a person at a terminal would.
type terminal interface{ IsTerminal() bool }

// isTerminal reports whether w is an interactive terminal (progress bar instead of a line per
// step, start-up notes).
func isTerminal(w io.Writer) bool {
	if t, ok := w.(terminal); ok {
		return t.IsTerminal()
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startupNote tells a person at a terminal what a long start-up is doing (loading GPT-2
// small takes seconds); logs and pipes do not need it.
func startupNote(e *env, format string, args ...any) {
	if isTerminal(e.stderr) {
		fmt.Fprintf(e.stderr, format+"\n", args...)
	}
}

// noteLoadingPlan says which plan a run loads, and how many ranks it has.
func noteLoadingPlan(e *env, dir string) {
	if !isTerminal(e.stderr) {
		return
	}
	if p, err := codegen.ReadPlan(dir); err == nil { // else Load reports the problem
		startupNote(e, "loading plan %s (%d rank(s))…", dir, p.World)
	}
}

// eraseLine is what the bar writes to clear its line (progressbar's ANSI mode): erase the
// whole line, back to its start.
const eraseLine = "\x1b[2K\r"

// maxKeptLines is about how many step lines a run keeps on a terminal.
const maxKeptLines = 20

// redrawEvery is how often at most the bar is redrawn: a tiny model runs thousands of steps
// a second.
const redrawEvery = 100 * time.Millisecond

// progress prints training steps. Off a terminal every step gets a line (a log keeps them
// all). On a terminal a progressbar/v3 bar redrawn in place shows the step, the loss and the
// elapsed and remaining time, and every few steps (about maxKeptLines a run, every step of a
// short run) a line is printed above it, so that the loss history stays on the screen.
//
// The bar renders into nothing and progress writes its frames itself, at most every
// redrawEvery: the bar's own throttle would drop whichever of a step's two updates (its
// description, its count) came second, leaving the bar a step behind ("step 1/4 … 0%").
type progress struct {
	w     io.Writer
	term  bool
	steps int // steps this run
	last  int // the number of the run's last step (a resumed run continues the count)
	every int // keep a line every this many steps
	done  int
	bar   *progressbar.ProgressBar
	shown bool      // a frame of the bar is on the screen
	drawn time.Time // when it was drawn
}

func newProgress(w io.Writer, firstStep, steps int) *progress {
	p := &progress{w: w, term: isTerminal(w) && steps > 1, steps: steps, last: firstStep + steps - 1,
		every: max(1, (steps+maxKeptLines-1)/maxKeptLines)}
	if p.term {
		p.bar = progressbar.NewOptions(steps, progressbar.OptionSetWriter(io.Discard), progressbar.OptionUseANSICodes(true),
			progressbar.OptionSetWidth(20), progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetDescription(fmt.Sprintf("step %d/%d", firstStep-1, p.last)))
	}
	return p
}

// step reports a finished step: its number, its line and its loss for the bar
// ("loss=2.3456", or empty).
func (p *progress) step(n int, line, loss string) {
	p.done++
	if !p.term {
		fmt.Fprintln(p.w, line)
		return
	}
	keep := p.done == 1 || p.done%p.every == 0 || p.done == p.steps
	if keep {
		p.clear()
		fmt.Fprintln(p.w, line)
	}
	if p.done == p.steps {
		return // the run's last step: its line is kept and the bar is done
	}
	// Count first, then describe: the description renders the frame, with both.
	_ = p.bar.Add(1)
	desc := fmt.Sprintf("step %d/%d", n, p.last)
	if loss != "" {
		desc += " " + loss
	}
	p.bar.Describe(desc)
	if keep || time.Since(p.drawn) >= redrawEvery {
		// The frame starts with a carriage return and erases what it does not cover.
		io.WriteString(p.w, p.bar.String())
		p.shown, p.drawn = true, time.Now()
	}
}

// clear erases the bar's frame, if one is on the screen.
func (p *progress) clear() {
	if p.shown {
		io.WriteString(p.w, eraseLine)
		p.shown = false
	}
}

// finish removes the bar, leaving the kept lines, and leaves the cursor at the start of a
// clean line for what follows; later calls do nothing.
func (p *progress) finish() {
	if p.term {
		p.shown = true
		p.clear()
		p.term = false
	}
}
