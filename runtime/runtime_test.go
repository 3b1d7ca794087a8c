package runtime_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/jobtest"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/fault"
)

func TestForwardRunsAndIsDeterministic(t *testing.T) {
	dir := jobtest.Compile(t, "../testdata/ir/mlp.ir", compiler.Options{ForwardOnly: true, Microbatches: 1})
	var losses []float64
	for i := 0; i < 2; i++ {
		job, err := Load(dir, cpu.New())
		if err != nil {
			t.Fatal(err)
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
	if losses[0] != losses[1] {
		t.Fatalf("two runs differ: %v", losses)
	}
	// Random init of a 10-class classifier: the loss is near ln 10.
	if losses[0] < 2.0 || losses[0] > 2.6 {
		t.Fatalf("loss %v is not near ln(10)", losses[0])
	}
}

// corrupt applies f to rank 0's program in a copy of dir and returns the new dir.
// corrupt copies the plan in dir with rank 0's program changed by f, and plan.json's checksum
// updated to match, as a buggy compiler would write it: the loader's validation must catch
// what the checksum cannot.
func corrupt(t *testing.T, dir string, f func(p *pb.Program)) string {
	t.Helper()
	out := t.TempDir()
	plan, err := codegen.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, codegen.ProgramFile(0)))
	if err != nil {
		t.Fatal(err)
	}
	p := &pb.Program{}
	if err := proto.Unmarshal(data, p); err != nil {
		t.Fatal(err)
	}
	f(p)
	if data, err = proto.Marshal(p); err != nil {
		t.Fatal(err)
	}
	plan.Programs[0].ProgramSHA256 = codegen.ProgramSHA256(data)
	if err := os.WriteFile(filepath.Join(out, codegen.ProgramFile(0)), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := codegen.WritePlan(out, plan); err != nil {
		t.Fatal(err)
	}
	return out
}

func firstLaunch(p *pb.Program) *pb.Instr {
	for _, in := range p.Instrs {
		if in.Kind == pb.Instr_LAUNCH {
			return in
		}
	}
	return nil
}

func TestLoaderRejectsCorruptPrograms(t *testing.T) {
	dir := jobtest.Compile(t, "../testdata/ir/mlp.ir", compiler.Options{ForwardOnly: true, Microbatches: 1})
	cases := []struct {
		name string
		f    func(p *pb.Program)
		want string
	}{
		{"format", func(p *pb.Program) { p.FormatVersion = 99 }, "format version 99"},
		{"pp", func(p *pb.Program) { p.Pp = 3 }, "program is for pipeline rank 3, the plan runs it as pipeline rank 0"},
		{"mesh", func(p *pb.Program) { p.Mesh[2].Value = 2 }, "program is for mesh pp=1 dp=1 tp=2, the plan's is pp=1 dp=1 tp=1"},
		{"no mesh", func(p *pb.Program) { p.Mesh = nil }, "program is for mesh (none)"},
		{"hash", func(p *pb.Program) { p.SourceHash = "x" }, "another model"},
		{"offset", func(p *pb.Program) {
			for _, b := range p.Buffers {
				if b.Role == pb.Role_ACTIVATION {
					b.Offset = p.ArenaBytes
					return
				}
			}
		}, "do not fit the"},
		{"dtype", func(p *pb.Program) { p.Buffers[0].Dtype = 77 }, "bad dtype 77"},
		{"shape", func(p *pb.Program) { firstLaunchOut(p).Shape = []int64{3} }, "is f32[16,64], buffer is f32[3]"},
		{"kernel index", func(p *pb.Program) { firstLaunch(p).Kernel = 999 }, "kernel 999 out of range"},
		{"buffer index", func(p *pb.Program) { firstLaunch(p).In[0] = 12345 }, "buffer 12345 out of range"},
		{"op", func(p *pb.Program) { p.Kernels[0].Op = "frobnicate" }, `unknown op "frobnicate"`},
		{"attr", func(p *pb.Program) {
			p.Kernels[0].Attrs = append(p.Kernels[0].Attrs, &pb.NamedAttr{Name: "bogus", Value: &pb.Attr{Value: &pb.Attr_I{I: 1}}})
		}, `has no attribute "bogus"`},
		{"const data", func(p *pb.Program) {
			for _, b := range p.Buffers {
				if b.Role == pb.Role_CONST {
					b.Data = b.Data[:1]
					return
				}
			}
			p.Buffers = append(p.Buffers, &pb.Buffer{Id: int32(len(p.Buffers)), Role: pb.Role_CONST, Dtype: pb.DType_F32, Shape: []int64{2}, Data: []byte{1}})
		}, "constant buffer"},
		{"init", func(p *pb.Program) {
			for _, b := range p.Buffers {
				if b.Role == pb.Role_PARAM {
					b.Init = "gaussian(1)"
					return
				}
			}
		}, `bad initialiser "gaussian(1)"`},
		{"peer", func(p *pb.Program) {
			p.Instrs = append(p.Instrs, &pb.Instr{Kind: pb.Instr_SEND, In: []int32{0}, Peer: 5})
		}, "peer 5 is not another pipeline rank of 1"},
		{"input", func(p *pb.Program) {
			for _, in := range p.Instrs {
				if in.Kind == pb.Instr_INPUT {
					in.Label = "nope"
					return
				}
			}
		}, `input "nope" is not in the plan`},
		{"kind", func(p *pb.Program) { p.Instrs[0].Kind = 42 }, "unknown instruction kind 42"},
		{"write const", func(p *pb.Program) {
			for _, b := range p.Buffers {
				if b.Role == pb.Role_PARAM {
					p.Instrs = append(p.Instrs, &pb.Instr{Kind: pb.Instr_ZERO, Out: []int32{b.Id}})
					return
				}
			}
		}, "writes to read-only buffer"},
		{"two params one name", func(p *pb.Program) {
			var params []*pb.Buffer
			for _, b := range p.Buffers {
				if b.Role == pb.Role_PARAM {
					params = append(params, b)
				}
			}
			params[1].Name = params[0].Name
		}, "are both param"},
		// The optimizer's elementwise launches update parameters in place; an elementwise
		// launch outside the OPT block writing one is refused.
		{"launch writes param", func(p *pb.Program) {
			param := -1
			for _, b := range p.Buffers {
				if b.Role == pb.Role_PARAM {
					param = int(b.Id)
				}
			}
			for _, in := range p.Instrs {
				if in.Kind == pb.Instr_LAUNCH && (len(p.Kernels[in.Kernel].Fused) > 0 || p.Kernels[in.Kernel].Op == "relu") {
					w := proto.Clone(in).(*pb.Instr)
					w.Out = []int32{int32(param)}
					p.Instrs = append(p.Instrs, w)
					return
				}
			}
			panic("no elementwise launch")
		}, "writes to read-only buffer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refusesCorrupt(t, dir, c.f, c.want) })
	}
}

// refusesCorrupt checks that the loader refuses dir's program changed by f with a
// fault.InputError naming the program file and containing want.
func refusesCorrupt(t *testing.T, dir string, f func(p *pb.Program), want string) {
	t.Helper()
	_, err := Load(corrupt(t, dir, f), cpu.New())
	var ie *fault.InputError
	if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an fault.InputError containing %q", err, want)
	}
	if !strings.Contains(err.Error(), "rank-00000.ppx") {
		t.Fatalf("error does not name the file: %v", err)
	}
}

func flipByte(b []byte, i int) []byte {
	b = append([]byte(nil), b...)
	b[i] ^= 0x01
	return b
}

func firstLaunchOut(p *pb.Program) *pb.Buffer {
	return p.Buffers[firstLaunch(p).Out[0]]
}

func TestLoaderRejectsBadFiles(t *testing.T) {
	dir := jobtest.Compile(t, "../testdata/ir/mlp.ir", compiler.Options{ForwardOnly: true, Microbatches: 1})
	prog, _ := os.ReadFile(filepath.Join(dir, codegen.ProgramFile(0)))
	plan, _ := os.ReadFile(filepath.Join(dir, "plan.json"))
	noSum := regexp.MustCompile(`"program_sha256": "[0-9a-f]*"`).ReplaceAll(plan, []byte(`"program_sha256": ""`))
	if bytes.Equal(noSum, plan) {
		t.Fatal("plan.json records no checksum")
	}
	cases := []struct {
		name       string
		plan, prog []byte
		want       string
	}{
		// plan.json's checksum is checked before the program is decoded.
		{"truncated program", plan, prog[:len(prog)/2], "rank-00000.ppx: does not match plan.json (its SHA-256 differs)"},
		{"random program", plan, []byte("\x0a\xff\xff\xff\xff\x0f garbage"), "does not match plan.json"},
		{"one byte flipped", plan, flipByte(prog, len(prog)/2), "rank-00000.ppx: does not match plan.json (its SHA-256 differs): the file is corrupted"},
		{"random program, no checksum", noSum, []byte("\x0a\xff\xff\xff\xff\x0f garbage"), "not a ppc program"},
		{"truncated plan", plan[:len(plan)/2], prog, "plan.json"},
		{"plan not json", []byte("hello"), prog, "plan.json"},
		{"plan world", []byte(strings.Replace(string(plan), `"world": 1`, `"world": 0`, 1)), prog, "world size 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			os.WriteFile(filepath.Join(d, "plan.json"), c.plan, 0o644)
			os.WriteFile(filepath.Join(d, codegen.ProgramFile(0)), c.prog, 0o644)
			_, err := Load(d, cpu.New())
			var ie *fault.InputError
			if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an fault.InputError containing %q", err, c.want)
			}
		})
	}
	if _, err := Load(t.TempDir(), cpu.New()); err == nil || !strings.Contains(err.Error(), "plan.json") {
		t.Fatalf("empty dir: %v", err)
	}
}

// FuzzLoadProgram feeds mutated programs to the loader and runs whatever loads: the runtime
// must report bad programs as errors, never crash.
func FuzzLoadProgram(f *testing.F) {
	dir := jobtest.Compile(f, "../testdata/ir/mlp.ir", compiler.Options{ForwardOnly: true, Microbatches: 1})
	prog, _ := os.ReadFile(filepath.Join(dir, codegen.ProgramFile(0)))
	plan, err := codegen.ReadPlan(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(prog)
	f.Add(prog[:len(prog)/3])
	// The same program with collectives over the one-rank group, so that mutations reach
	// the collective checks.
	withColl := &pb.Program{}
	if err := proto.Unmarshal(prog, withColl); err != nil {
		f.Fatal(err)
	}
	for _, b := range withColl.Buffers {
		if b.Role == pb.Role_ACTIVATION && b.Dtype == pb.DType_F32 && len(b.Shape) > 0 {
			withColl.Instrs = append(withColl.Instrs,
				&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{b.Id}, Group: []int32{0}, ReduceOp: pb.Instr_MAX},
				&pb.Instr{Kind: pb.Instr_BROADCAST, In: []int32{b.Id}, Group: []int32{0}},
				&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{b.Id}, Out: []int32{b.Id}, Group: []int32{0}})
			break
		}
	}
	if data, err := proto.Marshal(withColl); err == nil {
		f.Add(data)
	}
	// And with a fused kernel writing two results (lower's multi-result chains), so that
	// mutations reach its output steps.
	multi := proto.Clone(withColl).(*pb.Program)
	multi.Instrs = multi.Instrs[:len(multi.Instrs)-3]
	for _, b := range multi.Buffers {
		if b.Role == pb.Role_ACTIVATION && b.Dtype == pb.DType_F32 && len(b.Shape) > 0 {
			ty := &pb.TensorType{Dtype: b.Dtype, Shape: b.Shape}
			multi.Kernels = append(multi.Kernels, &pb.Kernel{Op: "fused", Outputs: []int32{0, 1},
				Fused: []*pb.FusedStep{{Op: "neg", Args: []int32{0}, Type: ty}, {Op: "abs", Args: []int32{1}, Type: ty}}})
			multi.Instrs = append(multi.Instrs, &pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: int32(len(multi.Kernels) - 1),
				In: []int32{b.Id}, Out: []int32{b.Id, b.Id}})
			break
		}
	}
	if data, err := proto.Marshal(multi); err == nil {
		f.Add(data)
	}
	// And with an epilogue (lower makes them of a convolution and its ReLU; here a matmul's
	// launch with a ReLU after it), so that mutations reach the epilogue checks.
	epi := proto.Clone(withColl).(*pb.Program)
	epi.Instrs = epi.Instrs[:len(epi.Instrs)-3]
	for _, in := range epi.Instrs {
		if in.Kind != pb.Instr_LAUNCH || epi.Kernels[in.Kernel].Op != "matmul" {
			continue
		}
		out := epi.Buffers[in.Out[0]]
		epi.Kernels = append(epi.Kernels, &pb.Kernel{Op: "matmul", OpInputs: int32(len(in.In)),
			Fused: []*pb.FusedStep{{Op: "relu", Args: []int32{0}, Type: &pb.TensorType{Dtype: out.Dtype, Shape: out.Shape}}}})
		e := proto.Clone(in).(*pb.Instr)
		e.Kernel = int32(len(epi.Kernels) - 1)
		epi.Instrs = append(epi.Instrs, e)
		break
	}
	if data, err := proto.Marshal(epi); err == nil {
		f.Add(data)
	}
	// And with a prologue (lower makes them of a batch norm before a pointwise convolution;
	// here a ReLU on a matmul's first operand, which the CPU device runs through scratch), so
	// that mutations reach the prologue checks.
	pro := proto.Clone(withColl).(*pb.Program)
	pro.Instrs = pro.Instrs[:len(pro.Instrs)-3]
	for _, in := range pro.Instrs {
		if in.Kind == pb.Instr_LAUNCH && pro.Kernels[in.Kernel].Op == "matmul" {
			pro.Kernels = append(pro.Kernels, &pb.Kernel{Op: "matmul", Pre: &pb.Kernel{Op: "relu"}, PreInputs: 1})
			in.Kernel = int32(len(pro.Kernels) - 1)
			break
		}
	}
	if data, err := proto.Marshal(pro); err == nil {
		f.Add(data)
	}
	// A mutated program may ask for gigabytes and minutes of valid work; keep each input small.
	MemoryLimit = 64 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &pb.Program{}
		if proto.Unmarshal(data, p) != nil {
			return
		}
		j, err := New(&codegen.Output{Plan: plan, Programs: []*pb.Program{p}}, cpu.New())
		if err != nil {
			var ie *fault.InputError
			if !errors.As(err, &ie) && !strings.HasPrefix(err.Error(), codegen.ProgramFile(0)+": ") {
				t.Fatalf("loader error of type %T: %v", err, err)
			}
			return
		}
		if err := j.Init(1); err != nil {
			return
		}
		_, _ = j.Step(Options{Seed: 1})
	})
}

// The runtime executes the order baked into the programs; `ppc simulate DIR` simulates
// plan.json's schedule. A plan.json whose schedule was edited (not covered by the programs'
// checksums) is refused, so the two never disagree about a plan that runs.
func TestLoaderRejectsScheduleMismatch(t *testing.T) {
	dir := jobtest.Compile(t, "../testdata/ir/mlp.ir", compiler.Options{PP: 2, Microbatches: 2, Schedule: "gpipe"})
	if _, err := Load(dir, cpu.New()); err != nil {
		t.Fatal(err)
	}
	plan, err := codegen.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	acts := append([]string(nil), plan.Schedule.Actions[0]...) // gpipe: 0F0,0F1, then the backwards
	acts[0], acts[1] = acts[1], acts[0]
	for _, c := range []struct {
		name string
		edit func(p *codegen.Plan)
		want string
	}{
		{"reordered", func(p *codegen.Plan) { p.Schedule.Actions[0] = acts }, "rank-00000.ppx: runs 0F0 where plan.json's schedule for pipeline rank 0 has 0F1 (action 0)"},
		{"dropped", func(p *codegen.Plan) { p.Schedule.Actions[1] = p.Schedule.Actions[1][:1] }, "rank-00001.ppx: runs"},
		{"malformed", func(p *codegen.Plan) { p.Schedule.Actions[1][0] = "1X0" }, `pipeline rank 1's schedule has a malformed action "1X0"`},
	} {
		p := *plan
		p.Schedule.Actions = nil
		for _, row := range plan.Schedule.Actions {
			p.Schedule.Actions = append(p.Schedule.Actions, append([]string(nil), row...))
		}
		c.edit(&p)
		if err := codegen.WritePlan(dir, &p); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir, cpu.New())
		var ie *fault.InputError
		if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an fault.InputError containing %q", c.name, err, c.want)
		}
	}
}

// TestLoaderChecksProgramChecksum: a program that still decodes and validates, but is not
// the one plan.json was written with, is refused.
func TestLoaderChecksProgramChecksum(t *testing.T) {
	dir := jobtest.Compile(t, "../testdata/ir/mlp.ir", compiler.Options{ForwardOnly: true, Microbatches: 1})
	bad := corrupt(t, dir, func(p *pb.Program) { p.Buffers[len(p.Buffers)-1].Name += "x" })
	// corrupt records the changed program's checksum; put back the plan.json it was not
	// compiled with.
	plan, _ := os.ReadFile(filepath.Join(dir, "plan.json"))
	if err := os.WriteFile(filepath.Join(bad, "plan.json"), plan, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad, cpu.New())
	var ie *fault.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "rank-00000.ppx: does not match plan.json") {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(dir, cpu.New()); err != nil {
		t.Fatalf("the untouched plan: %v", err)
	}
}

// An epilogue kernel (a convolution with its residual add and ReLU: lower's conv epilogue)
// is checked as its op and its chain, every type the op result's: a corrupted one is refused
// naming the file and the problem.
func TestLoaderRejectsBadEpilogues(t *testing.T) {
	dir := jobtest.Compile(t, "../testdata/ir/gradcheck_nn.ir", compiler.Options{ForwardOnly: true, Microbatches: 1})
	if _, err := Load(dir, cpu.New()); err != nil {
		t.Fatal(err)
	}
	epilogue := func(p *pb.Program) *pb.Kernel {
		for _, k := range p.Kernels {
			if k.Op == "conv" && len(k.Fused) > 0 {
				return k
			}
		}
		panic("no conv epilogue in the program")
	}
	cases := []struct {
		name string
		f    func(p *pb.Program)
		want string
	}{
		{"op inputs past the operands", func(p *pb.Program) { epilogue(p).OpInputs = 9 }, "conv epilogue on 9 of 3 operands"},
		{"negative op inputs", func(p *pb.Program) { epilogue(p).OpInputs = -1 }, "conv kernel with an epilogue on -1 operands"},
		{"op inputs short", func(p *pb.Program) { epilogue(p).OpInputs = 1 }, "conv takes"},
		{"step type", func(p *pb.Program) { epilogue(p).Fused[0].Type.Shape = []int64{2, 4, 4, 5} }, "fused step 0"},
		{"step reads past", func(p *pb.Program) { epilogue(p).Fused[1].Args[0] = 7 }, "fused step 1 reads value 7"},
		{"not elementwise", func(p *pb.Program) { epilogue(p).Fused[1].Op = "conv" }, `"conv" is not an elementwise op`},
		{"elementwise op with epilogue", func(p *pb.Program) {
			k := epilogue(p)
			k.Op, k.Attrs = "relu", nil
		}, "relu kernel with an epilogue"},
		{"op inputs without epilogue", func(p *pb.Program) {
			k := epilogue(p)
			k.Fused = nil
		}, "conv kernel with op_inputs 2 and 0 outputs but no epilogue"},
		{"fused with op inputs", func(p *pb.Program) { epilogue(p).Op = "fused" }, "fused kernel with op_inputs 2"},
		{"extra input type", func(p *pb.Program) {
			k := epilogue(p)
			// The residual, the chain's input 1, replaced by the convolution's weight (another
			// type).
			for _, in := range p.Instrs {
				if in.Kind == pb.Instr_LAUNCH && p.Kernels[in.Kernel] == k {
					in.In[2] = in.In[1]
					return
				}
			}
		}, "conv epilogue: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refusesCorrupt(t, dir, c.f, c.want) })
	}
}
