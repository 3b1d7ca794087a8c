package compiler

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/schedule"
)

// randomModel writes a DSL model of n residual layers of random widths — some MLP-only,
// some with a causal self-attention — and returns its path.
func randomModel(t *testing.T, rng *rand.Rand, n, mb int, tag string) string {
	// Activations outweigh the parameters (and so the optimizer's temporaries), as in the
	// models recomputation is for: tokens per micro-batch ≫ the model width.
	d := 8 * (1 + rng.Intn(2))
	batch := mb * (2 + rng.Intn(3))
	seq := 8 * (1 + rng.Intn(3))
	var b strings.Builder
	fmt.Fprintf(&b, "model rnd\n\nconfig {\n  batch = %d\n  seq = %d\n  d = %d\n  vocab = %d\n}\n\n", batch, seq, d, 8+rng.Intn(24))
	b.WriteString("input tokens: i64[batch, seq] in [0, vocab)\nlabel labels: i64[batch, seq] in [0, vocab)\n\n")
	b.WriteString(`block mlp(x, f, act) {
  param w1: f32[d, f] = normal(0.1)
  param b1: f32[f] = zeros
  param w2: f32[f, d] = normal(0.1)
  h = x @ w1 + b1
  if act == 0 { h = relu(h) }
  if act == 1 { h = tanh(h) }
  if act == 2 { h = gelu(h) }
  return h @ w2
}

block attn(x) {
  param wq: f32[d, d] = normal(0.1)
  param wk: f32[d, d] = normal(0.1)
  param wv: f32[d, d] = normal(0.1)
  scores = (x @ wq) @ transpose(x @ wk) * (1.0 / sqrt(d))
  future = iota(i64[seq, seq], axis = 1) > iota(i64[seq, seq], axis = 0)
  return softmax(where(future, -1e9, scores)) @ (x @ wv)
}

block layer(x, f, act, ln, at) {
  y = x
  if ln == 1 {
    param g: f32[d] = ones
    param bb: f32[d] = zeros
    y = layer_norm(x, g, bb)
  }
  if at == 1 { x = x + attn(y) as attn }
  return x + mlp(y, f, act) as mlp
}

`)
	b.WriteString("forward {\n  param wte: f32[vocab, d] = normal(0.1)\n  x = gather(wte, tokens)\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  x = layer(x, %d, %d, %d, %d) as layers[%d]\n", 4*(1+rng.Intn(12)), rng.Intn(3), rng.Intn(2), rng.Intn(2), i)
	}
	b.WriteString("  param head: f32[d, vocab] = normal(0.1)\n  loss cross_entropy(x @ head, labels)\n}\n")
	path := filepath.Join(t.TempDir(), "rnd-"+tag+".ppm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRecomputeFullNeverMoreMemory is the property Megatron's per-layer recomputation has:
// --recompute full stashes each layer's input and rebuilds one layer at a time, so on random
// models (layer count, widths, attention or not, LayerNorm or not), pipeline depths and
// schedules, the most bytes every rank's memory plan holds at once over the whole unrolled
// step is at most what it is without recomputation, and so are the forward activations
// among them. (The arena itself is greedy best-fit's packing of those buffers, which can
// come out a few hundred bytes above the live bound either way; the bound is what the step
// needs.) A whole-stage rebuild — the backward recomputing every layer before the first
// layer's backward, W holding every layer's rebuilt values until it runs — breaks this.
func TestRecomputeFullNeverMoreMemory(t *testing.T) {
	const seed = 24
	rng := rand.New(rand.NewSource(seed))
	names := schedule.Names()
	cases := 40
	if testing.Short() {
		cases = 10
	}
	checked := 0
	for c := 0; c < cases; c++ {
		n := 2 + rng.Intn(5)
		pp := 1 + rng.Intn(min(n, 4))
		sched := names[rng.Intn(len(names))]
		mb := 2 * pp * (1 + rng.Intn(2))
		model := randomModel(t, rng, n, mb, fmt.Sprintf("%d-%d", seed, c))
		name := fmt.Sprintf("%d/layers%d/pp%d/%s/m%d", c, n, pp, sched, mb)
		t.Run(name, func(t *testing.T) {
			opts := Options{PP: pp, Microbatches: mb, Schedule: sched}
			none, err := Compile(model, opts)
			if err != nil {
				// A schedule this depth or micro-batch count does not admit (zbv needs
				// two stages per rank, interleaving a multiple of pp, …): that is the
				// schedule's rule, not recomputation's.
				t.Skipf("no plan without recomputation: %v", err)
			}
			opts.Recompute = "full"
			full, err := Compile(model, opts)
			if err != nil {
				t.Fatalf("--recompute full: %v", err)
			}
			checked++
			ok := compareArenas(t, "full recomputation", "none", full.Output.Plan, none.Output.Plan)
			// One micro-batch on one rank: what a layer-at-a-time rebuild saves over
			// rebuilding the whole stage at once — the stage's activations less its
			// layers' inputs — shows undiluted by micro-batches in flight.
			one := Options{PP: 1, Microbatches: 1, Recompute: "full"}
			perLayer, err := Compile(model, one)
			if err != nil {
				t.Fatal(err)
			}
			one.RecomputeLayers = n + 2 // every unit of the stage in one chunk
			perStage, err := Compile(model, one)
			if err != nil {
				t.Fatal(err)
			}
			if x, y := perLayer.Output.Plan.Programs[0].LiveBytes, perStage.Output.Plan.Programs[0].LiveBytes; x >= y {
				t.Errorf("one micro-batch: %d bytes live at once rebuilding one layer at a time, %d rebuilding the whole stage", x, y)
				ok = false
			}
			if !ok {
				t.Logf("model %s", model)
			}
		})
	}
	if checked < cases/2 {
		t.Errorf("only %d of %d random cases compiled", checked, cases)
	}
}

// compareArenas checks that every rank of plan a holds at most as many bytes at once, and
// as many forward activations, as the same rank of plan b.
func compareArenas(t *testing.T, aName, bName string, a, b *codegen.Plan) bool {
	t.Helper()
	ok := true
	for i, y := range b.Programs {
		x := a.Programs[i]
		if x.LiveBytes > y.LiveBytes || x.LiveBytes <= 0 {
			t.Errorf("rank %d: %d bytes live at once with %s, %d with %s", y.PP, x.LiveBytes, aName, y.LiveBytes, bName)
			ok = false
		}
		if x.ActivationBytes > y.ActivationBytes {
			t.Errorf("rank %d: forward activations %d with %s, %d with %s", y.PP, x.ActivationBytes, aName, y.ActivationBytes, bName)
			ok = false
		}
	}
	return ok
}

// TestRecomputeMethodsTrainLikeOneDevice: every recomputation method and chunk size, under a
// schedule that runs B and one that splits I from W, trains the tiny GPT and the MLP bit for
// bit as the one-rank plan does: a rebuilt value is the same op on the same inputs.
func TestRecomputeMethodsTrainLikeOneDevice(t *testing.T) {
	const mb, steps = 4, 2
	for _, model := range []string{"../testdata/models/gpt.ppm", "../testdata/models/mlp.ppm"} {
		base := Options{Microbatches: mb}
		if filepath.Base(model) == "gpt.ppm" {
			base.Load = LoadOptions{Preset: "tiny"}
		}
		refL, refS := trainRun(t, model, base, steps)
		for _, sched := range []string{"1f1b", "zb-h1", "interleaved-1f1b"} {
			for _, m := range []struct {
				method string
				layers int
			}{{"uniform", 1}, {"uniform", 2}, {"uniform", 3}, {"block", 1}, {"block", 2}} {
				name := fmt.Sprintf("%s/%s/%s-%d", filepath.Base(model), sched, m.method, m.layers)
				t.Run(name, func(t *testing.T) {
					o := base
					o.PP, o.Schedule, o.Recompute, o.RecomputeMethod, o.RecomputeLayers = 2, sched, "full", m.method, m.layers
					gotL, gotS := trainRun(t, model, o, steps)
					sameTraining(t, name, refL, gotL, refS, gotS)
				})
			}
		}
	}
}
