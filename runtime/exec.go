package runtime

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/dist"
	"ppc.dev/ppc/runtime/fault"
)

// Options control a run.
type Options struct {
	Seed uint64
	Data data.Source // nil: synthetic data from Seed
	// Trace, when set, records every executed instruction of the steps in its range with its
	// rank and time.
	Trace *Trace
	// StopRequested, when set, is asked at the end of each step of a multi-process run
	// whether this process wants the run to stop (a signal): every process learns it in
	// StepResult.Stop, so that all stop after the same step.
	StopRequested func() bool
}

// StepResult is what one training step reports.
type StepResult struct {
	Step     int
	Loss     float64 // mean over the global batch's micro-batches (NaN for inference plans)
	Duration time.Duration
	Samples  int // samples processed (global batch)
	Tokens   int // tokens processed, when the inputs are token sequences
	// Counts are the model's metrics (`metric NAME EXPR`, Instr.sum) by name, each summed over
	// the step's micro-batches and the ranks holding different data (tp 0 of each).
	Counts map[string]float64
	// Metrics are the step's other METRIC values by name, each the lowest recording rank's (every
	// rank recording one computes the same value): "overflow" is 1 when fp16 loss scaling
	// skipped the step, "loss_scale" the scale its backward used. Nil when the plan has none.
	Metrics map[string]float64
	// Multi-process runs: each rank's time for the step, and whether a process asked the run
	// to stop after it.
	RankTimes []time.Duration
	Stop      bool
}

// RunError is a step that failed while executing a loaded, validated plan: ranks that hang
// (a *dist.HangError), a kernel that fails, a message of the wrong size. Its input checked
// out, so it is a runtime failure (ppc exits 1), unlike a *fault.InputError.
type RunError struct {
	Step int
	Err  error
}

func (e *RunError) Error() string { return fmt.Sprintf("step %d: %v", e.Step, e.Err) }
func (e *RunError) Unwrap() error { return e.Err }

// Init creates every rank's parameters, optimizer state and constants (the step counter
// starts at 0, so the first Step runs step 1).
func (j *Job) Init(seed uint64) error {
	defer j.forgetConstants()
	for _, r := range j.Ranks {
		for i, b := range r.Prog.Buffers {
			switch b.Role {
			case pb.Role_PARAM, pb.Role_STATE:
				err := j.writeHost(r.Bufs[i], func(t device.Tensor) error { return initBuffer(b, r.shards[i], t, seed) })
				if err != nil {
					return fmt.Errorf("rank %d: %s: %v", r.Index, b.Name, err)
				}
			}
		}
		r.step = 0
	}
	return nil
}

// Step runs one training step (or one inference pass) on every rank, each in its own
// goroutine, and returns the mean loss over the global batch's M·dp micro-batches. Each
// micro-batch's loss counts once: the tensor-parallel ranks of a replica compute the same
// loss, and only the one with tp coordinate 0 records it.
func (j *Job) Step(opts Options) (StepResult, error) {
	src := opts.Data
	if src == nil {
		src = &data.Synthetic{Seed: opts.Seed, Plan: j.Plan}
	}
	step := 0
	if len(j.Ranks) > 0 {
		step = j.Ranks[0].step + 1
	}
	if j.exposed {
		j.forgetConstants()
	}
	j.comm.ResetStep()
	if j.proc != nil {
		// The store's account of this rank, should it die mid-step (the heartbeat adds the
		// instruction when a step is long).
		j.proc.Report(fmt.Sprintf("running step %d", step))
	}
	tr := opts.Trace
	if !tr.records(step) {
		tr = nil
	}
	if sc, ok := j.dev.(device.SharedCores); ok {
		sc.SetSharedCores(len(j.Ranks) > 1)
	}
	start := time.Now()
	run := func(r *Rank) {
		if err := j.runRank(r, step, src, tr); err != nil {
			j.comm.Abort(err) // the first error is the one reported
		}
		j.comm.Finish(r.Index)
	}
	if len(j.Ranks) == 1 {
		// One rank runs on this goroutine, whose stack has grown to the kernels' depth in
		// earlier steps: a goroutine a step started on a small stack and copied it as it
		// grew, 50–60 µs of GoogLeNet's 10 ms step at batch 1 (Zen 5, CPU profile).
		run(j.Ranks[0])
	} else {
		var wg sync.WaitGroup
		for _, r := range j.Ranks {
			wg.Add(1)
			go func(r *Rank) {
				defer wg.Done()
				run(r)
			}(r)
		}
		wg.Wait()
	}
	res := StepResult{Step: step, Duration: time.Since(start), Loss: math.NaN()}
	err := j.comm.Err()
	var sum float64
	n := 0
	var sums map[string]float64
	for _, r := range j.Ranks { // in rank order: the lowest rank's metric is kept
		for k, v := range r.sums {
			if sums == nil {
				sums = map[string]float64{}
			}
			sums[k] += v
		}
		clear(r.sums)
		for _, l := range r.losses {
			sum += l
			n++
		}
		r.losses = r.losses[:0]
		for k, v := range r.metrics {
			if _, ok := res.Metrics[k]; !ok {
				if res.Metrics == nil {
					res.Metrics = map[string]float64{}
				}
				res.Metrics[k] = v
			}
		}
		clear(r.metrics)
	}
	if j.proc != nil {
		// Every process learns the step's outcome: its losses, or the first failure.
		if err != nil {
			err = j.proc.Fail(err)
		} else {
			stop := opts.StopRequested != nil && opts.StopRequested()
			sum, n, res.RankTimes, res.Stop, res.Metrics, sums, err = j.proc.EndStep(sum, n, res.Duration, stop, res.Metrics, sums)
			res.Duration = time.Since(start)
		}
	}
	res.Counts = sums
	if tr != nil {
		if terr := tr.endStep(); terr != nil && err == nil {
			err = fmt.Errorf("trace: %v", terr)
		}
	}
	if err != nil {
		var ie *fault.InputError
		if errors.As(err, &ie) {
			return res, err // data that turned out bad when read: the user's to fix
		}
		return res, &RunError{Step: step, Err: err}
	}
	for _, r := range j.Ranks {
		r.step = step
	}
	if n > 0 {
		res.Loss = sum / float64(n)
	}
	for _, in := range j.Plan.Inputs {
		if !in.Label {
			res.Samples = in.Samples() * j.Plan.GlobalMicrobatches()
			if in.Range != nil && len(in.MicrobatchShape) == 2 {
				res.Tokens = res.Samples * in.MicrobatchShape[1]
			}
			break
		}
	}
	return res, nil
}

func (j *Job) runRank(r *Rank, step int, src data.Source, tr *Trace) (err error) {
	if j.net != nil {
		stop := j.watchNet(r)
		defer func() {
			if cause := stop(); cause != nil && err != nil {
				err = cause // what the device's failure came from
			}
		}()
	}
	for i, b := range r.Prog.Buffers {
		if b.Role == pb.Role_STEP {
			if err := j.writeHost(r.Bufs[i], func(t device.Tensor) error { return data.StoreF64(t, []float64{float64(step)}) }); err != nil {
				return err
			}
		}
	}
	r.curStep.Store(int64(step))
	defer r.at.Store(-1)
	defer r.flushSends() // after a failure: no send of this step is left running
	defer r.collectReads()
	for n := range r.instrs {
		r.at.Store(int64(n))
		it := &r.instrs[n]
		var began time.Time
		if tr != nil {
			began = time.Now()
		}
		if err := j.exec(r, it, step, src); err != nil {
			if errors.Is(err, dist.ErrAborted) {
				return err // another rank's failure, already recorded
			}
			if _, hang := err.(*dist.HangError); hang {
				return err
			}
			return fmt.Errorf("rank %d, instruction %d (%s): %w", r.Index, n, describeInstr(it), err)
		}
		if tr != nil {
			// An asynchronous device has only queued the work: the trace times it done.
			if a, ok := j.dev.(device.Async); ok {
				if err := a.Sync(); err != nil {
					return err
				}
			}
			tr.record(r.Index, step, it, began, time.Since(began))
		}
	}
	if err := r.flushSends(); err != nil {
		return fmt.Errorf("rank %d: send: %w", r.Index, err)
	}
	if err := r.collectReads(); err != nil {
		return fmt.Errorf("rank %d: reading the losses: %w", r.Index, err)
	}
	if j.net != nil {
		if err := j.net.Sync(); err != nil {
			return fmt.Errorf("rank %d: end of step: %w", r.Index, err)
		}
	}
	return nil
}

func describeInstr(it *instr) string {
	switch it.Kind {
	case pb.Instr_LAUNCH:
		return "launch " + it.name
	case pb.Instr_INPUT:
		return fmt.Sprintf("input %s of micro-batch %d", it.Label, it.Microbatch)
	case pb.Instr_SEND, pb.Instr_RECV:
		return fmt.Sprintf("%s peer rank %d (pipeline rank %d) tag %d", it.Kind, it.peer, it.Peer, it.Tag)
	}
	if it.coll != nil {
		return it.coll.String()
	}
	return it.Kind.String()
}

func (j *Job) exec(r *Rank, it *instr, step int, src data.Source) error {
	dev := j.dev
	if it.link != nil || it.netColl != nil {
		return j.execNet(it)
	}
	switch it.Kind {
	case pb.Instr_LAUNCH:
		return it.impl(it.in, it.out)
	case pb.Instr_INPUT:
		return j.writeStaged(it, func(t device.Tensor) error { return src.Fill(r.inputs[it.Label], step, it.mb, t) })
	case pb.Instr_SEND:
		if a, ok := dev.(device.Async); ok && j.proc != nil && !it.in[0].OnHost() {
			return j.sendAsync(r, it, a)
		}
		in, err := j.readHost(it.in[0])
		if err != nil {
			return err
		}
		return j.comm.Send(r.Index, it.peer, it.Tag, in.Data)
	case pb.Instr_RECV:
		return j.writeStaged(it, func(t device.Tensor) error { return j.comm.Recv(r.Index, it.peer, it.Tag, t.Data) })
	case pb.Instr_ZERO:
		return dev.Zero(it.out[0])
	case pb.Instr_ACCUM:
		return dev.Accumulate(it.out[0], it.in[0])
	case pb.Instr_COPY:
		return dev.Copy(it.out[0], it.in[0])
	case pb.Instr_ALL_REDUCE, pb.Instr_ALL_GATHER, pb.Instr_REDUCE_SCATTER, pb.Instr_BROADCAST, pb.Instr_ALL_TO_ALL:
		in, err := j.readHost(it.in[0])
		if err != nil {
			return err
		}
		if len(it.out) == 0 { // in place
			return j.writeHost(it.in[0], func(device.Tensor) error { return j.comm.Collective(r.Index, it.coll, in, in) }, in)
		}
		return j.writeHost(it.out[0], func(o device.Tensor) error { return j.comm.Collective(r.Index, it.coll, in, o) })
	case pb.Instr_AXIS_INDEX:
		return j.writeHost(it.out[0], func(t device.Tensor) error { t.I64()[0] = it.index; return nil })
	case pb.Instr_PACK, pb.Instr_UNPACK:
		// The flat buffer holds the tensors' blocks member by member (block 0 of each, then
		// block 1 of each, …); with one block, the tensors end to end.
		flat, parts := it.out[0], it.in
		if it.Kind == pb.Instr_UNPACK {
			flat, parts = it.in[0], it.out
		}
		// Where n does not divide a tensor's rows, its last blocks run past it (ZeRO's
		// padding): PACK zeroes that part of the flat buffer, UNPACK skips it.
		n := max(1, int(it.Blocks))
		var off int64
		for d := range n {
			for _, x := range parts {
				rows, block, row := packRows(x.Type, n)
				es := int64(x.Type.DType.Size())
				bt := ir.Type{DType: x.Type.DType, Shape: ir.Shape{block * row}}
				in := ir.Type{DType: x.Type.DType, Shape: ir.Shape{max(0, min(block, rows-d*block)) * row}}
				var err error
				if in.Shape[0] > 0 {
					part := x.At(int64(d*block*row)*es, in)
					if it.Kind == pb.Instr_PACK {
						err = dev.Copy(flat.At(off, in), part)
					} else {
						err = dev.Copy(part, flat.At(off, in))
					}
				}
				if pad := bt.Bytes() - in.Bytes(); err == nil && pad > 0 && it.Kind == pb.Instr_PACK {
					err = dev.Zero(flat.At(off+in.Bytes(), ir.Type{DType: x.Type.DType, Shape: ir.Shape{int(pad / es)}}))
				}
				if err != nil {
					return err
				}
				off += bt.Bytes()
			}
		}
	case pb.Instr_LOSS, pb.Instr_METRIC:
		if it.Kind == pb.Instr_LOSS && (r.Coords.TP != 0 || r.Coords.CP != 0) {
			return nil
		}
		if it.Sum && r.Coords.TP != 0 {
			return nil // the tensor-parallel replicas count the same tokens: tp 0 reports them
		}
		if a, ok := dev.(device.Async); ok && !it.in[0].OnHost() {
			// The value is read when the step ends: a synchronous read here would drain the
			// device's queue and leave it idle while the host queues the backward.
			if err := it.hostStage(a, it.in[0].Bytes()); err != nil {
				return err
			}
			wait, err := a.ReadAsync(it.stage, it.in[0])
			if err != nil {
				return err
			}
			r.reads = append(r.reads, pendingRead{it, wait})
			return nil
		}
		in, err := j.readHost(it.in[0])
		if err != nil {
			return err
		}
		return r.record(it, in)
	}
	return nil
}

// hostStage gives the instruction its host buffer of n bytes (page-locked on a GPU) on its
// first run; later runs reuse it.
func (it *instr) hostStage(a device.Async, n int64) error {
	if it.stage != nil {
		return nil
	}
	buf, err := a.HostBuffer(n)
	it.stage = buf
	return err
}

// pendingRead is a LOSS or METRIC whose value is on its way to the instruction's host buffer.
type pendingRead struct {
	it   *instr
	wait func() error
}

// record keeps a LOSS's or METRIC's value t (on the host).
func (r *Rank) record(it *instr, t device.Tensor) error {
	if it.Kind == pb.Instr_LOSS {
		r.losses = append(r.losses, scalar(t))
		return nil
	}
	if it.Sum {
		if r.sums == nil {
			r.sums = map[string]float64{}
		}
		r.sums[it.Label] += scalar(t)
		return nil
	}
	if r.metrics == nil {
		r.metrics = map[string]float64{}
	}
	r.metrics[it.Label] = scalar(t)
	return nil
}

// collectReads records the step's pending LOSS and METRIC values, in program order, once
// they have arrived (all of them, even after a failure: their buffers are reused).
func (r *Rank) collectReads() error {
	var first error
	for _, p := range r.reads {
		if err := p.wait(); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if first == nil {
			r.record(p.it, device.Tensor{Type: p.it.in[0].Type, Data: p.it.stage})
		}
	}
	r.reads = r.reads[:0]
	return first
}

// sendAsync queues a SEND on an asynchronous device (a GPU) in a multi-process run: the device
// copies the message into the instruction's host buffer behind the work queued before it,
// and a goroutine sends it once it is there, while this rank goes on queueing work; sends
// leave in program order, and all have left when the rank's step ends (flushSends). The
// buffer is the instruction's own, so a later send cannot overwrite it before it leaves.
func (j *Job) sendAsync(r *Rank, it *instr, dev device.Async) error {
	if err := it.hostStage(dev, it.in[0].Bytes()); err != nil {
		return err
	}
	wait, err := dev.ReadAsync(it.stage, it.in[0])
	if err != nil {
		return err
	}
	prev, done := r.sending, make(chan error, 1)
	r.sending = done
	from, to, tag, data := r.Index, it.peer, it.Tag, it.stage
	go func() {
		if prev != nil {
			if err := <-prev; err != nil {
				done <- err
				return
			}
		}
		if err := wait(); err != nil {
			done <- err
			return
		}
		done <- j.comm.Send(from, to, tag, data)
	}()
	return nil
}

// writeStaged fills an INPUT's or RECV's result on the host and writes it to the device. On an
// asynchronous device the bytes go through the instruction's own page-locked buffer and the
// copy is queued ahead of the kernels that read it, without waiting for the device's queued
// work (a synchronous write would stall the rank until the device drained at every receive);
// the buffer is written again only once its last copy is done.
func (j *Job) writeStaged(it *instr, fill func(device.Tensor) error) error {
	t := it.out[0]
	a, ok := j.dev.(device.Async)
	if !ok || t.OnHost() {
		return j.writeHost(t, fill)
	}
	if err := it.hostStage(a, t.Bytes()); err != nil {
		return err
	}
	if it.staged != nil {
		if err := it.staged(); err != nil {
			return err
		}
		it.staged = nil
	}
	if err := fill(device.Tensor{Type: t.Type, Data: it.stage}); err != nil {
		return err
	}
	done, err := a.WriteAsync(t, it.stage)
	if err != nil {
		return err
	}
	it.staged = done
	return nil
}

// flushSends waits until the rank's queued sends have left, returning the first failure.
func (r *Rank) flushSends() error {
	if r.sending == nil {
		return nil
	}
	err := <-r.sending
	r.sending = nil
	return err
}

// readHost returns t with its bytes on the host: t itself on a host device, else a copy read
// from the device.
func (j *Job) readHost(t device.Tensor) (device.Tensor, error) {
	if t.OnHost() {
		return t, nil
	}
	h := device.Tensor{Type: t.Type, Data: device.HostBytes(t.Type.Bytes())}
	return h, j.dev.Read(h.Data, t)
}

// writeHost lets fill write every byte of t on the host: t itself on a host device, else a
// host buffer (stage, when given, or a new one) that is then written to the device.
func (j *Job) writeHost(t device.Tensor, fill func(device.Tensor) error, stage ...device.Tensor) error {
	if t.OnHost() {
		return fill(t)
	}
	h := device.Tensor{Type: t.Type}
	if len(stage) > 0 {
		h = stage[0]
	} else {
		h.Data = device.HostBytes(t.Type.Bytes())
	}
	if err := fill(h); err != nil {
		return err
	}
	return j.dev.Write(t, h.Data)
}

func scalar(t device.Tensor) float64 {
	if !t.Type.DType.IsFloat() {
		return math.NaN()
	}
	return t.Float(0)
}

// Outputs returns the OUTPUT buffers of micro-batch mb of the global batch by name
// (forward-only plans): those of data-parallel replica mb/M, from its tensor-parallel rank 0.
// On a host device they are the buffers themselves; on others, copies read from the device.
func (j *Job) Outputs(mb int) (map[string]device.Tensor, error) {
	out := map[string]device.Tensor{}
	m := j.Plan.Microbatches
	for _, r := range j.Ranks {
		if r.Coords.TP != 0 || r.Coords.CP != 0 || r.Coords.DP != mb/m {
			continue
		}
		for i, b := range r.Prog.Buffers {
			if b.Role == pb.Role_OUTPUT && int(b.Microbatch) == mb%m {
				t, err := j.readHost(r.Bufs[i])
				if err != nil {
					return nil, err
				}
				out[b.Name] = t
			}
		}
	}
	return out, nil
}

// Buffers returns, by name, every buffer of the given role on any rank (the first rank's
// copy when several hold it: tied and replicated parameters are equal on every holder). A
// sharded parameter or state is the first rank's block; Tensors merges the blocks. On a host
// device they are the buffers themselves (writing them changes the run); on others, copies.
func (j *Job) Buffers(role pb.Role) (map[string]device.Tensor, error) {
	j.expose(role)
	out := map[string]device.Tensor{}
	for _, r := range j.Ranks {
		for i, b := range r.Prog.Buffers {
			if b.Role == role {
				if _, ok := out[b.Name]; !ok {
					t, err := j.readHost(r.Bufs[i])
					if err != nil {
						return nil, err
					}
					out[b.Name] = t
				}
			}
		}
	}
	return out, nil
}

// expose notes that buffers of role were handed out as views the caller may write (on a host
// device), so that constant operands' prepared forms cannot outlive a write (Job.exposed).
func (j *Job) expose(role pb.Role) {
	if role == pb.Role_PARAM || role == pb.Role_CONST {
		j.exposed = true
		j.forgetConstants()
	}
}

// Close releases the ranks' device memory (on the CPU the garbage collector does; on a GPU a
// process that loads several plans needs it). The job cannot run afterwards.
func (j *Job) Close() error {
	var first error
	for _, r := range j.Ranks {
		for _, g := range r.groups {
			if err := g.Close(); err != nil && first == nil {
				first = err
			}
		}
		r.groups = nil
		if r.netMem.Addr != 0 {
			if err := j.dev.Release(r.netMem); err != nil && first == nil {
				first = err
			}
			r.netMem = device.Tensor{}
		}
		if r.mem.Data == nil && r.mem.Addr == 0 {
			continue
		}
		if err := j.dev.Release(r.mem); err != nil && first == nil {
			first = err
		}
		r.mem = device.Tensor{}
		r.Bufs = nil
	}
	return first
}

// StepsDone is the number of steps run or resumed from: the next Step runs step StepsDone()+1.
func (j *Job) StepsDone() int {
	if len(j.Ranks) == 0 {
		return 0
	}
	return j.Ranks[0].step
}

// ResetStep sets the rank's step counter (the next Step runs step n+1); tests use it to replay
// a step with the same data.
func (r *Rank) ResetStep(n int) { r.step = n }
