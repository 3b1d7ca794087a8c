package golden

import (
	"fmt"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

type recorder struct{ strings.Builder }

func (r *recorder) Helper()                           {}
func (r *recorder) Errorf(format string, args ...any) { fmt.Fprintf(r, format+"\n", args...) }

func TestSplitKeepsLines(t *testing.T) {
	cases := Split("a\nb\n// -----\nc\n// -----\n")
	if len(cases) != 3 || cases[1].FirstLine != 4 || cases[1].Src != "\n\n\nc\n" {
		t.Fatalf("%+v", cases)
	}
}

func TestErrors(t *testing.T) {
	src := "x // ERROR \"bad \\\"thing\\\"\"\ny\nz // ERROR \"never\"\n"
	want, err := Expectations("f", src)
	if err != nil || len(want) != 2 || want[0].RE.String() != `bad "thing"` {
		t.Fatalf("%v %v", want, err)
	}
	rec := &recorder{}
	CheckErrors(rec, "f", 1, ir.ErrorList{{Loc: ir.Loc{Line: 1}, Msg: `a bad "thing" here`}, {Loc: ir.Loc{Line: 2}, Msg: "surprise"}}, want)
	out := rec.String()
	if !strings.Contains(out, "f:2: unexpected error: surprise") || !strings.Contains(out, `f:3: expected an error matching "never"`) || strings.Contains(out, "f:1:") {
		t.Fatalf("reported:\n%s", out)
	}
	if _, err := Expectations("f", `x // ERROR "(unclosed"`); err == nil {
		t.Fatal("bad pattern accepted")
	}
	rec = &recorder{}
	CheckErrors(rec, "f", 1, fmt.Errorf("plain"), want)
	if !strings.Contains(rec.String(), "error without a source position") {
		t.Fatal(rec.String())
	}
}
