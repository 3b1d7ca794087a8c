package compiler

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/frontend/onnx"
	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/runtime/data"
)

const backendDir = "../../shared/testdata/onnx-backend"

// TestONNXBackendNumerics runs every ONNX backend test model that ppc supports on
// test_data_set_0's inputs and checks each output against output_N.pb within rtol 1e-4 and
// atol 1e-5 — ONNX's own expected results, an independent reference for the importer, the
// lowering and every CPU kernel involved. Models using unsupported ops (sequences, strings,
// gradients) must fail with the unsupported-op error instead.
func TestONNXBackendNumerics(t *testing.T) {
	if _, err := os.Stat(backendDir); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("ONNX backend test data not found at %s: the shared folder is absent", backendDir)
	}
	var models []string
	filepath.WalkDir(backendDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "model.onnx" {
			models = append(models, p)
		}
		return nil
	})
	sort.Strings(models)
	if len(models) == 0 {
		t.Fatal("no models found")
	}
	passed, rejected := 0, 0
	distributed := map[InferMesh]int{}
	for _, model := range models {
		dir := filepath.Dir(model)
		name, _ := filepath.Rel(backendDir, dir)
		t.Run(name, func(t *testing.T) {
			given, err := backendInputs(model, filepath.Join(dir, "test_data_set_0"))
			if err != nil {
				t.Fatal(err)
			}
			outs, _, err := Infer(model, LoadOptions{}, InferMesh{}, given, 1)
			if err != nil {
				if strings.Contains(err.Error(), "unsupported op") {
					rejected++
					return
				}
				t.Fatalf("infer: %v", err)
			}
			for i, o := range outs {
				path := filepath.Join(dir, "test_data_set_0", "output_"+itoa(i)+".pb")
				_, want, err := onnx.ReadTensor(path)
				if err != nil {
					t.Fatal(err)
				}
				if !want.Type.Equal(o.Tensor.Type) {
					t.Fatalf("output %d (%s) is %s, expected %s", i, o.Name, o.Tensor.Type, want.Type)
				}
				got := data.Float64s(o.Tensor)
				bad, worst := 0, 0.0
				for k := range got {
					w := want.F64(k)
					d := math.Abs(got[k] - w)
					if math.IsNaN(w) && math.IsNaN(got[k]) {
						continue
					}
					if !(d <= 1e-5+1e-4*math.Abs(w)) {
						bad++
						worst = math.Max(worst, d)
					}
				}
				if bad > 0 {
					t.Errorf("output %d (%s): %d of %d elements differ beyond rtol 1e-4/atol 1e-5 (max abs error %.3g)", i, o.Name, bad, len(got), worst)
				}
			}
			passed++
			// Distributed inference runs the same forward: on two tensor-parallel ranks and
			// on two pipeline stages (where the model has two stages' worth of ops) the
			// outputs are the one-device outputs within rtol 1e-5.
			for _, mesh := range []InferMesh{{TP: 2}, {PP: 2}, {PP: 2, TP: 2}} {
				douts, _, err := Infer(model, LoadOptions{}, mesh, given, 1)
				if err != nil {
					if mesh.PP > 1 && strings.Contains(err.Error(), "stage") {
						continue // too few ops to cut into two stages
					}
					t.Fatalf("infer on %+v: %v", mesh, err)
				}
				distributed[mesh]++
				for i, o := range douts {
					a, b := data.Float64s(outs[i].Tensor), data.Float64s(o.Tensor)
					for k := range a {
						if d := math.Abs(a[k] - b[k]); !(d <= 1e-5*math.Abs(a[k])) && !(math.IsNaN(a[k]) && math.IsNaN(b[k])) && !(d == 0) {
							t.Fatalf("infer on %+v: output %d (%s) element %d is %v, one device gives %v", mesh, i, o.Name, k, b[k], a[k])
						}
					}
				}
			}
		})
	}
	t.Logf("%d models reproduce ONNX's outputs, %d rejected as unsupported; distributed inference agrees on %v", passed, rejected, distributed)
	if passed < 100 {
		t.Errorf("only %d models passed", passed)
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// backendInputs maps the model's graph inputs to test_data_set_0/input_N.pb, by the tensor's
// own name or, when it has none, by position among the inputs that are not initializers.
func backendInputs(model, dataDir string) (map[string]string, error) {
	data, err := os.ReadFile(model)
	if err != nil {
		return nil, err
	}
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	inits := map[string]bool{}
	for _, in := range m.GetGraph().GetInitializer() {
		inits[in.GetName()] = true
	}
	var inputs []string
	for _, in := range m.GetGraph().GetInput() {
		if !inits[in.GetName()] {
			inputs = append(inputs, in.GetName())
		}
	}
	given := map[string]string{}
	for i := 0; ; i++ {
		p := filepath.Join(dataDir, "input_"+itoa(i)+".pb")
		if _, err := os.Stat(p); err != nil {
			break
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var tp onnxpb.TensorProto
		if err := proto.Unmarshal(raw, &tp); err != nil {
			return nil, err
		}
		name := tp.GetName()
		if name == "" || !contains(inputs, name) {
			if i >= len(inputs) {
				break
			}
			name = inputs[i]
		}
		given[name] = p
	}
	return given, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
