package ir

import (
	"math"
	"testing"

	"github.com/x448/float16"
)

// TestF16Conversions checks the fast f16 conversions against x448/float16: every f16 value
// widens to the same f32, and f32 values (every 61st bit pattern, plus the boundaries of
// f16's normal, subnormal and overflow ranges and their neighbours) narrow to the same f16.
func TestF16Conversions(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got, want := F16ToF32(uint16(h)), float16.Frombits(uint16(h)).Float32()
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("F16ToF32(%#04x) = %#08x, want %#08x", h, math.Float32bits(got), math.Float32bits(want))
		}
	}
	check := func(u uint32) {
		f := math.Float32frombits(u)
		if f != f {
			return // NaNs go through x448 itself
		}
		if got, want := F32ToF16(f), float16.Fromfloat32(f).Bits(); got != want {
			t.Fatalf("F32ToF16(%g = %#08x) = %#04x, want %#04x", f, u, got, want)
		}
	}
	for u := uint64(0); u < 1<<32; u += 61 {
		check(uint32(u))
	}
	for _, v := range []float32{65504, 65519.996, 65520, 65536, 6.1035156e-05, 5.9604645e-08, 2.9802322e-08, 1e-10, 0.1, 1.0 / 3} {
		b := math.Float32bits(v)
		for d := uint32(0); d < 4; d++ {
			check(b + d)
			check(b - d)
			check((b + d) | 1<<31)
		}
	}
}
