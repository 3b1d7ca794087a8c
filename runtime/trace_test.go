package runtime_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/internal/jobtest"
	. "ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
)

// countingWriter records what reached it and whether it was closed.
type countingWriter struct {
	bytes.Buffer
	closed bool
}

func (w *countingWriter) Close() error { w.closed = true; return nil }

type traceFile struct {
	TraceEvents []struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur"`
		Pid  int            `json:"pid"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
}

func parseTrace(t *testing.T, b []byte) traceFile {
	t.Helper()
	var tf traceFile
	if err := json.Unmarshal(b, &tf); err != nil {
		t.Fatalf("trace is not valid JSON: %v\n%s", err, b[:min(len(b), 300)])
	}
	return tf
}

// runTraced runs steps steps of a 2-rank pipeline with a trace of steps first..last.
func runTraced(t *testing.T, steps, first, last int) (*countingWriter, []int) {
	t.Helper()
	dir := jobtest.Compile(t, "../testdata/ir/mlp.ir", compiler.Options{PP: 2, Microbatches: 2})
	job, err := Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Init(1); err != nil {
		t.Fatal(err)
	}
	w := &countingWriter{}
	tr, err := NewTrace(w, len(job.Ranks), first, last)
	if err != nil {
		t.Fatal(err)
	}
	var written []int // bytes that reached the writer after each step
	for i := 0; i < steps; i++ {
		if _, err := job.Step(Options{Seed: 1, Trace: tr}); err != nil {
			t.Fatal(err)
		}
		written = append(written, w.Len())
	}
	if err := tr.Close(); err != nil || !w.closed {
		t.Fatalf("Close: %v, closed the writer: %v", err, w.closed)
	}
	return w, written
}

// TestTraceStepsFollowEachOther: one clock for the whole run, so every action of step 2
// starts after every action of step 1 has ended (each step used to restart at 0).
func TestTraceStepsFollowEachOther(t *testing.T) {
	w, _ := runTraced(t, 2, 1, 0)
	tf := parseTrace(t, w.Bytes())
	end1, start2 := math.Inf(-1), math.Inf(1)
	n := map[int]int{}
	for _, ev := range tf.TraceEvents {
		if ev.Ph != "X" {
			continue
		}
		step := int(ev.Args["step"].(float64))
		n[step]++
		if step == 1 {
			end1 = max(end1, ev.Ts+ev.Dur)
		} else {
			start2 = min(start2, ev.Ts)
		}
	}
	if n[1] == 0 || n[1] != n[2] || len(n) != 2 {
		t.Fatalf("events per step: %v", n)
	}
	if !(end1 <= start2) {
		t.Fatalf("step 1 ends at %vµs, step 2 starts at %vµs: the steps overlap", end1, start2)
	}
}

// TestTraceStepRangeAndStreaming: only the steps in range are recorded; each step's events
// reach the writer when the step ends (nothing is held back until Close), and an
// interrupted trace closed between steps is valid JSON.
func TestTraceStepRangeAndStreaming(t *testing.T) {
	w, written := runTraced(t, 4, 2, 3)
	tf := parseTrace(t, w.Bytes())
	n := map[int]int{}
	for _, ev := range tf.TraceEvents {
		if ev.Ph == "X" {
			n[int(ev.Args["step"].(float64))]++
		}
	}
	if len(n) != 2 || n[2] == 0 || n[3] != n[2] {
		t.Fatalf("--trace-steps 2:3 recorded %v", n)
	}
	// Before step 2 only the opening and the metadata were written; step 2's and step 3's
	// events reached the writer by the end of their steps; step 4 added nothing.
	if written[0] == 0 || written[1] <= written[0] || written[2] <= written[1] || written[3] != written[2] {
		t.Fatalf("bytes written after each step: %v", written)
	}
	perStep := written[2] - written[1]
	if got := strings.Count(w.String()[written[1]:written[2]], `"step":3`); got != n[3] {
		t.Fatalf("the writer had %d of step 3's %d events when the step ended", got, n[3])
	}
	if w.Len()-written[3] > 10 {
		t.Fatalf("Close wrote %d bytes: events were held back (a step writes %d)", w.Len()-written[3], perStep)
	}

	// A trace closed before any step (Ctrl-C during the first) is valid and names the ranks.
	w2 := &countingWriter{}
	tr, err := NewTrace(w2, 2, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if tf := parseTrace(t, w2.Bytes()); len(tf.TraceEvents) != 6 || tr.Close() != nil {
		t.Fatalf("empty trace: %s", w2.Bytes())
	}
}

// full is a disk that takes n bytes and then fails (jobtest.FailingWriter).
func full(n int) io.Writer {
	return &jobtest.FailingWriter{W: io.Discard, N: n, Err: errors.New("no space left on device")}
}

// TestTraceWriteError: a trace that cannot be written fails the step that wrote it.
func TestTraceWriteError(t *testing.T) {
	dir := jobtest.Compile(t, "../testdata/ir/mlp.ir", compiler.Options{Microbatches: 1})
	job, err := Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	job.Init(1)
	tr, err := NewTrace(full(1000), len(job.Ranks), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.Step(Options{Seed: 1, Trace: tr}); err == nil || !strings.Contains(err.Error(), "trace: no space left on device") {
		t.Fatalf("got %v", err)
	}
	if _, err := NewTrace(full(0), 1, 1, 0); err == nil {
		t.Fatal("NewTrace on a full disk succeeded")
	}
}
