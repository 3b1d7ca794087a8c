package cuda_test

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/kernels/cuda/cudatest"
)

var update = flag.Bool("update", false, "rewrite testdata/kernels.sha256 from the generators")

// TestKernelSourcesUnchanged: ppc_cuda.h and the CUDA C the generators write for every case
// (cudatest.Kernels) are, byte for byte, what testdata/kernels.sha256 records, a hash per
// kernel. On a GPU a kernel is named by its source's hash and NVRTC's on-disk cache is keyed
// by the source, so one changed byte renames and recompiles a program's kernels; a move or a
// refactor of the generators must change none. A deliberate change of the generated code
// rewrites the file: go test ./kernels/cuda -run TestKernelSourcesUnchanged -update.
func TestKernelSourcesUnchanged(t *testing.T) {
	hash := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return hex.EncodeToString(h[:8])
	}
	lines := []string{hash(cuda.Header) + " ppc_cuda.h"}
	for _, k := range cudatest.Kernels(t) {
		lines = append(lines, hash(k.Body)+" "+k.Name)
	}
	path := filepath.Join("testdata", "kernels.sha256")
	if *update {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // name → hash
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		h, name, _ := strings.Cut(l, " ")
		want[name] = h
	}
	var diffs []string
	for _, l := range lines {
		h, name, _ := strings.Cut(l, " ")
		switch w, ok := want[name]; {
		case !ok:
			diffs = append(diffs, name+": new")
		case w != h:
			diffs = append(diffs, name+": changed")
		}
		delete(want, name)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		diffs = append(diffs, name+": gone")
	}
	if len(diffs) > 0 {
		t.Errorf("%d of %d sources differ from %s (-update rewrites it when the change is meant):\n%s", len(diffs), len(lines), path, strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
}
