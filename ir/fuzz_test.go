package ir

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary text to the parser. It must never panic; whatever parses and
// verifies must print, parse back and print byte-identically.
func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add(strings.Replace(sample, "f32[2]: [1.5, -2, inf, nan]>} : f32[2]", "f32[4]: [1.5, -2, inf, nan]>} : f32[4]", 1))
	for _, c := range errorCases {
		f.Add(fmt.Sprintf("func @f(%%a: f32[4], %%i: i64[4], %%c: f32[3]) -> (f32[4]) {\n  %s\n  return %%a\n}\n", c.body))
	}
	f.Add("module @m attributes {comm_explicit}\nfunc @f(%a: f32[4]) -> (f32[4]) {\n  %0 = relu %a : f32[4] {stage = 0}\n  return %0\n}\n")
	f.Fuzz(func(t *testing.T, src string) {
		m, err := Parse("fuzz.ir", src)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Parse returned %T, want *Error", err)
			}
			return
		}
		if Verify(m) != nil {
			return
		}
		out := m.String()
		m2, err := Parse("printed.ir", out)
		if err != nil {
			t.Fatalf("printed IR does not parse: %v\n%s", err, out)
		}
		if err := Verify(m2); err != nil {
			t.Fatalf("printed IR does not verify: %v\n%s", err, out)
		}
		if out2 := m2.String(); out2 != out {
			t.Fatalf("round trip differs:\n%s\n---\n%s", out, out2)
		}
	})
}
