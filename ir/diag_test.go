package ir

import (
	"strings"
	"testing"
)

// TestByteOrderMark: a file saved with a UTF-8 byte-order mark parses like one without.
func TestByteOrderMark(t *testing.T) {
	src := "func @f(%a: f32[4]) -> (f32[4]) {\n  return %a\n}\n"
	m, err := Parse("bom.ir", "\ufeff"+src)
	if err != nil || string(m.Append(nil, PrintOptions{})) != src {
		t.Fatalf("%v\n%s", err, m.Append(nil, PrintOptions{}))
	}
}

// TestLongLineIsClipped: a diagnostic on a huge line (a generated or hostile file) shows a
// window around the column, with the caret still under it.
func TestLongLineIsClipped(t *testing.T) {
	line := strings.Repeat("a", 5000) + "$" + strings.Repeat("b", 5000)
	e := &Error{Loc: Loc{File: "x.ir", Line: 1, Col: 5001}, Msg: "bad", Line: line}
	lines := strings.Split(e.Error(), "\n")
	if len(lines) != 3 || len(lines[1]) > 4+shownWindow+2*len("…") || !strings.HasPrefix(lines[1], "    …") || !strings.HasSuffix(lines[1], "…") {
		t.Fatalf("not clipped:\n%.400s", e.Error())
	}
	caret := strings.Index(lines[2], "^")
	if shown := strings.Replace(lines[1], "…", ".", 1); caret < 0 || shown[caret] != '$' {
		t.Fatalf("caret at %d is not under the '$':\n%s\n%s", caret, lines[1], lines[2])
	}
	short := &Error{Loc: Loc{File: "x.ir", Line: 1, Col: 3}, Msg: "bad", Line: "ab$"}
	if got := short.Error(); got != "x.ir:1:3: bad\n    ab$\n      ^" {
		t.Fatalf("short line: %q", got)
	}
}
