package passes

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/schedule"
)

// AttrTokenSlices (on a module) lists the lengths of the token slices the token-slice pass
// cut every micro-batch's sequence into.
const AttrTokenSlices = "token_slices"

// TokenSlice cuts each micro-batch's sequence into slices that flow through the pipeline like
// micro-batches (TeraPipe).
var TokenSlice = &Pass{
	Name: "token-slice",
	Doc: "Cut the sequence of a causal model into token slices (TeraPipe): @forward is replicated once per " +
		"slice, each copy computing its tokens [a, a+l) (ops annotated `tslice = j`). Data inputs are sliced along " +
		"their sequence axis (dim 1); the keys and values an attention reads are the concatenation of those of " +
		"slices 0..j (recomputed in the backward from the pieces, which stay in the stage as its K/V cache); " +
		"position-dependent constants (positions, causal masks, rotary tables) are sliced where they meet the " +
		"sequence. The slice losses, each a mean over its tokens, are weighted by l/T and summed into the " +
		"micro-batch's loss in the last slice, so gradients equal the unsliced model's. A model whose attention " +
		"is not causally masked, or with an op that mixes tokens (a reduction, convolution or normalisation " +
		"over the sequence), is refused with the op and its position. Runs after partition, before autodiff.",
	Options: []Option{{Name: "lengths", Default: "auto", Doc: "slice lengths summing to the sequence length, e.g. \"3,3,2\", or auto: " +
		"TeraPipe's dynamic program on the cost model picks them for the module's micro-batch count and stage count"}},
	Run: func(m *ir.Module, opts Options) error {
		f := m.Func(ir.ForwardFunc)
		if f == nil {
			return fmt.Errorf("module has no @%s", ir.ForwardFunc)
		}
		dev, err := ModuleDevice(m)
		if err != nil {
			return err
		}
		plan, err := PlanTokens(m, dev, opts["lengths"], false)
		if err != nil {
			return err
		}
		if err := sliceTokens(m, f, plan.Lengths); err != nil {
			return err
		}
		m.Attrs = m.Attrs.Set(AttrTokenSlices, ir.Ints(plan.Lengths...))
		m.Attrs = m.Attrs.Set(AttrTokenPlan, plan.attr())
		return nil
	},
}

// AttrTokenPlan (on a module) records why its token slices were chosen: the predicted pipeline
// latency of the slicing, of the best uniform slicing and of no slicing (see TokenPlan).
const AttrTokenPlan = "token_plan"

// TokenPlan is a slicing and the cost model's case for it: the pipeline latency TeraPipe's
// formula predicts (m·Σtᵢ + (K−1)·max tⱼ, seconds on the device profile) for it, for the best
// uniform slicing and for no slicing, at the module's micro-batch count.
type TokenPlan struct {
	Auto           bool    `json:"auto"`
	Device         string  `json:"device"`
	Microbatches   int     `json:"microbatches"`
	Stages         int     `json:"stages"`
	Lengths        []int   `json:"lengths"`
	Latency        float64 `json:"latency"`
	Uniform        []int   `json:"best_uniform"`
	UniformLatency float64 `json:"best_uniform_latency"`
	Unsliced       float64 `json:"unsliced_latency"`
	// SliceTimes[s][j] is the cost model's time of slice j on stage s.
	SliceTimes [][]SliceTimes `json:"-"`
}

func (p TokenPlan) attr() ir.Attr {
	return ir.Dict(ir.Attrs{{Name: "auto", Value: ir.BoolAttr(p.Auto)}, {Name: "device", Value: ir.String(p.Device)},
		{Name: "latency", Value: ir.Float(p.Latency)}, {Name: "lengths", Value: ir.Ints(p.Lengths...)},
		{Name: "microbatches", Value: ir.Int(p.Microbatches)}, {Name: "stages", Value: ir.Int(p.Stages)},
		{Name: "uniform", Value: ir.Ints(p.Uniform...)}, {Name: "uniform_latency", Value: ir.Float(p.UniformLatency)},
		{Name: "unsliced_latency", Value: ir.Float(p.Unsliced)}, {Name: "slice_seconds", Value: p.sliceList()}}.Sorted())
}

// sliceList writes SliceTimes as one list per stage of [f, i, w] per slice.
func (p TokenPlan) sliceList() ir.List {
	var out ir.List
	for _, st := range p.SliceTimes {
		var row ir.List
		for _, t := range st {
			row = append(row, ir.List{ir.Float(t.F), ir.Float(t.I), ir.Float(t.W), ir.Float(t.Transfer)})
		}
		out = append(out, row)
	}
	return out
}

// ReadTokenPlan reads a module's token_plan attribute (ok false when it has none).
func ReadTokenPlan(m *ir.Module) (TokenPlan, bool) {
	d, ok := m.Attrs.Get(AttrTokenPlan).(ir.Dict)
	if !ok {
		return TokenPlan{}, false
	}
	at := ir.Attrs(d)
	return TokenPlan{Auto: at.Bool("auto", false), Device: at.Str("device", ""), Microbatches: at.Int("microbatches", 1),
		Stages: at.Int("stages", 1), Lengths: at.Ints("lengths"), Latency: at.Float("latency", 0),
		Uniform: at.Ints("uniform"), UniformLatency: at.Float("uniform_latency", 0), Unsliced: at.Float("unsliced_latency", 0),
		SliceTimes: readSliceTimes(at.Get("slice_seconds"))}, true
}

func readSliceTimes(a ir.Attr) [][]SliceTimes {
	rows, _ := a.(ir.List)
	var out [][]SliceTimes
	for _, r := range rows {
		cells, _ := r.(ir.List)
		var st []SliceTimes
		for _, c := range cells {
			v, _ := c.(ir.List)
			var f [4]float64
			for i := 0; i < len(v) && i < 4; i++ {
				switch x := v[i].(type) {
				case ir.Float:
					f[i] = float64(x)
				case ir.Int:
					f[i] = float64(x)
				}
			}
			st = append(st, SliceTimes{F: f[0], I: f[1], W: f[2], Transfer: f[3]})
		}
		out = append(out, st)
	}
	return out
}

// PlanTokens prices the token slicing spec ("auto", or lengths "3,3,2") of m's partitioned
// @forward on dev at the module's micro-batch and stage counts, choosing the lengths for
// auto with TeraPipe's dynamic program (schedule.PlanTokenSlices) — and the micro-batch
// count with them when joint is set (m is then compiled with one micro-batch, the whole
// batch).
func PlanTokens(m *ir.Module, dev DeviceProfile, spec string, joint bool) (TokenPlan, error) {
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return TokenPlan{}, fmt.Errorf("module has no @%s", ir.ForwardFunc)
	}
	sc, err := NewSliceCostModel(m, dev)
	if err != nil {
		return TokenPlan{}, err
	}
	mb := max(m.Attrs.Int("microbatches", 1), 1)
	p := TokenPlan{Device: dev.Name, Microbatches: mb, Stages: sc.Stages}
	cost := sc.Time
	batch := sc.B * mb
	popts := schedule.TokenPlanOptions{Microbatches: mb}
	if strings.TrimSpace(spec) == "auto" || spec == "" {
		if joint {
			popts.Microbatches = 0
		}
		best, err := schedule.PlanTokenSlices(sc.T, batch, sc.Stages, cost, popts)
		if err != nil {
			return TokenPlan{}, fmt.Errorf("token slicing: %v", err)
		}
		p.Auto, p.Lengths, p.Microbatches = true, best.Lengths, best.Microbatches
		mb, popts.Microbatches = best.Microbatches, best.Microbatches
	} else if p.Lengths, err = ParseSliceLengths(spec); err != nil {
		return TokenPlan{}, err
	}
	sum := 0
	for _, l := range p.Lengths {
		sum += l
	}
	if sum != sc.T || len(p.Lengths) > sc.T {
		return TokenPlan{}, fmt.Errorf("token slicing: slice lengths %s sum to %d, the sequence has %d tokens", joinInts(p.Lengths), sum, sc.T)
	}
	p.Latency = schedule.EvalTokenPlan(p.Lengths, batch, mb, sc.Stages, cost).Latency
	uni, err := schedule.BestUniform(sc.T, batch, sc.Stages, cost, popts)
	if err != nil {
		return TokenPlan{}, fmt.Errorf("token slicing: %v", err)
	}
	p.Uniform, p.UniformLatency = uni.Lengths, uni.Latency
	p.Unsliced = schedule.EvalTokenPlan([]int{sc.T}, batch, mb, sc.Stages, cost).Latency
	for st := 0; st < sc.Stages; st++ {
		var row []SliceTimes
		c := 0
		for _, l := range p.Lengths {
			row = append(row, sc.Parts(st, sc.B, l, c))
			c += l
		}
		p.SliceTimes = append(p.SliceTimes, row)
	}
	return p, nil
}

// ParseSliceLengths reads a comma-separated list of positive slice lengths.
func ParseSliceLengths(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("token slice length %q is not an integer", f)
		}
		if n < 1 {
			return nil, fmt.Errorf("token slice length %d: every slice needs at least one token", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// TokenSlices returns a module's slice lengths (nil when it is not token-sliced).
func TokenSlices(m *ir.Module) []int {
	if !m.Attrs.Has(AttrTokenSlices) {
		return nil
	}
	return m.Attrs.Ints(AttrTokenSlices)
}

// SeqAxis is the sequence axis of a token-sliced model's data inputs ([batch, seq, …]).
const SeqAxis = 1

// SequenceLength is the number of positions on the sequence axis of f's data inputs, which
// token slicing cuts (an error when f has no [batch, seq, …] input, or inputs disagree).
func SequenceLength(f *ir.Func) (int, error) {
	T := 0
	for i, a := range f.Args {
		if !f.ArgAttrs[i].Has(ir.AttrInput) {
			continue
		}
		if a.Type.Rank() < 2 {
			return 0, fmt.Errorf("input %%%s is %s; token slicing needs sequence inputs [batch, seq, …]", a.Name, a.Type)
		}
		n := a.Type.Shape[SeqAxis]
		if T != 0 && n != T {
			return 0, fmt.Errorf("input %%%s has %d positions on axis %d, another input %d", a.Name, n, SeqAxis, T)
		}
		T = n
	}
	if T == 0 {
		return 0, fmt.Errorf("the model has no data input to cut into token slices")
	}
	return T, nil
}

// Attention states of a value with a key axis (scores over the context).
const (
	kRaw    = iota // scores: a key beyond the query may still count
	kMasked        // a causal mask hides every key beyond the query (−1e4 or less)
	kProbs         // normalised over the keys after a causal mask: exactly 0 beyond the query
)

// Token kinds of a scalar computed from every token of a slice.
const (
	tokNone = iota
	tokMean
	tokSum
)

// seqInfo is what the analysis knows of one value.
type seqInfo struct {
	dep   bool // computed from the data inputs: it has a sequence (query) axis
	q, k  int  // query and key axes, or -1
	state int  // of the key axis
	tok   int  // a scalar over the slice's tokens (the loss)
}

// operand rewrites, per operand of a sliced op.
type operandAction struct {
	kind   int // actSlice or actPrefix
	q, k   int // actSlice: the operand's axes cut to the slice's rows [a, a+l) and prefix [0, a+l)
	prefix int // actPrefix: the axis along which the pieces of slices 0..j are joined
}

const (
	actNone = iota
	actSlice
	actPrefix
)

type tokenSlicer struct {
	// cp is the context-parallel size when the analysis serves cp-partition (0: token
	// slicing): attention need not be causal, but it must be the fused op without a mask.
	cp      int
	m       *ir.Module
	f       *ir.Func
	T       int
	info    map[*ir.Value]*seqInfo
	actions map[*ir.Op]map[int]operandAction
	// shapePatch: attribute entries of reshape/broadcast set per slice: index → query or key.
	shapeQ, shapeK map[*ir.Op]int
	consts         map[*ir.Value]elemFn
	// causalSeen memoises the causal-mask check: CSE leaves one mask that every layer
	// reads, and checking a 2048² mask once per layer of a 96-layer model took 20 s.
	causalSeen map[causalKey]bool
	shapes     map[*ir.Value]string
}

// causalKey is one causal-mask check: the op kind and masked operand, the masks, the
// query and key axes in a result of rank r, and the result's shape.
type causalKey struct {
	kind    string
	d       int
	m0, m1  string // the masks' fingerprints (shape)
	q, k, r int
	shape   string
}

// shape is a data-independent value's structure: the ops computing it, their attributes and
// types, so that the masks every layer builds alike check once. Values computed from large
// constants keep their identity (printing those would cost more than the check).
func (t *tokenSlicer) shape(v *ir.Value) string {
	if v == nil {
		return ""
	}
	if s, ok := t.shapes[v]; ok {
		return s
	}
	var b strings.Builder
	op := v.Def
	switch {
	case op == nil || (op.Name() == "constant" && v.Type.NumElements() > 64):
		fmt.Fprintf(&b, "%p", v)
	default:
		fmt.Fprintf(&b, "%s#%d%s:%s(", op.Name(), v.Index, ir.AttrString(ir.Dict(op.Attrs)), v.Type)
		for _, x := range op.Operands {
			b.WriteString(t.shape(x))
			b.WriteByte(',')
		}
		b.WriteByte(')')
	}
	if t.shapes == nil {
		t.shapes = map[*ir.Value]string{}
	}
	t.shapes[v] = b.String()
	return t.shapes[v]
}

func (t *tokenSlicer) errAt(op *ir.Op, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if t.cp > 0 {
		return ir.ErrorAt(t.m.Source, op.Loc, "--cp %d: %s %s", t.cp, op.Name(), msg)
	}
	return ir.ErrorAt(t.m.Source, op.Loc, "token slicing: %s %s", op.Name(), msg)
}

func (t *tokenSlicer) get(v *ir.Value) *seqInfo {
	if i, ok := t.info[v]; ok {
		return i
	}
	return &seqInfo{q: -1, k: -1}
}

func sliceTokens(m *ir.Module, f *ir.Func, lengths []int) error {
	t, err := analyseTokens(m, f)
	if err != nil {
		return err
	}
	sum := 0
	for _, l := range lengths {
		sum += l
	}
	if len(lengths) > t.T {
		return fmt.Errorf("token slicing: %d slices of a sequence of %d tokens: at most one slice per token", len(lengths), t.T)
	}
	if sum != t.T {
		return fmt.Errorf("token slicing: slice lengths %s sum to %d, the sequence has %d tokens", joinInts(lengths), sum, t.T)
	}
	loss := -1
	for i := range f.Results {
		if f.ResultAttrs[i].Has(ir.AttrLoss) {
			loss = i
		}
	}
	return t.emit(lengths, loss)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// alignedDim maps result axis d of an op of result rank r to the matching axis of an
// operand of rank n under numpy broadcasting (-1 when the operand has no such axis).
func alignedDim(d, r, n int) int {
	if d < 0 {
		return -1
	}
	if x := d - (r - n); x >= 0 {
		return x
	}
	return -1
}

// independentOperand records the rewrite of a data-independent operand meeting sliced
// values: its axes aligned with the query and key axes are cut per slice when they have the
// full sequence length (a broadcast axis of size 1 needs nothing).
func (t *tokenSlicer) independentOperand(op *ir.Op, i, q, k int) error {
	x := op.Operands[i]
	dq, dk := q, k
	if dq >= 0 && x.Type.Shape[dq] == 1 {
		dq = -1
	}
	if dk >= 0 && x.Type.Shape[dk] == 1 {
		dk = -1
	}
	if dq < 0 && dk < 0 {
		return nil
	}
	for _, d := range []int{dq, dk} {
		if d >= 0 && x.Type.Shape[d] != t.T {
			return t.errAt(op, "operand %d has %d positions where the sequence has %d", i, x.Type.Shape[d], t.T)
		}
	}
	if t.actions[op] == nil {
		t.actions[op] = map[int]operandAction{}
	}
	t.actions[op][i] = operandAction{kind: actSlice, q: dq, k: dk}
	return nil
}

func (t *tokenSlicer) prefixOperand(op *ir.Op, i, axis int) {
	if t.actions[op] == nil {
		t.actions[op] = map[int]operandAction{}
	}
	t.actions[op][i] = operandAction{kind: actPrefix, prefix: axis}
}

func (t *tokenSlicer) set(op *ir.Op, in seqInfo) {
	for _, r := range op.Results {
		c := in
		t.info[r] = &c
	}
}

// analyse finds how op treats the sequence: which axes of its results index query tokens and
// keys, and what must happen to its operands per slice. Ops that do not depend on the data
// are replicated as they are.
func (t *tokenSlicer) analyse(op *ir.Op) error {
	var deps []int
	for i, x := range op.Operands {
		if t.get(x).dep {
			deps = append(deps, i)
		}
	}
	if len(deps) == 0 {
		return nil
	}
	name := op.Name()
	r := 0
	if len(op.Results) > 0 {
		r = op.Results[0].Type.Rank()
	}
	for _, i := range deps {
		if t.get(op.Operands[i]).tok != tokNone && len(deps) > 1 {
			return t.errAt(op, "uses the loss of the slice's tokens; token slicing needs the loss to be the model's result")
		}
	}
	x := t.get(op.Operands[deps[0]])
	xr := op.Operands[deps[0]].Type.Rank()
	mixes := func(what string) error {
		if t.cp > 0 {
			return t.errAt(op, "%s: its result at one token depends on other tokens of the sequence, which context parallelism splits over the cp ranks (only the fused attention op may mix tokens); use --cp 1", what)
		}
		return t.errAt(op, "%s: its result at one token depends on other tokens of the sequence, so the sequence cannot be cut into slices (token slicing needs a causal model)", what)
	}
	if x.tok != tokNone {
		// A scalar over the slice's tokens stays one through linear steps that treat every
		// slice alike: a cast, a sum over tensor-parallel ranks, scaling by a constant (the
		// vocab-parallel cross-entropy's sum divided by the token count).
		linear := name == "cast" || name == "all_reduce" && op.Attrs.Str("op", "sum") == "sum" ||
			(name == "mul" || name == "div" && deps[0] == 0) && len(deps) == 1
		if linear {
			t.set(op, *x)
			return nil
		}
		return t.errAt(op, "uses the loss of the slice's tokens; token slicing needs the loss to be the model's result")
	}
	switch {
	case op.Def.Has(ir.Elementwise):
		q, k := -1, -1
		for n, i := range deps {
			in := t.get(op.Operands[i])
			rank := op.Operands[i].Type.Rank()
			qi, ki := in.q+(r-rank), -1
			if in.k >= 0 {
				ki = in.k + (r - rank)
			}
			if n == 0 {
				q, k = qi, ki
			} else if qi != q || ki != k {
				return t.errAt(op, "combines values whose sequence axes do not line up")
			}
		}
		for i, y := range op.Operands {
			if t.get(y).dep {
				continue
			}
			if err := t.independentOperand(op, i, alignedDim(q, r, y.Type.Rank()), alignedDim(k, r, y.Type.Rank())); err != nil {
				return err
			}
		}
		out := seqInfo{dep: true, q: q, k: k}
		if k >= 0 {
			st, err := t.keyState(op, deps, k, r)
			if err != nil {
				return err
			}
			out.state = st
		}
		t.set(op, out)
		return nil
	case name == "reshape":
		if x.k >= 0 {
			return t.errAt(op, "reshapes attention scores; token slicing cannot follow the key axis")
		}
		in, out := op.Operands[0].Type.Shape, op.Results[0].Type.Shape
		pre := 1
		for _, d := range in[:x.q] {
			pre *= d
		}
		q := -1
		acc := 1
		for i, d := range out {
			if acc == pre && d == in[x.q] {
				q = i
				break
			}
			acc *= d
		}
		if q < 0 {
			return mixes("merges the sequence axis with another")
		}
		t.shapeQ[op] = q
		t.set(op, seqInfo{dep: true, q: q, k: -1})
		return nil
	case name == "transpose":
		perm := op.Attrs.Ints("perm")
		out := seqInfo{dep: true, q: slices.Index(perm, x.q), k: -1, state: x.state}
		if x.k >= 0 {
			out.k = slices.Index(perm, x.k)
		}
		t.set(op, out)
		return nil
	case name == "broadcast":
		out := seqInfo{dep: true, q: x.q + (r - xr), k: -1, state: x.state}
		t.shapeQ[op] = out.q
		if x.k >= 0 {
			out.k = x.k + (r - xr)
			t.shapeK[op] = out.k
		}
		t.set(op, out)
		return nil
	case name == "matmul":
		return t.matmul(op, deps, r)
	case name == "attention":
		return t.attention(op, deps, r)
	case name == "gather":
		axis := op.Attrs.Int("axis", 0)
		data, idx := t.get(op.Operands[0]), t.get(op.Operands[1])
		dr := op.Operands[0].Type.Rank()
		if axis < 0 {
			axis += dr
		}
		switch {
		case !data.dep && idx.k < 0:
			t.set(op, seqInfo{dep: true, q: axis + idx.q, k: -1})
			return nil
		case data.dep && !idx.dep && data.k < 0 && axis != data.q:
			q := data.q
			if q > axis {
				q += op.Operands[1].Type.Rank() - 1
			}
			t.set(op, seqInfo{dep: true, q: q, k: -1})
			return nil
		}
		return mixes("gathers along the sequence")
	case name == "gather_elements":
		axis := op.Attrs.Int("axis", 0)
		if axis < 0 {
			axis += xr
		}
		if len(deps) != 2 || axis == x.q || x.k >= 0 || t.get(op.Operands[1]).q != x.q {
			return mixes("gathers along the sequence")
		}
		t.set(op, seqInfo{dep: true, q: x.q, k: -1})
		return nil
	case name == "layer_norm" || name == "rms_norm":
		axis := op.Attrs.Int("axis", -1)
		if axis < 0 {
			axis += xr
		}
		if x.q >= axis || x.k >= 0 || len(deps) > 1 {
			return mixes("normalises over the sequence axis")
		}
		t.set(op, seqInfo{dep: true, q: x.q, k: -1})
		return nil
	case name == "softmax" || name == "log_softmax":
		axis := op.Attrs.Int("axis", -1)
		if axis < 0 {
			axis += xr
		}
		switch {
		case axis == x.q:
			return mixes("normalises over the sequence axis")
		case axis == x.k && name == "softmax":
			if x.state != kMasked {
				return t.errAt(op, "normalises attention scores over keys that no causal mask hides: the model's attention is not causal (token t would see tokens after t), so it cannot be cut into token slices")
			}
			t.set(op, seqInfo{dep: true, q: x.q, k: x.k, state: kProbs})
			return nil
		case x.k >= 0:
			return t.errAt(op, "normalises attention scores over another axis than the keys")
		}
		t.set(op, seqInfo{dep: true, q: x.q, k: -1})
		return nil
	case op.Def.Has(ir.Reduction):
		axes, err := ir.ReduceAxes(op.Attrs, xr)
		if err != nil {
			return t.errAt(op, "%v", err)
		}
		if x.k >= 0 && axes[x.k] {
			return mixes("reduces over the keys")
		}
		if axes[x.q] {
			all := !slices.Contains(axes, false)
			if all && (name == "reduce_mean" || name == "reduce_sum") {
				tok := tokMean
				if name == "reduce_sum" {
					tok = tokSum
				}
				t.set(op, seqInfo{dep: true, q: -1, k: -1, tok: tok})
				return nil
			}
			return mixes("reduces over the sequence axis")
		}
		keep := op.Attrs.Int("keepdims", 1) != 0
		q := x.q
		if !keep {
			for d := 0; d < x.q; d++ {
				if axes[d] {
					q--
				}
			}
		}
		t.set(op, seqInfo{dep: true, q: q, k: -1})
		return nil
	case name == "concat":
		axis := op.Attrs.Int("axis", 0)
		if axis < 0 {
			axis += r
		}
		for _, i := range deps[1:] {
			if in := t.get(op.Operands[i]); in.q != x.q || in.k != x.k {
				return t.errAt(op, "joins values whose sequence axes do not line up")
			}
		}
		if axis == x.q || axis == x.k {
			return mixes("joins along the sequence")
		}
		for i, y := range op.Operands {
			if !t.get(y).dep {
				if err := t.independentOperand(op, i, x.q, x.k); err != nil {
					return err
				}
			}
		}
		t.set(op, seqInfo{dep: true, q: x.q, k: x.k, state: kRaw})
		return nil
	case name == "split" || name == "slice":
		axes := []int{op.Attrs.Int("axis", 0)}
		if name == "slice" {
			sd, err := ir.SliceDims(op.Attrs, op.Operands[0].Type.Shape)
			if err != nil {
				return t.errAt(op, "%v", err)
			}
			axes = axes[:0]
			for a, d := range sd {
				if d.Start != 0 || d.Step != 1 || d.Size != op.Operands[0].Type.Shape[a] {
					axes = append(axes, a)
				}
			}
		}
		for _, a := range axes {
			if a < 0 {
				a += xr
			}
			if a == x.q || a == x.k {
				return mixes("cuts the sequence")
			}
		}
		t.set(op, *x)
		return nil
	case name == "all_reduce" || name == "copy_to_axis":
		t.set(op, *x)
		return nil
	case name == "all_gather" || name == "reduce_scatter":
		if d := op.Attrs.Int("dim", 0); d == x.q || d == x.k {
			return t.errAt(op, "splits the sequence over the %s ranks (sequence parallelism): compile without --sp to cut token slices", op.Attrs.Str("axis", ""))
		}
		t.set(op, *x)
		return nil
	case op.Def.Has(ir.Loss):
		if x.k >= 0 || len(deps) != len(op.Operands) {
			return t.errAt(op, "does not compare predictions and targets token by token")
		}
		switch op.Attrs.Str("reduction", "mean") {
		case "sum":
			t.set(op, seqInfo{dep: true, q: -1, k: -1, tok: tokSum})
		case "none":
			t.set(op, seqInfo{dep: true, q: x.q, k: -1})
		default:
			if op.Attrs.Has("ignore_index") && t.cp > 0 {
				return t.errAt(op, "with ignore_index averages over the tokens it keeps, which differ from cp rank to cp rank: the ranks' means could not be combined into the model's (use reduction = sum, or --cp 1)")
			}
			if op.Attrs.Has("ignore_index") {
				return t.errAt(op, "with ignore_index averages over the tokens it keeps, which differ from slice to slice: token slices would weight them by length instead (use reduction = sum, or no ignore_index)")
			}
			t.set(op, seqInfo{dep: true, q: -1, k: -1, tok: tokMean})
		}
		return nil
	}
	return mixes("has no token-slicing rule for data laid out by token")
}

// matmul: a token-wise linear layer (the sequence in a batch or row axis, weights on the
// other side), attention scores q·kᵀ (the sequence in A's rows and B's columns: B becomes
// the keys of slices 0..j), or probabilities times values (A's key axis contracted with B's
// sequence: B becomes the values of slices 0..j).
func (t *tokenSlicer) matmul(op *ir.Op, deps []int, r int) error {
	a, b := op.Operands[0], op.Operands[1]
	ai, bi := t.get(a), t.get(b)
	ar, br := a.Type.Rank(), b.Type.Rank()
	ta, tb := op.Attrs.Bool("transpose_a", false), op.Attrs.Bool("transpose_b", false)
	// Axes of the matrix parts: A is [..., rows, inner] (transposed: [..., inner, rows]).
	aRow, aIn := ar-2, ar-1
	if ta {
		aRow, aIn = aIn, aRow
	}
	bIn, bCol := br-2, br-1
	if tb {
		bIn, bCol = bCol, bIn
	}
	if br == 1 {
		bIn, bCol = 0, -1
	}
	if ar == 1 {
		aRow, aIn = -1, 0
	}
	mixes := func() error {
		if t.cp > 0 {
			return t.errAt(op, "contracts over the sequence axis, which context parallelism splits over the cp ranks: write attention as the fused op (the DSL's attention(…); ONNX's Attention or the pattern the importer fuses), which the ring computes; or use --cp 1")
		}
		return t.errAt(op, "contracts over the sequence axis: its result at one token depends on other tokens of the sequence, so the sequence cannot be cut into slices (token slicing needs a causal model)")
	}
	bias := func(q, k int) error {
		if len(op.Operands) == 3 && !t.get(op.Operands[2]).dep {
			c := op.Operands[2]
			return t.independentOperand(op, 2, alignedDim(q, r, c.Type.Rank()), alignedDim(k, r, c.Type.Rank()))
		}
		if len(op.Operands) == 3 {
			return t.errAt(op, "adds a sequence-dependent bias")
		}
		return nil
	}
	switch {
	case ai.dep && !bi.dep && ai.k < 0:
		q := -1
		switch {
		case ai.q == aIn:
			return mixes()
		case ai.q == aRow:
			q = r - 2
		default:
			q = ai.q + (r - ar)
			if d := alignedDim(q, r, br); d >= 0 && d < br-2 && b.Type.Shape[d] != 1 {
				return t.errAt(op, "multiplies by a tensor with a batch axis over the sequence")
			}
		}
		t.set(op, seqInfo{dep: true, q: q, k: -1})
		return bias(q, -1)
	case !ai.dep && bi.dep && bi.k < 0:
		q := -1
		switch {
		case bi.q == bIn:
			return mixes()
		case bi.q == bCol:
			q = r - 1
		default:
			q = bi.q + (r - br)
		}
		t.set(op, seqInfo{dep: true, q: q, k: -1})
		return bias(q, -1)
	case t.cp > 0 && ai.dep && bi.dep:
		return mixes()
	case ai.dep && bi.dep && ai.k < 0 && bi.k < 0 && ai.q == aRow && bi.q == bCol && ar >= 2 && br >= 2:
		// Attention scores: the keys of this slice and every earlier one.
		t.prefixOperand(op, 1, bi.q)
		t.set(op, seqInfo{dep: true, q: r - 2, k: r - 1, state: kRaw})
		return bias(r-2, r-1)
	case ai.dep && bi.dep && ai.k == aIn && ai.q == aRow && bi.k < 0 && bi.q == bIn:
		if ai.state != kProbs {
			return t.errAt(op, "weighs values by attention scores that no causal mask and softmax limited to earlier tokens: the model's attention is not causal, so it cannot be cut into token slices")
		}
		t.prefixOperand(op, 1, bi.q)
		t.set(op, seqInfo{dep: true, q: r - 2, k: -1})
		return bias(r-2, -1)
	}
	return mixes()
}

// attention: the fused op over the keys and values of slices 0..j. Its causal rule is aligned
// at the bottom right (query i sees keys up to i + Skv − Sq), so a slice's queries [a, a+l)
// over the prefix [0, a+l) are causal as they are, with no offset to carry. It must be causal;
// an explicit mask, data-independent, is cut like the decomposed chain's (rows to the
// slice, keys to the prefix).
func (t *tokenSlicer) attention(op *ir.Op, deps []int, r int) error {
	if t.cp > 0 {
		return t.cpAttention(op, r)
	}
	if !op.Attrs.Bool("causal", false) {
		return t.errAt(op, "attends without causal = true: the model's attention is not causal (token t would see tokens after t), so it cannot be cut into token slices")
	}
	for i := range 3 {
		in := t.get(op.Operands[i])
		if !in.dep || in.k >= 0 || in.q != r-2 {
			return t.errAt(op, "operand %d does not have the sequence in its second-to-last dim ([..., heads, seq, dim])", i)
		}
	}
	if len(op.Operands) == 4 {
		if t.get(op.Operands[3]).dep {
			return t.errAt(op, "has a mask computed from the data; token slicing needs a data-independent mask")
		}
		if err := t.independentOperand(op, 3, alignedDim(r-2, r, op.Operands[3].Type.Rank()), alignedDim(r-1, r, op.Operands[3].Type.Rank())); err != nil {
			return err
		}
	}
	t.prefixOperand(op, 1, r-2)
	t.prefixOperand(op, 2, r-2)
	t.set(op, seqInfo{dep: true, q: r - 2, k: -1})
	return nil
}

// keyState is the attention state of an elementwise op's result with a key axis: a causal
// mask applied with where or add makes raw scores masked; cast and scaling by a positive
// constant keep the state; anything else leaves scores raw (a softmax over them is then
// refused).
func (t *tokenSlicer) keyState(op *ir.Op, deps []int, k, r int) (int, error) {
	in := t.get(op.Operands[deps[0]])
	name := op.Name()
	if len(deps) != 1 {
		return kRaw, nil
	}
	d := deps[0]
	q := in.q + (r - op.Operands[d].Type.Rank())
	scalar := func(v *ir.Value) (float64, bool) {
		if v.Type.NumElements() != 1 {
			return 0, false
		}
		e, ok := t.elems(v)
		if !ok {
			return 0, false
		}
		return e(make([]int, v.Type.Rank())), true
	}
	switch name {
	case "cast":
		return in.state, nil
	case "mul", "div":
		if c, ok := scalar(op.Operands[1-d]); ok && c > 0 && (name == "mul" || d == 0) {
			return in.state, nil
		}
	case "where":
		if d == 0 {
			break
		}
		cond, ok := t.elems(op.Operands[0])
		fill, ok2 := t.elems(op.Operands[3-d])
		if !ok || !ok2 {
			return kRaw, nil
		}
		// where(cond, fill, s) hides where cond is true; where(cond, s, fill) where it is false.
		hideWhen := d == 2
		cv, fv := op.Operands[0], op.Operands[3-d]
		if t.causalOnce(causalKey{"where", d, t.shape(cv), t.shape(fv), q, k, r, op.Results[0].Type.Shape.String()}, func() bool {
			return t.causal(op, q, k, []*ir.Value{cv, fv}, func(idx []int) bool {
				return (at(cond, cv, r, idx) != 0) == hideWhen && at(fill, fv, r, idx) <= -1e4
			})
		}) {
			return kMasked, nil
		}
	case "add":
		mv := op.Operands[1-d]
		mask, ok := t.elems(mv)
		if ok && t.causalOnce(causalKey{"add", d, t.shape(mv), "", q, k, r, op.Results[0].Type.Shape.String()}, func() bool {
			return t.causal(op, q, k, []*ir.Value{mv}, func(idx []int) bool { return at(mask, mv, r, idx) <= -1e4 })
		}) {
			return kMasked, nil
		}
	}
	if in.state == kMasked && (name == "sub" || name == "add") {
		if c, ok := scalar(op.Operands[1-d]); ok && !math.IsInf(c, 0) && !math.IsNaN(c) {
			return kMasked, nil // a shift by a constant keeps −1e9 hidden
		}
	}
	return kRaw, nil
}

// causalOnce is check's answer, computed once per key.
func (t *tokenSlicer) causalOnce(key causalKey, check func() bool) bool {
	if v, ok := t.causalSeen[key]; ok {
		return v
	}
	if t.causalSeen == nil {
		t.causalSeen = map[causalKey]bool{}
	}
	v := check()
	t.causalSeen[key] = v
	return v
}

// causal reports whether hidden(idx) holds at every index of op's result whose key position
// is beyond its query position. The masks are data-independent; the other axes are checked at
// every index the masks vary over (a mask per head must be causal for each head).
func (t *tokenSlicer) causal(op *ir.Op, q, k int, masks []*ir.Value, hidden func(idx []int) bool) bool {
	shape := op.Results[0].Type.Shape
	r := len(shape)
	var lead []int
	for d := 0; d < r; d++ {
		if d == q || d == k {
			continue
		}
		for _, m := range masks {
			if a := alignedDim(d, r, m.Type.Rank()); a >= 0 && m.Type.Shape[a] > 1 {
				lead = append(lead, d)
				break
			}
		}
	}
	total := 1
	for _, d := range lead {
		total *= shape[d]
	}
	idx := make([]int, r)
	for n := 0; n < total; n++ {
		rem := n
		for i := len(lead) - 1; i >= 0; i-- {
			idx[lead[i]] = rem % shape[lead[i]]
			rem /= shape[lead[i]]
		}
		for i := 0; i < shape[q]; i++ {
			for j := i + 1; j < shape[k]; j++ {
				idx[q], idx[k] = i, j
				if !hidden(idx) {
					return false
				}
			}
		}
	}
	return true
}

// elemFn reads one element of a data-independent value at an index of its own shape.
type elemFn func(idx []int) float64

// at evaluates e (of value v) broadcast numpy-style to a result of rank r at index idx.
func at(e elemFn, v *ir.Value, r int, idx []int) float64 {
	shape := v.Type.Shape
	off := r - len(shape)
	own := make([]int, len(shape))
	for i, n := range shape {
		if n != 1 {
			own[i] = idx[i+off]
		}
	}
	return e(own)
}

// elems evaluates a data-independent value lazily, element by element, for the causal-mask
// check: constants, iota and the elementwise, broadcast, transpose, reshape and slice ops that
// build masks from them. Lazily, because a mask over a 2048-token sequence has 4M elements
// (beyond what constant folding materialises) and the check reads half of them once.
func (t *tokenSlicer) elems(v *ir.Value) (elemFn, bool) {
	if e, ok := t.consts[v]; ok {
		return e, e != nil
	}
	t.consts[v] = nil
	op := v.Def
	if op == nil || t.get(v).dep || len(op.Results) != 1 {
		return nil, false
	}
	var e elemFn
	shape := v.Type.Shape
	switch name := op.Name(); {
	case name == "constant":
		d, _ := op.Attrs.Get("value").(*ir.Dense)
		if d == nil || d.Elided {
			return nil, false
		}
		e = func(idx []int) float64 { return d.F64(linear(d.Type.Shape, idx)) }
	case name == "iota":
		axis := op.Attrs.Int("axis", 0)
		if axis < 0 {
			axis += len(shape)
		}
		e = func(idx []int) float64 { return float64(idx[axis]) }
	case op.Def.Has(ir.Elementwise):
		ins := make([]elemFn, len(op.Operands))
		for i, x := range op.Operands {
			f, ok := t.elems(x)
			if !ok {
				return nil, false
			}
			ins[i] = f
		}
		fn, ok := scalarOp(name, v.Type.DType)
		if !ok {
			return nil, false
		}
		r := len(shape)
		xs := op.Operands
		e = func(idx []int) float64 {
			var a [3]float64
			for i, f := range ins {
				a[i] = at(f, xs[i], r, idx)
			}
			return fn(a[:len(ins)])
		}
	case name == "broadcast" || name == "cast":
		in, ok := t.elems(op.Operands[0])
		if !ok {
			return nil, false
		}
		x := op.Operands[0]
		e = func(idx []int) float64 { return at(in, x, len(shape), idx) }
	case name == "transpose":
		in, ok := t.elems(op.Operands[0])
		if !ok {
			return nil, false
		}
		perm := op.Attrs.Ints("perm")
		e = func(idx []int) float64 {
			own := make([]int, len(perm))
			for i, p := range perm {
				own[p] = idx[i]
			}
			return in(own)
		}
	case name == "reshape":
		in, ok := t.elems(op.Operands[0])
		if !ok {
			return nil, false
		}
		from := op.Operands[0].Type.Shape
		e = func(idx []int) float64 { return in(unlinear(from, linear(shape, idx))) }
	case name == "slice":
		in, ok := t.elems(op.Operands[0])
		if !ok {
			return nil, false
		}
		sd, err := ir.SliceDims(op.Attrs, op.Operands[0].Type.Shape)
		if err != nil {
			return nil, false
		}
		e = func(idx []int) float64 {
			own := slices.Clone(idx)
			for a, d := range sd {
				own[a] = d.Start + idx[a]*d.Step
			}
			return in(own)
		}
	default:
		return nil, false
	}
	t.consts[v] = e
	return e, true
}

func linear(shape, idx []int) int {
	lin := 0
	for i, n := range shape {
		lin = lin*n + idx[i]
	}
	return lin
}

func unlinear(shape []int, lin int) []int {
	idx := make([]int, len(shape))
	for i := len(shape) - 1; i >= 0; i-- {
		idx[i] = lin % shape[i]
		lin /= shape[i]
	}
	return idx
}

// scalarOp is an elementwise op on float64 scalars, for the mask evaluator: the comparisons,
// logic, arithmetic and casts masks are built from.
func scalarOp(name string, dt ir.DType) (func(a []float64) float64, bool) {
	b := func(c bool) float64 {
		if c {
			return 1
		}
		return 0
	}
	switch name {
	case "greater":
		return func(a []float64) float64 { return b(a[0] > a[1]) }, true
	case "less":
		return func(a []float64) float64 { return b(a[0] < a[1]) }, true
	case "equal":
		return func(a []float64) float64 { return b(a[0] == a[1]) }, true
	case "and":
		return func(a []float64) float64 { return b(a[0] != 0 && a[1] != 0) }, true
	case "or":
		return func(a []float64) float64 { return b(a[0] != 0 || a[1] != 0) }, true
	case "not":
		return func(a []float64) float64 { return b(a[0] == 0) }, true
	case "where":
		return func(a []float64) float64 {
			if a[0] != 0 {
				return a[1]
			}
			return a[2]
		}, true
	case "add":
		return func(a []float64) float64 { return a[0] + a[1] }, true
	case "sub":
		return func(a []float64) float64 { return a[0] - a[1] }, true
	case "mul":
		return func(a []float64) float64 { return a[0] * a[1] }, true
	case "neg":
		return func(a []float64) float64 { return -a[0] }, true
	case "max":
		return func(a []float64) float64 { return math.Max(a[0], a[1]) }, true
	case "min":
		return func(a []float64) float64 { return math.Min(a[0], a[1]) }, true
	case "cast":
		switch {
		case dt == ir.Bool:
			return func(a []float64) float64 { return b(a[0] != 0) }, true
		case dt.IsInt():
			return func(a []float64) float64 { return math.Trunc(a[0]) }, true
		}
		return func(a []float64) float64 { return a[0] }, true
	}
	return nil, false
}

// emit replicates the forward once per slice.
func (t *tokenSlicer) emit(lengths []int, loss int) error {
	f := t.f
	M := len(lengths)
	clone := make([]map[*ir.Value]*ir.Value, M)
	var out []*ir.Op
	inputs := map[[3]int]*ir.Value{}
	argIdx := map[*ir.Value]int{}
	for i, a := range f.Args {
		argIdx[a] = i
	}
	sliceDef, concatDef := ir.MustLookup("slice"), ir.MustLookup("concat")
	newOp := func(def *ir.OpDef, operands []*ir.Value, attrs ir.Attrs, like *ir.Op, j int) (*ir.Op, error) {
		types := make([]ir.Type, len(operands))
		for i, x := range operands {
			types[i] = x.Type
		}
		rt, err := def.Infer(types, attrs.Sorted())
		if err != nil {
			return nil, ir.ErrorAt(t.m.Source, like.Loc, "token slicing: %s for slice %d: %v", def.Name, j, err)
		}
		op := ir.NewOp(def, operands, attrs.Sorted(), rt)
		op.CopyAnnotations(like)
		op.Slice, op.Loc = j, like.Loc
		out = append(out, op)
		return op, nil
	}
	static := staticOps(f)
	start := 0
	for j, l := range lengths {
		clone[j] = map[*ir.Value]*ir.Value{}
		end := start + l
		derived := map[string]*ir.Value{}
		for _, op := range f.Ops {
			if static[op] && j > 0 {
				// Positions and causal masks are the same for every slice: slice 0 computes
				// them once per micro-batch (as the unsliced model does) and each slice cuts
				// its rows, instead of every slice rebuilding a T×T mask.
				for _, r := range op.Results {
					clone[j][r] = clone[0][r]
				}
				continue
			}
			operands := make([]*ir.Value, len(op.Operands))
			for i, x := range op.Operands {
				if c, ok := clone[j][x]; ok {
					operands[i] = c
				} else if ai, isArg := argIdx[x]; isArg && t.get(x).dep {
					key := [3]int{ai, j, op.Stage}
					if _, ok := inputs[key]; !ok {
						s, err := newOp(sliceDef, []*ir.Value{x}, ir.Attrs{{Name: "starts", Value: ir.Ints(start)},
							{Name: "ends", Value: ir.Ints(end)}, {Name: "axes", Value: ir.Ints(SeqAxis)}}, op, j)
						if err != nil {
							return err
						}
						s.Results[0].Name = fmt.Sprintf("%s.t%d", x.Name, j)
						inputs[key] = s.Results[0]
					}
					operands[i] = inputs[key]
				} else {
					operands[i] = x
				}
				act, ok := t.actions[op][i]
				if !ok {
					continue
				}
				dkey := fmt.Sprintf("%p/%d/%d/%d/%d", x, act.kind, act.q, act.k, act.prefix)
				if v, ok := derived[dkey]; ok {
					operands[i] = v
					continue
				}
				switch act.kind {
				case actSlice:
					var axes, starts, ends []int
					if act.q >= 0 {
						axes, starts, ends = append(axes, act.q), append(starts, start), append(ends, end)
					}
					if act.k >= 0 {
						axes, starts, ends = append(axes, act.k), append(starts, 0), append(ends, end)
					}
					s, err := newOp(sliceDef, []*ir.Value{operands[i]}, ir.Attrs{{Name: "starts", Value: ir.Ints(starts...)},
						{Name: "ends", Value: ir.Ints(ends...)}, {Name: "axes", Value: ir.Ints(axes...)}}, op, j)
					if err != nil {
						return err
					}
					operands[i] = s.Results[0]
				case actPrefix:
					if j == 0 {
						break
					}
					pieces := make([]*ir.Value, j+1)
					for p := range pieces {
						pieces[p] = clone[p][x]
					}
					c, err := newOp(concatDef, pieces, ir.Attrs{{Name: "axis", Value: ir.Int(act.prefix)}}, op, j)
					if err != nil {
						return err
					}
					// The keys (values) of slices 0..j: recomputed by the backward from the
					// pieces each slice keeps, rather than stashed once per slice.
					c.Remat = true
					if x.Name != "" {
						c.Results[0].Name = fmt.Sprintf("%s.ctx%d", x.Name, j)
					}
					operands[i] = c.Results[0]
				}
				derived[dkey] = operands[i]
			}
			attrs := op.Attrs
			if q, ok := t.shapeQ[op]; ok {
				attrs = patchShape(attrs, q, l)
			}
			if k, ok := t.shapeK[op]; ok {
				attrs = patchShape(attrs, k, end)
			}
			c, err := newOp(op.Def, operands, attrs, op, j)
			if err != nil {
				return err
			}
			for i, r := range op.Results {
				if r.Name != "" {
					c.Results[i].Name = fmt.Sprintf("%s.t%d", r.Name, j)
				}
				clone[j][r] = c.Results[i]
			}
		}
		start = end
	}
	// Results: the loss is the sum of the slices' losses, each a mean over its tokens
	// weighted by its share of the sequence (or a plain sum of sums); a per-token result is
	// the concatenation of the slices'.
	last := M - 1
	for i, r := range f.Results {
		if r.Def == nil {
			continue // an input or parameter returned as it is
		}
		like := r.Def
		if i == loss {
			tok := t.get(r).tok
			var total *ir.Value
			for j, l := range lengths {
				v := clone[j][r]
				if tok == tokMean && M > 1 {
					w, err := newOp(ir.MustLookup("constant"), nil, ir.Attrs{{Name: "value", Value: ir.Splat(ir.Type{DType: r.Type.DType}, float64(l)/float64(t.T))}}, like, last)
					if err != nil {
						return err
					}
					s, err := newOp(ir.MustLookup("mul"), []*ir.Value{v, w.Results[0]}, nil, like, last)
					if err != nil {
						return err
					}
					v = s.Results[0]
				}
				if total == nil {
					total = v
					continue
				}
				s, err := newOp(ir.MustLookup("add"), []*ir.Value{total, v}, nil, like, last)
				if err != nil {
					return err
				}
				total = s.Results[0]
			}
			total.Name = r.Name
			f.Results[i] = total
			continue
		}
		if !t.get(r).dep {
			f.Results[i] = clone[last][r]
			continue
		}
		pieces := make([]*ir.Value, M)
		for j := range pieces {
			pieces[j] = clone[j][r]
		}
		c, err := newOp(concatDef, pieces, ir.Attrs{{Name: "axis", Value: ir.Int(t.get(r).q)}}, like, last)
		if err != nil {
			return err
		}
		c.Results[0].Name = r.Name
		f.Results[i] = c.Results[0]
	}
	f.Ops = out
	RemoveDead(f)
	return nil
}

// staticOps are the ops computed from constants and iota alone (positions, causal masks):
// the same in every slice and every micro-batch. Ops that read a parameter are not among them
// (a 16-bit copy of a weight is recomputed per slice rather than held across slices).
func staticOps(f *ir.Func) map[*ir.Op]bool {
	static := map[*ir.Op]bool{}
	for _, op := range f.Ops {
		ok := op.Def.Has(ir.Pure) && len(op.Results) > 0
		for _, x := range op.Operands {
			ok = ok && x.Def != nil && static[x.Def]
		}
		static[op] = ok
	}
	return static
}

// patchShape sets entry d of a reshape's or broadcast's shape attribute to n (an inferred −1
// stays).
func patchShape(attrs ir.Attrs, d, n int) ir.Attrs {
	shape := attrs.Ints("shape")
	if d >= len(shape) || shape[d] == -1 {
		return attrs
	}
	shape = slices.Clone(shape)
	shape[d] = n
	return attrs.Set("shape", ir.Ints(shape...))
}
