package onnx

import (
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

// TestLossOutput: a scalar floating-point output named loss is the training loss ({loss});
// an output named loss that is not a float scalar, and a scalar of another name, are not.
func TestLossOutput(t *testing.T) {
	sce := func(out string, reduction string) *mb {
		return model(20).Input("scores", dtFloat, 4, 5).Input("labels", dtInt64, 4).
			Node("Relu", "relu", in("scores"), in("logits")).
			Node("SoftmaxCrossEntropyLoss", "sce", in("logits", "labels"), in(out), aStr("reduction", reduction)).
			Output("logits").Output(out)
	}
	for _, c := range []struct {
		name string
		m    *mb
		loss int // index of the result marked {loss}, -1 for none
	}{
		{"scalar", sce("loss", "mean"), 1},
		{"other_name", sce("cost", "mean"), -1},
		{"not_scalar", sce("loss", "none"), -1},
	} {
		m, err := Import("model.onnx", c.m.Bytes(t), "", Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		f := m.Func(ir.ForwardFunc)
		for i, ra := range f.ResultAttrs {
			if got := ra.Has(ir.AttrLoss); got != (i == c.loss) {
				t.Errorf("%s: result %d {loss} = %v", c.name, i, got)
			}
		}
	}
}

// TestSoftmaxCrossEntropyLoss: ONNX's class axis 1 becomes the IR's last (a transpose for
// scores of rank 3), reduction and ignore_index carry over, the optional log_prob output is
// log_softmax over axis 1, and per-class weights are refused.
func TestSoftmaxCrossEntropyLoss(t *testing.T) {
	m, err := Import("model.onnx", model(13).Input("scores", dtFloat, 2, 5, 3).Input("labels", dtInt64, 2, 3).
		Node("SoftmaxCrossEntropyLoss", "sce", in("scores", "labels"), in("rows", "log_prob"), aStr("reduction", "none"), aInt("ignore_index", 1)).
		Output("rows").Output("log_prob").Bytes(t), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	text := m.String()
	for _, w := range []string{
		"transpose %scores {perm = [0, 2, 1]} : f32[2,3,5]",
		"cross_entropy %0, %labels {ignore_index = 1, reduction = none} : f32[2,3]",
		"log_softmax %scores {axis = 1} : f32[2,5,3]",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("import lacks %q:\n%s", w, text)
		}
	}
	_, err = Import("model.onnx", model(13).Input("scores", dtFloat, 2, 5).Input("labels", dtInt64, 2).Input("w", dtFloat, 5).
		Node("SoftmaxCrossEntropyLoss", "sce", in("scores", "labels", "w"), in("loss")).Output("loss").Bytes(t), "", Options{})
	if err == nil || !strings.Contains(err.Error(), `node "sce" (SoftmaxCrossEntropyLoss): per-class weights (input 2) are not supported`) {
		t.Errorf("weights: %v", err)
	}
	_, err = Import("model.onnx", model(13).Input("scores", dtFloat, 5).Input("labels", dtInt64).
		Node("SoftmaxCrossEntropyLoss", "sce", in("scores", "labels"), in("loss")).Output("loss").Bytes(t), "", Options{})
	if err == nil || !strings.Contains(err.Error(), "scores must be floating point [N, C, …], got f32[5]") {
		t.Errorf("rank 1: %v", err)
	}
}
