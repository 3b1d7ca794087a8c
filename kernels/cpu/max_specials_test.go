//go:build amd64 && !purego

package cpu

import (
	"math"
	"testing"
)

// The vector max kernels (AVX-512's VRANGEPS form where the CPU has it, and the AVX form)
// give Go's builtin max on every pair and triple of special values: NaN from any operand,
// +0 above −0 in either order, infinities, subnormals.
func TestMaxKernelsSpecials(t *testing.T) {
	nan := float32(math.NaN())
	sp := []float32{nan, float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 1, -1, 3.5,
		math.Float32frombits(1), -math.Float32frombits(1), math.MaxFloat32}
	var a, b, c []float32
	for _, x := range sp {
		for _, y := range sp {
			for _, z := range sp {
				a, b, c = append(a, x), append(b, y), append(c, z)
			}
		}
	}
	for len(a)%16 != 0 {
		a, b, c = append(a, 2), append(b, -2), append(c, 0)
	}
	same := func(x, y float32) bool {
		return math.Float32bits(x) == math.Float32bits(y) || x != x && y != y
	}
	forms := []struct {
		name   string
		range_ bool
	}{{"AVX", false}, {"VRANGEPS", true}}
	for _, f := range forms {
		if f.range_ && !arithHasRange || !gemmHasAVX2FMA {
			continue
		}
		old := arithHasRange
		arithHasRange = f.range_
		// All of it (a multiple of 16), and 8 fewer (the VRANGEPS form's last 8 by AVX).
		for _, l := range []int{len(a), len(a) - 8} {
			o := make([]float32, l)
			if n := maxNaN3Vec32(o, a[:l], b[:l], c[:l]); n != l {
				t.Fatalf("%s: three-way max covered %d of %d", f.name, n, l)
			}
			for i := range o {
				if want := max(max(a[i], b[i]), c[i]); !same(o[i], want) {
					t.Errorf("%s, %d: max(%v, %v, %v) = %v, builtin %v", f.name, l, a[i], b[i], c[i], o[i], want)
				}
			}
			copy(o, a)
			if n := maxNaNVec32(o, b[:l]); n != l {
				t.Fatalf("%s: max into covered %d of %d", f.name, n, l)
			}
			for i := range o {
				if want := max(a[i], b[i]); !same(o[i], want) {
					t.Errorf("%s, %d: max(%v, %v) = %v, builtin %v", f.name, l, a[i], b[i], o[i], want)
				}
			}
		}
		arithHasRange = old
	}
}
