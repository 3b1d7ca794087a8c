package compiler

import (
	"math"
	"strings"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime"
)

// TestGradientsEndToEnd compiles a float64 model for training and checks the gradients the
// runtime accumulates — through autodiff, lowering, fusion, code generation and the CPU
// kernels — against central finite differences of the loss computed by the same programs.
func TestGradientsEndToEnd(t *testing.T) {
	_, job := initJob(t, "../testdata/ir/gradcheck.ir", Options{Microbatches: 1, Optimizer: "sgd{lr=0}"}, 3)
	// With lr = 0 a step leaves the parameters alone, so every step evaluates the same
	// function; synthetic data is fixed per step, so replay step 1 each time.
	loss := func() float64 {
		for _, r := range job.Ranks {
			r.ResetStep(0)
		}
		out, err := job.Step(runtime.Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return out.Loss
	}
	loss()
	grads := map[string][]float64{}
	for name, g := range must(job.Buffers(pb.Role_GRAD)) {
		if strings.Contains(name, "#") {
			continue // a partial of a parameter used twice; its sum has the plain name
		}
		grads[name] = append([]float64(nil), g.F64()...)
	}
	params := must(job.Buffers(pb.Role_PARAM))
	if len(grads) != len(params) || len(params) != 6 {
		t.Fatalf("%d gradients for %d parameters", len(grads), len(params))
	}
	const h = 1e-6
	worst := 0.0
	for name, p := range params {
		v := p.F64()
		for i := range v {
			orig := v[i]
			v[i] = orig + h
			lp := loss()
			v[i] = orig - h
			lm := loss()
			v[i] = orig
			fd := (lp - lm) / (2 * h)
			got := grads[name][i]
			err := math.Abs(fd-got) / math.Max(1e-3, math.Abs(fd))
			worst = math.Max(worst, err)
			if err > 1e-5 {
				t.Errorf("d loss / d %s[%d] = %.10g, finite difference %.10g", name, i, got, fd)
			}
		}
	}
	t.Logf("worst relative error %.2e", worst)
}
