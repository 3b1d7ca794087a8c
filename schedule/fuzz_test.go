package schedule

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseCSV: whatever the bytes, ParseCSV either fails or yields a
// schedule that Validate, Simulate, LowerComm and the writers handle without
// panicking or hanging (a deadlocked schedule is an error), with Validate and
// Simulate agreeing, and whose CSV form reads back to the same actions.
func FuzzParseCSV(f *testing.F) {
	for _, seed := range []string{
		"0F0,0F1,,,0BW0,,0B1\n,1F0,1BW0,1F1,1B1\n",
		"0F0,1F0,(0F1;1BW0)OVERLAP_F_B,1F1,0B0,1B1,0B1\r\n",
		"0RECV_B0,0F0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
		"0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD,0RESHARD\n1RECV_F0,1F0,1B0,1SEND_B0\n",
		"0F0,\"0B0\"\n\n",
		"0F0,0I0,0W0\n",
		"9F9\n",
	} {
		f.Add([]byte(seed))
	}
	for _, name := range Names() {
		s, err := Generate(name, 3, 6, 0)
		if err != nil {
			f.Fatal(err)
		}
		for _, comms := range []bool{false, true} {
			var buf bytes.Buffer
			if err := s.WriteCSV(&buf, comms); err != nil {
				f.Fatal(err)
			}
			f.Add(buf.Bytes())
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseCSV(bytes.NewReader(data))
		if err != nil {
			return
		}
		verr := Validate(s)
		res, serr := Simulate(s, Cost{F: 1, I: 1, W: 1, Comm: 0.5, ActBytes: 1})
		if (verr == nil) != (serr == nil) {
			t.Fatalf("Validate = %v but Simulate = %v", verr, serr)
		}
		if verr == nil {
			var buf bytes.Buffer
			if err := res.WriteSVG(&buf); err != nil {
				t.Fatal(err)
			}
			if err := res.WriteTrace(&buf); err != nil {
				t.Fatal(err)
			}
			l, err := LowerComm(s)
			if err != nil {
				t.Fatalf("LowerComm of a valid schedule: %v", err)
			}
			if err := Validate(l); err != nil {
				t.Fatalf("lowered schedule invalid: %v\n%s", err, l.Grid())
			}
		}
		// Round trip through the writer in the schedule's own format, when
		// that format can hold every action.
		comms := s.HasComms()
		for _, acts := range s.Actions {
			for _, a := range acts {
				if (!comms && !a.IsIdle() && !a.Kind.IsCompute()) || (comms && a.IsIdle()) {
					return
				}
			}
		}
		var buf bytes.Buffer
		if comms {
			if err := s.WriteCSV(&buf, true); err != nil {
				t.Fatal(err)
			}
		} else if err := s.WriteCSV(&buf, false); err != nil {
			t.Fatal(err)
		}
		back, err := ParseCSV(strings.NewReader(buf.String()))
		if err != nil {
			t.Fatalf("re-parsing %q: %v", buf.String(), err)
		}
		if !reflect.DeepEqual(back.Actions, s.Actions) || !reflect.DeepEqual(back.Placement, s.Placement) {
			t.Fatalf("round trip differs:\n%q\n%q", data, buf.String())
		}
	})
}
