package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/device"
)

// netPair is two emulated devices joined by the fake NCCL, each with a stream-order checker.
func netPair(t *testing.T) ([2]*Device, [2]*emulator) {
	t.Helper()
	devs, emus := netDevices(t, 2)
	return [2]*Device(devs), [2]*emulator(emus)
}

// netDevices is n emulated devices on one fake NCCL, with stream-order checkers.
func netDevices(t *testing.T, n int) ([]*Device, []*emulator) {
	t.Helper()
	w := newFakeWorld()
	devs, emus := make([]*Device, n), make([]*emulator, n)
	for i := range devs {
		emus[i] = newEmulator(t)
		emus[i].hb = newHBCheck()
		d, err := NewDevice(emus[i], emus[i], emus[i].compile, false)
		if err != nil {
			t.Fatal(err)
		}
		d.Collectives = w.on(emus[i])
		devs[i] = d
	}
	return devs, emus
}

// joinAll joins both devices to one group (positions 0 and 1).
func joinAll(t *testing.T, devs [2]*Device) [2]device.Group {
	t.Helper()
	return [2]device.Group(joinGroup(t, devs[:]))
}

// joinGroup joins the devices to one group, in order.
func joinGroup(t *testing.T, devs []*Device) []device.Group {
	t.Helper()
	id, err := devs[0].Net().GroupID()
	if err != nil {
		t.Fatal(err)
	}
	gs, errs := make([]device.Group, len(devs)), make([]error, len(devs))
	var wg sync.WaitGroup
	for i, d := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[i], errs[i] = d.Net().Join(id, len(devs), i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return gs
}

func f32s(t *testing.T, d *Device, x device.Tensor) []float32 {
	t.Helper()
	b := make([]byte, x.Bytes())
	if err := d.Read(b, x); err != nil {
		t.Fatal(err)
	}
	return slices.Clone(device.Tensor{Type: x.Type, Data: b}.F32())
}

func checkOrder(t *testing.T, emus []*emulator) {
	t.Helper()
	for i, e := range emus {
		for _, r := range e.hb.races {
			t.Errorf("device %d: %s", i, r)
		}
	}
}

// TestNetCollectives: the device's collectives over two emulated GPUs give the host
// transports' results — all-gather and reduce-scatter along dim 1 (NCCL's member-major
// blocks permuted by a kernel on the group's stream), along dim 0 (NCCL's own layout), an
// in-place mean all-reduce, a broadcast, and a send and receive — and every stream is
// ordered: the checker finds no two unordered operations on one buffer.
func TestNetCollectives(t *testing.T) {
	devs, emus := netPair(t)
	gs := joinAll(t, devs)
	shard := ir.Type{DType: ir.F32, Shape: ir.Shape{3, 2, 5}}
	full := ir.Type{DType: ir.F32, Shape: ir.Shape{3, 4, 5}}
	val := func(rank, i int) float32 { return float32(rank*1000 + i) }
	type bufs struct{ shard, full, gathered, scattered, flat device.Tensor }
	var b [2]bufs
	for r, d := range devs {
		mem, err := d.Alloc(8192)
		if err != nil {
			t.Fatal(err)
		}
		b[r] = bufs{mem.At(0, shard), mem.At(256, full), mem.At(1024, full), mem.At(2048, shard), mem.At(3072, ir.Type{DType: ir.F32, Shape: ir.Shape{4, 3}})}
		for _, x := range []device.Tensor{b[r].shard, b[r].full, b[r].flat} {
			h := device.Tensor{Type: x.Type, Data: make([]byte, x.Bytes())}
			for i := range h.F32() {
				h.F32()[i] = val(r, i)
			}
			if err := d.Write(x, h.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(c device.Coll, in, out func(r int) device.Tensor) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r := range devs {
			f, err := gs[r].Collective(c)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = f(in(r), out(r)) }()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("%v: %v", c.Kind, err)
			}
		}
	}
	run(device.Coll{Kind: device.AllGather, In: shard, Dim: 1}, func(r int) device.Tensor { return b[r].shard }, func(r int) device.Tensor { return b[r].gathered })
	run(device.Coll{Kind: device.ReduceScatter, In: full, Dim: 1, Op: "sum"}, func(r int) device.Tensor { return b[r].full }, func(r int) device.Tensor { return b[r].scattered })
	for r, d := range devs {
		got := f32s(t, d, b[r].gathered)
		sum := f32s(t, d, b[r].scattered)
		for p := range 3 {
			for k := range 4 {
				for q := range 5 {
					// Member k/2's row k%2 of pre-row p.
					if want := val(k/2, p*10+(k%2)*5+q); got[p*20+k*5+q] != want {
						t.Fatalf("rank %d all-gather [%d,%d,%d] = %g, want %g", r, p, k, q, got[p*20+k*5+q], want)
					}
				}
			}
			for k := range 2 {
				for q := range 5 {
					i := p*20 + (r*2+k)*5 + q
					if want := val(0, i) + val(1, i); sum[p*10+k*5+q] != want {
						t.Fatalf("rank %d reduce-scatter [%d,%d,%d] = %g, want %g", r, p, k, q, sum[p*10+k*5+q], want)
					}
				}
			}
		}
	}
	flat := ir.Type{DType: ir.F32, Shape: ir.Shape{4, 3}}
	run(device.Coll{Kind: device.ReduceScatter, In: flat, Dim: 0, Op: "max"}, func(r int) device.Tensor { return b[r].flat }, func(r int) device.Tensor { return b[r].scattered.At(0, ir.Type{DType: ir.F32, Shape: ir.Shape{2, 3}}) })
	run(device.Coll{Kind: device.AllReduce, In: flat, Op: "mean"}, func(r int) device.Tensor { return b[r].flat }, func(r int) device.Tensor { return b[r].flat })
	run(device.Coll{Kind: device.Broadcast, In: shard, Root: 1}, func(r int) device.Tensor { return b[r].shard }, func(r int) device.Tensor { return b[r].shard })
	for r, d := range devs {
		mx := f32s(t, d, b[r].scattered.At(0, ir.Type{DType: ir.F32, Shape: ir.Shape{2, 3}}))
		for i, v := range mx {
			if want := val(1, r*6+i); v != want {
				t.Fatalf("rank %d reduce-scatter max [%d] = %g, want %g", r, i, v, want)
			}
		}
		for i, v := range f32s(t, d, b[r].flat) {
			if want := (val(0, i) + val(1, i)) / 2; v != want {
				t.Fatalf("rank %d all-reduce mean [%d] = %g, want %g", r, i, v, want)
			}
		}
		for i, v := range f32s(t, d, b[r].shard) {
			if want := val(1, i); v != want {
				t.Fatalf("rank %d broadcast [%d] = %g, want %g", r, i, v, want)
			}
		}
	}
	// A message, read back by the host on the receiver.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gs[0].Send(b[0].full, 1) }()
	if err := gs[1].Recv(b[1].gathered, 0); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, v := range f32s(t, devs[1], b[1].gathered) {
		if want := val(0, i); v != want {
			t.Fatalf("received [%d] = %g, want %g", i, v, want)
		}
	}
	checkOrder(t, emus[:])
	var permutes int
	for _, l := range emus[0].Log {
		if strings.HasPrefix(l, "function ") && strings.Contains(l, " permute_") {
			permutes++
		}
	}
	if permutes != 2 {
		t.Errorf("%d permute kernels, want 2 (the dim-1 gather and scatter)", permutes)
	}
}

// TestNetOrdersStreams: what the compute stream does after a transfer waits for it only when
// it touches the transfer's memory, and the checker catches a device that forgets to: a
// receive's buffer read by the host after the device lost track of the receive is a race.
func TestNetOrdersStreams(t *testing.T) {
	devs, emus := netPair(t)
	gs := joinAll(t, devs)
	ty := ir.Type{DType: ir.F32, Shape: ir.Shape{64}}
	var mems [2]device.Tensor
	for r, d := range devs {
		m, err := d.Alloc(1024)
		if err != nil {
			t.Fatal(err)
		}
		mems[r] = m
	}
	a, other := mems[1].At(0, ty), mems[1].At(512, ty)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gs[0].Send(mems[0].At(0, ty), 1) }()
	if err := gs[1].Recv(a, 0); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	waits := func() int {
		n := 0
		for _, l := range emus[1].Log {
			if strings.HasPrefix(l, "stream 1 waits") {
				n++
			}
		}
		return n
	}
	before := waits()
	// Work on other memory does not wait for the receive…
	if err := devs[1].Zero(other); err != nil {
		t.Fatal(err)
	}
	if waits() != before {
		t.Errorf("zeroing other memory waited for the receive")
	}
	// …work on its buffer does, once.
	if err := devs[1].Zero(a); err != nil {
		t.Fatal(err)
	}
	if err := devs[1].Zero(a); err != nil {
		t.Fatal(err)
	}
	if waits() != before+1 {
		t.Errorf("the compute stream waited %d times for the receive, want once", waits()-before)
	}
	checkOrder(t, emus[:])

	// The bug the checker exists for.
	wg.Add(1)
	go func() { defer wg.Done(); gs[0].Send(mems[0].At(0, ty), 1) }()
	if err := gs[1].Recv(a, 0); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	devs[1].inflight = nil
	f32s(t, devs[1], a)
	if len(emus[1].hb.races) == 0 || !strings.Contains(emus[1].hb.races[0], "is not ordered after") {
		t.Errorf("a read of a receive's buffer the device did not wait for: races %q", emus[1].hb.races)
	}
}

// TestNetReductionsInGroupOrder: the device's float reductions give the host transports'
// bits (runtime/dist/doc.go's contract), not NCCL's ring or tree sums: over three members, with a
// size that does not divide into three chunks, f32 and bf16 (widened to f32, rounded once),
// sum, mean, max and min, all-reduce in place and reduce-scatter along dims 0 and 1; and
// the stream order holds.
func TestNetReductionsInGroupOrder(t *testing.T) {
	devs, emus := netDevices(t, 3)
	gs := joinGroup(t, devs)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []ir.DType{ir.F32, ir.BF16} {
		for _, op := range []string{"sum", "mean", "max", "min"} {
			for _, c := range []struct {
				kind device.CollKind
				in   ir.Shape
				dim  int
			}{{device.AllReduce, ir.Shape{2, 5}, 0}, {device.ReduceScatter, ir.Shape{6, 2}, 0}, {device.ReduceScatter, ir.Shape{2, 3, 2}, 1}} {
				in := ir.Type{DType: dt, Shape: c.in}
				out := in
				if c.kind == device.ReduceScatter {
					out.Shape = slices.Clone(c.in)
					out.Shape[c.dim] /= 3
				}
				n := in.NumElements()
				// Member m's operand, as float64 values of dt.
				vals := make([][]float64, 3)
				bufs := make([][2]device.Tensor, 3)
				for m, d := range devs {
					h := device.Tensor{Type: in, Data: make([]byte, in.Bytes())}
					for i := range n {
						v := float64(float32(rng.NormFloat64() * 1e3))
						if i == 3 {
							v = 0 // ties and signed zeros
							if m > 0 {
								v = math.Copysign(0, -1)
							}
						}
						cudatest.SetFloat(h, i, v)
						vals[m] = append(vals[m], h.Float(i))
					}
					mem, err := d.Alloc(512)
					if err != nil {
						t.Fatal(err)
					}
					bufs[m] = [2]device.Tensor{mem.At(0, in), mem.At(256, out)}
					if err := d.Write(bufs[m][0], h.Data); err != nil {
						t.Fatal(err)
					}
				}
				var wg sync.WaitGroup
				errs := make([]error, 3)
				for m := range devs {
					f, err := gs[m].Collective(device.Coll{Kind: c.kind, In: in, Dim: c.dim, Op: op})
					if err != nil {
						t.Fatal(err)
					}
					o := bufs[m][1]
					if c.kind == device.AllReduce {
						o = bufs[m][0] // in place
					}
					wg.Add(1)
					go func() { defer wg.Done(); errs[m] = f(bufs[m][0], o) }()
				}
				wg.Wait()
				// The contract: fold in member order in f32, round once to dt.
				want := make([]float64, n)
				for i := range n {
					acc := float32(vals[0][i])
					for m := 1; m < 3; m++ {
						v := float32(vals[m][i])
						switch op {
						case "sum", "mean":
							acc += v
						case "max":
							if v > acc || v != v {
								acc = v
							}
						case "min":
							if v < acc || v != v {
								acc = v
							}
						}
					}
					if op == "mean" {
						acc /= 3
					}
					r := device.Tensor{Type: ir.Type{DType: dt, Shape: ir.Shape{1}}, Data: make([]byte, dt.Size())}
					cudatest.SetFloat(r, 0, float64(acc))
					want[i] = r.Float(0)
				}
				for m, d := range devs {
					if errs[m] != nil {
						t.Fatal(errs[m])
					}
					res := bufs[m][1]
					if c.kind == device.AllReduce {
						res = bufs[m][0]
					}
					h := device.Tensor{Type: res.Type, Data: make([]byte, res.Bytes())}
					if err := d.Read(h.Data, res); err != nil {
						t.Fatal(err)
					}
					for i := range res.Type.NumElements() {
						// Element i of the result is element src of the operand.
						src := i
						if c.kind == device.ReduceScatter {
							pre := 1
							for _, x := range c.in[:c.dim] {
								pre *= x
							}
							block := n / pre / 3
							src = i/block*(block*3) + m*block + i%block
						}
						got := h.Float(i)
						if math.Float64bits(got) != math.Float64bits(want[src]) {
							t.Fatalf("%s %v %s %v: member %d element %d = %v, want %v (the host transports' bits)", dt, c.kind, op, c.in, m, i, got, want[src])
						}
					}
				}
			}
		}
	}
	checkOrder(t, emus)
}

// TestNetAllToAll: the device's all-to-all (NCCL's grouped sends and receives, each member's
// own block included) gives the host transports' result on emulated GPUs — expert
// parallelism's dispatch (split dim 0, concat dim 1: the received blocks permuted into the
// result) and return (split dim 1, concat dim 0: the operand permuted into member-major
// blocks), over 2 and 3 members — with every stream ordered.
func TestNetAllToAll(t *testing.T) {
	for _, c := range []struct {
		n              int
		shape          ir.Shape
		split, concat  int
		permIn, permOu bool
	}{
		{2, ir.Shape{4, 3, 5}, 0, 1, false, true},
		{2, ir.Shape{2, 6, 5}, 1, 0, true, false},
		{3, ir.Shape{6, 2, 4}, 0, 1, false, true},
		{3, ir.Shape{2, 6, 4}, 1, 0, true, false},
	} {
		t.Run(fmt.Sprintf("%d-%v-%d-%d", c.n, c.shape, c.split, c.concat), func(t *testing.T) {
			devs, emus := netDevices(t, c.n)
			gs := joinGroup(t, devs)
			in := ir.Type{DType: ir.F32, Shape: c.shape}
			block := slices.Clone(c.shape)
			block[c.split] /= c.n
			outShape := slices.Clone(block)
			outShape[c.concat] *= c.n
			out := ir.Type{DType: ir.F32, Shape: outShape}
			val := func(member, i int) float32 { return float32(member*1000 + i) }
			ins, outs := make([]device.Tensor, c.n), make([]device.Tensor, c.n)
			for r, d := range devs {
				mem, err := d.Alloc(4096)
				if err != nil {
					t.Fatal(err)
				}
				ins[r], outs[r] = mem.At(0, in), mem.At(1024, out)
				h := device.Tensor{Type: in, Data: make([]byte, in.Bytes())}
				for i := range h.F32() {
					h.F32()[i] = val(r, i)
				}
				if err := d.Write(ins[r], h.Data); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, c.n)
			for r := range devs {
				f, err := gs[r].Collective(device.Coll{Kind: device.AllToAll, In: in, Dim: c.split, ConcatDim: c.concat})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() { defer wg.Done(); errs[r] = f(ins[r], outs[r]) }()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// Output element o of member pos: member g = o[concat] / block[concat]'s element at
			// o with that dim taken mod the block, shifted by pos blocks along split.
			flat := func(idx []int, shape ir.Shape) int {
				f := 0
				for i, x := range idx {
					f = f*shape[i] + x
				}
				return f
			}
			for pos, d := range devs {
				got := f32s(t, d, outs[pos])
				idx := make([]int, len(outShape))
				for k := range got {
					rem := k
					for i := len(outShape) - 1; i >= 0; i-- {
						idx[i] = rem % outShape[i]
						rem /= outShape[i]
					}
					g := idx[c.concat] / block[c.concat]
					src := slices.Clone(idx)
					src[c.concat] %= block[c.concat]
					src[c.split] += pos * block[c.split]
					if want := val(g, flat(src, c.shape)); got[k] != want {
						t.Fatalf("member %d: out%v = %g, want %g (member %d's element %v)", pos, idx, got[k], want, g, src)
					}
				}
			}
			checkOrder(t, emus)
			var permutes int
			for _, l := range emus[0].Log {
				if strings.HasPrefix(l, "function ") && strings.Contains(l, " permute_") {
					permutes++
				}
			}
			if want := map[bool]int{false: 0, true: 1}[c.permIn] + map[bool]int{false: 0, true: 1}[c.permOu]; permutes != want {
				t.Errorf("%d permute kernels, want %d", permutes, want)
			}
		})
	}
}
