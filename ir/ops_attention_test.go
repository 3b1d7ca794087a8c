package ir

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestAttentionInference(t *testing.T) {
	f32 := func(dims ...int) Type { return T(F32, dims...) }
	causal := Attrs{{"causal", BoolAttr(true)}, {"scale", Float(0.25)}}
	for _, c := range []struct {
		op    string
		in    []Type
		attrs Attrs
		want  string
	}{
		{"attention", []Type{f32(2, 4, 5, 8), f32(2, 4, 7, 8), f32(2, 4, 7, 3)}, causal, "f32[2,4,5,3], f32[2,4,5,1]"},
		// GQA: 2 kv heads serve 6 query heads; MQA: one.
		{"attention", []Type{f32(6, 5, 8), f32(2, 5, 8), f32(2, 5, 8)}, nil, "f32[6,5,8], f32[6,5,1]"},
		{"attention", []Type{f32(1, 6, 5, 8), f32(1, 1, 5, 8), f32(1, 1, 5, 8)}, nil, "f32[1,6,5,8], f32[1,6,5,1]"},
		{"attention", []Type{T(BF16, 1, 2, 5, 8), T(BF16, 1, 2, 5, 8), T(BF16, 1, 2, 5, 8)}, nil, "bf16[1,2,5,8], f32[1,2,5,1]"},
		{"attention", []Type{T(F64, 2, 5, 8), T(F64, 2, 5, 8), T(F64, 2, 5, 8)}, nil, "f64[2,5,8], f64[2,5,1]"},
		{"attention", []Type{f32(2, 4, 5, 8), f32(2, 4, 7, 8), f32(2, 4, 7, 8), T(Bool, 5, 7)}, nil, "f32[2,4,5,8], f32[2,4,5,1]"},
		{"attention", []Type{f32(2, 4, 5, 8), f32(2, 4, 7, 8), f32(2, 4, 7, 8), f32(2, 1, 5, 7)}, nil, "f32[2,4,5,8]"},
		{"attention", []Type{f32(2, 4, 5, 8), f32(2, 4, 7, 8), f32(2, 4, 7, 8), f32(5, 5)}, nil, "error: mask f32[5,5] does not broadcast to the scores' shape [2,4,5,7]"},
		{"attention", []Type{f32(2, 4, 5, 8), f32(2, 4, 7, 8), f32(2, 4, 7, 8), T(I64, 5, 7)}, nil, "error: mask i64[5,7] must be bool or f32"},
		{"attention", []Type{f32(2, 4, 5, 8), f32(2, 3, 7, 8), f32(2, 3, 7, 8)}, nil, "error: k's 3 heads must divide q's 4"},
		{"attention", []Type{f32(2, 4, 5, 8), f32(2, 4, 7, 6), f32(2, 4, 7, 8)}, nil, "error: k f32[2,4,7,6] must have q's head dim 8"},
		{"attention", []Type{f32(2, 4, 5, 8), f32(2, 4, 7, 8), f32(2, 4, 6, 8)}, nil, "error: v f32[2,4,6,8] must have k's heads and sequence"},
		{"attention", []Type{f32(2, 4, 5, 8), f32(3, 4, 7, 8), f32(3, 4, 7, 8)}, nil, "error: q, k and v must have equal leading dims"},
		{"attention", []Type{f32(5, 8), f32(5, 8), f32(5, 8)}, nil, "error: q, k and v must have one rank of at least 3"},
		{"attention", []Type{f32(2, 5, 8), T(BF16, 2, 5, 8), f32(2, 5, 8)}, nil, "error: q, k and v must have one dtype"},
		{"attention", []Type{T(I64, 2, 5, 8), T(I64, 2, 5, 8), T(I64, 2, 5, 8)}, nil, "error: q must be floating point"},
		{"attention_grad", []Type{f32(4, 5, 8), f32(2, 7, 8), f32(2, 7, 3), f32(4, 5, 3), f32(4, 5, 1), f32(4, 5, 3)}, causal, "f32[4,5,8], f32[2,7,8], f32[2,7,3]"},
		{"attention_grad", []Type{f32(4, 5, 8), f32(2, 7, 8), f32(2, 7, 3), f32(4, 5, 3), f32(4, 5, 1), f32(4, 5, 3), T(Bool, 5, 7)}, nil, "f32[4,5,8], f32[2,7,8], f32[2,7,3]"},
		{"attention_grad", []Type{f32(4, 5, 8), f32(2, 7, 8), f32(2, 7, 3), f32(4, 5, 3), f32(4, 5), f32(4, 5, 3)}, nil, "error: lse f32[4,5] must be f32[4,5,1]"},
		{"attention_grad", []Type{f32(4, 5, 8), f32(2, 7, 8), f32(2, 7, 3), f32(4, 5, 3), f32(4, 5, 1), f32(4, 5, 8)}, nil, "error: do f32[4,5,8] must be f32[4,5,3]"},
		{"attention_grad", []Type{f32(4, 5, 8), f32(2, 7, 8), f32(2, 7, 3), f32(4, 5, 8), f32(4, 5, 1), f32(4, 5, 3)}, nil, "error: o f32[4,5,8] must be f32[4,5,3]"},
	} {
		def := MustLookup(c.op)
		if _, err := def.CheckAttrs(c.attrs.Sorted()); err != nil {
			t.Fatalf("%s %v: %v", c.op, c.attrs, err)
		}
		out, err := def.Infer(c.in, c.attrs.Sorted())
		got := "error: " + fmt.Sprint(err)
		if err == nil {
			s := make([]string, len(out))
			for i, o := range out {
				s[i] = o.String()
			}
			got = strings.Join(s, ", ")
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s%v: got %s, want %s", c.op, c.in, got, c.want)
		}
	}
}

// TestAttentionRoundTrip: the op and its gradient print, parse and verify like every op; bad
// attributes and operands are reported at their line.
func TestAttentionRoundTrip(t *testing.T) {
	src := `func @f(%q: f32[2,4,5,8], %k: f32[2,2,5,8], %v: f32[2,2,5,8], %m: bool[5,5]) -> (f32[2,4,5,8]) {
  %o, %lse = attention %q, %k, %v {causal = true, scale = 0.125} : f32[2,4,5,8], f32[2,4,5,1]
  %o2, %lse2 = attention %q, %k, %v, %m : f32[2,4,5,8], f32[2,4,5,1]
  %dq, %dk, %dv = attention_grad %q, %k, %v, %o2, %lse2, %o, %m : f32[2,4,5,8], f32[2,2,5,8], f32[2,2,5,8]
  return %dq
}
`
	m, err := Parse("attn.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(m); err != nil {
		t.Fatal(err)
	}
	if out := m.String(); out != src {
		t.Fatalf("print differs from the source:\n%s\n---\n%s", out, src)
	}
	for _, c := range []struct{ edit, want string }{
		{"causal = true", `attn.ir:2:.*attribute causal: want bool, got 1`},
		{"%q, %k, %v {", `attn.ir:2:.*k's 3 heads must divide q's 4`},
	} {
		bad := src
		switch c.edit {
		case "causal = true":
			bad = strings.Replace(src, "causal = true", "causal = 1", 1)
		default:
			bad = strings.ReplaceAll(src, "f32[2,2,5,8]", "f32[2,3,5,8]")
		}
		m, err := Parse("attn.ir", bad)
		if err == nil {
			err = Verify(m)
		}
		if err == nil || !matchRE(c.want, err.Error()) {
			t.Errorf("%s: got %v, want %s", c.edit, err, c.want)
		}
	}
}

func matchRE(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
