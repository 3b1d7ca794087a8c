package schedule

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Cost gives the simulator its times, all in one unit: abstract units (the
// papers' F = I = W = 1; the Chrome trace shows one unit as one millisecond)
// or seconds (a cost model's estimates), as Unit says.
//
// F, I and W are the times of one micro-batch's forward, input-gradient and
// weight-gradient pass through one stage; B, the full backward, defaults to
// I+W when zero. FB is the time of an OVERLAP_F_B action; when zero it is the
// sum of the two overlapped computations (F + B, run back to back, no gain).
// DualPipe's F&B is this FB.
//
// Stages, when set, gives per-stage values instead (len must equal the
// schedule's stage count): a model's cost model drives the simulator through
// it. FB stays uniform.
//
// Comm is the latency of one cross-rank transfer (SEND to the peer's mailbox,
// or the implicit transfer of a compute_only schedule); with Bandwidth > 0 a
// transfer also takes CommBytes/Bandwidth. Transfers between stages on the
// same rank are free, and transfers do not contend for links (each takes
// its own time, in parallel with compute). ActBytes is the size of one
// stashed activation (one micro-batch, one stage); when set the result
// reports peak bytes too.
//
// WStash is the part of a micro-batch's stashed activation that stays held between its I
// and its W (what the weight gradient still reads: the Zero Bubble paper's transformer
// layer keeps 32h of its 34h+5as per token, its W needing the matmul inputs but not the
// attention's); 0 means 1, the whole activation until W ends. zb-auto's memory limit
// (--max-inflight) counts micro-batch activations so weighted, as the paper's ZB-1p and
// ZB-2p count theirs.
//
// Source says where the costs came from, for reports (the SVG footer, JSON);
// empty means they are the ones String prints.
type Cost struct {
	F, I, W, B float64
	FB         float64
	Comm       float64
	Bandwidth  float64
	CommBytes  float64
	ActBytes   float64
	WStash     float64
	Stages     []StageCost
	Unit       TimeUnit
	Source     string
}

// TimeUnit is the unit of a Cost's times, carried into the Result so that
// every report scales and labels them right.
type TimeUnit int

const (
	// Units are abstract: the unit costs of the papers' bubble formulas, or
	// whatever --cost gives.
	Units TimeUnit = iota
	// Seconds are a cost model's estimates.
	Seconds
)

func (u TimeUnit) String() string {
	if u == Seconds {
		return "s"
	}
	return "units"
}

// MarshalJSON writes the unit as "s" or "units".
func (u TimeUnit) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(u.String())), nil }

// UnmarshalJSON reads what MarshalJSON writes.
func (u *TimeUnit) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"s"`:
		*u = Seconds
	case `"units"`:
		*u = Units
	default:
		return fmt.Errorf("time unit %s: want \"s\" or \"units\"", b)
	}
	return nil
}

// Format writes a time in the unit: seconds with three significant digits and
// a readable prefix ("164 µs", "2.5 ms"), units with up to four ("10.5").
func (u TimeUnit) Format(v float64) string {
	if u != Seconds {
		return strconv.FormatFloat(RoundSignificant(v, 4), 'f', -1, 64)
	}
	scale, name := u.display(v)
	return strconv.FormatFloat(RoundSignificant(v/scale, 3), 'f', -1, 64) + " " + name
}

// display picks the prefix to show a time of magnitude v in: seconds per
// displayed unit and its name (for Units, 1 and "units").
func (u TimeUnit) display(v float64) (scale float64, name string) {
	if u != Seconds {
		return 1, "units"
	}
	v = math.Abs(v)
	switch {
	case v == 0 || v >= 1:
		return 1, "s"
	case RoundSignificant(v, 3) >= 1e-3:
		return 1e-3, "ms"
	case RoundSignificant(v, 3) >= 1e-6:
		return 1e-6, "µs"
	}
	return 1e-9, "ns"
}

// RoundSignificant rounds v to n significant decimal digits.
func RoundSignificant(v float64, n int) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', n, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// StageCost is the cost of one stage. B zero means I+W. CommBytes is the size
// of the stage's output activation (sent forward to the next stage; its
// gradient, of the same size, comes back).
//
// The other fields are collectives, as a compiled plan's cost model gives them
// (they are zero under --cost):
//
//   - FColl, IColl and WColl are the parts of F, I and W spent in collectives
//     inside the computation: tensor parallelism's all-reduces, all-gathers and
//     reduce-scatters sit between a stage's matmuls and the stage waits for
//     them, so they are part of the action's time. They only tell reports
//     where that time goes (the trace and SVG draw them at the end of the
//     action, see Event.Collective) and let Simulate count the ideal time as
//     compute alone.
//   - GradReduce is the data-parallel all-reduce of the stage's gradients,
//     issued when the stage's last W (or B) of the step ends; GradReduceMB a
//     reduce-scatter issued when each W (or B) ends (ZeRO-2 reduces every
//     micro-batch's gradient). Like a transfer they run while the rank goes
//     on computing; unlike transfers, a rank's reductions queue behind each
//     other, in issue order, because they share its data-parallel group and
//     link (NCCL runs one communicator's collectives in order on one stream).
//   - StepEnd is collectives that block the rank once its last action and its
//     reductions are done: ZeRO's optimizer, which reduce-scatters gradients
//     and all-gathers the updated parameters.
type StageCost struct {
	F, I, W, B float64
	CommBytes  float64
	ActBytes   float64

	FColl, IColl, WColl float64
	// FAllToAll and IAllToAll are the parts of FColl and IColl spent in expert
	// parallelism's all-to-alls (the rest is tensor parallelism's): the trace names them.
	FAllToAll, IAllToAll float64
	GradReduce           float64
	GradReduceMB         float64
	StepEnd              float64

	// Slices are the per-token-slice costs of a sliced schedule (F, I, W, B, CommBytes,
	// ActBytes and the collective parts of F, I, W per slice); without them each slice of
	// M costs 1/M of the stage's.
	Slices []StageCost
}

// collectiveNames names StageCost's collective fields in Cost.String, in the
// order collectiveParts lists them.
var collectiveNames = [6]string{"Fcoll", "Icoll", "Wcoll", "reduce", "reduce_mb", "step_end"}

func (sc StageCost) collectiveParts() [6]float64 {
	return [6]float64{sc.FColl, sc.IColl, sc.WColl, sc.GradReduce, sc.GradReduceMB, sc.StepEnd}
}

// collectives reports whether sc has any collective time.
func (sc StageCost) collectives() bool { return sc.collectiveParts() != [6]float64{} }

// UnitCost is F = I = W = 1, B = 2, FB = F+B = 3, no communication cost:
// the setting of the papers' bubble formulas.
func UnitCost() Cost { return Cost{F: 1, I: 1, W: 1} }

var costKeys = []string{"F", "I", "W", "B", "FB", "comm", "bw", "bytes", "act", "wstash"}

// ParseCost parses a cost specification such as "F=1,I=1,W=1,comm=0".
// Keys: F, I, W, B (full backward, default I+W), FB (or F&B: overlapped
// forward+backward, default F+B), comm (latency per transfer), bw (bytes per
// time unit, 0 = unlimited), bytes (bytes per transfer), act (bytes per
// stashed activation), wstash (the part of it held between I and W, in (0, 1]; see
// Cost.WStash). Keys are case-insensitive except F, I, W, B, FB.
// Unset F, I, W default to 1; everything else to 0. Values must be finite
// and non-negative; an empty string gives UnitCost.
func ParseCost(spec string) (Cost, error) {
	c := UnitCost()
	seen := map[string]bool{}
	for _, field := range strings.Split(spec, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			return Cost{}, fmt.Errorf("cost %q: want key=value, e.g. F=1", field)
		}
		key = strings.TrimSpace(key)
		canon := canonicalCostKey(key)
		if canon == "" {
			return Cost{}, fmt.Errorf("cost %q: unknown key %q (valid: %s)", field, key, strings.Join(costKeys, ", "))
		}
		if seen[canon] {
			return Cost{}, fmt.Errorf("cost %q: %s given twice", field, canon)
		}
		seen[canon] = true
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if errors.Is(err, strconv.ErrRange) {
			v, err = math.Inf(1), nil
		}
		if err != nil {
			return Cost{}, fmt.Errorf("cost %q: %q is not a number", field, strings.TrimSpace(val))
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return Cost{}, fmt.Errorf("cost %q: %s must be finite and non-negative", field, canon)
		}
		switch canon {
		case "F":
			c.F = v
		case "I":
			c.I = v
		case "W":
			c.W = v
		case "B":
			c.B = v
		case "FB":
			c.FB = v
		case "comm":
			c.Comm = v
		case "bw":
			c.Bandwidth = v
		case "bytes":
			c.CommBytes = v
		case "act":
			c.ActBytes = v
		case "wstash":
			if v <= 0 || v > 1 {
				return Cost{}, fmt.Errorf("cost %q: wstash is a part of an activation, in (0, 1]", field)
			}
			c.WStash = v
		}
	}
	return c, nil
}

func canonicalCostKey(k string) string {
	switch k {
	case "F", "I", "W", "B", "FB":
		return k
	case "F&B", "fb":
		return "FB"
	}
	switch strings.ToLower(k) {
	case "comm", "latency":
		return "comm"
	case "bw", "bandwidth":
		return "bw"
	case "bytes", "comm_bytes":
		return "bytes"
	case "act", "act_bytes", "activation_bytes":
		return "act"
	case "wstash":
		return "wstash"
	}
	return ""
}

// String formats c in ParseCost's syntax, with the unit when it is not
// abstract. Per-stage costs are listed stage by stage (F=1/2 for two stages),
// which ParseCost does not read back.
func (c Cost) String() string {
	kv := []string{
		"F=" + fmtNum(c.F), "I=" + fmtNum(c.I), "W=" + fmtNum(c.W),
	}
	if len(c.Stages) > 0 {
		var f, i, w []string
		for _, sc := range c.Stages {
			f, i, w = append(f, fmtNum(sc.F)), append(i, fmtNum(sc.I)), append(w, fmtNum(sc.W))
		}
		kv = []string{"F=" + strings.Join(f, "/"), "I=" + strings.Join(i, "/"), "W=" + strings.Join(w, "/")}
		// Collectives, by the names collectiveNames gives them, when any stage has one.
		for k, name := range collectiveNames {
			var v []string
			nonzero := false
			for _, sc := range c.Stages {
				x := sc.collectiveParts()[k]
				v = append(v, fmtNum(x))
				nonzero = nonzero || x > 0
			}
			if nonzero {
				kv = append(kv, name+"="+strings.Join(v, "/"))
			}
		}
	}
	if c.B > 0 {
		kv = append(kv, "B="+fmtNum(c.B))
	}
	if c.FB > 0 {
		kv = append(kv, "FB="+fmtNum(c.FB))
	}
	kv = append(kv, "comm="+fmtNum(c.Comm))
	if c.Bandwidth > 0 {
		kv = append(kv, "bw="+fmtNum(c.Bandwidth))
	}
	if c.CommBytes > 0 {
		kv = append(kv, "bytes="+fmtNum(c.CommBytes))
	}
	if c.ActBytes > 0 {
		kv = append(kv, "act="+fmtNum(c.ActBytes))
	}
	if c.WStash > 0 && c.WStash != 1 {
		kv = append(kv, "wstash="+fmtNum(c.WStash))
	}
	if c.Unit != Units {
		return strings.Join(kv, ",") + " (" + c.Unit.String() + ")"
	}
	return strings.Join(kv, ",")
}

// Describe says where the costs came from: Source when set, else the costs
// themselves and their unit, e.g. "F=1,I=1,W=1,comm=0 (units)".
func (c Cost) Describe() string {
	if c.Source != "" {
		return c.Source
	}
	if c.Unit == Units {
		return c.String() + " (units)"
	}
	return c.String()
}

// free is c with communication costing nothing: what the schedule alone
// makes the ranks wait.
func (c Cost) free() Cost {
	c.Comm, c.Bandwidth = 0, 0
	return c
}

// communicates reports whether any transfer takes time under c.
func (c Cost) communicates() bool { return c.Comm > 0 || c.Bandwidth > 0 }

// hasCollectives reports whether any stage has collective time.
func (c Cost) hasCollectives() bool {
	for _, sc := range c.Stages {
		if sc.collectives() {
			return true
		}
	}
	return false
}

// compute is c with collectives costing nothing: F, I, W and B without their
// collective parts, no reductions, nothing at the step's end. What remains is
// the compute the ideal time counts.
func (c Cost) compute() Cost {
	if !c.hasCollectives() {
		return c
	}
	st := make([]StageCost, len(c.Stages))
	for s, sc := range c.Stages {
		sc.F = max(0, sc.F-sc.FColl)
		sc.I = max(0, sc.I-sc.IColl)
		sc.W = max(0, sc.W-sc.WColl)
		if sc.B > 0 {
			sc.B = max(0, sc.B-sc.IColl-sc.WColl)
		}
		sc.FColl, sc.IColl, sc.WColl, sc.GradReduce, sc.GradReduceMB, sc.StepEnd = 0, 0, 0, 0, 0, 0
		sc.FAllToAll, sc.IAllToAll = 0, 0
		st[s] = sc
	}
	c.Stages = st
	return c
}

// stash is the part of an activation a micro-batch holds between its I and its W.
func (c *Cost) stash() float64 {
	if c.WStash > 0 {
		return c.WStash
	}
	return 1
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// check validates c for a schedule of the given number of stages.
func (c *Cost) check(stages int) error {
	bad := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("cost %s = %v: must be finite and non-negative", name, v)
		}
		return nil
	}
	vals := map[string]float64{"F": c.F, "I": c.I, "W": c.W, "B": c.B, "FB": c.FB, "comm": c.Comm,
		"bw": c.Bandwidth, "bytes": c.CommBytes, "act": c.ActBytes, "wstash": c.WStash}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := bad(k, vals[k]); err != nil {
			return err
		}
	}
	if c.WStash > 1 {
		return fmt.Errorf("cost wstash = %v: a part of an activation, at most 1", c.WStash)
	}
	if len(c.Stages) > 0 && len(c.Stages) != stages {
		return fmt.Errorf("cost has %d per-stage entries but the schedule has %d stages", len(c.Stages), stages)
	}
	for s, sc := range c.Stages {
		for _, f := range []struct {
			n string
			v float64
		}{{"F", sc.F}, {"I", sc.I}, {"W", sc.W}, {"B", sc.B}, {"bytes", sc.CommBytes}, {"act", sc.ActBytes},
			{"collective part of F", sc.FColl}, {"collective part of I", sc.IColl}, {"collective part of W", sc.WColl},
			{"gradient reduction", sc.GradReduce}, {"per-micro-batch gradient reduction", sc.GradReduceMB}, {"step-end collectives", sc.StepEnd}} {
			if err := bad(fmt.Sprintf("%s of stage %d", f.n, s), f.v); err != nil {
				return err
			}
		}
		// A part cannot exceed its whole (a relative slack for sums of the same op
		// costs taken in another order).
		for _, f := range []struct {
			n           string
			part, whole float64
		}{{"F", sc.FColl, sc.F}, {"I", sc.IColl, sc.I}, {"W", sc.WColl, sc.W}} {
			if f.part > f.whole*(1+1e-9) {
				return fmt.Errorf("cost of stage %d: collective part of %s (%v) exceeds %s (%v)", s, f.n, f.part, f.n, f.whole)
			}
		}
	}
	return nil
}

// costModel answers the engine's questions; the zero value costs nothing.
type costModel struct {
	c      *Cost
	slices int // token slices per micro-batch of the schedule (0, 1: none)
}

func (m *costModel) stage(s int) StageCost {
	c := m.c
	if s < len(c.Stages) {
		return c.Stages[s]
	}
	return StageCost{F: c.F, I: c.I, W: c.W, B: c.B, CommBytes: c.CommBytes, ActBytes: c.ActBytes}
}

// unit is the cost of stage s for unit mb of the schedule: one token slice's when the
// schedule is sliced.
func (m *costModel) unit(s, mb int) StageCost {
	sc := m.stage(s)
	if m.slices <= 1 {
		return sc
	}
	j := mb % m.slices
	if len(sc.Slices) == m.slices {
		return sc.Slices[j]
	}
	f := 1 / float64(m.slices)
	return StageCost{F: sc.F * f, I: sc.I * f, W: sc.W * f, B: sc.B * f, CommBytes: sc.CommBytes * f, ActBytes: sc.ActBytes * f,
		FColl: sc.FColl * f, IColl: sc.IColl * f, WColl: sc.WColl * f, FAllToAll: sc.FAllToAll * f, IAllToAll: sc.IAllToAll * f}
}

// allToAll is the part of collective(a) spent in expert parallelism's all-to-alls.
func (m *costModel) allToAll(a Action) float64 {
	if m.c == nil {
		return 0
	}
	sc := m.unit(a.Stage, a.Microbatch)
	switch a.Kind {
	case Forward:
		return min(sc.FAllToAll, m.collective(a))
	case BackwardInput, FullBackward:
		return min(sc.IAllToAll, m.collective(a))
	}
	return 0
}

func (m *costModel) compute(a Action) float64 {
	if m.c == nil {
		return 0
	}
	sc := m.unit(a.Stage, a.Microbatch)
	switch a.Kind {
	case Forward:
		return sc.F
	case BackwardInput:
		return sc.I
	case BackwardWeight:
		return sc.W
	case FullBackward:
		if sc.B > 0 {
			return sc.B
		}
		return sc.I + sc.W
	}
	return 0
}

// collective is the part of compute(a) spent in collectives.
func (m *costModel) collective(a Action) float64 {
	if m.c == nil {
		return 0
	}
	sc := m.unit(a.Stage, a.Microbatch)
	var t float64
	switch a.Kind {
	case Forward:
		t = sc.FColl
	case BackwardInput:
		t = sc.IColl
	case BackwardWeight:
		t = sc.WColl
	case FullBackward:
		t = sc.IColl + sc.WColl
	}
	return min(t, m.compute(a))
}

func (m *costModel) overlap(a, b Action) float64 {
	if m.c == nil {
		return 0
	}
	if m.c.FB > 0 {
		return m.c.FB
	}
	return m.compute(a) + m.compute(b)
}

// transfer is the time to move the activation (or its gradient) across the
// boundary between stage b and b+1.
func (m *costModel) transfer(b, mb int) float64 {
	if m.c == nil {
		return 0
	}
	t := m.c.Comm
	if m.c.Bandwidth > 0 {
		t += m.unit(b, mb).CommBytes / m.c.Bandwidth
	}
	return t
}

func (m *costModel) actBytes(s, mb int) float64 {
	if m.c == nil {
		return 0
	}
	return m.unit(s, mb).ActBytes
}
