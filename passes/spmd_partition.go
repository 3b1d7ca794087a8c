package passes

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// SpmdPartition rewrites @forward to per-rank shapes with the collectives its layouts need.
var SpmdPartition = &Pass{
	Name: "spmd-partition",
	Doc: "Rewrite @forward, annotated by shard-propagate, into the program one tp rank runs: every value " +
		"gets its local shape (a split dim divided by tp), shape attributes follow, and where an operand's " +
		"layout differs from the one its op needs the conversion is inserted — a partial sum becomes whole " +
		"by all_reduce or split by reduce_scatter, a split value becomes whole by all_gather, a whole value " +
		"becomes split by taking this rank's block (axis_index) — and a whole value entering an op whose " +
		"result is split or partial passes through copy_to_axis, so that autodiff sums its partial " +
		"gradients (Megatron's f and g operators). The vocab-parallel embedding becomes a masked lookup in " +
		"the rank's rows, and the vocab-parallel cross-entropy a max, a sum of exponentials and the label's " +
		"logit each reduced over tp. The function's results are made whole. Parameters keep their `shard` " +
		"attribute, which now relates local to logical shapes, and the module is marked `partitioned`.",
	Run: runSpmdPartition,
}

func runSpmdPartition(m *ir.Module, _ Options) error {
	f, tp := spmdForward(m)
	if f == nil {
		return nil
	}
	if m.Attrs.Has(ir.AttrPartitioned) {
		return fmt.Errorf("the module is already partitioned")
	}
	params, err := paramLayouts(f)
	if err != nil {
		return err
	}
	pt := &partitioner{tp: tp, sp: m.Attrs.Has(AttrSequenceParallel), lays: map[*ir.Value]lay{}, local: map[*ir.Value]*ir.Value{},
		conv: map[convKey]converted{}, copies: map[*ir.Value]*ir.Value{}}
	for _, a := range f.Args {
		pt.lays[a] = replicated
		if l, ok := params[a]; ok {
			pt.lays[a] = l
		}
		// A new value with the local type: the rules read operands' logical types.
		pt.local[a] = &ir.Value{Name: a.Name, Type: ir.Type{DType: a.Type.DType, Shape: pt.localShape(a.Type.Shape, pt.lays[a])}, Index: a.Index}
	}
	for _, op := range f.Ops {
		l, err := layOf(op.Shard, tpAxis)
		if err != nil {
			return &ir.Error{Loc: op.Loc, Msg: err.Error()}
		}
		for _, r := range op.Results {
			pt.lays[r] = l
		}
	}
	var ops []*ir.Op
	pt.b = ir.NewBuilder(f)
	pt.b.Emit = func(o *ir.Op) { ops = append(ops, o) }
	for _, op := range f.Ops {
		if err := pt.op(op); err != nil {
			return err
		}
	}
	pt.b.Loc, pt.b.Stage, pt.b.Phase = ir.Loc{}, ir.NoStage, ir.PhaseNone
	for i, r := range f.Results {
		f.Results[i], _ = pt.get(r, replicated, false)
	}
	if err := pt.b.Err(); err != nil {
		return err
	}
	for i, a := range f.Args {
		f.Args[i] = pt.local[a]
	}
	f.Ops = ops
	m.Attrs = m.Attrs.Set(ir.AttrPartitioned, ir.Unit{})
	return nil
}

type convKey struct {
	v         *ir.Value
	l         lay
	intoSplit bool
}

type partitioner struct {
	tp     int
	sp     bool
	b      *ir.Builder
	lays   map[*ir.Value]lay       // logical value → its layout
	local  map[*ir.Value]*ir.Value // logical value → its local value, in its layout
	conv   map[convKey]converted   // logical value in another layout
	copies map[*ir.Value]*ir.Value // local value → copy_to_axis of it
}

func (pt *partitioner) localShape(s ir.Shape, l lay) ir.Shape {
	out := slices.Clone(s)
	if l.dim >= 0 {
		out[l.dim] /= pt.tp
	}
	return out
}

func (pt *partitioner) axisAttrs(extra ...ir.NamedAttr) ir.Attrs {
	return append(ir.Attrs{{Name: "axis", Value: ir.Ident(tpAxis)}}, extra...).Sorted()
}

// get returns logical value x brought to layout want, converting once per layout. intoSplit
// says whether the consumer's result is split or partial: then the partial gradients it
// sends back are summed by the conversion's all_gather (reduce_scatter in backward), and
// summed says so; otherwise a gathered value's gradient arrives whole and each rank keeps its
// block.
func (pt *partitioner) get(x *ir.Value, want lay, intoSplit bool) (v *ir.Value, summed bool) {
	have := pt.lays[x]
	v = pt.local[x]
	if have == want {
		return v, false
	}
	k := convKey{x, want, intoSplit}
	if c, ok := pt.conv[k]; ok {
		return c.v, c.summed
	}
	if have.partial {
		if want.dim >= 0 {
			v = pt.b.Op1("reduce_scatter", pt.axisAttrs(ir.NamedAttr{Name: "dim", Value: ir.Int(want.dim)}, ir.NamedAttr{Name: "parts", Value: ir.Int(pt.tp)}), v)
			have = want
		} else {
			v = pt.b.Op1("all_reduce", pt.axisAttrs(), v)
			have = replicated
		}
	}
	if have.dim >= 0 && have.dim != want.dim {
		grad := "slice"
		if intoSplit && want.dim < 0 {
			grad, summed = "reduce_scatter", true
		}
		in := v
		v = pt.b.Op1("all_gather", pt.axisAttrs(ir.NamedAttr{Name: "dim", Value: ir.Int(have.dim)}, ir.NamedAttr{Name: "parts", Value: ir.Int(pt.tp)},
			ir.NamedAttr{Name: "grad", Value: ir.Ident(grad)}), v)
		if grad == "reduce_scatter" && v.Def != nil && in.Def != nil {
			// Sequence parallelism entering a column-parallel linear: the backward gathers
			// the shard again rather than stashing the gathered activation, which is tp
			// times larger (Megatron's choice; Korthikanti et al. §4.2.2).
			v.Def.Remat = true
		}
		have = replicated
	}
	if want.dim >= 0 && have.dim < 0 {
		v = pt.block(v, want.dim)
		have = want
	}
	if have != want {
		pt.b.Failf("spmd-partition: cannot bring %s from %s to %s", x.Type, pt.lays[x], want)
	}
	pt.conv[k] = converted{v, summed}
	return v, summed
}

type converted struct {
	v      *ir.Value
	summed bool
}

// block takes this rank's block of dim d of a whole value: a gather at the indices
// axis_index·n … axis_index·n + n−1, after copy_to_axis so that the whole value's gradient
// is the sum of every rank's block gradient.
func (pt *partitioner) block(v *ir.Value, d int) *ir.Value {
	n := v.Type.Shape[d] / pt.tp
	if v.Type.DType.IsFloat() {
		v = pt.copyTo(v)
	}
	idx := pt.b.Add(pt.b.Op1("iota", ir.Attrs{{Name: "axis", Value: ir.Int(0)}, {Name: "type", Value: ir.TypeAttr(ir.T(ir.I64, n))}}), pt.offset(n, ir.I64))
	return pt.b.Op1("gather", ir.Attrs{{Name: "axis", Value: ir.Int(d)}}, v, idx)
}

// offset is axis_index·n in dtype dt: the first index of this rank's block of n.
func (pt *partitioner) offset(n int, dt ir.DType) *ir.Value {
	off := pt.b.Mul(pt.b.Op1("axis_index", pt.axisAttrs()), pt.b.Scalar(ir.I64, float64(n)))
	if dt != ir.I64 {
		off = pt.b.Cast(off, dt)
	}
	return off
}

// copyTo is copy_to_axis of a local value, made once.
func (pt *partitioner) copyTo(v *ir.Value) *ir.Value {
	if c, ok := pt.copies[v]; ok {
		return c
	}
	c := pt.b.Op1("copy_to_axis", pt.axisAttrs(), v)
	pt.copies[v] = c
	return c
}

// op emits the local form of one op.
func (pt *partitioner) op(op *ir.Op) error {
	c := &ruleCtx{op: op, tp: pt.tp, sp: pt.sp}
	for _, x := range op.Operands {
		c.in = append(c.in, pt.lays[x])
	}
	req, outs := ruleFor(op)(c)
	out := replicated
	if len(op.Results) > 0 {
		out = pt.lays[op.Results[0]]
		if outs[0] != out {
			// Only an annotation edited by hand can disagree with the rules.
			return &ir.Error{Loc: op.Loc, Msg: fmt.Sprintf("spmd-partition: %s's shard annotation says %s, but its operands give %s", op.Name(), out, outs[0])}
		}
	}
	pt.b.Loc, pt.b.Stage, pt.b.Phase = op.Loc, op.Stage, op.Phase
	in := make([]*ir.Value, len(op.Operands))
	intoSplit := out.dim >= 0 || out.partial
	for i, x := range op.Operands {
		var summed bool
		in[i], summed = pt.get(x, req[i], intoSplit)
		// Megatron's f: a whole value entering a split or partial computation (unless its
		// all_gather already sums the partial gradients).
		if intoSplit && !summed && req[i] == replicated && x.Type.DType.IsFloat() && (x.Def == nil || !x.Def.Def.Has(ir.ConstantLike)) {
			in[i] = pt.copyTo(in[i])
		}
	}
	res, err := pt.emit(op, in, req, out)
	if err != nil {
		return &ir.Error{Loc: op.Loc, Msg: "spmd-partition: " + err.Error()}
	}
	if pt.b.Err() != nil {
		return pt.b.Err()
	}
	for i, r := range op.Results {
		want := pt.localShape(r.Type.Shape, pt.lays[r])
		if got := res[i].Type; !got.Shape.Equal(want) {
			return &ir.Error{Loc: op.Loc, Msg: fmt.Sprintf("spmd-partition: %s gives local %s for %s laid out %s; want %v", op.Name(), got, r.Type, pt.lays[r], want)}
		}
		res[i].Name = r.Name
		pt.local[r] = res[i]
	}
	return nil
}

// emit builds the local op(s) computing op's results from local operands.
func (pt *partitioner) emit(op *ir.Op, in []*ir.Value, req []lay, out lay) ([]*ir.Value, error) {
	b := pt.b
	attrs := op.Attrs
	switch op.Name() {
	case "reshape", "broadcast":
		attrs = attrs.Set("shape", ir.Ints(pt.localShape(op.Results[0].Type.Shape, out)...))
	case "slice":
		if d := req[0].dim; d >= 0 {
			attrs = pt.localSlice(op, d)
		}
	case "gather":
		if axis, _ := ir.NormAxis(op.Attrs.Int("axis", 0), op.Operands[0].Type.Rank()); req[0].dim == axis {
			return []*ir.Value{pt.vocabGather(in[0], in[1])}, nil
		}
	case "cross_entropy":
		if req[0].dim >= 0 {
			return []*ir.Value{pt.vocabCrossEntropy(op, in[0], in[1])}, nil
		}
	case "reduce_mean":
		if out.partial && !req[0].partial {
			// The mean of the whole is the mean of the ranks' block means (blocks are equal).
			y := b.Op1("reduce_mean", attrs, in[0])
			return []*ir.Value{b.Mul(y, b.Scalar(y.Type.DType, 1/float64(pt.tp)))}, nil
		}
	case "matmul":
		if len(in) == 3 && req[0].partial == false && req[1].dim >= 0 && pt.contracts(op, req) {
			// Row-parallel with a bias: sum the partial products (into this rank's block of
			// the sequence under sequence parallelism), then add the bias once.
			y := b.Op1("matmul", attrs, in[0], in[1])
			if out.dim >= 0 {
				y = b.Op1("reduce_scatter", pt.axisAttrs(ir.NamedAttr{Name: "dim", Value: ir.Int(out.dim)}, ir.NamedAttr{Name: "parts", Value: ir.Int(pt.tp)}), y)
			} else {
				y = b.Op1("all_reduce", pt.axisAttrs(), y)
			}
			return []*ir.Value{b.Add(y, in[2])}, nil
		}
	}
	return b.Op(op.Name(), attrs, in...), nil
}

// contracts reports whether the matmul's layouts split its contracting dim.
func (pt *partitioner) contracts(op *ir.Op, req []lay) bool {
	bs := op.Operands[1].Type.Shape
	bK := len(bs) - 2
	if op.Attrs.Bool("transpose_b", false) {
		bK = len(bs) - 1
	}
	return req[1].dim == bK
}

// localSlice rewrites a slice whose split dim d is taken whole to end at the local size.
func (pt *partitioner) localSlice(op *ir.Op, d int) ir.Attrs {
	axes := op.Attrs.Ints("axes")
	ends := op.Attrs.Ints("ends")
	rank := op.Operands[0].Type.Rank()
	for k := range ends {
		a := k
		if axes != nil {
			a, _ = ir.NormAxis(axes[k], rank)
		}
		if a == d {
			ends[k] = op.Operands[0].Type.Shape[d] / pt.tp
		}
	}
	return op.Attrs.Set("ends", ir.Ints(ends...))
}

// vocabGather is the vocab-parallel embedding: this rank holds rows [off, off+n) of the
// table; it looks up the indices that fall there and contributes zeros for the others, so the
// result is a partial sum over tp.
func (pt *partitioner) vocabGather(table, idx *ir.Value) *ir.Value {
	b := pt.b
	n := table.Type.Shape[0]
	li, in := pt.localIndex(idx, n)
	rows := b.Op1("gather", ir.Attrs{{Name: "axis", Value: ir.Int(0)}}, table, li)
	mask := b.Cast(in, table.Type.DType)
	shape := append(slices.Clone(idx.Type.Shape), make(ir.Shape, table.Type.Rank()-1)...)
	for i := idx.Type.Rank(); i < len(shape); i++ {
		shape[i] = 1
	}
	return b.Mul(rows, b.Reshape(mask, shape...))
}

// localIndex maps global indices into this rank's block of n: the local index (0 where the
// index lies elsewhere, so that lookups stay in range) and whether it lies here.
func (pt *partitioner) localIndex(idx *ir.Value, n int) (local, here *ir.Value) {
	b := pt.b
	dt := idx.Type.DType
	li := b.Sub(idx, pt.offset(n, dt))
	zero := b.Scalar(dt, 0)
	here = b.Op1("and", nil, b.Op1("not", nil, b.Op1("less", nil, li, zero)), b.Op1("less", nil, li, b.Scalar(dt, float64(n))))
	return b.Op1("where", nil, here, li, zero), here
}

// vocabCrossEntropy is cross_entropy over logits split along the classes: the row maximum,
// the sum of exponentials and the label's logit are each reduced over tp, so every rank gets
// the loss (Megatron's vocab-parallel cross-entropy). The maximum only stabilises the
// exponentials and carries no gradient.
func (pt *partitioner) vocabCrossEntropy(op *ir.Op, logits, labels *ir.Value) *ir.Value {
	b := pt.b
	dt := logits.Type.DType
	r := logits.Type.Rank()
	n := logits.Type.Shape[r-1]
	mx := b.Op1("reduce_max", ir.Attrs{{Name: "axes", Value: ir.Ints(r - 1)}, {Name: "keepdims", Value: ir.BoolAttr(true)}}, logits)
	mx = b.Op1("stop_gradient", nil, b.Op1("all_reduce", pt.axisAttrs(ir.NamedAttr{Name: "op", Value: ir.Ident("max")}), mx))
	sh := b.Sub(logits, mx)
	se := b.Op1("all_reduce", pt.axisAttrs(), b.Reduce("sum", b.Unary("exp", sh), []int{r - 1}, false))
	li, here := pt.localIndex(labels, n)
	col := append(slices.Clone(labels.Type.Shape), 1)
	picked := b.Op1("gather_elements", ir.Attrs{{Name: "axis", Value: ir.Int(r - 1)}}, sh, b.Reshape(li, col...))
	picked = b.Mul(b.Reshape(picked, labels.Type.Shape...), b.Cast(here, dt))
	picked = b.Op1("all_reduce", pt.axisAttrs(), picked)
	loss := b.Sub(b.Unary("log", se), picked) // log Σ exp(l − m) − (l_y − m)
	var count *ir.Value
	if op.Attrs.Has("ignore_index") {
		keep := b.Cast(b.Op1("not", nil, b.Op1("equal", nil, labels, b.Scalar(labels.Type.DType, float64(op.Attrs.Int("ignore_index", -100))))), dt)
		loss = b.Mul(loss, keep)
		count = b.Reduce("sum", keep, nil, false)
	}
	all := make([]int, labels.Type.Rank())
	for i := range all {
		all[i] = i
	}
	switch op.Attrs.Str("reduction", "mean") {
	case "none":
		return loss
	case "sum":
		return b.Reduce("sum", loss, all, false)
	}
	sum := b.Reduce("sum", loss, all, false)
	if count == nil {
		count = b.Scalar(dt, float64(labels.Type.NumElements()))
	}
	return b.Div(sum, count)
}
