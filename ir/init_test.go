package ir

import (
	"strings"
	"testing"
)

func TestParseInit(t *testing.T) {
	for s, want := range map[string]Init{
		"":                {Kind: "zeros"},
		"zeros":           {Kind: "zeros"},
		" ones ":          {Kind: "ones"},
		"normal(0.02)":    {Kind: "normal", A: 0.02},
		"uniform(-1, 1)":  {Kind: "uniform", A: -1, B: 1},
		"uniform( 2 ,2 )": {Kind: "uniform", A: 2, B: 2},
	} {
		if got, err := ParseInit(s); err != nil || got != want {
			t.Errorf("ParseInit(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for s, want := range map[string]string{
		"normal(abc)":    `bad initialiser "normal(abc)": "abc" is not a finite number (want normal(STD), uniform(A, B), zeros or ones)`,
		"normal(inf)":    `"inf" is not a finite number`,
		"normal(-1)":     "the standard deviation must not be negative",
		"normal(1, 2)":   "normal takes 1 argument (the standard deviation), got 2",
		"uniform(5, 1)":  `bad initialiser "uniform(5, 1)": the lower bound 5 is above the upper bound 1`,
		"uniform(1)":     "uniform takes 2 arguments (the bounds A, B), got 1",
		"gaussian(1)":    `bad initialiser "gaussian(1)" (want normal(STD)`,
		"normal(1":       `bad initialiser "normal(1"`,
		"normal()":       `"" is not a finite number`,
		"xavier_uniform": `bad initialiser "xavier_uniform"`,
	} {
		_, err := ParseInit(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseInit(%q) = %v, want an error containing %q", s, err, want)
		}
		// No Go internals (strconv's "parsing …: invalid syntax") reach the user.
		if err != nil && strings.Contains(err.Error(), "strconv") {
			t.Errorf("ParseInit(%q): %v", s, err)
		}
	}
}

// Bad values of the model convention's attributes are parse errors at the attribute, and
// verifier errors in a module built in memory.
func TestConventionAttrErrors(t *testing.T) {
	const fn = "func @forward(%x: f32[2] {input}, %w: f32[2] {init = \"INIT\", param}) -> (f32[2]) {\n  %0 = mul %x, %w : f32[2]\n  return %0\n}\n"
	for _, c := range []struct{ src, want string }{
		{strings.Replace(fn, "INIT", "normal(abc)", 1), "m.ir:1:47: %w: bad initialiser \"normal(abc)\": \"abc\" is not a finite number"},
		{strings.Replace(fn, "INIT", "uniform(5, 1)", 1), "m.ir:1:47: %w: bad initialiser \"uniform(5, 1)\": the lower bound 5 is above the upper bound 1"},
		{strings.Replace(fn, `"INIT"`, "3", 1), "m.ir:1:47: %w: attribute init must be a string"},
		{"module @m attributes {microbatches = 0}\n" + strings.Replace(fn, "INIT", "zeros", 1), "m.ir:1:23: module attribute microbatches must be a positive integer, got 0"},
		{"module @m attributes {microbatches = 2.5}\n" + strings.Replace(fn, "INIT", "zeros", 1), "m.ir:1:23: module attribute microbatches must be a positive integer, got 2.5"},
	} {
		_, err := Parse("m.ir", c.src)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || !strings.HasSuffix(err.Error(), "^") {
			t.Errorf("got %v\nwant %q with the line and a caret", err, c.want)
		}
	}
	m, err := ParseAndVerify("m.ir", strings.Replace(fn, "INIT", "zeros", 1))
	if err != nil {
		t.Fatal(err)
	}
	m.Funcs[0].ArgAttrs[1] = m.Funcs[0].ArgAttrs[1].Set(AttrInit, String("uniform(5, 1)"))
	m.Attrs = m.Attrs.Set(AttrMicrobatches, Int(-3))
	err = Verify(m)
	for _, want := range []string{"module attribute microbatches must be a positive integer, got -3", "m.ir:1:1: @forward: argument %w: bad initialiser \"uniform(5, 1)\""} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Verify: got %v, want %q", err, want)
		}
	}
}
