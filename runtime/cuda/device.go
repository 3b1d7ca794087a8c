package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"sync"

	"ppc.dev/ppc/ir"
	kernels "ppc.dev/ppc/kernels/cuda"
	"ppc.dev/ppc/runtime/device"
)

// Blas runs the matmuls kernels.PlanMatmul plans: cuBLASLt on a GPU (*CublasLt), a reference
// GEMM on the emulated device of the tests.
type Blas interface {
	// Matmul runs one call on device pointers a (cuBLASLt's A: the IR's second operand), b
	// (the IR's first), d (the result) and bias, with the workspace at ws, on stream.
	Matmul(g kernels.GemmCall, a, b, d, bias, ws, stream uintptr) error
	// Workspace is the workspace Matmul may use, in bytes.
	Workspace() uint64
}

// Device is ppc's CUDA device (device.Device). Every kernel but the matmuls is generated
// CUDA C (kernels/cuda's PlanSite); Prepare only generates, and the first launch after a batch of Prepares
// compiles them all (into modules of ModuleBytes of source or more, compiled concurrently; NVRTC's
// machine code cached on disk by source hash). Matmuls go to cuBLASLt. Identical kernels — the same op on the same shapes, which a
// program has many of — are generated once: a kernel's name is its source's hash.
//
// The device computes on one stream, through a Driver, and communicates on a stream per
// communication group (net.go); the driver calls are serialised (ranks run in goroutines, and
// the emulated driver of the tests runs one kernel at a time). Read and Write synchronise the
// compute stream, so host reads see every earlier launch.
type Device struct {
	drv     Driver
	blas    Blas
	compile func(src string) ([]byte, error)
	tf32    bool
	stream  Stream
	// Geometry picks a launch's grid and block for n indices (kernels loop grid-stride, so
	// any geometry computes the same; tests try grids that do not divide n).
	Geometry func(n int64) (grid, block uint32)
	// RowGeometry picks a row kernel's grid and block for rows of width elements.
	RowGeometry func(rows, width int64) (grid, block uint32)
	// ModuleBytes, when positive, splits a build into modules compiled concurrently, about
	// four per core, each of at least ModuleBytes bytes of kernel source but the last (0: one
	// module). Bytes, not kernels: NVRTC's time follows the source, and a tensor-core attention
	// kernel is ~100 KB of unrolled C where an elementwise one is ~1 KB — modules of 32
	// kernels left the attention cases in five modules that took ~100 s (H100, run 8).
	ModuleBytes int

	mu      sync.Mutex
	pending []kernels.Kernel
	funcs   map[string]Function // by kernel name; 0 until its module is loaded
	ws      DevicePtr
	// pad holds the padded copies of misaligned GEMM operands (kernels.AlignGemm), shared by
	// every matmul site (they run one after another on the stream), padCap bytes: the
	// largest need of a prepared site.
	pad    DevicePtr
	padCap int64
	accum  map[[2]ir.DType]string // Accumulate's kernel by (dst, src) dtype
	events []Event                // free events
	// Collectives, when set before a multi-process run joins, carries its messages and
	// collectives (net.go): the groups' streams, and their transfers in flight.
	Collectives Collectives
	streams     []Stream
	inflight    []inflight
	noter       accessNoter
}

// accessNoter is a driver that checks the device's stream order (the tests' emulator): the
// device tells it what its next launch or GEMM reads and writes, which the call's arguments
// do not say.
type accessNoter interface{ noteAccess(reads, writes []span) }

// note tells an accessNoter driver what the next launch or GEMM touches (d.mu held).
func (d *Device) note(reads []device.Tensor, writes ...device.Tensor) {
	if d.noter != nil {
		d.noter.noteAccess(spansOf(reads), spansOf(writes))
	}
}

// NewDevice makes the CUDA device over a driver, a GEMM library and a compiler from CUDA C
// to a module image (NVRTC's PTX on a GPU). tf32 lets f32 matmuls use TF32 tensor cores.
func NewDevice(drv Driver, blas Blas, compile func(src string) ([]byte, error), tf32 bool) (*Device, error) {
	s, err := drv.StreamCreate()
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, blas: blas, compile: compile, tf32: tf32, stream: s, Geometry: DefaultGeometry, RowGeometry: DefaultRowGeometry,
		funcs: map[string]Function{}, accum: map[[2]ir.DType]string{}}
	d.noter, _ = drv.(accessNoter)
	return d, d.accumKernels()
}

// DefaultGeometry is 256 threads per block and one index per thread, up to 65,535 blocks
// (the grid-stride loop covers the rest).
func DefaultGeometry(n int64) (grid, block uint32) {
	return uint32(min(max((n+255)/256, 1), 65535)), 256
}

// DefaultRowGeometry is a block per row (up to 65,535, then grid-stride) of a thread per
// element, rounded up to a warp's multiple, up to 256 threads (a row kernel's shared arrays
// hold a block of up to 1,024: kernels/cuda's rows.go).
func DefaultRowGeometry(rows, width int64) (grid, block uint32) {
	t := min(max((width+31)/32*32, 32), 256)
	return uint32(min(max(rows, 1), 65535)), uint32(t)
}

// Name is "cuda".
func (*Device) Name() string { return "cuda" }

// Prepare generates the kernels of a launch site, or plans its cuBLASLt calls.
func (d *Device) Prepare(s *device.Spec) (impl device.Impl, err error) {
	defer func() {
		// A generator's bug must surface as an error naming the op, never crash the loader.
		if r := recover(); r != nil {
			impl, err = nil, fmt.Errorf("cannot prepare %s for CUDA: %v", s.Name(), r)
		}
	}()
	if s.Pre != nil {
		// The prologue into scratch memory of the site's, then the op: launches on one
		// stream, so the site's launches never overlap on the scratch.
		return device.PreparePrologue(d.Prepare, func(t ir.Type) (device.Tensor, error) {
			mem, err := d.Alloc(t.Bytes())
			if err != nil {
				return device.Tensor{}, err
			}
			return mem.At(0, t), nil
		}, s)
	}
	if s.Epilogue() {
		// The op, then its chain in place over the result: one more launch, no more memory.
		return device.PrepareEpilogue(d.Prepare, s)
	}
	if s.Op != nil && s.Op.Name == "matmul" {
		return d.prepareMatmul(s)
	}
	if s.Op != nil && s.Op.Name == "constant" {
		return d.prepareConstant(s)
	}
	probe, err := kernels.PlanSite(s, "k")
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, st := range probe.Steps {
		h.Write([]byte(st.Kernel.Body))
	}
	p, err := kernels.PlanSite(s, "k_"+hex.EncodeToString(h.Sum(nil)[:10]))
	if err != nil {
		return nil, err
	}
	if p.Copy {
		return func(in, out []device.Tensor) error {
			if len(in) != 1 || len(out) != 1 {
				return fmt.Errorf("%s: %d operands and %d results, want 1 and 1", s.Name(), len(in), len(out))
			}
			return d.Copy(out[0], in[0])
		}, nil
	}
	// Scratch memory: one allocation per launch site, made now, never per launch.
	var scratch []device.Tensor
	if len(p.Scratch) > 0 {
		var size int64
		offs := make([]int64, len(p.Scratch))
		for i, t := range p.Scratch {
			offs[i] = size
			size += (t.Bytes() + 255) &^ 255
		}
		mem, err := d.Alloc(size)
		if err != nil {
			return nil, fmt.Errorf("%s: scratch memory: %v", s.Name(), err)
		}
		for i, t := range p.Scratch {
			scratch = append(scratch, mem.At(offs[i], t))
		}
	}
	d.mu.Lock()
	for _, st := range p.Steps {
		if _, ok := d.funcs[st.Kernel.Name]; !ok {
			d.funcs[st.Kernel.Name] = 0
			d.pending = append(d.pending, st.Kernel)
		}
	}
	d.mu.Unlock()
	return func(in, out []device.Tensor) error {
		if len(in) != len(s.In) || len(out) != len(s.Out) {
			return fmt.Errorf("%s: %d operands and %d results, %d and %d buffers", s.Name(), len(s.In), len(s.Out), len(in), len(out))
		}
		buf := func(r kernels.Ref) device.Tensor {
			switch r.Kind {
			case kernels.Operand:
				return in[r.Index]
			case kernels.Result:
				return out[r.Index]
			}
			return scratch[r.Index]
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if err := d.orderCompute(in, out); err != nil {
			return err
		}
		if err := d.build(); err != nil {
			return err
		}
		for _, st := range p.Steps {
			k := st.Kernel
			if k.N == 0 {
				continue
			}
			args := make([]uint64, 0, len(st.In)+2)
			var reads []device.Tensor
			for _, r := range st.In {
				args = append(args, buf(r).Addr)
				reads = append(reads, buf(r))
			}
			writes := []device.Tensor{buf(st.Out)}
			for _, r := range st.Also {
				args = append(args, buf(r).Addr)
				writes = append(writes, buf(r))
			}
			args = append(args, buf(st.Out).Addr, uint64(k.N))
			d.note(reads, writes...)
			grid, block := d.Geometry(k.N)
			switch {
			case k.Block > 0:
				// A tile kernel is written for its block; tests vary only the grid.
				grid, _ = d.RowGeometry(k.N, k.Block)
				block = uint32(k.Block)
			case k.Width > 0:
				grid, block = d.RowGeometry(k.N, k.Width)
			}
			if err := d.drv.Launch(d.funcs[k.Name], grid, block, d.stream, args...); err != nil {
				return fmt.Errorf("%s: %v", s.Name(), err)
			}
		}
		return nil
	}, nil
}

// build compiles the kernels prepared since the last build and looks up their functions
// (d.mu held). With ModuleBytes set, they are split into modules compiled concurrently:
// NVRTC compiles one program on one thread, and thousands of
// kernels in one program take a minute (measured: 1,460 kernels of the tiny GPT's plan, 13 s
// to PTX and 17 s more in ptxas on a 2.6 GHz EPYC core).
func (d *Device) build() error {
	if len(d.pending) == 0 {
		return nil
	}
	chunks := [][]kernels.Kernel{d.pending}
	if d.ModuleBytes > 0 {
		total := 0
		for _, k := range d.pending {
			total += len(k.Body)
		}
		budget := max(d.ModuleBytes, total/(4*runtime.GOMAXPROCS(0)))
		chunks = nil
		start, size := 0, 0
		for i, k := range d.pending {
			if size += len(k.Body); size >= budget || i == len(d.pending)-1 {
				chunks = append(chunks, d.pending[start:i+1])
				start, size = i+1, 0
			}
		}
	}
	imgs := make([][]byte, len(chunks))
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < min(len(chunks), runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				imgs[i], errs[i] = d.compile(kernels.Source(chunks[i]...))
			}
		}()
	}
	for i := range chunks {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, ks := range chunks {
		if errs[i] != nil {
			return fmt.Errorf("compiling %d CUDA kernels: %v", len(ks), errs[i])
		}
		m, err := d.drv.LoadModule(imgs[i])
		if err != nil {
			return err
		}
		for _, k := range ks {
			f, err := d.drv.Function(m, k.Name)
			if err != nil {
				return err
			}
			d.funcs[k.Name] = f
		}
	}
	d.pending = nil
	return nil
}

func (d *Device) prepareMatmul(s *device.Spec) (device.Impl, error) {
	calls, err := kernels.PlanMatmul(s, d.tf32)
	if err != nil {
		return nil, err
	}
	// A large 16-bit GEMM with a misaligned matrix runs on padded copies (kernels.AlignGemm):
	// copy kernels before the call and after it, through the device's pad buffer.
	type copyStep struct {
		k        kernels.Kernel
		from, to func(in, out []device.Tensor) uint64
		toIR     bool
	}
	var copies []copyStep
	var ptrA, ptrB, ptrC func(in, out []device.Tensor) uint64
	if len(calls) == 1 {
		call, pa, pb, pc := kernels.AlignGemm(calls[0])
		if pa != nil || pb != nil || pc != nil {
			calls[0] = call
			h := sha256.Sum256(fmt.Appendf(nil, "%v %v %v %v", s.In, s.Out, s.Attrs, call))
			name := "pad_" + hex.EncodeToString(h[:8])
			elem := s.Out[0].DType.Size()
			var off int64
			stage := func(p *kernels.Pitched, suffix string, operand func(in, out []device.Tensor) uint64, toIR bool) func(in, out []device.Tensor) uint64 {
				at := off
				off += (p.Bytes(int64(elem)) + 255) &^ 255
				scratch := func(in, out []device.Tensor) uint64 { return uint64(d.pad) + uint64(at) }
				st := copyStep{k: kernels.PitchKernel(name+suffix, s.Out[0].DType, *p, toIR), from: operand, to: scratch, toIR: toIR}
				if toIR {
					st.from, st.to = scratch, operand
				}
				copies = append(copies, st)
				return scratch
			}
			if pa != nil {
				ptrA = stage(pa, "_a", func(in, _ []device.Tensor) uint64 { return in[1].Addr }, false)
			}
			if pb != nil {
				ptrB = stage(pb, "_b", func(in, _ []device.Tensor) uint64 { return in[0].Addr }, false)
			}
			if pc != nil {
				ptrC = stage(pc, "_c", func(_, out []device.Tensor) uint64 { return out[0].Addr }, true)
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.padCap < off {
				// Allocated now, at load, not per launch; a larger pad replaces the old one
				// once the work queued on it is done.
				if d.pad != 0 {
					if err := d.sync(); err != nil {
						return nil, err
					}
					if err := d.drv.MemFree(d.pad); err != nil {
						return nil, err
					}
				}
				p, err := d.drv.MemAlloc(uint64(off))
				if err != nil {
					return nil, fmt.Errorf("matmul: %d bytes for padded copies: %v", off, err)
				}
				d.pad, d.padCap = p, off
			}
			for _, c := range copies {
				if _, ok := d.funcs[c.k.Name]; !ok {
					d.funcs[c.k.Name] = 0
					d.pending = append(d.pending, c.k)
				}
			}
		}
	}
	pick := func(f func(in, out []device.Tensor) uint64, in, out []device.Tensor, def uint64) uintptr {
		if f != nil {
			return uintptr(f(in, out))
		}
		return uintptr(def)
	}
	launch := func(c copyStep, in, out []device.Tensor) error {
		grid, block := d.Geometry(c.k.N)
		return d.drv.Launch(d.funcs[c.k.Name], grid, block, d.stream, c.from(in, out), c.to(in, out), uint64(c.k.N))
	}
	return func(in, out []device.Tensor) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if err := d.orderCompute(in, out); err != nil {
			return err
		}
		if d.ws == 0 && d.blas.Workspace() > 0 {
			ws, err := d.drv.MemAlloc(d.blas.Workspace())
			if err != nil {
				return fmt.Errorf("cuBLASLt workspace: %v", err)
			}
			d.ws = ws
		}
		var bias uint64
		if len(in) > 2 {
			bias = in[2].Addr
		}
		if len(copies) > 0 {
			if err := d.build(); err != nil {
				return err
			}
		}
		d.note(in, out[0])
		for _, c := range copies {
			if !c.toIR {
				if err := launch(c, in, out); err != nil {
					return fmt.Errorf("matmul: %v", err)
				}
			}
		}
		for _, g := range calls {
			if err := d.drv.Bound(func() error {
				return d.blas.Matmul(g, pick(ptrA, in, out, in[1].Addr), pick(ptrB, in, out, in[0].Addr), pick(ptrC, in, out, out[0].Addr), uintptr(bias), uintptr(d.ws), uintptr(d.stream))
			}); err != nil {
				return fmt.Errorf("matmul: %v", err)
			}
		}
		for _, c := range copies {
			if c.toIR {
				if err := launch(c, in, out); err != nil {
					return fmt.Errorf("matmul: %v", err)
				}
			}
		}
		return nil
	}, nil
}

// prepareConstant copies the constant's bytes from the host at each launch (constants are
// small; a kernel would carry them in its source).
func (d *Device) prepareConstant(s *device.Spec) (device.Impl, error) {
	v, ok := s.Attrs.Get("value").(*ir.Dense)
	if !ok || v.Elided || len(s.Out) != 1 || len(v.Data) == 0 && s.Out[0].Bytes() > 0 {
		return nil, fmt.Errorf("constant: no data for %v", s.Out)
	}
	data := v.Data
	if v.Splat {
		data = make([]byte, s.Out[0].Bytes())
		for i := 0; i < len(data); i += len(v.Data) {
			copy(data[i:], v.Data)
		}
	}
	if int64(len(data)) != s.Out[0].Bytes() {
		return nil, fmt.Errorf("constant of %d bytes for %s", len(data), s.Out[0])
	}
	return func(in, out []device.Tensor) error { return d.Write(out[0], data) }, nil
}

// Available is the GPU's free memory.
func (d *Device) Available() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	free, _, err := d.drv.MemInfo()
	if err != nil {
		return 0
	}
	return int64(free)
}

// Alloc allocates n bytes (cuMemAlloc aligns to 256 or more) and zeroes them.
func (d *Device) Alloc(n int64) (device.Tensor, error) {
	if n < 0 {
		return device.Tensor{}, fmt.Errorf("cannot allocate %d bytes", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.drv.MemAlloc(uint64(max(n, 256)))
	if err != nil {
		return device.Tensor{}, err
	}
	if err := d.drv.Memset(p, uint64(n), d.stream); err != nil {
		return device.Tensor{}, err
	}
	return device.Tensor{Type: ir.Type{DType: ir.I8, Shape: ir.Shape{int(n)}}, Addr: uint64(p)}, nil
}

// Release frees an allocation once every stream's work is done.
func (d *Device) Release(t device.Tensor) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.sync(); err != nil {
		return err
	}
	return d.drv.MemFree(DevicePtr(t.Addr))
}

// Zero clears t on the stream.
func (d *Device) Zero(t device.Tensor) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.orderCompute(nil, []device.Tensor{t}); err != nil {
		return err
	}
	return d.drv.Memset(DevicePtr(t.Addr), uint64(t.Bytes()), d.stream)
}

// Copy copies src to dst on the stream.
func (d *Device) Copy(dst, src device.Tensor) error {
	if dst.Bytes() != src.Bytes() {
		return fmt.Errorf("copy of %d bytes into %d", src.Bytes(), dst.Bytes())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.orderCompute([]device.Tensor{src}, []device.Tensor{dst}); err != nil {
		return err
	}
	return d.drv.CopyDtoD(DevicePtr(dst.Addr), DevicePtr(src.Addr), uint64(dst.Bytes()), d.stream)
}

// accumPairs are the dtypes Accumulate adds (dst, src): the CPU device's.
var accumPairs = [][2]ir.DType{{ir.F32, ir.F32}, {ir.F32, ir.BF16}, {ir.F32, ir.F16}, {ir.F32, ir.F64}, {ir.F64, ir.F64}, {ir.BF16, ir.BF16}, {ir.F16, ir.F16}}

// accumKernels queues the accumulation kernels, one per dtype pair, with the first module
// (d.mu held). The element count is the launch's n: one kernel serves every size.
func (d *Device) accumKernels() error {
	for _, pr := range accumPairs {
		dt, st := ir.Type{DType: pr[0], Shape: ir.Shape{1}}, ir.Type{DType: pr[1], Shape: ir.Shape{1}}
		spec := &device.Spec{Op: ir.MustLookup("add"), In: []ir.Type{dt, st}, Out: []ir.Type{dt}}
		if st.DType != dt.DType {
			spec = &device.Spec{In: []ir.Type{dt, st}, Out: []ir.Type{dt}, Fused: []device.FusedStep{
				{Op: ir.MustLookup("cast"), Args: []int{1}, Attrs: ir.Attrs{{Name: "to", Value: ir.Ident(dt.DType.String())}}, Type: dt},
				{Op: ir.MustLookup("add"), Args: []int{0, 2}, Type: dt}}}
		}
		k, err := kernels.Generate(spec, "accumulate_"+pr[0].String()+"_"+pr[1].String())
		if err != nil {
			return err
		}
		d.accum[pr] = k.Name
		d.funcs[k.Name] = 0
		d.pending = append(d.pending, k)
	}
	return nil
}

// Accumulate adds src into dst (src cast to dst's dtype first when they differ: the CPU
// device's dst += float32(src)), in place: each index reads its two elements, then writes
// its own.
func (d *Device) Accumulate(dst, src device.Tensor) error {
	n := dst.Type.NumElements()
	name, ok := d.accum[[2]ir.DType{dst.Type.DType, src.Type.DType}]
	if !ok || src.Type.NumElements() != n {
		return fmt.Errorf("cannot accumulate %s into %s", src.Type, dst.Type)
	}
	if n == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.orderCompute([]device.Tensor{src}, []device.Tensor{dst}); err != nil {
		return err
	}
	if err := d.build(); err != nil {
		return err
	}
	grid, block := d.Geometry(int64(n))
	d.note([]device.Tensor{dst, src}, dst)
	return d.drv.Launch(d.funcs[name], grid, block, d.stream, dst.Addr, src.Addr, dst.Addr, uint64(n))
}

// Write copies host bytes into t and waits for the copy.
func (d *Device) Write(t device.Tensor, src []byte) error {
	if int64(len(src)) != t.Bytes() {
		return fmt.Errorf("write of %d bytes into %d", len(src), t.Bytes())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.orderCompute(nil, []device.Tensor{t}); err != nil {
		return err
	}
	if err := d.drv.CopyHtoD(DevicePtr(t.Addr), src, d.stream); err != nil {
		return err
	}
	return d.drv.StreamSync(d.stream)
}

// Read waits for the stream's work and copies t's bytes to the host.
func (d *Device) Read(dst []byte, t device.Tensor) error {
	if int64(len(dst)) != t.Bytes() {
		return fmt.Errorf("read of %d bytes from %d", t.Bytes(), len(dst))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.orderCompute([]device.Tensor{t}, nil); err != nil {
		return err
	}
	if err := d.drv.CopyDtoH(dst, DevicePtr(t.Addr), d.stream); err != nil {
		return err
	}
	return d.drv.StreamSync(d.stream)
}

// HostBuffer allocates page-locked host memory (released with the process).
func (d *Device) HostBuffer(n int64) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("host buffer of %d bytes", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drv.HostAlloc(uint64(n))
}

// ReadAsync queues the copy of t into dst (page-locked) on the stream, behind every launch
// queued before it, and an event after it; wait waits for the event.
func (d *Device) ReadAsync(dst []byte, t device.Tensor) (func() error, error) {
	if int64(len(dst)) != t.Bytes() {
		return nil, fmt.Errorf("read of %d bytes from %d", t.Bytes(), len(dst))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.orderCompute([]device.Tensor{t}, nil); err != nil {
		return nil, err
	}
	if err := d.drv.CopyDtoH(dst, DevicePtr(t.Addr), d.stream); err != nil {
		return nil, err
	}
	return d.marker()
}

// marker records an event on the stream and returns a wait for it (d.mu held); the event
// goes back to the free list once waited for.
func (d *Device) marker() (func() error, error) {
	e, err := d.event()
	if err != nil {
		return nil, err
	}
	if err := d.drv.EventRecord(e, d.stream); err != nil {
		return nil, err
	}
	return func() error {
		// Waiting does not hold the device: the rank goes on queueing work meanwhile.
		err := d.drv.EventSync(e)
		d.mu.Lock()
		d.events = append(d.events, e)
		d.mu.Unlock()
		return err
	}, nil
}

// WriteAsync queues the copy of src (page-locked) into t on the stream, ahead of the launches
// queued after it, and an event after it; done waits for the event.
func (d *Device) WriteAsync(t device.Tensor, src []byte) (func() error, error) {
	if int64(len(src)) != t.Bytes() {
		return nil, fmt.Errorf("write of %d bytes into %d", len(src), t.Bytes())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.orderCompute(nil, []device.Tensor{t}); err != nil {
		return nil, err
	}
	if err := d.drv.CopyHtoD(DevicePtr(t.Addr), src, d.stream); err != nil {
		return nil, err
	}
	return d.marker()
}

// Sync waits for every stream's queued work.
func (d *Device) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sync()
}

// sync waits for the compute stream and the groups' streams, and forgets the transfers in
// flight (d.mu held).
func (d *Device) sync() error {
	if err := d.drv.StreamSync(d.stream); err != nil {
		return err
	}
	for _, s := range d.streams {
		if err := d.drv.StreamSync(s); err != nil {
			return err
		}
	}
	for _, f := range d.inflight {
		d.events = append(d.events, f.event)
	}
	d.inflight = d.inflight[:0]
	return nil
}

// event takes an event from the free list, or makes one (d.mu held).
func (d *Device) event() (Event, error) {
	if n := len(d.events); n > 0 {
		e := d.events[n-1]
		d.events = d.events[:n-1]
		return e, nil
	}
	return d.drv.EventCreate()
}

var (
	_ device.Device = (*Device)(nil)
	_ device.Async  = (*Device)(nil)
)

// Open makes the CUDA device on GPU ordinal from what Probe found: the driver, NVRTC with its
// PTX cached in cacheDir, cuBLASLt with a 32 MiB workspace (what cuBLASLt's heuristics want
// for large GEMMs on Hopper), and NCCL for a multi-process run's messages when it is there.
func Open(r *Report, ordinal int, tf32 bool, cacheDir string) (*Device, error) {
	if err := r.Usable(); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(r.GPUs) {
		return nil, fmt.Errorf("GPU %d: the driver reports %d GPU(s)", ordinal, len(r.GPUs))
	}
	drv, err := OpenDriver(&r.Libraries[0], ordinal)
	if err != nil {
		return nil, err
	}
	nv, err := OpenNVRTC(&r.Libraries[1])
	if err != nil {
		return nil, err
	}
	var lt *CublasLt
	if err := drv.Bound(func() (err error) { lt, err = OpenCublasLt(&r.Libraries[2]); return err }); err != nil {
		return nil, err
	}
	lt.WorkspaceBytes = 32 << 20
	gpu := r.GPUs[ordinal]
	target, err := nv.Target(gpu.Major, gpu.Minor)
	if err != nil {
		return nil, err
	}
	cache := &Cache{Dir: cacheDir, Compile: nv.Compile}
	compile := func(src string) ([]byte, error) {
		img, _, err := cache.Image(src, "ppc.cu", target)
		return img, err
	}
	d, err := NewDevice(drv, lt, compile, tf32)
	if err != nil {
		return nil, err
	}
	// Modules of 64 KiB of source or more (some 32 typical kernels): NVRTC's fixed cost per
	// program (0.12 s, mostly the header) stays small beside its 10 ms or so per kernel.
	d.ModuleBytes = 64 << 10
	if nl := &r.Libraries[3]; nl.Found() {
		nc, err := OpenNCCL(nl)
		if err != nil {
			return nil, err
		}
		d.Collectives = nc
	}
	return d, nil
}
