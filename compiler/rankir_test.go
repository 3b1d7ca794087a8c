package compiler

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
)

// comm is one kind of communication or optimizer instruction, with its mesh axis.
type comm struct{ kind, axis string }

// irComm counts what pipeline rank r's program (@rank<r> and the functions it runs and
// calls, once per run) says the rank communicates, and its optimizer steps and metrics, as
// the instructions each op lowers to: a collective over an axis of one rank, copy_to_axis
// and axis_index communicate nothing.
func irComm(t *testing.T, m *ir.Module, r int) map[comm]int {
	t.Helper()
	size := map[string]int{}
	for _, a := range m.Mesh() {
		size[a.Name] = a.Size
	}
	kinds := map[string]string{"all_reduce": "ALL_REDUCE", "all_gather": "ALL_GATHER", "reduce_scatter": "REDUCE_SCATTER",
		"collective_broadcast": "BROADCAST", "grad_all_reduce": "ALL_REDUCE", "grad_reduce_scatter": "REDUCE_SCATTER", "param_all_gather": "ALL_GATHER"}
	out := map[comm]int{}
	collectives := func(ops []*ir.Op) {
		for _, op := range ops {
			axis := op.Attrs.Str("axis", "")
			if k := kinds[op.Name()]; k != "" && (size[axis] > 1 || op.Def.Has(ir.State)) {
				out[comm{k, axis}]++
			}
		}
	}
	prog := m.Func(fmt.Sprintf("%s%d", passes.RankProgramPrefix, r))
	if prog == nil {
		t.Fatalf("no @rank%d", r)
	}
	for _, op := range prog.Ops {
		switch op.Name() {
		case "send", "grad_send":
			out[comm{"SEND", ""}]++
		case "recv", "grad_recv":
			out[comm{"RECV", ""}]++
		case "run", "call", "optimizer":
			f := m.Func(op.Attrs.Str("func", ""))
			collectives(f.Ops)
			if op.Name() == "optimizer" {
				out[comm{"OPT", ""}]++
				for i := range f.Results {
					if f.ResultAttrs[i].Has(passes.AttrMetric) {
						out[comm{"METRIC", ""}]++
					}
				}
			}
		default:
			collectives([]*ir.Op{op})
		}
	}
	return out
}

// programComm counts a program's communication and optimizer instructions.
func programComm(p *pb.Program) map[comm]int {
	out := map[comm]int{}
	for _, in := range p.Instrs {
		switch in.Kind {
		case pb.Instr_SEND, pb.Instr_RECV, pb.Instr_METRIC:
			out[comm{in.Kind.String(), ""}]++
		case pb.Instr_ALL_REDUCE, pb.Instr_ALL_GATHER, pb.Instr_REDUCE_SCATTER, pb.Instr_BROADCAST:
			out[comm{in.Kind.String(), in.Axis}]++
		case pb.Instr_BEGIN:
			if in.Label == "OPT" {
				out[comm{"OPT", ""}]++
			}
		}
	}
	return out
}

// TestProgramsCommunicateWhatTheIRSays: code generation only lowers. For every plan of a grid
// over pipeline, tensor and data parallelism, ZeRO-1, 2 and 3, a tied weight, fp16 loss scaling
// and clipping, each program's sends, receives, collectives (by mesh axis), optimizer steps
// and metrics are exactly those of its rank program's ops, one instruction each — nothing
// communicated that the IR does not show.
func TestProgramsCommunicateWhatTheIRSays(t *testing.T) {
	tiny := LoadOptions{Preset: "tiny"}
	grid := []struct {
		model string
		opts  Options
		want  []string // kinds some program must have, so that the grid covers them
	}{
		{mlpPPM, Options{PP: 2, Microbatches: 4}, []string{"SEND", "RECV", "OPT"}},
		{gptPPM, Options{Load: tiny, PP: 2, Microbatches: 2}, []string{"SEND", "RECV"}},
		{gptPPM, Options{Load: tiny, PP: 2, TP: 2, SP: true, DP: 2, Microbatches: 4}, []string{"ALL_REDUCE dp", "ALL_REDUCE tp", "ALL_GATHER tp"}},
		{gptPPM, Options{Load: tiny, PP: 4, Microbatches: 4, Schedule: "zb-h1", Precision: "fp16"}, []string{"ALL_REDUCE pp", "METRIC"}},
		{gptPPM, Options{Load: tiny, PP: 2, DP: 2, Zero: 1, Microbatches: 2, Precision: "fp16", Optimizer: "adamw{clip=1}"}, []string{"REDUCE_SCATTER dp", "ALL_GATHER dp", "ALL_REDUCE dp"}},
		{gptPPM, Options{Load: tiny, PP: 2, DP: 2, TP: 2, SP: true, Zero: 2, Microbatches: 2, Optimizer: "sgd{lr=0.1,clip=0.5}"}, []string{"REDUCE_SCATTER dp", "ALL_GATHER dp"}},
		{gptPPM, Options{Load: tiny, PP: 2, DP: 2, Zero: 1, Microbatches: 4, Schedule: "interleaved-1f1b"}, []string{"REDUCE_SCATTER dp"}},
		{gptPPM, Options{Load: tiny, DP: 2, Zero: 2, Microbatches: 2, Precision: "bf16"}, []string{"REDUCE_SCATTER dp"}},
		// ZeRO-3: the gathers and reduce-scatters are in the functions the runs instantiate.
		{gptPPM, Options{Load: tiny, PP: 2, DP: 2, TP: 2, SP: true, Zero: 3, Microbatches: 2, Precision: "bf16", Recompute: "full"}, []string{"ALL_GATHER dp", "REDUCE_SCATTER dp", "ALL_GATHER tp"}},
		{mlpPPM, Options{PP: 2, DP: 2, Microbatches: 2, ForwardOnly: true}, []string{"SEND"}},
	}
	for _, c := range grid {
		o := c.opts
		name := fmt.Sprintf("%s pp%d tp%d dp%d zero%d %s %s %s", strings.TrimSuffix(c.model[strings.LastIndex(c.model, "/")+1:], ".ppm"),
			max(o.PP, 1), max(o.TP, 1), max(o.DP, 1), o.Zero, o.Schedule, o.Precision, o.Optimizer)
		t.Run(name, func(t *testing.T) {
			res, err := Compile(c.model, o)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for r, p := range res.Output.Programs {
				want, got := irComm(t, res.Module, r), programComm(p)
				for _, k := range slices.SortedFunc(maps.Keys(merge(want, got)), func(a, b comm) int { return strings.Compare(a.kind+a.axis, b.kind+b.axis) }) {
					if want[k] != got[k] {
						t.Errorf("pipeline rank %d: %d %s %s instructions, the rank program's ops say %d", r, got[k], k.kind, k.axis, want[k])
					}
					if got[k] > 0 {
						seen[strings.TrimSpace(k.kind+" "+k.axis)] = true
					}
				}
			}
			for _, k := range c.want {
				if !seen[k] {
					t.Errorf("no program has a %s instruction", k)
				}
			}
		})
	}
}

func merge(a, b map[comm]int) map[comm]int {
	out := maps.Clone(a)
	for k, v := range b {
		out[k] += v
	}
	return out
}

// TestOptimizerUpdatesInPlace: the optimizer's elementwise updates write each parameter and
// state tensor in place — no copy back, no buffer for the new value — and a launch that
// writes one reads it only where the value is its own (each element at its own index).
// fp16's loss scale, which a metric reports before the update, is still copied at the end.
func TestOptimizerUpdatesInPlace(t *testing.T) {
	tiny := LoadOptions{Preset: "tiny"}
	for _, c := range []struct {
		opts       Options
		wantCopies int // COPY instructions inside OPT
	}{
		{Options{Load: tiny, Microbatches: 2, Precision: "bf16"}, 0},
		{Options{Load: tiny, PP: 2, TP: 2, Microbatches: 2, Optimizer: "sgd{lr=0.1,momentum=0.9}"}, 0},
		{Options{Load: tiny, Microbatches: 2, Precision: "fp16"}, 1},
	} {
		t.Run(fmt.Sprintf("%s %s tp%d", c.opts.Precision, c.opts.Optimizer, c.opts.TP), func(t *testing.T) {
			res, err := Compile(gptPPM, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			for r, p := range res.Output.Programs {
				inOpt, copies, writes := false, 0, 0
				for _, in := range p.Instrs {
					if in.Label == "OPT" && (in.Kind == pb.Instr_BEGIN || in.Kind == pb.Instr_END) {
						inOpt = in.Kind == pb.Instr_BEGIN
					}
					if !inOpt {
						continue
					}
					switch in.Kind {
					case pb.Instr_COPY:
						copies++
					case pb.Instr_LAUNCH:
						for _, o := range in.Out {
							role := p.Buffers[o].Role
							if role == pb.Role_PARAM || role == pb.Role_STATE {
								writes++
							}
						}
					}
				}
				if copies != c.wantCopies {
					t.Errorf("rank %d: %d copies in the optimizer's step, want %d", r, copies, c.wantCopies)
				}
				if writes == 0 {
					t.Errorf("rank %d: no launch writes a parameter or state in place", r)
				}
			}
		})
	}
}

// TestGradientsFirstWrittenNotZeroed: a gradient accumulator whose first touch in a step is
// an accumulation is written by it (a COPY, or a cast to fp32 for bf16 gradients) instead of
// being zeroed at the step's start and added to: no accumulator is zeroed and then first
// accumulated into. (The equivalence grids check the values.)
func TestGradientsFirstWrittenNotZeroed(t *testing.T) {
	tiny := LoadOptions{Preset: "tiny"}
	for _, o := range []Options{
		{Load: tiny, Microbatches: 1, Precision: "bf16"},
		{Load: tiny, Microbatches: 4, PP: 2},
	} {
		res, err := Compile(gptPPM, o)
		if err != nil {
			t.Fatal(err)
		}
		for r, p := range res.Output.Programs {
			next := map[int32]pb.Instr_Kind{} // a gradient's touch after its ZERO
			zeroed := map[int32]bool{}
			writes := 0
			for _, in := range p.Instrs {
				for _, id := range append(append([]int32{}, in.In...), in.Out...) {
					if p.Buffers[id].Role != pb.Role_GRAD {
						continue
					}
					if zeroed[id] {
						if _, ok := next[id]; !ok && in.Kind != pb.Instr_ZERO {
							next[id] = in.Kind
						}
					}
					if in.Kind == pb.Instr_ZERO {
						zeroed[id] = true
					}
					if (in.Kind == pb.Instr_COPY || in.Kind == pb.Instr_LAUNCH) && len(in.Out) == 1 && in.Out[0] == id && !zeroed[id] {
						writes++
					}
				}
			}
			for id, k := range next {
				if k == pb.Instr_ACCUM && p.Buffers[id].Role == pb.Role_GRAD && firstTouch(p, id) == pb.Instr_ZERO {
					t.Errorf("%+v rank %d: %s is zeroed and then accumulated into", o, r, p.Buffers[id].Name)
				}
			}
			if writes == 0 {
				t.Errorf("%+v rank %d: no gradient is written by its first accumulation", o, r)
			}
		}
	}
}

// firstTouch is the kind of the first instruction of p that reads or writes buffer id.
func firstTouch(p *pb.Program, id int32) pb.Instr_Kind {
	for _, in := range p.Instrs {
		if slices.Contains(in.In, id) || slices.Contains(in.Out, id) {
			return in.Kind
		}
	}
	return pb.Instr_NOP
}
