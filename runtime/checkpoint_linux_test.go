package runtime_test

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	. "ppc.dev/ppc/runtime"
)

// TestSaveIntoFullFilesystem saves into a real, full file system (a 1 MiB tmpfs, which
// needs root): the save fails with ENOSPC and the previous checkpoint survives intact.
func TestSaveIntoFullFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs (%v)", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	job := trainedJob(t, 1)
	if err := job.Save(dir, 1); err != nil {
		t.Fatal(err)
	}
	good := snapshot(t, dir)
	// Fill what is left.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	filler.Close()
	if _, err := job.Step(Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	err = job.Save(dir, 1)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("save into a full file system: got %v, want ENOSPC", err)
	}
	t.Log(err)
	now := snapshot(t, dir)
	delete(now, "filler")
	if !maps.Equal(now, good) {
		t.Fatal("the failed save changed the previous checkpoint")
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{IndexFile, "filler", "step-00000001"}) {
		t.Fatalf("the failed save left %v", names)
	}
	os.Remove(filepath.Join(dir, "filler"))
	if err := job.Save(dir, 1); err != nil {
		t.Fatalf("save once there is room: %v", err)
	}
}
