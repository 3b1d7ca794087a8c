package checkpoint_test

import (
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/golden"
	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime"
	. "ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/dist"
	"ppc.dev/ppc/runtime/fault"
)

// trainedJob loads the MLP training plan, initialised and trained for steps steps.
func trainedJob(t *testing.T, steps int) *runtime.Job {
	t.Helper()
	job, err := runtime.Load(jobtest.Compile(t, "../../testdata/ir/mlp.ir", compiler.Options{Microbatches: 1}), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Init(1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < steps; i++ {
		if _, err := job.Step(runtime.Options{Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return job
}

// snapshot is every file under dir by relative path, with its content (the lock aside).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := golden.Files(dir, LockFile)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestFailedSaveKeepsCheckpoint: a save that fails part-way (a full disk, an interruption),
// in a shard or in the index, leaves the previous checkpoint byte for byte and nothing
// else; a first save that fails leaves nothing.
func TestFailedSaveKeepsCheckpoint(t *testing.T) {
	job := trainedJob(t, 1)
	dir := t.TempDir()
	if err := job.Save(dir, 1); err != nil {
		t.Fatal(err)
	}
	good := snapshot(t, dir)
	if len(good) != 2 {
		t.Fatalf("the checkpoint holds %v", slices.Sorted(maps.Keys(good)))
	}
	if _, err := job.Step(runtime.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	size := len(good["step-00000001/rank-00000.safetensors"])
	for _, at := range []int{0, 5, 100, size / 2, size - 1, size + 10, size + 200} {
		for _, cause := range []error{syscall.ENOSPC, errors.New("interrupted")} {
			written := 0 // bytes across every file the save writes: the shard, then the index
			restore := SetWrapSaveFile(func(w io.Writer) io.Writer {
				f := &jobtest.FailingWriter{W: w, N: at - written, Err: cause}
				return writerFunc(func(p []byte) (int, error) {
					n, err := f.Write(p)
					written += n
					return n, err
				})
			})
			err := job.Save(dir, 1)
			restore()
			if !errors.Is(err, cause) || !strings.Contains(err.Error(), "the previous checkpoint in "+dir+" is intact") {
				t.Fatalf("save failing after %d bytes: got %v, want %v saying the checkpoint is intact", at, err, cause)
			}
			if now := snapshot(t, dir); !maps.Equal(now, good) {
				t.Fatalf("save failing after %d bytes changed the checkpoint directory: %v", at, slices.Sorted(maps.Keys(now)))
			}
			if names := jobtest.DirNames(t, dir); !slices.Equal(names, []string{IndexFile, "step-00000001"}) {
				t.Fatalf("save failing after %d bytes left %v", at, names)
			}
		}
	}
	// The failed saves did not disturb a later one, which resumes at step 2.
	if err := job.Save(dir, 1); err != nil {
		t.Fatal(err)
	}
	if names := jobtest.DirNames(t, dir); !slices.Equal(names, []string{IndexFile, "step-00000002"}) {
		t.Fatalf("the save left %v", names)
	}
	if r, err := trainedJob(t, 0).Resume(dir, false); err != nil || r.Step != 2 {
		t.Fatalf("resume after failed saves: %+v %v", r, err)
	}
	// Saving the same step again writes beside the committed files, never over them.
	if err := job.Save(dir, 1); err != nil {
		t.Fatal(err)
	}
	if names := jobtest.DirNames(t, dir); !slices.Equal(names, []string{IndexFile, "step-00000002-b"}) {
		t.Fatalf("the second save of step 2 left %v", names)
	}

	empty := t.TempDir()
	restore := SetWrapSaveFile(func(w io.Writer) io.Writer { return &jobtest.FailingWriter{W: w, N: 64, Err: syscall.ENOSPC} })
	defer restore()
	if err := job.Save(empty, 1); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("first save failing: %v", err)
	}
	if names := jobtest.DirNames(t, empty); len(names) != 0 {
		t.Fatalf("a failed first save left %v", names)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestLockDir: a second claim on a checkpoint directory is refused, naming the directory and
// the holder; releasing the lock removes the lock file; taking it clears temporary files
// that a killed save left.
func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	lock, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockDir(dir)
	want := dir + " is in use: process " + strconv.Itoa(os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second lock: got %v, want %q", err, want)
	}
	if err := lock.Unlock(); err != nil {
		t.Fatal(err)
	}
	if names := jobtest.DirNames(t, dir); len(names) != 0 {
		t.Fatalf("unlock left %v", names)
	}
	stale := filepath.Join(dir, "."+SingleFile+".tmp-12345")
	os.WriteFile(stale, []byte("half a checkpoint"), 0o644)
	lock, err = LockDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	defer lock.Unlock()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("a killed save's temporary file survived the next lock: %v", err)
	}
}

// FuzzReadCheckpoint: an arbitrary index and shard file (a hand-edited, truncated or hostile
// checkpoint) is read without a panic and without allocating what the files do not hold;
// a checkpoint that reads has every tensor whole. Resume, which reads by byte range into the
// plan's buffers, refuses it with an input error or loads it, never panics.
func FuzzReadCheckpoint(f *testing.F) {
	job := trainedJob(&testing.T{}, 0)
	into := trainedJob(&testing.T{}, 0)
	seedDir := f.TempDir()
	if err := job.Save(seedDir, 1); err != nil {
		f.Fatal(err)
	}
	index, _ := os.ReadFile(filepath.Join(seedDir, IndexFile))
	shard, _ := os.ReadFile(filepath.Join(seedDir, "step-00000000", "rank-00000.safetensors"))
	f.Add(index, shard)
	f.Add([]byte(`{"format":"ppc-checkpoint","version":1,"dir":"step-00000000","tensors":{"w":{"dtype":"F32","shape":[1099511627776],"blocks":[]}}}`), shard)
	f.Fuzz(func(t *testing.T, index, shard []byte) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "step-00000000"), 0o755)
		os.WriteFile(filepath.Join(dir, IndexFile), index, 0o644)
		os.WriteFile(filepath.Join(dir, "step-00000000", "rank-00000.safetensors"), shard, 0o644)
		if _, err := into.Resume(dir, true); err != nil {
			var ie *fault.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("resume: not an input error: %v", err)
			}
		}
		tensors, _, err := Read(dir)
		if err != nil {
			var ie *fault.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("not an input error: %v", err)
			}
			return
		}
		for name, x := range tensors {
			if int64(len(x.Data)) != x.Type.Bytes() {
				t.Fatalf("%s: %d bytes for %s", name, len(x.Data), x.Type)
			}
		}
	})
}

const gptPPM = "../../testdata/models/gpt.ppm"

// TestSaveAllFailure: a multi-process save that fails on one rank (a full disk) ends as an
// in-process save does: the rank it struck reports the write failure, the others that the
// checkpoint was not saved because of that rank (a run failure, not bad input), every one
// that the previous checkpoint is intact, and nothing the failed save wrote is left behind.
// A failure to write the index is rank 0's own write failure.
func TestSaveAllFailure(t *testing.T) {
	dir := jobtest.Compile(t, gptPPM, jobtest.GPT(2, 1, 1, 0))
	saveAll := func(jobs []*runtime.Job, ck string) []error {
		errs := make([]error, len(jobs))
		var wg sync.WaitGroup
		for r, j := range jobs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = j.SaveAll(ck, 1) }()
		}
		wg.Wait()
		return errs
	}
	failAt := func(suffix string) func() {
		return SetWrapSaveFileAt(func(path string, w io.Writer) io.Writer {
			if strings.HasSuffix(path, suffix) {
				return &jobtest.FailingWriter{W: w, N: 64, Err: syscall.ENOSPC}
			}
			return w
		})
	}
	for _, c := range []struct {
		name, failing string
		previous      bool
	}{
		{"rank-1-file", "rank-00001.safetensors", true},
		{"rank-1-file-first-save", "rank-00001.safetensors", false},
		{"index", IndexFile, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			jobs, _ := jobtest.Join(t, dir, dist.JoinOptions{})
			for _, j := range jobs {
				j.Init(1)
			}
			ck := filepath.Join(t.TempDir(), "ck")
			os.MkdirAll(ck, 0o755)
			if _, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1}); errs[0] != nil || errs[1] != nil {
				t.Fatal(errs)
			}
			if c.previous {
				if errs := saveAll(jobs, ck); errs[0] != nil || errs[1] != nil {
					t.Fatal(errs)
				}
				if _, errs := jobtest.StepAll(jobs, runtime.Options{Seed: 1}); errs[0] != nil || errs[1] != nil {
					t.Fatal(errs)
				}
			}
			before := snapshot(t, ck)
			restore := failAt(c.failing)
			errs := saveAll(jobs, ck)
			restore()
			intact := "; the previous checkpoint in " + ck + " is intact"
			for r, err := range errs {
				t.Logf("rank %d: %v", r, err)
				if err == nil {
					t.Fatalf("rank %d: the failed save succeeded", r)
				}
				if c.previous != strings.HasSuffix(err.Error(), intact) {
					t.Errorf("rank %d: %q, want %q at the end: %v", r, err, intact, c.previous)
				}
			}
			// The rank the disk filled up under: a failed write (ENOSPC, exit 1); the other
			// repeats its message as the run's failure (a dist.RemoteError, exit 1).
			own, other := 1, 0
			if c.failing == IndexFile {
				own, other = 0, 1
			}
			var re *dist.RemoteError
			if !errors.Is(errs[own], syscall.ENOSPC) {
				t.Errorf("rank %d: %v, want ENOSPC", own, errs[own])
			}
			if !errors.As(errs[other], &re) || re.Rank != own || !strings.HasPrefix(re.Msg, "the checkpoint was not saved: ") || !strings.Contains(re.Msg, "no space left on device") {
				t.Errorf("rank %d: %v, want a dist.RemoteError naming rank %d's failure", other, errs[other], own)
			}
			if after := snapshot(t, ck); !maps.Equal(before, after) {
				t.Errorf("the failed save left %v; before it: %v", slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
			}
			if names := jobtest.DirNames(t, ck); c.previous && !slices.Equal(names, []string{IndexFile, "step-00000001"}) || !c.previous && len(names) != 0 {
				t.Errorf("the checkpoint directory holds %v", names)
			}
		})
	}
}
