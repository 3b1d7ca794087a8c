package compiler

import (
	"fmt"
	"math"
	"testing"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/device"
)

// stepTokens is next-token data for an imported language model, which declares neither
// its vocabulary nor that labels are the next tokens (so the synthetic data would draw
// tokens 0 and 1 and unrelated class labels): sample s is the sequence s, s+3, s+6, … mod
// vocab, its labels the same sequence one position on. The same every step, so a model
// that trains must fit it.
type stepTokens struct{ vocab int }

func (d stepTokens) Fill(in codegen.Input, _ int, mb int, t device.Tensor) error {
	shift := 0
	switch in.Name {
	case "input_ids":
	case "labels":
		shift = 1
	default:
		return fmt.Errorf("unexpected input %s", in.Name)
	}
	v := t.I64()
	per := len(v) / in.Samples()
	for i := range in.Samples() {
		s := mb*in.Samples() + i
		for j := range per {
			v[i*per+j] = int64((s + 3*(j+shift)) % d.vocab)
		}
	}
	return nil
}

// TestGPTTinyONNXTrains compiles testdata/models/gpt-tiny.onnx as `ppc compile
// gpt-tiny.onnx --dim batch=4 --loss ce` does (the logits get a labels input and a
// cross-entropy loss) and trains it: on one device the loss must fall steadily, and the
// same model cut into two pipeline stages must give the same losses.
func TestGPTTinyONNXTrains(t *testing.T) {
	const steps = 8
	train := func(pp int) []float64 {
		_, job := initJob(t, "../testdata/models/gpt-tiny.onnx", Options{
			Load: LoadOptions{Dims: map[string]int{"batch": 4}}, Loss: "ce",
			PP: pp, Microbatches: 2, Optimizer: "adamw{lr=1e-2}",
		}, 1)
		var losses []float64
		for range steps {
			r, err := job.Step(runtime.Options{Seed: 1, Data: stepTokens{vocab: 64}})
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, r.Loss)
		}
		return losses
	}
	one := train(1)
	t.Logf("losses %.4f", one)
	// The initializers are GPT-2's small normals: the first loss is that of near-uniform
	// logits over 64 tokens.
	if math.Abs(one[0]-math.Log(64)) > 0.1 {
		t.Errorf("first loss %.4f, want about ln 64 = %.4f", one[0], math.Log(64))
	}
	for i := 1; i < steps; i++ {
		if !(one[i] < one[i-1]) {
			t.Errorf("step %d: loss %.4f did not fall from %.4f", i+1, one[i], one[i-1])
		}
	}
	if one[steps-1] > one[0]-1 {
		t.Errorf("loss fell from %.4f to %.4f, less than 1 nat", one[0], one[steps-1])
	}
	for i, l := range train(2) {
		if math.Abs(l-one[i]) > 1e-5*math.Max(1, math.Abs(one[i])) {
			t.Errorf("step %d: loss %.6f with two pipeline stages, %.6f on one device", i+1, l, one[i])
		}
	}
}
