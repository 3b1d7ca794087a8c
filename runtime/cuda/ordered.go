package cuda

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// ordered is a float reduction (all-reduce, reduce-scatter) in the runtime's order
// (runtime/dist/doc.go): element i is ((m0[i] ⊕ m1[i]) ⊕ m2[i]) ⊕ … over the members in group
// order, f16 and bf16 combined in f32 and rounded once. NCCL's own reductions combine in ring
// or tree order, which changes with the group's size and NCCL's choice of algorithm, so the
// same model would train differently on different layouts. Instead each member receives
// every member's part of its own chunk (grouped sends and receives: the traffic of a ring's
// reduce-scatter), folds the parts in group order with a kernel, and, for an all-reduce,
// sends its reduced chunk to the others (the traffic of an all-gather). Integer reductions
// are exact in any order and stay NCCL's.
type ordered struct {
	g      *group
	counts []int64 // elements of each member's chunk
	offs   []int64 // and where it starts
	esize  int64
	parts  device.Tensor // [members, counts[pos]]: every member's part of this member's chunk
	kernel string
}

// chunks splits count elements into n chunks in order, the first count%n one longer.
func chunks(count int64, n int) (counts, offs []int64) {
	var at int64
	for k := range int64(n) {
		c := count / int64(n)
		if k < count%int64(n) {
			c++
		}
		counts, offs = append(counts, c), append(offs, at)
		at += c
	}
	return counts, offs
}

// prepareOrdered registers p's fold kernel and allocates the parts' scratch.
func (g *group) prepareOrdered(dt ir.DType, p *collPlan) (*ordered, error) {
	d := g.d
	mine := p.counts[g.pos]
	d.register(*p.fold)
	o := &ordered{g: g, counts: p.counts, offs: p.offs, esize: int64(dt.Size()), kernel: p.fold.Name}
	parts := ir.Type{DType: dt, Shape: ir.Shape{g.size, int(mine)}}
	mem, err := d.Alloc(parts.Bytes())
	if err != nil {
		return nil, fmt.Errorf("reduction scratch: %v", err)
	}
	o.parts = mem.At(0, parts)
	return o, nil
}

// foldKernel writes the kernel that folds n parts of c elements ([n, c], part k at k·c) in
// order into c results.
func foldKernel(name string, dt ir.DType, op string, n int, c int64) (Kernel, error) {
	st, err := storage(dt)
	if err != nil || !dt.IsFloat() {
		return Kernel{}, fmt.Errorf("no ordered reduction of %s", dt)
	}
	ct := classOf(dt).ctype()
	var combine string
	switch op {
	case "sum", "mean":
		combine = "acc = acc + v;"
	case "max": // NaN propagates; ties keep the earlier member's value (its sign of zero)
		combine = "acc = (v > acc || v != v) ? v : acc;"
	case "min":
		combine = "acc = (v < acc || v != v) ? v : acc;"
	default:
		return Kernel{}, fmt.Errorf("no reduction %q", op)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// %s: %d members' parts of %d %s, folded in member order\n", name, n, c, dt)
	fmt.Fprintf(&b, "PPC_GLOBAL void %s(const %s* __restrict__ in0, %s* __restrict__ out, long long n) {\n  PPC_FOR_EACH(i, n) {\n", name, st, st)
	fmt.Fprintf(&b, "    %s acc = %s;\n", ct, load(dt, "in0", "i"))
	fmt.Fprintf(&b, "    for (long long k = 1; k < %dLL; k++) {\n      %s v = %s;\n      %s\n    }\n", n, ct, load(dt, "in0", fmt.Sprintf("k * %dLL + i", c)), combine)
	if op == "mean" {
		fmt.Fprintf(&b, "    acc = acc / (%s)%d;\n", ct, n)
	}
	fmt.Fprintf(&b, "    out[i] = %s;\n  }\n}\n", store(dt, round(dt, "acc")))
	writeHostLauncher(&b, name, []string{fmt.Sprintf("(const %s*)in[0]", st)}, st)
	in := ir.Type{DType: dt, Shape: ir.Shape{n, int(c)}}
	return Kernel{Name: name, Body: b.String(), N: c, In: []ir.Type{in}, Out: ir.Type{DType: dt, Shape: ir.Shape{int(c)}}}, nil
}

// at is the tensor of n elements at element offset off of t.
func (o *ordered) at(t device.Tensor, off, n int64) device.Tensor {
	return device.Tensor{Type: ir.Type{DType: t.Type.DType, Shape: ir.Shape{int(n)}}, Addr: t.Addr + uint64(off*o.esize)}
}

// reduce queues (on the group's stream, inside group.queue) the exchange of the parts and
// the fold of this member's chunk of in into mine.
func (o *ordered) reduce(in, mine device.Tensor) error {
	g, d := o.g, o.g.d
	c := o.counts[g.pos]
	var ops []P2P
	for j := range g.size {
		part := o.at(o.parts, int64(j)*c, c)
		if j == g.pos {
			if c == 0 {
				continue
			}
			if err := d.drv.CopyDtoD(DevicePtr(part.Addr), DevicePtr(in.Addr+uint64(o.offs[j]*o.esize)), uint64(c*o.esize), g.stream); err != nil {
				return err
			}
			continue
		}
		ops = append(ops, P2P{Buf: DevicePtr(in.Addr + uint64(o.offs[j]*o.esize)), Bytes: o.counts[j] * o.esize, Peer: j},
			P2P{Recv: true, Buf: DevicePtr(part.Addr), Bytes: c * o.esize, Peer: j})
	}
	ops = nonEmpty(ops)
	if err := g.comm.Exchange(ops, g.stream); err != nil {
		return err
	}
	if c == 0 {
		return nil
	}
	grid, block := d.Geometry(c)
	d.note([]device.Tensor{o.parts}, mine)
	return d.drv.Launch(d.funcs[o.kernel], grid, block, g.stream, o.parts.Addr, mine.Addr, uint64(c))
}

// share queues the exchange of the reduced chunks of out: this member's to every other, and
// theirs into place.
func (o *ordered) share(out device.Tensor) error {
	g := o.g
	var ops []P2P
	for j := range g.size {
		if j == g.pos {
			continue
		}
		mine := o.at(out, o.offs[g.pos], o.counts[g.pos])
		theirs := o.at(out, o.offs[j], o.counts[j])
		ops = append(ops, P2P{Buf: DevicePtr(mine.Addr), Bytes: mine.Bytes(), Peer: j}, P2P{Recv: true, Buf: DevicePtr(theirs.Addr), Bytes: theirs.Bytes(), Peer: j})
	}
	return g.comm.Exchange(nonEmpty(ops), g.stream)
}

// nonEmpty drops the transfers of empty chunks (fewer elements than members): both sides
// know the chunk's size, so both drop them.
func nonEmpty(ops []P2P) []P2P {
	kept := ops[:0]
	for _, p := range ops {
		if p.Bytes > 0 {
			kept = append(kept, p)
		}
	}
	return kept
}
