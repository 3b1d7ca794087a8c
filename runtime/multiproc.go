package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/runtime/checkpoint"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/dist"
	"ppc.dev/ppc/runtime/fault"
)

// Process returns the multi-process run the job is part of (nil: every rank runs here).
func (j *Job) Process() *dist.Process { return j.proc }

// PlanHash identifies the plan a job runs: every process of a run must run the same one.
func (j *Job) PlanHash() string {
	h := sha256.New()
	b, _ := json.Marshal(j.Plan)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// Join connects a job loaded with LoadRank to the other processes of its run (dist.Join:
// the rendezvous, then a TCP connection to each rank this rank exchanges data with) and, when
// the device communicates itself, sets up its groups (devnet.go). From then on the job's
// steps run across the processes.
func (j *Job) Join(o dist.JoinOptions) (*dist.Process, error) {
	if len(j.Ranks) != 1 || j.Ranks[0].Index != o.Rank {
		return nil, fmt.Errorf("join as rank %d: the job was not loaded for that rank alone (LoadRank)", o.Rank)
	}
	if o.World != j.Plan.World {
		return nil, fault.Inputf("the launcher started %d processes, the plan has %d ranks (pp %d × dp %d × cp %d × tp %d): start one process per rank", o.World, j.Plan.World, j.Plan.Mesh.PP, j.Plan.Mesh.DP, j.Plan.Mesh.CP, j.Plan.Mesh.TP)
	}
	r := j.Ranks[0]
	p, err := dist.Join(o, dist.Member{PlanHash: j.PlanHash(), Peers: r.peers(), MaxMessage: maxMessage(r.Prog), Status: r.status, LastStep: r.curStep.Load})
	if err != nil {
		return nil, err
	}
	j.comm, j.proc = p.Comm(), p
	if nd, ok := j.dev.(device.Networked); ok {
		if dn := nd.Net(); dn != nil {
			if err := j.joinNet(p, dn); err != nil {
				p.Close()
				return nil, err
			}
		}
	}
	return p, nil
}

// maxMessage bounds what a peer may send this rank: its largest buffer.
func maxMessage(prog *pb.Program) uint64 {
	var m int64 = 1 << 10
	for _, b := range prog.Buffers {
		if t, err := codegen.TypeFromProto(b.Dtype, b.Shape); err == nil && t.Bytes() > m {
			m = t.Bytes()
		}
	}
	return uint64(m)
}

// peers lists the ranks r sends to, receives from or shares a collective with.
func (r *Rank) peers() []int {
	set := map[int]bool{}
	for _, it := range r.instrs {
		switch {
		case it.Kind == pb.Instr_SEND || it.Kind == pb.Instr_RECV:
			set[it.peer] = true
		case it.coll != nil:
			for _, m := range it.coll.Group {
				set[m] = true
			}
		}
	}
	delete(set, r.Index)
	var out []int
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// status describes what the rank is doing, for the store's reports when another process
// must say why the run stopped: "step 3, instruction 17 of 240 (recv from rank 1 …)".
func (r *Rank) status() string {
	step, at := r.curStep.Load(), r.at.Load()
	switch {
	case step == 0:
		return "starting"
	case at < 0 || int(at) >= len(r.instrs):
		return fmt.Sprintf("between steps (step %d done)", step)
	}
	return fmt.Sprintf("running step %d, instruction %d of %d (%s)", step, at, len(r.instrs), describeInstr(&r.instrs[at]))
}

// NewRankTrace starts this process's rank's part of a multi-process trace: its events, on
// the run's common clock, in a temporary file that MergeTrace gathers.
func NewRankTrace(p *dist.Process, first, last int) (*Trace, error) {
	f, err := os.CreateTemp("", fmt.Sprintf("ppc-trace-rank%d-*.json", p.Rank))
	if err != nil {
		return nil, err
	}
	t, err := newTrace(f, []int{p.Rank}, first, last, p.Start)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	t.tmp = f.Name()
	return t, nil
}

// MergeTrace closes this process's rank's part of the trace (NewRankTrace) and gathers every
// rank's at rank 0, which writes them to path as one trace (a process per rank, as an
// in-process run's trace).
func MergeTrace(p *dist.Process, t *Trace, path string) error {
	err := t.Close()
	var part []byte
	if err == nil {
		part, err = os.ReadFile(t.tmp)
	}
	os.Remove(t.tmp)
	if err == nil && len(part) > dist.MaxGather {
		err = fmt.Errorf("rank %d's trace is %s, too large to gather (trace fewer steps with --trace-steps)", p.Rank, FormatBytes(int64(len(part))))
	}
	if err != nil {
		part = nil // the others still gather; rank 0 reports the rank that failed
	}
	all, gerr := p.Gather("trace", json.RawMessage(orNull(part, err)), true)
	if gerr != nil {
		return gerr
	}
	if err != nil {
		return err
	}
	if p.Rank != 0 {
		return nil
	}
	var events []json.RawMessage
	for r, raw := range all {
		var tr struct {
			TraceEvents []json.RawMessage `json:"traceEvents"`
		}
		if string(raw) == "null" {
			return fmt.Errorf("rank %d could not write its part of the trace", r)
		}
		if err := json.Unmarshal(raw, &tr); err != nil {
			return fmt.Errorf("rank %d's trace: %v", r, err)
		}
		events = append(events, tr.TraceEvents...)
	}
	return checkpoint.WriteFileAtomic(path, func(w io.Writer) error {
		if _, err := io.WriteString(w, `{"displayTimeUnit":"ms","traceEvents":[`); err != nil {
			return err
		}
		for i, ev := range events {
			if i > 0 {
				io.WriteString(w, ",")
			}
			io.WriteString(w, "\n")
			if _, err := w.Write(ev); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, "\n]}\n")
		return err
	})
}

func orNull(b []byte, err error) []byte {
	if err != nil || len(b) == 0 {
		return []byte("null")
	}
	return b
}
