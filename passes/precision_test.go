package passes

import (
	"math"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

const precisionModel = `func @forward(%x: f32[2,4] {input}, %w: f32[4,4] {param}) -> (f32[] {loss}) {
  %h = matmul %x, %w : f32[2,4]
  %0 = reduce_sum %h : f32[]
  return %0
}
`

// runPipeline parses src and runs pipeline over it with the verifier after every pass.
func runPipeline(t *testing.T, src, pipeline string) (*ir.Module, error) {
	t.Helper()
	m, err := ir.ParseAndVerify("m.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := ParsePipeline(pipeline)
	if err != nil {
		return nil, err
	}
	return m, Run(m, pl, Config{VerifyEach: true})
}

// Mixed precision's pass errors and no-ops.
func TestPrecisionPassErrors(t *testing.T) {
	for _, c := range []struct{ pipeline, src, want string }{
		{"precision{dtype=f8}", precisionModel, `pass precision: precision: dtype: unknown precision "f8" (want fp32, bf16 or fp16)`},
		{"precision{dtype=f16,init_scale=inf}", precisionModel, `init_scale must be a finite f32 above 0, got "inf"`},
		{"precision{dtype=f16,init_scale=1e39}", precisionModel, `init_scale must be a finite f32 above 0`},
		{"precision{dtype=bf16},precision{dtype=f16}", precisionModel, "precision: the module already computes in bf16"},
		{"autodiff,precision{dtype=bf16}", precisionModel, "the module has no @forward function"},
		{"precision{dtype=f16},autodiff,optimizer,loss-scale{growth_factor=1}", precisionModel, "growth_factor must be a finite number above 1"},
		{"precision{dtype=f16},autodiff,optimizer,loss-scale{backoff_factor=1}", precisionModel, "backoff_factor must be in (0, 1)"},
		{"precision{dtype=f16},autodiff,optimizer,loss-scale{growth_interval=0}", precisionModel, "growth_interval must be an integer in [1, 2^24]"},
		{"precision{dtype=f16},autodiff,loss-scale", precisionModel, "@train is scaled but the module has no @optimizer"},
		{"precision{dtype=f16},autodiff,optimizer,loss-scale,loss-scale", precisionModel, "@optimizer already has the loss scaler's state"},
		{"autodiff", strings.Replace(precisionModel, "%w: f32[4,4] {param}", "%w: f32[4,4] {param}, %s: f16[] {loss_scale}", 1),
			"the loss scale %s must be an f32 scalar that is neither a parameter nor an input, got f16[]"},
		{"autodiff", strings.Replace(precisionModel, "%w: f32[4,4] {param}", "%w: f32[4,4] {param}, %s: f32[] {loss_scale}, %t: f32[] {loss_scale}", 1),
			"two arguments marked {loss_scale} (%s and %t)"},
	} {
		_, err := runPipeline(t, c.src, c.pipeline)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant an error containing %q", c.pipeline, err, c.want)
		}
	}
	// f32 changes nothing; bf16 has no loss scaling, so loss-scale changes nothing either.
	m, err := runPipeline(t, precisionModel, "precision")
	if err != nil || m.Attrs.Has(AttrPrecision) || strings.Contains(m.String(), "cast") {
		t.Errorf("precision{dtype=f32}: %v\n%s", err, m)
	}
	m, err = runPipeline(t, precisionModel, "precision{dtype=bf16},autodiff,optimizer,loss-scale")
	if err != nil || strings.Contains(m.String(), ScalerPrefix) || strings.Contains(m.String(), AttrFoundInf) {
		t.Errorf("bf16 with loss-scale: %v\n%s", err, m)
	}
}

// NonFiniteCheck's function: this rank's 0/1 flag from every gradient it is given, read from
// the accumulators they name (the rank program reduces it over the mesh); with no gradient, 0.
func TestNonFiniteCheck(t *testing.T) {
	f, err := NonFiniteCheck("found_inf.rank0", []GradArg{{Name: "w", Type: ir.T(ir.F32, 3, 2)}, {Name: "b", Type: ir.T(ir.F64, 5)}})
	if err != nil {
		t.Fatal(err)
	}
	text := f.String()
	for _, want := range []string{`func @found_inf.rank0(%d.w: f32[3,2] {grad = "w"}, %d.b: f64[5] {grad = "b"}) -> (f32[] {port = "found_inf"})`, "reduce_sum", "f64[5]"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	if strings.Contains(text, "all_reduce") {
		t.Errorf("the rank's flag is reduced by its program, not here:\n%s", text)
	}
	if _, err := NonFiniteCheck("f", []GradArg{{Name: "i", Type: ir.T(ir.I64, 2)}}); err == nil {
		t.Error("an integer gradient was accepted")
	}
	f, err = NonFiniteCheck("f", nil)
	if err != nil || len(f.Args) != 0 || len(f.Results) != 1 {
		t.Errorf("no gradients: %v\n%s", err, f)
	}
}

// TestLossScaleSkipsAdamWStep: a step that the loss scaler skips leaves AdamW's own step
// count where it was, as GradScaler skips optimizer.step() and with it torch.optim's
// state["step"]: the next applied step, run as step 2, is AdamW's first, bias correction
// included (with the old count, m̂ = m/(1 − β1²) would be g/(1 + β1)).
func TestLossScaleSkipsAdamWStep(t *testing.T) {
	const lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
	m, err := runPipeline(t, precisionModel, "precision{dtype=f16},autodiff,optimizer{kind=adamw,lr=0.01,weight_decay=0},loss-scale")
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func(OptimizerFunc)
	arg := map[string]int{}
	for i, a := range f.Args {
		arg[a.Name] = i
	}
	if i, ok := arg[ScalerOptimizerStep]; !ok || !IsGlobalState(f, i) {
		t.Fatalf("@optimizer has no global %s:\n%s", ScalerOptimizerStep, f)
	}
	// state: by name, what the step reads and writes back (parameters and state).
	// The fp32 main parameter is what AdamW updates; the f16 parameter is its rounding.
	main := MainParamState("w")
	state := map[string][]float64{main: make([]float64, 16), ScalerScale: {1}}
	for i := range state[main] {
		state[main][i] = float64(float32(math.Sin(float64(i + 1)))) // as the f32 argument holds it
	}
	state["w"] = make([]float64, 16)
	for i, v := range state[main] {
		state["w"][i] = float64(ir.F16ToF32(ir.F32ToF16(float32(v))))
	}
	grad := make([]float64, 16)
	for i := range grad {
		grad[i] = float64(float32(math.Cos(float64(3*i+1)) * 0.25))
	}
	step := func(n int, foundInf float64) {
		args := make([]*ir.Dense, len(f.Args))
		for i, a := range f.Args {
			v := make([]float64, a.Type.NumElements())
			switch at := f.ArgAttrs[i]; {
			case at.Has(ir.AttrGrad):
				copy(v, grad)
			case at.Has(AttrStep):
				v[0] = float64(n)
			case at.Has(AttrFoundInf):
				v[0] = foundInf
			case state[at.Str(AttrState, a.Name)] != nil:
				copy(v, state[at.Str(AttrState, a.Name)])
			}
			args[i] = ir.NewDenseF64(a.Type, v)
		}
		res, err := evalFunc(f, args)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if u := f.ResultAttrs[i].Str(AttrUpdate, ""); u != "" {
				state[u] = r.Floats()
			}
		}
	}
	w0 := append([]float64{}, state[main]...)
	w16 := append([]float64{}, state["w"]...)
	step(1, 1) // overflow: skipped
	if c := state[ScalerOptimizerStep][0]; c != 0 || !slices.Equal(state[main], w0) || !slices.Equal(state["w"], w16) {
		t.Fatalf("a skipped step counted %v and changed w", c)
	}
	step(2, 0)
	if c := state[ScalerOptimizerStep][0]; c != 1 {
		t.Fatalf("AdamW's count after one applied step: %v", c)
	}
	for i, g := range grad {
		m, v := (1-b1)*g, (1-b2)*g*g
		mhat, vhat := m/(1-b1), v/(1-b2)
		want := w0[i] - lr*mhat/(math.Sqrt(vhat)+eps)
		if got := state[main][i]; math.Abs(got-want) > 1e-6*math.Abs(want)+1e-7 {
			t.Fatalf("w[%d] = %.9g after the first applied step, want AdamW's first step %.9g", i, got, want)
		}
		// The f16 parameter the forward reads is the main parameter rounded, once.
		if got, want := state["w"][i], float64(ir.F16ToF32(ir.F32ToF16(float32(state[main][i])))); got != want {
			t.Fatalf("f16 w[%d] = %.9g, want the main parameter rounded, %.9g", i, got, want)
		}
	}
}
