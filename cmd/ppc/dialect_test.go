package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// zb1pCSVs writes a schedule of the shape of PyTorch's zb1p_2rank_2stagep artifacts — 2
// ranks with 2 stages each, 8 micro-batches, rank 0's backward whole and rank 1's split into
// an input and a weight gradient — twice, as zb1p.csv in two directories: in the current
// dialect (I, W, B) and in PyTorch 2.4's (B, W, BW). It starts from ppc's interleaved 1F1B.
func zb1pCSVs(t *testing.T) (cur, old string) {
	code, text, errOut := ppc(t, "", "schedule", "--schedule", "interleaved-1f1b", "--pp", "2", "--microbatches", "8", "--virtual-stages", "2", "--csv")
	if code != 0 {
		t.Fatal(errOut)
	}
	rows := strings.Split(strings.TrimSpace(text), "\r\n")
	if len(rows) != 2 {
		t.Fatalf("want 2 rows:\n%s", text)
	}
	spell := func(split bool, input, full string) string {
		var out []string
		for r, row := range rows {
			var cells []string
			for _, c := range strings.Split(row, ",") {
				stage, rest, _ := strings.Cut(c, "B")
				switch {
				case c == "" || !strings.Contains(c, "B"):
					cells = append(cells, c)
				case r == 1 && split:
					cells = append(cells, stage+input+rest, stage+"W"+rest)
				default:
					cells = append(cells, stage+full+rest)
				}
			}
			out = append(out, strings.Join(cells, ","))
		}
		return strings.Join(out, "\n") + "\n"
	}
	write := func(dir, text string) string {
		p := filepath.Join(t.TempDir(), dir, "zb1p.csv")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("current", spell(true, "I", "B")), write("pt24", spell(true, "B", "BW"))
}

// TestScheduleDialectsTrainEquivalently: both dialects of a zb1p-shaped schedule compile to
// the same programs and train to the same weights, bit for bit; compile, schedule and
// simulate say which dialect each file was read in.
func TestScheduleDialectsTrainEquivalently(t *testing.T) {
	cur, old := zb1pCSVs(t)
	oldText, _ := os.ReadFile(old)
	if !strings.Contains(string(oldText), "1B0,1W0") || !strings.Contains(string(oldText), "0BW") || strings.Contains(string(oldText), "I") {
		t.Fatalf("not the 2.4 spelling:\n%s", oldText)
	}
	var cks []string
	for _, c := range []struct{ csv, dialect string }{
		{cur, "PyTorch ≥ 2.5 dialect (I = input backward, W = weight backward, B = full backward)"},
		{old, "PyTorch 2.4 dialect (B = input backward, W = weight backward, BW = full backward)"},
	} {
		dir := t.TempDir()
		plan := filepath.Join(dir, "plan")
		code, summary, errOut := ppc(t, "", "compile", mlp, "--schedule", c.csv, "-o", plan)
		if code != 0 {
			t.Fatalf("compile --schedule %s: %s", c.csv, errOut)
		}
		if !strings.Contains(summary, "schedule     zb1p.csv, read in the "+c.dialect) || !strings.Contains(summary, "pp=2") {
			t.Errorf("summary does not name the dialect %q:\n%s", c.dialect, summary)
		}
		ck := filepath.Join(dir, "ck")
		if code, out, errOut := ppc(t, "", "run", plan, "--steps", "3", "--save", ck); code != 0 {
			t.Fatalf("run: %s%s", out, errOut)
		}
		cks = append(cks, ck)
		code, out, _ := ppc(t, "", "schedule", "--schedule", c.csv)
		if code != 0 || !strings.HasPrefix(out, "# zb1p.csv: read in the "+c.dialect+"\n") {
			t.Errorf("ppc schedule: %d\n%s", code, out)
		}
		code, out, _ = ppc(t, "", "simulate", "--schedule", c.csv)
		if code != 0 || !strings.Contains(out, "  read in the "+c.dialect+"\n") {
			t.Errorf("ppc simulate: %d\n%s", code, out)
		}
	}
	if code, out, errOut := ppc(t, "", "compare", cks[0], cks[1], "--rtol", "0", "--atol", "0"); code != 0 {
		t.Fatalf("the dialects trained differently:\n%s%s", out, errOut)
	}
	// ppc schedule --csv converts a 2.4 file to the current dialect, and says so on stderr.
	code, out, errOut := ppc(t, "", "schedule", "--schedule", old, "--csv")
	curText, _ := os.ReadFile(cur)
	if code != 0 || strings.ReplaceAll(out, "\r\n", "\n") != string(curText) ||
		!strings.Contains(errOut, "read in the PyTorch 2.4 dialect") || !strings.Contains(errOut, "writing the PyTorch ≥ 2.5 dialect") {
		t.Errorf("schedule --csv of the 2.4 file: %d\n%s\n%s", code, out, errOut)
	}
	// A 2.4 file whose B has no W is a failed check that names the dialect it was read in.
	missing := writeFile(t, "zb.csv", "0F0,0F1,0B0,0W0,0B1\n")
	runCases(t, []cliCase{
		{[]string{"compile", mlp, "--schedule", missing, "-o", t.TempDir()}, exitFailed,
			[]string{"zb.csv, read in the PyTorch 2.4 dialect", "stage 0 micro-batch 1 has no weight gradient"}, nil},
		{[]string{"schedule", "--schedule", missing}, exitFailed, []string{"zb.csv, read in the PyTorch 2.4 dialect", "no weight gradient"}, nil},
	})
}
