package cuda

import (
	"fmt"

	"ppc.dev/ppc/ir"
	kernels "ppc.dev/ppc/kernels/cuda"
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

// prepareOrdered registers p's fold kernel and allocates the parts' scratch.
func (g *group) prepareOrdered(dt ir.DType, p *kernels.CollPlan) (*ordered, error) {
	d := g.d
	mine := p.Counts[g.pos]
	d.register(*p.Fold)
	o := &ordered{g: g, counts: p.Counts, offs: p.Offs, esize: int64(dt.Size()), kernel: p.Fold.Name}
	parts := ir.Type{DType: dt, Shape: ir.Shape{g.size, int(mine)}}
	mem, err := d.Alloc(parts.Bytes())
	if err != nil {
		return nil, fmt.Errorf("reduction scratch: %v", err)
	}
	o.parts = mem.At(0, parts)
	return o, nil
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
