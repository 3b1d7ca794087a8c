package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const tpMLP = "../../testdata/ir/tp-mlp.ir"

// A pp × dp × tp plan through the CLI: one program file per pipeline rank, one summary line
// per program naming its replicas, the stage table with what a tensor-parallel rank holds,
// dis showing the collectives by mesh axis and the shardings, and a run.
func TestCompileRunReplicas(t *testing.T) {
	dir, out := compileWithSummary(t, tpMLP, "--pp", "2", "--dp", "2", "--tp", "2", "--microbatches", "2")
	for _, want := range []string{
		"mesh         pp=2 dp=2 tp=2: 8 rank(s) running 2 program(s), 2 stage(s), schedule 1f1b, 2 micro-batch(es) per replica, 4 in all\n",
		"instructions (each of ranks 0–3: × 4 dp·tp replicas)\n",
		"instructions (each of ranks 4–7: × 4 dp·tp replicas)\n",
		"params  params/rank",
		// Stage 0 holds w0 (256), w1 (512, split), b1 (32, split), w2 (512, split), b2 (16).
		"  0     0    t0-t6                 1,328          800 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rank 5 ") {
		t.Errorf("summary has a line per rank:\n%s", out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.ppx"))
	if len(files) != 2 || filepath.Base(files[1]) != "rank-00004.ppx" {
		t.Fatalf("program files %v, want rank-00000.ppx and rank-00004.ppx", files)
	}
	p := readPlan(t, dir)
	if r := p.Ranks[6]; r.Program != "rank-00004.ppx" || r.Coords.PP != 1 || r.Coords.DP != 1 || r.Coords.TP != 0 ||
		!slices.Equal(r.Groups.TP, []int{6, 7}) || !slices.Equal(r.Groups.DP, []int{4, 6}) || !slices.Equal(r.Groups.PP, []int{2, 6}) {
		t.Errorf("plan.json rank 6: %+v", r)
	}
	code, stdout, _ := ppc(t, "", "dis", dir)
	for _, want := range []string{"program of pipeline rank 1", "mesh pp=2 dp=2 tp=2: run by 4 rank(s)", "w1 init=normal(0.2) shard=[_, tp]",
		"w1.exp_avg init=zeros shard=[_, tp]", "all_reduce sum b", " over tp\n", " over dp\n", "= reduce_scatter sum b", "= all_gather b", "recv from pp 0"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("dis lacks %q", want)
		}
	}
	if n := strings.Count(stdout, "program of pipeline rank"); n != 2 {
		t.Errorf("dis DIR printed %d programs, want 2", n)
	}
	code, stdout, errOut := ppc(t, "", "run", dir, "--steps", "2")
	if code != 0 || !strings.Contains(stdout, "ran 2 step(s)") {
		t.Fatalf("run: %d\n%s%s", code, stdout, errOut)
	}
}

func TestDataParallelFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	runCases(t, []cliCase{
		{[]string{"compile", mlp, "--dp", "2", "--zero", "4", "-o", out}, exitInput,
			[]string{"--zero must be 1, 2 or 3 (0: off), got 4"}, []string{"reproducer"}},
		{[]string{"compile", mlp, "--dp", "2", "--zero", "-1", "-o", out}, exitInput,
			[]string{"--zero must be 1, 2 or 3 (0: off), got -1"}, []string{"reproducer"}},
		{[]string{"compile", mlp, "--zero", "3", "-o", out}, exitInput,
			[]string{"--zero 3 shards over the data-parallel replicas: it needs --dp 2 or more"}, nil},
		{[]string{"compile", mlp, "--dp", "2", "--zero", "3", "--forward-only", "-o", out}, exitInput,
			[]string{"--zero does not apply to --forward-only (no optimizer)"}, nil},
		{[]string{"compile", mlp, "--dp", "2", "--optimizer", "adamw{zero=1}", "-o", out}, exitInput,
			[]string{"option zero: ZeRO is chosen with --zero, not in --optimizer"}, nil},
		{[]string{"compile", tpMLP, "--tp", "4", "-o", out}, exitInput,
			[]string{"the module is partitioned for tp = 2 (its shapes are per rank); compile it with --tp 2"}, nil},
		{[]string{"compile", gpt, "--preset", "tiny", "--sp", "-o", out}, exitInput,
			[]string{"--sp splits the sequence over the tensor-parallel ranks: it needs --tp 2 or more"}, nil},
		{[]string{"compile", mlp, "--zero", "1", "-o", out}, exitInput,
			[]string{"--zero 1 shards over the data-parallel replicas: it needs --dp 2 or more"}, nil},
		{[]string{"compile", gpt, "--preset", "tiny", "--tp", "0", "-o", out}, exitInput,
			[]string{"--pp, --tp, --dp and --microbatches must be at least 1"}, nil},
		// Megatron's patterns that tp does not divide: the heads (a vocabulary is padded,
		// TestPadVocabCLI).
		{[]string{"compile", gpt, "--preset", "tiny", "--tp", "8", "-o", out}, exitInput,
			[]string{"--tp 8 cannot split dim 2 (size 4) of reshape's result f32[16,32,4,16]", "tp sizes that divide it: 1, 2, 4"}, []string{"reproducer"}},
		{[]string{"compile", gpt, "--preset", "tiny", "--dp", "3", "-o", out}, exitInput,
			[]string{"global batch 16 does not divide into 3 micro-batches (1 per data-parallel replica × 3 replicas); batch sizes that do: 15 or 18"}, nil},
	})
}

// TestDataParallelReadsTheGlobalBatch: with --data, replica d of --dp 2 reads micro-batches
// 2d and 2d+1 of each step's global batch, so two steps train as one device with four
// micro-batches does (ppc compare's tolerance: the replicas' gradient sums add in another
// order), and the batch a file must hold is the global one.
func TestDataParallelReadsTheGlobalBatch(t *testing.T) {
	dp := compilePlan(t, mlp, "--dp", "2", "--microbatches", "2")
	one := compilePlan(t, mlp, "--microbatches", "4")
	dir := t.TempDir()
	xs, ys := make([]float64, 64*64), make([]float64, 64)
	for i := range xs {
		xs[i] = float64((i*7919)%201-100) / 50
	}
	for i := range ys {
		ys[i] = float64((i * 37) % 10)
	}
	data := "x=" + writeNpy(t, dir, "x.npy", "<f4", "64, 64", xs) + ",y=" + writeNpy(t, dir, "y.npy", "<i8", "64,", ys)
	ckDP, ckOne := filepath.Join(dir, "dp"), filepath.Join(dir, "one")
	for _, c := range [][]string{{dp, ckDP}, {one, ckOne}} {
		if code, _, errOut := ppc(t, "", "run", c[0], "--steps", "2", "--data", data, "--save", c[1]); code != 0 {
			t.Fatalf("run %s: %s", c[0], errOut)
		}
	}
	if code, stdout, _ := ppc(t, "", "compare", ckOne, ckDP, "--rtol", "1e-4", "--atol", "1e-5"); code != 0 {
		t.Fatalf("dp=2 and one device differ:\n%s", stdout)
	}
	x16 := writeNpy(t, dir, "x16.npy", "<f4", "16, 64", make([]float64, 16*64))
	y16 := writeNpy(t, dir, "y16.npy", "<i8", "16,", make([]float64, 16))
	runCases(t, []cliCase{{[]string{"run", dp, "--data", "x=" + x16 + ",y=" + y16}, exitInput,
		[]string{x16 + ` holds 16 sample(s) of input "x", fewer than one batch needs: 32 (8 per micro-batch × 4 micro-batches)`}, nil}})
}

// The stage table's tied-weight note counts pipeline ranks, each standing for its replicas.
func TestSummaryTiedReplicas(t *testing.T) {
	_, out := compileWithSummary(t, gpt, "--preset", "tiny", "--pp", "2", "--dp", "2", "--microbatches", "2")
	want := "tied: wte (32,768) is used by stages 0 and 1 and held on pipeline ranks 0 and 1, counted in each\n"
	if !strings.Contains(out, want) {
		t.Errorf("summary lacks %q:\n%s", want, out)
	}
}

// TestInferDistributed: ppc infer --pp/--tp runs the forward pass distributed and writes the
// outputs; the numbers are compared with one device in the compiler's tests.
func TestInferDistributed(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := ppc(t, "", "infer", gpt, "--preset", "tiny", "--set", "n_layers=2", "--pp", "2", "--tp", "2", "--output-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, f := range []string{"logits.npy", "loss.npy"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	runCases(t, []cliCase{
		{[]string{"infer", gpt, "--preset", "tiny", "--tp", "0", "--output-dir", dir}, exitInput, []string{"--pp, --tp and --cp must be at least 1"}, nil},
	})
}
