package cpu

import (
	"unsafe"

	"ppc.dev/ppc/runtime/device"
)

// Kernels that keep a prepared form of a constant operand (device.Spec.Const) between
// launches: a convolution's weights packed for the micro-kernel (kernels/cpu.ConvFilter),
// which Conv would otherwise pack again at every call — at batch 1 that pass streams every
// weight of the network from memory only to reorder it.
//
// Why it cannot go stale: the runtime marks an operand constant only when no instruction of
// the program writes its buffer (a program constant, or a parameter of a program without an
// optimizer), so between launches only the runtime itself can change those bytes — Init,
// Resume, or a caller writing the views Buffers/Tensors hand out — and each of these calls
// ForgetConstants (a handed-out view: before every later step). A prepared form is used only
// while the device's count of those calls is the one it was made under, and only for the
// same bytes (the buffer's address: launch sites may see another buffer after a reload).
// Forms are made at the first launch after a change, so a form never outlives its bytes.

// constBuilder prepares a kernel that caches a form of its constant operands; ok false: the
// spec is not one it handles (the ordinary builder then prepares it).
type constBuilder func(d *Device, s *device.Spec) (impl device.Impl, ok bool)

var constBuilders = map[string]constBuilder{"conv": prepareConvConst}

// constForm is one launch site's prepared form of a constant operand, with the count and
// address it was made under. A launch site runs one launch at a time (one goroutine a rank).
type constForm[F any] struct {
	form F
	gen  uint64
	addr unsafe.Pointer
}

// get returns the form of t, making it with mk when there is none for the device's current
// count and t's bytes.
func (c *constForm[F]) get(d *Device, t device.Tensor, mk func() F) F {
	gen, addr := d.constGen.Load(), unsafe.Pointer(unsafe.SliceData(t.Data))
	if c.addr != addr || c.gen != gen {
		c.form, c.gen, c.addr = mk(), gen, addr
	}
	return c.form
}

// prepareConvConst is conv with constant weights (operand 1): the filter packed at the first
// launch and reused.
func prepareConvConst(d *Device, s *device.Spec) (device.Impl, bool) {
	if len(s.Const) < 2 || !s.Const[1] {
		return nil, false
	}
	p, bias, dt, err := convSetup(s)
	if err != nil { // the ordinary builder reports it, or widens 16-bit operands
		return nil, false
	}
	return byDType(dt, convImpl[float32](d, p, bias, true, nil), convImpl[float64](d, p, bias, true, nil)), true
}
