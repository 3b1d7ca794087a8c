package codegen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/passes"
)

// FormatVersion is written into every program and plan; the loader rejects other versions.
// Version 2: one program per pipeline rank shared by its dp × tp replicas (collectives name
// their mesh axis, send/recv the peer's pipeline rank, parameters their sharding), and
// plan.json's programs and per-rank coordinates and groups.
const FormatVersion = 3 // 3: the cp axis

// Plan is plan.json: what the whole compiled job looks like, for the runtime and for people.
type Plan struct {
	FormatVersion int    `json:"format_version"`
	Model         string `json:"model"`
	SourceHash    string `json:"source_hash"`
	// Mesh sizes; world = pp·dp·tp. Ranks are numbered as Megatron-core numbers them, tp
	// fastest, then dp, pp slowest: rank = (pp·dp_size + dp)·tp_size + tp.
	Mesh  Mesh `json:"mesh"`
	World int  `json:"world"`
	// Microbatches is M, the micro-batches each data-parallel replica runs per step; the
	// global batch is M·dp micro-batches.
	Microbatches int `json:"microbatches"`
	// TokenSlices are the lengths of the token slices each micro-batch's sequence is cut
	// into (TeraPipe); the schedule's actions then count units, slice j of micro-batch mb
	// being unit mb·len(TokenSlices) + j.
	TokenSlices []int `json:"token_slices,omitempty"`
	// TokenPlan is the cost model's case for the token slices: the predicted pipeline
	// latency of this slicing, of the best uniform one and of none.
	TokenPlan *passes.TokenPlan `json:"token_plan,omitempty"`
	// CP is how context parallelism split the sequence (nil without --cp): the split, the
	// sequence length and whether attention is causal, from which the per-rank attention
	// work follows (passes.CPAttentionWork).
	CP *passes.CPSplit `json:"cp,omitempty"`
	// MoE is the model's routing (nil without experts): its expert count and choices per
	// token, which split the parameters into dense ones every token reads and the experts'
	// (Param.Expert), of which a token reads top_k/experts.
	MoE        *passes.MoEInfo `json:"moe,omitempty"`
	Stages     int             `json:"stages"`
	StageRanks []int           `json:"stage_ranks"` // stage → pipeline rank (pp coordinate)
	StageInfo  []StageInfo     `json:"stage_info,omitempty"`
	Recompute  string          `json:"recompute,omitempty"`
	// Precision is the compute dtype of mixed-precision training ("bf16", "f16"; empty for
	// fp32): the parameters are 16-bit, their fp32 main copies and the optimizer state are
	// the optimizer's (Recipe).
	Precision string `json:"precision,omitempty"`
	// Recipe names a training plan's model state and its bytes per parameter on a rank
	// (passes.CompileRecipe, StateRecipe.PerParam), e.g. "Megatron mixed precision: bf16
	// params, fp32 grads, fp32 main params + AdamW state; 6 + 12/d = 9 B/param at dp 4 (…)".
	Recipe string `json:"recipe,omitempty"`
	// PartitionNote explains a split that the pipeline time does not, e.g. with one
	// micro-batch.
	PartitionNote string `json:"partition_note,omitempty"`
	// LossNote says how the loss a training compile added was computed where that is not
	// what the flag says on its face (--loss ce on a softmax output).
	LossNote string `json:"loss_note,omitempty"`
	// Device is the device profile the cost model's times (StageInfo, Estimate) assume.
	Device *passes.DeviceProfile `json:"device,omitempty"`
	// Estimate is the schedule simulated with the cost model's per-stage times.
	Estimate  *Estimate    `json:"estimate,omitempty"`
	Schedule  PlanSchedule `json:"schedule"`
	Training  bool         `json:"training"`
	Optimizer string       `json:"optimizer,omitempty"`
	Inputs    []Input      `json:"inputs"`
	Params    []Param      `json:"params"`
	// Programs lists the program files, one per pipeline rank (its dp × tp replicas run the
	// same file); Ranks lists every rank of the world, with the file it runs.
	Programs []ProgramInfo `json:"programs"`
	Ranks    []RankInfo    `json:"ranks"`
	Outputs  []string      `json:"outputs,omitempty"` // forward-only plans: output names
}

// SliceInfo is one token slice of a stage: the cost model's seconds (F includes the
// incoming transfers' share) and the bytes it stashes (its K/V pieces included: the later
// slices read them) and sends.
type SliceInfo struct {
	F          float64 `json:"f_seconds"`
	I          float64 `json:"i_seconds"`
	W          float64 `json:"w_seconds"`
	StashBytes int64   `json:"stash_bytes"`
	SendBytes  int64   `json:"send_bytes"`
}

// StageInfo describes one pipeline stage: what it holds and the cost model's estimates per
// micro-batch, which `ppc simulate DIR` uses as action costs.
type StageInfo struct {
	// Slices are the stage's per-token-slice figures of a token-sliced plan (the stage's
	// F, I, W, stash and send figures are then their sums over the slices of a micro-batch).
	Slices []SliceInfo `json:"slices,omitempty"`
	Stage  int         `json:"stage"`
	Rank   int         `json:"rank"`             // pipeline rank
	Layers string      `json:"layers,omitempty"` // e.g. "E,t0-t3"
	// Params counts the stage's parameter elements (logical tensors), a parameter once per
	// pipeline rank holding it; RankParams what one tensor-parallel rank of it holds (its
	// shards; replicated parameters whole).
	Params     int64 `json:"params"`
	RankParams int64 `json:"rank_params"`
	// ExpertParams is, of Params, the experts' weights (Param.Expert): a token reads
	// top_k/experts of them.
	ExpertParams int64   `json:"expert_params,omitempty"`
	FLOPs        float64 `json:"forward_flops"` // per micro-batch
	StashBytes   int64   `json:"stash_bytes"`   // activations kept from F to I/W, per micro-batch
	// KVBytes is, of StashBytes, the token slices' K/V cache: the keys and values each slice
	// keeps for the later slices of its micro-batch (and their backward), per micro-batch.
	KVBytes   int64   `json:"kv_cache_bytes,omitempty"`
	SendBytes int64   `json:"send_bytes"` // activations sent to later stages, per micro-batch
	F         float64 `json:"f_seconds"`  // cost model estimates
	I         float64 `json:"i_seconds"`
	W         float64 `json:"w_seconds"`
	// Recompute is, of I, the seconds of forward ops the backward recomputes (--recompute).
	Recompute float64 `json:"recompute_seconds,omitempty"`
	// Of F, I and W, the seconds of tensor-parallel collectives (the cost model's ring time
	// of the stage's collective ops, intra-node; zero without tp). F, I and W include them:
	// the stage waits for them between its matmuls.
	FComm float64 `json:"f_comm_seconds,omitempty"`
	IComm float64 `json:"i_comm_seconds,omitempty"`
	WComm float64 `json:"w_comm_seconds,omitempty"`
	// Of FComm and IComm, expert parallelism's all-to-alls (priced on NVLink when the ep
	// group's tp·cp·ep ranks fit a node, else on the inter-node link).
	FAllToAll float64 `json:"f_all_to_all_seconds,omitempty"`
	IAllToAll float64 `json:"i_all_to_all_seconds,omitempty"`
	// Data-parallel collectives (inter-node), which F, I and W do not include: DPReduce is
	// the all-reduces of the stage's gradients, issued after its last W of the step, which
	// the rest of the backward hides as far as it lasts; DPReduceMB (ZeRO-2) the
	// reduce-scatters of one micro-batch's gradients, issued after each W; OptimizerComm
	// ZeRO's collectives in the optimizer (reduce-scatter of the gradient sum under ZeRO-1,
	// all-gather of the updated parameters), which wait for the whole backward.
	DPReduce      float64 `json:"dp_reduce_seconds,omitempty"`
	DPReduceMB    float64 `json:"dp_reduce_mb_seconds,omitempty"`
	OptimizerComm float64 `json:"optimizer_comm_seconds,omitempty"`
	// TPReduce is the tensor-parallel all-reduces of the gradients of whole parameters used
	// in split computations (norm gains and biases under sequence parallelism), summed once
	// per step after the stage's last W (passes.hoistTPReductions), like DPReduce.
	TPReduce float64 `json:"tp_reduce_seconds,omitempty"`
}

// TPComm is the stage's tensor-parallel collective time per micro-batch (F, I and W).
func (s StageInfo) TPComm() float64 { return s.FComm + s.IComm + s.WComm }

// StepComm is the stage's collective time per step outside its F, I and W, for m
// micro-batches: gradient reductions over dp and tp, and ZeRO's optimizer collectives.
func (s StageInfo) StepComm(m int) float64 {
	return s.DPReduce + s.TPReduce + float64(m)*s.DPReduceMB + s.OptimizerComm
}

// Estimate is what the simulator predicts for one step of the plan on the plan's Device:
// StepSeconds = IdealSeconds + BubbleSeconds + CollectiveSeconds + CommSeconds (see
// schedule.Result).
//
// IdealSeconds is compute only: the busiest rank's F, I and W without their tensor-parallel
// collectives. A faster link shrinks the collectives and not the compute, and the bubble
// ratio — the schedule's property — stays comparable with and without tp. The step time
// includes every collective: CollectiveSeconds is what they add (the tensor-parallel ones on
// the critical path, and the data-parallel reductions and ZeRO's optimizer collectives that
// compute does not hide).
type Estimate struct {
	StepSeconds  float64 `json:"step_seconds"`
	IdealSeconds float64 `json:"ideal_seconds"` // the busiest rank's compute, collectives excluded
	// BubbleSeconds is the idle time the schedule adds with free transfers; BubbleRatio is it
	// over IdealSeconds, the papers' convention ((p−1)/m for 1F1B with equal stages).
	BubbleSeconds     float64 `json:"bubble_seconds"`
	BubbleRatio       float64 `json:"bubble_ratio"`
	CollectiveSeconds float64 `json:"collective_seconds"` // what collectives add to the step
	CommSeconds       float64 `json:"comm_seconds"`       // transfer time that compute does not hide
	PeakActivations   []int   `json:"peak_activations"`   // micro-batches stashed per rank
}

// Mesh is the device mesh: the size of each axis. EP (expert parallelism) is not an axis of
// its own but a factor of DP: dp coordinate d is ep coordinate d mod EP and expert-data-
// parallel (edp) coordinate d / EP, so the ranks are numbered as Megatron-Core numbers them,
// rank = tp + TP·(cp + CP·(ep + EP·(edp + EDP·pp))), which is the numbering without ep.
type Mesh struct {
	PP int `json:"pp"`
	DP int `json:"dp"`
	EP int `json:"ep,omitempty"` // expert parallelism inside dp (0 or 1: none)
	CP int `json:"cp"`           // context parallelism: each sequence split over cp ranks (0 reads as 1)
	TP int `json:"tp"`
}

// Coords are one rank's coordinates on the mesh. EP and EDP are DP's factors (Mesh).
type Coords struct {
	PP  int `json:"pp"`
	DP  int `json:"dp"`
	EP  int `json:"ep,omitempty"`
	EDP int `json:"edp,omitempty"`
	CP  int `json:"cp"`
	TP  int `json:"tp"`
}

// ep is the expert-parallel size (1 without expert parallelism).
func (m Mesh) ep() int { return max(m.EP, 1) }

// cp is the context-parallel size; a mesh built in memory without one has cp 1 (a plan read
// from disk must say so: check).
func (m Mesh) cp() int { return max(m.CP, 1) }

// Size is the number of ranks along the named axis (0 for a name that is not an axis).
func (m Mesh) Size(axis string) int {
	switch axis {
	case "pp":
		return m.PP
	case "dp":
		return m.DP
	case "ep":
		return m.ep()
	case "edp":
		return m.DP / m.ep()
	case "cp":
		return m.cp()
	case "tp":
		return m.TP
	}
	return 0
}

// World is the number of ranks of the mesh.
func (m Mesh) World() int { return m.PP * m.DP * m.cp() * m.TP }

// Rank numbers the rank at c as Megatron-core does: tp fastest, then cp, dp (ep inside it),
// pp slowest.
func (m Mesh) Rank(c Coords) int { return ((c.PP*m.DP+c.DP)*m.cp()+c.CP)*m.TP + c.TP }

// Coords are rank r's coordinates (the inverse of Rank).
func (m Mesh) Coords(r int) Coords {
	cp := m.cp()
	c := Coords{PP: r / (m.DP * cp * m.TP), DP: r / (cp * m.TP) % m.DP, CP: r / m.TP % cp, TP: r % m.TP}
	if m.ep() > 1 {
		c.EP, c.EDP = c.DP%m.ep(), c.DP/m.ep()
	}
	return c
}

// Of is c's coordinate on the named axis.
func (c Coords) Of(axis string) int {
	switch axis {
	case "pp":
		return c.PP
	case "dp":
		return c.DP
	case "ep":
		return c.EP
	case "edp":
		return c.EDP
	case "cp":
		return c.CP
	}
	return c.TP
}

// With returns c with its coordinate on axis set to v (not ep or edp: Mesh.Group).
func (c Coords) With(axis string, v int) Coords {
	switch axis {
	case "pp":
		c.PP = v
	case "dp":
		c.DP = v
	case "cp":
		c.CP = v
	default:
		c.TP = v
	}
	return c
}

// Group is the ranks that share every coordinate of c but the one on axis, ordered by that
// coordinate: the members of a collective over axis, in reduction and concatenation order.
// An ep group is EP consecutive dp coordinates; an edp group the dp coordinates ≡ c's mod EP.
func (m Mesh) Group(c Coords, axis string) []int {
	n := m.Size(axis)
	g := make([]int, n)
	for i := range n {
		switch axis {
		case "ep":
			g[i] = m.Rank(c.With("dp", c.DP/m.ep()*m.ep()+i))
		case "edp":
			g[i] = m.Rank(c.With("dp", i*m.ep()+c.DP%m.ep()))
		default:
			g[i] = m.Rank(c.With(axis, i))
		}
	}
	return g
}

// Proto is the mesh as a program records it, slowest axis first; cp only when it splits
// (as the IR's mesh attribute), so that a program without it reads as before.
func (m Mesh) Proto() []*pb.NamedInt {
	p := []*pb.NamedInt{{Name: "pp", Value: int64(m.PP)}, {Name: "dp", Value: int64(m.DP)}}
	if m.ep() > 1 {
		p = append(p, &pb.NamedInt{Name: "ep", Value: int64(m.EP)})
	}
	if m.cp() > 1 {
		p = append(p, &pb.NamedInt{Name: "cp", Value: int64(m.CP)})
	}
	return append(p, &pb.NamedInt{Name: "tp", Value: int64(m.TP)})
}

// Product is the mesh as a product of its axes, "pp 2 × dp 1 × tp 1", ep and cp only when
// they split (ep inside dp, not a factor of the world: "dp 4 (ep 2)").
func (m Mesh) Product() string {
	var s string
	for _, a := range m.Proto() {
		switch {
		case a.Name == "ep":
			s += fmt.Sprintf(" (ep %d)", a.Value)
		case s == "":
			s = fmt.Sprintf("%s %d", a.Name, a.Value)
		default:
			s += fmt.Sprintf(" × %s %d", a.Name, a.Value)
		}
	}
	return s
}

// String is the mesh as messages write it: "pp=2 dp=4 tp=8", ep and cp only when they split.
func (m Mesh) String() string {
	var parts []string
	for _, a := range m.Proto() {
		parts = append(parts, fmt.Sprintf("%s=%d", a.Name, a.Value))
	}
	return strings.Join(parts, " ")
}

// Groups are the rank's groups on every axis.
func (m Mesh) Groups(c Coords) RankGroups {
	g := RankGroups{PP: m.Group(c, "pp"), DP: m.Group(c, "dp"), CP: m.Group(c, "cp"), TP: m.Group(c, "tp")}
	if m.ep() > 1 {
		g.EP, g.EDP = m.Group(c, "ep"), m.Group(c, "edp")
	}
	return g
}

// Axes are the mesh axes in rank order, slowest first (ir.MeshOrder).
var Axes = []string{"pp", "dp", "cp", "tp"}

// PlanSchedule records the pipeline schedule as per-rank action lists in PyTorch's grammar.
type PlanSchedule struct {
	Name    string     `json:"name"`
	Actions [][]string `json:"actions"`
}

// Input is a model input as the runtime feeds it.
type Input struct {
	Name            string `json:"name"`
	ModelName       string `json:"model_name,omitempty"` // the model's own name (ONNX tensor name) when it differs
	DType           string `json:"dtype"`
	MicrobatchShape []int  `json:"microbatch_shape"` // leading dim: samples per micro-batch
	Range           []int  `json:"range,omitempty"`  // integer inputs: [lo, hi)
	Label           bool   `json:"label,omitempty"`
	ShiftOf         string `json:"shift_of,omitempty"` // labels that are this token input shifted by one
}

// Samples is the number of samples in one micro-batch of the input: its leading dim, or 1
// for a scalar input (an unbatched model, e.g. a class label for one row of logits).
func (in Input) Samples() int {
	if len(in.MicrobatchShape) == 0 {
		return 1
	}
	return in.MicrobatchShape[0]
}

// SampleShape is the shape of one sample: the micro-batch shape without its leading dim
// (empty for a scalar input).
func (in Input) SampleShape() []int {
	if len(in.MicrobatchShape) == 0 {
		return nil
	}
	return in.MicrobatchShape[1:]
}

// Param is a model parameter and where it lives.
type Param struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"` // the logical (full) tensor's, as checkpoints hold it
	// Padded is the shape the ranks hold when the compile padded the tensor (a vocabulary
	// tp does not divide, passes.PadVocab): Shape is its leading block, the rest zero.
	Padded []int `json:"padded,omitempty"`
	// Shard lists, per dim, the mesh axes that split it (none: whole); empty when no dim is
	// split. Its optimizer state is split the same way.
	Shard [][]string `json:"shard,omitempty"`
	Init  string     `json:"init,omitempty"`
	// Expert marks an expert's weights (passes.AttrExpert): first dim the experts.
	Expert bool  `json:"expert,omitempty"`
	Ranks  []int `json:"ranks"` // pipeline ranks holding it (each on all its replicas)
	// Stages lists the stages whose functions use it: more than one for a tied weight.
	Stages []int `json:"stages,omitempty"`
	// State names the optimizer state buffers kept for it.
	State []string `json:"state,omitempty"`
	// MainDType is the dtype of the main parameter the optimizer keeps of a 16-bit
	// parameter (mixed precision): the tensor checkpoints hold under Name. Empty: the
	// parameter is its own main copy.
	MainDType string `json:"main_dtype,omitempty"`
}

// RankInfo is one rank of the world: its coordinates, the program file it runs, and the
// groups its collectives over each axis use (every rank that shares its other coordinates,
// ordered by the axis's coordinate; the loader derives the same groups from the mesh and
// refuses a plan.json whose groups differ).
type RankInfo struct {
	Rank    int        `json:"rank"`
	Coords  Coords     `json:"coords"`
	Program string     `json:"program"`
	Groups  RankGroups `json:"groups"`
}

// RankGroups are a rank's collective groups, one per mesh axis.
type RankGroups struct {
	PP  []int `json:"pp"`
	DP  []int `json:"dp"`
	EP  []int `json:"ep,omitempty"`  // expert parallelism: the rank's ep group (a part of its dp group)
	EDP []int `json:"edp,omitempty"` // the ranks holding the same experts
	CP  []int `json:"cp"`
	TP  []int `json:"tp"`
}

// ProgramInfo summarises one program file, which every dp × tp replica of pipeline rank PP
// runs: the memory and FLOPs are each of those ranks'.
type ProgramInfo struct {
	File         string `json:"file"`
	PP           int    `json:"pp"`
	Stages       []int  `json:"stages"`
	Instructions int    `json:"instructions"`
	// The peak splits by role: PeakBytes = ParamBytes + GradBytes + StateBytes + ConstBytes +
	// ArenaBytes, and the arena (buffers live for part of a step) = ActivationBytes +
	// WorkspaceBytes. The backward's, optimizer's and communication's temporaries reuse the
	// activations' memory once it is free, so WorkspaceBytes is what they need beyond it (plus
	// the planner's packing slack), not their total.
	ArenaBytes      int64 `json:"arena_bytes"`      // the arena, as planned
	ActivationBytes int64 `json:"activation_bytes"` // the most forward activations (stashed or in flight) live at once
	WorkspaceBytes  int64 `json:"workspace_bytes"`  // the rest of the arena
	ParamBytes      int64 `json:"param_bytes"`      // parameters on this rank
	GradBytes       int64 `json:"grad_bytes"`       // their gradient accumulators
	StateBytes      int64 `json:"state_bytes"`      // optimizer state
	ConstBytes      int64 `json:"const_bytes"`      // compile-time constants
	PeakBytes       int64 `json:"peak_bytes"`       // all of the above
	FLOPs           int64 `json:"flops_per_step"`   // matmul and convolution FLOPs per step
	// LiveBytes is the most bytes the arena's buffers hold at any one instruction, the least
	// any placement of them needs: what the step needs, and what ppc plan predicts.
	// ArenaBytes − LiveBytes is what the placement (greedy best-fit, which does not grow
	// monotonically with the buffers it places) loses to fragmentation.
	LiveBytes int64 `json:"live_bytes"`
	// ProgramSHA256 is the SHA-256 of the program file, hex: the loader refuses a program
	// that a bit flip, a truncated copy or another compile has changed, since many such
	// changes still decode and validate (a different operand buffer, a renamed tensor).
	ProgramSHA256 string `json:"program_sha256,omitempty"`
}

// Memory is one rank's memory by role: what `ppc compile` reads off its memory plan
// (ProgramInfo.Memory) and `ppc plan` predicts from its memory model, printed the same way.
type Memory struct {
	Params, Grads, Optimizer, Activations, Workspace, Constants int64
	// Margin is what a GPU needs beyond ppc's own buffers (MemoryMargin); 0 when no device
	// with a memory size is named.
	Margin int64
}

// Peak is the sum of the parts.
func (m Memory) Peak() int64 {
	return m.Params + m.Grads + m.Optimizer + m.Activations + m.Workspace + m.Constants + m.Margin
}

// String is "peak 3.6 MiB = params 465.5 KiB + grads … + workspace 288.1 KiB", constants
// and margin named when present.
func (m Memory) String() string {
	s := fmt.Sprintf("peak %s = params %s + grads %s + optimizer %s + activations %s + workspace %s", FormatBytes(m.Peak()),
		FormatBytes(m.Params), FormatBytes(m.Grads), FormatBytes(m.Optimizer), FormatBytes(m.Activations), FormatBytes(m.Workspace))
	if m.Constants > 0 {
		s += " + constants " + FormatBytes(m.Constants)
	}
	if m.Margin > 0 {
		s += " + margin " + FormatBytes(m.Margin)
	}
	return s
}

// MemoryMargin is the memory a GPU of memBytes needs beyond the planned bytes: the CUDA
// context, cuBLASLt's workspace and NCCL's channel buffers (512 MiB together), and 5% of
// the plan for allocation alignment and the arena's placement. ppc allocates one arena per
// rank rather than caching blocks, so the only fragmentation is the placement's (ArenaBytes −
// LiveBytes), which ProgramInfo.Memory takes out of that 5%: 0.2% of the plan for GPT-3 175B,
// up to a few percent of a tiny model's. No margin without a device memory size (memBytes 0:
// the default a100-like profile, the CPU).
func MemoryMargin(planned, memBytes int64) int64 {
	if memBytes <= 0 {
		return 0
	}
	return 512<<20 + planned/20
}

// Memory is the program's memory plan by role, with the margin a GPU of memBytes needs.
func (p ProgramInfo) Memory(memBytes int64) Memory {
	m := Memory{Params: p.ParamBytes, Grads: p.GradBytes, Optimizer: p.StateBytes, Activations: p.ActivationBytes,
		Workspace: p.WorkspaceBytes, Constants: p.ConstBytes}
	// The margin's 5% is of the plan's live bytes and covers the placement's fragmentation
	// first (ppc plan predicts the live bytes, so both report the same peak while the
	// fragmentation stays within it).
	frag := max(0, p.ArenaBytes-p.LiveBytes)
	if p.LiveBytes == 0 {
		frag = 0 // a plan.json from before live bytes were recorded
	}
	m.Margin = MemoryMargin(m.Peak()-frag, memBytes)
	if m.Margin > 0 {
		m.Margin = max(m.Margin-frag, 512<<20)
	}
	return m
}

// FormatBytes prints a byte count with a binary unit (12.5 MiB).
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	u := 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}

// ProgramFile is the name of the program file whose first rank (the replica with dp and tp
// coordinates 0) is rank r; its other replicas run the same file.
func ProgramFile(r int) string { return fmt.Sprintf("rank-%05d.ppx", r) }

// Replicas is the number of ranks that run each program: dp × tp.
func (p *Plan) Replicas() int { return max(p.Mesh.DP, 1) * p.Mesh.cp() * max(p.Mesh.TP, 1) }

// GlobalMicrobatches is the micro-batches of one step over all data-parallel replicas (M·dp).
func (p *Plan) GlobalMicrobatches() int { return p.Microbatches * max(p.Mesh.DP, 1) }

// Program returns the entry of the named program file, or nil.
func (p *Plan) Program(file string) *ProgramInfo {
	for i := range p.Programs {
		if p.Programs[i].File == file {
			return &p.Programs[i]
		}
	}
	return nil
}

// SetRanks fills Ranks for the mesh: every rank runs the program of its pipeline rank
// (ProgramFile of that pipeline rank's first rank).
func (p *Plan) SetRanks() {
	p.Ranks = make([]RankInfo, p.World)
	for r := range p.Ranks {
		c := p.Mesh.Coords(r)
		p.Ranks[r] = RankInfo{Rank: r, Coords: c, Program: ProgramFile(p.Mesh.Rank(Coords{PP: c.PP})),
			Groups: p.Mesh.Groups(c)}
	}
}

// ReadPlan loads and checks plan.json.
func ReadPlan(dir string) (*Plan, error) {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return nil, fmt.Errorf("%s is a file; want the plan directory that ppc compile -o wrote (holding plan.json)", dir)
	}
	path := filepath.Join(dir, "plan.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return nil, fmt.Errorf("%s: no such plan directory", dir)
		}
		return nil, fmt.Errorf("%s: not a plan directory (no plan.json); compile a model into it with ppc compile MODEL -o DIR", dir)
	}
	if err != nil {
		return nil, err
	}
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &p, nil
}

func (p *Plan) check() error {
	m := p.Mesh
	switch {
	case p.FormatVersion != FormatVersion:
		return fmt.Errorf("format version %d, this ppc reads %d", p.FormatVersion, FormatVersion)
	case p.World < 1 || p.World > 1<<16:
		return fmt.Errorf("world size %d out of range", p.World)
	case m.PP < 1 || m.DP < 1 || m.CP < 0 || m.TP < 1 || m.PP > p.World || m.DP > p.World || m.CP > p.World || m.TP > p.World || m.World() != p.World:
		return fmt.Errorf("mesh pp=%d dp=%d cp=%d tp=%d does not multiply to world size %d", m.PP, m.DP, m.cp(), m.TP, p.World)
	case m.EP < 0 || m.EP > 1 && m.DP%m.EP != 0:
		return fmt.Errorf("mesh ep=%d does not divide dp=%d", m.EP, m.DP)
	case len(p.Ranks) != p.World:
		return fmt.Errorf("%d ranks listed for world size %d", len(p.Ranks), p.World)
	case p.Microbatches < 1:
		return fmt.Errorf("micro-batches %d < 1", p.Microbatches)
	case len(p.Programs) == 0:
		return fmt.Errorf("no programs listed")
	}
	used := map[string]bool{}
	ppOf := map[string]int{}
	for i, pr := range p.Programs {
		// Program names are joined to the plan directory: a path would read another file.
		if pr.File == "" || filepath.Base(pr.File) != pr.File || filepath.Ext(pr.File) != ".ppx" || pr.File[0] == '.' {
			return fmt.Errorf("program entry %d: %q is not a program file name (rank-NNNNN.ppx)", i, pr.File)
		}
		if _, dup := used[pr.File]; dup {
			return fmt.Errorf("program %s is listed twice", pr.File)
		}
		used[pr.File] = false
		ppOf[pr.File] = pr.PP
		if pr.PP < 0 || pr.PP >= m.PP {
			return fmt.Errorf("program %s: pipeline rank %d is not in 0 … %d", pr.File, pr.PP, m.PP-1)
		}
	}
	for i, r := range p.Ranks {
		c := m.Coords(i)
		want := m.Groups(c)
		switch {
		case r.Rank != i:
			return fmt.Errorf("rank entry %d is for rank %d", i, r.Rank)
		case r.Coords != c:
			return fmt.Errorf("rank %d: coordinates pp=%d dp=%d cp=%d tp=%d, but the mesh numbers it pp=%d dp=%d cp=%d tp=%d (tp fastest, then cp, dp, pp)",
				i, r.Coords.PP, r.Coords.DP, r.Coords.CP, r.Coords.TP, c.PP, c.DP, c.CP, c.TP)
		case !slices.Equal(r.Groups.PP, want.PP) || !slices.Equal(r.Groups.DP, want.DP) || !slices.Equal(r.Groups.CP, want.CP) || !slices.Equal(r.Groups.TP, want.TP) || !slices.Equal(r.Groups.EP, want.EP) || !slices.Equal(r.Groups.EDP, want.EDP):
			return fmt.Errorf("rank %d: groups pp %v, dp %v, cp %v, tp %v; its coordinates on the mesh give pp %v, dp %v, cp %v, tp %v",
				i, r.Groups.PP, r.Groups.DP, r.Groups.CP, r.Groups.TP, want.PP, want.DP, want.CP, want.TP)
		}
		pp, ok := ppOf[r.Program]
		if !ok {
			return fmt.Errorf("rank %d runs %q, which is not among the programs", i, r.Program)
		}
		if pp != c.PP {
			return fmt.Errorf("rank %d (pipeline rank %d) runs %s, the program of pipeline rank %d", i, c.PP, r.Program, pp)
		}
		used[r.Program] = true
	}
	for _, pr := range p.Programs {
		if !used[pr.File] {
			return fmt.Errorf("program %s is run by no rank", pr.File)
		}
	}
	for _, in := range p.Inputs {
		// An empty shape is a scalar input (one sample per micro-batch), not an error.
		if in.Name == "" {
			return fmt.Errorf("an input has no name")
		}
		for _, d := range in.MicrobatchShape {
			if d < 0 || d > 1<<40 {
				return fmt.Errorf("input %q has a bad shape %v", in.Name, in.MicrobatchShape)
			}
		}
		if in.Range != nil && (len(in.Range) != 2 || in.Range[0] >= in.Range[1]) {
			return fmt.Errorf("input %q has a bad range %v", in.Name, in.Range)
		}
	}
	return nil
}

// WritePlan writes plan.json.
func WritePlan(dir string, p *Plan) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "plan.json"), append(data, '\n'), 0o644)
}
