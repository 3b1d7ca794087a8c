package codegen

import (
	"slices"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
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
		for {
			r, ok := rg.alias[x]
			if !ok {
				break
			}
			x = r
		}
		if !activation(x) || !activation(y) || writes[in.In[0]] > 1 || writes[x] > 1 || writes[y] != 1 || k.Op == "reshape" && rg.typeOf(int(x)).Bytes() != rg.typeOf(int(y)).Bytes() {
			continue
		}
		rg.alias[y] = x
		rg.prog.Instrs[i] = &pb.Instr{Kind: pb.Instr_NOP}
		if f, ok := rg.first[int(y)]; ok {
			if g, ok := rg.first[int(x)]; !ok || f < g {
				rg.first[int(x)] = f
			}
			rg.last[int(x)] = max(rg.last[int(x)], rg.last[int(y)])
		}
		delete(rg.first, int(y))
		delete(rg.last, int(y))
		if rg.fwd[int(y)] {
			rg.fwd[int(x)] = true
		}
		delete(rg.fwd, int(y))
	}
}

// placeAliases gives each aliased buffer its root's offset and drops the NOPs the aliases
// left (after the memory plan, which numbers instructions).
func (rg *rankGen) placeAliases() {
	for y, x := range rg.alias {
		rg.prog.Buffers[y].Offset = rg.prog.Buffers[x].Offset
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
