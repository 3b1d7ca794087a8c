package passes

import (
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

const addLossModel = `func @forward(%x: f32[4,6] {input}, %w: f32[6,3] {param}, %labels: f32[3] {param}) -> (f32[4,3], f32[4,6]) {
  %logits = matmul %x, %w : f32[4,3] {stage = 2}
  %r = relu %x : f32[4,6]
  return %logits, %r
}
`

func addLossTo(t *testing.T, src, pipeline string) (*ir.Module, error) {
	t.Helper()
	m, err := ir.ParseAndVerify("in.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := ParsePipeline(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	return m, Run(m, pl, Config{VerifyEach: true, ReproDir: t.TempDir()})
}

func TestAddLoss(t *testing.T) {
	for _, c := range []struct{ pipeline, want string }{
		// The name labels is taken by a parameter, so the new input is labels.1; it goes after %x.
		{"add-loss", `func @forward(%x: f32[4,6] {input}, %labels.1: i64[4] {input, label, range = [0, 3]}, %w: f32[6,3] {param}, %labels: f32[3] {param}) -> (f32[] {loss}) {
  %logits = matmul %x, %w : f32[4,3] {stage = 2}
  %r = relu %x : f32[4,6]
  %loss = cross_entropy %logits, %labels.1 : f32[] {stage = 2}
  return %loss
}
`},
		{"add-loss{kind=mse,output=1}", `func @forward(%x: f32[4,6] {input}, %labels.1: f32[4,6] {input, label}, %w: f32[6,3] {param}, %labels: f32[3] {param}) -> (f32[] {loss}) {
  %logits = matmul %x, %w : f32[4,3] {stage = 2}
  %r = relu %x : f32[4,6]
  %loss = mse %r, %labels.1 : f32[]
  return %loss
}
`},
	} {
		m, err := addLossTo(t, addLossModel, c.pipeline)
		if err != nil {
			t.Fatalf("%s: %v", c.pipeline, err)
		}
		if got := m.String(); got != c.want {
			t.Errorf("%s:\ngot\n%s\nwant\n%s", c.pipeline, got, c.want)
		}
	}
	// Then the model trains.
	if _, err := addLossTo(t, addLossModel, "add-loss,autodiff,optimizer"); err != nil {
		t.Fatal(err)
	}
	// A model with a loss is left alone.
	m, err := addLossTo(t, optimizerModel, "add-loss{kind=mse}")
	if err != nil || strings.Count(m.String(), "{loss}") != 1 || strings.Contains(m.String(), "mse") {
		t.Errorf("add-loss changed a model that has a loss (%v):\n%s", err, m)
	}
}

func TestAddLossErrors(t *testing.T) {
	for _, c := range []struct{ src, pipeline, want string }{
		{addLossModel, "add-loss{kind=hinge}", `add-loss: unknown kind "hinge" (want ce or mse)`},
		{addLossModel, "add-loss{output=2}", "in.ir:1:1: add-loss: output=2 is out of range: @forward has 2 results"},
		{addLossModel, "add-loss{output=-1}", "output=-1 is out of range"},
		{addLossModel, "add-loss{output=one}", `option output="one" is not an integer`},
		{"func @forward(%x: i64[4,3] {input}) -> (i64[4,3]) {\n  return %x\n}\n", "add-loss",
			"add-loss: kind=ce needs a floating-point output, but result 0 is i64[4,3]"},
		{"func @forward(%x: f32[] {input}) -> (f32[]) {\n  return %x\n}\n", "add-loss",
			"add-loss: kind=ce needs logits with a class dim, but result 0 is the scalar f32[]"},
		{"func @f(%x: f32[2] {input}) -> (f32[2]) {\n  return %x\n}\n", "add-loss", "add-loss: the module has no @forward function"},
	} {
		_, err := addLossTo(t, c.src, c.pipeline)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.pipeline, err, c.want)
		}
	}
}

// TestAddLossClassAxis: the class axis of kind=ce. Pooled image-classifier logits
// [N, C, 1, 1] take their classes from axis 1 by default (moved last for cross_entropy, the
// labels [N, 1, 1]); an explicit axis overrides the default; a class axis of size 1 — whose
// cross-entropy is always 0 — is an error, and so is an axis for mse.
func TestAddLossClassAxis(t *testing.T) {
	pooled := "func @forward(%x: f32[4,10,1,1] {input}) -> (f32[4,10,1,1]) {\n  return %x\n}\n"
	m, err := addLossTo(t, pooled, "add-loss")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"%labels: i64[4,1,1] {input, label, range = [0, 10]}", "transpose %x {perm = [0, 2, 3, 1]} : f32[4,1,1,10]", "cross_entropy"} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("default axis of [4,10,1,1]: no %q in\n%s", want, m)
		}
	}
	if m, err = addLossTo(t, pooled, "add-loss{axis=1}"); err != nil || !strings.Contains(m.String(), "i64[4,1,1]") {
		t.Errorf("axis=1: %v\n%s", err, m)
	}
	seq := "func @forward(%x: f32[2,8,16] {input}) -> (f32[2,8,16]) {\n  return %x\n}\n"
	if m, err = addLossTo(t, seq, "add-loss"); err != nil || !strings.Contains(m.String(), "%labels: i64[2,8] {input, label, range = [0, 16]}") || strings.Contains(m.String(), "transpose") {
		t.Errorf("[2,8,16] default: %v\n%s", err, m)
	}
	if m, err = addLossTo(t, seq, "add-loss{axis=-2}"); err != nil || !strings.Contains(m.String(), "%labels: i64[2,16] {input, label, range = [0, 8]}") {
		t.Errorf("axis=-2: %v\n%s", err, m)
	}
	for _, c := range []struct{ src, pipeline, want string }{
		{pooled, "add-loss{axis=3}", "class axis 3 of f32[4,10,1,1] has size 1: a cross-entropy over one class is always 0"},
		{"func @forward(%x: f32[4,1] {input}) -> (f32[4,1]) {\n  return %x\n}\n", "add-loss", "class axis 1 of f32[4,1] has size 1"},
		{"func @forward(%x: f32[4,8,1] {input}) -> (f32[4,8,1]) {\n  return %x\n}\n", "add-loss", "class axis 2 of f32[4,8,1] has size 1"},
		{pooled, "add-loss{axis=4}", "axis=4 is out of range for f32[4,10,1,1] (axes -4 to 3)"},
		{pooled, "add-loss{axis=x}", `option axis="x" is not an integer (or auto)`},
		{pooled, "add-loss{kind=mse,axis=1}", "option axis applies to kind=ce"},
	} {
		_, err := addLossTo(t, c.src, c.pipeline)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on %q: got %v, want an error containing %q", c.pipeline, c.src, err, c.want)
		}
	}
}
