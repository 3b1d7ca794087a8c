package runtime

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"ppc.dev/ppc/runtime/checkpoint"
)

// Process returns the multi-process run the job is part of (nil: every rank runs here).
func (j *Job) Process() *Process { return j.proc }

// Abort tells every other process that this one fails with err, so that they stop now with
// its message rather than when they next wait for it.
func (p *Process) Abort(err error) {
	if p == nil || err == nil {
		return
	}
	p.mu.Lock()
	remote := p.remote != nil
	p.mu.Unlock()
	if remote {
		return // the run is already stopping, for a reason another process gave
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "rank ") {
		msg = fmt.Sprintf("rank %d failed: %s", p.Rank, msg)
	}
	writeCtrl(p.ctrl, &p.cwmu, &ctrlMsg{Type: "abort", Error: msg})
}

// NewTrace starts this rank's part of a multi-process trace: its events, on the run's
// common clock, in a temporary file that MergeTrace gathers.
func (p *Process) NewTrace(first, last int) (*Trace, error) {
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

// MergeTrace closes this rank's part of the trace and gathers every rank's at rank 0, which
// writes them to path as one trace (a process per rank, as an in-process run's trace).
func (p *Process) MergeTrace(t *Trace, path string) error {
	err := t.Close()
	var part []byte
	if err == nil {
		part, err = os.ReadFile(t.tmp)
	}
	os.Remove(t.tmp)
	if err == nil && len(part) > maxCtrl-(1<<20) {
		err = fmt.Errorf("rank %d's trace is %s, too large to gather (trace fewer steps with --trace-steps)", p.Rank, FormatBytes(int64(len(part))))
	}
	if err != nil {
		part = nil // the others still gather; rank 0 reports the rank that failed
	}
	all, gerr := p.gather("trace", json.RawMessage(orNull(part, err)), true)
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

// SaveAll writes a checkpoint of the whole job to dir: Save for an in-process run; in a
// multi-process run every process writes its rank's tensors, rank 0 the index once all have
// (the commit point), and every process learns whether the checkpoint was committed. A save
// that fails anywhere ends as Save's does: the files it wrote are removed, the previous
// checkpoint is intact (and the error says so), and a full disk is a failed write on the rank
// it struck, whose message the others repeat.
func (j *Job) SaveAll(dir string, seed uint64) error {
	if j.proc == nil {
		return j.Save(dir, seed)
	}
	p := j.proc
	type written struct {
		Files []checkpoint.ShardFile `json:"files"`
		Error string                 `json:"error,omitempty"`
	}
	// The verdict rank 0 sends every rank: Error "" when the checkpoint is committed, else
	// why not and the rank that failed.
	type verdict struct {
		Error string `json:"error,omitempty"`
		Rank  int    `json:"rank"`
	}
	sub := checkpoint.SaveDir(dir, j.StepCount()) // before a commit changes the index
	files, werr := j.writeShards(dir)
	mine := written{Files: files}
	if werr != nil {
		mine.Error = werr.Error()
	}
	all, err := p.gather("save", mine, true)
	if err != nil {
		return err
	}
	var v verdict
	var cerr error // rank 0's own failure to commit
	if p.Rank == 0 {
		var every []checkpoint.ShardFile
		for r, raw := range all {
			var w written
			if err := json.Unmarshal(raw, &w); err != nil {
				v = verdict{fmt.Sprintf("rank %d's report: %v", r, err), r}
				break
			}
			if w.Error != "" {
				v = verdict{fmt.Sprintf("rank %d could not write its tensors: %s", r, w.Error), r}
				break
			}
			every = append(every, w.Files...)
		}
		if v.Error == "" {
			if cerr = j.commit(dir, seed, every); cerr != nil {
				v = verdict{cerr.Error(), 0}
			}
		}
	}
	res, err := p.gather("committed", v, false)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(res[0], &v); err != nil {
		v = verdict{fmt.Sprintf("rank 0's verdict: %v", err), 0}
	}
	if v.Error == "" {
		return nil
	}
	// Not committed. Every rank has finished writing (rank 0 decided once all had
	// reported), so the step directory is garbage: each rank removes it (on a shared file
	// system they race harmlessly; on separate ones each removes its own files) — unless
	// the index names it after all (a commit whose last sync failed).
	now := checkpoint.Committed(dir)
	if now != sub {
		os.RemoveAll(filepath.Join(dir, sub))
	}
	intact := ""
	if now != "" && now != sub {
		intact = fmt.Sprintf("; the previous checkpoint in %s is intact", dir)
	}
	switch {
	case werr != nil:
		return fmt.Errorf("%w%s", werr, intact) // this process's own failure (a full disk: exit 1 as a failed write)
	case cerr != nil:
		return fmt.Errorf("%w%s", cerr, intact)
	}
	return &RemoteError{Msg: fmt.Sprintf("the checkpoint was not saved: %s%s", v.Error, intact), Rank: v.Rank}
}
