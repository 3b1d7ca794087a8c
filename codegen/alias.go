package codegen

import (
	"slices"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/lower"
)

// aliasReshapes makes each reshape of an activation a view of its operand's bytes instead of
// a copy (a launch per reshape: 218 a step in GPT-2 small, each moving a [8, 1024, 768]
// tensor, on every device): the instruction becomes a NOP, the result's buffer shares its
// operand's (the root's) place in the arena, and the root lives as long as either is used.
// Reshape is a view of row-major data, so this is exact — provided neither buffer is written
// by anything else: each must have one writer (its producer; the root may also come from
// outside the program, as a run's port does), which is checked over the whole instruction
// stream rather than assumed, since accumulators (ACCUM), in-place collectives and the
// optimizer write buffers in place. Both the program (emit) and the planner's run memories
// (RunMemories) alias the same way, so the plan's memory is compile's.
//
// A slice of an activation's leading rows (dim 0 cut short, every other dim whole: ZeRO-3's
// padded gathers, passes.ParamGather, drop their padding so) is a view of the operand's
// leading bytes in the same way.
func (rg *rankGen) aliasReshapes() {
	writes := rg.writes()
	activation := func(id int32) bool { return rg.prog.Buffers[id].Role == pb.Role_ACTIVATION }
	for i, in := range rg.prog.Instrs {
		if in.Kind != pb.Instr_LAUNCH || len(in.In) != 1 || len(in.Out) != 1 {
			continue
		}
		x, y := in.In[0], in.Out[0]
		k := rg.prog.Kernels[in.Kernel]
		if k.Op != "reshape" && !(k.Op == "slice" && leadingRows(k, rg.typeOf(int(x)), rg.typeOf(int(y)))) {
			continue
		}
		x, _ = rg.viewRoot(x) // no offsets yet: aliasConcats runs after
		if !activation(x) || !activation(y) || writes[in.In[0]] > 1 || writes[x] > 1 || writes[y] != 1 || k.Op == "reshape" && rg.typeOf(int(x)).Bytes() != rg.typeOf(int(y)).Bytes() {
			continue
		}
		rg.alias[y] = x
		rg.prog.Instrs[i] = &pb.Instr{Kind: pb.Instr_NOP}
		rg.mergeLifetime(y, x)
	}
}

// mergeLifetime gives root the lifetime of view y too (the root's bytes hold y's), and y's
// place among the forward activations, and drops y from the memory plan.
func (rg *rankGen) mergeLifetime(y, root int32) {
	if f, ok := rg.first[int(y)]; ok {
		if g, ok := rg.first[int(root)]; !ok || f < g {
			rg.first[int(root)] = f
		}
		rg.last[int(root)] = max(rg.last[int(root)], rg.last[int(y)])
	}
	delete(rg.first, int(y))
	delete(rg.last, int(y))
	if rg.fwd[int(y)] {
		rg.fwd[int(root)] = true
	}
	delete(rg.fwd, int(y))
}

// viewRoot follows view id to the buffer that owns its bytes (id itself if it is not a
// view) and returns it with id's byte offset in it.
func (rg *rankGen) viewRoot(id int32) (root int32, off int64) {
	for {
		r, ok := rg.alias[id]
		if !ok {
			return id, off
		}
		off += rg.aliasOff[id]
		id = r
	}
}

// writes counts the instructions writing each buffer: their results, and the operands of
// the collectives that reduce or broadcast in place.
func (rg *rankGen) writes() map[int32]int {
	writes := map[int32]int{}
	for _, in := range rg.prog.Instrs {
		for _, id := range in.Out {
			writes[id]++
		}
		if len(in.Out) == 0 && (in.Kind == pb.Instr_ALL_REDUCE || in.Kind == pb.Instr_BROADCAST) {
			for _, id := range in.In { // in place
				writes[id]++
			}
		}
	}
	return writes
}

// aliasConcats makes the operands of a concatenation views of its result, written in place
// by their producers, and the concatenation a NOP, where the operands are consecutive byte
// ranges of the result (every dim before the axis 1: channels at batch 1), each an
// activation written once (as aliasReshapes requires), distinct, not already a view, and at
// an offset that keeps the arena's alignment (kernels may vector-load their operands).
// A concatenation whose operands are all already views of one buffer, consecutive and in
// order, becomes a view of that range itself. Concatenations are taken last first, so that
// DenseNet's blocks — each layer concatenating all the features before it, torchvision's
// export — cost nothing: the last concatenation of a block hosts every feature and each
// earlier one is a view of its leading bytes (a chain of two-operand concatenations, the
// other way to write it, nests the same way). The result lives from its first operand's
// producer to the last use of any of the views (lifetimes merged into the root's), so the
// bytes are exactly the copies' — DenseNet-121 copied 1.8 ms of its 38 ms step so, and
// allocated each block's features once per layer.
func (rg *rankGen) aliasConcats() {
	writes := rg.writes()
	activation := func(id int32) bool { return rg.prog.Buffers[id].Role == pb.Role_ACTIVATION }
	root := func(id int32) int32 { r, _ := rg.viewRoot(id); return r }
	// view makes x a view of target's bytes from off, merging x's lifetime into the root's.
	view := func(x, target int32, off int64) bool {
		if _, ok := rg.first[int(x)]; !ok {
			return false
		}
		if rg.aliasOff == nil {
			rg.aliasOff = map[int32]int64{}
		}
		rg.alias[x] = target
		if off != 0 {
			rg.aliasOff[x] = off
		}
		rg.mergeLifetime(x, root(target))
		return true
	}
	for i := len(rg.prog.Instrs) - 1; i >= 0; i-- {
		in := rg.prog.Instrs[i]
		if in.Kind != pb.Instr_LAUNCH || len(in.Out) != 1 || len(in.In) == 0 || rg.prog.Kernels[in.Kernel].Op != "concat" {
			continue
		}
		y := in.Out[0]
		offs, ok := rg.concatOffsets(rg.prog.Kernels[in.Kernel], in.In, y)
		if !ok || !activation(y) || writes[y] != 1 {
			continue
		}
		// Every operand already a view of one buffer, consecutive and in order: y is a view of
		// that range (an earlier layer's concatenation in a DenseNet block).
		if t, ok := rg.alias[in.In[0]]; ok {
			start := rg.aliasOff[in.In[0]]
			same := true
			for j, x := range in.In {
				if tx, ok := rg.alias[x]; !ok || tx != t || rg.aliasOff[x] != start+offs[j] {
					same = false
					break
				}
			}
			if same {
				if _, viewed := rg.alias[y]; !viewed && root(t) != y && view(y, t, start) {
					rg.prog.Instrs[i] = &pb.Instr{Kind: pb.Instr_NOP}
				}
				continue
			}
		}
		// Otherwise y hosts its operands, if every one can move into it.
		seen := map[int32]bool{}
		fits := true
		for _, x := range in.In {
			_, viewed := rg.alias[x]
			if seen[x] || viewed || x == y || root(y) == x || !activation(x) || writes[x] != 1 {
				fits = false
				break
			}
			if _, ok := rg.first[int(x)]; !ok {
				fits = false
				break
			}
			seen[x] = true
		}
		if !fits {
			continue
		}
		for j, x := range in.In {
			view(x, y, offs[j])
		}
		rg.prog.Instrs[i] = &pb.Instr{Kind: pb.Instr_NOP}
	}
}

// concatOffsets returns the byte offset in y of each operand of concatenation kernel k, when
// they are consecutive whole ranges of y (every dim before the axis is 1) at offsets that
// are multiples of lower.Alignment.
func (rg *rankGen) concatOffsets(k *pb.Kernel, xs []int32, y int32) ([]int64, bool) {
	yt := rg.typeOf(int(y))
	as, err := AttrsFromProto(k.Attrs)
	if err != nil || yt.Rank() == 0 {
		return nil, false
	}
	axis := as.Int("axis", 0)
	if axis < 0 {
		axis += yt.Rank()
	}
	if axis < 0 || axis >= yt.Rank() {
		return nil, false
	}
	for _, d := range yt.Shape[:axis] {
		if d != 1 {
			return nil, false
		}
	}
	offs := make([]int64, len(xs))
	var off int64
	for j, x := range xs {
		xt := rg.typeOf(int(x))
		if xt.DType != yt.DType || off%lower.Alignment != 0 {
			return nil, false
		}
		offs[j] = off
		off += xt.Bytes()
	}
	return offs, off == yt.Bytes()
}

// placeAliases gives each view its root's offset plus its own and drops the NOPs the aliases
// left (after the memory plan, which numbers instructions).
func (rg *rankGen) placeAliases() {
	for y := range rg.alias {
		x, off := rg.viewRoot(y)
		rg.prog.Buffers[y].Offset = rg.prog.Buffers[x].Offset + off
	}
	kept := rg.prog.Instrs[:0]
	for _, in := range rg.prog.Instrs {
		if in.Kind != pb.Instr_NOP {
			kept = append(kept, in)
		}
	}
	rg.prog.Instrs = kept
	rg.info.Instructions = len(kept)
}

// leadingRows reports whether slice kernel k of x giving y keeps x's leading rows: y's dim 0
// shorter, its other dims x's, starting at 0 with step 1 — the first bytes of x.
func leadingRows(k *pb.Kernel, x, y ir.Type) bool {
	if x.Rank() == 0 || x.Rank() != y.Rank() || !slices.Equal(x.Shape[1:], y.Shape[1:]) || y.Shape[0] > x.Shape[0] || x.DType != y.DType {
		return false
	}
	as, err := AttrsFromProto(k.Attrs)
	if err != nil {
		return false
	}
	for _, v := range as.Ints("starts") {
		if v != 0 {
			return false
		}
	}
	for _, v := range as.Ints("steps") {
		if v != 1 {
			return false
		}
	}
	return true
}
