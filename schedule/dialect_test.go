package schedule

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// zb1pShaped is a schedule of the shape of PyTorch's zb1p_2rank_2stagep test artifacts: 2
// ranks holding 2 stages each in a loop placement, 8 micro-batches, rank 1's backward split
// into I and W (the W one action later, where the schedule has room) and rank 0's full B,
// as in the artifacts' compute_comms version. It is built from the interleaved 1F1B
// generator.
func zb1pShaped(t *testing.T) *Schedule {
	s := mustGenerate(t, "interleaved-1f1b", 2, 8, 2)
	var row []Action
	var pending []Action
	for _, a := range s.Actions[1] {
		w := pending
		pending = nil
		if a.Kind == FullBackward {
			pending = []Action{Act(BackwardWeight, a.Stage, a.Microbatch)}
			a = Act(BackwardInput, a.Stage, a.Microbatch)
		}
		row = append(append(row, a), w...)
	}
	s.Actions[1] = append(row, pending...)
	s.Name = "zb1p-shaped"
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// spell24 rewrites a current-dialect CSV in PyTorch 2.4's spelling, cell by cell: I becomes
// B and B becomes BW.
func spell24(text string) string {
	var out strings.Builder
	for i, line := range strings.Split(text, "\r\n") {
		if i > 0 {
			out.WriteString("\r\n")
		}
		for j, cell := range strings.Split(line, ",") {
			if j > 0 {
				out.WriteByte(',')
			}
			digits := len(cell) - len(strings.TrimLeft(cell, "0123456789"))
			switch rest := cell[digits:]; {
			case strings.HasPrefix(rest, "I"):
				cell = cell[:digits] + "B" + rest[1:]
			case strings.HasPrefix(rest, "B"):
				cell = cell[:digits] + "BW" + rest[1:]
			}
			out.WriteString(cell)
		}
	}
	return out.String()
}

// TestCSVDialects: the same schedule written in PyTorch's current spelling (I, W, B) and in
// 2.4's (B, W, BW) — compute_only and compute_comms, a rank with a full backward beside a
// rank with a split one — reads back to the same actions, each file with its dialect named.
func TestCSVDialects(t *testing.T) {
	s := zb1pShaped(t)
	for _, comms := range []bool{false, true} {
		var buf bytes.Buffer
		if err := s.WriteCSV(&buf, comms); err != nil {
			t.Fatal(err)
		}
		cur, old := buf.String(), spell24(buf.String())
		if !strings.Contains(old, "BW") || strings.Contains(old, "I") || !strings.Contains(cur, "I") {
			t.Fatalf("comms=%v: the spellings were not rewritten:\n%s\n%s", comms, cur, old)
		}
		a, b := parseString(t, cur), parseString(t, old)
		if a.Dialect != DialectCurrent || b.Dialect != DialectPyTorch24 {
			t.Errorf("comms=%v: dialects %v and %v", comms, a.Dialect, b.Dialect)
		}
		if !reflect.DeepEqual(a.Actions, b.Actions) || !reflect.DeepEqual(a.Placement, b.Placement) {
			t.Fatalf("comms=%v: the dialects read differently:\n%s\n%s", comms, a.Grid(), b.Grid())
		}
		if err := Validate(b); err != nil {
			t.Fatalf("comms=%v: %v", comms, err)
		}
		ra, rb := mustSimulate(t, a, UnitCost()), mustSimulate(t, b, UnitCost())
		if ra.StepTime != rb.StepTime {
			t.Errorf("comms=%v: step %v and %v", comms, ra.StepTime, rb.StepTime)
		}
		// Written back, the 2.4 file is in the current dialect.
		var again bytes.Buffer
		if err := b.WriteCSV(&again, comms); err != nil || again.String() != cur {
			t.Errorf("comms=%v: the 2.4 file written back differs (%v)", comms, err)
		}
	}

	// By hand, as PyTorch 2.4 wrote a split backward: B is the input gradient, W follows.
	old := parseString(t, "0F0,0F1,,0B0,0W0,0B1,0W1\n,1F0,1B0,1W0,1F1,1B1,1W1\n")
	cur := parseString(t, "0F0,0F1,,0I0,0W0,0I1,0W1\n,1F0,1I0,1W0,1F1,1I1,1W1\n")
	if old.Dialect != DialectPyTorch24 || cur.Dialect != DialectCurrent || !reflect.DeepEqual(old.Actions, cur.Actions) {
		t.Errorf("hand-written 2.4 file: %v\n%s", old.Dialect, old.Grid())
	}
	// Files without W mean the same in both dialects: B (and BW) is the full backward.
	for _, text := range []string{"0F0,0B0\n", "0F0,0BW0\n", "0F0,0F1,0BW0,0B1\n"} {
		if s := parseString(t, text); s.Dialect != DialectCurrent || s.Actions[0][len(s.Actions[0])-1].Kind != FullBackward {
			t.Errorf("%q: %v, %v", text, s.Dialect, s.Actions)
		}
	}
	if got := DialectPyTorch24.String(); got != "PyTorch 2.4 dialect (B = input backward, W = weight backward, BW = full backward)" {
		t.Errorf("String() = %q", got)
	}
	// A 2.4 file whose B lacks its W leaves a weight gradient undone.
	bad := parseString(t, "0F0,0F1,0B0,0W0,0B1\n")
	var se *Error
	if err := Validate(bad); !errors.As(err, &se) || se.Kind != ErrIncomplete || !strings.Contains(err.Error(), "stage 0 micro-batch 1 has no weight gradient") {
		t.Errorf("2.4 B without W: %v", err)
	}
}
