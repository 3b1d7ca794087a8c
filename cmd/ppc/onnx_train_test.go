package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/internal/onnxtest"
)

// ONNX models as exporters write them, trained through the CLI: weights in Constant nodes,
// classifiers whose classes are not on the last axis, models exported with a batch of 1.

var in = onnxtest.In

// trainONNX compiles model with the extra flags, runs it for steps steps (with runFlags) and
// returns the compile summary and the losses.
func trainONNX(t *testing.T, model string, steps int, runFlags []string, flags ...string) (string, []float64) {
	t.Helper()
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	code, summary, errOut := ppc(t, "", append([]string{"compile", model, "-o", plan}, flags...)...)
	if code != 0 {
		t.Fatalf("compile %v: exit %d\n%s", flags, code, errOut)
	}
	log := filepath.Join(dir, "log.jsonl")
	if code, out, errOut := ppc(t, "", append([]string{"run", plan, "--steps", strconv.Itoa(steps), "--log-json", log}, runFlags...)...); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec stepRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Loss == nil {
			t.Fatalf("a training step's record has no loss: %s", line)
		}
		losses = append(losses, *rec.Loss)
	}
	return summary, losses
}

// falls reports whether the mean of the last k losses is below the mean of the first k.
func falls(losses []float64, k int) bool {
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	return len(losses) >= 2*k && mean(losses[len(losses)-k:]) < mean(losses[:k])
}

// constantWeightMLP keeps its weights in Constant nodes, as paddle2onnx writes them.
func constantWeightMLP() *onnxtest.Model {
	return onnxtest.New(13).Input("x", onnxtest.Float, 8, 16).
		Constant("linear_0.w_0", onnxtest.Random("", 1, 0.3, 16, 32)).
		Constant("linear_0.b_0", onnxtest.F32("", []int64{32}, make([]float32, 32)...)).
		Constant("linear_1.w_0", onnxtest.Random("", 2, 0.3, 32, 4)).
		Constant("linear_1.b_0", onnxtest.F32("", []int64{4}, 0, 0, 0, 0)).
		Node("MatMul", "p2o.MatMul.0", in("x", "linear_0.w_0"), in("h0")).
		Node("Add", "p2o.Add.0", in("h0", "linear_0.b_0"), in("h1")).
		Node("Relu", "p2o.Relu.0", in("h1"), in("h2")).
		Node("MatMul", "p2o.MatMul.1", in("h2", "linear_1.w_0"), in("h3")).
		Node("Add", "p2o.Add.1", in("h3", "linear_1.b_0"), in("logits")).
		Output("logits")
}

// TestTrainConstantNodeWeights: a model whose weights are Constant nodes trains: its
// parameters are counted and its loss falls.
func TestTrainConstantNodeWeights(t *testing.T) {
	summary, losses := trainONNX(t, constantWeightMLP().Write(t, "mlp.onnx"), 30, nil, "--optimizer", "adamw{lr=1e-2}")
	if !strings.Contains(summary, "parameters   676 (4 tensors)") {
		t.Errorf("parameters not counted (16·32+32+32·4+4 = 676 in 4 tensors):\n%s", summary)
	}
	if !falls(losses, 5) {
		t.Errorf("loss does not fall: %v", losses)
	}
}

// pooledClassifier is an image classifier's head as exporters write it: a convolution to
// 1000 classes and a global average pool, output logits [4, 1000, 1, 1].
func pooledClassifier() *onnxtest.Model {
	return onnxtest.New(13).Input("x", onnxtest.Float, 4, 3, 4, 4).
		Init(onnxtest.Random("fc.weight", 7, 0.1, 1000, 3, 3, 3)).
		Node("Conv", "/fc/Conv", in("x", "fc.weight"), in("c"), onnxtest.Ints("pads", 1, 1, 1, 1)).
		Node("GlobalAveragePool", "/pool/GlobalAveragePool", in("c"), in("logits")).
		Output("logits")
}

// TestTrainPooledClassifier: a [N, 1000, 1, 1] classifier gets a real cross-entropy over
// axis 1 — by default and with ce{axis=1} — that starts near ln 1000 and falls (on 8
// samples of 1000 classes it can learn, labels [8, 1, 1]); its last axis, of size 1, is
// refused.
func TestTrainPooledClassifier(t *testing.T) {
	model := pooledClassifier().Write(t, "cls.onnx")
	dir := t.TempDir()
	x := make([]float64, 8*3*4*4)
	for i := range x {
		x[i] = math.Sin(float64(i*i%97) + 0.5)
	}
	data := "x=" + writeNpy(t, dir, "x.npy", "<f4", "8, 3, 4, 4", x) +
		",labels=" + writeNpy(t, dir, "labels.npy", "<i8", "8, 1, 1", []float64{3, 999, 500, 42, 0, 777, 123, 64})
	for _, loss := range []string{"ce", "ce{axis=1}"} {
		_, losses := trainONNX(t, model, 20, []string{"--data", data}, "--loss", loss, "--optimizer", "adamw{lr=3e-2}")
		if losses[0] < 5 || losses[0] > 9 || losses[len(losses)-1] > losses[0]/2 {
			t.Errorf("--loss %s: losses %v, want a cross-entropy over 1000 classes (ln 1000 = 6.9) that falls", loss, losses)
		}
	}
	out := filepath.Join(t.TempDir(), "plan")
	runCases(t, []cliCase{
		{[]string{"compile", model, "--loss", "ce{axis=-1}", "-o", out}, exitInput,
			[]string{`--loss ce: output 0 ("logits") is f32[4,1000,1,1] and its class axis 3 has size 1: a cross-entropy over one class is always 0`}, []string{"reproducer"}},
		{[]string{"compile", model, "--loss", "ce{axis=4}", "-o", out}, exitInput, []string{"axis=4 is out of range for f32[4,1000,1,1]"}, nil},
	})
}

// TestTrainSoftmaxOutput: a classifier exported with its softmax (paddle2onnx's text
// recognisers end in one) trains under --loss ce on −log p[label], the softmax's input
// being the logits, and the summary says so. A cross-entropy over the probabilities — a
// second softmax, nearly uniform over values in [0, 1] — could not fall below
// ln(e + C − 1) − 1 = 2.96 for C = 50 classes, and would stay near ln 50 = 3.91.
func TestTrainSoftmaxOutput(t *testing.T) {
	model := onnxtest.New(13).Input("x", onnxtest.Float, 8, 16).Init(onnxtest.Random("w", 1, 0.05, 16, 50)).
		Node("MatMul", "p2o.MatMul.0", in("x", "w"), in("z")).
		Node("Softmax", "p2o.Softmax.0", in("z"), in("softmax_0.tmp_0"), onnxtest.Int("axis", -1)).
		Output("softmax_0.tmp_0").Write(t, "rec.onnx")
	summary, losses := trainONNX(t, model, 40, nil, "--loss", "ce", "--optimizer", "adamw{lr=5e-2}")
	if !strings.Contains(summary, `note: output 0 is a softmax (node "p2o.Softmax.0" (Softmax)), probabilities: --loss ce computes −log p[label] as the softmax cross-entropy of its input`) {
		t.Errorf("the summary does not say how the loss is computed:\n%s", summary)
	}
	if lo := slices.Min(losses); math.Abs(losses[0]-math.Log(50)) > 0.3 || lo > 2 {
		t.Errorf("losses %v: want a cross-entropy from near ln 50 = 3.91 to below 2", losses)
	}
}

// TestTrainONNXLanguageModel: testdata/models/gpt-tiny.onnx, whose token input declares no
// range, takes its vocabulary from the embedding it indexes and its labels (added by --loss
// ce) are its next tokens, so the synthetic data is token sequences over the vocabulary that
// the model learns (ln 64 = 4.16 at the start); before, tokens were 0s and 1s and the labels
// independent classes, and the loss stayed at 4.1.
func TestTrainONNXLanguageModel(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	_, losses := trainONNX(t, "../../testdata/models/gpt-tiny.onnx", 100, nil, "--dim", "batch=8", "--optimizer", "adamw{lr=1e-2}")
	mean := 0.0
	for _, l := range losses[len(losses)-10:] {
		mean += l / 10
	}
	if math.Abs(losses[0]-math.Log(64)) > 0.2 || mean > 3.7 {
		t.Errorf("losses %v: want a cross-entropy from ln 64 = 4.16 to below 3.7", losses)
	}
	if code, _, errOut := ppc(t, "", "compile", "../../testdata/models/gpt-tiny.onnx", "--dim", "batch=8", "-o", plan); code != 0 {
		t.Fatal(errOut)
	}
	p, err := codegen.ReadPlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Inputs) != 2 || !slices.Equal(p.Inputs[0].Range, []int{0, 64}) || !slices.Equal(p.Inputs[1].Range, []int{0, 64}) || p.Inputs[1].ShiftOf != "input_ids" {
		t.Errorf("inputs %+v, want input_ids in [0, 64) and labels its next tokens", p.Inputs)
	}
	// A token file feeds it as it feeds gpt.ppm.
	toks := make([]byte, 2*200)
	for i := range 200 {
		toks[2*i] = byte(i % 64)
	}
	bin := filepath.Join(dir, "train.bin")
	if err := os.WriteFile(bin, toks, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ppc(t, "", "run", plan, "--steps", "2", "--data", bin); code != 0 {
		t.Fatalf("--data train.bin: %d %s%s", code, out, errOut)
	}
}

// TestLossRefusesOneClass: a one-unit sigmoid output, or one unit per position, under ce is
// refused with what to do instead; mse trains it.
func TestLossRefusesOneClass(t *testing.T) {
	sigmoid := onnxtest.New(13).Input("x", onnxtest.Float, 4, 8).Init(onnxtest.Random("w", 1, 0.3, 8, 1)).
		Node("MatMul", "mm", in("x", "w"), in("z")).Node("Sigmoid", "sig", in("z"), in("prob")).Output("prob").Write(t, "sig.onnx")
	perPos := onnxtest.New(13).Input("x", onnxtest.Float, 4, 6, 8).Init(onnxtest.Random("w", 1, 0.3, 8, 1)).
		Node("MatMul", "mm", in("x", "w"), in("score")).Output("score").Write(t, "pos.onnx")
	out := filepath.Join(t.TempDir(), "plan")
	runCases(t, []cliCase{
		{[]string{"compile", sigmoid, "-o", out}, exitInput, []string{`output 0 ("prob") is f32[4,1]`, "always 0", "it is a sigmoid", "--loss mse", "two-class output [N, 2]"}, []string{"reproducer"}},
		{[]string{"compile", perPos, "-o", out}, exitInput, []string{`output 0 ("score") is f32[4,6,1] and its class axis 2 has size 1`, "--loss mse", "--loss 'ce{axis=1}'"}, nil},
	})
	if code, _, errOut := ppc(t, "", "compile", sigmoid, "--loss", "mse", "-o", out); code != 0 {
		t.Fatalf("--loss mse: %s", errOut)
	}
}

// TestNothingToTrain: a training compile of a model with no trainable parameter is an error
// that says why; --forward-only compiles it.
func TestNothingToTrain(t *testing.T) {
	noWeights := onnxtest.New(13).Input("x", onnxtest.Float, 4, 8).Node("Relu", "r", in("x"), in("y")).Output("y").Write(t, "relu.onnx")
	huge := make([]float32, 8)
	for i := range huge {
		huge[i] = 1e5
	}
	constWeights := onnxtest.New(13).Input("x", onnxtest.Float, 4, 8).Constant("k", onnxtest.F32("", []int64{8}, huge...)).
		Node("Mul", "m", in("x", "k"), in("y")).Output("y").Write(t, "const.onnx")
	// A quantized model's weights are integers.
	intWeights := writeFile(t, "int.ir", "func @forward(%x: f32[4,8] {input}) -> (f32[4,8]) {\n"+
		"  %k = constant {value = dense<i8[8]: [1, -2, 3, -4, 5, -6, 7, -8]>} : i8[8]\n"+
		"  %kf = cast %k {to = f32} : f32[8]\n  %y = mul %x, %kf : f32[4,8]\n  return %y\n}\n")
	out := filepath.Join(t.TempDir(), "plan")
	runCases(t, []cliCase{
		{[]string{"compile", noWeights, "-o", out}, exitInput, []string{"relu.onnx: nothing to train: the model has no trainable parameters (it has no weights at all)", "--forward-only"}, []string{"reproducer"}},
		{[]string{"compile", intWeights, "-o", out}, exitInput, []string{"nothing to train", "its 1 weight tensor(s) are integer data (a quantized model?)"}, nil},
		{[]string{"compile", constWeights, "-o", out}, exitInput, []string{"nothing to train", "its 1 floating-point tensor(s) are constants", "--forward-only"}, nil},
	})
	if code, _, errOut := ppc(t, "", "compile", noWeights, "--forward-only", "-o", out); code != 0 {
		t.Fatalf("--forward-only: %s", errOut)
	}
}

// TestLossFlagErrors: --loss takes ce or mse with add-loss's options; anything else is a
// usage error.
func TestLossFlagErrors(t *testing.T) {
	model := constantWeightMLP().Write(t, "mlp.onnx")
	out := filepath.Join(t.TempDir(), "plan")
	runCases(t, []cliCase{
		{[]string{"compile", model, "--loss", "hinge", "-o", out}, exitInput, []string{`--loss "hinge": want ce or mse, with options as ce{axis=1}`, "usage: ppc compile"}, nil},
		{[]string{"compile", model, "--loss", "ce{axis=x}", "-o", out}, exitInput, []string{`--loss "ce{axis=x}": option axis="x" is not an integer`}, nil},
		{[]string{"compile", model, "--loss", "mse{axis=1}", "-o", out}, exitInput, []string{`--loss "mse{axis=1}": option axis applies to ce`}, nil},
		{[]string{"compile", model, "--loss", "ce{output=1}", "-o", out}, exitInput, []string{"the output is chosen with --loss-output"}, nil},
		{[]string{"compile", model, "--loss", "ce{bogus=1}", "-o", out}, exitInput, []string{`--loss "ce{bogus=1}"`, `no option "bogus"`}, nil},
	})
	if code, _, errOut := ppc(t, "", "compile", model, "--loss", "ce{axis=-1}", "-o", out); code != 0 {
		t.Fatalf("ce{axis=-1}: %s", errOut)
	}
}

// batchOneCNN is a small image classifier exported with a fixed batch of 1, as
// torch.onnx.export writes it without dynamic axes: input [1, 3, 8, 8], two convolutions, a
// Reshape by the shape initializer [1, 256], a Linear to 10 classes.
func batchOneCNN() *onnxtest.Model {
	return onnxtest.New(13).Input("x", onnxtest.Float, 1, 3, 8, 8).
		Init(onnxtest.Random("conv1.weight", 1, 0.3, 8, 3, 3, 3)).Init(onnxtest.Random("conv1.bias", 2, 0.1, 8)).
		Init(onnxtest.Random("conv2.weight", 3, 0.2, 4, 8, 3, 3)).Init(onnxtest.Random("conv2.bias", 4, 0.1, 4)).
		Init(onnxtest.I64("shape", []int64{2}, 1, 256)).
		Init(onnxtest.Random("fc.weight", 5, 0.1, 10, 256)).Init(onnxtest.Random("fc.bias", 6, 0.1, 10)).
		Node("Conv", "/conv1/Conv", in("x", "conv1.weight", "conv1.bias"), in("c1"), onnxtest.Ints("pads", 1, 1, 1, 1)).
		Node("Relu", "/relu1/Relu", in("c1"), in("r1")).
		Node("Conv", "/conv2/Conv", in("r1", "conv2.weight", "conv2.bias"), in("c2"), onnxtest.Ints("pads", 1, 1, 1, 1)).
		Node("Relu", "/relu2/Relu", in("c2"), in("r2")).
		Node("Reshape", "/Reshape", in("r2", "shape"), in("flat")).
		Node("Gemm", "/fc/Gemm", in("flat", "fc.weight", "fc.bias"), in("logits"), onnxtest.Int("transB", 1)).
		Output("logits")
}

// TestTrainRebatched: a CNN exported with a batch of 1 compiles at --batch 4 --pp 2
// --microbatches 2 and trains; what cannot be re-batched is an error naming why.
func TestTrainRebatched(t *testing.T) {
	model := batchOneCNN().Write(t, "cnn.onnx")
	summary, losses := trainONNX(t, model, 30, nil, "--batch", "4", "--pp", "2", "--microbatches", "2", "--optimizer", "adamw{lr=1e-2}")
	if !strings.Contains(summary, "pp=2") || !strings.Contains(summary, "2 micro-batch(es)") {
		t.Errorf("summary:\n%s", summary)
	}
	if !falls(losses, 5) || math.IsNaN(losses[0]) {
		t.Errorf("loss does not fall: %v", losses)
	}
	// Without --batch the model has one sample: it cannot be split into micro-batches.
	out := filepath.Join(t.TempDir(), "plan")
	pinned := onnxtest.New(13).Input("x", onnxtest.Float, 1, 8).Init(onnxtest.Random("w", 1, 0.3, 8, 4)).
		Init(onnxtest.I64("zero", nil, 0)).
		Node("MatMul", "mm", in("x", "w"), in("h")).
		Node("Gather", "/Gather", in("h", "zero"), in("y"), onnxtest.Int("axis", 0)).Output("y").Write(t, "pinned.onnx")
	runCases(t, []cliCase{
		{[]string{"compile", model, "--pp", "2", "--microbatches", "2", "-o", out}, exitInput, []string{`graph input "x" has batch size 1 (its leading dim), which does not divide into 2 micro-batches`}, nil},
		{[]string{"compile", model, "--batch", "3", "--microbatches", "2", "-o", out}, exitInput, []string{`graph input "x" has batch size 3 (--batch), which does not divide into 2 micro-batches`}, nil},
		{[]string{"compile", model, "--batch", "-1", "-o", out}, exitInput, []string{"--batch must be positive", "usage: ppc compile"}, nil},
		{[]string{"compile", constantWeightMLP().Write(t, "mlp.onnx"), "--batch", "4", "-o", out}, exitInput, []string{`--batch 4 re-batches a model exported with a batch of 1, but graph input "x" has a fixed leading dim of 8`}, nil},
		{[]string{"compile", pinned, "--batch", "4", "-o", out}, exitInput, []string{`node "/Gather" (Gather): --batch 4: the node pins the batch at 1`}, []string{"reproducer"}},
		{[]string{"compile", mlp, "--batch", "4", "-o", out}, exitInput, []string{"--batch applies to ONNX models; a DSL model's batch is one of its constants, set with --set NAME=VALUE"}, nil},
		{[]string{"import", "../../testdata/ir/mlp.ir", "--batch", "4"}, exitInput, []string{"--batch do not apply to IR files"}, nil},
	})
	// ppc import shows the re-batched model.
	code, ir, errOut := ppc(t, "", "import", model, "--batch", "4")
	if code != 0 || !strings.Contains(ir, "%x: f32[4,3,8,8]") || !strings.Contains(ir, "f32[4,256]") {
		t.Errorf("import --batch 4: %d %s\n%s", code, errOut, ir)
	}
}
