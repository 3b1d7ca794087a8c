package data

import (
	"fmt"
	"strconv"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// Source fills a model input for one micro-batch of one step. mb numbers the micro-batches
// of the global batch (0 … M·dp−1): data-parallel replica d reads d·M … d·M+M−1, so every
// layout sees the samples one device with M·dp micro-batches sees.
type Source interface {
	Fill(in codegen.Input, step, mb int, t device.Tensor) error
}

// Synthetic is the default data: every value depends only on (seed, step, global sample
// index), so any micro-batching or data-parallel split sees the same samples, and it is
// learnable, so a working trainer visibly lowers the loss:
//
//   - Integer inputs with a range are token sequences: each sample repeats a random motif of
//     MotifLength tokens; a label input with shift_of holds the same sequence shifted by one
//     (the next tokens).
//   - Integer label inputs without shift_of are class labels, uniform over the range.
//   - Float inputs are standard normal noise plus, when the model has class labels, a fixed
//     random pattern for the sample's class (so the class is predictable from the input).
type Synthetic struct {
	Seed uint64
	Plan *codegen.Plan
}

// MotifLength is the period of synthetic token sequences.
const MotifLength = 4

func (s *Synthetic) key(stream string, step int) [2]uint32 {
	return cpu.KeyFor(s.Seed, "data/"+stream+"/"+strconv.Itoa(step))
}

// classInput returns the model's class-label input, if any.
func (s *Synthetic) classInput() (codegen.Input, bool) {
	for _, in := range s.Plan.Inputs {
		if in.Label && in.ShiftOf == "" && in.Range != nil {
			return in, true
		}
	}
	return codegen.Input{}, false
}

func (s *Synthetic) Fill(in codegen.Input, step, mb int, t device.Tensor) error {
	samples := in.Samples()
	per := t.Type.NumElements() / max(samples, 1)
	first := mb * samples
	vals := make([]float64, t.Type.NumElements())
	switch {
	case t.Type.DType.IsInt() && in.Range != nil && (in.ShiftOf != "" || !in.Label):
		// Token sequences: the stream is named after the token input so labels match it.
		stream, shift := in.Name, 0
		if in.ShiftOf != "" {
			stream, shift = in.ShiftOf, 1
		}
		lo, hi := in.Range[0], in.Range[1]
		for i := 0; i < samples; i++ {
			motif := make([]float64, MotifLength)
			cpu.FillUniform(motif, s.key(stream, step), uint64(first+i)*MotifLength, 0, 1)
			for j := 0; j < per; j++ {
				u := motif[(j+shift)%MotifLength]
				vals[i*per+j] = float64(lo + min(int(u*float64(hi-lo)), hi-lo-1))
			}
		}
	case t.Type.DType.IsInt() && in.Range != nil:
		for i := 0; i < samples; i++ {
			for j := 0; j < per; j++ {
				vals[i*per+j] = float64(s.class(in, step, first+i))
			}
		}
	case t.Type.DType.IsFloat():
		cpu.FillNormal(vals, s.key(in.Name, step), uint64(first*per), 0, 1)
		if lab, ok := s.classInput(); ok {
			for i := 0; i < samples; i++ {
				c := s.class(lab, step, first+i)
				pattern := make([]float64, per)
				cpu.FillNormal(pattern, cpu.KeyFor(s.Seed, "data/class/"+strconv.Itoa(c)), 0, 0, 2)
				for j := range pattern {
					vals[i*per+j] += pattern[j]
				}
			}
		}
	case t.Type.DType == ir.Bool:
		u := make([]float64, len(vals))
		cpu.FillUniform(u, s.key(in.Name, step), uint64(first*per), 0, 1)
		for i, x := range u {
			if x < 0.5 {
				vals[i] = 1
			}
		}
	default:
		// Integers without a declared range: small non-negative values.
		u := make([]float64, len(vals))
		cpu.FillUniform(u, s.key(in.Name, step), uint64(first*per), 0, 1)
		for i, x := range u {
			vals[i] = float64(int(x * 2))
		}
	}
	return storeAny(t, vals)
}

// class is the class label of a global sample.
func (s *Synthetic) class(in codegen.Input, step, sample int) int {
	u := make([]float64, 1)
	cpu.FillUniform(u, s.key(in.Name, step), uint64(sample), 0, 1)
	lo, hi := in.Range[0], in.Range[1]
	return lo + min(int(u[0]*float64(hi-lo)), hi-lo-1)
}

// storeAny writes float64 values into a tensor of any dtype (integers truncate).
func storeAny(t device.Tensor, v []float64) error {
	switch t.Type.DType {
	case ir.I64:
		d := t.I64()
		for i, x := range v {
			d[i] = int64(x)
		}
	case ir.I32:
		d := t.I32()
		for i, x := range v {
			d[i] = int32(x)
		}
	case ir.I8:
		for i, x := range v {
			t.Data[i] = byte(int8(x))
		}
	case ir.U8, ir.Bool:
		for i, x := range v {
			t.Data[i] = byte(x)
		}
	default:
		return StoreF64(t, v)
	}
	return nil
}

// Fixed feeds given tensors: each holds the whole global batch of one input (its leading dim
// is global micro-batches × samples per micro-batch); micro-batch mb reads its slice.
type Fixed map[string]device.Tensor

func (f Fixed) Fill(in codegen.Input, step, mb int, t device.Tensor) error {
	src, ok := f[in.Name]
	if !ok {
		return fmt.Errorf("no data for input %q", in.Name)
	}
	n := int64(len(t.Data))
	if src.Type.DType != t.Type.DType || int64(len(src.Data)) < (int64(mb)+1)*n {
		return fmt.Errorf("input %q: have %s, need %s for micro-batch %d", in.Name, src.Type, t.Type, mb)
	}
	copy(t.Data, src.Data[int64(mb)*n:])
	return nil
}

// StoreF64 writes float64 values into a float tensor of any float dtype (the executor writes
// initial values and the step number with it).
func StoreF64(t device.Tensor, v []float64) error {
	switch t.Type.DType {
	case ir.F64:
		copy(t.F64(), v)
	case ir.F32:
		d := t.F32()
		for i, x := range v {
			d[i] = float32(x)
		}
	case ir.F16:
		d := t.U16()
		for i, x := range v {
			d[i] = ir.F32ToF16(float32(x))
		}
	case ir.BF16:
		d := t.U16()
		for i, x := range v {
			d[i] = ir.F32ToBF16(float32(x))
		}
	default:
		return fmt.Errorf("cannot initialise a %s tensor with random values", t.Type.DType)
	}
	return nil
}
