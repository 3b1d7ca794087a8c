package codegen

import (
	"testing"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
)

// TestAliasReshapes: a reshape of an activation written once becomes a view of it (a NOP,
// the root's lifetime covering the view's uses, the same offset); one whose operand is also
// accumulated into later, or whose result is written again, stays a copy.
func TestAliasReshapes(t *testing.T) {
	build := func(extra ...*pb.Instr) *rankGen {
		rg := &rankGen{prog: &pb.Program{}, first: map[int]int{}, last: map[int]int{}, alias: map[int32]int32{}, fwd: map[int]bool{}}
		for i, shape := range [][]int64{{2, 6}, {12}, {3, 4}, {12}} {
			rg.prog.Buffers = append(rg.prog.Buffers, &pb.Buffer{Id: int32(i), Role: pb.Role_ACTIVATION, Dtype: pb.DType_F32, Shape: shape})
		}
		rg.prog.Kernels = []*pb.Kernel{{Op: "relu"}, {Op: "reshape"}}
		rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: 0, In: []int32{3}, Out: []int32{0}}) // b0 = relu(b3)
		rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: 1, In: []int32{0}, Out: []int32{1}}) // b1 = reshape(b0)
		rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: 1, In: []int32{1}, Out: []int32{2}}) // b2 = reshape(b1)
		for _, in := range extra {
			rg.instr(in)
		}
		rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: 0, In: []int32{2}, Out: []int32{3}}) // b3 = relu(b2): b2's last use
		return rg
	}
	rg := build()
	rg.aliasReshapes()
	if rg.alias[1] != 0 || rg.alias[2] != 0 {
		t.Fatalf("aliases %v, want b1 and b2 views of b0", rg.alias)
	}
	if k := rg.prog.Instrs[1].Kind; k != pb.Instr_NOP || rg.prog.Instrs[2].Kind != pb.Instr_NOP {
		t.Errorf("the reshapes are %v and %v, want NOPs", k, rg.prog.Instrs[2].Kind)
	}
	if _, ok := rg.first[2]; ok || rg.last[0] != 3 {
		t.Errorf("lifetimes: b0 last %d (want 3, b2's last use), b2 still planned: %v", rg.last[0], ok)
	}
	rg.planMemory()
	rg.placeAliases()
	if off := rg.prog.Buffers[0].Offset; rg.prog.Buffers[1].Offset != off || rg.prog.Buffers[2].Offset != off || rg.prog.Buffers[3].Offset == off {
		t.Errorf("offsets b0..b3: %d %d %d %d", off, rg.prog.Buffers[1].Offset, rg.prog.Buffers[2].Offset, rg.prog.Buffers[3].Offset)
	}
	if len(rg.prog.Instrs) != 2 || rg.info.Instructions != 2 {
		t.Errorf("%d instructions left (%d counted), want the two relus", len(rg.prog.Instrs), rg.info.Instructions)
	}

	// b0 accumulated into after the reshape read it: a view would see the sum, so b1 stays a
	// copy (b2 may view b1, written once).
	rg = build(&pb.Instr{Kind: pb.Instr_ACCUM, In: []int32{3}, Out: []int32{0}})
	rg.aliasReshapes()
	if _, ok := rg.alias[1]; ok || rg.alias[2] != 1 {
		t.Errorf("with b0 written twice: aliases %v, want b2 → b1 only", rg.alias)
	}
	// b2 written again by an in-place all-reduce: b1's view may be taken, b2's not.
	rg = build(&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{2}})
	rg.aliasReshapes()
	if _, ok := rg.alias[2]; ok || rg.alias[1] != 0 {
		t.Errorf("with b2 reduced in place: aliases %v, want b1 → b0 only", rg.alias)
	}
}

// TestAliasConcats: a channel concatenation of activations written once hosts them (each a
// view at its byte offset, the concatenation a NOP, the result live from the first
// operand's producer); it stays a copy where an operand is accumulated into again, appears
// twice, or would sit at an offset that breaks the arena's alignment, and where the axis
// has a dim before it greater than 1.
func TestAliasConcats(t *testing.T) {
	// b0, b1: [lead, width] (at [1, 16]: 64 bytes each); b2 their concatenation over dim 1.
	build := func(width int64, lead int64, extra ...*pb.Instr) *rankGen {
		rg := &rankGen{prog: &pb.Program{}, first: map[int]int{}, last: map[int]int{}, alias: map[int32]int32{}, fwd: map[int]bool{}}
		for i, shape := range [][]int64{{lead, width}, {lead, width}, {lead, 2 * width}, {lead, 2 * width}} {
			rg.prog.Buffers = append(rg.prog.Buffers, &pb.Buffer{Id: int32(i), Role: pb.Role_ACTIVATION, Dtype: pb.DType_F32, Shape: shape})
		}
		attrs := attrsToProto(ir.Attrs{{Name: "axis", Value: ir.Int(1)}})
		rg.prog.Kernels = []*pb.Kernel{{Op: "relu"}, {Op: "concat", Attrs: attrs}}
		rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: 0, In: []int32{3}, Out: []int32{0}}) // b0 = relu(b3)
		rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: 0, In: []int32{3}, Out: []int32{1}}) // b1 = relu(b3)
		for _, in := range extra {
			rg.instr(in)
		}
		rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: 1, In: []int32{0, 1}, Out: []int32{2}}) // b2 = concat(b0, b1)
		rg.instr(&pb.Instr{Kind: pb.Instr_LAUNCH, Kernel: 0, In: []int32{2}, Out: []int32{3}})    // b3 = relu(b2)
		return rg
	}
	rg := build(16, 1)
	rg.aliasConcats()
	if rg.alias[0] != 2 || rg.alias[1] != 2 || rg.aliasOff[0] != 0 || rg.aliasOff[1] != 64 {
		t.Fatalf("aliases %v offsets %v, want b0 and b1 views of b2 at 0 and 64", rg.alias, rg.aliasOff)
	}
	if rg.prog.Instrs[2].Kind != pb.Instr_NOP || rg.first[2] != 0 || rg.last[2] != 3 {
		t.Errorf("concat %v, b2 live %d..%d: want a NOP, live from b0's producer (0) to its use (3)", rg.prog.Instrs[2].Kind, rg.first[2], rg.last[2])
	}
	rg.planMemory()
	rg.placeAliases()
	if off := rg.prog.Buffers[2].Offset; rg.prog.Buffers[0].Offset != off || rg.prog.Buffers[1].Offset != off+64 {
		t.Errorf("offsets b0 %d b1 %d b2 %d, want b2's and b2's + 64", rg.prog.Buffers[0].Offset, rg.prog.Buffers[1].Offset, off)
	}
	for _, c := range []struct {
		what string
		rg   *rankGen
	}{
		{"b1 accumulated into again", build(16, 1, &pb.Instr{Kind: pb.Instr_ACCUM, In: []int32{3}, Out: []int32{1}})},
		{"12-byte operands (b1 off the arena's alignment)", build(3, 1)},
		{"a leading dim of 2 (each operand two ranges of the result)", build(16, 2)},
	} {
		c.rg.aliasConcats()
		if len(c.rg.alias) != 0 {
			t.Errorf("%s: aliases %v, want none", c.what, c.rg.alias)
		}
	}
	dup := build(16, 1)
	dup.prog.Instrs[2].In = []int32{0, 0}
	dup.aliasConcats()
	if len(dup.alias) != 0 {
		t.Errorf("concat(b0, b0): aliases %v, want none", dup.alias)
	}
}
