package schedule

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

const eps = 1e-9

func near(a, b float64) bool { return math.Abs(a-b) <= eps*math.Max(1, math.Abs(b)) }

func mustGenerate(t testing.TB, name string, p, m, v int) *Schedule {
	t.Helper()
	s, err := Generate(name, p, m, v)
	if err != nil {
		t.Fatalf("Generate(%s, p=%d, m=%d, v=%d): %v", name, p, m, v, err)
	}
	return s
}

func mustSimulate(t testing.TB, s *Schedule, c Cost) *Result {
	t.Helper()
	r, err := Simulate(s, c)
	if err != nil {
		t.Fatalf("Simulate(%s p=%d m=%d): %v", s.Name, s.Ranks, s.Microbatches, err)
	}
	return r
}

// wantGenerateError says whether Generate must refuse (name, p, m, v) and,
// if so, a phrase the error must contain.
func wantGenerateError(name string, p, m, v int) string {
	switch name {
	case "gpipe", "1f1b", "zb-h1", "zb-h2", "zb-auto":
		if v != 1 {
			return "supports exactly 1 stage"
		}
		if name != "gpipe" && name != "zb-auto" && m < p {
			return fmt.Sprintf("at least %d micro-batches", p)
		}
	case "interleaved-1f1b":
		if m%p != 0 {
			return fmt.Sprintf("multiple of the rank count %d", p)
		}
	case "zbv":
		if v != 2 {
			return "supports exactly 2 stage"
		}
	case "dualpipev":
		if v != 2 {
			return "supports exactly 2 stage"
		}
		if m < 2*p {
			return fmt.Sprintf("at least %d micro-batches", 2*p)
		}
	}
	return ""
}

// checkCounts verifies that every (stage, mb) has exactly one F and exactly
// one backward (one B, or one I and one W), counting OVERLAP_F_B's parts.
func checkCounts(t *testing.T, s *Schedule) {
	t.Helper()
	type key struct {
		k      Kind
		st, mb int
	}
	n := map[key]int{}
	for r, acts := range s.Actions {
		for _, a := range acts {
			for _, c := range a.Computes() {
				n[key{c.Kind, c.Stage, c.Microbatch}]++
				if s.Placement[c.Stage] != r {
					t.Fatalf("%s: %s on rank %d, placement says %d", s.Name, c, r, s.Placement[c.Stage])
				}
			}
		}
	}
	for st := range s.Stages {
		for mb := range s.Microbatches {
			f, b, i, w := n[key{Forward, st, mb}], n[key{FullBackward, st, mb}], n[key{BackwardInput, st, mb}], n[key{BackwardWeight, st, mb}]
			if f != 1 || !(b == 1 && i == 0 && w == 0 || b == 0 && i == 1 && w == 1) {
				t.Fatalf("%s p=%d m=%d: stage %d mb %d has F×%d B×%d I×%d W×%d", s.Name, s.Ranks, s.Microbatches, st, mb, f, b, i, w)
			}
		}
	}
}

// TestGeneratorsGrid: every generator, over a grid of (p, m, v), either
// refuses with the documented reason or yields a schedule that is complete,
// validates before and after LowerComm, and simulates to the same timeline
// in both formats.
func TestGeneratorsGrid(t *testing.T) {
	ok := 0
	for _, name := range Names() {
		for _, p := range []int{1, 2, 3, 4, 8} {
			for _, v := range []int{1, 2, 3, 4} {
				ms := []int{1, 2, 3, p - 1, p, p + 1, 2*p - 1, 2 * p, 2*p + 1, 3 * p, 4 * p}
				slices.Sort(ms)
				for _, m := range slices.Compact(ms) {
					if m < 1 {
						continue
					}
					s, err := Generate(name, p, m, v)
					if want := wantGenerateError(name, p, m, v); want != "" {
						if err == nil || !strings.Contains(err.Error(), want) {
							t.Errorf("Generate(%s, %d, %d, %d) error = %v, want one containing %q", name, p, m, v, err, want)
						}
						continue
					}
					if err != nil {
						t.Errorf("Generate(%s, %d, %d, %d): %v", name, p, m, v, err)
						continue
					}
					if s.Ranks != p || s.Microbatches != m || s.Stages != p*v || len(s.Placement) != p*v || len(s.Actions) != p {
						t.Fatalf("%s p=%d m=%d v=%d: bad shape %+v", name, p, m, v, s)
					}
					checkCounts(t, s)
					if err := Validate(s); err != nil {
						t.Fatalf("Validate(%s p=%d m=%d v=%d): %v", name, p, m, v, err)
					}
					l, err := LowerComm(s)
					if err != nil {
						t.Fatalf("LowerComm(%s p=%d m=%d v=%d): %v", name, p, m, v, err)
					}
					if p > 1 && !l.HasComms() {
						t.Fatalf("LowerComm(%s p=%d) added no communication", name, p)
					}
					if err := Validate(l); err != nil {
						t.Fatalf("Validate(LowerComm(%s p=%d m=%d v=%d)): %v", name, p, m, v, err)
					}
					checkCounts(t, l)
					for _, c := range []Cost{UnitCost(), {F: 1, I: 1.5, W: 0.5, Comm: 0.25}} {
						a, b := mustSimulate(t, s, c), mustSimulate(t, l, c)
						if !near(a.StepTime, b.StepTime) || !near(a.IdealTime, b.IdealTime) || !slices.Equal(a.PeakActivations, b.PeakActivations) {
							t.Fatalf("%s p=%d m=%d v=%d cost %v: compute_only step %v peaks %v, lowered step %v peaks %v",
								name, p, m, v, c, a.StepTime, a.PeakActivations, b.StepTime, b.PeakActivations)
						}
					}
					ok++
				}
			}
		}
	}
	if ok < 100 {
		t.Errorf("only %d schedules generated", ok)
	}
}

func TestGenerateErrors(t *testing.T) {
	cases := []struct {
		name    string
		p, m, v int
		want    string
	}{
		{"nope", 4, 8, 0, "unknown schedule \"nope\" (valid: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv, dualpipev, zb-auto)"},
		{"1f1b", 0, 8, 0, "ranks must be at least 1, got 0"},
		{"1f1b", -3, 8, 0, "ranks must be at least 1"},
		{"gpipe", 4, 0, 0, "micro-batches must be at least 1"},
		{"1f1b", 4, 3, 0, "needs at least 4 micro-batches with 4 ranks"},
		{"zb-h1", 8, 7, 0, "needs at least 8 micro-batches"},
		{"dualpipev", 4, 7, 0, "needs at least 8 micro-batches with 4 ranks (2 per rank), got 7"},
		{"interleaved-1f1b", 4, 6, 2, "multiple of the rank count 4 (minimum 4), got 6"},
		{"interleaved-1f1b", 4, 8, -1, "virtual stages per rank must be at least 1"},
		{"1f1b", 4, 8, 2, "supports exactly 1 stage(s) per rank (virtual=1), got virtual=2"},
		{"zbv", 4, 8, 3, "supports exactly 2 stage(s) per rank (virtual=2), got virtual=3"},
		{"dualpipev", 4, 8, 1, "supports exactly 2 stage(s) per rank"},
		{"1f1b", 1 << 20, 8, 0, "more than the limit"},
		{"gpipe", 4, 1 << 30, 0, "more than the limit"},
		{"interleaved-1f1b", 4096, 4096, 16, "is too large"},
	}
	for _, c := range cases {
		_, err := Generate(c.name, c.p, c.m, c.v)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Generate(%q, %d, %d, %d) error = %v, want it to contain %q", c.name, c.p, c.m, c.v, err, c.want)
		}
	}
	// names are case-insensitive and defaults apply
	s, err := Generate("DualPipeV", 2, 4, 0)
	if err != nil || s.Stages != 4 || !slices.Equal(s.Placement, []int{0, 1, 1, 0}) {
		t.Errorf("Generate(DualPipeV, 2, 4, 0) = %v, %v", s, err)
	}
	s, err = Generate("interleaved-1f1b", 2, 4, 0)
	if err != nil || s.Stages != 4 || !slices.Equal(s.Placement, []int{0, 1, 0, 1}) {
		t.Errorf("Generate(interleaved-1f1b, 2, 4, 0) = %v, %v", s, err)
	}
}

func TestPlacements(t *testing.T) {
	if got := LoopPlacement(3, 2); !slices.Equal(got, []int{0, 1, 2, 0, 1, 2}) {
		t.Errorf("LoopPlacement(3, 2) = %v", got)
	}
	if got := VPlacement(4); !slices.Equal(got, []int{0, 1, 2, 3, 3, 2, 1, 0}) {
		t.Errorf("VPlacement(4) = %v", got)
	}
	s := mustGenerate(t, "zbv", 4, 8, 0)
	if got := s.StagesOf(1); !slices.Equal(got, []int{1, 6}) {
		t.Errorf("zbv StagesOf(1) = %v", got)
	}
}

// TestZeroBubblePaperOrder compares ZB-H1 and ZB-H2 with the orders of the
// Zero Bubble paper's Figure 3 (p = 4, m = 8; 0-based micro-batches).
func TestZeroBubblePaperOrder(t *testing.T) {
	str := func(acts []Action) string {
		var b []string
		for _, a := range acts {
			b = append(b, fmt.Sprintf("%s%d", a.Kind, a.Microbatch))
		}
		return strings.Join(b, " ")
	}
	h1 := mustGenerate(t, "zb-h1", 4, 8, 0)
	want := map[int]string{
		0: "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7",
		3: "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7",
	}
	for r, w := range want {
		if got := str(h1.Actions[r]); got != w {
			t.Errorf("zb-h1 rank %d:\n got %s\nwant %s", r, got, w)
		}
	}
	h2 := mustGenerate(t, "zb-h2", 4, 8, 0)
	want = map[int]string{
		0: "F0 F1 F2 F3 F4 F5 F6 I0 W0 F7 I1 W1 I2 W2 I3 W3 I4 W4 I5 W5 I6 W6 I7 W7",
		3: "F0 I0 F1 I1 F2 I2 F3 I3 F4 I4 F5 I5 F6 I6 W0 F7 I7 W1 W2 W3 W4 W5 W6 W7",
	}
	for r, w := range want {
		if got := str(h2.Actions[r]); got != w {
			t.Errorf("zb-h2 rank %d:\n got %s\nwant %s", r, got, w)
		}
	}
}

// TestPublishedResults reproduces the papers' numbers with unit costs
// (F = I = W = 1, B = 2, comm = 0).
func TestPublishedResults(t *testing.T) {
	unit := UnitCost()

	t.Run("gpipe-1f1b", func(t *testing.T) {
		for _, name := range []string{"gpipe", "1f1b"} {
			for _, pm := range [][2]int{{4, 4}, {4, 8}, {8, 16}, {8, 32}, {2, 5}, {1, 3}} {
				p, m := pm[0], pm[1]
				r := mustSimulate(t, mustGenerate(t, name, p, m, 0), unit)
				want := float64(p-1) / float64(m)
				if !near(r.BubbleRatio, want) {
					t.Errorf("%s p=%d m=%d: bubble ratio %v, want (p−1)/m = %v", name, p, m, r.BubbleRatio, want)
				}
				if !near(r.BubbleTime, float64(p-1)*3) {
					t.Errorf("%s p=%d m=%d: bubble time %v, want (p−1)(F+B) = %v", name, p, m, r.BubbleTime, 3*(p-1))
				}
			}
		}
		r := mustSimulate(t, mustGenerate(t, "gpipe", 4, 4, 0), unit)
		if !near(r.BubbleTime/r.StepTime, 3.0/7) {
			t.Errorf("GPipe K=4 M=4: bubble/step = %v, want 3/7", r.BubbleTime/r.StepTime)
		}
		// activation memory: GPipe holds m, 1F1B p−r
		g := mustSimulate(t, mustGenerate(t, "gpipe", 4, 8, 0), unit)
		o := mustSimulate(t, mustGenerate(t, "1f1b", 4, 8, 0), unit)
		if !slices.Equal(g.PeakActivations, []int{8, 8, 8, 8}) || !slices.Equal(o.PeakActivations, []int{4, 3, 2, 1}) {
			t.Errorf("peaks: gpipe %v, 1f1b %v", g.PeakActivations, o.PeakActivations)
		}
	})

	t.Run("interleaved", func(t *testing.T) {
		for _, c := range [][3]int{{8, 4, 8}, {4, 2, 8}, {4, 2, 4}, {4, 4, 16}, {2, 3, 6}, {8, 2, 64}} {
			p, v, m := c[0], c[1], c[2]
			r := mustSimulate(t, mustGenerate(t, "interleaved-1f1b", p, m, v), unit)
			want := float64(p-1) / float64(v*m)
			if !near(r.BubbleRatio, want) {
				t.Errorf("interleaved p=%d v=%d m=%d: bubble ratio %v, want (p−1)/(vm) = %v", p, v, m, r.BubbleRatio, want)
			}
		}
		r := mustSimulate(t, mustGenerate(t, "interleaved-1f1b", 8, 8, 4), unit)
		if !near(r.BubbleRatio, 0.21875) {
			t.Errorf("interleaved p=8 v=4 m=8: %v, want 0.21875", r.BubbleRatio)
		}
	})

	t.Run("zb-h1", func(t *testing.T) {
		for _, p := range []int{2, 4, 8} {
			for _, m := range []int{p, 2 * p, 3 * p} {
				s := mustGenerate(t, "zb-h1", p, m, 0)
				for _, c := range []Cost{unit, {F: 1, I: 2, W: 1}, {F: 2, I: 1, W: 1}, {F: 1, I: 1.5, W: 0.5}} {
					r := mustSimulate(t, s, c)
					want := float64(p-1) * (c.F + c.I - c.W)
					if !near(r.BubbleTime, want) {
						t.Errorf("zb-h1 p=%d m=%d %v: bubble %v, want (p−1)(F+I−W) = %v", p, m, c, r.BubbleTime, want)
					}
				}
				r := mustSimulate(t, s, unit)
				o := mustSimulate(t, mustGenerate(t, "1f1b", p, m, 0), unit)
				if !near(r.BubbleTime*3, o.BubbleTime) {
					t.Errorf("zb-h1 p=%d m=%d: bubble %v is not a third of 1F1B's %v", p, m, r.BubbleTime, o.BubbleTime)
				}
				if r.PeakActivations[0] != p || o.PeakActivations[0] != p || slices.Max(r.PeakActivations) != slices.Max(o.PeakActivations) {
					t.Errorf("zb-h1 p=%d m=%d peaks %v, 1f1b %v: want the same peak p", p, m, r.PeakActivations, o.PeakActivations)
				}
			}
		}
	})

	t.Run("zb-h2", func(t *testing.T) {
		for _, p := range []int{2, 4, 8} {
			for _, m := range []int{2*p - 1, 2 * p, 4 * p} {
				h1 := mustGenerate(t, "zb-h1", p, m, 0)
				h2 := mustGenerate(t, "zb-h2", p, m, 0)
				r1, r2 := mustSimulate(t, h1, unit), mustSimulate(t, h2, unit)
				// Unit costs: no bubble inside any rank's span; the step
				// bubble is the unavoidable (p−1)F fill, equal to ZB-H1's.
				if r2.InternalBubble != 0 || !near(r1.InternalBubble, float64(p-1)) {
					t.Errorf("zb-h2 p=%d m=%d: internal bubble %v (zb-h1 %v), want 0 (p−1)", p, m, r2.InternalBubble, r1.InternalBubble)
				}
				if !near(r2.BubbleTime, float64(p-1)) || !near(r1.BubbleTime, r2.BubbleTime) {
					t.Errorf("zb-h2 p=%d m=%d: bubble %v, zb-h1 %v, want both (p−1)F", p, m, r2.BubbleTime, r1.BubbleTime)
				}
				for r, n := range r2.PeakActivations {
					if n != 2*p-1 || r1.PeakActivations[r] != p {
						t.Errorf("zb-h2 p=%d m=%d: peaks %v (zb-h1 %v), want 2p−1 (p)", p, m, r2.PeakActivations, r1.PeakActivations)
						break
					}
				}
				// With I > W (as in Transformers' split backward) ZB-H2 is
				// strictly better, and both formulas hold.
				for _, c := range []Cost{{F: 1, I: 2, W: 1}, {F: 1, I: 1.5, W: 0.5}} {
					a, b := mustSimulate(t, h1, c), mustSimulate(t, h2, c)
					w1, w2 := float64(p-1)*(c.F+c.I-c.W), float64(p-1)*(c.F+c.I-2*c.W)
					if !near(a.BubbleTime, w1) || !near(b.BubbleTime, w2) || !(b.BubbleTime < a.BubbleTime) {
						t.Errorf("p=%d m=%d %v: zb-h1 bubble %v (want %v), zb-h2 %v (want %v, smaller)", p, m, c, a.BubbleTime, w1, b.BubbleTime, w2)
					}
				}
			}
		}
	})

	t.Run("zbv", func(t *testing.T) {
		for _, p := range []int{1, 2, 4, 8} {
			for _, m := range []int{2*p - 1, 2 * p, 3 * p, 4 * p} {
				r := mustSimulate(t, mustGenerate(t, "zbv", p, m, 0), unit)
				if r.InternalBubble != 0 || !near(r.BubbleTime, float64(p-1)) {
					t.Errorf("zbv p=%d m=%d: internal bubble %v, bubble %v; want 0 and (p−1)F", p, m, r.InternalBubble, r.BubbleTime)
				}
				for _, n := range r.PeakActivations {
					if n != 2*p {
						t.Errorf("zbv p=%d m=%d: peaks %v, want 2p each", p, m, r.PeakActivations)
						break
					}
				}
			}
		}
	})

	t.Run("dualpipev", func(t *testing.T) {
		for _, p := range []int{1, 2, 4, 8} {
			PP := 2 * p // stages; DualPipeV runs them on PP/2 = p ranks
			for _, m := range []int{2 * p, 3 * p, 4 * p, 5*p + 1} {
				s := mustGenerate(t, "dualpipev", p, m, 0)
				for _, fb := range []float64{0, 2, 2.5} {
					c := Cost{F: 1, I: 1, W: 1, FB: fb}
					r := mustSimulate(t, s, c)
					B := c.I + c.W
					FandB := fb
					if FandB == 0 {
						FandB = c.F + B
					}
					want := float64(PP/2-1) * (FandB + B - 3*c.W)
					got := r.BubbleTime
					if fb != 0 {
						got = slices.Max(r.Idle) // unequal work: the most idle rank
					}
					if !near(got, want) {
						t.Errorf("dualpipev p=%d m=%d F&B=%v: bubble %v, want (PP/2−1)(F&B+B−3W) = %v", p, m, FandB, got, want)
					}
				}
				r := mustSimulate(t, s, unit)
				for rank, n := range r.PeakActivations {
					if n != PP+1 {
						t.Errorf("dualpipev p=%d m=%d: peak activations %v, want PP+1 = %d", p, m, r.PeakActivations, PP+1)
						break
					}
					if len(s.StagesOf(rank)) != 2 {
						t.Errorf("dualpipev: rank %d holds stages %v, want 2 (parameters 2×)", rank, s.StagesOf(rank))
					}
				}
			}
		}
	})
}
