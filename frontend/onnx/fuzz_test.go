package onnx

import (
	"os"
	"testing"
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
