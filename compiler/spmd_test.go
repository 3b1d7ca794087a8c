package compiler

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
)

// The equivalence invariant (docs/DESIGN.md §4) for data and tensor parallelism: three training
// steps from the same seed, then the checkpoints — every parameter and optimizer state,
// merged from the ranks' shards by Save — against the one-device plan with the same global
// batch (M·dp micro-batches). Where the reduction order changes they agree within ppc
// compare's rtol 1e-4, atol 1e-5: data parallelism sums each replica's M micro-batch
// gradients and then the replicas' sums ((g0+g1)+(g2+g3) where one device adds
// ((g0+g1)+g2)+g3), and tensor parallelism splits a row-parallel matmul's contraction into
// partial sums that an all-reduce adds. Adding pipeline stages changes no reduction order, so
// a layout with pp > 1 is bitwise equal to the same layout without it.

const (
	spmdSteps = 3
	spmdRtol  = 1e-4
	spmdAtol  = 1e-5
)

var (
	tpMLP    = "../testdata/ir/tp-mlp.ir"
	tpMLPRef = "../testdata/ir/tp-mlp-ref.ir"
	mlpPPM   = "../testdata/models/mlp.ppm"
	gptPPM   = "../testdata/models/gpt.ppm"
	llamaPPM = "../testdata/models/llama.ppm"
	gptONNX  = "../testdata/models/gpt-tiny.onnx"
	sgdM     = "sgd{lr=0.05,momentum=0.9}"
	// sgdCosine warms up over 2 of the 3 steps, then decays by cosine.
	sgdCosine = "sgd{lr=0.05,momentum=0.9,schedule=cosine,warmup=2,decay_steps=5,min_lr=0.01}"
	// sgdClipCosine also clips the gradients to global norm 0.5.
	sgdClipCosine = "sgd{lr=0.05,momentum=0.9,schedule=cosine,warmup=2,decay_steps=5,min_lr=0.01,clip=0.5}"
)

// spmdRun compiles model, resumes from the checkpoint in resume when it is not "", trains
// steps, saves a checkpoint and returns the per-step losses, the checkpoint directory and
// its tensors as float64.
func spmdRun(t *testing.T, model string, opts Options, steps int, resume string) ([]float64, string, map[string][]float64) {
	t.Helper()
	_, job := initJob(t, model, opts, 5)
	if resume != "" {
		if _, err := job.Resume(resume, false); err != nil {
			t.Fatalf("resume: %v", err)
		}
	}
	var losses []float64
	for i := 0; i < steps; i++ {
		r, err := job.Step(runtime.Options{Seed: 5})
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		losses = append(losses, r.Loss)
	}
	dir := t.TempDir()
	if err := job.Save(dir, 5); err != nil {
		t.Fatal(err)
	}
	return losses, dir, readCheckpoint(t, dir)
}

func readCheckpoint(t *testing.T, dir string) map[string][]float64 {
	t.Helper()
	tensors, _, err := checkpoint.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float64{}
	for name, x := range tensors {
		out[name] = data.Float64s(x)
	}
	return out
}

// agree compares losses and checkpoints as ppc compare does: |got − ref| ≤ atol + rtol·|ref|
// element by element (rtol = atol = 0: bitwise).
// resumeCase is a checkpoint (ck) another layout (opts) resumes, and the state it was saved from.
type resumeCase struct {
	what  string
	opts  Options
	ck    string
	state map[string][]float64
}

// resumesUnchanged: each checkpoint, resumed by its other layout and saved with no step, gives
// the same bits as the state it was saved from.
func resumesUnchanged(t *testing.T, cases []resumeCase) {
	t.Helper()
	for _, c := range cases {
		_, _, s := spmdRun(t, gptPPM, c.opts, 0, c.ck)
		agree(t, c.what, nil, nil, c.state, s, 0, 0)
	}
}

func agree(t *testing.T, what string, refL, gotL []float64, ref, got map[string][]float64, rtol, atol float64) {
	t.Helper()
	close := func(r, g float64) bool { return math.Abs(g-r) <= atol+rtol*math.Abs(r) }
	for i := range refL {
		if !close(refL[i], gotL[i]) {
			t.Errorf("%s: loss at step %d is %.9g, the reference %.9g", what, i+1, gotL[i], refL[i])
		}
	}
	if len(ref) != len(got) {
		t.Fatalf("%s: %d tensors, the reference has %d", what, len(got), len(ref))
	}
	for name, r := range ref {
		g, ok := got[name]
		if !ok || len(g) != len(r) {
			t.Fatalf("%s: tensor %s missing or of another size (%d elements, the reference %d)", what, name, len(g), len(r))
		}
		bad, worst := 0, 0.0
		for i := range r {
			if !close(r[i], g[i]) {
				bad++
				worst = math.Max(worst, math.Abs(g[i]-r[i]))
			}
		}
		if bad > 0 {
			t.Errorf("%s: %s: %d of %d elements beyond rtol %g, atol %g (max abs difference %.3g)", what, name, bad, len(r), rtol, atol, worst)
		}
	}
}

// TestSPMDEquivalence trains every data- and tensor-parallel layout of the issue against its
// one-device reference: mlp and tiny GPT at --dp 2 and --pp 2 --dp 2; tiny GPT at --tp 2,
// --tp 4 --sp, --pp 2 --tp 2, --pp 2 --tp 2 --sp under zb-h1 and --pp 2 --dp 2 --tp 2 --sp (8
// ranks); tiny Llama (GQA) at --tp 2 and --pp 2 --tp 2 --sp interleaved; and the
// hand-partitioned tp = 2 MLP at --tp 2, --pp 2 --tp 2, --tp 2 --dp 2 and --pp 2 --dp 2
// --tp 2 against the same model unpartitioned.
func TestSPMDEquivalence(t *testing.T) {
	const m = 2 // micro-batches per data-parallel replica
	type layout struct {
		name string
		opts Options
		// bitwise names the layout (earlier in the list) this one equals bit for bit.
		bitwise string
	}
	cases := []struct {
		model, ref string
		load       LoadOptions
		layouts    []layout
	}{
		{mlpPPM, mlpPPM, LoadOptions{}, []layout{
			{"dp2", Options{DP: 2}, ""},
			{"pp2-dp2", Options{PP: 2, DP: 2}, "dp2"},
		}},
		{gptPPM, gptPPM, LoadOptions{Preset: "tiny"}, []layout{
			{"dp2", Options{DP: 2}, ""},
			// ZeRO-1: each replica updates its block of the parameters and state. The sums
			// are dp2's (the reduce-scatter adds the replicas in group order, as the
			// all-reduce does), but the update's elementwise chains fuse differently around
			// the block's gather, so the last bits differ from dp2's.
			{"dp2-zero1", Options{DP: 2, Zero: 1}, ""},
			// ZeRO-2: each micro-batch's gradient is reduce-scattered and only the block is
			// accumulated (the sums group by micro-batch first: another order).
			{"dp2-zero2", Options{DP: 2, Zero: 2}, ""},
			// The tied embedding's two partial gradients, one per pipeline rank, are each
			// all-reduced over dp and then summed: another order than dp2's, not bitwise.
			{"pp2-dp2", Options{PP: 2, DP: 2}, ""},
		}},
		// Tensor and sequence parallelism from the passes (shard-annotate, shard-propagate,
		// spmd-partition) on the DSL transformers: Megatron's layouts found by the compiler.
		// With SGD (momentum 0.9): AdamW divides each update by √v + ε, so for the few weights
		// whose gradient is within a few ε of zero, the 1e-7 relative difference the partial
		// sums make moves the update by a fraction of lr — one element in 16,384 ends 2e-5 off
		// after three steps. The gradients themselves agree (TestSpmdPartitionMatchesOneDevice
		// in passes checks them directly).
		{gptPPM, gptPPM, LoadOptions{Preset: "tiny"}, []layout{
			{"tp2", Options{TP: 2, Optimizer: sgdM}, ""},
			{"tp4-sp", Options{TP: 4, SP: true, Optimizer: sgdM}, ""},
			{"pp2-tp2", Options{PP: 2, TP: 2, Optimizer: sgdM}, ""},
			{"pp2-tp2-sp-zbh1", Options{PP: 2, TP: 2, SP: true, Schedule: "zb-h1", Optimizer: sgdM}, ""},
			{"pp2-dp2-tp2-sp", Options{PP: 2, DP: 2, TP: 2, SP: true, Optimizer: sgdM}, ""},
			{"pp2-dp2-tp2-sp-zero1", Options{PP: 2, DP: 2, TP: 2, SP: true, Zero: 1, Optimizer: sgdM}, ""},
			{"pp2-dp2-tp2-sp-zero2", Options{PP: 2, DP: 2, TP: 2, SP: true, Zero: 2, Optimizer: sgdM}, ""},
			// ZeRO-3: parameters held as dp blocks and gathered where each function reads
			// them; the gradients are ZeRO-2's, and so is the update of each block — the same
			// bits as ZeRO-2's layout (the gather moves bits, it adds nothing).
			{"dp2-zero2-sgd", Options{DP: 2, Zero: 2, Optimizer: sgdM}, ""},
			{"dp2-zero3", Options{DP: 2, Zero: 3, Optimizer: sgdM}, "dp2-zero2-sgd"},
			{"dp4-zero3", Options{DP: 4, Zero: 3, Optimizer: sgdM}, ""},
			{"pp2-dp2-tp2-sp-zero3", Options{PP: 2, DP: 2, TP: 2, SP: true, Zero: 3, Optimizer: sgdM}, "pp2-dp2-tp2-sp-zero2"},
			// Every recomputation gathers again (I and W rebuild a unit from the blocks).
			{"pp2-dp2-zero3-full-interleaved", Options{PP: 2, DP: 2, Zero: 3, Recompute: "full", Schedule: "interleaved-1f1b", Optimizer: sgdM}, ""},
			{"pp2-dp2-tp2-zero3-zbv", Options{PP: 2, DP: 2, TP: 2, Zero: 3, Schedule: "zbv", Optimizer: sgdM}, ""},
			// A warmup-cosine learning rate: every rank computes the same scalar from %step.
			{"pp2-dp2-tp2-cosine", Options{PP: 2, DP: 2, TP: 2, Optimizer: sgdCosine}, ""},
			// Clipping to a norm below the gradients' (≈ 4.3), so that every step clips: the
			// global norm counts each gradient once — tp-replicated ones on tp rank 0, dp-reduced
			// ones on dp rank 0, the tied embedding on its first pipeline rank, ZeRO-2's blocks
			// on every replica — or the coefficient, and every update, would differ.
			{"pp2-dp2-tp2-clip-cosine", Options{PP: 2, DP: 2, TP: 2, Optimizer: sgdClipCosine}, ""},
			{"pp2-dp2-tp2-sp-zero2-clip", Options{PP: 2, DP: 2, TP: 2, SP: true, Zero: 2, Optimizer: sgdClipCosine}, ""},
			{"pp2-dp2-tp2-sp-zero1-clip", Options{PP: 2, DP: 2, TP: 2, SP: true, Zero: 1, Optimizer: sgdClipCosine}, ""},
		}},
		{llamaPPM, llamaPPM, LoadOptions{Preset: "tiny"}, []layout{
			{"tp2", Options{TP: 2, Optimizer: sgdM}, ""},
			{"pp2-tp2-sp-interleaved", Options{PP: 2, TP: 2, SP: true, Schedule: "interleaved-1f1b", Optimizer: sgdM}, ""},
		}},
		// An ONNX transformer as torch.onnx.export writes one (testdata/models/gen_gpt_onnx.go):
		// the importer raises its patterns and shard-annotate finds Megatron's layout on it.
		{gptONNX, gptONNX, LoadOptions{Dims: map[string]int{"batch": 4}}, []layout{
			{"pp2-tp2", Options{PP: 2, TP: 2, Optimizer: sgdM}, ""},
			{"pp2-tp2-sp", Options{PP: 2, TP: 2, SP: true, Optimizer: sgdM}, ""},
		}},
		{tpMLP, tpMLPRef, LoadOptions{}, []layout{
			{"tp2", Options{TP: 2}, ""},
			{"pp2-tp2", Options{PP: 2, TP: 2}, "tp2"},
			{"tp2-dp2", Options{TP: 2, DP: 2}, ""},
			{"pp2-dp2-tp2", Options{PP: 2, DP: 2, TP: 2}, "tp2-dp2"},
		}},
	}
	for _, c := range cases {
		refs := map[string]struct {
			l []float64
			s map[string][]float64
		}{}
		got := map[string]struct {
			l []float64
			s map[string][]float64
		}{}
		for _, lay := range c.layouts {
			name := fmt.Sprintf("%s/%s", filepath.Base(c.model), lay.name)
			t.Run(name, func(t *testing.T) {
				dp := max(lay.opts.DP, 1)
				key := fmt.Sprint(dp, lay.opts.Optimizer)
				ref, ok := refs[key]
				if !ok {
					ref.l, _, ref.s = spmdRun(t, c.ref, Options{Load: c.load, Microbatches: m * dp, Optimizer: lay.opts.Optimizer}, spmdSteps, "")
					refs[key] = ref
				}
				o := lay.opts
				o.Load, o.Microbatches = c.load, m
				l, _, s := spmdRun(t, c.model, o, spmdSteps, "")
				got[lay.name] = struct {
					l []float64
					s map[string][]float64
				}{l, s}
				agree(t, name+" against one device", ref.l, l, ref.s, s, spmdRtol, spmdAtol)
				if lay.bitwise != "" {
					b := got[lay.bitwise]
					agree(t, name+" against "+lay.bitwise, b.l, l, b.s, s, 0, 0)
				}
			})
		}
	}
}

// TestCheckpointAcrossLayouts: a checkpoint holds full tensors, so any layout resumes any
// other. Merging and slicing are exact: tp = 2 saves, one device resumes and saves at once,
// and the two checkpoints are the same bits — and back. Training on from a checkpoint of
// another layout follows the uninterrupted run within the tolerance; dp = 2 saves and one
// device resumes likewise.
func TestCheckpointAcrossLayouts(t *testing.T) {
	const m = 2
	tp := Options{TP: 2, Microbatches: m}
	one := Options{Microbatches: m}
	_, tpCk, tpState := spmdRun(t, tpMLP, tp, 2, "")
	_, oneCk, oneState := spmdRun(t, tpMLPRef, one, 2, "")
	// Round trips: resume then save with no step in between.
	_, _, s := spmdRun(t, tpMLPRef, one, 0, tpCk)
	agree(t, "tp=2 checkpoint through one device", nil, nil, tpState, s, 0, 0)
	_, _, s = spmdRun(t, tpMLP, tp, 0, oneCk)
	agree(t, "one-device checkpoint through tp=2", nil, nil, oneState, s, 0, 0)
	_, _, s = spmdRun(t, tpMLP, Options{TP: 2, PP: 2, DP: 2, Microbatches: m}, 0, tpCk)
	agree(t, "tp=2 checkpoint through pp=2 dp=2 tp=2", nil, nil, tpState, s, 0, 0)
	// Training on: the third step from the other layout's checkpoint against three
	// uninterrupted steps of the reference.
	refL, _, refS := spmdRun(t, tpMLPRef, one, 3, "")
	l, _, s := spmdRun(t, tpMLPRef, one, 1, tpCk)
	agree(t, "tp=2 saves, one device resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
	l, _, s = spmdRun(t, tpMLP, tp, 1, oneCk)
	agree(t, "one device saves, tp=2 resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)

	// Data parallelism: dp = 2 with M micro-batches saves; one device with M·2 resumes.
	dp := Options{DP: 2, Microbatches: m}
	ref2 := Options{Microbatches: 2 * m}
	_, dpCk, dpState := spmdRun(t, mlpPPM, dp, 2, "")
	_, _, s = spmdRun(t, mlpPPM, ref2, 0, dpCk)
	agree(t, "dp=2 checkpoint through one device", nil, nil, dpState, s, 0, 0)
	refL, _, refS = spmdRun(t, mlpPPM, ref2, 3, "")
	l, _, s = spmdRun(t, mlpPPM, ref2, 1, dpCk)
	agree(t, "dp=2 saves, one device resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
}

// TestDataParallelPlan: --dp D keeps the module's micro-batch count M per replica, divides
// the gradient by M·D (the global batch), all-reduces each gradient over dp once, right after
// the rank's last contribution to it (the last W of its stage) and together with the others
// that W completes (one bucket), and writes one program per pipeline rank.
func TestDataParallelPlan(t *testing.T) {
	res, err := Compile(mlpPPM, Options{PP: 2, DP: 2, Microbatches: 4, Schedule: "zb-h1"})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Output.Plan
	if p.Microbatches != 4 || p.GlobalMicrobatches() != 8 || p.World != 4 || len(res.Output.Programs) != 2 || len(p.Ranks) != 4 {
		t.Fatalf("plan: M %d (global %d), world %d, %d programs, %d ranks", p.Microbatches, p.GlobalMicrobatches(), p.World, len(res.Output.Programs), len(p.Ranks))
	}
	div := false
	for _, op := range res.Module.Func("optimizer").Ops {
		for _, x := range op.Operands {
			if op.Def.Name == "div" && x.Def != nil && x.Def.Def.Name == "constant" && ir.AttrString(x.Def.Attrs.Get("value")) == "dense<f32[]: 8>" {
				div = true
			}
		}
	}
	if !div {
		t.Error("@optimizer does not divide the gradients by M·dp = 8")
	}
	for i, prog := range res.Output.Programs {
		grads := map[int32]string{}
		for _, b := range prog.Buffers {
			if b.Role == pb.Role_GRAD {
				grads[b.Id] = b.Name
			}
		}
		// Every gradient is all-reduced over dp exactly once: in place, or packed into its
		// action's bucket, which is all-reduced and unpacked. Buckets are few: one per W
		// action that completes gradients (each stage here).
		lastW, reduced, buckets := -1, map[string]int{}, 0
		packed := map[int32][]int32{} // flat bucket → the gradients packed into it
		for n, in := range prog.Instrs {
			switch {
			case in.Kind == pb.Instr_END && in.Label == "W":
				lastW = n
			case in.Kind == pb.Instr_PACK:
				packed[in.Out[0]] = in.In
			case in.Kind == pb.Instr_ALL_REDUCE && (grads[in.In[0]] != "" || packed[in.In[0]] != nil):
				if in.Axis != "dp" || len(in.Out) != 0 {
					t.Errorf("program %d: gradient all-reduce %v", i, in)
				}
				buckets++
				ids := packed[in.In[0]]
				if ids == nil {
					ids = in.In
				}
				for _, id := range ids {
					reduced[grads[id]]++
				}
				// Only the accumulations of that last W (and the bucket's packing) lie between.
				for _, x := range prog.Instrs[lastW+1 : n] {
					if x.Kind != pb.Instr_ACCUM && x.Kind != pb.Instr_ALL_REDUCE && x.Kind != pb.Instr_PACK && x.Kind != pb.Instr_UNPACK {
						t.Errorf("program %d: %s between the last W and the all-reduce of %v", i, x.Kind, ids)
					}
				}
			case in.Kind == pb.Instr_BEGIN && (in.Label == "W" || in.Label == "I") && len(reduced) > 0 && len(reduced) == len(grads):
				t.Errorf("program %d: all gradients reduced before the last backward action", i)
			}
		}
		if len(grads) == 0 || len(reduced) != len(grads) {
			t.Errorf("program %d: %d gradients, %d all-reduced", i, len(grads), len(reduced))
		}
		if buckets != 1 {
			t.Errorf("program %d: %d dp all-reduces for its one stage's gradients, want one bucket", i, buckets)
		}
		for name, n := range reduced {
			if n != 1 {
				t.Errorf("program %d: %s all-reduced %d times", i, name, n)
			}
		}
	}
}

// TestCollectiveLowering runs each collective op of a partitioned module on two tp ranks and
// checks tp rank 0's outputs against the full tensors: all_gather, all_reduce {op = max},
// collective_broadcast {root = 1} and reduce_scatter of a column-parallel matmul's blocks.
func TestCollectiveLowering(t *testing.T) {
	src := writeIR(t, `module @c attributes {mesh = {tp = 2}, partitioned}

func @forward(%x: f32[2,4] {input}, %w: f32[4,2] {init = "normal(1)", param, shard = [_, tp]}) -> (f32[2,4] {name = "gathered"}, f32[2,2] {name = "max"}, f32[2,2] {name = "bcast"}, f32[1,2] {name = "scattered"}) {
  %h = matmul %x, %w : f32[2,2]
  %g = all_gather %h {axis = tp, dim = 1, parts = 2} : f32[2,4]
  %m = all_reduce %h {axis = tp, op = max} : f32[2,2]
  %b = collective_broadcast %h {axis = tp, root = 1} : f32[2,2]
  %s = reduce_scatter %h {axis = tp, dim = 0, parts = 2} : f32[1,2]
  return %g, %m, %b, %s
}
`)
	_, job := initJob(t, src, Options{TP: 2, ForwardOnly: true}, 2)
	x := []float64{1, -2, 0.5, 3, -1, 0.25, 2, -0.5}
	xt := device.Tensor{Type: ir.T(ir.F32, 2, 4), Data: make([]byte, 32)}
	for i, v := range x {
		binary.LittleEndian.PutUint32(xt.Data[4*i:], math.Float32bits(float32(v)))
	}
	if _, err := job.Step(runtime.Options{Data: data.Fixed{"x": xt}}); err != nil {
		t.Fatal(err)
	}
	w := data.Float64s(must(job.Tensors(pb.Role_PARAM))["w"]) // f32[4,4]
	y := make([]float64, 8)                                   // x @ w: f32[2,4]; tp rank k's block is columns 2k, 2k+1
	for i := range 2 {
		for j := range 4 {
			for k := range 4 {
				y[i*4+j] += x[i*4+k] * w[k*4+j]
			}
		}
	}
	block := func(r, i, j int) float64 { return y[i*4+2*r+j] }
	want := map[string][]float64{"gathered": y, "max": make([]float64, 4), "bcast": make([]float64, 4), "scattered": make([]float64, 2)}
	for i := range 2 {
		for j := range 2 {
			want["max"][i*2+j] = math.Max(block(0, i, j), block(1, i, j))
			want["bcast"][i*2+j] = block(1, i, j)
		}
	}
	for j := range 2 {
		want["scattered"][j] = block(0, 0, j) + block(1, 0, j)
	}
	out := must(job.Outputs(0))
	for name, v := range want {
		got := data.Float64s(out[name])
		if len(got) != len(v) {
			t.Fatalf("%s: %d elements, want %d", name, len(got), len(v))
		}
		for i := range v {
			if math.Abs(got[i]-v[i]) > 1e-5*(1+math.Abs(v[i])) {
				t.Errorf("%s = %v, want %v", name, got, v)
				break
			}
		}
	}
}

// TestCollectiveLoweringErrors: collectives code generation cannot lower are compile errors
// naming the function and value, and parameters split over dp (ZeRO) are refused.
func TestCollectiveLoweringErrors(t *testing.T) {
	module := func(mesh, shard, op string) string {
		return writeIR(t, `module @bad attributes {mesh = {`+mesh+`}, partitioned}

func @forward(%x: f32[4,8] {input}, %w: f32[8,8] {init = "normal(0.2)", param, shard = `+shard+`}) -> (f32[] {loss}) {
  %h = matmul %x, %w : f32[4,8]
  `+op+`
  %loss = reduce_mean %y : f32[]
  return %loss
}
`)
	}
	for _, c := range []struct {
		src  string
		opts Options
		want string
	}{
		{module("tp = 2", "[_, tp]", "%y = all_gather %h {axis = tp, dim = 0, parts = 4} : f32[16,8]"), Options{TP: 2},
			"@F_s0: %y = all_gather {parts = 4} over tp, which has 2 ranks"},
		{module("tp = 2", "[_, tp]", "%y = all_reduce %h {axis = pp} : f32[4,8]"), Options{TP: 2},
			"@F_s0: %y = all_reduce over pp: a stage's function runs on one pipeline rank"},
		{module("tp = 2", "[_, tp]", "%y = all_reduce %h {axis = sp} : f32[4,8]"), Options{TP: 2},
			`@F_s0: %y = all_reduce over "sp": not an axis of the mesh (pp, dp, ep, edp, cp, tp)`},
		{module("dp = 2, tp = 2", "[dp, _]", "%y = all_reduce %h {axis = tp} : f32[4,8]"), Options{TP: 2, DP: 2},
			"parameter %w: shard [dp, _] splits it over dp: only optimizer state (ZeRO, --zero) and ZeRO-3's parameters are split over the data-parallel replicas"},
	} {
		_, err := Compile(c.src, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	// Over an axis of one rank a collective is the identity: no instruction at all.
	res, err := Compile(module("tp = 2", "[_, tp]", "%y = all_reduce %h {axis = dp} : f32[4,8]"), Options{TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range res.Output.Programs[0].Instrs {
		if in.Axis == "dp" {
			t.Errorf("a collective over dp = 1 became %v", in)
		}
	}
}

func writeIR(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.ir")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUnpartitionedShardAnnotations: in a module that is not partitioned, shapes are the full
// tensors' and a `shard` annotation is a request for the partitioner: every rank holds the
// whole parameter, whatever axes it names (dp included), and data parallelism compiles.
func TestUnpartitionedShardAnnotations(t *testing.T) {
	res, err := Compile("../testdata/dsl/shard.ppm", Options{DP: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Output.Plan.Params {
		if len(p.Shard) > 0 {
			t.Errorf("parameter %s recorded as sharded %v", p.Name, p.Shard)
		}
	}
	for _, b := range res.Output.Programs[0].Buffers {
		if len(b.Shard) > 0 {
			t.Errorf("buffer %s has a sharding", b.Name)
		}
	}
	// A mesh beyond the runtime's limit is refused by code generation.
	if _, err := Compile(tpMLP, Options{TP: 2, DP: 40000}); err == nil || !strings.Contains(err.Error(), "mesh pp=1 dp=40000 tp=2 has more ranks than the limit 65536") {
		t.Errorf("a mesh of 80000 ranks: %v", err)
	}
}

// TestZeroShardsMemory: ZeRO-1 halves the optimizer state a replica holds at dp = 2 (every
// weight of the tiny GPT has an even first dim) and ZeRO-2 the gradient accumulators too;
// the parameters stay whole.
func TestZeroShardsMemory(t *testing.T) {
	mem := func(zero int) (param, grad, state int64) {
		res, err := Compile(gptPPM, Options{Load: LoadOptions{Preset: "tiny"}, DP: 2, Zero: zero, Microbatches: 2})
		if err != nil {
			t.Fatal(err)
		}
		p := res.Output.Plan.Programs[0]
		return p.ParamBytes, p.GradBytes, p.StateBytes
	}
	p0, g0, s0 := mem(0)
	p1, g1, s1 := mem(1)
	p2, g2, s2 := mem(2)
	p3, g3, s3 := mem(3)
	if p1 != p0 || p2 != p0 || p3 != p0/2 {
		t.Errorf("parameter bytes %d, %d, %d, %d: ZeRO-1 and -2 keep parameters whole, ZeRO-3 holds half", p0, p1, p2, p3)
	}
	if s1 != s0/2 || s2 != s0/2 || s3 != s0/2 {
		t.Errorf("optimizer state bytes %d (no ZeRO), %d (ZeRO-1), %d (ZeRO-2), %d (ZeRO-3): want half with ZeRO", s0, s1, s2, s3)
	}
	if g1 != g0 || g2 != g0/2 || g3 != g0/2 {
		t.Errorf("gradient bytes %d (no ZeRO), %d (ZeRO-1), %d (ZeRO-2), %d (ZeRO-3): want whole with ZeRO-1, half with ZeRO-2 and 3", g0, g1, g2, g3)
	}
}

// TestZero3Checkpoint: a ZeRO-3 checkpoint holds whole tensors (each replica writes its
// blocks, merged by offset), so ZeRO-3 resumes ZeRO-0 and one device, and they resume it: a
// resume followed by a save with no step in between gives the same bits, and training on from
// the other layout's checkpoint follows the uninterrupted run within the tolerance.
func TestZero3Checkpoint(t *testing.T) {
	const m = 2
	tiny := LoadOptions{Preset: "tiny"}
	z3 := Options{Load: tiny, DP: 2, Zero: 3, Microbatches: m, Optimizer: sgdM}
	z0 := Options{Load: tiny, DP: 2, Microbatches: m, Optimizer: sgdM}
	one := Options{Load: tiny, Microbatches: 2 * m, Optimizer: sgdM}
	z3pp := Options{Load: tiny, PP: 2, DP: 2, TP: 2, Zero: 3, Microbatches: m, Optimizer: sgdM}
	_, z3Ck, z3State := spmdRun(t, gptPPM, z3, 2, "")
	_, z0Ck, z0State := spmdRun(t, gptPPM, z0, 2, "")
	resumesUnchanged(t, []resumeCase{
		{"zero 3 checkpoint through zero 0", z0, z3Ck, z3State},
		{"zero 3 checkpoint through one device", one, z3Ck, z3State},
		{"zero 0 checkpoint through zero 3", z3, z0Ck, z0State},
		{"zero 0 checkpoint through pp 2 tp 2 zero 3", z3pp, z0Ck, z0State},
	})
	refL, _, refS := spmdRun(t, gptPPM, z0, 3, "")
	l, _, s := spmdRun(t, gptPPM, z0, 1, z3Ck)
	agree(t, "zero 3 saves, zero 0 resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
	l, _, s = spmdRun(t, gptPPM, z3, 1, z0Ck)
	agree(t, "zero 0 saves, zero 3 resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
}

// TestZero3MixedPrecision: under bf16 a parameter read only through its 16-bit cast is cast
// as a block and gathered in bf16 (param-gather); casting then gathering moves the same bits
// as gathering then casting, so ZeRO-3 trains bit for bit as ZeRO-2, which keeps parameters
// whole — with and without full recomputation, whose rebuilt casts gather again.
func TestZero3MixedPrecision(t *testing.T) {
	for _, rc := range []string{"none", "full"} {
		o := Options{Load: LoadOptions{Preset: "tiny"}, PP: 2, DP: 2, Microbatches: 2, Precision: "bf16", Recompute: rc, Optimizer: sgdM}
		o.Zero = 2
		l2, _, s2 := spmdRun(t, gptPPM, o, spmdSteps, "")
		o.Zero = 3
		l3, _, s3 := spmdRun(t, gptPPM, o, spmdSteps, "")
		agree(t, "bf16 zero 3 against zero 2, recompute "+rc, l2, l3, s2, s3, 0, 0)
	}
}

// TestDistributedInference: ppc infer on a transformer runs the same forward on a pipeline
// and on tensor-parallel ranks (with sequence parallelism's layouts untouched: inference
// compiles without --sp) and gives the one-device outputs, the logits and the loss, within
// rtol 1e-5 and atol 1e-6.
func TestDistributedInference(t *testing.T) {
	for _, model := range []string{gptPPM, llamaPPM} {
		lo := LoadOptions{Preset: "tiny", Set: map[string]string{"n_layers": "2"}}
		one, _, err := Infer(model, lo, InferMesh{}, nil, 3)
		if err != nil {
			t.Fatal(err)
		}
		meshes := []InferMesh{{TP: 2}, {PP: 2}, {PP: 2, TP: 2}, {CP: 2}, {CP: 4}, {CP: 4, CPSplit: "contiguous"}, {PP: 2, CP: 2, TP: 2}}
		if model == gptPPM {
			meshes = append(meshes, InferMesh{TP: 4}) // llama tiny has 2 kv heads
		}
		for _, mesh := range meshes {
			got, _, err := Infer(model, lo, mesh, nil, 3)
			if err != nil {
				t.Fatalf("%s on %+v: %v", filepath.Base(model), mesh, err)
			}
			if len(got) != len(one) {
				t.Fatalf("%s on %+v: outputs %v, one device %v", filepath.Base(model), mesh, outputNames(got), outputNames(one))
			}
			for i, o := range got {
				a, b := data.Float64s(one[i].Tensor), data.Float64s(o.Tensor)
				worst := 0.0
				for k := range a {
					// atol 1e-6: the logits (about 0.01 here) differ by up to 3e-7 where
					// tensor parallelism adds f32 partial sums in another order.
					worst = max(worst, math.Abs(a[k]-b[k]))
					if math.Abs(a[k]-b[k]) > 1e-5*math.Abs(a[k])+1e-6 {
						t.Errorf("%s on %+v: output %s element %d is %.9g, one device %.9g", filepath.Base(model), mesh, o.Name, k, b[k], a[k])
					}
				}
				t.Logf("%s on %+v: %s max abs err %.3g", filepath.Base(model), mesh, o.Name, worst)
			}
		}
	}
}
