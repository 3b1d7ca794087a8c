package onnx

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"ppc.dev/ppc/ir"
)

// gpt-tiny.onnx is written by testdata/models/gen_gpt_onnx.go (see its comment): a 2-layer
// GPT in torch.onnx.export's patterns, layer 0 as an opset-17 export with constant folding,
// layer 1 as one without (decomposed LayerNorm, Transpose of every weight).
const gptTiny = "../../testdata/models/gpt-tiny.onnx"

// TestGPTTinyRaised: every exporter pattern of gpt-tiny.onnx is raised. The 5 norms
// (layer 1's two decomposed ones included), the 2 erf GELUs, the 12 Linears as matmuls
// with a bias operand, layer 1's 6 transposed weights and the tied head's Transpose(wte)
// folded into transpose_b, both attentions (layer 0's causal Where, layer 1's additive
// causal mask) as the fused op with causal = true, and nothing of the decompositions left.
func TestGPTTinyRaised(t *testing.T) {
	m, err := Load(gptTiny, Options{Dims: map[string]int{"batch": 4}})
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func(ir.ForwardFunc)
	counts := map[string]int{}
	biased, transB := 0, 0
	for _, op := range f.Ops {
		counts[op.Name()]++
		if op.Name() == "matmul" {
			if len(op.Operands) == 3 {
				biased++
			}
			if op.Attrs.Bool("transpose_b", false) {
				transB++
			}
		}
	}
	want := map[string]int{
		"layer_norm": 5, "gelu": 2, "matmul": 13, "softmax": 0, "gather": 2, "where": 0,
		"attention": 2,
		"transpose": 8, // q, k, v to heads and back, per layer; no weight transposes
		"erf":       0, "reduce_mean": 0, "sqrt": 0, "pow": 0, "sub": 0,
		"div": 0, // the scores' 1/√head_dim is the attention's scale
		"mul": 0,
		"add": 5, // the embeddings and 4 residuals
	}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%d %s ops, want %d", counts[k], k, n)
		}
	}
	if biased != 12 || transB != 7 {
		t.Errorf("%d matmuls with a bias (want 12), %d with transpose_b (want 7)", biased, transB)
	}
	for _, op := range f.Ops {
		if op.Name() == "attention" {
			if !op.Attrs.Bool("causal", false) || len(op.Operands) != 3 || math.Abs(op.Attrs.Float("scale", 0)-1/math.Sqrt(8)) > 1e-6 {
				t.Errorf("attention %v, want causal, no mask, scale 1/√8", op.Attrs)
			}
			if k := op.Operands[1].Type; !k.Equal(ir.T(ir.F32, 4, 4, 8, 8)) {
				t.Errorf("attention's k is %s, want [batch, heads, seq, head_dim]", k)
			}
		}
	}
	params := 0
	for i := range f.Args {
		if f.ArgAttrs[i].Has(ir.AttrParam) {
			params++
		}
	}
	if params != 36 || len(f.Args) != 37 {
		t.Errorf("%d parameters of %d arguments, want 36 and input_ids", params, len(f.Args))
	}
	if r := f.Results[0].Type; !r.Equal(ir.T(ir.F32, 4, 8, 64)) {
		t.Errorf("logits: %s", r)
	}
	if t.Failed() {
		t.Logf("%v\n%s", counts, m)
	}
}

// TestGPTTinyUpToDate regenerates gpt-tiny.onnx with its generator and compares the bytes,
// so that the committed file cannot drift from the program that documents it.
func TestGPTTinyUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the generator; run without -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out := filepath.Join(t.TempDir(), "gpt-tiny.onnx")
	cmd := exec.Command(goTool, "run", "../../testdata/models/gen_gpt_onnx.go", "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run gen_gpt_onnx.go: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(gptTiny)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, committed) {
		t.Fatalf("testdata/models/gpt-tiny.onnx differs from what gen_gpt_onnx.go writes (%d vs %d bytes): run go generate ./frontend/onnx", len(committed), len(got))
	}
}
