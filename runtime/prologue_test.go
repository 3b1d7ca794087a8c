package runtime_test

import (
	"math"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/jobtest"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
)

// An inference program runs each batch norm (and its ReLU) before a pointwise convolution
// inside the convolution's launch; the training program of the same model runs them on
// their own. The forward pass gives the same loss, bit for bit.
func TestProloguesRunLikeTheirLaunches(t *testing.T) {
	const model = "../testdata/ir/preact.ir"
	var losses []float64
	for _, fwd := range []bool{true, false} {
		dir := jobtest.Compile(t, model, compiler.Options{ForwardOnly: fwd, Microbatches: 1})
		job, err := Load(dir, cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		pre := 0
		for _, k := range job.Ranks[0].Prog.Kernels {
			if k.Pre != nil {
				pre++
			}
		}
		if want := map[bool]int{true: 3, false: 0}[fwd]; pre != want {
			t.Fatalf("forward only %v: %d kernels with a prologue, want %d", fwd, pre, want)
		}
		// The plan counts a convolution's FLOPs past its prologue's operands: 2·(864·8 +
		// 432·20 + 288·6) for the three convolutions and 2·10·144 for the classifier.
		if f := job.Plan.Programs[0].FLOPs; fwd && f != 37440 {
			t.Errorf("the inference plan counts %d FLOPs a step, want 37440", f)
		}
		if err := job.Init(7); err != nil {
			t.Fatal(err)
		}
		r, err := job.Step(Options{Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, r.Loss)
	}
	if math.Float64bits(losses[0]) != math.Float64bits(losses[1]) || math.IsNaN(losses[0]) {
		t.Fatalf("inference loss %v, training's forward %v", losses[0], losses[1])
	}
}

// A prologue kernel is checked as its prologue and then its op: a corrupted one is refused
// naming the problem.
func TestLoaderRejectsBadPrologues(t *testing.T) {
	dir := jobtest.Compile(t, "../testdata/ir/preact.ir", compiler.Options{ForwardOnly: true, Microbatches: 1})
	if _, err := Load(dir, cpu.New()); err != nil {
		t.Fatal(err)
	}
	prologue := func(p *pb.Program) *pb.Kernel {
		for _, k := range p.Kernels {
			if k.Pre != nil && len(k.Pre.Fused) > 0 {
				return k
			}
		}
		panic("no prologue with a ReLU in the program")
	}
	plain := func(p *pb.Program) *pb.Kernel { // a batch norm alone before a convolution alone
		for _, k := range p.Kernels {
			if k.Pre != nil && len(k.Pre.Fused) == 0 && len(k.Fused) == 0 {
				return k
			}
		}
		panic("no plain prologue in the program")
	}
	cases := []struct {
		name string
		f    func(p *pb.Program)
		want string
	}{
		{"pre inputs without prologue", func(p *pb.Program) { prologue(p).Pre = nil }, "conv kernel with pre_inputs 5 but no prologue"},
		{"no pre inputs", func(p *pb.Program) { prologue(p).PreInputs = 0 }, "a prologue is an op before an op"},
		{"pre inputs past the operands", func(p *pb.Program) { plain(p).PreInputs = 12 }, "malformed prologue on 12"},
		{"pre inputs past the epilogue's", func(p *pb.Program) { prologue(p).PreInputs = 12 }, "epilogue on 7 operands but a prologue on 12"},
		{"batch norm's result type", func(p *pb.Program) { plain(p).PreInputs = 6 }, "prologue: batch_norm"},
		{"nested", func(p *pb.Program) { k := prologue(p); k.Pre.Pre, k.Pre.PreInputs = &pb.Kernel{Op: "relu"}, 1 }, "a prologue is an op before an op"},
		{"fused prologue", func(p *pb.Program) { prologue(p).Pre.Op = "fused" }, "a prologue is an op before an op"},
		{"unknown op", func(p *pb.Program) { prologue(p).Pre.Op = "nope" }, `prologue: unknown op "nope"`},
		{"prologue short of operands", func(p *pb.Program) { prologue(p).PreInputs = 4 }, "prologue: batch_norm"},
		{"epilogue before the prologue's end", func(p *pb.Program) { prologue(p).OpInputs = 3 }, "epilogue on 3 operands but a prologue on 5"},
		{"step type", func(p *pb.Program) { prologue(p).Pre.Fused[0].Type.Shape = []int64{2, 8, 6, 5} }, "prologue: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refusesCorrupt(t, dir, c.f, c.want) })
	}
}
