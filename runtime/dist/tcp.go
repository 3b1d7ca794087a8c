package dist

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"sync"
	"time"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime/device"
)

// tcpComm is the transport of one rank that runs as its own process: a TCP connection to
// each rank it exchanges data with (its pipeline neighbours and the members of its
// collective groups), authenticated by the run token (wire.go). A reader goroutine per
// connection drains every frame into a mailbox as it arrives, so a send never waits for
// the receiver to be ready and two ranks sending to each other cannot deadlock; receives and
// collectives wait on the mailbox.
//
// Collectives keep the in-process transport's contract bit for bit (doc.go). They
// are direct exchanges, not rings: for an all-reduce, member k receives every member's k-th
// chunk, combines them in group order — exactly the in-process fold — and sends the result
// to every member (a reduce-scatter then an all-gather, the ring's bus traffic of
// 2(n−1)/n of the tensor per member, in n−1 concurrent streams instead of n−1 sequential
// steps). A ring would add partial sums in ring order, which differs in the last bits.
type tcpComm struct {
	rank int
	// limit: a wait longer than this fails the run; fixed (ppc run --timeout), or with
	// auto set, HangLimit of slowest, the slowest step so far (stepTook).
	limit   time.Duration
	auto    bool
	slowest time.Duration
	maxMsg  uint64 // the largest payload a peer may send (the largest buffer of the program)

	mu      sync.Mutex
	cond    *sync.Cond
	mail    map[mailKey][]byte
	peers   map[int]*peerConn
	seq     map[string]int // collectives issued on each member set this step
	step    int64
	aborted error
	closing bool
	free    [][]byte // payload buffers for reuse
	stop    chan struct{}
}

type mailKey struct {
	src  int
	kind byte
	a, b int64
}

type peerConn struct {
	rank int
	conn net.Conn
	wmu  sync.Mutex
}

// PeerError is a peer connection that failed during the run: the peer died, closed it, or
// sent what no ppc rank sends.
type PeerError struct {
	Rank int
	Err  error
}

func (e *PeerError) Error() string {
	if errors.Is(e.Err, io.EOF) || errors.Is(e.Err, io.ErrUnexpectedEOF) || errors.Is(e.Err, net.ErrClosed) {
		return fmt.Sprintf("rank %d closed its connection (the process died or stopped)", e.Rank)
	}
	return fmt.Sprintf("connection to rank %d: %v", e.Rank, e.Err)
}

// newTCPComm makes rank's transport; a wait for a peer fails after timeout, or with
// timeout 0 after the automatic limit (HangLimit).
func newTCPComm(rank int, timeout time.Duration, maxMsg uint64) *tcpComm {
	t := &tcpComm{rank: rank, limit: timeout, auto: timeout <= 0, maxMsg: maxMsg, mail: map[mailKey][]byte{}, peers: map[int]*peerConn{},
		seq: map[string]int{}, stop: make(chan struct{})}
	if t.auto {
		t.limit = HangLimit(0)
	}
	t.cond = sync.NewCond(&t.mu)
	// Waits re-check their deadline at least this often.
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				t.cond.Broadcast()
			case <-t.stop:
				return
			}
		}
	}()
	return t
}

// addPeer starts reading an authenticated connection to rank.
func (t *tcpComm) addPeer(rank int, conn net.Conn) error {
	t.mu.Lock()
	if _, dup := t.peers[rank]; dup {
		t.mu.Unlock()
		return fmt.Errorf("rank %d connected twice", rank)
	}
	p := &peerConn{rank: rank, conn: conn}
	t.peers[rank] = p
	t.cond.Broadcast()
	t.mu.Unlock()
	go t.read(p)
	return nil
}

func (t *tcpComm) read(p *peerConn) {
	for {
		h, payload, err := readFrame(p.conn, t.maxMsg, t.alloc)
		if err == nil && h.kind == frameCtrl {
			err = errors.New("a control frame on a data connection")
		}
		t.mu.Lock()
		if err != nil {
			if !t.closing && t.aborted == nil {
				t.aborted = &PeerError{Rank: p.rank, Err: err}
			}
			t.cond.Broadcast()
			t.mu.Unlock()
			return
		}
		k := mailKey{p.rank, h.kind, h.a, h.b}
		if _, dup := t.mail[k]; dup && t.aborted == nil {
			t.aborted = &PeerError{Rank: p.rank, Err: fmt.Errorf("the same message twice (kind %d, %d, %d)", h.kind, h.a, h.b)}
		}
		t.mail[k] = payload
		t.cond.Broadcast()
		t.mu.Unlock()
	}
}

// alloc returns a payload buffer, reusing one a receive gave back.
func (t *tcpComm) alloc(n int) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, b := range t.free {
		if cap(b) >= n && cap(b) <= 2*n+4096 {
			t.free[i] = t.free[len(t.free)-1]
			t.free = t.free[:len(t.free)-1]
			return b[:n]
		}
	}
	return make([]byte, n)
}

func (t *tcpComm) release(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.free) >= 16 {
		t.free = t.free[1:]
	}
	t.free = append(t.free, b)
}

func (t *tcpComm) Abort(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.aborted == nil {
		t.aborted = err
	}
	t.cond.Broadcast()
}

func (t *tcpComm) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.aborted
}

func (t *tcpComm) Finish(int) {}

// stepTook records the time of a completed step (the slowest rank's), from which the
// automatic limit of a wait follows.
func (t *tcpComm) stepTook(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.auto && d > t.slowest {
		t.slowest = d
		t.limit = HangLimit(d)
	}
}

// waitLimit is how long a wait for a peer may last now, and a note on where the limit comes
// from for the message of a wait that exceeds it.
func (t *tcpComm) waitLimit() (time.Duration, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waitLimitLocked()
}

func (t *tcpComm) waitLimitLocked() (time.Duration, string) {
	switch {
	case !t.auto:
		return t.limit, "ppc run --timeout sets the limit"
	case t.slowest == 0:
		return t.limit, fmt.Sprintf("the limit is %s in the first step; ppc run --timeout sets another", t.limit)
	}
	return t.limit, fmt.Sprintf("the limit is %d× the slowest step so far (%s), at least %s; ppc run --timeout sets another",
		hangFactor, t.slowest.Round(time.Millisecond), hangMin)
}

func (t *tcpComm) ResetStep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.step++
	clear(t.seq)
}

// close ends every connection; reads that fail from now on are not errors.
func (t *tcpComm) close() {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return
	}
	t.closing = true
	peers := t.peers
	t.mu.Unlock()
	close(t.stop)
	for _, p := range peers {
		p.conn.Close()
	}
}

func (t *tcpComm) write(dst int, h frameHeader, payload []byte) error {
	t.mu.Lock()
	p := t.peers[dst]
	err := t.aborted
	t.mu.Unlock()
	if err != nil {
		return ErrAborted
	}
	if p == nil {
		return fmt.Errorf("rank %d has no connection to rank %d (the plan did not say they talk)", t.rank, dst)
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := writeFrame(p.conn, h, payload); err != nil {
		perr := &PeerError{Rank: dst, Err: err}
		t.Abort(perr)
		return perr
	}
	return nil
}

// take waits for the message k and removes it from the mailbox; the caller releases it.
func (t *tcpComm) take(k mailKey, what func() string) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	start := time.Now()
	for {
		if msg, ok := t.mail[k]; ok {
			delete(t.mail, k)
			return msg, nil
		}
		if t.aborted != nil {
			return nil, ErrAborted
		}
		if waited := time.Since(start); waited > t.limit {
			_, why := t.waitLimitLocked()
			err := fmt.Errorf("rank %d waited %s for %s, and rank %d sent nothing (a hang, or far behind; %s)",
				t.rank, waited.Round(time.Second), what(), k.src, why)
			t.aborted = err
			t.cond.Broadcast()
			return nil, err
		}
		t.cond.Wait()
	}
}

func (t *tcpComm) Send(src, dst int, tag int64, data []byte) error {
	return t.write(dst, frameHeader{kind: frameP2P, a: tag, b: t.curStep()}, data)
}

func (t *tcpComm) curStep() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.step
}

func (t *tcpComm) Recv(dst, src int, tag int64, into []byte) error {
	msg, err := t.take(mailKey{src, frameP2P, tag, t.curStep()}, func() string { return fmt.Sprintf("recv from rank %d (tag %d)", src, tag) })
	if err != nil {
		return err
	}
	defer t.release(msg)
	if len(msg) != len(into) {
		return fmt.Errorf("rank %d: message from rank %d (tag %d) has %d bytes, want %d", dst, src, tag, len(msg), len(into))
	}
	copy(into, msg)
	return nil
}

// collective runs op for rank r (this process's rank) as a direct exchange with the other
// members; see tcpComm for why this keeps the in-process results bit for bit.
func (t *tcpComm) Collective(r int, op *Op, in, out device.Tensor) error {
	t.mu.Lock()
	seq := t.seq[op.Members]
	t.seq[op.Members] = seq + 1
	step := t.step
	t.mu.Unlock()
	h := fnv.New64a()
	h.Write([]byte(op.Members))
	set := int64(h.Sum64() >> 1)
	key := func(phase int64) int64 { return step<<32 | int64(seq)<<2 | phase }
	n, pos := len(op.Group), op.Position(r)
	es := op.DType.Size()
	what := func() string { return fmt.Sprintf("%v, the group's collective #%d", op, seq) }
	// exchange sends part(c) to every other member c and returns what each member sent,
	// own(pos) standing in for this member's: srcs[c] is member c's message.
	exchange := func(phase int64, part func(c int) []byte, own []byte) ([][]byte, error) {
		for c, m := range op.Group {
			if c != pos {
				if err := t.write(m, frameHeader{kind: frameColl, a: set, b: key(phase)}, part(c)); err != nil {
					return nil, err
				}
			}
		}
		srcs := make([][]byte, n)
		srcs[pos] = own
		for c, m := range op.Group {
			if c == pos {
				continue
			}
			msg, err := t.take(mailKey{m, frameColl, set, key(phase)}, what)
			if err != nil {
				return nil, err
			}
			srcs[c] = msg
		}
		return srcs, nil
	}
	releaseOthers := func(srcs [][]byte) {
		for c, s := range srcs {
			if c != pos && s != nil {
				t.release(s)
			}
		}
	}
	checkLen := func(srcs [][]byte, want int) error {
		for c, s := range srcs {
			if len(s) != want {
				return &PeerError{Rank: op.Group[c], Err: fmt.Errorf("%s part of %d bytes, want %d", op, len(s), want)}
			}
		}
		return nil
	}
	outer, d, inner := splitAt(op.Shape, op.Dim)
	switch op.Kind {
	case pb.Instr_ALL_REDUCE:
		elems := op.Shape.NumElements()
		chunk := func(c int) (int, int) { return elems * c / n * es, elems * (c + 1) / n * es }
		lo, hi := chunk(pos)
		srcs, err := exchange(0, func(c int) []byte { a, b := chunk(c); return in.Data[a:b] }, in.Data[lo:hi])
		if err != nil {
			return err
		}
		defer releaseOthers(srcs)
		if err := checkLen(srcs, hi-lo); err != nil {
			return err
		}
		mine := t.alloc(hi - lo)
		defer t.release(mine)
		reduceInto(op.DType, op.Reduce, mine, srcs, runs{rows: 1, run: (hi - lo) / es})
		res, err := exchange(1, func(int) []byte { return mine }, mine)
		if err != nil {
			return err
		}
		defer releaseOthers(res)
		for c := range res {
			a, b := chunk(c)
			if len(res[c]) != b-a {
				return &PeerError{Rank: op.Group[c], Err: fmt.Errorf("%s result of %d bytes, want %d", op, len(res[c]), b-a)}
			}
			copy(out.Data[a:b], res[c])
		}
	case pb.Instr_REDUCE_SCATTER:
		// Member c's slice of this member's input: rows [c·d/n, (c+1)·d/n) of the middle dim,
		// one run per outer index, packed.
		run := d / n * inner * es
		slice := func(c int) []byte {
			b := make([]byte, 0, outer*run)
			for o := range outer {
				off := o*d*inner*es + c*run
				b = append(b, in.Data[off:off+run]...)
			}
			return b
		}
		srcs, err := exchange(0, slice, slice(pos))
		if err != nil {
			return err
		}
		defer releaseOthers(srcs)
		if err := checkLen(srcs, outer*run); err != nil {
			return err
		}
		reduceInto(op.DType, op.Reduce, out.Data, srcs, runs{rows: 1, run: outer * run / es})
	case pb.Instr_ALL_GATHER:
		srcs, err := exchange(0, func(int) []byte { return in.Data }, in.Data)
		if err != nil {
			return err
		}
		defer releaseOthers(srcs)
		if err := checkLen(srcs, len(in.Data)); err != nil {
			return err
		}
		run := d * inner * es
		for o := range outer {
			for g, b := range srcs {
				copy(out.Data[(o*n+g)*run:(o*n+g+1)*run], b[o*run:(o+1)*run])
			}
		}
	case pb.Instr_ALL_TO_ALL:
		srcs, err := exchange(0, func(c int) []byte { return blockOf(op, in.Data, c) }, blockOf(op, in.Data, pos))
		if err != nil {
			return err
		}
		defer releaseOthers(srcs)
		if err := checkLen(srcs, len(in.Data)/n); err != nil {
			return err
		}
		for g, b := range srcs {
			placeBlock(op, out.Data, g, b)
		}
	case pb.Instr_BROADCAST:
		if pos == op.Root {
			for c, m := range op.Group {
				if c != pos {
					if err := t.write(m, frameHeader{kind: frameColl, a: set, b: key(0)}, in.Data); err != nil {
						return err
					}
				}
			}
			if len(out.Data) > 0 && &out.Data[0] != &in.Data[0] {
				copy(out.Data, in.Data)
			}
			return nil
		}
		msg, err := t.take(mailKey{op.Group[op.Root], frameColl, set, key(0)}, what)
		if err != nil {
			return err
		}
		defer t.release(msg)
		if len(msg) != len(out.Data) {
			return &PeerError{Rank: op.Group[op.Root], Err: fmt.Errorf("%s of %d bytes, want %d", op, len(msg), len(out.Data))}
		}
		copy(out.Data, msg)
	}
	return nil
}
