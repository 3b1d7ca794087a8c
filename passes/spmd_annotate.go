package passes

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
)

// ShardAnnotate chooses tp shardings for the parameters the user left unsharded.
var ShardAnnotate = &Pass{
	Name: "shard-annotate",
	Doc: "Apply Megatron's tensor-parallel rules to @forward's parameters that carry no `shard` attribute " +
		"(the user's win): an embedding table is split along the vocabulary (vocab-parallel embedding, and " +
		"through a tied or separate output head, vocab-parallel logits and cross-entropy); the weight of a " +
		"matmul is split column-parallel (by its output dim, so attention's q, k and v split by heads and " +
		"GQA's shared k/v heads by groups, an MLP's up and gate projections by the hidden dim) when the " +
		"split reaches another matmul or the loss without any value having to be gathered whole; the " +
		"matmul that contracts a split dim gets its weight split row-parallel (attention's output " +
		"projection, the MLP's down projection), and biases and other parameters that meet a split value " +
		"elementwise are split the same way. Recognising patterns by how shardings propagate " +
		"(shard-propagate's rules) rather than by names makes it work on the IR of ONNX transformers as on " +
		"DSL models. A pattern that tp does not divide (heads, kv heads, hidden sizes; a vocabulary pad-vocab " +
		"did not pad) is an " +
		"error naming the dim and the sizes that would work. The choice does not depend on sequence " +
		"parallelism, which only changes how shard-propagate reduces partial sums. A module without a tp " +
		"axis larger than 1 is left alone.",
	Run: runShardAnnotate,
}

func runShardAnnotate(m *ir.Module, _ Options) error {
	f, tp := spmdForward(m)
	if f == nil {
		return nil
	}
	const sp = false // Megatron's layouts are the same with and without it
	decided, err := paramLayouts(f)
	if err != nil {
		return err
	}
	fixed := map[*ir.Value]bool{}
	isParam := map[*ir.Value]int{}
	for i, a := range f.Args {
		if f.ArgAttrs[i].Has(ir.AttrShard) {
			fixed[a] = true
		}
		if f.ArgAttrs[i].Has(ir.AttrParam) {
			isParam[a] = i
		}
	}
	free := func(v *ir.Value) bool {
		_, p := isParam[v]
		return p && !fixed[v]
	}
	open := func(v *ir.Value) bool { return free(v) && decided[v] == replicated && v.Type.Rank() == 2 }
	with := func(w *ir.Value, l lay) map[*ir.Value]lay {
		out := make(map[*ir.Value]lay, len(decided)+1)
		for k, v := range decided {
			out[k] = v
		}
		out[w] = l
		return out
	}
	// uses lists, for each parameter, the ops that read it (through a cast) and where.
	uses := map[*ir.Value][]paramUse{}
	for _, op := range f.Ops {
		if op.Name() == "cast" {
			continue // the cast's users say what the parameter must be
		}
		for i, x := range op.Operands {
			if x = uncast(x); x.Def == nil {
				uses[x] = append(uses[x], paramUse{op, i})
			}
		}
	}
	cur := propagateLayouts(f, decided, tp, sp, false)
	fixed0 := false // the first fixup looks at every parameter
	for _, op := range f.Ops {
		var w *ir.Value
		try := replicated
		switch op.Name() {
		case "gather":
			// Token embeddings: a table looked up at a model input's indices (not positions
			// made by iota, whose table Megatron keeps whole) — under context parallelism the
			// input's tokens at the rank's positions (cp-partition's gather).
			if axis := op.Attrs.Int("axis", 0); open(uncast(op.Operands[0])) && (axis == 0 || axis == -2) && fromInput(op.Operands[1]) {
				w, try = uncast(op.Operands[0]), splitAt(0)
			}
		case "matmul":
			if b := uncast(op.Operands[1]); open(b) {
				n := 1
				if op.Attrs.Bool("transpose_b", false) {
					n = 0
				}
				w, try = b, splitAt(n)
			}
		}
		if w == nil {
			continue
		}
		gathers, misfits := cur.try(overlay{w: try})
		if w.Type.Shape[try.dim]%tp == 0 && misfits <= len(cur.misfits) && gathers <= cur.gathers {
			decided = with(w, try)
			touched := cur.update(overlay{w: try})
			if !fixed0 {
				touched, fixed0 = nil, true
			}
			decided = fixupParams(cur, decided, free, uses, touched)
			continue
		}
		// Rejected. When the split would have worked had tp divided the sizes, the model is a
		// pattern ppc should split and cannot: say why rather than silently replicating.
		if relaxed := propagateLayouts(f, with(w, try), tp, sp, true); relaxed.gathers <= cur.gathers {
			return misfitError(op, w, try.dim, tp, propagateLayouts(f, with(w, try), tp, sp, false), cur)
		}
	}
	for a, l := range decided {
		if i := isParam[a]; l.dim >= 0 && !fixed[a] {
			f.ArgAttrs[i] = f.ArgAttrs[i].Set(ir.AttrShard, l.sharding(a.Type.Rank(), tpAxis).Attr())
		}
	}
	return nil
}

// paramUse is one use of a parameter: operand i of op.
type paramUse struct {
	op *ir.Op
	i  int
}

// fixupParams splits the parameters that the current layouts want split (a row-parallel
// weight, a bias added to a split activation): splitting a parameter costs nothing, while
// slicing it every step would. All of a parameter's uses must agree. cur is the propagation
// of decided, updated in place; touched are the ops whose requirements changed since the
// last fixed point (nil: look at every parameter), so only the parameters they read are
// looked at again.
func fixupParams(cur *layoutPlan, decided map[*ir.Value]lay, free func(*ir.Value) bool, uses map[*ir.Value][]paramUse, touched []*ir.Op) map[*ir.Value]lay {
	var cands []*ir.Value
	if touched == nil {
		for _, a := range cur.f.Args {
			cands = append(cands, a)
		}
	}
	for {
		seen := map[*ir.Value]bool{}
		for _, op := range touched {
			for _, x := range op.Operands {
				if x = uncast(x); x.Def == nil && !seen[x] {
					seen[x] = true
					cands = append(cands, x)
				}
			}
		}
		changes := overlay{}
		for _, x := range cands {
			if !free(x) || decided[x] != replicated || len(uses[x]) == 0 {
				continue
			}
			r, clash := cur.reqs[uses[x][0].op][uses[x][0].i], false
			for _, u := range uses[x][1:] {
				clash = clash || cur.reqs[u.op][u.i] != r
			}
			if r.dim >= 0 && !r.partial && !clash && x.Type.Shape[r.dim]%cur.tp == 0 {
				decided[x] = r
				changes[x] = r
			}
		}
		if len(changes) == 0 {
			return decided
		}
		touched, cands = cur.update(changes), nil
	}
}

// uncast returns the value a cast reads, or v itself: mixed precision reads each parameter
// through a cast to its compute dtype (passes.Precision), which the sharding propagates
// through unchanged, so a weight is recognised by its cast's uses.
func uncast(v *ir.Value) *ir.Value {
	if v.Def != nil && v.Def.Name() == "cast" {
		return v.Def.Operands[0]
	}
	return v
}

// misfitError explains why a Megatron pattern cannot be split over tp.
func misfitError(op *ir.Op, w *ir.Value, dim, tp int, trial, base *layoutPlan) error {
	size := w.Type.Shape[dim]
	what := fmt.Sprintf("dim %d of %%%s (%s, size %d)", dim, w.Name, w.Type, size)
	if size%tp == 0 && len(trial.misfits) > len(base.misfits) {
		mf := trial.misfits[len(base.misfits)]
		what = fmt.Sprintf("dim %d (size %d) of %s's result %s, which splitting %%%s leads to", mf.dim, mf.size, mf.op.Name(), mf.op.Results[0].Type, w.Name)
		if mf.op.Loc.Known() {
			what += " at " + mf.op.Loc.String()
		}
		size = mf.size
	}
	// A vocabulary tp does not divide reaches here only when pad-vocab left it alone (smaller
	// than tp, or sharded by hand): padding is then no remedy.
	return &ir.Error{Loc: op.Loc, Msg: fmt.Sprintf("--tp %d cannot split %s: %d is not divisible by %d; tp sizes that divide it: %s",
		tp, what, size, tp, divisors(size))}
}

// divisors lists the divisors of n up to 64 (the tp sizes one would try).
func divisors(n int) string {
	var ds []string
	for d := 1; d <= n && d <= 64; d++ {
		if n%d == 0 {
			ds = append(ds, fmt.Sprint(d))
		}
	}
	return strings.Join(ds, ", ")
}

// fromInput reports whether v is a model input, or a model input's elements gathered (the
// tokens a cp rank holds).
func fromInput(v *ir.Value) bool {
	for v.Def != nil && v.Def.Name() == "gather" {
		v = v.Def.Operands[0]
	}
	return v.Def == nil
}
