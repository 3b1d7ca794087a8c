package dsl

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

const errModel = `model m
config { batch = 16; seq = 32; d = 64; h = 48; heads = 5 }
input x: f32[batch, seq, d]
forward {
  param w: f32[h, d] = normal(0.02)
  y = x @ w
  loss mean(y)
}
`

// TestErrors checks that each kind of bad input gives one diagnostic at the right file,
// line and column, quoting the line with a caret under the offending token.
func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		opts Options
		loc  string // file:line:col
		msg  string // regexp for the message
	}{
		{"syntax", "model m\nforward {\n  y = x +\n}\n", Options{}, "e.ppm:4:1", `^syntax error: unexpected "}" \(expected an expression\)$`},
		{"syntax-char", "model m\nconfig { a = 3 # 4 }\n", Options{}, "e.ppm:2:16", `^syntax error: unexpected character "#"$`},
		{"syntax-colon", "model m\ninput x f32[4]\n", Options{}, "e.ppm:2:9", `^syntax error: unexpected "f32" \(expected ":"\)$`},
		{"unknown-name", "model m\ninput x: f32[4]\nforward {\n  loss mean(x * scale)\n}\n", Options{}, "e.ppm:4:17", `^undefined: scale$`},
		{"unknown-builtin", "model m\ninput x: f32[4]\nforward {\n  loss mean(frobnicate(x))\n}\n", Options{}, "e.ppm:4:13", `^unknown function frobnicate \(not a block or a builtin\)$`},
		{"metric-name", "model m\ninput x: f32[4]\nforward {\n  metric Dropped sum(x)\n  loss mean(x)\n}\n", Options{}, "e.ppm:4:10", `^metric name "Dropped": want lower-case letters, digits and _, starting with a letter, and not loss$`},
		{"metric-not-scalar", "model m\ninput x: f32[4]\nforward {\n  metric seen x\n  loss mean(x)\n}\n", Options{}, "e.ppm:4:15", `^a metric must be a numeric scalar, got f32\[4\]$`},
		{"arg-count", "model m\ninput x: f32[4]\nforward {\n  loss mean(softmax(x, 0, 1))\n}\n", Options{}, "e.ppm:4:27", `^too many arguments to softmax: it takes softmax\(x, axis\?\)$`},
		{"arg-missing", "model m\ninput x: f32[4]\nforward {\n  loss mean(gather(x))\n}\n", Options{}, "e.ppm:4:13", `^gather is missing argument indices: it takes gather\(data, indices, axis\?\)$`},
		{"attention-heads", "model m\ninput q: f32[2, 4, 8, 16]\ninput k: f32[2, 3, 8, 16]\nforward {\n  loss mean(attention(q, k, k, causal = true))\n}\n", Options{}, "e.ppm:5:13", `^attention: k's 3 heads must divide q's 4`},
		{"attention-causal", "model m\ninput q: f32[2, 4, 8, 16]\nforward {\n  loss mean(attention(q, q, q, causal = 1))\n}\n", Options{}, "e.ppm:4:32", `^attention: causal must be true or false, got integer 1$`},
		{"matmul-shapes", errModel, Options{}, "e.ppm:6:9", `^cannot matmul f32\[16,32,64\] @ f32\[48,64\]: contraction dims 64 and 48 differ$`},
		{"broadcast", "model m\ninput x: f32[4, 8]\ninput y: f32[3]\nforward {\n  loss mean(x + y)\n}\n", Options{}, "e.ppm:5:15", `^cannot add f32\[4,8\] \+ f32\[3\]: shapes \[4,8\] and \[3\] do not broadcast$`},
		{"config-division", "model m\nconfig { d = 64; heads = 5; hd = d / heads }\ninput x: f32[4]\nforward { loss mean(x) }\n", Options{}, "e.ppm:2:36", `^64 / 5 is not exact \(write 64.0 / 5 for a float\)$`},
		{"config-cycle", "model m\nconfig { a = b + 1; b = 2 * a }\ninput x: f32[4]\nforward { loss mean(x) }\n", Options{}, "e.ppm:2:29", `^config constant a is defined in terms of itself$`},
		{"microbatches", errModel, Options{Microbatches: 3}, "e.ppm:2:18", `^global batch 16 does not divide into 3 micro-batches; batch sizes that do: 15 or 18$`},
		{"microbatches-over-batch", errModel, Options{Microbatches: 100000}, "e.ppm:2:18", `^global batch 16 does not divide into 100000 micro-batches: a micro-batch needs a sequence at least; micro-batch counts that divide it: 1, 2, 4, 8, 16$`},
		{"microbatches-dp", errModel, Options{Microbatches: 6, Replicas: 2}, "e.ppm:2:18", `^global batch 16 does not divide into 6 micro-batches \(3 per data-parallel replica × 2 replicas\); batch sizes that do: 12 or 18$`},
		{"microbatches-preset", errModel + "preset p { batch = 12 }\n", Options{Preset: "p", Microbatches: 8}, "e.ppm:9:20", `^global batch 12 does not divide into 8 micro-batches; batch sizes that do: 8 or 16$`},
		{"set-syntax", errModel, Options{Set: map[string]string{"d": "3 +"}}, "--set d:1:4", `^syntax error: unexpected end of input \(expected an expression\)$`},
		{"set-type", errModel, Options{Set: map[string]string{"h": `"wide"`}}, "--set h:1:1", `^config constant h must be a number or a bool, got string "wide"$`},
		{"repeat-count", "model m\nconfig { n = 2 - 3 }\ninput x: f32[4]\nforward {\n  repeat n { y = x }\n  loss mean(x)\n}\n", Options{}, "e.ppm:5:10", `^repeat count must be a positive integer, got integer -1$`},
		{"repeat-float", "model m\ninput x: f32[4]\nforward {\n  repeat (2 * 1.5) { y = x }\n  loss mean(x)\n}\n", Options{}, "e.ppm:4:10", `^repeat count must be a positive integer, got float 3$`},
		{"duplicate-param", "model m\ninput x: f32[4]\nforward {\n  param w: f32[4] = ones\n  param w: f32[4] = ones\n  loss mean(x * w)\n}\n", Options{}, "e.ppm:5:9", `^duplicate parameter w \(first declared at e.ppm:4:9\)$`},
		{"duplicate-param-repeat", "model m\ninput x: f32[4]\nblock l(v) {\n  param w: f32[4] = ones\n  return v * w\n}\nforward {\n  repeat 3 { x2 = l(x) }\n  loss mean(x2)\n}\n", Options{}, "e.ppm:4:9", `^duplicate parameter l.w \(first declared at e.ppm:4:9\); inside repeat`},
		{"recursion", "model m\ninput x: f32[4]\nblock a(v) { return b(v) }\nblock b(v) { return a(v) }\nforward { loss mean(a(x)) }\n", Options{}, "e.ppm:4:21", `^recursive block call: a → b → a$`},
		{"deep-nesting", "model m\ninput x: f32[4]\nforward { loss mean(" + strings.Repeat("(", 200) + "x" + strings.Repeat(")", 200) + ") }\n", Options{}, "e.ppm:3:119", `^nesting too deep \(more than 100 levels of brackets or unary operators\)$`},
		{"deep-unary", "model m\ninput x: f32[4]\nforward { loss mean(" + strings.Repeat("-", 300) + "x) }\n", Options{}, "e.ppm:3:119", `^nesting too deep`},
		{"huge-shape", "model m\ninput x: f32[1000000, 1000000, 1000000]\nforward { loss mean(x) }\n", Options{}, "e.ppm:2:32", `^tensor too large: more than 2\^50 elements$`},
		{"shard-rank", "model m\ninput x: f32[4]\nforward {\n  param w: f32[4] = ones shard [_, tp]\n  loss mean(x * w)\n}\n", Options{}, "e.ppm:4:32", `^shard of w lists 2 dims, but f32\[4\] has rank 1$`},
		{"shard-axis", "model m\ninput x: f32[4]\nforward {\n  param w: f32[4] = ones shard [xp]\n  loss mean(x * w)\n}\n", Options{}, "e.ppm:4:33", `^shard of w: "xp" is not a mesh axis that splits parameters \(want tp, or _ for a whole dim\)$`},
		{"shard-dp", "model m\ninput x: f32[4]\nforward {\n  param w: f32[4] = ones shard [dp]\n  loss mean(x * w)\n}\n", Options{}, "e.ppm:4:33", `^shard of w: parameters are not split over dp`},
		{"shard-pp", "model m\ninput x: f32[4]\nforward {\n  param w: f32[4] = ones shard [pp]\n  loss mean(x * w)\n}\n", Options{}, "e.ppm:4:33", `^shard of w: pp is the pipeline axis`},
		{"shard-twice", "model m\ninput x: f32[4, 4]\nforward {\n  param w: f32[4, 4] = ones shard [tp, tp]\n  loss mean(x * w)\n}\n", Options{}, "e.ppm:4:40", `^shard of w uses mesh axis tp twice$`},
		{"shard-syntax", "model m\ninput x: f32[4]\nforward {\n  param w: f32[4] = ones shard tp\n  loss mean(x * w)\n}\n", Options{}, "e.ppm:4:32", `^syntax error: unexpected "tp"$`},
		{"empty-stage", "model m\ninput x: f32[4]\nforward {\n  y = relu(x)\n  stage\n  stage\n  loss mean(y)\n}\n", Options{}, "e.ppm:6:3", `^stage 1 is empty: no op between this stage marker and the previous one at e.ppm:5:3$`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("e.ppm", []byte(tc.src), tc.opts)
			e := oneError(t, err)
			if got := e.Loc.String(); got != tc.loc {
				t.Errorf("location %s, want %s (error: %v)", got, tc.loc, err)
			}
			if !regexp.MustCompile(tc.msg).MatchString(e.Msg) {
				t.Errorf("message %q does not match %q", e.Msg, tc.msg)
			}
			checkCaret(t, e, tc.src, tc.opts)
		})
	}
}

// oneError asserts err is a single positioned diagnostic.
func oneError(t *testing.T, err error) *ir.Error {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	var e *ir.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T is not an *ir.Error: %v", err, err)
	}
	return e
}

// checkCaret asserts that the printed error quotes the source line and puts the caret
// under the error's column.
func checkCaret(t *testing.T, e *ir.Error, src string, opts Options) {
	t.Helper()
	text := src
	if name, ok := strings.CutPrefix(e.Loc.File, "--set "); ok {
		text = opts.Set[name]
	}
	line := ir.SourceLine(text, e.Loc.Line)
	if line == "" {
		return // an error at the end of the input
	}
	if e.Line != line {
		t.Errorf("quoted line %q, want %q", e.Line, line)
	}
	lines := strings.Split(e.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed error has %d lines, want 3:\n%s", len(lines), e.Error())
	}
	if want := e.Loc.String() + ": " + e.Msg; lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	if want := "    " + line; lines[1] != want {
		t.Errorf("second line %q, want %q", lines[1], want)
	}
	if want := "    " + strings.Repeat(" ", e.Loc.Col-1) + "^"; lines[2] != want {
		t.Errorf("caret line %q, want %q", lines[2], want)
	}
}

// TestOptionErrors covers the errors about command-line options, which list the valid
// choices.
func TestOptionErrors(t *testing.T) {
	src := []byte(errModel + "preset tiny { d = 8 }\npreset \"big-one\" { d = 128 }\n")
	tests := []struct {
		opts Options
		msg  string
	}{
		{Options{Preset: "huge"}, `e.ppm: unknown preset "huge"; model m has presets: tiny, big-one`},
		{Options{Set: map[string]string{"dmodel": "3"}}, "e.ppm: --set dmodel: unknown config constant (valid names: batch, d, h, heads, seq)"},
		{Options{Microbatches: -2}, "e.ppm: micro-batch count must be positive, got -2"},
	}
	for _, tc := range tests {
		_, err := Load("e.ppm", src, tc.opts)
		if err == nil || err.Error() != tc.msg {
			t.Errorf("%+v: got %v, want %s", tc.opts, err, tc.msg)
		}
	}
	noBatch := []byte("model m\ninput x: f32[4]\nforward { loss mean(x) }\n")
	_, err := Load("n.ppm", noBatch, Options{Microbatches: 2})
	if want := "n.ppm: cannot split into 2 micro-batches: model m has no config constant `batch`"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	_, err = Load("n.ppm", noBatch, Options{Preset: "x"})
	if want := `n.ppm: unknown preset "x": model m declares no presets`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	// A preset that names an unknown constant points at it.
	_, err = Load("e.ppm", []byte(errModel+"preset p { dd = 3 }\n"), Options{Preset: "p"})
	e := oneError(t, err)
	if e.Loc.String() != "e.ppm:9:12" || !strings.Contains(e.Msg, "preset p sets dd, which is not a config constant (valid names: batch, d, h, heads, seq)") {
		t.Errorf("got %v", err)
	}
}

func TestPresets(t *testing.T) {
	names, err := Presets("e.ppm", []byte(errModel+"preset tiny {}\npreset \"gpt3-175b\" { d = 12288 }\n"))
	if err != nil || strings.Join(names, ",") != "tiny,gpt3-175b" {
		t.Errorf("got %v, %v", names, err)
	}
	if _, err := Presets("e.ppm", []byte("model")); err == nil {
		t.Error("no error for a syntax error")
	}
}

// TestSetOverrides checks --set values: expressions over other constants, and over the value
// they replace.
func TestSetOverrides(t *testing.T) {
	src := []byte("model m\nconfig { batch = 4; d = 8; ff = 4 * d }\npreset p { d = 16 }\ninput x: f32[batch, ff]\nforward { loss mean(x) }\n")
	m, err := Load("s.ppm", src, Options{Preset: "p", Set: map[string]string{"d": "d * 2", "batch": "batch + d"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Func("forward").Args[0].Type.String(); got != "f32[36,128]" {
		t.Errorf("x is %s, want f32[36,128]", got)
	}
}

// TestLimits checks the bounds that keep hostile input from exhausting the stack or time.
func TestLimits(t *testing.T) {
	// A chain of blocks deeper than maxCallDepth.
	var b strings.Builder
	b.WriteString("model m\ninput x: f32[4]\n")
	for i := range maxCallDepth + 5 {
		fmt.Fprintf(&b, "block b%d(v) { return b%d(v) }\n", i, i+1)
	}
	fmt.Fprintf(&b, "block b%d(v) { return v }\nforward { loss mean(b0(x)) }\n", maxCallDepth+5)
	_, err := Load("deep.ppm", []byte(b.String()), Options{})
	if e := oneError(t, err); !strings.Contains(e.Msg, "block calls nest too deeply") {
		t.Errorf("got %v", err)
	}
	// Nested repeats that would run 10^10 iterations stop at the work limit.
	src := "model m\ninput x: f32[4]\nforward {\n  repeat 100000 { repeat 100000 { y = x } }\n  loss mean(x)\n}\n"
	_, err = Load("slow.ppm", []byte(src), Options{})
	if e := oneError(t, err); !strings.HasPrefix(e.Msg, "model too large: the import exceeds") {
		t.Errorf("got %v", err)
	}
}

func TestLoadFile(t *testing.T) {
	m, err := LoadFile(filepath.Join(modelsDir, "mlp.ppm"), Options{})
	if err != nil || m.Name != "mlp" {
		t.Fatalf("got %v, %v", m, err)
	}
	if _, err := LoadFile("no/such.ppm", Options{}); err == nil {
		t.Error("no error for a missing file")
	}
}
