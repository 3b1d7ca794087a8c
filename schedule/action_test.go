package schedule

import (
	"strings"
	"testing"
)

func TestParseActionRoundTrip(t *testing.T) {
	for _, s := range []string{
		"0F0", "3F12", "2I7", "5W0", "1B3", "0SEND_F2", "4RECV_F2", "3SEND_B9", "0RECV_B1",
		"2REDUCE_GRAD", "0UNSHARD", "7RESHARD", "(0F7;7B3)OVERLAP_F_B", "(3B1;4F2)OVERLAP_F_B",
		"(1F0;6I2)OVERLAP_F_B", "",
	} {
		a, err := ParseAction(s)
		if err != nil {
			t.Errorf("ParseAction(%q): %v", s, err)
			continue
		}
		if got := a.String(); got != s {
			t.Errorf("ParseAction(%q).String() = %q", s, got)
		}
		var b Action
		if err := b.UnmarshalText([]byte(s)); err != nil || !b.Equal(a) {
			t.Errorf("UnmarshalText(%q) = %v, %v", s, b, err)
		}
	}
}

func TestParseActionFields(t *testing.T) {
	cases := []struct {
		in   string
		want Action
		str  string
	}{
		{"3BW1", Act(FullBackward, 3, 1), "3B1"}, // legacy full backward
		{" 1F2 ", Act(Forward, 1, 2), "1F2"},
		{"007F010", Act(Forward, 7, 10), "7F10"},
		{"2REDUCE_GRAD", Action{Kind: ReduceGrad, Stage: 2, Microbatch: NoMicrobatch}, "2REDUCE_GRAD"},
		{"( 0F7 ; 7BW3 )OVERLAP_F_B", Overlap(Act(Forward, 0, 7), Act(FullBackward, 7, 3)), "(0F7;7B3)OVERLAP_F_B"},
		{"", Action{}, ""},
		{"   ", Action{}, ""},
	}
	for _, c := range cases {
		a, err := ParseAction(c.in)
		if err != nil {
			t.Errorf("ParseAction(%q): %v", c.in, err)
			continue
		}
		if !a.Equal(c.want) {
			t.Errorf("ParseAction(%q) = %#v, want %#v", c.in, a, c.want)
		}
		if a.String() != c.str {
			t.Errorf("ParseAction(%q).String() = %q, want %q", c.in, a.String(), c.str)
		}
	}
}

func TestParseActionErrors(t *testing.T) {
	cases := map[string]string{
		"F0":                        "want a stage number",
		"0F":                        "needs a micro-batch",
		"0X1":                       "unknown action kind",
		"0FOO1":                     "want a micro-batch number",
		"-1F0":                      "negative",
		"0F-1":                      "negative micro-batch",
		"0F1x":                      "unexpected",
		"0F1 2":                     "unexpected",
		"99999999999F0":             "too large",
		"0F99999999999999999999":    "too large",
		"16777216F0":                "too large",
		"0REDUCE_GRAD3":             "takes no micro-batch",
		"0UNSHARD1":                 "takes no micro-batch",
		"0OVERLAP_F_B":              "parentheses",
		"(0F1;1B0":                  "missing ')'",
		"(0F1;1B0)":                 "want OVERLAP_F_B",
		"(0F1;1B0)OVERLAP":          "want OVERLAP_F_B",
		"(0F1)OVERLAP_F_B":          "exactly two",
		"(0F1;1B0;2F0)OVERLAP_F_B":  "exactly two",
		"(0F1;0F2)OVERLAP_F_B":      "one F and one B or I",
		"(0F1;1W0)OVERLAP_F_B":      "only overlap F with B or I",
		"(0F1;1SEND_F0)OVERLAP_F_B": "only overlap F with B or I",
		"((0F1;1B0)OVERLAP_F_B":     "nested",
		"F":                         "want a stage number",
		"0":                         "unknown action kind",
	}
	for in, want := range cases {
		_, err := ParseAction(in)
		if err == nil {
			t.Errorf("ParseAction(%q) succeeded, want error containing %q", in, want)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "invalid action") {
			t.Errorf("ParseAction(%q) error %q, want it to contain %q", in, err, want)
		}
	}
}

func TestKindPredicates(t *testing.T) {
	for k := Idle; k < numKinds; k++ {
		want := k == Forward || k == BackwardInput || k == BackwardWeight || k == FullBackward || k == OverlapFB
		if k.IsCompute() != want {
			t.Errorf("%v.IsCompute() = %v", k, !want)
		}
		comm := k == SendF || k == RecvF || k == SendB || k == RecvB
		if k.IsComm() != comm {
			t.Errorf("%v.IsComm() = %v", k, !comm)
		}
	}
	if Kind(200).String() != "Kind(200)" {
		t.Errorf("bad Kind string %q", Kind(200).String())
	}
}
