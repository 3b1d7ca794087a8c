package schedule

import "fmt"

// SliceTokens expands a schedule over micro-batches into one over token slices (TeraPipe):
// each micro-batch's sequence is cut into slices that run one after another, so a schedule
// over m micro-batches becomes one over m·slices units, unit u being slice u mod slices of
// micro-batch u div slices. Every action on a micro-batch becomes one per slice: forwards
// (and their SEND_F/RECV_F) in slice order, since a slice reads the keys and values of the
// earlier ones; input and weight backwards (and SEND_B/RECV_B) in reverse order, since a
// slice's K/V gradient comes from the later ones. An OVERLAP_F_B pairs the forward's slice j
// with the backward's slice slices−1−j. The order of the micro-batches — the schedule's
// bubble structure — is unchanged; the next stage can start slice 0 while this one computes
// slice 1, which is what fills the pipeline. Slices ≤ 1 returns a copy.
func SliceTokens(s *Schedule, slices int) (*Schedule, error) {
	out := s.Clone()
	if slices <= 1 {
		return out, nil
	}
	if s.Slices > 1 {
		return nil, fmt.Errorf("schedule %s is already cut into %d token slices", s.Name, s.Slices)
	}
	if s.Microbatches*slices > MaxMicrobatches || s.NumActions()*slices > MaxActions {
		return nil, fmt.Errorf("%d micro-batches of %d token slices: more than the limit of %d units or %d actions", s.Microbatches, slices, MaxMicrobatches, MaxActions)
	}
	unit := func(a Action, j int) Action {
		b := a
		switch a.Kind {
		case Forward, SendF, RecvF:
		default:
			j = slices - 1 - j
		}
		b.Microbatch = a.Microbatch*slices + j
		return b
	}
	out.Microbatches, out.Slices = s.Microbatches*slices, slices
	for r, acts := range s.Actions {
		row := make([]Action, 0, len(acts)*slices)
		for _, a := range acts {
			switch {
			case a.Kind == OverlapFB:
				for j := 0; j < slices; j++ {
					sub := make([]Action, len(a.Sub))
					for i, c := range a.Sub {
						sub[i] = unit(c, j)
					}
					row = append(row, Action{Kind: OverlapFB, Microbatch: NoMicrobatch, Sub: sub})
				}
			case a.Kind.hasMicrobatch():
				for j := 0; j < slices; j++ {
					row = append(row, unit(a, j))
				}
			default:
				row = append(row, a)
			}
		}
		out.Actions[r] = row
	}
	return out, nil
}
