// Package device defines what the runtime asks of a device: typed tensor views over buffer
// bytes, the description of one kernel launch site (Spec), and Prepare, which turns a Spec
// into a runnable kernel after checking it. The CPU device (runtime/cpu) implements it; a
// CUDA device opened at run time would implement the same interface.
package device

import (
	"unsafe"

	"ppc.dev/ppc/ir"
)

// Tensor is a typed view of buffer bytes. Data is exactly Type.Bytes() long and aligned for
// its element type (the runtime aligns every buffer to 64 bytes).
type Tensor struct {
	Type ir.Type
	Data []byte
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
// elementwise ops (Op nil, Fused set, whose last step is the output), with the exact operand
// and result types. The runtime has checked Attrs and types against the op table before a
// device sees a Spec.
type Spec struct {
	Op      *ir.OpDef
	Attrs   ir.Attrs
	Fused   []FusedStep
	In, Out []ir.Type
}

// Name is the op name, or "fused".
func (s *Spec) Name() string {
	if s.Op == nil {
		return "fused"
	}
	return s.Op.Name
}

// Impl runs a prepared kernel. It may be called concurrently only on distinct tensors.
type Impl func(in, out []Tensor) error

// Device prepares kernels for one kind of hardware.
type Device interface {
	Name() string
	// Prepare checks that the device can run s and returns the kernel. An error names what
	// is unsupported (op, dtype, attribute value).
	Prepare(s *Spec) (Impl, error)
}
