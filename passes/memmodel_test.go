package passes

import (
	"math"
	"testing"

	"ppc.dev/ppc/ir"
)

// TestModelStatePlaybook reproduces the Ultra-Scale Playbook's table of model-state memory
// in mixed precision without and with an fp32 gradient accumulator (1B → 16 / 20 GB, 7B →
// 112 / 140, 70B → 1120 / 1400, 405B → 6480 / 8100), and the ZeRO paper's figure 1 for 7.5B
// parameters on 64 replicas (120 GB, ZeRO-1 31.4, ZeRO-2 16.6, ZeRO-3 1.9).
func TestModelStatePlaybook(t *testing.T) {
	for _, c := range []struct{ params, mixed, accum float64 }{{1e9, 16, 20}, {7e9, 112, 140}, {70e9, 1120, 1400}, {405e9, 6480, 8100}} {
		m, _ := ModelState(c.params, RecipeMixed, 0, 1)
		a, _ := ModelState(c.params, RecipeMixedFP32Accum, 0, 1)
		if m.Total()/1e9 != c.mixed || a.Total()/1e9 != c.accum {
			t.Errorf("%g parameters: %g / %g GB, want %g / %g", c.params, m.Total()/1e9, a.Total()/1e9, c.mixed, c.accum)
		}
	}
	for zero, want := range []float64{120, 31.4, 16.6, 1.9} {
		s, err := ModelState(7.5e9, RecipeMixed, zero, 64)
		if err != nil || math.Abs(s.Total()/1e9-want) > 0.05 {
			t.Errorf("ZeRO-%d, 7.5B on 64 replicas: %g GB (%v), want %g", zero, s.Total()/1e9, err, want)
		}
	}
	if _, err := ModelState(1, RecipeFP32, 4, 2); err == nil {
		t.Error("ZeRO-4: no error")
	}
	if _, err := ModelState(1, RecipeFP32, 1, 0); err == nil {
		t.Error("dp 0: no error")
	}
}

// TestActivationFormula: Korthikanti et al.'s per-layer figure for GPT-3 175B (s 2048, h
// 12288, a 96) at micro-batch 1: 34·s·h + 5·a·s² bytes without parallelism, and with tensor
// and sequence parallelism over 8 ranks everything divided by 8.
func TestActivationFormula(t *testing.T) {
	s, h, a := 2048.0, 12288.0, 96.0
	full := ActivationBytesPerLayer(2048, 1, 12288, 96, 1, false, false, true)
	if want := s * h * (34 + 5*a*s/h); full != want {
		t.Errorf("no parallelism: %g, want %g", full, want)
	}
	if got := ActivationBytesPerLayer(2048, 1, 12288, 96, 8, true, false, true); math.Abs(got-full/8) > 1e-6*full {
		t.Errorf("tp 8 with sp: %g, want %g", got, full/8)
	}
	if got, want := ActivationBytesPerLayer(2048, 1, 12288, 96, 8, true, true, true), s*h*34/8; got != want {
		t.Errorf("tp 8, sp, selective: %g, want %g", got, want)
	}
}

// TestFullRecomputeFormula: GPT-3 175B at Megatron's t = 8 with sequence parallelism, 6
// layers per stage and 16 micro-batches in flight stashes 2sbh/t per layer and micro-batch,
// and the backward adds one layer's 34sbh/t + 5as²b/t — not six layers'.
func TestFullRecomputeFormula(t *testing.T) {
	s, h, a := 2048.0, 12288.0, 96.0
	stash, peak := FullRecomputeActivationBytes(2048, 1, 12288, 96, 8, 6, 16, true, true)
	if want := 2 * s * h / 8 * 6 * 16; stash != want {
		t.Errorf("stash %g, want %g", stash, want)
	}
	if want := stash + s*h*(34+5*a*s/h)/8; math.Abs(peak-want) > 1e-9*want {
		t.Errorf("peak %g, want %g", peak, want)
	}
	if _, one := FullRecomputeActivationBytes(2048, 1, 12288, 96, 8, 1, 16, true, true); peak-one != 2*s*h/8*5*16 {
		t.Errorf("five more layers add %g, want their inputs only (%g)", peak-one, 2*s*h/8*5*16)
	}
}

// TestPerParamNamesZeRO: the recipe line says what each ZeRO stage shards — ZeRO-3 all four
// parts, the 16-bit parameters included (it once said "2 + 16/d", as ZeRO-2).
func TestPerParamNamesZeRO(t *testing.T) {
	r := CompileRecipe(ir.BF16, ir.F32, 2)
	for _, c := range []struct {
		zero, dp int
		want     string
	}{
		{0, 4, "18 B/param (2 params + 4 grads + 12 main params and optimizer state)"},
		{1, 4, "6 + 12/d = 9 B/param at dp 4 (2 params + 4 grads + 12 main params and optimizer state; ZeRO-1 shards the last one over dp)"},
		{2, 4, "2 + 16/d = 6 B/param at dp 4 (2 params + 4 grads + 12 main params and optimizer state; ZeRO-2 shards the last three over dp)"},
		{3, 124, "18/d = 0.1452 B/param at dp 124 (2 params + 4 grads + 12 main params and optimizer state; ZeRO-3 shards all four over dp)"},
		{3, 1, "18 B/param (2 params + 4 grads + 12 main params and optimizer state)"},
	} {
		if got := r.PerParam(c.zero, c.dp); got != c.want {
			t.Errorf("zero %d dp %d: %q, want %q", c.zero, c.dp, got, c.want)
		}
	}
}
