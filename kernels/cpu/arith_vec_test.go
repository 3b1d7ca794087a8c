package cpu

import (
	"math"
	"testing"
)

// The float32 row kernels (assembly body, Go tail) give the bits of the plain Go loops, on
// every length, with NaNs, infinities, zeros of both signs and subnormals among the operands.
func TestArithRowsMatchGo(t *testing.T) {
	r := tkRand(41)
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3e38, -2}
	const n = 1003
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64()*3)
		if i%7 == 0 {
			a[i] = specials[i%len(specials)]
		}
		if i%5 == 0 {
			b[i] = specials[(i/5)%len(specials)]
		}
	}
	same := func(x, y []float32) bool {
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) && !(x[i] != x[i] && y[i] != y[i]) {
				return false
			}
		}
		return true
	}
	run := func(f func(o []float32)) (vec, ref []float32) {
		vec, ref = make([]float32, n), make([]float32, n)
		f(vec)
		arithForceGo = true
		f(ref)
		arithForceGo = false
		return
	}
	for _, m := range []int{n, 17, 8, 7, 0} {
		for op := OpAdd; op <= OpDiv; op++ {
			for name, f := range map[string]func(o []float32){
				"vv": func(o []float32) { arithVV(op, a[:m], b[:m], o[:m]) },
				"vs": func(o []float32) { arithVS(op, a[:m], 1.7, o[:m]) },
				"sv": func(o []float32) { arithSV(op, -0.3, b[:m], o[:m]) },
			} {
				if vec, ref := run(f); !same(vec, ref) {
					t.Fatalf("%s %s m=%d: assembly and Go differ", op, name, m)
				}
			}
		}
		if vec, ref := run(func(o []float32) { SqrtRow(a[:m], o[:m]) }); !same(vec, ref) {
			t.Fatalf("sqrt m=%d: assembly and Go differ", m)
		}
		if vec, ref := run(func(o []float32) { scaleShiftRow(a[:m], o[:m], 1.3, -0.7) }); !same(vec, ref) {
			t.Fatalf("scale-shift m=%d: assembly and Go differ", m)
		}
		if vec, ref := run(func(o []float32) { ReluRow(a[:m], o[:m]) }); !same(vec, ref) {
			t.Fatalf("relu m=%d: assembly and Go differ", m)
		}
		if vec, ref := run(func(o []float32) { scaleShiftReluRow(a[:m], o[:m], 1.3, -0.7) }); !same(vec, ref) {
			t.Fatalf("scale-shift-relu m=%d: assembly and Go differ", m)
		}
		// and the one pass is the two passes it replaces
		two := make([]float32, m)
		scaleShiftRow(a[:m], two, -1.1, 0.25)
		ReluRow(two, two)
		if vec, _ := run(func(o []float32) { scaleShiftReluRow(a[:m], o[:m], -1.1, 0.25) }); !same(vec[:m], two) {
			t.Fatalf("scale-shift-relu m=%d: not scale-shift then relu", m)
		}
		if vec, ref := run(func(o []float32) { copy(o, b); maxIntoRow(o[:m], a[:m]) }); !same(vec, ref) {
			t.Fatalf("max m=%d: assembly and Go differ", m)
		}
		// Three taps: NaNs and signed zeros in every position (a, b and a shifted b).
		m3 := min(m, n-1)
		if vec, ref := run(func(o []float32) { max3Row(o[:m3], a[:m3], b[:m3], b[1:m3+1]) }); !same(vec, ref) {
			t.Fatalf("max3 m=%d: assembly and Go differ", m)
		}
		if vec, ref := run(func(o []float32) { max3Row(o[:m3], b[1:m3+1], a[:m3], b[:m3]) }); !same(vec, ref) {
			t.Fatalf("max3 m=%d (taps reordered): assembly and Go differ", m)
		}
		// Stride 2: o[j] from a[2j … 2j+2], each output with its own specials; m/2 outputs
		// leave every tail of the eight-output loop as m varies.
		m2 := min(m, n-2) / 2
		if vec, ref := run(func(o []float32) { max3s2Row(o[:m2], a[:2*m2+1]) }); !same(vec, ref) {
			t.Fatalf("max3 stride 2, %d outputs: assembly and Go differ", m2)
		}
		if vec, ref := run(func(o []float32) { max3s2Row(o[:m2], b[1:2*m2+2]) }); !same(vec, ref) {
			t.Fatalf("max3 stride 2, %d outputs (shifted): assembly and Go differ", m2)
		}
		if vec, ref := run(func(o []float32) { max2s2Row(o[:m2], a[:2*m2]) }); !same(vec, ref) {
			t.Fatalf("max2 stride 2, %d outputs: assembly and Go differ", m2)
		}
		if vec, ref := run(func(o []float32) { max2s2Row(o[:m2], b[1:2*m2+1]) }); !same(vec, ref) {
			t.Fatalf("max2 stride 2, %d outputs (shifted): assembly and Go differ", m2)
		}
	}
	// max3s2Row's outputs against the window maxima themselves, every offset of a special
	// value in a window of 24 outputs (three loop iterations).
	for pos := 0; pos < 49; pos++ {
		for _, sp := range specials {
			v := make([]float32, 49)
			for i := range v {
				v[i] = float32(i%5) - 2
			}
			v[pos] = sp
			o := make([]float32, 24)
			max3s2Row(o, v)
			for j := range o {
				w := max(max(v[2*j], v[2*j+1]), v[2*j+2])
				if math.Float32bits(w) != math.Float32bits(o[j]) && !(w != w && o[j] != o[j]) {
					t.Fatalf("special %v at %d: o[%d] = %v, want %v", sp, pos, j, o[j], w)
				}
			}
		}
	}
	// And the values themselves, against float64 arithmetic rounded once.
	o := make([]float32, n)
	arithVV(OpDiv, a, b, o)
	for i := range o {
		if w := float32(float64(a[i]) / float64(b[i])); math.Float32bits(w) != math.Float32bits(o[i]) && !(w != w && o[i] != o[i]) {
			t.Fatalf("%v / %v = %v, want %v", a[i], b[i], o[i], w)
		}
	}
	// max's zeros and NaNs as the builtin's: +0 beats −0 either way round, NaN from either side.
	z, nz, nan := float32(0), float32(math.Copysign(0, -1)), float32(math.NaN())
	for _, c := range [][3]float32{{z, nz, z}, {nz, z, z}, {nz, nz, nz}, {nan, 1, nan}, {1, nan, nan}, {-1, 2, 2}} {
		o := []float32{c[0], c[0], c[0], c[0], c[0], c[0], c[0], c[0], c[0]}
		x := []float32{c[1], c[1], c[1], c[1], c[1], c[1], c[1], c[1], c[1]}
		maxIntoRow(o, x)
		for i := range o {
			if math.Float32bits(o[i]) != math.Float32bits(c[2]) && !(c[2] != c[2] && o[i] != o[i]) {
				t.Fatalf("max(%v, %v) = %v (element %d), want %v", c[0], c[1], o[i], i, c[2])
			}
		}
	}
	// scale-shift: the product rounded, then the sum rounded (not one fused rounding).
	scaleShiftRow(a, o, 1.3, -0.7)
	for i, v := range a {
		mul, add := float32(1.3), float32(-0.7)
		if w := float32(float64(float32(float64(v)*float64(mul))) + float64(add)); math.Float32bits(w) != math.Float32bits(o[i]) && !(w != w && o[i] != o[i]) {
			t.Fatalf("%v·1.3 − 0.7 = %v, want %v", v, o[i], w)
		}
	}
	ReluRow(a, o)
	for i, v := range a {
		if (v > 0 && o[i] != v) || (!(v > 0) && math.Float32bits(o[i]) != 0) {
			t.Fatalf("relu(%v) = %v", v, o[i])
		}
	}
}

func BenchmarkArithRows(b *testing.B) {
	const n = 1024
	x, y, o := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i%13)-6, float32(i%7)+1
	}
	b.Run("mul", func(b *testing.B) {
		b.SetBytes(12 * n)
		for b.Loop() {
			arithVV(OpMul, x, y, o)
		}
	})
	b.Run("relu", func(b *testing.B) {
		b.SetBytes(8 * n)
		for b.Loop() {
			ReluRow(x, o)
		}
	})
}

// gatherEvenRowsVec32 (convSubsampled's plane gather) writes o[r·wo + j] = v[r·ld + 2j] for
// every row length up to three vectors and a partial one, and nothing past the last row's
// wo elements (its tail is a masked store).
func TestGatherEvenRows(t *testing.T) {
	const guard = float32(-7)
	for wo := 1; wo <= 50; wo++ {
		for _, rows := range []int{1, 3} {
			ld := 2*wo + wo%3 // rows further apart than 2·wo, and exactly 2·wo
			v := make([]float32, (rows-1)*ld+2*wo-1)
			for i := range v {
				v[i] = float32(i) + 0.5
			}
			o := make([]float32, rows*wo+16)
			for i := range o {
				o[i] = guard
			}
			if !gatherEvenRowsVec32(o[:rows*wo], v, wo, rows, ld) {
				t.Skip("no AVX-512")
			}
			for r := range rows {
				for j := range wo {
					if got, want := o[r*wo+j], v[r*ld+2*j]; got != want {
						t.Fatalf("wo %d rows %d: o[%d][%d] = %v, want %v", wo, rows, r, j, got, want)
					}
				}
			}
			for i, g := range o[rows*wo:] {
				if g != guard {
					t.Fatalf("wo %d rows %d: wrote %v %d elements past the end", wo, rows, g, i)
				}
			}
		}
	}
}
