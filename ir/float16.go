package ir

import (
	"math"

	"github.com/x448/float16"
)

// F16ToF32 widens an IEEE half-precision value (exactly), by table: the CPU device widens
// every f16 operand of its kernels, and x448/float16's conversion costs several times more
// per element. TestF16Conversions checks the two agree on every value.
func F16ToF32(h uint16) float32 { return f16Table[h] }

var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = f16ToF32(uint16(h))
	}
	return &t
}()

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0: // ±0 and subnormals: mant·2^−24, exact in f32
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(v) | sign)
	case 0x1f: // ±inf, and NaN (payload kept, made quiet as x448 does)
		if mant != 0 {
			return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
		}
		return math.Float32frombits(sign | 0x7f800000)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F32ToF16 narrows to IEEE half precision, rounding to nearest even (overflow gives ±inf).
// NaNs go through x448/float16, whose quieting and payload the fast path need not copy.
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	if a := u & 0x7fffffff; a-0x38800000 < 0x477ff000-0x38800000 {
		// In [2^−14, 65520): normal; rebias the exponent and round 23 → 10 bits. (Small
		// enough to be inlined: the common case costs no call.)
		r := a - 112<<23
		r += 0xfff + (r>>13)&1
		return uint16(u>>16)&0x8000 | uint16(r>>13)
	}
	return f32ToF16Rare(f)
}

// f32ToF16Rare is F32ToF16 outside f16's normal range.
func f32ToF16Rare(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	u &= 0x7fffffff
	switch {
	case u > 0x7f800000:
		return float16.Fromfloat32(f).Bits()
	case u >= 0x477ff000: // ≥ 65520, halfway between 65504 and 2^16: rounds to inf
		return sign | 0x7c00
	}
	// Subnormal or zero: the result is round-to-even(|f|·2^24), which may reach 2^10 (the
	// smallest normal's bits). |f|·2^24 = (1.mant as a 24-bit integer)·2^(e−126): a right
	// shift by 126 − e ≥ 14; beyond 25 it rounds to 0, as do f32 subnormals.
	e := u >> 23
	sh := 126 - e
	if e == 0 || sh > 25 {
		return sign
	}
	full := u&0x7fffff | 0x800000
	q, rem, half := full>>sh, full&(1<<sh-1), uint32(1)<<(sh-1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return sign | uint16(q)
}

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
