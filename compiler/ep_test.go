package compiler

import (
	"fmt"
	"testing"
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
