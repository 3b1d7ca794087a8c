package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/internal/onnxtest"
)

// TestTokenSlicesErrors: every bad --token-slices value and every model that cannot be cut
// into token slices exits 2 with a message that says why (and, for a model, where).
func TestTokenSlicesErrors(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	// tinyLM is a one-layer language model whose middle is body (x in, x out).
	tinyLM := func(name, body string) string {
		return writeFile(t, name+".ppm", "model "+name+`
config {
  vocab = 16
  d = 8
  seq = 4
  batch = 2
}
input tokens: i64[batch, seq] in [0, vocab)
label labels: i64[batch, seq] in [0, vocab) next of tokens
forward {
  param wte: f32[vocab, d] = normal(0.02)
  x = gather(wte, tokens)
`+body+`
  logits = x @ transpose(wte)
  loss cross_entropy(logits, labels)
}
`)
	}
	nonCausal := tinyLM("bidir", "  s = x @ transpose(x)\n  x = softmax(s) @ x")
	conv := tinyLM("pool", "  x = x + mean(x, axes = [1], keepdims = true)")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{gpt, "--token-slices", "33"}, "--token-slices 33: the sequence has 32 tokens, so at most 32 slices"},
		{[]string{gpt, "--token-slices", "0"}, "--token-slices 0: want at least 1 slice"},
		{[]string{gpt, "--token-slices", "-3"}, "--token-slices -3: want at least 1 slice"},
		{[]string{gpt, "--token-slices", "16,0,16"}, `--token-slices "16,0,16": token slice length 0: every slice needs at least one token`},
		{[]string{gpt, "--token-slices", "16,-4,20"}, `token slice length -4: every slice needs at least one token`},
		{[]string{gpt, "--token-slices", "10,10"}, `--token-slices "10,10": the lengths sum to 20, the sequence has 32 tokens`},
		{[]string{gpt, "--token-slices", "many"}, `--token-slices "many": token slice length "many" is not an integer (want a count, lengths such as 120,120,112, or auto)`},
		{[]string{gpt, "--tp", "2", "--sp", "--token-slices", "2"}, "--token-slices with --sp: sequence parallelism already splits the sequence"},
		{[]string{nonCausal, "--token-slices", "2"}, "bidir.ppm:14:7: token slicing: softmax normalises attention scores over keys that no causal mask hides: the model's attention is not causal"},
		{[]string{conv, "--token-slices", "2"}, "pool.ppm:13:11: token slicing: reduce_mean reduces over the sequence axis: its result at one token depends on other tokens"},
	} {
		args := append([]string{"compile", "-o", filepath.Join(t.TempDir(), "out")}, c.args...)
		code, _, errOut := ppc(t, "", args...)
		if code != exitInput || !strings.Contains(errOut, c.want) {
			t.Errorf("ppc %v: exit %d, want 2 with %q:\n%s", c.args, code, c.want, errOut)
		}
	}
}

// decoder is a one-layer ONNX decoder as exporters write one: scores masked by an additive
// [1,1,T,T] constant ("add"), by Where on a sliced boolean buffer ("where", as Hugging Face's
// GPT-2 export), or not at all ("none": bidirectional attention).
func decoder(mask string) *onnxtest.Model {
	const T, d, v = 8, 8, 16
	m := onnxtest.New(17).Input("input_ids", onnxtest.Int64, 2, T).
		Init(onnxtest.Random("wte", 1, 0.3, v, d)).Init(onnxtest.Random("wq", 2, 0.3, d, d)).
		Init(onnxtest.Random("wk", 3, 0.3, d, d)).Init(onnxtest.Random("wv", 4, 0.3, d, d)).
		Node("Gather", "embed", onnxtest.In("wte", "input_ids"), []string{"x"}).
		Node("MatMul", "q_proj", onnxtest.In("x", "wq"), []string{"q"}).
		Node("MatMul", "k_proj", onnxtest.In("x", "wk"), []string{"k"}).
		Node("MatMul", "v_proj", onnxtest.In("x", "wv"), []string{"v"}).
		Node("Transpose", "k_t", onnxtest.In("k"), []string{"kt"}, onnxtest.Ints("perm", 0, 2, 1)).
		Node("MatMul", "scores", onnxtest.In("q", "kt"), []string{"s"})
	scores := "s"
	switch mask {
	case "add":
		vals := make([]float32, T*T)
		for i := range T {
			for j := i + 1; j < T; j++ {
				vals[i*T+j] = -3.4028235e38
			}
		}
		m.Constant("mask", onnxtest.F32("mask", []int64{1, T, T}, vals...)).Node("Add", "apply_mask", onnxtest.In("s", "mask"), []string{"sm"})
		scores = "sm"
	case "where":
		const n = 16 // the exporter's max positions, sliced to the sequence
		buf := make([]byte, n*n)
		for i := range n {
			for j := 0; j <= i; j++ {
				buf[i*n+j] = 1
			}
		}
		m.Init(&onnxpb.TensorProto{Name: "bias", Dims: []int64{1, n, n}, DataType: onnxtest.Bool, RawData: buf}).
			Init(onnxtest.I64("st", []int64{2}, 0, 0)).Init(onnxtest.I64("en", []int64{2}, T, T)).Init(onnxtest.I64("ax", []int64{2}, 1, 2)).
			Init(onnxtest.F32("lowest", nil, -3.4028235e38)).
			Node("Slice", "causal", onnxtest.In("bias", "st", "en", "ax"), []string{"keep"}).
			Node("Where", "apply_mask", onnxtest.In("keep", "s", "lowest"), []string{"sm"})
		scores = "sm"
	}
	return m.Node("Softmax", "attn_softmax", onnxtest.In(scores), []string{"p"}, onnxtest.Int("axis", -1)).
		Node("MatMul", "attn_out", onnxtest.In("p", "v"), []string{"y"}).
		Node("Transpose", "head_t", onnxtest.In("wte"), []string{"head"}, onnxtest.Ints("perm", 1, 0)).
		Node("MatMul", "lm_head", onnxtest.In("y", "head"), []string{"logits"}).
		Output("logits")
}

// TestTokenSlicesONNX: the masked-softmax patterns of exported ONNX decoders are recognised
// as causal, and training them in token slices matches training them whole; attention
// without a mask is refused naming the ONNX node.
func TestTokenSlicesONNX(t *testing.T) {
	for _, mask := range []string{"add", "where"} {
		model := decoder(mask).Write(t, mask+".onnx")
		losses := func(extra ...string) string {
			dir := filepath.Join(t.TempDir(), "plan")
			args := append([]string{"compile", model, "-o", dir, "--pp", "2", "--schedule", "gpipe", "--microbatches", "2", "--optimizer", "sgd{lr=0.5}"}, extra...)
			if code, _, errOut := ppc(t, "", args...); code != 0 {
				t.Fatalf("%s: ppc %v: exit %d\n%s", mask, args, code, errOut)
			}
			code, out, errOut := ppc(t, "", "run", dir, "--steps", "3")
			if code != 0 {
				t.Fatalf("%s: run: exit %d\n%s", mask, code, errOut)
			}
			return strings.Join(regexp.MustCompile(`loss=[0-9.]+`).FindAllString(out, -1), " ")
		}
		whole, sliced := losses(), losses("--token-slices", "5,3")
		if whole == "" || whole != sliced {
			t.Errorf("%s mask: losses whole %q, in token slices 5,3 %q", mask, whole, sliced)
		}
	}
	model := decoder("none").Write(t, "bidir.onnx")
	code, _, errOut := ppc(t, "", "compile", model, "-o", filepath.Join(t.TempDir(), "x"), "--token-slices", "2")
	want := fmt.Sprintf("node %q (Softmax)", "attn_softmax")
	if code != exitInput || !strings.Contains(errOut, want) || !strings.Contains(errOut, "attention is not causal") {
		t.Errorf("bidirectional ONNX decoder: exit %d, want 2 naming %s:\n%s", code, want, errOut)
	}
}

// TestSimulateTokenSlices: ppc simulate cuts a generated schedule into K token slices of 1/K
// of the costs each: with unit costs, GPipe on 4 ranks with one micro-batch takes
// (K + 3)·3/K — 12, 7.5, 5.25, 4.125 — and the timeline names the units micro-batch.slice.
// A bad count, or --token-slices with a plan directory, is a usage error.
func TestSimulateTokenSlices(t *testing.T) {
	for k, want := range map[string]string{"1": "step time     12\n", "2": "step time     7.5\n", "4": "step time     5.25\n", "8": "step time     4.125\n"} {
		code, out, errOut := ppc(t, "", "simulate", "--schedule", "gpipe", "--pp", "4", "--microbatches", "1", "--token-slices", k)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("--token-slices %s: exit %d, want %q:\n%s%s", k, code, want, out, errOut)
		}
	}
	svg := filepath.Join(t.TempDir(), "t.svg")
	if code, out, errOut := ppc(t, "", "simulate", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "--token-slices", "3", "--svg", svg); code != 0 ||
		!strings.Contains(out, "2 micro-batch(es) of 3 token slices") || !fileContains(t, svg, "<title>1B1.2 ") {
		t.Errorf("1f1b in 3 slices: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"--token-slices", "0"}, {"--token-slices", "-1"}, {"--token-slices", "two"}} {
		code, _, errOut := ppc(t, "", append([]string{"simulate", "--schedule", "gpipe", "--pp", "2"}, args...)...)
		if code != exitInput || !strings.Contains(errOut, "--token-slices") {
			t.Errorf("%v: exit %d, want 2:\n%s", args, code, errOut)
		}
	}
	dir := filepath.Join(t.TempDir(), "plan")
	ppcAll(t, [][]string{{"compile", filepath.Join("..", "..", "testdata", "models", "mlp.ppm"), "-o", dir, "--pp", "2", "--microbatches", "2"}})
	if code, _, errOut := ppc(t, "", "simulate", dir, "--token-slices", "2"); code != exitInput || !strings.Contains(errOut, "a plan's token slices are compiled into it") {
		t.Errorf("plan with --token-slices: exit %d\n%s", code, errOut)
	}
}

func fileContains(t *testing.T, path, s string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), s)
}

// TestCompileGPU: --gpu names the device profile the estimates assume — the summary names it,
// plan.json records it, a faster GPU predicts a shorter step — and an unknown one exits 2
// listing the known profiles.
func TestCompileGPU(t *testing.T) {
	gpt := filepath.Join("..", "..", "testdata", "models", "gpt.ppm")
	step := func(gpu string) string {
		dir := filepath.Join(t.TempDir(), "p")
		code, out, errOut := ppc(t, "", "compile", gpt, "-o", dir, "--pp", "2", "--microbatches", "2", "--precision", "bf16", "--gpu", gpu)
		if code != 0 || !strings.Contains(out, "for device profile "+gpu+" (") || !fileContains(t, filepath.Join(dir, "plan.json"), `"name": "`+gpu+`"`) {
			t.Fatalf("--gpu %s: exit %d\n%s%s", gpu, code, out, errOut)
		}
		return regexp.MustCompile(`step ([0-9.]+ [µm]s)`).FindStringSubmatch(out)[1]
	}
	v, h := step("v100-16gb"), step("h100-80gb")
	if v == h {
		t.Errorf("v100 and h100 predict the same step %s", v)
	}
	code, _, errOut := ppc(t, "", "compile", gpt, "-o", filepath.Join(t.TempDir(), "p"), "--gpu", "b200")
	if code != exitInput || !strings.Contains(errOut, `--gpu: unknown device profile "b200" (known: a100-like, v100-16gb, a100-40gb, a100-80gb, h100-80gb, h200)`) {
		t.Errorf("--gpu b200: exit %d\n%s", code, errOut)
	}
	// Overridden figures are part of the profile's name, in the plan and the summary.
	dir := filepath.Join(t.TempDir(), "p")
	code, out, errOut := ppc(t, "", "compile", gpt, "-o", dir, "--pp", "2", "--microbatches", "2", "--gpu", "h100-80gb{inter_node_bandwidth=1e9,mem_bytes=1e6}")
	if code != 0 || !strings.Contains(out, "h100-80gb{inter_node_bandwidth=1e+09,mem_bytes=1000000} (") || !strings.Contains(out, "does not fit: rank 0 needs") {
		t.Errorf("--gpu with overrides: exit %d\n%s%s", code, out, errOut)
	}
}

// TestZBAutoCLI: zb-auto is built for the --cost given to ppc simulate (on W = 0.4 it is at
// least as fast as ZB-H1), ppc compile builds it for the cost model's stage times and the
// plan trains, and --max-inflight belongs to zb-auto alone (exit 2 elsewhere).
func TestZBAutoCLI(t *testing.T) {
	stepOf := func(args ...string) string {
		code, out, errOut := ppc(t, "", append([]string{"simulate", "--pp", "4", "--microbatches", "8", "--cost", "F=1,I=1.3,W=0.4"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errOut)
		}
		return regexp.MustCompile(`step time +([0-9.]+)`).FindStringSubmatch(out)[1]
	}
	auto, h1 := stepOf("--schedule", "zb-auto"), stepOf("--schedule", "zb-h1")
	if a, h := mustFloat(t, auto), mustFloat(t, h1); a > h {
		t.Errorf("zb-auto %v slower than zb-h1 %v", a, h)
	}
	dir := filepath.Join(t.TempDir(), "p")
	ppcAll(t, [][]string{
		{"compile", filepath.Join("..", "..", "testdata", "models", "gpt.ppm"), "-o", dir, "--pp", "4", "--microbatches", "8", "--schedule", "zb-auto", "--max-inflight", "7"},
		{"run", dir, "--steps", "1"},
	})
	for _, args := range [][]string{
		{"simulate", "--schedule", "1f1b", "--max-inflight", "3"},
		{"compile", filepath.Join("..", "..", "testdata", "models", "gpt.ppm"), "-o", dir, "--pp", "2", "--microbatches", "2", "--max-inflight", "3"},
	} {
		if code, _, errOut := ppc(t, "", args...); code != exitInput || !strings.Contains(errOut, "--max-inflight applies to zb-auto") {
			t.Errorf("%v: exit %d\n%s", args, code, errOut)
		}
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSimulateSpanRate: ppc simulate --json reports the Zero Bubble paper's span and bubble
// rate beside ppc's bubble ratio: for 1F1B on unit costs the rate is (p−1)/(m+p−1), and
// zb-auto built at the paper's ZB-2p memory for its 6.2B costs (a pending W holding 0.432 of
// an activation) comes within 0.005 of the paper's 0.0029, holding at most 2p activations;
// a wstash outside (0, 1] is bad input.
func TestSimulateSpanRate(t *testing.T) {
	type out struct {
		SpanTime       float64   `json:"span_time"`
		SpanBubbleRate float64   `json:"span_bubble_rate"`
		BubbleRatio    float64   `json:"bubble_ratio"`
		Held           []float64 `json:"peak_activations_held"`
	}
	run := func(args ...string) out {
		t.Helper()
		code, stdout, errOut := ppc(t, "", append([]string{"simulate", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errOut)
		}
		var o out
		if err := json.Unmarshal([]byte(stdout), &o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o := run("--schedule", "1f1b", "--pp", "4", "--microbatches", "8"); o.SpanTime != 33 || math.Abs(o.SpanBubbleRate-3.0/11) > 1e-12 || o.BubbleRatio != 3.0/8 {
		t.Errorf("1f1b p 4 m 8: span %v rate %v ratio %v, want 33, 3/11, 3/8", o.SpanTime, o.SpanBubbleRate, o.BubbleRatio)
	}
	o := run("--schedule", "zb-auto", "--pp", "8", "--microbatches", "24", "--max-inflight", "16",
		"--cost", "F=29.718,I=29.444,W=19.927,comm=0.527,wstash=0.432")
	if o.SpanBubbleRate > 0.0029+0.005 || len(o.Held) != 8 {
		t.Errorf("zb-auto on the paper's 6.2B costs: rate %v, held %v", o.SpanBubbleRate, o.Held)
	}
	for r, h := range o.Held {
		if h > 16+1e-9 {
			t.Errorf("rank %d holds %v activations, --max-inflight 16", r, h)
		}
	}
	if code, _, errOut := ppc(t, "", "simulate", "--schedule", "zb-auto", "--pp", "4", "--microbatches", "8", "--cost", "wstash=0"); code != exitInput || !strings.Contains(errOut, "wstash is a part of an activation") {
		t.Errorf("wstash=0: exit %d\n%s", code, errOut)
	}
}
