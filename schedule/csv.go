package schedule

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxCSVBytes bounds what ParseCSV reads.
const maxCSVBytes = 1 << 28

// CSVError is a cell ParseCSV cannot read. Line is 1-based; Rank is the row
// (0-based) and Column the cell within it (0-based, the action index).
type CSVError struct {
	Line   int
	Rank   int
	Column int
	Cell   string
	Err    error
}

func (e *CSVError) Error() string {
	return fmt.Sprintf("csv line %d (rank %d), column %d: %v", e.Line, e.Rank, e.Column, e.Err)
}

func (e *CSVError) Unwrap() error { return e.Err }

type csvCell struct {
	text string
	line int
}

// ParseCSV reads a schedule in PyTorch's CSV format (as written by
// _dump_csv and read by _load_csv): one row per rank, in rank order, no
// header, one action per comma-separated cell, an empty cell for an idle
// step, rows of any length. Both compute_only and compute_comms files are
// accepted; the format is detected from the presence of SEND/RECV actions
// (see Schedule.HasComms). Lines may end in \r\n (Python's default), \n or
// \r; quoted cells are unquoted; trailing blank lines are ignored, other
// blank lines are ranks without actions.
//
// PyTorch's files come in two dialects, which spell the backward differently; ParseCSV
// detects the dialect of each file and records it in Schedule.Dialect:
//
//	PyTorch 2.5 and later   I input backward, W weight backward, B full backward
//	PyTorch 2.4             B input backward, W weight backward, BW full backward
//
// A file is read as PyTorch 2.4's when it has W actions and no I action (nor OVERLAP_F_B,
// which only later versions write): W is the second half of a split backward, whose first
// half such a file can only spell B. Every other file is read as the current dialect, where
// B is the full backward; a BW there is the full backward too (2.4's spelling, which no
// later version writes), and a file of F and B alone means the same in both dialects, since
// without W actions PyTorch 2.4's B was the full backward as well. A 2.4 file with a B whose
// W is missing is reported by Validate as a (stage, micro-batch) without a weight gradient.
//
// Ranks is the number of rows, Stages the largest stage number + 1,
// Microbatches the largest micro-batch number + 1, and Placement is inferred
// from the rank each stage's actions appear on (-1 for a stage number that
// never appears). A stage on two ranks is an *Error; a bad cell a *CSVError.
// ParseCSV does not validate the schedule: call Validate.
func ParseCSV(r io.Reader) (*Schedule, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxCSVBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading csv: %w", err)
	}
	if len(data) > maxCSVBytes {
		return nil, fmt.Errorf("csv is larger than %d bytes", maxCSVBytes)
	}
	// Spreadsheet programs on Windows save CSV with a UTF-8 byte-order mark, which Python's
	// csv module (without encoding="utf-8-sig") would also misread as part of the first cell.
	rows, err := splitCSV(strings.TrimPrefix(string(data), "\ufeff"))
	if err != nil {
		return nil, err
	}
	for len(rows) > 0 && len(rows[len(rows)-1]) == 0 {
		rows = rows[:len(rows)-1]
	}
	if len(rows) == 0 {
		return nil, errors.New("csv has no rows")
	}
	if len(rows) > MaxRanks {
		return nil, fmt.Errorf("csv has %d rows (ranks), more than the limit %d", len(rows), MaxRanks)
	}
	s := &Schedule{Ranks: len(rows), Actions: make([][]Action, len(rows))}
	total := 0
	// The dialect's evidence: the cells spelled B (a full backward in the current dialect,
	// the input backward in 2.4's), and whether any I, W or OVERLAP_F_B appears.
	type cellAt struct{ rank, col int }
	var spelledB []cellAt
	hasI, hasW := false, false
	type site struct{ rank, index int }
	where := map[int]site{}
	for rank, row := range rows {
		total += len(row)
		if total > MaxActions {
			return nil, fmt.Errorf("csv has more than %d cells", MaxActions)
		}
		acts := make([]Action, len(row))
		for col, cell := range row {
			bad := func(err error) error {
				return &CSVError{Line: cell.line, Rank: rank, Column: col, Cell: cell.text, Err: err}
			}
			a, err := ParseAction(cell.text)
			if err != nil {
				return nil, bad(err)
			}
			switch a.Kind {
			case FullBackward:
				if !strings.HasPrefix(strings.TrimLeft(strings.TrimSpace(cell.text), "0123456789"), "BW") {
					spelledB = append(spelledB, cellAt{rank, col})
				}
			case BackwardInput, OverlapFB:
				hasI = true
			case BackwardWeight:
				hasW = true
			}
			refs := []Action{a}
			if a.Kind == OverlapFB {
				refs = a.Sub
			} else if a.IsIdle() {
				refs = nil
			}
			for _, c := range refs {
				if c.Stage >= MaxStages {
					return nil, bad(fmt.Errorf("%q: stage %d is beyond the limit of %d stages", strings.TrimSpace(cell.text), c.Stage, MaxStages))
				}
				if c.Microbatch >= MaxMicrobatches {
					return nil, bad(fmt.Errorf("%q: micro-batch %d is beyond the limit of %d micro-batches", strings.TrimSpace(cell.text), c.Microbatch, MaxMicrobatches))
				}
				s.Stages = max(s.Stages, c.Stage+1)
				s.Microbatches = max(s.Microbatches, c.Microbatch+1)
				if prev, ok := where[c.Stage]; !ok {
					where[c.Stage] = site{rank, col}
				} else if prev.rank != rank {
					pa := s.Actions[prev.rank][prev.index]
					return nil, &Error{Kind: ErrPlacement, Rank: rank, Index: col, Action: a,
						Msg: fmt.Sprintf("rank %d action %d (%s): stage %d is already on rank %d (action %d: %s); a stage runs on one rank",
							rank, col, a, c.Stage, prev.rank, prev.index, pa)}
				}
			}
			acts[col] = a
		}
		s.Actions[rank] = acts
	}
	s.Dialect = DialectCurrent
	if hasW && !hasI {
		s.Dialect = DialectPyTorch24
		for _, c := range spelledB {
			s.Actions[c.rank][c.col].Kind = BackwardInput
		}
	}
	s.Placement = make([]int, s.Stages)
	for st := range s.Placement {
		s.Placement[st] = -1
		if w, ok := where[st]; ok {
			s.Placement[st] = w.rank
		}
	}
	return s, nil
}

// IsCSVName reports whether a --schedule value names a CSV file (extension .csv, any case)
// rather than a generator.
func IsCSVName(name string) bool { return strings.EqualFold(filepath.Ext(name), ".csv") }

// ReadCSVFile reads a schedule file with ParseCSV. Errors start with the path, and the
// schedule is named after the file, so that summaries and plans say where it came from.
func ReadCSVFile(path string) (*Schedule, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %w", path, pe.Err)
		}
		return nil, err
	}
	defer f.Close()
	s, err := ParseCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.Name = filepath.Base(path)
	return s, nil
}

// CheckFileShape checks the pipeline shape a command line gives with a CSV schedule (0: not
// given) against the file's own: ranks (--pp), micro-batches (--microbatches) and stages per
// rank (--virtual-stages). The file decides the shape; flags that agree with it are
// accepted, so that one command line serves a generator and the CSV it was written to
// (`ppc schedule --csv`), and flags that disagree are an error, never silently overridden.
// compile, simulate and schedule all apply this one rule.
func CheckFileShape(s *Schedule, file string, pp, microbatches, virtual int) error {
	switch {
	case pp > 0 && pp != s.Ranks:
		return fmt.Errorf("%s has %d ranks, --pp is %d", file, s.Ranks, pp)
	case microbatches > 0 && microbatches != s.Microbatches:
		return fmt.Errorf("%s has %d micro-batches, --microbatches is %d", file, s.Microbatches, microbatches)
	case virtual > 0 && s.Stages%s.Ranks == 0 && virtual != s.Stages/s.Ranks:
		return fmt.Errorf("%s places %d stage(s) on each rank, --virtual-stages is %d", file, s.Stages/s.Ranks, virtual)
	}
	return nil
}

// splitCSV splits text into rows of cells (RFC 4180 quoting, any line ending).
func splitCSV(text string) ([][]csvCell, error) {
	var rows [][]csvCell
	var row []csvCell
	var cell strings.Builder
	line, cellLine := 1, 1
	inRow := false // the current row has content (a blank line is a row with no cells)
	endCell := func() {
		row = append(row, csvCell{text: cell.String(), line: cellLine})
		cell.Reset()
		cellLine = line
	}
	endRow := func() {
		if inRow {
			endCell()
		}
		rows = append(rows, row)
		row = nil
		inRow = false
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch c {
		case ',':
			inRow = true
			endCell()
		case '\r', '\n':
			if c == '\r' && i+1 < len(text) && text[i+1] == '\n' {
				i++
			}
			endRow()
			line++
			cellLine = line
		case '"':
			if inRow && cell.Len() > 0 {
				cell.WriteByte(c) // a stray quote inside a cell is kept, as Python does
				continue
			}
			inRow = true
			startLine := line
			closed := false
			for i++; i < len(text); i++ {
				if text[i] == '"' {
					if i+1 < len(text) && text[i+1] == '"' {
						cell.WriteByte('"')
						i++
						continue
					}
					closed = true
					break
				}
				if text[i] == '\n' {
					line++
				}
				cell.WriteByte(text[i])
			}
			if !closed {
				return nil, &CSVError{Line: startLine, Rank: len(rows), Column: len(row), Cell: cell.String(), Err: errors.New("unterminated quoted cell")}
			}
			if i+1 < len(text) && text[i+1] != ',' && text[i+1] != '\r' && text[i+1] != '\n' {
				return nil, &CSVError{Line: line, Rank: len(rows), Column: len(row), Cell: cell.String(),
					Err: fmt.Errorf("unexpected %q after a closing quote", text[i+1])}
			}
		default:
			inRow = true
			cell.WriteByte(c)
		}
	}
	if inRow || len(row) > 0 {
		endRow()
	}
	return rows, nil
}

// WriteCSV writes s in PyTorch's CSV format so that _load_csv reads it back (the current
// dialect: I, W and B; see ParseCSV):
// one row per rank, no header, cells separated by commas, lines ended by
// \r\n as Python's csv.writer does, idle steps as empty cells (a row that is
// a single idle step is written "", again as Python does).
//
// With withComms false it writes the compute_only format: SEND/RECV (and
// REDUCE_GRAD, UNSHARD, RESHARD, which PyTorch rejects there) are left out.
// With withComms true it writes the compute_comms format: a schedule without
// SEND/RECV is lowered with LowerComm first (so it must validate), and idle
// cells are left out, as PyTorch's runtime requires.
func (s *Schedule) WriteCSV(w io.Writer, withComms bool) error {
	out := s
	if withComms {
		if !s.HasComms() {
			l, err := LowerComm(s)
			if err != nil {
				return err
			}
			out = l
		} else {
			out = s.Clone()
			for r, acts := range out.Actions {
				kept := acts[:0]
				for _, a := range acts {
					if !a.IsIdle() {
						kept = append(kept, a)
					}
				}
				out.Actions[r] = kept
			}
		}
	} else {
		out = ComputeOnly(s)
	}
	bw := bufio.NewWriter(w)
	for _, acts := range out.Actions {
		if len(acts) == 1 && acts[0].IsIdle() {
			bw.WriteString(`""`)
		}
		for i, a := range acts {
			if i > 0 {
				bw.WriteByte(',')
			}
			text := a.String()
			if strings.ContainsAny(text, ",\"\r\n") {
				text = `"` + strings.ReplaceAll(text, `"`, `""`) + `"`
			}
			bw.WriteString(text)
		}
		bw.WriteString("\r\n")
	}
	return bw.Flush()
}
