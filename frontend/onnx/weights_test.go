package onnx

import (
	"math"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

type onnxpbTensor = onnxpb.TensorProto

// TestConstantNodeWeights: a model that keeps its weights in Constant nodes (as paddle2onnx
// and older exporters write them) gets them as parameters, by the initializers' rule; the
// Constants that are not weights stay constants: a one-element epsilon, an attention mask
// of −∞, integer shapes, and a float tensor feeding only a shape slot.
func TestConstantNodeWeights(t *testing.T) {
	inf := float32(math.Inf(-1))
	m := model(13).Input("x", dtFloat, 2, 8).
		Constant("fc1.w", f32n("", 8, 4)).
		Constant("fc1.b", f32("", []int64{4}, 0, 0, 0, 0)). // a fresh bias: zeros, still a weight
		Constant("eps", f32("", []int64{1}, 1e-5)).
		Constant("mask", f32("", []int64{2, 4}, 0, inf, 0, inf, 0, 0, inf, 0)).
		Constant("shape", i64("", []int64{2}, 4, 2)).
		Constant("scales", f32("", []int64{2}, 1, 1)).
		Node("MatMul", "mm", in("x", "fc1.w"), in("h")).
		Node("Add", "bias", in("h", "fc1.b"), in("hb")).
		Node("Add", "eps_add", in("hb", "eps"), in("he")).
		Node("Add", "masked", in("he", "mask"), in("hm")).
		Node("Reshape", "reshape", in("hm", "shape"), in("r")).
		Node("Resize", "resize", in("r", "", "scales"), in("y")).
		Output("y")
	mod, err := Import("model.onnx", m.Bytes(t), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := mod.Func(ir.ForwardFunc)
	var params []string
	for _, p := range f.Params() {
		params = append(params, p.Name)
	}
	if !slices.Equal(params, []string{"fc1.w", "fc1.b"}) {
		t.Fatalf("parameters %v, want [fc1.w fc1.b]\n%s", params, mod)
	}
	// The mask and the epsilon are still there, as constants.
	consts := 0
	for _, op := range f.Ops {
		if op.Def.Name == "constant" && op.Results[0].Type.DType == ir.F32 {
			consts++
		}
	}
	if consts < 2 {
		t.Errorf("the mask and the epsilon were not kept as constants:\n%s", mod)
	}

	// The same model with its weights as initializers imports to the same parameters.
	w := model(13).Input("x", dtFloat, 2, 8).Init(f32n("fc1.w", 8, 4)).
		Node("MatMul", "mm", in("x", "fc1.w"), in("y")).Output("y")
	c := model(13).Input("x", dtFloat, 2, 8).Constant("fc1.w", f32n("", 8, 4)).
		Node("MatMul", "mm", in("x", "fc1.w"), in("y")).Output("y")
	a, err := Import("a.onnx", w.Bytes(t), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Import("a.onnx", c.Bytes(t), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("initializer and Constant weights import differently:\n%s\n%s", a, b)
	}
}

// batchOneCNN is a CNN exported with a fixed batch of 1: input [1, 3, 4, 4], a Reshape by a
// shape initializer [1, 32] (shape, or a shape the test chooses), declared output [1, 5].
func batchOneCNN(shape *onnxpbTensor) *mb {
	return model(13).Input("x", dtFloat, 1, 3, 4, 4).
		Init(f32n("conv.w", 2, 3, 3, 3)).Init(f32n("fc.w", 32, 5)).Init(shape).
		Node("Conv", "conv", in("x", "conv.w"), in("c"), aInts("pads", 1, 1, 1, 1)).
		Node("Relu", "relu", in("c"), in("r")).
		Node("Reshape", "flatten", in("r", "shape"), in("f")).
		Node("MatMul", "fc", in("f", "fc.w"), in("y")).
		OutputTyped("y", dtFloat, 1, 5)
}

// TestRebatch: --batch re-batches a model exported with a batch of 1 — the inputs' leading
// dims and the Reshape shapes that carry the batch, with or without micro-batches — and a
// node that pins the batch is an error naming it.
func TestRebatch(t *testing.T) {
	for _, c := range []struct {
		model        *mb
		batch, micro int
		want         []string
	}{
		{batchOneCNN(i64("shape", []int64{2}, 1, 32)), 4, 0, []string{"%x: f32[4,3,4,4]", "f32[4,32]", "-> (f32[4,5]"}},
		{batchOneCNN(i64("shape", []int64{2}, 1, 32)), 4, 2, []string{"%x: f32[2,3,4,4]", "f32[2,32]", "-> (f32[2,5]"}},
		{batchOneCNN(i64("shape", []int64{2}, 1, -1)), 6, 2, []string{"%x: f32[3,3,4,4]", "f32[3,32]"}},
		{batchOneCNN(i64("shape", []int64{2}, 0, 32)), 4, 1, []string{"f32[4,32]"}},
		// The batch folded into the rows and back: [1, 8, 4] → [8, 4] → [1, 8, 4].
		{model(13).Input("x", dtFloat, 1, 8, 4).Init(f32n("w", 4, 4)).
			Init(i64("rows", []int64{2}, 8, 4)).Init(i64("back", []int64{3}, 1, 8, 4)).
			Node("Reshape", "r1", in("x", "rows"), in("r")).
			Node("MatMul", "mm", in("r", "w"), in("h")).
			Node("Reshape", "r2", in("h", "back"), in("y")).Output("y"), 3, 0,
			[]string{"f32[24,4]", "-> (f32[3,8,4]"}},
	} {
		mod, err := Import("m.onnx", c.model.Bytes(t), "", Options{Batch: c.batch, Microbatches: c.micro})
		if err != nil {
			t.Errorf("--batch %d --microbatches %d: %v", c.batch, c.micro, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(mod.String(), w) {
				t.Errorf("--batch %d --microbatches %d: no %q in\n%s", c.batch, c.micro, w, mod)
			}
		}
	}
	for _, c := range []struct {
		model  *mb
		batch  int
		micro  int
		errMsg string
	}{
		// x[0]: sample 0 only.
		{model(13).Input("x", dtFloat, 1, 4).Init(i64("zero", nil, 0)).
			Node("Gather", "pick", in("x", "zero"), in("y"), aInt("axis", 0)).Output("y"), 4, 0,
			`node "pick" (Gather): --batch 4: the node pins the batch at 1: its input "x" carries the batch, but its output "y" is [4] whatever the batch`},
		// A learned token of batch 1 concatenated along the sequence.
		{model(13).Input("x", dtFloat, 1, 8, 4).Init(f32n("cls", 1, 1, 4)).
			Node("Concat", "cat", in("cls", "x"), in("y"), aInt("axis", 1)).Output("y"), 4, 0,
			`node "cat" (Concat): --batch 4: `},
		// The batch moved to dim 1 by a transpose, then reshaped into the middle of a dim.
		{model(13).Input("x", dtFloat, 1, 4, 8).Init(i64("shape", []int64{2}, 2, 16)).
			Node("Transpose", "t", in("x"), in("xt"), aInts("perm", 1, 0, 2)).
			Node("Reshape", "split", in("xt", "shape"), in("y")).Output("y"), 4, 0,
			`node "split" (Reshape): --batch 4: the reshape of [4,1,8] (batch in dim 1) to [2,16] splits the batch across dims`},
		// x·xᵀ: samples multiplied with each other, the output grows in two dims.
		{model(13).Input("x", dtFloat, 1, 4).
			Node("Transpose", "t", in("x"), in("xt")).
			Node("MatMul", "gram", in("x", "xt"), in("y")).Output("y"), 4, 0,
			`node "gram" (MatMul): --batch 4: output "y" is [1,1] at batch 1 but [4,4] with 4 sample(s) per micro-batch: ppc cannot follow the batch through this node`},
		{model(13).Input("x", dtFloat, 2, 4).Node("Relu", "r", in("x"), in("y")).Output("y"), 4, 0,
			`--batch 4 re-batches a model exported with a batch of 1, but graph input "x" has a fixed leading dim of 2`},
		{model(13).Input("x", dtFloat, "n", 4).Node("Relu", "r", in("x"), in("y")).Output("y"), 4, 0,
			`--batch 4: graph input "x" has a symbolic batch dim n; bind it with --dim n=4 instead`},
		{model(13).Input("x", dtFloat).Node("Relu", "r", in("x"), in("y")).Output("y"), 4, 0,
			`--batch 4: graph input "x" is a scalar and has no batch dim`},
		{batchOneCNN(i64("shape", []int64{2}, 1, 32)), 3, 2,
			`graph input "x" has batch size 3 (--batch), which does not divide into 2 micro-batches`},
	} {
		opts := Options{Batch: c.batch, Microbatches: c.micro}
		if strings.Contains(c.errMsg, "symbolic") {
			opts.Dims = map[string]int{"n": 1}
		}
		_, err := Import("m.onnx", c.model.Bytes(t), "", opts)
		if err == nil || !strings.Contains(err.Error(), c.errMsg) {
			t.Errorf("got %v, want an error containing %q", err, c.errMsg)
		}
	}
}
