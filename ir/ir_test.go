package ir

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

const sample = `module @gpt attributes {mesh = {dp = 1, pp = 4, tp = 2}, microbatches = 8}

func @forward(%tokens: i64[8,16] {input}, %wte: f32[50,8] {init = "normal(0.02)", param}, %wq: f32[8,8] {param}, %"odd/name:0": f32[8] {input}) -> (f32[] {loss}, f32[8,16,8]) attributes {stage = 0} {
  %0 = gather %wte, %tokens : f32[8,16,8] {stage = 0}
  %1 = matmul %0, %wq : f32[8,16,8] {stage = 0, shard = [_, _, tp], phase = fwd}
  %a, %b = split %1 {axis = 2, sizes = [3, 5]} : f32[8,16,3], f32[8,16,5]
  %2 = constant {value = dense<f32[2]: [1.5, -2, inf, nan]>} : f32[2]
  %3 = constant {value = dense<f32[4,4]: 0>} : f32[4,4]
  %4 = gelu %a {approximate = tanh} : f32[8,16,3] {remat}
  send %b {peer = 1, tag = 0} : () {stage = 0}
  %r = recv {peer = 1, tag = 0, type = f32[8,16,8]} : f32[8,16,8] {stage = 1}
  %5 = add %r, %"odd/name:0" : f32[8,16,8] {stage = 1, shard = {dims = [_, [dp, tp], _], partial = [pp]}}
  %6 = reduce_mean %5 : f32[]
  %7 = constant {value = dense<i64[3]: [1, -2, 9223372036854775807]>} : i64[3]
  %8 = constant {value = dense<bool[2]: [true, false]>} : bool[2]
  %9 = constant {value = dense<f16[2]: [0.5, 65504]>} : f16[2]
  %10 = constant {value = dense<bf16[]: 3.140625>} : bf16[]
  %11 = relu %5 : ? {phase = bwd_w}
  return %6, %5
}

func @empty() -> () {
  return
}
`

func TestRoundTrip(t *testing.T) {
	// The dense f32[2] above deliberately has 4 elements: fix the sample to be valid first.
	src := strings.Replace(sample, "dense<f32[2]: [1.5, -2, inf, nan]>} : f32[2]", "dense<f32[4]: [1.5, -2, inf, nan]>} : f32[4]", 1)
	m, err := Parse("sample.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(m); err != nil {
		t.Fatal(err)
	}
	out := m.String()
	m2, err := Parse("printed.ir", out)
	if err != nil {
		t.Fatalf("printed IR does not parse: %v\n%s", err, out)
	}
	if out2 := m2.String(); out2 != out {
		t.Fatalf("print → parse → print differs:\n%s\n---\n%s", out, out2)
	}
	// The printer keeps names, renumbers unnamed values, and quotes odd names.
	for _, want := range []string{`%"odd/name:0": f32[8] {input}`, "%a, %b = split %1", "%2 = constant", "dense<f32[4]: [1.5, -2, inf, nan]>",
		"shard = {dims = [_, [dp, tp], _], partial = [pp]}", "%11 = relu %5 : ? {phase = bwd_w}", "dense<bf16[]: 3.140625>",
		"9223372036854775807", "func @empty() -> () {\n  return\n}"} {
		if !strings.Contains(out, want) {
			t.Errorf("printed IR lacks %q:\n%s", want, out)
		}
	}
}

func TestRoundTripPreservesValues(t *testing.T) {
	src := "func @f() -> (f32[3]) {\n  %0 = constant {value = dense<f32[3]: [0.1, 3.4028235e+38, -1e-45]>} : f32[3]\n  return %0\n}\n"
	m, err := Parse("t.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	d := m.Funcs[0].Ops[0].Attrs.Get("value").(*Dense)
	want := []float32{0.1, math.MaxFloat32, -math.SmallestNonzeroFloat32}
	for i, w := range want {
		if got := float32(d.F64(i)); got != w {
			t.Errorf("element %d = %g, want %g", i, got, w)
		}
	}
	if m.String() != src {
		t.Errorf("not byte-identical:\n%s", m.String())
	}
}

func TestLargeDenseIsHexAndRoundTrips(t *testing.T) {
	vals := make([]float64, 100)
	for i := range vals {
		vals[i] = float64(i) * 0.25
	}
	f := NewFunc("f")
	b := NewBuilder(f)
	c := b.Constant(NewDenseF64(T(F32, 10, 10), vals))
	f.AddResult(c, nil)
	m := &Module{Funcs: []*Func{f}}
	out := m.String()
	if !strings.Contains(out, "dense<f32[10,10]: 0x") {
		t.Fatalf("large dense not printed as hex:\n%s", out)
	}
	m2, err := ParseAndVerify("t.ir", out)
	if err != nil {
		t.Fatal(err)
	}
	d := m2.Funcs[0].Ops[0].Attrs.Get("value").(*Dense)
	for i, v := range vals {
		if d.F64(i) != v {
			t.Fatalf("element %d = %g, want %g", i, d.F64(i), v)
		}
	}
	elided := string(m.Append(nil, PrintOptions{ElideAbove: 16}))
	if !strings.Contains(elided, "dense<f32[10,10]: elided>") {
		t.Fatalf("not elided:\n%s", elided)
	}
	if _, err := Parse("e.ir", elided); err == nil || !strings.Contains(err.Error(), "elided") {
		t.Fatalf("elided data parsed: %v", err)
	}
}

// errorCase is a snippet placed in a one-arg function and the diagnostic it must produce,
// including the position of the caret.
var errorCases = []struct {
	name, body, want string
	line, col        int
}{
	{"undefined", "%1 = add %x, %a : f32[4]", "undefined value %x", 2, 12},
	{"unknown op", "%1 = ad %a, %a : f32[4]", `unknown op "ad"`, 2, 8},
	{"operand count", "%1 = add %a : f32[4]", "op add takes 2 operands, got 1", 2, 8},
	{"shape mismatch", "%1 = add %a, %a : f32[5]", "result 0 declared f32[5], but the operands give f32[4]", 2, 8},
	{"dtype mismatch", "%1 = add %a, %i : f32[4]", "operand dtypes differ: f32 and i64", 2, 8},
	{"broadcast", "%1 = add %a, %c : f32[4]", "do not broadcast", 2, 8},
	{"bad perm", "%1 = transpose %a {perm = [0, 0]} : f32[4]", "perm [0 0] has 2 entries for rank 1", 2, 8},
	{"attr kind", "%1 = transpose %a {perm = 1} : f32[4]", "want integer list, got 1", 2, 22},
	{"unknown attr", "%1 = add %a, %a {foo = 1} : f32[4]", `op add has no attribute "foo"`, 2, 20},
	{"missing attr", "%1 = transpose %a : f32[4]", "op transpose needs attribute perm", 2, 8},
	{"enum", "%1 = gelu %a {approximate = fast} : f32[4]", "want one of none, tanh, got fast", 2, 17},
	{"redefined", "%a = add %a, %a : f32[4]", "value %a defined twice", 2, 3},
	{"bad stage", "%1 = add %a, %a : f32[4] {stage = -1}", "stage must be a non-negative integer", 2, 29},
	{"bad phase", "%1 = add %a, %a : f32[4] {phase = up}", "phase must be one of", 2, 29},
	{"bad annotation", "%1 = add %a, %a : f32[4] {axis = 1}", `unknown annotation "axis"`, 2, 29},
	{"shard axis", "%1 = add %a, %a : f32[4] {shard = [xx]}", `shard uses "xx", which is not a mesh axis`, 2, 8},
	{"shard rank", "%1 = add %a, %a : f32[4] {shard = [_, tp]}", "shard lists 2 dims but", 2, 8},
	{"bad dtype", "%1 = add %a, %a : f33[4]", `unknown dtype "f33"`, 2, 21},
	{"unterminated type", "%1 = add %a, %a : f32[4", "expected ',' between dims, found 'return'", 3, 3},
	{"result count", "%1, %2 = add %a, %a : f32[4], f32[4]", "op add produces 1 results, but 2 are declared", 2, 12},
	{"names vs types", "%1, %2 = add %a, %a : f32[4]", "2 result names but 1 result types", 2, 12},
	{"bad char", "%1 = add %a, %a : f32[4] $", "unexpected character '$'", 2, 28},
	{"non-ASCII char", "%1 = add %a, %a : f32[4] é", "unexpected character 'é'", 2, 28},
	{"dense count", "%1 = constant {value = dense<f32[3]: [1, 2]>} : f32[3]", "needs 3 elements, got 2", 2, 45},
	{"dense kind", "%1 = constant {value = dense<i32[1]: [1.5]>} : i32[1]", "float 1.5 in i32 data", 2, 41},
	{"dense hex", "%1 = constant {value = dense<f32[1]: 0x0000>} : f32[1]", "holds 2 bytes, want 4", 2, 26},
	{"huge dims", "%1 = add %a, %a : f32[1048576,1048576,1048576]", "more than 2^50 elements", 2, 41},
	{"int range", "%1 = transpose %a {perm = [99999999999999999999]} : f32[4]", "out of range", 2, 30},
	{"return type", "%1 = add %a, %a : f32[4]\n  return %i\n}\nfunc @g() -> () {", "returned value 0 has type i64[4]", 3, 3},
	{"reshape", "%1 = reshape %a {shape = [3]} : f32[3]", "cannot reshape 4 elements to [3]", 2, 8},
	{"matmul", "%1 = matmul %a, %c : f32[4]", "matmul contraction mismatch", 2, 8},
	{"slice range", "%1 = slice %a {starts = [1], ends = [9]} : f32[8]", "out of range for dim 0 of size 4", 2, 8},
}

func TestParseErrors(t *testing.T) {
	for _, c := range errorCases {
		t.Run(c.name, func(t *testing.T) {
			src := fmt.Sprintf("func @f(%%a: f32[4], %%i: i64[4], %%c: f32[3]) -> (f32[4]) {\n  %s\n  return %%a\n}\n", c.body)
			src = strings.Replace(src, "func @f(", "func @f(", 1)
			_, err := ParseAndVerify("bad.ir", src)
			if err == nil {
				t.Fatalf("no error for %q", c.body)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) {
				t.Fatalf("error %q does not mention %q", msg, c.want)
			}
			pos := fmt.Sprintf("bad.ir:%d:%d: ", c.line, c.col)
			if !strings.HasPrefix(msg, pos) {
				t.Fatalf("error %q does not start with %q", msg, pos)
			}
			// The message shows the source line and a caret under the column.
			lines := strings.Split(msg, "\n")
			if len(lines) < 3 || strings.TrimSpace(lines[1]) == "" || !strings.HasSuffix(lines[2], "^") || len(lines[2]) != 4+c.col {
				t.Fatalf("no source line and caret at column %d:\n%s", c.col, msg)
			}
		})
	}
}

func TestVerifyBuiltIR(t *testing.T) {
	f := NewFunc("f")
	x := f.AddArg("x", T(F32, 2, 3), nil)
	y := f.AddArg("y", T(F32, 3, 4), nil)
	b := NewBuilder(f)
	z := b.MatMul(x, y)
	f.AddResult(z, nil)
	m := &Module{Funcs: []*Func{f}}
	if err := Verify(m); err != nil {
		t.Fatal(err)
	}
	// Corrupt the IR the ways a buggy pass could, and check each is caught with a message
	// that quotes the op (built ops have no source position).
	z.Type = T(F32, 2, 5)
	if err := Verify(m); err == nil || !strings.Contains(err.Error(), "declared f32[2,5], but the operands give f32[2,4]") || !strings.Contains(err.Error(), "in @f: ") {
		t.Fatalf("stale type not caught: %v", err)
	}
	z.Type = T(F32, 2, 4)
	other := &Value{Name: "ghost", Type: T(F32, 2, 3)}
	z.Def.Operands[0] = other
	if err := Verify(m); err == nil || !strings.Contains(err.Error(), "(%ghost) is not defined before its use") {
		t.Fatalf("foreign operand not caught: %v", err)
	}
	z.Def.Operands[0] = x
	// Use before definition: move the op after one that uses it.
	w := b.Add(z, z)
	f.Ops[0], f.Ops[1] = f.Ops[1], f.Ops[0]
	if err := Verify(m); err == nil || !strings.Contains(err.Error(), "not defined before its use") {
		t.Fatalf("dominance not checked: %v", err)
	}
	f.Ops[0], f.Ops[1] = f.Ops[1], f.Ops[0]
	f.Results[0] = &Value{Type: w.Type}
	if err := Verify(m); err == nil || !strings.Contains(err.Error(), "returned value 0 is not defined") {
		t.Fatalf("undefined result not caught: %v", err)
	}
}

func TestVerifyCrossStage(t *testing.T) {
	src := `module @m attributes {comm_explicit}

func @f(%a: f32[4]) -> (f32[4]) {
  %0 = relu %a : f32[4] {stage = 0}
  %1 = relu %0 : f32[4] {stage = 1}
  return %1
}
`
	_, err := ParseAndVerify("x.ir", src)
	if err == nil || !strings.Contains(err.Error(), "crosses from stage 0 to stage 1 without a send/recv pair") {
		t.Fatalf("cross-stage use not caught: %v", err)
	}
	ok := strings.Replace(src, "  %1 = relu %0 : f32[4] {stage = 1}\n", "  send %0 {peer = 1, tag = 7} : () {stage = 0}\n  %r = recv {peer = 0, tag = 7, type = f32[4]} : f32[4] {stage = 1}\n  %1 = relu %r : f32[4] {stage = 1}\n", 1)
	if _, err := ParseAndVerify("x.ir", ok); err != nil {
		t.Fatal(err)
	}
}

func TestBuilderStickyError(t *testing.T) {
	f := NewFunc("f")
	x := f.AddArg("x", T(F32, 2, 3), nil)
	b := NewBuilder(f)
	b.Loc = Loc{File: "model.ppm", Line: 4, Col: 9}
	bad := b.MatMul(x, x) // 2×3 @ 2×3: mismatch
	y := b.Add(bad, x)    // must not add an op or overwrite the first error
	_ = b.Unary("relu", y)
	err := b.Err()
	if err == nil || !strings.HasPrefix(err.Error(), "model.ppm:4:9: matmul: matmul contraction mismatch: [2,3] @ [2,3]") {
		t.Fatalf("got %v", err)
	}
	if len(f.Ops) != 0 {
		t.Fatalf("ops added after the error: %d", len(f.Ops))
	}
	b2 := NewBuilder(NewFunc("g"))
	b2.Op1("nosuch", nil)
	if b2.Err() == nil || !strings.Contains(b2.Err().Error(), `unknown op "nosuch"`) {
		t.Fatalf("got %v", b2.Err())
	}
}

func TestOpTableInference(t *testing.T) {
	cases := []struct {
		op    string
		attrs Attrs
		in    []Type
		want  string
	}{
		{"matmul", nil, []Type{T(F32, 5, 1, 2, 3), T(F32, 4, 3, 7)}, "f32[5,4,2,7]"},
		{"matmul", Attrs{{"transpose_b", BoolAttr(true)}}, []Type{T(F32, 2, 3), T(F32, 7, 3)}, "f32[2,7]"},
		{"matmul", nil, []Type{T(F32, 3), T(F32, 3, 4)}, "f32[4]"},
		{"matmul", nil, []Type{T(F32, 2, 3), T(F32, 3, 4), T(F32, 4)}, "f32[2,4]"},
		{"add", nil, []Type{T(F32, 4, 1, 3), T(F32, 5, 1)}, "f32[4,5,3]"},
		{"less", nil, []Type{T(I64, 3), T(I64)}, "bool[3]"},
		{"reduce_sum", Attrs{{"axes", Ints(-1, 0)}}, []Type{T(F32, 2, 3, 4)}, "f32[3]"},
		{"reduce_sum", Attrs{{"axes", Ints(1)}, {"keepdims", BoolAttr(true)}}, []Type{T(F32, 2, 3, 4)}, "f32[2,1,4]"},
		{"reduce_max", nil, []Type{T(F32, 2, 3)}, "f32[]"},
		{"reshape", Attrs{{"shape", Ints(-1, 6)}}, []Type{T(F32, 2, 3, 4)}, "f32[4,6]"},
		{"gather", nil, []Type{T(F32, 50, 8), T(I64, 2, 5)}, "f32[2,5,8]"},
		{"gather", Attrs{{"axis", Int(1)}}, []Type{T(F32, 3, 50, 8), T(I32, 5)}, "f32[3,5,8]"},
		{"concat", Attrs{{"axis", Int(-1)}}, []Type{T(F32, 2, 3), T(F32, 2, 5)}, "f32[2,8]"},
		{"slice", Attrs{{"starts", Ints(1)}, {"ends", Ints(9)}, {"steps", Ints(3)}, {"axes", Ints(1)}}, []Type{T(F32, 2, 10)}, "f32[2,3]"},
		{"slice", Attrs{{"starts", Ints(9)}, {"ends", Ints(-1)}, {"steps", Ints(-2)}}, []Type{T(F32, 10)}, "f32[5]"},
		{"broadcast", Attrs{{"shape", Ints(4, 2, 3)}}, []Type{T(F32, 1, 3)}, "f32[4,2,3]"},
		{"where", nil, []Type{T(Bool, 4, 1), T(F32, 3), T(F32)}, "f32[4,3]"},
		{"cross_entropy", nil, []Type{T(F32, 2, 8, 50), T(I64, 2, 8)}, "f32[]"},
		{"cross_entropy", Attrs{{"reduction", Ident("none")}}, []Type{T(F32, 2, 8, 50), T(I64, 2, 8)}, "f32[2,8]"},
		{"layer_norm", nil, []Type{T(F32, 2, 8), T(F32, 8), T(F32, 8)}, "f32[2,8]"},
		{"cast", Attrs{{"to", Ident("bf16")}}, []Type{T(F32, 2)}, "bf16[2]"},
		{"all_gather", Attrs{{"axis", Ident("tp")}, {"dim", Int(1)}, {"parts", Int(4)}}, []Type{T(F32, 2, 3)}, "f32[2,12]"},
		{"reduce_scatter", Attrs{{"axis", Ident("tp")}, {"dim", Int(0)}, {"parts", Int(2)}}, []Type{T(F32, 4, 3)}, "f32[2,3]"},
	}
	for _, c := range cases {
		def := MustLookup(c.op)
		if _, err := def.CheckAttrs(c.attrs.Sorted()); err != nil {
			t.Fatalf("%s: %v", c.op, err)
		}
		got, err := def.Infer(c.in, c.attrs.Sorted())
		if err != nil {
			t.Errorf("%s%v: %v", c.op, c.in, err)
			continue
		}
		if got[0].String() != c.want {
			t.Errorf("%s%v = %s, want %s", c.op, c.in, got[0], c.want)
		}
	}
	// Split yields one result per size.
	got, err := MustLookup("split").Infer([]Type{T(F32, 2, 6)}, Attrs{{"axis", Int(1)}, {"sizes", Ints(1, 2, 3)}})
	if err != nil || len(got) != 3 || got[2].String() != "f32[2,3]" {
		t.Errorf("split: %v %v", got, err)
	}
}

func TestAttrsSortedAndSet(t *testing.T) {
	as := Attrs{{"b", Int(1)}, {"a", Int(2)}}.Sorted()
	if as[0].Name != "a" {
		t.Fatal("not sorted")
	}
	as2 := as.Set("c", Int(3)).Set("a", Int(9)).Delete("b")
	if AttrString(Dict(as2)) != "{a = 9, c = 3}" || AttrString(Dict(as)) != "{a = 2, b = 1}" {
		t.Fatalf("Set/Delete: %s, original %s", AttrString(Dict(as2)), AttrString(Dict(as)))
	}
	if AttrString(Float(2)) != "2.0" || AttrString(Float(1e-5)) != "1e-05" || AttrString(Float(math.Inf(-1))) != "-inf" {
		t.Fatal("float printing")
	}
}

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{{1, 0x3f80}, {1.00390625, 0x3f80}, {1.01171875, 0x3f82}, {-2, 0xc000}} {
		if got := F32ToBF16(c.in); got != c.want {
			t.Errorf("F32ToBF16(%g) = %#x, want %#x", c.in, got, c.want)
		}
	}
	if v := BF16ToF32(F32ToBF16(float32(math.NaN()))); v == v {
		t.Error("NaN lost")
	}
}

// TestVerifyZeroRows: zero_rows (a padded ZeRO block) needs a block split over dp last on dim
// 0 of ceil(rows/dp) rows; each misuse is an error naming the argument.
func TestVerifyZeroRows(t *testing.T) {
	src := func(arg string) string {
		return `module @m attributes {mesh = {dp = 3, tp = 2}}

func @f(%w: ` + arg + `) -> (f32[]) {
  %s = reduce_sum %w : f32[]
  return %s
}
`
	}
	if _, err := ParseAndVerify("x.ir", src(`f32[22,4] {param, shard = [[tp, dp], _], zero_rows = 64}`)); err != nil {
		t.Fatalf("a padded block: %v", err)
	}
	for _, c := range []struct{ arg, want string }{
		{`f32[22,4] {param, shard = [[tp, dp], _], zero_rows = 70}`, "%w: f32[22,4]: a block of 70 rows split over dp 3 has ceil(70/3) = 24 rows"},
		{`f32[22,4] {param, shard = [[dp, tp], _], zero_rows = 64}`, "%w: attribute zero_rows needs a block split over dp on dim 0"},
		{`f32[22,4] {param, zero_rows = 64}`, "%w: attribute zero_rows needs a block split over dp on dim 0"},
		{`f32[22,4] {param, shard = [dp, _], zero_rows = 0}`, "%w: attribute zero_rows must be a positive integer, got 0"},
	} {
		if _, err := ParseAndVerify("x.ir", src(c.arg)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.arg, err, c.want)
		}
	}
}
