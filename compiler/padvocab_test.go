package compiler

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime/data"
)

// Vocabulary padding (passes.PadVocab) is exact: a model whose vocabulary tp does not divide
// trains under --tp as the unpadded model does on one device, and its checkpoints and
// exports hold the unpadded tensors.

// oddVocab is tiny GPT (or Llama) with a prime vocabulary: no tp > 1 divides it.
func oddVocab(preset string) LoadOptions {
	return LoadOptions{Preset: preset, Set: map[string]string{"vocab": "509"}}
}

// TestPadVocabTrainsAsUnpadded: losses and every parameter and optimizer state after three
// steps of padded tensor-parallel layouts against the one-device unpadded run (ppc compare's
// tolerance, as TestSPMDEquivalence: tp's partial sums change the reduction order). The
// layouts pad 509 to 512 (tp 2 and 4 at the default 128·tp… rounded to 512 and 512 —
// Megatron's), to 510 (--make-vocab-size-divisible-by 1 at tp 2), and under ZeRO-1 with
// dp 2 (the optimizer state of the padded table is a dp block of the padded rows); Llama's
// untied head pads the head's output dim (dim 1) rather than a table's rows.
func TestPadVocabTrainsAsUnpadded(t *testing.T) {
	const m = 2
	cases := []struct {
		model  string
		preset string
		name   string
		opts   Options
		rows   int // the padded vocabulary the compile must report
	}{
		{gptPPM, "tiny", "tp2", Options{TP: 2}, 512},
		{gptPPM, "tiny", "tp4-sp", Options{TP: 4, SP: true}, 512},
		{gptPPM, "tiny", "tp2-multiple1", Options{TP: 2, VocabMultiple: 1}, 510},
		{gptPPM, "tiny", "pp2-dp2-tp2-zero1", Options{PP: 2, DP: 2, TP: 2, Zero: 1}, 512},
		{llamaPPM, "tiny", "tp2", Options{TP: 2}, 512},
	}
	refs := map[string]struct {
		l []float64
		s map[string][]float64
	}{}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%s", c.model[len("../testdata/models/"):], c.name)
		t.Run(name, func(t *testing.T) {
			dp := max(c.opts.DP, 1)
			key := fmt.Sprint(c.model, dp)
			ref, ok := refs[key]
			if !ok {
				ref.l, _, ref.s = spmdRun(t, c.model, Options{Load: oddVocab(c.preset), Microbatches: m * dp, Optimizer: sgdM}, spmdSteps, "")
				refs[key] = ref
			}
			o := c.opts
			o.Load, o.Microbatches, o.Optimizer = oddVocab(c.preset), m, sgdM
			res, err := Compile(c.model, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := paddedRows(res, c.model); got != c.rows {
				t.Fatalf("the vocabulary is padded to %d, want %d", got, c.rows)
			}
			l, _, s := spmdRun(t, c.model, o, spmdSteps, "")
			agree(t, name+" against one device unpadded", ref.l, l, ref.s, s, spmdRtol, spmdAtol)
		})
	}
}

// paddedRows is the vocabulary size the programs of a compile hold: the full size of the
// padded parameter's buffer (the table's rows, or the untied head's columns).
func paddedRows(res *Result, model string) int {
	name, dim := "wte", 0
	if model == llamaPPM {
		name, dim = "lm_head", 1
	}
	for _, p := range res.Output.Programs {
		for _, b := range p.Buffers {
			if b.Name == name && b.Role == pb.Role_PARAM {
				if len(b.Unpadded) == 0 {
					return int(b.Shape[dim]) // not padded: as the local shape says
				}
				n := int(b.Shape[dim])
				if len(b.Shard[dim].GetAxes()) > 0 {
					n *= res.Module.Mesh()[2].Size // tp
				}
				return n
			}
		}
	}
	return -1
}

// TestPadVocabCheckpoints: checkpoints hold the unpadded tensors, so a padded layout and an
// unpadded one resume each other exactly (resume then save, bit for bit, both ways, and
// between two paddings: 512 at tp 4, 510 at tp 2 with multiple 1), and training on from the
// other layout's checkpoint follows the uninterrupted one-device run.
func TestPadVocabCheckpoints(t *testing.T) {
	const m = 2
	lo := oddVocab("tiny")
	one := Options{Load: lo, Microbatches: m, Optimizer: sgdM}
	tp2 := Options{Load: lo, TP: 2, VocabMultiple: 1, Microbatches: m, Optimizer: sgdM}
	tp4 := Options{Load: lo, TP: 4, Microbatches: m, Optimizer: sgdM}
	_, tpCk, tpState := spmdRun(t, gptPPM, tp2, 2, "")
	_, oneCk, oneState := spmdRun(t, gptPPM, one, 2, "")
	if got := tpState["wte"]; len(got) != 509*64 {
		t.Fatalf("the padded run's checkpoint holds %d elements of wte, want the unpadded 509×64", len(got))
	}
	_, _, s := spmdRun(t, gptPPM, one, 0, tpCk)
	agree(t, "padded tp=2 checkpoint through one device", nil, nil, tpState, s, 0, 0)
	_, _, s = spmdRun(t, gptPPM, tp2, 0, oneCk)
	agree(t, "one-device checkpoint through padded tp=2", nil, nil, oneState, s, 0, 0)
	_, _, s = spmdRun(t, gptPPM, tp4, 0, tpCk)
	agree(t, "tp=2 (510) checkpoint through tp=4 (512)", nil, nil, tpState, s, 0, 0)
	refL, _, refS := spmdRun(t, gptPPM, one, 3, "")
	l, _, s := spmdRun(t, gptPPM, tp4, 1, oneCk)
	agree(t, "one device saves, padded tp=4 resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
	l, _, s = spmdRun(t, gptPPM, one, 1, tpCk)
	agree(t, "padded tp=2 saves, one device resumes", refL[2:], l, refS, s, spmdRtol, spmdAtol)
}

// TestPadVocabExportUnpadded: ppc export of the odd-vocabulary model holds the unpadded
// table, and it is, byte for byte, what the padded tp=4 run starts from (its padded buffer
// draws the unpadded tensor's values; the padding is not in the checkpoint).
func TestPadVocabExportUnpadded(t *testing.T) {
	lo := oddVocab("tiny")
	_, mp := exportFile(t, gptPPM, lo, 7)
	_, job := initJob(t, gptPPM, Options{Load: lo, TP: 4, Microbatches: 2}, 7)
	params := must(job.Tensors(pb.Role_PARAM))
	found := false
	for _, init := range mp.Graph.Initializer {
		p := params[init.Name]
		if init.Name == "wte" {
			found = true
			if !slices.Equal(init.Dims, []int64{509, 64}) || !slices.Equal(p.Type.Shape, []int{509, 64}) {
				t.Errorf("wte is %v in the export and %v in the padded run's tensors, want [509 64] in both", init.Dims, p.Type.Shape)
			}
		}
		if !bytes.Equal(init.RawData, p.Data[:p.Type.Bytes()]) {
			t.Errorf("initializer %s differs from the parameter the padded tp=4 run starts from", init.Name)
		}
	}
	if !found {
		t.Fatal("no wte initializer")
	}
}

// TestPadVocabInfer: ppc infer --tp 2 on the odd vocabulary gives the one-device outputs —
// the logits of the unpadded 509 classes (the padded model's logits are sliced back) and
// the loss — within rtol 1e-5.
func TestPadVocabInfer(t *testing.T) {
	lo := oddVocab("tiny")
	one, _, err := Infer(gptPPM, lo, InferMesh{}, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	two, _, err := Infer(gptPPM, lo, InferMesh{TP: 2}, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != len(two) || len(one) == 0 {
		t.Fatalf("%d outputs at tp 2, %d on one device", len(two), len(one))
	}
	for i := range one {
		a, b := one[i].Tensor, two[i].Tensor
		if !a.Type.Equal(b.Type) {
			t.Fatalf("output %s: %s at tp 2, %s on one device", one[i].Name, b.Type, a.Type)
		}
		x, y := data.Float64s(a), data.Float64s(b)
		for j := range x {
			if math.Abs(x[j]-y[j]) > 1e-6+1e-5*math.Abs(x[j]) {
				t.Fatalf("output %s element %d: %g at tp 2, %g on one device", one[i].Name, j, y[j], x[j])
			}
		}
		t.Logf("output %s: %s", one[i].Name, a.Type)
	}
}
