package onnx

import (
	"slices"
	"testing"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// TestInputRanges: integer inputs take the range the model's ops give them — the rows of the
// tables they index (the smallest of several, through casts and reshapes), the classes of
// the loss they label — and labels of a token input's shape and vocabulary are its next
// tokens; an input the ops do not bound (a mask), or labels with an ignore_index outside the
// classes, keep none.
func TestInputRanges(t *testing.T) {
	lm := func(ignore int64) *mb {
		sce := []*onnxpb.AttributeProto{aStr("reduction", "mean")}
		if ignore != 0 {
			sce = append(sce, aInt("ignore_index", ignore))
		}
		return model(13).Input("tokens", dtInt64, 2, 4).Input("labels", dtInt64, 2, 4).Input("mask", dtInt64, 2, 4).
			Init(f32n("wte", 6, 3)).Init(f32n("wpe", 5, 3)).Init(f32n("head", 3, 6)).
			Constant("shape", i64("", []int64{1}, 8)).
			Constant("shape3", i64("", []int64{3}, 2, 4, 3)).
			Constant("ax", i64("", []int64{1}, 2)).
			Node("Cast", "cast", in("tokens"), in("t32"), aInt("to", 6)).
			Node("Reshape", "flat", in("t32", "shape"), in("flat")).
			Node("Gather", "embed", in("wte", "flat"), in("e")).
			Node("Gather", "pos", in("wpe", "tokens"), in("p")).
			Node("Reshape", "unflat", in("e", "shape3"), in("e3")).
			Node("Add", "add", in("e3", "p"), in("h")).
			Node("Cast", "maskf", in("mask"), in("mf"), aInt("to", 1)).
			Node("Unsqueeze", "unsq", in("mf", "ax"), in("m3")).
			Node("Mul", "masked", in("h", "m3"), in("hm")).
			Node("MatMul", "lm_head", in("hm", "head"), in("logits")).
			Node("Transpose", "classes", in("logits"), in("scores"), aInts("perm", 0, 2, 1)).
			Node("SoftmaxCrossEntropyLoss", "sce", in("scores", "labels"), in("loss"), sce...).
			Output("logits").Output("loss")
	}
	for _, c := range []struct {
		name   string
		m      *mb
		tokens []int // the range of tokens: the smaller table, wpe's 5 rows
		labels []int
		shift  string
	}{
		{"lm", lm(0), []int{0, 5}, []int{0, 6}, ""},
		{"ignore_index inside", lm(3), []int{0, 5}, []int{0, 6}, ""},
		{"ignore_index outside", lm(-100), []int{0, 5}, nil, ""},
	} {
		m, err := Import("lm.onnx", c.m.Bytes(t), "", Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		f := m.Func(ir.ForwardFunc)
		attrs := func(name string) ir.Attrs { return f.ArgAttrs[f.Arg(name).Index] }
		if got := attrs("tokens").Ints(ir.AttrRange); !slices.Equal(got, c.tokens) || attrs("tokens").Has(ir.AttrLabel) {
			t.Errorf("%s: tokens %v, want range %v", c.name, attrs("tokens"), c.tokens)
		}
		if got := attrs("labels").Ints(ir.AttrRange); !slices.Equal(got, c.labels) || attrs("labels").Has(ir.AttrLabel) != (c.labels != nil) {
			t.Errorf("%s: labels %v, want range %v", c.name, attrs("labels"), c.labels)
		}
		if attrs("mask").Has(ir.AttrRange) {
			t.Errorf("%s: mask %v, want no range", c.name, attrs("mask"))
		}
		// The labels range over 6 classes, the tokens over 5 positions: not the same
		// vocabulary, so not next tokens.
		if attrs("labels").Has(ir.AttrShiftOf) {
			t.Errorf("%s: labels %v are not the tokens' next tokens", c.name, attrs("labels"))
		}
	}

	// One table: tokens and labels over the same vocabulary are a language model's.
	m, err := Import("lm.onnx", model(13).Input("tokens", dtInt64, 2, 4).Input("labels", dtInt64, 2, 4).
		Init(f32n("wte", 6, 3)).Init(f32n("head", 3, 6)).
		Node("Gather", "embed", in("wte", "tokens"), in("e")).
		Node("MatMul", "lm_head", in("e", "head"), in("logits")).
		Node("Transpose", "classes", in("logits"), in("scores"), aInts("perm", 0, 2, 1)).
		Node("SoftmaxCrossEntropyLoss", "sce", in("scores", "labels"), in("loss")).
		Output("loss").Bytes(t), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func(ir.ForwardFunc)
	if at := f.ArgAttrs[f.Arg("labels").Index]; at.Str(ir.AttrShiftOf, "") != "tokens" || !slices.Equal(at.Ints(ir.AttrRange), []int{0, 6}) {
		t.Errorf("labels %v, want the next tokens of tokens, in [0, 6)", at)
	}
}
