package checkpoint_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime"
	. "ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/fault"
)

// savedGPT compiles the tiny GPT with opts, trains it for one step with every rank in this
// process, saves it and returns the plan, the checkpoint and the trained job.
func savedGPT(t testing.TB, opts compiler.Options) (plan, ck string, job *runtime.Job) {
	t.Helper()
	opts.Load = compiler.LoadOptions{Preset: "tiny"}
	plan = jobtest.Compile(t, "../../testdata/models/gpt.ppm", opts)
	job, err := runtime.Load(plan, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Init(1); err != nil {
		t.Fatal(err)
	}
	if _, err := job.Step(runtime.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	ck = filepath.Join(t.TempDir(), "ck")
	if err := job.Save(ck, 1); err != nil {
		t.Fatal(err)
	}
	return plan, ck, job
}

// resumeRank loads rank k of plan alone, as one process of a multi-process run does, and
// resumes it from ck.
func resumeRank(t testing.TB, plan, ck string, k int) (*runtime.Job, runtime.Resumed) {
	t.Helper()
	job, err := runtime.LoadRank(plan, cpu.New(), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Init(2); err != nil {
		t.Fatal(err)
	}
	r, err := job.Resume(ck, false)
	if err != nil {
		t.Fatal(err)
	}
	return job, r
}

// TestResumeReadsOwnBlocks: a process resuming one rank of a 2 × 2 (pp × tp) plan reads
// exactly the bytes of that rank's parameters and optimizer state (every process used to
// read and hash the whole checkpoint), and gets the values the run saved.
func TestResumeReadsOwnBlocks(t *testing.T) {
	plan, ck, saved := savedGPT(t, compiler.Options{PP: 2, TP: 2, Microbatches: 2})
	var total int64
	for _, r := range saved.Ranks {
		for i, b := range r.Prog.Buffers {
			if b.Role == pb.Role_PARAM || b.Role == pb.Role_STATE {
				total += r.Bufs[i].Type.Bytes()
			}
		}
	}
	for k := range saved.Ranks {
		job, res := resumeRank(t, plan, ck, k)
		var own int64
		r, want := job.Ranks[0], saved.Ranks[k]
		for i, b := range r.Prog.Buffers {
			if b.Role != pb.Role_PARAM && b.Role != pb.Role_STATE {
				continue
			}
			own += r.Bufs[i].Type.Bytes()
			if !bytes.Equal(r.Bufs[i].Data, want.Bufs[i].Data) {
				t.Errorf("rank %d: %s differs from the saved run's", k, b.Name)
			}
		}
		if res.Bytes != own || own >= total/2 {
			t.Errorf("rank %d read %d bytes of the checkpoint; its own tensors are %d bytes, every rank's %d", k, res.Bytes, own, total)
		}
		if res.Step != 1 {
			t.Errorf("rank %d resumed at step %d", k, res.Step)
		}
	}
	// Another layout reads the stored blocks it overlaps: one rank takes the whole model.
	one := jobtest.Compile(t, "../../testdata/models/gpt.ppm", compiler.Options{Load: compiler.LoadOptions{Preset: "tiny"}, Microbatches: 4})
	if _, res := resumeRank(t, one, ck, 0); res.Bytes < total*9/10 {
		t.Errorf("one rank resuming the whole model read %d bytes of %d", res.Bytes, total)
	}
}

// TestResumeChecksStep: a step edited in the index is refused, whether or not the directory
// was renamed to match (the shard says its step); so is a block that is not what the save
// wrote (its SHA-256), naming the tensor, and an index whose block shapes the files do not
// hold, before anything is allocated.
func TestResumeChecksStep(t *testing.T) {
	job := trainedJob(t, 1)
	dir := t.TempDir()
	if err := job.Save(dir, 1); err != nil {
		t.Fatal(err)
	}
	index, sub := filepath.Join(dir, IndexFile), filepath.Join(dir, "step-00000001")
	shard := filepath.Join(sub, "rank-00000.safetensors")
	good, _ := os.ReadFile(index)
	goodShard, _ := os.ReadFile(shard)
	const huge = "4611686018427387904" // 2^62
	hugeStep := strings.Replace(string(good), `"step": 1,`, `"step": `+huge+`,`, 1)
	// The last tensor's last byte (the tensors are in name order in the file).
	flipped := append([]byte{}, goodShard...)
	flipped[len(flipped)-1] ^= 1
	var names []string
	if tensors, _, err := Read(dir); err == nil {
		for n := range tensors {
			names = append(names, n)
		}
	}
	last := names[0]
	for _, n := range names {
		last = max(last, n)
	}
	for _, c := range []struct {
		name, index string
		shard       []byte
		renamed     bool      // the step directory renamed to the edited step's
		want        [2]string // what Resume says, what Read says
	}{
		{"step edited", hugeStep, goodShard, false, [2]string{"step " + huge + " does not match the checkpoint's directory step-00000001: the index was edited or corrupted"}},
		{"step and directory edited", strings.Replace(hugeStep, `"step-00000001"`, `"step-`+huge+`"`, 1), goodShard, true, [2]string{`rank-00000.safetensors holds step "1", the index says step ` + huge}},
		// Resume reads the blocks, checking each; Read checks the whole file too.
		{"block changed", string(good), flipped, false, [2]string{"tensor " + last + "'s block at [0", "rank-00000.safetensors is not the file the checkpoint wrote"}},
		// Resume compares the tensors' types with the plan's first.
		{"block shapes edited", regexp.MustCompile(`"shape": \[\s*(\d+),`).ReplaceAllString(string(good), `"shape": [${1}000000000,`), goodShard, false,
			[2]string{"does not match the plan", "tensor w1: " + shard + " holds its block at [0 0] as f32[32,64], the index says f32[32000000000,64]"}},
	} {
		os.WriteFile(index, []byte(c.index), 0o644)
		os.WriteFile(shard, c.shard, 0o644)
		if c.renamed {
			os.Rename(sub, filepath.Join(dir, "step-"+huge))
		}
		for i, read := range []func() error{
			func() error { _, err := trainedJob(t, 0).Resume(dir, false); return err },
			func() error { _, _, err := Read(dir); return err },
		} {
			want := c.want[i]
			if want == "" {
				want = c.want[0]
			}
			err := read()
			var ie *fault.InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s (reader %d): got %v, want an input error saying %q", c.name, i, err, want)
			}
		}
		if c.renamed {
			os.Rename(filepath.Join(dir, "step-"+huge), sub)
		}
	}
	os.WriteFile(index, good, 0o644)
	os.WriteFile(shard, goodShard, 0o644)
	if _, err := trainedJob(t, 0).Resume(dir, false); err != nil {
		t.Fatalf("the restored checkpoint: %v", err)
	}
}

// BenchmarkResume measures what resuming costs one process of a world of 1 to 8 ranks (the
// tiny GPT split by pp × tp): "rank" resumes rank 0 alone, reading the blocks it holds;
// "whole" reads the whole checkpoint, as every process did before. MB/rank is the tensor
// data read.
func BenchmarkResume(b *testing.B) {
	for _, l := range []struct{ pp, tp int }{{1, 1}, {2, 1}, {2, 2}, {4, 2}} {
		plan, ck, _ := savedGPT(b, compiler.Options{PP: l.pp, TP: l.tp, Microbatches: 4})
		world := l.pp * l.tp
		b.Run(fmt.Sprintf("world=%d/rank", world), func(b *testing.B) {
			job, err := runtime.LoadRank(plan, cpu.New(), 0)
			if err != nil {
				b.Fatal(err)
			}
			var r runtime.Resumed
			for b.Loop() {
				if r, err = job.Resume(ck, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(r.Bytes)/1e6, "MB/rank")
		})
		b.Run(fmt.Sprintf("world=%d/whole", world), func(b *testing.B) {
			var n int64
			for b.Loop() {
				tensors, _, err := Read(ck)
				if err != nil {
					b.Fatal(err)
				}
				n = 0
				for _, t := range tensors {
					n += int64(len(t.Data))
				}
			}
			b.ReportMetric(float64(n)/1e6, "MB/rank")
		})
	}
}

// TestResumeNeedsSeed: the seed picks the data of the remaining steps, so a checkpoint
// without one cannot continue a run.
func TestResumeNeedsSeed(t *testing.T) {
	dir := jobtest.Compile(t, "../../testdata/ir/mlp.ir", compiler.Options{Microbatches: 1})
	job, err := runtime.Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	ck := t.TempDir()
	if err := WriteSafetensors(filepath.Join(ck, SingleFile), map[string]device.Tensor{}, map[string]string{"step": "2"}); err != nil {
		t.Fatal(err)
	}
	var ie *fault.InputError
	if _, err := job.Resume(ck, false); !errors.As(err, &ie) || !strings.Contains(err.Error(), "metadata has no valid seed") {
		t.Fatalf("got %v", err)
	}
}
