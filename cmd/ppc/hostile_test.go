package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These tests feed the CLI the odd and hostile input a demanding user produces: malformed
// flag values, flags that conflict or do not apply, files of the wrong kind, corrupted
// outputs. Each checks the exit status and that the message names the problem.

// cliCase is one command line with its expected exit status and stderr fragments; absent
// lists fragments that must not appear (a reproducer for a flag error, a Go panic).
type cliCase struct {
	args   []string
	code   int
	want   []string
	absent []string
}

func runCases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		code, _, errOut := ppc(t, "", c.args...)
		if code != c.code {
			t.Errorf("ppc %v: exit %d, want %d\n%s", c.args, code, c.code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("ppc %v: stderr lacks %q:\n%s", c.args, w, errOut)
			}
		}
		for _, a := range c.absent {
			if strings.Contains(errOut, a) {
				t.Errorf("ppc %v: stderr has %q:\n%s", c.args, a, errOut)
			}
		}
	}
}

// writeNpy writes a little-endian .npy file of int64 or float32 values.
func writeNpy(t *testing.T, dir, name, descr string, shape string, vals []float64) string {
	t.Helper()
	header := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }"
	for (10+len(header)+1)%64 != 0 {
		header += " "
	}
	header += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(header)), byte(len(header)>>8))
	b = append(b, header...)
	for _, v := range vals {
		switch descr {
		case "<i8":
			b = binary.LittleEndian.AppendUint64(b, uint64(int64(v)))
		case "<f4":
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
		default:
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFlagValueErrors(t *testing.T) {
	runCases(t, []cliCase{
		{[]string{"compile", "--pp=x", mlp, "-o", t.TempDir()}, exitInput, []string{`--pp "x": want an integer`, "usage: ppc compile"}, []string{"-pp:", "parse error"}},
		{[]string{"run", "dir", "--steps", "99999999999999999999"}, exitInput, []string{`--steps "99999999999999999999": integer out of range`}, nil},
		{[]string{"run", "dir", "--seed", "-1"}, exitInput, []string{`--seed "-1": want a non-negative integer`}, nil},
		{[]string{"compare", "a", "b", "--atol", "abc"}, exitInput, []string{`--atol "abc": want a number`}, nil},
		{[]string{"compile", mlp, "--verify-each=maybe", "-o", "x"}, exitInput, []string{`--verify-each "maybe": want true or false`}, nil},
		{[]string{"compile", mlp, "-o"}, exitInput, []string{"flag -o needs a value"}, []string{"--o"}},
		{[]string{"help", "nosuch"}, exitInput, []string{`unknown command "nosuch"`}, nil},
	})
	if code, out, _ := ppc(t, "", "--version"); code != 0 || !strings.HasPrefix(out, "ppc ") {
		t.Errorf("--version: %d %q", code, out)
	}
}

func TestHelpText(t *testing.T) {
	_, out, _ := ppc(t, "", "compile", "--help")
	for _, want := range []string{"\n  -o DIR\n", "\n  --schedule S|FILE.csv\n", "\n  --mem BYTES\n", "(0: the schedule's default)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("compile --help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "--o ") || strings.Contains(out, "schedule's default) (default 0)") {
		t.Errorf("compile --help spells -o as --o, or repeats a default:\n%s", out)
	}
	if _, out, _ := ppc(t, "", "version", "--help"); !strings.HasPrefix(out, "usage: ppc version\n") {
		t.Errorf("version --help: %q", out)
	}
	// A default that the usage does not explain is still shown.
	if _, out, _ := ppc(t, "", "run", "--help"); !strings.Contains(out, "(default 1)") || !strings.Contains(out, "(default 10)") {
		t.Errorf("run --help lost its defaults:\n%s", out)
	}
}

func TestCompileFlagConflicts(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	noLoss := writeFile(t, "noloss.ir", "func @forward(%x: f32[4,3] {input}, %w: f32[3,2] {init = \"normal(0.1)\", param}) -> (f32[4,2]) {\n  %0 = matmul %x, %w : f32[4,2]\n  return %0\n}\n")
	empty := writeFile(t, "empty.ir", "")
	tiny := []string{"compile", gpt, "--preset", "tiny", "--pp", "2", "--microbatches", "2", "-o", out}
	with := func(extra ...string) []string { return append(append([]string{}, tiny...), extra...) }
	runCases(t, []cliCase{
		{with("--layout", "E,t*4|t*4,L", "--partition", "auto"), exitInput, []string{"--layout applies to --partition layout, not --partition auto"}, nil},
		{with("--partition", "layout"), exitInput, []string{"--partition layout needs --layout"}, []string{"reproducer"}},
		{with("--mem", "1GiB", "--partition", "markers"), exitInput, []string{"--mem applies to --partition auto"}, nil},
		// --mem implies --partition auto (the model has markers, which would ignore it).
		{with("--mem", "1MiB"), exitInput, []string{"fits mem="}, nil},
		{with("--forward-only", "--optimizer", "sgd"), exitInput, []string{"--optimizer does not apply to --forward-only"}, nil},
		{with("--forward-only", "--recompute", "full"), exitInput, []string{"--recompute does not apply to --forward-only"}, nil},
		{with("--forward-only", "--loss", "mse"), exitInput, []string{"--loss does not apply to --forward-only"}, nil},
		{with("--loss", "mse"), exitInput, []string{"the model computes its own loss; --loss and --loss-output apply to models without one"}, nil},
		{with("--optimizer", "sgd{lr=abc}"), exitInput, []string{`--optimizer "sgd{lr=abc}": option lr="abc" is not a finite number`}, []string{"reproducer", "pass optimizer"}},
		{with("--optimizer", "lamb"), exitInput, []string{`--optimizer "lamb": unknown kind "lamb" (want adamw or sgd)`}, []string{"reproducer"}},
		{with("--optimizer", "adamw{foo=1}"), exitInput, []string{`--optimizer "adamw{foo=1}"`, `no option "foo"`}, []string{"reproducer"}},
		{with("--optimizer", "sgd{kind=adamw}"), exitInput, []string{`--optimizer "sgd{kind=adamw}": option kind=adamw: sgd{…} already names the kind`, "usage: ppc compile"}, nil},
		{with("--optimizer", "sgd{lr=0.1,lr=0.2}"), exitInput, []string{`--optimizer "sgd{lr=0.1,lr=0.2}": option lr given twice`, "usage: ppc compile"}, nil},
		{with("--optimizer", "sgd{lr=1e39}"), exitInput, []string{`--optimizer "sgd{lr=1e39}": option lr=1e39 is infinite in f32`, "usage: ppc compile"}, nil},
		{[]string{"compile", noLoss, "--loss-output", "3", "-o", out}, exitInput, []string{"--loss-output 3: the model has 1 output(s)"}, []string{"reproducer"}},
		{[]string{"compile", empty, "-o", out}, exitInput, []string{"empty.ir: the model has no func @forward"}, []string{"reproducer"}},
		// Output paths that cannot be directories are reported before compiling.
		{[]string{"compile", mlp, "-o", empty}, exitInput, []string{"-o: " + empty + " is a file, not a directory"}, nil},
		{[]string{"compile", mlp, "-o", out, "--dump-dir", empty}, exitInput, []string{"--dump-dir: "}, nil},
		{[]string{"opt", noLoss, "--dump-dir", empty}, exitInput, []string{"--dump-dir: "}, nil},
		{[]string{"infer", mlp, "--output-dir", empty}, exitInput, []string{"--output-dir: " + empty + " is a file, not a directory"}, nil},
	})
	// A model without a loss takes --loss; the summary names an unnamed IR module after its file.
	code, stdout, errOut := ppc(t, "", "compile", noLoss, "--loss", "mse", "-o", out)
	if code != 0 || !strings.Contains(stdout, "compiled noloss (training)") {
		t.Fatalf("compile noloss.ir --loss mse: %d %s %s", code, stdout, errOut)
	}
}

// Mistakes on the command line that only the partitioner can see are still the user's: exit
// 2, the reason, and no reproducer in the temporary directory.
func TestPartitionMistakesWriteNoReproducer(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	tiny := []string{"compile", gpt, "--preset", "tiny", "--pp", "2", "--microbatches", "2", "-o", out}
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--layout", "E,t*4|t*3,L"}, `layout "E,t*4|t*3,L" does not cover the model exactly`},
		{[]string{"--mem", "1KiB"}, "no split into 2 stages fits mem=1024 bytes"},
		{[]string{"--pp", "16", "--microbatches", "16"}, "the model marks 8 stages; pp=16"},
	} {
		args := append(append([]string{}, tiny...), c.extra...)
		code, _, errOut := ppc(t, "", args...)
		if code != exitInput || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "reproducer") {
			t.Errorf("ppc %v: exit %d\n%s", c.extra, code, errOut)
		}
		noRepro(t, os.TempDir()) // ppc points TMPDIR at a fresh directory for each run
	}
}

func TestScheduleFiles(t *testing.T) {
	dir := t.TempDir()
	lf := "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n"
	bom := filepath.Join(dir, "bom.csv")
	os.WriteFile(bom, []byte("\ufeff"+lf), 0o644)
	upper := filepath.Join(dir, "upper.CSV")
	os.WriteFile(upper, []byte(lf), 0o644)
	noW := filepath.Join(dir, "now.csv")
	os.WriteFile(noW, []byte("0F0,0I0\n"), 0o644)
	code, out, errOut := ppc(t, "", "schedule", "--schedule", bom)
	if code != 0 || !strings.Contains(out, "Step 0: 0F0    1F0") {
		t.Fatalf("a CSV with a byte-order mark: %d %s %s", code, out, errOut)
	}
	code, out, _ = ppc(t, "", "simulate", "--schedule", upper)
	if code != 0 || !strings.HasPrefix(out, "schedule upper.CSV: 2 rank(s), 2 stage(s), 4 micro-batch(es)") {
		t.Fatalf("simulate upper.CSV: %d %s", code, out)
	}
	// compile takes the CSV's micro-batch count when --microbatches is not given.
	code, out, errOut = ppc(t, "", "compile", mlp, "--schedule", bom, "-o", filepath.Join(dir, "plan"))
	if code != 0 || !strings.Contains(out, "schedule bom.csv, 4 micro-batch(es)") {
		t.Fatalf("compile with a CSV: %d %s %s", code, out, errOut)
	}
	plan := filepath.Join(dir, "plan")
	bad := filepath.Join(dir, "badplan")
	os.Mkdir(bad, 0o755)
	planJSON, _ := os.ReadFile(filepath.Join(plan, "plan.json"))
	os.WriteFile(filepath.Join(bad, "plan.json"), []byte(strings.Replace(string(planJSON), `"0F0"`, `"XX"`, 1)), 0o644)
	runCases(t, []cliCase{
		{[]string{"simulate", bad}, exitInput, []string{filepath.Join(bad, "plan.json") + `: schedule: csv line 1 (rank 0), column 0: invalid action "XX"`}, nil},
		{[]string{"schedule", "--schedule", noW}, exitFailed, []string{"now.csv: incomplete: stage 0 micro-batch 0 has no weight gradient"}, nil},
		{[]string{"schedule", "--schedule", bom, "--pp", "3"}, exitInput, []string{bom + " has 2 ranks, --pp is 3"}, nil},
		{[]string{"schedule", "--csv", "--comms"}, exitInput, []string{"--csv and --comms"}, nil},
		{[]string{"simulate", plan, "--schedule", "gpipe"}, exitInput, []string{"--schedule describes a schedule to simulate instead of a plan's"}, nil},
		{[]string{"simulate", plan, "--pp", "8"}, exitInput, []string{"--pp describes"}, nil},
		{[]string{"simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--cost", "F=1e308,I=1e308,W=1e308"}, exitInput, []string{"the step time overflows"}, nil},
		{[]string{"simulate", filepath.Join(plan, "plan.json")}, exitInput, []string{"plan.json is a file; want the plan directory"}, nil},
		{[]string{"run", mlp}, exitInput, []string{"mlp.ppm is a file; want the plan directory"}, nil},
	})
}

// TestPlanIntegrity: recompiling into a directory removes the old plan's extra programs, and
// a program that does not belong to plan.json is refused even when it decodes and validates.
func TestPlanIntegrity(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if code, _, errOut := ppc(t, "", "compile", mlp, "--pp", "2", "--microbatches", "2", "-o", a); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := ppc(t, "", "compile", mlp, "--pp", "2", "--microbatches", "2", "--optimizer", "sgd", "-o", b); code != 0 {
		t.Fatal(errOut)
	}
	// Rank 0 of an SGD compile has the same buffers and kernels shape as far as the loader can
	// tell without the plan's checksum.
	data, _ := os.ReadFile(filepath.Join(b, "rank-00000.ppx"))
	os.WriteFile(filepath.Join(a, "rank-00000.ppx"), data, 0o644)
	runCases(t, []cliCase{{[]string{"run", a, "--steps", "1"}, exitInput, []string{"rank-00000.ppx: does not match plan.json"}, nil}})
	if code, _, errOut := ppc(t, "", "compile", mlp, "-o", b); code != 0 {
		t.Fatal(errOut)
	}
	if _, err := os.Stat(filepath.Join(b, "rank-00001.ppx")); err == nil {
		t.Fatal("recompiling with one rank left rank-00001.ppx behind")
	}
}

func TestRunOutputsAndResume(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if code, _, errOut := ppc(t, "", "compile", mlp, "--microbatches", "2", "-o", plan); code != 0 {
		t.Fatal(errOut)
	}
	file := writeFile(t, "f", "x")
	// Output paths are checked before training: nothing runs.
	for _, args := range [][]string{{"--save", filepath.Join(file, "ck")}, {"--trace", filepath.Join(file, "t.json")}, {"--log-json", filepath.Join(file, "l")}} {
		code, stdout, errOut := ppc(t, "", append([]string{"run", plan, "--steps", "1"}, args...)...)
		if code != exitInput || strings.Contains(stdout, "step 1") || !strings.Contains(errOut, args[0]+": ") {
			t.Errorf("run %v: exit %d\n%s%s", args, code, stdout, errOut)
		}
	}
	// Resuming keeps the checkpoint's seed, so 1+1 steps equal 2 bit for bit.
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	for _, args := range [][]string{{"--steps", "2", "--seed", "7", "--save", a}, {"--steps", "1", "--seed", "7", "--save", b}, {"--steps", "1", "--resume", b, "--save", c}} {
		if code, _, errOut := ppc(t, "", append([]string{"run", plan}, args...)...); code != 0 {
			t.Fatalf("run %v: %s", args, errOut)
		}
	}
	if code, stdout, _ := ppc(t, "", "compare", a, c, "--rtol", "0", "--atol", "0"); code != 0 {
		t.Fatalf("resumed run differs from the uninterrupted one:\n%s", stdout)
	}
	if _, _, errOut := ppc(t, "", "run", plan, "--steps", "1", "--resume", b, "--seed", "3"); !strings.Contains(errOut, "warning: --seed 3 differs from the checkpoint's seed 7") {
		t.Errorf("no warning for a different seed: %s", errOut)
	}
	// A checkpoint of another model, or with another optimizer's state.
	scalar := writeFile(t, "scalar.ir", "func @forward(%x: f32[] {input}, %w: f32[] {init = \"ones\", param}) -> (f32[] {loss}) {\n  %0 = mul %x, %w : f32[]\n  return %0\n}\n")
	other, sgd := filepath.Join(dir, "other"), filepath.Join(dir, "sgd")
	if code, _, errOut := ppc(t, "", "compile", scalar, "-o", other); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := ppc(t, "", "compile", mlp, "--microbatches", "2", "--optimizer", "sgd{momentum=0.9}", "-o", sgd); code != 0 {
		t.Fatal(errOut)
	}
	runCases(t, []cliCase{
		{[]string{"run", other, "--resume", a}, exitInput, []string{"it is a checkpoint of model mlp, the plan is model scalar", "3 missing from the checkpoint:\n    w: parameter f32[]"},
			[]string{"--allow-partial-resume", "optimizer state:"}}, // nothing matches: a partial resume would load nothing
		{[]string{"run", sgd, "--resume", a}, exitInput, []string{"it lacks optimizer state: it was saved with another optimizer", "layers.0.w.momentum_buffer: optimizer state f32[64,128]",
			"add --allow-partial-resume"}, nil},
	})
	// A loss that is NaN before any update is not "training diverged".
	nan := writeFile(t, "nan.ir", "func @forward(%x: f32[4] {input}, %w: f32[4] {init = \"ones\", param}) -> (f32[] {loss}) {\n  %0 = mul %x, %w : f32[4]\n  %1 = sqrt %0 : f32[4]\n  %2 = reduce_sum %1 : f32[]\n  return %2\n}\n")
	nanPlan := filepath.Join(dir, "nan")
	if code, _, errOut := ppc(t, "", "compile", nan, "-o", nanPlan); code != 0 {
		t.Fatal(errOut)
	}
	runCases(t, []cliCase{{[]string{"run", nanPlan}, exitFailed, []string{"step 1: loss is NaN before any update of this run: the forward pass produces it"}, []string{"diverged"}}})
	// A model with a scalar input trains (one sample per micro-batch) and runs forward.
	if code, stdout, errOut := ppc(t, "", "run", other, "--steps", "2"); code != 0 || !strings.Contains(stdout, "step 2 loss=") {
		t.Fatalf("scalar-input model: %d %s %s", code, stdout, errOut)
	}
	if code, _, errOut := ppc(t, "", "infer", scalar, "--output-dir", filepath.Join(dir, "infer")); code != 0 {
		t.Fatalf("infer on a scalar-input model: %d %s", code, errOut)
	}
}

func TestRunDataErrors(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if code, _, errOut := ppc(t, "", "compile", mlp, "--microbatches", "2", "-o", plan); code != 0 {
		t.Fatal(errOut)
	}
	x := writeNpy(t, dir, "x.npy", "<f4", "32, 64", make([]float64, 32*64))
	labels := make([]float64, 32)
	y := writeNpy(t, dir, "y.npy", "<i8", "32,", labels)
	labels[31] = 42
	yBad := writeNpy(t, dir, "ybad.npy", "<i8", "32,", labels)
	frac := make([]float64, 32)
	frac[0] = 1.5
	yFrac := writeNpy(t, dir, "yfrac.npy", "<f4", "32,", frac)
	xData, _ := os.ReadFile(x)
	trunc := filepath.Join(dir, "trunc.npy")
	os.WriteFile(trunc, xData[:len(xData)-100], 0o644)
	if code, stdout, errOut := ppc(t, "", "run", plan, "--steps", "1", "--data", "x="+x+", y="+y); code != 0 {
		t.Fatalf("spaces after the comma: %d %s %s", code, stdout, errOut)
	}
	runCases(t, []cliCase{
		{[]string{"run", plan, "--data", "x=" + x + ",y=" + yBad}, exitInput, []string{"ybad.npy: sample 31: value 42 is outside [0, 10)"}, nil},
		{[]string{"run", plan, "--data", "x=" + x + ",y=" + yFrac}, exitInput, []string{"yfrac.npy: sample 0: value 1.5 is not an integer"}, nil},
		{[]string{"run", plan, "--data", "x=" + trunc + ",y=" + y}, exitInput, []string{"trunc.npy: truncated: shape [32 64] needs 8192 data bytes"}, nil},
		{[]string{"run", plan, "--data", "x=" + x + ",x=" + x}, exitInput, []string{`--data gives input "x" twice`}, nil},
		{[]string{"run", plan, "--data", "x="}, exitInput, []string{`--data "x=": want NAME=FILE.npy`}, nil},
	})
}

// TestAbsurdSizes: sizes far beyond what the model can take are answered with what limits
// them — its stages, the divisors of the dim tp would split, its batch — not with a padding,
// a batch size or a micro-batch count that would follow from taking them at face value.
func TestAbsurdSizes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "plan")
	tiny := func(extra ...string) []string {
		return append([]string{"compile", gpt, "--preset", "tiny", "-o", out}, extra...)
	}
	runCases(t, []cliCase{
		{tiny("--pp", "100000"), exitInput, []string{"the model marks 8 stages; pp=100000 × virtual=1 needs 100000"}, []string{"limit", "micro-batch"}},
		{tiny("--pp", "100000", "--microbatches", "100000"), exitInput, []string{"the model marks 8 stages"}, []string{"batch sizes"}},
		{tiny("--pp", "16"), exitInput, []string{"the model marks 8 stages; pp=16 × virtual=1 needs 16"}, []string{"needs at least 16 micro-batches"}},
		{tiny("--tp", "1000000"), exitInput, []string{"--tp 1000000 cannot split dim 0 of %wte (f32[512,64], size 512): 512 is not divisible by 1000000; tp sizes that divide it: 1, 2, 4, 8, 16, 32, 64"}, []string{"pad the vocabulary"}},
		// The vocabulary is padded for tp 3 (to 768); the heads are what 3 cannot split.
		{tiny("--tp", "3"), exitInput, []string{"--tp 3 cannot split dim 1 of %layers.0.attn.wq (f32[64,64], size 64): 64 is not divisible by 3"}, []string{"%wte"}},
		{tiny("--microbatches", "100000"), exitInput, []string{"global batch 16 does not divide into 100000 micro-batches: a micro-batch needs a sequence at least; micro-batch counts that divide it: 1, 2, 4, 8, 16"}, []string{"batch sizes that do"}},
	})
}

// TestCSVShapeFlags: compile, simulate and schedule apply one rule to a CSV schedule and the
// flags that describe a pipeline's shape, as their usage shows them (--schedule FILE.csv
// [--pp N --microbatches M --virtual-stages V]): the file decides, and the flags may be given
// when they agree with it; one that disagrees, an explicit --pp 1 included, is bad input
// naming the file and both counts.
func TestCSVShapeFlags(t *testing.T) {
	dir := t.TempDir()
	two := filepath.Join(dir, "two.csv")
	os.WriteFile(two, []byte("0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n"), 0o644)
	plan := filepath.Join(dir, "plan")
	commands := [][]string{{"compile", mlp, "-o", plan}, {"simulate"}, {"schedule"}}
	for _, c := range commands {
		args := append(append([]string{}, c...), "--schedule", two, "--pp", "2", "--microbatches", "4", "--virtual-stages", "1")
		if code, _, errOut := ppc(t, "", args...); code != 0 {
			t.Errorf("ppc %v: exit %d\n%s", args, code, errOut)
		}
	}
	var cases []cliCase
	for _, c := range commands {
		with := func(extra ...string) []string {
			return append(append(append([]string{}, c...), "--schedule", two), extra...)
		}
		cases = append(cases,
			cliCase{with("--pp", "3"), exitInput, []string{two + " has 2 ranks, --pp is 3"}, nil},
			cliCase{with("--pp", "1"), exitInput, []string{two + " has 2 ranks, --pp is 1"}, nil},
			cliCase{with("--microbatches", "8"), exitInput, []string{two + " has 4 micro-batches, --microbatches is 8"}, nil},
			cliCase{with("--virtual-stages", "2"), exitInput, []string{two + " places 1 stage(s) on each rank, --virtual-stages is 2"}, nil},
		)
	}
	runCases(t, cases)
}

// TestTruncatedNpy: a .npy cut inside its header (11 bytes: the preamble and one byte of
// header) given to infer, run or compare is bad input naming the file, not a panic.
func TestTruncatedNpy(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if code, _, errOut := ppc(t, "", "compile", mlp, "-o", plan); code != 0 {
		t.Fatal(errOut)
	}
	x := writeNpy(t, dir, "x.npy", "<f4", "32, 64", make([]float64, 32*64))
	y := writeNpy(t, dir, "y.npy", "<i8", "32,", make([]float64, 32))
	data, _ := os.ReadFile(x)
	cut := filepath.Join(dir, "cut.npy")
	if err := os.WriteFile(cut, data[:11], 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{cut + ": not a .npy file: truncated inside its header"}
	runCases(t, []cliCase{
		{[]string{"infer", mlp, "--input", "x=" + cut, "--output-dir", filepath.Join(dir, "out")}, exitInput, want, []string{"panic"}},
		{[]string{"run", plan, "--steps", "1", "--data", "x=" + cut + ",y=" + y}, exitInput, want, []string{"panic"}},
		{[]string{"compare", cut, x}, exitInput, want, []string{"panic"}},
	})
}

func TestCompareInferOptImportErrors(t *testing.T) {
	dir := t.TempDir()
	a := writeNpy(t, dir, "a.npy", "<f4", "2,", []float64{1, 2})
	labels := writeNpy(t, dir, "labels.npy", "<i8", "16,", make([]float64, 16))
	bad := make([]float64, 16)
	bad[3] = 10
	badLabels := writeNpy(t, dir, "bad.npy", "<i8", "16,", bad)
	bom := writeFile(t, "bom.ppm", "\ufeffmodel m\ninput x: f32[2, 3]\nforward {\n  loss sum(x)\n}\n")
	irText, _ := os.ReadFile("../../testdata/ir/mlp.ir")
	bomIR := writeFile(t, "bom.ir", "\ufeff"+string(irText))
	runCases(t, []cliCase{
		{[]string{"compare", a, a, "--rtol", "NaN"}, exitInput, []string{"tolerances must be non-negative numbers"}, nil},
		{[]string{"compare", a, dir}, exitInput, []string{"compare two tensor files (.npy, .pb) or two checkpoints, not one of each"}, nil},
		{[]string{"compare", dir, dir}, exitInput, []string{"not a checkpoint directory (no checkpoint.json"}, nil},
		{[]string{"infer", mlp, "--output-dir", dir, "--input", "x=" + a, "--input", "x=" + a}, exitInput, []string{"--input x given twice"}, nil},
		{[]string{"infer", "../../testdata/ir/mlp.ir", "--output-dir", dir, "--input", "labels=" + badLabels}, exitInput, []string{`input "labels": ` + badLabels + ` holds 10 at element 3, outside the model's range [0, 10)`}, nil},
		{[]string{"opt", mlp, "--passes", "cse"}, exitInput, []string{"is a model, not IR text", "ppc import"}, nil},
		{[]string{"opt", "../../testdata/ir/mlp.ir", "--passes", "cse,,dce"}, exitInput, []string{"empty pass name"}, []string{"did you mean"}},
		{[]string{"opt", "../../testdata/ir/mlp.ir", "--elide-data", "-1"}, exitInput, []string{"--elide-data must be non-negative"}, nil},
		{[]string{"import", "../../testdata/ir/mlp.ir", "--microbatches", "4"}, exitInput, []string{"--microbatches applies to .ppm and .onnx models"}, nil},
	})
	if code, _, errOut := ppc(t, "", "infer", "../../testdata/ir/mlp.ir", "--output-dir", dir, "--input", "labels="+labels); code != 0 {
		t.Fatalf("infer with in-range labels: %s", errOut)
	}
	for _, f := range []string{bom, bomIR} {
		if code, _, errOut := ppc(t, "", "import", f); code != 0 {
			t.Errorf("a file with a byte-order mark: %d %s", code, errOut)
		}
	}
}

// Plain sgd is torch.optim.SGD's default, momentum 0: no optimizer state at all; momentum
// keeps one buffer per parameter.
func TestPlainSGDKeepsNoState(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ spec, want string }{{"sgd", "optimizer 0 B"}, {"sgd{momentum=0.9}", "optimizer 489.0 KiB"}} {
		code, stdout, errOut := ppc(t, "", "compile", mlp, "--optimizer", c.spec, "-o", filepath.Join(dir, c.spec))
		if code != 0 || !strings.Contains(stdout, c.want) {
			t.Errorf("compile --optimizer %s: exit %d, want %q in\n%s%s", c.spec, code, c.want, stdout, errOut)
		}
		plan, _ := os.ReadFile(filepath.Join(dir, c.spec, "plan.json"))
		if has := strings.Contains(string(plan), "momentum_buffer"); has != (c.spec != "sgd") {
			t.Errorf("--optimizer %s: plan.json lists a momentum_buffer: %v", c.spec, has)
		}
	}
}

// What the runtime would only find when it loads or initialises the plan — a bad initialiser,
// an op the CPU runtime has no kernel for in that dtype, a micro-batch count of 0 — is a
// compile error at its position in the IR text.
func TestCompileChecksWhatTheRuntimeWould(t *testing.T) {
	const model = "MODULE\nfunc @forward(%x: f32[4,8] {input}, %w: f32[8,8] {init = \"INIT\", param}) -> (f32[] {loss}) {\n" +
		"  %0 = matmul %x, %w : f32[4,8]\n  %1 = cast %0 {to = DT} : DT[4,8]\n  %2 = softmax %1 {axis = 1} : DT[4,8]\n" +
		"  %3 = cast %2 {to = f32} : f32[4,8]\n  %4 = reduce_sum %3 : f32[]\n  return %4\n}\n"
	ir := func(module, init, dt string) string {
		return writeFile(t, "m.ir", strings.NewReplacer("MODULE", module, "INIT", init, "DT", dt).Replace(model))
	}
	intMatmul := writeFile(t, "m.ir", "func @forward(%x: f32[4,8] {input}, %w: f32[8,8] {init = \"zeros\", param}) -> (f32[] {loss}) {\n"+
		"  %0 = matmul %x, %w : f32[4,8]\n  %1 = cast %0 {to = i64} : i64[4,8]\n  %2 = matmul %1, %1 {transpose_b = true} : i64[4,4]\n"+
		"  %3 = cast %2 {to = f32} : f32[4,4]\n  %4 = reduce_sum %3 : f32[]\n  return %4\n}\n")
	out := filepath.Join(t.TempDir(), "out")
	runCases(t, []cliCase{
		{[]string{"compile", ir("", "normal(abc)", "f32"), "-o", out}, exitInput,
			[]string{`m.ir:2:51: %w: bad initialiser "normal(abc)": "abc" is not a finite number`, "^"}, []string{"strconv", "reproducer"}},
		{[]string{"compile", ir("", "uniform(5, 1)", "f32"), "-o", out}, exitInput,
			[]string{`m.ir:2:51: %w: bad initialiser "uniform(5, 1)": the lower bound 5 is above the upper bound 1`}, nil},
		{[]string{"compile", ir("module attributes {microbatches = 0}", "zeros", "f32"), "-o", out}, exitInput,
			[]string{"m.ir:1:20: module attribute microbatches must be a positive integer, got 0"}, nil},
		{[]string{"compile", intMatmul, "-o", out}, exitInput,
			[]string{"m.ir:4:8: the CPU runtime cannot run this matmul: matmul supports f32 and f64, not i64", "%2 = matmul %1, %1"}, []string{"rank-", "reproducer"}},
		{[]string{"compile", intMatmul, "--forward-only", "-o", out}, exitInput,
			[]string{"m.ir:4:8: the CPU runtime cannot run this matmul"}, nil},
	})
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed compile wrote a plan")
	}
	// The same model in f32 compiles and runs, and so does its f16 softmax (bf16 and f16 run
	// by rounding the f32 kernel's results).
	for _, dt := range []string{"f32", "f16"} {
		if code, _, errOut := ppc(t, "", "compile", ir("", "uniform(-1, 1)", dt), "-o", out); code != 0 {
			t.Fatal(errOut)
		}
		if code, _, errOut := ppc(t, "", "run", out, "--steps", "1"); code != 0 {
			t.Fatal(errOut)
		}
	}
}
