package passes

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
)

// SliceCostModel prices one token slice of a partitioned causal model on the cost model:
// the time of its forward and backward on each pipeline stage as a function of the
// micro-batch size b (sequences), the slice length l and its context c (the tokens of the
// earlier slices). It prices the ops the token-slice pass would emit — each op's tensors
// shrunk to the slice, attention's key axis to the c+l tokens of context, the K/V prefix
// copied — with the same roofline as CostOf, plus the slice's boundary transfers. This is
// what TeraPipe's dynamic program needs: t(b, l, c) on the bottleneck stage.
type SliceCostModel struct {
	T, B   int // sequence length and micro-batch size of the module it was built from
	Stages int
	dev    DeviceProfile
	// groups of identical stages (the middle layers of a transformer): each is priced once.
	groups  [][]sliceOp
	xfer    [][]tensorTerm // per group: values entering the stage from another
	stageOf []int          // stage → its group
}

// tensorTerm is the byte (or element) count of one tensor of a sliced op, as a function of
// (b, l, c): base · (b/B)^batch · (l/T)^query · ((c+l)/T)^key.
type tensorTerm struct {
	base              float64
	batch, query, key bool
}

func (t tensorTerm) at(sb, sl, sk float64) float64 {
	v := t.base
	if t.batch {
		v *= sb
	}
	if t.query {
		v *= sl
	}
	if t.key {
		v *= sk
	}
	return v
}

// sliceOp is one op of a stage in scalable form.
type sliceOp struct {
	kind        int // opCompute, opCollective, opCopy (a K/V prefix's concatenation)
	matrix      bool
	hasWeights  bool
	perElem     float64
	results     []tensorTerm // elements
	contraction tensorTerm   // matmul: the contracted size
	bytes       []tensorTerm // operands and results
	coll        string       // collective name
	grad, axis  string
	n           int
	paramOp     bool     // collective on a weight: backward is weight-gradient time
	dtype       ir.DType // of the result: the matmul rate
	once        bool     // a position or mask op: computed by the first slice only
	// As CostOf prices the op: a matmul's result columns (n: M = results/n) for the GEMM
	// efficiency curve with the contraction as K; attention's head dim (its rows are
	// results, its keys the contraction), whether it is causal; whether it launches a kernel.
	cols     tensorTerm
	headDim  int
	causal   bool
	launched bool
}

const (
	opCompute = iota
	opCollective
	opCopy
)

// NewSliceCostModel builds the slice cost model of m's @forward after partition on device
// dev, checking on the way that the model can be cut into token slices (the errors are the
// token-slice pass's).
func NewSliceCostModel(m *ir.Module, dev DeviceProfile) (*SliceCostModel, error) {
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return nil, fmt.Errorf("module has no @%s", ir.ForwardFunc)
	}
	t, err := analyseTokens(m, f)
	if err != nil {
		return nil, err
	}
	B := 0
	for i, a := range f.Args {
		if f.ArgAttrs[i].Has(ir.AttrInput) {
			B = a.Type.Shape[0]
			break
		}
	}
	param := paramDerived(f)
	axisSize := func(name string) int {
		for _, a := range m.Mesh() {
			if a.Name == name {
				return a.Size
			}
		}
		return 1
	}
	term := func(v *ir.Value, elems bool) tensorTerm {
		base := float64(v.Type.NumElements())
		if !elems {
			base = float64(v.Type.Bytes())
		}
		in := t.get(v)
		if !in.dep || in.tok != tokNone {
			return tensorTerm{base: base}
		}
		return tensorTerm{base: base, batch: in.q != 0 && B > 0 && v.Type.Shape[0] == B, query: true, key: in.k >= 0}
	}
	operandTerm := func(op *ir.Op, i int) tensorTerm {
		x := op.Operands[i]
		tt := term(x, false)
		if act, ok := t.actions[op][i]; ok {
			switch act.kind {
			case actSlice:
				tt.query, tt.key = act.q >= 0, act.k >= 0
			case actPrefix:
				tt.query, tt.key = false, true
			}
		}
		return tt
	}
	static := staticOps(f)
	stages := 0
	byStage := map[int][]sliceOp{}
	home := map[*ir.Value]int{}
	xfer := map[int][]tensorTerm{}
	seen := map[[2]any]bool{}
	for _, op := range f.Ops {
		st := opStage(op)
		stages = max(stages, st+1)
		for _, r := range op.Results {
			home[r] = st
		}
		for i, x := range op.Operands {
			if hs, ok := home[x]; ok && hs != st && t.get(x).dep && !seen[[2]any{x, st}] {
				seen[[2]any{x, st}] = true
				xfer[st] = append(xfer[st], operandTerm(op, i))
			}
			if act, ok := t.actions[op][i]; ok && act.kind == actPrefix {
				// The K/V of slices 0..j joined: read and written once in the forward,
				// again when the backward recomputes it and splits its gradient.
				b := operandTerm(op, i)
				byStage[st] = append(byStage[st], sliceOp{kind: opCopy, bytes: []tensorTerm{b, b}})
			}
		}
		so := sliceOp{kind: opCompute, once: static[op], launched: launches(op)}
		if op.Def.Has(ir.Collective) && len(op.Operands) == 1 && len(op.Results) == 1 {
			so = sliceOp{kind: opCollective, coll: op.Def.Name, grad: op.Attrs.Str("grad", "reduce_scatter"), axis: op.Attrs.Str("axis", ""),
				n: axisSize(op.Attrs.Str("axis", "")), paramOp: param[op.Operands[0]],
				bytes: []tensorTerm{operandTerm(op, 0), term(op.Results[0], false)}}
			if so.coll == "copy_to_axis" && op.Operands[0].Def == nil && param[op.Operands[0]] {
				continue // summed once per step (see CostOf)
			}
			byStage[st] = append(byStage[st], so)
			continue
		}
		for i := range op.Operands {
			so.bytes = append(so.bytes, operandTerm(op, i))
			so.hasWeights = so.hasWeights || param[op.Operands[i]]
		}
		for _, r := range op.Results {
			so.bytes = append(so.bytes, term(r, false))
			so.results = append(so.results, term(r, true))
			so.dtype = r.Type.DType
		}
		switch op.Def.Name {
		case "matmul":
			so.matrix = true
			a := op.Operands[0]
			d := a.Type.Rank() - 1
			if op.Attrs.Bool("transpose_a", false) && d >= 1 {
				d--
			}
			so.contraction = tensorTerm{base: float64(a.Type.Shape[d])}
			if in := t.get(a); in.dep && in.k == d {
				so.contraction.key = true // probabilities × values: over the context
			}
			r := op.Results[0]
			so.cols = tensorTerm{base: 1}
			if n := r.Type.Rank(); n > 0 {
				so.cols.base = float64(r.Type.Shape[n-1])
				in := t.get(r)
				so.cols.key = in.dep && in.tok == tokNone && in.k == n-1 // the scores: one column per key
			}
		case "attention":
			// Two products over the context per output row: 2·rows·context·(D + Dv).
			q, k, v := op.Operands[0].Type.Shape, op.Operands[1].Type.Shape, op.Operands[2].Type.Shape
			rows := term(op.Results[1], true) // lse: one element per query row and head
			so.matrix, so.results = true, []tensorTerm{rows}
			so.contraction = tensorTerm{base: float64(k[len(k)-2]), key: true}
			so.headDim, so.cols = q[len(q)-1], tensorTerm{base: float64(q[len(q)-1] + v[len(v)-1])}
			so.causal = op.Attrs.Bool("causal", false)
		case "softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy":
			so.perElem = 5
		case "gelu", "silu", "exp", "tanh", "sigmoid", "erf":
			so.perElem = 8
		default:
			so.perElem = 1
		}
		byStage[st] = append(byStage[st], so)
	}
	sc := &SliceCostModel{T: t.T, B: B, Stages: max(stages, 1), dev: dev}
	sigs := map[string]int{}
	for s := 0; s < sc.Stages; s++ {
		sig := fmt.Sprintf("%v|%v", byStage[s], xfer[s])
		g, ok := sigs[sig]
		if !ok {
			g = len(sc.groups)
			sigs[sig] = g
			sc.groups = append(sc.groups, byStage[s])
			sc.xfer = append(sc.xfer, xfer[s])
		}
		sc.stageOf = append(sc.stageOf, g)
	}
	return sc, nil
}

// SliceTimes are one stage's seconds for one slice: forward, input gradient and weight
// gradient (collectives included), and the incoming transfers, forward and backward.
type SliceTimes struct{ F, I, W, Transfer float64 }

// Parts prices one slice on one stage.
func (sc *SliceCostModel) Parts(stage, b, l, c int) SliceTimes {
	return sc.parts(sc.stageOf[stage], b, l, c)
}

// Group is the group of identical stages stage belongs to: stages of one group price every
// slice alike (the planner caches by it).
func (sc *SliceCostModel) Group(stage int) int { return sc.stageOf[stage] }

// Time is the forward plus backward seconds of one slice of l tokens after c tokens of
// context, for a micro-batch of b sequences, on the slowest stage (its incoming transfers,
// forward and backward, included).
func (sc *SliceCostModel) Time(b, l, c int) float64 {
	worst := 0.0
	for g := range sc.groups {
		p := sc.parts(g, b, l, c)
		worst = max(worst, p.F+p.I+p.W+p.Transfer)
	}
	return worst
}

func (sc *SliceCostModel) parts(g, b, l, c int) SliceTimes {
	sb, sl, sk := float64(b)/float64(max(sc.B, 1)), float64(l)/float64(sc.T), float64(c+l)/float64(sc.T)
	var p SliceTimes
	for _, o := range sc.groups[g] {
		if o.once && c > 0 {
			continue
		}
		switch o.kind {
		case opCopy:
			// Joined in the forward; recomputed, and its gradient split, in the backward:
			// a kernel each.
			bytes := (o.bytes[0].at(sb, sl, sk) + o.bytes[1].at(sb, sl, sk)) / sc.dev.MemBandwidth
			p.F += bytes + sc.dev.LaunchSeconds
			p.I += 2 * (bytes + sc.dev.LaunchSeconds)
		case opCollective:
			f, back := sc.dev.collectiveTimes(o.coll, o.grad, o.bytes[0].at(sb, sl, sk), o.bytes[1].at(sb, sl, sk), o.n, o.axis)
			p.F += f
			if o.paramOp {
				p.W += back
			} else {
				p.I += back
			}
		default:
			var flops, bytes float64
			for _, r := range o.results {
				flops += r.at(sb, sl, sk)
			}
			eff, backward := 1.0, 1.0
			switch {
			case o.matrix && o.headDim > 0: // attention, priced as CostOf prices it
				rows, kv := flops, o.contraction.at(sb, sl, sk)
				flops = 2 * rows * kv * o.cols.base
				eff, backward = sc.dev.GEMMEfficiency(int(rows), int(kv), o.headDim), AttentionBackwardFactor
				if o.causal && l > 1 {
					eff *= 2
				}
			case o.matrix:
				k, n := o.contraction.at(sb, sl, sk), max(o.cols.at(sb, sl, sk), 1)
				eff = sc.dev.GEMMEfficiency(int(flops/n), int(n), int(k))
				flops = 2 * flops * k
			default:
				flops *= o.perElem
			}
			for _, x := range o.bytes {
				bytes += x.at(sb, sl, sk)
			}
			f, i, w := sc.dev.opTimes(flops/eff, bytes, backward, o.matrix, o.hasWeights, o.dtype, o.launched)
			p.F, p.I, p.W = p.F+f, p.I+i, p.W+w
		}
	}
	for _, x := range sc.xfer[g] {
		p.Transfer += 2 * (sc.dev.LinkLatency + x.at(sb, sl, sk)/sc.dev.LinkBandwidth)
	}
	return p
}

// analyseTokens runs the token-slice pass's analysis of f without rewriting it.
func analyseTokens(m *ir.Module, f *ir.Func) (*tokenSlicer, error) {
	return analyseSequence(m, f, 0)
}

// analyseSequence is analyseTokens for token slicing (cp 0) or context parallelism over cp
// ranks (cp-partition).
func analyseSequence(m *ir.Module, f *ir.Func, cp int) (*tokenSlicer, error) {
	what := "token slicing"
	if cp > 0 {
		what = fmt.Sprintf("--cp %d", cp)
	}
	t := &tokenSlicer{cp: cp, m: m, f: f, info: map[*ir.Value]*seqInfo{}, actions: map[*ir.Op]map[int]operandAction{},
		shapeQ: map[*ir.Op]int{}, shapeK: map[*ir.Op]int{}, consts: map[*ir.Value]elemFn{}}
	T, err := SequenceLength(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, strings.Replace(err.Error(), "token slicing needs", "it needs", 1))
	}
	t.T = T
	for i, a := range f.Args {
		if f.ArgAttrs[i].Has(ir.AttrInput) {
			t.info[a] = &seqInfo{dep: true, q: SeqAxis, k: -1}
		}
	}
	for _, op := range f.Ops {
		if err := t.analyse(op); err != nil {
			return nil, err
		}
	}
	for i, r := range f.Results {
		in := t.get(r)
		switch {
		case f.ResultAttrs[i].Has(ir.AttrLoss):
			if in.tok == tokNone {
				return nil, fmt.Errorf("%s: the loss must be a mean or a sum over the tokens (a cross_entropy or mse, or a reduce_mean or reduce_sum over the sequence)", what)
			}
		case in.dep && in.q >= 0 && in.k < 0 && in.tok == tokNone:
		case !in.dep:
		default:
			return nil, fmt.Errorf("%s: result %d of @%s is not laid out by token", what, i, f.Name)
		}
	}
	return t, nil
}
