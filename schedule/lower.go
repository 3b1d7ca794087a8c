package schedule

// LowerComm turns a compute_only schedule into a compute_comms one: every
// cross-rank dependency gets a SEND on the producing rank, placed right
// after the producing computation, and the matching RECV on the consuming
// rank, placed right before the consuming computation (both RECVs of an
// OVERLAP_F_B come before it, both SENDs after it). F of stage s feeds stage
// s+1 (SEND_F s / RECV_F s+1); I or B of stage s feeds stage s−1 (SEND_B s /
// RECV_B s−1). Stages on the same rank, such as the two at the turn of a V,
// exchange nothing. Idle cells are dropped, as PyTorch's compute_comms format
// has none.
//
// Under the runtime's semantics — sends are buffered and never block, a RECV
// blocks until its message is in the mailbox — this placement blocks a rank
// exactly where the compute_only schedule waits for its input, so the
// lowered schedule is deadlock-free exactly when the input is; no RECV has
// to be hoisted earlier. LowerComm validates its input first and returns the
// validation error (with rank, index and action) if the input cannot run.
// A schedule that already has SEND/RECV actions is validated and returned
// as a copy.
func LowerComm(s *Schedule) (*Schedule, error) {
	if err := Validate(s); err != nil {
		return nil, err
	}
	out := s.Clone()
	if s.HasComms() {
		return out, nil
	}
	for r, acts := range s.Actions {
		lowered := make([]Action, 0, 2*len(acts))
		for _, a := range acts {
			if a.IsIdle() {
				continue
			}
			comps := a.Computes()
			for _, c := range comps {
				if recv, ok := s.recvFor(c); ok {
					lowered = append(lowered, recv)
				}
			}
			lowered = append(lowered, a.clone())
			for _, c := range comps {
				if send, ok := s.sendFor(c); ok {
					lowered = append(lowered, send)
				}
			}
		}
		out.Actions[r] = lowered
	}
	return out, nil
}

// recvFor returns the RECV computation c needs, if its input comes from another rank.
func (s *Schedule) recvFor(c Action) (Action, bool) {
	st := c.Stage
	switch c.Kind {
	case Forward:
		if st > 0 && s.Placement[st-1] != s.Placement[st] {
			return Act(RecvF, st, c.Microbatch), true
		}
	case BackwardInput, FullBackward:
		if st+1 < s.Stages && s.Placement[st+1] != s.Placement[st] {
			return Act(RecvB, st, c.Microbatch), true
		}
	}
	return Action{}, false
}

// sendFor returns the SEND computation c's output needs, if its consumer is on another rank.
func (s *Schedule) sendFor(c Action) (Action, bool) {
	st := c.Stage
	switch c.Kind {
	case Forward:
		if st+1 < s.Stages && s.Placement[st+1] != s.Placement[st] {
			return Act(SendF, st, c.Microbatch), true
		}
	case BackwardInput, FullBackward:
		if st > 0 && s.Placement[st-1] != s.Placement[st] {
			return Act(SendB, st, c.Microbatch), true
		}
	}
	return Action{}, false
}

// ComputeOnly returns a copy of s without its SEND/RECV actions (and without
// REDUCE_GRAD, UNSHARD and RESHARD, which PyTorch's compute_only format does
// not allow); idle cells are kept.
func ComputeOnly(s *Schedule) *Schedule {
	out := s.Clone()
	for r, acts := range out.Actions {
		kept := acts[:0]
		for _, a := range acts {
			if a.IsIdle() || a.Kind.IsCompute() {
				kept = append(kept, a)
			}
		}
		out.Actions[r] = kept
	}
	return out
}
