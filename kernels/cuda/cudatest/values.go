package cudatest

import (
	"math"
	"math/rand/v2"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// RandomTensor fills t with values an op of the case accepts: positive where a log, sqrt or
// pow needs it, 0/1 for booleans, small integers without zero divisors' trouble.
func RandomTensor(rng *rand.Rand, t ir.Type, positive bool, labels int) device.Tensor {
	n := t.NumElements()
	data := make([]byte, max(t.Bytes(), 8))
	tt := device.Tensor{Type: t, Data: data[:t.Bytes()]}
	for i := 0; i < n; i++ {
		x := rng.NormFloat64() * 2
		if positive {
			x = math.Abs(x) + 0.05
		}
		switch t.DType {
		case ir.F32:
			tt.F32()[i] = float32(x)
		case ir.F64:
			tt.F64()[i] = x
		case ir.BF16:
			tt.U16()[i] = ir.F32ToBF16(float32(x))
		case ir.F16:
			tt.U16()[i] = ir.F32ToF16(float32(x))
		case ir.I64, ir.I32:
			v := rng.IntN(21) - 10 // in [-10, 10]: valid indices of a dim of 11
			if labels > 0 {
				v = rng.IntN(labels)
			}
			if t.DType == ir.I64 {
				tt.I64()[i] = int64(v)
			} else {
				tt.I32()[i] = int32(v)
			}
		case ir.Bool:
			tt.Data[i] = byte(rng.IntN(2))
		}
	}
	return tt
}

// Value reads element i as float64, and the size of one ulp there.
func Value(t device.Tensor, i int) (v, ulp float64) {
	switch t.Type.DType {
	case ir.F32:
		x := t.F32()[i]
		return float64(x), float64(math.Nextafter32(float32(math.Abs(float64(x))), float32(math.Inf(1)))) - math.Abs(float64(x))
	case ir.F64:
		x := t.F64()[i]
		return x, math.Nextafter(math.Abs(x), math.Inf(1)) - math.Abs(x)
	case ir.BF16:
		x := float64(ir.BF16ToF32(t.U16()[i]))
		return x, math.Max(math.Abs(x)/128, 1e-38)
	case ir.F16:
		x := float64(ir.F16ToF32(t.U16()[i]))
		return x, math.Max(math.Abs(x)/1024, 6e-8)
	case ir.I64:
		return float64(t.I64()[i]), 0
	case ir.I32:
		return float64(t.I32()[i]), 0
	}
	return float64(t.Data[i]), 0
}

// SetFloat stores v, rounded to t's float dtype, as element i.
func SetFloat(t device.Tensor, i int, v float64) {
	switch t.Type.DType {
	case ir.F64:
		t.F64()[i] = v
	case ir.F32:
		t.F32()[i] = float32(v)
	case ir.F16:
		t.U16()[i] = ir.F32ToF16(float32(v))
	case ir.BF16:
		t.U16()[i] = ir.F32ToBF16(float32(v))
	}
}
