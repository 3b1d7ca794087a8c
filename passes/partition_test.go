package passes

import (
	"fmt"
	"strings"
	"testing"
)

func costUnits(costs ...float64) []unit {
	u := make([]unit, len(costs))
	for i, c := range costs {
		u[i] = unit{label: "t" + string(rune('0'+i)), kind: 't', f: c}
	}
	return u
}

func TestBalanceMinimisesPipelineTime(t *testing.T) {
	cases := []struct {
		costs  []float64
		stages int
		mb     int
		want   string
	}{
		// The heavy last unit alone; the rest shared.
		{[]float64{1, 1, 1, 1, 4}, 2, 8, "0,0,0,0,1"},
		// Even split of equal units.
		{[]float64{1, 1, 1, 1, 1, 1, 1, 1}, 4, 8, "0,0,1,1,2,2,3,3"},
		// Every stage gets at least one unit.
		{[]float64{5, 1, 1}, 3, 4, "0,1,2"},
	}
	for _, c := range cases {
		got, err := balance(costUnits(c.costs...), c.stages, 0, c.stages, c.mb, 1)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, g := range got {
			s = append(s, string(rune('0'+g)))
		}
		if strings.Join(s, ",") != c.want {
			t.Errorf("balance(%v into %d) = %v, want %s", c.costs, c.stages, s, c.want)
		}
	}
}

// With one micro-batch the pipeline time does not depend on the split: memory decides, not
// the cheapest cut (which would leave the second stage one unit and the first three).
func TestBalanceOneMicrobatchBalancesMemory(t *testing.T) {
	u := costUnits(1, 1, 1, 1)
	for i := range u {
		u[i].params = 1000
	}
	u[0].cut, u[1].cut = 1e12, 1e12
	u[2].cut = 1
	one, err := balance(u, 2, 0, 2, 1, 1)
	if err != nil || fmt.Sprint(one) != "[0 0 1 1]" {
		t.Errorf("M=1: %v %v, want [0 0 1 1] (two units' memory per stage)", one, err)
	}
	// Memory the same either way: the smaller bottleneck wins, whatever the cuts cost.
	for i := range u {
		u[i].params = 0
	}
	if one, _ = balance(u, 2, 0, 2, 1, 1); fmt.Sprint(one) != "[0 0 1 1]" {
		t.Errorf("M=1 without memory: %v, want the balanced [0 0 1 1]", one)
	}
}

// With many micro-batches the bottleneck decides, and memory only between splits of (nearly)
// the same time.
func TestBalanceTimeBeforeMemory(t *testing.T) {
	u := costUnits(1, 1, 1, 1)
	u[3].params = 1e6 // the last stage's memory would be least with unit 3 alone
	many, _ := balance(u, 2, 0, 2, 1000, 1)
	if fmt.Sprint(many) != "[0 0 1 1]" {
		t.Errorf("M=1000: %v, want the balanced [0 0 1 1]", many)
	}
	// Splits within timeTolerance of the fastest count as equal: [0]|[1,2] is 0.1% slower
	// than [0,1]|[2] but halves the largest stage's memory.
	u = costUnits(1, 1, 1.002)
	u[0].params, u[1].params = 1e6, 1e6
	if many, _ = balance(u, 2, 0, 2, 1000, 1); fmt.Sprint(many) != "[0 1 1]" {
		t.Errorf("M=1000, near tie: %v, want [0 1 1]", many)
	}
	// 25% slower is not equal.
	u[2].f = 1.5
	if many, _ = balance(u, 2, 0, 2, 1000, 1); fmt.Sprint(many) != "[0 0 1]" {
		t.Errorf("M=1000, no tie: %v, want [0 0 1]", many)
	}
}

// The cost of the cuts breaks the remaining ties.
func TestBalanceCheapestCutsLast(t *testing.T) {
	u := costUnits(1, 1, 1, 1)
	// Three splits into 3 stages have a bottleneck of 2; only one avoids the cut after unit 0.
	u[0].cut = 1e12
	got, _ := balance(u, 3, 0, 3, 8, 1)
	if fmt.Sprint(got) != "[0 0 1 2]" {
		t.Errorf("%v, want [0 0 1 2] (no cut after unit 0)", got)
	}
}

func TestBalanceMemoryLimit(t *testing.T) {
	u := costUnits(1, 1, 1, 1)
	for i := range u {
		u[i].params = 1000
	}
	// Each unit needs 1000·(1+3) bytes of model state; a stage may hold at most two.
	got, err := balance(u, 2, 8000, 2, 1, 1)
	if err != nil || got[1] != 0 || got[2] != 1 {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := balance(u, 2, 3000, 2, 1, 1); err == nil || !strings.Contains(err.Error(), "no split into 2 stages fits mem=3000") {
		t.Fatalf("got %v", err)
	}
}

func TestCompactLabels(t *testing.T) {
	if got := compactLabels([]string{"E", "t0", "t1", "t2", "t4", "L"}); got != "E,t0-t2,t4,L" {
		t.Fatalf("got %q", got)
	}
}
