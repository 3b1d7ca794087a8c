package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	pb "ppc.dev/ppc/codegen/programpb"
)

// CheckpointFile is the file a checkpoint directory holds.
const CheckpointFile = "checkpoint.safetensors"

// Save writes every parameter and optimizer state, merged across ranks (one entry per name),
// with the step count, seed and model hash as metadata, so that any layout can resume it.
func (j *Job) Save(dir string, seed uint64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tensors := j.Buffers(pb.Role_PARAM)
	for n, t := range j.Buffers(pb.Role_STATE) {
		tensors[n] = t
	}
	step := 0
	if len(j.Ranks) > 0 {
		step = j.Ranks[0].step
	}
	meta := map[string]string{"format": "ppc", "step": strconv.Itoa(step), "seed": strconv.FormatUint(seed, 10),
		"source_hash": j.Plan.SourceHash, "model": j.Plan.Model}
	return WriteSafetensors(filepath.Join(dir, CheckpointFile), tensors, meta)
}

// Resume loads parameters and optimizer state from a checkpoint directory into every rank
// that holds them and continues the step count. Every buffer must be present with the same
// dtype and shape.
func (j *Job) Resume(dir string) (step int, seed uint64, err error) {
	path := filepath.Join(dir, CheckpointFile)
	tensors, meta, err := ReadSafetensors(path)
	if err != nil {
		return 0, 0, &InputError{err}
	}
	step, err = strconv.Atoi(meta["step"])
	if err != nil || step < 0 {
		return 0, 0, inputErrorf("%s: metadata has no valid step count", path)
	}
	// The seed picks the synthetic data of the remaining steps, so a caller needs it to
	// continue the run that saved the checkpoint.
	seed, err = strconv.ParseUint(meta["seed"], 10, 64)
	if err != nil {
		return 0, 0, inputErrorf("%s: metadata has no valid seed", path)
	}
	for _, r := range j.Ranks {
		for i, b := range r.Prog.Buffers {
			if b.Role != pb.Role_PARAM && b.Role != pb.Role_STATE {
				continue
			}
			t, ok := tensors[b.Name]
			switch {
			case !ok && meta["model"] != "" && meta["model"] != j.Plan.Model:
				return 0, 0, inputErrorf("%s: has no tensor %q: it is a checkpoint of model %s, the plan is model %s", path, b.Name, meta["model"], j.Plan.Model)
			case !ok && b.Role == pb.Role_STATE:
				return 0, 0, inputErrorf("%s: has no optimizer state %q: it was saved with another optimizer (or by a forward-only plan); the plan uses %s", path, b.Name, j.Plan.Optimizer)
			case !ok:
				return 0, 0, inputErrorf("%s: has no tensor %q", path, b.Name)
			}
			want := r.Bufs[i].Type
			if !t.Type.Equal(want) {
				return 0, 0, inputErrorf("%s: tensor %q is %s, the plan needs %s", path, b.Name, t.Type, want)
			}
			copy(r.Bufs[i].Data, t.Data)
		}
		r.step = step
	}
	if h := meta["source_hash"]; h != "" && h != j.Plan.SourceHash {
		return step, seed, fmt.Errorf("warning: checkpoint was saved from a different model source (hash %s, plan %s)", h, j.Plan.SourceHash)
	}
	return step, seed, nil
}
