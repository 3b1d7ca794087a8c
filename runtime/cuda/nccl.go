package cuda

import (
	"fmt"

	"ppc.dev/ppc/ir"
)

// NCCL is the binding of libnccl's communicator and collective entry points ppc uses: one
// communicator per process group, made from a unique id that the group's first rank creates
// and the run's rendezvous (runtime's store) hands to the others; collectives and
// point-to-point transfers queued on a stream, alone (a pipeline pair's two directions are
// two communicators, net.go) or grouped (the exchanges of an ordered reduction, ordered.go).
type NCCL struct {
	lib            *Library
	getUniqueID    func(id *UniqueID) int32
	commInitRank   func(comm *uintptr, nranks int32, id UniqueID, rank int32) int32
	commDestroy    func(comm uintptr) int32
	commAbort      func(comm uintptr) int32
	groupStart     func() int32
	groupEnd       func() int32
	allReduce      func(send, recv uintptr, count uint64, dt, op int32, comm, stream uintptr) int32
	allGather      func(send, recv uintptr, sendcount uint64, dt int32, comm, stream uintptr) int32
	reduceScatter  func(send, recv uintptr, recvcount uint64, dt, op int32, comm, stream uintptr) int32
	broadcast      func(send, recv uintptr, count uint64, dt, root int32, comm, stream uintptr) int32
	send           func(buf uintptr, count uint64, dt, peer int32, comm, stream uintptr) int32
	recv           func(buf uintptr, count uint64, dt, peer int32, comm, stream uintptr) int32
	getErrorString func(rc int32) string
}

// UniqueID is ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank (purego
// passes structs by value on linux amd64 and arm64).
type UniqueID struct{ Internal [128]byte }

// Comm is a communicator of one process group.
type Comm struct {
	nccl   *NCCL
	handle uintptr
	Ranks  int
	Rank   int
}

// OpenNCCL binds libnccl's entry points.
func OpenNCCL(l *Library) (*NCCL, error) {
	if !l.Found() {
		return nil, fmt.Errorf("NCCL is not available: %s", l.Err)
	}
	n := &NCCL{lib: l}
	if err := l.bind([]binding{{&n.getUniqueID, "ncclGetUniqueId"}, {&n.commInitRank, "ncclCommInitRank"}, {&n.commDestroy, "ncclCommDestroy"}, {&n.commAbort, "ncclCommAbort"},
		{&n.allReduce, "ncclAllReduce"}, {&n.allGather, "ncclAllGather"}, {&n.reduceScatter, "ncclReduceScatter"}, {&n.broadcast, "ncclBroadcast"},
		{&n.send, "ncclSend"}, {&n.recv, "ncclRecv"}, {&n.groupStart, "ncclGroupStart"}, {&n.groupEnd, "ncclGroupEnd"},
		{&n.getErrorString, "ncclGetErrorString"}}...); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *NCCL) check(what string, rc int32) error {
	if rc == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", what, n.getErrorString(rc))
}

// UniqueID makes a new communicator id.
func (n *NCCL) UniqueID() (UniqueID, error) {
	var id UniqueID
	return id, n.check("ncclGetUniqueId", n.getUniqueID(&id))
}

// Join makes this process rank of a group of ranks with id (every member calls it with the
// same id; it returns once all have).
func (n *NCCL) Join(id UniqueID, ranks, rank int) (Communicator, error) {
	c := &Comm{nccl: n, Ranks: ranks, Rank: rank}
	if err := n.check("ncclCommInitRank", n.commInitRank(&c.handle, int32(ranks), id, int32(rank))); err != nil {
		return nil, err
	}
	return c, nil
}

// Close destroys the communicator.
func (c *Comm) Close() error { return c.nccl.check("ncclCommDestroy", c.nccl.commDestroy(c.handle)) }

// Abort ends the communicator's transfers in flight and frees it (another member failed);
// it may be called while another thread waits for them.
func (c *Comm) Abort() error { return c.nccl.check("ncclCommAbort", c.nccl.commAbort(c.handle)) }

// ncclType is the ncclDataType_t of a dtype (nccl.h's values).
func ncclType(d ir.DType) (int32, error) {
	switch d {
	case ir.I8, ir.Bool:
		return 0, nil
	case ir.U8:
		return 1, nil
	case ir.I32:
		return 2, nil
	case ir.I64:
		return 4, nil
	case ir.F16:
		return 6, nil
	case ir.F32:
		return 7, nil
	case ir.F64:
		return 8, nil
	case ir.BF16:
		return 9, nil
	}
	return 0, fmt.Errorf("NCCL has no type for %s", d)
}

// ncclOps are ncclRedOp_t's values by ppc's reduce op names (mean is ncclAvg, NCCL 2.10 on).
var ncclOps = map[string]int32{"sum": 0, "prod": 1, "max": 2, "min": 3, "mean": 4}

// ncclTypeOp is the ncclDataType_t and ncclRedOp_t of a reduction.
func ncclTypeOp(d ir.DType, op string) (int32, int32, error) {
	t, err := ncclType(d)
	if err != nil {
		return 0, 0, err
	}
	v, ok := ncclOps[op]
	if !ok {
		return 0, 0, fmt.Errorf("NCCL has no reduction %q", op)
	}
	return t, v, nil
}

// AllReduce reduces count elements of send across the group into recv (in place when equal).
func (c *Comm) AllReduce(send, recv DevicePtr, count int64, dt ir.DType, op string, s Stream) error {
	t, o, err := ncclTypeOp(dt, op)
	if err != nil {
		return err
	}
	return c.nccl.check("ncclAllReduce", c.nccl.allReduce(uintptr(send), uintptr(recv), uint64(count), t, o, c.handle, uintptr(s)))
}

// AllGather concatenates every rank's count elements, in rank order, into recv.
func (c *Comm) AllGather(send, recv DevicePtr, count int64, dt ir.DType, s Stream) error {
	t, err := ncclType(dt)
	if err != nil {
		return err
	}
	return c.nccl.check("ncclAllGather", c.nccl.allGather(uintptr(send), uintptr(recv), uint64(count), t, c.handle, uintptr(s)))
}

// ReduceScatter reduces send (ranks × count elements) and leaves block rank in recv.
func (c *Comm) ReduceScatter(send, recv DevicePtr, count int64, dt ir.DType, op string, s Stream) error {
	t, o, err := ncclTypeOp(dt, op)
	if err != nil {
		return err
	}
	return c.nccl.check("ncclReduceScatter", c.nccl.reduceScatter(uintptr(send), uintptr(recv), uint64(count), t, o, c.handle, uintptr(s)))
}

// Broadcast copies root's count elements to every rank's recv.
func (c *Comm) Broadcast(send, recv DevicePtr, count int64, dt ir.DType, root int, s Stream) error {
	t, err := ncclType(dt)
	if err != nil {
		return err
	}
	return c.nccl.check("ncclBroadcast", c.nccl.broadcast(uintptr(send), uintptr(recv), uint64(count), t, int32(root), c.handle, uintptr(s)))
}

// Send queues bytes of buf to group rank peer on the stream (as ncclUint8: a message's bytes
// whatever its dtype).
func (c *Comm) Send(buf DevicePtr, bytes int64, peer int, s Stream) error {
	return c.nccl.check("ncclSend", c.nccl.send(uintptr(buf), uint64(bytes), 1, int32(peer), c.handle, uintptr(s)))
}

// Recv queues the reception of bytes from group rank peer into buf on the stream.
func (c *Comm) Recv(buf DevicePtr, bytes int64, peer int, s Stream) error {
	return c.nccl.check("ncclRecv", c.nccl.recv(uintptr(buf), uint64(bytes), 1, int32(peer), c.handle, uintptr(s)))
}

// P2P is one send or receive of bytes with group rank Peer.
type P2P struct {
	Recv  bool
	Buf   DevicePtr
	Bytes int64
	Peer  int
}

// Exchange queues sends and receives as one NCCL group, so that their order does not matter
// (each member sends to and receives from every other). The group is ended even after a
// failed call, so that NCCL's group state is not left open.
func (c *Comm) Exchange(ops []P2P, s Stream) error {
	if len(ops) == 0 {
		return nil
	}
	if err := c.nccl.check("ncclGroupStart", c.nccl.groupStart()); err != nil {
		return err
	}
	var first error
	for _, p := range ops {
		var err error
		if p.Recv {
			err = c.Recv(p.Buf, p.Bytes, p.Peer, s)
		} else {
			err = c.Send(p.Buf, p.Bytes, p.Peer, s)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	if err := c.nccl.check("ncclGroupEnd", c.nccl.groupEnd()); err != nil && first == nil {
		first = err
	}
	return first
}

// Collectives is the communication library the device's groups run on: NCCL on GPUs
// (*NCCL), an in-process stand-in across emulated devices in the tests.
type Collectives interface {
	// UniqueID makes a new communicator id (on the group's first rank).
	UniqueID() (UniqueID, error)
	// Join makes this process rank of a group of ranks with id; every member calls it with
	// the same id, and it returns once all have.
	Join(id UniqueID, ranks, rank int) (Communicator, error)
}

// Communicator is one group's communicator: each call queues its transfer on a stream.
type Communicator interface {
	AllReduce(send, recv DevicePtr, count int64, dt ir.DType, op string, s Stream) error
	AllGather(send, recv DevicePtr, count int64, dt ir.DType, s Stream) error
	ReduceScatter(send, recv DevicePtr, count int64, dt ir.DType, op string, s Stream) error
	Broadcast(send, recv DevicePtr, count int64, dt ir.DType, root int, s Stream) error
	Send(buf DevicePtr, bytes int64, peer int, s Stream) error
	Recv(buf DevicePtr, bytes int64, peer int, s Stream) error
	Exchange(ops []P2P, s Stream) error
	Close() error
	Abort() error
}

var (
	_ Collectives  = (*NCCL)(nil)
	_ Communicator = (*Comm)(nil)
)
