package passes

import (
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

// With communication costs, T = Σt + Σcuts + (M−1)·max t: with one micro-batch the
// bottleneck does not matter and the split with the cheapest cut wins; with many micro-batches
// the bottleneck dominates.
func TestBalanceTradesCommForBottleneck(t *testing.T) {
	u := costUnits(1, 1, 1, 1)
	// Huge activations cross after units 0 and 1 (the balanced cut), a small one after unit 2.
	u[0].cut, u[1].cut = 1e12, 1e12
	u[2].cut = 1
	one, _ := balance(u, 2, 0, 2, 1, 1)
	many, _ := balance(u, 2, 0, 2, 1000, 1)
	if one[2] != 0 || one[3] != 1 {
		t.Errorf("M=1: %v, want the cheap cut after unit 2", one)
	}
	if many[1] != 0 || many[2] != 1 {
		t.Errorf("M=1000: %v, want the balanced cut after unit 1", many)
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
