package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ppc.dev/ppc/kernels/cuda/cudatest"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

// TestKernelsPoolExactOnHost: built for the host (no contracted multiply-adds), the pooling
// and resize kernels give the CPU device's results bit for bit, on the random inputs of
// cudatest.PoolCases and on inputs full of ties, signed zeros, infinities and NaNs, where max
// pooling's tie rule and its gradient's choice of position show.
func TestKernelsPoolExactOnHost(t *testing.T) {
	e := newEmulator(t)
	dev, err := NewDevice(e, e, e.compile, false)
	if err != nil {
		t.Fatal(err)
	}
	var exact []cudatest.Case
	for _, c := range cudatest.PoolCases() {
		if !strings.HasPrefix(c.Spec.Op.Name, "lrn") { // pow differs between libraries
			c.ULPs, c.Abs = 0, 0
			exact = append(exact, c)
		}
	}
	checkKernels(t, exact, dev)

	ref := cpu.New()
	rng := rand.New(rand.NewPCG(3, 4))
	special := []float64{-1, 0, math.Copysign(0, -1), 1, 2, 2, math.Inf(-1), math.NaN()}
	for _, c := range exact {
		name := c.Spec.Op.Name
		if !strings.Contains(name, "pool") {
			continue
		}
		in := make([]device.Tensor, len(c.Spec.In))
		for k, typ := range c.Spec.In {
			in[k] = cudatest.RandomTensor(rng, typ, false, 0)
			if k == 0 && name != "avg_pool_grad" {
				for j := 0; j < typ.NumElements(); j++ {
					cudatest.SetFloat(in[k], j, special[rng.IntN(len(special))])
				}
			}
		}
		want := device.Tensor{Type: c.Spec.Out[0], Data: make([]byte, c.Spec.Out[0].Bytes())}
		impl, err := ref.Prepare(c.Spec)
		if err != nil {
			t.Fatalf("%s: CPU device: %v", c.Name, err)
		}
		if err := impl(in, []device.Tensor{want}); err != nil {
			t.Fatalf("%s: CPU device: %v", c.Name, err)
		}
		got := poolRun(t, dev, c.Spec, in)
		bad := 0
		for j := 0; j < want.Type.NumElements(); j++ {
			w, _ := cudatest.Value(want, j)
			v, _ := cudatest.Value(got, j)
			if math.Float64bits(v) == math.Float64bits(w) || math.IsNaN(v) && math.IsNaN(w) {
				continue
			}
			if bad++; bad <= 3 {
				t.Errorf("%s (%s, special inputs): element %d = %v, the CPU device gives %v", c.Name, name, j, v, w)
			}
		}
	}
}

// poolRun runs spec's kernel on dev on the given host inputs and returns its result.
func poolRun(t *testing.T, dev *Device, spec *device.Spec, in []device.Tensor) device.Tensor {
	t.Helper()
	impl, err := dev.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	put := func(x device.Tensor) device.Tensor { return upload(t, dev, x) }
	var din []device.Tensor
	for _, x := range in {
		din = append(din, put(x))
	}
	got := device.Tensor{Type: spec.Out[0], Data: make([]byte, spec.Out[0].Bytes())}
	dout := put(got)
	if err := impl(din, []device.Tensor{dout}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Read(got.Data, dout); err != nil {
		t.Fatal(err)
	}
	return got
}
