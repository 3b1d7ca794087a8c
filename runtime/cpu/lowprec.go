package cpu

import (
	"sync"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Low precision (bf16 and f16, the compute dtypes of mixed-precision training) by rounding.
//
// Elementwise ops compute in float64 and round each step to its dtype (elementwise.go), and
// the data-movement kernels (reshape, transpose, gather, concat, slice…) copy elements of any
// size. Every other kernel is written for f32 and f64; for a launch whose operands or results
// include bf16 or f16 the device runs that f32 kernel on widened copies (exact: every bf16
// and f16 value is an f32 value) and rounds its float results to their dtypes, to nearest
// even. That is what a GPU's 16-bit kernels compute up to their accumulation order — tensor
// cores and fused norm kernels read 16-bit values, compute in f32 and round the output once —
// so a plan in bf16 gives results a reference can reproduce exactly: the f32 computation,
// rounded.
//
// The widened copies come from a free list per device, keyed by size: a step allocates only
// the first time a size is needed, and memory is bounded by the launches running at once. (A
// copy per instruction, allocated at load time, would hold a widened copy of every tensor of
// the unrolled step at the same time.)

// isLow reports whether d is a 16-bit float dtype.
func isLow(d ir.DType) bool { return d == ir.BF16 || d == ir.F16 }

// hasLow reports whether any of the types is bf16 or f16.
func hasLow(types ...[]ir.Type) bool {
	for _, ts := range types {
		for _, t := range ts {
			if isLow(t.DType) {
				return true
			}
		}
	}
	return false
}

// widenTypes maps bf16 and f16 types to f32.
func widenTypes(ts []ir.Type) []ir.Type {
	out := make([]ir.Type, len(ts))
	for i, t := range ts {
		out[i] = t
		if isLow(t.DType) {
			out[i].DType = ir.F32
		}
	}
	return out
}

// prepareWidened prepares the f32 kernel b for a launch site s with bf16/f16 operands or
// results and wraps it in widening and rounding. direct is why b refused s itself; it is
// the error reported when the f32 kernel refuses too.
func (d *Device) prepareWidened(s *device.Spec, b builder, direct error) (device.Impl, error) {
	ws := *s
	ws.In, ws.Out = widenTypes(s.In), widenTypes(s.Out)
	inner, err := b(&ws)
	if err != nil {
		return nil, direct
	}
	var mu sync.Mutex // the launch's tensor headers are reused: one launch at a time
	in, out := make([]device.Tensor, len(s.In)), make([]device.Tensor, len(s.Out))
	return func(src, dst []device.Tensor) error {
		mu.Lock()
		defer mu.Unlock()
		var taken [][]byte
		defer func() {
			for _, buf := range taken {
				d.scratch.put(buf)
			}
		}()
		wide := func(t device.Tensor) device.Tensor {
			buf := d.scratch.get(t.Type.NumElements() * 4)
			taken = append(taken, buf)
			return device.Tensor{Type: ir.Type{DType: ir.F32, Shape: t.Type.Shape}, Data: buf}
		}
		for i, t := range src {
			in[i] = t
			if isLow(t.Type.DType) {
				in[i] = wide(t)
				widen(in[i].F32(), t)
			}
		}
		for i, t := range dst {
			out[i] = t
			if isLow(t.Type.DType) {
				out[i] = wide(t)
			}
		}
		if err := inner(in, out); err != nil {
			return err
		}
		for i, t := range dst {
			if isLow(t.Type.DType) {
				narrow(t, out[i].F32())
			}
		}
		return nil
	}, nil
}

// widen writes the values of a bf16 or f16 tensor into dst (exactly; vector conversions
// where the CPU has them).
func widen(dst []float32, t device.Tensor) {
	if src := t.U16()[:len(dst)]; t.Type.DType == ir.F16 {
		k.F16ToF32Slice(src, dst)
	} else {
		k.BF16ToF32Slice(src, dst)
	}
}

// narrow rounds src to the bf16 or f16 tensor t, to nearest even.
func narrow(t device.Tensor, src []float32) {
	if dst := t.U16(); t.Type.DType == ir.F16 {
		k.F32ToF16Slice(src[:len(dst)], dst)
	} else {
		k.F32ToBF16Slice(src[:len(dst)], dst)
	}
}

// scratchList is a free list of byte buffers by size, safe for concurrent use. Buffers are
// 64-byte aligned as the runtime aligns its own (alignedBytes), so any element type views them.
type scratchList struct {
	mu   sync.Mutex
	free map[int][][]byte
}

func (l *scratchList) get(n int) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if bufs := l.free[n]; len(bufs) > 0 {
		b := bufs[len(bufs)-1]
		l.free[n] = bufs[:len(bufs)-1]
		return b
	}
	return alignedBytes(n)
}

func (l *scratchList) put(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.free == nil {
		l.free = map[int][][]byte{}
	}
	l.free[len(b)] = append(l.free[len(b)], b)
}
