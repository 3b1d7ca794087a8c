package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMoEErrors: mixture-of-experts settings the model cannot have exit 2 at the position
// that uses them — a top_k above the experts, no experts, a capacity below 1, node-limited
// routing's groups that cannot be — and a model
// that routes tokens across the sequence refuses token slicing and ONNX export by name.
func TestMoEErrors(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	out := filepath.Join(t.TempDir(), "plan")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", moe, "-o", out, "--set", "top_k=5"}, "moe.ppm:126:18: top_k: k = 5 must be in [1, 4]"},
		// Node-limited routing (n_groups, topk_groups): groups that do not divide the
		// experts, more groups kept than there are, top_k out of the kept groups' reach.
		{[]string{"compile", moe, "-o", out, "--set", "n_groups=3"}, "moe.ppm:126:18: top_k: groups = 3 must be ≥ 1 and divide the axis's 4 elements"},
		{[]string{"compile", moe, "-o", out, "--set", "n_groups=2", "--set", "topk_groups=3"}, "moe.ppm:126:18: top_k: topk_groups = 3 must be in [1, 2] (groups)"},
		{[]string{"compile", moe, "-o", out, "--set", "n_groups=4"}, "moe.ppm:126:18: top_k: k = 2 cannot be reached within topk_groups = 1 group(s) of 1 element(s): at most 1"},
		{[]string{"compile", moe, "-o", out, "--set", "n_experts=0"}, "dimension must be a positive integer"},
		{[]string{"compile", moe, "-o", out, "--set", "capacity_factor=0.001"}, ""},
		{[]string{"compile", moe, "-o", out, "--token-slices", "8,8"}, "reshape merges the sequence axis with another"},
		{[]string{"export", moe, "-o", filepath.Join(t.TempDir(), "m.onnx")}, "op top_k has no ONNX mapping"},
	} {
		code, _, errOut := ppc(t, "", c.args...)
		if c.want == "" {
			// A tiny capacity factor still gives every expert one row.
			if code != 0 {
				t.Errorf("%v: exit %d: %s", c.args, code, errOut)
			}
			continue
		}
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
	// An IR module with a capacity of 0: the verifier names the op.
	ir := writeFile(t, "cap.ir", `func @forward(%i: i64[4,2] {input}) -> (i64[4,2]) {
  %s, %l = moe_slots %i {experts = 4, capacity = 0} : i64[4,2], i64[4]
  return %s
}
`)
	if code, _, errOut := ppc(t, "", "opt", ir); code != 2 || !strings.Contains(errOut, "cap.ir:2:12") || !strings.Contains(errOut, "capacity = 0 must be ≥ 1") {
		t.Errorf("capacity 0: exit %d, stderr %q", code, errOut)
	}
}

// TestEPErrors: --ep settings that cannot be laid out exit 2 naming the nearest valid
// setting — an ep that does not divide dp, one that does not divide a layer's experts (at
// the layer's moe_dispatch), --ep on a model without experts — and a valid
// one states the rank order in the summary.
func TestEPErrors(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	out := filepath.Join(t.TempDir(), "plan")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", moe, "-o", out, "--dp", "4", "--ep", "3"}, "--ep 3: expert parallelism carves its ranks from the 4 data-parallel ranks, which it does not divide; the nearest that divide it: --ep 2 or --ep 4 (or --dp 6)"},
		{[]string{"compile", moe, "-o", out, "--dp", "3", "--ep", "3", "--set", "batch=12"}, "moe.ppm:129:9: --ep 3: the layer has 4 experts, which 3 ep ranks do not divide; the nearest that do: --ep 2 or --ep 4"},
		{[]string{"compile", gpt, "--preset", "tiny", "-o", out, "--dp", "2", "--ep", "2"}, "--ep 2: the model has no mixture-of-experts layer (moe_dispatch); expert parallelism shards experts: use --ep 1"},
		{[]string{"compile", moe, "-o", out, "--ep", "0"}, "--pp, --tp, --dp, --ep and --microbatches must be at least 1"},
	} {
		code, _, errOut := ppc(t, "", c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
	code, stdout, errOut := ppc(t, "", "compile", moe, "-o", out, "--dp", "4", "--ep", "2")
	if code != 0 || !strings.Contains(stdout, "dp=4 (ep=2 inside it, edp=2)") || !strings.Contains(stdout, "rank = tp + TP·(cp + CP·(ep + EP·(edp + EDP·pp)))") {
		t.Errorf("--dp 4 --ep 2: exit %d\n%s%s", code, stdout, errOut)
	}
}

// TestMoESummary: the compile summary counts the experts' parameters apart from the dense
// ones and the parameters a token reads, and the stage table gives each stage's experts.
// The tiny model by hand: 4 layers × (w_gate, w_up, w_down) of 4 experts × 64 × 96 = 294,912
// of 411,200; a token reads 2 of 4 experts, 116,288 + 147,456.
func TestMoESummary(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	code, out, errOut := ppc(t, "", "compile", moe, "--pp", "2", "--microbatches", "2", "-o", filepath.Join(t.TempDir(), "plan"))
	if code != 0 {
		t.Fatal(errOut)
	}
	for _, want := range []string{
		"experts      294,912 of them in 4 MoE layer(s) of 4 experts, top 2 per token: 263,744 active per token (116,288 dense + 147,456 of the experts')",
		"params   of experts",
		"E,t0-t1             205,568      147,456",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// TestMoESummaryNodeLimited: with node-limited routing the summary's experts line says
// within how many of how many groups a token's experts lie, and plan.json records them.
func TestMoESummaryNodeLimited(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	dir := filepath.Join(t.TempDir(), "plan")
	code, out, errOut := ppc(t, "", "compile", moe, "--set", "n_experts=8", "--set", "n_groups=4", "--set", "topk_groups=2", "-o", dir)
	if code != 0 {
		t.Fatal(errOut)
	}
	if want := "of 8 experts, top 2 per token within 2 of 4 groups (node-limited): "; !strings.Contains(out, want) {
		t.Errorf("summary lacks %q:\n%s", want, out)
	}
	if m := readPlan(t, dir).MoE; m == nil || m.Groups != 4 || m.TopKGroups != 2 {
		t.Errorf("plan.json's moe is %+v, want groups 4 and topk_groups 2", m)
	}
}

// TestPlanRouting: ppc plan reports plan 1's dispatch traffic. The tiny model with 8
// experts in 4 groups (2 kept), ep 8 over 2 nodes of 4 GPUs: each rank's bf16 buffer is
// 8 experts × 5 rows (⌈1.25·16·2/8⌉) × 64 × 2 B = 5 KiB, half of it to the other node
// whatever the router chooses, where one copy per (token, node) would be at most
// 16 tokens × 64 × 2 B = 2 KiB (a token's other node); --json carries the figures. Inside
// one node (4 GPUs per node, ep 4) it says the all-to-alls stay on NVLink; without groups and
// inside a node there is no line.
func TestPlanRouting(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	limited := []string{"plan", moe, "--set", "n_experts=8", "--set", "n_groups=4", "--set", "topk_groups=2", "--gpu", "h100-80gb", "--gpus-per-node", "4", "--top", "1"}
	code, out, errs := ppc(t, "", append(limited, "--gpus", "16", "--ep", "8")...)
	if want := "routing: node-limited (each token's 2 experts within 2 of 4 groups); a token's experts on up to 2 of the ep group's 2 nodes; each all-to-all sends 2.5 KiB of a rank's 5.0 KiB dispatch buffer off its node per layer and micro-batch whatever the router chooses (priced), where one copy per (token, node) would send at most 2.0 KiB"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, output lacks %q:\n%s%s", code, want, out, errs)
	}
	code, out, errs = ppc(t, "", append(limited, "--gpus", "16", "--ep", "8", "--json")...)
	var r struct {
		Routing struct {
			Groups  int     `json:"groups"`
			Nodes   int     `json:"nodes"`
			FanOut  int     `json:"fan_out"`
			Buffer  float64 `json:"buffer_bytes"`
			OffNode float64 `json:"off_node_bytes"`
			Dedup   float64 `json:"dedup_bytes"`
		} `json:"routing"`
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v: %s%s", code, err, out, errs)
	}
	if g := r.Routing; g.Groups != 4 || g.Nodes != 2 || g.FanOut != 2 || g.Buffer != 5*1024 || g.OffNode != 2.5*1024 || g.Dedup != 2*1024 {
		t.Errorf("--json routing %+v", g)
	}
	code, out, errs = ppc(t, "", append(limited, "--gpus", "4", "--ep", "4")...)
	if want := "routing: node-limited (each token's 2 experts within 2 of 4 groups); plan 1's ep group (ep 4) is inside one node, so its all-to-alls stay on NVLink"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, output lacks %q:\n%s%s", code, want, out, errs)
	}
	code, out, errs = ppc(t, "", "plan", moe, "--set", "n_experts=8", "--gpu", "h100-80gb", "--gpus", "4", "--ep", "4", "--top", "1")
	if code != 0 || strings.Contains(out, "routing:") {
		t.Errorf("exit %d, unlimited routing inside a node has a routing line:\n%s%s", code, out, errs)
	}
}

// TestEPTrace: ppc simulate's trace names expert parallelism's all-to-alls: each F and I/B of
// an ep plan nests an "ep all-to-all" span, of the stage's all-to-all seconds in plan.json,
// at the end of its collective span.
func TestEPTrace(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	dir := filepath.Join(t.TempDir(), "plan")
	if code, _, errOut := ppc(t, "", "compile", moe, "--dp", "2", "--ep", "2", "--pp", "2", "--microbatches", "2", "--gpu", "h100-80gb", "-o", dir); code != 0 {
		t.Fatal(errOut)
	}
	p := readPlan(t, dir)
	trace := filepath.Join(t.TempDir(), "t.json")
	if code, _, errOut := ppc(t, "", "simulate", dir, "--trace", trace); code != 0 {
		t.Fatal(errOut)
	}
	n := 0
	for _, e := range readTrace(t, trace).TraceEvents {
		if !strings.HasPrefix(e.Name, "ep all-to-all ") {
			continue
		}
		n++
		a := e.Args["action"].(string) // e.g. 1B0
		st := p.StageInfo[a[0]-'0']
		want := map[byte]float64{'F': st.FAllToAll, 'B': st.IAllToAll}[a[1]] * 1e6
		if want <= 0 || math.Abs(e.Dur-want) > 1e-9*want {
			t.Errorf("%s: %q lasts %v µs, the stage's all-to-alls %v µs", a, e.Name, e.Dur, want)
		}
	}
	if n != 8 { // 2 stages × 2 micro-batches × (F, B)
		t.Errorf("%d ep all-to-all spans, want 8", n)
	}
}

// TestMoEDroppedMetric: the model's `metric moe_dropped` is reported each step (text and
// --log-json), summed over layers, micro-batches and replicas: every layout drops the same
// choices as one device — pipeline stages, data-parallel replicas, tensor-parallel replicas
// counted once, one process per rank. With capacity_factor 0.5 each micro-batch's experts
// have rows for half its choices, so at least 512 of the step's 1,024 choices (8 sequences ×
// 16 tokens × top 2 × 4 layers) drop; dropless drops none.
func TestMoEDroppedMetric(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	dropped := func(t *testing.T, set string, compile []string, run ...string) []float64 {
		t.Helper()
		dir := t.TempDir()
		plan := filepath.Join(dir, "plan")
		args := append([]string{"compile", moe, "-o", plan, "--set", set}, compile...)
		if code, _, errOut := ppc(t, "", args...); code != 0 {
			t.Fatal(errOut)
		}
		log := filepath.Join(dir, "log.jsonl")
		code, out, errOut := ppc(t, "", append([]string{"run", plan, "--steps", "3", "--log-json", log}, run...)...)
		if code != 0 {
			t.Fatal(errOut)
		}
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		var got []float64
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var rec struct {
				Metrics map[string]float64 `json:"metrics"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
			v, ok := rec.Metrics["moe_dropped"]
			if !ok {
				t.Fatalf("no moe_dropped in %s", line)
			}
			got = append(got, v)
		}
		if !strings.Contains(out, fmt.Sprintf("moe_dropped=%g", got[0])) {
			t.Errorf("the step line lacks moe_dropped=%g:\n%s", got[0], out)
		}
		return got
	}
	ref := dropped(t, "capacity_factor=0.5", []string{"--microbatches", "2"})
	for _, v := range ref {
		if v < 512 || v > 1024 {
			t.Errorf("one device drops %v of 1,024 choices a step, want at least 512", ref)
		}
	}
	for _, c := range []struct {
		name         string
		compile, run []string
	}{
		{"pp2", []string{"--pp", "2", "--microbatches", "2"}, nil},
		{"dp2", []string{"--dp", "2", "--microbatches", "1"}, nil},
		{"tp2-sp", []string{"--tp", "2", "--sp", "--microbatches", "2"}, nil},
		{"pp2-nproc", []string{"--pp", "2", "--microbatches", "2"}, []string{"--nproc", "2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := dropped(t, "capacity_factor=0.5", c.compile, c.run...); !slices.Equal(got, ref) {
				t.Errorf("dropped %v a step, one device %v", got, ref)
			}
		})
	}
	if got := dropped(t, "capacity_factor=0", []string{"--microbatches", "2"}); !slices.Equal(got, []float64{0, 0, 0}) {
		t.Errorf("dropless drops %v", got)
	}
}
