package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"ppc.dev/ppc/internal/cputime"
)

// gemmNaive is the reference: a float64 triple loop over the same storage conventions.
func gemmNaive[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv T
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			out[i*n+j] = v
		}
	}
	return out
}

func randSlice[T Float](r *rand.Rand, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = T(r.Float64()*2 - 1)
	}
	return s
}

// sprinkleSpecials puts a NaN, a −0 and a +0 into every period elements of s (at 3, 5 and 6
// of each period): the values whose bits max, ReLU and the adds must keep.
func sprinkleSpecials[T Float](s []T, period int) {
	for i := range s {
		switch i % period {
		case 3:
			s[i] = T(math.NaN())
		case 5:
			s[i] = T(math.Copysign(0, -1))
		case 6:
			s[i] = 0
		}
	}
}

// gemmTol is the tolerance for a result of k-term dot products of values in [-1, 1].
func gemmTol[T Float](k int) float64 {
	if unsafe.Sizeof(T(0)) == 4 {
		return 1e-5 * float64(k+4)
	}
	return 1e-13 * float64(k+4)
}

func testGemmCase[T Float](t *testing.T, r *rand.Rand, transA, transB bool, m, n, k int, alpha, beta T, pad int) {
	t.Helper()
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+pad, bc+2*pad, n+3*pad
	a := randSlice[T](r, max(0, (ar-1)*lda+ac))
	b := randSlice[T](r, max(0, (br-1)*ldb+bc))
	c := randSlice[T](r, max(0, (m-1)*ldc+n))
	if beta == 0 {
		for i := range c {
			c[i] = T(math.NaN()) // BLAS semantics: beta == 0 must not read C
		}
	}
	want := gemmNaive(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	// Values between rows (ldc padding) must survive untouched.
	guard := append([]T(nil), c...)
	Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	tol := gemmTol[T](k) * (1 + math.Abs(float64(alpha)))
	for i := 0; i < m; i++ {
		for j := 0; j < ldc && i*ldc+j < len(c); j++ {
			got := float64(c[i*ldc+j])
			if j >= n {
				if c[i*ldc+j] != guard[i*ldc+j] && !(got != got) {
					t.Fatalf("tA=%v tB=%v m=%d n=%d k=%d: padding C[%d,%d] modified", transA, transB, m, n, k, i, j)
				}
				continue
			}
			if w := want[i*n+j]; !(math.Abs(got-w) <= tol*(1+math.Abs(w))) {
				t.Fatalf("tA=%v tB=%v m=%d n=%d k=%d alpha=%v beta=%v pad=%d: C[%d,%d]=%v want %v", transA, transB, m, n, k, alpha, beta, pad, i, j, got, w)
			}
		}
	}
}

func testGemmAll[T Float](t *testing.T, impl *gemmImpl) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{1, 3, 17, 33, 100}
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			for _, m := range sizes {
				for _, n := range sizes {
					for _, k := range []int{1, 17, 100} {
						testGemmCase[T](t, r, tA, tB, m, n, k, 1, 0, 0)
					}
				}
			}
			// Odd alpha/beta, padded leading dimensions, and sizes crossing kc/mc/nc blocks.
			for _, ab := range [][2]T{{1, 1}, {0.5, -2}, {-1.5, 0}, {0, 0.25}, {2, 1}} {
				testGemmCase[T](t, r, tA, tB, 33, 17, 65, ab[0], ab[1], 3)
				testGemmCase[T](t, r, tA, tB, impl.mr+1, impl.nr*2+3, impl.kc+7, ab[0], ab[1], 1)
			}
			testGemmCase[T](t, r, tA, tB, 257, 257, 257, 1, 0.5, 0)
			testGemmCase[T](t, r, tA, tB, impl.mc+5, 40, impl.kc*2+1, 1, 1, 2)
			testGemmCase[T](t, r, tA, tB, 3, 1, 3000, 1, 0, 0)
			testGemmCase[T](t, r, tA, tB, 0, 5, 5, 1, 0, 0)
			testGemmCase[T](t, r, tA, tB, 5, 5, 0, 1, 0, 0)
			testGemmCase[T](t, r, tA, tB, 5, 7, 0, 1, 0.5, 2)
		}
	}
	// Wide and tall thin matrices exercise the row/column parallel split.
	testGemmCase[T](t, r, false, false, 2, 3000, 40, 1, 0, 0)
	testGemmCase[T](t, r, false, true, 3000, 5, 40, 1, 0, 0)
}

// withImpl pins the GEMM kernel for T's size for the duration of f.
func withImpl[T Float](impl *gemmImpl, f func()) {
	if unsafe.Sizeof(T(0)) == 4 {
		old := gemmForceS
		gemmForceS = impl
		defer func() { gemmForceS = old }()
	} else {
		old := gemmForceD
		gemmForceD = impl
		defer func() { gemmForceD = old }()
	}
	f()
}

func TestGemm(t *testing.T) {
	for _, impl := range gemmAvailable(4) {
		t.Run("f32/"+impl.name, func(t *testing.T) { withImpl[float32](impl, func() { testGemmAll[float32](t, impl) }) })
		rows := gemmRowOrder(impl)
		t.Run("f32/"+impl.name+"/rows", func(t *testing.T) { withImpl[float32](rows, func() { testGemmAll[float32](t, rows) }) })
	}
	for _, impl := range gemmAvailable(8) {
		t.Run("f64/"+impl.name, func(t *testing.T) { withImpl[float64](impl, func() { testGemmAll[float64](t, impl) }) })
		rows := gemmRowOrder(impl)
		t.Run("f64/"+impl.name+"/rows", func(t *testing.T) { withImpl[float64](rows, func() { testGemmAll[float64](t, rows) }) })
	}
}

// gemmRowOrder is impl with every slab's tiles taken along C's rows (rowsSpan 1), and
// gemmColumnOrder the same kernel always down C's columns: the tests' GEMMs are far
// smaller than the span at which the tuned kernels switch.
func gemmRowOrder(impl *gemmImpl) *gemmImpl {
	v := *impl
	v.rowsSpan = 1
	return &v
}

func gemmColumnOrder(impl *gemmImpl) *gemmImpl {
	v := *impl
	v.rowsSpan = 0
	return &v
}

// Both tile orders give the same bits, and so do the kernels that walk a column or row of
// tiles in one call (kernDown, kernAcross) and a call per tile, with edge tiles on both
// sides, several k slabs and mc blocks, each beta mode, a bias and a parallel split.
func TestGemmTileOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 64))
	for _, sh := range [][3]int{{301, 77, 900}, {13, 530, 40}, {160, 33, 5}, {7, 300, 20}} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, impl := range gemmAvailable(4) {
			a, b, c0, bias := randSlice[float32](r, m*k), randSlice[float32](r, k*n), randSlice[float32](r, m*n), randSlice[float32](r, m)
			tiled := *impl
			tiled.kernDown, tiled.kernAcross = nil, nil
			for _, beta := range []float32{0, 1, 0.5} {
				for _, workers := range []int{1, 2} {
					var got [3][]float32
					for o, v := range []*gemmImpl{gemmColumnOrder(&tiled), gemmColumnOrder(impl), gemmRowOrder(impl)} {
						got[o] = append([]float32(nil), c0...)
						withImpl[float32](v, func() {
							gemmRunSrc(false, m, n, k, 1.5, a, k, nil, &gemmMatrixB[float32]{b: b, ldb: n}, beta, got[o], n, gemmEpi[float32]{bias: bias}, workers)
						})
					}
					for i := range got[0] {
						if got[0][i] != got[1][i] || got[0][i] != got[2][i] {
							t.Fatalf("%s %dx%dx%d beta %v, %d workers: c[%d] = %v a tile a call, %v down columns, %v along rows", impl.name, m, n, k, beta, workers, i, got[0][i], got[1][i], got[2][i])
						}
					}
				}
			}
		}
	}
}

// The half-width kernel and the column kernels for a panel's last columns give the bits of
// the full kernel's edge tile: remainders of the sliver that the column kernel takes (1 and
// 2), the four-column kernel (3 and 4), each after whole tiles and after a half tile, and
// the half tile's own (8 is stored straight to C), the wide tile that takes a last whole
// sliver and a full half one together (48 = 32 + 16, 49, 80), with ragged rows, several slabs and mc
// blocks (the column kernels' 8-, 4-, 2- and 1-sliver calls), each beta mode and a bias, in
// both tile orders.
func TestGemmHalfTiles(t *testing.T) {
	r := rand.New(rand.NewPCG(65, 66))
	for size, impls := range map[int][]*gemmImpl{4: gemmAvailable(4), 8: gemmAvailable(8)} {
		for _, impl := range impls {
			if impl.kernHalf == nil && impl.kernCol == nil {
				continue
			}
			whole := *impl
			whole.kernHalf, whole.kernCol, whole.kernCol4, whole.kernWide = nil, nil, nil, nil
			for _, n := range []int{1, 2, 3, 4, 8, 11, 12, 20, 35, 36, 48, 49, 50, 51, 52, 80, 196, 24 + 7} {
				for _, sh := range [][2]int{{13, 700}, {12, 5}, {301, 400}} {
					m, k := sh[0], sh[1]
					for _, beta := range []float64{0, 1, 0.5} {
						for _, bias := range []bool{false, true} {
							for _, order := range []func(*gemmImpl) *gemmImpl{gemmColumnOrder, gemmRowOrder} {
								half, full := order(impl), order(&whole)
								if size == 4 {
									checkHalf[float32](t, r, half, full, m, n, k, beta, bias)
								} else {
									checkHalf[float64](t, r, half, full, m, n, k, beta, bias)
								}
							}
						}
					}
				}
			}
		}
	}
}

// The short-row kernels give the full tile's bits on their rows in every mode, read only
// their rows of the packed A sliver (the others hold garbage here, not zeros), read the
// second B sliver bstride elements on, and write nothing else of C.
func TestGemmShortRows(t *testing.T) {
	r := rand.New(rand.NewPCG(67, 68))
	p := func(s []float32) unsafe.Pointer { return unsafe.Pointer(&s[0]) }
	for _, impl := range gemmAvailable(4) {
		if impl.kernRows2 == nil && impl.kernRows4 == nil {
			continue
		}
		mr, nr := impl.mr, impl.nr
		for _, k := range []int{1, 3, 4, 7, 64, 129} {
			const gap = 40 // between the two B slivers
			a, b := randSlice[float32](r, k*mr), randSlice[float32](r, 2*k*nr+gap)
			b2 := b[k*nr+gap:]
			bias := randSlice[float32](r, mr)
			ldc := 2*nr + 5
			c0 := randSlice[float32](r, mr*ldc)
			for mode := 0; mode <= 4; mode++ {
				want := append([]float32(nil), c0...)
				impl.kern(k, p(a), p(b), p(want), ldc, 1.5, 0.5, mode, p(bias))
				impl.kern(k, p(a), p(b2), p(want[nr:]), ldc, 1.5, 0.5, mode, p(bias))
				for _, short := range []struct {
					rows, cols int
					run        func(c []float32)
				}{
					{2, 2 * nr, func(c []float32) {
						impl.kernRows2(k, p(a), p(b), p(c), ldc, 1.5, 0.5, mode, p(bias), k*nr+gap)
					}},
					{4, nr, func(c []float32) { impl.kernRows4(k, p(a), p(b), p(c), ldc, 1.5, 0.5, mode, p(bias)) }},
				} {
					got := append([]float32(nil), c0...)
					short.run(got)
					for i := range got {
						w := c0[i]
						if i/ldc < short.rows && i%ldc < short.cols {
							w = want[i]
						}
						if got[i] != w && !(w != w && got[i] != got[i]) {
							t.Fatalf("%s k %d mode %d, %d rows: c[%d][%d] = %v, want %v", impl.name, k, mode, short.rows, i/ldc, i%ldc, got[i], w)
						}
					}
				}
			}
		}
	}
}

func checkHalf[T Float](t *testing.T, r *rand.Rand, half, full *gemmImpl, m, n, k int, beta float64, withBias bool) {
	t.Helper()
	a, b, c0 := randSlice[T](r, m*k), randSlice[T](r, k*n), randSlice[T](r, m*n)
	var bias []T
	if withBias {
		bias = randSlice[T](r, m)
	}
	var got [2][]T
	for o, v := range []*gemmImpl{full, half} {
		got[o] = append([]T(nil), c0...)
		withImpl[T](v, func() {
			gemmRunSrc(false, m, n, k, 1.5, a, k, nil, &gemmMatrixB[T]{b: b, ldb: n}, T(beta), got[o], n, gemmEpi[T]{bias: bias}, 1)
		})
	}
	for i := range got[0] {
		if got[0][i] != got[1][i] {
			t.Fatalf("%s %dx%dx%d beta %v bias %v: c[%d] = %v with the narrow kernels, %v with the full one", half.name, m, n, k, beta, withBias, i, got[1][i], got[0][i])
		}
	}
}

func TestGemmForceGeneric(t *testing.T) {
	gemmForceGeneric = true
	defer func() { gemmForceGeneric = false }()
	if got := gemmImplFor(4); got != &gemmGenericS {
		t.Fatalf("forced generic float32 kernel is %s", got.name)
	}
	r := rand.New(rand.NewPCG(3, 4))
	testGemmCase[float32](t, r, true, false, 37, 41, 300, 1, 0, 1)
	testGemmCase[float64](t, r, false, true, 37, 41, 300, 1, 0.5, 1)
}

type myFloat float32

func TestGemmDerivedType(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	testGemmCase[myFloat](t, r, false, false, 20, 30, 40, 1, 0, 0)
}

func TestGemmSerial(t *testing.T) {
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	r := rand.New(rand.NewPCG(7, 8))
	testGemmCase[float32](t, r, false, false, 100, 100, 100, 1, 0, 0)
}

func TestGemmGrid(t *testing.T) {
	impl := &gemmAVX2Like
	for _, tc := range []struct{ m, n, w, pm, pn int }{
		{1024, 1024, 2, 0, 0}, {2, 3000, 2, 1, 2}, {3000, 5, 2, 2, 1}, {6, 16, 2, 1, 1}, {100, 1000, 4, 1, 4}, {1000, 1000, 4, 0, 0},
	} {
		pm, pn := gemmGrid(impl, tc.m, tc.n, tc.w)
		if pm*pn > tc.w || (tc.pm != 0 && (pm != tc.pm || pn != tc.pn)) {
			t.Errorf("gemmGrid(%d,%d,%d) = %d×%d, want %d×%d", tc.m, tc.n, tc.w, pm, pn, tc.pm, tc.pn)
		}
	}
}

var gemmAVX2Like = gemmImpl{mr: 6, nr: 16, kc: 256, mc: 288, nc: 3072}

func TestBatchedGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, tc := range []struct {
		batch, m, n, k int
		bcastA, bcastB bool
		tA, tB         bool
	}{
		{5, 7, 9, 11, false, false, false, false},
		{4, 33, 17, 20, true, false, false, true},
		{6, 17, 33, 20, false, true, true, false},
		{3, 100, 100, 100, false, false, true, true},
		{1, 100, 64, 70, true, true, false, false},
	} {
		for _, beta := range []float64{0, 1, 0.5} {
			m, n, k := tc.m, tc.n, tc.k
			lda, ldb, ldc := k+1, n+2, n
			if tc.tA {
				lda = m + 1
			}
			if tc.tB {
				ldb = k + 2
			}
			sa, sb, sc := m*lda+5, k*ldb+3, m*ldc+1
			if tc.tA {
				sa = k*lda + 5
			}
			if tc.tB {
				sb = n*ldb + 3
			}
			if tc.bcastA {
				sa = 0
			}
			if tc.bcastB {
				sb = 0
			}
			a := randSlice[float64](r, (tc.batch-1)*sa+max(k, m)*lda)
			b := randSlice[float64](r, (tc.batch-1)*sb+max(k, n)*ldb)
			c := randSlice[float64](r, (tc.batch-1)*sc+m*ldc)
			want := make([][]float64, tc.batch)
			for i := range want {
				want[i] = gemmNaive(tc.tA, tc.tB, m, n, k, 1.5, a[i*sa:], lda, b[i*sb:], ldb, beta, c[i*sc:], ldc)
			}
			BatchedGemm(tc.batch, tc.tA, tc.tB, m, n, k, 1.5, a, lda, sa, b, ldb, sb, beta, c, ldc, sc)
			for bi := range want {
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						if got, w := c[bi*sc+i*ldc+j], want[bi][i*n+j]; math.Abs(got-w) > 1e-12*(1+math.Abs(w)) {
							t.Fatalf("%+v beta=%v: batch %d C[%d,%d]=%v want %v", tc, beta, bi, i, j, got, w)
						}
					}
				}
			}
		}
	}
	// strideC == 0: the GEMMs run in sequence on one C, accumulating with beta = 1.
	a := randSlice[float32](r, 3*4*5)
	b := randSlice[float32](r, 3*5*6)
	c := make([]float32, 4*6)
	BatchedGemm(3, false, false, 4, 6, 5, 1, a, 5, 20, b, 6, 30, 1, c, 6, 0)
	want := make([]float64, 4*6)
	for bi := 0; bi < 3; bi++ {
		w := gemmNaive(false, false, 4, 6, 5, 1, a[bi*20:], 5, b[bi*30:], 6, 0, c, 6)
		for i := range want {
			want[i] += w[i]
		}
	}
	for i := range want {
		if math.Abs(float64(c[i])-want[i]) > 1e-5 {
			t.Fatalf("strideC=0: C[%d]=%v want %v", i, c[i], want[i])
		}
	}
}

func TestBatchedGemmDegenerate(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	// k = 0: A and B are not read, so empty slices with any stride are fine; C = beta·C.
	BatchedGemm(2, false, false, 1, 2, 0, 1, nil, 1, 5, nil, 2, 7, 0.5, c, 2, 2)
	if c[0] != 0.5 || c[3] != 2 {
		t.Errorf("k=0 batched: C = %v", c)
	}
	BatchedGemm[float32](3, false, false, 0, 2, 4, 1, nil, 4, 9, nil, 2, 9, 0, nil, 2, 9)
}

func TestGemmPanics(t *testing.T) {
	for i, f := range []func(){
		func() {
			Gemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		},
		func() {
			Gemm(false, false, 2, 2, 2, 1, make([]float32, 4), 1, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		},
		func() { Gemm[float32](false, false, -1, 2, 2, 1, nil, 2, nil, 2, 0, nil, 2) },
		func() {
			BatchedGemm(2, false, false, 2, 2, 2, 1, make([]float32, 4), 2, 4, make([]float32, 8), 2, 4, 0, make([]float32, 8), 2, 4)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("case %d: no panic", i)
				}
			}()
			f()
		}()
	}
}

// ---- Benchmarks ----

func benchGemm[T Float](b *testing.B, transA, transB bool, m, n, k int) {
	r := rand.New(rand.NewPCG(1, 1))
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	a := randSlice[T](r, m*k)
	bb := randSlice[T](r, k*n)
	c := make([]T, m*n)
	// One call first, as the peers (bench/cpu.sh's numpy) warm up: the first faults in c's
	// pages and fills the scratch pool, which a few timed calls (-benchtime 3x) would count.
	Gemm(transA, transB, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
	b.ResetTimer()
	cpu0 := cputime.Process()
	for b.Loop() {
		Gemm(transA, transB, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
	}
	flop := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	// Per second of CPU time (all threads): on a loaded machine, what one core achieves
	// while it runs, which wall time hides.
	if cpu := cputime.Process() - cpu0; cpu > 0 {
		b.ReportMetric(flop/cpu.Seconds()/1e9, "GFLOP/cpu-s")
	}
}

// benchImpls runs f once per available float32 kernel and thread count.
func benchVariants(b *testing.B, size uintptr, f func(b *testing.B)) {
	for _, impl := range gemmAvailable(size) {
		for _, threads := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("%s/threads=%d", impl.name, threads), func(b *testing.B) {
				old := runtime.GOMAXPROCS(threads)
				defer runtime.GOMAXPROCS(old)
				if size == 4 {
					withImpl[float32](impl, func() { f(b) })
				} else {
					withImpl[float64](impl, func() { f(b) })
				}
			})
			if threads == runtime.GOMAXPROCS(0) {
				break
			}
		}
	}
}

func BenchmarkGemm1024(b *testing.B) {
	benchVariants(b, 4, func(b *testing.B) { benchGemm[float32](b, false, false, 1024, 1024, 1024) })
}

func BenchmarkGemm1024F64(b *testing.B) {
	benchVariants(b, 8, func(b *testing.B) { benchGemm[float64](b, false, false, 1024, 1024, 1024) })
}

// BenchmarkGemmTransformer is a BERT-base sized feed-forward layer: forward (X·W) and the
// backward pass's dX = dY·Wᵀ, which reads the weight transposed.
func BenchmarkGemmTransformer(b *testing.B) {
	b.Run("NN", func(b *testing.B) {
		benchVariants(b, 4, func(b *testing.B) { benchGemm[float32](b, false, false, 2048, 3072, 768) })
	})
	b.Run("NT", func(b *testing.B) {
		benchVariants(b, 4, func(b *testing.B) { benchGemm[float32](b, false, true, 2048, 768, 3072) })
	})
	b.Run("TN", func(b *testing.B) { // dW = Xᵀ·dY
		benchVariants(b, 4, func(b *testing.B) { benchGemm[float32](b, true, false, 768, 3072, 2048) })
	})
}

// BenchmarkGemmHead is GPT-2's tied head on 512 tokens (bench/cpu.sh's GPT-2-width step):
// the logits X·Wᵀ (NT), the input gradient dL·W (NN) and the weight gradient dLᵀ·X (TN),
// on GOMAXPROCS threads.
func BenchmarkGemmHead(b *testing.B) {
	const t, d, v = 512, 768, 50257
	b.Run("NT", func(b *testing.B) { benchGemm[float32](b, false, true, t, v, d) })
	b.Run("NN", func(b *testing.B) { benchGemm[float32](b, false, false, t, d, v) })
	b.Run("TN", func(b *testing.B) { benchGemm[float32](b, true, false, v, d, t) })
}

// BenchmarkGemmSquare is float32 N³ at the sizes bench/cpu.sh compares with OpenBLAS, on
// GOMAXPROCS threads with the fastest kernel: GFLOP/s.
func BenchmarkGemmSquare(b *testing.B) {
	for _, s := range []int{512, 1024, 2048, 4096} {
		b.Run(fmt.Sprint(s), func(b *testing.B) { benchGemm[float32](b, false, false, s, s, s) })
	}
}

func BenchmarkGemmSmall(b *testing.B) {
	for _, s := range []int{8, 32, 64, 128} {
		b.Run(fmt.Sprint(s), func(b *testing.B) { benchGemm[float32](b, false, false, s, s, s) })
	}
}

func TestGemmAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	a, b, c := randSlice[float32](r, 64*64), randSlice[float32](r, 64*64), make([]float32, 64*64)
	Gemm(false, false, 64, 64, 64, 1, a, 64, b, 64, 0, c, 64) // warm the pool
	if n := testing.AllocsPerRun(20, func() { Gemm(false, false, 64, 64, 64, 1, a, 64, b, 64, 0, c, 64) }); n > 1 {
		t.Errorf("small serial Gemm allocates %v times per call", n)
	}
	big, bb, cc := randSlice[float32](r, 512*512), randSlice[float32](r, 512*512), make([]float32, 512*512)
	Gemm(false, false, 512, 512, 512, 1, big, 512, bb, 512, 0, cc, 512)
	if n := testing.AllocsPerRun(5, func() { Gemm(false, false, 512, 512, 512, 1, big, 512, bb, 512, 0, cc, 512) }); n > 8 {
		t.Errorf("parallel Gemm allocates %v times per call", n)
	}
}

// The packing code relies on mc and nc being multiples of mr and nr (a packed block is
// sized for whole slivers).
func TestGemmImplBlocking(t *testing.T) {
	for _, size := range []uintptr{4, 8} {
		for _, impl := range gemmAvailable(size) {
			if impl.mc%impl.mr != 0 || impl.nc%impl.nr != 0 || impl.kc < 1 {
				t.Errorf("%s: mc=%d nc=%d kc=%d not multiples of mr=%d nr=%d", impl.name, impl.mc, impl.nc, impl.kc, impl.mr, impl.nr)
			}
		}
	}
}

// A GEMM split over workers gives the serial GEMM's bits, whichever way C is split: by rows
// with op(B) packed once and shared (gemmSharedB: m ≫ n, here with two panels, two slabs and
// edge tiles on both axes), by columns taken from a counter, with a bias, any beta and
// transposed operands, for every kernel.
func TestGemmParallelMatchesSerial(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, sh := range [][3]int{{701, 780, 270}, {300, 50, 600}, {40, 2100, 70}, {9, 1500, 33}} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}} {
			for _, beta := range []float64{0, 0.5} {
				for _, impl := range gemmAvailable(4) {
					withImpl[float32](impl, func() { checkGemmParallel[float32](t, r, impl.name, tr[0], tr[1], m, n, k, float32(beta)) })
				}
				for _, impl := range gemmAvailable(8) {
					withImpl[float64](impl, func() { checkGemmParallel[float64](t, r, impl.name, tr[0], tr[1], m, n, k, beta) })
				}
			}
		}
	}
}

// A GEMM of at least gemmPanelsMin rows and columns whose op(B) is over gemmSharedBMax is
// split by rows against op(B) packed a panel and slab at a time (gemmSharedB's phases):
// two panels, two slabs, edge tiles, transposed operands, a bias, the serial GEMM's bits.
func TestGemmSharedPanelsMatchesSerial(t *testing.T) {
	r := rand.New(rand.NewPCG(69, 70))
	const m, n, k = 1030, 3100, 1400
	if k*gemmSplit(n, 1, 16) <= gemmSharedBMax {
		t.Fatalf("%d×%d B fits gemmSharedBMax: the test needs one that does not", k, n)
	}
	for _, tr := range [][2]bool{{false, false}, {true, true}} {
		impl := gemmImplFor(4)
		checkGemmParallel[float32](t, r, impl.name, tr[0], tr[1], m, n, k, 0.5)
	}
}

func checkGemmParallel[T Float](t *testing.T, r *rand.Rand, impl string, transA, transB bool, m, n, k int, beta T) {
	t.Helper()
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	a, b, c0, bias := randSlice[T](r, m*k), randSlice[T](r, k*n), randSlice[T](r, m*n), randSlice[T](r, m)
	for _, withBias := range []bool{false, true} {
		var bi []T
		if withBias {
			bi = bias
		}
		want := append([]T(nil), c0...)
		gemmRunSrc(transA, m, n, k, 1.5, a, lda, nil, &gemmMatrixB[T]{trans: transB, b: b, ldb: ldb}, beta, want, n, gemmEpi[T]{bias: bi}, 1)
		for _, workers := range []int{2, 3} {
			got := append([]T(nil), c0...)
			gemmRunSrc(transA, m, n, k, 1.5, a, lda, nil, &gemmMatrixB[T]{trans: transB, b: b, ldb: ldb}, beta, got, n, gemmEpi[T]{bias: bi}, workers)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s %T %dx%dx%d trans %v,%v beta %v bias %v, %d workers: c[%d] = %v, serial %v", impl, got[0], m, n, k, transA, transB, beta, withBias, workers, i, got[i], want[i])
				}
			}
		}
	}
}

// With relu the micro-kernels' bias stores take max(·, 0) (modes 5 and 6): the bits of the
// same GEMM without it followed by ReluRow's maximum, +0 for a −0 sum and for NaN, on every
// kernel (whole, half, wide and column tiles, short rows, tiles walked down a column or
// along a row), several k slabs, each beta and one to three workers, float32 and float64.
// With a residual too (modes 7 and 8) they give the GEMM's bits followed by adding the
// residual and then the ReLU, on a C whose rows are longer than n.
func TestGemmReluModes(t *testing.T) {
	r := rand.New(rand.NewPCG(67, 68))
	for _, impl := range gemmAvailable(4) {
		for _, order := range []func(*gemmImpl) *gemmImpl{gemmColumnOrder, gemmRowOrder} {
			checkRelu[float32](t, r, order(impl))
		}
	}
	for _, impl := range gemmAvailable(8) {
		checkRelu[float64](t, r, impl)
	}
}

func checkRelu[T Float](t *testing.T, r *rand.Rand, impl *gemmImpl) {
	t.Helper()
	for _, sh := range [][3]int{{13, 49, 300}, {301, 196, 40}, {20, 80, 5}, {9, 36, 700}, {16, 51, 33}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c0, bias := randSlice[T](r, m*k), randSlice[T](r, k*n), randSlice[T](r, m*n), randSlice[T](r, m)
		// Row 0 comes to −0 with a negative alpha (its products 0, alpha·(+0), a −0 bias) and
		// row 1 to NaN; most others straddle 0 (the random values are centred on it).
		for j := range b {
			b[j] = -T(math.Abs(float64(b[j])))
		}
		for p := range k {
			a[p] = 0
		}
		bias[0] = T(math.Copysign(0, -1))
		a[k+k/2] = T(math.NaN())
		// The residual, on a C of rows ldc = n + 3 long (row 2's a −0 for −0 sums).
		ldc := n + 3
		res, cl := randSlice[T](r, m*ldc), randSlice[T](r, m*ldc)
		for i := range res {
			switch {
			case i/ldc == 2:
				res[i] = T(math.Copysign(0, -1))
			case i%23 == 5:
				res[i] = T(math.NaN())
			}
		}
		for _, alpha := range []T{1.5, -1.5} {
			for _, beta := range []T{0, 1, 0.5} {
				for _, workers := range []int{1, 2, 3} {
					want, got := append([]T(nil), c0...), append([]T(nil), c0...)
					wantR, gotR := append([]T(nil), cl...), append([]T(nil), cl...)
					withImpl[T](impl, func() {
						gemmRunSrc(false, m, n, k, alpha, a, k, nil, &gemmMatrixB[T]{b: b, ldb: n}, beta, want, n, gemmEpi[T]{bias: bias}, workers)
						gemmRunSrc(false, m, n, k, alpha, a, k, nil, &gemmMatrixB[T]{b: b, ldb: n}, beta, got, n, gemmEpi[T]{bias: bias, relu: true}, workers)
						gemmRunSrc(false, m, n, k, alpha, a, k, nil, &gemmMatrixB[T]{b: b, ldb: n}, beta, wantR, ldc, gemmEpi[T]{bias: bias}, workers)
						gemmRunSrc(false, m, n, k, alpha, a, k, nil, &gemmMatrixB[T]{b: b, ldb: n}, beta, gotR, ldc, gemmEpi[T]{bias: bias, relu: true, res: res}, workers)
					})
					if beta == 0 && alpha < 0 && !math.Signbit(float64(want[0])) {
						t.Fatalf("%s %dx%dx%d: row 0 came to %v before the ReLU, want −0", impl.name, m, n, k, want[0])
					}
					for i := range m {
						row := wantR[i*ldc : i*ldc+n]
						ArithVV(OpAdd, row, res[i*ldc:], row)
						ReluRow(row, row)
					}
					for i := range gotR {
						if math.Float64bits(float64(gotR[i])) != math.Float64bits(float64(wantR[i])) {
							t.Fatalf("%s %dx%dx%d alpha %v beta %v, %d workers, residual: c[%d] = %v, the GEMM, add and ReLU give %v", impl.name, m, n, k, alpha, beta, workers, i, gotR[i], wantR[i])
						}
					}
					ReluRow(want, want)
					for i := range got {
						if math.Float64bits(float64(got[i])) != math.Float64bits(float64(want[i])) {
							t.Fatalf("%s %dx%dx%d alpha %v beta %v, %d workers: c[%d] = %v, the GEMM then ReLU gives %v", impl.name, m, n, k, alpha, beta, workers, i, got[i], want[i])
						}
					}
					if beta == 0 && (got[0] != 0 || math.Signbit(float64(got[0])) || got[n] != 0) {
						t.Fatalf("%s %dx%dx%d: the −0 and NaN rows gave %v and %v, want +0", impl.name, m, n, k, got[0], got[n])
					}
				}
			}
		}
	}
}
