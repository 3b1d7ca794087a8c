package runtime

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/dist"
)

// A multi-process run on a device that communicates itself (device.Networked: NCCL between
// GPUs) moves its messages and collectives device to device, on the device's own streams,
// instead of through host memory and TCP. Join sets it up:
//
//   - Groups. Each direction of a pipeline pair is a group of two (sender at position 0), so
//     that a send never waits behind a receive on one communicator, and each collective
//     group (its members in the program's order) is one. A group's first member makes its
//     id; one gather through the rendezvous hands every id to every process, with each
//     rank's sends (tag and size, in program order) to each peer. Every process joins its
//     groups in the order of their names, the same everywhere, since a join waits for every
//     member.
//
//   - Receives in the sender's order. A pair's messages arrive in the order they were sent,
//     and the programs do not always receive in that order (zbv's V-shaped stages do not).
//     A receive whose message is not the next one sent first queues the receptions of the
//     messages sent before it into staging memory of their own, in the sender's order; their
//     RECVs later copy from there.
//
//   - Sends that stay valid. A message is read by the device when its transfer runs, which
//     may be after the rank has gone on: a send whose buffer a later instruction of the step
//     writes first copies the message into staging memory of its own. Otherwise that later
//     write would wait for the transfer, hence for the receiver, which may itself wait for
//     this rank: a deadlock the host transports, whose sends never wait, cannot have.
//
// Staging is one allocation per rank, made at Join. The rank waits for the device's streams
// at the end of each step, as it waits for its queued host sends.

// netMsg is one message a rank sends a peer, as the receiver's process learns it.
type netMsg struct {
	Tag   int64 `json:"t"`
	Bytes int64 `json:"b"`
}

// netPart is what each process contributes to the setup's gather.
type netPart struct {
	IDs   map[string][]byte `json:"ids"`
	Sends map[int][]netMsg  `json:"sends"`
}

// netGroup is one group a rank is a member of.
type netGroup struct {
	name    string
	members []int
	pos     int
}

// p2pName names the group of messages from rank a to rank b.
func p2pName(a, b int) string { return fmt.Sprintf("p2p %d>%d", a, b) }

func collName(group []int) string {
	s := make([]string, len(group))
	for i, m := range group {
		s[i] = strconv.Itoa(m)
	}
	return "coll " + strings.Join(s, ",")
}

var collKinds = map[pb.Instr_Kind]device.CollKind{pb.Instr_ALL_REDUCE: device.AllReduce, pb.Instr_ALL_GATHER: device.AllGather,
	pb.Instr_REDUCE_SCATTER: device.ReduceScatter, pb.Instr_BROADCAST: device.Broadcast, pb.Instr_ALL_TO_ALL: device.AllToAll}

// joinNet sets up the device's communication for the job's one rank (see above).
func (j *Job) joinNet(p *dist.Process, dn device.Net) error {
	r := j.Ranks[0]
	groups := map[string]netGroup{}
	sends := map[int][]netMsg{}
	for _, it := range r.instrs {
		switch {
		case it.Kind == pb.Instr_SEND:
			groups[p2pName(r.Index, it.peer)] = netGroup{p2pName(r.Index, it.peer), []int{r.Index, it.peer}, 0}
			sends[it.peer] = append(sends[it.peer], netMsg{it.Tag, it.in[0].Bytes()})
		case it.Kind == pb.Instr_RECV:
			groups[p2pName(it.peer, r.Index)] = netGroup{p2pName(it.peer, r.Index), []int{it.peer, r.Index}, 1}
		case it.coll != nil:
			n := collName(it.coll.Group)
			groups[n] = netGroup{n, it.coll.Group, it.coll.Position(r.Index)}
		}
	}
	mine := netPart{IDs: map[string][]byte{}, Sends: sends}
	for n, g := range groups {
		if g.pos == 0 {
			id, err := dn.GroupID()
			if err != nil {
				return fmt.Errorf("rank %d: %s: %v", r.Index, n, err)
			}
			mine.IDs[n] = id
		}
	}
	raw, err := p.Gather("net", mine, false)
	if err != nil {
		return err
	}
	parts := make([]netPart, len(raw))
	for i, m := range raw {
		if err := json.Unmarshal(m, &parts[i]); err != nil {
			return fmt.Errorf("rank %d's communication setup: %v", i, err)
		}
	}
	names := make([]string, 0, len(groups))
	for n := range groups {
		names = append(names, n)
	}
	slices.Sort(names)
	joined := map[string]device.Group{}
	defer func() {
		if r.groups == nil { // failed: close what was joined
			for _, g := range joined {
				g.Close()
			}
		}
	}()
	for _, n := range names {
		g := groups[n]
		id := parts[g.members[0]].IDs[n]
		if id == nil {
			return fmt.Errorf("rank %d: rank %d did not make group %s", r.Index, g.members[0], n)
		}
		dg, err := dn.Join(id, len(g.members), g.pos)
		if err != nil {
			return fmt.Errorf("rank %d: joining %s: %v", r.Index, n, err)
		}
		joined[n] = dg
	}
	sent, early, staged, err := j.planNet(r, joined, parts)
	if err != nil {
		return err
	}
	p.Transport = fmt.Sprintf("rank %d: messages and collectives go device to device (%d groups; %d sends and %d early receives staged in %d bytes)", r.Index, len(names), sent, early, staged)
	r.groups = slices.Collect(func(yield func(device.Group) bool) {
		for _, n := range names {
			if !yield(joined[n]) {
				return
			}
		}
	})
	j.net = dn
	return nil
}

// planNet gives the rank's SEND, RECV and collective instructions their groups, staging and
// prepared collectives, and says how many sends and early receives it staged, in how many
// bytes.
func (j *Job) planNet(r *Rank, joined map[string]device.Group, parts []netPart) (sent, early int, bytes int64, err error) {
	var stages []*device.Tensor // placed in one allocation at the end
	var sizes []int64
	stage := func(t *device.Tensor, like device.Tensor) {
		*t = device.Tensor{Type: like.Type}
		stages = append(stages, t)
		sizes = append(sizes, like.Bytes())
	}
	type inbox struct {
		seq    []netMsg
		next   int
		staged map[int64]*device.Tensor
	}
	inboxes := map[int]*inbox{}
	for k := range r.instrs {
		it := &r.instrs[k]
		switch {
		case it.Kind == pb.Instr_SEND:
			it.link = joined[p2pName(r.Index, it.peer)]
			if writtenAfter(r.instrs[k+1:], it.in[0]) {
				stage(&it.netStage, it.in[0])
				sent++
			}
		case it.Kind == pb.Instr_RECV:
			it.link = joined[p2pName(it.peer, r.Index)]
			in := inboxes[it.peer]
			if in == nil {
				in = &inbox{seq: parts[it.peer].Sends[r.Index], staged: map[int64]*device.Tensor{}}
				inboxes[it.peer] = in
			}
			if t, ok := in.staged[it.Tag]; ok {
				it.netFrom = t
				delete(in.staged, it.Tag)
				continue
			}
			at := slices.IndexFunc(in.seq[in.next:], func(m netMsg) bool { return m.Tag == it.Tag })
			if at < 0 {
				return 0, 0, 0, fmt.Errorf("rank %d receives tag %d from rank %d, which does not send it (or sends it earlier)", r.Index, it.Tag, it.peer)
			}
			for _, m := range in.seq[in.next : in.next+at] {
				t := new(device.Tensor)
				stage(t, device.Tensor{Type: ir1D(m.Bytes)})
				in.staged[m.Tag] = t
				it.netPosts = append(it.netPosts, t)
				early++
			}
			in.next += at + 1
			if m := in.seq[in.next-1]; m.Bytes != it.out[0].Bytes() {
				return 0, 0, 0, fmt.Errorf("rank %d's message to rank %d (tag %d) has %d bytes, rank %d receives %d", it.peer, r.Index, it.Tag, m.Bytes, r.Index, it.out[0].Bytes())
			}
		case it.coll != nil:
			run, err := joined[collName(it.coll.Group)].Collective(netColl(it.Instr, it.in[0].Type))
			if err != nil {
				return 0, 0, 0, fmt.Errorf("rank %d: %s: %v", r.Index, it.coll, err)
			}
			it.netColl = run
		}
	}
	for peer, in := range inboxes {
		if in.next < len(in.seq) {
			return 0, 0, 0, fmt.Errorf("rank %d sends rank %d %d messages it never receives (tags from %d)", peer, r.Index, len(in.seq)-in.next, in.seq[in.next].Tag)
		}
		for tag := range in.staged {
			return 0, 0, 0, fmt.Errorf("rank %d receives tag %d from rank %d twice", r.Index, tag, peer)
		}
	}
	if len(stages) == 0 {
		return 0, 0, 0, nil
	}
	var total int64
	offs := make([]int64, len(sizes))
	for i, n := range sizes {
		offs[i] = total
		total += (n + 255) &^ 255
	}
	if err := checkMemory(j.dev, total); err != nil {
		return 0, 0, 0, fmt.Errorf("rank %d: staging of messages: %v", r.Index, err)
	}
	mem, err := j.dev.Alloc(total)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("rank %d: staging of messages (%d bytes): %v", r.Index, total, err)
	}
	r.netMem = mem
	for i, t := range stages {
		*t = mem.At(offs[i], t.Type)
	}
	return sent, early, total, nil
}

// ir1D is the type of n bytes.
func ir1D(n int64) ir.Type { return ir.Type{DType: ir.I8, Shape: ir.Shape{int(n)}} }

// writtenAfter reports whether an instruction of rest writes any byte of t.
func writtenAfter(rest []instr, t device.Tensor) bool {
	lo, hi := t.Addr, t.Addr+uint64(t.Bytes())
	for _, it := range rest {
		outs := it.out
		if len(outs) == 0 && it.coll != nil { // in place
			outs = it.in[:1]
		}
		for _, o := range outs {
			if o.Addr < hi && lo < o.Addr+uint64(o.Bytes()) {
				return true
			}
		}
	}
	return false
}

// execNet runs a SEND, RECV or collective on the device's groups.
func (j *Job) execNet(it *instr) error {
	switch it.Kind {
	case pb.Instr_SEND:
		src := it.in[0]
		if it.netStage.Addr != 0 {
			if err := j.dev.Copy(it.netStage, src); err != nil {
				return err
			}
			src = it.netStage
		}
		return it.link.Send(src, 1)
	case pb.Instr_RECV:
		for _, t := range it.netPosts {
			if err := it.link.Recv(*t, 0); err != nil {
				return err
			}
		}
		if it.netFrom != nil {
			return j.dev.Copy(it.out[0], *it.netFrom)
		}
		return it.link.Recv(it.out[0], 0)
	}
	out := it.in[0]
	if len(it.out) > 0 {
		out = it.out[0]
	}
	return it.netColl(it.in[0], out)
}

// watchNet watches a step of a rank whose device carries its transfers: a transfer whose
// peer failed, or that never comes, would keep the rank waiting on its device forever (the
// host transports time out; a GPU stream does not). When the run stops meanwhile (another
// process failed) or the rank is stuck on one instruction for the run's timeout, it aborts
// the rank's groups, which ends their transfers so that the wait returns. stop ends the
// watch and returns why it aborted (nil: it did not): dist.ErrAborted when another rank failed.
func (j *Job) watchNet(r *Rank) (stop func() error) {
	done := make(chan struct{})
	var cause error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		timeout := j.proc.WaitLimit()
		at, since := r.at.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if now := r.at.Load(); now != at {
				at, since = now, time.Now()
			}
			switch {
			case j.comm.Err() != nil:
				cause = dist.ErrAborted
			case time.Since(since) > timeout:
				what := "the start of the step"
				if at >= 0 && int(at) < len(r.instrs) {
					what = fmt.Sprintf("instruction %d (%s)", at, describeInstr(&r.instrs[at]))
				}
				cause = fmt.Errorf("rank %d: %s waited %s for the device's transfers; their peers are stuck or gone", r.Index, what, timeout)
			default:
				continue
			}
			for _, g := range r.groups {
				g.Abort()
			}
			return
		}
	}()
	return func() error {
		close(done)
		wg.Wait()
		return cause
	}
}

// netColl is collective instruction in (operand type t) as a device's group prepares it.
func netColl(in *pb.Instr, t ir.Type) device.Coll {
	return device.Coll{Kind: collKinds[in.GetKind()], In: t, Dim: int(in.Dim), ConcatDim: int(in.ConcatDim), Op: strings.ToLower(in.ReduceOp.String()), Root: int(in.Root)}
}

// CollectiveSpec is one collective instruction as a device that communicates itself
// prepares it: its description and the size of its group.
type CollectiveSpec struct {
	Coll device.Coll
	Size int
}

// CollectiveSpecs lists a program's collectives for tools (ppc dis --cuda); mesh gives the
// sizes of the mesh axes their groups run over.
func CollectiveSpecs(p *pb.Program, mesh codegen.Mesh) ([]CollectiveSpec, error) {
	var out []CollectiveSpec
	for i, in := range p.Instrs {
		if _, ok := collKinds[in.GetKind()]; !ok {
			continue
		}
		if len(in.In) != 1 || in.In[0] < 0 || int(in.In[0]) >= len(p.Buffers) || p.Buffers[in.In[0]] == nil {
			return nil, fmt.Errorf("instruction %d: %s without a valid operand", i, in.GetKind())
		}
		b := p.Buffers[in.In[0]]
		t, err := codegen.TypeFromProto(b.Dtype, b.Shape)
		if err != nil {
			return nil, fmt.Errorf("instruction %d: %v", i, err)
		}
		size := len(in.Group)
		if in.Axis != "" {
			size = mesh.Size(in.Axis)
		}
		if size < 1 {
			return nil, fmt.Errorf("instruction %d: %s over %q, which is not a mesh axis", i, in.GetKind(), in.Axis)
		}
		out = append(out, CollectiveSpec{Coll: netColl(in, t), Size: size})
	}
	return out, nil
}
