package compiler

import (
	"math"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/data"
)

// TestClipGradNorm: with plain SGD and a clip below the gradients' norm, one step moves the
// parameters by exactly lr·clip in L2 norm (every gradient scaled by clip/‖g‖), and the step
// reports that norm; a clip above it changes nothing (the coefficient is 1).
func TestClipGradNorm(t *testing.T) {
	const lr, clip = 0.1, 0.25
	params := func(j *runtime.Job) map[string][]float64 {
		out := map[string][]float64{}
		for n, x := range must(j.Tensors(pb.Role_PARAM)) {
			out[n] = data.Float64s(x)
		}
		return out
	}
	run := func(opt string) (before, after map[string][]float64, res runtime.StepResult) {
		_, job := initJob(t, gptPPM, Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2, Optimizer: opt}, 3)
		before = params(job)
		res, err := job.Step(runtime.Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return before, params(job), res
	}
	before, after, res := run("sgd{lr=0.1,clip=0.25}")
	var sq float64
	for n, b := range before {
		for i := range b {
			d := after[n][i] - b[i]
			sq += d * d
		}
	}
	norm := res.Metrics["grad_norm"]
	if got, want := math.Sqrt(sq), lr*clip*norm/(norm+1e-6); math.Abs(got-want) > 1e-4*want || norm <= clip || res.Metrics["clipped"] != 1 {
		t.Fatalf("update norm %.7g, want lr·clip = %.7g (gradient norm %g, clipped %v)", got, want, norm, res.Metrics["clipped"])
	}
	// Unclipped: the same step as without the option.
	_, a1, r1 := run("sgd{lr=0.1,clip=1000}")
	_, a2, _ := run("sgd{lr=0.1}")
	if r1.Metrics["clipped"] != 0 || r1.Metrics["grad_norm"] != norm {
		t.Fatalf("clip=1000: clipped %v, norm %v (want 0, %v)", r1.Metrics["clipped"], r1.Metrics["grad_norm"], norm)
	}
	for n := range a1 {
		for i := range a1[n] {
			if a1[n][i] != a2[n][i] {
				t.Fatalf("%s[%d]: %v with a clip that does not bind, %v without", n, i, a1[n][i], a2[n][i])
			}
		}
	}
}

// TestClipWithLossScaling: under fp16 loss scaling the norm is of the unscaled gradients
// (the loss-scale pass unscales the sum of squares by inv_scale² with the gradients), so it
// is fp32's within fp16's precision, not 2^16 times it.
func TestClipWithLossScaling(t *testing.T) {
	norm := func(prec string) float64 {
		_, job := initJob(t, gptPPM, Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2, PP: 2, Precision: prec, Optimizer: "sgd{lr=0.05,clip=0.5}"}, 3)
		res, err := job.Step(runtime.Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return res.Metrics["grad_norm"]
	}
	f32, f16 := norm("fp32"), norm("fp16")
	if math.Abs(f16-f32) > 0.01*f32 {
		t.Fatalf("fp16 gradient norm %g, fp32 %g", f16, f32)
	}
}
