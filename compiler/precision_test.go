package compiler

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/data"
)

// TestMixedPrecisionGradient: one step of sgd{lr=1} moves every parameter — the fp32 main
// parameter under mixed precision — by its gradient, so the bf16 and fp16 plans' gradients
// can be compared with fp32's. Over the whole model they
// agree in direction (cosine ≥ 0.9999; bf16 gives 0.99999) and length (within 0.1%). Single
// elements may differ completely where the exact gradient is 0 and only rounding is left (the
// attention key biases: softmax does not change when a constant is added to every score),
// which is why the comparison is over the model and not element by element.
func TestMixedPrecisionGradient(t *testing.T) {
	grads := map[string]map[string][]float64{}
	for _, prec := range []string{"fp32", "bf16", "fp16"} {
		_, job := initJob(t, gptPPM, Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2, Optimizer: "sgd{lr=1}", Precision: prec}, 1)
		before := map[string][]float64{}
		for n, b := range must(job.Weights()) {
			before[n] = data.Float64s(b)
		}
		if _, err := job.Step(runtime.Options{Seed: 1}); err != nil {
			t.Fatal(err)
		}
		g := map[string][]float64{}
		for n, b := range must(job.Weights()) {
			g[n] = data.Float64s(b)
			for i := range g[n] {
				g[n][i] = before[n][i] - g[n][i]
			}
		}
		grads[prec] = g
	}
	for _, prec := range []string{"bf16", "fp16"} {
		var dot, n32, nlow float64
		for name, a := range grads["fp32"] {
			b := grads[prec][name]
			for i := range a {
				dot, n32, nlow = dot+a[i]*b[i], n32+a[i]*a[i], nlow+b[i]*b[i]
			}
		}
		cos, ratio := dot/math.Sqrt(n32*nlow), math.Sqrt(nlow/n32)
		t.Logf("%s: cosine %.7f, norm ratio %.6f", prec, cos, ratio)
		if cos < 0.9999 || math.Abs(ratio-1) > 1e-3 {
			t.Errorf("%s gradient: cosine %.7f with fp32's (want ≥ 0.9999), norm ratio %.6f (want within 0.1%% of 1)", prec, cos, ratio)
		}
	}
}

// TestBF16ActivationBytes: the bf16 plan's forward activations take half the fp32 plan's
// bytes, plus the one f32 tensor mixed precision adds — the logits cast back to f32 for the
// loss (8·32·512·4 bytes per micro-batch of tiny GPT) — and the half of the attention
// log-sum-exp that stays f32. The slack is the arena's 64-byte
// alignment, which rounds each buffer's size up by less than 64 bytes in either plan: at
// most 64 bytes per forward buffer live at once (maxLiveForward).
func TestBF16ActivationBytes(t *testing.T) {
	plans := map[string]*Result{}
	for _, prec := range []string{"fp32", "bf16"} {
		res, err := Compile(gptPPM, Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2, Precision: prec})
		if err != nil {
			t.Fatal(err)
		}
		plans[prec] = res
	}
	f32, bf16 := plans["fp32"].Output.Plan.Programs[0], plans["bf16"].Output.Plan.Programs[0]
	if got := plans["bf16"].Output.Plan.Precision; got != "bf16" {
		t.Errorf("plan.json precision = %q, want bf16", got)
	}
	logits := int64(8 * 32 * 512 * 4) // [micro-batch, seq, vocab] f32, one micro-batch in flight
	// Fused attention's log-sum-exp is f32 in both plans ([micro-batch, heads, seq, 1] per
	// layer, kept for the backward): it does not halve.
	lse := int64(8 * (8 * 4 * 32 * 4))
	want := f32.ActivationBytes/2 + logits + lse/2
	slack := 64 * int64(max(maxLiveForward(plans["bf16"].Output.Programs[0]), maxLiveForward(plans["fp32"].Output.Programs[0])))
	t.Logf("activations: fp32 %d B, bf16 %d B (fp32/2 + f32 logits + lse/2 = %d B, slack %d B)", f32.ActivationBytes, bf16.ActivationBytes, want, slack)
	if d := bf16.ActivationBytes - want; d < -slack || d > slack {
		t.Errorf("bf16 activations %d B, want fp32's %d B / 2 + %d B of f32 logits + %d B / 2 of f32 log-sum-exp = %d B (± %d B of alignment)", bf16.ActivationBytes, f32.ActivationBytes, logits, lse, want, slack)
	}
	// Megatron's recipe: bf16 parameters (half fp32's), fp32 gradient accumulators, and the
	// optimizer's state plus the fp32 main parameters.
	if bf16.ParamBytes != f32.ParamBytes/2 || bf16.GradBytes != f32.GradBytes || bf16.StateBytes != f32.StateBytes+f32.ParamBytes {
		t.Errorf("bf16 params/grads/state %d/%d/%d B, fp32 %d/%d/%d B: want half the params, the same grads, the state + fp32 main params",
			bf16.ParamBytes, bf16.GradBytes, bf16.StateBytes, f32.ParamBytes, f32.GradBytes, f32.StateBytes)
	}
}

// maxLiveForward is the most arena buffers created by forward (F) actions that a program
// holds at once: each lives from the first to the last instruction touching it.
func maxLiveForward(p *pb.Program) int {
	first, last := map[int32]int{}, map[int32]int{}
	fwd := map[int32]bool{}
	inF := false
	for n, in := range p.Instrs {
		if in.Kind == pb.Instr_BEGIN || in.Kind == pb.Instr_END {
			inF = in.Kind == pb.Instr_BEGIN && in.Label == "F"
		}
		for _, id := range append(append([]int32{}, in.In...), in.Out...) {
			if r := p.Buffers[id].Role; r != pb.Role_ACTIVATION && r != pb.Role_INPUT {
				continue
			}
			if _, ok := first[id]; !ok {
				first[id], fwd[id] = n, inF
			}
			last[id] = n
		}
	}
	live := make([]int, len(p.Instrs)+1)
	for id := range first {
		if fwd[id] {
			live[first[id]]++
			live[last[id]+1]--
		}
	}
	most, cur := 0, 0
	for _, d := range live {
		cur += d
		most = max(most, cur)
	}
	return most
}

// TestBF16PipelineTensorParallel: bf16 at --pp 2 --tp 2 trains as bf16 on one device within
// bf16's rounding. Tensor parallelism rounds at other points than one device does — each
// rank's partial product is rounded to bf16 before the all-reduce sums the partials (in f32,
// rounded once), where one device rounds the whole contraction once — so results agree to
// bf16's unit roundoff 2^−8 ≈ 0.4%, not bitwise. Measured: the losses of 4 steps agree to
// 2e-5 relative (they average over 256 tokens), the parameters' updates θ₄ − θ₀ to 0.38% in
// norm over the model. The test allows 1e-4 and 1%. SGD with momentum rather than AdamW:
// AdamW turns a gradient that is rounding noise only (the key biases') into full-size steps
// whose signs the layouts need not share.
func TestBF16PipelineTensorParallel(t *testing.T) {
	base := Options{Load: LoadOptions{Preset: "tiny"}, Microbatches: 2, Optimizer: sgdM, Precision: "bf16"}
	_, _, init := spmdRun(t, gptPPM, base, 0, "")
	refL, _, ref := spmdRun(t, gptPPM, base, 4, "")
	o := base
	o.PP, o.TP = 2, 2
	gotL, _, got := spmdRun(t, gptPPM, o, 4, "")
	for i := range refL {
		if d := math.Abs(gotL[i]-refL[i]) / refL[i]; d > 1e-4 {
			t.Errorf("step %d: loss %.7f at pp 2 × tp 2, %.7f on one device (relative difference %.2g > 1e-4)", i+1, gotL[i], refL[i], d)
		}
	}
	var diff, update float64
	for name, r := range ref {
		if strings.HasSuffix(name, ".momentum_buffer") {
			continue
		}
		g := got[name]
		if len(g) != len(r) {
			t.Fatalf("%s: %d elements at pp 2 × tp 2, %d on one device", name, len(g), len(r))
		}
		for i := range r {
			diff += (g[i] - r[i]) * (g[i] - r[i])
			update += (r[i] - init[name][i]) * (r[i] - init[name][i])
		}
	}
	rel := math.Sqrt(diff / update)
	t.Logf("losses %v vs %v; updates differ by %.3g in norm", gotL, refL, rel)
	if rel > 0.01 {
		t.Errorf("the parameters' updates differ by %.3g of their norm between pp 2 × tp 2 and one device (want ≤ 1%%)", rel)
	}
}

// ampModel overflows in f16 on its first pipeline stage only (see its comment).
const ampModel = "../testdata/ir/amp.ir"

// rankTensors copies every parameter and state buffer of every rank, by rank and name.
func rankTensors(job *runtime.Job) map[string][]float64 {
	out := map[string][]float64{}
	for _, r := range job.Ranks {
		for i, b := range r.Prog.Buffers {
			if b.Role == pb.Role_PARAM || b.Role == pb.Role_STATE {
				out[b.Name+"@"+string(rune('0'+r.Index))] = data.Float64s(r.Bufs[i])
			}
		}
	}
	return out
}

// TestFP16OverflowSkipsEveryRank: at --pp 2 --dp 2, an overflow in pipeline rank 0's
// gradients only skips the step on all four ranks — no parameter and no optimizer state
// changes anywhere, rank 1's included — reports it (metric overflow = 1) and halves the loss
// scale on every rank; once the scale is small enough, steps apply again on every rank with
// the scale kept. A checkpoint carries the scale: resuming after the skips continues bit for
// bit as the run that did not stop.
func TestFP16OverflowSkipsEveryRank(t *testing.T) {
	model := ampModel
	opts := Options{PP: 2, DP: 2, Optimizer: "adamw{lr=1e-3}", Precision: "fp16"}
	res, job := initJob(t, model, opts, 3)
	if !strings.Contains(strings.Join(res.Output.Plan.Params[0].State, ","), "exp_avg") {
		t.Fatalf("plan params: %+v", res.Output.Plan.Params)
	}
	skipped, applied := 0, 0
	scale := 65536.0
	var saveDir string
	var atSave map[string][]float64
	for step := 1; step <= 14; step++ {
		before := rankTensors(job)
		r, err := job.Step(runtime.Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		after := rankTensors(job)
		if math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) {
			t.Fatalf("step %d: loss %v", step, r.Loss)
		}
		if r.Metrics[passes.MetricLossScale] != scale {
			t.Fatalf("step %d: loss_scale metric %v, want %v (metrics %v)", step, r.Metrics[passes.MetricLossScale], scale, r.Metrics)
		}
		changed := func(what string) []string {
			var out []string
			for k, v := range after {
				if strings.HasPrefix(k, passes.ScalerPrefix) != (what == "scaler") {
					continue
				}
				for i := range v {
					if v[i] != before[k][i] {
						out = append(out, k)
						break
					}
				}
			}
			return out
		}
		scales := 0
		for k, v := range after {
			if strings.HasPrefix(k, passes.ScalerScale+"@") {
				scales++
				want := scale
				if r.Metrics[passes.MetricOverflow] == 1 {
					want = scale / 2
				}
				if v[0] != want {
					t.Fatalf("step %d: %s = %v, want %v", step, k, v[0], want)
				}
			}
		}
		if scales != 4 {
			t.Fatalf("step %d: %d ranks hold the loss scale, want all 4", step, scales)
		}
		switch r.Metrics[passes.MetricOverflow] {
		case 1:
			skipped++
			if c := changed("model"); len(c) > 0 {
				t.Fatalf("step %d was skipped (overflow) but changed %v", step, c)
			}
			scale /= 2
		case 0:
			applied++
			// Every parameter on every rank moves (the optimizer state too).
			var still []string
			for k, v := range after {
				if strings.HasPrefix(k, passes.ScalerPrefix) || strings.Contains(k, "growth") {
					continue
				}
				same := true
				for i := range v {
					same = same && v[i] == before[k][i]
				}
				if same {
					still = append(still, k)
				}
			}
			if len(still) > 0 {
				t.Fatalf("step %d applied, but %v did not change", step, still)
			}
		default:
			t.Fatalf("step %d: overflow metric %v", step, r.Metrics)
		}
		if step == 10 {
			saveDir = t.TempDir()
			if err := job.Save(saveDir, 3); err != nil {
				t.Fatal(err)
			}
		}
		if step == 14 {
			atSave = after
		}
	}
	t.Logf("%d steps skipped, %d applied, loss scale now %v", skipped, applied, scale)
	if skipped < 5 || applied < 2 {
		t.Fatalf("%d steps skipped and %d applied; the model should overflow for the first steps and then train", skipped, applied)
	}
	// AdamW's bias correction counts the applied steps only, on every rank, as torch.optim's
	// state["step"] does when GradScaler skips optimizer.step().
	counts := 0
	for k, v := range rankTensors(job) {
		if strings.HasPrefix(k, passes.ScalerOptimizerStep+"@") {
			counts++
			if v[0] != float64(applied) {
				t.Errorf("%s = %v after %d applied steps of 14", k, v[0], applied)
			}
		}
	}
	if counts != 4 {
		t.Errorf("%d ranks hold AdamW's step count, want all 4", counts)
	}
	// Resume from step 10 and run to 14: the same bits, scaler state included.
	_, job2 := initJob(t, model, opts, 3)
	if _, err := job2.Resume(saveDir, false); err != nil {
		t.Fatal(err)
	}
	for step := 11; step <= 14; step++ {
		if _, err := job2.Step(runtime.Options{Seed: 3}); err != nil {
			t.Fatal(err)
		}
	}
	for k, want := range atSave {
		got := rankTensors(job2)[k]
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("resumed at step 10: %s[%d] = %v after step 14, the uninterrupted run %v", k, i, got[i], want[i])
			}
		}
	}
	// The checkpoint holds the scaler's state once, as optimizer state.
	idx, err := os.ReadFile(filepath.Join(saveDir, "checkpoint.json"))
	if err != nil || !strings.Contains(string(idx), `"`+passes.ScalerScale+`"`) || !strings.Contains(string(idx), passes.ScalerGrowth) {
		t.Errorf("the checkpoint index does not list the loss scaler's state: %v\n%s", err, idx)
	}
}

// TestPrecisionInPlan: plan.json records the compute dtype; an fp32 plan records none (and
// its pipeline has neither pass).
func TestPrecisionInPlan(t *testing.T) {
	for prec, want := range map[string]string{"fp32": "", "": "", "bf16": "bf16", "fp16": "f16"} {
		res, err := Compile(ampModel, Options{Precision: prec})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := res.Write(dir); err != nil {
			t.Fatal(err)
		}
		plan, err := codegen.ReadPlan(dir)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(plan)
		if plan.Precision != want || (want == "") == strings.Contains(string(raw), `"precision"`) {
			t.Errorf("--precision %q: plan.json precision %q, want %q", prec, plan.Precision, want)
		}
	}
	if _, err := Compile(ampModel, Options{Precision: "fp8"}); err == nil || !strings.Contains(err.Error(), `unknown precision "fp8"`) {
		t.Errorf("--precision fp8: %v", err)
	}
}
