package compiler

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ppc.dev/ppc/passes"
)

// TestCPEquivalence: context parallelism trains like one device. Each layout runs three SGD
// (momentum) steps and saves a checkpoint, which must agree with the one-device run of the
// same global batch within rtol 1e-4 / atol 1e-5: the ring merges each query's attention over
// the cp blocks by log-sum-exp and the gradients are summed over cp, both other orders of
// addition than one device's. Every ring has its causal mask built from the tokens' real
// positions and the rotary (Llama) or learned (GPT) position embeddings gathered at them, so
// a wrong position anywhere changes the loss at the first step.
func TestCPEquivalence(t *testing.T) {
	const m = 2
	type layout struct {
		name string
		opts Options
	}
	cases := []struct {
		model   string
		layouts []layout
	}{
		{gptPPM, []layout{
			{"cp2", Options{CP: 2}},
			{"cp4", Options{CP: 4}},
			{"cp2-contiguous", Options{CP: 2, CPSplit: passes.CPContiguous}},
			{"cp4-contiguous", Options{CP: 4, CPSplit: passes.CPContiguous}},
			{"pp2-dp2-cp2-tp2-sp", Options{PP: 2, DP: 2, CP: 2, TP: 2, SP: true}},
			{"pp2-dp2-cp2-tp2-sp-contiguous", Options{PP: 2, DP: 2, CP: 2, TP: 2, SP: true, CPSplit: passes.CPContiguous}},
			{"pp2-cp2-zbh1-recompute", Options{PP: 2, CP: 2, Schedule: "zb-h1", Recompute: "full"}},
			{"pp2-cp2-interleaved", Options{PP: 2, CP: 2, Schedule: "interleaved-1f1b"}},
			{"dp2-cp2-zero1", Options{DP: 2, CP: 2, Zero: 1}},
			{"pp2-dp2-cp2-zero2", Options{PP: 2, DP: 2, CP: 2, Zero: 2}},
			{"dp2-cp2-zero3", Options{DP: 2, CP: 2, Zero: 3}},
			// ZeRO-3 gathers each layer's parameters inside the functions the ring runs in.
			{"dp2-cp2-zero3", Options{DP: 2, CP: 2, Zero: 3}},
			{"pp2-dp2-cp2-tp2-sp-zero3-recompute", Options{PP: 2, DP: 2, CP: 2, TP: 2, SP: true, Zero: 3, Recompute: "full"}},
		}},
		{llamaPPM, []layout{
			{"cp2", Options{CP: 2}},
			{"cp4", Options{CP: 4}},
			{"cp4-contiguous", Options{CP: 4, CPSplit: passes.CPContiguous}},
			{"pp2-dp2-cp2-tp2-sp", Options{PP: 2, DP: 2, CP: 2, TP: 2, SP: true}},
			{"pp2-dp2-cp2-tp2-sp-contiguous", Options{PP: 2, DP: 2, CP: 2, TP: 2, SP: true, CPSplit: passes.CPContiguous}},
		}},
	}
	for _, c := range cases {
		refs := map[int]struct {
			l []float64
			s map[string][]float64
		}{}
		for _, lay := range c.layouts {
			name := fmt.Sprintf("%s/%s", filepath.Base(c.model), lay.name)
			t.Run(name, func(t *testing.T) {
				load := LoadOptions{Preset: "tiny"}
				dp := max(lay.opts.DP, 1)
				ref, ok := refs[dp]
				if !ok {
					ref.l, _, ref.s = spmdRun(t, c.model, Options{Load: load, Microbatches: m * dp, Optimizer: sgdM}, spmdSteps, "")
					refs[dp] = ref
				}
				o := lay.opts
				o.Load, o.Microbatches, o.Optimizer = load, m, sgdM
				l, _, s := spmdRun(t, c.model, o, spmdSteps, "")
				agree(t, name+" against one device", ref.l, l, ref.s, s, spmdRtol, spmdAtol)
			})
		}
	}
}

// TestCPMixedPrecision: bf16 with cp 2 against bf16 on one device. The 16-bit activations
// round differently where the ring merges blocks, so the tolerance is bf16's.
func TestCPMixedPrecision(t *testing.T) {
	load := LoadOptions{Preset: "tiny"}
	refL, _, refS := spmdRun(t, llamaPPM, Options{Load: load, Microbatches: 2, Optimizer: sgdM, Precision: "bf16"}, spmdSteps, "")
	l, _, s := spmdRun(t, llamaPPM, Options{Load: load, Microbatches: 2, Optimizer: sgdM, Precision: "bf16", CP: 2}, spmdSteps, "")
	agree(t, "bf16 cp2 against bf16 one device", refL, l, refS, s, 2e-2, 1e-3)
}

// TestCPCheckpointAcrossLayouts: cp replicates the parameters, so a cp run's checkpoint is the
// model's; one device resumes it bit for bit, and cp 4 (contiguous) resumes one device's.
func TestCPCheckpointAcrossLayouts(t *testing.T) {
	load := LoadOptions{Preset: "tiny"}
	one := Options{Load: load, Microbatches: 2, Optimizer: sgdM}
	cp2 := Options{Load: load, Microbatches: 2, Optimizer: sgdM, CP: 2}
	cp4 := Options{Load: load, Microbatches: 2, Optimizer: sgdM, CP: 4, CPSplit: passes.CPContiguous}
	_, cpCk, cpState := spmdRun(t, gptPPM, cp2, 2, "")
	_, _, s := spmdRun(t, gptPPM, one, 0, cpCk)
	agree(t, "cp=2 checkpoint through one device", nil, nil, cpState, s, 0, 0)
	refL, oneCk, refS := spmdRun(t, gptPPM, one, 3, "")
	_, _, s = spmdRun(t, gptPPM, cp4, 0, oneCk)
	agree(t, "one-device checkpoint through cp=4", nil, nil, refS, s, 0, 0)
	l, _, s := spmdRun(t, gptPPM, one, 1, cpCk)
	agree(t, "cp=2 saves, one device resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
}

// TestCPRefusals: what context parallelism cannot split is refused with the setting to use.
func TestCPRefusals(t *testing.T) {
	load := LoadOptions{Preset: "tiny"}
	for _, c := range []struct {
		name, model string
		load        LoadOptions
		opts        Options
		want        string
	}{
		{"zigzag does not divide", gptPPM, load, Options{CP: 3}, `--cp 3: 2·cp \(the zig-zag split's chunks\) must divide the sequence of 32 tokens, and 6 does not; the nearest that do: --cp 2 or --cp 4`},
		{"contiguous does not divide", gptPPM, load, Options{CP: 5, CPSplit: passes.CPContiguous}, `--cp 5: the sequence must divide .* the nearest that do: --cp 4`},
		{"zigzag where contiguous divides", gptPPM, LoadOptions{Preset: "tiny", Set: map[string]string{"seq": "24"}}, Options{CP: 8}, `--cp 8: .*or --cp-split contiguous`},
		{"no attention", mlpPPM, LoadOptions{}, Options{CP: 2}, `--cp 2: .*(no attention|sequence)`},
		{"decomposed attention", gptPPM, LoadOptions{Preset: "tiny", Set: map[string]string{"fused_attention": "false"}}, Options{CP: 2}, `--cp 2: matmul contracts over the sequence axis.*fused op.*--cp 1`},
		{"token slices", gptPPM, load, Options{CP: 2, TokenSlices: "2"}, `--token-slices with --cp`},
		{"split name", gptPPM, load, Options{CP: 2, CPSplit: "ring"}, `--cp-split "ring": want zigzag`},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts
			o.Load = c.load
			_, err := Compile(c.model, o)
			if err == nil {
				t.Fatal("compiled")
			}
			if !matches(c.want, err.Error()) {
				t.Fatalf("error %q, want it to match %q", err, c.want)
			}
		})
	}
}

// TestCPMaskRefused: an explicit attention mask is refused (the ring builds the causal mask
// itself), naming the op's position.
func TestCPMaskRefused(t *testing.T) {
	src := `module @m
func @forward(%x: f32[2,4,8] {input}, %w: f32[8,8] {init = "normal(0.1)", param}) -> (f32[] {loss}) {
  %h = matmul %x, %w : f32[2,4,8]
  %q = reshape %h {shape = [2, 1, 4, 8]} : f32[2,1,4,8]
  %i = iota {axis = 0, type = i64[4,4]} : i64[4,4]
  %j = iota {axis = 1, type = i64[4,4]} : i64[4,4]
  %m = greater %i, %j : bool[4,4]
  %o, %l = attention %q, %q, %q, %m : f32[2,1,4,8], f32[2,1,4,1]
  %s = reduce_mean %o : f32[]
  return %s
}
`
	_, err := Compile(writeIR(t, src), Options{CP: 2})
	if err == nil || !strings.Contains(err.Error(), "explicit mask, which the ring cannot shard") || !strings.Contains(err.Error(), "--cp 1") {
		t.Fatalf("got %v", err)
	}
}

// TestCPRankIR: the ring's transfers are ops of the rank's IR — each step's ring_send issued
// before its attention — and the gradients are summed over cp.
func TestCPRankIR(t *testing.T) {
	res, err := Compile(gptPPM, Options{Load: LoadOptions{Preset: "tiny", Set: map[string]string{"n_layers": "1"}}, CP: 4, StopAfter: ""})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Module.String()
	for _, want := range []string{"ring_send", "ring_recv", "attention_grad", "grad_all_reduce {axis = cp"} {
		if !strings.Contains(text, want) {
			t.Errorf("rank IR has no %s", want)
		}
	}
	// 4 ranks: forward and backward each send K and V on 3 times, and the backward sends dK
	// and dV 4 times (the last brings them home).
	if got := strings.Count(text, "ring_send"); got != 2*3+2*3+2*4 {
		t.Errorf("%d ring_send ops, want 20", got)
	}
}

func matches(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
