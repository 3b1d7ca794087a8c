package schedule

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// wantErr asserts that err is an *Error of the given kind located at
// (rank, index, action) whose message contains every fragment.
func wantErr(t *testing.T, err error, kind ErrorKind, rank, index int, action string, fragments ...string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want *Error", err)
	}
	if e.Kind != kind || e.Rank != rank || e.Index != index || e.Action.String() != action {
		t.Fatalf("got %v error at rank %d index %d action %q (%v), want %v at rank %d index %d action %q",
			e.Kind, e.Rank, e.Index, e.Action, err, kind, rank, index, action)
	}
	for _, f := range fragments {
		if !strings.Contains(e.Error(), f) {
			t.Errorf("error %q does not contain %q", e.Error(), f)
		}
	}
	return e
}

func TestValidateDeadlockComms(t *testing.T) {
	// Both ranks receive first: each RECV waits for a SEND the other rank
	// only reaches after its own RECV.
	s := parseString(t, "0RECV_B0,0F0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
	err := Validate(s)
	e := wantErr(t, err, ErrDeadlock, 0, 0, "0RECV_B0",
		"deadlock: rank 0 at action 0 (0RECV_B0) waits for 1SEND_B0, which rank 1 never reaches (blocked at action 0: 1RECV_F0 waits for 0SEND_F0)",
		"rank 1 at action 0 (1RECV_F0) waits for 0SEND_F0, which rank 0 never reaches (blocked at action 0: 0RECV_B0 waits for 1SEND_B0)")
	if e.WaitsOn.String() != "1SEND_B0" || len(e.Blocked) != 2 || e.Blocked[1].Rank != 1 || e.Blocked[1].WaitsOn.String() != "0SEND_F0" {
		t.Errorf("fields: waits %v, blocked %+v", e.WaitsOn, e.Blocked)
	}
	// The simulator reports the same error instead of looping.
	if _, err := Simulate(s, UnitCost()); err == nil || err.Error() != e.Error() {
		t.Errorf("Simulate = %v", err)
	}
	// LowerComm refuses too.
	if _, err := LowerComm(s); err == nil {
		t.Error("LowerComm accepted a deadlock")
	}
}

func TestValidateDeadlockComputeOnly(t *testing.T) {
	// rank 1 runs micro-batch 1 first; rank 0 waits for micro-batch 0's backward.
	s := parseString(t, "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n")
	wantErr(t, Validate(s), ErrDeadlock, 0, 1, "0B0",
		"rank 0 at action 1 (0B0) waits for 1B0, which rank 1 never reaches (blocked at action 0: 1F1 waits for 0F1)",
		"rank 1 at action 0 (1F1) waits for 0F1, which rank 0 never reaches (blocked at action 1: 0B0 waits for 1B0)")
	if _, err := LowerComm(s); err == nil {
		t.Error("LowerComm accepted a deadlock")
	}
}

func TestValidateMissingF(t *testing.T) {
	s := mustGenerate(t, "1f1b", 2, 3, 0) // rank 0: 0F0 0F1 0B0 0F2 0B1 0B2
	s.Actions[0] = slices.Delete(s.Actions[0], 3, 4)
	wantErr(t, Validate(s), ErrMissing, 0, 4, "0B2", "rank 0 action 4 (0B2): needs 0F2, which appears nowhere in the schedule")

	// without its backward either, the completeness check names the pair
	s.Actions[0] = s.Actions[0][:4]
	s.Actions[1] = slices.DeleteFunc(s.Actions[1], func(a Action) bool { return a.Microbatch == 2 })
	wantErr(t, Validate(s), ErrIncomplete, 0, -1, "", "stage 0 micro-batch 2 has no F (expected on rank 0)")
}

func TestValidateMissingRemote(t *testing.T) {
	// rank 1's forward of micro-batch 2 needs 0F2, which rank 0 lacks
	s := mustGenerate(t, "1f1b", 2, 3, 0)
	s.Actions[0] = slices.DeleteFunc(s.Actions[0], func(a Action) bool { return a.Microbatch == 2 })
	e := wantErr(t, Validate(s), ErrMissing, 1, 4, "1F2", "missing dependency: rank 1 action 4 (1F2): waits for 0F2, which appears nowhere")
	if e.WaitsOn.String() != "0F2" {
		t.Errorf("WaitsOn = %v", e.WaitsOn)
	}
}

func TestValidateWBeforeI(t *testing.T) {
	s := mustGenerate(t, "zb-h1", 2, 2, 0) // rank 0: 0F0 0F1 0I0 0W0 0I1 0W1
	a := s.Actions[0]
	if a[4].String() != "0I1" || a[5].String() != "0W1" {
		t.Fatalf("unexpected order %v", a)
	}
	a[4], a[5] = a[5], a[4]
	e := wantErr(t, Validate(s), ErrOrder, 0, 4, "0W1", "rank 0 action 4 (0W1): needs 0I1, which comes later on the same rank (action 5)")
	if e.WaitsOn.String() != "0I1" {
		t.Errorf("WaitsOn = %v", e.WaitsOn)
	}
}

func TestValidateBackwardBeforeForward(t *testing.T) {
	s := parseString(t, "0B0,0F0\n")
	wantErr(t, Validate(s), ErrOrder, 0, 0, "0B0", "needs 0F0, which comes later on the same rank (action 1)")
}

func TestValidateStageOnTwoRanks(t *testing.T) {
	s := mustGenerate(t, "gpipe", 2, 2, 0)
	// move stage 1's backward of micro-batch 1 onto rank 0
	s.Actions[0] = append(s.Actions[0], Act(FullBackward, 1, 1))
	s.Actions[1] = s.Actions[1][:3]
	wantErr(t, Validate(s), ErrPlacement, 0, 4, "1B1", "rank 0 action 4 (1B1): stage 1 runs on rank 1, not on rank 0")
}

func TestValidateRecvWithoutSend(t *testing.T) {
	l, err := LowerComm(mustGenerate(t, "1f1b", 2, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	// rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 ...: drop the second send
	if l.Actions[0][3].String() != "0SEND_F1" {
		t.Fatalf("unexpected %v", l.Actions[0])
	}
	l.Actions[0] = slices.Delete(l.Actions[0], 3, 4)
	// rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 ...
	e := wantErr(t, Validate(l), ErrMissing, 1, 4, "1RECV_F1", "rank 1 action 4 (1RECV_F1): 1RECV_F1 has no matching 0SEND_F1 anywhere in the schedule")
	if e.WaitsOn.String() != "0SEND_F1" {
		t.Errorf("WaitsOn = %v", e.WaitsOn)
	}
}

func TestValidateSendWithoutRecv(t *testing.T) {
	s := parseString(t, "0F0,0SEND_F0,0B0\n1F0,1B0\n")
	wantErr(t, Validate(s), ErrMissing, 0, 1, "0SEND_F0", "0SEND_F0 is never received: no 1RECV_F0 on rank 1")
}

func TestValidateComputeNeedsRecv(t *testing.T) {
	// compute_comms, but rank 1 computes before receiving
	s := parseString(t, "0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n")
	wantErr(t, Validate(s), ErrOrder, 1, 0, "1F0", "rank 1 action 0 (1F0): needs 1RECV_F0, which comes later on the same rank (action 1)")
	// and with no RECV at all for the backward
	s = parseString(t, "0F0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0\n")
	wantErr(t, Validate(s), ErrMissing, 0, 2, "0B0", "rank 0 action 2 (0B0): needs 0RECV_B0, which appears nowhere")
}

func TestValidateDuplicates(t *testing.T) {
	s := parseString(t, "0F0,0F0,0B0\n")
	wantErr(t, Validate(s), ErrDuplicate, 0, 1, "0F0", "duplicates the forward of stage 0 micro-batch 0, already done by 0F0 at rank 0 action 0")
	s = parseString(t, "0F0,0I0,0B0\n")
	wantErr(t, Validate(s), ErrDuplicate, 0, 2, "0B0", "duplicates the input gradient")
	// An I elsewhere makes the file the current dialect, where B is the full backward. (With
	// no I, "0F0,0B0,0W0" is PyTorch 2.4's split backward, and valid.)
	s = parseString(t, "0F0,0F1,0I1,0W1,0B0,0W0\n")
	wantErr(t, Validate(s), ErrDuplicate, 0, 5, "0W0", "duplicates the weight gradient of stage 0 micro-batch 0, already done by 0B0")
	s = parseString(t, "0F0,0SEND_F0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0\n")
	wantErr(t, Validate(s), ErrDuplicate, 0, 2, "0SEND_F0", "duplicates the message")
}

func TestValidateIWithoutW(t *testing.T) {
	s := parseString(t, "0F0,0I0\n")
	wantErr(t, Validate(s), ErrIncomplete, 0, -1, "", "stage 0 micro-batch 0 has no weight gradient (W or B)")
}

func TestValidateReduceGrad(t *testing.T) {
	s := parseString(t, "0F0,0F1,0B0,0REDUCE_GRAD,0B1\n")
	wantErr(t, Validate(s), ErrOrder, 0, 3, "0REDUCE_GRAD", "REDUCE_GRAD runs before all 2 weight gradients of stage 0 (only 1 done)")
	s = parseString(t, "0F0,0F1,0B0,0B1,0REDUCE_GRAD\n")
	if err := Validate(s); err != nil {
		t.Error(err)
	}
}

func TestValidateOverlapSelf(t *testing.T) {
	s := parseString(t, "(0F0;0B0)OVERLAP_F_B\n")
	wantErr(t, Validate(s), ErrOrder, 0, 0, "(0F0;0B0)OVERLAP_F_B", "the two overlapped actions depend on each other")
}

func TestValidateRanges(t *testing.T) {
	s := mustGenerate(t, "gpipe", 2, 2, 0)
	s.Actions[1][0] = Act(Forward, 1, 5)
	wantErr(t, Validate(s), ErrBadAction, 1, 0, "1F5", "micro-batch 5 is outside 0..1")
	s = mustGenerate(t, "gpipe", 2, 2, 0)
	s.Actions[1][0] = Act(Forward, 7, 0)
	wantErr(t, Validate(s), ErrBadAction, 1, 0, "7F0", "stage 7 is outside 0..1")
	s = mustGenerate(t, "gpipe", 2, 2, 0)
	s.Actions[1][0] = Act(SendF, 1, 0)
	wantErr(t, Validate(s), ErrBadAction, 1, 0, "1SEND_F0", "the last stage has no next stage")
	s = mustGenerate(t, "gpipe", 2, 2, 0)
	s.Actions[0][0] = Overlap(Act(Forward, 0, 0), Act(BackwardWeight, 0, 0))
	wantErr(t, Validate(s), ErrBadAction, 0, 0, "(0F0;0W0)OVERLAP_F_B", "only overlap F with B or I")

	// shape errors
	for _, c := range []struct {
		s    *Schedule
		want string
	}{
		{&Schedule{}, "0 ranks"},
		{&Schedule{Ranks: 2, Stages: 1, Microbatches: 1, Placement: []int{0}, Actions: make([][]Action, 1)}, "2 ranks but 1 action lists"},
		{&Schedule{Ranks: 1, Stages: 2, Microbatches: 1, Placement: []int{0}, Actions: make([][]Action, 1)}, "2 stages but a placement of 1"},
		{&Schedule{Ranks: 1, Stages: 1, Microbatches: 1, Placement: []int{3}, Actions: make([][]Action, 1)}, "stage 0 on rank 3"},
		{&Schedule{Ranks: 1, Stages: 1, Microbatches: 0, Placement: []int{0}, Actions: make([][]Action, 1)}, "0 micro-batches"},
		{parseString(t, "0F0,0B0,2F0,2B0\n"), "stage 1 appears in no action"},
	} {
		if err := Validate(c.s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}
}
