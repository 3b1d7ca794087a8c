package filecheck

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
	"time"
)

// lines joins its arguments with newlines; handy for multi-line fixtures.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{
		Check: "CHECK", Next: "CHECK-NEXT", Not: "CHECK-NOT", Label: "CHECK-LABEL", Same: "CHECK-SAME", Kind(9): "Kind(9)",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

func TestParse(t *testing.T) {
	src := lines(
		"func @forward(%a, %b) {",
		"  // CHECK-LABEL: func @forward",
		"// CHECK:  [[X:%[0-9]+]] = add %a, %b  ",
		"\t//CHECK-NEXT: mul [[X]], {{%[a-z]+}}",
		"# CHECK-NOT: relu",
		"//   CHECK-SAME:\t{stage = 0}",
		"// CHECK that prose mentioning CHECK is ignored",
		"// CHECKS: not a directive either",
		"%1 = add %a, %b // CHECK: trailing comments are not directives",
		"}",
	)
	got, err := Parse("cse.ir", src, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []Directive{
		{Label, "func @forward", "cse.ir", 12},
		{Check, "[[X:%[0-9]+]] = add %a, %b", "cse.ir", 13},
		{Next, "mul [[X]], {{%[a-z]+}}", "cse.ir", 14},
		{Not, "relu", "cse.ir", 15},
		{Same, "{stage = 0}", "cse.ir", 16},
	}
	if len(got) != len(want) {
		t.Fatalf("Parse returned %d directives, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("directive %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name   string
		checks string
		want   []string // substrings of the error
	}{
		{"next first", "// CHECK-NEXT: a", []string{"t.ir:1:", "CHECK-NEXT: a", "no previous CHECK"}},
		{"same first", "// CHECK-SAME: a", []string{"t.ir:1:", "CHECK-SAME: a", "no previous CHECK"}},
		{"next after only not", lines("// CHECK-NOT: a", "// CHECK-NEXT: b"), []string{"t.ir:2:", "CHECK-NEXT"}},
		{"unknown suffix", lines("// CHECK: a", "// CHECK-FOO: b"), []string{"t.ir:2:", "unknown directive CHECK-FOO:"}},
		{"lowercase suffix", "// CHECK-next: b", []string{"t.ir:1:", "unknown directive CHECK-next:"}},
		{"dag unsupported", "// CHECK-DAG: b", []string{"t.ir:1:", "CHECK-DAG: is not supported"}},
		{"count unsupported", "// CHECK-COUNT-2: b", []string{"t.ir:1:", "CHECK-COUNT-2: is not supported"}},
		{"modifier unsupported", "// CHECK{LITERAL}: b", []string{"t.ir:1:", "CHECK{LITERAL}", "not supported"}},
		{"missing colon", lines("// CHECK: a", "// CHECK-NEXT b"), []string{"t.ir:2:", `"CHECK-NEXT" directive is missing its ':'`}},
		{"bare CHECK", "// CHECK", []string{"t.ir:1:", "missing its ':'"}},
		{"empty check", "// CHECK:   ", []string{"t.ir:1:", "CHECK:", "empty pattern"}},
		{"empty next", lines("// CHECK: a", "// CHECK-NEXT:"), []string{"t.ir:2:", "CHECK-NEXT:", "empty pattern"}},
		{"empty label", "// CHECK-LABEL:\t", []string{"t.ir:1:", "CHECK-LABEL:", "empty pattern"}},
		{"empty not", "// CHECK-NOT:", []string{"t.ir:1:", "empty pattern"}},
		{"unterminated regex", "// CHECK: a {{[0-9]+", []string{"t.ir:1:", `unterminated "{{"`}},
		{"unterminated var", "// CHECK: a [[X:%[0-9]+", []string{"t.ir:1:", `unterminated "[["`}},
		{"unterminated use", "// CHECK: a [[X", []string{"t.ir:1:", `unterminated "[["`}},
		{"empty regex", "// CHECK: a {{}}", []string{"t.ir:1:", "empty regex"}},
		{"bad regex", "// CHECK: a {{(b}}", []string{"t.ir:1:", "bad regex {{(b}}", "missing closing )"}},
		{"bad regex only when embedded", `// CHECK: a {{\Qb}}`, []string{"t.ir:1:", "bad regex"}},
		{"bad def regex", "// CHECK: [[X:a(]]", []string{"t.ir:1:", "[[X:a(]]", "bad regex"}},
		{"bad var name", "// CHECK: [[1X]]", []string{"t.ir:1:", `invalid variable name "1X"`, `{{\[\[}}`}},
		{"literal double bracket", "// CHECK: dense<[[1, 2], [3, 4]]>", []string{"t.ir:1:", `unbalanced "]"`, `{{\[\[}}`}},
		{"literal double bracket without inner brackets", "// CHECK: x[[1, 2]]", []string{"t.ir:1:", `invalid variable name "1, 2"`}},
		{"numeric var", "// CHECK: [[#N]]", []string{"t.ir:1:", "not supported"}},
		{"label defines var", "// CHECK-LABEL: func [[F:@[a-z]+]]", []string{"t.ir:1:", "CHECK-LABEL patterns cannot define variables"}},
		{"duplicate def", "// CHECK: [[X:a]] [[X:b]]", []string{"t.ir:1:", "defined twice"}},
		{"unbalanced bracket", "// CHECK: [[X:a]b]]", []string{"t.ir:1:", `unbalanced "]"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dirs, err := Parse("t.ir", tt.checks, 0)
			if err == nil {
				t.Fatalf("Parse succeeded with %+v, want error containing %q", dirs, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseErrorsReportAllLinesWithOffset(t *testing.T) {
	_, err := Parse("big.ir", lines("// CHECK-NEXT: a", "ok", "// CHECK: {{x", "// CHECK-BOGUS: y"), 100)
	if err == nil {
		t.Fatal("want error")
	}
	for _, w := range []string{"big.ir:101:", "big.ir:103:", "big.ir:104:"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %s", err, w)
		}
	}
}

func TestMatchPositive(t *testing.T) {
	tests := []struct {
		name, checks, output string
	}{
		{"substring", "// CHECK: add", "  %1 = add %a, %b\n"},
		{"order across lines", lines("// CHECK: add", "// CHECK: mul"), lines("%1 = add", "%2 = sub", "%3 = mul")},
		{"several matches on one line", lines("// CHECK: a", "// CHECK: b", "// CHECK: c"), "a b c\n"},
		{"same text twice on one line", lines("// CHECK: %x", "// CHECK: %x"), "add %x, %x\n"},
		{"next", lines("// CHECK: add", "// CHECK-NEXT: mul"), lines("add", "mul")},
		{"next skips the rest of the previous line", lines("// CHECK: add", "// CHECK-NEXT: mul"), lines("add mul", "mul")},
		{"same", lines("// CHECK: add", "// CHECK-SAME: %a", "// CHECK-SAME: %b"), "add %a, %b\n"},
		{"not absent in region", lines("// CHECK: add", "// CHECK-NOT: relu", "// CHECK: mul"), lines("relu", "add", "sub", "mul", "relu")},
		{"several nots share a region", lines("// CHECK: add", "// CHECK-NOT: relu", "// CHECK-NOT: gelu", "// CHECK: mul"), lines("add", "tanh", "mul relu gelu")},
		{"not first", lines("// CHECK-NOT: relu", "// CHECK: add"), lines("add", "relu")},
		{"not last", lines("// CHECK: add", "// CHECK-NOT: relu"), lines("relu", "add")},
		{"not within one line", lines("// CHECK: add", "// CHECK-NOT: relu", "// CHECK-SAME: mul"), "relu add mul relu\n"},
		{"not only", "// CHECK-NOT: relu", "add\n"},
		{"regex", "// CHECK: {{%[0-9]+}} = add", "  %12 = add %a\n"},
		{"regex alternation is grouped", "// CHECK: = {{add|sub}} %a", "%1 = sub %a\n"},
		{"case-insensitive regex flag is scoped", "// CHECK: {{(?i)ADD}} %a", "%1 = add %a\n"},
		{"capture and reuse", lines("// CHECK: [[X:%[0-9]+]] = add", "// CHECK: mul [[X]], [[X]]"), lines("%7 = add %a, %b", "%8 = mul %7, %7")},
		{"reuse is literal", lines("// CHECK: [[X:.]] = add", "// CHECK: mul [[X]]"), lines("+ = add", "mul +")},
		{"capture with groups", lines("// CHECK: [[OP:(add|sub)]] [[A:(%[a-z])]]", "// CHECK-NEXT: [[OP]] [[A]]"), lines("sub %q", "sub %q")},
		{"reuse in same directive", "// CHECK: [[X:%[0-9]+]] = add [[X]], [[X]]", "%1 = add %2, %1\n%3 = add %3, %3\n"},
		{"reuse in same directive needs backtracking", "// CHECK: [[X:a[0-9]]] {{.*}}[[X]]", "a1 a2 b a2\n"},
		{"same-directive value then later", lines("// CHECK: [[X:%[0-9]+]] = add [[X]]", "// CHECK-NEXT: use [[X]]"), lines("%4 = add %4", "use %4")},
		{"redefinition overrides", lines("// CHECK: [[X:%[0-9]+]] = add", "// CHECK: [[X:%[0-9]+]] = mul", "// CHECK: ret [[X]]"), lines("%1 = add", "%2 = mul", "ret %2")},
		{"whitespace runs in pattern", "// CHECK: add  %a,\t\t%b", "add %a, %b\n"},
		{"whitespace runs in output", "// CHECK: add %a, %b", "add \t %a,    %b\n"},
		{"leading whitespace in output", lines("// CHECK: x", "// CHECK-NEXT: y"), "   x\n\t y\n"},
		{"label blocks", lines(
			"// CHECK-LABEL: func @f",
			"// CHECK: add",
			"// CHECK-LABEL: func @g",
			"// CHECK: mul",
		), lines("func @f", "  add", "  mul", "func @g", "  mul")},
		{"next after label", lines("// CHECK-LABEL: func @f", "// CHECK-NEXT: add"), lines("x", "func @f", "add")},
		{"not is bounded by the next label", lines("// CHECK-LABEL: @f", "// CHECK-NOT: relu", "// CHECK-LABEL: @g"), lines("@f", "add", "@g", "relu")},
		{"label uses a variable from an earlier block", lines(
			"// CHECK-LABEL: func @main",
			"// CHECK: call [[F:@[a-z]+]]",
			"// CHECK-LABEL: func @g",
			"// CHECK-LABEL: func [[F]]",
			"// CHECK: ret",
		), lines("func @main", "call @h", "func @g", "func @h", "ret")},
		{"hash comments", lines("# CHECK: add", "# CHECK-NEXT: mul"), lines("add", "mul")},
		{"caret in same anchors at the previous match", lines("// CHECK: add", "// CHECK-SAME: {{^}} %a"), "add %a\n"},
		{"dollar anchors at end of line", "// CHECK: %b{{$}}", "add %b, %bc\nmul %a, %b\n"},
		{"regex followed by literal brace", "// CHECK: {stage = {{[0-9]+}}}", "op {stage = 12}\n"},
		{"regex with braces", "// CHECK: x{{a{2}}}y", "xaay\n"},
		{"crlf output", lines("// CHECK: add", "// CHECK-NEXT: mul{{$}}"), "add\r\nmul\r\n"},
		{"not with local capture", lines("// CHECK: begin", "// CHECK-NOT: [[R:%[0-9]+]] = add [[R]], [[R]]", "// CHECK: end"), lines("begin", "%1 = add %2, %2", "end")},
		{"global-style variable name", lines("// CHECK: [[$G:%[0-9]+]] = add", "// CHECK: [[$G]]"), "%1 = add\nuse %1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dirs, err := Parse("t.ir", tt.checks, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := Match(dirs, tt.output); err != nil {
				t.Errorf("Match failed:\n%v", err)
			}
		})
	}
}

func TestMatchNegative(t *testing.T) {
	tests := []struct {
		name, checks, output string
		want                 []string // substrings of the error, besides the output dump
	}{
		{"wrong text", lines("// CHECK: add", "// CHECK: mul %a"), lines("%1 = add %a", "%2 = sub %a"),
			[]string{"t.ir:2: CHECK: mul %a: no match found", `output line 1 after "%1 = add"`}},
		{"wrong text hint", "// CHECK: %2 = mul %1, %b", lines("%1 = add %a, %b", "%2 = mul %1, %c"),
			[]string{"t.ir:1: CHECK: %2 = mul %1, %b: no match found", `possible intended match on output line 2: "%2 = mul %1, %c"`}},
		{"whitespace is required", "// CHECK: add %a", "add%a\n", []string{"t.ir:1:", "no match found", `output line 1: "add%a"`}},
		{"order matters", lines("// CHECK: mul", "// CHECK: add"), lines("add", "mul"),
			[]string{"t.ir:2: CHECK: add: no match found", "at end of output", `matches earlier, on output line 1: "add"`}},
		{"next not adjacent", lines("// CHECK: add", "// CHECK-NEXT: mul"), lines("add", "sub", "mul"),
			[]string{`t.ir:2: CHECK-NEXT: mul: expected on output line 2, but line 2 is "sub"`, `first match after the previous one is on output line 3: "mul"`}},
		{"next absent", lines("// CHECK: add", "// CHECK-NEXT: mul"), lines("add", "sub"),
			[]string{`t.ir:2: CHECK-NEXT: mul: expected on output line 2, but line 2 is "sub"`}},
		{"next on same line", lines("// CHECK: add", "// CHECK-NEXT: mul"), lines("add mul", "sub"),
			[]string{"t.ir:2:", "expected on output line 2", "same line as the previous match, output line 1"}},
		{"next at end of output", lines("// CHECK: add", "// CHECK-NEXT: mul"), "x\nadd\n",
			[]string{"t.ir:2:", "expected on output line 3", "end of output"}},
		{"same on another line", lines("// CHECK: add", "// CHECK-SAME: %b"), lines("add %a", "mul %b"),
			[]string{"t.ir:2: CHECK-SAME: %b: expected on output line 1 after the previous match", `"add %a"`, `another line, output line 2: "mul %b"`}},
		{"same before previous match", lines("// CHECK: add", "// CHECK-SAME: %1"), "%1 = add %2\n",
			[]string{"t.ir:2:", "expected on output line 1 after the previous match", `the rest of line 1 is " %2"`}},
		{"not present", lines("// CHECK: add", "// CHECK-NOT: relu", "// CHECK: mul"), lines("add", "%2 = relu %1", "mul"),
			[]string{`t.ir:2: CHECK-NOT: relu: forbidden pattern found on output line 2: "%2 = relu %1"`, "t.ir:3 CHECK matched"}},
		{"second of several nots", lines("// CHECK: add", "// CHECK-NOT: relu", "// CHECK-NOT: gelu", "// CHECK: mul"), lines("add", "gelu", "mul"),
			[]string{`t.ir:3: CHECK-NOT: gelu: forbidden pattern found on output line 2: "gelu"`}},
		{"not at end", lines("// CHECK: add", "// CHECK-NOT: relu"), lines("add", "ok", "relu"),
			[]string{`t.ir:2: CHECK-NOT: relu: forbidden pattern found on output line 3: "relu"`, "to the end of output"}},
		{"not on same line before next match", lines("// CHECK: add", "// CHECK-NOT: relu", "// CHECK-SAME: mul"), "add relu mul\n",
			[]string{`t.ir:2: CHECK-NOT: relu: forbidden pattern found on output line 1: "add relu mul"`}},
		{"not before label", lines("// CHECK-LABEL: @f", "// CHECK-NOT: relu", "// CHECK-LABEL: @g"), lines("@f", "relu", "@g"),
			[]string{`t.ir:2: CHECK-NOT: relu: forbidden pattern found on output line 2: "relu"`}},
		{"not with local capture", lines("// CHECK: begin", "// CHECK-NOT: [[R:%[0-9]+]] = add [[R]]", "// CHECK: end"), lines("begin", "%1 = add %2", "%3 = add %3", "end"),
			[]string{"t.ir:2:", `forbidden pattern found on output line 3: "%3 = add %3"`}},
		{"undefined variable", lines("// CHECK: add", "// CHECK-NEXT: mul [[X]]"), lines("add", "mul %1"),
			[]string{"t.ir:2: CHECK-NEXT: mul [[X]]: variable X is undefined", `after the end of output line 1: "add"`}},
		{"variable from a not is not visible", lines("// CHECK-NOT: [[X:relu]]", "// CHECK: [[X]]"), "add\n",
			[]string{"t.ir:2:", "variable X is undefined", "at the start of output"}},
		{"undefined variable in not", lines("// CHECK: add", "// CHECK-NOT: [[Y]]"), "add\n",
			[]string{"t.ir:2: CHECK-NOT: [[Y]]: variable Y is undefined"}},
		{"captured value mismatch", lines("// CHECK: [[X:%[0-9]+]] = add", "// CHECK-NEXT: mul [[X]]"), lines("%1 = add %a", "%2 = mul %3"),
			[]string{`t.ir:2: CHECK-NEXT: mul [[X]]: expected on output line 2, but line 2 is "%2 = mul %3"`, `with X = "%1"`}},
		{"same-directive reuse mismatch", "// CHECK: [[X:%[0-9]+]] = add [[X]]", lines("%1 = add %2", "%3 = add %4"),
			[]string{"t.ir:1:", "no match found", "at the start of output"}},
		{"label order wrong", lines("// CHECK-LABEL: func @g", "// CHECK-LABEL: func @f"), lines("func @f", "func @g"),
			[]string{"t.ir:2: CHECK-LABEL: func @f: no match found", "at end of output", `matches earlier, on output line 1: "func @f"`}},
		{"label missing", lines("// CHECK-LABEL: func @f", "// CHECK: add"), lines("func @g", "add"),
			[]string{"t.ir:1: CHECK-LABEL: func @f: no match found", `possible intended match on output line 1: "func @g"`}},
		{"check only in a later block", lines(
			"// CHECK-LABEL: func @f",
			"// CHECK: mul",
			"// CHECK-LABEL: func @g",
		), lines("func @f", "  add", "func @g", "  mul"),
			[]string{"t.ir:2: CHECK: mul: no match found", "up to the t.ir:3 CHECK-LABEL match on output line 3", `matches only in a later block, on output line 4: "  mul"`}},
		{"check must precede the closing label on its line", lines("// CHECK-LABEL: @f", "// CHECK: @g", "// CHECK-LABEL: @g"), "@f @g\n",
			[]string{"t.ir:2: CHECK: @g: no match found"}},
		{"next across a label", lines("// CHECK-LABEL: @f", "// CHECK: add", "// CHECK-NEXT: mul", "// CHECK-LABEL: @g"), lines("@f add", "@g mul"),
			[]string{"t.ir:3:", `expected on output line 2, but line 2 is "@g mul"`, `the block ends on that line, at "@g mul", where t.ir:4 CHECK-LABEL matched`}},
		{"next past a label line", lines("// CHECK-LABEL: @f", "// CHECK: add", "// CHECK-NEXT: mul", "// CHECK-LABEL: @g"), lines("@f", "add @g", "mul"),
			[]string{"t.ir:3:", "expected on output line 3, but the block ends before it, on output line 2 where t.ir:4 CHECK-LABEL matched"}},
		{"label uses a variable of the block it closes", lines("// CHECK: call [[F:@[a-z]+]]", "// CHECK-LABEL: func [[F]]"), lines("call @h", "func @h"),
			[]string{"t.ir:2: CHECK-LABEL: func [[F]]: variable F is undefined", "only use variables defined before the previous CHECK-LABEL"}},
		{"empty output", "// CHECK: add", "", []string{"t.ir:1:", "empty output"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dirs, err := Parse("t.ir", tt.checks, 0)
			if err != nil {
				t.Fatal(err)
			}
			err = Match(dirs, tt.output)
			if err == nil {
				t.Fatalf("Match succeeded, want error containing %q", tt.want)
			}
			msg := err.Error()
			t.Logf("message:\n%s", msg)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
			// The log must be self-contained: the whole output, numbered.
			if !strings.Contains(msg, "\noutput:\n") {
				t.Errorf("error has no output dump:\n%s", msg)
			}
			for i, l := range strings.Split(strings.TrimSuffix(tt.output, "\n"), "\n") {
				if tt.output != "" && !strings.Contains(msg, fmt.Sprintf("%d | %s", i+1, l)) {
					t.Errorf("output dump lacks line %d %q:\n%s", i+1, l, msg)
				}
			}
		})
	}
}

// TestMessageFormat pins the first line of two messages to the documented form.
func TestMessageFormat(t *testing.T) {
	checks := lines(
		"// CHECK: [[X:%[0-9]+]] = add",
		"// CHECK-NEXT: mul [[X]], %b",
	)
	output := lines("func @f", "  %0 = const", "  %1 = add %a, %b", "  %2 = sub", "  %5 = relu", "  %6 = mul %1, %b", "  %3 = add %1, %2", "  %4 = mul %1, %b")
	// Make "%3 = add" (line 7) the CHECK match by starting past line 3.
	dirs, err := Parse("cse.ir", "// CHECK: %6\n"+checks, 11)
	if err != nil {
		t.Fatal(err)
	}
	err = Match(dirs, output)
	if err == nil {
		t.Fatal("want error")
	}
	first := strings.SplitN(err.Error(), "\n", 2)[0]
	if want := `cse.ir:14: CHECK-NEXT: mul [[X]], %b: expected on output line 8, but line 8 is "  %4 = mul %1, %b"`; first != want {
		t.Errorf("first line\n got: %s\nwant: %s", first, want)
	}

	dirs, err = Parse("cse.ir", lines("// CHECK: add", "// CHECK-NOT: relu", "// CHECK: mul"), 18)
	if err != nil {
		t.Fatal(err)
	}
	err = Match(dirs, output)
	if err == nil {
		t.Fatal("want error")
	}
	first = strings.SplitN(err.Error(), "\n", 2)[0]
	if want := `cse.ir:20: CHECK-NOT: relu: forbidden pattern found on output line 5: "  %5 = relu"`; first != want {
		t.Errorf("first line\n got: %s\nwant: %s", first, want)
	}
	if !strings.Contains(err.Error(), "> 5 |   %5 = relu") {
		t.Errorf("offending line is not marked in the dump:\n%v", err)
	}
}

func TestMatchValidatesDirectives(t *testing.T) {
	tests := []struct {
		name string
		dirs []Directive
		want string
	}{
		{"none", nil, "no CHECK directives"},
		{"next first", []Directive{{Next, "a", "x.ir", 3}}, "x.ir:3: CHECK-NEXT: a:"},
		{"bad kind", []Directive{{Kind(42), "a", "x.ir", 4}}, "x.ir:4:"},
		{"bad regex", []Directive{{Check, "{{(}}", "x.ir", 5}}, "x.ir:5:"},
		{"empty", []Directive{{Check, "  ", "", 6}}, "<checks>:6:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Match(tt.dirs, "a\n")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Match error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestRun(t *testing.T) {
	if err := Run("r.ir", "// CHECK: b\n// CHECK-NEXT: c\n", 0, "a\nb\nc\n"); err != nil {
		t.Error(err)
	}
	if err := Run("r.ir", "// CHECK-SAME: b\n", 0, "b\n"); err == nil {
		t.Error("Run accepted a malformed directive")
	}
}

func TestBacktrackBudget(t *testing.T) {
	dirs := []Directive{{Check, "[[X:(a|aa)+]]{{(a|aa)+}}b[[X]]", "x.ir", 1}}
	start := time.Now()
	err := Match(dirs, strings.Repeat("a", 40)+"bc\n")
	if err == nil || !strings.Contains(err.Error(), "x.ir:1:") || !strings.Contains(err.Error(), "too complex") {
		t.Errorf("Match = %v, want a bounded failure naming x.ir:1", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Match took %v", d)
	}
	// The same directive on a line where the backreference can succeed.
	if err := Match(dirs, "aaba\n"); err != nil {
		t.Error(err)
	}
}

func FuzzMatch(f *testing.F) {
	f.Add("// CHECK: [[X:%[0-9]+]] = add\n// CHECK-NEXT: mul [[X]]\n// CHECK-NOT: relu\n// CHECK-SAME: {{%[a-z]+}}", "%1 = add\nmul %1 %b\n", uint8(0))
	f.Add("// CHECK-LABEL: @f\n// CHECK: [[A:a+]] [[A]]\n// CHECK-LABEL: @g", "@f aa aa\n@g\n", uint8(1))
	f.Add("# CHECK: {{^}}x{{$}}\n# CHECK-SAME: [[Y]]", "x\n\ty  z\r\n", uint8(2))
	f.Add("// CHECK: {stage = {{[0-9]+}}}\n// CHECK-NOT: [[", "", uint8(3))
	f.Fuzz(func(t *testing.T, checks, output string, kind uint8) {
		if dirs, err := Parse("fuzz.ir", checks, 0); err == nil && len(dirs) > 0 {
			if err := Match(dirs, output); err != nil && !strings.Contains(err.Error(), "fuzz.ir:") {
				t.Errorf("Match error does not name the check file: %v", err)
			}
		}
		// Hand-built directives bypass Parse's line splitting and validation.
		d := Directive{Kind: Kind(kind % 6), Pattern: checks, File: "raw.ir", Line: 1}
		_ = Match([]Directive{{Kind: Check, Pattern: "{{.*}}", File: "raw.ir", Line: 1}, d}, output)
	})
}

// TestBacktrackAgreesWithRegexp checks the backreference interpreter against
// package regexp on patterns without backreferences: same leftmost-first
// match and the same captures.
func TestBacktrackAgreesWithRegexp(t *testing.T) {
	patterns := []string{
		`a+`, `a*?b`, `(a|ab)(c|bcd)(d*)`, `(?i)AbC`, `[^ ]+ = (add|sub)`, `\bx\b`, `\Bx`, `^%[0-9]+$`,
		`x{2,3}?y`, `(a{2})*`, `(?:a|b)+?c`, `.{3}$`, `(%[a-z]+), (%[a-z]+)`, `(a*)+b`, `(a|)+c`, `é.`, `[[:alpha:]]+`,
		`(?s:.*)z`, `(x)?(y)?z`, `()`,
	}
	inputs := []string{"", "abcd", "aab", "xx xxxy", "%1 = add %a, %b", "x", "ax x", "ABC abc", "%12", "aaaac", "héé", "zz", "yz"}
	for _, p := range patterns {
		re := regexp.MustCompile(p)
		tree, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range inputs {
			want := re.FindStringSubmatchIndex(in)
			got, ok, err := backtrackSearch(tree, nil, in)
			if err != nil {
				t.Fatalf("%q on %q: %v", p, in, err)
			}
			if !ok {
				got = nil
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%q on %q: backtracker %v, regexp %v", p, in, got, want)
			}
		}
	}
}

// FuzzBacktrack is the differential version of TestBacktrackAgreesWithRegexp.
func FuzzBacktrack(f *testing.F) {
	f.Add(`(a|ab)(c|bcd)(d*)`, "abcd")
	f.Add(`(a*)+b`, "aab")
	f.Add(`\bx{2,3}?`, "xx xxx")
	f.Fuzz(func(t *testing.T, p, in string) {
		if len(p) > 40 || len(in) > 40 {
			return // keep the exponential cases cheap
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return
		}
		tree, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatalf("regexp accepts %q but syntax.Parse does not: %v", p, err)
		}
		got, ok, err := backtrackSearch(tree, nil, in)
		if err != nil {
			return // budget exceeded
		}
		if !ok {
			got = nil
		}
		if want := re.FindStringSubmatchIndex(in); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q on %q: backtracker %v, regexp %v", p, in, got, want)
		}
	})
}
