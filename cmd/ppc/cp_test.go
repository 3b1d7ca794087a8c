package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const llama = "../../testdata/models/llama.ppm"

// TestCPBadInput: every refusal of --cp exits 2 and names the setting to use.
func TestCPBadInput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "plan")
	runCases(t, []cliCase{
		{[]string{"compile", gpt, "--preset", "tiny", "--cp", "3", "-o", out}, exitInput,
			[]string{"--cp 3: 2·cp (the zig-zag split's chunks) must divide the sequence of 32 tokens", "the nearest that do: --cp 2 or --cp 4"}, []string{"panic"}},
		{[]string{"compile", gpt, "--preset", "tiny", "--set", "seq=24", "--cp", "8", "-o", out}, exitInput,
			[]string{"--cp 8:", "or --cp-split contiguous"}, nil},
		{[]string{"compile", gpt, "--preset", "tiny", "--cp", "5", "--cp-split", "contiguous", "-o", out}, exitInput,
			[]string{"--cp 5: the sequence must divide", "--cp 4"}, nil},
		{[]string{"compile", mlp, "--cp", "2", "-o", out}, exitInput, []string{"--cp 2: the model has no attention op", "use --cp 1"}, nil},
		{[]string{"compile", gpt, "--preset", "tiny", "--set", "fused_attention=false", "--cp", "2", "-o", out}, exitInput,
			[]string{"gpt.ppm:66:", "matmul contracts over the sequence axis", "--cp 1"}, nil},
		{[]string{"compile", gpt, "--preset", "tiny", "--cp", "0", "-o", out}, exitInput, []string{"--cp, --dp and --microbatches must be at least 1"}, nil},
		{[]string{"compile", gpt, "--preset", "tiny", "--cp", "2", "--cp-split", "ring", "-o", out}, exitInput, []string{`--cp-split "ring": want zigzag or contiguous`}, nil},
		{[]string{"compile", gpt, "--preset", "tiny", "--cp", "2", "--token-slices", "2", "-o", out}, exitInput, []string{"--token-slices with --cp"}, nil},
		{[]string{"infer", gpt, "--preset", "tiny", "--cp", "3", "--output-dir", out}, exitInput, []string{"--cp 3:", "--cp 2 or --cp 4"}, nil},
		{[]string{"infer", gpt, "--preset", "tiny", "--cp", "0", "--output-dir", out}, exitInput, []string{"--pp, --tp and --cp must be at least 1"}, nil},
	})
}

// TestCPSummaryAndDis: the compile summary shows the cp mesh and each cp rank's share of the
// causal attention work under both splits; ppc dis shows the ring's transfers.
func TestCPSummaryAndDis(t *testing.T) {
	dir, out := compileWithSummary(t, llama, "--preset", "tiny", "--cp", "4", "--cp-split", "contiguous")
	for _, want := range []string{"mesh         pp=1 dp=1 cp=4 tp=1: 4 rank(s)",
		"cp           4 ranks × 8 tokens of 32, contiguous split; causal attention work per cp rank: 6.8% 18.9% 31.1% 43.2% (zigzag split: 25.0% 25.0% 25.0% 25.0%)",
		"× 4 dp·cp·tp replicas"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	code, dis, errOut := ppc(t, "", "dis", dir)
	if code != 0 {
		t.Fatal(errOut)
	}
	for _, want := range []string{"to cp+1 (ring)", "recv from cp-1 (ring)"} {
		if !strings.Contains(dis, want) {
			t.Errorf("ppc dis lacks %q", want)
		}
	}
}

// TestInferCP: ppc infer --cp runs the forward pass with the sequence split (its outputs are
// checked against one device in the compiler's TestDistributedInference).
func TestInferCP(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := ppc(t, "", "infer", llama, "--preset", "tiny", "--set", "n_layers=2", "--cp", "2", "--tp", "2", "--output-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "logits.npy")); err != nil {
		t.Fatal(err)
	}
}
