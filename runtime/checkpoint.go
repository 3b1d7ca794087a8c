package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/dist"
	"ppc.dev/ppc/runtime/fault"
)

// Save writes a checkpoint of an in-process job (every rank here) to dir: each rank's
// blocks, then the index (runtime/checkpoint), so that any layout can resume it. A save that
// fails or is killed leaves the previous checkpoint intact. Save does not lock dir; callers
// that may race take checkpoint.LockDir. Multi-process runs save with SaveAll.
func (j *Job) Save(dir string, seed uint64) error {
	sub := checkpoint.SaveDir(dir, j.StepCount())
	files, err := j.writeShards(dir)
	if err == nil {
		err = j.commit(dir, seed, files)
	}
	if err != nil {
		os.RemoveAll(filepath.Join(dir, sub)) // never the committed checkpoint's (SaveDir)
		if checkpoint.Committed(dir) != "" {
			return fmt.Errorf("%w; the previous checkpoint in %s is intact", err, dir)
		}
	}
	return err
}

// Weights returns every parameter's full tensor as checkpoints hold it: the parameter, or for
// a 16-bit copy (mixed precision) its fp32 main parameter, the optimizer's state of the same
// name (the copy itself in a forward-only plan, which has no optimizer).
func (j *Job) Weights() (map[string]device.Tensor, error) {
	params, err := j.Tensors(pb.Role_PARAM)
	if err != nil {
		return nil, err
	}
	state, err := j.Tensors(pb.Role_STATE)
	if err != nil {
		return nil, err
	}
	for name := range params {
		if m, ok := state[name]; ok {
			params[name] = m
		}
	}
	return params, nil
}

// Tensors returns, by name, every parameter or optimizer state (role PARAM or STATE) as the
// full tensor: a sharded one assembled from its blocks (a fresh tensor), an unsharded one the
// first holder's buffer, as Buffers. Data-parallel replicas hold equal copies of each block;
// the first is taken.
func (j *Job) Tensors(role pb.Role) (map[string]device.Tensor, error) {
	j.expose(role)
	out := map[string]device.Tensor{}
	placed := map[string]map[string]bool{} // name → block offsets copied
	for _, r := range j.Ranks {
		for i, b := range r.Prog.Buffers {
			if b.Role != role {
				continue
			}
			g := r.shards[i]
			full, ok := out[b.Name]
			if g == nil && ok {
				continue
			}
			buf, err := j.readHost(r.Bufs[i])
			if err != nil {
				return nil, err
			}
			if g == nil {
				out[b.Name] = buf
				continue
			}
			if !ok {
				t := r.globalType(i)
				full = device.Tensor{Type: t, Data: device.HostBytes(t.Bytes())}
				out[b.Name] = full
				placed[b.Name] = map[string]bool{}
			}
			at := fmt.Sprint(g.offset)
			if placed[b.Name][at] {
				continue
			}
			placed[b.Name][at] = true
			copyBlock(full.Data, buf, g, true)
		}
	}
	return out, nil
}

// copyBlock copies a shard's elements between its buffer and the full tensor's bytes: into
// full when toFull, out of it otherwise. The loader has checked that the block lies inside
// the full tensor (shardOf), and checkpoints that full has the full tensor's type.
func copyBlock(full []byte, shard device.Tensor, g *shardGeom, toFull bool) {
	es := int64(shard.Type.DType.Size())
	for _, rn := range contiguousRuns(g, shard.Type) {
		f := full[rn.global*es : (rn.global+rn.n)*es]
		l := shard.Data[rn.local*es : (rn.local+rn.n)*es]
		if toFull {
			copy(f, l)
		} else {
			copy(l, f)
		}
	}
}

// SaveAll writes a checkpoint of the whole job to dir: Save for an in-process run; in a
// multi-process run every process writes its rank's tensors, rank 0 the index once all have
// (the commit point), and every process learns whether the checkpoint was committed. A save
// that fails anywhere ends as Save's does: the files it wrote are removed, the previous
// checkpoint is intact (and the error says so), and a full disk is a failed write on the rank
// it struck, whose message the others repeat.
func (j *Job) SaveAll(dir string, seed uint64) error {
	if j.proc == nil {
		return j.Save(dir, seed)
	}
	p := j.proc
	type written struct {
		Files []checkpoint.ShardFile `json:"files"`
		Error string                 `json:"error,omitempty"`
	}
	// The verdict rank 0 sends every rank: Error "" when the checkpoint is committed, else
	// why not and the rank that failed.
	type verdict struct {
		Error string `json:"error,omitempty"`
		Rank  int    `json:"rank"`
	}
	sub := checkpoint.SaveDir(dir, j.StepCount()) // before a commit changes the index
	files, werr := j.writeShards(dir)
	mine := written{Files: files}
	if werr != nil {
		mine.Error = werr.Error()
	}
	all, err := p.Gather("save", mine, true)
	if err != nil {
		return err
	}
	var v verdict
	var cerr error // rank 0's own failure to commit
	if p.Rank == 0 {
		var every []checkpoint.ShardFile
		for r, raw := range all {
			var w written
			if err := json.Unmarshal(raw, &w); err != nil {
				v = verdict{fmt.Sprintf("rank %d's report: %v", r, err), r}
				break
			}
			if w.Error != "" {
				v = verdict{fmt.Sprintf("rank %d could not write its tensors: %s", r, w.Error), r}
				break
			}
			every = append(every, w.Files...)
		}
		if v.Error == "" {
			if cerr = j.commit(dir, seed, every); cerr != nil {
				v = verdict{cerr.Error(), 0}
			}
		}
	}
	res, err := p.Gather("committed", v, false)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(res[0], &v); err != nil {
		v = verdict{fmt.Sprintf("rank 0's verdict: %v", err), 0}
	}
	if v.Error == "" {
		return nil
	}
	// Not committed. Every rank has finished writing (rank 0 decided once all had
	// reported), so the step directory is garbage: each rank removes it (on a shared file
	// system they race harmlessly; on separate ones each removes its own files) — unless
	// the index names it after all (a commit whose last sync failed).
	now := checkpoint.Committed(dir)
	if now != sub {
		os.RemoveAll(filepath.Join(dir, sub))
	}
	intact := ""
	if now != "" && now != sub {
		intact = fmt.Sprintf("; the previous checkpoint in %s is intact", dir)
	}
	switch {
	case werr != nil:
		return fmt.Errorf("%w%s", werr, intact) // this process's own failure (a full disk: exit 1 as a failed write)
	case cerr != nil:
		return fmt.Errorf("%w%s", cerr, intact)
	}
	return &dist.RemoteError{Msg: fmt.Sprintf("the checkpoint was not saved: %s%s", v.Error, intact), Rank: v.Rank}
}

// ownedBlock is one block a rank writes: of a padded tensor, only the part inside the
// unpadded one (shape; nil: the buffer's).
type ownedBlock struct {
	rank, buf int
	name      string
	offset    []int64
	shape     ir.Shape
}

// owners lists every distinct block of every parameter and optimizer state with the lowest
// rank that holds it, from the plan alone (every rank's buffers, local or not): the lowest
// holder writes it, so data-parallel replicas and tied weights are written once, and every
// process of a run knows who writes what without asking.
func (j *Job) owners() []ownedBlock {
	seen := map[string]bool{}
	var out []ownedBlock
	for _, r := range j.all {
		for i, b := range r.Prog.Buffers {
			if b.Role != pb.Role_PARAM && b.Role != pb.Role_STATE || b.Copy {
				continue // a 16-bit copy's main parameter is saved instead
			}
			var off []int64
			var shape ir.Shape
			if g := r.shards[i]; g != nil {
				off = g.offset
				if g.padded {
					// A padded tensor's block clipped to the unpadded one; a block of
					// padding only is not written.
					shape = g.inside()
					if shape.NumElements() == 0 {
						continue
					}
				}
			} else {
				off = make([]int64, r.Bufs[i].Type.Rank())
			}
			key := b.Name + "@" + fmt.Sprint(off)
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, ownedBlock{rank: r.Index, buf: i, name: b.Name, offset: off, shape: shape})
		}
	}
	return out
}

// writeShards writes the blocks this process's ranks own for the current step into dir's
// step directory (checkpoint.WriteShards) and reports them, for commit.
func (j *Job) writeShards(dir string) ([]checkpoint.ShardFile, error) {
	local := map[int]*Rank{}
	for _, r := range j.Ranks {
		local[r.Index] = r
	}
	byRank := map[int]map[string]device.Tensor{}
	for _, o := range j.owners() {
		r := local[o.rank]
		if r == nil {
			continue
		}
		if byRank[o.rank] == nil {
			byRank[o.rank] = map[string]device.Tensor{}
		}
		t, err := j.readHost(r.Bufs[o.buf])
		if err != nil {
			return nil, err
		}
		if o.shape != nil {
			t = clipBlock(t, r.shards[o.buf], o.shape)
		}
		byRank[o.rank][o.name] = t
	}
	return checkpoint.WriteShards(dir, j.StepCount(), byRank)
}

// commit is rank 0's part of a save once every rank has written its shards (files): the
// index of every block, by its owner (checkpoint.Commit).
func (j *Job) commit(dir string, seed uint64, files []checkpoint.ShardFile) error {
	var blocks []checkpoint.Block
	for _, o := range j.owners() {
		r := j.all[o.rank]
		shape := o.shape
		if shape == nil {
			shape = r.Bufs[o.buf].Type.Shape
		}
		blocks = append(blocks, checkpoint.Block{Rank: o.rank, Name: o.name, Full: r.globalType(o.buf), Offset: o.offset, Shape: shape})
	}
	meta := checkpoint.Meta{Step: j.StepCount(), Seed: seed, SourceHash: j.Plan.SourceHash, Model: j.Plan.Model, Optimizer: j.Plan.Optimizer}
	return checkpoint.Commit(dir, meta, blocks, files)
}

// clipBlock is the part of a padded tensor's block t (placed by g) inside the unpadded
// tensor, of shape clipped: the block's runs inside it, in order, are that part's rows.
func clipBlock(t device.Tensor, g *shardGeom, clipped ir.Shape) device.Tensor {
	out := device.Tensor{Type: ir.Type{DType: t.Type.DType, Shape: clipped}}
	out.Data = make([]byte, 0, out.Type.Bytes())
	es := int64(t.Type.DType.Size())
	for _, rn := range contiguousRuns(g, t.Type) {
		out.Data = append(out.Data, t.Data[rn.local*es:(rn.local+rn.n)*es]...)
	}
	return out
}

// unclipBlock is clipBlock's inverse: it places in, the part of a padded tensor's block
// (placed by g) inside the unpadded tensor, into the block t.
func unclipBlock(t device.Tensor, g *shardGeom, in device.Tensor) {
	es := int64(t.Type.DType.Size())
	var at int64
	for _, rn := range contiguousRuns(g, t.Type) {
		copy(t.Data[rn.local*es:(rn.local+rn.n)*es], in.Data[at:at+rn.n*es])
		at += rn.n * es
	}
}

// StepCount is the number of the last step run (0 before the first).
func (j *Job) StepCount() int {
	if len(j.Ranks) == 0 {
		return 0
	}
	return j.Ranks[0].step
}

// Resumed says what Resume loaded.
type Resumed struct {
	Step int    // the checkpoint's step count, which the job continues
	Seed uint64 // the seed the checkpoint was trained with
	// Loaded counts the plan's tensors read from the checkpoint; Kept those a partial resume
	// left as initialised (missing from the checkpoint, or of another type there); Ignored
	// the checkpoint's tensors that the plan has no use for.
	Loaded, Kept, Ignored int
	// Bytes counts the tensor data this process read: its ranks' share of the checkpoint.
	Bytes int64
	// Warning, when set, is a doubt that does not stop the resume: the tensors match but
	// the checkpoint was saved from a differently configured model.
	Warning string
}

// maxListed bounds the differences a MismatchError lists.
const maxListed = 20

// MismatchError refuses a checkpoint whose tensors are not the plan's.
type MismatchError struct {
	Path string
	// Missing: the plan's tensors the checkpoint lacks; Different: those it holds with
	// another dtype or shape; Extra: its tensors the plan lacks. One line each, by name.
	Missing, Different, Extra []string
	Notes                     []string // what the differences suggest (another model, another optimizer)
	Matching                  int      // plan tensors the checkpoint holds with the same dtype and shape
	PlanTotal                 int
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s does not match the plan (%d of the plan's %d tensors match)", e.Path, e.Matching, e.PlanTotal)
	for _, n := range e.Notes {
		fmt.Fprintf(&b, "\n  %s", n)
	}
	listed := 0
	for _, group := range []struct {
		what  string
		lines []string
	}{{"of another dtype or shape", e.Different}, {"missing from the checkpoint", e.Missing}, {"in the checkpoint, not in the plan", e.Extra}} {
		if len(group.lines) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n  %d %s:", len(group.lines), group.what)
		for i, d := range group.lines {
			if listed == maxListed {
				fmt.Fprintf(&b, "\n    … and %d more", len(group.lines)-i)
				break
			}
			fmt.Fprintf(&b, "\n    %s", d)
			listed++
		}
	}
	return b.String()
}

// Resume loads parameters and optimizer state from a checkpoint (its directory or file)
// into every rank that holds them and continues the step count. The checkpoint must hold
// exactly the plan's tensors, with the same dtypes and shapes; otherwise it returns a
// *MismatchError listing every difference (an 8-layer checkpoint does not quietly fill half
// of a 4-layer plan). With partial, it loads the tensors that match instead and leaves the
// others as initialised. Forward-only plans ignore the checkpoint's optimizer state.
//
// Only this process's ranks are loaded, and each reads only the byte ranges of the stored
// blocks that overlap its own (checkpoint blocks' SHA-256 checked as they are read): a
// process of a large world reads its share of the checkpoint, not all of it.
func (j *Job) Resume(path string, partial bool) (Resumed, error) {
	defer j.forgetConstants()
	ck, err := checkpoint.Open(path)
	if err != nil {
		return Resumed{}, err
	}
	meta := ck.Meta
	stored := ck.Tensors()
	file := path
	res := Resumed{Step: meta.Step, Seed: meta.Seed}

	// The plan's tensors, merged by name across every rank of the world (not only this
	// process's) as the checkpoint holds them: full tensors.
	want := map[string]ir.Type{}
	role := map[string]pb.Role{}
	for _, r := range j.all {
		for i, b := range r.Prog.Buffers {
			switch {
			case b.Copy:
				// A 16-bit copy is read from its fp32 main parameter (which, in a plan
				// that has an optimizer, is a state buffer of the same name).
				if _, ok := want[b.Name]; !ok {
					t := r.globalType(i)
					want[b.Name], role[b.Name] = ir.Type{DType: ir.F32, Shape: t.Shape}, b.Role
				}
			case b.Role == pb.Role_PARAM || b.Role == pb.Role_STATE:
				want[b.Name], role[b.Name] = r.globalType(i), b.Role
			}
		}
	}
	names := SortedNames(want, stored)
	e := &MismatchError{Path: file, PlanTotal: len(want)}
	matches := map[string]bool{}
	missingParams, missingState := false, false
	fromStep := false // the plan's AdamW step count is set from the checkpoint's step
	for _, n := range names {
		w, inPlan := want[n]
		t, inCk := stored[n]
		switch {
		case inPlan && inCk && t.Equal(w):
			matches[n] = true
		case inPlan && inCk:
			e.Different = append(e.Different, fmt.Sprintf("%s: %s in the checkpoint, %s in the plan", n, t, w))
		case inPlan && n == passes.ScalerOptimizerStep && w.NumElements() == 1:
			// A checkpoint from before AdamW kept its own count under loss scaling: its
			// bias correction counted every step, so the count starts at the step.
			fromStep = true
			res.Warning = joinWarning(res.Warning, fmt.Sprintf("the checkpoint predates AdamW's own step count under fp16 loss scaling (%s): it starts at the checkpoint's step, %d, which counts skipped steps too, as the ppc that saved it did", n, meta.Step))
		case inPlan:
			what := "parameter"
			if role[n] == pb.Role_STATE {
				what, missingState = "optimizer state", true
			} else {
				missingParams = true
			}
			e.Missing = append(e.Missing, fmt.Sprintf("%s: %s %s", n, what, w))
		case !j.Plan.Training && isStateOf(n, want):
			// A forward-only plan has no optimizer: the training state is not a difference.
			res.Ignored++
		default:
			e.Extra = append(e.Extra, fmt.Sprintf("%s: %s", n, t))
		}
	}
	e.Matching = len(matches)
	differs := len(e.Missing)+len(e.Different)+len(e.Extra) > 0
	// A partial resume that would load nothing is a wrong checkpoint, not a partial one.
	if differs && (!partial || e.Matching == 0) {
		if m := meta.Model; m != "" && m != j.Plan.Model {
			e.Notes = append(e.Notes, fmt.Sprintf("it is a checkpoint of model %s, the plan is model %s", m, j.Plan.Model))
		} else if h := meta.SourceHash; h != "" && h != j.Plan.SourceHash {
			e.Notes = append(e.Notes, fmt.Sprintf("it was saved from a differently configured model %s (source hash %s, the plan's %s)", j.Plan.Model, h, j.Plan.SourceHash))
		}
		// Every parameter there but some state missing: the optimizer is what changed.
		if missingState && !missingParams && len(e.Different) == 0 {
			e.Notes = append(e.Notes, fmt.Sprintf("it lacks optimizer state: it was saved with another optimizer (or by a forward-only plan); the plan uses %s", j.Plan.Optimizer))
		}
		return Resumed{}, &fault.InputError{Err: e}
	}
	for _, r := range j.Ranks {
		for i, b := range r.Prog.Buffers {
			if fromStep && b.Name == passes.ScalerOptimizerStep {
				err := j.writeHost(r.Bufs[i], func(t device.Tensor) error { return data.StoreF64(t, []float64{float64(meta.Step)}) })
				if err != nil {
					return Resumed{}, fmt.Errorf("rank %d: %s: %v", r.Index, b.Name, err)
				}
				continue
			}
			if (b.Role == pb.Role_PARAM || b.Role == pb.Role_STATE) && matches[b.Name] {
				// Each rank takes its block of the full tensor from whichever stored blocks
				// it overlaps: any layout resumes any other.
				var off []int64 // nil: the whole tensor
				g := r.shards[i]
				if g != nil {
					off = g.offset
				}
				err := j.writeHost(r.Bufs[i], func(t device.Tensor) error {
					dst := t
					if b.Copy {
						// The 16-bit copy: the fp32 main parameter's block, rounded as the
						// optimizer's cast rounds.
						dst = device.Tensor{Type: ir.Type{DType: ir.F32, Shape: t.Type.Shape}, Data: make([]byte, 4*t.Type.NumElements())}
					}
					if g != nil && g.padded {
						// The checkpoint holds the unpadded tensor: the block's part inside
						// it is read and placed, the padding is zero.
						in := device.Tensor{Type: ir.Type{DType: dst.Type.DType, Shape: g.inside()}}
						in.Data = make([]byte, in.Type.Bytes())
						if in.Type.NumElements() > 0 {
							if err := ck.ReadInto(b.Name, off, in); err != nil {
								return err
							}
						}
						clear(dst.Data)
						unclipBlock(dst, g, in)
					} else if err := ck.ReadInto(b.Name, off, dst); err != nil {
						return err
					}
					if b.Copy {
						return data.StoreF64(t, data.Float64s(dst))
					}
					return nil
				})
				var ie *fault.InputError
				if errors.As(err, &ie) {
					return Resumed{}, err // the checkpoint's fault, named
				}
				if err != nil {
					return Resumed{}, fmt.Errorf("rank %d: %s: %v", r.Index, b.Name, err)
				}
			}
		}
		r.step = res.Step
	}
	res.Loaded, res.Kept = e.Matching, len(e.Missing)+len(e.Different)
	res.Bytes = ck.Bytes()
	res.Ignored += len(e.Extra)
	// The step count continues the learning-rate schedule only if it is the same schedule.
	if o := meta.Optimizer; o != "" && j.Plan.Training && o != j.Plan.Optimizer {
		res.Warning = joinWarning(res.Warning, fmt.Sprintf("the checkpoint was trained with optimizer %s, the plan uses %s: the learning-rate schedule and clipping continue from step %d under the plan's", o, j.Plan.Optimizer, res.Step))
	}
	if h := meta.SourceHash; h != "" && h != j.Plan.SourceHash && !differs {
		res.Warning = joinWarning(res.Warning, fmt.Sprintf("the checkpoint's tensors match, but it was saved from a differently configured model (source hash %s, the plan's %s): check --set and --preset", h, j.Plan.SourceHash))
	}
	return res, nil
}

// isStateOf reports whether a checkpoint tensor is optimizer state of one of the plan's
// parameters, named "<param>.<state>" (passes/optimizer.go).
func isStateOf(name string, params map[string]ir.Type) bool {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 {
		return false
	}
	_, ok := params[name[:i]]
	return ok
}

// SortedNames lists the names in either map once, sorted: the rows of a comparison of two
// sets of tensors.
func SortedNames[A, B any](a map[string]A, b map[string]B) []string {
	names := make([]string, 0, len(a)+len(b))
	for n := range a {
		names = append(names, n)
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// joinWarning adds a warning to those already given.
func joinWarning(have, w string) string {
	if have == "" {
		return w
	}
	return have + "; " + w
}
