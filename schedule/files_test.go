package schedule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCSVByteOrderMark: a CSV saved by a spreadsheet program on Windows starts with a UTF-8
// byte-order mark; it is not part of the first action.
func TestCSVByteOrderMark(t *testing.T) {
	s := parseString(t, "\ufeff0F0,0B0\n")
	if s.Ranks != 1 || len(s.Actions[0]) != 2 || s.Actions[0][0].String() != "0F0" {
		t.Fatalf("got %d ranks, %v", s.Ranks, s.Actions)
	}
}

func TestReadCSVFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "mine.CSV")
	os.WriteFile(good, []byte("0F0,0B0\n"), 0o644)
	s, err := ReadCSVFile(good)
	if err != nil || s.Name != "mine.CSV" || !IsCSVName(good) {
		t.Fatalf("ReadCSVFile: %v, name %q", err, s.Name)
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("0F0,0X0\n"), 0o644)
	if _, err := ReadCSVFile(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": csv line 1 (rank 0), column 1") {
		t.Fatalf("bad cell: %v", err)
	}
	missing := filepath.Join(dir, "none.csv")
	if _, err := ReadCSVFile(missing); err == nil || err.Error() != missing+": no such file or directory" {
		t.Fatalf("missing file: %v", err)
	}
	if IsCSVName("1f1b") || IsCSVName("zb-h1") {
		t.Fatal("a generator name taken for a file")
	}
}

// TestSimulateOverflow: costs that are each finite but sum past float64 are an error, not
// a step time of +Inf and a bubble of NaN.
func TestSimulateOverflow(t *testing.T) {
	s, err := Generate("1f1b", 4, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Simulate(s, Cost{F: 1e308, I: 1e308, W: 1e308}); err == nil || !strings.Contains(err.Error(), "overflows") {
		t.Fatalf("got %v", err)
	}
}
