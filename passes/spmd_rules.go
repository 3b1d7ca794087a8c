package passes

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// The sharding rules of tensor parallelism (see doc.go): one table keyed by op, consulted by
// shard-propagate to choose each result's layout and by spmd-partition to learn what layout
// each operand must be brought to. Inside a function only the tp axis shards values (data
// parallelism places micro-batches, it does not split tensors), so a layout is one optional
// split dim and a partial-sum flag over tp.

// lay is a value's layout over the tp axis: dim is the dim split into tp equal blocks (the
// block index is the rank's tp coordinate), or -1; partial says every rank holds a partial
// sum of the value. A value is never both split and partial.
type lay struct {
	dim     int
	partial bool
}

var replicated = lay{dim: -1}

func splitAt(d int) lay { return lay{dim: d} }

var partialSum = lay{dim: -1, partial: true}

func (l lay) String() string {
	switch {
	case l.partial:
		return "partial"
	case l.dim >= 0:
		return fmt.Sprintf("split(%d)", l.dim)
	}
	return "replicated"
}

// sharding is the IR annotation for l on a value of the given rank (nil when replicated).
func (l lay) sharding(rank int, axis string) *ir.Sharding {
	if l.dim < 0 && !l.partial {
		return nil
	}
	s := &ir.Sharding{Dims: make([][]string, rank)}
	if l.dim >= 0 {
		s.Dims[l.dim] = []string{axis}
	}
	if l.partial {
		s.Partial = []string{axis}
	}
	return s
}

// layOf reads an IR sharding over axis back into a layout.
func layOf(s *ir.Sharding, axis string) (lay, error) {
	l := replicated
	if s == nil {
		return l, nil
	}
	for d, axes := range s.Dims {
		for _, a := range axes {
			if a != axis {
				return l, fmt.Errorf("shard %s splits dim %d over %s; inside a function only %s splits tensors (data parallelism places micro-batches: use --dp, and --zero for sharded optimizer state)", s, d, a, axis)
			}
			l.dim = d
		}
	}
	for _, a := range s.Partial {
		if a != axis {
			return l, fmt.Errorf("shard %s is partial over %s; only %s partial sums exist inside a function", s, a, axis)
		}
		l.partial = true
	}
	if l.partial && l.dim >= 0 {
		return l, fmt.Errorf("shard %s is both split and partial over %s", s, axis)
	}
	return l, nil
}

// ruleCtx is what a rule sees: the op's operand layouts, the tp size and whether sequence
// parallelism is on.
type ruleCtx struct {
	op      *ir.Op
	in      []lay
	tp      int
	sp      bool
	relaxed bool     // pretend tp divides every dim (see propagateLayouts)
	misfits [][2]int // (dim, size) of result dims tp did not divide
}

// spmdRule returns the layout each operand must have and the layout of each result.
type spmdRule func(c *ruleCtx) (req, out []lay)

func shapeOf(v *ir.Value) ir.Shape { return v.Type.Shape }

// fits reports whether dim d of shape s splits into tp blocks, and records the dims that do
// not (for the annotation pass's error messages).
func (c *ruleCtx) fits(s ir.Shape, d int) bool {
	if d < 0 || d >= len(s) {
		return false
	}
	if s[d]%c.tp == 0 || c.relaxed {
		return true
	}
	c.misfits = append(c.misfits, [2]int{d, s[d]})
	return false
}

// shReplicateAll is the rule for ops without one: every operand whole, every result whole.
// Always correct; the partitioner gathers and reduces what it must.
func shReplicateAll(c *ruleCtx) (req, out []lay) {
	return fill(len(c.op.Operands), replicated), fill(len(c.op.Results), replicated)
}

func fill(n int, l lay) []lay {
	out := make([]lay, n)
	for i := range out {
		out[i] = l
	}
	return out
}

// linearIn says in which operands an elementwise op is linear with the others fixed: a
// partial sum can flow through it without being reduced first.
func linearIn(name string, n int) []bool {
	lin := make([]bool, n)
	switch name {
	case "add", "sub":
		for i := range lin {
			lin[i] = true // linear in all operands jointly
		}
	case "neg":
		lin[0] = true
	case "mul":
		lin[0], lin[1] = true, true // in either one, the other fixed
	case "div":
		lin[0] = true
	}
	return lin
}

// shElementwise: operands broadcast (numpy, right-aligned) to the result. The result is
// split where a whole-sized operand dim is split (the first such operand wins; the others
// are brought to it, size-1 dims stay whole). A partial sum flows through ops linear in it
// (a sum of partial sums; a partial sum times a whole value); anywhere else it is reduced —
// under sequence parallelism into a split of the sequence dim (dim 1 of [batch, seq, …]
// activations), Megatron's reduce-scatter, otherwise into a whole value.
func shElementwise(c *ruleCtx) (req, out []lay) {
	res := c.op.Results[0]
	rs := shapeOf(res)
	R := len(rs)
	align := func(i int) int { return R - len(shapeOf(c.op.Operands[i])) }
	chosen := -1
	for i, l := range c.in {
		if l.dim >= 0 {
			if j := l.dim + align(i); shapeOf(c.op.Operands[i])[l.dim] == rs[j] {
				chosen = j
				break
			}
		}
	}
	// Partial sums: can the result stay partial?
	lin := linearIn(c.op.Name(), len(c.in))
	nPartial, linearOK := 0, chosen < 0
	for i, l := range c.in {
		if l.partial {
			nPartial++
			linearOK = linearOK && lin[i]
		}
	}
	switch c.op.Name() {
	case "add", "sub":
		linearOK = linearOK && nPartial == len(c.in)
	case "mul", "div", "neg":
		linearOK = linearOK && nPartial == 1
	}
	keepPartial := nPartial > 0 && linearOK
	if nPartial > 0 && !keepPartial && chosen < 0 && c.sp && R >= 3 && c.fits(rs, 1) && res.Type.DType.IsFloat() {
		chosen = 1 // sequence parallelism: reduce-scatter along the sequence
	}
	req = make([]lay, len(c.in))
	for i := range c.in {
		req[i] = replicated
		s := shapeOf(c.op.Operands[i])
		if d := chosen - align(i); chosen >= 0 && d >= 0 && s[d] == rs[chosen] {
			req[i] = splitAt(d)
		}
		if keepPartial {
			req[i].partial = c.in[i].partial
		}
	}
	if keepPartial {
		return req, []lay{partialSum}
	}
	return req, []lay{{dim: chosen}}
}

// shMatmul: a [..., M, K] @ b [..., K, N] (+ bias [N]), transposes swapping the last two
// dims. K split on both sides gives a partial sum (row-parallel); K split on one side splits
// the other to match. M comes from a and N from b (column-parallel); when both would use the
// axis, b (usually a weight, whose layout is fixed) wins and a is gathered. Batch dims follow
// the elementwise rule. A split K with a bias (the form ONNX raising gives a Linear) is
// reduced inside the op so that the bias is added once: into a whole result, or under
// sequence parallelism into a split of the sequence dim (Megatron's reduce-scatter leaving
// the row-parallel layer, as shElementwise does for the bias added by a separate op).
func shMatmul(c *ruleCtx) (req, out []lay) {
	a, b := c.op.Operands[0], c.op.Operands[1]
	as, bs := shapeOf(a), shapeOf(b)
	if len(as) < 2 || len(bs) < 2 {
		return shReplicateAll(c)
	}
	ta, tb := c.op.Attrs.Bool("transpose_a", false), c.op.Attrs.Bool("transpose_b", false)
	aM, aK := len(as)-2, len(as)-1
	if ta {
		aM, aK = aK, aM
	}
	bK, bN := len(bs)-2, len(bs)-1
	if tb {
		bK, bN = bN, bK
	}
	rs := shapeOf(c.op.Results[0])
	R := len(rs)
	la, lb := c.in[0], c.in[1]
	ra, rb := replicated, replicated
	res := replicated
	switch {
	case la.dim == aK || lb.dim == bK: // row-parallel: both sides split along K
		ra, rb = splitAt(aK), splitAt(bK)
		res = partialSum
	case lb.dim == bN:
		rb, res = splitAt(bN), splitAt(R-1)
	case la.dim == aM:
		ra, res = splitAt(aM), splitAt(R-2)
	case la.dim >= 0 && la.dim < len(as)-2 && as[la.dim] == rs[la.dim+R-len(as)]:
		ra, res = splitAt(la.dim), splitAt(la.dim+R-len(as))
		if d := la.dim + R - len(as) - (R - len(bs)); d >= 0 && bs[d] == rs[la.dim+R-len(as)] {
			rb = splitAt(d)
		}
	case lb.dim >= 0 && lb.dim < len(bs)-2 && bs[lb.dim] == rs[lb.dim+R-len(bs)]:
		rb, res = splitAt(lb.dim), splitAt(lb.dim+R-len(bs))
		if d := lb.dim + R - len(bs) - (R - len(as)); d >= 0 && as[d] == rs[lb.dim+R-len(bs)] {
			ra = splitAt(d)
		}
	}
	req = []lay{ra, rb}
	if len(c.op.Operands) == 3 {
		rbias := replicated
		if res.dim == R-1 {
			rbias = splitAt(len(shapeOf(c.op.Operands[2])) - 1)
			if shapeOf(c.op.Operands[2])[rbias.dim] != rs[R-1] {
				rbias = replicated
			}
		}
		req = append(req, rbias)
		if res.partial {
			res = replicated // reduced before the bias is added
			if c.sp && R >= 3 && c.fits(rs, 1) && c.op.Results[0].Type.DType.IsFloat() {
				res = splitAt(1)
			}
		}
	}
	return req, []lay{res}
}

// shReshape: a split dim keeps its split when it is the outermost non-unit dim of a group
// of dims whose product the reshape preserves, and the outermost non-unit dim of the
// matching output group divides by tp: the blocks of the flattened group are the same.
// Anything else is gathered first. Partial sums pass (a reshape is linear).
func shReshape(c *ruleCtx) (req, out []lay) {
	l := c.in[0]
	if l.dim < 0 {
		return []lay{l}, []lay{l}
	}
	in, res := shapeOf(c.op.Operands[0]), shapeOf(c.op.Results[0])
	if g, ok := reshapeGroup(in, res, l.dim); ok && c.fits(res, g) {
		return []lay{l}, []lay{splitAt(g)}
	}
	return []lay{replicated}, []lay{replicated}
}

// reshapeGroup finds the output dim that carries input dim d's blocks: d must be the first
// non-unit dim of its group (input and output dims whose running products meet), and the
// answer is the first non-unit output dim of the same group.
func reshapeGroup(in, out ir.Shape, d int) (int, bool) {
	i, j := 0, 0
	for i < len(in) || j < len(out) {
		// Skip unit dims on both sides: they belong to no group.
		for i < len(in) && in[i] == 1 {
			if i == d {
				return 0, false
			}
			i++
		}
		for j < len(out) && out[j] == 1 {
			j++
		}
		if i >= len(in) || j >= len(out) {
			return 0, false
		}
		gi, gj := i, j
		pi, pj := in[i], out[j]
		i++
		j++
		for pi != pj {
			if pi < pj {
				if i >= len(in) {
					return 0, false
				}
				pi *= in[i]
				i++
			} else {
				if j >= len(out) {
					return 0, false
				}
				pj *= out[j]
				j++
			}
		}
		if d >= gi && d < i {
			return gj, d == gi
		}
	}
	return 0, false
}

func shTranspose(c *ruleCtx) (req, out []lay) {
	l := c.in[0]
	if l.dim < 0 {
		return []lay{l}, []lay{l}
	}
	return []lay{l}, []lay{splitAt(slices.Index(c.op.Attrs.Ints("perm"), l.dim))}
}

// shBroadcast: dims that are broadcast from size 1 are whole; the others keep their split.
func shBroadcast(c *ruleCtx) (req, out []lay) {
	l := c.in[0]
	in, res := shapeOf(c.op.Operands[0]), shapeOf(c.op.Results[0])
	if l.dim < 0 {
		return []lay{l}, []lay{l}
	}
	if j := l.dim + len(res) - len(in); in[l.dim] == res[j] {
		return []lay{l}, []lay{splitAt(j)}
	}
	return []lay{replicated}, []lay{replicated}
}

// shSlice: a dim cut short must be whole; a split dim taken entirely keeps its split.
func shSlice(c *ruleCtx) (req, out []lay) {
	l := c.in[0]
	in := shapeOf(c.op.Operands[0])
	dims, err := ir.SliceDims(c.op.Attrs, in)
	if err != nil || l.dim < 0 {
		return []lay{l}, []lay{l}
	}
	if d := dims[l.dim]; d.Size == in[l.dim] && d.Step == 1 {
		return []lay{l}, []lay{l}
	}
	return []lay{replicated}, []lay{replicated}
}

// shAxisWhole is for ops that work along one dim (split, concat, softmax, log_softmax):
// that dim must be whole; the others keep the first operand's split.
func shAxisWhole(def int, keepPartial bool) spmdRule {
	return func(c *ruleCtx) (req, out []lay) {
		x := c.op.Operands[0]
		axis, err := ir.NormAxis(c.op.Attrs.Int("axis", def), x.Type.Rank())
		if err != nil {
			return shReplicateAll(c)
		}
		l := replicated
		for _, in := range c.in {
			if in.dim >= 0 && in.dim != axis {
				l = splitAt(in.dim)
				break
			}
		}
		if keepPartial && l.dim < 0 && c.in[0].partial && !slices.ContainsFunc(c.in, func(x lay) bool { return !x.partial }) {
			l = partialSum
		}
		return fill(len(c.op.Operands), l), fill(len(c.op.Results), l)
	}
}

// shAttention splits attention by heads, Megatron's rule: each rank computes the attention
// of its block of query heads, and under grouped-query attention its block of kv heads,
// which are exactly the kv heads its query heads read (query head h reads kv head
// h/(Hq/Hkv), and both blocks are the rank's tp coordinate's). A split leading (batch) dim
// carries through alike. The sequence and head dims stay whole; when tp does not divide both
// head counts, or an operand is a partial sum, everything is replicated. A mask follows the
// split where it has the dim, else it is replicated (it broadcasts).
func shAttention(c *ruleCtx) (req, out []lay) {
	q, k := c.op.Operands[0], c.op.Operands[1]
	r := q.Type.Rank()
	d := -1
	for _, l := range c.in[:3] {
		if l.partial {
			return shReplicateAll(c)
		}
		if l.dim >= 0 && l.dim <= r-3 {
			d = l.dim
			break
		}
	}
	if d < 0 || !c.fits(q.Type.Shape, d) || !c.fits(k.Type.Shape, d) {
		return shReplicateAll(c)
	}
	req = []lay{splitAt(d), splitAt(d), splitAt(d)}
	if len(c.op.Operands) == 4 {
		m := c.op.Operands[3].Type.Shape
		ml := replicated
		if md := alignedDim(d, r, len(m)); md >= 0 && m[md] != 1 {
			ml = splitAt(md)
		}
		req = append(req, ml)
	}
	return req, []lay{splitAt(d), splitAt(d)}
}

// shNorm (layer_norm, rms_norm): the normalised dims (axis…) are whole; the scale and bias
// are whole; the rest of x keeps its split. A partial sum is reduced first, under sequence
// parallelism into a split of the sequence dim.
func shNorm(c *ruleCtx) (req, out []lay) {
	x := c.op.Operands[0]
	axis, err := ir.NormAxis(c.op.Attrs.Int("axis", -1), x.Type.Rank())
	l := c.in[0]
	xs := x.Type.Shape
	switch {
	case err != nil || l.dim >= axis:
		l = replicated
	case l.partial && c.sp && len(xs) >= 3 && axis > 1 && c.fits(xs, 1):
		l = splitAt(1) // sequence parallelism: reduce-scatter into the norm
	case l.partial:
		l = replicated
	}
	req = fill(len(c.op.Operands), replicated)
	req[0] = l
	return req, []lay{l}
}

// shReduce: reduce_sum and reduce_mean of a split dim give a partial sum (the partitioner
// scales a mean by the local share); partial sums pass; kept dims keep their split.
// Other reductions (max) need the reduced dims whole.
func shReduce(c *ruleCtx) (req, out []lay) {
	x := c.op.Operands[0]
	red, err := ir.ReduceAxes(c.op.Attrs, x.Type.Rank())
	if err != nil {
		return shReplicateAll(c)
	}
	linear := c.op.Name() == "reduce_sum" || c.op.Name() == "reduce_mean"
	l := c.in[0]
	switch {
	case l.partial && linear:
		return []lay{l}, []lay{partialSum}
	case l.partial:
		return []lay{replicated}, []lay{replicated}
	case l.dim < 0:
		return []lay{l}, []lay{l}
	case red[l.dim] && linear:
		return []lay{l}, []lay{partialSum}
	case red[l.dim]:
		return []lay{replicated}, []lay{replicated}
	}
	d := l.dim
	if !c.op.Attrs.Bool("keepdims", false) {
		for i := 0; i < l.dim; i++ {
			if red[i] {
				d--
			}
		}
	}
	return []lay{l}, []lay{splitAt(d)}
}

// shGather: gathering rows of a table split along the gathered dim is the vocab-parallel
// embedding — each rank looks up the indices in its block and contributes zeros for the
// others, a partial sum. Otherwise the table's other dims and the indices' dims keep their
// splits.
func shGather(c *ruleCtx) (req, out []lay) {
	data, idx := c.op.Operands[0], c.op.Operands[1]
	axis, err := ir.NormAxis(c.op.Attrs.Int("axis", 0), data.Type.Rank())
	if err != nil {
		return shReplicateAll(c)
	}
	ld, li := c.in[0], c.in[1]
	switch {
	case ld.partial || li.partial:
		return shReplicateAll(c)
	case ld.dim == axis:
		return []lay{ld, replicated}, []lay{partialSum}
	case ld.dim > axis:
		return []lay{ld, replicated}, []lay{splitAt(ld.dim + idx.Type.Rank() - 1)}
	case ld.dim >= 0:
		return []lay{ld, replicated}, []lay{ld}
	case li.dim >= 0:
		return []lay{replicated, li}, []lay{splitAt(axis + li.dim)}
	}
	return shReplicateAll(c)
}

// shCrossEntropy: logits split along the classes give the vocab-parallel cross-entropy
// (the partitioner expands it); everything else whole.
func shCrossEntropy(c *ruleCtx) (req, out []lay) {
	logits := c.op.Operands[0]
	if l := c.in[0]; l.dim == logits.Type.Rank()-1 && !l.partial {
		return []lay{l, replicated}, []lay{replicated}
	}
	return shReplicateAll(c)
}

// spmdRules is the rule table; ops with the Elementwise trait use shElementwise, and ops
// in neither replicate everything.
var spmdRules = map[string]spmdRule{
	"matmul":         shMatmul,
	"reshape":        shReshape,
	"transpose":      shTranspose,
	"broadcast":      shBroadcast,
	"slice":          shSlice,
	"split":          shAxisWhole(0, false),
	"concat":         shAxisWhole(0, false),
	"softmax":        shAxisWhole(-1, false),
	"log_softmax":    shAxisWhole(-1, false),
	"layer_norm":     shNorm,
	"rms_norm":       shNorm,
	"reduce_sum":     shReduce,
	"reduce_mean":    shReduce,
	"reduce_max":     shReduce,
	"gather":         shGather,
	"cross_entropy":  shCrossEntropy,
	"attention":      shAttention,
	"ring_attention": shAttention,
}

// ruleFor returns the rule of op.
func ruleFor(op *ir.Op) spmdRule {
	if r, ok := spmdRules[op.Name()]; ok {
		return r
	}
	if op.Def.Has(ir.Elementwise) && len(op.Results) == 1 {
		return shElementwise
	}
	return shReplicateAll
}
