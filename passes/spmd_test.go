package passes

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"ppc.dev/ppc/frontend/dsl"
	"ppc.dev/ppc/internal/golden"
	"ppc.dev/ppc/ir"
)

// TestSpmdPartitionMatchesOneDevice is the IR-level equivalence of tensor parallelism: the
// model's loss and every parameter gradient, computed by @train on one device, against the
// partitioned @train run on tp ranks in lockstep (spmdEval, the reference semantics of the
// collectives). A split parameter's gradient on rank r must be block r of the one-device
// gradient; a whole parameter's must be the whole gradient on every rank.
func TestSpmdPartitionMatchesOneDevice(t *testing.T) {
	small := map[string]string{"n_layers": "2", "batch": "2", "seq": "8"}
	cases := []struct {
		name, model string
		set         map[string]string
		tp          int
		sp          bool
	}{
		{"gpt tp2", "gpt.ppm", small, 2, false},
		{"gpt tp4", "gpt.ppm", small, 4, false},
		{"gpt tp2 sp", "gpt.ppm", small, 2, true},
		{"gpt tp4 sp", "gpt.ppm", small, 4, true},
		{"llama gqa tp2", "llama.ppm", small, 2, false},
		{"llama gqa tp2 sp", "llama.ppm", small, 2, true},
		{"mlp tp2", "mlp.ppm", nil, 2, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := dsl.LoadFile("../testdata/models/"+c.model, dsl.Options{Set: c.set, Preset: presetFor(c.model)})
			if err != nil {
				t.Fatal(err)
			}
			m.SetMesh([]ir.MeshAxis{{Name: "tp", Size: c.tp}})
			ref := m.Clone()
			runGradPipeline(t, ref, "autodiff")
			part := m.Clone()
			runGradPipeline(t, part, fmt.Sprintf("shard-annotate,shard-propagate{sp=%t},spmd-partition,autodiff", c.sp))

			fwd := m.Func(ir.ForwardFunc)
			full := randomArgs(fwd, rand.New(rand.NewPCG(5, uint64(c.tp))), func(i int) int { return fwd.ArgAttrs[i].Ints("range")[1] })
			checkSpmdTrain(t, ref, part, full, c.tp)
		})
	}
}

// checkSpmdTrain compares the partitioned @train of part, run on tp ranks by spmdEval, with
// the one-device @train of ref on the whole arguments full: the loss on every rank, and
// every parameter gradient — block r of the one-device gradient on rank r for a split
// parameter, the whole gradient on every rank for a whole one.
func checkSpmdTrain(t *testing.T, ref, part *ir.Module, full []*ir.Dense, tp int) {
	t.Helper()
	want, err := evalFunc(ref.Func(TrainFunc), full)
	if err != nil {
		t.Fatal(err)
	}
	train := part.Func(TrainFunc)
	layouts := make([]lay, len(train.Args))
	args := make([][]*ir.Dense, tp)
	split := 0
	for i, a := range train.Args {
		s, err := ir.ArgSharding(train, i)
		if err != nil {
			t.Fatal(err)
		}
		if layouts[i], err = layOf(s, tpAxis); err != nil {
			t.Fatal(err)
		}
		if layouts[i].dim >= 0 {
			split++
		}
		for r := range tp {
			args[r] = append(args[r], blockOf(full[i], layouts[i].dim, r, tp, a.Type))
		}
	}
	if split == 0 {
		t.Fatal("no parameter was split")
	}
	got, err := spmdEval(train, args)
	if err != nil {
		t.Fatalf("%v\n%s", err, train)
	}
	params := 0
	for i := range train.Args {
		if !train.ArgAttrs[i].Has(ir.AttrParam) {
			continue
		}
		params++
		for r := range tp {
			w := blockOf(want[params], layouts[i].dim, r, tp, got[r][params].Type)
			closeEnough(t, fmt.Sprintf("rank %d: gradient of %%%s", r, train.Args[i].Name), got[r][params], w)
		}
	}
	for r := range tp {
		closeEnough(t, fmt.Sprintf("rank %d: loss", r), got[r][0], want[0])
	}
	if t.Failed() {
		t.Logf("partitioned @train:\n%s", train)
	}
}

func presetFor(model string) string {
	if model == "mlp.ppm" {
		return ""
	}
	return "tiny"
}

// blockOf is block r of tp along dim d of a whole tensor (the tensor itself when d < 0).
func blockOf(x *ir.Dense, d, r, tp int, local ir.Type) *ir.Dense {
	if d < 0 {
		return x
	}
	full := x.Type.Shape
	v := make([]float64, local.NumElements())
	c := make([]int, len(full))
	for k := range v {
		rem := k
		for i := len(full) - 1; i >= 0; i-- {
			c[i] = rem % local.Shape[i]
			rem /= local.Shape[i]
		}
		c[d] += r * local.Shape[d]
		lin := 0
		for i := range full {
			lin = lin*full[i] + c[i]
		}
		v[k] = x.F64(lin)
	}
	return ir.NewDenseF64(ir.Type{DType: x.Type.DType, Shape: local.Shape}, v)
}

// closeEnough compares in f32's precision: the partitioned model adds partial sums in
// another order than one device does.
func closeEnough(t *testing.T, what string, got, want *ir.Dense) {
	t.Helper()
	if !got.Type.Equal(want.Type) {
		t.Errorf("%s: %s, want %s", what, got.Type, want.Type)
		return
	}
	for k := range got.Len() {
		a, b := got.F64(k), want.F64(k)
		if d := math.Abs(a - b); d > 1e-5 && d > 1e-4*math.Max(math.Abs(a), math.Abs(b)) {
			t.Errorf("%s: element %d is %.8g, want %.8g", what, k, a, b)
			return
		}
	}
}

// TestSpmdPassesNeverPanic runs the tensor-parallel passes over every case of the golden
// corpus and the shipped IR models on a tp axis of 2 and 4: whatever the IR, they either
// partition it into IR that verifies or return an error — never a panic.
func TestSpmdPassesNeverPanic(t *testing.T) {
	files, _ := filepath.Glob("../testdata/passes/*.ir")
	more, _ := filepath.Glob("../testdata/ir/*.ir")
	files = append(files, more...)
	pl, err := ParsePipeline("shard-annotate,shard-propagate{sp=true},spmd-partition,autodiff")
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range golden.Split(string(data)) {
			for _, tp := range []int{2, 4} {
				m, err := ir.ParseAndVerify(file, c.Src)
				if err != nil || m.Func(ir.ForwardFunc) == nil || m.Attrs.Has(ir.AttrPartitioned) {
					continue
				}
				m.SetMesh([]ir.MeshAxis{{Name: "tp", Size: tp}})
				ran++
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s:%d at tp %d: panic: %v", file, c.FirstLine, tp, r)
						}
					}()
					var pe *PassError
					if err := Run(m, pl, Config{VerifyEach: true, ReproDir: t.TempDir()}); errors.As(err, &pe) && pe.Internal {
						t.Errorf("%s:%d at tp %d: %v", file, c.FirstLine, tp, err)
					}
				}()
			}
		}
	}
	if ran < 20 {
		t.Fatalf("only %d modules tried", ran)
	}
}

// randomArgs draws @forward's arguments: floats uniform in [-0.5, 0.5), integers (token ids,
// labels) in [0, intHi(argument index)).
func randomArgs(fwd *ir.Func, rng *rand.Rand, intHi func(i int) int) []*ir.Dense {
	full := make([]*ir.Dense, len(fwd.Args))
	for i, a := range fwd.Args {
		v := make([]float64, a.Type.NumElements())
		for k := range v {
			if a.Type.DType.IsFloat() {
				v[k] = rng.Float64() - 0.5
			} else {
				v[k] = float64(rng.IntN(intHi(i)))
			}
		}
		full[i] = ir.NewDenseF64(a.Type, v)
	}
	return full
}
