package compiler

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/runtime"
)

// End-to-end gradient checks of the nn ops' gradient rules (passes/grad_rules_nn.go): each
// float64 model is compiled for training with sgd{lr=0} and the gradients the runtime
// accumulates — through autodiff, lowering, fusion, code generation and the CPU kernels — are
// compared with central finite differences (h = 1e-6) of the loss computed by the same
// programs: |fd − autodiff| / max(|fd|, 1e-3) < 1e-5 for every parameter element.

// e2eGradCheck compiles the model at path and checks its parameter gradients; it returns the
// worst relative error.
func e2eGradCheck(t *testing.T, path string) float64 {
	t.Helper()
	_, job := initJob(t, path, Options{Microbatches: 1, Optimizer: "sgd{lr=0}"}, 5)
	// With lr = 0 a step leaves the parameters alone, so replaying step 1 (its synthetic data)
	// evaluates one fixed function of the parameters.
	loss := func() float64 {
		for _, r := range job.Ranks {
			r.ResetStep(0)
		}
		out, err := job.Step(runtime.Options{Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		if math.IsNaN(out.Loss) || math.IsInf(out.Loss, 0) {
			t.Fatalf("loss %v", out.Loss)
		}
		return out.Loss
	}
	loss()
	grads := map[string][]float64{}
	for name, g := range must(job.Buffers(pb.Role_GRAD)) {
		if !strings.Contains(name, "#") { // a partial of a parameter used twice
			grads[name] = append([]float64(nil), g.F64()...)
		}
	}
	params := must(job.Buffers(pb.Role_PARAM))
	if len(grads) != len(params) || len(params) == 0 {
		t.Fatalf("%d gradients for %d parameters", len(grads), len(params))
	}
	const h = 1e-6
	worst := 0.0
	for name, p := range params {
		v := p.F64()
		for i := range v {
			orig := v[i]
			v[i] = orig + h
			lp := loss()
			v[i] = orig - h
			lm := loss()
			v[i] = orig
			fd := (lp - lm) / (2 * h)
			got := grads[name][i]
			e := math.Abs(fd-got) / math.Max(1e-3, math.Abs(fd))
			worst = math.Max(worst, e)
			if e > 1e-5 {
				t.Errorf("d loss / d %s[%d] = %.10g, finite difference %.10g", name, i, got, fd)
			}
		}
	}
	return worst
}

// nnGradModel is one op (or a few) under test: args are extra parameters, body computes %y from
// %h = x·s, where %x is synthetic data and %s a parameter of x's shape — so the op's input
// gradient flows back through the bwd_in chain into the product, whose weight gradient is the
// bwd_w part — and the loss is mse(%y, %target) against a synthetic target of %y's type.
type nnGradModel struct {
	name, x, args, body string
}

var nnGradModels = []nnGradModel{
	{"conv pads bias", "[2,3,5,5]", `%w: f64[4,3,3,3] {init = "normal(0.4)", param}, %b: f64[4] {init = "normal(0.1)", param}`,
		"%y = conv %h, %w, %b {pads = [1, 1, 1, 1]} : ?"},
	{"conv strides dilations ragged", "[1,2,7,8]", `%w: f64[3,2,2,3] {init = "normal(0.4)", param}`,
		"%y = conv %h, %w {dilations = [2, 1], pads = [1, 0, 0, 1], strides = [2, 3]} : ?"},
	{"conv groups", "[2,4,5,5]", `%w: f64[6,2,3,3] {init = "normal(0.4)", param}, %b: f64[6] {init = "normal(0.1)", param}`,
		"%y = conv %h, %w, %b {groups = 2, pads = [1, 1, 1, 1], strides = [2, 2]} : ?"},
	{"conv depthwise 1d dilated", "[2,3,9]", `%w: f64[3,1,3] {init = "normal(0.4)", param}`,
		"%y = conv %h, %w {dilations = [2], groups = 3, pads = [2, 1]} : ?"},
	{"conv 3d", "[1,2,4,4,3]", `%w: f64[2,2,2,2,2] {init = "normal(0.4)", param}`,
		"%y = conv %h, %w {pads = [0, 1, 0, 1, 0, 0], strides = [2, 1, 1]} : ?"},
	{"conv_transpose", "[1,2,3,3]", `%w: f64[2,3,3,3] {init = "normal(0.4)", param}, %b: f64[3] {init = "normal(0.1)", param}`,
		"%y = conv_transpose %h, %w, %b {output_padding = [1, 0], pads = [1, 1, 0, 0], strides = [2, 2]} : ?"},
	{"conv_transpose groups dilations", "[2,4,3,2]", `%w: f64[4,1,2,2] {init = "normal(0.4)", param}`,
		"%y = conv_transpose %h, %w {dilations = [1, 2], groups = 2, strides = [1, 2]} : ?"},
	{"max_pool pads strides", "[2,2,5,6]", "", "%y = max_pool %h {kernel = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]} : ?"},
	{"max_pool ceil_mode dilations", "[1,2,7,6]", "",
		"%y = max_pool %h {ceil_mode = true, dilations = [2, 1], kernel = [2, 2], strides = [2, 2]} : ?"},
	{"max_pool global", "[2,3,3,4]", "", "%y = max_pool %h {kernel = [3, 4]} : ?"},
	{"max_pool 1d", "[2,2,9]", "", "%y = max_pool %h {kernel = [3], pads = [1, 1], strides = [2]} : ?"},
	{"avg_pool count_include_pad ceil_mode", "[1,2,6,5]", "",
		"%y = avg_pool %h {ceil_mode = true, count_include_pad = true, kernel = [3, 2], pads = [1, 0, 1, 1], strides = [2, 2]} : ?"},
	{"avg_pool pads", "[2,2,5,5]", "", "%y = avg_pool %h {kernel = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]} : ?"},
	{"avg_pool global", "[2,3,3,4]", "", "%y = avg_pool %h {kernel = [3, 4]} : ?"},
	{"batch_norm", "[2,3,3,3]", `%sc: f64[3] {init = "normal(1)", param}, %bi: f64[3] {init = "normal(0.2)", param}`,
		"%m = constant {value = dense<f64[3]: [0.1, -0.3, 0.2]>} : f64[3]\n  %v = constant {value = dense<f64[3]: [0.5, 1.5, 2]>} : f64[3]\n" +
			"  %y = batch_norm %h, %sc, %bi, %m, %v {eps = 0.001} : ?"},
	{"instance_norm", "[2,3,2,3]", `%sc: f64[3] {init = "normal(1)", param}, %bi: f64[3] {init = "normal(0.2)", param}`,
		"%y = instance_norm %h, %sc, %bi : ?"},
	{"lrn", "[2,5,2,2]", "", "%y = lrn %h {alpha = 0.3, beta = 0.75, bias = 1.5, size = 3} : ?"},
	{"lrn even size", "[1,4,3]", "", "%y = lrn %h {alpha = 0.5, size = 2} : ?"},
	{"pad constant crop", "[2,3,4]", "", "%y = pad %h {pads = [0, 1, -1, 1, 0, 2], value = 0.5} : ?"},
	{"pad reflect", "[1,2,3,4]", "", "%y = pad %h {mode = reflect, pads = [0, 0, 2, 1, 0, 0, 1, 3]} : ?"},
	{"pad edge", "[2,3]", "", "%y = pad %h {mode = edge, pads = [1, 3, 2, -1]} : ?"},
	{"pad wrap", "[3,2]", "", "%y = pad %h {mode = wrap, pads = [2, 0, 1, 3]} : ?"},
	{"resize linear", "[1,2,3,4]", "", "%y = resize %h {mode = linear, sizes = [1, 2, 5, 7]} : ?"},
	{"resize linear align_corners", "[1,1,5,4]", "",
		"%y = resize %h {coordinate_transformation_mode = align_corners, mode = linear, sizes = [1, 1, 3, 6]} : ?"},
	{"resize nearest", "[1,2,2,3]", "", "%y = resize %h {sizes = [1, 2, 5, 7]} : ?"},
	{"resize nearest asymmetric", "[2,1,5]", "",
		"%y = resize %h {coordinate_transformation_mode = asymmetric, nearest_mode = floor, scales = [1, 1, 0.6], sizes = [2, 1, 3]} : ?"},
	{"resize cubic", "[1,1,4,4]", "", "%y = resize %h {mode = cubic, sizes = [1, 1, 6, 3]} : ?"},
	{"gather_elements", "[3,4]", `%idx: i64[5,4] {input, range = [0, 3]}`, "%y = gather_elements %h, %idx : ?"},
	{"gather_elements axis 1", "[2,3]", `%idx: i64[2,5] {input, range = [0, 3]}`, "%y = gather_elements %h, %idx {axis = 1} : ?"},
	{"elu", "[2,3,4]", "", "%y = elu %h {alpha = 0.7} : ?"},
	{"selu", "[2,3,4]", "", "%y = selu %h : ?"},
	{"leaky_relu", "[2,3,4]", "", "%y = leaky_relu %h {alpha = 0.2} : ?"},
	{"softplus", "[2,3,4]", "", "%y = softplus %h : ?"},
	{"hard_sigmoid", "[2,3,4]", "", "%y = hard_sigmoid %h {alpha = 0.4, beta = 0.3} : ?"},
	{"shrink", "[2,3,4]", "", "%y = shrink %h {bias = 0.1, lambd = 0.3} : ?"},
	{"floor and sign pass nothing", "[2,3]", "", "%f = floor %h : ?\n  %g = sign %h : ?\n  %p = mul %h, %f : ?\n  %y = add %p, %g : ?"},
	{"reduce_min", "[2,3,4]", "", "%y = reduce_min %h {axes = [1]} : ?"},
	{"reduce_prod", "[2,3,4]", "", "%y = reduce_prod %h {axes = [0, 2], keepdims = true} : ?"},
	{"reduce_log_sum_exp", "[2,3,4]", "", "%y = reduce_log_sum_exp %h {axes = [2]} : ?"},
}

// writeNNModel builds the model's IR, infers the `?` types (and the target's type from %y's),
// and writes it, fully typed, to a file.
func writeNNModel(t *testing.T, c nnGradModel) string {
	t.Helper()
	args := fmt.Sprintf(`%%x: f64%s {input}, %%s: f64%s {init = "normal(1)", param}`, c.x, c.x)
	if c.args != "" {
		args += ", " + c.args
	}
	parse := func(args, tail, ret string) *ir.Module {
		src := fmt.Sprintf("func @forward(%s) -> (%s) {\n  %%h = mul %%x, %%s : ?\n  %s\n%s}\n", args, ret, c.body, tail)
		m, err := ir.Parse(c.name+".ir", src)
		if err != nil {
			t.Fatal(err)
		}
		if err := passes.InferFunc(m, m.Funcs[0]); err != nil {
			t.Fatal(err)
		}
		return m
	}
	y := parse(args, "  return %y\n", "?").Funcs[0].Results[0].Type
	m := parse(fmt.Sprintf("%s, %%target: %s {input, label}", args, y), "  %loss = mse %y, %target : ?\n  return %loss\n", "f64[] {loss}")
	if err := ir.Verify(m); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "model.ir")
	if err := os.WriteFile(path, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNNGradientsEndToEnd(t *testing.T) {
	worstAll := 0.0
	for _, c := range nnGradModels {
		t.Run(c.name, func(t *testing.T) {
			w := e2eGradCheck(t, writeNNModel(t, c))
			worstAll = math.Max(worstAll, w)
			t.Logf("worst relative error %.2e", w)
		})
	}
	t.Logf("worst relative error over all models %.2e", worstAll)
}

// TestNNModelGradientsEndToEnd checks a CNN chaining most of the nn ops
// (testdata/ir/gradcheck_nn.ir).
func TestNNModelGradientsEndToEnd(t *testing.T) {
	t.Logf("worst relative error %.2e", e2eGradCheck(t, "../testdata/ir/gradcheck_nn.ir"))
}

// TestONNXCNNsTrain compiles ONNX backend models with convolutions, pooling and batch
// normalisation for training (mse against a synthetic target, plain SGD) and runs 20 steps on
// one fixed batch: the loss must stay finite and fall. The pooling models have no parameters:
// a training compile of them is refused, saying why.
func TestONNXCNNsTrain(t *testing.T) {
	if _, err := os.Stat(backendDir); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("ONNX backend test data not found at %s: the shared folder is absent", backendDir)
	}
	for _, c := range []struct {
		model string
		lr    float64
	}{
		{"pytorch-converted/test_Conv2d", 0.05},
		{"pytorch-converted/test_Conv2d_no_bias", 0.05},
		{"pytorch-converted/test_Conv2d_groups", 0.05},
		{"pytorch-converted/test_Conv2d_depthwise_strided", 0.05},
		{"pytorch-converted/test_Conv2d_dilated", 0.05},
		{"pytorch-converted/test_Conv2d_padding", 0.05},
		{"pytorch-converted/test_Conv1d_pad2", 0.05},
		{"pytorch-converted/test_Conv1d_stride", 0.05},
		{"pytorch-converted/test_Conv3d_dilated_strided", 0.05},
		{"pytorch-converted/test_ConvTranspose2d", 0.05},
		{"pytorch-operator/test_operator_conv", 0.01},
		{"pytorch-operator/test_operator_convtranspose", 0.01},
		{"pytorch-converted/test_BatchNorm2d_eval", 0.1},
		{"pytorch-converted/test_BatchNorm1d_3d_input_eval", 0.1},
		{"pytorch-converted/test_BatchNorm3d_momentum_eval", 0.1},
	} {
		t.Run(c.model, func(t *testing.T) {
			path := filepath.Join(backendDir, c.model, "model.onnx")
			_, job := initJob(t, path, Options{Loss: "mse", Optimizer: fmt.Sprintf("sgd{lr=%g,momentum=0}", c.lr)}, 1)
			var losses []float64
			for range 20 {
				for _, r := range job.Ranks {
					r.ResetStep(0) // the same batch every step
				}
				out, err := job.Step(runtime.Options{Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				if math.IsNaN(out.Loss) || math.IsInf(out.Loss, 0) {
					t.Fatalf("step %d: loss %v", len(losses)+1, out.Loss)
				}
				losses = append(losses, out.Loss)
			}
			first, last := losses[0], losses[len(losses)-1]
			nParams := len(must(job.Buffers(pb.Role_PARAM)))
			t.Logf("%d parameter tensors; loss %.5g → %.5g", nParams, first, last)
			if !(last < first) {
				t.Errorf("the loss did not fall: %v", losses)
			}
			for i := 1; i < len(losses); i++ {
				if losses[i] > losses[i-1]*(1+1e-6) {
					t.Errorf("the loss rose at step %d: %v", i+1, losses)
					break
				}
			}
		})
	}
	for _, model := range []string{"pytorch-converted/test_MaxPool2d", "pytorch-converted/test_AvgPool3d_stride", "pytorch-operator/test_operator_maxpool"} {
		path := filepath.Join(backendDir, model, "model.onnx")
		if _, err := Compile(path, Options{Loss: "mse"}); err == nil || !strings.Contains(err.Error(), "nothing to train: the model has no trainable parameters (it has no weights at all)") {
			t.Errorf("%s: %v, want the error that there is nothing to train", model, err)
		}
	}
}

// TestCNNTrainsF32 trains the f32 version of testdata/ir/gradcheck_nn.ir (every nn gradient
// kernel in f32) with plain SGD on one fixed batch: the loss must fall. The same model split
// into two pipeline stages under a zero-bubble schedule, which runs the input-gradient (B) and
// weight-gradient (W) halves of the backward at different times, must give the same losses.
func TestCNNTrainsF32(t *testing.T) {
	src, err := os.ReadFile("../testdata/ir/gradcheck_nn.ir")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cnn32.ir")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(src), "f64", "f32")), 0o644); err != nil {
		t.Fatal(err)
	}
	train := func(opts Options, steps int) []float64 {
		opts.Optimizer = "sgd{lr=0.1,momentum=0}"
		_, job := initJob(t, path, opts, 2)
		var losses []float64
		for range steps {
			for _, r := range job.Ranks {
				r.ResetStep(0)
			}
			out, err := job.Step(runtime.Options{Seed: 2})
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, out.Loss)
		}
		return losses
	}
	one := train(Options{Microbatches: 2}, 20)
	t.Logf("loss %.5g → %.5g", one[0], one[len(one)-1])
	if !(one[len(one)-1] < one[0]) || math.IsNaN(one[0]) {
		t.Errorf("the loss did not fall: %v", one)
	}
	pipe := train(Options{Microbatches: 2, PP: 2, Schedule: "zb-h1"}, 5)
	for i, l := range pipe {
		if math.Abs(l-one[i]) > 1e-5*math.Abs(one[i]) {
			t.Errorf("step %d: loss %v with pp=2 zb-h1, %v on one device", i+1, l, one[i])
		}
	}
}
