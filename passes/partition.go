package passes

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
)

// Partition assigns every op of @forward a pipeline stage.
var Partition = &Pass{
	Name: "partition",
	Doc: "Assign every op of @forward a pipeline stage in [0, pp·virtual). The model is first cut into " +
		"units: its layers when parameters are namespaced by layer (`layers.3.…` → E for what comes " +
		"before the first layer, t0…tN−1, L for what follows the last), else its stage markers, else " +
		"the points where a single activation crosses. mode=markers uses the model's stage markers " +
		"(grouping neighbours when there are more markers than stages); mode=layout places units as a " +
		"Megatron-style layout string says (`E,t*4|t*4|t*4|t*4,L`, stages separated by `|`, which " +
		"must cover the model exactly); mode=auto splits by the cost model's per-unit time (forward, " +
		"input and weight gradients) to minimise the pipeline time T = Σtᵢ + (M−1)·max tⱼ under a " +
		"per-device memory limit (mem, bytes); among splits within 1% of the fastest it takes the one " +
		"with the least memory on its fullest stage, then the smallest bottleneck, then the cheapest " +
		"transfers at the cuts. With one micro-batch T is the same for every split, so memory decides, " +
		"and the attribute's note says so. The default mode is markers when the model has any, " +
		"else auto. Ops that depend on no model input (constants, masks, transposed weights) go to the " +
		"stage of their first user. The chosen layout and per-stage costs (seconds on the device profile " +
		"named) are recorded in the module attribute `partition`.",
	Options: []Option{
		{Name: "pp", Default: "1", Doc: "pipeline ranks"},
		{Name: "virtual", Default: "1", Doc: "stages per rank (interleaved and V-shaped schedules)"},
		{Name: "mode", Default: "", Doc: "markers, layout or auto (default: markers when the model has any, else auto)"},
		{Name: "layout", Default: "", Doc: "the layout string for mode=layout"},
		{Name: "mem", Default: "0", Doc: "bytes of memory per device for mode=auto (0: unlimited)"},
	},
	Run: runPartition,
}

// unit is a contiguous piece of the model that a stage holds whole.
type unit struct {
	label   string // E, t3, L
	kind    byte   // 'E', 't', 'L'
	f, i, w float64
	// Of f, i and w, the seconds of collectives (tensor parallelism), which reports show
	// apart from compute.
	fc, ic, wc float64
	fa, ia     float64 // of fc and ic, expert parallelism's all-to-alls
	params     int64   // parameter bytes
	act        int64   // activation bytes per micro-batch
	cut        float64 // bytes crossing from this unit to later ones
	cutTime    float64 // seconds to send them and their gradients back, on the module's device
	flops      float64
}

func runPartition(m *ir.Module, opts Options) error {
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return fmt.Errorf("module has no @%s", ir.ForwardFunc)
	}
	if err := partition(m, f, opts); err != nil {
		// Point at the function, so the message carries the model's location.
		return ir.ErrorAt(m.Source, f.Loc, "%v", err)
	}
	return nil
}

func partition(m *ir.Module, f *ir.Func, opts Options) error {
	pp, err := opts.Int("pp")
	if err != nil {
		return err
	}
	virtual, err := opts.Int("virtual")
	if err != nil {
		return err
	}
	var memLimit int64
	if _, err := fmt.Sscan(opts["mem"], &memLimit); err != nil || memLimit < 0 {
		return fmt.Errorf("option mem=%q is not a byte count", opts["mem"])
	}
	if pp < 1 || virtual < 1 {
		return fmt.Errorf("pp and virtual must be at least 1 (got pp=%d, virtual=%d)", pp, virtual)
	}
	stages := pp * virtual
	mb := m.Attrs.Int("microbatches", 1)
	dev, err := ModuleDevice(m)
	if err != nil {
		return err
	}
	a := analyse(m, f, dev)
	mode := opts["mode"]
	if mode == "" {
		mode = "auto"
		if a.markers > 0 {
			mode = "markers"
		}
	}
	var assign []int // unit → stage
	var units []unit
	var unitOf map[*ir.Op]int
	switch mode {
	case "markers":
		if a.markers == 0 {
			return fmt.Errorf("mode=markers: the model has no stage markers (use mode=auto or mode=layout)")
		}
		units, unitOf = a.markerUnits()
		a.labelMarkers(units, unitOf)
		if len(units) < stages {
			return fmt.Errorf("the model marks %d stages; pp=%d × virtual=%d needs %d", len(units), pp, virtual, stages)
		}
		if assign, err = balance(units, stages, 0, pp, mb, virtual); err != nil {
			return err
		}
	case "layout":
		units, unitOf = a.layerUnits()
		if assign, err = parseLayout(opts["layout"], units, stages); err != nil {
			return err
		}
	case "auto":
		units, unitOf = a.layerUnits()
		if len(units) < stages {
			return fmt.Errorf("pp=%d × virtual=%d = %d stages, but the model has only %d partitionable layers (%s)",
				pp, virtual, stages, len(units), unitRange(units))
		}
		if assign, err = balance(units, stages, memLimit, pp, mb, virtual); err != nil {
			return err
		}
	default:
		return fmt.Errorf("mode must be markers, layout or auto, got %q", mode)
	}
	for _, op := range f.Ops {
		op.Stage = assign[unitOf[op]]
	}
	note := ""
	if mode != "layout" && mb == 1 && stages > 1 && len(units) > stages {
		note = flatTimeNote
	}
	m.Attrs = m.Attrs.Set("partition", describePartition(dev.Name, mode, note, units, assign, stages, mb, a.comm))
	return nil
}

// analysis holds what partitioning needs to know about @forward.
type analysis struct {
	dev     DeviceProfile
	f       *ir.Func
	data    map[*ir.Value]bool // depends on a model input
	isParam map[*ir.Value]bool
	costs   map[*ir.Op]OpCost
	markers int  // number of distinct marker stages (0: none)
	comm    bool // some op is a collective: the stages record their collective time
}

func analyse(m *ir.Module, f *ir.Func, dev DeviceProfile) *analysis {
	a := &analysis{dev: dev, f: f, data: map[*ir.Value]bool{}, isParam: map[*ir.Value]bool{}, costs: map[*ir.Op]OpCost{}}
	for i, arg := range f.Args {
		a.data[arg] = f.ArgAttrs[i].Has(ir.AttrInput)
		a.isParam[arg] = f.ArgAttrs[i].Has(ir.AttrParam)
	}
	// weight: a parameter, or computed from parameters alone (a transposed or cast weight),
	// whose use gives an op a weight gradient.
	weight := map[*ir.Value]bool{}
	for arg, p := range a.isParam {
		weight[arg] = p
	}
	maxMarker := -1
	for _, op := range f.Ops {
		d, w := false, false
		for _, x := range op.Operands {
			d = d || a.data[x]
			w = w || weight[x]
		}
		for _, r := range op.Results {
			a.data[r] = d
			weight[r] = w && !d
		}
		a.costs[op] = dev.CostOf(op, func(v *ir.Value) bool { return weight[v] }, func(axis string) int { return meshSize(m, axis) })
		a.comm = a.comm || op.Def.Has(ir.Collective)
		maxMarker = max(maxMarker, op.Stage)
	}
	a.markers = maxMarker + 1
	return a
}

var layerRE = regexp.MustCompile(`(?:^|[./_])(?:layers|layer|h|blocks|block)[./_](\d+)(?:[./_]|$)`)

// layerOfParam extracts the layer index of a namespaced parameter name, or −1.
func layerOfParam(name string) int {
	m := layerRE.FindStringSubmatch(name)
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return -1
	}
	return n
}

// layerUnits cuts the model into E, t0…tN−1, L by parameter namespaces, or, when parameters
// carry no layer index, at the points where a single activation crosses.
func (a *analysis) layerUnits() ([]unit, map[*ir.Op]int) {
	f := a.f
	// For values computed from parameters alone: the highest layer index of the parameters
	// they derive from (−1: none) and whether a parameter without a layer index is among them.
	type origin struct {
		layer int
		other bool
	}
	org := map[*ir.Value]origin{}
	maxLayer := -1
	for i, arg := range f.Args {
		org[arg] = origin{layer: -1}
		if f.ArgAttrs[i].Has(ir.AttrParam) {
			l := layerOfParam(arg.Name)
			org[arg] = origin{layer: l, other: l < 0}
			maxLayer = max(maxLayer, l)
		}
	}
	if maxLayer < 0 {
		return a.cutUnits()
	}
	// Unit codes: E = −1, layer k = k, L = maxLayer+1. An op that reads model data belongs to
	// the latest layer among its inputs and its parameters; one that also reads a parameter
	// outside the layers after the last layer has run belongs to L.
	code := map[*ir.Value]int{}
	opCode := map[*ir.Op]int{}
	lCode := maxLayer + 1
	var floating []*ir.Op
	inputOnly := map[*ir.Value]bool{}
	for _, op := range f.Ops {
		r0 := resultOrNil(op)
		if r := r0; r != nil && !a.data[r] {
			o := origin{layer: -1}
			for _, x := range op.Operands {
				o.layer = max(o.layer, org[x].layer)
				o.other = o.other || org[x].other
			}
			for _, r := range op.Results {
				org[r] = o
			}
			floating = append(floating, op)
			continue
		}
		c := -1
		usesOther := false
		anchored := false // reads a layer's activation or a parameter
		for _, x := range op.Operands {
			if a.data[x] {
				if x.Def != nil && !inputOnly[x] {
					c = max(c, code[x])
					anchored = true
				}
				continue
			}
			c = max(c, org[x].layer)
			usesOther = usesOther || org[x].other
			anchored = anchored || org[x].layer >= 0 || org[x].other
		}
		if !anchored && r0 != nil {
			// Reads model inputs only (a tensor-parallel rank's offset of the labels, a
			// mask from the tokens): it belongs with its first user, like a constant, not
			// to the embedding.
			for _, r := range op.Results {
				inputOnly[r] = true
				code[r] = -1
			}
			floating = append(floating, op)
			continue
		}
		if usesOther && c == maxLayer {
			c = lCode
		}
		opCode[op] = c
		for _, r := range op.Results {
			code[r] = c
		}
	}
	hasE, hasL := false, false
	for _, c := range opCode {
		hasE = hasE || c == -1
		hasL = hasL || c == lCode
	}
	var units []unit
	index := map[int]int{}
	add := func(c int, label string, kind byte) {
		index[c] = len(units)
		units = append(units, unit{label: label, kind: kind})
	}
	if hasE {
		add(-1, "E", 'E')
	}
	for l := 0; l <= maxLayer; l++ {
		add(l, "t"+strconv.Itoa(l), 't')
	}
	if hasL {
		add(lCode, "L", 'L')
	}
	unitOf := map[*ir.Op]int{}
	for op, c := range opCode {
		if u, ok := index[c]; ok {
			unitOf[op] = u
		} else {
			unitOf[op] = index[-1]
		}
	}
	a.placeFloating(floating, unitOf)
	a.fillCosts(units, unitOf)
	return units, unitOf
}

// Results0 returns the first result or nil (ops without results count as data-dependent).
func resultOrNil(op *ir.Op) *ir.Value {
	if len(op.Results) == 0 {
		return nil
	}
	return op.Results[0]
}

// cutUnits cuts the model after every op where exactly one activation is live.
func (a *analysis) cutUnits() ([]unit, map[*ir.Op]int) {
	f := a.f
	lastUse := map[*ir.Value]int{}
	for i, op := range f.Ops {
		for _, x := range op.Operands {
			lastUse[x] = i
		}
	}
	for _, r := range f.Results {
		lastUse[r] = len(f.Ops)
	}
	unitOf := map[*ir.Op]int{}
	var floating []*ir.Op
	cur := 0
	live := map[*ir.Value]bool{}
	var units []unit
	units = append(units, unit{})
	for i, op := range f.Ops {
		if r := resultOrNil(op); r != nil && !a.data[r] {
			floating = append(floating, op)
			continue
		}
		unitOf[op] = cur
		for _, r := range op.Results {
			if lastUse[r] > i {
				live[r] = true
			}
		}
		for x := range live {
			if lastUse[x] <= i {
				delete(live, x)
			}
		}
		if len(live) == 1 && i < len(f.Ops)-1 {
			cur++
			units = append(units, unit{})
		}
	}
	// Drop a trailing empty unit and name the rest t0, t1, ….
	used := map[int]bool{}
	for _, u := range unitOf {
		used[u] = true
	}
	remap := map[int]int{}
	var kept []unit
	for u := range units {
		if used[u] {
			remap[u] = len(kept)
			kept = append(kept, unit{label: "t" + strconv.Itoa(len(kept)), kind: 't'})
		}
	}
	for op, u := range unitOf {
		unitOf[op] = remap[u]
	}
	if len(kept) == 0 {
		kept = []unit{{label: "t0", kind: 't'}}
	}
	a.placeFloating(floating, unitOf)
	a.fillCosts(kept, unitOf)
	return kept, unitOf
}

// markerUnits uses the model's stage markers as units.
func (a *analysis) markerUnits() ([]unit, map[*ir.Op]int) {
	units := make([]unit, a.markers)
	for i := range units {
		units[i] = unit{label: "m" + strconv.Itoa(i), kind: 't'}
	}
	unitOf := map[*ir.Op]int{}
	for _, op := range a.f.Ops {
		unitOf[op] = max(op.Stage, 0)
	}
	a.fillCosts(units, unitOf)
	return units, unitOf
}

// labelMarkers names marker units by the layers they hold (E,t0 …) when parameters are
// namespaced by layer, so a stage table reads in layers whatever the partition mode.
func (a *analysis) labelMarkers(units []unit, unitOf map[*ir.Op]int) {
	layers, layerOf := a.layerUnits()
	seen := make([]map[int]bool, len(units))
	names := make([][]string, len(units))
	for _, op := range a.f.Ops {
		m, l := unitOf[op], layerOf[op]
		if seen[m] == nil {
			seen[m] = map[int]bool{}
		}
		if !seen[m][l] {
			seen[m][l] = true
			names[m] = append(names[m], layers[l].label)
		}
	}
	for m := range units {
		if len(names[m]) > 0 {
			sort.SliceStable(names[m], func(i, j int) bool { return layerIndex(layers, names[m][i]) < layerIndex(layers, names[m][j]) })
			units[m].label = strings.Join(names[m], ",")
		}
	}
}

func layerIndex(units []unit, label string) int {
	for i, u := range units {
		if u.label == label {
			return i
		}
	}
	return len(units)
}

// placeFloating puts each op that depends on no model input into the unit of its first user
// (ops with no user go to the last unit).
func (a *analysis) placeFloating(floating []*ir.Op, unitOf map[*ir.Op]int) {
	users := a.f.Uses()
	last := 0
	for _, u := range unitOf {
		last = max(last, u)
	}
	// Walk backwards so a chain of floating ops follows its final user.
	for i := len(floating) - 1; i >= 0; i-- {
		op := floating[i]
		best := -1
		for _, r := range op.Results {
			for _, user := range users[r] {
				if u, ok := unitOf[user]; ok && (best < 0 || u < best) {
					best = u
				}
			}
		}
		if best < 0 {
			best = last
		}
		unitOf[op] = best
	}
}

// fillCosts sums op costs per unit and the bytes crossing each cut.
func (a *analysis) fillCosts(units []unit, unitOf map[*ir.Op]int) {
	seenParam := make([]map[*ir.Value]bool, len(units))
	for i := range seenParam {
		seenParam[i] = map[*ir.Value]bool{}
	}
	lastUser := map[*ir.Value]int{}
	for _, op := range a.f.Ops {
		u := unitOf[op]
		c := a.costs[op]
		units[u].f += c.F
		units[u].i += c.I
		units[u].w += c.W
		units[u].fc += c.FComm
		units[u].ic += c.IComm
		units[u].wc += c.WComm
		if op.Name() == "all_to_all" {
			units[u].fa += c.FComm
			units[u].ia += c.IComm
		}
		units[u].act += c.ActBytes
		units[u].flops += c.FLOPs
		for _, x := range op.Operands {
			if a.isParam[x] && !seenParam[u][x] {
				seenParam[u][x] = true
				units[u].params += x.Type.Bytes()
			}
			if a.data[x] {
				lastUser[x] = max(lastUser[x], u)
			}
		}
	}
	for _, op := range a.f.Ops {
		u := unitOf[op]
		for _, r := range op.Results {
			if lu, ok := lastUser[r]; ok && lu > u {
				for k := u; k < lu; k++ {
					units[k].cut += float64(r.Type.Bytes())
				}
			}
		}
	}
	for k := range units {
		units[k].cutTime = 2 * (units[k].cut/a.dev.LinkBandwidth + a.dev.LinkLatency)
	}
}

func unitRange(units []unit) string {
	if len(units) == 0 {
		return "none"
	}
	if len(units) <= 3 {
		var s []string
		for _, u := range units {
			s = append(s, u.label)
		}
		return strings.Join(s, ", ")
	}
	return units[0].label + ", " + units[1].label + " … " + units[len(units)-1].label
}

// stageTime is the cost model's compute time of a group of units for one micro-batch
// (forward, input gradient and weight gradient).
func stageTime(units []unit, lo, hi int) float64 {
	t := 0.0
	for _, u := range units[lo:hi] {
		t += u.f + u.i + u.w
	}
	return t
}

// cutTime is the time to send the activations across the cut after unit k and their
// gradients back, on the module's device's links (fillCosts).
func cutTime(units []unit, k int) float64 { return units[k].cutTime }

// timeTolerance is how much longer than the fastest a split's pipeline time may be and still
// count as equally fast, so that memory decides between near-equal splits.
const timeTolerance = 0.01

// flatTimeNote explains a split that time cannot explain.
const flatTimeNote = "with 1 micro-batch the pipeline time does not depend on the split; stages balanced by memory"

// balance splits units into `stages` contiguous groups. It minimises, in order:
//
//  1. the pipeline time T = Σ tᵢ + (M−1)·max tⱼ (the TeraPipe / Alpa formulation: one
//     micro-batch traverses every stage, the others follow at the pace of the slowest),
//     counting splits within timeTolerance of the fastest as equal. Σ tᵢ is the same for every
//     split, so this bounds the bottleneck stage; with M = 1 it does not constrain the split
//     at all, and without the next criterion everything would pile onto one stage;
//  2. the largest stage memory (parameters with gradients and optimizer state, plus the
//     activations in flight), which must also fit the memory limit per stage;
//  3. the bottleneck stage's time;
//  4. the time of the transfers at the cuts (activations forward, gradients back), which
//     overlap compute in a pipeline and so only break the remaining ties.
//
// Each of 1–3 is a bound on every group, and a split exists under a pair of bounds (time,
// memory) exactly when the greedy split — each group as long as the bounds allow — needs at
// most `stages` groups (a group within the bounds stays within them when cut in two), so each
// is found by a binary search over the values a group can take; 4 is a dynamic program over
// cut positions under the bounds found.
func balance(units []unit, stages int, memLimit int64, pp, mb, virtual int) ([]int, error) {
	n := len(units)
	if n < stages || stages < 1 {
		return nil, fmt.Errorf("cannot split %d units into %d stages", n, stages)
	}
	inflight := max(1, min(pp, mb))
	perStage := int64(math.MaxInt64)
	if memLimit > 0 {
		perStage = memLimit / int64(virtual)
	}
	prefix := make([]float64, n+1)
	params, act := make([]int64, n+1), make([]int64, n+1)
	for k, u := range units {
		prefix[k+1] = prefix[k] + u.f + u.i + u.w
		params[k+1], act[k+1] = params[k]+u.params, act[k]+u.act
	}
	const slack = 1e-12 // sums of the same costs in another order
	timeOf := func(j, i int) float64 { return prefix[i] - prefix[j] }
	// memOf estimates the bytes a device needs for units[j:i]: parameters with their gradients
	// and optimizer state, plus the activations of the micro-batches in flight (pp under 1F1B
	// on the first rank, at most M).
	memOf := func(j, i int) int64 {
		return (params[i]-params[j])*(1+CostConstants.OptStateBytes) + (act[i]-act[j])*int64(inflight)
	}
	ok := func(j, i int, tcap float64, mcap int64) bool {
		return timeOf(j, i) <= tcap*(1+slack) && memOf(j, i) <= mcap
	}
	// feasible reports whether some split has every group within both bounds.
	feasible := func(tcap float64, mcap int64) bool {
		groups := 0
		for j := 0; j < n; {
			i := j
			for i < n && ok(j, i+1, tcap, mcap) {
				i++
			}
			if i == j {
				return false // unit j alone breaks a bound
			}
			groups++
			j = i
		}
		return groups <= stages
	}
	var times []float64
	var mems []int64
	for j := 0; j < n; j++ {
		for i := j + 1; i <= n; i++ {
			if m := memOf(j, i); m <= perStage {
				times = append(times, timeOf(j, i))
				mems = append(mems, m)
			}
		}
	}
	sort.Float64s(times)
	sort.Slice(mems, func(a, b int) bool { return mems[a] < mems[b] })
	inf := math.Inf(1)
	// 1. The least bottleneck under the memory limit, and the most time counted as equal.
	k := sort.Search(len(times), func(k int) bool { return feasible(times[k], perStage) })
	if k == len(times) {
		if memLimit > 0 {
			worst, who := int64(0), ""
			for k := range units {
				if need := memOf(k, k+1); need > worst {
					worst, who = need, units[k].label
				}
			}
			return nil, fmt.Errorf("no split into %d stages fits mem=%d bytes per device (%d per stage); layer %s alone needs %d bytes", stages, memLimit, perStage, who, worst)
		}
		return nil, fmt.Errorf("cannot split %d units into %d stages", n, stages)
	}
	tcap := inf
	if mb > 1 {
		best := prefix[n] + float64(mb-1)*times[k]
		tcap = times[k] + timeTolerance*best/float64(mb-1)
	}
	// 2. The least memory within that time.
	k = sort.Search(len(mems), func(k int) bool { return feasible(tcap, mems[k]) })
	mcap := mems[k] // exists: the least bottleneck's split is within tcap and perStage
	// 3. The least bottleneck within that memory.
	// (step 2's split is within tcap, so this is too).
	tcap = times[sort.Search(len(times), func(k int) bool { return feasible(times[k], mcap) })]
	// 4. The cheapest cuts within both: comm[s][i] is the least transfer time splitting
	// units[0:i] into s groups.
	comm := make([][]float64, stages+1)
	from := make([][]int, stages+1)
	for s := range comm {
		comm[s] = make([]float64, n+1)
		from[s] = make([]int, n+1)
		for i := range comm[s] {
			comm[s][i] = inf
		}
	}
	comm[0][0] = 0
	for s := 1; s <= stages; s++ {
		for i := s; i <= n-(stages-s); i++ {
			for j := i - 1; j >= s-1; j-- {
				if timeOf(j, i) > tcap*(1+slack) {
					break // earlier j only make the group longer
				}
				if comm[s-1][j] == inf || !ok(j, i, tcap, mcap) {
					continue
				}
				c := comm[s-1][j]
				if j > 0 {
					c += cutTime(units, j-1)
				}
				if c < comm[s][i] {
					comm[s][i], from[s][i] = c, j
				}
			}
		}
	}
	if comm[stages][n] == inf {
		return nil, fmt.Errorf("cannot split %d units into %d stages", n, stages) // unreachable: feasible said so
	}
	assign := make([]int, n)
	i := n
	for s := stages; s >= 1; s-- {
		j := from[s][i]
		for k := j; k < i; k++ {
			assign[k] = s - 1
		}
		i = j
	}
	return assign, nil
}

// parseLayout reads a Megatron-style layout: stages separated by '|', each a comma list of E,
// L, t and t*N, covering the model's units exactly and in order.
func parseLayout(layout string, units []unit, stages int) ([]int, error) {
	if strings.TrimSpace(layout) == "" {
		return nil, fmt.Errorf("mode=layout needs a layout string, e.g. %s", exampleLayout(units, stages))
	}
	parts := strings.Split(layout, "|")
	if len(parts) != stages {
		return nil, fmt.Errorf("layout %q has %d stages, pp × virtual is %d", layout, len(parts), stages)
	}
	var seq []byte
	var stageOf []int
	for s, p := range parts {
		if strings.TrimSpace(p) == "" {
			return nil, fmt.Errorf("layout %q: stage %d is empty", layout, s)
		}
		for _, item := range strings.Split(p, ",") {
			item = strings.TrimSpace(item)
			kind, count := item, 1
			if k, n, ok := strings.Cut(item, "*"); ok {
				c, err := strconv.Atoi(strings.TrimSpace(n))
				if err != nil || c < 1 || c > 1<<20 {
					return nil, fmt.Errorf("layout %q: bad repeat count in %q", layout, item)
				}
				kind, count = strings.TrimSpace(k), c
			}
			if kind != "E" && kind != "L" && kind != "t" {
				return nil, fmt.Errorf("layout %q: unknown item %q (use E, t, t*N, L)", layout, item)
			}
			for i := 0; i < count; i++ {
				seq = append(seq, kind[0])
				stageOf = append(stageOf, s)
			}
		}
	}
	want := make([]byte, len(units))
	for i, u := range units {
		want[i] = u.kind
	}
	if string(seq) != string(want) {
		return nil, fmt.Errorf("layout %q does not cover the model exactly: it places %s, the model has %s (%d layers); e.g. %s",
			layout, summarize(seq), summarize(want), countKind(want, 't'), exampleLayout(units, stages))
	}
	return stageOf, nil
}

func countKind(s []byte, k byte) int {
	n := 0
	for _, c := range s {
		if c == k {
			n++
		}
	}
	return n
}

func summarize(s []byte) string {
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		if j-i == 1 {
			parts = append(parts, string(s[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%c*%d", s[i], j-i))
		}
		i = j
	}
	return strings.Join(parts, ",")
}

// exampleLayout spreads the layers evenly, as a hint in errors.
func exampleLayout(units []unit, stages int) string {
	var ts int
	hasE, hasL := false, false
	for _, u := range units {
		switch u.kind {
		case 't':
			ts++
		case 'E':
			hasE = true
		case 'L':
			hasL = true
		}
	}
	var parts []string
	for s := 0; s < stages; s++ {
		n := ts/stages + map[bool]int{true: 1}[s < ts%stages]
		var items []string
		if s == 0 && hasE {
			items = append(items, "E")
		}
		if n > 0 {
			items = append(items, fmt.Sprintf("t*%d", n))
		}
		if s == stages-1 && hasL {
			items = append(items, "L")
		}
		parts = append(parts, strings.Join(items, ","))
	}
	return strings.Join(parts, "|")
}

// describePartition records the layout, per-stage estimates (in seconds on the device
// profile named) and the note explaining the split, if any, as a module attribute. When the
// model has collectives (comm), each stage also records how much of its f, i and w is
// collective time (f_comm, i_comm, w_comm): time, f, i and w include it, since a
// tensor-parallel collective sits between the stage's matmuls and the stage waits for it.
func describePartition(dev, mode, note string, units []unit, assign []int, stages, mb int, comm bool) ir.Attr {
	var list ir.List
	var times []float64
	for s := 0; s < stages; s++ {
		var labels []string
		var f, i, w, flops, fc, ic, wc, fa, ia float64
		var act int64
		lo, hi := -1, -1
		for k, u := range units {
			if assign[k] != s {
				continue
			}
			if lo < 0 {
				lo = k
			}
			hi = k + 1
			labels = append(labels, strings.Split(u.label, ",")...)
			f, i, w, flops = f+u.f, i+u.i, w+u.w, flops+u.flops
			fc, ic, wc = fc+u.fc, ic+u.ic, wc+u.wc
			fa, ia = fa+u.fa, ia+u.ia
			act += u.act
		}
		t := 0.0
		if lo >= 0 {
			t = stageTime(units, lo, hi)
		}
		times = append(times, t)
		d := ir.Attrs{
			{Name: "act_bytes", Value: ir.Int(act)},
			{Name: "f", Value: ir.Float(f)},
			{Name: "flops", Value: ir.Float(flops)},
			{Name: "i", Value: ir.Float(i)},
			{Name: "layers", Value: ir.String(compactLabels(labels))},
			{Name: "time", Value: ir.Float(t)},
			{Name: "w", Value: ir.Float(w)},
		}
		if comm {
			d = d.Set("f_comm", ir.Float(fc)).Set("i_comm", ir.Float(ic)).Set("w_comm", ir.Float(wc))
		}
		if fa+ia > 0 {
			d = d.Set("f_all_to_all", ir.Float(fa)).Set("i_all_to_all", ir.Float(ia))
		}
		list = append(list, ir.Dict(d))
	}
	sum, worst := 0.0, 0.0
	for _, t := range times {
		sum += t
		worst = math.Max(worst, t)
	}
	for k := 0; k+1 < len(units); k++ {
		if assign[k] != assign[k+1] {
			sum += cutTime(units, k)
		}
	}
	d := ir.Attrs{
		{Name: "device", Value: ir.String(dev)},
		{Name: "mode", Value: ir.Ident(mode)},
		{Name: "pipeline_time", Value: ir.Float(sum + float64(mb-1)*worst)},
		{Name: "stages", Value: list},
	}
	if note != "" {
		d = d.Set("note", ir.String(note))
	}
	return ir.Dict(d)
}

// compactLabels writes t0,t1,t2,t3 as t0-t3.
func compactLabels(labels []string) string {
	var out []string
	for i := 0; i < len(labels); {
		j := i
		num := func(k int) int {
			if k >= len(labels) || len(labels[k]) < 2 || (labels[k][0] != 't' && labels[k][0] != 'm') {
				return -1
			}
			n, err := strconv.Atoi(labels[k][1:])
			if err != nil {
				return -1
			}
			return n
		}
		for num(j) >= 0 && num(j+1) == num(j)+1 && labels[j+1][0] == labels[i][0] {
			j++
		}
		if j > i {
			out = append(out, labels[i]+"-"+labels[j])
		} else {
			out = append(out, labels[i])
		}
		i = j + 1
	}
	return strings.Join(out, ",")
}

// LayerUnits is the labels of the units partition's auto and layout modes cut m's @forward
// into (E, t0 … tN−1, L): a layout string covers them, and the planner probes one per stage.
func LayerUnits(m *ir.Module) ([]string, error) {
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return nil, fmt.Errorf("module has no @%s", ir.ForwardFunc)
	}
	dev, err := ModuleDevice(m)
	if err != nil {
		return nil, err
	}
	units, _ := analyse(m, f, dev).layerUnits()
	labels := make([]string, len(units))
	for i, u := range units {
		labels[i] = u.label
	}
	return labels, nil
}
