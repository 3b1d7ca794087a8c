package schedule

import (
	"bytes"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestTimeUnitFormat(t *testing.T) {
	for _, c := range []struct {
		u    TimeUnit
		v    float64
		want string
	}{
		{Seconds, 164.088e-6, "164 µs"},
		{Seconds, 42.907e-6, "42.9 µs"},
		{Seconds, 0.9996e-3, "1 ms"}, // rounds up into the next prefix
		{Seconds, 2.5e-3, "2.5 ms"},
		{Seconds, 475.4e-9, "475 ns"},
		{Seconds, 12.34, "12.3 s"},
		{Seconds, 0, "0 s"},
		{Units, 10.5, "10.5"},
		{Units, 33, "33"},
		{Units, 1.0 / 3, "0.3333"},
	} {
		if got := c.u.Format(c.v); got != c.want {
			t.Errorf("%v.Format(%v) = %q, want %q", c.u, c.v, got, c.want)
		}
	}
}

// secondsCost is a uniform cost in seconds, as a cost model gives: every action takes tens of
// microseconds, which the reports must neither scale as units nor round to zero.
func secondsCost() Cost {
	return Cost{F: 20e-6, I: 20e-6, W: 20e-6, Comm: 5e-6, Unit: Seconds, Source: "cost model, device profile test"}
}

// A trace of costs in seconds has real microseconds: its span is the step time in µs, not a
// thousandth of it.
func TestTraceSeconds(t *testing.T) {
	r := mustSimulate(t, mustGenerate(t, "1f1b", 4, 8, 0), secondsCost())
	span := traceSpan(t, r)
	if want := r.StepTime * 1e6; math.Abs(span-want) > 1e-9*want {
		t.Errorf("trace spans %v µs, the step takes %v s = %v µs", span, r.StepTime, want)
	}
	u := mustSimulate(t, mustGenerate(t, "1f1b", 4, 8, 0), UnitCost())
	if span := traceSpan(t, u); span != u.StepTime*1000 {
		t.Errorf("unit costs: trace spans %v µs, want %v units × 1 ms", span, u.StepTime)
	}
}

func traceSpan(t *testing.T, r *Result) float64 {
	t.Helper()
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, e := range traceEvents(t, r) {
		if e.Ph == "X" {
			lo, hi = min(lo, e.Ts), max(hi, e.Ts+e.Dur)
		}
	}
	return hi - lo
}

var svgTick = regexp.MustCompile(`<text class="tick"[^>]*>([^<]*)</text>`)

// svgTicks returns the SVG's time-axis labels.
func svgTicks(svg string) []string {
	var out []string
	for _, m := range svgTick.FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	return out
}

// The SVG of costs in seconds labels its ticks in a readable unit (they all read 0 when seconds
// were printed with two decimals), and its footer names where the costs came from.
func TestSVGUnits(t *testing.T) {
	s := mustGenerate(t, "1f1b", 4, 8, 0)
	var buf bytes.Buffer
	if err := mustSimulate(t, s, secondsCost()).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	ticks := svgTicks(svg)
	if len(ticks) < 3 {
		t.Fatalf("ticks %q", ticks)
	}
	for i, tick := range ticks {
		v, unit, _ := strings.Cut(tick, " ")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || unit != "µs" || (i > 0) != (f > 0) {
			t.Errorf("tick %d reads %q, want a number of µs, non-zero after the first", i, tick)
		}
	}
	for _, want := range []string{"time (µs)", "step time 740 µs · ideal 480 µs · bubble 180 µs", "costs: cost model, device profile test</text>", "transfers not hidden"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	buf.Reset()
	if err := mustSimulate(t, s, UnitCost()).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	svg = buf.String()
	if ticks := svgTicks(svg); len(ticks) < 3 || ticks[1] == "0" || strings.Contains(ticks[1], " ") {
		t.Errorf("unit-cost ticks %q, want plain non-zero numbers", ticks)
	}
	for _, want := range []string{"time (units)", "costs: F=1,I=1,W=1,comm=0 (units)</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("unit-cost SVG lacks %q", want)
		}
	}
}

// The bubble is the schedule's: transfers are reported apart, so 1F1B keeps its (p−1)/m
// however slow the links, and the three parts add up to the step time.
func TestBubbleExcludesCommunication(t *testing.T) {
	for _, comm := range []float64{0, 0.5, 10} {
		c := UnitCost()
		c.Comm = comm
		for _, p := range []int{2, 4} {
			m := 2 * p
			r := mustSimulate(t, mustGenerate(t, "1f1b", p, m, 0), c)
			if want := float64(p-1) / float64(m); !near(r.BubbleRatio, want) {
				t.Errorf("comm=%v p=%d m=%d: bubble ratio %v, want (p−1)/m = %v", comm, p, m, r.BubbleRatio, want)
			}
			if (comm > 0) != (r.CommTime > 0) || !near(r.IdealTime+r.BubbleTime+r.CommTime, r.StepTime) {
				t.Errorf("comm=%v p=%d: step %v ≠ ideal %v + bubble %v + comm %v", comm, p, r.StepTime, r.IdealTime, r.BubbleTime, r.CommTime)
			}
		}
	}
}

// Per-stage costs print stage by stage, not as the uniform F=1,I=1,W=1 they override.
func TestCostStringPerStage(t *testing.T) {
	c := Cost{F: 1, I: 1, W: 1, Unit: Seconds, Stages: []StageCost{{F: 1e-6, I: 2e-6, W: 3e-6}, {F: 4e-6, I: 5e-6, W: 6e-6}}}
	if got, want := c.String(), "F=1e-06/4e-06,I=2e-06/5e-06,W=3e-06/6e-06,comm=0 (s)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := c.Describe(); got != c.String() {
		t.Errorf("Describe without a source = %q", got)
	}
	if got := UnitCost().Describe(); got != "F=1,I=1,W=1,comm=0 (units)" {
		t.Errorf("unit Describe = %q", got)
	}
}
