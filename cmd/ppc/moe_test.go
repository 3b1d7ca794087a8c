package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestMoEErrors: mixture-of-experts settings the model cannot have exit 2 at the position
// that uses them — a top_k above the experts, no experts, a capacity below 1 — and a model
// that routes tokens across the sequence refuses token slicing and ONNX export by name.
func TestMoEErrors(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	out := filepath.Join(t.TempDir(), "plan")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", moe, "-o", out, "--set", "top_k=5"}, "moe.ppm:121:18: top_k: k = 5 must be in [1, 4]"},
		{[]string{"compile", moe, "-o", out, "--set", "n_experts=0"}, "dimension must be a positive integer"},
		{[]string{"compile", moe, "-o", out, "--set", "capacity_factor=0.001"}, ""},
		{[]string{"compile", moe, "-o", out, "--token-slices", "8,8"}, "reshape merges the sequence axis with another"},
		{[]string{"export", moe, "-o", filepath.Join(t.TempDir(), "m.onnx")}, "op top_k has no ONNX mapping"},
	} {
		code, _, errOut := ppc(t, "", c.args...)
		if c.want == "" {
			// A tiny capacity factor still gives every expert one row.
			if code != 0 {
				t.Errorf("%v: exit %d: %s", c.args, code, errOut)
			}
			continue
		}
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
	// An IR module with a capacity of 0: the verifier names the op.
	ir := writeFile(t, "cap.ir", `func @forward(%i: i64[4,2] {input}) -> (i64[4,2]) {
  %s, %l = moe_slots %i {experts = 4, capacity = 0} : i64[4,2], i64[4]
  return %s
}
`)
	if code, _, errOut := ppc(t, "", "opt", ir); code != 2 || !strings.Contains(errOut, "cap.ir:2:12") || !strings.Contains(errOut, "capacity = 0 must be ≥ 1") {
		t.Errorf("capacity 0: exit %d, stderr %q", code, errOut)
	}
}

// TestMoESummary: the compile summary counts the experts' parameters apart from the dense
// ones and the parameters a token reads, and the stage table gives each stage's experts.
// The tiny model by hand: 4 layers × (w_gate, w_up, w_down) of 4 experts × 64 × 96 = 294,912
// of 411,200; a token reads 2 of 4 experts, 116,288 + 147,456.
func TestMoESummary(t *testing.T) {
	moe := filepath.Join("..", "..", "testdata", "models", "moe.ppm")
	code, out, errOut := ppc(t, "", "compile", moe, "--pp", "2", "--microbatches", "2", "-o", filepath.Join(t.TempDir(), "plan"))
	if code != 0 {
		t.Fatal(errOut)
	}
	for _, want := range []string{
		"experts      294,912 of them in 4 MoE layer(s) of 4 experts, top 2 per token: 263,744 active per token (116,288 dense + 147,456 of the experts')",
		"params   of experts",
		"E,t0-t1             205,568      147,456",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}
