package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

// tkRefBF16 rounds v to bfloat16 by comparing the two neighbouring bfloat16 values in float64
// (ties to even); NaN is handled by the caller.
func tkRefBF16(v float64) uint16 {
	f := float32(v)
	if float64(f) == v { // exact in float32: round from the float32 bits
		b := math.Float32bits(f)
		lo := uint16(b >> 16)
		if b&0xffff == 0 {
			return lo
		}
		return tkPickBF16(v, lo)
	}
	// truncate toward zero in float32 first, then pick
	b := math.Float32bits(f)
	if math.Abs(float64(f)) > math.Abs(v) {
		b--
	}
	return tkPickBF16(v, uint16(b>>16))
}

func tkPickBF16(v float64, lo uint16) uint16 {
	hi := lo + 1
	dl := math.Abs(v - float64(math.Float32frombits(uint32(lo)<<16)))
	hv := float64(math.Float32frombits(uint32(hi) << 16))
	if math.IsInf(hv, 0) { // IEEE: overflow is judged as if the exponent range were unbounded
		hv = math.Copysign(math.Ldexp(1, 128), hv)
	}
	dh := math.Abs(hv - v)
	if dh < dl || (dh == dl && lo&1 == 1) {
		return hi
	}
	return lo
}

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // tie, even stays
		{0x3f818000, 0x3f82}, // tie, odd rounds up
		{0x3f808001, 0x3f81}, // above tie
		{0x3f807fff, 0x3f80}, // below tie
		{0xbf818000, 0xbf82}, // negative tie
		{0x7f7fffff, 0x7f80}, // max float -> +Inf
		{0x80000000, 0x8000}, // -0
		{0x00000001, 0x0000}, // tiny subnormal
		{0x7f800000, 0x7f80}, // +Inf
	} {
		if got := F32ToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	for _, nan := range []uint32{0x7f800001, 0x7fc00000, 0xff800100, 0x7fffffff} {
		h := F32ToBF16(math.Float32frombits(nan))
		if !math.IsNaN(float64(BF16ToF32(h))) || h>>15 != uint16(nan>>31) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not a NaN of the same sign", nan, h)
		}
	}
	r := tkRand(80)
	for range 300000 {
		b := r.Uint32()
		f := math.Float32frombits(b)
		if f != f {
			continue
		}
		if got, want := F32ToBF16(f), tkRefBF16(float64(f)); got != want {
			t.Fatalf("F32ToBF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
		v := float64(f) * (1 + (r.Float64()-0.5)*1e-6) // not float32-representable
		if math.IsInf(v, 0) {
			continue
		}
		if got, want := F64ToBF16(v), tkRefBF16(v); got != want {
			t.Fatalf("F64ToBF16(%v) = %#04x, want %#04x", v, got, want)
		}
	}
	// the double-rounding trap: just above a bfloat16 tie, lost by a float32 detour
	v := 1 + math.Ldexp(1, -8) + math.Ldexp(1, -30)
	if got := F64ToBF16(v); got != 0x3f81 {
		t.Errorf("F64ToBF16(1+2^-8+2^-30) = %#04x, want 0x3f81", got)
	}
	if F32ToBF16(float32(v)) != 0x3f80 {
		t.Error("test premise: the float32 detour should round to even")
	}
	for h := range 1 << 16 {
		f := BF16ToF32(uint16(h))
		if f == f && F32ToBF16(f) != uint16(h) {
			t.Fatalf("bf16 %#04x does not round-trip", h)
		}
	}
}

func TestF16(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if f != f {
			continue
		}
		if F32ToF16(f) != uint16(h) {
			t.Fatalf("f16 %#04x does not round-trip", h)
		}
		if float64(f) != float64(float16.Frombits(uint16(h)).Float32()) {
			t.Fatal("F16ToF32 differs from float16")
		}
	}
	if F32ToF16(65520) != 0x7c00 || F32ToF16(65519) != 0x7bff || F32ToF16(1e-8) != 0 {
		t.Error("f16 overflow/underflow rounding")
	}
	v := 1 + math.Ldexp(1, -11) + math.Ldexp(1, -40)
	if got := F64ToF16(v); got != 0x3c01 {
		t.Errorf("F64ToF16(1+2^-11+2^-40) = %#04x, want 0x3c01", got)
	}
	src := []float32{1, 2.5, -3, 65504, float32(math.Inf(-1))}
	h := make([]uint16, len(src))
	back := make([]float32, len(src))
	F32ToF16Slice(src, h)
	F16ToF32Slice(h, back)
	for i := range src {
		if back[i] != src[i] {
			t.Errorf("f16 slice round trip %v -> %v", src[i], back[i])
		}
	}
	F32ToBF16Slice(src[:3], h[:3])
	BF16ToF32Slice(h[:3], back[:3])
	for i := range 3 {
		if back[i] != src[i] {
			t.Errorf("bf16 slice round trip %v -> %v", src[i], back[i])
		}
	}
}

var tkAllDTypes = []DType{F64, F32, F16, BF16, I64, I32, I8, U8, Bool}

func tkEncode(dt DType, v float64) []byte {
	b := make([]byte, dt.Size())
	le := binary.LittleEndian
	switch dt {
	case F64:
		le.PutUint64(b, math.Float64bits(v))
	case F32:
		le.PutUint32(b, math.Float32bits(float32(v)))
	case F16:
		le.PutUint16(b, float16.Fromfloat32(float32(v)).Bits())
	case BF16:
		le.PutUint16(b, uint16(math.Float32bits(float32(v))>>16))
	case I64:
		le.PutUint64(b, uint64(int64(v)))
	case I32:
		le.PutUint32(b, uint32(int32(v)))
	case I8, U8:
		b[0] = byte(int64(v))
	case Bool:
		if v != 0 {
			b[0] = 1
		}
	}
	return b
}

func tkDecode(dt DType, b []byte) float64 {
	le := binary.LittleEndian
	switch dt {
	case F64:
		return math.Float64frombits(le.Uint64(b))
	case F32:
		return float64(math.Float32frombits(le.Uint32(b)))
	case F16:
		return float64(float16.Frombits(le.Uint16(b)).Float32())
	case BF16:
		return float64(math.Float32frombits(uint32(le.Uint16(b)) << 16))
	case I64:
		return float64(int64(le.Uint64(b)))
	case I32:
		return float64(int32(le.Uint32(b)))
	case I8:
		return float64(int8(b[0]))
	case U8:
		return float64(b[0])
	case Bool:
		if b[0] != 0 {
			return 1
		}
		return 0
	}
	panic("dtype")
}

// tkRefCast is the documented semantics, value by value.
func tkRefCast(v float64, from, to DType) float64 {
	isInt := func(d DType) bool { return !d.IsFloat() }
	switch to {
	case F64:
		return v
	case F32:
		return float64(float32(v))
	case F16:
		return float64(float16.Frombits(float16.Fromfloat32(float32(v)).Bits()).Float32())
	case BF16:
		if v != v {
			return v
		}
		return float64(math.Float32frombits(uint32(tkRefBF16(v)) << 16))
	case Bool:
		if v != 0 {
			return 1
		}
		return 0
	}
	lo, hi := map[DType][2]float64{I64: {-9223372036854775808, 9223372036854775807}, I32: {math.MinInt32, math.MaxInt32},
		I8: {-128, 127}, U8: {0, 255}}[to][0], map[DType][2]float64{I64: {-9223372036854775808, 9223372036854775807},
		I32: {math.MinInt32, math.MaxInt32}, I8: {-128, 127}, U8: {0, 255}}[to][1]
	if isInt(from) { // wrap
		i := int64(v)
		switch to {
		case I32:
			return float64(int32(i))
		case I8:
			return float64(int8(i))
		case U8:
			return float64(uint8(i))
		}
		return float64(i)
	}
	switch {
	case v != v:
		return 0
	case v <= lo:
		return lo
	case v >= hi:
		return hi
	}
	return math.Trunc(v)
}

func TestCastAllPairs(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 1.5, -1.5, 2.5, -2.7, 3.999, 127.9, 128, 200.7, 255.5, 256, 300, -129, -200,
		1e10, -1e10, 65504, 65520, 1e-8, 0.1, math.Inf(1), math.Inf(-1), math.NaN(), 123456789, -3e9, 5e9}
	for _, from := range tkAllDTypes {
		// source values as representable in the source type
		var src []byte
		var srcVals []float64
		for _, v := range vals {
			if !from.IsFloat() && (v != v || math.IsInf(v, 0)) {
				continue
			}
			e := tkEncode(from, v)
			src = append(src, e...)
			srcVals = append(srcVals, tkDecode(from, e))
		}
		for _, to := range tkAllDTypes {
			dst := make([]byte, len(srcVals)*to.Size())
			if err := Cast(src, from, dst, to); err != nil {
				t.Fatal(err)
			}
			for i, v := range srcVals {
				got := tkDecode(to, dst[i*to.Size():])
				want := tkRefCast(v, from, to)
				if !(got == want || (got != got && want != want)) || math.Signbit(got) != math.Signbit(want) && want == 0 && to.IsFloat() && from.IsFloat() {
					t.Errorf("Cast %v(%v) -> %v = %v, want %v", from, v, to, got, want)
				}
				if to == Bool && dst[i] > 1 {
					t.Errorf("bool written as %d", dst[i])
				}
			}
		}
	}
}

func TestCastLargeAndErrors(t *testing.T) {
	r := tkRand(81)
	n := 100003
	f := tkTo32(tkNormals(r, n))
	src := make([]byte, 4*n)
	for i, v := range f {
		binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(v*1000))
	}
	for _, to := range tkAllDTypes {
		dst := make([]byte, n*to.Size())
		if err := Cast(src, F32, dst, to); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i += 997 {
			v := float64(f[i] * 1000)
			if got, want := tkDecode(to, dst[i*to.Size():]), tkRefCast(v, F32, to); got != want {
				t.Fatalf("Cast f32 -> %v element %d: %v want %v", to, i, got, want)
			}
		}
	}
	if err := Cast(make([]byte, 6), F32, make([]byte, 6), F16); err == nil {
		t.Error("ragged source accepted")
	}
	if err := Cast(make([]byte, 8), F32, make([]byte, 6), F16); err == nil {
		t.Error("short destination accepted")
	}
	if err := Cast(nil, InvalidDType, nil, F32); err == nil {
		t.Error("invalid dtype accepted")
	}
	for _, d := range tkAllDTypes {
		if p, err := ParseDType(d.String()); err != nil || p != d {
			t.Errorf("ParseDType(%q) = %v, %v", d.String(), p, err)
		}
	}
	if fmt.Sprint(DType(99)) != "DType(99)" || DType(99).Size() != 0 {
		t.Error("invalid DType String/Size")
	}
}

func BenchmarkCastF32ToBF16(b *testing.B) {
	n := 1 << 20
	src := make([]byte, 4*n)
	dst := make([]byte, 2*n)
	b.SetBytes(int64(6 * n))
	for b.Loop() {
		_ = Cast(src, F32, dst, BF16)
	}
}

// The vector conversions give the scalar ones' bits: every 16-bit pattern widened, and
// narrowing every float32 pattern whose low 16 bits sit at or beside a rounding boundary of
// bfloat16 (bit 15) or of IEEE half, normal (bit 12) or subnormal (bits 13–16), or are
// random — NaNs, infinities, overflow to infinity and subnormal results included. Slices
// of odd lengths cover the scalar tails.
func TestCastVectorMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(70, 71))
	var f32 []float32
	for hi := range uint32(1 << 16) {
		for _, lo := range []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001, 0x3fff, 0x4000, 0x4001, 0x7fff, 0x8000, 0x8001, 0xffff, r.Uint32() & 0xffff} {
			f32 = append(f32, math.Float32frombits(hi<<16|lo))
		}
	}
	h16 := make([]uint16, 1<<16+5)
	for i := range h16 {
		h16[i] = uint16(i)
	}
	type conv struct {
		name     string
		narrow   func([]float32, []uint16)
		widen    func([]uint16, []float32)
		narrow64 func([]float64, []uint16)
		one      func(float32) uint16
	}
	f64 := make([]float64, len(f32))
	for i, v := range f32 {
		f64[i] = float64(v)
		if i%3 == 1 { // not a float32: the rounding to float32 comes first
			f64[i] = math.Float64frombits(math.Float64bits(f64[i]) + uint64(r.Uint32()))
		}
	}
	for _, c := range []conv{{"f16", F32ToF16Slice, F16ToF32Slice, F32RoundedToF16Slice, F32ToF16}, {"bf16", F32ToBF16Slice, BF16ToF32Slice, F32RoundedToBF16Slice, F32ToBF16}} {
		run := func(goOnly bool) ([]uint16, []float32) {
			castForceGo = goOnly
			defer func() { castForceGo = false }()
			n, w := make([]uint16, len(f32)-3), make([]float32, len(h16))
			c.narrow(f32[:len(f32)-3], n)
			c.widen(h16, w)
			return n, w
		}
		vn, vw := run(false)
		sn, sw := run(true)
		for i := range vn {
			if vn[i] != sn[i] {
				t.Fatalf("%s: %#08x narrows to %#04x, the scalar conversion gives %#04x", c.name, math.Float32bits(f32[i]), vn[i], sn[i])
			}
		}
		castForceGo = true
		s64 := make([]uint16, len(f64)-5)
		c.narrow64(f64[:len(s64)], s64)
		castForceGo = false
		v64 := make([]uint16, len(s64))
		c.narrow64(f64[:len(s64)], v64)
		for i := range v64 {
			if v64[i] != s64[i] || s64[i] != c.one(float32(f64[i])) {
				t.Fatalf("%s: float64 %#016x narrows to %#04x, the scalar conversion gives %#04x", c.name, math.Float64bits(f64[i]), v64[i], s64[i])
			}
		}
		for i := range vw {
			if math.Float32bits(vw[i]) != math.Float32bits(sw[i]) {
				t.Fatalf("%s: %#04x widens to %#08x, the scalar conversion gives %#08x", c.name, h16[i], math.Float32bits(vw[i]), math.Float32bits(sw[i]))
			}
		}
	}
	w64 := make([]float64, len(h16))
	F16ToF64Slice(h16, w64)
	for i, v := range w64 {
		if want := float64(F16ToF32(h16[i])); math.Float64bits(v) != math.Float64bits(want) {
			t.Fatalf("f16: %#04x widens to float64 %#016x, want %#016x", h16[i], math.Float64bits(v), math.Float64bits(want))
		}
	}
}
