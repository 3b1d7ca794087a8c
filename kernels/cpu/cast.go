package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"
)

// Dtype conversion over little-endian byte buffers.
//
// Semantics (those of numpy astype / ONNX Cast where they are defined, and fixed choices where
// they are not):
//   - float → float rounds to nearest even, once: float64 → f16/bf16 goes through float32 with
//     round-to-odd, so there is no double rounding. Overflow gives ±Inf; NaN stays NaN (bf16 keeps
//     the sign and top payload bits and is forced quiet).
//   - float → int truncates toward zero; NaN gives 0; out-of-range values and ±Inf saturate to the
//     integer type's minimum or maximum (numpy leaves these undefined; saturation is
//     deterministic on every platform).
//   - int → int wraps (two's complement truncation, as numpy and C).
//   - int → float rounds to nearest even (int64 → bf16 is correctly rounded for |v| < 2^53).
//   - anything → bool is v != 0 (NaN is true); bool → number is 0 or 1; a bool byte is true when
//     non-zero and is written as 0 or 1.

// DType is an element type of a tensor buffer.
type DType uint8

// The element types. The zero value is invalid.
const (
	InvalidDType DType = iota
	F64
	F32
	F16
	BF16
	I64
	I32
	I8
	U8
	Bool
)

var dtypeNames = [...]string{"invalid", "f64", "f32", "f16", "bf16", "i64", "i32", "i8", "u8", "bool"}
var dtypeSizes = [...]int{0, 8, 4, 2, 2, 8, 4, 1, 1, 1}

// Size returns the size of one element in bytes (0 for an invalid DType).
func (t DType) Size() int {
	if int(t) >= len(dtypeSizes) {
		return 0
	}
	return dtypeSizes[t]
}

// String returns the short name: f64, f32, f16, bf16, i64, i32, i8, u8, bool.
func (t DType) String() string {
	if int(t) >= len(dtypeNames) {
		return fmt.Sprintf("DType(%d)", int(t))
	}
	return dtypeNames[t]
}

// ParseDType returns the DType named s (as String prints it).
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if i > 0 && n == s {
			return DType(i), nil
		}
	}
	return InvalidDType, fmt.Errorf("unknown dtype %q", s)
}

// Valid reports whether t is one of the defined element types.
func (t DType) Valid() bool { return t > InvalidDType && t <= Bool }

// IsFloat reports whether t is a floating-point type.
func (t DType) IsFloat() bool { return t >= F64 && t <= BF16 }

// ---- single values ----

// F32ToBF16 rounds f to bfloat16 (round to nearest even on the top 16 bits); NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 widens a bfloat16 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToF16 rounds f to IEEE half precision (nearest even).
func F32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// F16ToF32 widens an IEEE half exactly.
func F16ToF32(h uint16) float32 { return float16.Frombits(h).Float32() }

// roundToOdd32 rounds v to float32 toward zero and sets the last mantissa bit when inexact, so
// that a later rounding to a format at least two bits narrower is correctly rounded.
func roundToOdd32(v float64) float32 {
	f := float32(v)
	if float64(f) == v || f != f {
		return f
	}
	b := math.Float32bits(f)
	if math.Abs(float64(f)) > math.Abs(v) {
		b-- // step toward zero (sign-magnitude)
	}
	return math.Float32frombits(b | 1)
}

// F64ToBF16 rounds v to bfloat16 correctly (nearest even, no double rounding).
func F64ToBF16(v float64) uint16 { return F32ToBF16(roundToOdd32(v)) }

// F64ToF16 rounds v to IEEE half correctly (nearest even, no double rounding).
func F64ToF16(v float64) uint16 { return F32ToF16(roundToOdd32(v)) }

// ---- slices ----

const castGrain = 16384

func castCheckLen(name string, n, m int) {
	if n != m {
		panic(fmt.Sprintf("cpu.%s: len(src)=%d len(dst)=%d", name, n, m))
	}
}

// F32ToBF16Slice converts src into dst (same length).
func F32ToBF16Slice(src []float32, dst []uint16) {
	castCheckLen("F32ToBF16Slice", len(src), len(dst))
	Parallel(len(src), castGrain, func(lo, hi int) {
		d, s := dst[lo:hi], src[lo:hi]
		for i := castNarrowVec(d, s, false); i < len(s); i++ {
			d[i] = F32ToBF16(s[i])
		}
	})
}

// BF16ToF32Slice converts src into dst (same length).
func BF16ToF32Slice(src []uint16, dst []float32) {
	castCheckLen("BF16ToF32Slice", len(src), len(dst))
	Parallel(len(src), castGrain, func(lo, hi int) {
		d, s := dst[lo:hi], src[lo:hi]
		for i := castWidenVec(d, s, false); i < len(s); i++ {
			d[i] = BF16ToF32(s[i])
		}
	})
}

// F32ToF16Slice converts src into dst (same length).
func F32ToF16Slice(src []float32, dst []uint16) {
	castCheckLen("F32ToF16Slice", len(src), len(dst))
	Parallel(len(src), castGrain, func(lo, hi int) {
		d, s := dst[lo:hi], src[lo:hi]
		for i := castNarrowVec(d, s, true); i < len(s); i++ {
			d[i] = F32ToF16(s[i])
		}
	})
}

// F16ToF32Slice converts src into dst (same length).
func F16ToF32Slice(src []uint16, dst []float32) {
	castCheckLen("F16ToF32Slice", len(src), len(dst))
	Parallel(len(src), castGrain, func(lo, hi int) {
		d, s := dst[lo:hi], src[lo:hi]
		for i := castWidenVec(d, s, true); i < len(s); i++ {
			d[i] = F16ToF32(s[i])
		}
	})
}

// F32RoundedToF16Slice rounds each value of src to float32 and that to IEEE half
// (F32ToF16(float32(v))), into dst (same length), on the calling goroutine: the runtime's
// elementwise stores, whose float64 values are float32 results. (F64ToF16 rounds once.)
func F32RoundedToF16Slice(src []float64, dst []uint16) {
	castCheckLen("F32RoundedToF16Slice", len(src), len(dst))
	for i := castNarrowVec64(dst, src, true); i < len(src); i++ {
		dst[i] = F32ToF16(float32(src[i]))
	}
}

// F32RoundedToBF16Slice is F32RoundedToF16Slice for bfloat16.
func F32RoundedToBF16Slice(src []float64, dst []uint16) {
	castCheckLen("F32RoundedToBF16Slice", len(src), len(dst))
	for i := castNarrowVec64(dst, src, false); i < len(src); i++ {
		dst[i] = F32ToBF16(float32(src[i]))
	}
}

// F16ToF64Slice widens IEEE halves into dst (same length) exactly, on the calling goroutine.
func F16ToF64Slice(src []uint16, dst []float64) {
	castCheckLen("F16ToF64Slice", len(src), len(dst))
	for i := castWidenF16Vec64(dst, src); i < len(src); i++ {
		dst[i] = float64(F16ToF32(src[i]))
	}
}

// ---- Cast ----

// Cast converts the elements of src (type from) into dst (type to), both little-endian. The
// element count is len(src)/from.Size(); dst must hold exactly as many elements of type to.
func Cast(src []byte, from DType, dst []byte, to DType) error {
	if !from.Valid() || !to.Valid() {
		return fmt.Errorf("cast: invalid dtype %v -> %v", from, to)
	}
	fs, ts := from.Size(), to.Size()
	if len(src)%fs != 0 {
		return fmt.Errorf("cast: %d bytes is not a whole number of %v elements", len(src), from)
	}
	n := len(src) / fs
	if len(dst) != n*ts {
		return fmt.Errorf("cast: destination has %d bytes, want %d (%d %v elements)", len(dst), n*ts, n, to)
	}
	if from == to && from != Bool {
		Parallel(len(src), castGrain*4, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
		return nil
	}
	const chunk = 512
	nch := (n + chunk - 1) / chunk
	Parallel(nch, max(1, castGrain/chunk), func(lo, hi int) {
		var fb [chunk]float64
		var ib [chunk]int64
		for c := lo; c < hi; c++ {
			i0, i1 := c*chunk, min((c+1)*chunk, n)
			s := src[i0*fs : i1*fs]
			d := dst[i0*ts : i1*ts]
			m := i1 - i0
			if castDirect(s, from, d, to) {
				continue
			}
			if from.IsFloat() {
				decodeFloat(s, from, fb[:m])
				encodeFloat(fb[:m], d, to)
			} else {
				decodeInt(s, from, ib[:m])
				encodeInt(ib[:m], d, to)
			}
		}
	})
	return nil
}

// castDirect handles the common float pairs without the float64 detour.
func castDirect(s []byte, from DType, d []byte, to DType) bool {
	le := binary.LittleEndian
	switch {
	case from == F32 && to == BF16:
		for i := 0; i < len(s)/4; i++ {
			le.PutUint16(d[2*i:], F32ToBF16(math.Float32frombits(le.Uint32(s[4*i:]))))
		}
	case from == BF16 && to == F32:
		for i := 0; i < len(s)/2; i++ {
			le.PutUint32(d[4*i:], uint32(le.Uint16(s[2*i:]))<<16)
		}
	case from == F32 && to == F16:
		for i := 0; i < len(s)/4; i++ {
			le.PutUint16(d[2*i:], F32ToF16(math.Float32frombits(le.Uint32(s[4*i:]))))
		}
	case from == F16 && to == F32:
		for i := 0; i < len(s)/2; i++ {
			le.PutUint32(d[4*i:], math.Float32bits(F16ToF32(le.Uint16(s[2*i:]))))
		}
	case from == F32 && to == F64:
		for i := 0; i < len(s)/4; i++ {
			le.PutUint64(d[8*i:], math.Float64bits(float64(math.Float32frombits(le.Uint32(s[4*i:])))))
		}
	case from == F64 && to == F32:
		for i := 0; i < len(s)/8; i++ {
			le.PutUint32(d[4*i:], math.Float32bits(float32(math.Float64frombits(le.Uint64(s[8*i:])))))
		}
	default:
		return false
	}
	return true
}

func decodeFloat(s []byte, from DType, out []float64) {
	le := binary.LittleEndian
	switch from {
	case F64:
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(s[8*i:]))
		}
	case F32:
		for i := range out {
			out[i] = float64(math.Float32frombits(le.Uint32(s[4*i:])))
		}
	case F16:
		for i := range out {
			out[i] = float64(F16ToF32(le.Uint16(s[2*i:])))
		}
	case BF16:
		for i := range out {
			out[i] = float64(BF16ToF32(le.Uint16(s[2*i:])))
		}
	}
}

func decodeInt(s []byte, from DType, out []int64) {
	le := binary.LittleEndian
	switch from {
	case I64:
		for i := range out {
			out[i] = int64(le.Uint64(s[8*i:]))
		}
	case I32:
		for i := range out {
			out[i] = int64(int32(le.Uint32(s[4*i:])))
		}
	case I8:
		for i := range out {
			out[i] = int64(int8(s[i]))
		}
	case U8:
		for i := range out {
			out[i] = int64(s[i])
		}
	case Bool:
		for i := range out {
			if s[i] != 0 {
				out[i] = 1
			} else {
				out[i] = 0
			}
		}
	}
}

// floatToInt truncates toward zero with saturation to [lo, hi]; NaN gives 0.
func floatToInt(v float64, lo, hi int64) int64 {
	switch {
	case v != v:
		return 0
	case v <= float64(lo):
		return lo
	case v >= float64(hi):
		return hi
	}
	return int64(v)
}

func encodeFloat(in []float64, d []byte, to DType) {
	le := binary.LittleEndian
	switch to {
	case F64:
		for i, v := range in {
			le.PutUint64(d[8*i:], math.Float64bits(v))
		}
	case F32:
		for i, v := range in {
			le.PutUint32(d[4*i:], math.Float32bits(float32(v)))
		}
	case F16:
		for i, v := range in {
			le.PutUint16(d[2*i:], F64ToF16(v))
		}
	case BF16:
		for i, v := range in {
			le.PutUint16(d[2*i:], F64ToBF16(v))
		}
	case I64:
		for i, v := range in {
			le.PutUint64(d[8*i:], uint64(floatToInt(v, math.MinInt64, math.MaxInt64)))
		}
	case I32:
		for i, v := range in {
			le.PutUint32(d[4*i:], uint32(floatToInt(v, math.MinInt32, math.MaxInt32)))
		}
	case I8:
		for i, v := range in {
			d[i] = byte(floatToInt(v, math.MinInt8, math.MaxInt8))
		}
	case U8:
		for i, v := range in {
			d[i] = byte(floatToInt(v, 0, math.MaxUint8))
		}
	case Bool:
		for i, v := range in {
			d[i] = 0
			if v != 0 {
				d[i] = 1
			}
		}
	}
}

func encodeInt(in []int64, d []byte, to DType) {
	le := binary.LittleEndian
	switch to {
	case F64:
		for i, v := range in {
			le.PutUint64(d[8*i:], math.Float64bits(float64(v)))
		}
	case F32:
		for i, v := range in {
			le.PutUint32(d[4*i:], math.Float32bits(float32(v)))
		}
	case F16:
		for i, v := range in {
			le.PutUint16(d[2*i:], F32ToF16(float32(v)))
		}
	case BF16:
		for i, v := range in {
			le.PutUint16(d[2*i:], F64ToBF16(float64(v)))
		}
	case I64:
		for i, v := range in {
			le.PutUint64(d[8*i:], uint64(v))
		}
	case I32:
		for i, v := range in {
			le.PutUint32(d[4*i:], uint32(v))
		}
	case I8, U8:
		for i, v := range in {
			d[i] = byte(v)
		}
	case Bool:
		for i, v := range in {
			d[i] = 0
			if v != 0 {
				d[i] = 1
			}
		}
	}
}
