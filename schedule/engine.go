package schedule

import (
	"fmt"
	"strings"
)

// The engine shared by Validate, LowerComm and Simulate. A schedule is
// compiled into per-rank ops; each op waits on slots (facts such as "the
// forward output of stage 2, micro-batch 5 exists" or "the SEND_F message for
// stage 3, micro-batch 1 is in rank 1's mailbox") and fills slots when it
// ends. Running the ops in list order on every rank, each op starting at
// max(rank free, inputs ready), gives exactly the timeline of an event-driven
// simulation with in-order ranks, and a dry run when all costs are zero.

type slotKind int32

const (
	slotF     slotKind = iota // forward output of (stage, mb)
	slotBin                   // input gradient of (stage, mb): its I or B has run
	slotW                     // weight gradient of (stage, mb): its W or B has run
	slotMsgF                  // SEND_F message for receiving (stage, mb) delivered
	slotMsgB                  // SEND_B message for receiving (stage, mb) delivered
	slotRecvF                 // RECV_F (stage, mb) has completed
	slotRecvB                 // RECV_B (stage, mb) has completed
	numSlotKinds
)

type need struct {
	slot    int32
	local   bool    // produced on the same rank: must already have run, never waited for
	latency float64 // transfer time added to the producer's end (compute_only, cross-rank)
}

type output struct {
	slot  int32
	delay float64 // transfer time until a message reaches the peer's mailbox
}

// op is one compiled action. An action has at most two computations (an
// OVERLAP_F_B), so the fixed arrays below always suffice and compiling
// allocates nothing per action.
type op struct {
	act    Action
	dur    float64
	coll   float64 // of dur, the time spent in collectives inside the computations
	a2a    float64 // of coll, expert parallelism's all-to-alls
	nNeed  uint8
	nOut   uint8
	need   [6]need
	out    [3]output
	reduce int       // stage of a REDUCE_GRAD, else -1
	stash  smallInts // stages whose micro-batch activation is stashed when the op starts (F)
	free   smallInts // stages whose micro-batch activation is freed when the op ends (W, or B)
	wdone  smallInts // stages whose weight gradient of one micro-batch completes (W, B)
}

func (o *op) needs() []need { return o.need[:o.nNeed] }

// unitOf is the micro-batch (unit) of the op's computation on stage st that stashes (kind
// Forward) or frees (kind BackwardWeight: a W or B) an activation.
func (o *op) unitOf(st int, kind Kind) int {
	for _, c := range o.act.Computes() {
		if c.Stage == st && (c.Kind == kind || kind == BackwardWeight && c.Kind == FullBackward) {
			return c.Microbatch
		}
	}
	return o.act.Microbatch
}
func (o *op) outs() []output    { return o.out[:o.nOut] }
func (o *op) addNeed(n need)    { o.need[o.nNeed] = n; o.nNeed++ }
func (o *op) addOut(out output) { o.out[o.nOut] = out; o.nOut++ }

type smallInts struct {
	n uint8
	v [2]int32
}

func (s *smallInts) add(x int)     { s.v[s.n] = int32(x); s.n++ }
func (s *smallInts) list() []int32 { return s.v[:s.n] }

type loc struct{ rank, index int32 }

var noLoc = loc{-1, -1}

type program struct {
	s        *Schedule
	comms    bool
	cost     *costModel
	ops      [][]op
	pairs    map[uint64]int32
	pairOf   [][2]int // pair id -> (stage, mb)
	producer []loc    // per slot
	consumer []loc    // per message slot: the RECV waiting for it
}

func (p *program) pair(stage, mb int) int32 {
	k := uint64(uint32(stage))<<32 | uint64(uint32(mb))
	if id, ok := p.pairs[k]; ok {
		return id
	}
	id := int32(len(p.pairOf))
	p.pairs[k] = id
	p.pairOf = append(p.pairOf, [2]int{stage, mb})
	for i := 0; i < int(numSlotKinds); i++ {
		p.producer = append(p.producer, noLoc)
		p.consumer = append(p.consumer, noLoc)
	}
	return id
}

func (p *program) slot(k slotKind, stage, mb int) int32 {
	return p.pair(stage, mb)*int32(numSlotKinds) + int32(k)
}

func (p *program) slotInfo(slot int32) (slotKind, int, int) {
	sm := p.pairOf[slot/int32(numSlotKinds)]
	return slotKind(slot % int32(numSlotKinds)), sm[0], sm[1]
}

// slotAction names what fills slot: the action that does (or would) produce it.
// hint chooses between I and B for a missing input gradient.
func (p *program) slotAction(slot int32, hint Kind) Action {
	k, st, mb := p.slotInfo(slot)
	if pr := p.producer[slot]; pr != noLoc {
		a := p.s.Actions[pr.rank][pr.index]
		for _, c := range a.Computes() {
			if c.Stage == st && c.Microbatch == mb && computeFills(c.Kind, k) {
				return c
			}
		}
		return a
	}
	switch k {
	case slotF:
		return Act(Forward, st, mb)
	case slotBin:
		if hint != FullBackward {
			hint = BackwardInput
		}
		return Act(hint, st, mb)
	case slotW:
		return Act(BackwardWeight, st, mb)
	case slotMsgF:
		return Act(SendF, st-1, mb)
	case slotMsgB:
		return Act(SendB, st+1, mb)
	case slotRecvF:
		return Act(RecvF, st, mb)
	default:
		return Act(RecvB, st, mb)
	}
}

func computeFills(k Kind, s slotKind) bool {
	switch s {
	case slotF:
		return k == Forward
	case slotBin:
		return k == BackwardInput || k == FullBackward
	case slotW:
		return k == BackwardWeight || k == FullBackward
	}
	return false
}

// compile checks every action statically (ranges, placement, duplicates,
// SEND/RECV matching) and builds the ops. cost may be nil (dry run).
func compile(s *Schedule, cost *costModel) (*program, error) {
	if err := s.checkShape(); err != nil {
		return nil, err
	}
	if cost == nil {
		cost = &costModel{}
	}
	n := 0
	for _, acts := range s.Actions {
		n += len(acts)
	}
	est := min(n+n/2+16, 1<<20) // (stage, mb) pairs: about one per action, plus derived ones
	cost.slices = s.Slices
	p := &program{s: s, comms: s.HasComms(), cost: cost, pairs: make(map[uint64]int32, est),
		pairOf: make([][2]int, 0, est), producer: make([]loc, 0, est*int(numSlotKinds)), consumer: make([]loc, 0, est*int(numSlotKinds))}
	p.ops = make([][]op, s.Ranks)
	for r, acts := range s.Actions {
		p.ops[r] = make([]op, len(acts))
		for i, a := range acts {
			o, err := p.compileAction(r, i, a)
			if err != nil {
				return nil, err
			}
			p.ops[r][i] = o
		}
	}
	// Every RECV needs a SEND somewhere, every SEND a RECV.
	for r, ops := range p.ops {
		for i := range ops {
			o := &ops[i]
			switch o.act.Kind {
			case RecvF, RecvB:
				if slot := o.need[0].slot; p.producer[slot] == noLoc {
					w := p.slotAction(slot, 0)
					return nil, p.errAt(ErrMissing, r, i, w, "%s has no matching %s anywhere in the schedule", o.act, w)
				}
			case SendF, SendB:
				if slot := o.out[0].slot; p.consumer[slot] == noLoc {
					_, st, mb := p.slotInfo(slot)
					recv := Act(RecvF, st, mb)
					if o.act.Kind == SendB {
						recv.Kind = RecvB
					}
					return nil, p.errAt(ErrMissing, r, i, Action{}, "%s is never received: no %s on rank %d", o.act, recv, s.Placement[st])
				}
			}
		}
	}
	return p, nil
}

func (p *program) errAt(kind ErrorKind, r, i int, waits Action, format string, args ...any) *Error {
	a := p.s.Actions[r][i]
	return &Error{Kind: kind, Rank: r, Index: i, Action: a, WaitsOn: waits,
		Msg: fmt.Sprintf("rank %d action %d (%s): ", r, i, a) + fmt.Sprintf(format, args...)}
}

func (p *program) compileAction(r, i int, a Action) (op, error) {
	s := p.s
	o := op{act: a, reduce: -1}
	check := func(c Action) error {
		if c.Stage < 0 || c.Stage >= s.Stages {
			return p.errAt(ErrBadAction, r, i, Action{}, "stage %d is outside 0..%d", c.Stage, s.Stages-1)
		}
		if c.Kind.hasMicrobatch() && (c.Microbatch < 0 || c.Microbatch >= s.Microbatches) {
			return p.errAt(ErrBadAction, r, i, Action{}, "micro-batch %d is outside 0..%d", c.Microbatch, s.Microbatches-1)
		}
		if owner := s.Placement[c.Stage]; owner != r {
			return p.errAt(ErrPlacement, r, i, Action{}, "stage %d runs on rank %d, not on rank %d", c.Stage, owner, r)
		}
		return nil
	}
	switch k := a.Kind; {
	case k == Idle:
		return o, nil
	case k >= numKinds:
		return o, p.errAt(ErrBadAction, r, i, Action{}, "unknown action kind %d", k)
	case k == OverlapFB:
		if len(a.Sub) != 2 {
			return o, p.errAt(ErrBadAction, r, i, Action{}, "OVERLAP_F_B needs one F and one B or I")
		}
		nf := 0
		for _, c := range a.Sub {
			switch c.Kind {
			case Forward:
				nf++
			case FullBackward, BackwardInput:
			default:
				return o, p.errAt(ErrBadAction, r, i, Action{}, "OVERLAP_F_B can only overlap F with B or I, found %s", c)
			}
		}
		if nf != 1 {
			return o, p.errAt(ErrBadAction, r, i, Action{}, "OVERLAP_F_B needs one F and one B or I")
		}
		fallthrough
	case k.IsCompute():
		comps := a.Sub
		if k != OverlapFB {
			var one [1]Action
			one[0] = a
			comps = one[:]
		}
		for _, c := range comps {
			if err := check(c); err != nil {
				return o, err
			}
			p.addCompute(&o, r, c)
		}
		if k == OverlapFB {
			o.dur = p.cost.overlap(a.Sub[0], a.Sub[1])
			o.coll = min(o.coll, o.dur) // an FB given as one number
			o.a2a = min(o.a2a, o.coll)
			for _, n := range o.needs() {
				for _, out := range o.outs() {
					if n.slot == out.slot {
						return o, p.errAt(ErrOrder, r, i, p.slotAction(n.slot, 0), "the two overlapped actions depend on each other")
					}
				}
			}
		}
	case k.IsComm():
		if err := check(a); err != nil {
			return o, err
		}
		st, mb := a.Stage, a.Microbatch
		switch k {
		case SendF:
			if st+1 >= s.Stages {
				return o, p.errAt(ErrBadAction, r, i, Action{}, "the last stage has no next stage to send to")
			}
			o.addNeed(need{slot: p.slot(slotF, st, mb), local: true})
			o.addOut(output{slot: p.slot(slotMsgF, st+1, mb), delay: p.xfer(st, st+1, mb)})
		case SendB:
			if st == 0 {
				return o, p.errAt(ErrBadAction, r, i, Action{}, "stage 0 has no previous stage to send to")
			}
			o.addNeed(need{slot: p.slot(slotBin, st, mb), local: true})
			o.addOut(output{slot: p.slot(slotMsgB, st-1, mb), delay: p.xfer(st, st-1, mb)})
		case RecvF:
			if st == 0 {
				return o, p.errAt(ErrBadAction, r, i, Action{}, "stage 0 has no previous stage to receive from")
			}
			o.addNeed(need{slot: p.slot(slotMsgF, st, mb)})
			o.addOut(output{slot: p.slot(slotRecvF, st, mb)})
		case RecvB:
			if st+1 >= s.Stages {
				return o, p.errAt(ErrBadAction, r, i, Action{}, "the last stage has no next stage to receive from")
			}
			o.addNeed(need{slot: p.slot(slotMsgB, st, mb)})
			o.addOut(output{slot: p.slot(slotRecvB, st, mb)})
		}
		if k == RecvF || k == RecvB {
			c := &p.consumer[o.need[0].slot]
			if *c == noLoc {
				*c = loc{int32(r), int32(i)}
			}
		}
	default: // REDUCE_GRAD, UNSHARD, RESHARD
		if err := check(a); err != nil {
			return o, err
		}
		if k == ReduceGrad {
			o.reduce = a.Stage
		}
	}
	for _, out := range o.outs() {
		pr := &p.producer[out.slot]
		if *pr != noLoc {
			prev := s.Actions[pr.rank][pr.index]
			return o, p.errAt(ErrDuplicate, r, i, Action{}, "duplicates %s, already done by %s at rank %d action %d",
				describeSlot(p, out.slot), prev, pr.rank, pr.index)
		}
		*pr = loc{int32(r), int32(i)}
	}
	return o, nil
}

func describeSlot(p *program, slot int32) string {
	k, st, mb := p.slotInfo(slot)
	switch k {
	case slotF:
		return fmt.Sprintf("the forward of stage %d micro-batch %d", st, mb)
	case slotBin:
		return fmt.Sprintf("the input gradient of stage %d micro-batch %d", st, mb)
	case slotW:
		return fmt.Sprintf("the weight gradient of stage %d micro-batch %d", st, mb)
	case slotMsgF, slotMsgB:
		return fmt.Sprintf("the message to stage %d micro-batch %d", st, mb)
	default:
		return fmt.Sprintf("the receive of stage %d micro-batch %d", st, mb)
	}
}

// xfer is the time a message from stage `from` to stage `to` takes: zero when
// both run on the same rank.
func (p *program) xfer(from, to, mb int) float64 {
	if p.s.Placement[from] == p.s.Placement[to] {
		return 0
	}
	return p.cost.transfer(min(from, to), mb)
}

// addCompute adds the dependencies and results of one computation c on rank r.
func (p *program) addCompute(o *op, r int, c Action) {
	s := p.s
	st, mb := c.Stage, c.Microbatch
	o.dur += p.cost.compute(c)
	o.coll += p.cost.collective(c)
	o.a2a += p.cost.allToAll(c)
	// input from the neighbour stage: same rank, explicit RECV, or implicit transfer
	input := func(from int, out slotKind, recv slotKind) {
		switch {
		case s.Placement[from] == r:
			o.addNeed(need{slot: p.slot(out, from, mb), local: true})
		case p.comms:
			o.addNeed(need{slot: p.slot(recv, st, mb), local: true})
		default:
			o.addNeed(need{slot: p.slot(out, from, mb), latency: p.xfer(from, st, mb)})
		}
	}
	// Token slices: a slice reads the K/V of the earlier slices of its micro-batch on the
	// stage, and its backward takes their gradients from the later ones (SliceTokens).
	M, j := max(s.Slices, 1), 0
	if M > 1 {
		j = mb % M
	}
	switch c.Kind {
	case Forward:
		if st > 0 {
			input(st-1, slotF, slotRecvF)
		}
		if j > 0 {
			o.addNeed(need{slot: p.slot(slotF, st, mb-1), local: true})
		}
		o.addOut(output{slot: p.slot(slotF, st, mb)})
		o.stash.add(st)
	case BackwardInput, FullBackward:
		o.addNeed(need{slot: p.slot(slotF, st, mb), local: true})
		if j < M-1 {
			o.addNeed(need{slot: p.slot(slotBin, st, mb+1), local: true})
		}
		if st+1 < s.Stages {
			input(st+1, slotBin, slotRecvB)
		}
		o.addOut(output{slot: p.slot(slotBin, st, mb)})
		if c.Kind == FullBackward {
			o.addOut(output{slot: p.slot(slotW, st, mb)})
			o.free.add(st)
			o.wdone.add(st)
		}
	case BackwardWeight:
		o.addNeed(need{slot: p.slot(slotBin, st, mb), local: true})
		o.addOut(output{slot: p.slot(slotW, st, mb)})
		o.free.add(st)
		o.wdone.add(st)
	}
}

// timeline is the outcome of a run: per rank and op, when the rank reached the
// op, when it started (inputs ready) and when it ended.
type timeline struct {
	reach, start, end [][]float64
}

// run executes the compiled program. Local dependencies that have not run
// yet are ordering errors; remote ones block the rank until they are
// produced. Ranks still blocked when nothing can move are a deadlock, or a
// missing dependency when what they wait for appears nowhere.
func (p *program) run() (*timeline, error) {
	s := p.s
	R := s.Ranks
	nslots := len(p.producer)
	done := make([]bool, nslots)
	ready := make([]float64, nslots)
	tl := &timeline{reach: make([][]float64, R), start: make([][]float64, R), end: make([][]float64, R)}
	for r := range R {
		n := len(p.ops[r])
		tl.reach[r] = make([]float64, n)
		tl.start[r] = make([]float64, n)
		tl.end[r] = make([]float64, n)
	}
	pc := make([]int, R)
	free := make([]float64, R)
	waiting := make([]int32, R)
	waiters := map[int32][]int{}
	wcount := make([]int, s.Stages)
	queue := make([]int, R)
	queued := make([]bool, R)
	for r := range R {
		queue[r] = r
		queued[r] = true
		waiting[r] = -1
	}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		queued[r] = false
		waiting[r] = -1
		for pc[r] < len(p.ops[r]) {
			i := pc[r]
			o := &p.ops[r][i]
			t := free[r]
			blocked := int32(-1)
			for _, n := range o.needs() {
				if !done[n.slot] {
					if n.local {
						return nil, p.localError(r, i, n.slot)
					}
					blocked = n.slot
					break
				}
				t = max(t, ready[n.slot]+n.latency)
			}
			if blocked >= 0 {
				waiting[r] = blocked
				waiters[blocked] = append(waiters[blocked], r)
				break
			}
			if o.reduce >= 0 && wcount[o.reduce] < s.Microbatches {
				return nil, p.errAt(ErrOrder, r, i, Act(BackwardWeight, o.reduce, s.Microbatches-1),
					"REDUCE_GRAD runs before all %d weight gradients of stage %d (only %d done)", s.Microbatches, o.reduce, wcount[o.reduce])
			}
			tl.reach[r][i] = free[r]
			tl.start[r][i] = t
			end := t + o.dur
			tl.end[r][i] = end
			for _, out := range o.outs() {
				done[out.slot] = true
				ready[out.slot] = end + out.delay
				for _, w := range waiters[out.slot] {
					if !queued[w] {
						queued[w] = true
						queue = append(queue, w)
					}
				}
				delete(waiters, out.slot)
			}
			for _, st := range o.wdone.list() {
				wcount[st]++
			}
			free[r] = end
			pc[r]++
		}
	}
	var stuck []int
	for r := range R {
		if pc[r] < len(p.ops[r]) {
			stuck = append(stuck, r)
		}
	}
	if len(stuck) == 0 {
		return tl, nil
	}
	return nil, p.blockedError(stuck, pc, waiting)
}

func (p *program) localError(r, i int, slot int32) error {
	w := p.slotAction(slot, backwardKind(p.ops[r][i].act))
	pr := p.producer[slot]
	switch {
	case pr == noLoc:
		return p.errAt(ErrMissing, r, i, w, "needs %s, which appears nowhere in the schedule", w)
	case int(pr.rank) == r && int(pr.index) == i:
		return p.errAt(ErrOrder, r, i, w, "needs %s, which it produces itself", w)
	case int(pr.rank) == r:
		return p.errAt(ErrOrder, r, i, w, "needs %s, which comes later on the same rank (action %d)", w, pr.index)
	default:
		return p.errAt(ErrOrder, r, i, w, "needs %s first on rank %d, but it runs on rank %d (action %d)", w, r, pr.rank, pr.index)
	}
}

// backwardKind is the kind of a's backward computation (I or B), if any: a
// missing input gradient is named after it.
func backwardKind(a Action) Kind {
	for _, c := range a.Computes() {
		if c.Kind == FullBackward || c.Kind == BackwardInput {
			return c.Kind
		}
	}
	return Idle
}

func (p *program) blockedError(stuck, pc []int, waiting []int32) error {
	s := p.s
	var blocked []Blocked
	for _, r := range stuck {
		i := pc[r]
		slot := waiting[r]
		blocked = append(blocked, Blocked{Rank: r, Index: i, Action: s.Actions[r][i], WaitsOn: p.slotAction(slot, backwardKind(s.Actions[r][i]))})
	}
	// A wait for something that does not exist is a missing dependency.
	for _, b := range blocked {
		if p.producer[waiting[b.Rank]] == noLoc {
			e := p.errAt(ErrMissing, b.Rank, b.Index, b.WaitsOn, "waits for %s, which appears nowhere in the schedule", b.WaitsOn)
			e.Msg = "missing dependency: " + e.Msg
			e.Blocked = blocked
			return e
		}
	}
	var parts []string
	for _, b := range blocked {
		pr := p.producer[waiting[b.Rank]]
		q := int(pr.rank)
		var why string
		switch {
		case q == b.Rank:
			why = fmt.Sprintf("which rank %d itself only reaches later (action %d)", q, pr.index)
		case pc[q] >= len(p.ops[q]):
			why = fmt.Sprintf("which rank %d never reaches", q) // unreachable: a finished rank has produced everything
		default:
			j := pc[q]
			why = fmt.Sprintf("which rank %d never reaches (blocked at action %d: %s", q, j, s.Actions[q][j])
			if w := waiting[q]; w >= 0 {
				why += " waits for " + p.slotAction(w, 0).String()
			}
			why += ")"
		}
		parts = append(parts, fmt.Sprintf("rank %d at action %d (%s) waits for %s, %s", b.Rank, b.Index, b.Action, b.WaitsOn, why))
	}
	b0 := blocked[0]
	return &Error{Kind: ErrDeadlock, Rank: b0.Rank, Index: b0.Index, Action: b0.Action, WaitsOn: b0.WaitsOn,
		Blocked: blocked, Msg: "deadlock: " + strings.Join(parts, "; ")}
}
