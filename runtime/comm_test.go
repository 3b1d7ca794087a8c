package runtime

import (
	"errors"
	"strings"
	"testing"
	"time"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/dist"
)

// twoRanks builds a two-rank job whose programs are the given instruction lists over one
// f32[4] activation buffer each.
func twoRanks(t *testing.T, instrs [2][]*pb.Instr) *Job {
	t.Helper()
	plan := &codegen.Plan{FormatVersion: codegen.FormatVersion, World: 2, Mesh: codegen.Mesh{PP: 2, DP: 1, TP: 1}, Microbatches: 1,
		Programs: []codegen.ProgramInfo{{File: codegen.ProgramFile(0)}, {File: codegen.ProgramFile(1), PP: 1}}}
	plan.SetRanks()
	j := &Job{Plan: plan, dev: cpu.New(), comm: dist.NewLocal(2)}
	for r := 0; r < 2; r++ {
		p := &pb.Program{FormatVersion: codegen.FormatVersion, Pp: int32(r), Microbatches: 1, ArenaBytes: 64,
			Mesh:    []*pb.NamedInt{{Name: "pp", Value: 2}, {Name: "dp", Value: 1}, {Name: "cp", Value: 1}, {Name: "tp", Value: 1}},
			Buffers: []*pb.Buffer{{Id: 0, Name: "x", Dtype: pb.DType_F32, Shape: []int64{4}, Role: pb.Role_ACTIVATION}},
			Instrs:  instrs[r]}
		rank, err := j.prepare(r, p, true)
		if err != nil {
			t.Fatal(err)
		}
		j.add(rank, true)
	}
	return j
}

func recv(peer int32, tag int64) *pb.Instr {
	return &pb.Instr{Kind: pb.Instr_RECV, Out: []int32{0}, Peer: peer, Tag: tag}
}
func send(peer int32, tag int64) *pb.Instr {
	return &pb.Instr{Kind: pb.Instr_SEND, In: []int32{0}, Peer: peer, Tag: tag}
}

func stepWithin(t *testing.T, j *Job) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := j.Step(Options{Seed: 1})
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the job hung instead of reporting")
		return nil
	}
}

func TestHangDetector(t *testing.T) {
	// Both ranks receive first: a deadlock, reported with who waits for what.
	j := twoRanks(t, [2][]*pb.Instr{{recv(1, 0), send(1, 1)}, {recv(0, 1), send(0, 0)}})
	err := stepWithin(t, j)
	var he *dist.HangError
	var re *RunError
	if !errors.As(err, &he) || !errors.As(err, &re) || re.Step != 1 {
		t.Fatalf("got %v, want a dist.HangError in the RunError of step 1", err)
	}
	for _, want := range []string{"rank 0 waits for recv from rank 1 (tag 0)", "rank 1 waits for recv from rank 0 (tag 1)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("report lacks %q:\n%v", want, err)
		}
	}
	// A rank that finishes while the other still waits is a hang too.
	j = twoRanks(t, [2][]*pb.Instr{{}, {recv(0, 3)}})
	err = stepWithin(t, j)
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "rank 1 waits for recv from rank 0 (tag 3)") || !strings.Contains(err.Error(), "ranks [0] finished") {
		t.Fatalf("got %v", err)
	}
	// Send-then-receive in both directions completes, and data arrives.
	j = twoRanks(t, [2][]*pb.Instr{{send(1, 0), recv(1, 1)}, {send(0, 1), recv(0, 0)}})
	copy(j.Ranks[0].Bufs[0].F32(), []float32{1, 2, 3, 4})
	if err := stepWithin(t, j); err != nil {
		t.Fatal(err)
	}
	if got := j.Ranks[1].Bufs[0].F32(); got[3] != 4 {
		t.Fatalf("rank 1 received %v", got)
	}
	// The job recovers for the next step after a hang.
	j = twoRanks(t, [2][]*pb.Instr{{send(1, 0), recv(1, 1)}, {send(0, 1), recv(0, 0)}})
	for i := 0; i < 3; i++ {
		if err := stepWithin(t, j); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

func TestAllReduceSumsInPlace(t *testing.T) {
	ar := &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{0, 1}}
	j := twoRanks(t, [2][]*pb.Instr{{ar}, {ar}})
	j.Ranks[0].Prog.Buffers[0].Name, j.Ranks[1].Prog.Buffers[0].Name = "g", "g"
	copy(j.Ranks[0].Bufs[0].F32(), []float32{1, 2, 3, 4})
	copy(j.Ranks[1].Bufs[0].F32(), []float32{10, 20, 30, 40})
	if err := stepWithin(t, j); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		if got := j.Ranks[r].Bufs[0].F32(); got[0] != 11 || got[3] != 44 {
			t.Fatalf("rank %d has %v", r, got)
		}
	}
}
