package dist

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Op is one collective instruction as every member of its group must agree on it. The
// loader builds it once per instruction (runtime's prepareCollective), so running a
// collective allocates nothing but its record.
type Op struct {
	Kind    pb.Instr_Kind
	Group   []int  // in the program's order: reduction, concatenation and slice order
	Members string // MembersKey(Group)
	DType   ir.DType
	Shape   ir.Shape // in[0]'s shape, the same on every member
	Dim     int      // ALL_GATHER, REDUCE_SCATTER: the dim; ALL_TO_ALL: the dim the input is cut along
	// ALL_TO_ALL: the dim along which the blocks received are concatenated.
	ConcatDim int
	Reduce    pb.Instr_ReduceOp
	Root      int // position in Group
	Tag       int64
}

// Key matches the calls of one collective: the group's member set and how many
// collectives each member had issued on that set before (see doc.go for why). The loader
// matches them across programs by it, the transports at run time.
type Key struct {
	Members string // the sorted member ranks, "0,1,3"
	Seq     int
}

// collRecord is one collective in flight. Members register their buffers, wait for all to
// arrive, do their share of the work reading the others' inputs (outside the transport lock,
// so disjoint groups run concurrently), wait until every member has finished reading, then
// finish on their own memory. A member's input must stay untouched until that second
// barrier, which holds because the member itself is blocked in the collective.
type collRecord struct {
	key      Key
	op       *Op // as the first member to arrive described it
	first    int // that member's rank
	ins      [][]byte
	outs     [][]byte
	here     []bool // by group position
	arrived  int
	computed int
	left     int
	scratch  []byte // ALL_REDUCE: the reduced tensor, computed in chunks by the members
}

// MembersKey is a group's member set as Op.Members and Key hold it: its sorted ranks, "0,1,3".
func MembersKey(group []int) string {
	s := slices.Clone(group)
	slices.Sort(s)
	var b strings.Builder
	for i, r := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r))
	}
	return b.String()
}

var collNames = map[pb.Instr_Kind]string{pb.Instr_ALL_REDUCE: "all-reduce", pb.Instr_ALL_GATHER: "all-gather",
	pb.Instr_REDUCE_SCATTER: "reduce-scatter", pb.Instr_BROADCAST: "broadcast", pb.Instr_ALL_TO_ALL: "all-to-all"}

// OpName names a collective kind for messages ("all-gather"); "" for a kind that is not a
// collective.
func OpName(k pb.Instr_Kind) string { return collNames[k] }

// String describes the collective for errors and hang reports:
// "all-gather over ranks [0 1] (dim 1, f32[4,3])".
func (c *Op) String() string {
	var b strings.Builder
	b.WriteString(collNames[c.Kind])
	if c.Kind == pb.Instr_ALL_REDUCE || c.Kind == pb.Instr_REDUCE_SCATTER {
		b.WriteString(" " + strings.ToLower(c.Reduce.String()))
	}
	if c.Kind == pb.Instr_BROADCAST {
		fmt.Fprintf(&b, " from rank %d", c.Group[c.Root])
	}
	fmt.Fprintf(&b, " over ranks %v (", c.Group)
	if c.Kind == pb.Instr_ALL_GATHER || c.Kind == pb.Instr_REDUCE_SCATTER {
		fmt.Fprintf(&b, "dim %d, ", c.Dim)
	}
	if c.Kind == pb.Instr_ALL_TO_ALL {
		fmt.Fprintf(&b, "split dim %d, concat dim %d, ", c.Dim, c.ConcatDim)
	}
	b.WriteString(ir.Type{DType: c.DType, Shape: c.Shape}.String())
	if c.Tag != 0 {
		fmt.Fprintf(&b, ", tag %d", c.Tag)
	}
	b.WriteByte(')')
	return b.String()
}

// Same reports whether two members describe the collective alike.
func (c *Op) Same(d *Op) bool {
	return c.Kind == d.Kind && slices.Equal(c.Group, d.Group) && c.DType == d.DType && c.Shape.Equal(d.Shape) &&
		c.Dim == d.Dim && c.ConcatDim == d.ConcatDim && c.Reduce == d.Reduce && c.Root == d.Root && c.Tag == d.Tag
}

// Position is rank r's position in the group (-1: not a member).
func (c *Op) Position(r int) int { return slices.Index(c.Group, r) }

// Collective runs op for rank r with its buffers in and out (out is in for an in-place
// ALL_REDUCE or BROADCAST). The loader has checked the shapes against op, and the members
// check op against each other here.
func (t *transport) Collective(r int, op *Op, in, out device.Tensor) error {
	n := len(op.Group)
	pos := op.Position(r)
	t.mu.Lock()
	if t.aborted != nil {
		t.mu.Unlock()
		return ErrAborted
	}
	seq := t.seq[r][op.Members]
	t.seq[r][op.Members] = seq + 1
	key := Key{op.Members, seq}
	rec := t.colls[key]
	if rec == nil {
		rec = &collRecord{key: key, op: op, first: r, ins: make([][]byte, n), outs: make([][]byte, n), here: make([]bool, n)}
		t.colls[key] = rec
	} else if !rec.op.Same(op) {
		t.mu.Unlock()
		return fmt.Errorf("collective #%d over ranks {%s} does not match: rank %d issues %v, rank %d issues %v",
			seq, op.Members, r, op, rec.first, rec.op)
	}
	rec.ins[pos], rec.outs[pos], rec.here[pos] = in.Data, out.Data, true
	rec.arrived++
	if rec.arrived == n {
		if op.Kind == pb.Instr_ALL_REDUCE {
			rec.scratch = t.getScratch(len(in.Data))
		}
		t.cond.Broadcast()
	}
	if err := t.waitColl(r, rec, func() bool { return rec.arrived == n }); err != nil {
		t.mu.Unlock()
		return err
	}
	t.mu.Unlock()

	collWork(rec, pos)

	t.mu.Lock()
	rec.computed++
	if rec.computed == n {
		t.cond.Broadcast()
	}
	if err := t.waitColl(r, rec, func() bool { return rec.computed == n }); err != nil {
		t.mu.Unlock()
		return err
	}
	scratch := rec.scratch
	t.mu.Unlock()

	if op.Kind == pb.Instr_ALL_REDUCE {
		copy(out.Data, scratch) // every member copies the same bytes: bit-identical results
	}

	t.mu.Lock()
	rec.left++
	if rec.left == n {
		delete(t.colls, key)
		t.putScratch(scratch)
	}
	t.mu.Unlock()
	return nil
}

// getScratch returns a 64-byte-aligned buffer of n bytes, reusing one a finished all-reduce
// gave back (a step issues the same all-reduces every time). t.mu is held.
func (t *transport) getScratch(n int) []byte {
	for i, s := range t.scratch {
		if cap(s) >= n {
			t.scratch = slices.Delete(t.scratch, i, i+1)
			return s[:n]
		}
	}
	return device.HostBytes(int64(n))
}

// putScratch keeps a few buffers for reuse. t.mu is held.
func (t *transport) putScratch(s []byte) {
	if s == nil {
		return
	}
	if len(t.scratch) >= 4 {
		t.scratch = t.scratch[1:]
	}
	t.scratch = append(t.scratch, s)
}

// collWork is member pos's share of a collective once every member has arrived: it reads
// the members' inputs and writes only its own output (or, for ALL_REDUCE, its chunk of the
// shared result), so members work in parallel without locks.
func collWork(rec *collRecord, pos int) {
	op := rec.op
	n := len(op.Group)
	es := op.DType.Size()
	outer, d, inner := splitAt(op.Shape, op.Dim)
	switch op.Kind {
	case pb.Instr_ALL_REDUCE:
		// Element i's value does not depend on which member computes it: every element is
		// combined over the members in group order.
		elems := op.Shape.NumElements()
		lo, hi := elems*pos/n, elems*(pos+1)/n
		reduceInto(op.DType, op.Reduce, rec.scratch[lo*es:hi*es], rec.ins, runs{rows: 1, run: hi - lo, src: lo})
	case pb.Instr_REDUCE_SCATTER:
		// in is [outer, d, inner] (row-major); this member keeps rows [pos·d/n, (pos+1)·d/n)
		// of the middle dim: one contiguous run of d/n·inner elements per outer index.
		run := d / n * inner
		reduceInto(op.DType, op.Reduce, rec.outs[pos], rec.ins, runs{rows: outer, run: run, src: pos * run, srcStride: d * inner, dstStride: run})
	case pb.Instr_ALL_GATHER:
		// out is [outer, n·d, inner]; member g's [outer, d, inner] lands at middle offset g·d.
		run := d * inner * es
		out := rec.outs[pos]
		for o := range outer {
			for g, b := range rec.ins {
				copy(out[(o*n+g)*run:(o*n+g+1)*run], b[o*run:(o+1)*run])
			}
		}
	case pb.Instr_ALL_TO_ALL:
		// Member g's block pos (along Dim) lands at position g along ConcatDim.
		for g, b := range rec.ins {
			placeBlock(op, rec.outs[pos], g, blockOf(op, b, pos))
		}
	case pb.Instr_BROADCAST:
		src, dst := rec.ins[op.Root], rec.outs[pos]
		if len(dst) > 0 && &dst[0] != &src[0] {
			copy(dst, src)
		}
	}
}

// blockOf is block k of an all-to-all's input in (op.Shape), cut into group-size blocks
// along op.Dim, packed row-major.
func blockOf(op *Op, in []byte, k int) []byte {
	n, es := len(op.Group), op.DType.Size()
	outer, d, inner := splitAt(op.Shape, op.Dim)
	run := d / n * inner * es
	b := make([]byte, 0, outer*run)
	for o := range outer {
		off := o*d*inner*es + k*run
		b = append(b, in[off:off+run]...)
	}
	return b
}

// placeBlock writes the block member g sent (packed, op.Shape with op.Dim divided by the
// group size) at position g along op.ConcatDim of the all-to-all's output out.
func placeBlock(op *Op, out []byte, g int, block []byte) {
	n, es := len(op.Group), op.DType.Size()
	shape := slices.Clone(op.Shape)
	shape[op.Dim] /= n
	outer, d, inner := splitAt(shape, op.ConcatDim)
	run := d * inner * es
	for o := range outer {
		copy(out[(o*n+g)*run:(o*n+g+1)*run], block[o*run:(o+1)*run])
	}
}

// splitAt views shape as [outer, shape[dim], inner].
func splitAt(shape ir.Shape, dim int) (outer, d, inner int) {
	if len(shape) == 0 {
		return 1, 1, 1
	}
	outer, inner = 1, 1
	for _, x := range shape[:dim] {
		outer *= x
	}
	for _, x := range shape[dim+1:] {
		inner *= x
	}
	return outer, shape[dim], inner
}

// reduceBlock is how many elements are combined at a time: the destination block stays in
// L1 while each member's block streams through it.
const reduceBlock = 2048

// runs describes the elements a reduction combines: rows runs of run contiguous elements,
// row o reading every member's elements [src+o·srcStride, +run) and writing dst's
// [o·dstStride, +run). Strided rows are how a reduce-scatter along an inner dim of a
// row-major tensor picks its slice.
type runs struct{ rows, run, src, srcStride, dstStride int }

// reduceInto sets dst[i] = srcs[0][i] ⊕ srcs[1][i] ⊕ … ⊕ srcs[n−1][i], left to right, for
// every element i that rs selects (⊕ the op; MEAN divides the sum by n). This evaluation
// order is the transport contract (doc.go). f16 and bf16 combine in f32 and round
// once.
func reduceInto(dt ir.DType, op pb.Instr_ReduceOp, dst []byte, srcs [][]byte, rs runs) {
	switch dt {
	case ir.F32:
		reduceTyped(op, device.Tensor{Data: dst}.F32(), viewAll(srcs, device.Tensor.F32), rs)
	case ir.F64:
		reduceTyped(op, device.Tensor{Data: dst}.F64(), viewAll(srcs, device.Tensor.F64), rs)
	case ir.I64:
		reduceTyped(op, device.Tensor{Data: dst}.I64(), viewAll(srcs, device.Tensor.I64), rs)
	case ir.I32:
		reduceTyped(op, device.Tensor{Data: dst}.I32(), viewAll(srcs, device.Tensor.I32), rs)
	case ir.F16:
		reduceHalf(op, device.Tensor{Data: dst}.U16(), viewAll(srcs, device.Tensor.U16), rs, ir.F16ToF32, ir.F32ToF16)
	case ir.BF16:
		reduceHalf(op, device.Tensor{Data: dst}.U16(), viewAll(srcs, device.Tensor.U16), rs, ir.BF16ToF32, ir.F32ToBF16)
	}
}

func viewAll[T any](bs [][]byte, view func(device.Tensor) []T) [][]T {
	out := make([][]T, len(bs))
	for i, b := range bs {
		out[i] = view(device.Tensor{Data: b})
	}
	return out
}

type number interface {
	~float32 | ~float64 | ~int64 | ~int32
}

// isNaN is false for integers.
func isNaN[T number](v T) bool { return v != v }

// combine folds src into acc elementwise: acc[i] = acc[i] ⊕ src[i]. MAX and MIN propagate
// NaN (as torch.max does): once acc[i] is NaN it stays NaN, and a NaN in src replaces it.
func combine[T number](op pb.Instr_ReduceOp, acc, src []T) {
	src = src[:len(acc)]
	switch op {
	case pb.Instr_SUM, pb.Instr_MEAN:
		for i, v := range src {
			acc[i] += v
		}
	case pb.Instr_MAX:
		for i, v := range src {
			if v > acc[i] || isNaN(v) {
				acc[i] = v
			}
		}
	case pb.Instr_MIN:
		for i, v := range src {
			if v < acc[i] || isNaN(v) {
				acc[i] = v
			}
		}
	}
}

func reduceTyped[T number](op pb.Instr_ReduceOp, dst []T, srcs [][]T, rs runs) {
	n := T(len(srcs))
	for o := range rs.rows {
		d, s0 := dst[o*rs.dstStride:][:rs.run], rs.src+o*rs.srcStride
		for lo := 0; lo < rs.run; lo += reduceBlock {
			hi := min(lo+reduceBlock, rs.run)
			acc := d[lo:hi]
			copy(acc, srcs[0][s0+lo:s0+hi])
			for _, s := range srcs[1:] {
				combine(op, acc, s[s0+lo:s0+hi])
			}
			if op == pb.Instr_MEAN {
				for i := range acc {
					acc[i] /= n
				}
			}
		}
	}
}

func reduceHalf(op pb.Instr_ReduceOp, dst []uint16, srcs [][]uint16, rs runs, widen func(uint16) float32, narrow func(float32) uint16) {
	var acc, part [reduceBlock]float32
	n := float32(len(srcs))
	for o := range rs.rows {
		d, s0 := dst[o*rs.dstStride:][:rs.run], rs.src+o*rs.srcStride
		for lo := 0; lo < rs.run; lo += reduceBlock {
			hi := min(lo+reduceBlock, rs.run)
			a, p := acc[:hi-lo], part[:hi-lo]
			for i, v := range srcs[0][s0+lo : s0+hi] {
				a[i] = widen(v)
			}
			for _, s := range srcs[1:] {
				for i, v := range s[s0+lo : s0+hi] {
					p[i] = widen(v)
				}
				combine(op, a, p)
			}
			for i, v := range a {
				if op == pb.Instr_MEAN {
					v /= n
				}
				d[lo+i] = narrow(v)
			}
		}
	}
}

// Reducible reports whether ALL_REDUCE and REDUCE_SCATTER can combine dt with op.
func Reducible(dt ir.DType, op pb.Instr_ReduceOp) error {
	switch dt {
	case ir.F32, ir.F64, ir.F16, ir.BF16:
	case ir.I64, ir.I32:
		if op == pb.Instr_MEAN {
			return fmt.Errorf("mean of %s (integer mean is not defined; reduce the sum)", dt)
		}
	default:
		return fmt.Errorf("cannot reduce %s (reductions take f32, f64, f16, bf16, i64, i32)", dt)
	}
	if _, ok := pb.Instr_ReduceOp_name[int32(op)]; !ok {
		return fmt.Errorf("unknown reduce op %d", op)
	}
	return nil
}
