package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/schedule"
)

// Ring collectives over 2 ranks on the a100-like profile, by hand: an all-reduce of B bytes
// moves 2·(1/2)·B through each rank's link in 2 steps, an all-gather or reduce-scatter (B the
// whole tensor) (1/2)·B in 1 step; tp inside a node, dp between nodes.
func ring2(kind string, bytes float64, intra bool) float64 {
	d := passes.A100Like
	bw, lat := d.InterNodeBandwidth, d.InterNodeLatency
	if intra {
		bw, lat = d.IntraNodeBandwidth, d.IntraNodeLatency
	}
	if kind == "all_reduce" {
		return bytes/bw + 2*lat
	}
	return bytes/(2*bw) + lat
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b)) }

type traceFile struct {
	TraceEvents []struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
}

func readTrace(t *testing.T, path string) traceFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr traceFile
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	return tr
}

// The tensor-parallel MLP (testdata/ir/tp-mlp.ir, per rank for tp = 2) at --pp 2: each
// stage's collective time in plan.json is its collectives' ring times, computed here by hand
// from the IR; the summary's stage table has a "tp comm/mb" column; `ppc simulate --trace`
// nests a span of exactly that time at the end of every action, and the SVG draws a band in
// every cell. The same model on one device (tp-mlp-ref.ir) shows none of it.
func TestTensorParallelCollectiveReports(t *testing.T) {
	dir, out := compileWithSummary(t, tpMLP, "--tp", "2", "--pp", "2", "--microbatches", "2")
	p := readPlan(t, dir)
	const act, logits, bias = 8 * 16 * 4, 8 * 8 * 4, 16 * 4 // bytes of f32[8,16], f32[8,8], f32[16]
	ar := func(b float64) float64 { return ring2("all_reduce", b, true) }
	half := func(b float64) float64 { return ring2("all_gather", b, true) } // = reduce-scatter
	want := [2][3]float64{
		// Stage 0: the all_reduce of %p; copy_to_axis %h0's conjugate all-reduce.
		{ar(act), ar(act), 0},
		// Stage 1: reduce_scatter %p2, all_gather %sb, all_reduce %logits; the conjugates of
		// copy_to_axis %r, the reduce_scatter and the all_gather. The parameter %b3's
		// copy_to_axis conjugate is summed once per step after the last W, not in every W.
		{half(act) + half(act) + ar(logits), ar(act) + half(act) + half(act), 0},
	}
	if st := p.StageInfo; len(st) == 2 && (!near(st[1].TPReduce, ar(bias)) || st[0].TPReduce != 0) {
		t.Errorf("tp gradient reductions per step %v and %v, want 0 and %v (the bias %%b3's)", st[0].TPReduce, st[1].TPReduce, ar(bias))
	}
	if len(p.StageInfo) != 2 {
		t.Fatalf("%d stages", len(p.StageInfo))
	}
	for s, st := range p.StageInfo {
		got := [3]float64{st.FComm, st.IComm, st.WComm}
		for k := range got {
			if !near(got[k], want[s][k]) {
				t.Errorf("stage %d: collective part of F, I, W %v s, want %v", s, got, want[s])
				break
			}
		}
		if st.FComm > st.F || st.IComm > st.I || st.WComm > st.W || st.TPComm() == 0 {
			t.Errorf("stage %d: collectives %v of F %v I %v W %v", s, got, st.F, st.I, st.W)
		}
		// The table shows their sum per micro-batch.
		row := regexp.MustCompile(`(?m)^  ` + string(rune('0'+s)) + ` .* ` + regexp.QuoteMeta(schedule.Seconds.Format(st.TPComm())) + ` +` +
			regexp.QuoteMeta(schedule.Seconds.Format(st.StepComm(p.Microbatches))) + ` +` +
			regexp.QuoteMeta(schedule.Seconds.Format(st.F+st.I+st.W)) + ` +[-+][\d.]+%$`)
		if !row.MatchString(out) {
			t.Errorf("stage %d's row lacks tp comm/mb %s:\n%s", s, schedule.Seconds.Format(st.TPComm()), out)
		}
	}
	if !regexp.MustCompile(`stash/mb +tp comm/mb +comm/step +time/mb +imbalance\n`).MatchString(out) || !strings.Contains(out, " + collectives ") {
		t.Errorf("summary lacks the tp comm/mb column or the collectives in the estimate:\n%s", out)
	}
	if e := p.Estimate; e == nil || e.CollectiveSeconds <= 0 ||
		math.Abs(e.IdealSeconds+e.BubbleSeconds+e.CollectiveSeconds+e.CommSeconds-e.StepSeconds) > 1e-9*e.StepSeconds {
		t.Errorf("estimate %+v: want collectives > 0 and step = ideal + bubble + collectives + comm", e)
	}
	// The ideal time is compute only: 1F1B's busiest rank runs M forwards and backwards.
	if e := p.Estimate; e != nil {
		var ideal float64
		for _, st := range p.StageInfo {
			ideal = max(ideal, 2*(st.F+st.I+st.W-st.TPComm()))
		}
		if !near(e.IdealSeconds, ideal) && math.Abs(e.IdealSeconds-ideal) > 1e-15 {
			t.Errorf("ideal %v s, want the busiest rank's compute without collectives %v s", e.IdealSeconds, ideal)
		}
	}

	tdir := t.TempDir()
	trace, svg := filepath.Join(tdir, "t.json"), filepath.Join(tdir, "t.svg")
	if code, stdout, stderr := ppc(t, "", "simulate", dir, "--trace", trace, "--svg", svg); code != 0 || !strings.Contains(stdout, "  collectives   ") {
		t.Fatalf("simulate: %d %s\n%s", code, stderr, stdout)
	}
	tr := readTrace(t, trace)
	type span struct{ ts, end float64 }
	actions := map[string]span{}
	for _, e := range tr.TraceEvents {
		if a, ok := e.Args["action"].(string); ok && e.Ph == "X" && e.Cat != "collective" {
			actions[a] = span{e.Ts, e.Ts + e.Dur}
		}
	}
	spans, gradSpans := 0, 0
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" || e.Cat != "collective" {
			continue
		}
		a, ok := e.Args["action"].(string) // e.g. 1B0: stage 1, full backward (I and W)
		if !ok {
			// The step-level gradient all-reduce over tp of the whole bias %b3 (stage 1),
			// summed once after the last W.
			if !strings.HasPrefix(e.Name, "gradient all-reduce s1") || math.Abs(e.Dur-p.StageInfo[1].TPReduce*1e6) > 1e-6 {
				t.Errorf("unexpected step-level collective %q (%v µs); stage 1's tp gradient reduce is %v s", e.Name, e.Dur, p.StageInfo[1].TPReduce)
			}
			gradSpans++
			continue
		}
		spans++
		st := p.StageInfo[a[0]-'0']
		want := map[byte]float64{'F': st.FComm, 'B': st.IComm + st.WComm}[a[1]] * 1e6
		pa := actions[a]
		if math.Abs(e.Dur-want) > 1e-9*want || math.Abs(e.Ts+e.Dur-pa.end) > 1e-9*pa.end || e.Ts < pa.ts ||
			e.Name != "tp collectives "+schedule.Seconds.Format(want/1e6) {
			t.Errorf("%s: %q [%v µs + %v], action [%v, %v]; want %v µs at its end", a, e.Name, e.Ts, e.Dur, pa.ts, pa.end, want)
		}
	}
	if spans != len(actions) || spans != 8 || gradSpans != 1 || p.StageInfo[1].TPReduce <= 0 || p.StageInfo[0].TPReduce != 0 {
		t.Errorf("%d collective spans for %d actions, %d step-level gradient reduces (want 1, of stage 1: %+v)", spans, len(actions), gradSpans, p.StageInfo)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `<rect class="coll"`); n != 8 || !strings.Contains(string(b), "darker end of a cell: its tensor-parallel collectives") {
		t.Errorf("SVG: %d collective bands, want 8 and a legend saying what they are", n)
	}

	// One device: none of it.
	dir, out = compileWithSummary(t, "../../testdata/ir/tp-mlp-ref.ir", "--pp", "2", "--microbatches", "2")
	raw, _ := os.ReadFile(filepath.Join(dir, "plan.json"))
	if strings.Contains(string(raw), "_comm_seconds") || strings.Contains(string(raw), "dp_reduce") ||
		strings.Contains(out, "tp comm/mb") || strings.Contains(out, "collectives") || readPlan(t, dir).Estimate.CollectiveSeconds != 0 {
		t.Errorf("a --tp 1 plan reports collectives:\n%s", out)
	}
	if code, _, _ := ppc(t, "", "simulate", dir, "--trace", trace, "--svg", svg); code != 0 {
		t.Fatal("simulate failed")
	}
	b, _ = os.ReadFile(trace)
	s, _ := os.ReadFile(svg)
	if strings.Contains(string(b), "collective") || strings.Contains(string(s), "collective") {
		t.Errorf("a --tp 1 plan's trace or SVG shows collectives")
	}
}

// Data parallelism: each stage's gradient all-reduce over dp (one bucket of the stage's fp32
// gradients, of the rank's local shards, between nodes) is in stage_info and the trace shows it on the rank's
// collectives thread, issued when the stage's last backward ends; with ZeRO-1 the
// reduce-scatter and all-gather around the optimizer replace it, at the step's end.
func TestDataParallelCollectiveReports(t *testing.T) {
	// Local f32 gradients: stage 0 w0, w1, b1, w2, b2; stage 1 w3, w4, b3, w5, w6.
	grads := [2][]float64{{16 * 16, 16 * 16, 16, 16 * 16, 16}, {16 * 16, 16 * 16, 16, 16 * 8, 8 * 8}}
	dir, out := compileWithSummary(t, tpMLP, "--tp", "2", "--pp", "2", "--dp", "2", "--microbatches", "2")
	p := readPlan(t, dir)
	for s, st := range p.StageInfo {
		// One bucket: the stage's gradients packed and all-reduced at once (latency once).
		var n float64
		for _, k := range grads[s] {
			n += k
		}
		want := ring2("all_reduce", 4*n, false)
		if !near(st.DPReduce, want) || st.DPReduceMB != 0 || st.OptimizerComm != 0 {
			t.Errorf("stage %d: dp all-reduce %v s (per mb %v, optimizer %v), want %v", s, st.DPReduce, st.DPReduceMB, st.OptimizerComm, want)
		}
		if !strings.Contains(out, " "+schedule.Seconds.Format(st.StepComm(p.Microbatches))+" ") {
			t.Errorf("summary lacks stage %d's comm/step %s:\n%s", s, schedule.Seconds.Format(st.StepComm(p.Microbatches)), out)
		}
	}
	if !strings.Contains(out, "tp comm/mb    comm/step    time/mb  imbalance\n") {
		t.Errorf("summary lacks the comm/step column:\n%s", out)
	}
	tr := filepath.Join(t.TempDir(), "t.json")
	if code, _, stderr := ppc(t, "", "simulate", dir, "--trace", tr); code != 0 {
		t.Fatalf("simulate: %s", stderr)
	}
	lastB := map[int]float64{} // pipeline rank → end of its stage's last backward
	for _, e := range readTrace(t, tr).TraceEvents {
		if e.Ph == "X" && e.Cat == "B" {
			lastB[e.Tid] = max(lastB[e.Tid], e.Ts+e.Dur)
		}
	}
	found := 0
	for _, e := range readTrace(t, tr).TraceEvents {
		if e.Ph == "X" && strings.HasPrefix(e.Name, "gradient all-reduce s") {
			found++
			s := int(e.Args["stage"].(float64))
			// Over dp, and over tp for the whole bias %b3 of stage 1.
			want := (p.StageInfo[s].DPReduce + p.StageInfo[s].TPReduce) * 1e6
			if e.Tid != 2+s || math.Abs(e.Ts-lastB[s]) > 1e-6 || math.Abs(e.Dur-want) > 1e-6 {
				t.Errorf("%s on thread %d at %v µs for %v µs; want thread %d, at %v µs (the last B's end), for %v µs",
					e.Name, e.Tid, e.Ts, e.Dur, 2+s, lastB[s], want)
			}
		}
	}
	if found != 2 {
		t.Errorf("%d dp all-reduce spans, want one per stage", found)
	}

	// ZeRO-1: every parameter's dim 0 is even, so each stage's gradients are reduce-scattered
	// (fp32) before the optimizer and its parameters all-gathered (f32) after it instead, one
	// bucket each (latency once).
	dir, _ = compileWithSummary(t, tpMLP, "--tp", "2", "--pp", "2", "--dp", "2", "--zero", "1", "--microbatches", "2")
	p = readPlan(t, dir)
	for s, st := range p.StageInfo {
		var n float64
		for _, k := range grads[s] {
			n += k
		}
		want := ring2("reduce_scatter", 4*n, false) + ring2("all_gather", 4*n, false)
		if !near(st.OptimizerComm, want) || st.DPReduce != 0 {
			t.Errorf("ZeRO-1 stage %d: optimizer collectives %v s (all-reduce %v), want %v", s, st.OptimizerComm, st.DPReduce, want)
		}
	}
	if code, _, stderr := ppc(t, "", "simulate", dir, "--trace", tr); code != 0 {
		t.Fatalf("simulate: %s", stderr)
	}
	found = 0
	for _, e := range readTrace(t, tr).TraceEvents {
		if e.Ph == "X" && strings.HasPrefix(e.Name, "optimizer collectives s") {
			found++
			s := int(e.Args["stage"].(float64))
			if math.Abs(e.Dur-p.StageInfo[s].OptimizerComm*1e6) > 1e-6 {
				t.Errorf("%s for %v µs, want %v", e.Name, e.Dur, p.StageInfo[s].OptimizerComm*1e6)
			}
		}
	}
	if found != 2 {
		t.Errorf("%d optimizer collective spans, want one per stage", found)
	}
}
