package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

// attentionCases are cudatest's attention cases (TestKernelsOnHost leaves them to
// TestAttentionKernelsOnHost).
func attentionCases() []cudatest.Case {
	var cases []cudatest.Case
	for _, c := range cudatest.Cases() {
		if strings.Contains(c.Name, "attention") {
			cases = append(cases, c)
		}
	}
	return cases
}

// TestAttentionKernelsOnHost: the attention cases against the CPU device (the tile kernels,
// on FMAs and on tensor cores, in their host build); and a tile kernel is launched with the block it is written for
// (the host build runs its own count of threads whatever the launch says, so only the
// launch shows it): the forward over 2 heads of 130 query rows is one launch of 4 blocks of 128.
func TestAttentionKernelsOnHost(t *testing.T) {
	e := newEmulator(t)
	dev, err := NewDevice(e, e, e.compile, false)
	if err != nil {
		t.Fatal(err)
	}
	checkKernels(t, attentionCases(), dev)

	e = newEmulator(t)
	if dev, err = NewDevice(e, e, e.compile, false); err != nil {
		t.Fatal(err)
	}
	q, lse := ir.Type{DType: ir.F32, Shape: ir.Shape{1, 2, 130, 8}}, ir.Type{DType: ir.F32, Shape: ir.Shape{1, 2, 130, 1}}
	impl, err := dev.Prepare(&device.Spec{Op: ir.MustLookup("attention"), In: []ir.Type{q, q, q}, Out: []ir.Type{q, lse}})
	if err != nil {
		t.Fatal(err)
	}
	var args []device.Tensor
	for _, ty := range []ir.Type{q, q, q, q, lse} {
		args = append(args, upload(t, dev, device.Tensor{Type: ty, Data: make([]byte, ty.Bytes())}))
	}
	if err := impl(args[:3], args[3:]); err != nil {
		t.Fatal(err)
	}
	var launches []string
	for _, l := range e.Log {
		if strings.HasPrefix(l, "launch ") {
			launches = append(launches, l)
		}
	}
	if len(launches) != 1 || !strings.Contains(launches[0], " grid 4 block 128 ") {
		t.Errorf("the forward's launches: %q; want one of 4 blocks of 128 threads (2 heads × 2 query tiles)", launches)
	}
}

// TestAttentionF32Accuracy: on the f32 attention cases of a tile or more, the tile kernels'
// results are as close to the exact ones (the CPU device in f64 on the same inputs) as the
// CPU device's f32 results are: the largest error at most twice the CPU device's (or 1e-7).
// The two sum in different orders, so neither is the other's reference to the last bit; this
// says that the tiles and the online softmax lose nothing the CPU device's tiles keep.
func TestAttentionF32Accuracy(t *testing.T) {
	e := newEmulator(t)
	dev, err := NewDevice(e, e, e.compile, false)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range attentionCases() {
		if c.Spec.In[0].DType != ir.F32 || c.Spec.In[0].Shape[c.Spec.In[0].Rank()-2] < 64 {
			continue
		}
		var in []device.Tensor
		for _, ty := range c.Spec.In {
			in = append(in, cudatest.RandomTensor(rng, ty, false, 0))
		}
		if c.Fix != nil {
			c.Fix(in)
		}
		run := func(d device.Device, spec *device.Spec, in []device.Tensor) []device.Tensor {
			impl, err := d.Prepare(spec)
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			var din, dout []device.Tensor
			for _, x := range in {
				if _, ok := d.(*Device); ok {
					x = upload(t, dev, x)
				}
				din = append(din, x)
			}
			for _, o := range spec.Out {
				x := device.Tensor{Type: o, Data: make([]byte, o.Bytes())}
				if _, ok := d.(*Device); ok {
					x = upload(t, dev, x)
				}
				dout = append(dout, x)
			}
			if err := impl(din, dout); err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			if _, ok := d.(*Device); ok {
				for i, x := range dout {
					host := device.Tensor{Type: x.Type, Data: make([]byte, x.Type.Bytes())}
					if err := dev.Read(host.Data, x); err != nil {
						t.Fatal(err)
					}
					dout[i] = host
				}
			}
			return dout
		}
		// The f64 spec and inputs: every f32 widened.
		wide := func(ty ir.Type) ir.Type {
			if ty.DType == ir.F32 {
				ty.DType = ir.F64
			}
			return ty
		}
		spec64 := &device.Spec{Op: c.Spec.Op, Attrs: c.Spec.Attrs}
		var in64 []device.Tensor
		for i, ty := range c.Spec.In {
			spec64.In = append(spec64.In, wide(ty))
			x := in[i]
			if ty.DType == ir.F32 {
				w := device.Tensor{Type: wide(ty), Data: make([]byte, wide(ty).Bytes())}
				for k, v := range x.F32() {
					w.F64()[k] = float64(v)
				}
				x = w
			}
			in64 = append(in64, x)
		}
		for _, ty := range c.Spec.Out {
			spec64.Out = append(spec64.Out, wide(ty))
		}
		exact := run(cpu.New(), spec64, in64)
		ref := run(cpu.New(), c.Spec, in)
		got := run(dev, c.Spec, in)
		for r := range got {
			worst := func(x device.Tensor) float64 {
				m := 0.0
				for k, v := range x.F32() {
					w := exact[r].F64()[k]
					if math.IsInf(w, -1) && math.IsInf(float64(v), -1) {
						continue
					}
					m = max(m, math.Abs(float64(v)-w))
				}
				return m
			}
			cpuErr, cudaErr := worst(ref[r]), worst(got[r])
			t.Logf("%s (%s) result %d: largest error %.3g, the CPU device's %.3g", c.Name, c.Spec.Op.Name, r, cudaErr, cpuErr)
			if cudaErr > max(2*cpuErr, 1e-7) {
				t.Errorf("%s (%s) result %d: largest error %.3g against f64, the CPU device's f32 %.3g", c.Name, c.Spec.Op.Name, r, cudaErr, cpuErr)
			}
		}
	}
}
