package passes

import (
	"errors"
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// Context parallelism (--cp N): cp-partition splits @forward's sequence over the cp ranks
// before the tp passes and autodiff, so that everything after it sees one cp rank's tokens;
// ring-attention, after autodiff, writes each ring_attention (and its gradient) as the steps
// of the ring. See passes/doc.go, "Context parallelism".

// CP split names: contiguous gives rank i the block i of the sequence; zigzag cuts it into
// 2·cp chunks and gives rank i chunks i and 2·cp−1−i, so that under a causal mask every
// rank has the same attention work (Megatron's load-balanced split).
const (
	CPContiguous = "contiguous"
	CPZigzag     = "zigzag"
)

// CPAxis is the mesh axis of context parallelism.
const CPAxis = "cp"

// CPPartition splits the sequence of @forward over the cp ranks.
var CPPartition = &Pass{
	Name: "cp-partition",
	Doc: "Context parallelism: rewrite @forward into the program of one cp rank, which holds size/cp of each " +
		"sequence's tokens (split contiguous, or zigzag: 2·cp chunks, rank i holding chunks i and 2·cp−1−i). Data " +
		"inputs ([batch, seq, …]) are read whole and gathered at the rank's positions (axis_index over cp); values " +
		"computed without the data (positions, rotary tables, a position embedding) are gathered where they meet the " +
		"sequence, so positions follow each rank's real tokens; reshape and broadcast shapes follow. The fused " +
		"attention becomes ring_attention (ring-attention writes its steps after autodiff). The loss, a mean over " +
		"the rank's tokens, is summed over cp (all_reduce) and divided by cp: every rank holds the model's loss, and " +
		"the gradients summed over cp (grad-reduce) are the model's. Refused, with the op: ops that mix tokens " +
		"other than the fused attention (the decomposed attention chain, a norm or reduction over the sequence), an " +
		"attention mask, a sequence cp (zigzag: 2·cp) does not divide. Runs before the tp passes.",
	Options: []Option{{Name: "size", Default: "1", Doc: "cp ranks"},
		{Name: "split", Default: CPZigzag, Doc: "zigzag or contiguous"}},
	Run: runCPPartition,
}

func runCPPartition(m *ir.Module, opts Options) error {
	n, err := opts.Int("size")
	if err != nil {
		return err
	}
	split := opts["split"]
	if split != CPZigzag && split != CPContiguous {
		return fmt.Errorf("split %q: want zigzag or contiguous", split)
	}
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return fmt.Errorf("module has no @%s", ir.ForwardFunc)
	}
	if n <= 1 {
		return nil
	}
	// An op that mixes tokens is the error to report (a decomposed attention chain has no
	// attention op either); a model without sequence inputs or attention is refused as such.
	hasAttention := slices.ContainsFunc(f.Ops, func(op *ir.Op) bool { return op.Name() == "attention" })
	t, err := analyseSequence(m, f, n)
	var at *ir.Error
	if (err == nil || !errors.As(err, &at)) && !hasAttention {
		return fmt.Errorf("--cp %d: the model has no attention op; context parallelism splits attention's sequence over a ring (a model without attention has --dp for more ranks): use --cp 1", n)
	}
	if err != nil {
		return err
	}
	if err := CheckCPSplit(t.T, n, split); err != nil {
		return ir.ErrorAt(m.Source, f.Loc, "%v", err)
	}
	causal := true
	for _, op := range f.Ops {
		if op.Name() == "attention" {
			causal = causal && op.Attrs.Bool("causal", false)
		}
	}
	if err := t.emitCP(split); err != nil {
		return err
	}
	m.Attrs = m.Attrs.Set(AttrCP, ir.Dict(ir.Attrs{{Name: "split", Value: ir.Ident(split)}, {Name: "seq", Value: ir.Int(t.T)},
		{Name: "size", Value: ir.Int(n)}, {Name: "causal", Value: ir.BoolAttr(causal)}}.Sorted()))
	return nil
}

// AttrCP (on a module) records how cp-partition split the sequence: {split, seq, size,
// causal} (CPSplit).
const AttrCP = "cp"

// CPSplit is how context parallelism split a model's sequence.
type CPSplit struct {
	Split  string `json:"split"`
	Seq    int    `json:"seq"`
	Size   int    `json:"size"`
	Causal bool   `json:"causal"` // every attention is causal: the split decides the balance
}

// Work is each cp rank's share of the attention work under this split.
func (c CPSplit) Work() []float64 { return CPAttentionWork(c.Seq, c.Size, c.Split, c.Causal) }

// ReadCPSplit reads a module's cp attribute (nil without one).
func ReadCPSplit(m *ir.Module) *CPSplit {
	d, ok := m.Attrs.Get(AttrCP).(ir.Dict)
	if !ok {
		return nil
	}
	a := ir.Attrs(d)
	return &CPSplit{Split: a.Str("split", CPZigzag), Seq: a.Int("seq", 0), Size: a.Int("size", 1), Causal: a.Bool("causal", false)}
}

// CheckCPSplit checks that a sequence of T tokens splits over n cp ranks, naming the nearest
// sizes that would.
func CheckCPSplit(T, n int, split string) error {
	parts, what := n, "the sequence"
	if split == CPZigzag {
		parts, what = 2*n, "2·cp (the zig-zag split's chunks)"
	}
	if T%parts == 0 {
		return nil
	}
	var near []string
	for _, c := range []int{n - 1, n + 1, n - 2, n + 2} {
		p := c
		if split == CPZigzag {
			p = 2 * c
		}
		if c >= 1 && T%p == 0 && len(near) < 2 {
			near = append(near, fmt.Sprintf("--cp %d", c))
		}
	}
	hint := ""
	if len(near) > 0 {
		hint = "; the nearest that do: " + joinOr(near)
	}
	if split == CPZigzag && T%n == 0 {
		hint += "; or --cp-split contiguous"
	}
	return fmt.Errorf("--cp %d: %s must divide the sequence of %d tokens, and %d does not%s", n, what, T, parts, hint)
}

func joinOr(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	return fmt.Sprintf("%s or %s", s[0], s[1])
}

// cpAttention is the analysis of attention under context parallelism: q, k and v carry the
// sequence in their second-to-last dim, and no mask (the ring builds the causal one from the
// tokens' positions; an explicit mask would have to be cut per ring step).
func (t *tokenSlicer) cpAttention(op *ir.Op, r int) error {
	if len(op.Operands) == 4 {
		return t.errAt(op, "has an explicit mask, which the ring cannot shard (it builds only the causal mask, from each rank's token positions): write the mask as causal = true, or use --cp 1")
	}
	for i := range 3 {
		in := t.get(op.Operands[i])
		if !in.dep || in.k >= 0 || in.q != r-2 {
			return t.errAt(op, "operand %d does not have the sequence in its second-to-last dim ([..., heads, seq, dim]); use --cp 1", i)
		}
	}
	t.set(op, seqInfo{dep: true, q: r - 2, k: -1})
	return nil
}

// cpPositions builds, at b, the positions in the sequence of T tokens of the tokens of the
// rank with cp coordinate idx (an i64 scalar), in the order the rank holds them: i64[T/n].
func cpPositions(b *ir.Builder, idx *ir.Value, T, n int, split string) *ir.Value {
	L := T / n
	j := b.Op1("iota", ir.Attrs{{Name: "type", Value: ir.TypeAttr(ir.Type{DType: ir.I64, Shape: ir.Shape{L}})}, {Name: "axis", Value: ir.Int(0)}})
	i64 := func(v int) *ir.Value { return b.Scalar(ir.I64, float64(v)) }
	if split == CPContiguous {
		return b.Add(j, b.Mul(idx, i64(L)))
	}
	c := L / 2
	first := b.Add(j, b.Mul(idx, i64(c)))                                    // chunk idx
	second := b.Add(b.Sub(j, i64(c)), b.Mul(b.Sub(i64(2*n-1), idx), i64(c))) // chunk 2n−1−idx
	return b.Op1("where", nil, b.Op1("less", nil, j, i64(c)), first, second)
}

// emitCP rewrites @forward for one cp rank of t.cp (see CPPartition).
func (t *tokenSlicer) emitCP(split string) error {
	f, n := t.f, t.cp
	L := t.T / n
	var out []*ir.Op
	b := ir.NewBuilder(f)
	b.Emit = func(op *ir.Op) { out = append(out, op) }
	clone := map[*ir.Value]*ir.Value{}
	posAt := map[int]*ir.Value{} // this rank's positions, per stage
	gathered := map[string]*ir.Value{}
	at := func(op *ir.Op) {
		b.Loc, b.Stage, b.Slice, b.Phase = op.Loc, op.Stage, op.Slice, op.Phase
	}
	positions := func() *ir.Value {
		if p, ok := posAt[b.Stage]; ok {
			return p
		}
		idx := b.Op1("axis_index", ir.Attrs{{Name: "axis", Value: ir.Ident(CPAxis)}})
		p := cpPositions(b, idx, t.T, n, split)
		p.Name = fmt.Sprintf("cp.pos%d", len(posAt))
		posAt[b.Stage] = p
		return p
	}
	// take gathers this rank's positions of x along axis, once per value, axis and stage.
	take := func(x *ir.Value, axis int) *ir.Value {
		key := fmt.Sprintf("%p/%d/%d", x, axis, b.Stage)
		if v, ok := gathered[key]; ok {
			return v
		}
		v := b.Op1("gather", ir.Attrs{{Name: "axis", Value: ir.Int(axis)}}, x, positions())
		if x.Name != "" {
			v.Name = x.Name + ".cp"
		}
		gathered[key] = v
		return v
	}
	for _, op := range f.Ops {
		at(op)
		operands := make([]*ir.Value, len(op.Operands))
		for i, x := range op.Operands {
			switch c, ok := clone[x]; {
			case ok:
				operands[i] = c
			case x.Def == nil && t.get(x).dep:
				operands[i] = take(x, SeqAxis) // a data input, read whole
			default:
				operands[i] = x
			}
			if act, ok := t.actions[op][i]; ok && act.kind == actSlice {
				if act.k >= 0 {
					return t.errAt(op, "reads a value with a key axis; use --cp 1")
				}
				operands[i] = take(operands[i], act.q)
			}
		}
		name, attrs := op.Name(), op.Attrs
		if q, ok := t.shapeQ[op]; ok {
			attrs = patchShape(attrs, q, L)
		}
		if name == "attention" {
			name = "ring_attention"
			attrs = append(slices.Clone(attrs), ir.NamedAttr{Name: "axis", Value: ir.Ident(CPAxis)},
				ir.NamedAttr{Name: "size", Value: ir.Int(n)}, ir.NamedAttr{Name: "split", Value: ir.Ident(split)})
		}
		res := b.Op(name, attrs, operands...)
		if err := b.Err(); err != nil {
			return err
		}
		out[len(out)-1].Shard, out[len(out)-1].Remat = op.Shard, op.Remat
		for i, r := range op.Results {
			if r.Name != "" {
				res[i].Name = r.Name
			}
			clone[r] = res[i]
		}
	}
	for i, r := range f.Results {
		v, ok := clone[r]
		if !ok {
			continue // an input or parameter returned as it is
		}
		if r.Def != nil {
			at(r.Def)
		}
		in := t.get(r)
		switch {
		case in.tok != tokNone:
			// Each rank's loss is over its tokens: the model's is their sum (a sum of sums)
			// or mean (a mean of equal-sized means). all_reduce passes the gradient through,
			// so each rank differentiates its own share and grad-reduce sums the shares.
			name := v.Name
			if name != "" {
				v.Name = name + ".rank" // this rank's share
			}
			s := b.Op1("all_reduce", ir.Attrs{{Name: "axis", Value: ir.Ident(CPAxis)}}, v)
			if in.tok == tokMean {
				s = b.Mul(s, b.Scalar(s.Type.DType, 1/float64(n)))
			}
			s.Name = name
			v = s
		case in.dep && in.q >= 0:
			// A per-token output (inference's logits): gathered over cp in rank order, then
			// put back in sequence order.
			g := b.Op1("all_gather", ir.Attrs{{Name: "axis", Value: ir.Ident(CPAxis)}, {Name: "dim", Value: ir.Int(in.q)},
				{Name: "parts", Value: ir.Int(n)}, {Name: "grad", Value: ir.Ident("slice")}}, v)
			if split == CPZigzag {
				inv := make([]float64, t.T)
				for rank := range n {
					for j := range L {
						inv[cpPosition(rank, j, t.T, n, split)] = float64(rank*L + j)
					}
				}
				perm := b.Constant(ir.NewDenseF64(ir.Type{DType: ir.I64, Shape: ir.Shape{t.T}}, inv))
				g = b.Op1("gather", ir.Attrs{{Name: "axis", Value: ir.Int(in.q)}}, g, perm)
			}
			g.Name = v.Name
			v = g
		}
		f.Results[i] = v
	}
	if err := b.Err(); err != nil {
		return err
	}
	f.Ops = out
	RemoveDead(f)
	return nil
}

// cpPosition is the position in the sequence of T tokens of the j-th token of cp rank i.
func cpPosition(i, j, T, n int, split string) int {
	L := T / n
	if split == CPContiguous {
		return i*L + j
	}
	c := L / 2
	if j < c {
		return i*c + j
	}
	return (2*n-1-i)*c + j - c
}

// CPAttentionWork is the share of a causal attention's query-key pairs (counted per token
// pair, over the whole sequence) that each cp rank computes under split: 1/n each under
// zigzag, from (2i+1)/n² for rank i under contiguous. Non-causal attention is even.
func CPAttentionWork(T, n int, split string, causal bool) []float64 {
	w := make([]float64, n)
	if !causal || n <= 1 || T%n != 0 || (split == CPZigzag && T%(2*n) != 0) {
		for i := range w {
			w[i] = 1 / float64(n)
		}
		return w
	}
	L := T / n
	total := float64(T) * float64(T+1) / 2
	for i := range n {
		var pairs float64
		for j := range L {
			pairs += float64(cpPosition(i, j, T, n, split) + 1) // keys 0 … position
		}
		w[i] = pairs / total
	}
	return w
}

// ringAttentionRule differentiates ring_attention with ring_attention_grad (the log-sum-exp,
// as attention's, is not differentiable).
func ringAttentionRule(g *gradCtx, op *ir.Op, d []*ir.Value) ([]*ir.Value, error) {
	if d[1] != nil {
		return nil, fmt.Errorf("no gradient through ring_attention's log-sum-exp (its second result): only the output is differentiable")
	}
	grads := g.b.Op("ring_attention_grad", op.Attrs, op.Operands[0], op.Operands[1], op.Operands[2], op.Results[0], op.Results[1], d[0])
	return grads, nil
}

// RingAttention writes every ring_attention and ring_attention_grad as the steps of its ring.
var RingAttention = &Pass{
	Name: "ring-attention",
	Doc: "Write each ring_attention as ring attention's steps over the cp ranks: step 0 attends to the rank's own " +
		"K/V block (causal: as it is, since a rank's tokens are in sequence order); at step t the block of rank " +
		"i−t arrives from the previous rank (ring_recv) and is passed on to the next (ring_send, issued before the " +
		"step's attention so that the transfer overlaps it), attended with the causal mask of the two blocks' real " +
		"positions, and merged into the output by log-sum-exp. ring_attention_grad is the same ring backward: " +
		"attention_grad per block with the merged output and log-sum-exp (FlashAttention-2's backward is exact per " +
		"block given them), dq summed locally, and each block's dk/dv summed as it travels the ring with the block " +
		"and sent home after its last visit. Runs after split-stages (so that a recomputed ring_attention is " +
		"rebuilt with its transfers), before rank-programs.",
	Run: runRingAttention,
}

func runRingAttention(m *ir.Module, _ Options) error {
	for _, f := range m.Funcs {
		if !slices.ContainsFunc(f.Ops, isRingOp) {
			continue
		}
		var out []*ir.Op
		remap := map[*ir.Value]*ir.Value{}
		b := ir.NewBuilder(f)
		b.Emit = func(op *ir.Op) { out = append(out, op) }
		for _, op := range f.Ops {
			for i, x := range op.Operands {
				if y, ok := remap[x]; ok {
					op.Operands[i] = y
				}
			}
			if !isRingOp(op) {
				out = append(out, op)
				continue
			}
			b.Loc, b.Stage, b.Slice, b.Phase = op.Loc, op.Stage, op.Slice, op.Phase
			r := &ring{b: b, op: op, n: op.Attrs.Int("size", 1), split: op.Attrs.Str("split", CPZigzag), causal: op.Attrs.Bool("causal", false)}
			var res []*ir.Value
			if op.Name() == "ring_attention" {
				res = r.forward()
			} else {
				res = r.backward()
			}
			if err := b.Err(); err != nil {
				return err
			}
			for i, v := range op.Results {
				res[i].Name = v.Name
				remap[v] = res[i]
			}
		}
		for i, x := range f.Results {
			if y, ok := remap[x]; ok {
				f.Results[i] = y
			}
		}
		f.Ops = out
	}
	return nil
}

func isRingOp(op *ir.Op) bool {
	return op.Name() == "ring_attention" || op.Name() == "ring_attention_grad"
}

// ring builds the steps of one ring_attention or ring_attention_grad.
type ring struct {
	b      *ir.Builder
	op     *ir.Op
	n      int
	split  string
	causal bool
	idx    *ir.Value // this rank's cp coordinate
}

// attrs are a step's attention attributes: the ring op's scale, and causal at step 0 (later
// steps carry their mask as an operand).
func (r *ring) attrs(step0 bool) ir.Attrs {
	var a ir.Attrs
	for _, x := range r.op.Attrs {
		if x.Name == "scale" || (x.Name == "causal" && step0) {
			a = append(a, x)
		}
	}
	return a
}

func (r *ring) send(x *ir.Value) {
	r.b.Op("ring_send", ir.Attrs{{Name: "axis", Value: ir.Ident(CPAxis)}}, x)
}

func (r *ring) recv(t ir.Type) *ir.Value {
	return r.b.Op1("ring_recv", ir.Attrs{{Name: "axis", Value: ir.Ident(CPAxis)}, {Name: "type", Value: ir.TypeAttr(t)}})
}

// seq takes rows [lo, hi) of x along its sequence dim (second to last).
func (r *ring) seq(x *ir.Value, lo, hi int) *ir.Value {
	return r.b.Op1("slice", ir.Attrs{{Name: "starts", Value: ir.Ints(lo)}, {Name: "ends", Value: ir.Ints(hi)}, {Name: "axes", Value: ir.Ints(x.Type.Rank() - 2)}}, x)
}

// join concatenates a and b along the sequence dim.
func (r *ring) join(a, b *ir.Value) *ir.Value {
	return r.b.Op1("concat", ir.Attrs{{Name: "axis", Value: ir.Int(a.Type.Rank() - 2)}}, a, b)
}

// addRows adds x to rows [lo, hi) of acc (along the sequence dim), without a zero-padded copy
// of x.
func (r *ring) addRows(acc, x *ir.Value, lo, hi int) *ir.Value {
	L := acc.Type.Shape[acc.Type.Rank()-2]
	if lo == 0 && hi == L {
		return r.b.Add(acc, x)
	}
	out := r.b.Add(r.seq(acc, lo, hi), x)
	if lo > 0 {
		out = r.join(r.seq(acc, 0, lo), out)
	}
	if hi < L {
		out = r.join(out, r.seq(acc, hi, L))
	}
	return out
}

// piece is one attention of a ring step: queries [qlo, qhi) of the rank's tokens against keys
// [klo, khi) of the block it holds, visible as a whole when the scalar mask says so.
type piece struct {
	qlo, qhi, klo, khi int
	mask               *ir.Value // bool [1, 1]; nil: visible
}

// pieces are the attentions of step t ≥ 1, when the rank holds the K/V block of rank
// owner = i − t (mod n). Causal masking by the tokens' real positions is whole pieces: no
// mask tensor of L × L. Contiguous: the block is wholly before the rank's tokens (owner < i)
// or wholly after. Zig-zag (chunks i and 2n−1−i of c tokens): owner < i, every query sees
// the owner's first chunk and not its second; owner > i, the second query chunk sees both
// key chunks and the first sees neither. Both pieces are computed, the one that does not
// apply fully masked: L·c + c·L = L² query-key pairs, a block's.
func (r *ring) pieces(t, L int) []piece {
	if !r.causal {
		return []piece{{0, L, 0, L, nil}}
	}
	b := r.b
	if r.idx == nil {
		r.idx = b.Op1("axis_index", ir.Attrs{{Name: "axis", Value: ir.Ident(CPAxis)}})
	}
	i64 := func(v int) *ir.Value { return b.Scalar(ir.I64, float64(v)) }
	owner := b.Op1("where", nil, b.Op1("less", nil, r.idx, i64(t)), b.Add(r.idx, i64(r.n-t)), b.Sub(r.idx, i64(t)))
	before := b.Reshape(b.Op1("less", nil, owner, r.idx), 1, 1)
	if r.split == CPContiguous {
		return []piece{{0, L, 0, L, before}}
	}
	after := b.Reshape(b.Op1("greater", nil, owner, r.idx), 1, 1)
	c := L / 2
	return []piece{{0, L, 0, c, before}, {c, L, 0, L, after}}
}

// merge folds a piece's output ot and log-sum-exp lt (rows [lo, hi)) into the running ones.
// A row the piece hides has lt = −∞ and ot = 0; lse stays finite (step 0 sees every query's
// own token), so the weights are exact zeros there.
func (r *ring) merge(acc, lse, ot, lt *ir.Value, lo, hi int) (*ir.Value, *ir.Value) {
	b := r.b
	L := acc.Type.Shape[acc.Type.Rank()-2]
	a, l := acc, lse
	if lo > 0 || hi < L {
		a, l = r.seq(acc, lo, hi), r.seq(lse, lo, hi)
	}
	if ot.Type.DType != lt.Type.DType {
		ot = b.Cast(ot, lt.Type.DType) // merged in the log-sum-exp's precision
	}
	mx := b.Op1("max", nil, l, lt)
	wa, wt := b.Unary("exp", b.Sub(l, mx)), b.Unary("exp", b.Sub(lt, mx))
	sum := b.Add(wa, wt)
	l = b.Add(mx, b.Unary("log", sum))
	a = b.Add(b.Mul(a, b.Div(wa, sum)), b.Mul(ot, b.Div(wt, sum)))
	if lo > 0 {
		a, l = r.join(r.seq(acc, 0, lo), a), r.join(r.seq(lse, 0, lo), l)
	}
	return a, l
}

// forward: o and lse over every rank's keys, merged step by step by log-sum-exp.
func (r *ring) forward() []*ir.Value {
	b, op := r.b, r.op
	q, k, v := op.Operands[0], op.Operands[1], op.Operands[2]
	L := q.Type.Shape[q.Type.Rank()-2]
	r.send(k)
	r.send(v)
	res := b.Op("attention", r.attrs(true), q, k, v)
	acc, lse := res[0], res[1]
	odt := acc.Type.DType
	if odt != lse.Type.DType {
		acc = b.Cast(acc, lse.Type.DType)
	}
	kb, vb := r.recv(k.Type), r.recv(v.Type)
	for t := 1; t < r.n; t++ {
		if t < r.n-1 {
			r.send(kb) // the next rank's block of step t+1, sent before this step's work
			r.send(vb)
		}
		for _, p := range r.pieces(t, L) {
			in := []*ir.Value{q, kb, vb}
			if p.qhi-p.qlo < L {
				in[0] = r.seq(q, p.qlo, p.qhi)
			}
			if p.khi-p.klo < L {
				in[1], in[2] = r.seq(kb, p.klo, p.khi), r.seq(vb, p.klo, p.khi)
			}
			if p.mask != nil {
				in = append(in, p.mask)
			}
			a := b.Op("attention", r.attrs(false), in...)
			acc, lse = r.merge(acc, lse, a[0], a[1], p.qlo, p.qhi)
		}
		if t < r.n-1 {
			kb, vb = r.recv(k.Type), r.recv(v.Type)
		}
	}
	if acc.Type.DType != odt {
		acc = b.Cast(acc, odt)
	}
	return []*ir.Value{acc, lse}
}

// backward: attention_grad per piece with the merged o and lse; dq summed here, each
// block's dk/dv summed along the ring (in f32 for 16-bit operands) and sent home.
func (r *ring) backward() []*ir.Value {
	b, op := r.b, r.op
	q, k, v, o, lse, do := op.Operands[0], op.Operands[1], op.Operands[2], op.Operands[3], op.Operands[4], op.Operands[5]
	L := q.Type.Shape[q.Type.Rank()-2]
	wide := lse.Type.DType
	widen := func(x *ir.Value) *ir.Value {
		if x.Type.DType != wide {
			return b.Cast(x, wide)
		}
		return x
	}
	wt := func(x *ir.Value) ir.Type { return ir.Type{DType: wide, Shape: x.Type.Shape} }
	r.send(k)
	r.send(v)
	g := b.Op("attention_grad", r.attrs(true), q, k, v, o, lse, do)
	dq, dk, dv := widen(g[0]), widen(g[1]), widen(g[2])
	kb, vb := r.recv(k.Type), r.recv(v.Type)
	r.send(dk) // this rank's block's gradient starts its way round
	r.send(dv)
	for t := 1; t < r.n; t++ {
		if t < r.n-1 {
			r.send(kb)
			r.send(vb)
		}
		// The step's dK/dV: every piece's rows, starting from a piece over the whole block
		// (each split has one).
		ps := r.pieces(t, L)
		slices.SortStableFunc(ps, func(a, b piece) int { return (b.khi - b.klo) - (a.khi - a.klo) })
		var gk, gv *ir.Value
		for _, p := range ps {
			in := []*ir.Value{q, kb, vb, o, lse, do}
			if p.qhi-p.qlo < L {
				in[0], in[3], in[4], in[5] = r.seq(q, p.qlo, p.qhi), r.seq(o, p.qlo, p.qhi), r.seq(lse, p.qlo, p.qhi), r.seq(do, p.qlo, p.qhi)
			}
			if p.khi-p.klo < L {
				in[1], in[2] = r.seq(kb, p.klo, p.khi), r.seq(vb, p.klo, p.khi)
			}
			if p.mask != nil {
				in = append(in, p.mask)
			}
			g := b.Op("attention_grad", r.attrs(false), in...)
			dq = r.addRows(dq, widen(g[0]), p.qlo, p.qhi)
			if gk == nil {
				gk, gv = widen(g[1]), widen(g[2])
			} else {
				gk, gv = r.addRows(gk, widen(g[1]), p.klo, p.khi), r.addRows(gv, widen(g[2]), p.klo, p.khi)
			}
		}
		dkb := b.Add(r.recv(wt(k)), gk)
		dvb := b.Add(r.recv(wt(v)), gv)
		r.send(dkb)
		r.send(dvb)
		if t < r.n-1 {
			kb, vb = r.recv(k.Type), r.recv(v.Type)
		}
	}
	dk, dv = r.recv(wt(k)), r.recv(wt(v)) // home, with every rank's share
	narrow := func(x *ir.Value, like *ir.Value) *ir.Value {
		if x.Type.DType != like.Type.DType {
			return b.Cast(x, like.Type.DType)
		}
		return x
	}
	return []*ir.Value{narrow(dq, q), narrow(dk, k), narrow(dv, v)}
}
