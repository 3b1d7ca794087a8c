package compiler

import (
	"testing"
)

// TestMemoryBreakdown: each rank's peak is the sum of its categories, and "activations" are
// the forward activations only: at least the micro-batches the schedule stashes at once, and
// fewer with full recomputation. The optimizer's temporaries (AdamW's new parameter and both
// new moments) and the backward's gradients in flight, which the whole arena used to be
// reported as, are workspace: what the arena needs beyond the activations.
func TestMemoryBreakdown(t *testing.T) {
	acts := map[string][]int64{}
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"1f1b", Options{PP: 4, Microbatches: 4}},
		{"zbv", Options{PP: 2, Microbatches: 4, Schedule: "zbv"}},
		{"recompute", Options{PP: 2, Microbatches: 4, Recompute: "full"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Load.Preset = "tiny"
			res, err := Compile("../testdata/models/gpt.ppm", c.opts)
			if err != nil {
				t.Fatal(err)
			}
			p := res.Output.Plan
			for _, r := range p.Programs {
				if sum := r.ParamBytes + r.GradBytes + r.StateBytes + r.ConstBytes + r.ActivationBytes + r.WorkspaceBytes; sum != r.PeakBytes {
					t.Errorf("rank %d: categories add up to %d, peak %d", r.PP, sum, r.PeakBytes)
				}
				if r.ActivationBytes+r.WorkspaceBytes != r.ArenaBytes || r.ActivationBytes <= 0 {
					t.Errorf("rank %d: activations %d + workspace %d, arena %d", r.PP, r.ActivationBytes, r.WorkspaceBytes, r.ArenaBytes)
				}
				if r.WorkspaceBytes <= 0 {
					t.Errorf("rank %d: no workspace for the backward and optimizer temporaries", r.PP)
				}
				acts[c.name] = append(acts[c.name], r.ActivationBytes)
				// Every micro-batch the simulator says is stashed at once is a forward activation.
				var stash int64
				for _, s := range r.Stages {
					stash = max(stash, p.StageInfo[s].StashBytes)
				}
				if p.Estimate != nil && len(r.Stages) == 1 {
					if need := stash * int64(p.Estimate.PeakActivations[r.PP]); r.ActivationBytes < need {
						t.Errorf("rank %d: activations %d below %d micro-batches × %d stashed", r.PP, r.ActivationBytes, p.Estimate.PeakActivations[r.PP], stash)
					}
				}
			}
		})
	}
	// pp=2 under 1F1B and with full recomputation: the same ranks, less stashed.
	none, err := Compile("../testdata/models/gpt.ppm", Options{PP: 2, Microbatches: 4, Load: LoadOptions{Preset: "tiny"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range none.Output.Plan.Programs {
		if full := acts["recompute"][i]; full >= r.ActivationBytes {
			t.Errorf("rank %d: activations %d with full recomputation, %d without", i, full, r.ActivationBytes)
		}
	}
}
