package passes

import (
	"math"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

const optimizerModel = `module @m attributes {microbatches = 4}
func @forward(%x: f64[2,3] {input}, %w: f64[3,2] {init = "normal(0.02)", param}, %b: f64[2] {init = "zeros", param}) -> (f64[] {loss}) {
  %h = matmul %x, %w, %b : f64[2,2]
  %loss = reduce_mean %h : f64[]
  return %loss
}
`

// optimizerStep builds @optimizer for optimizerModel with the given options and evaluates it on
// fixed parameters, gradients and state at step t. It returns the inputs by argument name and
// the results by their update name.
func optimizerStep(t *testing.T, opts string, t0 float64, zeroState bool) (in, out map[string][]float64) {
	t.Helper()
	m, err := ir.ParseAndVerify("in.ir", optimizerModel)
	if err != nil {
		t.Fatal(err)
	}
	runGradPipeline(t, m, "autodiff,optimizer"+opts)
	f := m.Func(OptimizerFunc)
	if f == nil {
		t.Fatalf("no @optimizer:\n%s", m)
	}
	for _, op := range f.Ops {
		if op.Phase != ir.Opt {
			t.Errorf("op without phase opt: %s", op)
		}
	}
	in = map[string][]float64{}
	args := make([]*ir.Dense, len(f.Args))
	for i, a := range f.Args {
		v := make([]float64, a.Type.NumElements())
		for j := range v {
			// Distinct values of both signs; second moments must be positive.
			v[j] = math.Sin(float64(7*i+3*j+1)) * 0.5
			if strings.HasSuffix(a.Name, "exp_avg_sq") {
				v[j] = v[j] * v[j]
			}
			if zeroState && f.ArgAttrs[i].Has(AttrState) {
				v[j] = 0
			}
		}
		if f.ArgAttrs[i].Has(AttrStep) {
			v[0] = t0
		}
		in[a.Name] = v
		args[i] = ir.NewDenseF64(a.Type, v)
	}
	res, err := evalFunc(f, args)
	if err != nil {
		t.Fatal(err)
	}
	out = map[string][]float64{}
	for i, r := range res {
		out[f.ResultAttrs[i].Str(AttrUpdate, "")] = r.Floats()
	}
	return in, out
}

func approxEq(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-14*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.17g, want %.17g", what, got, want)
	}
}

// One AdamW step against torch.optim.AdamW's formulas, computed here independently.
func TestOptimizerAdamW(t *testing.T) {
	const lr, b1, b2, eps, wd, M, step = 0.01, 0.8, 0.95, 1e-6, 0.1, 4, 3
	in, out := optimizerStep(t, "{lr=0.01,beta1=0.8,beta2=0.95,eps=1e-6,weight_decay=0.1}", step, false)
	for _, p := range []string{"w", "b"} {
		for i, p0 := range in[p] {
			g := in["d."+p][i] / M
			m := b1*in[p+".exp_avg"][i] + (1-b1)*g
			v := b2*in[p+".exp_avg_sq"][i] + (1-b2)*g*g
			mhat, vhat := m/(1-math.Pow(b1, step)), v/(1-math.Pow(b2, step))
			want := p0*(1-lr*wd) - lr*mhat/(math.Sqrt(vhat)+eps)
			approxEq(t, p+".exp_avg", out[p+".exp_avg"][i], m)
			approxEq(t, p+".exp_avg_sq", out[p+".exp_avg_sq"][i], v)
			approxEq(t, p, out[p][i], want)
		}
	}
	if len(out) != 6 {
		t.Errorf("results: %v", out)
	}
}

// SGD with momentum and weight decay against torch.optim.SGD, on a later step and on the
// first (zero buffer: the buffer becomes the gradient, PyTorch's clone).
func TestOptimizerSGD(t *testing.T) {
	const lr, mu, wd, M = 0.1, 0.5, 0.01, 4
	for _, first := range []bool{false, true} {
		in, out := optimizerStep(t, "{kind=sgd,lr=0.1,momentum=0.5,weight_decay=0.01}", 2, first)
		for _, p := range []string{"w", "b"} {
			for i, p0 := range in[p] {
				g := in["d."+p][i]/M + wd*p0
				buf := mu*in[p+".momentum_buffer"][i] + g
				if first && buf != g {
					t.Errorf("first step: buffer %v, want the gradient %v", buf, g)
				}
				approxEq(t, p+".momentum_buffer", out[p+".momentum_buffer"][i], buf)
				approxEq(t, p, out[p][i], p0-lr*buf)
			}
		}
	}
	// Plain SGD (momentum 0, PyTorch's default) keeps no state.
	for _, opts := range []string{"{kind=sgd}", "{kind=sgd,momentum=0}"} {
		if _, out := optimizerStep(t, opts, 1, false); len(out) != 2 {
			t.Errorf("%s results: %v", opts, out)
		}
	}
}

// The signature: argument and result attributes, fp32 gradients and state for a bf16 parameter.
func TestOptimizerSignature(t *testing.T) {
	m, err := ir.ParseAndVerify("in.ir", `func @forward(%x: bf16[2,3] {input}, %w: bf16[3] {param}) -> (bf16[] {loss}) {
  %h = mul %x, %w : bf16[2,3]
  %loss = reduce_sum %h : bf16[]
  return %loss
}
`)
	if err != nil {
		t.Fatal(err)
	}
	runGradPipeline(t, m, "autodiff,optimizer")
	got := m.Func(OptimizerFunc).String()
	want := `func @optimizer(%w: bf16[3] {param}, %d.w: f32[3] {grad = "w"}, %w.exp_avg: f32[3] {init = "zeros", state = "w.exp_avg"}, %w.exp_avg_sq: f32[3] {init = "zeros", state = "w.exp_avg_sq"}, %step: f32[] {step}) -> (bf16[3] {update = "w"}, f32[3] {update = "w.exp_avg"}, f32[3] {update = "w.exp_avg_sq"}) {`
	if !strings.HasPrefix(got, want) {
		t.Errorf("got\n%s\nwant the signature\n%s", got, want)
	}
	if !strings.Contains(got, "cast %w {to = f32}") || !strings.Contains(got, "{to = bf16} : bf16[3]") {
		t.Errorf("the bf16 parameter is not updated in f32:\n%s", got)
	}
}

func TestOptimizerErrors(t *testing.T) {
	for _, c := range []struct{ pipeline, want string }{
		{"optimizer{kind=adam}", `optimizer: unknown kind "adam" (want adamw or sgd)`},
		{"optimizer{lr=fast}", `optimizer: option lr="fast" is not a finite number`},
		{"optimizer{lr=nan}", `option lr="nan" is not a finite number`},
		{"optimizer{lr=-1}", "optimizer: lr must be >= 0, got -1"},
		{"optimizer{beta1=1}", "optimizer: beta1 must be in [0, 1), got 1"},
		{"optimizer{beta2=-0.5}", "optimizer: beta2 must be in [0, 1), got -0.5"},
		{"optimizer{eps=-1e-8}", "eps must be >= 0"},
		{"optimizer{weight_decay=-0.1}", "weight_decay must be >= 0"},
		{"optimizer{kind=sgd,momentum=-0.9}", "momentum must be >= 0"},
		{"optimizer{kind=sgd,beta1=0.9}", "option beta1 does not apply to kind=sgd"},
		{"optimizer{momentum=0.9}", "option momentum does not apply to kind=adamw"},
		{"optimizer{kind=sgd,lr=0.1,lr=0.2}", "pass optimizer: option lr given twice"},
		{"optimizer{kind=sgd,kind=adamw}", "pass optimizer: option kind given twice"},
		{"optimizer{kind=sgd,lr=1e39}", "option lr=1e39 is infinite in f32"},
		{"optimizer{eps=-1e39}", "option eps=-1e39 is infinite in f32"},
		{"optimizer{lr=1e-50}", "lr=1e-50 is 0 in f32"},
		{"optimizer{lr=1e30,weight_decay=1e10}", "lr·weight_decay = 1e+40 is infinite in f32"},
		{"optimizer{lr=1e38,beta1=0.9}", "the first step size lr/(1 − beta1) = 1e+39 is infinite in f32"},
		{"optimizer", "optimizer: the module has no @train function; run autodiff first"},
		{"autodiff,optimizer,optimizer", "the module already has an @optimizer function"},
	} {
		m, err := ir.ParseAndVerify("in.ir", optimizerModel)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := ParsePipeline(c.pipeline)
		if err == nil {
			err = Run(m, pl, Config{VerifyEach: true, ReproDir: t.TempDir()})
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.pipeline, err, c.want)
		}
	}
	// The same option errors without a module, for checking a command line up front.
	for spec, want := range map[string]string{
		"optimizer{kind=sgd,lr=0.5}": "",
		"optimizer{lr=fast}":         `option lr="fast" is not a finite number`,
		"optimizer{kind=lamb}":       `unknown kind "lamb"`,
	} {
		pl, err := ParsePipeline(spec)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckOptimizerOptions(pl[0].Options)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckOptimizerOptions(%s) = %v, want %q", spec, err, want)
		}
	}
	// The parser refuses microbatches = 0 in IR text; a module built in memory reaches the
	// verifier, and without it the pass.
	if _, err := ir.Parse("in.ir", strings.Replace(optimizerModel, "microbatches = 4", "microbatches = 0", 1)); err == nil ||
		!strings.Contains(err.Error(), "in.ir:1:23: module attribute microbatches must be a positive integer, got 0") {
		t.Errorf("microbatches = 0 parsed: %v", err)
	}
	for _, verify := range []bool{true, false} {
		m, err := ir.ParseAndVerify("in.ir", optimizerModel)
		if err != nil {
			t.Fatal(err)
		}
		m.Attrs = m.Attrs.Set(AttrMicrobatches, ir.Int(0))
		pl, _ := ParsePipeline("autodiff,optimizer")
		if err := Run(m, pl, Config{VerifyEach: verify, ReproDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "microbatches must be a positive integer, got 0") {
			t.Errorf("microbatches = 0 (verify %v): got %v", verify, err)
		}
	}
}

// TestScheduledLR: the schedules against values worked out by hand (Megatron-LM's warmup then
// decay to min_lr at decay_steps, flat after), and their option errors.
func TestScheduledLR(t *testing.T) {
	cases := []struct {
		opts Options
		want []float64 // steps 1, 2, …
	}{
		{Options{"lr": "0.1"}, []float64{0.1, 0.1, 0.1}},
		{Options{"lr": "0.1", "warmup": "4"}, []float64{0.025, 0.05, 0.075, 0.1, 0.1}},
		// Linear: warmup 2, then from 0.1 at step 2 to 0.02 at step 6.
		{Options{"lr": "0.1", "schedule": "linear", "warmup": "2", "decay_steps": "6", "min_lr": "0.02"}, []float64{0.05, 0.1, 0.08, 0.06, 0.04, 0.02, 0.02}},
		// Cosine, no warmup: 0.1 at step 0, ½(1 + cos(π/2)) = ½ at step 2, min_lr from step 4.
		{Options{"lr": "0.1", "schedule": "cosine", "decay_steps": "4"}, []float64{0.1 * 0.5 * (1 + math.Cos(math.Pi/4)), 0.05, 0.1 * 0.5 * (1 + math.Cos(3*math.Pi/4)), 0, 0}},
	}
	for _, c := range cases {
		for i, want := range c.want {
			got, err := ScheduledLR(c.opts, i+1)
			if err != nil || math.Abs(got-want) > 1e-15 {
				t.Errorf("%v step %d: %v (%v), want %v", c.opts, i+1, got, err, want)
			}
		}
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{"schedule": "step"}, "unknown schedule"},
		{Options{"schedule": "cosine", "warmup": "4"}, "the cosine schedule needs decay_steps"},
		{Options{"schedule": "linear", "warmup": "4", "decay_steps": "4"}, "greater than warmup=4"},
		{Options{"warmup": "-1"}, "not a non-negative number of steps"},
		{Options{"lr": "0.1", "schedule": "cosine", "decay_steps": "9", "min_lr": "0.2"}, "must be a number in [0, lr=0.1]"},
		{Options{"decay_steps": "9"}, "apply to the linear and cosine schedules"},
	} {
		if err := CheckOptimizerOptions(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.opts, err, c.want)
		}
	}
}
