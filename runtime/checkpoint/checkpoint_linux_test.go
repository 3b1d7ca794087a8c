package checkpoint_test

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"ppc.dev/ppc/internal/diskfull"
	"ppc.dev/ppc/internal/jobtest"
	"ppc.dev/ppc/runtime"
	. "ppc.dev/ppc/runtime/checkpoint"
)

// TestSaveIntoFullFilesystem saves into a real, full file system (a 1 MiB tmpfs, which
// needs root): the save fails with ENOSPC and the previous checkpoint survives intact.
func TestSaveIntoFullFilesystem(t *testing.T) {
	dir := diskfull.Mount(t, "1m")
	job := trainedJob(t, 1)
	if err := job.Save(dir, 1); err != nil {
		t.Fatal(err)
	}
	good := snapshot(t, dir)
	diskfull.Fill(t, dir)
	if _, err := job.Step(runtime.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	err := job.Save(dir, 1)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("save into a full file system: got %v, want ENOSPC", err)
	}
	t.Log(err)
	now := snapshot(t, dir)
	delete(now, "filler")
	if !maps.Equal(now, good) {
		t.Fatal("the failed save changed the previous checkpoint")
	}
	if names := jobtest.DirNames(t, dir); !slices.Equal(names, []string{IndexFile, "filler", "step-00000001"}) {
		t.Fatalf("the failed save left %v", names)
	}
	os.Remove(filepath.Join(dir, "filler"))
	if err := job.Save(dir, 1); err != nil {
		t.Fatalf("save once there is room: %v", err)
	}
}
