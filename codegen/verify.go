package codegen

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	pb "ppc.dev/ppc/codegen/programpb"
)

// ProgramSHA256 is the checksum plan.json records for a program file's bytes.
func ProgramSHA256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// CheckProgramBytes compares a program file's bytes with the checksum plan.json records for
// them. Readers call it before decoding the bytes: a flipped byte is then reported as the
// corruption it is, where the decoder would say "cannot parse" or, worse, accept it.
func (p *Plan) CheckProgramBytes(file string, data []byte) error {
	pr := p.Program(file)
	if pr == nil || pr.ProgramSHA256 == "" {
		return nil // not a program of this plan, or a plan written without checksums
	}
	if ProgramSHA256(data) != pr.ProgramSHA256 {
		return fmt.Errorf("does not match plan.json (its SHA-256 differs): the file is corrupted or comes from another compile; compile the model again")
	}
	return nil
}

// CheckSchedule checks that the program of pipeline rank r runs plan.json's schedule for that
// rank (the schedule's ranks are pipeline ranks; every dp × tp replica runs the same): the
// program's action markers (BEGIN F/I/W, stage, micro-batch) in the order of the plan's
// actions, a full backward B being its I then its W.
//
// The program's instruction stream is what the runtime executes; plan.json's schedule is
// what `ppc simulate DIR` simulates (with the per-stage costs only plan.json has). Checksums
// tie the programs to plan.json but do not cover plan.json itself, so the runtime refuses a
// plan whose recorded schedule differs from its programs: whatever runs is what simulate
// simulated. A stage's function that does not exist (no W for a stage without parameters)
// has no marker; the plan's actions of that kind and stage are skipped.
func (p *Plan) CheckSchedule(r int, prog *pb.Program) error {
	if len(p.Schedule.Actions) == 0 {
		return nil // no schedule recorded: nothing for a simulation to disagree with
	}
	if len(p.Schedule.Actions) != p.Mesh.PP {
		return fmt.Errorf("plan.json's schedule lists %d ranks, the plan has %d pipeline ranks", len(p.Schedule.Actions), p.Mesh.PP)
	}
	type mark struct {
		kind      string
		stage, mb int
	}
	var got []mark
	type fn struct {
		kind  string
		stage int
	}
	runs := map[fn]bool{} // the per-stage functions the program runs
	for _, in := range prog.Instrs {
		if in.GetKind() == pb.Instr_BEGIN && in.Label != "OPT" {
			m := mark{in.Label, int(in.Stage), int(in.Microbatch)}
			if in.TokenSlice > 0 {
				// The schedule counts units: slice j of micro-batch mb is unit mb·M + j.
				m.mb = m.mb*max(len(p.TokenSlices), 1) + int(in.TokenSlice) - 1
			}
			got = append(got, m)
			runs[fn{m.kind, m.stage}] = true
		}
	}
	var want []mark
	for _, s := range p.Schedule.Actions[r] {
		var a Action
		if n, err := fmt.Sscanf(s, "%d%1s%d", &a.Stage, &a.Kind, &a.Microbatch); n != 3 || err != nil || fmt.Sprint(a) != s || !strings.Contains("FIWB", a.Kind) {
			return fmt.Errorf("plan.json: pipeline rank %d's schedule has a malformed action %q", r, s)
		}
		kinds := []string{a.Kind}
		if a.Kind == "B" {
			kinds = []string{"I", "W"}
		}
		for _, k := range kinds {
			if runs[fn{k, a.Stage}] {
				want = append(want, mark{k, a.Stage, a.Microbatch})
			}
		}
	}
	for i := 0; i < max(len(got), len(want)); i++ {
		switch {
		case i >= len(want):
			return fmt.Errorf("runs %d%s%d after the last action of plan.json's schedule for pipeline rank %d", got[i].stage, got[i].kind, got[i].mb, r)
		case i >= len(got):
			return fmt.Errorf("stops before %d%s%d, which plan.json's schedule for pipeline rank %d runs next", want[i].stage, want[i].kind, want[i].mb, r)
		case got[i] != want[i]:
			return fmt.Errorf("runs %d%s%d where plan.json's schedule for pipeline rank %d has %d%s%d (action %d): plan.json was edited or comes from another compile",
				got[i].stage, got[i].kind, got[i].mb, r, want[i].stage, want[i].kind, want[i].mb, i)
		}
	}
	return nil
}
