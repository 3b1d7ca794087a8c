package schedule

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func parseString(t *testing.T, text string) *Schedule {
	t.Helper()
	s, err := ParseCSV(strings.NewReader(text))
	if err != nil {
		t.Fatalf("ParseCSV: %v\n%s", err, text)
	}
	return s
}

// sameSchedule compares everything but the generator name.
func sameSchedule(a, b *Schedule) bool {
	return a.Ranks == b.Ranks && a.Stages == b.Stages && a.Microbatches == b.Microbatches &&
		slices.Equal(a.Placement, b.Placement) && reflect.DeepEqual(a.Actions, b.Actions)
}

func TestCSVRoundTrip(t *testing.T) {
	for _, name := range Names() {
		for _, p := range []int{1, 2, 4, 8} {
			m := 2 * p
			v := 0
			if name == "interleaved-1f1b" {
				v = 3
			}
			s := mustGenerate(t, name, p, m, v)
			for _, comms := range []bool{false, true} {
				var buf bytes.Buffer
				if err := s.WriteCSV(&buf, comms); err != nil {
					t.Fatalf("%s p=%d WriteCSV(comms=%v): %v", name, p, comms, err)
				}
				back := parseString(t, buf.String())
				want := s
				if comms {
					var err error
					if want, err = LowerComm(s); err != nil {
						t.Fatal(err)
					}
				}
				if !sameSchedule(back, want) {
					t.Fatalf("%s p=%d comms=%v: round trip differs\nwrote:\n%s\ngot:\n%s\nwant:\n%s", name, p, comms, buf.String(), back.Grid(), want.Grid())
				}
				if got := back.Format(); (got == "compute_comms") != (comms && p > 1) {
					t.Errorf("%s p=%d: detected format %s", name, p, got)
				}
				// writing the parsed schedule again gives the same bytes
				var again bytes.Buffer
				if err := back.WriteCSV(&again, comms); err != nil || again.String() != buf.String() {
					t.Fatalf("%s p=%d comms=%v: second write differs (%v)", name, p, comms, err)
				}
			}
		}
	}
}

// TestCSVExactFormat pins the bytes PyTorch's csv.writer would produce.
func TestCSVExactFormat(t *testing.T) {
	s := mustGenerate(t, "1f1b", 2, 2, 0)
	var buf bytes.Buffer
	if err := s.WriteCSV(&buf, false); err != nil {
		t.Fatal(err)
	}
	if want := "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n"; buf.String() != want {
		t.Errorf("compute_only CSV = %q, want %q", buf.String(), want)
	}
	buf.Reset()
	if err := s.WriteCSV(&buf, true); err != nil {
		t.Fatal(err)
	}
	want := "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\r\n" +
		"1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\r\n"
	if buf.String() != want {
		t.Errorf("compute_comms CSV = %q, want %q", buf.String(), want)
	}
	// idle cells stay empty cells; a lone idle cell is quoted as Python does
	s = &Schedule{Ranks: 3, Stages: 1, Microbatches: 1, Placement: []int{0},
		Actions: [][]Action{{{}, Act(Forward, 0, 0), {}, Act(FullBackward, 0, 0)}, {{}}, nil}}
	buf.Reset()
	if err := s.WriteCSV(&buf, false); err != nil {
		t.Fatal(err)
	}
	if want := ",0F0,,0B0\r\n\"\"\r\n\r\n"; buf.String() != want {
		t.Errorf("CSV with idles = %q, want %q", buf.String(), want)
	}
	back := parseString(t, buf.String()+"\r\n\r\n")
	if back.Ranks != 2 || len(back.Actions[1]) != 1 || !back.Actions[1][0].IsIdle() {
		t.Errorf("parsed back %#v", back.Actions)
	}
}

func TestCSVHandWritten(t *testing.T) {
	// PyTorch style: idle steps as empty cells, legacy BW, ragged rows, \n endings.
	s := parseString(t, "0F0,0F1,,,0BW0,,0B1\n,1F0,1BW0,1F1,1B1\n")
	if s.Ranks != 2 || s.Stages != 2 || s.Microbatches != 2 || !slices.Equal(s.Placement, []int{0, 1}) || s.HasComms() {
		t.Fatalf("parsed %+v", s)
	}
	if got := s.Actions[0][4]; !got.Equal(Act(FullBackward, 0, 0)) {
		t.Errorf("BW parsed as %v", got)
	}
	if len(s.Actions[0]) != 7 || !s.Actions[0][2].IsIdle() || !s.Actions[1][0].IsIdle() {
		t.Errorf("idle cells lost: %v", s.Actions)
	}
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	r := mustSimulate(t, s, UnitCost())
	if r.StepTime != 9 { // 1F1B p=2 m=2: (m+p−1)(F+B)
		t.Errorf("step %v, want 9", r.StepTime)
	}
	var buf bytes.Buffer
	if err := s.WriteCSV(&buf, false); err != nil || buf.String() != "0F0,0F1,,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1\r\n" {
		t.Errorf("rewritten as %q (%v)", buf.String(), err)
	}

	// V shape on one rank, with an OVERLAP_F_B; quoted cells and CRLF.
	s = parseString(t, "0F0,,1F0,\"(0F1;1BW0)OVERLAP_F_B\",,1F1, 0BW0 ,1B1,0B1\r\n")
	if s.Stages != 2 || !slices.Equal(s.Placement, []int{0, 0}) {
		t.Fatalf("parsed %+v", s)
	}
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	if r := mustSimulate(t, s, Cost{F: 1, I: 1, W: 1, FB: 2}); r.StepTime != 12-1 {
		t.Errorf("V step %v, want 11 (one F&B of 2 instead of F+B = 3)", r.StepTime)
	}

	// compute_comms with FSDP and gradient-reduction actions
	s = parseString(t, "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"+
		"1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\n")
	if !s.HasComms() || s.Format() != "compute_comms" {
		t.Fatal("compute_comms not detected")
	}
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	if r := mustSimulate(t, s, Cost{F: 1, I: 1, W: 1, Comm: 0.5}); r.StepTime != 10 {
		t.Errorf("comms step %v, want 10 (9 + two transfers of 0.5)", r.StepTime)
	}
	// its compute_only form drops what PyTorch's compute_only loader rejects
	var out bytes.Buffer
	if err := s.WriteCSV(&out, false); err != nil || out.String() != "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n" {
		t.Errorf("compute_only form %q (%v)", out.String(), err)
	}
}

func TestCSVErrors(t *testing.T) {
	cases := []struct {
		text       string
		line, rank int
		col        int
		want       string
	}{
		{"0F0,0X1\n", 1, 0, 1, `"0X1": unknown action kind`},
		{"0F0,0B0\n1F0,1Q0,1B0\n", 2, 1, 1, `"1Q0"`},
		{"0F0,-1F1\n", 1, 0, 1, "negative stage number"},
		{"0F0,0F\n", 1, 0, 1, "needs a micro-batch"},
		{"0F0\n\n2F99999999999999999999\n", 3, 2, 0, "too large"},
		{"70000F0\n", 1, 0, 0, "beyond the limit of 65536 stages"},
		{"0F2000000\n", 1, 0, 0, "beyond the limit of 1048576 micro-batches"},
		{"0F0,\"0B0\n", 1, 0, 1, "unterminated quoted cell"},
		{"0F0,\"0B0\"x\n", 1, 0, 1, "after a closing quote"},
		{"0F0,(0F1;1B0\n", 1, 0, 1, "missing ')'"},
	}
	for _, c := range cases {
		_, err := ParseCSV(strings.NewReader(c.text))
		var ce *CSVError
		if !errors.As(err, &ce) {
			t.Errorf("ParseCSV(%q) = %v, want *CSVError", c.text, err)
			continue
		}
		if ce.Line != c.line || ce.Rank != c.rank || ce.Column != c.col || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseCSV(%q) = line %d rank %d col %d %q, want line %d rank %d col %d containing %q",
				c.text, ce.Line, ce.Rank, ce.Column, err, c.line, c.rank, c.col, c.want)
		}
		if !strings.Contains(err.Error(), "column") || !strings.Contains(err.Error(), "rank") {
			t.Errorf("error %q does not name rank and column", err)
		}
	}
	for _, text := range []string{"", "\n\n\r\n"} {
		if _, err := ParseCSV(strings.NewReader(text)); err == nil || !strings.Contains(err.Error(), "no rows") {
			t.Errorf("ParseCSV(%q) = %v, want 'no rows'", text, err)
		}
	}
	// a stage on two ranks is an *Error naming the second occurrence
	_, err := ParseCSV(strings.NewReader("0F0,0B0\n1F0,0F1,1B0,0B1\n"))
	var se *Error
	if !errors.As(err, &se) || se.Kind != ErrPlacement || se.Rank != 1 || se.Index != 1 || se.Action.String() != "0F1" ||
		!strings.Contains(err.Error(), "rank 1 action 1 (0F1): stage 0 is already on rank 0 (action 0: 0F0)") {
		t.Errorf("stage on two ranks: %v", err)
	}
}

// TestCSVRagged: PyTorch's own files have rows of different lengths (each
// rank writes its own list), so ragged rows are accepted; a rank whose row
// is cut short is then an incomplete schedule, reported by Validate.
func TestCSVRagged(t *testing.T) {
	s := parseString(t, "0F0,0F1,0B0,0B1\n1F0,1B0\n")
	if len(s.Actions[0]) != 4 || len(s.Actions[1]) != 2 {
		t.Fatalf("rows %v", s.Actions)
	}
	err := Validate(s)
	var se *Error
	if !errors.As(err, &se) || se.Kind != ErrMissing || se.Rank != 0 || se.Index != 3 || se.Action.String() != "0B1" {
		t.Fatalf("Validate(ragged) = %v", err)
	}
	if !strings.Contains(err.Error(), "missing dependency: rank 0 action 3 (0B1): waits for 1B1, which appears nowhere in the schedule") {
		t.Errorf("message %q", err)
	}
}
