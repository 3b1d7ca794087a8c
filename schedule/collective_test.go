package schedule

import (
	"bytes"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// collCost gives every stage collectives of each kind: part of F, I and W, a gradient
// all-reduce, a reduce-scatter per micro-batch and step-end collectives.
func collCost(stages int) Cost {
	c := Cost{F: 1, I: 1, W: 1}
	for range stages {
		c.Stages = append(c.Stages, StageCost{F: 2, I: 1, W: 1, FColl: 0.5, IColl: 0.25, WColl: 0.25,
			GradReduce: 3, GradReduceMB: 0.5, StepEnd: 1})
	}
	return c
}

// One rank, one stage, GPipe with 2 micro-batches (F0 F1 B0 B1): F takes 2 of which 0.5 in
// collectives, B = I+W = 2 of which 0.5. Each B issues a reduce-scatter of 0.5 (B0's at 6,
// B1's at 8); the all-reduce follows B1's on the stream (8.5–11.5) while nothing is left to
// overlap; the step-end collectives take the last 1: step 12.5. Without collectives F and B
// take 1.5: ideal 6, no bubble, so collectives add 6.5.
func TestSimulateCollectivesByHand(t *testing.T) {
	s := mustGenerate(t, "gpipe", 1, 2, 0)
	r := mustSimulate(t, s, collCost(1))
	if r.StepTime != 12.5 || r.IdealTime != 6 || r.BubbleTime != 0 || r.CollectiveTime != 6.5 || r.CommTime != 0 {
		t.Errorf("step %v = ideal %v + bubble %v + collectives %v + comm %v, want 12.5 = 6 + 0 + 6.5 + 0",
			r.StepTime, r.IdealTime, r.BubbleTime, r.CollectiveTime, r.CommTime)
	}
	for _, e := range r.Events[0] {
		if e.Collective != 0.5 {
			t.Errorf("%s: collective %v, want 0.5", e.Action, e.Collective)
		}
	}
	want := []CollectiveEvent{
		{6, 6.5, GradReduceMB, 0, 0}, {8, 8.5, GradReduceMB, 0, 1}, {8.5, 11.5, GradReduce, 0, -1}, {11.5, 12.5, StepEnd, 0, -1},
	}
	if len(r.Collectives) != 1 || len(r.Collectives[0]) != len(want) {
		t.Fatalf("collectives %+v, want %+v", r.Collectives, want)
	}
	for i, e := range r.Collectives[0] {
		if e != want[i] {
			t.Errorf("collective %d: %+v, want %+v", i, e, want[i])
		}
	}
	if !strings.Contains(r.Cost, "Fcoll=0.5,Icoll=0.25,Wcoll=0.25,reduce=3,reduce_mb=0.5,step_end=1") {
		t.Errorf("cost string %q does not list the collectives", r.Cost)
	}
}

// The reductions overlap the compute that follows them: on 1F1B over two ranks, rank 1
// finishes its backward first and its all-reduce runs while rank 0 still computes. The
// step time is the sum of its parts under every schedule, and free collectives give back
// the plain schedule's figures.
func TestSimulateCollectivesOverlap(t *testing.T) {
	c := collCost(2)
	for i := range c.Stages {
		c.Stages[i].GradReduceMB, c.Stages[i].StepEnd = 0, 0
	}
	r := mustSimulate(t, mustGenerate(t, "1f1b", 2, 4, 0), c)
	ar := r.Collectives[1][0]
	var rank0End float64
	for _, e := range r.Events[0] {
		rank0End = max(rank0End, e.End)
	}
	if ar.Kind != GradReduce || ar.Start >= rank0End {
		t.Errorf("rank 1's all-reduce %+v does not overlap rank 0's compute (until %v)", ar, rank0End)
	}
	for _, name := range Names() {
		s := mustGenerate(t, name, 2, 4, 0)
		c := collCost(s.Stages)
		c.Comm = 0.3
		r := mustSimulate(t, s, c)
		if sum := r.IdealTime + r.BubbleTime + r.CollectiveTime + r.CommTime; math.Abs(sum-r.StepTime) > 1e-9 || r.CollectiveTime <= 0 {
			t.Errorf("%s: step %v, parts sum to %v (collectives %v)", name, r.StepTime, sum, r.CollectiveTime)
		}
		plain := mustSimulate(t, s, c.compute())
		if math.Abs(plain.StepTime-r.IdealTime-r.BubbleTime-(plain.CommTime)) > 1e-9 || plain.IdealTime != r.IdealTime || plain.Collectives != nil {
			t.Errorf("%s: without collectives step %v ideal %v; with them ideal %v bubble %v", name, plain.StepTime, plain.IdealTime, r.IdealTime, r.BubbleTime)
		}
	}
}

// A collective part larger than its whole is an error, not a negative compute time.
func TestCollectiveCostChecked(t *testing.T) {
	c := collCost(1)
	c.Stages[0].FColl = 3
	if _, err := Simulate(mustGenerate(t, "gpipe", 1, 2, 0), c); err == nil || !strings.Contains(err.Error(), "collective part of F (3) exceeds F (2)") {
		t.Errorf("err = %v", err)
	}
	c = collCost(1)
	c.Stages[0].GradReduce = math.NaN()
	if _, err := Simulate(mustGenerate(t, "gpipe", 1, 2, 0), c); err == nil || !strings.Contains(err.Error(), "gradient reduction of stage 0") {
		t.Errorf("err = %v", err)
	}
}

// The trace nests each action's collective time at its end ("tp collectives …" on the
// rank's thread), and puts the reductions and step-end collectives on a thread per rank of
// their own, with their durations.
func TestTraceCollectives(t *testing.T) {
	s := mustGenerate(t, "zb-h1", 2, 4, 0)
	c := collCost(2)
	c.Unit = Seconds
	for i := range c.Stages {
		sc := &c.Stages[i]
		for _, v := range []*float64{&sc.F, &sc.I, &sc.W, &sc.FColl, &sc.IColl, &sc.WColl, &sc.GradReduce, &sc.GradReduceMB, &sc.StepEnd} {
			*v *= 1e-6 // microseconds
		}
	}
	r := mustSimulate(t, s, c)
	events := traceEvents(t, r)
	type span struct{ ts, end float64 }
	actions := map[string]span{} // action → its span
	nested, outside := 0, map[string]float64{}
	for _, e := range events {
		if e.Ph == "X" && e.Cat != "collective" {
			actions[e.Args["action"].(string)] = span{e.Ts, e.Ts + e.Dur}
		}
	}
	for _, e := range events {
		if e.Ph != "X" || e.Cat != "collective" {
			continue
		}
		if e.Tid < r.Ranks {
			nested++
			a := e.Args["action"].(string)
			p := actions[a]
			want := map[byte]float64{'F': 0.5, 'I': 0.25, 'W': 0.25}[a[1]]
			if math.Abs(e.Dur-want) > 1e-9 || math.Abs(e.Ts+e.Dur-p.end) > 1e-9 || e.Ts < p.ts {
				t.Errorf("%s: collective span [%v, %v+%v] in the action [%v, %v], want %v µs at its end", e.Name, e.Ts, e.Ts, e.Dur, p.ts, p.end, want)
			}
			if e.Name != "tp collectives "+Seconds.Format(want*1e-6) {
				t.Errorf("span named %q", e.Name)
			}
			continue
		}
		outside[strings.Fields(e.Name)[1]] += e.Dur
		if e.Tid >= 2*r.Ranks {
			t.Errorf("%s on thread %d", e.Name, e.Tid)
		}
	}
	if nested != s.NumActions() {
		t.Errorf("%d nested collective spans for %d actions", nested, s.NumActions())
	}
	// Per rank: one all-reduce (3 µs), 4 reduce-scatters (0.5 µs), step end (1 µs).
	if math.Abs(outside["all-reduce"]-6) > 1e-9 || math.Abs(outside["reduce-scatter"]-4) > 1e-9 || math.Abs(outside["collectives"]-2) > 1e-9 {
		t.Errorf("collectives outside the actions: %v µs", outside)
	}
	if !slices.ContainsFunc(events, func(e simEvent) bool { return e.Ph == "M" && e.Args["name"] == "rank 1 collectives" }) {
		t.Errorf("no thread for rank 1's collectives")
	}
}

// The SVG draws a darker band at the end of every cell with collective time, as wide as
// that time, lane bars for the collectives outside the actions, and a legend line saying
// what they are.
func TestSVGCollectives(t *testing.T) {
	s := mustGenerate(t, "zb-h1", 2, 4, 0)
	r := mustSimulate(t, s, collCost(2))
	var buf bytes.Buffer
	if err := r.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	cells := regexp.MustCompile(`<rect class="cell \w+" x="[^"]*" y="[^"]*" width="([^"]*)"`).FindAllStringSubmatch(svg, -1)
	bands := regexp.MustCompile(`<rect class="coll" x="[^"]*" y="[^"]*" width="([^"]*)"[^>]*><title>[^<]*: tp collectives ([\d.]+)`).FindAllStringSubmatch(svg, -1)
	if len(bands) != len(cells) || len(bands) != s.NumActions() {
		t.Fatalf("%d bands for %d cells", len(bands), len(cells))
	}
	for i, b := range bands {
		bw, _ := strconv.ParseFloat(b[1], 64)
		cw, _ := strconv.ParseFloat(cells[i][1], 64)
		coll, _ := strconv.ParseFloat(b[2], 64)
		whole := map[float64]float64{0.5: 2, 0.25: 1}[coll]
		if whole == 0 || math.Abs(bw/cw-coll/whole) > 0.02 {
			t.Errorf("band %d: %v px of a %v px cell for %v of %v", i, bw, cw, coll, whole)
		}
	}
	lanes := regexp.MustCompile(`<rect class="lane (\w+)"`).FindAllStringSubmatch(svg, -1)
	if len(lanes) != 2*(1+4+1) {
		t.Errorf("%d lane bars, want 12", len(lanes))
	}
	for _, want := range []string{"darker end of a cell: its tensor-parallel collectives", "gradient all-reduces over dp and tp (overlap compute)",
		"dp reduce-scatter per micro-batch", "optimizer collectives (ZeRO)", " · collectives "} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// Without collectives nothing changes.
	buf.Reset()
	mustSimulate(t, s, UnitCost()).WriteSVG(&buf)
	if strings.Contains(buf.String(), `class="coll"`) || strings.Contains(buf.String(), "lane") || strings.Contains(buf.String(), "collectives") {
		t.Errorf("an SVG without collectives mentions them")
	}
}

// TestSVGFitsItsCaption: with collectives and unhidden transfers the caption is long; the
// picture widens so that it is not cut off at the right edge.
func TestSVGFitsItsCaption(t *testing.T) {
	r := &Result{Name: "1f1b", Ranks: 1, Unit: Seconds, StepTime: 1.31e-3, IdealTime: 21.4e-6, BubbleTime: 4.88e-6, BubbleRatio: 0.2277,
		CollectiveTime: 1.26e-3, CommTime: 20.3e-6, PeakActivations: []int{2}}
	var b strings.Builder
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	caption, _ := r.svgCaptions()
	m := regexp.MustCompile(`<svg [^>]*width="([0-9.]+)"`).FindStringSubmatch(b.String())
	if m == nil {
		t.Fatalf("no width:\n%s", b.String())
	}
	w, _ := strconv.ParseFloat(m[1], 64)
	if w < 7.5*float64(utf8.RuneCountInString(caption)) {
		t.Errorf("SVG %v px wide for a %d-character caption", w, utf8.RuneCountInString(caption))
	}
}
