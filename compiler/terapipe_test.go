package compiler

import (
	"fmt"
	"testing"

	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/schedule"
)

// gpt3Shape is one of TeraPipe's GPT-3 models (its repository's MODEL_CONFIGS: layers,
// hidden size, heads of 128) with the setting it was trained in on 48 p3.16xlarge (8 V100
// 16 GB per node): the global batch, tensor parallelism inside a node, pipeline stages
// (one node each).
type gpt3Shape struct {
	name                  string
	layers, hidden, heads int
	batch, tp, pp         int
	paperSpeedup          float64
}

var gpt3Shapes = []gpt3Shape{
	{"1B", 24, 2048, 16, 72, 8, 24, 1.21},
	{"13B", 40, 5120, 40, 32, 8, 40, 1.40},
	{"175B", 96, 12288, 96, 2, 8, 48, 6.75},
}

// predictGPT3 returns the predicted step latency with micro-batching alone (the best
// micro-batch count, sequences whole) and with TeraPipe's joint batch and token slicing, on
// the V100 profile.
func predictGPT3(t testing.TB, s gpt3Shape) (mbOnly, sliced schedule.TokenPlan) {
	t.Helper()
	set := map[string]string{"n_layers": fmt.Sprint(s.layers), "d_model": fmt.Sprint(s.hidden), "n_heads": fmt.Sprint(s.heads),
		"vocab": "50264", "seq": "2048", "batch": fmt.Sprint(s.batch)}
	res, err := Compile(gptPPM, Options{Load: LoadOptions{Set: set}, PP: s.pp, TP: s.tp, Microbatches: 1, Schedule: "gpipe",
		Precision: "fp16", Partition: "auto", StopAfter: "partition"})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := passes.NewSliceCostModel(res.Module, passes.V100)
	if err != nil {
		t.Fatal(err)
	}
	best := schedule.TokenPlan{}
	for m := 1; m <= s.batch; m++ {
		if s.batch%m == 0 {
			p := schedule.EvalTokenPlan([]int{2048}, s.batch, m, s.pp, sc.Time)
			if best.Lengths == nil || p.Latency < best.Latency {
				best = p
			}
		}
	}
	sliced, err = schedule.PlanTokenSlices(2048, s.batch, s.pp, sc.Time, schedule.TokenPlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return best, sliced
}

// TestTeraPipeGPT3 predicts TeraPipe's experiment: on the paper's GPT-3 shapes and settings,
// the speed-up of the best token slicing over micro-batching alone grows with the model and
// is by far the largest for 175B at batch 2 (the paper measured 1.21×, 1.40× and 6.75×).
func TestTeraPipeGPT3(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the GPT-3 shapes up to partitioning")
	}
	prev := 0.0
	for _, s := range gpt3Shapes {
		mb, sl := predictGPT3(t, s)
		speedup := mb.Latency / sl.Latency
		t.Logf("GPT-3 %s (batch %d, tp %d, pp %d): micro-batching alone %.3f s (m %d), token slicing %.3f s (m %d, %d slices %v): %.2f× (paper %.2f×)",
			s.name, s.batch, s.tp, s.pp, mb.Latency, mb.Microbatches, sl.Latency, sl.Microbatches, len(sl.Lengths), sl.Lengths, speedup, s.paperSpeedup)
		if speedup < 1 || speedup <= prev {
			t.Errorf("GPT-3 %s: speed-up %.2f× does not grow with the model (previous %.2f×)", s.name, speedup, prev)
		}
		prev = speedup
	}
	if prev < 3 {
		t.Errorf("GPT-3 175B at batch 2: speed-up %.2f×, the paper measured 6.75×", prev)
	}
}
