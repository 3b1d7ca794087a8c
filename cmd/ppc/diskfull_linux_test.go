package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/internal/diskfull"
)

// TestNprocSaveIntoFullFilesystem: a save under --nproc into a full file system (a small
// tmpfs, which needs root) fails as the in-process run's does: exit 1 (a failed write, not
// bad input), "the previous checkpoint … is intact", and the failed save's files removed.
func TestNprocSaveIntoFullFilesystem(t *testing.T) {
	dir := diskfull.Mount(t, "16m")
	plan := compileGPT(t, "--pp", "2")
	ck := filepath.Join(dir, "ck")
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "1", "--nproc", "2", "--save", ck); code != 0 {
		t.Fatal(errOut)
	}
	good := dirSnapshot(t, ck)
	filler := diskfull.Fill(t, dir)
	code, _, errOut := ppc(t, "", "run", plan, "--steps", "1", "--nproc", "2", "--resume", ck, "--save", ck)
	if code != exitFailed || !strings.Contains(errOut, "no space left on device") || !strings.Contains(errOut, "; the previous checkpoint in "+ck+" is intact\n") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if now := dirSnapshot(t, ck); !maps.Equal(now, good) {
		t.Fatalf("the failed save changed the checkpoint directory: %v, before %v", slices.Sorted(maps.Keys(now)), slices.Sorted(maps.Keys(good)))
	}
	os.Remove(filler)
	if code, _, errOut := ppc(t, "", "run", plan, "--steps", "1", "--nproc", "2", "--resume", ck, "--save", ck); code != 0 {
		t.Fatalf("save once there is room: %s", errOut)
	}
}
