package compiler

import (
	"fmt"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/data"
)

// batch12 is tiny GPT with a global batch of 12 sequences, which dp 3 splits: dp 3 divides
// no first dim of its parameters (vocab 512, d_model 64, d_ff 256, seq 32), so every block
// ZeRO makes is padded.
var batch12 = LoadOptions{Preset: "tiny", Set: map[string]string{"batch": "12"}}

// TestZeroPaddedEquivalence: ZeRO-1, 2 and 3 at dp 3, which divides no first dim of tiny GPT
// (every parameter's blocks padded: ceil(rows/3) rows, the last rank's partly padding), train
// as one device does — 3 steps within rtol 1e-4 / atol 1e-5, losses and every tensor of the
// checkpoint (which holds them unpadded) — under SGD with momentum and AdamW, alone and with
// pp 2 × tp 2 (tp splits some dims first; dp pads inside the tp block). AdamW's eps is 1e-6:
// the key biases' gradient is zero in exact arithmetic (the softmax ignores a shift of a
// query's scores), so at eps 1e-8 AdamW turns its rounding noise into ±lr steps, and plain
// dp 3 without ZeRO already differs from one device by 1.8e-5 there.
func TestZeroPaddedEquivalence(t *testing.T) {
	for _, opt := range []string{sgdM, "adamw{lr=1e-2,weight_decay=0.1,eps=1e-6}"} {
		one := Options{Load: batch12, Microbatches: 6, Optimizer: opt}
		refL, _, refS := spmdRun(t, gptPPM, one, spmdSteps, "")
		for _, zero := range []int{1, 2, 3} {
			for _, o := range []Options{
				{Load: batch12, DP: 3, Zero: zero, Microbatches: 2, Optimizer: opt},
				{Load: batch12, PP: 2, TP: 2, DP: 3, Zero: zero, Microbatches: 2, Optimizer: opt},
			} {
				if o.PP == 2 && opt != sgdM {
					continue // one optimizer suffices for the composed layout
				}
				name := fmt.Sprintf("%s pp %d tp %d dp 3 zero %d", opt, max(o.PP, 1), max(o.TP, 1), zero)
				l, _, s := spmdRun(t, gptPPM, o, spmdSteps, "")
				agree(t, name+" against one device", refL, l, refS, s, spmdRtol, spmdAtol)
			}
		}
	}
}

// TestZeroPaddedMemory: at dp 3 every block of tiny GPT is padded, and the memory report
// counts the padded blocks: ZeRO-1's state, ZeRO-2's gradients too and ZeRO-3's parameters
// too are Σ ceil(rows/3)·row bytes over the parameters (over ZeRO-0's gradient accumulators
// for the gradients), whole otherwise. Under ZeRO-3 every
// parameter buffer records its rows (zero_rows), plan.json keeps the logical shapes, and the
// slices dropping the gathered padding are views (no slice launch is left).
func TestZeroPaddedMemory(t *testing.T) {
	// The gradient accumulators are ZeRO-0's (the tied token table has two: its partials).
	whole, padded, gWhole, gPadded := int64(0), int64(0), int64(0), int64(0)
	for zero := 0; zero <= 3; zero++ {
		res, err := Compile(gptPPM, Options{Load: batch12, DP: 3, Zero: zero, Microbatches: 2})
		if err != nil {
			t.Fatal(err)
		}
		if zero == 0 {
			for _, p := range res.Output.Plan.Params {
				row := int64(4)
				for _, d := range p.Shape[1:] {
					row *= int64(d)
				}
				whole += int64(p.Shape[0]) * row
				padded += int64((p.Shape[0]+2)/3) * row
				if p.Shape[0]%3 == 0 {
					t.Fatalf("%s %v: dp 3 divides its first dim; the test wants every block padded", p.Name, p.Shape)
				}
			}
			for _, b := range res.Output.Programs[0].Buffers {
				if b.Role == pb.Role_GRAD {
					row := int64(4)
					for _, d := range b.Shape[1:] {
						row *= d
					}
					gWhole += b.Shape[0] * row
					gPadded += (b.Shape[0] + 2) / 3 * row
				}
			}
		}
		p := res.Output.Plan.Programs[0]
		wantP, wantG := whole, gWhole
		if zero >= 2 {
			wantG = gPadded
		}
		if zero == 3 {
			wantP = padded
		}
		if p.ParamBytes != wantP || p.GradBytes != wantG {
			t.Errorf("zero %d: parameter bytes %d, gradient bytes %d; want %d, %d (whole %d, padded blocks %d)", zero, p.ParamBytes, p.GradBytes, wantP, wantG, whole, padded)
		}
		if zero >= 1 && p.StateBytes%padded != 0 || zero == 0 && p.StateBytes%whole != 0 {
			t.Errorf("zero %d: state bytes %d, not a multiple of the blocks' %d", zero, p.StateBytes, padded)
		}
		if zero != 3 {
			continue
		}
		for _, b := range res.Output.Programs[0].Buffers {
			if b.Role == pb.Role_PARAM && len(b.Shape) > 0 && b.ZeroRows == 0 {
				t.Errorf("zero 3: parameter %s %v has no zero_rows", b.Name, b.Shape)
			}
		}
		for _, in := range res.Output.Programs[0].Instrs {
			if in.Kind == pb.Instr_LAUNCH && res.Output.Programs[0].Kernels[in.Kernel].Op == "slice" {
				t.Errorf("zero 3: a slice launch is left (%v): the padding should be dropped by a view", in)
			}
		}
	}
}

// TestZeroPaddedCheckpoint: a checkpoint of padded ZeRO blocks holds the unpadded tensors
// (each rank writes its block's rows inside the tensor; a block of padding only is not
// written), so dp 3 and dp 2 resume each other across ZeRO stages: a resume followed by a
// save with no step gives the same bits, and training on from the other layout's checkpoint
// follows the uninterrupted one-device run within the tolerance.
func TestZeroPaddedCheckpoint(t *testing.T) {
	z3dp3 := Options{Load: batch12, DP: 3, Zero: 3, Microbatches: 2, Optimizer: sgdM}
	z1dp3 := Options{Load: batch12, DP: 3, Zero: 1, Microbatches: 2, Optimizer: sgdM}
	z2dp2 := Options{Load: batch12, DP: 2, Zero: 2, Microbatches: 3, Optimizer: sgdM}
	one := Options{Load: batch12, Microbatches: 6, Optimizer: sgdM}
	_, dp3Ck, dp3State := spmdRun(t, gptPPM, z3dp3, 2, "")
	_, dp2Ck, dp2State := spmdRun(t, gptPPM, z2dp2, 2, "")
	resumesUnchanged(t, []resumeCase{
		{"dp 3 zero 3 checkpoint through dp 2 zero 2", z2dp2, dp3Ck, dp3State},
		{"dp 3 zero 3 checkpoint through dp 3 zero 1", z1dp3, dp3Ck, dp3State},
		{"dp 2 zero 2 checkpoint through dp 3 zero 3", z3dp3, dp2Ck, dp2State},
	})
	refL, _, refS := spmdRun(t, gptPPM, one, 3, "")
	l, _, s := spmdRun(t, gptPPM, z2dp2, 1, dp3Ck)
	agree(t, "dp 3 zero 3 saves, dp 2 zero 2 resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
	l, _, s = spmdRun(t, gptPPM, z3dp3, 1, dp2Ck)
	agree(t, "dp 2 zero 2 saves, dp 3 zero 3 resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
}

// TestZeroPaddedStaysZero: after 3 AdamW steps with weight decay at dp 3, the padding of
// every padded block a rank holds — parameters under ZeRO-3, main parameters and moments
// under ZeRO 1 and 3 — is still exactly zero: the padded gradient rows are zeros (PACK's
// and pad's), so nothing moves them, and nothing gathered from them reaches the model.
func TestZeroPaddedStaysZero(t *testing.T) {
	for _, zero := range []int{1, 3} {
		_, job := initJob(t, gptPPM, Options{Load: batch12, DP: 3, Zero: zero, Microbatches: 2, Optimizer: "adamw{lr=1e-2,weight_decay=0.1}", Precision: "bf16"}, 5)
		for i := 0; i < 3; i++ {
			if _, err := job.Step(runtime.Options{Seed: 5}); err != nil {
				t.Fatal(err)
			}
		}
		checked := 0
		for _, r := range job.Ranks {
			for i, b := range r.Prog.Buffers {
				if b.ZeroRows == 0 {
					continue
				}
				n := b.Shape[0]
				inside := max(0, min(n, b.ZeroRows-int64(r.Coords.DP)*n))
				vals := data.Float64s(r.Bufs[i])
				row := int64(len(vals)) / n
				for k, v := range vals[inside*row:] {
					if v != 0 {
						t.Fatalf("zero %d: rank %d: %s (%v, %d rows inside): padding element %d is %g", zero, r.Index, b.Name, b.Shape, inside, k, v)
					}
				}
				if inside < n {
					checked++
				}
			}
		}
		if checked == 0 {
			t.Fatalf("zero %d: no padded block checked", zero)
		}
	}
}
