package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// ---- shared test helpers (prefixed tk to keep clear of other files in the package) ----

func tkRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

func tkNormals(r *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	return x
}

func tkTo32(x []float64) []float32 {
	if x == nil {
		return nil
	}
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

func tkTo64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// tkClose reports the first index where got and want differ by more than atol + rtol·|want|
// (NaNs must match NaNs, infinities must be equal).
func tkClose(got, want []float64, rtol, atol float64) (int, bool) {
	if len(got) != len(want) {
		return -1, false
	}
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(w) || math.IsNaN(g) {
			if math.IsNaN(w) != math.IsNaN(g) {
				return i, false
			}
			continue
		}
		if math.IsInf(w, 0) || math.IsInf(g, 0) {
			if g != w {
				return i, false
			}
			continue
		}
		if math.Abs(g-w) > atol+rtol*math.Abs(w) {
			return i, false
		}
	}
	return 0, true
}

func tkCheck(t *testing.T, what string, got, want []float64, rtol, atol float64) {
	t.Helper()
	if i, ok := tkClose(got, want, rtol, atol); !ok {
		if i < 0 {
			t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
		}
		t.Fatalf("%s: element %d = %v, want %v (rtol %g atol %g)", what, i, got[i], want[i], rtol, atol)
	}
}

// tkWithProcs runs f under each GOMAXPROCS value and restores the old setting.
func tkWithProcs(procs int, f func()) {
	old := runtime.GOMAXPROCS(procs)
	defer runtime.GOMAXPROCS(old)
	f()
}

// tkSameBits fails unless run() produces bitwise-identical float32 slices under GOMAXPROCS 1,
// 2 and 5.
func tkSameBits[T Float](t *testing.T, what string, run func() []T) {
	t.Helper()
	var ref []T
	tkWithProcs(1, func() { ref = slices.Clone(run()) })
	for _, p := range []int{2, 5} {
		var got []T
		tkWithProcs(p, func() { got = slices.Clone(run()) })
		for i := range ref {
			if math.Float64bits(float64(got[i])) != math.Float64bits(float64(ref[i])) {
				t.Fatalf("%s: GOMAXPROCS=%d element %d = %v, GOMAXPROCS=1 gave %v", what, p, i, got[i], ref[i])
			}
		}
	}
}

// tkFD returns the central finite-difference gradient of the scalar f at x (float64).
func tkFD(x []float64, f func([]float64) float64) []float64 {
	g := make([]float64, len(x))
	for i := range x {
		h := 1e-5 * max(1, math.Abs(x[i]))
		old := x[i]
		x[i] = old + h
		fp := f(x)
		x[i] = old - h
		fm := f(x)
		x[i] = old
		g[i] = (fp - fm) / (2 * h)
	}
	return g
}

// tkGradCheck compares an analytic gradient with finite differences: the largest difference
// relative to the largest gradient must stay below 1e-6.
func tkGradCheck(t *testing.T, what string, analytic, fd []float64) {
	t.Helper()
	scale, diff := 0.0, 0.0
	for i := range fd {
		scale = max(scale, math.Abs(fd[i]))
		diff = max(diff, math.Abs(analytic[i]-fd[i]))
	}
	if diff > 1e-6*max(scale, 1e-3) {
		t.Fatalf("%s: analytic gradient differs from finite differences by %g (scale %g)", what, diff, scale)
	}
}

func tkDot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// ---- reductions ----

type tkReduceCase struct {
	name string
	f32  func(x []float32, o, n, i int, y []float32)
	f64  func(x []float64, o, n, i int, y []float64)
	ref  func(v []float64) float64
}

var tkReducers = []tkReduceCase{
	{"sum", ReduceSum[float32], ReduceSum[float64], func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s
	}},
	{"mean", ReduceMean[float32], ReduceMean[float64], func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}},
	{"max", ReduceMax[float32], ReduceMax[float64], func(v []float64) float64 {
		m := math.Inf(-1)
		for _, x := range v {
			m = math.Max(m, x)
		}
		return m
	}},
	{"min", ReduceMin[float32], ReduceMin[float64], func(v []float64) float64 {
		m := math.Inf(1)
		for _, x := range v {
			m = math.Min(m, x)
		}
		return m
	}},
	{"prod", ReduceProd[float32], ReduceProd[float64], func(v []float64) float64 {
		p := 1.0
		for _, x := range v {
			p *= x
		}
		return p
	}},
	{"l1", ReduceL1[float32], ReduceL1[float64], func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += math.Abs(x)
		}
		return s
	}},
	{"l2", ReduceL2[float32], ReduceL2[float64], func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x * x
		}
		return math.Sqrt(s)
	}},
	{"sumsq", ReduceSumSquare[float32], ReduceSumSquare[float64], func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x * x
		}
		return s
	}},
	{"logsumexp", ReduceLogSumExp[float32], ReduceLogSumExp[float64], func(v []float64) float64 {
		if len(v) == 0 {
			return math.Inf(-1)
		}
		m := math.Inf(-1)
		for _, x := range v {
			m = math.Max(m, x)
		}
		s := 0.0
		for _, x := range v {
			s += math.Exp(x - m)
		}
		return m + math.Log(s)
	}},
}

// tkRefReduce applies ref to every (o, i) column of the (outer, n, inner) view.
func tkRefReduce(x []float64, outer, n, inner int, ref func([]float64) float64) []float64 {
	y := make([]float64, outer*inner)
	col := make([]float64, n)
	for o := range outer {
		for i := range inner {
			for j := range n {
				col[j] = x[(o*n+j)*inner+i]
			}
			y[o*inner+i] = ref(col)
		}
	}
	return y
}

var tkReduceShapes = [][3]int{
	{1, 1, 1}, {1, 7, 1}, {3, 5, 1}, {2, 1, 3}, {4, 9, 7}, {1, 17, 300}, {3, 4099, 1}, {2, 33, 513},
	{5, 8, 1}, {1, 2 * reduceRowBlock * 8, 1}, {7, 1, 1},
}

func TestReductions(t *testing.T) {
	r := tkRand(1)
	for _, sh := range tkReduceShapes {
		o, n, in := sh[0], sh[1], sh[2]
		x := tkNormals(r, o*n*in)
		for _, rc := range tkReducers {
			if rc.name == "prod" {
				for i := range x { // keep products of thousands of terms finite
					x[i] = 1 + 0.001*x[i]
				}
			}
			want := tkRefReduce(x, o, n, in, rc.ref)
			y64 := make([]float64, o*in)
			rc.f64(x, o, n, in, y64)
			tkCheck(t, fmt.Sprintf("%s f64 %v", rc.name, sh), y64, want, 1e-12, 1e-12)
			y32 := make([]float32, o*in)
			rc.f32(tkTo32(x), o, n, in, y32)
			atol := 1e-5 * math.Sqrt(float64(n))
			tkCheck(t, fmt.Sprintf("%s f32 %v", rc.name, sh), tkTo64(y32), want, 2e-5, atol)
		}
	}
}

func TestReduceEmptyAndNaN(t *testing.T) {
	y := make([]float64, 3)
	for _, c := range []struct {
		f    func(x []float64, o, n, i int, y []float64)
		want float64
	}{
		{ReduceSum[float64], 0}, {ReduceProd[float64], 1}, {ReduceMax[float64], math.Inf(-1)},
		{ReduceMin[float64], math.Inf(1)}, {ReduceLogSumExp[float64], math.Inf(-1)}, {ReduceMean[float64], math.NaN()},
	} {
		c.f(nil, 3, 0, 1, y)
		tkCheck(t, "empty reduction", y, []float64{c.want, c.want, c.want}, 0, 0)
	}
	nan := math.NaN()
	x := []float64{1, nan, 3, 4, 5, 6} // (1, 3, 2): NaN in column 1
	ReduceMax(x, 1, 3, 2, y[:2])
	if !math.IsNaN(y[1]) || y[0] != 5 {
		t.Fatalf("ReduceMax NaN propagation: %v", y[:2])
	}
	ReduceMin(x, 2, 3, 1, y[:2])
	if !math.IsNaN(y[0]) || y[1] != 4 {
		t.Fatalf("ReduceMin NaN propagation: %v", y[:2])
	}
	// logsumexp with infinities
	ReduceLogSumExp([]float64{math.Inf(-1), math.Inf(-1), math.Inf(1), 0}, 2, 2, 1, y[:2])
	if !math.IsInf(y[0], -1) || !math.IsInf(y[1], 1) {
		t.Fatalf("ReduceLogSumExp infinities: %v", y[:2])
	}
	// huge values do not overflow
	z := []float32{0}
	ReduceLogSumExp([]float32{1000, 1000}, 1, 2, 1, z)
	if math.Abs(float64(z[0])-(1000+math.Ln2)) > 1e-3 {
		t.Fatalf("ReduceLogSumExp(1000, 1000) = %v", z[0])
	}
}

func TestArgMaxMin(t *testing.T) {
	r := tkRand(2)
	for _, sh := range tkReduceShapes[:9] {
		o, n, in := sh[0], sh[1], sh[2]
		x := make([]float64, o*n*in)
		for i := range x {
			x[i] = float64(r.IntN(4)) // many ties
		}
		for _, last := range []bool{false, true} {
			for _, isMin := range []bool{false, true} {
				got := make([]int64, o*in)
				if isMin {
					ArgMin(x, o, n, in, got, last)
				} else {
					ArgMax(x, o, n, in, got, last)
				}
				got32 := make([]int64, o*in)
				if isMin {
					ArgMin(tkTo32(x), o, n, in, got32, last)
				} else {
					ArgMax(tkTo32(x), o, n, in, got32, last)
				}
				for oo := range o {
					for i := range in {
						best, bj := 0.0, -1
						for j := range n {
							v := x[(oo*n+j)*in+i]
							better := bj < 0 || (!isMin && v > best) || (isMin && v < best) || (last && v == best)
							if better {
								best, bj = v, j
							}
						}
						if got[oo*in+i] != int64(bj) || got32[oo*in+i] != int64(bj) {
							t.Fatalf("arg(min=%v,last=%v) %v at (%d,%d): got %d/%d want %d", isMin, last, sh, oo, i, got[oo*in+i], got32[oo*in+i], bj)
						}
					}
				}
			}
		}
	}
	y := make([]int64, 1)
	ArgMax([]float64{1, math.NaN(), 5, math.NaN()}, 1, 4, 1, y, false)
	if y[0] != 1 {
		t.Fatalf("ArgMax with NaN = %d, want 1", y[0])
	}
	ArgMax([]float64{1, math.NaN(), 5, math.NaN()}, 1, 4, 1, y, true)
	if y[0] != 3 {
		t.Fatalf("ArgMax with NaN, last = %d, want 3", y[0])
	}
}

func TestReduceAxes(t *testing.T) {
	for _, c := range []struct {
		shape, axes     []int
		outer, n, inner int
		ok              bool
	}{
		{[]int{2, 3, 4}, []int{1}, 2, 3, 4, true},
		{[]int{2, 3, 4}, []int{-1}, 6, 4, 1, true},
		{[]int{2, 3, 4}, []int{2, 1}, 2, 12, 1, true},
		{[]int{2, 3, 4}, []int{0, 2}, 0, 0, 0, false},
		{[]int{2, 1, 4}, []int{0, 2}, 1, 8, 1, true},
		{[]int{2, 3, 4}, nil, 24, 1, 1, true},
		{[]int{2, 3, 4}, []int{0, 1, 2}, 1, 24, 1, true},
		{[]int{2, 3, 4}, []int{3}, 0, 0, 0, false},
		{[]int{2, 3, 4}, []int{1, 1}, 2, 3, 4, true},
	} {
		o, n, i, ok := ReduceAxes(c.shape, c.axes)
		if ok != c.ok || (ok && (o != c.outer || n != c.n || i != c.inner)) {
			t.Errorf("ReduceAxes(%v, %v) = %d,%d,%d,%v want %d,%d,%d,%v", c.shape, c.axes, o, n, i, ok, c.outer, c.n, c.inner, c.ok)
		}
	}
}

func TestReduceSumAxes(t *testing.T) {
	r := tkRand(3)
	for trial := 0; trial < 60; trial++ {
		rank := 1 + r.IntN(4)
		shape := make([]int, rank)
		for d := range shape {
			shape[d] = []int{1, 2, 3, 5, 8}[r.IntN(5)]
		}
		if trial%7 == 0 {
			shape[rank-1] = 40
		}
		x := tkNormals(r, elemCount(shape))
		for mask := 0; mask < 1<<rank; mask++ {
			var axes []int
			for d := range rank {
				if mask&(1<<d) != 0 {
					axes = append(axes, d-rank*(d%2)) // some negative
				}
			}
			// reference: accumulate every element into its kept-index output
			kept := 1
			for d := range rank {
				if mask&(1<<d) == 0 {
					kept *= shape[d]
				}
			}
			want := make([]float64, kept)
			idx := make([]int, rank)
			for lin := range x {
				rem := lin
				for d := rank - 1; d >= 0; d-- {
					idx[d] = rem % shape[d]
					rem /= shape[d]
				}
				k := 0
				for d := range rank {
					if mask&(1<<d) == 0 {
						k = k*shape[d] + idx[d]
					}
				}
				want[k] += x[lin]
			}
			got := make([]float64, kept)
			ReduceSumAxes(x, shape, axes, got)
			tkCheck(t, fmt.Sprintf("ReduceSumAxes %v %v", shape, axes), got, want, 1e-12, 1e-12)
			got32 := make([]float32, kept)
			ReduceSumAxes(tkTo32(x), shape, axes, got32)
			tkCheck(t, fmt.Sprintf("ReduceSumAxes f32 %v %v", shape, axes), tkTo64(got32), want, 1e-5, 1e-5)
		}
	}
}

func TestReduceDeterminism(t *testing.T) {
	r := tkRand(4)
	x := tkTo32(tkNormals(r, 3*reduceRowBlock*20))
	for _, sh := range [][3]int{{1, len(x), 1}, {3, len(x) / 3, 1}, {60, reduceRowBlock, 1}, {4, 1024, len(x) / 4096}, {1, 20, len(x) / 20}} {
		o, n, in := sh[0], sh[1], sh[2]
		y := make([]float32, o*in)
		tkSameBits(t, fmt.Sprintf("ReduceSum %v", sh), func() []float32 { ReduceSum(x, o, n, in, y); return y })
		tkSameBits(t, fmt.Sprintf("ReduceLogSumExp %v", sh), func() []float32 { ReduceLogSumExp(x, o, n, in, y); return y })
	}
	shape := []int{6, 40, 5, 41}
	ys := make([]float32, 40*41)
	tkSameBits(t, "ReduceSumAxes", func() []float32 { ReduceSumAxes(x[:elemCount(shape)], shape, []int{0, 2}, ys); return ys })
}

func BenchmarkReduceSumRows(b *testing.B) {
	x := tkTo32(tkNormals(tkRand(5), 1024*1024))
	y := make([]float32, 1024)
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		ReduceSum(x, 1024, 1024, 1, y)
	}
}

func TestReduceZeroSizes(t *testing.T) {
	for _, sh := range [][3]int{{0, 3, 2}, {2, 3, 0}, {0, 0, 0}, {2, 0, 0}} {
		o, n, in := sh[0], sh[1], sh[2]
		x := make([]float32, o*n*in)
		y := make([]float32, o*in)
		for _, rc := range tkReducers {
			rc.f32(x, o, n, in, y)
		}
		ArgMax(x, o, 1, in, make([]int64, o*in), false) // n must be ≥ 1 for ArgMax
		Softmax(x, x, o, n, in)
		SoftmaxBackward(x, x, x, o, n, in)
	}
}
