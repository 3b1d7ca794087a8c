package compiler

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/runtime"
)

// TestEPTrainsLikeOneDevice: expert parallelism (--ep) trains the mixture-of-experts model
// like one device — the experts sharded over ep ranks carved from dp, each rank's dispatch
// buffer exchanged by all_to_all, expert gradients summed over the expert-data-parallel ranks
// only — within the equivalence invariant's rtol 1e-4, atol 1e-5 (the dp sum's order
// differs). Dropless routing at ep 2 and ep 4 (ep = dp and ep < dp), ep 2 × pp 2 × tp 2 with
// sp, and capacity dropping (capacity_factor 0.5), where a choice dropped on one layout and
// not on the other would move its token's output by a whole expert's contribution: routing
// is per micro-batch, and the reference runs as many micro-batches.
func TestEPTrainsLikeOneDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("trains several layouts; run without -short")
	}
	const mb, steps = 4, 3
	for _, set := range []map[string]string{{"capacity_factor": "0"}, {"capacity_factor": "0.5"}} {
		base := Options{Load: LoadOptions{Set: set}, Microbatches: mb, Optimizer: "sgd{lr=0.05,momentum=0.9}"}
		refL, _, refS := spmdRun(t, moePPM, base, steps, "")
		for _, c := range []struct {
			name string
			edit func(o *Options)
		}{
			{"dp2-ep2", func(o *Options) { o.DP, o.EP, o.Microbatches = 2, 2, mb/2 }},
			{"dp4-ep4", func(o *Options) { o.DP, o.EP, o.Microbatches = 4, 4, mb/4 }},
			{"dp4-ep2", func(o *Options) { o.DP, o.EP, o.Microbatches = 4, 2, mb/4 }},
			{"pp2-tp2-sp-dp2-ep2", func(o *Options) {
				o.PP, o.TP, o.SP, o.DP, o.EP, o.Microbatches = 2, 2, true, 2, 2, mb/2
			}},
		} {
			name := fmt.Sprintf("%v/%s", set, c.name)
			t.Run(name, func(t *testing.T) {
				o := base
				c.edit(&o)
				gotL, _, gotS := spmdRun(t, moePPM, o, steps, "")
				agree(t, name, refL, gotL, refS, gotS, spmdRtol, spmdAtol)
			})
		}
	}
}

// TestEPComposes: expert parallelism with the rest — ZeRO-1 and ZeRO-2 on the dense
// parameters (the expert shards are updated whole, their gradients summed over edp), gradient
// clipping (the global norm counts each expert shard once: on every ep rank, on edp rank 0),
// zero-bubble and interleaved schedules with full recompute (the all_to_alls recomputed with
// their layer) — each like one device.
func TestEPComposes(t *testing.T) {
	if testing.Short() {
		t.Skip("trains several layouts; run without -short")
	}
	const mb, steps = 4, 3
	load := LoadOptions{Set: map[string]string{"capacity_factor": "0"}}
	for _, c := range []struct {
		name string
		opt  string
		edit func(o *Options)
	}{
		{"dp4-ep2-zero1", sgdM, func(o *Options) { o.DP, o.EP, o.Zero, o.Microbatches = 4, 2, 1, mb/4 }},
		{"dp2-ep2-zero2", sgdM, func(o *Options) { o.DP, o.EP, o.Zero, o.Microbatches = 2, 2, 2, mb/2 }},
		{"dp4-ep2-clip", "sgd{lr=0.05,momentum=0.9,clip=0.01}", func(o *Options) { o.DP, o.EP, o.Microbatches = 4, 2, mb/4 }},
		{"pp2-zbv-full-dp2-ep2", sgdM, func(o *Options) {
			o.PP, o.Schedule, o.Recompute, o.DP, o.EP, o.Microbatches = 2, "zbv", "full", 2, 2, mb/2
		}},
		{"pp2-interleaved-dp2-ep2", sgdM, func(o *Options) {
			o.PP, o.Schedule, o.DP, o.EP, o.Microbatches = 2, "interleaved-1f1b", 2, 2, mb/2
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := Options{Load: load, Microbatches: mb, Optimizer: c.opt}
			refL, _, refS := spmdRun(t, moePPM, base, steps, "")
			o := base
			c.edit(&o)
			gotL, _, gotS := spmdRun(t, moePPM, o, steps, "")
			agree(t, c.name, refL, gotL, refS, gotS, spmdRtol, spmdAtol)
		})
	}
}

// TestEPNodeLimitedRouting: DeepSeek-V3's node-limited routing (top_k with groups) trains
// like one device at ep 2 and ep 4 — 8 experts in 4 groups, each token's 3 chosen within its
// 2 best groups — dropless and with capacity dropping: each rank routes its micro-batches as
// one device does, so the limit changes which experts a token reaches, never the exchange.
// The one-device losses differ from unlimited routing's, so the limit reaches the model.
func TestEPNodeLimitedRouting(t *testing.T) {
	if testing.Short() {
		t.Skip("trains several layouts; run without -short")
	}
	const mb, steps = 4, 3
	limited := func(cf string, groups string) Options {
		set := map[string]string{"capacity_factor": cf, "n_experts": "8", "top_k": "3", "n_groups": groups, "topk_groups": "2"}
		if groups == "1" {
			set["topk_groups"] = "1"
		}
		return Options{Load: LoadOptions{Set: set}, Microbatches: mb, Optimizer: sgdM}
	}
	unlimited, _, _ := spmdRun(t, moePPM, limited("0", "1"), steps, "")
	for _, cf := range []string{"0", "0.5"} {
		base := limited(cf, "4")
		refL, _, refS := spmdRun(t, moePPM, base, steps, "")
		if cf == "0" && slices.Equal(refL, unlimited) {
			t.Fatalf("losses with 4 groups (2 kept) equal unlimited routing's: %v", refL)
		}
		for _, c := range []struct {
			name string
			edit func(o *Options)
		}{
			{"dp2-ep2", func(o *Options) { o.DP, o.EP, o.Microbatches = 2, 2, mb/2 }},
			{"dp4-ep4", func(o *Options) { o.DP, o.EP, o.Microbatches = 4, 4, mb/4 }},
		} {
			name := fmt.Sprintf("cf%s/%s", cf, c.name)
			t.Run(name, func(t *testing.T) {
				o := base
				c.edit(&o)
				gotL, _, gotS := spmdRun(t, moePPM, o, steps, "")
				agree(t, name, refL, gotL, refS, gotS, spmdRtol, spmdAtol)
			})
		}
	}
}

// TestEPClipNorm: the global gradient norm that clipping divides by counts every expert
// shard once — on each ep rank, on edp rank 0 only — so it equals one device's (to f32
// rounding): an expert shard counted on every dp rank, or on ep rank 0 only, would move it.
func TestEPClipNorm(t *testing.T) {
	norm := func(o Options) float64 {
		o.Load = LoadOptions{Set: map[string]string{"capacity_factor": "0"}}
		o.Optimizer = "sgd{lr=0.05,clip=0.01}"
		_, job := initJob(t, moePPM, o, 5)
		r, err := job.Step(runtime.Options{Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		return r.Metrics["grad_norm"]
	}
	want := norm(Options{Microbatches: 4})
	for _, o := range []Options{{DP: 4, EP: 2, Microbatches: 1}, {DP: 2, EP: 2, Microbatches: 2}, {DP: 4, EP: 4, Microbatches: 1}} {
		if got := norm(o); math.Abs(got-want) > 1e-6*want {
			t.Errorf("dp %d ep %d: gradient norm %.9g, one device %.9g", o.DP, o.EP, got, want)
		}
	}
}

// TestBF16ExpertParallel: bf16 at --dp 2 --ep 2 trains as bf16 on one device within bf16's
// rounding. An ep rank's expert matmuls contract the rows of both ranks' micro-batches in one
// GEMM (its weight gradient rounded to bf16 once), where one device rounds each micro-batch's
// GEMM and adds them in f32 — so results agree to bf16's unit roundoff, not to 1e-4: the test
// asks, as TestBF16PipelineTensorParallel does, losses within 1e-4 relative and the
// parameters' updates within 1% in norm.
func TestBF16ExpertParallel(t *testing.T) {
	load := LoadOptions{Set: map[string]string{"capacity_factor": "0"}}
	base := Options{Load: load, Microbatches: 4, Optimizer: sgdM, Precision: "bf16"}
	_, _, init := spmdRun(t, moePPM, base, 0, "")
	refL, _, ref := spmdRun(t, moePPM, base, 3, "")
	o := base
	o.DP, o.EP, o.Microbatches = 2, 2, 2
	gotL, _, got := spmdRun(t, moePPM, o, 3, "")
	for i := range refL {
		if d := math.Abs(gotL[i]-refL[i]) / refL[i]; d > 1e-4 {
			t.Errorf("step %d: loss %.7f at dp 2 × ep 2, %.7f on one device (relative difference %.2g > 1e-4)", i+1, gotL[i], refL[i], d)
		}
	}
	var diff, update float64
	for name, r := range ref {
		if strings.HasSuffix(name, ".momentum_buffer") {
			continue
		}
		g := got[name]
		for i := range r {
			diff += (g[i] - r[i]) * (g[i] - r[i])
			update += (r[i] - init[name][i]) * (r[i] - init[name][i])
		}
	}
	rel := math.Sqrt(diff / update)
	t.Logf("losses %v vs %v; updates differ by %.3g in norm", gotL, refL, rel)
	if rel > 0.01 {
		t.Errorf("the parameters' updates differ by %.3g of their norm between dp 2 × ep 2 and one device (want ≤ 1%%)", rel)
	}
}

// TestEPCheckpointAcrossLayouts: an ep run saves each expert tensor whole (the ep shards
// merged by offset), so one device resumes it bit for bit and trains on like the run that
// never stopped; ep 4 loads one device's checkpoint split into its shards, bit for bit, and
// an ep 2 × dp 4 run resumes an ep 4 one.
func TestEPCheckpointAcrossLayouts(t *testing.T) {
	load := LoadOptions{Set: map[string]string{"capacity_factor": "0"}}
	one := Options{Load: load, Microbatches: 4, Optimizer: sgdM}
	ep2 := Options{Load: load, Microbatches: 2, Optimizer: sgdM, DP: 2, EP: 2}
	ep4 := Options{Load: load, Microbatches: 1, Optimizer: sgdM, DP: 4, EP: 4}
	dp4ep2 := Options{Load: load, Microbatches: 1, Optimizer: sgdM, DP: 4, EP: 2}
	_, epCk, epState := spmdRun(t, moePPM, ep2, 2, "")
	_, _, s := spmdRun(t, moePPM, one, 0, epCk)
	agree(t, "ep=2 checkpoint through one device", nil, nil, epState, s, 0, 0)
	refL, oneCk, refS := spmdRun(t, moePPM, one, 3, "")
	_, ep4Ck, s := spmdRun(t, moePPM, ep4, 0, oneCk)
	agree(t, "one-device checkpoint through ep=4", nil, nil, refS, s, 0, 0)
	l, _, s := spmdRun(t, moePPM, one, 1, epCk)
	agree(t, "ep=2 saves, one device resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
	l, _, s = spmdRun(t, moePPM, dp4ep2, 1, ep4Ck)
	wantL, _, want := spmdRun(t, moePPM, one, 1, oneCk)
	agree(t, "ep=4 saves, dp=4 ep=2 resumes", wantL, l, want, s, spmdRtol, spmdAtol)
}
