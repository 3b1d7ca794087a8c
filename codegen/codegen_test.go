package codegen

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
)

func TestAttrsRoundTrip(t *testing.T) {
	in := ir.Attrs{
		{Name: "a", Value: ir.Int(-3)}, {Name: "b", Value: ir.Float(0.5)}, {Name: "c", Value: ir.BoolAttr(true)},
		{Name: "d", Value: ir.String("x")}, {Name: "e", Value: ir.Ident("tanh")}, {Name: "f", Value: ir.Unit{}},
		{Name: "g", Value: ir.Ints(1, 2)}, {Name: "h", Value: ir.List{ir.Float(1.5), ir.Int(2)}},
		{Name: "i", Value: ir.TypeAttr(ir.T(ir.F32, 2, 3))}, {Name: "j", Value: ir.Splat(ir.T(ir.F32, 4), 1)},
	}
	out, err := AttrsFromProto(attrsToProto(in))
	if err != nil {
		t.Fatal(err)
	}
	// A mixed list comes back as floats; everything else is unchanged.
	want := ir.AttrString(ir.Dict(in.Set("h", ir.List{ir.Float(1.5), ir.Float(2)})))
	if got := ir.AttrString(ir.Dict(out)); got != want {
		t.Fatalf("round trip:\n got %s\nwant %s", got, want)
	}
	if _, err := AttrsFromProto([]*pb.NamedAttr{{Name: "x"}}); err == nil {
		t.Fatal("empty attribute accepted")
	}
	bad := []*pb.NamedAttr{{Name: "d", Value: &pb.Attr{Value: &pb.Attr_Dense{Dense: &pb.Dense{Type: &pb.TensorType{Dtype: pb.DType_F32, Shape: []int64{4}}, Data: []byte{1}}}}}}
	if _, err := AttrsFromProto(bad); err == nil || !strings.Contains(err.Error(), "holds 1 bytes") {
		t.Fatalf("short dense: %v", err)
	}
}

func TestReadPlanErrors(t *testing.T) {
	good := `{"format_version": 3, "world": 1, "mesh": {"pp": 1, "dp": 1, "cp": 1, "tp": 1}, "microbatches": 1,
 "programs": [{"file": "rank-00000.ppx", "pp": 0}],
 "ranks": [{"rank": 0, "coords": {"pp": 0, "dp": 0, "cp": 0, "tp": 0}, "program": "rank-00000.ppx", "groups": {"pp": [0], "dp": [0], "cp": [0], "tp": [0]}}],
 "inputs": [{"name": "x", "dtype": "f32", "microbatch_shape": [2, 3]}]}`
	for _, c := range []struct{ text, want string }{
		{good, ""},
		{strings.Replace(good, `"format_version": 3`, `"format_version": 7`, 1), "format version 7"},
		{strings.Replace(good, `"microbatches": 1`, `"microbatches": 0`, 1), "micro-batches 0"},
		{strings.Replace(good, `"pp": 1`, `"pp": 2`, 1), "does not multiply"},
		{strings.Replace(good, `"dp": 1`, `"dp": 0`, 1), "does not multiply"},
		{strings.Replace(good, `"rank": 0`, `"rank": 3`, 1), "rank entry 0 is for rank 3"},
		{strings.Replace(good, `"program": "rank-00000.ppx"`, `"program": "rank-9.ppx"`, 1), `rank 0 runs "rank-9.ppx", which is not among the programs`},
		{strings.Replace(good, `"file": "rank-00000.ppx"`, `"file": "../rank-00000.ppx"`, 1), `"../rank-00000.ppx" is not a program file name`},
		{strings.Replace(good, `"file": "rank-00000.ppx", "pp": 0`, `"file": "rank-00000.ppx", "pp": 1`, 1), "pipeline rank 1 is not in 0 … 0"},
		{strings.Replace(good, `"programs": [{"file": "rank-00000.ppx", "pp": 0}]`, `"programs": [{"file": "rank-00000.ppx", "pp": 0}, {"file": "rank-00001.ppx", "pp": 0}]`, 1),
			"program rank-00001.ppx is run by no rank"},
		{strings.Replace(good, `"programs": [{"file": "rank-00000.ppx", "pp": 0}]`, `"programs": [{"file": "rank-00000.ppx", "pp": 0}, {"file": "rank-00000.ppx", "pp": 0}]`, 1),
			"program rank-00000.ppx is listed twice"},
		{strings.Replace(good, `"programs": [{"file": "rank-00000.ppx", "pp": 0}],`, ``, 1), "no programs listed"},
		{strings.Replace(good, `"coords": {"pp": 0, "dp": 0, "cp": 0, "tp": 0}`, `"coords": {"pp": 0, "dp": 0, "cp": 0, "tp": 1}`, 1), "rank 0: coordinates pp=0 dp=0 cp=0 tp=1, but the mesh numbers it pp=0 dp=0 cp=0 tp=0"},
		{strings.Replace(good, `"tp": [0]`, `"tp": [0, 1]`, 1), "rank 0: groups pp [0], dp [0], cp [0], tp [0 1]; its coordinates on the mesh give pp [0], dp [0], cp [0], tp [0]"},
		{strings.Replace(good, `"cp": [0]`, `"cp": [0, 1]`, 1), "rank 0: groups pp [0], dp [0], cp [0 1], tp [0]"},
		{strings.Replace(good, `[2, 3]`, `[]`, 1), ""}, // a scalar input: one sample per micro-batch
		{strings.Replace(good, `"name": "x"`, `"name": ""`, 1), `an input has no name`},
		{`{"world": `, "unexpected end"},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "plan.json"), []byte(c.text), 0o644)
		_, err := ReadPlan(dir)
		if c.want == "" {
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "plan.json") {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// TestMeshNumbering: ranks are numbered as Megatron-core numbers them (tp fastest, then cp,
// dp, pp), and a group over an axis is the ranks that differ only there, in its order.
func TestMeshNumbering(t *testing.T) {
	m := Mesh{PP: 2, DP: 3, TP: 2}
	for r := range 12 {
		if got := m.Rank(m.Coords(r)); got != r {
			t.Fatalf("rank %d → %+v → %d", r, m.Coords(r), got)
		}
	}
	c := m.Coords(9) // (pp·3 + dp)·2 + tp = 9: pp 1, dp 1, tp 1
	if c != (Coords{PP: 1, DP: 1, TP: 1}) {
		t.Fatalf("rank 9 is %+v", c)
	}
	for axis, want := range map[string][]int{"tp": {8, 9}, "dp": {7, 9, 11}, "pp": {3, 9}} {
		if got := m.Group(c, axis); !slices.Equal(got, want) {
			t.Errorf("%s group of rank 9: %v, want %v", axis, got, want)
		}
	}
	p := &Plan{Mesh: m, World: 12}
	p.SetRanks()
	if r := p.Ranks[9]; r.Program != "rank-00006.ppx" || !slices.Equal(r.Groups.DP, []int{7, 9, 11}) {
		t.Fatalf("rank 9: %+v", r)
	}
	// With cp: rank = ((pp·dp_size + dp)·cp_size + cp)·tp_size + tp (Megatron's tp-cp-dp-pp).
	m = Mesh{PP: 2, DP: 2, CP: 3, TP: 2}
	for r := range m.World() {
		if got := m.Rank(m.Coords(r)); got != r {
			t.Fatalf("rank %d → %+v → %d", r, m.Coords(r), got)
		}
	}
	c = m.Coords(17) // ((1·2 + 0)·3 + 2)·2 + 1 = 17: pp 1, dp 0, cp 2, tp 1
	if c != (Coords{PP: 1, DP: 0, CP: 2, TP: 1}) {
		t.Fatalf("rank 17 is %+v", c)
	}
	for axis, want := range map[string][]int{"tp": {16, 17}, "cp": {13, 15, 17}, "dp": {17, 23}, "pp": {5, 17}} {
		if got := m.Group(c, axis); !slices.Equal(got, want) {
			t.Errorf("%s group of rank 17: %v, want %v", axis, got, want)
		}
	}
	// Expert parallelism inside dp (Megatron-Core's order): rank = tp + TP·(cp + CP·(ep +
	// EP·(edp + EDP·pp))) — dp coordinate ep + EP·edp, the numbering unchanged. Rank 13 of pp 2
	// × dp 4 (ep 2 × edp 2) × tp 2 is pp 1, dp 2 (ep 0, edp 1), tp 1; its ep group the dp
	// coordinates 2, 3 (ranks 13, 15), its edp group dp 0, 2 (ranks 9, 13).
	e := Mesh{PP: 2, DP: 4, EP: 2, CP: 1, TP: 2}
	for r := range 16 {
		if got := e.Rank(e.Coords(r)); got != r {
			t.Fatalf("ep mesh: rank %d → %+v → %d", r, e.Coords(r), got)
		}
	}
	c = e.Coords(13)
	if c != (Coords{PP: 1, DP: 2, EP: 0, EDP: 1, TP: 1}) || c.Of("ep") != 0 || c.Of("edp") != 1 {
		t.Fatalf("ep mesh: rank 13 is %+v", c)
	}
	for axis, want := range map[string][]int{"ep": {13, 15}, "edp": {9, 13}, "dp": {9, 11, 13, 15}, "tp": {12, 13}} {
		if got := e.Group(c, axis); !slices.Equal(got, want) {
			t.Errorf("ep mesh: %s group of rank 13: %v, want %v", axis, got, want)
		}
	}
	if e.Size("ep") != 2 || e.Size("edp") != 2 {
		t.Errorf("ep mesh: sizes ep %d edp %d", e.Size("ep"), e.Size("edp"))
	}
}

// TestReadPlanNotADirectory: a plan is a directory; a file, a missing path or a directory
// without plan.json each get a message that says which.
func TestReadPlanNotADirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plan.json")
	os.WriteFile(file, []byte("{}"), 0o644)
	for _, c := range []struct{ path, want string }{
		{file, file + " is a file; want the plan directory that ppc compile -o wrote"},
		{filepath.Join(dir, "none"), filepath.Join(dir, "none") + ": no such plan directory"},
		{t.TempDir(), "not a plan directory (no plan.json)"},
	} {
		if _, err := ReadPlan(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadPlan(%s): %v, want %q", c.path, err, c.want)
		}
	}
}

func TestInputSamples(t *testing.T) {
	batched := Input{Name: "x", MicrobatchShape: []int{4, 3}}
	scalar := Input{Name: "y", MicrobatchShape: []int{}}
	if batched.Samples() != 4 || len(batched.SampleShape()) != 1 || scalar.Samples() != 1 || len(scalar.SampleShape()) != 0 {
		t.Fatalf("samples %d %v, scalar %d %v", batched.Samples(), batched.SampleShape(), scalar.Samples(), scalar.SampleShape())
	}
}

func TestDisassemble(t *testing.T) {
	p := &pb.Program{FormatVersion: FormatVersion, Pp: 1, Microbatches: 1, ArenaBytes: 64,
		Mesh: []*pb.NamedInt{{Name: "pp", Value: 2}, {Name: "dp", Value: 2}, {Name: "tp", Value: 2}},
		Buffers: []*pb.Buffer{
			{Id: 0, Name: "x#0", Dtype: pb.DType_F32, Shape: []int64{4}, Role: pb.Role_ACTIVATION},
			{Id: 1, Name: "w", Dtype: pb.DType_F32, Shape: []int64{4}, Role: pb.Role_PARAM, Init: "normal(0.02)"},
			{Id: 2, Name: "v", Dtype: pb.DType_F32, Shape: []int64{2, 4}, Role: pb.Role_PARAM, Init: "zeros",
				Shard: []*pb.ShardDim{{Axes: []string{"tp"}}, {}}},
			{Id: 3, Name: "v.exp_avg", Dtype: pb.DType_F32, Shape: []int64{2, 4}, Role: pb.Role_STATE, Init: "zeros",
				Shard: []*pb.ShardDim{{}, {Axes: []string{"dp", "tp"}}}},
		},
		Kernels: []*pb.Kernel{{Op: "add"}, {Op: "conv", OpInputs: 6, Fused: []*pb.FusedStep{{Op: "relu", Args: []int32{0}}},
			Pre: &pb.Kernel{Op: "batch_norm", OpInputs: 5, Fused: []*pb.FusedStep{{Op: "relu", Args: []int32{0}}}}, PreInputs: 5}},
		Instrs: []*pb.Instr{
			{Kind: pb.Instr_BEGIN, Label: "F", Stage: 1},
			{Kind: pb.Instr_RECV, Out: []int32{0}, Peer: 0, Tag: 5},
			{Kind: pb.Instr_LAUNCH, Kernel: 0, In: []int32{0, 1}, Out: []int32{0}},
			{Kind: pb.Instr_LAUNCH, Kernel: 1, In: []int32{0, 1, 1, 1, 1, 2}, Out: []int32{2}},
			{Kind: pb.Instr_END, Label: "F"},
			{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{0, 1}},
			{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Out: []int32{2}, Group: []int32{1, 0}, ReduceOp: pb.Instr_MAX, Tag: 7},
			{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{2}, Group: []int32{0, 1}, Dim: 1},
			{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{0}, Out: []int32{2}, Group: []int32{0, 1}},
			{Kind: pb.Instr_BROADCAST, In: []int32{0}, Group: []int32{0, 1}, Root: 1},
			{Kind: pb.Instr_BROADCAST, In: []int32{0}, Group: []int32{0, 1}, Root: 5},
			{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Axis: "dp"},
			{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{2}, Axis: "tp", Dim: 1},
			{Kind: pb.Instr_BROADCAST, In: []int32{0}, Axis: "tp", Root: 1},
			{Kind: pb.Instr_ALL_TO_ALL, In: []int32{0}, Out: []int32{2}, Axis: "ep", Dim: 0, ConcatDim: 1},
		}}
	s := Disassemble(p)
	for _, want := range []string{"program of pipeline rank 1", "mesh pp=2 dp=2 tp=2: run by 4 rank(s)", "b1     param      f32[4]", "init=normal(0.02)",
		"v init=zeros shard=[tp, _]", "v.exp_avg init=zeros shard=[_, [dp, tp]]", "k0    add",
		"begin F stage 1 mb 0", "    b0 = recv from pp 0 tag 5", "b0 = launch k0 add(b0, b1)", "end F",
		"k1    (batch_norm, 5 operands, then [s0 = relu $0] on 5 operands) > conv, 6 operands, then [s0 = relu $0]",
		"b2 = launch k1 batch_norm>conv(b0, b1, b1, b1, b1, b2)",
		"  all_reduce sum b0 over ranks [0 1]\n", "b2 = all_reduce max b0 over ranks [1 0] tag 7",
		"b2 = all_gather b0 dim 1 over ranks [0 1]", "b2 = reduce_scatter sum b0 dim 0 over ranks [0 1]",
		"  broadcast b0 from rank 1 over ranks [0 1]", "broadcast b0 from <root 5 outside the group> over ranks [0 1]",
		"  all_reduce sum b0 over dp\n", "b2 = all_to_all b0 split dim 0 concat dim 1 over ep\n", "b2 = all_gather b0 dim 1 over tp\n", "  broadcast b0 from tp 1 over tp\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("disassembly lacks %q:\n%s", want, s)
		}
	}
}

// TestPlanCheckReplicas: on a pp × dp × tp mesh, every rank must run its own pipeline rank's
// program, and plan.json's groups must be the mesh's.
func TestPlanCheckReplicas(t *testing.T) {
	good := func() *Plan {
		p := &Plan{FormatVersion: FormatVersion, Mesh: Mesh{PP: 2, DP: 2, TP: 2}, World: 8, Microbatches: 1,
			Programs: []ProgramInfo{{File: ProgramFile(0)}, {File: ProgramFile(4), PP: 1}}}
		p.SetRanks()
		return p
	}
	if err := good().check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(p *Plan)
		want string
	}{
		{func(p *Plan) { p.Ranks[5].Program = ProgramFile(0) }, "rank 5 (pipeline rank 1) runs rank-00000.ppx, the program of pipeline rank 0"},
		{func(p *Plan) { p.Ranks[3].Groups.DP = []int{3, 1} }, "rank 3: groups pp [3 7], dp [3 1], cp [3], tp [2 3]; its coordinates on the mesh give pp [3 7], dp [1 3], cp [3], tp [2 3]"},
		{func(p *Plan) { p.Ranks[3].Coords.DP = 0 }, "rank 3: coordinates pp=0 dp=0 cp=0 tp=1, but the mesh numbers it pp=0 dp=1 cp=0 tp=1 (tp fastest, then cp, dp, pp)"},
		{func(p *Plan) { p.Mesh.TP = 4 }, "mesh pp=2 dp=2 cp=1 tp=4 does not multiply to world size 8"},
		{func(p *Plan) { p.Mesh.CP = 2 }, "mesh pp=2 dp=2 cp=2 tp=2 does not multiply to world size 8"},
	} {
		p := good()
		c.edit(p)
		if err := p.check(); err == nil || err.Error() != c.want {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
