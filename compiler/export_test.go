package compiler

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/frontend/onnx/export"
	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
)

// exportFile exports model as ppc export does and writes it into a temporary directory.
func exportFile(t *testing.T, model string, lo LoadOptions, seed uint64) (string, *onnxpb.ModelProto) {
	t.Helper()
	return exportOpset(t, model, lo, seed, 0)
}

// exportOpset is exportFile at an opset (0: the default).
func exportOpset(t *testing.T, model string, lo LoadOptions, seed uint64, opset int) (string, *onnxpb.ModelProto) {
	t.Helper()
	mp, err := Export(model, lo, seed, "test", opset)
	if err != nil {
		t.Fatalf("export %s: %v", filepath.Base(model), err)
	}
	data, err := proto.Marshal(mp)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSuffix(filepath.Base(model), filepath.Ext(model))
	path := filepath.Join(t.TempDir(), name+".onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, mp
}

// smallLoad keeps the transformers at two layers: the tests compare whole models, and two
// layers have every op of eight.
func smallLoad(model string) LoadOptions {
	lo := LoadOptions{Preset: "tiny"}
	if model != mlpPPM {
		lo.Set = map[string]string{"n_layers": "2"}
	}
	return lo
}

// TestExportInitializersAreTheRunsStart: the initializers of an exported gpt are, byte for
// byte, the parameters `ppc run --seed 7` starts from, here on a plan that shards them over
// two tensor-parallel ranks (the initialiser is shard-invariant).
func TestExportInitializersAreTheRunsStart(t *testing.T) {
	lo := smallLoad(gptPPM)
	_, mp := exportFile(t, gptPPM, lo, 7)
	_, job := initJob(t, gptPPM, Options{Load: lo, TP: 2, Microbatches: 2}, 7)
	params := must(job.Tensors(pb.Role_PARAM))
	if len(mp.Graph.Initializer) != len(params) {
		t.Fatalf("%d initializers, %d parameters", len(mp.Graph.Initializer), len(params))
	}
	for _, init := range mp.Graph.Initializer {
		p, ok := params[init.Name]
		if !ok {
			t.Errorf("initializer %s is no parameter of the plan", init.Name)
			continue
		}
		if !bytes.Equal(init.RawData, p.Data[:p.Type.Bytes()]) {
			t.Errorf("initializer %s differs from the parameter ppc run --seed 7 starts from", init.Name)
		}
	}
	// Another seed, other weights.
	_, other := exportFile(t, gptPPM, lo, 8)
	if bytes.Equal(other.Graph.Initializer[0].RawData, mp.Graph.Initializer[0].RawData) {
		t.Error("--seed 8 exported the weights of --seed 7")
	}
}

// TestExportInferAgrees: for gpt, llama and mlp, `ppc infer` on the exported .onnx (imported
// back by ppc's own importer) computes the .ppm's logits and loss on the same inputs (rtol
// 1e-4), and both write the same outputs; the file is ONNX opset 20 with the labels as an
// input.
func TestExportInferAgrees(t *testing.T) {
	for _, model := range []string{gptPPM, llamaPPM, mlpPPM} {
		name := filepath.Base(model)
		lo := smallLoad(model)
		path, mp := exportFile(t, model, lo, 3)
		if mp.IrVersion != export.IRVersion || len(mp.OpsetImport) != 1 || mp.OpsetImport[0].Version != export.Opset {
			t.Errorf("%s: ir_version %d, opsets %v", name, mp.IrVersion, mp.OpsetImport)
		}
		checkGraph(t, name, mp.Graph)
		want, gen, err := Infer(model, lo, InferMesh{}, nil, 3)
		if err != nil {
			t.Fatal(err)
		}
		given := writeInputs(t, gen)
		if len(given) != 2 {
			t.Fatalf("%s: inputs %v, want the data and the labels", name, given)
		}
		got, gen2, err := Infer(path, LoadOptions{}, InferMesh{}, given, 99)
		if err != nil {
			t.Fatalf("%s: infer the exported file: %v", name, err)
		}
		// Both files give the same outputs: the logits, then the loss.
		if len(gen2) != 0 || !slices.Equal(outputNames(got), []string{"logits", "loss"}) || !slices.Equal(outputNames(want), outputNames(got)) {
			t.Fatalf("%s: outputs %v (generated %d inputs), .ppm outputs %v", name, outputNames(got), len(gen2), outputNames(want))
		}
		a, b := data.Float64s(want[1].Tensor)[0], data.Float64s(got[1].Tensor)[0]
		if math.Abs(a-b) > 1e-4*math.Abs(a) {
			t.Errorf("%s: loss %.7f from the .onnx, %.7f from the .ppm", name, b, a)
		}
		if lt := got[0].Tensor.Type; lt.Rank() < 2 || lt.DType != ir.F32 || !lt.Equal(want[0].Tensor.Type) {
			t.Errorf("%s: logits %s from the .onnx, %s from the .ppm", name, lt, want[0].Tensor.Type)
		}
		gotLogits := data.Float64s(got[0].Tensor)
		for i, x := range data.Float64s(want[0].Tensor) {
			if y := gotLogits[i]; math.Abs(x-y) > 1e-5+1e-4*math.Abs(x) {
				t.Fatalf("%s: logit %d is %g from the .onnx, %g from the .ppm", name, i, y, x)
			}
		}
		t.Logf("%s: loss %.7f (.ppm) %.7f (.onnx)", name, a, b)
	}
}

func outputNames(outs []Output) []string {
	var names []string
	for _, o := range outs {
		names = append(names, o.Name)
	}
	return names
}

// checkGraph checks what ONNX's checker would: every node input is a graph input, an
// initializer or an earlier node's output (topological order), and no tensor is defined
// twice.
func checkGraph(t *testing.T, name string, g *onnxpb.GraphProto) {
	t.Helper()
	defined := map[string]bool{"": true} // "" is an omitted optional input
	def := func(n string) {
		if defined[n] {
			t.Errorf("%s: tensor %q defined twice", name, n)
		}
		defined[n] = true
	}
	for _, in := range g.Input {
		def(in.Name)
	}
	for _, in := range g.Initializer {
		def(in.Name)
	}
	nodes := map[string]bool{}
	for _, n := range g.Node {
		for _, in := range n.Input {
			if !defined[in] {
				t.Errorf("%s: node %s (%s) reads %q before it is defined", name, n.Name, n.OpType, in)
			}
		}
		for _, out := range n.Output {
			def(out)
		}
		if nodes[n.Name] {
			t.Errorf("%s: two nodes are named %q", name, n.Name)
		}
		nodes[n.Name] = true
	}
	for _, out := range g.Output {
		if !defined[out.Name] {
			t.Errorf("%s: output %q is not computed", name, out.Name)
		}
	}
}

// sameData feeds a plan the synthetic data of another plan's inputs of the same names, so
// that the .ppm and its exported .onnx (whose inputs carry no token ranges) train on the
// same batch.
type sameData struct {
	src    *data.Synthetic
	inputs map[string]codegen.Input
}

func (d sameData) Fill(in codegen.Input, step, mb int, t device.Tensor) error {
	src, ok := d.inputs[in.Name]
	if !ok {
		return errors.New("no input " + in.Name + " in the reference plan")
	}
	return d.src.Fill(src, step, mb, t)
}

// TestExportTrainsWithoutLoss: `ppc compile FILE.onnx` of an exported model trains without
// --loss (its scalar output named loss is the training loss), here over a 2-stage pipeline
// of 2 micro-batches, and its first step's loss is the .ppm's at the same seed (rtol 1e-5).
func TestExportTrainsWithoutLoss(t *testing.T) {
	const seed = 5
	for _, model := range []string{gptPPM, llamaPPM, mlpPPM} {
		name := filepath.Base(model)
		lo := smallLoad(model)
		path, _ := exportFile(t, model, lo, seed)
		opts := Options{PP: 2, Microbatches: 2, Optimizer: "sgd{lr=0.1}"}
		opts.Load = lo
		ref, refJob := initJob(t, model, opts, seed)
		opts.Load = LoadOptions{}
		res, job := initJob(t, path, opts, seed)
		if p, q := res.Output.Plan, ref.Output.Plan; !p.Training || len(p.Params) != len(q.Params) {
			t.Fatalf("%s: the .onnx plan trains %v with %d parameters, the .ppm's %d", name, p.Training, len(p.Params), len(q.Params))
		}
		inputs := map[string]codegen.Input{}
		for _, in := range refJob.Plan.Inputs {
			inputs[in.Name] = in
		}
		src := &data.Synthetic{Seed: seed, Plan: refJob.Plan}
		var losses [2][2]float64
		for i, j := range []*runtime.Job{refJob, job} {
			for s := range 2 {
				r, err := j.Step(runtime.Options{Seed: seed, Data: sameData{src, inputs}})
				if err != nil {
					t.Fatalf("%s: step %d: %v", name, s+1, err)
				}
				losses[i][s] = r.Loss
			}
		}
		t.Logf("%s: losses .ppm %.6f, .onnx %.6f", name, losses[0], losses[1])
		for s := range 2 {
			if a, b := losses[0][s], losses[1][s]; math.Abs(a-b) > 1e-5*math.Abs(a) {
				t.Errorf("%s: step %d loss %.7f from the .onnx, %.7f from the .ppm", name, s+1, b, a)
			}
		}
	}
}

// TestExportOpsRoundTrip: IR models holding every op ppc export maps (export_ops.ir: the core
// and elementwise ops, named outputs; the gradient-check models: transformer ops and the CNN
// ops in f64), and an ONNX model (the exporter-pattern GPT, whose weights are data), compute
// the same outputs from ppc infer on the source and on the exported .onnx imported back
// (rtol 1e-4, atol 1e-6). testdata/oracle/export_ort.mjs checks the IR models' files against
// onnxruntime.
func TestExportOpsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		model string
		lo    LoadOptions
	}{
		{"../testdata/ir/export_ops.ir", LoadOptions{}},
		{"../testdata/ir/gradcheck.ir", LoadOptions{}},
		{"../testdata/ir/gradcheck_nn.ir", LoadOptions{}},
		{"../testdata/ir/mlp.ir", LoadOptions{}},
		{"../testdata/models/gpt-tiny.onnx", LoadOptions{Dims: map[string]int{"batch": 2}}},
	} {
		model := c.model
		name := filepath.Base(model)
		path, mp := exportFile(t, model, c.lo, 2)
		checkGraph(t, name, mp.Graph)
		want, gen, err := Infer(model, c.lo, InferMesh{}, nil, 2)
		if err != nil {
			t.Fatal(err)
		}
		given := writeInputs(t, gen)
		got, _, err := Infer(path, LoadOptions{}, InferMesh{}, given, 2)
		if err != nil {
			t.Fatalf("%s: infer the exported file: %v", name, err)
		}
		outs := map[string]device.Tensor{}
		for _, o := range got {
			outs[o.Name] = o.Tensor
		}
		if len(want) == 0 {
			t.Fatalf("%s: no outputs", name)
		}
		for _, w := range want {
			g, ok := outs[w.Name]
			if !ok {
				t.Errorf("%s: the .onnx has no output %s (it has %v)", name, w.Name, outputNames(got))
				continue
			}
			if !g.Type.Equal(w.Tensor.Type) {
				t.Errorf("%s: output %s is %s, want %s", name, w.Name, g.Type, w.Tensor.Type)
				continue
			}
			a, b := data.Float64s(w.Tensor), data.Float64s(g)
			for i := range a {
				if math.Abs(a[i]-b[i]) > 1e-6+1e-4*math.Abs(a[i]) {
					t.Errorf("%s: output %s element %d is %.8g from the .onnx, %.8g from the .ir", name, w.Name, i, b[i], a[i])
					break
				}
			}
		}
	}
}

// TestImportSoftmaxCrossEntropyLoss: ONNX's SoftmaxCrossEntropyLoss, whose class axis is 1,
// imports as the cross-entropy ONNX defines: here over scores [N=2, C=5, d=3] with
// ignore_index, against the formula computed here (a mean over the labels not ignored).
func TestImportSoftmaxCrossEntropyLoss(t *testing.T) {
	const n, c, d = 2, 5, 3
	scores := make([]float64, n*c*d)
	for i := range scores {
		scores[i] = math.Sin(float64(i)) * 2
	}
	labels := []float64{0, 1, 4, 2, 1, 3} // [n, d]; label 1 is ignored
	var sum float64
	count := 0
	for b := range n {
		for k := range d {
			y := int(labels[b*d+k])
			if y == 1 {
				continue
			}
			var z float64
			for j := range c {
				z += math.Exp(scores[(b*c+j)*d+k])
			}
			sum += math.Log(z) - scores[(b*c+y)*d+k]
			count++
		}
	}
	want := sum / float64(count)

	vi := func(name string, dt onnxpb.TensorProto_DataType, dims ...int64) *onnxpb.ValueInfoProto {
		sh := &onnxpb.TensorShapeProto{}
		for _, x := range dims {
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: x}})
		}
		return &onnxpb.ValueInfoProto{Name: name, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: int32(dt), Shape: sh}}}}
	}
	m := &onnxpb.ModelProto{IrVersion: 9, OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: 13}}, Graph: &onnxpb.GraphProto{
		Name:   "sce",
		Input:  []*onnxpb.ValueInfoProto{vi("scores", onnxpb.TensorProto_FLOAT, n, c, d), vi("labels", onnxpb.TensorProto_INT64, n, d)},
		Output: []*onnxpb.ValueInfoProto{vi("loss", onnxpb.TensorProto_FLOAT)},
		Node: []*onnxpb.NodeProto{{Name: "sce", OpType: "SoftmaxCrossEntropyLoss", Input: []string{"scores", "labels"}, Output: []string{"loss"},
			Attribute: []*onnxpb.AttributeProto{{Name: "ignore_index", Type: onnxpb.AttributeProto_INT, I: 1}}}},
	}}
	model, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "sce.onnx")
	if err := os.WriteFile(path, model, 0o644); err != nil {
		t.Fatal(err)
	}
	given := map[string]string{}
	for name, tt := range map[string]device.Tensor{
		"scores": tensorOf(ir.Type{DType: ir.F32, Shape: ir.Shape{n, c, d}}, scores),
		"labels": tensorOf(ir.Type{DType: ir.I64, Shape: ir.Shape{n, d}}, labels),
	} {
		given[name] = filepath.Join(dir, name+".npy")
		if err := data.WriteNpy(given[name], tt); err != nil {
			t.Fatal(err)
		}
	}
	outs, _, err := Infer(path, LoadOptions{}, InferMesh{}, given, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := data.Float64s(outs[0].Tensor)[0]; math.Abs(got-want) > 1e-5*want {
		t.Errorf("loss %.7f, want %.7f", got, want)
	}
}

// tensorOf builds a tensor of type t from float64 values.
func tensorOf(t ir.Type, vals []float64) device.Tensor {
	d := ir.NewDenseF64(t, vals)
	return device.Tensor{Type: t, Data: d.Data}
}

// writeInputs writes generated inputs as .npy files and returns their paths by name, as
// Infer takes given inputs.
func writeInputs(t *testing.T, gen map[string]device.Tensor) map[string]string {
	t.Helper()
	dir := t.TempDir()
	given := map[string]string{}
	for in, tensor := range gen {
		p := filepath.Join(dir, in+".npy")
		if err := data.WriteNpy(p, tensor); err != nil {
			t.Fatal(err)
		}
		given[in] = p
	}
	return given
}

// must returns v, panicking on err (a failed device read in a test).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestExportAttentionOpsets: at opset 23 each of the tiny GPT's and Llama's (grouped-query)
// fused attentions is one ONNX Attention node (is_causal, the scale; K and V with their kv
// heads), at the default opset 20 the decomposed chain (no Attention node, a Softmax per
// layer); ppc's importer reads both back onto the fused op or the chain, and `ppc infer` on
// each gives the .ppm's loss (rtol 1e-5). An opset outside 20…23 is refused.
func TestExportAttentionOpsets(t *testing.T) {
	for _, model := range []string{gptPPM, llamaPPM} {
		name := filepath.Base(model)
		lo := smallLoad(model)
		want, gen, err := Infer(model, lo, InferMesh{}, nil, 3)
		if err != nil {
			t.Fatal(err)
		}
		given := writeInputs(t, gen)
		for _, opset := range []int{20, 23} {
			path, mp := exportOpset(t, model, lo, 3, opset)
			count := map[string]int{}
			for _, n := range mp.Graph.Node {
				count[n.OpType]++
			}
			if v := mp.OpsetImport[0].Version; v != int64(opset) {
				t.Errorf("%s: opset %d written as %d", name, opset, v)
			}
			layers := 2 // smallLoad's
			if opset == 23 && (count["Attention"] != layers || count["Softmax"] != 0) || opset == 20 && (count["Attention"] != 0 || count["Softmax"] != layers) {
				t.Errorf("%s opset %d: %d Attention and %d Softmax nodes for %d layers", name, opset, count["Attention"], count["Softmax"], layers)
			}
			checkGraph(t, name, mp.Graph)
			got, _, err := Infer(path, LoadOptions{}, InferMesh{}, given, 99)
			if err != nil {
				t.Fatalf("%s opset %d: infer the exported file: %v", name, opset, err)
			}
			a, b := data.Float64s(want[1].Tensor)[0], data.Float64s(got[1].Tensor)[0]
			if math.Abs(a-b) > 1e-5*math.Abs(a) {
				t.Errorf("%s opset %d: loss %.7f from the .onnx, %.7f from the .ppm", name, opset, b, a)
			}
		}
	}
	if _, err := Export(gptPPM, smallLoad(gptPPM), 1, "test", 19); err == nil || !strings.Contains(err.Error(), "opset 19: ppc export writes opsets 20 to 23") {
		t.Errorf("opset 19: %v", err)
	}
}
