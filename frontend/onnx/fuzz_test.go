package onnx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
)

// fuzzSeeds are small models covering the importer's main paths.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, c := range goldenCases {
		seeds = append(seeds, c.model().Bytes(t))
	}
	return seeds
}

// FuzzImport feeds arbitrary bytes to Import: it must return a module or an error, never
// panic, hang or allocate absurdly. Seeds are the backend models (when present) and the
// golden-test models.
func FuzzImport(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	if _, err := os.Stat(backendDir); err == nil {
		for _, bm := range backendModels(f) {
			if data, err := os.ReadFile(bm.path); err == nil && len(data) < 64<<10 {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Import("fuzz.onnx", data, "", Options{Dims: map[string]int{"batch": 2, "seq": 4}})
		if err == nil && m == nil {
			t.Fatal("nil module without an error")
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}

// FuzzReadTensor: any bytes given as a TensorProto file (`ppc infer --input x=FILE.pb`, `ppc
// compare`), with an external-data file beside it, are read without a panic and without
// allocating what the files do not hold; a tensor that reads has every element.
func FuzzReadTensor(f *testing.F) {
	seed := func(t *onnxpb.TensorProto) []byte {
		b, err := proto.Marshal(t)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	ext := make([]byte, 64)
	f.Add(seed(&onnxpb.TensorProto{Name: "x", Dims: []int64{2, 2}, DataType: dtFloat, FloatData: []float32{1, 2, 3, 4}}), ext)
	f.Add(seed(&onnxpb.TensorProto{Name: "x", Dims: []int64{3}, DataType: dtInt64, RawData: make([]byte, 24)}), ext)
	f.Add(seed(&onnxpb.TensorProto{Name: "x", Dims: []int64{1 << 40}, DataType: dtInt64, Int64Data: []int64{1}}), ext)
	f.Add(seed(&onnxpb.TensorProto{Name: "x", Dims: []int64{4}, DataType: dtFloat, DataLocation: onnxpb.TensorProto_EXTERNAL,
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: "location", Value: "x.bin"}, {Key: "offset", Value: "16"}, {Key: "length", Value: "16"}}}), ext)
	f.Fuzz(func(t *testing.T, pb, bin []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "x.pb")
		if err := os.WriteFile(path, pb, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "x.bin"), bin, 0o644); err != nil {
			t.Fatal(err)
		}
		_, d, err := ReadTensor(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		want := d.Type.Bytes()
		if d.Splat {
			want = int64(d.Type.DType.Size())
		}
		if int64(len(d.Data)) != want {
			t.Fatalf("%d bytes for %s", len(d.Data), d.Type)
		}
		if max(want, 0) > 8*int64(len(pb)+len(bin))+64 {
			t.Fatalf("%s from %d + %d bytes", d.Type, len(pb), len(bin))
		}
	})
}
