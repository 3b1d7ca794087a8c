package schedule

import "fmt"

// ErrorKind classifies a schedule Error.
type ErrorKind uint8

const (
	ErrBadAction  ErrorKind = iota + 1 // an action out of range or malformed
	ErrPlacement                       // a stage on two ranks, or an action on a rank that does not hold its stage
	ErrDuplicate                       // a computation, SEND or RECV appears twice
	ErrMissing                         // something an action needs appears nowhere
	ErrOrder                           // an action needs something that runs later on its own rank
	ErrDeadlock                        // ranks wait on each other forever
	ErrIncomplete                      // a (stage, micro-batch) lacks its F or its backward
)

var errorKindNames = map[ErrorKind]string{
	ErrBadAction: "bad action", ErrPlacement: "placement", ErrDuplicate: "duplicate",
	ErrMissing: "missing dependency", ErrOrder: "order", ErrDeadlock: "deadlock", ErrIncomplete: "incomplete",
}

func (k ErrorKind) String() string {
	if n, ok := errorKindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is a schedule that cannot run. Rank and Index locate the offending
// action (Index is 0-based in that rank's list; both are -1 when the problem
// has no single location, such as a (stage, micro-batch) that never runs).
// WaitsOn is what the action waits for or needs, when that is the problem.
type Error struct {
	Kind    ErrorKind
	Rank    int
	Index   int
	Action  Action
	WaitsOn Action
	// Blocked lists every blocked rank of a deadlock (or of a missing
	// dependency found when the ranks stopped moving); Rank, Index, Action
	// and WaitsOn repeat its first entry.
	Blocked []Blocked
	Msg     string
}

// Blocked is one rank stuck at an action.
type Blocked struct {
	Rank    int
	Index   int
	Action  Action
	WaitsOn Action
}

func (e *Error) Error() string { return e.Msg }

// Validate dry-runs s and reports the first reason it cannot run, or nil.
//
// Both formats are accepted. In compute_only, dependencies are implicit: F of
// stage s needs F of stage s−1, I/B of stage s needs I/B of stage s+1 (and its
// own F), W needs its I. In compute_comms, an input that comes from another
// rank must be received by a RECV earlier on the consuming rank, every RECV
// needs a matching SEND and every SEND a RECV; sends never block, a RECV
// blocks until its message has been sent.
//
// Validate also checks completeness: every (stage, micro-batch) has exactly
// one F and exactly one backward (one B, or one I and one W), each stage's
// actions all sit on the rank Placement gives, and REDUCE_GRAD of a stage
// follows all its weight gradients. Errors are *Error values.
func Validate(s *Schedule) error {
	p, err := compile(s, nil)
	if err != nil {
		return err
	}
	if _, err := p.run(); err != nil {
		return err
	}
	return p.checkComplete()
}

// checkComplete reports a (stage, micro-batch) whose F, input gradient or
// weight gradient never runs. Searching stops at the first gap, so the cost
// is bounded by the number of actions even for huge stage numbers.
func (p *program) checkComplete() error {
	s := p.s
	for _, k := range []slotKind{slotF, slotBin, slotW} {
		for st := 0; st < s.Stages; st++ {
			for mb := 0; mb < s.Microbatches; mb++ {
				key := uint64(uint32(st))<<32 | uint64(uint32(mb))
				id, ok := p.pairs[key]
				if ok && p.producer[id*int32(numSlotKinds)+int32(k)] != noLoc {
					continue
				}
				what := map[slotKind]string{slotF: "no F", slotBin: "no backward (B or I)", slotW: "no weight gradient (W or B)"}[k]
				return &Error{Kind: ErrIncomplete, Rank: s.Placement[st], Index: -1,
					Msg: fmt.Sprintf("incomplete: stage %d micro-batch %d has %s (expected on rank %d)", st, mb, what, s.Placement[st])}
			}
		}
	}
	return nil
}
