package ir

import (
	"math"

	"github.com/x448/float16"
)

// F16ToF32 widens an IEEE half-precision value.
func F16ToF32(h uint16) float32 { return float16.Frombits(h).Float32() }

// F32ToF16 narrows to IEEE half precision, rounding to nearest even.
func F32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// F32ToBF16 narrows to bfloat16, rounding to nearest even and keeping NaNs quiet NaNs.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// BF16ToF32 widens a bfloat16 value.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
