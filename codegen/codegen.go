package codegen

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/lower"
	"ppc.dev/ppc/passes"
)

// Action is one compute action of a pipeline schedule: run stage Stage's F, I or W function
// (B = I then W) for micro-batch Microbatch — what the rank-programs pass orders.
type Action = passes.RankAction

// Schedule is what code generation needs of a pipeline schedule: the stage → rank placement
// and each rank's compute actions in order. Communication is derived from the data
// dependencies: each value is sent right after the action producing it and received right
// before the first action that needs it (sends never block), so a schedule whose compute order
// is valid (schedule.Validate) cannot deadlock.
type Schedule struct {
	Name      string
	Placement []int
	Actions   [][]Action
}

// Options for Generate.
type Options struct {
	Schedule Schedule
	// Optimizer names the optimizer for plan.json ("adamw", "sgd"); empty for inference.
	Optimizer string
	// Source identifies the model (its source and the options that resolve it), hashed into
	// the plan and programs.
	Source []byte
	// Recompute is recorded in the plan.
	Recompute string
}

// Output is a compiled job: the plan and one program per pipeline rank (Programs[i] is the
// file Plan.Programs[i] names), which all dp × tp replicas of that pipeline rank run.
type Output struct {
	Plan     *Plan
	Programs []*pb.Program
}

// Generate lowers a module's rank programs (@rank<r>, written by passes.RankPrograms and the
// passes after it) to one program per pipeline rank, each op to its instructions, and plans
// memory over the result. The module's mesh attribute gives the dp and tp sizes (1 when
// absent); the schedule's ranks are the pipeline ranks.
func Generate(m *ir.Module, opts Options) (*Output, error) {
	g := &gen{m: m, funcs: map[string]*ir.Func{}, blocks: map[string]*lower.Block{}, sched: opts.Schedule}
	g.microbatches = m.Attrs.Int("microbatches", 1)
	dev, err := passes.ModuleDevice(m)
	if err != nil {
		return nil, err
	}
	g.dev = dev
	g.stages = m.Attrs.Int("stages", 1)
	if g.microbatches < 1 {
		return nil, fmt.Errorf("module attribute microbatches = %d", g.microbatches)
	}
	var tokenPlan *passes.TokenPlan
	if tp, ok := passes.ReadTokenPlan(m); ok {
		tokenPlan = &tp
	}
	if len(g.sched.Placement) != g.stages {
		return nil, fmt.Errorf("schedule places %d stages, the module has %d", len(g.sched.Placement), g.stages)
	}
	ranks := len(g.sched.Actions)
	for s, r := range g.sched.Placement {
		if r < 0 || r >= ranks {
			return nil, fmt.Errorf("stage %d placed on rank %d of %d", s, r, ranks)
		}
	}
	mesh, err := moduleMesh(m, ranks)
	if err != nil {
		return nil, err
	}
	g.mesh = mesh
	for _, f := range m.Funcs {
		if passes.IsRankProgram(f) {
			g.rankProgs = append(g.rankProgs, f)
			continue
		}
		g.funcs[f.Name] = f
		if f.Attrs.Str("kind", "") == "" {
			continue // @optimizer, or a function a rank program calls: lowered when called
		}
		b, err := lower.Func(f)
		if err != nil {
			return nil, err
		}
		g.blocks[f.Name] = b
	}
	if g.ports, err = passes.PortsOf(m); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(opts.Source)
	hash := hex.EncodeToString(sum[:8])
	out := &Output{Plan: &Plan{FormatVersion: FormatVersion, Model: m.Name, SourceHash: hash,
		Mesh: mesh, World: mesh.World(), Microbatches: g.microbatches, Stages: g.stages,
		StageRanks: g.sched.Placement, Schedule: PlanSchedule{Name: g.sched.Name}, TokenSlices: passes.TokenSlices(m), TokenPlan: tokenPlan, CP: passes.ReadCPSplit(m), Training: g.funcs["optimizer"] != nil,
		Optimizer: opts.Optimizer}}
	if len(g.rankProgs) == 0 {
		return nil, fmt.Errorf("the module has no rank programs: run rank-programs (and, for training, grad-reduce, tied-grads and rank-optimizer) first")
	}
	if len(g.rankProgs) != len(g.sched.Actions) {
		return nil, fmt.Errorf("the module has %d rank programs, the schedule %d pipeline ranks", len(g.rankProgs), len(g.sched.Actions))
	}
	g.dpComm = dpComm{reduce: map[int]float64{}, reduceMB: map[int]float64{}, tpReduce: map[int]float64{}, opt: map[int]float64{}, zero3: map[string]map[int]float64{}}
	if err := g.collectShardings(); err != nil {
		return nil, err
	}
	for r := 0; r < ranks; r++ {
		rg := g.newRank(r, hash)
		if err := rg.emit(); err != nil {
			return nil, fmt.Errorf("pipeline rank %d: %v", r, err)
		}
		out.Programs = append(out.Programs, rg.prog)
		out.Plan.Programs = append(out.Plan.Programs, rg.info)
		var acts []string
		for _, a := range g.sched.Actions[r] {
			acts = append(acts, a.String())
		}
		out.Plan.Schedule.Actions = append(out.Plan.Schedule.Actions, acts)
	}
	out.Plan.SetRanks()
	g.describe(out.Plan, out.Programs)
	out.Plan.StageInfo = g.stageInfo(out.Plan.Params)
	if part, ok := m.Attrs.Get("partition").(ir.Dict); ok {
		if dev, err := passes.ParseDevice(ir.Attrs(part).Str("device", "")); err == nil {
			out.Plan.Device = &dev
		}
		out.Plan.PartitionNote = ir.Attrs(part).Str("note", "")
	}
	out.Plan.LossNote = m.Attrs.Str(passes.AttrLossNote, "")
	out.Plan.Recompute = opts.Recompute
	out.Plan.Precision = m.Attrs.Str(passes.AttrPrecision, "")
	if moe := passes.ReadMoE(m); moe.Layers > 0 {
		out.Plan.MoE = &moe
	}
	out.Plan.Recipe = g.recipe()
	return out, nil
}

// recipe describes a training plan's model state per parameter (Plan.Recipe).
func (g *gen) recipe() string {
	opt := g.m.Func(passes.OptimizerFunc)
	if opt == nil {
		return ""
	}
	prec := ir.F32
	if p := g.m.Attrs.Str(passes.AttrPrecision, ""); p != "" {
		prec, _ = passes.ParsePrecision(p)
	}
	// The optimizer's fp32 tensors per parameter: the first parameter's state, less its main
	// copy.
	states := 0
	for _, p := range opt.Params() {
		for _, a := range opt.ArgAttrs {
			if n := a.Str(passes.AttrState, ""); strings.HasPrefix(n, p.Name+".") && !a.Has(passes.AttrMainParam) {
				states++
			}
		}
		break
	}
	r := passes.CompileRecipe(prec, g.gradDType, states)
	return r.Name + "; " + r.PerParam(opt.Attrs.Int(passes.AttrZero, 0), g.mesh.Size("dp"))
}

type gen struct {
	m            *ir.Module
	dev          passes.DeviceProfile // the profile the estimates assume
	mesh         Mesh
	shards       map[string]*ir.Sharding // parameter → its sharding (absent: whole)
	unpadded     map[string][]int        // parameter → the shape the user sees, when padded (ir.AttrUnpadded)
	zeroRows     map[string]int          // ZeRO-3 parameter → the rows its padded dp blocks split (ir.AttrZeroRows)
	mainParams   map[string]bool         // 16-bit parameters whose fp32 main copy is their checkpointed tensor (passes.AttrMainParam)
	gradDType    ir.DType                // the dtype 16-bit gradients accumulate in (passes.AttrGradDType; F32 by default)
	rankProgs    []*ir.Func              // @rank<r>: each pipeline rank's step (passes.RankPrograms)
	funcs        map[string]*ir.Func
	blocks       map[string]*lower.Block
	sched        Schedule
	microbatches int
	stages       int
	ports        passes.PortMap
	dpComm       dpComm
}

// dpComm is the cost model's time of the rank programs' gradient and parameter collectives
// (their sizes are known once lowered), by the stage each op is charged to, for the plan's
// stage_info and estimate.
type dpComm struct {
	reduce   map[int]float64 // stage → its gradients' all-reduces over dp, per step
	reduceMB map[int]float64 // stage → ZeRO-2's per-micro-batch reduce-scatters, summed over the step
	tpReduce map[int]float64 // stage → hoisted tensor-parallel gradient all-reduces, per step
	opt      map[int]float64 // stage → ZeRO's collectives around the optimizer step
	// zero3 is ZeRO-3's collectives inside the runs (passes.ParamGather: the parameters'
	// gathers, the gradients' reduce-scatters), by the kind of run (F, I, W) and stage,
	// summed over the step.
	zero3 map[string]map[int]float64
}

// collectiveTime is the cost model's time of one collective over a mesh axis of this mesh.
func (g *gen) collectiveTime(kind string, bytes int64, axis string) float64 {
	return g.dev.AxisCollectiveTime(kind, float64(bytes), g.mesh.Size(axis), axis)
}

func (g *gen) rankOfFunc(name string) int {
	return g.sched.Placement[g.funcs[name].Attrs.Int("stage", 0)]
}

type portKey struct {
	port string
	mb   int
}

// rankGen generates the program of one pipeline rank (rank is its pp coordinate), which
// every dp × tp replica of it runs.
type rankGen struct {
	g       *gen
	rank    int
	slice   int // 1 + the token slice of the action being generated (0: not token-sliced)
	prog    *pb.Program
	info    ProgramInfo
	kernels map[string]int
	named   map[string]int // param/grad/state/step buffers by role-qualified name
	inputs  map[portKey]int
	ports   map[portKey]int
	consts  map[*ir.Dense]int
	values  map[*ir.Value]int // the rank program's values (call and all_reduce results) → buffers
	first   map[int]int       // arena buffer → first instruction touching it
	last    map[int]int       // arena buffer → last instruction touching it
	// alias maps a view's buffer to the buffer whose bytes it views (aliasReshapes,
	// aliasConcats), aliasOff the view's byte offset in it (absent: 0).
	alias    map[int32]int32
	aliasOff map[int32]int64
	stages   []int
	// forward is set while a forward (F) action is emitted; the arena buffers created then
	// (its inputs, received activations and results) are in fwd, the rest of the arena is
	// workspace: gradients in flight, recomputation, optimizer temporaries.
	forward bool
	fwd     map[int]bool
	// mb is the micro-batch of the last run, which the reductions after it are attributed to.
	mb int
	// kind is the kind (F, I, W) of the run being generated.
	kind string
	// perMB are the gradients a grad_reduce_scatter reduces one micro-batch at a time (ZeRO-2):
	// a run leaves its value of one in pending for it instead of accumulating it.
	perMB   map[string]bool
	pending map[string]int
	// gathered are the parameters a param_all_gather gathers (ZeRO): the optimizer step
	// leaves their new dp blocks in blocks instead of writing them back.
	gathered map[string]bool
	blocks   map[string]int
	// ringSends and ringRecvs count the ring_send and ring_recv ops lowered so far: every
	// replica runs the same program, so the k-th send of a rank meets the k-th receive of the
	// next rank on the ring, and both take tag ringTag + k.
	ringSends, ringRecvs int64
}

// ringTag is where ring transfers' tags start, far above the pipeline's (they pass between
// other rank pairs anyway: ring peers differ in their cp coordinate, pipeline peers in pp).
const ringTag = 1 << 40

func (g *gen) newRank(r int, hash string) *rankGen {
	rg := &rankGen{g: g, rank: r, kernels: map[string]int{}, named: map[string]int{}, inputs: map[portKey]int{},
		ports: map[portKey]int{}, consts: map[*ir.Dense]int{}, values: map[*ir.Value]int{}, first: map[int]int{}, last: map[int]int{}, alias: map[int32]int32{}, fwd: map[int]bool{},
		perMB: map[string]bool{}, pending: map[string]int{}, gathered: map[string]bool{}, blocks: map[string]int{}}
	rg.prog = &pb.Program{FormatVersion: FormatVersion, Pp: int32(r), Microbatches: int32(g.microbatches), SourceHash: hash,
		Mesh: g.mesh.Proto()}
	for s, pr := range g.sched.Placement {
		if pr == r {
			rg.stages = append(rg.stages, s)
		}
	}
	rg.info = ProgramInfo{File: ProgramFile(g.mesh.Rank(Coords{PP: r})), PP: r, Stages: rg.stages}
	return rg
}

// moduleMesh is the mesh the module is compiled for: its mesh attribute's dp and tp sizes
// (1 when absent) and the schedule's pipeline ranks.
func moduleMesh(m *ir.Module, ranks int) (Mesh, error) {
	mesh := Mesh{PP: ranks, DP: 1, CP: 1, TP: 1}
	for _, a := range m.Mesh() {
		switch a.Name {
		case "pp":
			if a.Size != ranks {
				return mesh, fmt.Errorf("the module's mesh has pp = %d, the schedule %d ranks", a.Size, ranks)
			}
		case "dp":
			mesh.DP = a.Size
		case "cp":
			mesh.CP = a.Size
		case "ep":
			mesh.EP = a.Size
		case "tp":
			mesh.TP = a.Size
		default:
			if a.Size > 1 {
				return mesh, fmt.Errorf("mesh axis %s = %d: code generation supports the pp, dp, cp and tp axes", a.Name, a.Size)
			}
		}
	}
	// Each size first: the product of absurd sizes could overflow.
	if mesh.DP > 1<<16 || mesh.CP > 1<<16 || mesh.TP > 1<<16 || mesh.DP*mesh.CP > 1<<16 || mesh.PP*mesh.DP*mesh.CP*mesh.TP > 1<<16 {
		return mesh, fmt.Errorf("mesh %s has more ranks than the limit %d", mesh, 1<<16)
	}
	return mesh, nil
}

// collectShardings records each parameter's sharding from the `shard` attributes of the
// per-stage functions' parameter arguments, which must agree. Only a partitioned module's
// shapes are per rank (ir.AttrPartitioned): elsewhere a shard attribute is a request for the
// partitioner, and every rank holds the whole tensor it declares — but for ZeRO-3's split
// over dp, whose type is the block's in any module (passes.ParamGather). A split over pp has
// no meaning (stages hold different parameters).
func (g *gen) collectShardings() error {
	g.shards = map[string]*ir.Sharding{}
	g.unpadded = map[string][]int{}
	g.zeroRows = map[string]int{}
	g.mainParams = map[string]bool{}
	g.gradDType = ir.F32
	if s := g.m.Attrs.Str(passes.AttrGradDType, ""); s != "" {
		dt, err := passes.ParsePrecision(s)
		if err != nil {
			return fmt.Errorf("module attribute %s: %v", passes.AttrGradDType, err)
		}
		g.gradDType = dt
	}
	for _, f := range g.m.Funcs {
		for i, a := range f.Args {
			if u := f.ArgAttrs[i].Ints(ir.AttrUnpadded); u != nil && f.ArgAttrs[i].Has(ir.AttrParam) {
				g.unpadded[a.Name] = u
			}
			if f.ArgAttrs[i].Has(ir.AttrParam) && f.ArgAttrs[i].Has(passes.AttrMainParam) {
				g.mainParams[a.Name] = true
			}
		}
	}
	partitioned := g.m.Attrs.Has(ir.AttrPartitioned)
	zero3 := g.zero3Params()
	seen := map[string]string{}
	for _, f := range g.m.Funcs {
		for i, a := range f.Args {
			if !f.ArgAttrs[i].Has(ir.AttrParam) {
				continue
			}
			s, err := ir.ArgSharding(f, i)
			if err != nil {
				return fmt.Errorf("@%s: parameter %%%s: %v", f.Name, a.Name, err)
			}
			// ZeRO-3's block over dp is a block in any module (passes.ParamGather); a split
			// over dp of any other parameter is refused (partitioned) or a request (not).
			zero := s != nil && s.Uses("dp") && zero3[a.Name]
			if s.Replicated() || !(partitioned || zero) {
				s = nil
			}
			if prev, ok := seen[a.Name]; ok {
				if !g.shards[a.Name].Equal(s) {
					return fmt.Errorf("parameter %q is sharded %s in @%s and %s in @%s", a.Name, g.shards[a.Name], prev, s, f.Name)
				}
				continue
			}
			seen[a.Name] = f.Name
			if s == nil {
				continue
			}
			if err := g.checkSharding(s, a.Type, zero); err != nil {
				return fmt.Errorf("@%s: parameter %%%s: %v", f.Name, a.Name, err)
			}
			g.shards[a.Name] = s
			if r := f.ArgAttrs[i].Int(ir.AttrZeroRows, 0); zero && r > 0 {
				g.zeroRows[a.Name] = r
			}
		}
	}
	return nil
}

// zero3Params returns the parameters ZeRO-3 holds as their dp blocks: @optimizer says
// zero = 3 and takes the block (the first of @optimizer's arguments by each name decides).
// One map for all parameters: asking @optimizer's arguments one parameter at a time was
// quadratic, seconds when planning GPT-3 175B's configurations.
func (g *gen) zero3Params() map[string]bool {
	opt := g.m.Func(passes.OptimizerFunc)
	if opt == nil || opt.Attrs.Int(passes.AttrZero, 0) != 3 {
		return nil
	}
	zero, seen := map[string]bool{}, map[string]bool{}
	for i, a := range opt.Args {
		if seen[a.Name] || !opt.ArgAttrs[i].Has(ir.AttrParam) {
			continue
		}
		seen[a.Name] = true
		s, _ := ir.ArgSharding(opt, i)
		zero[a.Name] = s != nil && s.Uses("dp")
	}
	return zero
}

// checkSharding checks a parameter or state sharding against the mesh: tp axes only, one
// entry per dim, no pending partial sum.
func (g *gen) checkSharding(s *ir.Sharding, t ir.Type, zero bool) error {
	if len(s.Partial) > 0 {
		return fmt.Errorf("shard %s: a parameter cannot be a partial sum", s)
	}
	if len(s.Dims) != t.Rank() {
		return fmt.Errorf("shard %s lists %d dims for %s", s, len(s.Dims), t)
	}
	for _, axes := range s.Dims {
		for _, a := range axes {
			switch a {
			case "tp":
			case "ep": // an expert parameter's shard (passes.EPPartition)
				if g.mesh.EP < 2 {
					return fmt.Errorf("shard %s splits it over ep, which the mesh does not have", s)
				}
			case "dp":
				if !zero {
					return fmt.Errorf("shard %s splits it over dp: only optimizer state (ZeRO, --zero) and ZeRO-3's parameters are split over the data-parallel replicas", s)
				}
			default:
				return fmt.Errorf("shard %s: %s is not a mesh axis a parameter can be split over (tp, ep)", s, a)
			}
		}
	}
	return nil
}

// shardProto is a sharding as the program records it (nil for a whole tensor).
func shardProto(s *ir.Sharding) []*pb.ShardDim {
	if s == nil {
		return nil
	}
	out := make([]*pb.ShardDim, len(s.Dims))
	for i, d := range s.Dims {
		out[i] = &pb.ShardDim{Axes: d}
	}
	return out
}

// logicalShape is the full tensor's shape of a local (per-rank) shape under s; zeroRows > 0
// is a padded ZeRO block's (ir.AttrZeroRows): dim 0 is those rows times its other axes.
func (g *gen) logicalShape(local []int, s *ir.Sharding, zeroRows int) []int {
	out := slices.Clone(local)
	if s == nil {
		return out
	}
	for i, axes := range s.Dims {
		if i == 0 && zeroRows > 0 {
			out[0] = zeroRows
			axes = slices.DeleteFunc(slices.Clone(axes), func(a string) bool { return a == "dp" })
		}
		for _, a := range axes {
			out[i] *= g.mesh.Size(a)
		}
	}
	return out
}

func (rg *rankGen) buffer(b *pb.Buffer) int {
	b.Id = int32(len(rg.prog.Buffers))
	rg.prog.Buffers = append(rg.prog.Buffers, b)
	return int(b.Id)
}

func tensorFields(t ir.Type) (pb.DType, []int64) {
	shape := make([]int64, len(t.Shape))
	for i, d := range t.Shape {
		shape[i] = int64(d)
	}
	return pb.DType(t.DType), shape
}

func (rg *rankGen) newBuffer(name string, t ir.Type, role pb.Role) int {
	dt, shape := tensorFields(t)
	id := rg.buffer(&pb.Buffer{Name: name, Dtype: dt, Shape: shape, Role: role})
	if rg.forward && (role == pb.Role_ACTIVATION || role == pb.Role_INPUT) {
		rg.fwd[id] = true
	}
	return id
}

func (rg *rankGen) instr(in *pb.Instr) {
	idx := len(rg.prog.Instrs)
	rg.prog.Instrs = append(rg.prog.Instrs, in)
	touch := func(id int32) {
		r := rg.prog.Buffers[id].Role
		if r != pb.Role_ACTIVATION && r != pb.Role_INPUT {
			return
		}
		if _, ok := rg.first[int(id)]; !ok {
			rg.first[int(id)] = idx
		}
		rg.last[int(id)] = idx
	}
	for _, id := range in.In {
		touch(id)
	}
	for _, id := range in.Out {
		touch(id)
	}
}

// emit builds the rank's instruction stream for one training step.
func (rg *rankGen) emit() error {
	g := rg.g
	training := g.funcs["optimizer"] != nil
	for _, op := range g.rankProgs[rg.rank].Ops {
		switch {
		case op.Name() == "grad_reduce_scatter" && op.Attrs.Has("microbatch"):
			for _, name := range op.Attrs.Strings("grads") {
				rg.perMB[name] = true
			}
		case op.Name() == "param_all_gather":
			for _, name := range op.Attrs.Strings("params") {
				rg.gathered[name] = true
			}
		}
	}
	// Gradient accumulators start each step at zero; they are created on first use, so zero
	// them once every action has been generated (the ZEROs go first in the stream).
	// The rank's program (passes.RankPrograms) says what runs in which order and where values
	// cross ranks: each op lowers to its instructions.
	prog := g.rankProgs[rg.rank]
	fwdUse := forwardUses(prog)
	for _, op := range prog.Ops {
		mb := op.Attrs.Int("microbatch", 0)
		switch op.Name() {
		case "recv":
			p := op.Attrs.Str(passes.AttrPort, "")
			// A value received for a forward run is one of its activations (the memory
			// report's category), as if the run had received it.
			rg.forward = fwdUse[op.Results[0]]
			buf := rg.newBuffer(fmt.Sprintf("%s#%d", p, mb), op.Results[0].Type, pb.Role_ACTIVATION)
			rg.forward = false
			rg.instr(&pb.Instr{Kind: pb.Instr_RECV, Out: []int32{int32(buf)}, Peer: int32(op.Attrs.Int("peer", 0)), Tag: int64(op.Attrs.Int("tag", 0)), Microbatch: int32(mb)})
			rg.ports[portKey{p, mb}] = buf
		case "run":
			name := op.Attrs.Str("func", "")
			f := g.funcs[name]
			if f == nil {
				return fmt.Errorf("@%s runs @%s, which the module does not have", prog.Name, name)
			}
			if mb < 0 || mb >= g.microbatches {
				return fmt.Errorf("@%s: run @%s: micro-batch %d out of range (%d micro-batches)", prog.Name, name, mb, g.microbatches)
			}
			stage := f.Attrs.Int("stage", 0)
			if g.sched.Placement[stage] != rg.rank {
				return fmt.Errorf("@%s runs @%s of stage %d, which is placed on pipeline rank %d", prog.Name, name, stage, g.sched.Placement[stage])
			}
			if len(rg.pending) > 0 {
				return fmt.Errorf("@%s: a gradient of the run before @%s is neither reduce-scattered nor accumulated", prog.Name, name)
			}
			rg.mb = mb
			rg.slice = 0
			if op.Attrs.Has("slice") {
				rg.slice = op.Attrs.Int("slice", 0) + 1
			}
			if err := rg.instance(f, g.blocks[name], stage, mb, f.Attrs.Str("kind", "")); err != nil {
				return fmt.Errorf("%d%s%d: %v", stage, f.Attrs.Str("kind", ""), mb, err)
			}
		case "send":
			p := op.Attrs.Str(passes.AttrPort, "")
			buf, ok := rg.ports[portKey{p, mb}]
			if !ok {
				return fmt.Errorf("@%s sends %q of micro-batch %d before this rank has it", prog.Name, p, mb)
			}
			rg.instr(&pb.Instr{Kind: pb.Instr_SEND, In: []int32{int32(buf)}, Peer: int32(op.Attrs.Int("peer", 0)), Tag: int64(op.Attrs.Int("tag", 0)), Microbatch: int32(mb)})
		case "grad_send":
			buf, err := rg.grad(prog, op, op.Attrs.Str("grad", ""))
			if err != nil {
				return err
			}
			rg.instr(&pb.Instr{Kind: pb.Instr_SEND, In: []int32{int32(buf)}, Peer: int32(op.Attrs.Int("peer", 0)), Tag: int64(op.Attrs.Int("tag", 0))})
		case "grad_recv":
			// A tied weight's partial from the rank that computed it, for grad_sum.
			name := op.Attrs.Str("grad", "")
			t := ir.Type(op.Attrs.Get("type").(ir.TypeAttr))
			buf := rg.newBuffer(name, t, pb.Role_ACTIVATION)
			rg.instr(&pb.Instr{Kind: pb.Instr_RECV, Out: []int32{int32(buf)}, Peer: int32(op.Attrs.Int("peer", 0)), Tag: int64(op.Attrs.Int("tag", 0))})
			rg.named["grad:"+name] = buf
		case "grad_sum":
			if err := rg.gradSum(prog, op); err != nil {
				return err
			}
		case "grad_all_reduce":
			if err := rg.gradAllReduce(prog, op); err != nil {
				return err
			}
		case "grad_reduce_scatter":
			if err := rg.gradReduceScatter(prog, op); err != nil {
				return err
			}
		case "param_all_gather":
			if err := rg.paramAllGather(prog, op); err != nil {
				return err
			}
		case "call", "optimizer":
			if err := rg.call(prog, op); err != nil {
				return err
			}
		case "all_reduce":
			if err := rg.allReduce(prog, op); err != nil {
				return err
			}
		default:
			return fmt.Errorf("@%s: %s is not an op of a rank program", prog.Name, op.Name())
		}
	}
	if training {
		// Zero gradient accumulators at the start of the step — except where the step's first
		// touch of one is an accumulation into it, which then writes it instead (0 + x is x,
		// in any order of the rest): a COPY, or a cast to the accumulator's dtype. With one
		// micro-batch that is every gradient: GPT-2 small's step had a ZERO and an ACCUM for
		// each of its 198 (6.2 ms of the H100's synchronised trace, run 8).
		first := rg.firstAccumulations()
		var zeros []*pb.Instr
		for _, b := range rg.prog.Buffers {
			if b.Role != pb.Role_GRAD {
				continue
			}
			if in := first[b.Id]; in != nil {
				if src := rg.prog.Buffers[in.In[0]]; src.Dtype == b.Dtype {
					in.Kind = pb.Instr_COPY
				} else {
					in.Kind, in.Kernel = pb.Instr_LAUNCH, int32(rg.castKernel(ir.DType(b.Dtype)))
				}
				continue
			}
			zeros = append(zeros, &pb.Instr{Kind: pb.Instr_ZERO, Out: []int32{b.Id}})
		}
		rg.prog.Instrs = append(zeros, rg.prog.Instrs...)
		for id := range rg.first {
			rg.first[id] += len(zeros)
			rg.last[id] += len(zeros)
		}
	}
	rg.aliasReshapes()
	rg.aliasConcats()
	rg.planMemory()
	rg.placeAliases()
	return nil
}

// castKernel is the kernel converting its operand to dtype dt.
func (rg *rankGen) castKernel(dt ir.DType) int {
	return rg.kernel(&lower.Kernel{Op: ir.MustLookup("cast"), Attrs: ir.Attrs{{Name: "to", Value: ir.Ident(dt.String())}}})
}

// firstAccumulations finds, for each gradient accumulator, the ACCUM that is the step's first
// instruction to touch it, if one is.
func (rg *rankGen) firstAccumulations() map[int32]*pb.Instr {
	seen := map[int32]bool{}
	first := map[int32]*pb.Instr{}
	for _, in := range rg.prog.Instrs {
		if in.Kind == pb.Instr_ACCUM && len(in.Out) == 1 && len(in.In) == 1 && in.In[0] != in.Out[0] {
			if g := in.Out[0]; !seen[g] && rg.prog.Buffers[g].Role == pb.Role_GRAD {
				first[g] = in
			}
		}
		for _, ids := range [][]int32{in.In, in.Out} {
			for _, id := range ids {
				seen[id] = true
			}
		}
	}
	return first
}

// instance emits one run of a per-stage function for micro-batch mb.
func (rg *rankGen) instance(f *ir.Func, b *lower.Block, stage, mb int, kind string) error {
	rg.forward, rg.kind = kind == passes.KindF, kind
	defer func() { rg.forward = false }()
	slotBuf := make([]int, len(b.Slots))
	for i := range slotBuf {
		slotBuf[i] = -1
	}
	for i := range f.Args {
		buf, err := rg.bindArg(f, i, mb)
		if err != nil {
			return err
		}
		slotBuf[b.Args[i]] = buf
	}
	rg.bindConsts(b, slotBuf)
	rg.instr(&pb.Instr{Kind: pb.Instr_BEGIN, Label: kind, Stage: int32(stage), Microbatch: int32(mb), TokenSlice: int32(rg.slice)})
	// A gradient is accumulated right after the launch that computes it, so that a W run
	// holds one of its weight gradients at a time, not all of them until it ends (the whole
	// stage's gradients in the compute dtype). The ones a grad_reduce_scatter takes wait for
	// it (pending, below).
	early := map[int][]int{} // slot → the gradient results it is
	for i := range f.Results {
		if at := f.ResultAttrs[i]; at.Has(ir.AttrGrad) && !at.Has(passes.AttrPort) && !at.Has(ir.AttrLoss) && !rg.perMB[passes.GradKey(at)] {
			early[b.Results[i]] = append(early[b.Results[i]], i)
		}
	}
	done := map[int]bool{}
	for k := range b.Launches {
		if err := rg.launches(f, b, b.Launches[k:k+1], slotBuf, stage, mb); err != nil {
			return err
		}
		for _, s := range b.Launches[k].Out {
			for _, i := range early[s] {
				rg.accumulate(passes.GradKey(f.ResultAttrs[i]), slotBuf[s], mb)
				done[i] = true
			}
		}
	}
	rg.instr(&pb.Instr{Kind: pb.Instr_END, Label: kind, Stage: int32(stage), Microbatch: int32(mb), TokenSlice: int32(rg.slice)})
	for i := range f.Results {
		at := f.ResultAttrs[i]
		if done[i] {
			continue
		}
		buf := slotBuf[b.Results[i]]
		switch {
		case at.Has(passes.AttrPort):
			// Sends are the rank program's (emit).
			rg.ports[portKey{at.Str(passes.AttrPort, ""), mb}] = buf
		case at.Has(ir.AttrMetric):
			// A model's metric: this micro-batch's count, summed by the runtime over the step.
			rg.instr(&pb.Instr{Kind: pb.Instr_METRIC, In: []int32{int32(buf)}, Label: at.Str(ir.AttrMetric, ""), Sum: true, Microbatch: int32(mb), Stage: int32(stage)})
		case at.Has(ir.AttrLoss):
			rg.instr(&pb.Instr{Kind: pb.Instr_LOSS, In: []int32{int32(buf)}, Microbatch: int32(mb)})
			if rg.g.funcs["optimizer"] == nil {
				// Inference of a model with a loss: the loss is its output.
				out := rg.newBuffer(at.Str(ir.AttrName, "loss"), b.Slots[b.Results[i]], pb.Role_OUTPUT)
				rg.prog.Buffers[out].Microbatch = int32(mb)
				rg.instr(&pb.Instr{Kind: pb.Instr_COPY, In: []int32{int32(buf)}, Out: []int32{int32(out)}, Microbatch: int32(mb)})
			}
		case at.Has(ir.AttrGrad):
			key := passes.GradKey(at)
			if rg.perMB[key] {
				rg.pending[key] = buf // reduce-scattered, then accumulated, by the op after the run
				continue
			}
			rg.accumulate(key, buf, mb)
		case at.Has(ir.AttrName):
			out := rg.newBuffer(at.Str(ir.AttrName, ""), b.Slots[b.Results[i]], pb.Role_OUTPUT)
			rg.prog.Buffers[out].Microbatch = int32(mb)
			rg.instr(&pb.Instr{Kind: pb.Instr_COPY, In: []int32{int32(buf)}, Out: []int32{int32(out)}, Microbatch: int32(mb)})
		}
	}
	return nil
}

// accumulate adds a gradient into the rank's accumulator of it, made on first use: fp32,
// fp64 for fp64 gradients (the rank program's run says so), 16-bit for 16-bit gradients
// when the optimizer accumulates them so (passes.AttrGradDType).
func (rg *rankGen) accumulate(key string, buf, mb int) {
	t := rg.typeOf(buf)
	acc := ir.Type{DType: ir.F32, Shape: t.Shape}
	if t.DType == ir.F64 || t.DType == rg.g.gradDType {
		acc.DType = t.DType
	}
	grad, ok := rg.named["grad:"+key]
	if !ok {
		grad = rg.newBuffer(key, acc, pb.Role_GRAD)
		rg.named["grad:"+key] = grad
	}
	rg.instr(&pb.Instr{Kind: pb.Instr_ACCUM, In: []int32{int32(buf)}, Out: []int32{int32(grad)}, Microbatch: int32(mb)})
}

// gradAllReduce lowers grad_all_reduce: one accumulator is summed in place; several are packed
// into one flat buffer, summed and unpacked (PyTorch DDP's bucket: the same additions in the
// same order as one all-reduce each).
func (rg *rankGen) gradAllReduce(prog *ir.Func, op *ir.Op) error {
	axis := op.Attrs.Str("axis", "")
	if rg.g.mesh.Size(axis) == 0 {
		return fmt.Errorf("@%s: grad_all_reduce over %q: not an axis of the mesh (pp, dp, ep, edp, cp, tp)", prog.Name, axis)
	}
	names := op.Attrs.Strings("grads")
	ids := make([]int32, len(names))
	var bytes int64
	var dt ir.DType
	for i, name := range names {
		buf, err := rg.grad(prog, op, name)
		if err != nil {
			return err
		}
		t := rg.typeOf(buf)
		if i == 0 {
			dt = t.DType
		} else if t.DType != dt {
			return fmt.Errorf("@%s: grad_all_reduce of %s and %s: a bucket holds one dtype", prog.Name, rg.typeOf(int(ids[0])), t)
		}
		ids[i] = int32(buf)
		bytes += t.Bytes()
	}
	// The instructions record the micro-batch of the run they follow, for traces; a stage is
	// the markers' (BEGIN, END).
	stage, mb := max(op.Stage, 0), int32(rg.mb)
	if len(ids) == 1 {
		rg.instr(&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: ids, Axis: axis, Microbatch: mb})
	} else {
		flat := rg.newBuffer(fmt.Sprintf("%s-bucket.s%d#%d", axis, stage, mb), ir.Type{DType: dt, Shape: ir.Shape{int(bytes / int64(dt.Size()))}}, pb.Role_ACTIVATION)
		rg.instr(&pb.Instr{Kind: pb.Instr_PACK, In: ids, Out: []int32{int32(flat)}, Microbatch: mb})
		rg.instr(&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{int32(flat)}, Axis: axis, Microbatch: mb})
		rg.instr(&pb.Instr{Kind: pb.Instr_UNPACK, In: []int32{int32(flat)}, Out: ids, Microbatch: mb})
	}
	t := rg.g.collectiveTime("all_reduce", bytes, axis)
	if axis == "dp" {
		rg.g.dpComm.reduce[stage] += t
	} else {
		rg.g.dpComm.tpReduce[stage] += t
	}
	return nil
}

// gradReduceScatter lowers grad_reduce_scatter, one bucket: without a micro-batch (ZeRO-1)
// the named accumulators are reduce-scattered and the gradients become this replica's blocks;
// with one (ZeRO-2) the values the run before it left pending are, and their blocks are added
// into the block accumulators.
func (rg *rankGen) gradReduceScatter(prog *ir.Func, op *ir.Op) error {
	axis, perMB := op.Attrs.Str("axis", ""), op.Attrs.Has("microbatch")
	mb := rg.mb
	if perMB {
		mb = op.Attrs.Int("microbatch", 0)
	}
	names := op.Attrs.Strings("grads")
	bufs := make([]int, len(names))
	for i, name := range names {
		if perMB {
			buf, ok := rg.pending[name]
			if !ok {
				return fmt.Errorf("@%s: grad_reduce_scatter of %q for micro-batch %d, which the run before it does not compute", prog.Name, name, mb)
			}
			delete(rg.pending, name)
			if t := rg.typeOf(buf); t.DType != rg.g.gradDType && (t.DType == ir.BF16 || t.DType == ir.F16) {
				// A 16-bit gradient accumulated in fp32 is reduced in fp32 too (Megatron's
				// --accumulate-allreduce-grads-in-fp32): widened first.
				wide := rg.newBuffer(name+".f32#"+fmt.Sprint(mb), ir.Type{DType: ir.F32, Shape: t.Shape}, pb.Role_ACTIVATION)
				rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: int32(rg.castKernel(ir.F32)), In: []int32{int32(buf)}, Out: []int32{int32(wide)}, Microbatch: int32(mb)})
				buf = wide
			}
			bufs[i] = buf
			continue
		}
		buf, err := rg.grad(prog, op, name)
		if err != nil {
			return err
		}
		bufs[i] = buf
	}
	blocks, bytes, err := rg.reduceScatter(axis, names, bufs, mb)
	if err != nil {
		return fmt.Errorf("@%s: grad_reduce_scatter: %v", prog.Name, err)
	}
	t := rg.g.collectiveTime("reduce_scatter", bytes, axis)
	stage := max(op.Stage, 0)
	if perMB {
		rg.g.dpComm.reduceMB[stage] += t
		for i, name := range names {
			rg.accumulate(name, blocks[i], mb)
		}
		return nil
	}
	rg.g.dpComm.opt[stage] += t
	for i, name := range names {
		rg.named["grad:"+name] = blocks[i]
	}
	return nil
}

// reduceScatter emits one reduce-scatter over axis of the tensors bufs (one dtype), leaving
// this rank its block of dim 0 of each, and returns the blocks and the bytes reduced. A lone
// tensor is reduce-scattered as it is. Several share one collective, which must give each
// member a contiguous run of its input: PACK lays the tensors' blocks out member by member
// (every tensor's block 0, then every tensor's block 1, …: Blocks = n), and the member's run
// is cut back into its blocks (UNPACK). The sums are those of one reduce-scatter per tensor,
// element for element. A tensor whose rows n does not divide has blocks of ceil(rows/n) rows
// (ZeRO's padding): it is packed even alone, PACK filling its last blocks with zeros.
func (rg *rankGen) reduceScatter(axis string, names []string, bufs []int, mb int) ([]int, int64, error) {
	n := rg.g.mesh.Size(axis)
	if n == 0 {
		return nil, 0, fmt.Errorf("%q is not an axis of the mesh (pp, dp, ep, edp, cp, tp)", axis)
	}
	var bytes int64
	padded := false
	blockTypes := make([]ir.Type, len(bufs))
	for i, buf := range bufs {
		t := rg.typeOf(buf)
		if t.Rank() == 0 || t.Shape[0] == 0 {
			return nil, 0, fmt.Errorf("%q (%s): no rows to split into %d blocks", names[i], t, n)
		}
		if t.DType != rg.typeOf(bufs[0]).DType {
			return nil, 0, fmt.Errorf("%s and %s: a bucket holds one dtype", rg.typeOf(bufs[0]), t)
		}
		blockTypes[i] = ir.Type{DType: t.DType, Shape: slices.Clone(t.Shape)}
		blockTypes[i].Shape[0] = passes.ZeroBlockRows(t.Shape[0], n)
		bytes += int64(n) * blockTypes[i].Bytes()
		padded = padded || t.Shape[0]%n != 0
	}
	blocks := make([]int, len(bufs))
	for i := range bufs {
		blocks[i] = rg.newBuffer(fmt.Sprintf("%s.block#%d", names[i], mb), blockTypes[i], pb.Role_ACTIVATION)
	}
	if len(bufs) == 1 && !padded {
		rg.instr(&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{int32(bufs[0])}, Out: []int32{int32(blocks[0])}, Axis: axis, ReduceOp: pb.Instr_SUM, Microbatch: int32(mb)})
		return blocks, bytes, nil
	}
	dt := blockTypes[0].DType
	elems := int(bytes / int64(dt.Size()))
	flat := rg.newBuffer(fmt.Sprintf("%s-bucket#%d", axis, mb), ir.Type{DType: dt, Shape: ir.Shape{elems}}, pb.Role_ACTIVATION)
	in := make([]int32, len(bufs))
	for i, buf := range bufs {
		in[i] = int32(buf)
	}
	if len(bufs) == 1 { // a lone padded tensor: its block is the member's run
		rg.instr(&pb.Instr{Kind: pb.Instr_PACK, In: in, Out: []int32{int32(flat)}, Blocks: int32(n), Microbatch: int32(mb)})
		rg.instr(&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{int32(flat)}, Out: []int32{int32(blocks[0])}, Axis: axis, ReduceOp: pb.Instr_SUM, Microbatch: int32(mb)})
		return blocks, bytes, nil
	}
	mine := rg.newBuffer(fmt.Sprintf("%s-bucket.block#%d", axis, mb), ir.Type{DType: dt, Shape: ir.Shape{elems / n}}, pb.Role_ACTIVATION)
	rg.instr(&pb.Instr{Kind: pb.Instr_PACK, In: in, Out: []int32{int32(flat)}, Blocks: int32(n), Microbatch: int32(mb)})
	rg.instr(&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{int32(flat)}, Out: []int32{int32(mine)}, Axis: axis, ReduceOp: pb.Instr_SUM, Microbatch: int32(mb)})
	ids := make([]int32, len(blocks))
	for i, b := range blocks {
		ids[i] = int32(b)
	}
	rg.instr(&pb.Instr{Kind: pb.Instr_UNPACK, In: []int32{int32(mine)}, Out: ids, Microbatch: int32(mb)})
	return blocks, bytes, nil
}

// paramAllGather lowers param_all_gather, one bucket: the new dp blocks the optimizer step
// left are all-gathered into the whole parameters. A lone block is gathered straight into its
// parameter; several are packed, gathered as one (member by member: every parameter's block
// of member 0, then of member 1, …), and UNPACK in n blocks puts each run in its place in its
// parameter — no copy of the bucket beyond the gathered one. A padded block (ZeRO: n does
// not divide the parameter's rows) is gathered, even alone, into a bucket whose UNPACK drops
// the padding.
func (rg *rankGen) paramAllGather(prog *ir.Func, op *ir.Op) error {
	axis := op.Attrs.Str("axis", "")
	n := rg.g.mesh.Size(axis)
	if n == 0 {
		return fmt.Errorf("@%s: param_all_gather over %q: not an axis of the mesh (pp, dp, ep, edp, cp, tp)", prog.Name, axis)
	}
	names := op.Attrs.Strings("params")
	blocks, params := make([]int32, len(names)), make([]int, len(names))
	var bytes int64
	padded := false
	for i, name := range names {
		blk, ok := rg.blocks[name]
		param, isParam := rg.named["param:"+name]
		switch {
		case !ok:
			return fmt.Errorf("@%s: param_all_gather of %q, whose new block no optimizer step before it computed", prog.Name, name)
		case !isParam:
			return fmt.Errorf("@%s: param_all_gather of %q, which is not a parameter here", prog.Name, name)
		}
		bt, pt := rg.typeOf(blk), rg.typeOf(param)
		if bt.DType != pt.DType || bt.Rank() != pt.Rank() || bt.Rank() == 0 || pt.Shape[0] == 0 || bt.Shape[0] != passes.ZeroBlockRows(pt.Shape[0], n) || !slices.Equal(bt.Shape[1:], pt.Shape[1:]) {
			return fmt.Errorf("@%s: param_all_gather of %q: %s is not a block over %s of %s", prog.Name, name, bt, axis, pt)
		}
		if bt.DType != rg.typeOf(int(blocks[0])).DType && i > 0 {
			return fmt.Errorf("@%s: param_all_gather of %s and %s: a bucket holds one dtype", prog.Name, rg.typeOf(int(blocks[0])), bt)
		}
		blocks[i], params[i] = int32(blk), param
		bytes += int64(n) * bt.Bytes()
		padded = padded || pt.Shape[0]%n != 0
	}
	rg.g.dpComm.opt[max(op.Stage, 0)] += rg.g.collectiveTime("all_gather", bytes, axis)
	if len(names) == 1 && !padded {
		rg.instr(&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: blocks, Out: []int32{int32(params[0])}, Axis: axis})
		return nil
	}
	dt := rg.typeOf(params[0]).DType
	elems := int(bytes / int64(dt.Size()))
	out := make([]int32, len(params))
	for i, p := range params {
		out[i] = int32(p)
	}
	if len(names) == 1 { // a lone padded block: gathered as it is
		all := rg.newBuffer(axis+"-gather", ir.Type{DType: dt, Shape: ir.Shape{elems}}, pb.Role_ACTIVATION)
		rg.instr(&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: blocks, Out: []int32{int32(all)}, Axis: axis})
		rg.instr(&pb.Instr{Kind: pb.Instr_UNPACK, In: []int32{int32(all)}, Out: out, Blocks: int32(n)})
		return nil
	}
	flat := rg.newBuffer(axis+"-gather.block", ir.Type{DType: dt, Shape: ir.Shape{elems / n}}, pb.Role_ACTIVATION)
	all := rg.newBuffer(axis+"-gather", ir.Type{DType: dt, Shape: ir.Shape{elems}}, pb.Role_ACTIVATION)
	rg.instr(&pb.Instr{Kind: pb.Instr_PACK, In: blocks, Out: []int32{int32(flat)}})
	rg.instr(&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{int32(flat)}, Out: []int32{int32(all)}, Axis: axis})
	rg.instr(&pb.Instr{Kind: pb.Instr_UNPACK, In: []int32{int32(all)}, Out: out, Blocks: int32(n)})
	return nil
}

// launches emits a block's kernel launches, giving each value it computes a fresh activation
// buffer (named after the IR value and the micro-batch). Collective ops become collective
// instructions (see collective).
func (rg *rankGen) launches(f *ir.Func, b *lower.Block, launches []lower.Launch, slotBuf []int, stage, mb int) error {
	for _, l := range launches {
		k := &b.Kernels[l.Kernel]
		for _, s := range l.In {
			if slotBuf[s] < 0 {
				return fmt.Errorf("@%s: value %d used before it is computed", f.Name, s)
			}
		}
		if k.Op != nil && k.Op.Has(ir.P2P) {
			return fmt.Errorf("@%s: %s: code generation derives send/recv from the data flow between stages; the IR must not contain them", f.Name, k.Op.Name)
		}
		if k.Op != nil && k.Op.Has(ir.Collective) {
			if err := rg.collective(f, b, k, l, slotBuf, stage, mb); err != nil {
				return fmt.Errorf("@%s: %v", f.Name, err)
			}
			continue
		}
		in := &pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: int32(rg.kernel(k)), Stage: int32(stage), Microbatch: int32(mb)}
		for _, s := range l.In {
			in.In = append(in.In, int32(slotBuf[s]))
		}
		for _, s := range l.Out {
			rg.result(f, b, slotBuf, s, mb)
			in.Out = append(in.Out, int32(slotBuf[s]))
		}
		rg.info.FLOPs += launchFLOPs(k, b, l)
		rg.instr(in)
	}
	return nil
}

// result gives slot s a fresh activation buffer unless it has one.
func (rg *rankGen) result(f *ir.Func, b *lower.Block, slotBuf []int, s, mb int) {
	if slotBuf[s] >= 0 {
		return
	}
	name := b.SlotNames[s]
	if name == "" {
		// Unnamed values are named after their function; a function written for one rank
		// (@optimizer.rank3) without the suffix that every buffer of the program would repeat.
		name = fmt.Sprintf("%s.%d", strings.TrimSuffix(f.Name, fmt.Sprintf(".rank%d", rg.rank)), s)
	}
	slotBuf[s] = rg.newBuffer(fmt.Sprintf("%s#%d", name, mb), b.Slots[s], pb.Role_ACTIVATION)
}

// collectiveKinds maps the IR's collective ops to instructions.
var collectiveKinds = map[string]pb.Instr_Kind{"all_reduce": pb.Instr_ALL_REDUCE, "all_gather": pb.Instr_ALL_GATHER,
	"reduce_scatter": pb.Instr_REDUCE_SCATTER, "collective_broadcast": pb.Instr_BROADCAST, "all_to_all": pb.Instr_ALL_TO_ALL}

var reduceOps = map[string]pb.Instr_ReduceOp{"sum": pb.Instr_SUM, "max": pb.Instr_MAX, "min": pb.Instr_MIN, "mean": pb.Instr_MEAN}

// collective lowers one collective op over a mesh axis. The instruction names the axis, not
// the ranks, so that every replica runs the same program: the loader makes the group of the
// ranks that share the executing rank's other coordinates. copy_to_axis is the identity in
// the forward pass (it exists for autodiff, whose all_reduce is explicit in the IR), and a
// collective over an axis of one rank is the identity too: both alias their result to their
// operand's buffer, which no instruction writes in place (collectives write fresh outputs),
// so the alias costs neither a copy nor memory. Collectives are never fused: lower.Func fuses
// only elementwise ops.
func (rg *rankGen) collective(f *ir.Func, b *lower.Block, k *lower.Kernel, l lower.Launch, slotBuf []int, stage, mb int) error {
	name := k.Op.Name
	axis := k.Attrs.Str("axis", "")
	if name == "axis_index" && len(l.In) == 0 && len(l.Out) == 1 && rg.g.mesh.Size(axis) > 0 && axis != "pp" {
		// The coordinate differs between the replicas that share this program: the loader
		// resolves it for each rank.
		rg.result(f, b, slotBuf, l.Out[0], mb)
		rg.instr(&pb.Instr{Kind: pb.Instr_AXIS_INDEX, Out: []int32{int32(slotBuf[l.Out[0]])}, Axis: axis, Stage: int32(stage), Microbatch: int32(mb)})
		return nil
	}
	if name == "ring_send" && len(l.In) == 1 && len(l.Out) == 0 {
		rg.instr(&pb.Instr{Kind: pb.Instr_SEND, In: []int32{int32(slotBuf[l.In[0]])}, Axis: axis, Peer: 1, Tag: ringTag + rg.ringSends,
			Stage: int32(stage), Microbatch: int32(mb)})
		rg.ringSends++
		return nil
	}
	if name == "ring_recv" && len(l.In) == 0 && len(l.Out) == 1 {
		rg.result(f, b, slotBuf, l.Out[0], mb)
		rg.instr(&pb.Instr{Kind: pb.Instr_RECV, Out: []int32{int32(slotBuf[l.Out[0]])}, Axis: axis, Peer: -1, Tag: ringTag + rg.ringRecvs,
			Stage: int32(stage), Microbatch: int32(mb)})
		rg.ringRecvs++
		return nil
	}
	if len(l.In) != 1 || len(l.Out) != 1 {
		return fmt.Errorf("%s with %d operands and %d results", name, len(l.In), len(l.Out))
	}
	if v := b.SlotNames[l.Out[0]]; v != "" {
		name = "%" + v + " = " + name // errors name the value, as the IR text does
	}
	n := rg.g.mesh.Size(axis)
	switch {
	case axis == "pp" && stage >= 0:
		// Outside the per-stage functions (stage −1: the optimizer's step, which every
		// pipeline rank runs) a reduction over pp is how all of them agree on one value.
		return fmt.Errorf("%s over pp: a stage's function runs on one pipeline rank; stages exchange values by send/recv, which code generation derives", name)
	case n == 0:
		return fmt.Errorf("%s over %q: not an axis of the mesh (pp, dp, ep, edp, cp, tp)", name, axis)
	}
	op := k.Op.Name
	kind, isColl := collectiveKinds[op]
	if op != "copy_to_axis" && !isColl {
		return fmt.Errorf("%s has no runtime instruction", name)
	}
	if parts := k.Attrs.Int("parts", n); (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") && parts != n {
		return fmt.Errorf("%s {parts = %d} over %s, which has %d ranks", name, parts, axis, n)
	}
	root := k.Attrs.Int("root", 0)
	if op == "collective_broadcast" && (root < 0 || root >= n) {
		return fmt.Errorf("%s {root = %d} over %s, which has ranks 0 … %d", name, root, axis, n-1)
	}
	in, out := l.In[0], l.Out[0]
	if op == "copy_to_axis" || n == 1 {
		if !b.Slots[in].Equal(b.Slots[out]) {
			return fmt.Errorf("%s over %s (%d rank) of %s gives %s", name, axis, n, b.Slots[in], b.Slots[out])
		}
		slotBuf[out] = slotBuf[in]
		return nil
	}
	red, ok := reduceOps[k.Attrs.Str("op", "sum")]
	if !ok {
		return fmt.Errorf("%s: unknown reduction %q", name, k.Attrs.Str("op", ""))
	}
	rg.result(f, b, slotBuf, out, mb)
	ins := &pb.Instr{Kind: kind, In: []int32{int32(slotBuf[in])}, Out: []int32{int32(slotBuf[out])}, Axis: axis,
		Stage: int32(stage), Microbatch: int32(mb)}
	switch kind {
	case pb.Instr_ALL_REDUCE:
		ins.ReduceOp = red
	case pb.Instr_REDUCE_SCATTER:
		ins.ReduceOp = pb.Instr_SUM
		ins.Dim = int32(k.Attrs.Int("dim", 0))
	case pb.Instr_ALL_GATHER:
		ins.Dim = int32(k.Attrs.Int("dim", 0))
	case pb.Instr_BROADCAST:
		ins.Root = int32(root)
	case pb.Instr_ALL_TO_ALL:
		ins.Dim, ins.ConcatDim = int32(k.Attrs.Int("split_dim", 0)), int32(k.Attrs.Int("concat_dim", 0))
	}
	if g := rg.g.dpComm.zero3; axis == "dp" && stage >= 0 && g != nil && (kind == pb.Instr_ALL_GATHER || kind == pb.Instr_REDUCE_SCATTER) {
		// ZeRO-3's gather of a parameter or reduce-scatter of a gradient (param-gather),
		// which the run waits for; priced on the whole tensor.
		if g[rg.kind] == nil {
			g[rg.kind] = map[int]float64{}
		}
		whole := max(b.Slots[in].Bytes(), b.Slots[out].Bytes())
		g[rg.kind][stage] += rg.g.collectiveTime(op, whole, axis)
	}
	rg.instr(ins)
	return nil
}

// bindArg returns the buffer feeding argument i of f for micro-batch mb, emitting an INPUT or
// RECV when the value is not yet on this rank.
func (rg *rankGen) bindArg(f *ir.Func, i, mb int) (int, error) {
	a, at := f.Args[i], f.ArgAttrs[i]
	switch {
	case at.Has(passes.AttrPort):
		// Computed on this rank earlier, or received by the rank program's recv.
		p := at.Str(passes.AttrPort, "")
		if buf, ok := rg.ports[portKey{p, mb}]; ok {
			return buf, nil
		}
		return 0, fmt.Errorf("@%s needs %q of micro-batch %d, which this rank neither computed nor received before", f.Name, p, mb)
	case at.Has(ir.AttrInput):
		k := portKey{a.Name, mb}
		if buf, ok := rg.inputs[k]; ok {
			return buf, nil
		}
		buf := rg.newBuffer(fmt.Sprintf("%s#%d", a.Name, mb), a.Type, pb.Role_INPUT)
		rg.instr(&pb.Instr{Kind: pb.Instr_INPUT, Out: []int32{int32(buf)}, Label: a.Name, Microbatch: int32(mb)})
		rg.inputs[k] = buf
		return buf, nil
	case at.Has(ir.AttrParam):
		return rg.param(a.Name, a.Type, at)
	case at.Has(ir.AttrGrad):
		name := at.Str(ir.AttrGrad, "")
		if buf, ok := rg.named["grad:"+name]; ok {
			return buf, nil
		}
		return 0, fmt.Errorf("@%s needs the gradient of %q, which no function on this rank computes", f.Name, name)
	case at.Has("state"):
		name := at.Str("state", "")
		if buf, ok := rg.named["state:"+name]; ok {
			return buf, nil
		}
		// Optimizer state is laid out as its parameter: the optimizer pass gives it the
		// parameter's shard attribute.
		s, err := ir.ArgSharding(f, i)
		if err != nil {
			return 0, fmt.Errorf("@%s: state %%%s: %v", f.Name, a.Name, err)
		}
		// ZeRO's state is a block over dp (its shape is the block's in any module).
		zero := s != nil && slices.ContainsFunc(s.Dims, func(d []string) bool { return slices.Contains(d, "dp") })
		if s.Replicated() || !(rg.g.m.Attrs.Has(ir.AttrPartitioned) || zero) {
			s = nil
		} else if err := rg.g.checkSharding(s, a.Type, zero); err != nil {
			return 0, fmt.Errorf("@%s: state %%%s: %v", f.Name, a.Name, err)
		}
		bufName := name
		if at.Has(passes.AttrMainParam) {
			// A 16-bit parameter's fp32 main copy is the tensor checkpoints hold: it is
			// named as the parameter (whose buffer is marked a copy of it).
			bufName = strings.TrimSuffix(name, "."+passes.AttrMainParam)
		}
		buf := rg.newBuffer(bufName, a.Type, pb.Role_STATE)
		if d, ok := at.Get(ir.AttrData).(*ir.Dense); ok && (s == nil || at.Has(passes.AttrMainParam)) {
			// State with an initial value: the loss scaler's scale, or an imported weight's
			// main copy (the whole tensor, each replica taking its block, as a parameter's).
			if d.Elided {
				return 0, fmt.Errorf("@%s: state %%%s: its data was elided; re-import the model", f.Name, a.Name)
			}
			rg.prog.Buffers[buf].Data = expand(d)
		} else {
			rg.prog.Buffers[buf].Init = at.Str(ir.AttrInit, "zeros")
		}
		rg.prog.Buffers[buf].Shard = shardProto(s)
		rg.prog.Buffers[buf].Unpadded = int64s(at.Ints(ir.AttrUnpadded))
		rg.prog.Buffers[buf].ZeroRows = int64(at.Int(ir.AttrZeroRows, 0))
		rg.named["state:"+name] = buf
		return buf, nil
	case at.Has("step"):
		if buf, ok := rg.named["step"]; ok {
			return buf, nil
		}
		buf := rg.newBuffer("step", a.Type, pb.Role_STEP)
		rg.named["step"] = buf
		return buf, nil
	}
	return 0, fmt.Errorf("@%s: argument %%%s has no input, param, port, grad, state or step attribute", f.Name, a.Name)
}

func (rg *rankGen) param(name string, t ir.Type, at ir.Attrs) (int, error) {
	if buf, ok := rg.named["param:"+name]; ok {
		if !rg.typeOf(buf).Equal(t) {
			return 0, fmt.Errorf("parameter %q used with types %s and %s", name, rg.typeOf(buf), t)
		}
		return buf, nil
	}
	buf := rg.newBuffer(name, t, pb.Role_PARAM)
	b := rg.prog.Buffers[buf]
	b.Shard = shardProto(rg.g.shards[name])
	b.Unpadded = int64s(rg.g.unpadded[name])
	b.ZeroRows = int64(rg.g.zeroRows[name])
	b.Copy = rg.g.mainParams[name]
	if d, ok := at.Get(ir.AttrData).(*ir.Dense); ok {
		if d.Elided {
			return 0, fmt.Errorf("parameter %q: its data was elided; re-import the model", name)
		}
		if d.Type.DType != t.DType {
			// A 16-bit parameter of imported f32 weights (its main copy's data) starts
			// from them rounded, as the optimizer's cast rounds.
			vals := d.Floats()
			if d.Splat {
				d = ir.Splat(ir.Type{DType: t.DType, Shape: d.Type.Shape}, vals[0])
			} else {
				d = ir.NewDenseF64(ir.Type{DType: t.DType, Shape: d.Type.Shape}, vals)
			}
		}
		b.Data = expand(d)
	} else {
		b.Init = at.Str(ir.AttrInit, "zeros")
	}
	rg.named["param:"+name] = buf
	return buf, nil
}

// int64s is a shape as the program records it (nil for nil).
func int64s(v []int) []int64 {
	if v == nil {
		return nil
	}
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

func expand(d *ir.Dense) []byte {
	if !d.Splat {
		return d.Data
	}
	n := d.Type.NumElements()
	out := make([]byte, 0, len(d.Data)*n)
	for i := 0; i < n; i++ {
		out = append(out, d.Data...)
	}
	return out
}

func (rg *rankGen) typeOf(buf int) ir.Type {
	b := rg.prog.Buffers[buf]
	shape := make(ir.Shape, len(b.Shape))
	for i, d := range b.Shape {
		shape[i] = int(d)
	}
	return ir.Type{DType: ir.DType(b.Dtype), Shape: shape}
}

func (rg *rankGen) constBuffer(d *ir.Dense) int {
	if buf, ok := rg.consts[d]; ok {
		return buf
	}
	buf := rg.newBuffer("const", d.Type, pb.Role_CONST)
	rg.prog.Buffers[buf].Data = d.Data
	rg.prog.Buffers[buf].Splat = d.Splat
	rg.consts[d] = buf
	return buf
}

func (rg *rankGen) kernel(k *lower.Kernel) int {
	key := kernelKey(k)
	if i, ok := rg.kernels[key]; ok {
		return i
	}
	rg.kernels[key] = len(rg.prog.Kernels)
	rg.prog.Kernels = append(rg.prog.Kernels, kernelProto(k))
	return len(rg.prog.Kernels) - 1
}

// kernelProto is a kernel in the program format.
func kernelProto(k *lower.Kernel) *pb.Kernel {
	pk := &pb.Kernel{Op: "fused"}
	if k.Pre != nil {
		pk.Pre, pk.PreInputs = kernelProto(k.Pre), int32(k.PreInputs)
	}
	if k.Op != nil {
		pk.Op = k.Op.Name
		pk.Attrs = attrsToProto(k.Attrs)
		pk.OpInputs = int32(k.OpInputs)
	}
	if len(k.Fused) > 0 {
		for _, st := range k.Fused {
			dt, shape := tensorFields(st.Type)
			args := make([]int32, len(st.Args))
			for i, a := range st.Args {
				args[i] = int32(a)
			}
			pk.Fused = append(pk.Fused, &pb.FusedStep{Op: st.Op.Name, Args: args, Attrs: attrsToProto(st.Attrs),
				Type: &pb.TensorType{Dtype: dt, Shape: shape}})
		}
		for _, o := range k.Outputs {
			pk.Outputs = append(pk.Outputs, int32(o))
		}
	}
	return pk
}

func kernelKey(k *lower.Kernel) string {
	var b strings.Builder
	if k.Pre != nil {
		fmt.Fprintf(&b, "(%s)%d>", kernelKey(k.Pre), k.PreInputs)
	}
	if k.Op != nil {
		b.WriteString(k.Op.Name)
		b.WriteString(ir.AttrString(ir.Dict(k.Attrs)))
		if len(k.Fused) == 0 {
			return b.String()
		}
		fmt.Fprintf(&b, "+%d:", k.OpInputs)
	}
	for _, st := range k.Fused {
		fmt.Fprintf(&b, "%s%v%s%s;", st.Op.Name, st.Args, ir.AttrString(ir.Dict(st.Attrs)), st.Type)
	}
	fmt.Fprintf(&b, "%v", k.Outputs)
	return b.String()
}

// grad is the buffer of the gradient accumulator (or received partial) a rank-program op names.
func (rg *rankGen) grad(prog *ir.Func, op *ir.Op, name string) (int, error) {
	buf, ok := rg.named["grad:"+name]
	if !ok {
		return 0, fmt.Errorf("@%s: %s: no gradient %q on this rank before it", prog.Name, op.Name(), name)
	}
	return buf, nil
}

// gradSum lowers grad_sum: the first part's accumulator becomes the gradient (renamed), and
// the others are added to it in order — the same additions as on one device. (A new buffer
// holding a copy of the first part was a third full-size gradient of a tied embedding: 147
// MiB of GPT-2's 496 MiB of gradients.)
func (rg *rankGen) gradSum(prog *ir.Func, op *ir.Op) error {
	parts := op.Attrs.Strings("parts")
	bufs := make([]int, len(parts))
	for i, p := range parts {
		buf, err := rg.grad(prog, op, p)
		if err != nil {
			return err
		}
		if i > 0 && !rg.typeOf(buf).Equal(rg.typeOf(bufs[0])) {
			return fmt.Errorf("@%s: grad_sum: part %q is %s, part %q %s", prog.Name, p, rg.typeOf(buf), parts[0], rg.typeOf(bufs[0]))
		}
		bufs[i] = buf
	}
	name := op.Attrs.Str("grad", "")
	final := bufs[0]
	delete(rg.named, "grad:"+parts[0])
	rg.named["grad:"+name] = final
	rg.prog.Buffers[final].Name = name
	for _, b := range bufs[1:] {
		rg.instr(&pb.Instr{Kind: pb.Instr_ACCUM, In: []int32{int32(b)}, Out: []int32{int32(final)}})
	}
	return nil
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// block is the lowered form of a function a rank program calls, lowered on first use.
func (g *gen) block(name string) (*ir.Func, *lower.Block, error) {
	f := g.funcs[name]
	if f == nil {
		return nil, nil, fmt.Errorf("no function @%s", name)
	}
	if b := g.blocks[name]; b != nil {
		return f, b, nil
	}
	b, err := lower.Func(f)
	if err != nil {
		return nil, nil, err
	}
	g.blocks[name] = b
	return f, b, nil
}

// call lowers a rank program's call or optimizer op: the function's launches once, its port
// arguments the op's operands and its other arguments the rank's state they name. An
// optimizer step is marked OPT; its metrics are reported (METRIC) before its updates are
// written back, each after every launch so that no update is read as an old value.
func (rg *rankGen) call(prog *ir.Func, op *ir.Op) error {
	name := op.Attrs.Str("func", "")
	f, b, err := rg.g.block(name)
	if err != nil {
		return fmt.Errorf("@%s: %s: %v", prog.Name, op.Name(), err)
	}
	step := op.Name() == "optimizer"
	slotBuf := make([]int, len(b.Slots))
	for i := range slotBuf {
		slotBuf[i] = -1
	}
	k := 0
	for i := range f.Args {
		if f.ArgAttrs[i].Has(passes.AttrPort) {
			if k >= len(op.Operands) {
				return fmt.Errorf("@%s: %s @%s: too few operands", prog.Name, op.Name(), name)
			}
			buf, ok := rg.values[op.Operands[k]]
			if !ok {
				return fmt.Errorf("@%s: %s @%s: operand %d has no value here", prog.Name, op.Name(), name, k)
			}
			slotBuf[b.Args[i]] = buf
			k++
			continue
		}
		buf, err := rg.bindArg(f, i, 0)
		if err != nil {
			return err
		}
		slotBuf[b.Args[i]] = buf
	}
	rg.bindConsts(b, slotBuf)
	if !step {
		if err := rg.launches(f, b, b.Launches, slotBuf, -1, 0); err != nil {
			return err
		}
		j := 0
		for i := range f.Results {
			if f.ResultAttrs[i].Has(passes.AttrPort) && j < len(op.Results) {
				rg.values[op.Results[j]] = slotBuf[b.Results[i]]
				j++
			}
		}
		return nil
	}
	// Each update is copied into its parameter or state as soon as the launch computing it
	// has run and no later launch reads the old value (so none reads an update as the old
	// value), rather than all after the last launch: the new values of one tensor then
	// occupy the arena only while its own launches run, not every tensor's at once (three
	// times the rank's parameters for AdamW). Metrics are read before the updates are
	// written back — the loss scale reported is the one this step used — so an update whose
	// target a metric reads is copied at the end.
	type copyOp struct{ from, to int }
	after := make([][]copyOp, len(b.Launches)+1) // copies after launch k (the last entry: at the end)
	metricBufs := map[int]bool{}
	for i := range f.Results {
		if f.ResultAttrs[i].Has(passes.AttrMetric) {
			metricBufs[slotBuf[b.Results[i]]] = true
		}
	}
	producer := map[int]int{} // slot → the launch writing it
	lastRead := map[int]int{} // buffer bound before the launches → the last launch reading it
	for k, l := range b.Launches {
		for _, s := range l.Out {
			producer[s] = k
		}
		for _, s := range l.In {
			if slotBuf[s] >= 0 {
				lastRead[slotBuf[s]] = k
			}
		}
	}
	for i := range f.Results {
		if f.ResultAttrs[i].Has(passes.AttrMetric) {
			continue
		}
		target := f.ResultAttrs[i].Str(passes.AttrUpdate, "")
		if rg.gathered[target] {
			continue // its dp block, for param_all_gather (below)
		}
		dst, ok := rg.named["param:"+target]
		if !ok {
			dst, ok = rg.named["state:"+target]
		}
		if !ok {
			return fmt.Errorf("@%s updates %q, which is neither a parameter nor a state here", f.Name, target)
		}
		s := b.Results[i]
		at := len(b.Launches)
		if p, made := producer[s]; made && !metricBufs[dst] {
			at = p
			r, read := lastRead[dst]
			if read {
				at = max(at, r)
			}
			// In place: an elementwise launch writing the update, run after every other
			// reader of the old value, writes the parameter or state itself — each element
			// of every input is read (at its own index: the result has its shape) before any
			// result's is written, on every device — so the update needs neither a copy nor
			// a buffer. AdamW's step is then one launch a parameter (lower fuses the new
			// moments, the parameter and its 16-bit copy), not eight.
			if (!read || r <= p) && slotBuf[s] < 0 && rg.inPlace(b, b.Launches[p], s, dst) {
				slotBuf[s] = dst
				continue
			}
		}
		after[at] = append(after[at], copyOp{s, dst})
	}
	rg.instr(&pb.Instr{Kind: pb.Instr_BEGIN, Label: "OPT", Stage: -1})
	for k := range b.Launches {
		if err := rg.launches(f, b, b.Launches[k:k+1], slotBuf, -1, 0); err != nil {
			return err
		}
		for _, c := range after[k] {
			rg.instr(&pb.Instr{Kind: pb.Instr_COPY, In: []int32{int32(slotBuf[c.from])}, Out: []int32{int32(c.to)}})
		}
	}
	for i := range f.Results {
		if name := f.ResultAttrs[i].Str(passes.AttrMetric, ""); name != "" {
			rg.instr(&pb.Instr{Kind: pb.Instr_METRIC, In: []int32{int32(slotBuf[b.Results[i]])}, Label: name, Stage: -1})
		}
	}
	for _, c := range after[len(b.Launches)] {
		rg.instr(&pb.Instr{Kind: pb.Instr_COPY, In: []int32{int32(slotBuf[c.from])}, Out: []int32{int32(c.to)}})
	}
	for i := range f.Results {
		if target := f.ResultAttrs[i].Str(passes.AttrUpdate, ""); !f.ResultAttrs[i].Has(passes.AttrMetric) && rg.gathered[target] {
			rg.blocks[target] = slotBuf[b.Results[i]]
		}
	}
	rg.instr(&pb.Instr{Kind: pb.Instr_END, Label: "OPT", Stage: -1})
	return nil
}

// inPlace says whether launch l may write its result slot s straight into buffer dst: an
// elementwise kernel (an op with the trait, or a fused chain), one result, of dst's type.
func (rg *rankGen) inPlace(b *lower.Block, l lower.Launch, s, dst int) bool {
	k := &b.Kernels[l.Kernel]
	elementwise := k.Op == nil && len(k.Fused) > 0 || k.Op != nil && k.Op.Has(ir.Elementwise)
	return elementwise && slices.Contains(l.Out, s) && b.Slots[s].Equal(rg.typeOf(dst))
}

// allReduce lowers a rank program's all_reduce of a value (the optimizer's found_inf and
// grad_sumsq) into a fresh buffer; over an axis of one rank the value is its own sum.
func (rg *rankGen) allReduce(prog *ir.Func, op *ir.Op) error {
	in, ok := rg.values[op.Operands[0]]
	if !ok {
		return fmt.Errorf("@%s: all_reduce of a value this rank does not have", prog.Name)
	}
	axis := op.Attrs.Str("axis", "")
	n := rg.g.mesh.Size(axis)
	red, ok := reduceOps[op.Attrs.Str("op", "sum")]
	switch {
	case n == 0:
		return fmt.Errorf("@%s: all_reduce over %q: not an axis of the mesh (pp, dp, ep, edp, cp, tp)", prog.Name, axis)
	case !ok:
		return fmt.Errorf("@%s: all_reduce: unknown reduction %q", prog.Name, op.Attrs.Str("op", ""))
	case n == 1:
		rg.values[op.Results[0]] = in
		return nil
	}
	name := op.Results[0].Name
	if name == "" {
		name = "all_reduce"
	}
	out := rg.newBuffer(name+"#0", op.Results[0].Type, pb.Role_ACTIVATION)
	rg.instr(&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{int32(in)}, Out: []int32{int32(out)}, Axis: axis, ReduceOp: red, Stage: -1})
	rg.values[op.Results[0]] = out
	return nil
}

// bindConsts gives a block's constants their buffers, in slot order.
func (rg *rankGen) bindConsts(b *lower.Block, slotBuf []int) {
	for _, slot := range slices.Sorted(maps.Keys(b.Consts)) {
		slotBuf[slot] = rg.constBuffer(b.Consts[slot])
	}
}

func (rg *rankGen) planMemory() {
	var ids []int
	for id := range rg.first {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	iv := make([]lower.Interval, len(ids))
	var fwd []lower.Interval
	for i, id := range ids {
		iv[i] = lower.Interval{Start: rg.first[id], End: rg.last[id], Size: rg.typeOf(id).Bytes()}
		if rg.fwd[id] {
			fwd = append(fwd, iv[i])
		}
	}
	offsets, arena, live := lower.PlanMemory(iv)
	rg.info.LiveBytes = live
	for i, id := range ids {
		rg.prog.Buffers[id].Offset = offsets[i]
	}
	rg.prog.ArenaBytes = arena
	rg.info.ArenaBytes = arena
	// The arena holds forward activations, at most PeakLive of them at once, and the rest.
	rg.info.ActivationBytes = lower.PeakLive(fwd)
	rg.info.WorkspaceBytes = arena - rg.info.ActivationBytes
	rg.info.Instructions = len(rg.prog.Instrs)
	for _, b := range rg.prog.Buffers {
		n := rg.typeOf(int(b.Id)).Bytes()
		switch b.Role {
		case pb.Role_PARAM:
			rg.info.ParamBytes += n
		case pb.Role_GRAD:
			rg.info.GradBytes += n
		case pb.Role_STATE:
			rg.info.StateBytes += n
		case pb.Role_CONST:
			rg.info.ConstBytes += n
		}
	}
	rg.info.PeakBytes = arena + rg.info.ParamBytes + rg.info.GradBytes + rg.info.StateBytes + rg.info.ConstBytes
}

// launchFLOPs counts the multiply-add FLOPs of matmuls and convolutions (2 per MAC).
func launchFLOPs(k *lower.Kernel, b *lower.Block, l lower.Launch) int64 {
	if k.Op == nil || len(l.In) < 2 {
		return 0
	}
	if k.Op.Name == "conv_grad_filter" {
		// One MAC per (output element of the forward conv, filter element per output channel).
		dy := b.Slots[l.In[1]]
		w := b.Slots[l.Out[0]].Shape
		per := int64(1)
		for _, d := range w[1:] {
			per *= int64(d)
		}
		return 2 * int64(dy.NumElements()) * per
	}
	if k.Op.Name == "conv" || k.Op.Name == "conv_transpose" {
		w := b.Slots[l.In[max(1, k.PreInputs)]].Shape // after a prologue's inputs
		per := int64(1)
		for _, d := range w[1:] {
			per *= int64(d)
		}
		if k.Op.Name == "conv_transpose" {
			// Each input element spreads over the kernel window of every output channel group.
			return 2 * int64(b.Slots[l.In[0]].NumElements()) * per
		}
		return 2 * int64(b.Slots[l.Out[0]].NumElements()) * per
	}
	if k.Op.Name == "attention" || k.Op.Name == "attention_grad" {
		// Counted as the decomposed chain's matmuls: q·kᵀ and p·v forward (2·rows·Skv·(D+Dv)),
		// twice that backward; the backward's recomputation of the scores is not model work.
		q, kk, v := b.Slots[l.In[0]], b.Slots[l.In[1]], b.Slots[l.In[2]]
		dims, err := ir.AttentionShape(q, kk, v, nil)
		if err != nil {
			return 0
		}
		f := 2 * int64(dims.Batch*dims.Hq*dims.Sq) * int64(dims.Skv) * int64(dims.D+dims.Dv)
		if k.Op.Name == "attention_grad" {
			f *= 2
		}
		return f
	}
	if k.Op.Name != "matmul" {
		return 0
	}
	a := b.Slots[l.In[0]].Shape
	out := b.Slots[l.Out[0]]
	kdim := 1
	if len(a) > 0 {
		kdim = a[len(a)-1]
		if k.Attrs.Bool("transpose_a", false) && len(a) >= 2 {
			kdim = a[len(a)-2]
		}
	}
	return 2 * int64(out.NumElements()) * int64(kdim)
}

// describe fills the plan's input and parameter tables.
func (g *gen) describe(p *Plan, progs []*pb.Program) {
	seenIn := map[string]bool{}
	holders, users := map[string][]int{}, map[string][]int{}
	var order []string
	params := map[string]Param{}
	for _, f := range g.m.Funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue // only the per-stage functions read inputs and use parameters
		}
		for i, a := range f.Args {
			at := f.ArgAttrs[i]
			switch {
			case at.Has(ir.AttrInput) && !seenIn[a.Name]:
				seenIn[a.Name] = true
				p.Inputs = append(p.Inputs, Input{Name: a.Name, ModelName: at.Str(ir.AttrName, ""), DType: a.Type.DType.String(), MicrobatchShape: a.Type.Shape,
					Range: at.Ints("range"), Label: at.Has(ir.AttrLabel), ShiftOf: at.Str("shift_of", "")})
			case at.Has(ir.AttrParam):
				if _, ok := params[a.Name]; !ok {
					order = append(order, a.Name)
					sh := g.shards[a.Name]
					pr := Param{Name: a.Name, DType: a.Type.DType.String(), Shape: g.logicalShape(a.Type.Shape, sh, g.zeroRows[a.Name]), Init: at.Str(ir.AttrInit, ""), Expert: at.Has(passes.AttrExpert)}
					if u := g.unpadded[a.Name]; u != nil {
						pr.Shape, pr.Padded = u, pr.Shape // checkpoints hold the tensor the user sees
					}
					if sh != nil {
						pr.Shard = sh.Dims
					}
					if g.mainParams[a.Name] {
						pr.MainDType = ir.F32.String()
					}
					params[a.Name] = pr
				}
				r := g.rankOfFunc(f.Name)
				if !contains(holders[a.Name], r) {
					holders[a.Name] = append(holders[a.Name], r)
				}
				if st := f.Attrs.Int("stage", 0); !contains(users[a.Name], st) {
					users[a.Name] = append(users[a.Name], st)
				}
			}
		}
	}
	for _, prog := range progs {
		for _, b := range prog.Buffers {
			if b.Role == pb.Role_STATE {
				for _, name := range order {
					if strings.HasPrefix(b.Name, name+".") {
						pr := params[name]
						pr.State = append(pr.State, strings.TrimPrefix(b.Name, name+"."))
						params[name] = pr
					}
				}
			}
			if b.Role == pb.Role_OUTPUT && b.Microbatch == 0 {
				p.Outputs = append(p.Outputs, b.Name)
			}
		}
	}
	for _, name := range order {
		pr := params[name]
		pr.Ranks, pr.Stages = holders[name], users[name]
		sort.Ints(pr.Ranks)
		sort.Ints(pr.Stages)
		sort.Strings(pr.State)
		pr.State = dedup(pr.State)
		p.Params = append(p.Params, pr)
	}
}

func dedup(s []string) []string {
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// stageInfo summarises each stage from the partition pass's estimates, the parameters the
// per-stage functions use and their ports.
func (g *gen) stageInfo(params []Param) []StageInfo {
	info := make([]StageInfo, g.stages)
	for s := range info {
		info[s] = StageInfo{Stage: s, Rank: g.sched.Placement[s]}
	}
	// A parameter counts once on each rank that holds it, in the first of its stages there:
	// a weight tied across two ranks (GPT's embedding and output head) is held, and counted,
	// twice; across two stages of one rank (a V-shaped placement), once.
	// A tensor-parallel rank holds 1/(product of its axes' sizes) of a sharded parameter.
	for _, p := range params {
		n, local := int64(1), int64(1)
		for i, d := range p.Shape {
			n *= int64(d)
			f := 1
			if i < len(p.Shard) {
				for _, a := range p.Shard[i] {
					f *= max(g.mesh.Size(a), 1)
				}
			}
			local *= int64(d / f)
		}
		counted := map[int]bool{}
		for _, st := range p.Stages {
			if st < len(info) && !counted[info[st].Rank] {
				counted[info[st].Rank] = true
				info[st].Params += n
				info[st].RankParams += local
				if p.Expert {
					info[st].ExpertParams += n
				}
			}
		}
	}
	if part, ok := g.m.Attrs.Get("partition").(ir.Dict); ok {
		if list, ok := ir.Attrs(part).Get("stages").(ir.List); ok {
			for s, e := range list {
				d, ok := e.(ir.Dict)
				if !ok || s >= len(info) {
					continue
				}
				at := ir.Attrs(d)
				info[s].Layers = at.Str("layers", "")
				info[s].FLOPs = at.Float("flops", 0)
				info[s].F, info[s].I, info[s].W = at.Float("f", 0), at.Float("i", 0), at.Float("w", 0)
				info[s].FComm, info[s].IComm, info[s].WComm = at.Float("f_comm", 0), at.Float("i_comm", 0), at.Float("w_comm", 0)
				info[s].FAllToAll, info[s].IAllToAll = at.Float("f_all_to_all", 0), at.Float("i_all_to_all", 0)
			}
		}
	}
	// Data parallelism: the rank programs' collectives, by the stage each is charged to (ZeRO's
	// around the optimizer: the first stage on the rank using the bucket's parameters).
	for s := range info {
		info[s].DPReduce = g.dpComm.reduce[s]
		info[s].TPReduce = g.dpComm.tpReduce[s]
		info[s].DPReduceMB = g.dpComm.reduceMB[s] / float64(max(g.microbatches, 1))
	}
	for st, t := range g.dpComm.opt {
		if st < len(info) {
			info[st].OptimizerComm += t
		}
	}
	// Ports: a value consumed by a stage's I or W is stashed by that stage; one produced by a
	// stage's F and consumed by a later stage's F is sent forward.
	types := map[string]ir.Type{}
	for _, f := range g.funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue
		}
		for i, r := range f.Results {
			if p := f.ResultAttrs[i].Str(passes.AttrPort, ""); p != "" {
				types[p] = r.Type
			}
		}
	}
	if tp, ok := passes.ReadTokenPlan(g.m); ok {
		// Token slices: the cost model's figures per slice, summed per micro-batch.
		for s := range info {
			if s >= len(tp.SliceTimes) {
				break
			}
			info[s].F, info[s].I, info[s].W = 0, 0, 0
			for _, t := range tp.SliceTimes[s] {
				info[s].Slices = append(info[s].Slices, SliceInfo{F: t.F, I: t.I, W: t.W})
				info[s].F, info[s].I, info[s].W = info[s].F+t.F, info[s].I+t.I, info[s].W+t.W
			}
		}
	}
	// ZeRO-3: the collectives in the runs, per micro-batch (each token slice's run gathers
	// its parameters whole), which F, I and W wait for, as for their tp collectives (the
	// prefetch's overlap with compute is not credited: an upper bound).
	for s := range info {
		m := float64(max(g.microbatches, 1))
		gf, gi, gw := g.dpComm.zero3[passes.KindF][s]/m, g.dpComm.zero3[passes.KindI][s]/m, g.dpComm.zero3[passes.KindW][s]/m
		info[s].F, info[s].I, info[s].W = info[s].F+gf, info[s].I+gi, info[s].W+gw
		info[s].FComm, info[s].IComm, info[s].WComm = info[s].FComm+gf, info[s].IComm+gi, info[s].WComm+gw
		if n := float64(len(info[s].Slices)); n > 0 {
			for j := range info[s].Slices {
				sl := &info[s].Slices[j]
				sl.F, sl.I, sl.W = sl.F+gf/n, sl.I+gi/n, sl.W+gw/n
			}
		}
	}
	if sc, err := passes.SplitCosts(g.m, g.dev); err == nil {
		// The recomputation --recompute adds to each stage's backward; a token slice's
		// backward rebuilds its own tokens' share of it (as the planner prices it).
		tp, _ := passes.ReadTokenPlan(g.m)
		T := 0
		for _, l := range tp.Lengths {
			T += l
		}
		for s := range info {
			if s < len(sc) {
				info[s].Recompute = sc[s].Recompute
				info[s].I += sc[s].Recompute
				for j := range info[s].Slices {
					if j < len(tp.Lengths) && T > 0 {
						info[s].Slices[j].I += sc[s].Recompute * float64(tp.Lengths[j]) / float64(T)
					}
				}
			}
		}
	}
	for p, consumers := range g.ports.Consumers {
		prod := g.funcs[g.ports.Producer[p]]
		ps := prod.Attrs.Int("stage", 0)
		pj := prod.Attrs.Int("slice", -1)
		stashed, sent, kv := map[int]bool{}, false, false
		for _, c := range consumers {
			cf := g.funcs[c]
			cs := cf.Attrs.Int("stage", 0)
			kind := cf.Attrs.Str("kind", "")
			if kind == passes.KindF && cs == ps && cf.Attrs.Int("slice", -1) != pj {
				kv = true // a later slice's forward reads it: the K/V cache
			}
			if kind != passes.KindF && prod.Attrs.Str("kind", "") == passes.KindF {
				stashed[cs] = true
			}
			if kind == passes.KindF && cs != ps {
				sent = true
			}
		}
		for s := range stashed {
			if s < len(info) {
				info[s].StashBytes += types[p].Bytes()
				if kv {
					info[s].KVBytes += types[p].Bytes()
				}
				if pj >= 0 && pj < len(info[s].Slices) {
					info[s].Slices[pj].StashBytes += types[p].Bytes()
				}
			}
		}
		if sent && ps < len(info) {
			info[ps].SendBytes += types[p].Bytes()
			if pj >= 0 && pj < len(info[ps].Slices) {
				info[ps].Slices[pj].SendBytes += types[p].Bytes()
			}
		}
	}
	return info
}

// forwardUses marks the values of a rank program whose first user is a run of a forward (F)
// function.
func forwardUses(prog *ir.Func) map[*ir.Value]bool {
	seen := map[*ir.Value]bool{}
	fwd := map[*ir.Value]bool{}
	for _, op := range prog.Ops {
		if op.Name() != "run" {
			continue
		}
		isF := strings.HasPrefix(op.Attrs.Str("func", ""), passes.KindF+"_")
		for _, x := range op.Operands {
			if !seen[x] {
				seen[x], fwd[x] = true, isF
			}
		}
	}
	return fwd
}
