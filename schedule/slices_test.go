package schedule

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestSliceTokensValid: every generator's schedule, cut into token slices, validates — its
// forwards run slice by slice, its backwards in reverse — for several (p, m, M), and with
// communication lowered too.
func TestSliceTokensValid(t *testing.T) {
	for _, name := range Names() {
		for _, c := range []struct{ p, m, slices int }{{2, 4, 2}, {4, 8, 3}, {4, 8, 1}} {
			s, err := Generate(name, c.p, c.m, 0)
			if err != nil {
				continue // the generator's own limits (e.g. dualpipev's micro-batch count)
			}
			sl, err := SliceTokens(s, c.slices)
			if err != nil {
				t.Fatalf("%s p%d m%d: %v", name, c.p, c.m, err)
			}
			if sl.Microbatches != c.m*c.slices || sl.NumActions() < s.NumActions() {
				t.Fatalf("%s: %d units, %d actions from %d", name, sl.Microbatches, sl.NumActions(), s.NumActions())
			}
			if err := Validate(sl); err != nil {
				t.Errorf("%s p%d m%d slices %d: %v", name, c.p, c.m, c.slices, err)
			}
			lowered, err := LowerComm(sl)
			if err != nil {
				t.Errorf("%s p%d m%d slices %d: lowering: %v", name, c.p, c.m, c.slices, err)
			} else if err := Validate(lowered); err != nil {
				t.Errorf("%s p%d m%d slices %d: lowered: %v", name, c.p, c.m, c.slices, err)
			}
		}
	}
}

// TestSliceTokensOrder: a sliced schedule whose slices run out of order fails validation,
// naming the action and the one it needs: a slice's forward needs the earlier slice's
// (its K/V), a slice's backward the later slice's (its K/V gradient).
func TestSliceTokensOrder(t *testing.T) {
	base, err := Generate("gpipe", 2, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		swap int // rank 0's actions swap and swap+1 trade places
		want string
	}{
		{0, "(0F1): needs 0F0, which comes later on the same rank"},
		{2, "(0B0): needs 0B1, which comes later on the same rank"},
	} {
		s, err := SliceTokens(base, 2)
		if err != nil {
			t.Fatal(err)
		}
		acts := s.Actions[0]
		acts[c.swap], acts[c.swap+1] = acts[c.swap+1], acts[c.swap]
		err = Validate(s)
		var se *Error
		if !errors.As(err, &se) || se.Kind != ErrOrder || !strings.Contains(err.Error(), c.want) {
			t.Errorf("swap %d: %v, want an order error with %q", c.swap, err, c.want)
		}
	}
	if _, err := SliceTokens(&Schedule{Slices: 2}, 2); err == nil {
		t.Error("slicing a sliced schedule: no error")
	}
}

// TestSliceTokensBubble is TeraPipe's point in unit costs: one micro-batch through p
// stages, F = I = W = 1 for the whole sequence, cut into M equal slices of 1/M each. GPipe's
// step is then (M + p − 1)·(F + B)/M with B = I + W = 2: the bubble (p − 1)·3/M shrinks as
// the slices multiply, against (p − 1)·3 unsliced. The peak activation memory is still one
// micro-batch's (all M slices of it, each 1/M), counted in bytes.
func TestSliceTokensBubble(t *testing.T) {
	const p = 4
	prev := math.Inf(1)
	for _, M := range []int{1, 2, 4, 8} {
		s, err := Generate("gpipe", p, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s, err = SliceTokens(s, M); err != nil {
			t.Fatal(err)
		}
		c := UnitCost()
		c.ActBytes = 1024
		res, err := Simulate(s, c)
		if err != nil {
			t.Fatal(err)
		}
		want := float64(M+p-1) * 3 / float64(M)
		if math.Abs(res.StepTime-want) > 1e-9 {
			t.Errorf("M = %d: step %v, want (M+p−1)·3/M = %v", M, res.StepTime, want)
		}
		if res.BubbleTime >= prev {
			t.Errorf("M = %d: bubble %v does not shrink (was %v)", M, res.BubbleTime, prev)
		}
		prev = res.BubbleTime
		if res.PeakActivationBytes[0] != 1024 {
			t.Errorf("M = %d: peak activation bytes %v, want one micro-batch's 1024", M, res.PeakActivationBytes[0])
		}
		if M > 1 && (res.Slices != M || !strings.Contains(res.actionName(res.Events[0][1].Action), fmt.Sprintf("0F0.%d", 1))) {
			t.Errorf("M = %d: result slices %d, second action %s", M, res.Slices, res.actionName(res.Events[0][1].Action))
		}
	}
}

// TestSliceCosts: per-slice costs, when given, price each unit (later slices dearer); the
// stash of each slice is held from its forward to its weight gradient, so with GPipe the
// first rank's peak is the sum of every slice's bytes.
func TestSliceCosts(t *testing.T) {
	s, err := Generate("gpipe", 2, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s, err = SliceTokens(s, 3); err != nil {
		t.Fatal(err)
	}
	sc := StageCost{F: 9, I: 9, W: 9, ActBytes: 100}
	for j := 0; j < 3; j++ {
		sc.Slices = append(sc.Slices, StageCost{F: float64(j + 1), I: float64(j + 1), W: float64(j + 1), ActBytes: float64(10 * (j + 1))})
	}
	c := Cost{F: 1, I: 1, W: 1, Stages: []StageCost{sc, sc}}
	res, err := Simulate(s, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.PeakActivationBytes[0] != 60 {
		t.Errorf("peak bytes %v, want 10+20+30", res.PeakActivationBytes[0])
	}
	// Rank 0: F 1,2,3 then (after rank 1's backward of slice 2) B 6, 4, 2.
	if got := res.Events[0][2].End - res.Events[0][2].Start; got != 3 {
		t.Errorf("third forward lasts %v, want slice 2's 3", got)
	}
}
