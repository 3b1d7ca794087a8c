package export

import (
	"encoding/binary"
	"strings"
	"testing"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

func parse(t *testing.T, text string) *ir.Module {
	t.Helper()
	m, err := ir.ParseAndVerify("m.ir", text)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// zeros is an Options.Weight of zeros.
func zeros(p *ir.Value, _ ir.Attrs) ([]byte, error) { return make([]byte, p.Type.Bytes()), nil }

// constInts returns the int64 values of the Constant node writing name.
func constInts(t *testing.T, g *onnxpb.GraphProto, name string) []int64 {
	t.Helper()
	for _, n := range g.Node {
		if n.Output[0] == name && n.OpType == "Constant" {
			return n.Attribute[0].T.Int64Data
		}
	}
	t.Fatalf("no Constant node writes %s", name)
	return nil
}

func nodeOf(t *testing.T, g *onnxpb.GraphProto, opType string) *onnxpb.NodeProto {
	t.Helper()
	for _, n := range g.Node {
		if n.OpType == opType {
			return n
		}
	}
	t.Fatalf("no %s node", opType)
	return nil
}

// TestShapesFollowTheBatch: a Reshape that keeps the leading dim writes 0 there and an
// Expand writes 1 for the dims its operand has, so that the batch follows the inputs when
// the file is imported for micro-batches; two matrices with a bias become one Gemm.
func TestShapesFollowTheBatch(t *testing.T) {
	m := parse(t, `func @forward(%x: f32[4,6] {input}, %b: f32[1,3] {input}, %w: f32[3,6] {param}, %c: f32[3] {param}) -> (f32[4,2,3] {name = "r"}, f32[4,3] {name = "e"}, f32[4,3] {name = "y"}) {
  %r = reshape %x {shape = [4, 2, 3]} : f32[4,2,3]
  %e = broadcast %b {shape = [4, 3]} : f32[4,3]
  %y = matmul %x, %w, %c {transpose_b = true} : f32[4,3]
  return %r, %e, %y
}`)
	mp, err := Model(m, Options{Weight: zeros})
	if err != nil {
		t.Fatal(err)
	}
	g := mp.Graph
	if got := constInts(t, g, nodeOf(t, g, "Reshape").Input[1]); !equal(got, 0, 2, 3) {
		t.Errorf("Reshape shape %v, want [0 2 3]", got)
	}
	if got := constInts(t, g, nodeOf(t, g, "Expand").Input[1]); !equal(got, 4, 1) {
		t.Errorf("Expand shape %v, want [4 1]", got)
	}
	gemm := nodeOf(t, g, "Gemm")
	if strings.Join(gemm.Input, ",") != "x,w,c" || len(gemm.Attribute) != 1 || gemm.Attribute[0].Name != "transB" || gemm.Attribute[0].I != 1 {
		t.Errorf("Gemm %v", gemm)
	}
	if len(g.Initializer) != 2 || g.Initializer[0].Name != "w" || len(g.Initializer[0].RawData) != 72 {
		t.Errorf("initializers %v", g.Initializer)
	}
}

func equal(got []int64, want ...int64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestOutputs: the loss is output `loss` after the prediction its loss op reads; an argument
// returned as it is gets an Identity node; an input that holds the name loss is refused.
func TestOutputs(t *testing.T) {
	m := parse(t, `func @forward(%x: f32[4,3] {input}, %y: i64[4] {input, label}, %w: f32[3,3] {param}) -> (f32[] {loss}) {
  %logits = matmul %x, %w : f32[4,3]
  %cost = cross_entropy %logits, %y : f32[]
  return %cost
}`)
	mp, err := Model(m, Options{Weight: func(p *ir.Value, _ ir.Attrs) ([]byte, error) {
		b := make([]byte, p.Type.Bytes())
		binary.LittleEndian.PutUint32(b, 0x3f800000) // 1.0
		return b, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, o := range mp.Graph.Output {
		outs = append(outs, o.Name)
	}
	if strings.Join(outs, ",") != "logits,loss" || mp.Graph.Output[1].Type.GetTensorType().GetShape() == nil {
		t.Errorf("outputs %v", outs)
	}
	sce := nodeOf(t, mp.Graph, "SoftmaxCrossEntropyLoss")
	if sce.Output[0] != "loss" || strings.Join(sce.Input, ",") != "logits,y" {
		t.Errorf("loss node %v", sce)
	}
	if mp.Graph.Initializer[0].RawData[3] != 0x3f {
		t.Error("the initializer does not hold Options.Weight's bytes")
	}

	m = parse(t, `func @forward(%x: f32[4] {input}) -> (f32[4] {name = "out"}, f32[4] {name = "x"}) {
  return %x, %x
}`)
	mp, err = Model(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(mp.Graph.Node) != 1 || mp.Graph.Node[0].OpType != "Identity" || mp.Graph.Node[0].Output[0] != "out" {
		t.Errorf("nodes %v", mp.Graph.Node)
	}

	m = parse(t, `func @forward(%loss: f32[4,3] {input}, %y: i64[4] {input, label}) -> (f32[] {loss}) {
  %l = cross_entropy %loss, %y : f32[]
  return %l
}`)
	if _, err := Model(m, Options{}); err == nil || !strings.Contains(err.Error(), `argument %loss is named "loss", the name of an exported output`) {
		t.Errorf("input named loss: %v", err)
	}
}

// TestUnmapped: an op with no ONNX form is an error naming it and its place; a partitioned
// module is refused whole.
func TestUnmapped(t *testing.T) {
	src := `func @forward(%x: f32[2,3] {input}) -> (f32[2,3] {name = "y"}) {
  %s = softmax %x : f32[2,3]
  %g = softmax_grad %s, %x : f32[2,3]
  return %g
}`
	m := parse(t, src)
	_, err := Model(m, Options{})
	if err == nil || err.Error() != "m.ir:3:8: op softmax_grad has no ONNX mapping in ppc export: it is a gradient kernel of ppc's backward pass; export the forward model\n      %g = softmax_grad %s, %x : f32[2,3]\n           ^" {
		t.Errorf("got %v", err)
	}
	// Built in memory, without a position: its index and result.
	m.Funcs[0].Ops[1].Loc = ir.Loc{}
	if _, err := Model(m, Options{}); err == nil || !strings.Contains(err.Error(), "(op 1 of @forward, defining %g)") {
		t.Errorf("got %v", err)
	}
	m.Attrs = m.Attrs.Set(ir.AttrPartitioned, ir.Unit{})
	if _, err := Model(m, Options{}); err == nil || !strings.Contains(err.Error(), "partitioned") {
		t.Errorf("partitioned: %v", err)
	}
}
