package schedule

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseCost(t *testing.T) {
	c, err := ParseCost("F=1,I=1,W=1,comm=0")
	if err != nil || c.F != 1 || c.I != 1 || c.W != 1 || c.Comm != 0 || c.B != 0 {
		t.Fatalf("ParseCost = %+v, %v", c, err)
	}
	c, err = ParseCost(" F=2 , B=3, F&B=4, comm=0.5, bw=10, bytes=20, act=7, wstash=0.4 ")
	if err != nil || c.F != 2 || c.I != 1 || c.W != 1 || c.B != 3 || c.FB != 4 || c.Comm != 0.5 || c.Bandwidth != 10 || c.CommBytes != 20 || c.ActBytes != 7 || c.WStash != 0.4 {
		t.Fatalf("ParseCost = %+v, %v", c, err)
	}
	if back, err := ParseCost(c.String()); err != nil || !slices.Equal([]float64{back.F, back.B, back.FB, back.Comm, back.Bandwidth, back.CommBytes, back.ActBytes, back.WStash},
		[]float64{c.F, c.B, c.FB, c.Comm, c.Bandwidth, c.CommBytes, c.ActBytes, c.WStash}) {
		t.Errorf("String round trip: %q -> %+v, %v", c.String(), back, err)
	}
	if c, err := ParseCost(""); err != nil || !reflect.DeepEqual(c, Cost{F: 1, I: 1, W: 1}) {
		t.Errorf("ParseCost(\"\") = %+v, %v", c, err)
	}
	for spec, want := range map[string]string{
		"F":           "want key=value",
		"X=1":         `unknown key "X" (valid: F, I, W, B, FB, comm, bw, bytes, act, wstash)`,
		"wstash=0":    "wstash is a part of an activation, in (0, 1]",
		"wstash=1.5":  "wstash is a part of an activation, in (0, 1]",
		"F=abc":       `"abc" is not a number`,
		"F=-1":        "must be finite and non-negative",
		"W=NaN":       "must be finite and non-negative",
		"I=Inf":       "must be finite and non-negative",
		"F=1,F=2":     "F given twice",
		"comm=1e999":  "must be finite",
		"f=1":         "unknown key",
		"comm=1,bw=x": "not a number",
	} {
		if _, err := ParseCost(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCost(%q) = %v, want %q", spec, err, want)
		}
	}
}

func TestSimulateCommLatency(t *testing.T) {
	// GPipe: every hop of the forward and of the backward critical path pays
	// the transfer time once: step = (m+p−1)(F+B) + 2(p−1)·comm.
	for _, p := range []int{2, 4, 8} {
		m := 2 * p
		s := mustGenerate(t, "gpipe", p, m, 0)
		want := float64((m+p-1)*3) + 2*float64(p-1)*0.5
		for _, c := range []Cost{{F: 1, I: 1, W: 1, Comm: 0.5}, {F: 1, I: 1, W: 1, Bandwidth: 4, CommBytes: 2}} {
			for _, sched := range []*Schedule{s, mustLower(t, s)} {
				r := mustSimulate(t, sched, c)
				if !near(r.StepTime, want) {
					t.Errorf("gpipe p=%d %s %v: step %v, want %v", p, sched.Format(), c, r.StepTime, want)
				}
			}
		}
	}
	// Stages on the same rank exchange for free: one rank, any latency.
	r := mustSimulate(t, mustGenerate(t, "zbv", 1, 4, 0), Cost{F: 1, I: 1, W: 1, Comm: 10})
	if r.StepTime != 24 {
		t.Errorf("zbv p=1 with comm=10: step %v, want 24", r.StepTime)
	}
}

func mustLower(t *testing.T, s *Schedule) *Schedule {
	t.Helper()
	l, err := LowerComm(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestSimulatePerStageCostAndBytes(t *testing.T) {
	s := mustGenerate(t, "gpipe", 2, 2, 0)
	c := Cost{F: 1, I: 1, W: 1, Stages: []StageCost{{F: 1, I: 1, W: 1, ActBytes: 10}, {F: 2, I: 2, W: 2, B: 3, ActBytes: 100}}}
	r := mustSimulate(t, s, c)
	if !slices.Equal(r.Busy, []float64{6, 10}) || r.IdealTime != 10 {
		t.Errorf("busy %v ideal %v, want [6 10] 10", r.Busy, r.IdealTime)
	}
	// rank 0: F0 [0,1] F1 [1,2]; rank 1: F0 [1,3] F1 [3,5] B0 [5,8] B1 [8,11]; rank 0: B0 [8,10] B1 [11,13]
	if r.StepTime != 13 {
		t.Errorf("step %v, want 13", r.StepTime)
	}
	if !slices.Equal(r.PeakActivationBytes, []float64{20, 200}) || !slices.Equal(r.PeakActivations, []int{2, 2}) {
		t.Errorf("peak bytes %v, counts %v", r.PeakActivationBytes, r.PeakActivations)
	}
	if !slices.Equal(r.Idle, []float64{7, 3}) || r.InternalBubble != 7 {
		t.Errorf("idle %v internal %v", r.Idle, r.InternalBubble)
	}
	// uniform activation bytes
	r = mustSimulate(t, mustGenerate(t, "1f1b", 4, 8, 0), Cost{F: 1, I: 1, W: 1, ActBytes: 3})
	if !slices.Equal(r.PeakActivationBytes, []float64{12, 9, 6, 3}) {
		t.Errorf("1f1b bytes %v", r.PeakActivationBytes)
	}
	// bad costs
	for _, bad := range []Cost{{F: -1}, {F: 1, Stages: []StageCost{{}}}, {F: 1, Comm: -2}} {
		if _, err := Simulate(s, bad); err == nil {
			t.Errorf("Simulate with %+v succeeded", bad)
		}
	}
	// zero costs: ratio is 0, not NaN
	r = mustSimulate(t, s, Cost{})
	if r.StepTime != 0 || r.BubbleRatio != 0 {
		t.Errorf("zero cost: %+v", r)
	}
}

func TestSimulateEvents(t *testing.T) {
	l := mustLower(t, mustGenerate(t, "1f1b", 2, 2, 0))
	r := mustSimulate(t, l, Cost{F: 1, I: 1, W: 1, Comm: 1})
	// rank 1 reaches 1RECV_F0 at 0 and gets the message at 1 + 1
	e := r.Events[1][0]
	if e.Action.String() != "1RECV_F0" || e.Start != 0 || e.End != 2 {
		t.Errorf("first event of rank 1: %+v", e)
	}
	if n := len(r.Events[0]) + len(r.Events[1]); n != l.NumActions() {
		t.Errorf("%d events for %d actions", n, l.NumActions())
	}
}

func TestResultJSON(t *testing.T) {
	r := mustSimulate(t, mustGenerate(t, "dualpipev", 2, 4, 0), UnitCost())
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"step_time", "ideal_time", "bubble_ratio", "bubble_time", "peak_activations", "busy_time", "events"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if _, ok := m["peak_activation_bytes"]; ok {
		t.Error("peak_activation_bytes present without activation bytes")
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil || back.StepTime != r.StepTime || !back.Events[0][0].Action.Equal(r.Events[0][0].Action) {
		t.Errorf("JSON round trip: %v", err)
	}
	if !strings.Contains(string(data), `"(1F0;2B0)OVERLAP_F_B"`) && !strings.Contains(string(data), "OVERLAP_F_B") {
		t.Error("overlap action not in the JSON")
	}
}

func TestWriteTrace(t *testing.T) {
	for _, name := range Names() {
		s := mustGenerate(t, name, 4, 8, 0)
		for _, sched := range []*Schedule{s, mustLower(t, s)} {
			r := mustSimulate(t, sched, UnitCost())
			x := 0
			for _, e := range traceEvents(t, r) {
				if e.Ph != "X" {
					continue
				}
				x++
				if e.Tid < 0 || e.Tid >= 4 || e.Dur < 0 || e.Args["action"] == nil {
					t.Fatalf("%s: bad event %+v", name, e)
				}
			}
			if x != sched.NumActions() {
				t.Errorf("%s %s: %d X events for %d actions", name, sched.Format(), x, sched.NumActions())
			}
		}
	}
	r := mustSimulate(t, mustGenerate(t, "1f1b", 2, 2, 0), UnitCost())
	var buf bytes.Buffer
	r.WriteTrace(&buf)
	if !strings.Contains(buf.String(), `"name":"F1 s1"`) || !strings.Contains(buf.String(), `"thread_name"`) {
		t.Errorf("trace names: %s", buf.String())
	}
}

// TestWriteSVG checks the SVG is well-formed XML with one row group per rank
// and one cell per compute action.
func TestWriteSVG(t *testing.T) {
	for _, name := range Names() {
		for _, p := range []int{1, 4} {
			s := mustGenerate(t, name, p, 2*p, 0)
			for _, sched := range []*Schedule{s, mustLower(t, s)} {
				r := mustSimulate(t, sched, UnitCost())
				var buf bytes.Buffer
				if err := r.WriteSVG(&buf); err != nil {
					t.Fatal(err)
				}
				ranks, cells, computes := 0, map[int]int{}, map[int]int{}
				for rank, acts := range sched.Actions {
					for _, a := range acts {
						if a.Kind.IsCompute() {
							computes[rank]++
						}
					}
				}
				dec := xml.NewDecoder(&buf)
				depth, rank := 0, -1
				sawSVG := false
				for {
					tok, err := dec.Token()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("%s p=%d: SVG is not well-formed: %v", name, p, err)
					}
					switch el := tok.(type) {
					case xml.StartElement:
						depth++
						class := attr(el, "class")
						switch {
						case el.Name.Local == "svg":
							sawSVG = true
						case el.Name.Local == "g" && class == "rank":
							rank = ranks
							ranks++
						case el.Name.Local == "rect" && strings.HasPrefix(class, "cell"):
							if rank < 0 {
								t.Fatalf("cell outside a rank row")
							}
							cells[rank]++
						}
					case xml.EndElement:
						depth--
						if el.Name.Local == "g" {
							rank = -1
						}
					}
				}
				if !sawSVG || depth != 0 || ranks != p || !mapsEqual(cells, computes) {
					t.Errorf("%s p=%d %s: svg=%v rows %d, cells %v, want %d rows, cells %v", name, p, sched.Format(), sawSVG, ranks, cells, p, computes)
				}
			}
		}
	}
}

func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func mapsEqual(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestGrid(t *testing.T) {
	s := mustGenerate(t, "1f1b", 2, 2, 0)
	want := "        Rank 0 Rank 1\nStep 0: 0F0    1F0\nStep 1: 0F1    1B0\nStep 2: 0B0    1F1\nStep 3: 0B1    1B1\n"
	if got := s.Grid(); got != want {
		t.Errorf("Grid:\n%q\nwant\n%q", got, want)
	}
}
