package passes

import (
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

func runAutodiffOn(t *testing.T, src string) (*ir.Module, error) {
	t.Helper()
	m, err := ir.ParseAndVerify("in.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := ParsePipeline("autodiff")
	return m, Run(m, pl, Config{VerifyEach: true, ReproDir: t.TempDir()})
}

func TestAutodiffErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"no forward", "func @f(%x: f32[2] {param}) -> (f32[2]) {\n  return %x\n}\n",
			"autodiff: the module has no @forward function"},
		{"no loss", "func @forward(%x: f32[2] {param}) -> (f32[2]) {\n  return %x\n}\n",
			"in.ir:1:1: autodiff: @forward has no result marked {loss}; a model without a loss (an ONNX model) needs the add-loss pass first"},
		{"two losses", "func @forward(%x: f32[] {param}) -> (f32[] {loss}, f32[] {loss}) {\n  return %x, %x\n}\n",
			"two results marked {loss}"},
		{"non-scalar loss", "func @forward(%x: f32[2] {param}) -> (f32[2] {loss}) {\n  %0 = relu %x : f32[2]\n  return %0\n}\n",
			"in.ir:1:1: autodiff: the loss must be a floating-point scalar, got f32[2] (reduce it with reduce_mean or reduce_sum first)"},
		{"integer loss", "func @forward(%x: i64[] {input}) -> (i64[] {loss}) {\n  %0 = neg %x : i64[]\n  return %0\n}\n",
			"the loss must be a floating-point scalar, got i64[]"},
		{"integer parameter", "func @forward(%x: f32[] {input}, %n: i64[] {param}) -> (f32[] {loss}) {\n  return %x\n}\n",
			"parameter %n has type i64[]; only floating-point parameters can be trained"},
		{"missing rule", "func @forward(%w: f32[4] {param}) -> (f32[] {loss}) {\n  %0 = relu %w : f32[4]\n  %1 = collective_broadcast %0 {axis = tp} : f32[4]\n  %2 = reduce_sum %1 : f32[]\n  return %2\n}\n",
			`in.ir:3:8: autodiff: no gradient rule for op "collective_broadcast" (it lies between parameter %w and the loss)`},
		{"already differentiated", "func @train(%w: f32[] {param}) -> (f32[] {loss}) {\n  return %w\n}\n",
			"autodiff has already run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := runAutodiffOn(t, c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// An op without a rule is fine when no gradient flows through it, and so is a parameter that
// does not reach the loss: it gets a zeros gradient.
func TestAutodiffNoFlow(t *testing.T) {
	m, err := runAutodiffOn(t, `func @forward(%x: f32[4] {input}, %w: f32[4] {param}, %unused: f32[3] {param}) -> (f32[] {loss}, f32[3]) {
  %0 = all_reduce %x {axis = tp} : f32[4]
  %1 = mul %0, %w : f32[4]
  %2 = reduce_sum %1 : f32[]
  %3 = relu %unused : f32[3]
  return %2, %3
}
`)
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func(TrainFunc)
	if m.Func(ir.ForwardFunc) != nil || f == nil {
		t.Fatalf("@forward was not renamed @train:\n%s", m)
	}
	if len(f.Results) != 3 || f.ResultAttrs[2].Str(ir.AttrGrad, "") != "unused" {
		t.Fatalf("results: %v", f.ResultAttrs)
	}
	z := f.Results[2]
	if z.Def == nil || z.Def.Name() != "constant" || !z.Def.Attrs.Get("value").(*ir.Dense).IsSplatOf(0) || z.Name != "d.unused" || z.Def.Phase != ir.BwdW {
		t.Errorf("the unused parameter's gradient is not a bwd_w zeros constant %%d.unused:\n%s", f)
	}
	// The dropped result's op is dead and removed.
	for _, op := range f.Ops {
		if op.Name() == "relu" {
			t.Errorf("the op computing only a dropped result survived:\n%s", f)
		}
	}
}

// Backward ops inherit the stage and location of the forward op they differentiate; sums of
// contributions get the stage of the value's definition; names follow the values.
func TestAutodiffStagesAndNames(t *testing.T) {
	m, err := runAutodiffOn(t, `func @forward(%x: f32[2,4] {input}, %w: f32[4,4] {param}, %v: f32[4,4] {param}) -> (f32[] {loss}) {
  %h = matmul %x, %w : f32[2,4] {stage = 0}
  %a = matmul %h, %v : f32[2,4] {stage = 1}
  %b = add %a, %h : f32[2,4] {stage = 1}
  %loss = reduce_mean %b : f32[] {stage = 1}
  return %loss
}
`)
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func(TrainFunc)
	byName := map[string]*ir.Op{}
	for _, op := range f.Ops {
		for _, r := range op.Results {
			byName[r.Name] = op
		}
	}
	for name, want := range map[string]struct {
		stage int
		phase ir.Phase
		line  int
	}{
		"d.loss": {1, ir.BwdIn, 5},
		"d.h":    {0, ir.BwdIn, 2}, // the sum of the residual and the matmul contributions
		"d.b":    {1, ir.BwdIn, 5}, // also the gradient of %a (add passes it through)
		"d.w":    {0, ir.BwdW, 2},
		"d.v":    {1, ir.BwdW, 3},
	} {
		op := byName[name]
		if op == nil {
			t.Errorf("no value %%%s in:\n%s", name, f)
			continue
		}
		if op.Stage != want.stage || op.Phase != want.phase || op.Loc.Line != want.line {
			t.Errorf("%%%s: stage %d, phase %s, line %d; want %d, %s, %d", name, op.Stage, op.Phase, op.Loc.Line, want.stage, want.phase, want.line)
		}
	}
	if op := byName["d.h"]; op == nil || op.Name() != "add" {
		t.Errorf("the two contributions to %%h are not summed by an add:\n%s", f)
	}
	checkPhases(t, f)
}

// Values computed from parameters alone (a cast or transpose of a weight) are parameter-side:
// their gradients are weight gradients, bwd_w.
func TestAutodiffParameterSideValues(t *testing.T) {
	m, err := runAutodiffOn(t, `func @forward(%x: f32[2,4] {input}, %w: f32[4,4] {param}) -> (f32[] {loss}) {
  %wt = transpose %w {perm = [1, 0]} : f32[4,4]
  %h = matmul %x, %wt : f32[2,4]
  %loss = reduce_sum %h : f32[]
  return %loss
}
`)
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func(TrainFunc)
	for _, op := range f.Ops {
		if op.Phase == ir.BwdIn && op.Name() != "constant" && op.Name() != "broadcast" && op.Name() != "reshape" {
			t.Errorf("unexpected bwd_in op %s in:\n%s", op, f)
		}
		if op.Name() == "transpose" && op.Phase != ir.Fwd && op.Phase != ir.BwdW {
			t.Errorf("the gradient of a transposed weight is %s, want bwd_w", op.Phase)
		}
	}
	checkPhases(t, f)
}

// Mixed precision: a cast weight's gradient is cast back to the parameter's dtype (bwd_w), the
// activation gradient through the output cast to the matmul's (bwd_in).
func TestAutodiffMixedPrecision(t *testing.T) {
	m, err := runAutodiffOn(t, `func @forward(%x: f16[2,4] {input}, %w: f32[4,4] {param}) -> (f32[] {loss}) {
  %wh = cast %w {to = f16} : f16[4,4]
  %h = matmul %x, %wh : f16[2,4]
  %hf = cast %h {to = f32} : f32[2,4]
  %loss = reduce_mean %hf : f32[]
  return %loss
}
`)
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func(TrainFunc)
	dw := f.Results[1]
	if dw.Def.Name() != "cast" || !dw.Type.Equal(ir.T(ir.F32, 4, 4)) || dw.Def.Phase != ir.BwdW || dw.Def.Operands[0].Name != "d.wh" {
		t.Errorf("d.w is not a bwd_w cast of d.wh:\n%s", f)
	}
	var dh *ir.Op
	for _, op := range f.Ops {
		if len(op.Results) == 1 && op.Result().Name == "d.h" {
			dh = op
		}
	}
	if dh == nil || dh.Name() != "cast" || dh.Result().Type.DType != ir.F16 || dh.Phase != ir.BwdIn {
		t.Errorf("d.h is not a bwd_in cast to f16:\n%s", f)
	}
	checkPhases(t, f)
}

// The loss may be a parameter itself: its gradient is the seed.
func TestAutodiffLossIsParameter(t *testing.T) {
	m, err := runAutodiffOn(t, "func @forward(%p: f32[] {param}) -> (f32[] {loss}) {\n  return %p\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func(TrainFunc)
	if len(f.Results) != 2 || f.Results[0] != f.Args[0] || f.Results[1].Name != "d.p" || !f.Results[1].Def.Attrs.Get("value").(*ir.Dense).IsSplatOf(1) {
		t.Errorf("got:\n%s", f)
	}
}

// A rule that fails to build, or builds a gradient of the wrong type, is reported at the
// forward op (a bug in the rule, caught before the verifier).
func TestAutodiffBrokenRule(t *testing.T) {
	saved := gradRules["neg"]
	defer func() { gradRules["neg"] = saved }()
	src := "func @forward(%w: f32[4] {param}) -> (f32[] {loss}) {\n  %0 = neg %w : f32[4]\n  %1 = reduce_sum %0 : f32[]\n  return %1\n}\n"
	for _, c := range []struct {
		rule gradRule
		want string
	}{
		{func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
			return []*ir.Value{g.b.MatMul(d[0], g.scalar(d[0], 1))}, nil
		}, "in.ir:2:8: autodiff: gradient of neg: matmul: matmul operands must have rank >= 1"},
		{func(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
			return []*ir.Value{g.b.Reduce("sum", d[0], nil, false)}, nil
		}, "in.ir:2:8: autodiff: internal error: the neg rule made a f32[] gradient for operand 0 of type f32[4]"},
	} {
		gradRules["neg"] = c.rule
		if _, err := runAutodiffOn(t, src); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
