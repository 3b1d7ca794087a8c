package onnx

import (
	"fmt"
	"os"
	"testing"
)

// BenchmarkImportLargestBackend imports the largest model under the backend test data.
func BenchmarkImportLargestBackend(b *testing.B) {
	var best []byte
	var name string
	for _, bm := range backendModels(b) {
		data, err := os.ReadFile(bm.path)
		if err == nil && len(data) > len(best) {
			if _, ok := outOfScope[bm.key]; !ok {
				best, name = data, bm.key
			}
		}
	}
	b.Logf("%s: %d bytes", name, len(best))
	b.SetBytes(int64(len(best)))
	for b.Loop() {
		if _, err := Import("model.onnx", best, "", Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// transformerModel builds an n-layer pre-LN MLP stack as PyTorch exports it (decomposed
// LayerNorm, MatMul+Add, erf GELU), d wide.
func transformerModel(layers, d int) *mb {
	m := model(13).Input("x", dtFloat, "batch", 64, d).
		Constant("two", scalarF(2)).Constant("eps", scalarF(1e-5)).Constant("sqrt2", scalarF(1.4142135)).
		Constant("one", scalarF(1)).Constant("half", scalarF(0.5))
	x := "x"
	for l := 0; l < layers; l++ {
		p := func(s string) string { return fmt.Sprintf("l%d.%s", l, s) }
		m.Init(f32n(p("ln.weight"), int64(d))).Init(f32n(p("ln.bias"), int64(d))).
			Init(f32n(p("fc1.weight"), int64(d), int64(4*d))).Init(f32n(p("fc1.bias"), int64(4*d))).
			Init(f32n(p("fc2.weight"), int64(4*d), int64(d))).Init(f32n(p("fc2.bias"), int64(d))).
			Node("ReduceMean", p("rm1"), in(x), in(p("mean")), aInts("axes", -1)).
			Node("Sub", p("sub"), in(x, p("mean")), in(p("d"))).
			Node("Pow", p("pow"), in(p("d"), "two"), in(p("sq"))).
			Node("ReduceMean", p("rm2"), in(p("sq")), in(p("var")), aInts("axes", -1)).
			Node("Add", p("adde"), in(p("var"), "eps"), in(p("ve"))).
			Node("Sqrt", p("sqrt"), in(p("ve")), in(p("std"))).
			Node("Div", p("div"), in(p("d"), p("std")), in(p("n"))).
			Node("Mul", p("mulg"), in(p("n"), p("ln.weight")), in(p("g"))).
			Node("Add", p("addb"), in(p("g"), p("ln.bias")), in(p("ln"))).
			Node("MatMul", p("mm1"), in(p("ln"), p("fc1.weight")), in(p("h1"))).
			Node("Add", p("b1"), in(p("h1"), p("fc1.bias")), in(p("h2"))).
			Node("Div", p("gdiv"), in(p("h2"), "sqrt2"), in(p("gt"))).
			Node("Erf", p("erf"), in(p("gt")), in(p("ge"))).
			Node("Add", p("gadd"), in(p("ge"), "one"), in(p("ga"))).
			Node("Mul", p("gm1"), in(p("h2"), p("ga")), in(p("gm"))).
			Node("Mul", p("gm2"), in(p("gm"), "half"), in(p("gelu"))).
			Node("MatMul", p("mm2"), in(p("gelu"), p("fc2.weight")), in(p("h3"))).
			Node("Add", p("b2"), in(p("h3"), p("fc2.bias")), in(p("h4"))).
			Node("Add", p("res"), in(x, p("h4")), in(p("out")))
		x = p("out")
	}
	return m.Output(x)
}

// BenchmarkImportTransformer imports a 24-layer, 256-wide MLP stack (about 6M parameters)
// with every pattern raised.
func BenchmarkImportTransformer(b *testing.B) {
	data := transformerModel(24, 256).Bytes(b)
	b.SetBytes(int64(len(data)))
	opts := Options{Dims: map[string]int{"batch": 8}}
	for b.Loop() {
		if _, err := Import("model.onnx", data, "", opts); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTransformerRaised(t *testing.T) {
	mod, err := Import("model.onnx", transformerModel(2, 16).Bytes(t), "", Options{Dims: map[string]int{"batch": 2}})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, op := range mod.Funcs[0].Ops {
		counts[op.Def.Name]++
	}
	want := map[string]int{"layer_norm": 2, "matmul": 4, "gelu": 2, "add": 2}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s: %d ops, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if len(mod.Funcs[0].Ops) != 10 {
		t.Errorf("%d ops, want 10: %v", len(mod.Funcs[0].Ops), counts)
	}
}
