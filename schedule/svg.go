package schedule

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Colours per action type, in the spirit of the papers' figures.
var svgColors = map[string]string{
	"F":   "#3f7fd0", // forward: blue
	"B":   "#ee8a2f", // full backward: orange
	"I":   "#1aa6b7", // input gradient: teal
	"W":   "#5aa64f", // weight gradient: green
	"F&B": "#8e5fc2", // overlapped forward and backward: purple
}

// Colours of the collectives outside the actions (Result.Collectives), drawn
// in a lane under each rank's row.
var svgCollColors = map[CollectiveKind]string{
	GradReduce:   "#c0392b", // gradient all-reduces: red
	GradReduceMB: "#e74c3c", // ZeRO-2 reduce-scatter per micro-batch: lighter red
	StepEnd:      "#5d6d7e", // optimizer collectives: slate
}

// collShade is how much darker than its cell the collective part of an action is.
const collShade = 0.45

var svgLegend = []struct{ key, label string }{
	{"F", "F forward"}, {"B", "B backward (I+W)"}, {"I", "I input grad"}, {"W", "W weight grad"}, {"F&B", "F&B overlapped"},
}

// WriteSVG draws the timeline as the schedule figures of the GPipe, Zero
// Bubble and DualPipe papers do: one row per rank, time to the right, one
// cell per computation coloured by type (F blue, B orange, I teal, W green,
// overlapped F&B purple, outlined) with its micro-batch number inside (F/B
// micro-batches for an overlap); a rank's second and later stages (virtual
// chunks) are drawn in a lighter shade. Idle time shows as the grey row
// background; communication actions are not drawn. Collectives: the time an
// action spends in them (Event.Collective, tensor parallelism) is a darker
// band at the end of its cell, where the trace puts it too; the collectives
// outside the actions (Result.Collectives: data-parallel gradient
// reductions, which overlap compute, and the optimizer's step-end ones) are
// bars in a thin lane under the rank's row. A second legend line says so when
// there are any. The time axis is labelled
// in the result's unit (µs, ms or s for costs in seconds). A legend, a caption
// with the step time, bubble and peak activations, and a footer naming where
// the costs came from follow.
//
// Each rank is a <g class="rank"> and each computation a <rect> whose class
// starts with "cell", so tools and tests can find them; a collective band is
// a <rect class="coll">, a lane bar a <rect class="lane KIND">.
func (r *Result) WriteSVG(w io.Writer) error {
	const (
		left   = 96.0 // rank labels
		top    = 44.0
		rowH   = 26.0
		rowGap = 6.0
		right  = 24.0
	)
	step := r.StepTime
	if step <= 0 {
		step = 1
	}
	inAction, lanes := false, false
	for _, evs := range r.Events {
		for _, e := range evs {
			inAction = inAction || e.Collective > 0
		}
	}
	for _, evs := range r.Collectives {
		lanes = lanes || len(evs) > 0
	}
	laneH, legend2 := 0.0, 0.0
	if lanes {
		laneH = 9
	}
	if inAction || lanes {
		legend2 = 20 // a second legend line for the collectives
	}
	plotW := math.Min(1600, math.Max(640, 26*step))
	px := plotW / step
	// Wide enough for the caption (13 px bold Helvetica: about 7.5 px a character), which
	// with collectives and unhidden transfers outgrows a short schedule's plot.
	caption, _ := r.svgCaptions()
	width := math.Max(left+plotW+right, left+7.5*float64(utf8.RuneCountInString(caption))+right)
	rowsH := float64(r.Ranks)*(rowH+laneH+rowGap) - rowGap
	axisY := top + rowsH + 8
	legendY := axisY + 34
	height := legendY + 78 + legend2

	chunk := r.chunkIndex()
	nchunk := max(1, maxChunk(chunk))
	present := map[string]bool{}
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="Helvetica, Arial, sans-serif">`+"\n",
		num(width), num(height), num(width), num(height))
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	title := r.Name
	if title == "" {
		title = "schedule"
	}
	fmt.Fprintf(b, `<text x="%s" y="24" font-size="16" font-weight="bold" fill="#222">%s</text>`+"\n", num(left),
		esc(fmt.Sprintf("%s — %d ranks, %d stages, %s (%s)", title, r.Ranks, r.Stages, r.unitsText(), r.Format)))

	for rank := 0; rank < r.Ranks; rank++ {
		y := top + float64(rank)*(rowH+laneH+rowGap)
		fmt.Fprintf(b, `<g class="rank" id="rank-%d">`+"\n", rank)
		fmt.Fprintf(b, `<text x="%s" y="%s" font-size="13" text-anchor="end" fill="#222">rank %d</text>`+"\n",
			num(left-10), num(y+rowH/2+4.5), rank)
		fmt.Fprintf(b, `<rect class="row" x="%s" y="%s" width="%s" height="%s" fill="#ececec"/>`+"\n",
			num(left), num(y), num(plotW), num(rowH))
		if rank < len(r.Events) {
			for _, e := range r.Events[rank] {
				a := e.Action
				if !a.Kind.IsCompute() {
					continue
				}
				key, label, ch := a.Kind.String(), unitLabel(a.Microbatch, r.Slices), 0
				if a.Kind == OverlapFB {
					key = "F&B"
					label = unitLabel(a.Sub[0].Microbatch, r.Slices) + "/" + unitLabel(a.Sub[1].Microbatch, r.Slices)
				} else if a.Stage >= 0 && a.Stage < len(chunk) {
					ch = chunk[a.Stage]
				}
				present[key] = true
				fill := svgColors[key]
				textFill := "#ffffff"
				if key == "B" {
					textFill = "#1f1f1f"
				}
				if ch > 0 {
					fill = lighten(fill, 0.5*float64(ch)/float64(nchunk))
					textFill = "#1f1f1f"
				}
				x, cw := left+e.Start*px, (e.End-e.Start)*px
				stroke, sw := "#ffffff", math.Min(1, cw/6) // thin cells get thin separators
				if a.Kind == OverlapFB {
					stroke, sw = "#111111", math.Min(1.5, cw/4)
				}
				fmt.Fprintf(b, `<rect class="cell %s" x="%s" y="%s" width="%s" height="%s" rx="2" fill="%s" stroke="%s" stroke-width="%s"><title>%s [%s, %s]</title></rect>`+"\n",
					cellClass(key), num(x), num(y), num(cw), num(rowH), fill, stroke, num(sw), esc(r.actionName(a)), esc(r.Unit.Format(e.Start)), esc(r.Unit.Format(e.End)))
				if e.Collective > 0 {
					// Inside the cell's white separator, so neighbouring cells stay apart.
					bw := math.Min(cw, e.Collective*px)
					fmt.Fprintf(b, `<rect class="coll" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s: tp collectives %s</title></rect>`+"\n",
						num(x+cw-bw), num(y+sw/2), num(math.Max(bw-sw/2, 0)), num(rowH-sw), darken(fill, collShade), esc(r.actionName(a)), esc(r.Unit.Format(e.Collective)))
					if bw > cw/2 {
						textFill = "#ffffff" // the label sits on the dark band
					}
				}
				fs := math.Min(12, math.Min(rowH*0.5, cw/(0.62*float64(len(label))+0.4)))
				if fs >= 6 {
					fmt.Fprintf(b, `<text x="%s" y="%s" font-size="%s" text-anchor="middle" fill="%s">%s</text>`+"\n",
						num(x+cw/2), num(y+rowH/2+fs*0.36), num(fs), textFill, esc(label))
				}
			}
		}
		if rank < len(r.Collectives) {
			for _, e := range r.Collectives[rank] {
				fmt.Fprintf(b, `<rect class="lane %s" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s [%s, %s]</title></rect>`+"\n",
					e.Kind, num(left+e.Start*px), num(y+rowH+2), num(math.Max((e.End-e.Start)*px, 0.5)), num(laneH-3), svgCollColors[e.Kind],
					esc(e.Name()), esc(r.Unit.Format(e.Start)), esc(r.Unit.Format(e.End)))
			}
		}
		b.WriteString("</g>\n")
	}

	// time axis, in a readable prefix of the result's unit: µs ticks for a
	// cost model's microsecond step, plain numbers for abstract units
	scale, unit := r.Unit.display(step)
	fmt.Fprintf(b, `<g class="axis" font-size="11" fill="#444"><line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#666"/>`+"\n",
		num(left), num(axisY), num(left+plotW), num(axisY))
	tick := niceTick(step / scale / 10)
	for k := 0; float64(k)*tick*scale <= step*(1+1e-9); k++ {
		t := float64(k) * tick
		x := left + t*scale*px
		label := strconv.FormatFloat(RoundSignificant(t, 6), 'f', -1, 64)
		if r.Unit == Seconds {
			label += " " + unit
		}
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#666"/><text class="tick" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n",
			num(x), num(axisY), num(x), num(axisY+4), num(x), num(axisY+16), esc(label))
	}
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end">time (%s)</text></g>`+"\n", num(left-24), num(axisY+16), esc(unit)) // clear of the centred 0 tick

	// legend
	b.WriteString(`<g class="legend" font-size="12" fill="#222">` + "\n")
	lx := left
	for _, l := range svgLegend {
		if !present[l.key] {
			continue
		}
		stroke := "none"
		if l.key == "F&B" {
			stroke = "#111111"
		}
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="14" height="14" rx="2" fill="%s" stroke="%s"/><text x="%s" y="%s">%s</text>`+"\n",
			num(lx), num(legendY-11), svgColors[l.key], stroke, num(lx+19), num(legendY), esc(l.label))
		lx += 19 + 7.2*float64(len(l.label)) + 18
	}
	if maxChunk(chunk) > 0 {
		fmt.Fprintf(b, `<text x="%s" y="%s" fill="#555">lighter: a rank's later stages</text>`+"\n", num(lx), num(legendY))
	}
	// The collectives' line: what the darker bands and the lane bars are.
	lx, ly := left, legendY+legend2
	item := func(fill, label string) {
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="14" height="14" rx="2" fill="%s"/><text x="%s" y="%s">%s</text>`+"\n",
			num(lx), num(ly-11), fill, num(lx+19), num(ly), esc(label))
		lx += 19 + 6.6*float64(len(label)) + 18
	}
	if inAction {
		item(darken(svgColors["F"], collShade), "darker end of a cell: its tensor-parallel collectives")
	}
	if lanes {
		seen := map[CollectiveKind]bool{}
		for _, evs := range r.Collectives {
			for _, e := range evs {
				seen[e.Kind] = true
			}
		}
		for _, k := range []CollectiveKind{GradReduce, GradReduceMB, StepEnd} {
			if seen[k] {
				item(svgCollColors[k], map[CollectiveKind]string{GradReduce: "gradient all-reduces over dp and tp (overlap compute)",
					GradReduceMB: "dp reduce-scatter per micro-batch", StepEnd: "optimizer collectives (ZeRO)"}[k])
			}
		}
	}
	b.WriteString("</g>\n")
	legendY += legend2

	// caption
	caption, caption2 := r.svgCaptions()
	footer := "costs: " + r.CostSource
	fmt.Fprintf(b, `<text class="caption" x="%s" y="%s" font-size="13" font-weight="bold" fill="#222">%s</text>`+"\n", num(left), num(legendY+28), esc(caption))
	fmt.Fprintf(b, `<text class="caption" x="%s" y="%s" font-size="12" fill="#444">%s</text>`+"\n", num(left), num(legendY+46), esc(caption2))
	fmt.Fprintf(b, `<text class="footer" x="%s" y="%s" font-size="12" fill="#444">%s</text>`+"\n", num(left), num(legendY+64), esc(footer))
	b.WriteString("</svg>\n")
	return b.Flush()
}

// chunkIndex maps each stage to its position among its rank's stages.
func (r *Result) chunkIndex() []int {
	out := make([]int, r.Stages)
	seen := map[int]int{}
	for st := 0; st < r.Stages && st < len(r.Placement); st++ {
		rank := r.Placement[st]
		out[st] = seen[rank]
		seen[rank]++
	}
	return out
}

func maxChunk(c []int) int {
	m := 0
	for _, v := range c {
		m = max(m, v)
	}
	return m
}

func cellClass(key string) string {
	if key == "F&B" {
		return "FB"
	}
	return key
}

// lighten mixes a #rrggbb colour with white.
func lighten(hex string, f float64) string {
	v, err := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	if err != nil {
		return hex
	}
	mix := func(c uint64) uint64 { return uint64(math.Round(float64(c) + (255-float64(c))*f)) }
	return fmt.Sprintf("#%02x%02x%02x", mix(v>>16&0xff), mix(v>>8&0xff), mix(v&0xff))
}

// darken mixes a #rrggbb colour with black.
func darken(hex string, f float64) string {
	v, err := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	if err != nil {
		return hex
	}
	mix := func(c uint64) uint64 { return uint64(math.Round(float64(c) * (1 - f))) }
	return fmt.Sprintf("#%02x%02x%02x", mix(v>>16&0xff), mix(v>>8&0xff), mix(v&0xff))
}

// niceTick rounds x up to 1, 2 or 5 times a power of ten.
func niceTick(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, "/")
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// svgCaptions are the SVG's caption lines: the step's parts and the peak activations.
func (r *Result) svgCaptions() (string, string) {
	f := r.Unit.Format
	caption := fmt.Sprintf("step time %s · ideal %s · bubble %s = %.2f%% of ideal", f(r.StepTime), f(r.IdealTime), f(r.BubbleTime), 100*r.BubbleRatio)
	if r.CollectiveTime > 0 {
		caption += fmt.Sprintf(" · collectives %s", f(r.CollectiveTime))
	}
	if r.CommTime > 0 {
		caption += fmt.Sprintf(" · transfers not hidden %s", f(r.CommTime))
	}
	return caption, fmt.Sprintf("peak activations per rank %s", joinInts(r.PeakActivations))
}
