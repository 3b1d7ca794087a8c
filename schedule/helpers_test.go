package schedule

import (
	"bytes"
	"encoding/json"
	"testing"
)

// simEvent is one Chrome trace event as the tests read it back.
type simEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args"`
}

// traceEvents writes r's Chrome trace and reads its events back (failing the test when the
// trace cannot be written or is not JSON).
func traceEvents(t *testing.T, r *Result) []simEvent {
	t.Helper()
	var buf bytes.Buffer
	if err := r.WriteTrace(&buf); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []simEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	return tr.TraceEvents
}
