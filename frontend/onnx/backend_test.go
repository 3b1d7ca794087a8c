package onnx

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// backendDir is the ONNX backend test data shared beside the project, relative to this
// package's directory.
const backendDir = "../../../shared/testdata/onnx-backend"

// outOfScope lists the backend models that use sequence, string or training ops, with the op
// the importer must name in its error. Every other model must import and verify.
var outOfScope = map[string]string{
	"simple/test_gradient_of_add":                                  "ai.onnx.preview.training.Gradient",
	"simple/test_gradient_of_add_and_mul":                          "ai.onnx.preview.training.Gradient",
	"simple/test_sequence_model1":                                  "SequenceEmpty",
	"simple/test_sequence_model2":                                  "SequenceConstruct",
	"simple/test_sequence_model3":                                  "SequenceConstruct",
	"simple/test_sequence_model4":                                  "SequenceConstruct",
	"simple/test_sequence_model5":                                  "SequenceConstruct",
	"simple/test_sequence_model6":                                  "SplitToSequence",
	"simple/test_sequence_model7":                                  "SplitToSequence",
	"simple/test_sequence_model8":                                  "SplitToSequence",
	"simple/test_strnorm_model_monday_casesensintive_lower":        "StringNormalizer",
	"simple/test_strnorm_model_monday_casesensintive_nochangecase": "StringNormalizer",
	"simple/test_strnorm_model_monday_casesensintive_upper":        "StringNormalizer",
	"simple/test_strnorm_model_monday_empty_output":                "StringNormalizer",
	"simple/test_strnorm_model_monday_insensintive_upper_twodim":   "StringNormalizer",
	"simple/test_strnorm_model_nostopwords_nochangecase":           "StringNormalizer",
}

// frozenInputs lists graph inputs that feed shape operands (Expand's shape): ppc needs static
// shapes, so the test turns them into initializers holding the test's input data, as a user
// would by exporting them as constants. Importing without freezing must fail naming the input.
var frozenInputs = map[string][]string{
	"simple/test_expand_shape_model1": {"shape"},
	"simple/test_expand_shape_model2": {"shape"},
	"simple/test_expand_shape_model3": {"shape"},
	"simple/test_expand_shape_model4": {"shape"},
}

type backendModel struct {
	key  string // e.g. "simple/test_sign_model"
	path string
}

func backendModels(tb testing.TB) []backendModel {
	tb.Helper()
	info, err := os.Stat(backendDir)
	if errors.Is(err, fs.ErrNotExist) {
		tb.Skipf("ONNX backend test data not found at %s (relative to the package directory): the shared folder is absent", backendDir)
	}
	if err != nil || !info.IsDir() {
		tb.Fatalf("%s: %v", backendDir, err)
	}
	var out []backendModel
	err = filepath.WalkDir(backendDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "model.onnx" {
			rel, _ := filepath.Rel(backendDir, filepath.Dir(path))
			out = append(out, backendModel{key: filepath.ToSlash(rel), path: path})
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

func readTensor(t *testing.T, path string) *onnxpb.TensorProto {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tp onnxpb.TensorProto
	if err := proto.Unmarshal(b, &tp); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &tp
}

// freeze turns the named graph inputs into initializers holding the test data.
func freeze(t *testing.T, dir string, data []byte, names []string) []byte {
	t.Helper()
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for i, in := range m.Graph.Input {
		for _, n := range names {
			if in.Name == n {
				tp := readTensor(t, filepath.Join(dir, "test_data_set_0", fmt.Sprintf("input_%d.pb", i)))
				tp.Name = n
				m.Graph.Initializer = append(m.Graph.Initializer, tp)
			}
		}
	}
	out, err := proto.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBackendModels(t *testing.T) {
	models := backendModels(t)
	seen := map[string]bool{}
	imported, rejected := 0, 0
	for _, bm := range models {
		seen[bm.key] = true
		t.Run(bm.key, func(t *testing.T) {
			data, err := os.ReadFile(bm.path)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Dir(bm.path)
			if op, ok := outOfScope[bm.key]; ok {
				_, err := Import("model.onnx", data, dir, Options{})
				re := regexp.MustCompile(`^model\.onnx: node "[^"]*" \(` + regexp.QuoteMeta(opType(op)) + `\): unsupported op ` + regexp.QuoteMeta(op) + ` \((sequence|string|training) ops are not supported\)$`)
				if err == nil || !re.MatchString(err.Error()) {
					t.Fatalf("want the unsupported-op error for %s, got %v", op, err)
				}
				rejected++
				return
			}
			if names, ok := frozenInputs[bm.key]; ok {
				_, err := Import("model.onnx", data, dir, Options{})
				if err == nil || !strings.Contains(err.Error(), `input "shape" (shape) must be a compile-time constant`) {
					t.Fatalf("unfrozen: want a compile-time constant error, got %v", err)
				}
				data = freeze(t, dir, data, names)
			}
			mod, err := Import("model.onnx", data, dir, Options{})
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			imported++
			f := mod.Func(ir.ForwardFunc)
			for i, r := range f.Results {
				tp := readTensor(t, filepath.Join(dir, "test_data_set_0", fmt.Sprintf("output_%d.pb", i)))
				dt, err := irDType(tp.DataType)
				if err != nil {
					t.Fatalf("output %d: %v", i, err)
				}
				want := ir.Type{DType: dt, Shape: make(ir.Shape, len(tp.Dims))}
				for j, d := range tp.Dims {
					want.Shape[j] = int(d)
				}
				if !r.Type.Equal(want) {
					t.Errorf("output %d: IR type %s, test data %s", i, r.Type, want)
				}
			}
			// The printed module parses back and prints identically.
			text := mod.String()
			back, err := ir.ParseAndVerify("model.ir", text)
			if err != nil {
				t.Fatalf("printed IR does not parse: %v\n%s", err, text)
			}
			if back.String() != text {
				t.Errorf("print/parse/print differs")
			}
		})
	}
	for k := range outOfScope {
		if !seen[k] {
			t.Errorf("out-of-scope model %s not found", k)
		}
	}
	t.Logf("%d models: %d imported, %d rejected as out of scope", len(models), imported, rejected)
}

func opType(op string) string {
	if i := strings.LastIndexByte(op, '.'); i >= 0 {
		return op[i+1:]
	}
	return op
}
