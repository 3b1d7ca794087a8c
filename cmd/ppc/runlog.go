package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
)

// stepRecord is one line of --log-json.
type stepRecord struct {
	// RunID tells apart the runs that append to one file.
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
	// Time is the wall clock when the step ended (RFC 3339, milliseconds); ElapsedS counts
	// from the start of the run (loading included).
	Time     string  `json:"time"`
	ElapsedS float64 `json:"elapsed_s"`
	// Loss is the step's mean loss; absent for a forward-only plan without one (JSON has no
	// NaN).
	Loss        *float64 `json:"loss,omitempty"`
	LR          *float64 `json:"lr,omitempty"` // training: the step's learning rate (its schedule's)
	TimeMS      float64  `json:"time_ms"`
	Samples     int      `json:"samples"`
	SamplesPerS float64  `json:"samples_per_s"`
	TokensPerS  float64  `json:"tokens_per_s,omitempty"`
	// RankTimesMS: in a multi-process run, each rank's own time for the step (its
	// instructions, without the end-of-step agreement), by rank.
	RankTimesMS []float64 `json:"rank_times_ms,omitempty"`
	// fp16 with dynamic loss scaling: Skipped says an overflow in some gradient skipped the
	// update on every rank; LossScale is the scale the step's backward used.
	Skipped   bool     `json:"skipped,omitempty"`
	LossScale *float64 `json:"loss_scale,omitempty"`
	// With --clip-grad: the global norm of the step's mean gradient before clipping, and
	// whether the step clipped it.
	GradNorm *float64 `json:"grad_norm,omitempty"`
	Clipped  bool     `json:"clipped,omitempty"`
	// Metrics are the model's own (`metric NAME EXPR`), summed over the step: a mixture of
	// experts' dropped choices (moe_dropped).
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// stepLog writes --log-json records.
type stepLog struct {
	w     io.Writer
	runID string
	start time.Time
	// lr gives step t's learning rate (nil: not training, or a plan whose --optimizer value
	// does not parse — a plan of another version — where the rate is left out, not guessed).
	lr func(t int) (float64, error)
}

// newStepLog starts the log of a run that started at start.
func newStepLog(w io.Writer, plan *codegen.Plan, start time.Time) *stepLog {
	l := &stepLog{w: w, runID: newRunID(start), start: start}
	if plan.Training {
		// The plan records the --optimizer value it was compiled with; one that does not
		// parse (a plan of another version) leaves the rate out rather than guessing it.
		if _, err := compiler.LearningRate(plan.Optimizer, 1); err == nil {
			l.lr = func(t int) (float64, error) { return compiler.LearningRate(plan.Optimizer, t) }
		}
	}
	return l
}

// newRunID is 8 random bytes in hex, or the start time's nanoseconds if there is no
// randomness to be had.
func newRunID(start time.Time) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return strconv.FormatInt(start.UnixNano(), 16)
	}
	return hex.EncodeToString(b)
}

// write appends the record of one step (nothing without --log-json).
func (l *stepLog) write(rec stepRecord) error {
	if l == nil || l.w == nil {
		return nil
	}
	now := time.Now()
	rec.RunID = l.runID
	if l.lr != nil {
		if lr, err := l.lr(rec.Step); err == nil {
			rec.LR = &lr
		}
	}
	rec.Time = now.Format("2006-01-02T15:04:05.000Z07:00")
	rec.ElapsedS = now.Sub(l.start).Seconds()
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(l.w, "%s\n", b)
	return err
}

// parseStepRange parses --trace-steps A:B: steps A to B inclusive, either end optional.
// last is 0 for no end.
func parseStepRange(s string) (first, last int, err error) {
	a, b, ok := strings.Cut(s, ":")
	bad := func() (int, int, error) {
		return 0, 0, usagef("--trace-steps %q: want FIRST:LAST, inclusive, either may be left out (2:3, :5, 4:); steps count from 1", s)
	}
	if !ok {
		return bad()
	}
	first, last = 1, 0
	if a = strings.TrimSpace(a); a != "" {
		if first, err = strconv.Atoi(a); err != nil || first < 1 {
			return bad()
		}
	}
	if b = strings.TrimSpace(b); b != "" {
		if last, err = strconv.Atoi(b); err != nil || last < 1 {
			return bad()
		}
		if last < first {
			return 0, 0, usagef("--trace-steps %q: the last step is before the first", s)
		}
	}
	return first, last, nil
}

// traceStepFlags checks --trace-steps and returns the range of steps to trace (last 0: to the
// end).
func traceStepFlags(set map[string]bool, trace, spec string) (first, last int, err error) {
	if !set["trace-steps"] {
		return 1, 0, nil
	}
	if trace == "" {
		return 0, 0, usagef("--trace-steps needs --trace")
	}
	return parseStepRange(spec)
}

// checkTraceRange refuses a --trace-steps range that records none of the steps this run
// runs (done+1 … done+steps: a resumed run continues the count).
func checkTraceRange(set map[string]bool, spec string, first, last, done, steps int) error {
	if !set["trace-steps"] {
		return nil
	}
	if steps == 0 {
		return usagef("--trace-steps %s: --steps 0 runs no step", spec)
	}
	if first > done+steps || (last != 0 && last <= done) {
		return usagef("--trace-steps %s records no step: this run runs steps %d to %d", spec, done+1, done+steps)
	}
	return nil
}

// checkDataFlags checks --data-dtype against --data.
func checkDataFlags(set map[string]bool, data, dtype string) error {
	if !set["data-dtype"] {
		return nil
	}
	if data == "" {
		return usagef("--data-dtype applies to --data (a token file)")
	}
	if dtype != "uint16" && dtype != "uint32" {
		return usagef("--data-dtype %q: want uint16 or uint32", dtype)
	}
	return nil
}
