package dist

import (
	"errors"

	"fmt"
	"sort"
	"strings"
	"sync"

	"ppc.dev/ppc/runtime/device"
)

// Comm is how a job's ranks communicate: the in-process transport (NewLocal) when every
// rank is a goroutine of this process, the TCP transport (tcp.go, a Process's Comm) when
// ranks are processes. Both keep the contract of doc.go, so a plan's results do not depend
// on which runs it. The executor calls them from each local rank's goroutine.
type Comm interface {
	Send(src, dst int, tag int64, data []byte) error
	Recv(dst, src int, tag int64, into []byte) error
	Collective(r int, op *Op, in, out device.Tensor) error
	// Abort stops every rank with err (the first error wins); Err returns it.
	Abort(err error)
	Err() error
	// Finish marks a local rank done with the step; ResetStep prepares the next step.
	Finish(r int)
	ResetStep()
}

// transport is the in-process communication of all ranks of a job: sends are buffered (they
// never block), receives block until the matching message arrives, and collectives
// (collective.go) block until every member of the group has arrived. It watches for hangs:
// when every rank that has not finished is blocked and nothing can wake any of them, it
// aborts all of them with a report of who waits for what, instead of hanging.
type transport struct {
	mu       sync.Mutex
	cond     *sync.Cond
	world    int
	mail     map[msgKey][]byte
	state    []rankState
	colls    map[Key]*collRecord
	seq      []map[string]int // per rank: collectives issued so far on each member set
	scratch  [][]byte         // all-reduce result buffers kept for reuse
	aborted  error
	finished int
}

type msgKey struct {
	src, dst int
	tag      int64
}

type rankState struct {
	blocked bool
	what    string // for reports: "recv from rank 0 (tag 12)"
	done    bool
	wake    func() bool // reports whether the rank could proceed now
	coll    *collRecord // the collective it waits in, described in full in hang reports
}

// NewLocal is the transport of a job whose world ranks all run in this process.
func NewLocal(world int) Comm {
	t := &transport{world: world, state: make([]rankState, world)}
	t.cond = sync.NewCond(&t.mu)
	t.clear()
	return t
}

// clear forgets messages and collectives in flight. t.mu is held (or t is new).
func (t *transport) clear() {
	t.mail = map[msgKey][]byte{}
	t.colls = map[Key]*collRecord{}
	t.seq = make([]map[string]int, t.world)
	for r := range t.seq {
		t.seq[r] = map[string]int{}
	}
}

// abort stops every rank with err (the first error wins).
func (t *transport) Abort(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.aborted == nil {
		t.aborted = err
	}
	t.cond.Broadcast()
}

func (t *transport) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.aborted
}

// resetStep prepares for a new step after all ranks finished the previous one.
func (t *transport) ResetStep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.finished = 0
	t.aborted = nil
	t.clear()
	for i := range t.state {
		t.state[i] = rankState{}
	}
}

// finish marks rank r as done with this step.
func (t *transport) Finish(r int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state[r].done = true
	t.finished++
	t.checkHang()
	t.cond.Broadcast()
}

func (t *transport) Send(src, dst int, tag int64, data []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.aborted != nil {
		return ErrAborted
	}
	k := msgKey{src, dst, tag}
	if _, dup := t.mail[k]; dup {
		return fmt.Errorf("rank %d sends tag %d to rank %d twice", src, tag, dst)
	}
	t.mail[k] = append([]byte(nil), data...)
	t.cond.Broadcast()
	return nil
}

func (t *transport) Recv(dst, src int, tag int64, into []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := msgKey{src, dst, tag}
	ready := func() bool { _, ok := t.mail[k]; return ok }
	if err := t.wait(dst, fmt.Sprintf("recv from rank %d (tag %d)", src, tag), ready); err != nil {
		return err
	}
	msg := t.mail[k]
	delete(t.mail, k)
	if len(msg) != len(into) {
		return fmt.Errorf("rank %d: message from rank %d (tag %d) has %d bytes, want %d", dst, src, tag, len(msg), len(into))
	}
	copy(into, msg)
	return nil
}

// wait blocks rank r until ready() holds, the job aborts, or the job hangs. t.mu is held.
func (t *transport) wait(r int, what string, ready func() bool) error {
	return t.block(r, rankState{what: what}, ready)
}

// waitColl is wait inside collective rec, whose hang report is written when the hang is
// found (it names the members that have not arrived and what they wait for instead).
func (t *transport) waitColl(r int, rec *collRecord, ready func() bool) error {
	return t.block(r, rankState{what: rec.op.String(), coll: rec}, ready)
}

// block marks rank r blocked as st says until ready() holds, the job aborts, or the hang
// detector finds that nothing can wake any rank. t.mu is held.
func (t *transport) block(r int, st rankState, ready func() bool) error {
	st.blocked, st.wake = true, ready
	for !ready() {
		if t.aborted != nil {
			return ErrAborted
		}
		t.state[r] = st
		t.checkHang()
		if t.aborted != nil {
			t.state[r] = rankState{}
			return ErrAborted
		}
		t.cond.Wait()
		t.state[r] = rankState{}
	}
	return nil
}

// HangError reports ranks that wait forever.
type HangError struct {
	Waiting map[int]string // rank → what it waits for
	Done    []int
}

func (e *HangError) Error() string {
	var b strings.Builder
	b.WriteString("hang: every running rank is blocked")
	var ranks []int
	for r := range e.Waiting {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	for _, r := range ranks {
		fmt.Fprintf(&b, "\n  rank %d waits for %s", r, e.Waiting[r])
	}
	if len(e.Done) > 0 {
		fmt.Fprintf(&b, "\n  ranks %v finished the step", e.Done)
	}
	return b.String()
}

// checkHang aborts when no rank can make progress. t.mu is held.
func (t *transport) checkHang() {
	if t.aborted != nil {
		return
	}
	waiting := map[int]string{}
	var done []int
	for r, s := range t.state {
		switch {
		case s.done:
			done = append(done, r)
		case !s.blocked:
			return // someone is still running
		case s.wake != nil && s.wake():
			return // someone can proceed
		default:
			waiting[r] = s.what
		}
	}
	if len(waiting) == 0 {
		return
	}
	for r, s := range t.state {
		if s.blocked && s.coll != nil {
			waiting[r] = t.describeColl(s.coll)
		}
	}
	t.aborted = &HangError{Waiting: waiting, Done: done}
	t.cond.Broadcast()
}

// ErrAborted is what a blocked rank returns when the job stops because of another rank (the
// job reports that rank's error, or the hang).
var ErrAborted = errors.New("aborted")

// describeColl says, for a hang report, which collective is stuck and why: "all-gather over
// ranks [0 1] (dim 1, f32[4,3]): rank 0 has not arrived, it waits for recv from rank 2 (tag 5)".
// t.mu is held.
func (t *transport) describeColl(rec *collRecord) string {
	var b strings.Builder
	b.WriteString(rec.op.String())
	if rec.key.Seq > 0 {
		fmt.Fprintf(&b, ", the group's collective #%d", rec.key.Seq)
	}
	sep := ": "
	for pos, m := range rec.op.Group {
		if rec.here[pos] {
			continue
		}
		fmt.Fprintf(&b, "%srank %d has not arrived, ", sep, m)
		sep = "; "
		switch s := t.state[m]; {
		case s.done:
			b.WriteString("it finished the step")
		case s.blocked:
			b.WriteString("it waits for " + s.what)
		default:
			b.WriteString("it is running")
		}
	}
	return b.String()
}
