package cpu

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// The CPU device's memory is the host's: an allocation is a Go byte slice, every tensor's
// Data is its bytes, and Read and Write are copies (the runtime skips them when it can use
// Data directly).

// Available is the host's available memory (/proc/meminfo's MemAvailable; 0 elsewhere).
func (*Device) Available() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var kb int64
	for _, line := range strings.Split(string(data), "\n") {
		if n, _ := fmt.Sscanf(line, "MemAvailable: %d kB", &kb); n == 1 {
			return kb * 1024
		}
	}
	return 0
}

// Alloc returns n zeroed bytes aligned to 256.
func (*Device) Alloc(n int64) (device.Tensor, error) {
	if n < 0 || n > int64(^uint(0)>>1)-255 {
		return device.Tensor{}, fmt.Errorf("cannot allocate %d bytes", n)
	}
	raw := make([]byte, n+255)
	off := int64((256 - uintptr(unsafe.Pointer(&raw[0]))%256) % 256)
	return device.Tensor{Type: ir.Type{DType: ir.I8, Shape: ir.Shape{int(n)}}, Data: raw[off : off+n : off+n]}, nil
}

// Release leaves the allocation to the garbage collector.
func (*Device) Release(device.Tensor) error { return nil }

// Zero clears t.
func (*Device) Zero(t device.Tensor) error {
	clear(t.Data)
	return nil
}

// Copy copies src's bytes to dst.
func (*Device) Copy(dst, src device.Tensor) error {
	if len(dst.Data) != len(src.Data) {
		return fmt.Errorf("copy of %d bytes into %d", len(src.Data), len(dst.Data))
	}
	copy(dst.Data, src.Data)
	return nil
}

// Write copies src into t.
func (d *Device) Write(t device.Tensor, src []byte) error {
	return d.Copy(t, device.Tensor{Data: src})
}

// Read copies t into dst.
func (d *Device) Read(dst []byte, t device.Tensor) error {
	return d.Copy(device.Tensor{Data: dst}, t)
}

// Accumulate adds src into dst (f32 or f64; a 16-bit dst of its own dtype), elementwise: one add per element, so that the
// order of a gradient's contributions is the program's.
func (*Device) Accumulate(dst, src device.Tensor) error {
	if dst.Type.NumElements() != src.Type.NumElements() {
		return fmt.Errorf("cannot accumulate %s into %s", src.Type, dst.Type)
	}
	switch {
	case dst.Type.DType == ir.F32 && src.Type.DType == ir.F32:
		d, s := dst.F32(), src.F32()
		k.Parallel(len(d), 1<<14, func(lo, hi int) {
			k.ArithVV(k.OpAdd, d[lo:hi], s[lo:hi], d[lo:hi]) // vectorised, the same IEEE sums
		})
	case dst.Type.DType == ir.F64 && src.Type.DType == ir.F64:
		d, s := dst.F64(), src.F64()
		for i := range d {
			d[i] += s[i]
		}
	case dst.Type.DType == ir.F32 && src.Type.DType.IsFloat():
		d := dst.F32()
		for i := range d {
			d[i] += float32(src.Float(i))
		}
	case dst.Type.DType == ir.BF16 && src.Type.DType == ir.BF16:
		// 16-bit accumulation (--grad-precision bf16): the sum in f32, rounded once, as
		// the add kernel computes it.
		d, s := dst.U16(), src.U16()
		for i := range d {
			d[i] = ir.F32ToBF16(ir.BF16ToF32(d[i]) + ir.BF16ToF32(s[i]))
		}
	case dst.Type.DType == ir.F16 && src.Type.DType == ir.F16:
		d, s := dst.U16(), src.U16()
		for i := range d {
			d[i] = ir.F32ToF16(ir.F16ToF32(d[i]) + ir.F16ToF32(s[i]))
		}
	default:
		return fmt.Errorf("cannot accumulate %s into %s", src.Type, dst.Type)
	}
	return nil
}
