package schedule

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestZBAutoRandomCosts: on random uneven stage costs (W shorter than F, some stages twice
// as slow), zb-auto validates, keeps within its memory limit, and is never slower than ZB-H1
// at p micro-batches in flight nor than ZB-H2 at 2p−1; and on some of the costs the list
// scheduler itself beats both hand-written layouts.
func TestZBAutoRandomCosts(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	strictly := 0
	for trial := 0; trial < 60; trial++ {
		p := 2 + r.IntN(5)
		m := p + r.IntN(3*p)
		c := Cost{Comm: r.Float64() * 0.2}
		for s := 0; s < p; s++ {
			f := 0.5 + r.Float64()
			if r.IntN(4) == 0 {
				f *= 2
			}
			c.Stages = append(c.Stages, StageCost{F: f, I: f * (0.8 + 0.4*r.Float64()), W: f * (0.3 + 0.5*r.Float64())})
		}
		sim := func(s *Schedule) *Result {
			t.Helper()
			if err := Validate(s); err != nil {
				t.Fatalf("trial %d: %s: %v", trial, s.Name, err)
			}
			res, err := Simulate(s, c)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		h1, _ := Generate("zb-h1", p, m, 1)
		h2, _ := Generate("zb-h2", p, m, 1)
		r1, r2 := sim(h1), sim(h2)
		for _, lim := range []int{p, 2*p - 1} {
			auto, err := ZBAuto(p, m, c, lim)
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			ra := sim(auto)
			if maxPeak(ra.PeakActivations) > lim {
				t.Errorf("trial %d: %d micro-batches in flight, limit %d", trial, maxPeak(ra.PeakActivations), lim)
			}
			ref := r1
			if lim == 2*p-1 {
				ref = r2
			}
			if ra.StepTime > ref.StepTime*(1+1e-12) {
				t.Errorf("trial %d (p %d m %d, limit %d): zb-auto %.6g slower than the hand-written %.6g", trial, p, m, lim, ra.StepTime, ref.StepTime)
			}
			if ra.StepTime < math.Min(r1.StepTime, r2.StepTime)*(1-1e-9) {
				strictly++
			}
		}
	}
	if strictly == 0 {
		t.Error("the list scheduler never beat ZB-H1 and ZB-H2 on uneven costs")
	}
	t.Logf("zb-auto beat both hand-written layouts in %d of 120 cases", strictly)
}

// TestZBAutoUnitCosts: on the papers' unit costs (F = I = W) with p in flight, zb-auto does
// at least as well as ZB-H1, whose bubble is (p−1)(F+B−2W) = (p−1)·1.
func TestZBAutoUnitCosts(t *testing.T) {
	for _, p := range []int{2, 4, 8} {
		s, err := Generate("zb-auto", p, 3*p, 1)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Simulate(s, UnitCost())
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(3*p*3 + p - 1); res.StepTime > want+1e-9 {
			t.Errorf("p %d: step %v, ZB-H1's is %v", p, res.StepTime, want)
		}
	}
	if _, err := ZBAuto(4, 8, UnitCost(), -1); err == nil {
		t.Error("negative limit: no error")
	}
	if _, err := GenerateFor("1f1b", 4, 8, 1, UnitCost(), 3); err == nil {
		t.Error("--max-inflight with 1f1b: no error")
	}
}

// TestZBH2AdaptsToCosts: zb-h2 built for the costs (GenerateFor) keeps ZB-H2's memory
// (2p−1 micro-batches) and is never slower than the hand-written layout. With uniform stages
// of random F, I and W (W shorter than F) its bubble is the paper's (p−1)(F+I−2W), or the
// warm-up's (p−1)·F when that is larger (the last rank cannot start before the first
// forward reaches it, and has no weight gradient to fill the wait with). With uneven stages
// (some twice as slow) it is sometimes strictly faster than the hand-written layout.
func TestZBH2AdaptsToCosts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	better := 0
	for trial := 0; trial < 60; trial++ {
		p := 2 + rng.IntN(6)
		m := 2*p + rng.IntN(2*p)
		F, I := 1+rng.Float64(), 1+rng.Float64()
		W := 0.3 + 0.7*rng.Float64()*min(F, I)
		cost := Cost{F: F, I: I, W: W}
		uneven := trial%2 == 1
		if uneven {
			for s := 0; s < p; s++ {
				k := 1.0
				if rng.IntN(3) == 0 {
					k = 2
				}
				cost.Stages = append(cost.Stages, StageCost{F: k * F, I: k * I, W: k * W})
			}
		}
		hand, err := Generate("zb-h2", p, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		adapted, err := GenerateFor("zb-h2", p, m, 0, cost, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(adapted); err != nil {
			t.Fatalf("p %d m %d %+v: %v", p, m, cost, err)
		}
		h, err := Simulate(hand, cost)
		if err != nil {
			t.Fatal(err)
		}
		a, err := Simulate(adapted, cost)
		if err != nil {
			t.Fatal(err)
		}
		if a.StepTime > h.StepTime+1e-9 {
			t.Errorf("p %d m %d %+v: adapted zb-h2 %.3f slower than the hand-written %.3f", p, m, cost, a.StepTime, h.StepTime)
		}
		if a.StepTime < h.StepTime-1e-9 {
			better++
		}
		if maxPeak(a.PeakActivations) > 2*p-1 {
			t.Errorf("p %d m %d: adapted zb-h2 holds %d micro-batches, ZB-H2's limit is %d", p, m, maxPeak(a.PeakActivations), 2*p-1)
		}
		if !uneven {
			want := float64(p-1) * max(F, F+I-2*W)
			if math.Abs(a.BubbleTime-want) > 1e-9*want {
				t.Errorf("p %d m %d F %.2f I %.2f W %.2f: bubble %.4f, the formula max((p−1)F, (p−1)(F+I−2W)) = %.4f", p, m, F, I, W, a.BubbleTime, want)
			}
		}
	}
	if better == 0 {
		t.Errorf("on no uneven stage costs did the adapted zb-h2 beat the hand-written layout")
	}
	t.Logf("adapted zb-h2 strictly faster on %d of 30 uneven cost sets", better)
}
