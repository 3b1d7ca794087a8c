package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
)

// compileWithSummary compiles a model into a temporary plan directory and returns the summary it printed.
func compileWithSummary(t *testing.T, args ...string) (dir, stdout string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "plan")
	code, stdout, stderr := ppc(t, "", append(append([]string{"compile"}, args...), "-o", dir)...)
	if code != 0 {
		t.Fatalf("compile %v: %d %s", args, code, stderr)
	}
	return dir, stdout
}

func readPlan(t *testing.T, dir string) *codegen.Plan {
	t.Helper()
	p, err := codegen.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A compiled plan's costs are seconds: its trace spans the simulated step in real
// microseconds (it was 1000× too short), its SVG ticks read in µs (they all read 0) and its
// footer names the cost model and device profile (it read "F=1,I=1,W=1").
func TestSimulatePlanTimes(t *testing.T) {
	plan, _ := compileWithSummary(t, gpt, "--preset", "tiny", "--pp", "2", "--microbatches", "4")
	dir := t.TempDir()
	trace, svg := filepath.Join(dir, "t.json"), filepath.Join(dir, "t.svg")
	code, stdout, stderr := ppc(t, "", "simulate", plan, "--json", "--trace", trace, "--svg", svg)
	if code != 0 {
		t.Fatalf("simulate: %d %s", code, stderr)
	}
	var res struct {
		StepTime   float64 `json:"step_time"`
		Unit       string  `json:"time_unit"`
		CostSource string  `json:"cost_source"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	source := "cost model, device profile a100-like, per-stage estimates from plan.json"
	if res.Unit != "s" || res.CostSource != source || !(res.StepTime > 1e-6 && res.StepTime < 1) {
		t.Fatalf("simulate --json: unit %q, source %q, step %v s", res.Unit, res.CostSource, res.StepTime)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Ph  string  `json:"ph"`
			Ts  float64 `json:"ts"`
			Dur float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			lo, hi = min(lo, e.Ts), max(hi, e.Ts+e.Dur)
		}
	}
	if want := res.StepTime * 1e6; math.Abs((hi-lo)-want) > 1e-6*want {
		t.Errorf("the trace spans %v µs, the simulated step is %v µs", hi-lo, want)
	}
	b, err = os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	ticks := regexp.MustCompile(`<text class="tick"[^>]*>([^<]*)</text>`).FindAllStringSubmatch(string(b), -1)
	if len(ticks) < 3 {
		t.Fatalf("SVG ticks: %v", ticks)
	}
	for i, m := range ticks[1:] {
		v, unit, _ := strings.Cut(m[1], " ")
		if f, err := strconv.ParseFloat(v, 64); err != nil || f <= 0 || unit != "µs" {
			t.Errorf("tick %d reads %q, want a positive number of µs", i+1, m[1])
		}
	}
	if !strings.Contains(string(b), "costs: "+source+"</text>") || !strings.Contains(string(b), "time (µs)") {
		t.Errorf("SVG lacks the unit or the footer naming the costs")
	}
	// The text report uses the same units; --cost replaces the plan's costs with unit ones.
	code, stdout, _ = ppc(t, "", "simulate", plan)
	if code != 0 || !regexp.MustCompile(`step time +\d+(\.\d+)? µs\n`).MatchString(stdout) || !strings.Contains(stdout, "costs: "+source) {
		t.Errorf("simulate: %d\n%s", code, stdout)
	}
	code, stdout, _ = ppc(t, "", "simulate", plan, "--cost", "F=1,I=1,W=1", "--svg", svg)
	b, _ = os.ReadFile(svg)
	if code != 0 || !strings.Contains(stdout, "costs: F=1,I=1,W=1,comm=0 (units)") || !strings.Contains(string(b), "costs: F=1,I=1,W=1,comm=0 (units)</text>") ||
		!strings.Contains(string(b), "time (units)") {
		t.Errorf("simulate --cost: %d\n%s", code, stdout)
	}
}

// The compile summary names the device profile its estimate assumes, rounds durations to
// three significant digits, and keeps the bubble to the schedule's: 1F1B at p=2, m=4 idles
// (p−1)/m = 25% of the ideal time, where the summary said 1875% by counting the link latency
// of a tiny model as bubble.
func TestCompileSummaryEstimate(t *testing.T) {
	dir, out := compileWithSummary(t, mlp, "--pp", "2", "--microbatches", "4")
	want := "  estimate     for device profile a100-like (300 TFLOP/s matmul, 2 TB/s memory, links 50 GB/s + 10 µs), by the cost model:\n"
	if !strings.Contains(out, want) {
		t.Fatalf("summary lacks %q:\n%s", want, out)
	}
	line := regexp.MustCompile(`step (\S+) (\S+) = ideal (\S+) (\S+) \(the busiest rank's compute\) \+ bubble (\S+) (\S+) \(([\d.]+)% of ideal\) \+ transfers not hidden (\S+) (\S+)\n`).FindStringSubmatch(out)
	if line == nil {
		t.Fatalf("no estimate line:\n%s", out)
	}
	var secs []float64
	for _, i := range []int{1, 3, 5, 8} { // step, ideal, bubble, transfers: value and unit
		v, unit := line[i], line[i+1]
		if digits := strings.TrimLeft(strings.ReplaceAll(v, ".", ""), "0"); len(digits) > 3 {
			t.Errorf("%s %s: more than three significant digits", v, unit)
		}
		scale := map[string]float64{"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1}[unit]
		f, err := strconv.ParseFloat(v, 64)
		if scale == 0 || err != nil {
			t.Fatalf("%q %q is not a duration", v, unit)
		}
		secs = append(secs, f*scale)
	}
	if pct, _ := strconv.ParseFloat(line[7], 64); pct < 15 || pct > 30 {
		t.Errorf("bubble %v%% of ideal, want about (p−1)/m = 25%%", pct)
	}
	p := readPlan(t, dir)
	e := p.Estimate
	if p.Device == nil || p.Device.Name != "a100-like" || e == nil {
		t.Fatalf("plan.json: device %+v, estimate %+v", p.Device, e)
	}
	if math.Abs(e.IdealSeconds+e.BubbleSeconds+e.CommSeconds-e.StepSeconds) > 1e-9*e.StepSeconds || e.BubbleRatio > 0.3 || e.CommSeconds <= 0 {
		t.Errorf("plan.json estimate %+v: want step = ideal + bubble + comm, bubble ratio about 0.25", e)
	}
	for i, v := range []float64{e.StepSeconds, e.IdealSeconds, e.BubbleSeconds, e.CommSeconds} {
		if math.Abs(secs[i]-v) > 0.005*v {
			t.Errorf("summary figure %d is %v s, plan.json says %v", i, secs[i], v)
		}
	}
}

// The memory breakdown adds up to the peak, with the optimizer's and backward's temporaries
// as workspace rather than activations, and the stage table explains a weight tied across
// ranks (GPT's embedding and output head) instead of silently counting it twice.
func TestCompileSummaryMemory(t *testing.T) {
	dir, out := compileWithSummary(t, gpt, "--preset", "tiny", "--pp", "4", "--microbatches", "4")
	p := readPlan(t, dir)
	re := regexp.MustCompile(`rank \d+ +peak \S+ \S+ = params \S+ \S+ \+ grads \S+ \S+ \+ optimizer \S+ \S+ \+ activations \S+ \S+ \+ workspace \S+ \S+ \+ constants \S+ B; \d+ instructions\n`)
	if n := len(re.FindAllString(out, -1)); n != 4 {
		t.Errorf("%d rank lines with the full breakdown, want 4:\n%s", n, out)
	}
	for _, want := range []string{
		"tied: wte (32,768) is used by stages 0 and 3 and held on ranks 0 and 3, counted in each\n",
		"params column: 467,584 = 434,816 parameters + 32,768 held on more than one rank\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	var column int64
	for _, s := range p.StageInfo {
		column += s.Params
	}
	if column != 434816+32768 {
		t.Errorf("params column sums to %d", column)
	}
	// On a V-shaped placement the first and last stages share rank 0: wte is held once.
	dir, out = compileWithSummary(t, gpt, "--preset", "tiny", "--pp", "2", "--microbatches", "4", "--schedule", "zbv")
	p = readPlan(t, dir)
	column = 0
	for _, s := range p.StageInfo {
		column += s.Params
	}
	if column != 434816 || !strings.Contains(out, "tied: wte (32,768) is used by stages 0 and 3, held once on rank 0\n") || strings.Contains(out, "params column") {
		t.Errorf("zbv: params column %d, summary:\n%s", column, out)
	}
}

// With one micro-batch the pipeline time does not depend on the split. The automatic
// partition used to let the cheapest cut decide, which put nearly all the work of a model
// whose activations shrink layer by layer on stage 0 (15.9 MFLOP, then 528k, 264k and 132k):
// now memory decides, every stage gets a real share, and the summary says why.
func TestAutoPartitionOneMicrobatch(t *testing.T) {
	model := writeFile(t, "merge.ppm", `model merge
config {
  batch = 4
  seq = 128
  d = 64
  n_layers = 7
}
input x: f32[batch, seq, 2 * d]
label y: i64[batch] in [0, 2 * d)
// Each layer halves the sequence into the features, like patch merging: the same
// parameters per layer, half the activations of the layer before.
block merge(h, s) {
  param w: f32[2 * d, d] = normal(0.05)
  return reshape(relu(h @ w), [batch, s / 2, 2 * d])
}
forward {
  h = x
  s = seq
  repeat n_layers as i {
    h = merge(h, s) as layers[i]
    s = s / 2
  }
  loss cross_entropy(reshape(h, [batch, 2 * d]), y)
}
`)
	dir, out := compileWithSummary(t, model, "--pp", "4", "--microbatches", "1", "--schedule", "gpipe", "--partition", "auto")
	if !strings.Contains(out, "  note: with 1 micro-batch the pipeline time does not depend on the split; stages balanced by memory\n") {
		t.Errorf("no note:\n%s", out)
	}
	p := readPlan(t, dir)
	var total float64
	for _, s := range p.StageInfo {
		total += s.FLOPs
	}
	for _, s := range p.StageInfo {
		if share := s.FLOPs / total; share < 0.05 || share > 0.6 {
			t.Errorf("stage %d (%s) does %.1f%% of the work, want 5–60%%:\n%s", s.Stage, s.Layers, 100*share, out)
		}
	}
	if p.PartitionNote == "" {
		t.Errorf("plan.json has no partition note")
	}
	// With enough micro-batches time decides, and there is nothing to explain.
	_, out = compileWithSummary(t, model, "--pp", "4", "--microbatches", "4", "--partition", "auto")
	if strings.Contains(out, "note:") {
		t.Errorf("a note with 4 micro-batches:\n%s", out)
	}
}

// TestStageTableImbalance: the imbalance column is computed from the cost the table shows,
// the time/mb column. Two stages of 384 MFLOP and 1.07 GFLOP whose memory-bound ops take the
// same time are balanced (±0.0%, with equal times shown); a stage of three times another's
// time is +50% against -50%, whatever their FLOPs.
func TestStageTableImbalance(t *testing.T) {
	plan := func(a, b codegen.StageInfo) *codegen.Plan {
		a.Stage, b.Stage, b.Rank = 0, 1, 1
		return &codegen.Plan{Training: true, Microbatches: 2, Mesh: codegen.Mesh{PP: 2, DP: 1, TP: 1}, Stages: 2, World: 2,
			StageInfo: []codegen.StageInfo{a, b}}
	}
	row := regexp.MustCompile(`(?m)^  (\d) .* (\S+ [nµm]?s) +([-+][\d.]+)%$`)
	for _, c := range []struct {
		plan *codegen.Plan
		want []string // per stage: time/mb, imbalance
	}{
		{plan(codegen.StageInfo{FLOPs: 384e6, F: 1e-3, I: 1e-3, W: 0.5e-3}, codegen.StageInfo{FLOPs: 1.07e9, F: 1.5e-3, I: 1e-3}),
			[]string{"2.5 ms", "+0.0", "2.5 ms", "+0.0"}},
		{plan(codegen.StageInfo{FLOPs: 1.07e9, F: 1e-3}, codegen.StageInfo{FLOPs: 384e6, F: 1e-3, I: 1e-3, W: 1e-3}),
			[]string{"1 ms", "-50.0", "3 ms", "+50.0"}},
	} {
		var b strings.Builder
		printStages(&b, c.plan, 0)
		out := b.String()
		m := row.FindAllStringSubmatch(out, -1)
		if len(m) != 2 || !strings.Contains(out, "time/mb  imbalance\n") {
			t.Fatalf("stage table:\n%s", out)
		}
		for s, r := range m {
			if r[2] != c.want[2*s] || r[3] != c.want[2*s+1] {
				t.Errorf("stage %d: time/mb %q, imbalance %s%%, want %s and %s%%\n%s", s, r[2], r[3], c.want[2*s], c.want[2*s+1], out)
			}
		}
	}
}
