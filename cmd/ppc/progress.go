package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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

// Terminal control: carriage return and erase to the end of the line.
const eraseLine = "\r\x1b[K"

// maxKeptLines is about how many step lines a run keeps on a terminal.
const maxKeptLines = 20

// progress prints training steps. Off a terminal every step gets a line (a log keeps them
// all). On a terminal a bar redrawn in place shows the step, the loss and the time left,
// and every few steps (about maxKeptLines a run, every step of a short run) a line is
// printed above it, so that the loss history stays on the screen.
type progress struct {
	w        io.Writer
	term     bool
	steps    int // steps this run
	last     int // the number of the run's last step (a resumed run continues the count)
	every    int // keep a line every this many steps
	done     int
	start    time.Time
	drawn    time.Time // when the bar was last drawn
	barShown bool
}

func newProgress(w io.Writer, firstStep, steps int) *progress {
	return &progress{w: w, term: isTerminal(w) && steps > 1, steps: steps, last: firstStep + steps - 1,
		every: max(1, (steps+maxKeptLines-1)/maxKeptLines), start: time.Now()}
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
		fmt.Fprint(p.w, eraseLine+line+"\n")
		p.barShown = false
	}
	// Redraw at most ten times a second: a tiny model runs thousands of steps a second.
	if now := time.Now(); keep || now.Sub(p.drawn) >= 100*time.Millisecond {
		p.drawn = now
		p.barShown = true
		fmt.Fprint(p.w, eraseLine+p.bar(n, loss))
	}
}

// bar is the bar's text: `[=====>    ] step 45/100 loss=2.3456 ETA 12s`.
func (p *progress) bar(n int, loss string) string {
	const width = 20
	fill := width * p.done / p.steps
	b := strings.Repeat("=", fill)
	if fill < width {
		b += ">" + strings.Repeat(" ", width-fill-1)
	}
	s := fmt.Sprintf("[%s] step %d/%d", b, n, p.last)
	if loss != "" {
		s += " " + loss
	}
	if left := p.steps - p.done; left > 0 {
		eta := time.Since(p.start) / time.Duration(p.done) * time.Duration(left)
		if eta < time.Minute {
			eta = eta.Round(100 * time.Millisecond)
		} else {
			eta = eta.Round(time.Second)
		}
		s += " ETA " + eta.String()
	}
	return s
}

// finish removes the bar, leaving the kept lines.
func (p *progress) finish() {
	if p.term && p.barShown {
		fmt.Fprint(p.w, eraseLine)
		p.barShown = false
	}
}
