package compiler

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenSliceEquivalence trains tiny GPT and tiny Llama cut into token slices — uniform
// and not, alone, with micro-batches, with recompute, under zero-bubble and interleaved
// schedules and with --tp 2 — against the unsliced one-device plan with the same micro-batch
// count: three steps give the same losses and weights within rtol 1e-4, atol 1e-5. Slicing
// changes summation orders (a weight's gradient is summed slice by slice; the softmax runs
// over the context the slice sees), so the agreement is numerical, not bitwise. With SGD and
// momentum, as TestSPMDEquivalence and for its reason: AdamW divides each update by √v + ε,
// which turns a 1e-7 difference in a gradient within a few ε of zero into a visible one (one
// element in 16,384 ends 1.3e-5 off after three steps; the gradients themselves agree).
// Weights are compared in the merged checkpoint, so tensor-parallel runs compare whole
// tensors.
func TestTokenSliceEquivalence(t *testing.T) {
	const steps = 3
	for _, model := range []string{gptPPM, llamaPPM} {
		refs := map[int][]float64{}
		refState := map[int]map[string][]float64{}
		for _, c := range []struct {
			name string
			opts Options
		}{
			{"pp4-gpipe-4", Options{PP: 4, Microbatches: 1, Schedule: "gpipe", TokenSlices: "4"}},
			{"pp4-gpipe-12,10,6,4", Options{PP: 4, Microbatches: 1, Schedule: "gpipe", TokenSlices: "12,10,6,4"}},
			{"pp4-1f1b-m4-4", Options{PP: 4, Microbatches: 4, TokenSlices: "4"}},
			{"pp4-zbh1-m4-3-full", Options{PP: 4, Microbatches: 4, Schedule: "zb-h1", TokenSlices: "3", Recompute: "full"}},
			{"pp2-interleaved-m2-5,27-selective", Options{PP: 2, Microbatches: 2, Schedule: "interleaved-1f1b", TokenSlices: "5,27", Recompute: "selective"}},
			{"pp2-tp2-m2-4", Options{PP: 2, TP: 2, Microbatches: 2, Schedule: "gpipe", TokenSlices: "4"}},
			{"pp4-tp2-1f1b-m4-16,8,8", Options{PP: 4, TP: 2, Microbatches: 4, TokenSlices: "16,8,8"}},
			{"pp2-dualpipev-m4-2", Options{PP: 2, Microbatches: 4, Schedule: "dualpipev", TokenSlices: "2"}},
			{"pp2-zbv-m2-20,12", Options{PP: 2, Microbatches: 2, Schedule: "zbv", TokenSlices: "20,12"}},
			{"pp4-zbh2-m4-2", Options{PP: 4, Microbatches: 4, Schedule: "zb-h2", TokenSlices: "2"}},
			{"pp2-dp2-tp2-m2-3-zero1", Options{PP: 2, DP: 2, TP: 2, Zero: 1, Microbatches: 2, TokenSlices: "3"}},
		} {
			name := fmt.Sprintf("%s/%s", strings.TrimSuffix(filepath.Base(model), ".ppm"), c.name)
			t.Run(name, func(t *testing.T) {
				m := c.opts.Microbatches
				if refs[m] == nil {
					refs[m], _, refState[m] = spmdRun(t, model, Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: m, Optimizer: sgdM}, steps, "")
				}
				o := c.opts
				o.Load, o.Optimizer = LoadOptions{Preset: "tiny"}, sgdM
				gotL, _, gotS := spmdRun(t, model, o, steps, "")
				agree(t, name, refs[m], gotL, refState[m], gotS, 1e-4, 1e-5)
			})
		}
	}
}

// TestTokenSliceGradAccumulators: a token-sliced compile keeps one gradient accumulator per
// parameter and use, as the unsliced one does — every slice's contribution is added to it
// as a micro-batch's is — not one per slice and use plus their sum (17 fp32 copies of each
// gradient for 16 slices, which kept TeraPipe's own GPT-3 175B plan out of a V100's
// memory). A tied weight (the tiny GPT's embedding, read by the first and last stages)
// keeps its one partial per use.
func TestTokenSliceGradAccumulators(t *testing.T) {
	grads := func(slices string) []int64 {
		res, err := Compile(gptPPM, Options{Load: LoadOptions{Preset: "tiny"}, PP: 2, Microbatches: 2, Schedule: "gpipe", TokenSlices: slices})
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, p := range res.Output.Plan.Programs {
			out = append(out, p.GradBytes)
		}
		return out
	}
	whole, sliced := grads(""), grads("8")
	if fmt.Sprint(whole) != fmt.Sprint(sliced) {
		t.Errorf("gradient accumulators per pipeline rank: %v bytes unsliced, %v with 8 token slices", whole, sliced)
	}
}
