package main

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/planner"
)

// planConfig is one configuration the property test below draws: ppc plan's and ppc
// compile's flags for it.
type planConfig struct {
	pp, dp, tp, v, m int
	sp               bool
	schedule, recomp string
	zero             int
	ep               int
}

func (c planConfig) flags() []string {
	f := []string{"--pp", fmt.Sprint(c.pp), "--dp", fmt.Sprint(c.dp), "--tp", fmt.Sprint(c.tp), fmt.Sprintf("--sp=%v", c.sp),
		"--schedule", c.schedule, "--microbatches", fmt.Sprint(c.m), "--recompute", c.recomp, "--zero", fmt.Sprint(c.zero),
		"--token-slices", "1"}
	if c.v > 0 {
		f = append(f, "--virtual-stages", fmt.Sprint(c.v))
	}
	if c.ep > 0 {
		f = append(f, "--ep", fmt.Sprint(c.ep))
	}
	return f
}

// TestPlanMemoryMatchesCompileEP: expert parallelism in ppc plan's memory — the expert
// shards' parameters, gradients and state /ep, ZeRO on the dense parameters only, the probe's
// arena with the all-to-alls' buffers — is within 2% of ppc compile's, rank by rank, for the
// mixture-of-experts model at ep 2 and 4, with pp, tp + sp and ZeRO 1 and 2.
func TestPlanMemoryMatchesCompileEP(t *testing.T) {
	for _, c := range []planConfig{
		{pp: 1, dp: 2, tp: 1, m: 4, schedule: "1f1b", recomp: "none", ep: 2},
		{pp: 2, dp: 4, tp: 1, m: 4, schedule: "zb-h1", recomp: "selective", zero: 1, ep: 2},
		{pp: 2, dp: 4, tp: 1, m: 4, schedule: "1f1b", recomp: "none", zero: 2, ep: 4},
		{pp: 2, dp: 2, tp: 2, sp: true, m: 4, schedule: "interleaved-1f1b", v: 2, recomp: "none", ep: 2},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			args := append([]string{moePPM, "--preset", "tiny", "--gpus", fmt.Sprint(c.pp * c.dp * c.tp), "--gpu", "a100-80gb",
				"--global-batch", fmt.Sprint(c.m * c.dp * 2), "--top", "1"}, c.flags()...)
			comparePlanMemory(t, planJSON(t, args...), 0.02)
		})
	}
}

// memNoMargin is a memory report without the margin (which only scales what is planned).
func memNoMargin(m codegen.Memory) int64 { return m.Peak() - m.Margin }

// TestPlanMemoryMatchesCompile: for configurations drawn over the schedules ppc plan searches
// (gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv, zb-auto), tensor and sequence
// parallelism, recomputation modes, data parallelism with ZeRO 0, 1, 2 and 3, and the uneven
// layouts the planner's balanced split gives the tiny GPT's 10 units, ppc plan's memory per
// pipeline rank (every dimension fixed) is within 2% of the memory plan ppc compile makes
// for the command it prints, rank by rank: parameters, gradients, optimizer state and the
// arena's live bytes (the planner replays the rank's runs over code generation's own
// lowering of each; the arena's placement adds its fragmentation on top, which is logged).
// ZeRO-3 is held to the same 2%: the next layer's copies are counted from where param-gather
// issues them, and a unit that reads no gathered copy (one without parameters but scalars)
// issues none; at dp 3 every block is padded. Full recomputation too: its draws used to be allowed 6% over, which
// was the step's end (ZeRO-1's reduce-scatter counted after each stage's last W, the
// optimizer's copies the in-place updates no longer make), not the rebuilt units.
// PLANTRUTH_TRIALS=N draws more (60 measured before the dp 3 draws: all 94 within −0.4% …
// +0.2%).
func TestPlanMemoryMatchesCompile(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	rng := rand.New(rand.NewSource(24))
	schedules := []string{"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "zb-auto"}
	trials := 24
	if s := os.Getenv("PLANTRUTH_TRIALS"); s != "" {
		fmt.Sscan(s, &trials)
	}
	// Then ZeRO-3's draws (dp 2, parameters gathered in the runs), ZeRO-2's with a
	// vocabulary dp does not divide (its padded blocks), and ZeRO 1–3 at dp 3, which
	// divides no first dim of the tiny GPT: every block padded.
	zero3, zero2odd, dp3 := trials/2, 4, 8
	for trial := 0; trial < trials+zero3+zero2odd+dp3; trial++ {
		c := planConfig{pp: []int{2, 4}[rng.Intn(2)], dp: 1 + rng.Intn(2), tp: 1 + rng.Intn(2),
			schedule: schedules[rng.Intn(len(schedules))], recomp: []string{"none", "selective", "full"}[rng.Intn(3)]}
		c.sp = c.tp > 1 && rng.Intn(2) == 0
		if c.dp > 1 {
			c.zero = rng.Intn(3)
		}
		if trial >= trials {
			c.dp, c.zero = 2, 3
		}
		if trial >= trials+zero3 {
			c.zero = 2
		}
		if trial >= trials+zero3+zero2odd {
			c.dp, c.zero = 3, []int{1, 2, 3, 3}[rng.Intn(4)]
		}
		switch c.schedule {
		case "interleaved-1f1b", "zbv", "dualpipev":
			c.v = 2
		}
		c.m = []int{4, 8, 16}[rng.Intn(3)]
		if c.schedule == "dualpipev" {
			c.m = max(c.m, 4*c.pp)
		}
		batch := c.m * c.dp * 2
		oddVocab := rng.Intn(2) == 0 || trial >= trials+zero3 && trial < trials+zero3+zero2odd
		name := fmt.Sprintf("%d-%+v-oddvocab:%v", trial, c, oddVocab)
		t.Run(name, func(t *testing.T) {
			args := append([]string{gpt, "--preset", "tiny", "--gpus", fmt.Sprint(c.pp * c.dp * c.tp), "--gpu", "a100-80gb",
				"--global-batch", fmt.Sprint(batch), "--top", "1"}, c.flags()...)
			if g := c.pp * c.dp * c.tp; g > 8 && g%8 != 0 {
				args = append(args, "--gpus-per-node", "4") // dp 3's 12 or 24 GPUs
			}
			if oddVocab {
				// 255 embedding rows per tp rank: ZeRO pads the tied embedding's blocks.
				args = append(args, "--set", fmt.Sprintf("vocab=%d", 255*c.tp))
			}
			comparePlanMemory(t, planJSON(t, args...), 0.02)
		})
	}
}

// comparePlanMemory compiles the best plan's command and checks that the planner's memory
// per pipeline rank is within ±band of what ppc compile plans.
func comparePlanMemory(t *testing.T, res *planner.Result, band float64) {
	t.Helper()
	if len(res.Plans) == 0 {
		t.Fatalf("no plan")
	}
	pl := res.Plans[0]
	cmd := shellSplit(t, pl.Command)
	dir := t.TempDir()
	cmd = append(cmd[1:len(cmd)-1], dir)
	code, _, errs := ppc(t, "", cmd...)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", pl.Command, code, errs)
	}
	p := readPlan(t, dir)
	for _, prog := range p.Programs {
		got := prog.Memory(res.DeviceMem)
		// The planner predicts the arena's live bytes; the placement's fragmentation
		// (ArenaBytes − LiveBytes) is compile's alone.
		frag := prog.ArenaBytes - prog.LiveBytes
		got.Workspace -= frag
		pred := pl.Memory[prog.PP]
		g, w := memNoMargin(pred), memNoMargin(got)
		rel := float64(g-w) / float64(w)
		t.Logf("pp %d: plan %s compile %s (fragmentation %s more): %+.2f%%; differences: params %d grads %d optimizer %d activations %d workspace %d", prog.PP,
			codegen.FormatBytes(g), codegen.FormatBytes(w), codegen.FormatBytes(frag), 100*rel, pred.Params-got.Params, pred.Grads-got.Grads, pred.Optimizer-got.Optimizer,
			pred.Activations-got.Activations, pred.Workspace-got.Workspace)
		if rel > band || rel < -band {
			t.Errorf("pp %d: ppc plan predicts %d bytes, ppc compile plans %d (%+.2f%%): %s", prog.PP, g, w, 100*rel, pl.Command)
		}
	}
}

// TestPlanMemoryZeROStepEnd: ZeRO-1's step's end as ppc compile lays it out — the
// reduce-scatter after the pipeline has drained, bucket by bucket in stage order, a
// parameter dp does not split all-reduced after its stage's last W instead, the optimizer's
// updates in place. Priced after each stage's last W (with the whole tied embedding in the
// bucket, and copies of the new values), the first two were 2.5% and 7.2% over; the third,
// under full recomputation, was 1.7% over on one rank and 1.8% under on the other, and is
// now exact on both.
func TestPlanMemoryZeROStepEnd(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	for _, c := range []struct {
		cfg   planConfig
		vocab int
	}{
		{planConfig{pp: 2, dp: 2, tp: 1, m: 8, schedule: "1f1b", recomp: "none", zero: 1}, 255},
		{planConfig{pp: 2, dp: 2, tp: 1, v: 2, m: 8, schedule: "interleaved-1f1b", recomp: "none", zero: 1}, 256},
		{planConfig{pp: 2, dp: 2, tp: 1, v: 2, m: 16, schedule: "interleaved-1f1b", recomp: "full", zero: 1}, 512},
	} {
		t.Run(fmt.Sprintf("%+v-vocab%d", c.cfg, c.vocab), func(t *testing.T) {
			args := append([]string{gpt, "--preset", "tiny", "--gpus", "4", "--gpu", "a100-80gb", "--global-batch", fmt.Sprint(c.cfg.m * 4),
				"--top", "1", "--set", fmt.Sprintf("vocab=%d", c.vocab)}, c.cfg.flags()...)
			comparePlanMemory(t, planJSON(t, args...), 0.02)
		})
	}
}

// TestPlanMemoryZBVTurn: ZB-V puts stages p−1 and p on the last rank, and what one hands
// the other — the activation F sends, the output gradient I sends back — stays in the
// arena between the two runs, as ppc compile keeps it (a gradient the maker's own W reads
// is its held value already). Uncounted, the last rank was predicted 1.25% under here;
// held to 0.5%.
func TestPlanMemoryZBVTurn(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	c := planConfig{pp: 4, dp: 2, tp: 2, v: 2, m: 4, schedule: "zbv", recomp: "full", zero: 3}
	args := append([]string{gpt, "--preset", "tiny", "--gpus", "16", "--gpu", "a100-80gb", "--global-batch", "16", "--top", "1",
		"--set", "vocab=510"}, c.flags()...)
	comparePlanMemory(t, planJSON(t, args...), 0.005)
}

// TestPlanTimeMatchesCompileDP: ppc plan prices data parallelism's collectives as the rank
// programs issue them, so its step is ppc compile's estimate within 1% — GPT-2 small at dp 8,
// ZeRO 0 to 3, pp 1 and 2, whose 50,257-row tied embedding dp does not split: each partial
// of it (at pp 1 the embedding's and the head's) all-reduced after its stage's last W, in
// fp32; ZeRO-3's per-run reduce-scatters in fp32 (param-gather widens the bf16 gradients
// first). Priced once and in bf16, the plan was up to 25% short (ZeRO-1 at pp 1).
func TestPlanTimeMatchesCompileDP(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	for _, pp := range []int{1, 2} {
		for zero := range 4 {
			t.Run(fmt.Sprintf("pp%d-zero%d", pp, zero), func(t *testing.T) {
				res := planJSON(t, gpt, "--preset", "small", "--gpus", fmt.Sprint(8*pp), "--gpu", "a100-80gb", "--global-batch", "16", "--top", "1",
					"--pp", fmt.Sprint(pp), "--dp", "8", "--tp", "1", "--sp=false", "--schedule", "1f1b", "--microbatches", "2", "--recompute", "none",
					"--zero", fmt.Sprint(zero), "--token-slices", "1")
				pl := res.Plans[0]
				cmd := shellSplit(t, pl.Command)
				dir := t.TempDir()
				if code, _, errs := ppc(t, "", append(cmd[1:len(cmd)-1], dir)...); code != 0 {
					t.Fatalf("%s: exit %d: %s", pl.Command, code, errs)
				}
				est := readPlan(t, dir).Estimate
				if est == nil {
					t.Fatalf("%s: no estimate", pl.Command)
				}
				t.Logf("ppc plan %.4g s (collectives %.4g), ppc compile %.4g s (collectives %.4g)", pl.StepTime, pl.Collectives, est.StepSeconds, est.CollectiveSeconds)
				if r := pl.StepTime / est.StepSeconds; r < 0.99 || r > 1.01 {
					t.Errorf("ppc plan predicts %.4g s, ppc compile estimates %.4g s (×%.3f): %s", pl.StepTime, est.StepSeconds, r, pl.Command)
				}
			})
		}
	}
}
