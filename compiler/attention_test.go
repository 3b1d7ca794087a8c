package compiler

import (
	"fmt"
	"path/filepath"
	"testing"
)

// decomposed is the DSL setting that writes the models' attention as the materialised chain
// (matmul, scale, causal mask, softmax, matmul) instead of the fused op.
var decomposed = map[string]string{"fused_attention": "false"}

// TestFusedAttentionTrainsLikeDecomposed: the tiny GPT and Llama (grouped-query attention)
// with the fused attention op train like the same models written as the decomposed chain,
// on one device and on the layouts that touch attention — tensor parallelism by heads (kv
// heads too for Llama) with sequence parallelism, pipeline and data parallelism, and
// TeraPipe's token slices (queries of a slice over the K/V prefix) — three steps of SGD with
// momentum, losses and final weights within rtol 1e-5, atol 1e-6 (the kernels sum in another
// order; AdamW's normalised step would turn an ulp of a near-zero gradient into a visible
// weight change, so it would compare the optimizer more than attention).
func TestFusedAttentionTrainsLikeDecomposed(t *testing.T) {
	if testing.Short() {
		t.Skip("trains each layout twice; run without -short")
	}
	tiny := LoadOptions{Preset: "tiny"}
	for _, c := range []struct {
		model string
		opts  Options
	}{
		{"gpt.ppm", Options{Load: tiny, Microbatches: 2}},
		{"gpt.ppm", Options{Load: tiny, Microbatches: 4, PP: 2, TP: 2, DP: 2, SP: true}},
		{"gpt.ppm", Options{Load: tiny, Microbatches: 2, PP: 2, TP: 2, TokenSlices: "8,8,16", Recompute: "selective"}},
		{"llama.ppm", Options{Load: tiny, Microbatches: 2}},
		{"llama.ppm", Options{Load: tiny, Microbatches: 2, PP: 2, TP: 2, SP: true, Schedule: "zb-h1"}},
		{"llama.ppm", Options{Load: tiny, Microbatches: 2, TokenSlices: "16,16"}},
	} {
		name := fmt.Sprintf("%s pp%d tp%d dp%d sp=%v slices=%q", c.model, c.opts.PP, c.opts.TP, c.opts.DP, c.opts.SP, c.opts.TokenSlices)
		c.opts.Optimizer = "sgd{lr=0.05,momentum=0.9}"
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "testdata", "models", c.model)
			gotL, got := trainRun(t, path, c.opts, 3)
			ref := c.opts
			ref.Load.Set = decomposed
			refL, want := trainRun(t, path, ref, 3)
			agree(t, name, refL, gotL, want, got, 1e-5, 1e-6)
		})
	}
}
