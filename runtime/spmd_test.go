package runtime

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

// meshJob prepares one program per pipeline rank of mesh m, shared by its dp × tp replicas,
// with M = 2 micro-batches per replica and one f32[1] input "x".
func meshJob(m codegen.Mesh, progs []*pb.Program) (*Job, error) {
	plan := &codegen.Plan{FormatVersion: codegen.FormatVersion, World: m.PP * m.DP * m.TP, Mesh: m, Microbatches: 2,
		Inputs: []codegen.Input{{Name: "x", DType: "f32", MicrobatchShape: []int{1}}}}
	for pp := range m.PP {
		plan.Programs = append(plan.Programs, codegen.ProgramInfo{File: codegen.ProgramFile(m.Rank(codegen.Coords{PP: pp})), PP: pp})
	}
	plan.SetRanks()
	for pp, p := range progs {
		p.FormatVersion, p.Pp, p.Microbatches = codegen.FormatVersion, int32(pp), 2
		p.Mesh = []*pb.NamedInt{{Name: "pp", Value: int64(m.PP)}, {Name: "dp", Value: int64(m.DP)}, {Name: "tp", Value: int64(m.TP)}}
	}
	return New(&codegen.Output{Plan: plan, Programs: progs}, cpu.New())
}

func buf(id int32, name string, role pb.Role, shape ...int64) *pb.Buffer {
	return &pb.Buffer{Id: id, Name: name, Dtype: pb.DType_F32, Shape: shape, Role: role, Offset: int64(id) * 64}
}

// spmdPrograms: pipeline rank 0 holds w, split over tp, reads its two micro-batches of x,
// all-reduces w over dp, all-gathers it over tp, sends the sum and its first micro-batch to
// pipeline rank 1, and records the sum of its block of w as the loss.
func spmdPrograms() []*pb.Program {
	p0 := &pb.Program{ArenaBytes: 6 * 64,
		Buffers: []*pb.Buffer{
			{Id: 0, Name: "w", Dtype: pb.DType_F32, Shape: []int64{2}, Role: pb.Role_PARAM, Init: "normal(1)", Shard: []*pb.ShardDim{{Axes: []string{"tp"}}}},
			buf(1, "sum", pb.Role_ACTIVATION, 2), buf(2, "gathered", pb.Role_ACTIVATION, 4), buf(3, "loss", pb.Role_ACTIVATION),
			buf(4, "x#0", pb.Role_INPUT, 1), buf(5, "x#1", pb.Role_INPUT, 1),
		},
		Kernels: []*pb.Kernel{{Op: "reduce_sum"}},
		Instrs: []*pb.Instr{
			{Kind: pb.Instr_INPUT, Out: []int32{4}, Label: "x"},
			{Kind: pb.Instr_INPUT, Out: []int32{5}, Label: "x", Microbatch: 1},
			{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Out: []int32{1}, Axis: "dp"},
			{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{2}, Axis: "tp"},
			{Kind: pb.Instr_SEND, In: []int32{1}, Peer: 1, Tag: 7},
			{Kind: pb.Instr_SEND, In: []int32{4}, Peer: 1, Tag: 8},
			{Kind: pb.Instr_LAUNCH, Kernel: 0, In: []int32{0}, Out: []int32{3}},
			{Kind: pb.Instr_LOSS, In: []int32{3}},
		}}
	p1 := &pb.Program{ArenaBytes: 2 * 64,
		Buffers: []*pb.Buffer{buf(0, "sum", pb.Role_ACTIVATION, 2), buf(1, "x#0", pb.Role_ACTIVATION, 1)},
		Instrs: []*pb.Instr{
			{Kind: pb.Instr_RECV, Out: []int32{0}, Peer: 0, Tag: 7},
			{Kind: pb.Instr_RECV, Out: []int32{1}, Peer: 0, Tag: 8},
		}}
	return []*pb.Program{p0, p1}
}

// mbData fills input x of global micro-batch mb with the value mb.
type mbData struct{}

func (mbData) Fill(in codegen.Input, step, mb int, t device.Tensor) error {
	t.F32()[0] = float32(mb)
	return nil
}

// TestSharedProgramReplicas: the eight ranks of a pp = dp = tp = 2 mesh run two programs; what
// differs between replicas comes from their coordinates. Collectives over dp and tp find their
// groups, sends reach the peer with the same dp and tp coordinates, a parameter split over tp
// holds its block of the full tensor the shard-invariant initialiser defines, replica d reads
// micro-batches 2d and 2d+1 of the global batch, and only tp rank 0 records the loss.
func TestSharedProgramReplicas(t *testing.T) {
	mesh := codegen.Mesh{PP: 2, DP: 2, TP: 2}
	j, err := meshJob(mesh, spmdPrograms())
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Init(3); err != nil {
		t.Fatal(err)
	}
	res, err := j.Step(Options{Data: mbData{}})
	if err != nil {
		t.Fatal(err)
	}
	full := must(j.Tensors(pb.Role_PARAM))["w"]
	if !full.Type.Equal(ir.T(ir.F32, 4)) {
		t.Fatalf("merged w is %s, want f32[4]", full.Type)
	}
	// The full tensor is what one unsharded buffer initialises to.
	one := device.Tensor{Type: ir.T(ir.F32, 4), Data: device.HostBytes(16)}
	if err := initBuffer(&pb.Buffer{Name: "w", Init: "normal(1)"}, nil, one, 3); err != nil {
		t.Fatal(err)
	}
	w := full.F32()
	if !slices.Equal(w, one.F32()) {
		t.Fatalf("merged shards %v, one device initialises %v", w, one.F32())
	}
	for _, r := range j.Ranks {
		c := r.Coords
		block := w[2*c.TP : 2*c.TP+2]
		if c.PP == 0 {
			if got := r.Bufs[0].F32(); !slices.Equal(got, block) {
				t.Errorf("rank %d (tp %d) holds %v, its block is %v", r.Index, c.TP, got, block)
			}
			if got := r.Bufs[2].F32(); !slices.Equal(got, w) {
				t.Errorf("rank %d: all-gather over tp gives %v, want %v", r.Index, got, w)
			}
			if got := []float32{r.Bufs[4].F32()[0], r.Bufs[5].F32()[0]}; !slices.Equal(got, []float32{float32(2 * c.DP), float32(2*c.DP + 1)}) {
				t.Errorf("rank %d (dp %d) read micro-batches %v", r.Index, c.DP, got)
			}
			continue
		}
		if got := r.Bufs[0].F32(); got[0] != 2*block[0] || got[1] != 2*block[1] {
			t.Errorf("rank %d (tp %d) received %v, want the dp sum of its block %v", r.Index, c.TP, got, block)
		}
		if got := r.Bufs[1].F32()[0]; got != float32(2*c.DP) {
			t.Errorf("rank %d (dp %d) received micro-batch %v from pipeline rank 0", r.Index, c.DP, got)
		}
	}
	// Both dp replicas of tp rank 0 record w0 + w1; tp rank 1's w2 + w3 does not count.
	if want := float64(w[0] + w[1]); math.Abs(res.Loss-want) > 1e-6 {
		t.Errorf("loss %v, want tp rank 0's %v (tp rank 1 has %v)", res.Loss, want, w[2]+w[3])
	}
	if res.Samples != 4 {
		t.Errorf("%d samples per step, want 2 micro-batches × 2 replicas", res.Samples)
	}
	// Resume writes each rank's block back: a checkpoint of doubled weights.
	dir := t.TempDir()
	for i := range w {
		w[i] *= 2
	}
	if err := checkpoint.WriteSafetensors(dir+"/"+checkpoint.SingleFile, map[string]device.Tensor{"w": full},
		map[string]string{"step": "1", "seed": "3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Resume(dir, false); err != nil {
		t.Fatal(err)
	}
	for _, r := range j.Ranks {
		if c := r.Coords; c.PP == 0 && !slices.Equal(r.Bufs[0].F32(), w[2*c.TP:2*c.TP+2]) {
			t.Errorf("rank %d resumed %v, want %v", r.Index, r.Bufs[0].F32(), w[2*c.TP:2*c.TP+2])
		}
	}
}

// TestLoaderRejectsSPMDFields: every field a shared program leaves to the loader is checked
// against the mesh before anything runs.
func TestLoaderRejectsSPMDFields(t *testing.T) {
	mesh := codegen.Mesh{PP: 2, DP: 2, TP: 2}
	shard := func(axes ...[]string) []*pb.ShardDim {
		out := make([]*pb.ShardDim, len(axes))
		for i, a := range axes {
			out[i] = &pb.ShardDim{Axes: a}
		}
		return out
	}
	for _, c := range []struct {
		name string
		edit func(p0, p1 *pb.Program)
		want string
	}{
		{"shard axis pp", func(p0, _ *pb.Program) { p0.Buffers[0].Shard = shard([]string{"pp"}) },
			`parameter w: sharding [pp]: "pp" is not a mesh axis a tensor can be split over (dp, ep, tp)`},
		{"shard unknown axis", func(p0, _ *pb.Program) { p0.Buffers[0].Shard = shard([]string{"sp"}) }, `"sp" is not a mesh axis`},
		{"shard axis twice", func(p0, _ *pb.Program) { p0.Buffers[0].Shard = shard([]string{"tp", "tp"}) }, "sharding [[tp, tp]] uses mesh axis tp twice"},
		{"shard rank", func(p0, _ *pb.Program) { p0.Buffers[0].Shard = shard(nil, []string{"tp"}) }, "sharding lists 2 dims for f32[2]"},
		{"shard on activation", func(p0, _ *pb.Program) { p0.Buffers[1].Shard = shard([]string{"tp"}) },
			"buffer 1 (sum) has a sharding, which only parameters and optimizer state have (it is activation)"},
		{"shard with data", func(p0, _ *pb.Program) { p0.Buffers[0].Data = make([]byte, 8) },
			"parameter w holds 8 bytes, the whole tensor (f32[2] on this rank) needs 16"},
		{"state shard", func(p0, _ *pb.Program) {
			p0.Buffers = append(p0.Buffers, &pb.Buffer{Id: 6, Name: "w.m", Dtype: pb.DType_F32, Shape: []int64{2}, Role: pb.Role_STATE, Init: "zeros",
				Shard: shard([]string{"xx"})})
		}, `state w.m: sharding [xx]: "xx" is not a mesh axis`},
		{"collective axis", func(p0, _ *pb.Program) { p0.Instrs[2].Axis = "sp" }, `all-reduce over "sp", which is not a mesh axis (pp, dp, ep, edp, cp, tp)`},
		{"axis and group", func(p0, _ *pb.Program) { p0.Instrs[2].Group = []int32{0, 2} }, "all-reduce names both mesh axis dp and group [0 2]"},
		{"neither", func(p0, _ *pb.Program) { p0.Instrs[3].Axis = "" }, "all-gather names neither a mesh axis nor a group"},
		{"gather size", func(p0, _ *pb.Program) { p0.Buffers[2].Shape = []int64{6} }, "the output must be dim 0 × 2"},
		{"peer out of range", func(p0, _ *pb.Program) { p0.Instrs[4].Peer = 2 }, "peer 2 is not another pipeline rank of 2"},
		{"peer self", func(_, p1 *pb.Program) { p1.Instrs[0].Peer = 1 }, "peer 1 is not another pipeline rank of 2"},
		{"one tensor", func(_, p1 *pb.Program) {
			p1.Buffers = append(p1.Buffers, &pb.Buffer{Id: 2, Name: "w", Dtype: pb.DType_F32, Shape: []int64{2}, Role: pb.Role_PARAM, Init: "zeros"})
		}, "w is f32[4] on rank 0 (a shard) and f32[2] on rank 4 (whole): they must hold blocks of one tensor"},
		{"axis index dtype", func(p0, _ *pb.Program) {
			p0.Instrs = append(p0.Instrs, &pb.Instr{Kind: pb.Instr_AXIS_INDEX, Out: []int32{3}, Axis: "tp"})
		}, "axis index into f32[], want an i64 scalar"},
		{"axis index pp", func(p0, _ *pb.Program) {
			p0.Buffers = append(p0.Buffers, &pb.Buffer{Id: 6, Name: "i", Dtype: pb.DType_I64, Role: pb.Role_ACTIVATION, Offset: 5 * 64})
			p0.Instrs = append(p0.Instrs, &pb.Instr{Kind: pb.Instr_AXIS_INDEX, Out: []int32{6}, Axis: "pp"})
		}, `axis index of "pp": want dp, ep, edp, cp or tp`},
		{"pack size", func(p0, _ *pb.Program) {
			p0.Instrs = append(p0.Instrs, &pb.Instr{Kind: pb.Instr_PACK, In: []int32{1, 2}, Out: []int32{3}})
		}, "pack: the tensors hold 6 elements, the flat buffer f32[]"},
		{"pack blocks", func(p0, _ *pb.Program) {
			p0.Instrs = append(p0.Instrs, &pb.Instr{Kind: pb.Instr_PACK, In: []int32{1, 2}, Out: []int32{3}, Blocks: 4})
		}, "pack in 4 blocks: the tensors take 8 elements (blocks of ceil(rows/4) rows), the flat buffer f32[]"},
		{"unpack negative blocks", func(p0, _ *pb.Program) {
			p0.Instrs = append(p0.Instrs, &pb.Instr{Kind: pb.Instr_UNPACK, In: []int32{2}, Out: []int32{1, 1}, Blocks: -2})
		}, "unpack in -2 blocks"},
		{"unpack without flat", func(p0, _ *pb.Program) {
			p0.Instrs = append(p0.Instrs, &pb.Instr{Kind: pb.Instr_UNPACK, Out: []int32{1}})
		}, "unpack takes one flat buffer and at least one tensor, has 0 and 1"},
		{"input micro-batch", func(p0, _ *pb.Program) { p0.Instrs[1].Microbatch = 2 }, "micro-batch 2 out of range"},
	} {
		t.Run(c.name, func(t *testing.T) {
			progs := spmdPrograms()
			c.edit(progs[0], progs[1])
			_, err := meshJob(mesh, progs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			// Errors name the program file, and the rank where replicas share it.
			if !strings.Contains(err.Error(), ".ppx (rank ") && !strings.Contains(err.Error(), "they must hold") {
				t.Errorf("error does not name the file and rank: %v", err)
			}
		})
	}
	if _, err := meshJob(mesh, spmdPrograms()); err != nil {
		t.Fatalf("the unedited programs: %v", err)
	}
}

// TestPackInBlocks: PACK in n blocks lays the tensors' blocks out member by member and UNPACK
// in n blocks puts them back — the bucket layout of ZeRO's reduce-scatters and all-gathers.
func TestPackInBlocks(t *testing.T) {
	f32 := func(v ...float32) []byte {
		b := make([]byte, 0, 4*len(v))
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	prog := &pb.Program{ArenaBytes: 4 * 64,
		Buffers: []*pb.Buffer{
			{Id: 0, Name: "a", Dtype: pb.DType_F32, Shape: []int64{2, 2}, Role: pb.Role_CONST, Data: f32(1, 2, 3, 4)},
			{Id: 1, Name: "b", Dtype: pb.DType_F32, Shape: []int64{2}, Role: pb.Role_CONST, Data: f32(5, 6)},
			buf(2, "flat", pb.Role_ACTIVATION, 6), buf(3, "a2", pb.Role_ACTIVATION, 2, 2), buf(4, "b2", pb.Role_ACTIVATION, 2),
			buf(5, "x#0", pb.Role_INPUT, 1), buf(6, "x#1", pb.Role_INPUT, 1),
		},
		Instrs: []*pb.Instr{
			{Kind: pb.Instr_INPUT, Out: []int32{5}, Label: "x"},
			{Kind: pb.Instr_INPUT, Out: []int32{6}, Label: "x", Microbatch: 1},
			{Kind: pb.Instr_PACK, In: []int32{0, 1}, Out: []int32{2}, Blocks: 2},
			{Kind: pb.Instr_UNPACK, In: []int32{2}, Out: []int32{3, 4}, Blocks: 2},
		}}
	prog.ArenaBytes = 7 * 64
	j, err := meshJob(codegen.Mesh{PP: 1, DP: 1, TP: 1}, []*pb.Program{prog})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Init(1); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Step(Options{Data: mbData{}}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Buffers(pb.Role_ACTIVATION)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]float32{"flat": {1, 2, 5, 3, 4, 6}, "a2": {1, 2, 3, 4}, "b2": {5, 6}} {
		if g := got[name].F32(); !slices.Equal(g, want) {
			t.Errorf("%s = %v, want %v", name, g, want)
		}
	}
}
