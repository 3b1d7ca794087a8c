package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/dist"
	"ppc.dev/ppc/runtime/fault"
)

// Job is a loaded, validated plan: the ranks this process runs (Ranks: all of them for an
// in-process run, one for a worker of a multi-process run) prepared on a device with memory,
// and every rank of the world checked against them (all: the other ranks' programs are
// prepared without memory, so that the loader checks every program and the checkpoint index
// can be written by one process).
type Job struct {
	Dir   string
	Plan  *codegen.Plan
	Ranks []*Rank
	all   []*Rank // every rank of the world, by index; Ranks are among them
	dev   device.Device
	comm  dist.Comm
	proc  *dist.Process // the multi-process run this job is part of (nil: every rank is here)
	net   device.Net    // the device's own communication, when it carries the run's (devnet.go)
	// exposed: parameters or constants were handed to a caller who may write them at any
	// time (Buffers, Tensors), so every step first makes the device forget what it prepared
	// from constant operands (device.Constants).
	exposed bool
}

// forgetConstants tells the device that constant operands (Spec.Const) may have changed.
func (j *Job) forgetConstants() {
	if c, ok := j.dev.(device.Constants); ok {
		c.ForgetConstants()
	}
}

// Rank is one rank's prepared program and memory. The dp × tp replicas of a pipeline rank
// share one decoded Prog (read-only); what differs between them — collective groups, peers,
// parameter blocks, which micro-batches they read — is resolved from Coords when the rank is
// prepared.
type Rank struct {
	Index  int
	Coords codegen.Coords
	Prog   *pb.Program
	Bufs   []device.Tensor
	instrs []instr
	mem    device.Tensor // the rank's one device allocation: arena, then the other buffers
	// On a device that communicates itself: the rank's groups, and its messages' staging.
	groups []device.Group
	netMem device.Tensor
	// sending completes when the last send queued on an asynchronous device has left (nil:
	// none pending).
	sending chan error
	// reads are the step's LOSS and METRIC values still on their way from the device.
	reads  []pendingRead
	losses []float64
	// metrics holds this step's METRIC values by name.
	metrics map[string]float64
	// sums holds this step's summed METRIC values (Instr.sum) by name, over its micro-batches.
	sums   map[string]float64
	inputs map[string]codegen.Input
	step   int
	// shards[i] places PARAM or STATE buffer i in its full tensor (nil: it is the whole).
	shards []*shardGeom
	// constant[i]: buffer i is a constant or a parameter no instruction writes.
	constant []bool
	// curStep and at say what the rank is doing (the step, and the instruction or −1
	// between steps), for the reports of a multi-process run when it stops.
	curStep, at atomic.Int64
}

type instr struct {
	*pb.Instr
	impl    device.Impl
	in, out []device.Tensor
	name    string       // kernel name for traces
	coll    *dist.Op     // collectives
	peer    int          // SEND/RECV: the peer's rank
	stage   []byte       // SEND, RECV, INPUT, LOSS and METRIC on an asynchronous device: the instruction's host buffer
	staged  func() error // RECV and INPUT: waits until the last copy from stage is done
	mb      int          // INPUT: the micro-batch of the global batch (dp·M + Microbatch)
	index   int64        // AXIS_INDEX: the rank's coordinate
	// On a device that communicates itself (devnet.go): SEND's and RECV's group, SEND's
	// staging (Addr 0: none), the receptions a RECV queues first into staging and the
	// staging its message arrived in, and a collective's prepared run.
	link     device.Group
	netStage device.Tensor
	netPosts []*device.Tensor
	netFrom  *device.Tensor
	netColl  func(in, out device.Tensor) error
}

// metricNameRE is what a METRIC's name must look like: it becomes a key of --log-json.
var metricNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Load reads plan.json and every program from dir, validates them completely, and prepares
// every rank of the world on dev (the replicas of a pipeline rank from one decoded program).
// A malformed or corrupted file is a *fault.InputError naming the file and the problem;
// nothing is executed before everything checks out.
func Load(dir string, dev device.Device) (*Job, error) {
	return load(dir, dev, -1)
}

// LoadRank is Load for one worker of a multi-process run: every program is checked as Load
// checks it, but only rank's is given memory and kernels. The job runs once Join connects it
// to the other ranks' processes.
func LoadRank(dir string, dev device.Device, rank int) (*Job, error) {
	return load(dir, dev, rank)
}

// load prepares rank local with memory (every rank when local < 0).
func load(dir string, dev device.Device, local int) (*Job, error) {
	plan, err := codegen.ReadPlan(dir)
	if err != nil {
		return nil, &fault.InputError{Err: err}
	}
	if local >= plan.World {
		return nil, fault.Inputf("%s: rank %d is not in the plan's %d-rank world", dir, local, plan.World)
	}
	j := &Job{Dir: dir, Plan: plan, dev: dev, comm: dist.NewLocal(plan.World)}
	progs := map[string]*pb.Program{}
	for _, info := range plan.Programs {
		path := filepath.Join(dir, info.File)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, &fault.InputError{Err: err}
		}
		// plan.json records each program's checksum. Check it before decoding: a flipped
		// byte is corruption, which the decoder would report as "cannot parse", and a
		// program that decodes and validates may still have been changed (another operand
		// buffer, a program of another compile).
		if err := plan.CheckProgramBytes(info.File, data); err != nil {
			return nil, fault.Inputf("%s: %v", path, err)
		}
		prog := &pb.Program{}
		if err := proto.Unmarshal(data, prog); err != nil {
			return nil, fault.Inputf("%s: not a ppc program: %v", path, err)
		}
		if err := checkProgram(plan, info.PP, prog); err != nil {
			return nil, fault.Inputf("%s: %v", path, err)
		}
		progs[info.File] = prog
	}
	for r, info := range plan.Ranks {
		rank, err := j.prepare(r, progs[info.Program], local < 0 || r == local)
		if err != nil {
			return nil, fault.Inputf("%s: %v", j.where(r), err)
		}
		j.add(rank, local < 0 || r == local)
	}
	if err := j.checkRanks(); err != nil {
		return nil, fault.Inputf("%s: %v", dir, err)
	}
	return j, nil
}

func (j *Job) add(r *Rank, local bool) {
	j.all = append(j.all, r)
	if local {
		j.Ranks = append(j.Ranks, r)
	}
}

// where names rank r's program file for errors, with the rank when replicas share it.
func (j *Job) where(r int) string {
	file := j.Plan.Ranks[r].Program
	if j.Dir != "" {
		file = filepath.Join(j.Dir, file)
	}
	if j.Plan.Replicas() > 1 {
		return fmt.Sprintf("%s (rank %d)", file, r)
	}
	return file
}

// New prepares an in-memory compiled job (the same validation as Load, without files):
// out.Programs[i] is the program plan.Programs[i] names.
func New(out *codegen.Output, dev device.Device) (*Job, error) {
	plan := out.Plan
	if len(out.Programs) != len(plan.Programs) {
		return nil, fmt.Errorf("%d programs for the plan's %d", len(out.Programs), len(plan.Programs))
	}
	if len(plan.Ranks) != plan.World {
		return nil, fmt.Errorf("%d ranks listed for world size %d", len(plan.Ranks), plan.World)
	}
	j := &Job{Plan: plan, dev: dev, comm: dist.NewLocal(plan.World)}
	progs := map[string]*pb.Program{}
	for i, p := range out.Programs {
		if err := checkProgram(plan, plan.Programs[i].PP, p); err != nil {
			return nil, fmt.Errorf("%s: %v", plan.Programs[i].File, err)
		}
		progs[plan.Programs[i].File] = p
	}
	for r, info := range plan.Ranks {
		p, ok := progs[info.Program]
		if !ok {
			return nil, fmt.Errorf("rank %d runs %q, which is not among the programs", r, info.Program)
		}
		rank, err := j.prepare(r, p, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", j.where(r), err)
		}
		j.add(rank, true)
	}
	if err := j.checkRanks(); err != nil {
		return nil, err
	}
	return j, nil
}

// LoadProgram validates and prepares a single program read from bytes (for tools and
// fuzzing) as the first rank of its pipeline rank.
func LoadProgram(data []byte, plan *codegen.Plan, dev device.Device) (*Rank, error) {
	prog := &pb.Program{}
	if err := proto.Unmarshal(data, prog); err != nil {
		return nil, fault.Inputf("not a ppc program: %v", err)
	}
	if err := checkProgram(plan, int(prog.Pp), prog); err != nil {
		return nil, &fault.InputError{Err: err}
	}
	j := &Job{Plan: plan, dev: dev, comm: dist.NewLocal(plan.World)}
	r, err := j.prepare(plan.Mesh.Rank(codegen.Coords{PP: int(prog.Pp)}), prog, true)
	if err != nil {
		return nil, &fault.InputError{Err: err}
	}
	return r, nil
}

// checkProgram checks what a program says of itself against the plan, whose entry says it
// is pipeline rank pp's: the checks that do not depend on which replica runs it.
func checkProgram(plan *codegen.Plan, pp int, prog *pb.Program) error {
	mesh := plan.Mesh.Proto()
	switch {
	case prog.FormatVersion != codegen.FormatVersion:
		return fmt.Errorf("format version %d, this ppc reads %d", prog.FormatVersion, codegen.FormatVersion)
	case int(prog.Pp) != pp:
		return fmt.Errorf("program is for pipeline rank %d, the plan runs it as pipeline rank %d", prog.Pp, pp)
	case !slices.EqualFunc(prog.Mesh, mesh, func(a, b *pb.NamedInt) bool { return a != nil && a.Name == b.Name && a.Value == b.Value }):
		return fmt.Errorf("program is for mesh %s, the plan's is %s", meshText(prog.Mesh), plan.Mesh)
	case int(prog.Microbatches) != plan.Microbatches:
		return fmt.Errorf("program has %d micro-batches, the plan %d", prog.Microbatches, plan.Microbatches)
	case prog.SourceHash != plan.SourceHash:
		return fmt.Errorf("program was compiled from another model (source hash %s, plan %s)", prog.SourceHash, plan.SourceHash)
	case prog.ArenaBytes < 0 || prog.ArenaBytes > maxBytes:
		return fmt.Errorf("arena of %d bytes", prog.ArenaBytes)
	}
	for n, in := range prog.Instrs {
		if in == nil {
			return fmt.Errorf("instruction %d is empty", n)
		}
	}
	return plan.CheckSchedule(pp, prog)
}

func meshText(mesh []*pb.NamedInt) string {
	var s []string
	for _, a := range mesh {
		if a == nil {
			s = append(s, "<nil>")
			continue
		}
		s = append(s, fmt.Sprintf("%s=%d", a.Name, a.Value))
	}
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, " ")
}

// maxArena bounds what a program may ask for before the runtime checks the machine.
const maxBytes = 1 << 46

// prepare makes rank r's memory and instructions from its program, which checkProgram has
// checked against the plan. A rank that is not local (another process runs it) gets the same
// checks and instructions but no memory (its buffers have types and no bytes) and no
// kernels.
func (j *Job) prepare(r int, prog *pb.Program, local bool) (*Rank, error) {
	plan := j.Plan
	if r < 0 || r >= plan.World {
		return nil, fmt.Errorf("rank %d is not in the %d-rank world", r, plan.World)
	}
	rank := &Rank{Index: r, Coords: plan.Mesh.Coords(r), Prog: prog, inputs: map[string]codegen.Input{}, shards: make([]*shardGeom, len(prog.Buffers))}
	for _, in := range plan.Inputs {
		rank.inputs[in.Name] = in
	}
	types := make([]ir.Type, len(prog.Buffers))
	var persistent int64
	named := map[string]int{} // parameters and state by name, as checkRanks keys them: one buffer each
	for i, b := range prog.Buffers {
		if b == nil || int(b.Id) != i {
			return nil, fmt.Errorf("buffer %d: id mismatch", i)
		}
		if b.Role == pb.Role_PARAM || b.Role == pb.Role_STATE {
			key := fmt.Sprintf("%v %q", b.Copy, b.Name)
			if j, ok := named[key]; ok {
				return nil, fmt.Errorf("buffers %d and %d are both %s %q", j, i, strings.ToLower(b.Role.String()), b.Name)
			}
			named[key] = i
		}
		t, err := codegen.TypeFromProto(b.Dtype, b.Shape)
		if err != nil {
			return nil, fmt.Errorf("buffer %d (%s): %v", i, b.Name, err)
		}
		types[i] = t
		size := t.Bytes()
		switch b.Role {
		case pb.Role_ACTIVATION, pb.Role_INPUT:
			if b.Offset < 0 || b.Offset%64 != 0 || b.Offset+size > prog.ArenaBytes {
				return nil, fmt.Errorf("buffer %d (%s): %d bytes at offset %d do not fit the %d-byte arena", i, b.Name, size, b.Offset, prog.ArenaBytes)
			}
		case pb.Role_CONST:
			want := size
			if b.Splat {
				want = int64(t.DType.Size())
			}
			if int64(len(b.Data)) != want {
				return nil, fmt.Errorf("constant buffer %d holds %d bytes, its type %s needs %d", i, len(b.Data), t, want)
			}
			persistent += size
		case pb.Role_PARAM:
			g, err := shardOf(b, t, plan.Mesh, rank.Coords)
			if err != nil {
				return nil, fmt.Errorf("parameter %s: %v", b.Name, err)
			}
			// Imported data is the whole tensor (the program is every replica's; each takes
			// its block at initialisation).
			whole := wholeBytes(g, t, size)
			if b.Data != nil && int64(len(b.Data)) != whole {
				return nil, fmt.Errorf("parameter %s holds %d bytes, the whole tensor (%s on this rank) needs %d", b.Name, len(b.Data), t, whole)
			}
			if b.Data == nil {
				if _, err := ir.ParseInit(b.Init); err != nil {
					return nil, fmt.Errorf("parameter %s: %v", b.Name, err)
				}
			}
			rank.shards[i] = g
			persistent += size
		case pb.Role_STATE:
			if _, err := ir.ParseInit(b.Init); err != nil {
				return nil, fmt.Errorf("state %s: %v", b.Name, err)
			}
			g, err := shardOf(b, t, plan.Mesh, rank.Coords)
			if err != nil {
				return nil, fmt.Errorf("state %s: %v", b.Name, err)
			}
			// State with an initial value (the loss scale, an imported weight's fp32 main
			// copy) holds the whole tensor, which a shard takes its block of.
			whole := wholeBytes(g, t, size)
			if b.Data != nil && int64(len(b.Data)) != whole {
				return nil, fmt.Errorf("state %s holds %d bytes of initial value, the whole tensor (%s on this rank) needs %d", b.Name, len(b.Data), t, whole)
			}
			rank.shards[i] = g
			persistent += size
		case pb.Role_GRAD, pb.Role_OUTPUT:
			persistent += size
		case pb.Role_STEP:
			if t.NumElements() != 1 || !t.DType.IsFloat() {
				return nil, fmt.Errorf("step buffer %d must be a float scalar, is %s", i, t)
			}
		default:
			return nil, fmt.Errorf("buffer %d (%s): unknown role %d", i, b.Name, b.Role)
		}
		if len(b.Shard) > 0 && b.Role != pb.Role_PARAM && b.Role != pb.Role_STATE {
			return nil, fmt.Errorf("buffer %d (%s) has a sharding, which only parameters and optimizer state have (it is %s)", i, b.Name, strings.ToLower(b.Role.String()))
		}
		if persistent > maxBytes {
			return nil, fmt.Errorf("program needs more than %d bytes", int64(maxBytes))
		}
	}
	rank.Bufs = make([]device.Tensor, len(prog.Buffers))
	if !local {
		for i, t := range types {
			rank.Bufs[i] = device.Tensor{Type: t}
		}
	} else if err := j.place(rank, types); err != nil {
		return nil, err
	}
	// Kernels: op names and attributes against the IR op table.
	specs := make([]*device.Spec, len(prog.Kernels))
	for k, pk := range prog.Kernels {
		s, err := kernelSpec(pk)
		if err != nil {
			return nil, fmt.Errorf("kernel %d (%s): %v", k, pk.GetOp(), err)
		}
		specs[k] = s
	}
	// A parameter that no instruction writes is as constant as a program constant: the
	// device may keep prepared forms of both (Spec.Const).
	written := make([]bool, len(prog.Buffers))
	for _, in := range prog.Instrs {
		for _, id := range in.Out {
			if id >= 0 && int(id) < len(written) {
				written[id] = true
			}
		}
	}
	rank.constant = make([]bool, len(prog.Buffers))
	for i, b := range prog.Buffers {
		rank.constant[i] = b.Role == pb.Role_CONST || b.Role == pb.Role_PARAM && !written[i]
	}
	rank.instrs = make([]instr, len(prog.Instrs))
	inOpt := false // between BEGIN OPT and its END: the optimizer's step
	for n, in := range prog.Instrs {
		if in.Label == "OPT" && (in.Kind == pb.Instr_BEGIN || in.Kind == pb.Instr_END) {
			inOpt = in.Kind == pb.Instr_BEGIN
		}
		it, err := j.prepareInstr(rank, in, specs, local, inOpt)
		if err != nil {
			return nil, fmt.Errorf("instruction %d (%s): %v", n, in.Kind, err)
		}
		rank.instrs[n] = it
	}
	return rank, nil
}

// packRows is how PACK and UNPACK in n blocks cut a tensor of type t: into n blocks of
// `block` rows of dim 0 (a scalar is one row) of `row` elements each, of which the tensor
// has `rows` — the last blocks padded (ZeRO's padding) where n does not divide them.
func packRows(t ir.Type, n int) (rows, block, row int) {
	rows = 1
	if t.Rank() > 0 {
		rows = t.Shape[0]
	}
	if rows == 0 {
		return 0, 0, 0
	}
	return rows, (rows + n - 1) / n, t.NumElements() / rows
}

// packedElems is the elements a tensor of type t takes in a flat buffer packed in n blocks.
func packedElems(t ir.Type, n int) int {
	_, block, row := packRows(t, n)
	return n * block * row
}

// elementwiseSpec reports whether kernel k is elementwise (a fused chain or an op with the
// trait): the only launches that may write a parameter, each element at its own index.
func elementwiseSpec(specs []*device.Spec, k int32) bool {
	if k < 0 || int(k) >= len(specs) {
		return false
	}
	s := specs[k]
	return s.Op == nil && len(s.Fused) > 0 || s.Op != nil && s.Op.Has(ir.Elementwise)
}

// shardGeom places a buffer in its full tensor — the tensor as checkpoints hold it, the
// unpadded one — by the full shape, the full tensor's index of the buffer's element 0 and,
// per dim, how many of the buffer's leading elements lie in the tensor: the rest is
// padding, which is zero and stays zero (a vocabulary padded for tp, pb.Buffer.Unpadded;
// ZeRO's padded dp blocks, pb.Buffer.ZeroRows). padded says some count falls short.
type shardGeom struct {
	global, offset []int64
	count          []int64
	padded         bool
}

// full is the shape of the tensor as checkpoints hold it.
func (g *shardGeom) full() []int64 { return g.global }

// inside is the shape of the buffer's part inside the full tensor.
func (g *shardGeom) inside() ir.Shape {
	out := make(ir.Shape, len(g.count))
	for d, c := range g.count {
		out[d] = int(c)
	}
	return out
}

// wholeBytes is the bytes of the whole tensor a buffer of size bytes (type t, on this rank)
// is a block of: size when the buffer is not sharded (g nil).
func wholeBytes(g *shardGeom, t ir.Type, size int64) int64 {
	if g == nil {
		return size
	}
	whole := int64(t.DType.Size())
	for _, d := range g.full() {
		whole *= d
	}
	return whole
}

// shardOf computes where rank c's block of a sharded buffer lies in the full tensor (nil for
// a buffer that is the whole tensor): along dim i, the axes that split it number the blocks
// in mixed radix, the first axis outermost, and the rank's block is its coordinates on them.
// A ZeRO block dp does not divide (ZeroRows) splits the rows of its other axes' block into
// dp blocks of ceil(rows/dp), the last ones running past them; a padded tensor (Unpadded)
// is its user-visible leading block.
func shardOf(b *pb.Buffer, t ir.Type, mesh codegen.Mesh, c codegen.Coords) (*shardGeom, error) {
	g, err := blockOf(b, t, mesh, c)
	if err != nil {
		return nil, err
	}
	if len(b.Unpadded) == 0 {
		return g, nil
	}
	if len(b.Unpadded) != t.Rank() {
		return nil, fmt.Errorf("unpadded shape %v has %d dims, the buffer %s", b.Unpadded, len(b.Unpadded), t)
	}
	if g == nil {
		g = wholeGeom(t)
	}
	for i, u := range b.Unpadded {
		if u < 1 || u > g.global[i] {
			return nil, fmt.Errorf("unpadded shape %v does not fit in the padded tensor %v", b.Unpadded, g.global)
		}
		g.count[i] = max(0, min(g.count[i], u-g.offset[i]))
	}
	g.global = slices.Clone(b.Unpadded)
	g.padded = true
	return g, nil
}

// wholeGeom places a buffer of type t as the whole tensor.
func wholeGeom(t ir.Type) *shardGeom {
	g := &shardGeom{global: make([]int64, t.Rank()), offset: make([]int64, t.Rank()), count: make([]int64, t.Rank())}
	for i, d := range t.Shape {
		g.global[i], g.count[i] = int64(d), int64(d)
	}
	return g
}

// blockOf is shardOf without a padded vocabulary.
func blockOf(b *pb.Buffer, t ir.Type, mesh codegen.Mesh, c codegen.Coords) (*shardGeom, error) {
	if len(b.Shard) == 0 {
		if b.ZeroRows != 0 {
			return nil, fmt.Errorf("zero_rows %d without a sharding over dp", b.ZeroRows)
		}
		return nil, nil
	}
	if len(b.Shard) != t.Rank() {
		return nil, fmt.Errorf("sharding lists %d dims for %s", len(b.Shard), t)
	}
	if !slices.ContainsFunc(b.Shard, func(d *pb.ShardDim) bool { return len(d.GetAxes()) > 0 }) {
		return nil, nil // [_, _]: whole, as if no sharding were given
	}
	g := wholeGeom(t)
	used := map[string]bool{}
	for i, d := range b.Shard {
		factor, block := int64(1), int64(0)
		axes := d.GetAxes()
		zero := i == 0 && b.ZeroRows != 0
		if zero {
			// dp, innermost, splits the rows of the other axes' block with padding.
			n := int64(mesh.Size("dp"))
			switch {
			case len(axes) == 0 || axes[len(axes)-1] != "dp":
				return nil, fmt.Errorf("zero_rows %d: sharding %s does not split dim 0 over dp last", b.ZeroRows, codegen.ShardText(b.Shard))
			case b.ZeroRows < 1 || (b.ZeroRows+n-1)/n != int64(t.Shape[0]):
				return nil, fmt.Errorf("zero_rows %d: %s is not a block of ceil(%d/%d) rows", b.ZeroRows, t, b.ZeroRows, n)
			}
			axes = axes[:len(axes)-1]
		}
		for _, a := range axes {
			switch {
			case a != "dp" && a != "tp" && a != "ep":
				return nil, fmt.Errorf("sharding %s: %q is not a mesh axis a tensor can be split over (dp, ep, tp)", codegen.ShardText(b.Shard), a)
			case used[a]:
				return nil, fmt.Errorf("sharding %s uses mesh axis %s twice", codegen.ShardText(b.Shard), a)
			}
			used[a] = true
			n := int64(mesh.Size(a))
			factor, block = factor*n, block*n+int64(c.Of(a))
		}
		local := int64(t.Shape[i])
		if !zero {
			g.global[i], g.offset[i] = local*factor, local*block
			continue
		}
		if used["dp"] {
			return nil, fmt.Errorf("sharding %s uses mesh axis dp twice", codegen.ShardText(b.Shard))
		}
		used["dp"] = true
		rows, at := b.ZeroRows, local*int64(c.Of("dp"))
		g.global[0], g.offset[0] = rows*factor, rows*block+at
		g.count[0] = max(0, min(local, rows-at))
		g.padded = g.count[0] < local
	}
	return g, nil
}

// globalType is the full tensor's type of buffer i (its own type when it is not a shard).
func (r *Rank) globalType(i int) ir.Type {
	t := r.Bufs[i].Type
	g := r.shards[i]
	if g == nil {
		return t
	}
	shape := make(ir.Shape, len(g.global))
	for d, x := range g.full() {
		shape[d] = int(x)
	}
	return ir.Type{DType: t.DType, Shape: shape}
}

// LaunchSpecs lists a program's kernel launch sites: each LAUNCH instruction's kernel with
// the types of its operands and results (what a device prepares), in program order. For
// tools that generate code per launch site (`ppc dis --cuda`).
func LaunchSpecs(p *pb.Program) ([]*device.Spec, error) {
	var out []*device.Spec
	typeOf := func(id int32) (ir.Type, error) {
		if id < 0 || int(id) >= len(p.Buffers) || p.Buffers[id] == nil {
			return ir.Type{}, fmt.Errorf("buffer %d out of range", id)
		}
		b := p.Buffers[id]
		return codegen.TypeFromProto(b.Dtype, b.Shape)
	}
	for i, in := range p.Instrs {
		if in.GetKind() != pb.Instr_LAUNCH {
			continue
		}
		if in.Kernel < 0 || int(in.Kernel) >= len(p.Kernels) || p.Kernels[in.Kernel] == nil {
			return nil, fmt.Errorf("instruction %d: kernel %d out of range", i, in.Kernel)
		}
		s, err := kernelSpec(p.Kernels[in.Kernel])
		if err != nil {
			return nil, fmt.Errorf("instruction %d: %v", i, err)
		}
		for _, id := range in.In {
			t, err := typeOf(id)
			if err != nil {
				return nil, fmt.Errorf("instruction %d: %v", i, err)
			}
			s.In = append(s.In, t)
		}
		for _, id := range in.Out {
			t, err := typeOf(id)
			if err != nil {
				return nil, fmt.Errorf("instruction %d: %v", i, err)
			}
			s.Out = append(s.Out, t)
		}
		out = append(out, s)
	}
	return out, nil
}

func kernelSpec(pk *pb.Kernel) (*device.Spec, error) {
	if pk.Pre == nil {
		if pk.PreInputs != 0 {
			return nil, fmt.Errorf("%s kernel with pre_inputs %d but no prologue", pk.Op, pk.PreInputs)
		}
		return opSpec(pk)
	}
	if pk.Pre.Pre != nil || pk.Pre.Op == "fused" || pk.Op == "fused" || pk.PreInputs < 1 {
		return nil, fmt.Errorf("%s kernel with a prologue (%s on %d operands): a prologue is an op before an op, on at least one operand", pk.Op, pk.Pre.Op, pk.PreInputs)
	}
	pre, err := opSpec(pk.Pre)
	if err != nil {
		return nil, fmt.Errorf("prologue: %v", err)
	}
	s, err := opSpec(pk)
	if err != nil {
		return nil, err
	}
	if s.Epilogue() && s.OpInputs < int(pk.PreInputs) {
		return nil, fmt.Errorf("%s kernel with an epilogue on %d operands but a prologue on %d", pk.Op, s.OpInputs, pk.PreInputs)
	}
	s.Pre, s.PreInputs = pre, int(pk.PreInputs)
	return s, nil
}

// opSpec is kernelSpec for a kernel without a prologue.
func opSpec(pk *pb.Kernel) (*device.Spec, error) {
	if pk.Op == "fused" {
		if len(pk.Fused) == 0 {
			return nil, errors.New("fused kernel with 0 steps")
		}
		if pk.OpInputs != 0 {
			return nil, fmt.Errorf("fused kernel with op_inputs %d", pk.OpInputs)
		}
		return fusedSpec(pk, &device.Spec{})
	}
	def := ir.Lookup(pk.Op)
	if def == nil {
		return nil, fmt.Errorf("unknown op %q", pk.Op)
	}
	if def.Has(ir.P2P) || def.Has(ir.Collective) {
		return nil, fmt.Errorf("op %s is communication, not a kernel", pk.Op)
	}
	attrs, err := codegen.AttrsFromProto(pk.Attrs)
	if err != nil {
		return nil, err
	}
	if _, err := def.CheckAttrs(attrs); err != nil {
		return nil, err
	}
	s := &device.Spec{Op: def, Attrs: attrs}
	if len(pk.Fused) == 0 {
		if pk.OpInputs != 0 || len(pk.Outputs) > 0 {
			return nil, fmt.Errorf("%s kernel with op_inputs %d and %d outputs but no epilogue", pk.Op, pk.OpInputs, len(pk.Outputs))
		}
		return s, nil
	}
	if def.Has(ir.Elementwise) || pk.OpInputs < 0 {
		return nil, fmt.Errorf("%s kernel with an epilogue on %d operands", pk.Op, pk.OpInputs)
	}
	s.OpInputs = int(pk.OpInputs)
	return fusedSpec(pk, s)
}

// fusedSpec adds pk's fused steps and outputs to s.
func fusedSpec(pk *pb.Kernel, s *device.Spec) (*device.Spec, error) {
	if len(pk.Fused) > 4096 {
		return nil, fmt.Errorf("fused kernel with %d steps", len(pk.Fused))
	}
	for i, st := range pk.Fused {
		if st == nil {
			return nil, fmt.Errorf("fused step %d is empty", i)
		}
		def := ir.Lookup(st.Op)
		if def == nil || !def.Has(ir.Elementwise) {
			return nil, fmt.Errorf("fused step %d: %q is not an elementwise op", i, st.Op)
		}
		attrs, err := codegen.AttrsFromProto(st.Attrs)
		if err != nil {
			return nil, fmt.Errorf("fused step %d: %v", i, err)
		}
		if _, err := def.CheckAttrs(attrs); err != nil {
			return nil, fmt.Errorf("fused step %d: %v", i, err)
		}
		if st.Type == nil {
			return nil, fmt.Errorf("fused step %d has no type", i)
		}
		t, err := codegen.TypeFromProto(st.Type.Dtype, st.Type.Shape)
		if err != nil {
			return nil, fmt.Errorf("fused step %d: %v", i, err)
		}
		args := make([]int, len(st.Args))
		for a, x := range st.Args {
			args[a] = int(x)
		}
		s.Fused = append(s.Fused, device.FusedStep{Op: def, Args: args, Attrs: attrs, Type: t})
	}
	for _, o := range pk.Outputs {
		s.Outputs = append(s.Outputs, int(o))
	}
	return s, nil
}

func (j *Job) prepareInstr(rank *Rank, in *pb.Instr, specs []*device.Spec, local, inOpt bool) (instr, error) {
	it := instr{Instr: in}
	buf := func(ids []int32) ([]device.Tensor, error) {
		out := make([]device.Tensor, len(ids))
		for i, id := range ids {
			if id < 0 || int(id) >= len(rank.Bufs) {
				return nil, fmt.Errorf("buffer %d out of range (%d buffers)", id, len(rank.Bufs))
			}
			out[i] = rank.Bufs[id]
		}
		return out, nil
	}
	var err error
	if it.in, err = buf(in.In); err != nil {
		return it, err
	}
	if it.out, err = buf(in.Out); err != nil {
		return it, err
	}
	count := func(nin, nout int) error {
		if len(in.In) != nin || len(in.Out) != nout {
			return fmt.Errorf("takes %d inputs and %d outputs, has %d and %d", nin, nout, len(in.In), len(in.Out))
		}
		return nil
	}
	role := func(id int32) pb.Role { return rank.Prog.Buffers[id].Role }
	writable := func() error {
		for _, id := range in.Out {
			switch role(id) {
			case pb.Role_CONST, pb.Role_PARAM, pb.Role_STEP:
				// COPY writes tied weights; collectives write parameters under ZeRO (the
				// all-gather of updated shards) and when replicas are broadcast; UNPACK cuts
				// a gathered bucket of them into place; the optimizer's elementwise updates
				// write them in place (LAUNCH inside OPT).
				paramOK := in.Kind == pb.Instr_COPY || in.Kind == pb.Instr_UNPACK || dist.OpName(in.Kind) != "" ||
					in.Kind == pb.Instr_LAUNCH && inOpt && elementwiseSpec(specs, in.Kernel)
				if !paramOK || role(id) != pb.Role_PARAM {
					return fmt.Errorf("writes to read-only buffer %d (%s)", id, role(id))
				}
			}
		}
		return nil
	}
	if err := writable(); err != nil {
		return it, err
	}
	// A peer is a pipeline rank; the message goes to its replica with this rank's dp and tp
	// coordinates.
	peerOK := func() error {
		mesh := j.Plan.Mesh
		if in.Axis != "" {
			// A ring over a mesh axis (context parallelism): the peer is the next (+1) or
			// previous (−1) coordinate on the axis, wrapping, with every other coordinate this
			// rank's.
			n := mesh.Size(in.Axis)
			if in.Axis == "pp" || n < 2 || (in.Peer != 1 && in.Peer != -1) {
				return fmt.Errorf("ring peer %+d on axis %q: want +1 or −1 on the cp axis of a mesh with cp > 1", in.Peer, in.Axis)
			}
			c := rank.Coords
			it.peer = mesh.Rank(c.With(in.Axis, (c.Of(in.Axis)+int(in.Peer)+n)%n))
			return nil
		}
		if in.Peer < 0 || int(in.Peer) >= mesh.PP || int(in.Peer) == rank.Coords.PP {
			return fmt.Errorf("peer %d is not another pipeline rank of %d", in.Peer, mesh.PP)
		}
		c := rank.Coords
		c.PP = int(in.Peer)
		it.peer = mesh.Rank(c)
		return nil
	}
	switch in.Kind {
	case pb.Instr_LAUNCH:
		if in.Kernel < 0 || int(in.Kernel) >= len(specs) {
			return it, fmt.Errorf("kernel %d out of range", in.Kernel)
		}
		spec := *specs[in.Kernel]
		for i, x := range it.in {
			spec.In = append(spec.In, x.Type)
			if rank.constant[in.In[i]] {
				if spec.Const == nil {
					spec.Const = make([]bool, len(it.in))
				}
				spec.Const[i] = true
			}
		}
		for _, x := range it.out {
			spec.Out = append(spec.Out, x.Type)
		}
		if err := checkLaunch(&spec); err != nil {
			return it, err
		}
		it.name = spec.Name()
		if !local {
			break
		}
		impl, err := j.dev.Prepare(&spec)
		if err != nil {
			return it, fmt.Errorf("%s: %v", spec.Name(), err)
		}
		it.impl = impl
	case pb.Instr_INPUT:
		if err := count(0, 1); err != nil {
			return it, err
		}
		spec, ok := rank.inputs[in.Label]
		if !ok {
			return it, fmt.Errorf("input %q is not in the plan", in.Label)
		}
		t := it.out[0].Type
		if t.DType.String() != spec.DType || !t.Shape.Equal(spec.MicrobatchShape) {
			return it, fmt.Errorf("input %q: buffer %s, the plan says %s%v", in.Label, t, spec.DType, spec.MicrobatchShape)
		}
		if in.Microbatch < 0 || int(in.Microbatch) >= j.Plan.Microbatches {
			return it, fmt.Errorf("micro-batch %d out of range", in.Microbatch)
		}
		// Data-parallel replica d runs micro-batches d·M … d·M+M−1 of the global batch.
		it.mb = rank.Coords.DP*j.Plan.Microbatches + int(in.Microbatch)
	case pb.Instr_SEND:
		if err := count(1, 0); err != nil {
			return it, err
		}
		return it, peerOK()
	case pb.Instr_RECV:
		if err := count(0, 1); err != nil {
			return it, err
		}
		return it, peerOK()
	case pb.Instr_ZERO:
		return it, count(0, 1)
	case pb.Instr_ACCUM:
		if err := count(1, 1); err != nil {
			return it, err
		}
		a, b := it.in[0].Type, it.out[0].Type
		if !a.Shape.Equal(b.Shape) || !a.DType.IsFloat() || (b.DType != ir.F32 && b.DType != ir.F64 && b.DType != a.DType) {
			return it, fmt.Errorf("cannot accumulate %s into %s", a, b)
		}
	case pb.Instr_COPY:
		if err := count(1, 1); err != nil {
			return it, err
		}
		if !it.in[0].Type.Equal(it.out[0].Type) {
			return it, fmt.Errorf("copies %s into %s", it.in[0].Type, it.out[0].Type)
		}
	case pb.Instr_ALL_REDUCE, pb.Instr_ALL_GATHER, pb.Instr_REDUCE_SCATTER, pb.Instr_BROADCAST, pb.Instr_ALL_TO_ALL:
		return it, j.prepareCollective(rank, in, &it)
	case pb.Instr_PACK, pb.Instr_UNPACK:
		// One flat buffer and the tensors laid end to end in it, all of one dtype.
		flat, parts := it.out, it.in
		if in.Kind == pb.Instr_UNPACK {
			flat, parts = it.in, it.out
		}
		if len(flat) != 1 || len(parts) == 0 {
			return it, fmt.Errorf("%s takes one flat buffer and at least one tensor, has %d and %d", strings.ToLower(in.Kind.String()), len(flat), len(parts))
		}
		if in.Blocks < 0 {
			return it, fmt.Errorf("%s in %d blocks", strings.ToLower(in.Kind.String()), in.Blocks)
		}
		n := 0
		for _, p := range parts {
			if p.Type.DType != flat[0].Type.DType {
				return it, fmt.Errorf("%s of %s and %s: one dtype", strings.ToLower(in.Kind.String()), p.Type, flat[0].Type)
			}
			n += packedElems(p.Type, max(1, int(in.Blocks)))
		}
		if n != flat[0].Type.NumElements() {
			if in.Blocks > 1 {
				return it, fmt.Errorf("%s in %d blocks: the tensors take %d elements (blocks of ceil(rows/%d) rows), the flat buffer %s", strings.ToLower(in.Kind.String()), in.Blocks, n, in.Blocks, flat[0].Type)
			}
			return it, fmt.Errorf("%s: the tensors hold %d elements, the flat buffer %s", strings.ToLower(in.Kind.String()), n, flat[0].Type)
		}
	case pb.Instr_AXIS_INDEX:
		if err := count(0, 1); err != nil {
			return it, err
		}
		if t := it.out[0].Type; t.DType != ir.I64 || t.Rank() != 0 {
			return it, fmt.Errorf("axis index into %s, want an i64 scalar", t)
		}
		if in.Axis != "dp" && in.Axis != "cp" && in.Axis != "tp" && in.Axis != "ep" && in.Axis != "edp" {
			return it, fmt.Errorf("axis index of %q: want dp, ep, edp, cp or tp", in.Axis)
		}
		it.index = int64(rank.Coords.Of(in.Axis))
	case pb.Instr_LOSS:
		if err := count(1, 0); err != nil {
			return it, err
		}
		if t := it.in[0].Type; t.NumElements() != 1 || !t.DType.IsFloat() {
			return it, fmt.Errorf("loss must be a float scalar, is %s", t)
		}
		if in.Microbatch < 0 || int(in.Microbatch) >= j.Plan.Microbatches {
			return it, fmt.Errorf("micro-batch %d out of range", in.Microbatch)
		}
	case pb.Instr_METRIC:
		if err := count(1, 0); err != nil {
			return it, err
		}
		if t := it.in[0].Type; t.NumElements() != 1 || !t.DType.IsFloat() {
			return it, fmt.Errorf("metric %q must be a float scalar, is %s", in.Label, t)
		}
		if !metricNameRE.MatchString(in.Label) {
			return it, fmt.Errorf("metric name %q: want lower-case letters, digits and _, starting with a letter", in.Label)
		}
	case pb.Instr_BEGIN, pb.Instr_END, pb.Instr_NOP:
		return it, count(0, 0)
	default:
		return it, fmt.Errorf("unknown instruction kind %d", in.Kind)
	}
	return it, nil
}

// prepareCollective checks one collective instruction on its own and builds its dist.Op.
// That the members agree with each other is checked across programs by checkCollectives
// (Load, New) and again by the transport when they meet.
func (j *Job) prepareCollective(rank *Rank, in *pb.Instr, it *instr) error {
	kind, name := in.Kind, dist.OpName(in.Kind)
	inPlaceOK := kind == pb.Instr_ALL_REDUCE || kind == pb.Instr_BROADCAST
	switch {
	case inPlaceOK && (len(in.In) != 1 || len(in.Out) > 1):
		return fmt.Errorf("%s takes 1 input and 0 outputs (in place) or 1, has %d and %d", name, len(in.In), len(in.Out))
	case !inPlaceOK && (len(in.In) != 1 || len(in.Out) != 1):
		return fmt.Errorf("%s takes 1 input and 1 output, has %d and %d", name, len(in.In), len(in.Out))
	case len(in.Group) == 0 && in.Axis == "":
		return fmt.Errorf("%s names neither a mesh axis nor a group", name)
	case len(in.Group) > 0 && in.Axis != "":
		return fmt.Errorf("%s names both mesh axis %s and group %v", name, in.Axis, in.Group)
	case in.Axis != "" && j.Plan.Mesh.Size(in.Axis) == 0:
		return fmt.Errorf("%s over %q, which is not a mesh axis (pp, dp, ep, edp, cp, tp)", name, in.Axis)
	case in.Peer != 0:
		return fmt.Errorf("%s has peer %d: collectives name their ranks in group", name, in.Peer)
	case in.Dim != 0 && kind != pb.Instr_ALL_GATHER && kind != pb.Instr_REDUCE_SCATTER && kind != pb.Instr_ALL_TO_ALL:
		return fmt.Errorf("%s has dim %d: only all-gather, reduce-scatter and all-to-all take a dim", name, in.Dim)
	case in.ConcatDim != 0 && kind != pb.Instr_ALL_TO_ALL:
		return fmt.Errorf("%s has concat dim %d: only all-to-all takes one", name, in.ConcatDim)
	case in.ReduceOp != pb.Instr_SUM && kind != pb.Instr_ALL_REDUCE && kind != pb.Instr_REDUCE_SCATTER:
		return fmt.Errorf("%s has reduce op %s: only all-reduce and reduce-scatter reduce", name, in.ReduceOp)
	case in.Root != 0 && kind != pb.Instr_BROADCAST:
		return fmt.Errorf("%s has root %d: only broadcast has a root", name, in.Root)
	}
	groupIDs := in.Group
	if in.Axis != "" {
		// The ranks that share this rank's other coordinates, in the axis's order.
		groupIDs = nil
		for _, g := range j.Plan.Mesh.Group(rank.Coords, in.Axis) {
			groupIDs = append(groupIDs, int32(g))
		}
	}
	n := len(groupIDs)
	group := make([]int, n)
	seen := map[int32]bool{}
	for i, g := range groupIDs {
		if g < 0 || int(g) >= j.Plan.World {
			return fmt.Errorf("%s group %v: %d is not a rank of the %d-rank world", name, in.Group, g, j.Plan.World)
		}
		if seen[g] {
			return fmt.Errorf("%s group %v names rank %d twice", name, in.Group, g)
		}
		seen[g] = true
		group[i] = int(g)
	}
	if !seen[int32(rank.Index)] {
		return fmt.Errorf("rank %d is not in its %s group %v", rank.Index, name, in.Group)
	}
	x, inID := it.in[0].Type, in.In[0]
	y, outID := x, inID
	if len(in.Out) == 1 {
		y, outID = it.out[0].Type, in.Out[0]
	}
	if r := rank.Prog.Buffers[outID].Role; r == pb.Role_CONST || r == pb.Role_STEP {
		return fmt.Errorf("%s writes read-only buffer %d (%s)", name, outID, r)
	}
	switch kind {
	case pb.Instr_ALL_REDUCE, pb.Instr_REDUCE_SCATTER:
		if err := dist.Reducible(x.DType, in.ReduceOp); err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
	}
	switch kind {
	case pb.Instr_ALL_REDUCE, pb.Instr_BROADCAST:
		if !y.Equal(x) {
			return fmt.Errorf("%s of %s into %s: the output must have the input's type", name, x, y)
		}
		if kind == pb.Instr_BROADCAST && (in.Root < 0 || int(in.Root) >= n) {
			return fmt.Errorf("broadcast root %d is not a position in group %v (0 … %d)", in.Root, group, n-1)
		}
	case pb.Instr_ALL_GATHER, pb.Instr_REDUCE_SCATTER:
		if in.Dim < 0 || int(in.Dim) >= x.Rank() {
			return fmt.Errorf("%s dim %d is not a dim of %s", name, in.Dim, x)
		}
		d := int(in.Dim)
		if y.DType != x.DType || y.Rank() != x.Rank() {
			return fmt.Errorf("%s of %s into %s: the output must have the input's dtype and rank", name, x, y)
		}
		want := slices.Clone(x.Shape)
		if kind == pb.Instr_ALL_GATHER {
			// Compare by division: the product could overflow for absurd sizes.
			if y.Shape[d]%n != 0 || y.Shape[d]/n != x.Shape[d] {
				want[d] = -1
			} else {
				want[d] = y.Shape[d]
			}
		} else {
			if x.Shape[d]%n != 0 {
				return fmt.Errorf("reduce-scatter: dim %d of %s (size %d) does not split into %d equal parts", d, x, x.Shape[d], n)
			}
			want[d] /= n
		}
		if !y.Shape.Equal(want) {
			rel := "×"
			if kind == pb.Instr_REDUCE_SCATTER {
				rel = "÷"
			}
			return fmt.Errorf("%s of %s over %d ranks along dim %d: the output must be dim %d %s %d, the buffer is %s",
				name, x, n, d, d, rel, n, y)
		}
	case pb.Instr_ALL_TO_ALL:
		s, c := int(in.Dim), int(in.ConcatDim)
		if s < 0 || s >= x.Rank() || c < 0 || c >= x.Rank() {
			return fmt.Errorf("%s split dim %d or concat dim %d is not a dim of %s", name, s, c, x)
		}
		if x.Shape[s]%n != 0 {
			return fmt.Errorf("%s: dim %d of %s (size %d) does not split into %d equal parts", name, s, x, x.Shape[s], n)
		}
		want := slices.Clone(x.Shape)
		want[s] /= n
		want[c] *= n
		if y.DType != x.DType || !y.Shape.Equal(want) {
			return fmt.Errorf("%s of %s over %d ranks (split dim %d, concat dim %d): the output must be %s, the buffer is %s",
				name, x, n, s, c, ir.Type{DType: x.DType, Shape: want}, y)
		}
	}
	// The members read each other's inputs while they write their outputs: an output that
	// shares bytes with the input (other than the in-place form) would corrupt what others read.
	if (outID != inID || !inPlaceOK) && j.overlap(rank, inID, outID) {
		return fmt.Errorf("%s output buffer %d overlaps its input buffer %d", name, outID, inID)
	}
	it.coll = &dist.Op{Kind: kind, Group: group, Members: dist.MembersKey(group), DType: x.DType, Shape: x.Shape,
		Dim: int(in.Dim), ConcatDim: int(in.ConcatDim), Reduce: in.ReduceOp, Root: int(in.Root), Tag: in.Tag}
	return nil
}

// overlap reports whether buffers a and b share bytes (arena buffers can; others cannot).
func (j *Job) overlap(rank *Rank, a, b int32) bool {
	x0, x1 := span(rank.Bufs[a])
	y0, y1 := span(rank.Bufs[b])
	return x0 < x1 && y0 < y1 && x0 < y1 && y0 < x1
}

// span is the address range of t's bytes (on the host or on the device; empty for the
// buffers of another process's rank, which are not placed here).
func span(t device.Tensor) (lo, hi uint64) {
	if t.Data != nil {
		if len(t.Data) == 0 {
			return 0, 0
		}
		lo = uint64(uintptr(unsafe.Pointer(&t.Data[0])))
		return lo, lo + uint64(len(t.Data))
	}
	if t.Addr == 0 {
		return 0, 0
	}
	return t.Addr, t.Addr + uint64(t.Type.Bytes())
}

// checkRanks checks the prepared ranks against each other: their collectives, and that every
// rank holding a parameter or optimizer state by name holds a block of the same full tensor.
func (j *Job) checkRanks() error {
	if err := checkCollectives(j.all); err != nil {
		return err
	}
	type holder struct {
		rank    int
		t       ir.Type
		sharded bool
	}
	first := map[string]holder{}
	for _, r := range j.all {
		for i, b := range r.Prog.Buffers {
			if b.Role != pb.Role_PARAM && b.Role != pb.Role_STATE {
				continue
			}
			h := holder{r.Index, r.globalType(i), r.shards[i] != nil}
			key := b.Name
			if b.Copy {
				key += " (16-bit copy)" // of the main parameter, state of the same name
			}
			f, ok := first[key]
			if !ok {
				first[key] = h
				continue
			}
			if !f.t.Equal(h.t) || f.sharded != h.sharded {
				return fmt.Errorf("%s is %s on rank %d (%s) and %s on rank %d (%s): they must hold blocks of one tensor",
					b.Name, f.t, f.rank, shardedText(f.sharded), h.t, h.rank, shardedText(h.sharded))
			}
		}
	}
	return nil
}

func shardedText(sharded bool) string {
	if sharded {
		return "a shard"
	}
	return "whole"
}

// checkCollectives checks, before anything runs, that the members of every group issue the
// same collectives on it in the same order — the matching the transport does at run time
// (by member set and per-set sequence number), done statically because the instruction
// streams are straight-line. A mismatch found here would otherwise hang or fail mid-step.
func checkCollectives(ranks []*Rank) error {
	type call struct {
		rank, instr int
		op          *dist.Op
	}
	calls := map[dist.Key][]call{}
	var keys []dist.Key
	count := map[string][]int{} // member set → collectives issued by each rank of the world
	for _, r := range ranks {
		seq := map[string]int{}
		for n := range r.instrs {
			op := r.instrs[n].coll
			if op == nil {
				continue
			}
			k := dist.Key{Members: op.Members, Seq: seq[op.Members]}
			seq[op.Members]++
			if calls[k] == nil {
				keys = append(keys, k)
			}
			calls[k] = append(calls[k], call{r.Index, n, op})
		}
		for m, c := range seq {
			if count[m] == nil {
				count[m] = make([]int, len(ranks))
			}
			count[m][r.Index] = c
		}
	}
	for _, k := range keys {
		cs := calls[k]
		first := cs[0]
		for _, c := range cs[1:] {
			if !c.op.Same(first.op) {
				return fmt.Errorf("collective #%d over ranks {%s} does not match: rank %d (instruction %d) issues %v, rank %d (instruction %d) issues %v",
					k.Seq, k.Members, first.rank, first.instr, first.op, c.rank, c.instr, c.op)
			}
		}
		if len(cs) != len(first.op.Group) {
			for _, m := range first.op.Group {
				if m >= len(ranks) || count[k.Members][m] <= k.Seq {
					issued := 0
					if m < len(ranks) {
						issued = count[k.Members][m]
					}
					return fmt.Errorf("rank %d (instruction %d) issues collective #%d over ranks {%s}, %v, but rank %d issues only %d collectives over that group: it would wait forever",
						first.rank, first.instr, k.Seq, k.Members, first.op, m, issued)
				}
			}
		}
	}
	return nil
}

// checkLaunch re-checks a launch against the IR op table: result types must be exactly what
// the op infers from the operand types, so a corrupted program cannot reach a kernel with
// buffers it would index out of bounds.
func checkLaunch(s *device.Spec) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed kernel: %v", r)
		}
	}()
	if s.Pre != nil {
		// The prologue alone, then the op reading its result.
		pre, op, err := s.SplitPrologue()
		if err != nil {
			return err
		}
		if err := checkLaunch(pre); err != nil {
			return fmt.Errorf("prologue: %v", err)
		}
		return checkLaunch(op)
	}
	if s.Epilogue() {
		// The op alone, then the chain alone over its result, and every type the op
		// result's: the chain may run over any part of the result as soon as it is final.
		if s.OpInputs > len(s.In) || len(s.Out) == 0 {
			return fmt.Errorf("%s epilogue on %d of %d operands, %d results", s.Op.Name, s.OpInputs, len(s.In), len(s.Out))
		}
		op, chain := s.SplitEpilogue()
		if err := checkLaunch(op); err != nil {
			return err
		}
		if err := checkLaunch(chain); err != nil {
			return fmt.Errorf("%s epilogue: %v", s.Op.Name, err)
		}
		t := op.Out[0]
		for i, x := range chain.In {
			if !x.Equal(t) {
				return fmt.Errorf("%s epilogue input %d is %s, the op's result %s", s.Op.Name, i, x, t)
			}
		}
		for i, st := range s.Fused {
			if !st.Type.Equal(t) {
				return fmt.Errorf("%s epilogue step %d is %s, the op's result %s", s.Op.Name, i, st.Type, t)
			}
		}
		return nil
	}
	if s.Op != nil {
		n := len(s.In)
		if n < s.Op.MinOperands || s.Op.MaxOperands >= 0 && n > s.Op.MaxOperands {
			return fmt.Errorf("%s takes %s operands, got %d", s.Op.Name, s.Op.OperandCountString(), n)
		}
		want, err := s.Op.Infer(s.In, s.Attrs)
		if err != nil {
			return fmt.Errorf("%s: %v", s.Op.Name, err)
		}
		return sameTypes(s.Op.Name, want, s.Out)
	}
	outs := s.OutputSteps()
	if len(s.Out) != len(outs) {
		return fmt.Errorf("fused kernel writes %d steps, %d buffers given", len(outs), len(s.Out))
	}
	vals := append([]ir.Type(nil), s.In...)
	for i, st := range s.Fused {
		in := make([]ir.Type, len(st.Args))
		for a, x := range st.Args {
			if x < 0 || x >= len(vals) {
				return fmt.Errorf("fused step %d reads value %d of %d", i, x, len(vals))
			}
			in[a] = vals[x]
		}
		if n := len(in); n < st.Op.MinOperands || st.Op.MaxOperands >= 0 && n > st.Op.MaxOperands {
			return fmt.Errorf("fused step %d: %s takes %s operands, got %d", i, st.Op.Name, st.Op.OperandCountString(), n)
		}
		want, err := st.Op.Infer(in, st.Attrs)
		if err != nil {
			return fmt.Errorf("fused step %d: %s: %v", i, st.Op.Name, err)
		}
		if err := sameTypes(st.Op.Name, want, []ir.Type{st.Type}); err != nil {
			return fmt.Errorf("fused step %d: %v", i, err)
		}
		vals = append(vals, st.Type)
	}
	// Each output is a distinct step of the last step's shape: the chain runs over one
	// index space and writes each result once.
	last := s.Fused[len(s.Fused)-1].Type
	seen := map[int]bool{}
	want := make([]ir.Type, len(outs))
	for i, o := range outs {
		if o < 0 || o >= len(s.Fused) || seen[o] {
			return fmt.Errorf("fused kernel output %d is step %d of %d (or repeated)", i, o, len(s.Fused))
		}
		seen[o] = true
		want[i] = s.Fused[o].Type
		if !want[i].Shape.Equal(last.Shape) {
			return fmt.Errorf("fused kernel output %d (step %d) is %s, the chain runs over %s", i, o, want[i], last)
		}
	}
	return sameTypes("fused", want, s.Out)
}

func sameTypes(op string, want, got []ir.Type) error {
	if len(want) != len(got) {
		return fmt.Errorf("%s produces %d results, %d buffers given", op, len(want), len(got))
	}
	for i := range want {
		if !want[i].Equal(got[i]) {
			return fmt.Errorf("%s result %d is %s, buffer is %s", op, i, want[i], got[i])
		}
	}
	return nil
}

// place makes the rank's one device allocation and places every buffer in it: the arena at
// offset 0 (activations and inputs at the program's offsets), then each parameter, gradient,
// optimizer state, constant and step buffer at the next multiple of 256 bytes. Constants are
// written to the device here.
func (j *Job) place(rank *Rank, types []ir.Type) error {
	prog := rank.Prog
	at := make([]int64, len(prog.Buffers))
	size := align256(prog.ArenaBytes)
	for i, b := range prog.Buffers {
		switch b.Role {
		case pb.Role_ACTIVATION, pb.Role_INPUT:
			at[i] = b.Offset
		default:
			at[i] = size
			size += align256(types[i].Bytes())
		}
	}
	if err := checkMemory(j.dev, size); err != nil {
		return err
	}
	mem, err := j.dev.Alloc(size)
	if err != nil {
		return fmt.Errorf("%s device: %v", j.dev.Name(), err)
	}
	rank.mem = mem
	for i, b := range prog.Buffers {
		rank.Bufs[i] = mem.At(at[i], types[i])
		if b.Role == pb.Role_CONST {
			host := rank.Bufs[i].Data
			if host == nil {
				host = make([]byte, types[i].Bytes())
			}
			fillConst(host, b.Data, b.Splat)
			if !rank.Bufs[i].OnHost() {
				if err := j.dev.Write(rank.Bufs[i], host); err != nil {
					return fmt.Errorf("constant %s: %v", b.Name, err)
				}
			}
		}
	}
	return nil
}

func align256(n int64) int64 { return (n + 255) &^ 255 }

func fillConst(dst, data []byte, splat bool) {
	if !splat {
		copy(dst, data)
		return
	}
	for i := 0; i < len(dst); i += len(data) {
		copy(dst[i:], data)
	}
}

// MemoryLimit, when positive, caps the memory one rank's program may ask for (tests and
// fuzzing use it); otherwise the limit is the machine's available memory.
var MemoryLimit int64

// checkMemory refuses programs that cannot fit the device's available memory.
func checkMemory(dev device.Device, need int64) error {
	avail := dev.Available()
	if MemoryLimit > 0 {
		avail = MemoryLimit
	}
	if avail > 0 && need > avail {
		return fmt.Errorf("needs %s of memory, the %s device has %s available", FormatBytes(need), dev.Name(), FormatBytes(avail))
	}
	return nil
}

// FormatBytes prints a byte count with a binary unit (12.5 MiB).
func FormatBytes(n int64) string { return codegen.FormatBytes(n) }
