package cuda

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/device"
)

// fakeWorld is NCCL for emulated devices in one test process: communicators made from unique
// ids, sends that deliver into a per-direction queue, receives that wait for their message,
// and collectives that wait for every member. The emulated driver runs each stream's work
// when it is queued, so a transfer happens when its call is made: sends are buffered and
// receives and collectives block the calling rank, which is the host transports' contract.
// Whether the device orders its streams correctly is checked separately (race_test.go).
type fakeWorld struct {
	mu     sync.Mutex
	cond   *sync.Cond
	ids    uint64
	groups map[UniqueID]*fakeGroup
}

type fakeGroup struct {
	size, joined int
	mail         map[[2]int][][]byte // (from, to) → messages in order
	rounds       map[int]*fakeRound  // collectives by sequence number
	seq          []int               // per member: collectives issued
	aborted      bool
}

type fakeRound struct {
	ins     [][]byte
	arrived int
	left    int
}

func newFakeWorld() *fakeWorld {
	w := &fakeWorld{groups: map[UniqueID]*fakeGroup{}}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// on is the world's NCCL for one emulated device.
func (w *fakeWorld) on(e *emulator) Collectives { return &standInNCCL{w: w, e: e} }

type standInNCCL struct {
	w *fakeWorld
	e *emulator
}

func (f *standInNCCL) UniqueID() (UniqueID, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.ids++
	var id UniqueID
	binary.LittleEndian.PutUint64(id.Internal[:], f.w.ids)
	return id, nil
}

// wait blocks until ready holds (w.mu held), or fails when a member aborts g or after a
// minute: a test that would hang reports what it waited for instead.
func (w *fakeWorld) wait(what string, g *fakeGroup, ready func() bool) error {
	deadline := time.Now().Add(time.Minute)
	t := time.AfterFunc(time.Minute, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer t.Stop()
	for !ready() {
		if g.aborted {
			return fmt.Errorf("fake NCCL: %s: the communicator was aborted", what)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fake NCCL: %s timed out", what)
		}
		w.cond.Wait()
	}
	return nil
}

func (f *standInNCCL) Join(id UniqueID, ranks, rank int) (Communicator, error) {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[id]
	if g == nil {
		g = &fakeGroup{size: ranks, mail: map[[2]int][][]byte{}, rounds: map[int]*fakeRound{}, seq: make([]int, ranks)}
		w.groups[id] = g
	}
	if g.size != ranks || rank < 0 || rank >= ranks {
		return nil, fmt.Errorf("ncclCommInitRank: rank %d of %d in a group of %d", rank, ranks, g.size)
	}
	g.joined++
	w.cond.Broadcast()
	f.e.logf("nccl join rank %d of %d", rank, ranks)
	if err := w.wait("join", g, func() bool { return g.joined >= g.size }); err != nil {
		return nil, err
	}
	return &fakeComm{f: f, g: g, rank: rank}, nil
}

type fakeComm struct {
	f    *standInNCCL
	g    *fakeGroup
	rank int
}

func (c *fakeComm) mem(p DevicePtr, n int64) ([]byte, error) { return c.f.e.mem(p, int(n)) }

func (c *fakeComm) Send(buf DevicePtr, bytes int64, peer int, s Stream) error {
	b, err := c.mem(buf, bytes)
	if err != nil {
		return err
	}
	c.f.e.access(s, []span{{uint64(buf), uint64(buf) + uint64(bytes)}}, nil)
	c.f.e.logf("nccl send %d bytes to %d stream %d", bytes, peer, s)
	w := c.f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]int{c.rank, peer}
	c.g.mail[k] = append(c.g.mail[k], slices.Clone(b))
	w.cond.Broadcast()
	return nil
}

func (c *fakeComm) Recv(buf DevicePtr, bytes int64, peer int, s Stream) error {
	b, err := c.mem(buf, bytes)
	if err != nil {
		return err
	}
	c.f.e.access(s, nil, []span{{uint64(buf), uint64(buf) + uint64(bytes)}})
	c.f.e.logf("nccl recv %d bytes from %d stream %d", bytes, peer, s)
	w := c.f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]int{peer, c.rank}
	if err := w.wait(fmt.Sprintf("receive from %d", peer), c.g, func() bool { return len(c.g.mail[k]) > 0 }); err != nil {
		return err
	}
	m := c.g.mail[k][0]
	c.g.mail[k] = c.g.mail[k][1:]
	if len(m) != len(b) {
		return fmt.Errorf("fake NCCL: a message of %d bytes received into %d", len(m), len(b))
	}
	copy(b, m)
	return nil
}

// collective runs one collective: every member's input (inBytes at send) is copied in at its
// arrival, and once all have arrived each member computes its own result with fill.
func (c *fakeComm) collective(what string, send DevicePtr, inBytes int64, recv DevicePtr, outBytes int64, s Stream, fill func(ins [][]byte, out []byte)) error {
	in, err := c.mem(send, inBytes)
	if err != nil {
		return err
	}
	out, err := c.mem(recv, outBytes)
	if err != nil {
		return err
	}
	c.f.e.access(s, []span{{uint64(send), uint64(send) + uint64(inBytes)}}, []span{{uint64(recv), uint64(recv) + uint64(outBytes)}})
	c.f.e.logf("nccl %s %d bytes stream %d", what, inBytes, s)
	w, g := c.f.w, c.g
	w.mu.Lock()
	defer w.mu.Unlock()
	n := g.seq[c.rank]
	g.seq[c.rank]++
	r := g.rounds[n]
	if r == nil {
		r = &fakeRound{ins: make([][]byte, g.size), left: g.size}
		g.rounds[n] = r
	}
	r.ins[c.rank] = slices.Clone(in)
	r.arrived++
	w.cond.Broadcast()
	if err := w.wait(what, g, func() bool { return r.arrived == g.size }); err != nil {
		return err
	}
	for i, x := range r.ins {
		if len(x) != len(in) {
			return fmt.Errorf("fake NCCL: %s with %d bytes from member %d, %d from member %d", what, len(x), i, len(in), c.rank)
		}
	}
	fill(r.ins, out)
	if r.left--; r.left == 0 {
		delete(g.rounds, n)
	}
	return nil
}

// reduce combines the members' inputs elementwise in member order, as the host transports
// do: f32 (and f16, bf16 widened to it) in f32, f64 in f64; mean divides the sum.
func reduce(ins [][]byte, dt ir.DType, op string) []byte {
	n := len(ins[0]) / dt.Size()
	typ := ir.Type{DType: dt, Shape: ir.Shape{n}}
	out := device.Tensor{Type: typ, Data: make([]byte, len(ins[0]))}
	for i := range n {
		acc := device.Tensor{Type: typ, Data: ins[0]}.Float(i)
		for _, b := range ins[1:] {
			v := device.Tensor{Type: typ, Data: b}.Float(i)
			switch op {
			case "sum", "mean":
				acc += v
			case "max":
				acc = max(acc, v)
			case "min":
				acc = min(acc, v)
			}
			if dt != ir.F64 {
				acc = float64(float32(acc))
			}
		}
		if op == "mean" {
			acc /= float64(len(ins))
		}
		cudatest.SetFloat(out, i, acc)
	}
	return out.Data
}

func (c *fakeComm) AllReduce(send, recv DevicePtr, count int64, dt ir.DType, op string, s Stream) error {
	n := count * int64(dt.Size())
	return c.collective("all-reduce "+op, send, n, recv, n, s, func(ins [][]byte, out []byte) { copy(out, reduce(ins, dt, op)) })
}

func (c *fakeComm) AllGather(send, recv DevicePtr, count int64, dt ir.DType, s Stream) error {
	n := count * int64(dt.Size())
	return c.collective("all-gather", send, n, recv, n*int64(c.g.size), s, func(ins [][]byte, out []byte) {
		for i, x := range ins {
			copy(out[int64(i)*n:], x)
		}
	})
}

func (c *fakeComm) ReduceScatter(send, recv DevicePtr, count int64, dt ir.DType, op string, s Stream) error {
	n := count * int64(dt.Size())
	return c.collective("reduce-scatter "+op, send, n*int64(c.g.size), recv, n, s, func(ins [][]byte, out []byte) {
		copy(out, reduce(ins, dt, op)[int64(c.rank)*n:])
	})
}

func (c *fakeComm) Broadcast(send, recv DevicePtr, count int64, dt ir.DType, root int, s Stream) error {
	n := count * int64(dt.Size())
	return c.collective("broadcast", send, n, recv, n, s, func(ins [][]byte, out []byte) { copy(out, ins[root]) })
}

// Exchange sends (buffered) and then receives, which is a group's effect.
func (c *fakeComm) Exchange(ops []P2P, s Stream) error {
	c.f.e.logf("nccl exchange %d", len(ops))
	for _, p := range ops {
		if !p.Recv {
			if err := c.Send(p.Buf, p.Bytes, p.Peer, s); err != nil {
				return err
			}
		}
	}
	for _, p := range ops {
		if p.Recv {
			if err := c.Recv(p.Buf, p.Bytes, p.Peer, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *fakeComm) Abort() error {
	c.f.e.logf("nccl abort")
	w := c.f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c.g.aborted = true
	w.cond.Broadcast()
	return nil
}

func (c *fakeComm) Close() error {
	c.f.e.logf("nccl close")
	return nil
}
