package device

import (
	"fmt"
	"sync"
	"unsafe"

	"ppc.dev/ppc/ir"
)

// Tensor is a typed view of a device's memory. On a device whose memory the host addresses
// (the CPU), Data is its bytes: exactly Type.Bytes() long and aligned for its element type
// (the runtime aligns every buffer to 256 bytes). On other devices Data is nil and Addr is the
// tensor's address in the device's memory.
type Tensor struct {
	Type ir.Type
	Data []byte
	Addr uint64
}

// OnHost reports whether the host addresses the tensor's bytes (Data).
func (t Tensor) OnHost() bool { return t.Data != nil }

// At is the tensor of type ty at byte offset off of t (which must hold it).
func (t Tensor) At(off int64, ty ir.Type) Tensor {
	n := ty.Bytes()
	if t.Data != nil {
		return Tensor{Type: ty, Data: t.Data[off : off+n : off+n]}
	}
	return Tensor{Type: ty, Addr: t.Addr + uint64(off)}
}

// Bytes is the tensor's size in bytes.
func (t Tensor) Bytes() int64 {
	if t.Data != nil {
		return int64(len(t.Data))
	}
	return t.Type.Bytes()
}

func view[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// F32 views the data as float32.
func (t Tensor) F32() []float32 { return view[float32](t.Data) }

// F64 views the data as float64.
func (t Tensor) F64() []float64 { return view[float64](t.Data) }

// I64 views the data as int64.
func (t Tensor) I64() []int64 { return view[int64](t.Data) }

// I32 views the data as int32.
func (t Tensor) I32() []int32 { return view[int32](t.Data) }

// U16 views the data as uint16 (f16 and bf16 bits).
func (t Tensor) U16() []uint16 { return view[uint16](t.Data) }

// Bool views the data as bool (one byte each, 0 or 1).
func (t Tensor) Bool() []bool { return view[bool](t.Data) }

// Float is element i of a float tensor as a float64 (0 for other types).
func (t Tensor) Float(i int) float64 {
	switch t.Type.DType {
	case ir.F64:
		return t.F64()[i]
	case ir.F32:
		return float64(t.F32()[i])
	case ir.F16:
		return float64(ir.F16ToF32(t.U16()[i]))
	case ir.BF16:
		return float64(ir.BF16ToF32(t.U16()[i]))
	}
	return 0
}

// Shape returns the dims as ints.
func (t Tensor) Shape() []int { return t.Type.Shape }

// FusedStep is one op of a fused elementwise kernel. Args index the kernel's inputs first
// (0 … len(In)−1) and then earlier steps' results (len(In)+k).
type FusedStep struct {
	Op    *ir.OpDef
	Args  []int
	Attrs ir.Attrs
	Type  ir.Type
}

// Spec is one kernel launch site: an IR op with its attributes, or a fused chain of
// elementwise ops (Op nil, Fused set, whose last step is the output — or Outputs: the steps
// written to Out, in order, all of the last step's shape), with the exact operand and result
// types. The runtime has checked Attrs and types against the op table before a device sees a
// Spec. A fused chain reads every input element before it writes any result's (its results
// may be written over its inputs: the optimizer's in-place updates).
//
// An op with Fused steps is an op followed by an elementwise epilogue (Epilogue): the op
// reads In[:OpInputs], and the chain's input 0 is the op's result, its inputs 1, 2, … are
// In[OpInputs:]; every step, those inputs and Out have the op result's type. A device may
// apply the chain to parts of the result as they become final (the CPU convolution does), or
// run the two one after the other (PrepareEpilogue).
//
// An op with a Pre spec has a prologue: Pre computes the op's operand 0 from In[:PreInputs],
// and the op's operands 1, 2, … are In[PreInputs:] (up to OpInputs with an epilogue, which
// counts the prologue's inputs too). The intermediate result has no buffer: a device may
// compute it piece by piece as the op reads it (the CPU convolution applies a batch norm
// and ReLU to its input as it packs it), or run the two in turn through scratch memory
// (PreparePrologue).
type Spec struct {
	Op       *ir.OpDef
	Attrs    ir.Attrs
	Fused    []FusedStep
	Outputs  []int
	OpInputs int
	In, Out  []ir.Type
	// Pre, when not nil, is the op's prologue (see Prologue): a kernel — an op, possibly
	// with an epilogue — whose In, Out and Const are unset here (SplitPrologue derives
	// them). PreInputs is how many of In it reads.
	Pre       *Spec
	PreInputs int
	// Const[i] says that operand i's buffer is constant for the run: a program constant, or
	// a parameter that no instruction of the program writes (every parameter of an
	// inference program). A device may keep a prepared form of such an operand (packed
	// weights) from one launch to the next; the runtime tells it when the bytes may have
	// changed outside the program (Constants). Nil: none is.
	Const []bool
}

// Constants is implemented by devices that keep prepared forms of constant operands
// (Spec.Const). The runtime calls ForgetConstants after it wrote, or may have written, such
// buffers itself — parameters initialised or loaded from a checkpoint, or handed to a caller
// who may write them — so that no launch reads a form prepared from the old bytes.
type Constants interface {
	ForgetConstants()
}

// OutputSteps is the fused steps a chain writes, in the order of Out.
func (s *Spec) OutputSteps() []int {
	if len(s.Outputs) > 0 {
		return s.Outputs
	}
	return []int{len(s.Fused) - 1}
}

// Name is the op name, "fused", or for an epilogue the op's and its steps' ("conv+relu",
// "conv+add+relu").
func (s *Spec) Name() string {
	if s.Op == nil {
		return "fused"
	}
	name := s.Op.Name
	if s.Pre != nil {
		name = s.Pre.Name() + ">" + name
	}
	for _, st := range s.Fused {
		name += "+" + st.Op.Name
	}
	return name
}

// Epilogue reports whether the spec is an op followed by an elementwise chain.
func (s *Spec) Epilogue() bool { return s.Op != nil && len(s.Fused) > 0 }

// SplitEpilogue returns an epilogue's two parts: the op alone, writing one result of the
// chain's type, and the chain alone, over that result and the other operands.
func (s *Spec) SplitEpilogue() (op, chain *Spec) {
	t := s.Out[len(s.Out)-1]
	op = &Spec{Op: s.Op, Attrs: s.Attrs, Pre: s.Pre, PreInputs: s.PreInputs, In: s.In[:s.OpInputs], Out: []ir.Type{t}}
	if s.Const != nil {
		op.Const = s.Const[:s.OpInputs]
	}
	chain = &Spec{Fused: s.Fused, Outputs: s.Outputs, In: append([]ir.Type{t}, s.In[s.OpInputs:]...), Out: s.Out}
	return op, chain
}

// PrepareEpilogue prepares an epilogue as its op, writing the last result buffer, and then
// its chain run in place over that buffer (a chain reads each element before writing it).
func PrepareEpilogue(prepare func(*Spec) (Impl, error), s *Spec) (Impl, error) {
	op, chain := s.SplitEpilogue()
	opImpl, err := prepare(op)
	if err != nil {
		return nil, err
	}
	chainImpl, err := prepare(chain)
	if err != nil {
		return nil, err
	}
	n := s.OpInputs
	return func(in, out []Tensor) error {
		if len(in) < n || len(out) == 0 {
			return fmt.Errorf("%s: %d operands and %d results for an epilogue on %d", s.Name(), len(in), len(out), n)
		}
		last := out[len(out)-1]
		if err := opImpl(in[:n], []Tensor{last}); err != nil {
			return err
		}
		return chainImpl(append([]Tensor{last}, in[n:]...), out)
	}, nil
}

// SplitPrologue returns a launch's prologue and the rest: pre, the prologue on In[:PreInputs]
// writing the op's operand 0, and op, the op (with its epilogue) reading that result and
// In[PreInputs:]. The result's type is the prologue epilogue's last step's, or what its op
// infers. An error says the spec is malformed (the loader refuses such programs).
func (s *Spec) SplitPrologue() (pre, op *Spec, err error) {
	n := s.PreInputs
	if s.Pre == nil || s.Pre.Op == nil || s.Pre.Pre != nil || n < 1 || n > len(s.In) || s.Epilogue() && s.OpInputs < n {
		return nil, nil, fmt.Errorf("%s: malformed prologue on %d of %d operands", s.Name(), n, len(s.In))
	}
	p := *s.Pre
	p.In, p.Out, p.Const = s.In[:n], nil, nil
	if s.Const != nil {
		p.Const = s.Const[:n]
	}
	var t ir.Type
	if p.Epilogue() {
		if len(p.OutputSteps()) != 1 {
			return nil, nil, fmt.Errorf("%s: a prologue writing %d results", s.Name(), len(p.OutputSteps()))
		}
		t = p.Fused[len(p.Fused)-1].Type
	} else {
		ts, err := p.Op.Infer(p.In, p.Attrs)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: prologue: %v", s.Name(), err)
		}
		if len(ts) != 1 {
			return nil, nil, fmt.Errorf("%s: a prologue with %d results", s.Name(), len(ts))
		}
		t = ts[0]
	}
	p.Out = []ir.Type{t}
	op = &Spec{Op: s.Op, Attrs: s.Attrs, Fused: s.Fused, Outputs: s.Outputs, In: append([]ir.Type{t}, s.In[n:]...), Out: s.Out}
	if s.Epilogue() {
		op.OpInputs = s.OpInputs - n + 1
	}
	if s.Const != nil {
		op.Const = append([]bool{false}, s.Const[n:]...)
	}
	return &p, op, nil
}

// PreparePrologue prepares a launch with a prologue as the prologue, writing scratch memory
// that alloc makes now (one buffer for the launch site, never one per launch), and then the
// op reading it. Launches of the site are serialised on the scratch.
func PreparePrologue(prepare func(*Spec) (Impl, error), alloc func(ir.Type) (Tensor, error), s *Spec) (Impl, error) {
	pre, op, err := s.SplitPrologue()
	if err != nil {
		return nil, err
	}
	preImpl, err := prepare(pre)
	if err != nil {
		return nil, err
	}
	opImpl, err := prepare(op)
	if err != nil {
		return nil, err
	}
	scratch, err := alloc(pre.Out[0])
	if err != nil {
		return nil, fmt.Errorf("%s: scratch for the prologue's %s: %v", s.Name(), pre.Out[0], err)
	}
	n := s.PreInputs
	var mu sync.Mutex
	return func(in, out []Tensor) error {
		if len(in) < n {
			return fmt.Errorf("%s: %d operands for a prologue on %d", s.Name(), len(in), n)
		}
		mu.Lock()
		defer mu.Unlock()
		if err := preImpl(in[:n], []Tensor{scratch}); err != nil {
			return err
		}
		return opImpl(append([]Tensor{scratch}, in[n:]...), out)
	}, nil
}

// Impl runs a prepared kernel. It may be called concurrently only on distinct tensors.
type Impl func(in, out []Tensor) error

// Device prepares kernels for one kind of hardware and owns its memory.
type Device interface {
	Name() string
	// Prepare checks that the device can run s and returns the kernel. An error names what
	// is unsupported (op, dtype, attribute value).
	Prepare(s *Spec) (Impl, error)
	// Available is how many bytes the device can still allocate (0: unknown).
	Available() int64
	// Alloc returns n zeroed bytes of the device's memory, aligned to 256 bytes, as an
	// untyped tensor to place buffers in with At.
	Alloc(n int64) (Tensor, error)
	// Release frees an allocation of Alloc.
	Release(t Tensor) error
	// Zero sets t's bytes to 0; Copy copies src's bytes to dst (same size); Accumulate adds
	// src into dst elementwise (dst f32 or f64 and src any float type, or both the same 16-bit
	// type: the sum in f32, rounded once), in a fixed order per
	// element so that results are reproducible.
	Zero(t Tensor) error
	Copy(dst, src Tensor) error
	Accumulate(dst, src Tensor) error
	// Write copies host bytes into t, and Read copies t's bytes to the host, each after the
	// device's earlier work and complete on return (len(src) or len(dst) = t.Bytes()).
	Write(t Tensor, src []byte) error
	Read(dst []byte, t Tensor) error
}

// SharedCores is implemented by devices whose kernels tune their parallelism to whether
// several ranks of this process issue work at once (the CPU device: its kernels' helper
// threads spin between parallel regions for one rank, and block for several, leaving the
// cores to the other ranks). The runtime says so as each step starts, before it loads the
// step's inputs; the CPU device then also wakes its helpers, blocked since the last step
// where there was a pause, so that they are running when the step's first kernel is.
type SharedCores interface {
	SetSharedCores(shared bool)
}

// Async is implemented by devices whose copies to the host can queue behind their work (a
// GPU's stream): the runtime then sends a message while the device goes on computing,
// instead of waiting for the device at every send.
type Async interface {
	// HostBuffer returns n bytes of host memory that ReadAsync can copy into (page-locked on
	// a GPU). The runtime keeps one per send instruction.
	HostBuffer(n int64) ([]byte, error)
	// ReadAsync queues a copy of t's bytes into dst (from HostBuffer) behind the device's
	// earlier work and returns at once; wait returns when the bytes are in dst.
	ReadAsync(dst []byte, t Tensor) (wait func() error, err error)
	// WriteAsync queues a copy of src (from HostBuffer) into t, ahead of the work queued
	// after it, and returns at once; done returns when src may be written again.
	WriteAsync(t Tensor, src []byte) (done func() error, err error)
	// Sync waits until the device's queued work is done (a trace times each instruction).
	Sync() error
}

// Networked is implemented by devices that can carry a multi-process run's messages and
// collectives between their own memories (NCCL between GPUs), instead of staging them
// through host memory and the runtime's TCP transport. Net returns nil when the device cannot
// (no NCCL library): the run then uses TCP.
type Networked interface {
	Net() Net
}

// Net makes a device's communication groups. Every group's members join it with the same id,
// which the group's first member makes (GroupID) and the run's rendezvous hands to the
// others. Join blocks until every member has joined, so each process joins its groups in one
// order all processes agree on.
type Net interface {
	GroupID() ([]byte, error)
	Join(id []byte, size, pos int) (Group, error)
	// Sync waits until every queued kernel, copy and transfer of the device is done.
	Sync() error
}

// Group is one communication group of a device, with member positions 0 … size−1. Its
// operations are queued, not waited for: each runs after the device's work queued before it,
// and the device's later work that reads what it writes, or writes what it reads, runs after
// it. A group's operations run in the order they are queued; every member queues the same
// collectives in the same order, and a receiver queues its receives in the order the sender
// queued the sends.
type Group interface {
	// Send queues t's bytes to member peer; Recv queues the reception of member peer's next
	// message into t (of exactly t's size).
	Send(t Tensor, peer int) error
	Recv(t Tensor, peer int) error
	// Collective prepares one collective instruction of the group (scratch memory, kernels)
	// and returns what queues it.
	Collective(c Coll) (func(in, out Tensor) error, error)
	Close() error
	// Abort ends the group's transfers in flight, so that whatever waits for them returns
	// (another member failed, or the transfers outlasted the run's timeout); the group is
	// unusable afterwards. It may be called while the device waits for them.
	Abort() error
}

// CollKind is a collective's kind.
type CollKind int

const (
	AllReduce CollKind = iota
	AllGather
	ReduceScatter
	Broadcast
	AllToAll
)

func (k CollKind) String() string {
	switch k {
	case AllReduce:
		return "all-reduce"
	case AllGather:
		return "all-gather"
	case ReduceScatter:
		return "reduce-scatter"
	case Broadcast:
		return "broadcast"
	case AllToAll:
		return "all-to-all"
	}
	return fmt.Sprintf("collective %d", int(k))
}

// Coll describes a collective instruction: In is the type of its operand. All-gather
// concatenates the members' operands along Dim in member order; reduce-scatter reduces the
// operands and leaves member k the k-th slice along Dim; Op is "sum", "mean", "max" or "min";
// Root is broadcast's source member; all-to-all cuts its operand into member-many blocks along
// Dim, sends block k to member k and concatenates the blocks it receives along ConcatDim in
// member order. An all-reduce or broadcast with in and out the same
// tensor runs in place.
type Coll struct {
	Kind CollKind
	In   ir.Type
	Dim  int
	Op   string
	Root int
	// ConcatDim is all-to-all's concatenation dim.
	ConcatDim int
}

// HostBytes allocates n bytes of host memory aligned to 64, so that a Tensor over them has
// every element type's views (F32, I64, …) and the alignment a buffer on the CPU has.
func HostBytes(n int64) []byte {
	if n == 0 {
		return []byte{}
	}
	raw := make([]byte, n+63)
	off := int((64 - uintptr(unsafe.Pointer(&raw[0]))%64) % 64)
	return raw[off : int64(off)+n : int64(off)+n]
}
