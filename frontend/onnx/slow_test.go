package onnx

import (
	"fmt"
	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"strings"
	"testing"
)

// slowFoldModel is a hostile model found by fuzzing's pattern: one ConstantOfShape makes a
// million-element splat, and n ten-byte ReduceMax nodes each fold it. Unbounded folding
// spends a million element visits per node — seconds for a few kilobytes of input.
func slowFoldModel(n int) *mb {
	b := model(13).Init(i64("shape", []int64{2}, 1024, 1024)).
		Node("ConstantOfShape", "big", in("shape"), in("z"))
	for i := 0; i < n; i++ {
		out := fmt.Sprintf("r%d", i)
		b.Node("ReduceMax", "", in("z"), in(out), aInts("axes", 0), aInt("keepdims", 0)).Output(out)
	}
	return b
}

// TestFoldWorkIsBoundedByInputSize checks that folding stops at the budget: past it, the
// reductions stay in the graph for run time instead of being evaluated at import.
func TestFoldWorkIsBoundedByInputSize(t *testing.T) {
	data := slowFoldModel(400).Bytes(t)
	m, err := Import("slow.onnx", data, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	folded, kept := 0, 0
	for _, op := range m.Funcs[0].Ops {
		switch op.Def.Name {
		case "reduce_max":
			kept++
		case "constant":
			folded++
		}
	}
	budget := foldBase + foldPerByte*len(data)
	perFold := 1<<20 + 1024
	if maxFolds := budget / perFold; folded > maxFolds+2 {
		t.Errorf("%d constants after import, but the budget of %d element visits allows about %d folds", folded, budget, maxFolds)
	}
	if kept == 0 {
		t.Errorf("every reduction was folded: the fold budget did not apply")
	}
	// The few small models of the golden tests still fold completely.
}

func BenchmarkImportHostileFolds(b *testing.B) {
	data := slowFoldModel(400).Bytes(b)
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		if _, err := Import("slow.onnx", data, "", Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHugeSplatsAreNotMaterialised feeds splat constants of 2^40 elements where the importer
// reads values element by element (a shape operand, resize sizes, gather indices): reading
// them would allocate terabytes from a few bytes of input (a fuzzer's out-of-memory crash).
func TestHugeSplatsAreNotMaterialised(t *testing.T) {
	value := func(v int64) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: "value", Type: onnxpb.AttributeProto_TENSOR, T: i64("", []int64{1}, v)}
	}
	huge := func() *mb { return model(13).Input("x", dtFloat, 2, 3).Init(i64("len", []int64{1}, 1<<40)) }
	for name, b := range map[string]*mb{
		"reshape": huge().Node("ConstantOfShape", "ones", in("len"), in("shape"), value(1)).
			Node("Reshape", "view", in("x", "shape"), in("y")).Output("y"),
		"resize": huge().Node("ConstantOfShape", "ones", in("len"), in("sizes"), value(1)).
			Node("Resize", "up", in("x", "", "", "sizes"), in("y")).Output("y"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Import("huge.onnx", b.Bytes(t), "", Options{})
			if err == nil || !strings.Contains(err.Error(), "at most 65536 are read at compile time") {
				t.Fatalf("got %v, want the element bound named", err)
			}
		})
	}
	// Gathering with 2^40 copies of index -1 is a valid (huge) model: the importer normalises
	// the one value of the splat and leaves the result shape to later checks.
	b := huge().Node("ConstantOfShape", "idx", in("len"), in("i"), value(-1)).
		Node("Gather", "g", in("x", "i"), in("y")).Output("y")
	m, err := Import("huge.onnx", b.Bytes(t), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); !strings.Contains(got, "dense<i64[1099511627776]: 1>") {
		t.Errorf("the splat index -1 was not normalised to 1:\n%v", got)
	}
}
