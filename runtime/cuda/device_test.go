package cuda

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// TestDeviceMemory: the CUDA device's own operations over the emulated driver — allocation
// (zeroed), writes and reads, zero, copy, accumulation (f32 += f32 and f32 += bf16, as the CPU
// device: dst += float32(src)), constants (dense and splat), the free memory — and the errors
// of mismatched sizes and dtypes.
func TestDeviceMemory(t *testing.T) {
	e := newEmulator(t)
	e.Total = 1 << 30
	dev, err := NewDevice(e, e, e.compile, false)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := dev.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if free := dev.Available(); free != 1<<30-4096 {
		t.Errorf("free memory %d after a 4096-byte allocation of 1 GiB", free)
	}
	f32s := func(v ...float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	read := func(x device.Tensor) []float32 {
		b := make([]byte, x.Bytes())
		if err := dev.Read(b, x); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	}
	v4 := ir.Type{DType: ir.F32, Shape: ir.Shape{4}}
	a, b := mem.At(0, v4), mem.At(256, v4)
	if got := read(a); got[0] != 0 || got[3] != 0 {
		t.Errorf("a fresh allocation holds %v", got)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dev.Write(a, f32s(1, 2, 3, 4)))
	must(dev.Copy(b, a))
	must(dev.Accumulate(b, a))
	if got := read(b); got[0] != 2 || got[3] != 8 {
		t.Errorf("copy then accumulate: %v, want [2 4 6 8]", got)
	}
	h := mem.At(512, ir.Type{DType: ir.BF16, Shape: ir.Shape{4}})
	bf := make([]byte, 8)
	for i, x := range []float32{0.5, -1, 3.140625, 1e-3} {
		binary.LittleEndian.PutUint16(bf[2*i:], ir.F32ToBF16(x))
	}
	must(dev.Write(h, bf))
	must(dev.Accumulate(b, h))
	if got, want := read(b), []float32{2.5, 3, 6 + ir.BF16ToF32(ir.F32ToBF16(3.140625)), 8 + ir.BF16ToF32(ir.F32ToBF16(1e-3))}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Errorf("f32 += bf16: %v, want %v", got, want)
	}
	must(dev.Zero(b))
	if got := read(b); got[1] != 0 {
		t.Errorf("zeroed: %v", got)
	}
	for _, c := range []struct {
		dense *ir.Dense
		want  []float32
	}{
		{&ir.Dense{Type: v4, Data: f32s(7, 8, 9, 10)}, []float32{7, 8, 9, 10}},
		{&ir.Dense{Type: v4, Splat: true, Data: f32s(-2)}, []float32{-2, -2, -2, -2}},
	} {
		impl, err := dev.Prepare(&device.Spec{Op: ir.MustLookup("constant"), Attrs: ir.Attrs{{Name: "value", Value: c.dense}}, Out: []ir.Type{v4}})
		if err != nil {
			t.Fatal(err)
		}
		must(impl(nil, []device.Tensor{a}))
		if got := read(a); got[0] != c.want[0] || got[3] != c.want[3] {
			t.Errorf("constant: %v, want %v", got, c.want)
		}
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{dev.Copy(b, mem.At(0, ir.Type{DType: ir.F32, Shape: ir.Shape{3}})), "copy of 12 bytes into 16"},
		{dev.Accumulate(h, a), "cannot accumulate f32[4] into bf16[4]"},
		{dev.Write(a, make([]byte, 3)), "write of 3 bytes into 16"},
		{dev.Read(make([]byte, 5), a), "read of 16 bytes from 5"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", c.err, c.want)
		}
	}
	must(dev.Release(mem))
	if _, err := dev.Alloc(-1); err == nil {
		t.Errorf("a negative allocation was accepted")
	}
}
