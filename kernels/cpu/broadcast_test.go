package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestBroadcastShape(t *testing.T) {
	for _, c := range []struct {
		a, b, want []int
		err        bool
	}{
		{[]int{2, 3}, []int{3}, []int{2, 3}, false},
		{[]int{}, []int{4, 1}, []int{4, 1}, false},
		{[]int{8, 1, 6, 1}, []int{7, 1, 5}, []int{8, 7, 6, 5}, false},
		{[]int{5, 4}, []int{1}, []int{5, 4}, false},
		{[]int{15, 3, 5}, []int{15, 1, 5}, []int{15, 3, 5}, false},
		{[]int{3, 0}, []int{1, 1}, []int{3, 0}, false},
		{[]int{2, 1}, []int{8, 4, 3}, nil, true},
		{[]int{3}, []int{4}, nil, true},
	} {
		got, err := BroadcastShape(c.a, c.b)
		if (err != nil) != c.err || (!c.err && !slices.Equal(got, c.want)) {
			t.Errorf("BroadcastShape(%v, %v) = %v, %v; want %v (error %v)", c.a, c.b, got, err, c.want, c.err)
		}
	}
	if s, err := BroadcastShapes([]int{2, 1, 1}, []int{3, 1}, []int{4}); err != nil || !slices.Equal(s, []int{2, 3, 4}) {
		t.Errorf("BroadcastShapes = %v, %v", s, err)
	}
	if st := BroadcastStrides([]int{3, 1}, []int{2, 3, 4}); !slices.Equal(st, []int{0, 1, 0}) {
		t.Errorf("BroadcastStrides = %v", st)
	}
	if st := BroadcastStrides([]int{2, 3, 4}, []int{2, 3, 4}); !slices.Equal(st, []int{12, 4, 1}) {
		t.Errorf("BroadcastStrides = %v", st)
	}
}

func TestBinaryHandExamples(t *testing.T) {
	// column [2,1] + row [3] -> [2,3]
	a := []float32{10, 20}
	b := []float32{1, 2, 3}
	out := make([]float32, 6)
	Arith(OpAdd, a, []int{2, 1}, b, []int{3}, out, []int{2, 3})
	if !slices.Equal(out, []float32{11, 12, 13, 21, 22, 23}) {
		t.Fatalf("column+row = %v", out)
	}
	Binary(func(x, y float32) float32 { return x - y }, a, []int{2, 1}, b, []int{3}, out, []int{2, 3})
	if !slices.Equal(out, []float32{9, 8, 7, 19, 18, 17}) {
		t.Fatalf("column-row = %v", out)
	}
	// scalar
	Arith(OpMul, []float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, []float32{2}, nil, out, []int{2, 3})
	if !slices.Equal(out, []float32{2, 4, 6, 8, 10, 12}) {
		t.Fatalf("scalar mul = %v", out)
	}
	Arith(OpDiv, []float32{12}, []int{}, []float32{1, 2, 3, 4, 6, 12}, []int{2, 3}, out, []int{2, 3})
	if !slices.Equal(out, []float32{12, 6, 4, 3, 2, 1}) {
		t.Fatalf("scalar div = %v", out)
	}
	// comparison into bool
	cmp := make([]bool, 6)
	BinaryTo(func(x, y float32) bool { return x > y }, []float32{1, 5, 3, 0, 9, 2}, []int{2, 3}, []float32{2}, []int{1}, cmp, []int{2, 3})
	if !slices.Equal(cmp, []bool{false, true, true, false, true, false}) {
		t.Fatalf("greater = %v", cmp)
	}
	// where
	w := make([]int64, 4)
	Where([]bool{true, false}, []int{2, 1}, []int64{1, 2}, []int{2}, []int64{-1}, nil, w, []int{2, 2})
	if !slices.Equal(w, []int64{1, 2, -1, -1}) {
		t.Fatalf("where = %v", w)
	}
	// NaN propagation of max/min
	m := make([]float64, 2)
	Arith(OpMax, []float64{math.NaN(), 1}, []int{2}, []float64{0, math.NaN()}, []int{2}, m, []int{2})
	if !math.IsNaN(m[0]) || !math.IsNaN(m[1]) {
		t.Fatalf("max NaN = %v", m)
	}
	// empty output
	Arith(OpAdd, []float32{}, []int{0, 3}, []float32{1, 2, 3}, []int{3}, []float32{}, []int{0, 3})
}

func tkRandBroadcastPair(r interface{ IntN(int) int }) (a, b, out []int) {
	rank := r.IntN(5)
	out = make([]int, rank)
	for d := range out {
		out[d] = []int{1, 2, 3, 5, 70}[r.IntN(5)]
	}
	mk := func() []int {
		k := r.IntN(rank + 1)
		s := slices.Clone(out[rank-k:])
		for d := range s {
			if r.IntN(3) == 0 {
				s[d] = 1
			}
		}
		return s
	}
	a, b = mk(), mk()
	got, _ := BroadcastShape(a, b)
	return a, b, got
}

func tkBroadcastIndex(lin int, out, shape []int) int {
	idx := make([]int, len(out))
	tkUnravel(lin, out, idx)
	off := len(out) - len(shape)
	in := make([]int, len(shape))
	for d := range shape {
		if shape[d] != 1 {
			in[d] = idx[off+d]
		}
	}
	return tkRavel(in, shape)
}

func TestBinaryRandom(t *testing.T) {
	r := tkRand(60)
	ops := []struct {
		op ArithOp
		f  func(a, b float64) float64
	}{
		{OpAdd, func(a, b float64) float64 { return a + b }},
		{OpSub, func(a, b float64) float64 { return a - b }},
		{OpMul, func(a, b float64) float64 { return a * b }},
		{OpDiv, func(a, b float64) float64 { return a / b }},
		{OpMax, math.Max},
		{OpMin, math.Min},
		{OpPow, math.Pow},
	}
	for trial := 0; trial < 300; trial++ {
		as, bs, os := tkRandBroadcastPair(r)
		a, b := tkNormals(r, elemCount(as)), tkNormals(r, elemCount(bs))
		for i := range a {
			a[i] = math.Abs(a[i]) + 0.1 // valid for Pow
		}
		for _, op := range ops {
			want := make([]float64, elemCount(os))
			for lin := range want {
				want[lin] = op.f(a[tkBroadcastIndex(lin, os, as)], b[tkBroadcastIndex(lin, os, bs)])
			}
			got := make([]float64, len(want))
			Arith(op.op, a, as, b, bs, got, os)
			tkCheck(t, fmt.Sprintf("Arith %v %v %v", op.op, as, bs), got, want, 1e-15, 0)
			got2 := make([]float64, len(want))
			Binary(op.f, a, as, b, bs, got2, os)
			tkCheck(t, fmt.Sprintf("Binary %v %v %v", op.op, as, bs), got2, want, 0, 0)
		}
		// Where with a third broadcast operand
		cs, _, _ := tkRandBroadcastPair(r)
		if full, err := BroadcastShapes(cs, os); err == nil {
			cond := make([]bool, elemCount(cs))
			for i := range cond {
				cond[i] = r.IntN(2) == 0
			}
			want := make([]float64, elemCount(full))
			for lin := range want {
				if cond[tkBroadcastIndex(lin, full, cs)] {
					want[lin] = a[tkBroadcastIndex(lin, full, as)]
				} else {
					want[lin] = b[tkBroadcastIndex(lin, full, bs)]
				}
			}
			got := make([]float64, len(want))
			Where(cond, cs, a, as, b, bs, got, full)
			tkCheck(t, "Where", got, want, 0, 0)
			got3 := make([]float64, len(want))
			Ternary(func(c bool, x, y float64) float64 {
				if c {
					return x
				}
				return y
			}, cond, cs, a, as, b, bs, got3, full)
			tkCheck(t, "Ternary", got3, want, 0, 0)
		}
	}
}

func TestBinaryLongRowsAndDeterminism(t *testing.T) {
	r := tkRand(61)
	a := tkTo32(tkNormals(r, 3*100000))
	b := tkTo32(tkNormals(r, 100000))
	out := make([]float32, len(a))
	tkSameBits(t, "Arith row broadcast", func() []float32 {
		Arith(OpMul, a, []int{3, 100000}, b, []int{100000}, out, []int{3, 100000})
		return out
	})
	for i := range out {
		if out[i] != a[i]*b[i%100000] {
			t.Fatalf("element %d", i)
		}
	}
	c := make([]float32, 7*100000)
	Arith(OpSub, a[:100000], []int{1, 100000}, []float32{1, 2, 3, 4, 5, 6, 7}, []int{7, 1}, c, []int{7, 100000})
	for i := range c {
		if c[i] != a[i%100000]-float32(i/100000+1) {
			t.Fatalf("outer broadcast element %d", i)
		}
	}
}

func TestBinaryPanicsOnBadShapes(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for incompatible shapes")
		}
	}()
	Arith(OpAdd, make([]float32, 3), []int{3}, make([]float32, 4), []int{4}, make([]float32, 4), []int{4})
}

func BenchmarkBinaryAddBroadcast(b *testing.B) {
	const rows, n = 4096, 1024
	r := tkRand(62)
	x := tkTo32(tkNormals(r, rows*n))
	bias := tkTo32(tkNormals(r, n))
	y := make([]float32, len(x))
	b.SetBytes(int64(8 * len(x)))
	for b.Loop() {
		Arith(OpAdd, x, []int{rows, n}, bias, []int{n}, y, []int{rows, n})
	}
}

func BenchmarkBinaryFuncBroadcast(b *testing.B) {
	const rows, n = 4096, 1024
	r := tkRand(63)
	x := tkTo32(tkNormals(r, rows*n))
	bias := tkTo32(tkNormals(r, n))
	y := make([]float32, len(x))
	add := func(a, b float32) float32 { return a + b }
	b.SetBytes(int64(8 * len(x)))
	for b.Loop() {
		Binary(add, x, []int{rows, n}, bias, []int{n}, y, []int{rows, n})
	}
}
