package schedule

import (
	"fmt"
	"strings"
)

// Limits on the size of a schedule, so that a hostile CSV or a typo in a
// flag is an error instead of an out-of-memory crash.
const (
	MaxRanks        = 1 << 14
	MaxStages       = 1 << 16
	MaxMicrobatches = 1 << 20
	MaxActions      = 1 << 24 // total over all ranks
)

// Schedule is a pipeline schedule: one ordered action list per rank.
type Schedule struct {
	// Name is the generator that produced the schedule ("1f1b", ...); for a
	// CSV, the file's base name (ReadCSVFile) or empty (ParseCSV).
	Name         string
	Ranks        int
	Stages       int
	Microbatches int
	// Placement maps each stage to the rank that runs it (len == Stages);
	// -1 marks a stage that appears in no action of a loaded CSV.
	Placement []int
	// Actions holds each rank's actions in execution order (len == Ranks).
	Actions [][]Action
	// Dialect is the spelling of the CSV file the schedule was read from (see ParseCSV);
	// DialectNone for a generated schedule.
	Dialect Dialect
	// Slices is the number of token slices per micro-batch (TeraPipe; 0 or 1: none). A
	// sliced schedule's actions count units: unit u is slice u mod Slices of micro-batch
	// u div Slices, and Microbatches counts units (see SliceTokens).
	Slices int
}

// Dialect is the spelling of the backward actions in a PyTorch CSV file (see ParseCSV).
type Dialect uint8

const (
	DialectNone      Dialect = iota // not read from a file
	DialectCurrent                  // PyTorch 2.5 and later: I input backward, W weight backward, B full backward
	DialectPyTorch24                // PyTorch 2.4: B input backward, W weight backward, BW full backward
)

// String names the dialect and its spellings, for messages: "PyTorch 2.4 dialect (B =
// input backward, W = weight backward, BW = full backward)".
func (d Dialect) String() string {
	switch d {
	case DialectCurrent:
		return "PyTorch ≥ 2.5 dialect (I = input backward, W = weight backward, B = full backward)"
	case DialectPyTorch24:
		return "PyTorch 2.4 dialect (B = input backward, W = weight backward, BW = full backward)"
	}
	return "generated"
}

// LoopPlacement returns the loop placement of ranks·virtual stages: stage s
// runs on rank s mod ranks. virtual == 1 is the plain one-stage-per-rank
// pipeline; virtual > 1 is the interleaved (Megatron) placement.
func LoopPlacement(ranks, virtual int) []int {
	p := make([]int, ranks*virtual)
	for s := range p {
		p[s] = s % ranks
	}
	return p
}

// VPlacement returns the V-shape placement of 2·ranks stages: rank r runs
// stages r and 2·ranks−1−r, so the first and the last stage share rank 0 and
// the turn of the V (stages ranks−1 and ranks) stays on rank ranks−1.
func VPlacement(ranks int) []int {
	p := make([]int, 2*ranks)
	for r := 0; r < ranks; r++ {
		p[r] = r
		p[2*ranks-1-r] = r
	}
	return p
}

// StagesOf returns the stages placed on rank, in increasing order.
func (s *Schedule) StagesOf(rank int) []int {
	var out []int
	for st, r := range s.Placement {
		if r == rank {
			out = append(out, st)
		}
	}
	return out
}

// HasComms reports whether s contains SEND/RECV actions, that is whether it
// is in PyTorch's compute_comms format rather than compute_only.
func (s *Schedule) HasComms() bool {
	for _, acts := range s.Actions {
		for _, a := range acts {
			if a.Kind.IsComm() {
				return true
			}
		}
	}
	return false
}

// Format returns "compute_comms" or "compute_only" (see HasComms).
func (s *Schedule) Format() string {
	if s.HasComms() {
		return "compute_comms"
	}
	return "compute_only"
}

// Clone returns a deep copy of s.
func (s *Schedule) Clone() *Schedule {
	c := *s
	c.Placement = append([]int(nil), s.Placement...)
	c.Actions = make([][]Action, len(s.Actions))
	for r, acts := range s.Actions {
		c.Actions[r] = make([]Action, len(acts))
		for i, a := range acts {
			c.Actions[r][i] = a.clone()
		}
	}
	return &c
}

func (a Action) clone() Action {
	if a.Sub != nil {
		a.Sub = append([]Action(nil), a.Sub...)
	}
	return a
}

// NumActions returns the number of non-idle actions over all ranks.
func (s *Schedule) NumActions() int {
	n := 0
	for _, acts := range s.Actions {
		for _, a := range acts {
			if !a.IsIdle() {
				n++
			}
		}
	}
	return n
}

// Grid formats s as PyTorch's _format_pipeline_order does: one line per step,
// one column per rank, idle steps blank.
func (s *Schedule) Grid() string {
	steps := 0
	for _, acts := range s.Actions {
		steps = max(steps, len(acts))
	}
	stepw := len(fmt.Sprint(max(steps-1, 0)))
	widths := make([]int, len(s.Actions))
	for r, acts := range s.Actions {
		widths[r] = len(fmt.Sprintf("Rank %d", r))
		for _, a := range acts {
			widths[r] = max(widths[r], len(a.String()))
		}
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", len("Step ")+stepw+2))
	for r := range s.Actions {
		if r > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%-*s", widths[r], fmt.Sprintf("Rank %d", r))
	}
	b.WriteByte('\n')
	for i := 0; i < steps; i++ {
		fmt.Fprintf(&b, "Step %0*d: ", stepw, i)
		for r, acts := range s.Actions {
			if r > 0 {
				b.WriteByte(' ')
			}
			cell := ""
			if i < len(acts) {
				cell = acts[i].String()
			}
			fmt.Fprintf(&b, "%-*s", widths[r], cell)
		}
		b.WriteString("\n")
	}
	lines := strings.SplitAfter(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(strings.TrimSuffix(l, "\n"), " ")
	}
	return strings.Join(lines, "\n")
}

// checkShape verifies the fields of s against each other and the limits.
func (s *Schedule) checkShape() error {
	switch {
	case s.Ranks < 1:
		return fmt.Errorf("schedule has %d ranks, need at least 1", s.Ranks)
	case s.Ranks > MaxRanks:
		return fmt.Errorf("schedule has %d ranks, more than the limit %d", s.Ranks, MaxRanks)
	case s.Stages < 1:
		return fmt.Errorf("schedule has %d stages, need at least 1", s.Stages)
	case s.Stages > MaxStages:
		return fmt.Errorf("schedule has %d stages, more than the limit %d", s.Stages, MaxStages)
	case s.Microbatches < 1:
		return fmt.Errorf("schedule has %d micro-batches, need at least 1", s.Microbatches)
	case s.Microbatches > MaxMicrobatches:
		return fmt.Errorf("schedule has %d micro-batches, more than the limit %d", s.Microbatches, MaxMicrobatches)
	case len(s.Actions) != s.Ranks:
		return fmt.Errorf("schedule has %d ranks but %d action lists", s.Ranks, len(s.Actions))
	case len(s.Placement) != s.Stages:
		return fmt.Errorf("schedule has %d stages but a placement of %d", s.Stages, len(s.Placement))
	}
	n := 0
	for _, acts := range s.Actions {
		n += len(acts)
	}
	if n > MaxActions {
		return fmt.Errorf("schedule has %d actions, more than the limit %d", n, MaxActions)
	}
	for st, r := range s.Placement {
		if r < 0 || r >= s.Ranks {
			if r == -1 {
				return &Error{Kind: ErrPlacement, Rank: -1, Index: -1,
					Msg: fmt.Sprintf("stage %d appears in no action (stages are numbered 0..%d)", st, s.Stages-1)}
			}
			return fmt.Errorf("placement puts stage %d on rank %d, outside 0..%d", st, r, s.Ranks-1)
		}
	}
	return nil
}
