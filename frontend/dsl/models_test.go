package dsl

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

const modelsDir = "../../testdata/models"

func readModel(t testing.TB, name string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(modelsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func paramCount(m *ir.Module) int64 {
	var n int64
	for _, p := range m.Func(ir.ForwardFunc).Params() {
		n += int64(p.Type.NumElements())
	}
	return n
}

// stages returns the number of pipeline stages the ops are annotated with (0 if none).
func stages(m *ir.Module) int {
	n := 0
	for _, op := range m.Func(ir.ForwardFunc).Ops {
		n = max(n, op.Stage+1)
	}
	return n
}

// TestModels loads every shipped model with every preset (the default too), checks the model
// convention, and checks that the printed IR parses back to the same text.
func TestModels(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(modelsDir, "*.ppm"))
	if err != nil || len(files) < 3 {
		t.Fatalf("models: %v %v", files, err)
	}
	for _, file := range files {
		src := readModel(t, filepath.Base(file))
		presets, err := Presets(file, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, preset := range append([]string{""}, presets...) {
			t.Run(filepath.Base(file)+"/"+preset, func(t *testing.T) {
				m, err := Load(file, src, Options{Preset: preset})
				if err != nil {
					t.Fatal(err)
				}
				checkConvention(t, m)
				if preset == "gpt3-175b" || testing.Short() {
					return // large: covered by TestGPT3NoWeightData
				}
				text := m.String()
				back, err := ir.ParseAndVerify(file, text)
				if err != nil {
					t.Fatalf("printed IR does not parse: %v", err)
				}
				if back.String() != text {
					t.Error("printed IR does not round-trip")
				}
			})
		}
	}
}

// checkConvention checks ir/model.go's model convention.
func checkConvention(t *testing.T, m *ir.Module) {
	t.Helper()
	f := m.Func(ir.ForwardFunc)
	if f == nil || len(m.Funcs) != 1 {
		t.Fatal("want exactly one function, @forward")
	}
	seenParam := false
	for i, a := range f.Args {
		at := f.ArgAttrs[i]
		switch {
		case at.Has(ir.AttrInput):
			if seenParam {
				t.Errorf("input %s after a parameter", a.Name)
			}
			if a.Type.DType.IsInt() && at.Ints("range") == nil {
				t.Errorf("integer input %s has no range", a.Name)
			}
		case at.Has(ir.AttrParam):
			seenParam = true
			init := at.Str(ir.AttrInit, "")
			if !(strings.HasPrefix(init, "normal(") || strings.HasPrefix(init, "uniform(") || init == "zeros" || init == "ones") {
				t.Errorf("param %s has init %q", a.Name, init)
			}
			if at.Has(ir.AttrData) {
				t.Errorf("param %s carries data", a.Name)
			}
		default:
			t.Errorf("argument %s is neither input nor param", a.Name)
		}
	}
	// The loss first, then the model's metrics (f32 scalars).
	if len(f.Results) < 1 || !f.ResultAttrs[0].Has(ir.AttrLoss) || f.Results[0].Type.Rank() != 0 {
		t.Errorf("want a scalar {loss} result first, got %d results", len(f.Results))
	}
	for i := 1; i < len(f.Results); i++ {
		if !f.ResultAttrs[i].Has(ir.AttrMetric) || !f.Results[i].Type.Equal(ir.T(ir.F32)) {
			t.Errorf("result %d is %s %v, want an f32 scalar {metric}", i, f.Results[i].Type, f.ResultAttrs[i])
		}
	}
	if m.Attrs.Get("config") == nil {
		t.Error("no config attribute")
	}
}

// TestParamCounts checks the models against the published parameter counts.
func TestParamCounts(t *testing.T) {
	gpt := readModel(t, "gpt.ppm")
	llama := readModel(t, "llama.ppm")
	load := func(src []byte, preset string) *ir.Module {
		m, err := Load(preset, src, Options{Preset: preset})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// GPT-2 style: N = v·h + seq·h + L·(12h² + 13h) + 2h (tied head, biases, learned positions).
	gptN := func(v, h, l, seq int64) int64 { return v*h + seq*h + l*(12*h*h+13*h) + 2*h }

	tiny := load(gpt, "tiny")
	t.Logf("gpt tiny: %d parameters, %d ops", paramCount(tiny), len(tiny.Func("forward").Ops))
	if got, want := paramCount(tiny), gptN(512, 64, 8, 32); got != want {
		t.Errorf("gpt tiny: %d parameters, want %d", got, want)
	}
	if got := paramCount(load(gpt, "small")); got != 124_439_808 {
		t.Errorf("gpt small: %d parameters, want GPT-2's 124,439,808", got)
	}
	big := paramCount(load(gpt, "gpt3-175b"))
	t.Logf("gpt gpt3-175b: %d parameters", big)
	if want := gptN(50257, 12288, 96, 2048); big != want {
		t.Errorf("gpt3-175b: %d parameters, want %d", big, want)
	}
	// BACKGROUND.md: N ≈ h·v + L·(12h² + 13h) + 2h ≈ 175B; within 1%.
	if approx := float64(12288*50257 + 96*(12*12288*12288+13*12288) + 2*12288); rel(float64(big), approx) > 0.01 || rel(float64(big), 175e9) > 0.01 {
		t.Errorf("gpt3-175b: %d parameters is not within 1%% of %.4g and of 175e9", big, approx)
	}

	t.Logf("llama tiny: %d parameters", paramCount(load(llama, "tiny")))
	if got := paramCount(load(llama, "llama2-7b")); got != 6_738_415_616 {
		t.Errorf("llama2-7b: %d parameters, want 6,738,415,616", got)
	}
	if got := paramCount(load(llama, "llama3-8b")); got != 8_030_261_248 {
		t.Errorf("llama3-8b: %d parameters, want 8,030,261,248", got)
	}
	mlp := load(readModel(t, "mlp.ppm"), "tiny")
	t.Logf("mlp: %d parameters", paramCount(mlp))
}

func rel(a, b float64) float64 {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d / b
}

// TestModelStages checks the stage markers: gpt and llama tiny split into 8 stages (one per
// layer, embedding with the first, head and loss with the last), and mlp into 8 (one per layer, head with the last).
func TestModelStages(t *testing.T) {
	for _, tc := range []struct {
		file   string
		stages int
	}{{"gpt.ppm", 8}, {"llama.ppm", 8}, {"mlp.ppm", 8}} {
		m, err := Load(tc.file, readModel(t, tc.file), Options{Preset: "tiny"})
		if err != nil {
			t.Fatal(err)
		}
		if got := stages(m); got != tc.stages {
			t.Errorf("%s: %d stages, want %d", tc.file, got, tc.stages)
		}
		f := m.Func("forward")
		if first := f.Ops[0]; first.Stage != 0 {
			t.Errorf("%s: first op %s in stage %d", tc.file, first.Name(), first.Stage)
		}
		if loss := f.Results[0].Def; loss.Stage != tc.stages-1 || !loss.Def.Has(ir.Loss) {
			t.Errorf("%s: loss op %s in stage %d", tc.file, loss.Name(), loss.Stage)
		}
	}
}

// TestMicrobatches: gpt tiny cut into 8 and 16 micro-batches describes one micro-batch.
func TestMicrobatches(t *testing.T) {
	src := readModel(t, "gpt.ppm")
	for _, tc := range []struct {
		m     int
		shape string
	}{{1, "i64[16,32]"}, {8, "i64[2,32]"}, {16, "i64[1,32]"}} {
		m, err := Load("gpt.ppm", src, Options{Preset: "tiny", Microbatches: tc.m})
		if err != nil {
			t.Fatal(err)
		}
		f := m.Func("forward")
		if got := f.Args[0].Type.String(); got != tc.shape {
			t.Errorf("M=%d: tokens %s, want %s", tc.m, got, tc.shape)
		}
		if got := m.Attrs.Int("microbatches", 0); got != tc.m {
			t.Errorf("M=%d: module says microbatches = %d", tc.m, got)
		}
		if got := f.Results[0].Def.Operands[0].Type.Shape[0]; got != 16/tc.m {
			t.Errorf("M=%d: logits batch %d", tc.m, got)
		}
	}
	if _, err := Load("gpt.ppm", src, Options{Preset: "tiny", Microbatches: 3}); err == nil {
		t.Error("M=3 divides batch 16?")
	}
}

// TestGPT3NoWeightData: importing GPT-3 175B allocates no weight data: parameters are
// declarations, and constants are scalars or splats.
func TestGPT3NoWeightData(t *testing.T) {
	src := readModel(t, "gpt.ppm")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, err := Load("gpt.ppm", src, Options{Preset: "gpt3-175b"})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("gpt3-175b: %d ops, %d parameters, %.1f MB allocated", len(m.Func("forward").Ops), paramCount(m), float64(alloc)/1e6)
	if alloc > 200<<20 {
		t.Errorf("import allocated %d bytes", alloc)
	}
	dense := 0
	for _, op := range m.Func("forward").Ops {
		for _, a := range op.Attrs {
			if d, ok := a.Value.(*ir.Dense); ok {
				dense += len(d.Data)
			}
		}
	}
	for _, at := range m.Func("forward").ArgAttrs {
		if at.Has(ir.AttrData) {
			t.Fatal("a parameter carries data")
		}
	}
	if dense > 4096 {
		t.Errorf("constants hold %d bytes", dense)
	}
}

// BenchmarkLoadGPT3 imports gpt.ppm --preset gpt3-175b (budget: under 1 s).
func BenchmarkLoadGPT3(b *testing.B) {
	src := readModel(b, "gpt.ppm")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("gpt.ppm", src, Options{Preset: "gpt3-175b"}); err != nil {
			b.Fatal(err)
		}
	}
}
