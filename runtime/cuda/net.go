package cuda

import (
	"fmt"

	"ppc.dev/ppc/ir"
	kernels "ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// The device's communication (device.Net): NCCL communicators, each with a stream of its
// own, ordered against the compute stream by events.
//
// Every transfer and collective is queued on its group's stream behind an event recorded on
// the compute stream, so it sees everything the rank computed before it. The compute stream
// does not wait for it at once: the device keeps the transfers in flight with the memory each
// reads and writes, and an operation of the compute stream (a launch, a copy, a host read)
// that writes what one reads, or touches what one writes, first waits for its event. A
// gradient all-reduce thus overlaps the rest of the backward, and a send overlaps the next
// micro-batch, until something needs their memory. Transfers of different groups are ordered
// the same way among themselves. Sync waits for every stream and forgets what was in flight.
//
// The runtime gives a pipeline pair's two directions a communicator each (a send never queues
// behind a receive on one communicator, which could deadlock two ranks sending to each other)
// and posts receives in the order the sender queues the sends (runtime/devnet.go).

// span is a range of device memory [lo, hi).
type span struct{ lo, hi uint64 }

func spansOf(ts []device.Tensor) []span {
	s := make([]span, 0, len(ts))
	for _, t := range ts {
		if n := t.Bytes(); n > 0 {
			s = append(s, span{t.Addr, t.Addr + uint64(n)})
		}
	}
	return s
}

func overlap(a, b []span) bool {
	for _, x := range a {
		for _, y := range b {
			if x.lo < y.hi && y.lo < x.hi {
				return true
			}
		}
	}
	return false
}

// inflight is a queued transfer: its stream, the event recorded after it, and its memory.
type inflight struct {
	stream        Stream
	event         Event
	reads, writes []span
}

// order makes stream s wait for the transfers in flight on other streams that conflict with
// an operation reading reads and writing writes (d.mu held). The compute stream forgets the
// transfers it has waited for: every later transfer is queued behind a compute event, so it
// is ordered after them too.
func (d *Device) order(s Stream, reads, writes []span) error {
	if len(d.inflight) == 0 {
		return nil
	}
	kept := d.inflight[:0]
	var err error
	for _, f := range d.inflight {
		if err == nil && f.stream != s && (overlap(f.writes, reads) || overlap(f.writes, writes) || overlap(f.reads, writes)) {
			err = d.drv.StreamWait(s, f.event)
			if s == d.stream {
				d.events = append(d.events, f.event)
				continue
			}
		}
		kept = append(kept, f)
	}
	clear(d.inflight[len(kept):])
	d.inflight = kept
	return err
}

// orderCompute is order for an operation of the compute stream on tensors.
func (d *Device) orderCompute(reads, writes []device.Tensor) error {
	if len(d.inflight) == 0 {
		return nil
	}
	return d.order(d.stream, spansOf(reads), spansOf(writes))
}

// Net is the device's communication, or nil without a communication library (Collectives).
func (d *Device) Net() device.Net {
	if d.Collectives == nil {
		return nil
	}
	return deviceNet{d}
}

// deviceNet is the Device as a device.Net (a type of its own, so that a device without
// NCCL is not one).
type deviceNet struct{ d *Device }

// GroupID makes a new NCCL unique id.
func (n deviceNet) GroupID() ([]byte, error) {
	id, err := n.d.Collectives.UniqueID()
	if err != nil {
		return nil, err
	}
	return id.Internal[:], nil
}

// Join makes this device member pos of a group: its communicator and its stream.
func (n deviceNet) Join(id []byte, size, pos int) (device.Group, error) {
	var u UniqueID
	if len(id) != len(u.Internal) {
		return nil, fmt.Errorf("a group id of %d bytes, NCCL's are %d", len(id), len(u.Internal))
	}
	copy(u.Internal[:], id)
	d := n.d
	var c Communicator
	if err := d.drv.Bound(func() (err error) { c, err = d.Collectives.Join(u, size, pos); return err }); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.drv.StreamCreate()
	if err != nil {
		c.Close()
		return nil, err
	}
	d.streams = append(d.streams, s)
	return &group{d: d, comm: c, stream: s, size: size, pos: pos}, nil
}

// Sync waits for every stream's queued work.
func (n deviceNet) Sync() error { return n.d.Sync() }

// group is one communicator with its stream.
type group struct {
	d         *Device
	comm      Communicator
	stream    Stream
	size, pos int
}

// queue runs call (which queues the transfer on g's stream) behind the compute stream's work
// and the conflicting transfers of other streams, and records it as in flight.
func (g *group) queue(reads, writes []device.Tensor, call func() error) error {
	d := g.d
	d.mu.Lock()
	defer d.mu.Unlock()
	e, err := d.event()
	if err != nil {
		return err
	}
	if err := d.drv.EventRecord(e, d.stream); err != nil {
		return err
	}
	// A stream waits for an event's record as it is when the wait is queued, so the event
	// is free again at once.
	err = d.drv.StreamWait(g.stream, e)
	d.events = append(d.events, e)
	if err != nil {
		return err
	}
	rs, ws := spansOf(reads), spansOf(writes)
	if err := d.order(g.stream, rs, ws); err != nil {
		return err
	}
	if err := d.build(); err != nil { // the permutes' kernels
		return err
	}
	if err := d.drv.Bound(call); err != nil {
		return err
	}
	done, err := d.event()
	if err != nil {
		return err
	}
	if err := d.drv.EventRecord(done, g.stream); err != nil {
		return err
	}
	d.inflight = append(d.inflight, inflight{stream: g.stream, event: done, reads: rs, writes: ws})
	return nil
}

func (g *group) Send(t device.Tensor, peer int) error {
	return g.queue([]device.Tensor{t}, nil, func() error { return g.comm.Send(DevicePtr(t.Addr), t.Bytes(), peer, g.stream) })
}

func (g *group) Recv(t device.Tensor, peer int) error {
	return g.queue(nil, []device.Tensor{t}, func() error { return g.comm.Recv(DevicePtr(t.Addr), t.Bytes(), peer, g.stream) })
}

func (g *group) Close() error { return g.d.drv.Bound(g.comm.Close) }

// Abort does not take the device: it must end transfers a stream synchronisation under the
// device's lock is waiting for.
func (g *group) Abort() error { return g.d.drv.Bound(g.comm.Abort) }

// register queues kernels for the next build, once each.
func (d *Device) register(ks ...kernels.Kernel) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range ks {
		if _, ok := d.funcs[k.Name]; !ok {
			d.funcs[k.Name] = 0
			d.pending = append(d.pending, k)
		}
	}
}

// Collective prepares a collective (kernels.PlanCollective): its kernels, and its scratch memory,
// allocated now.
func (g *group) Collective(c device.Coll) (func(in, out device.Tensor) error, error) {
	d := g.d
	count := int64(c.In.NumElements())
	dt := c.In.DType
	p, err := kernels.PlanCollective(c, g.size, g.pos)
	if err != nil {
		return nil, err
	}
	var scratch []device.Tensor   // written by the collective besides its result
	var tmp, tmpOut device.Tensor // the permutes' sides
	if p.Permute != nil {
		d.register(*p.Permute)
		mem, err := d.Alloc(p.Full.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%v scratch: %v", c.Kind, err)
		}
		tmp = mem.At(0, p.Full)
		scratch = append(scratch, tmp)
	}
	if p.PermuteOut != nil {
		d.register(*p.PermuteOut)
		mem, err := d.Alloc(p.Shard.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%v scratch: %v", c.Kind, err)
		}
		tmpOut = mem.At(0, p.Shard)
		scratch = append(scratch, tmpOut)
	}
	var o *ordered
	if p.Fold != nil {
		if o, err = g.prepareOrdered(dt, p); err != nil {
			return nil, err
		}
		scratch = append(scratch, o.parts)
	}
	permuteWith := func(k *kernels.Kernel, dst, src device.Tensor) error {
		n := int64(p.Full.NumElements())
		grid, block := d.Geometry(n)
		d.note([]device.Tensor{src}, dst)
		return d.drv.Launch(d.funcs[k.Name], grid, block, g.stream, src.Addr, dst.Addr, uint64(n))
	}
	permute := func(dst, src device.Tensor) error { return permuteWith(p.Permute, dst, src) }
	// queue queues call on an operand and a result of type want, which call and the scratch
	// write.
	queue := func(want ir.Type, call func(in, out device.Tensor) error) func(in, out device.Tensor) error {
		return func(in, out device.Tensor) error {
			if in.Type.Bytes() != c.In.Bytes() || out.Type.Bytes() != want.Bytes() {
				return fmt.Errorf("%v over %d ranks: buffers of %d and %d bytes for %s → %s", c.Kind, g.size, in.Type.Bytes(), out.Type.Bytes(), c.In, want)
			}
			return g.queue([]device.Tensor{in}, append([]device.Tensor{out}, scratch...), func() error { return call(in, out) })
		}
	}
	switch c.Kind {
	case device.AllReduce:
		if o == nil {
			return queue(c.In, func(in, out device.Tensor) error {
				return g.comm.AllReduce(DevicePtr(in.Addr), DevicePtr(out.Addr), count, dt, c.Op, g.stream)
			}), nil
		}
		return queue(c.In, func(in, out device.Tensor) error {
			if err := o.reduce(in, o.at(out, p.Offs[g.pos], p.Counts[g.pos])); err != nil {
				return err
			}
			return o.share(out)
		}), nil
	case device.Broadcast:
		return queue(c.In, func(in, out device.Tensor) error {
			return g.comm.Broadcast(DevicePtr(in.Addr), DevicePtr(out.Addr), count, dt, c.Root, g.stream)
		}), nil
	case device.AllToAll:
		// Block k of the (permuted) operand to member k and member k's block into slot k,
		// as one NCCL group of sends and receives (ncclSend/ncclRecv, the member's own
		// block included), then the received blocks permuted into the result.
		chunk := uint64(c.In.Bytes()) / uint64(g.size)
		return queue(p.Shard, func(in, out device.Tensor) error {
			src, dst := in, out
			if p.Permute != nil {
				if err := permute(tmp, in); err != nil {
					return err
				}
				src = tmp
			}
			if p.PermuteOut != nil {
				dst = tmpOut
			}
			ops := make([]P2P, 0, 2*g.size)
			for k := range g.size {
				ops = append(ops, P2P{Buf: DevicePtr(src.Addr + uint64(k)*chunk), Bytes: int64(chunk), Peer: k},
					P2P{Recv: true, Buf: DevicePtr(dst.Addr + uint64(k)*chunk), Bytes: int64(chunk), Peer: k})
			}
			d.note([]device.Tensor{src}, dst)
			if err := g.comm.Exchange(ops, g.stream); err != nil {
				return err
			}
			if p.PermuteOut != nil {
				return permuteWith(p.PermuteOut, out, tmpOut)
			}
			return nil
		}), nil
	case device.AllGather:
		return queue(p.Full, func(in, out device.Tensor) error {
			if p.Permute == nil {
				return g.comm.AllGather(DevicePtr(in.Addr), DevicePtr(out.Addr), count, dt, g.stream)
			}
			if err := g.comm.AllGather(DevicePtr(in.Addr), DevicePtr(tmp.Addr), count, dt, g.stream); err != nil {
				return err
			}
			return permute(out, tmp)
		}), nil
	}
	return queue(p.Shard, func(in, out device.Tensor) error {
		src := in
		if p.Permute != nil {
			if err := permute(tmp, in); err != nil {
				return err
			}
			src = tmp
		}
		if o != nil {
			return o.reduce(src, out)
		}
		return g.comm.ReduceScatter(DevicePtr(src.Addr), DevicePtr(out.Addr), int64(p.Shard.NumElements()), dt, c.Op, g.stream)
	}), nil
}

var _ device.Networked = (*Device)(nil)
