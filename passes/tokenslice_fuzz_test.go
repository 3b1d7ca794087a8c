package passes

import (
	"os"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

// FuzzTokenSlice feeds the token-slice pass arbitrary (verified) IR and slice lengths: it
// must slice the module into IR that verifies, or refuse with an error — never panic.
func FuzzTokenSlice(f *testing.F) {
	data, err := os.ReadFile("../testdata/passes/token-slice.ir")
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range strings.Split(string(data), "// -----") {
		f.Add(c, "3,1")
		f.Add(c, "auto")
		f.Add(c, "2,2")
	}
	f.Fuzz(func(t *testing.T, src, lengths string) {
		m, err := ir.Parse("fuzz.ir", src)
		if err != nil || ir.Verify(m) != nil || len(src) > 8000 {
			return
		}
		for _, fn := range m.Funcs {
			for _, op := range fn.Ops {
				for _, r := range op.Results {
					if r.Type.NumElements() > 1<<16 {
						return // keep each run small: the pass evaluates masks element by element
					}
				}
			}
		}
		if err := TokenSlice.Run(m, Options{"lengths": lengths}); err != nil {
			return
		}
		if err := ir.Verify(m); err != nil {
			t.Fatalf("sliced IR does not verify: %v\n%s", err, m)
		}
	})
}
