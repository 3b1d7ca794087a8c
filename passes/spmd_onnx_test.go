package passes

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"ppc.dev/ppc/frontend/onnx"
	"ppc.dev/ppc/ir"
)

// gptTinyONNX is the exporter-pattern GPT of testdata/models/gen_gpt_onnx.go: vocab 64,
// d_model 32, batch symbolic.
const gptTinyONNX = "../testdata/models/gpt-tiny.onnx"

// loadGPTTinyONNX imports gpt-tiny.onnx for a batch of 2 and gives it a cross-entropy loss
// as `ppc compile --loss ce` does.
func loadGPTTinyONNX(t *testing.T, tp int) *ir.Module {
	t.Helper()
	m, err := onnx.Load(gptTinyONNX, onnx.Options{Dims: map[string]int{"batch": 2}})
	if err != nil {
		t.Fatal(err)
	}
	runGradPipeline(t, m, "canonicalize,cse,dce,add-loss{kind=ce}")
	m.SetMesh([]ir.MeshAxis{{Name: "tp", Size: tp}})
	return m
}

// onnxArgName is the ONNX name of an argument (the printer renames onnx::MatMul_301).
func onnxArgName(f *ir.Func, i int) string {
	return f.ArgAttrs[i].Str(ir.AttrName, f.Args[i].Name)
}

// TestSpmdONNXTransformerMegatronLayout: shard-annotate finds Megatron's layout on the
// imported exporter graph — layer 0's pre-transposed onnx::MatMul_<n> weights [in, out] and
// layer 1's [out, in] weights that the importer folds out of Transpose nodes alike: q, k, v
// and the MLP's c_fc column-parallel (output dim, with their biases), out_proj and c_proj
// row-parallel (input dim, biases whole), the tied embedding vocab-parallel, and the
// position table and norms whole. Every parameter is listed, so an unexpected split fails.
func TestSpmdONNXTransformerMegatronLayout(t *testing.T) {
	m := loadGPTTinyONNX(t, 2)
	runGradPipeline(t, m, "shard-annotate")
	col, row := map[int]int{0: 1, 1: 0}, map[int]int{0: 0, 1: 1} // weight dim split, by layer
	want := map[string]int{
		"transformer.wte.weight": 0, "transformer.wpe.weight": -1, "transformer.ln_f.weight": -1, "transformer.ln_f.bias": -1,
	}
	folded := 301 // layer 0's weights, in the exporter's order q, k, v, out_proj, c_fc, c_proj
	for l := range 2 {
		p := func(s string) string { return fmt.Sprintf("transformer.h.%d.%s", l, s) }
		weight := func(s string) string {
			if l == 0 {
				folded++
				return fmt.Sprintf("onnx::MatMul_%d", folded-1)
			}
			return p(s + ".weight")
		}
		for _, s := range []string{"ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.out_proj.bias", "mlp.c_proj.bias"} {
			want[p(s)] = -1
		}
		for _, s := range []string{"attn.q_proj", "attn.k_proj", "attn.v_proj"} {
			want[weight(s)], want[p(s+".bias")] = col[l], 0
		}
		want[weight("attn.out_proj")] = row[l]
		want[weight("mlp.c_fc")], want[p("mlp.c_fc.bias")] = col[l], 0
		want[weight("mlp.c_proj")] = row[l]
	}
	f := m.Func(ir.ForwardFunc)
	params := 0
	for i := range f.Args {
		if !f.ArgAttrs[i].Has(ir.AttrParam) {
			continue
		}
		params++
		name := onnxArgName(f, i)
		s, err := ir.ArgSharding(f, i)
		if err != nil {
			t.Fatal(err)
		}
		l, err := layOf(s, tpAxis)
		if err != nil {
			t.Fatal(err)
		}
		d, ok := want[name]
		if !ok {
			t.Errorf("unexpected parameter %s", name)
			continue
		}
		if l != (lay{dim: d}) {
			t.Errorf("%s %s: %s, want %s", name, f.Args[i].Type, l, lay{dim: d})
		}
	}
	if params != len(want) {
		t.Errorf("%d parameters, want %d", params, len(want))
	}
}

// TestSpmdONNXTransformerMatchesOneDevice is TestSpmdPartitionMatchesOneDevice for the
// ONNX transformer: the loss and every gradient of the model partitioned over tp ranks
// against one device, with and without sequence parallelism. It also counts the collectives
// in the partitioned @forward, which are Megatron's: without sp an all_reduce leaving the
// vocab-parallel embedding and each of the 4 row-parallel layers, plus the 3 of the
// vocab-parallel cross-entropy; with sp, reduce_scatter in place of the 5 all_reduces,
// every norm on this rank's tokens, and an all_gather into each of the 4 column-parallel
// blocks and the output head.
func TestSpmdONNXTransformerMatchesOneDevice(t *testing.T) {
	const vocab = 64
	for _, c := range []struct {
		tp   int
		sp   bool
		want map[string]int
	}{
		{2, false, map[string]int{"all_reduce": 8, "reduce_scatter": 0, "all_gather": 0}},
		{2, true, map[string]int{"all_reduce": 3, "reduce_scatter": 5, "all_gather": 5}},
		{4, true, map[string]int{"all_reduce": 3, "reduce_scatter": 5, "all_gather": 5}},
	} {
		t.Run(fmt.Sprintf("tp%d sp=%t", c.tp, c.sp), func(t *testing.T) {
			m := loadGPTTinyONNX(t, c.tp)
			ref := m.Clone()
			runGradPipeline(t, ref, "autodiff")
			part := m.Clone()
			runGradPipeline(t, part, fmt.Sprintf("shard-annotate,shard-propagate{sp=%t},spmd-partition", c.sp))
			got := map[string]int{}
			norms, seqSplit := 0, 0
			for _, op := range part.Func(ir.ForwardFunc).Ops {
				got[op.Name()]++
				if op.Name() == "layer_norm" {
					norms++
					if op.Operands[0].Type.Shape[1] == 8/c.tp {
						seqSplit++
					}
				}
			}
			for k, n := range c.want {
				if got[k] != n {
					t.Errorf("%d %s ops in the partitioned @forward, want %d", got[k], k, n)
				}
			}
			if norms != 5 || (c.sp && seqSplit != norms) || (!c.sp && seqSplit != 0) {
				t.Errorf("%d of %d layer norms run on a block of the sequence (sp=%t)", seqSplit, norms, c.sp)
			}
			runGradPipeline(t, part, "autodiff")

			// Uniform values in [-0.5, 0.5) rather than the file's initializers: larger
			// weights make attention and the norms far from uniform, so a misplaced
			// collective shows in every gradient.
			fwd := m.Func(ir.ForwardFunc)
			full := randomArgs(fwd, rand.New(rand.NewPCG(7, uint64(c.tp))), func(int) int { return vocab }) // input_ids and labels
			checkSpmdTrain(t, ref, part, full, c.tp)
		})
	}
}
