package codegen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"ppc.dev/ppc/passes"
)

// FormatVersion is written into every program and plan; the loader rejects other versions.
const FormatVersion = 1

// Plan is plan.json: what the whole compiled job looks like, for the runtime and for people.
type Plan struct {
	FormatVersion int    `json:"format_version"`
	Model         string `json:"model"`
	SourceHash    string `json:"source_hash"`
	// Mesh sizes; world = pp·dp·tp. Ranks are numbered tp fastest, then pp, then dp.
	Mesh         Mesh        `json:"mesh"`
	World        int         `json:"world"`
	Microbatches int         `json:"microbatches"`
	Stages       int         `json:"stages"`
	StageRanks   []int       `json:"stage_ranks"` // stage → pipeline rank
	StageInfo    []StageInfo `json:"stage_info,omitempty"`
	Recompute    string      `json:"recompute,omitempty"`
	// PartitionNote explains a split that the pipeline time does not, e.g. with one
	// micro-batch.
	PartitionNote string `json:"partition_note,omitempty"`
	// Device is the device profile the cost model's times (StageInfo, Estimate) assume.
	Device *passes.DeviceProfile `json:"device,omitempty"`
	// Estimate is the schedule simulated with the cost model's per-stage times.
	Estimate  *Estimate    `json:"estimate,omitempty"`
	Schedule  PlanSchedule `json:"schedule"`
	Training  bool         `json:"training"`
	Optimizer string       `json:"optimizer,omitempty"`
	Inputs    []Input      `json:"inputs"`
	Params    []Param      `json:"params"`
	Ranks     []RankInfo   `json:"ranks"`
	Outputs   []string     `json:"outputs,omitempty"` // forward-only plans: output names
}

// StageInfo describes one pipeline stage: what it holds and the cost model's estimates per
// micro-batch, which `ppc simulate DIR` uses as action costs.
type StageInfo struct {
	Stage      int     `json:"stage"`
	Rank       int     `json:"rank"`
	Layers     string  `json:"layers,omitempty"` // e.g. "E,t0-t3"
	Params     int64   `json:"params"`           // elements held, counting a parameter once per rank
	FLOPs      float64 `json:"forward_flops"`    // per micro-batch
	StashBytes int64   `json:"stash_bytes"`      // activations kept from F to I/W, per micro-batch
	SendBytes  int64   `json:"send_bytes"`       // activations sent to later stages, per micro-batch
	F          float64 `json:"f_seconds"`        // cost model estimates
	I          float64 `json:"i_seconds"`
	W          float64 `json:"w_seconds"`
}

// Estimate is what the simulator predicts for one step of the plan on the plan's Device:
// StepSeconds = IdealSeconds + BubbleSeconds + CommSeconds (see schedule.Result).
type Estimate struct {
	StepSeconds  float64 `json:"step_seconds"`
	IdealSeconds float64 `json:"ideal_seconds"` // the busiest rank's compute
	// BubbleSeconds is the idle time the schedule adds with free transfers; BubbleRatio is it
	// over IdealSeconds, the papers' convention ((p−1)/m for 1F1B with equal stages).
	BubbleSeconds   float64 `json:"bubble_seconds"`
	BubbleRatio     float64 `json:"bubble_ratio"`
	CommSeconds     float64 `json:"comm_seconds"`     // transfer time that compute does not hide
	PeakActivations []int   `json:"peak_activations"` // micro-batches stashed per rank
}

// Mesh is the device mesh.
type Mesh struct {
	PP int `json:"pp"`
	DP int `json:"dp"`
	TP int `json:"tp"`
}

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
	Shape []int  `json:"shape"`
	Init  string `json:"init,omitempty"`
	Ranks []int  `json:"ranks"`
	// Stages lists the stages whose functions use it: more than one for a tied weight.
	Stages []int `json:"stages,omitempty"`
	// State names the optimizer state buffers kept for it.
	State []string `json:"state,omitempty"`
}

// RankInfo summarises one rank's program.
type RankInfo struct {
	Rank         int    `json:"rank"`
	Program      string `json:"program"`
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
	// ProgramSHA256 is the SHA-256 of the program file, hex: the loader refuses a program
	// that a bit flip, a truncated copy or another compile has changed, since many such
	// changes still decode and validate (a different operand buffer, a renamed tensor).
	ProgramSHA256 string `json:"program_sha256,omitempty"`
}

// ProgramFile is the file name of rank r's program.
func ProgramFile(r int) string { return fmt.Sprintf("rank-%05d.ppx", r) }

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
	switch {
	case p.FormatVersion != FormatVersion:
		return fmt.Errorf("format version %d, this ppc reads %d", p.FormatVersion, FormatVersion)
	case p.World < 1 || p.World > 1<<16:
		return fmt.Errorf("world size %d out of range", p.World)
	case len(p.Ranks) != p.World:
		return fmt.Errorf("%d ranks listed for world size %d", len(p.Ranks), p.World)
	case p.Microbatches < 1:
		return fmt.Errorf("micro-batches %d < 1", p.Microbatches)
	case p.Mesh.PP*max(p.Mesh.DP, 1)*max(p.Mesh.TP, 1) != p.World:
		return fmt.Errorf("mesh %+v does not multiply to world size %d", p.Mesh, p.World)
	}
	for i, r := range p.Ranks {
		if r.Rank != i || r.Program != ProgramFile(i) {
			return fmt.Errorf("rank entry %d is malformed", i)
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
