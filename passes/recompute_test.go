package passes

import (
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

// TestSplitStagesRecomputeOptions: bad recompute options are errors naming the option.
func TestSplitStagesRecomputeOptions(t *testing.T) {
	for _, c := range []struct{ pipeline, want string }{
		{"split-stages{recompute=most}", `recompute must be none, selective or full, got "most"`},
		{"split-stages{recompute=full,method=chunk}", `method must be uniform or block, got "chunk"`},
		{"split-stages{recompute=full,layers=0}", "layers must be at least 1, got 0"},
		{"split-stages{recompute=full,layers=two}", `option layers="two" is not an integer`},
		{"split-stages{recompute=selective,method=block}", "method and layers apply to recompute=full only (recompute=selective)"},
		{"split-stages{layers=3}", "method and layers apply to recompute=full only (recompute=none)"},
	} {
		m, err := ir.Parse("t.ir", `func @train(%x: f32[2] {input}) -> (f32[] {loss}) {
  %l = reduce_sum %x : f32[]
  return %l
}`)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := ParsePipeline(c.pipeline)
		if err == nil {
			err = Run(m, pl, Config{})
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.pipeline, err, c.want)
		}
	}
}
