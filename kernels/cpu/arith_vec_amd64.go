//go:build amd64 && !purego

package cpu

// Implemented in arith_amd64.s (AVX; n a multiple of 8).

//go:noescape
func addVV32(o, a, b *float32, n int)

//go:noescape
func subVV32(o, a, b *float32, n int)

//go:noescape
func mulVV32(o, a, b *float32, n int)

//go:noescape
func divVV32(o, a, b *float32, n int)

//go:noescape
func addVS32(o, a *float32, s float32, n int)

//go:noescape
func subVS32(o, a *float32, s float32, n int)

//go:noescape
func mulVS32(o, a *float32, s float32, n int)

//go:noescape
func divVS32(o, a *float32, s float32, n int)

//go:noescape
func addSV32(o, b *float32, s float32, n int)

//go:noescape
func subSV32(o, b *float32, s float32, n int)

//go:noescape
func mulSV32(o, b *float32, s float32, n int)

//go:noescape
func divSV32(o, b *float32, s float32, n int)

//go:noescape
func sqrt32(o, a *float32, n int)

//go:noescape
func relu32(o, a *float32, n int)

//go:noescape
func scaleShift32(o, a *float32, mul, add float32, n int)

//go:noescape
func scaleShiftRelu32(o, a *float32, mul, add float32, n int)

// arithForceGo makes the row kernels compute every element in Go (tests compare the two).
var arithForceGo bool

var (
	vv32 = [...]func(o, a, b *float32, n int){OpAdd: addVV32, OpSub: subVV32, OpMul: mulVV32, OpDiv: divVV32}
	vs32 = [...]func(o, a *float32, s float32, n int){OpAdd: addVS32, OpSub: subVS32, OpMul: mulVS32, OpDiv: divVS32}
	sv32 = [...]func(o, b *float32, s float32, n int){OpAdd: addSV32, OpSub: subSV32, OpMul: mulSV32, OpDiv: divSV32}
)

// The *Vec32 functions run the assembly over the longest prefix of o that is a multiple of 8
// elements and return its length: 0 when the operation has no assembly (or without AVX2).

func arithVVVec32(op ArithOp, a, b, o []float32) int {
	n := len(o) &^ 7
	if n == 0 || op > OpDiv || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	vv32[op](&o[0], &a[0], &b[0], n)
	return n
}

func arithVSVec32(op ArithOp, a []float32, s float32, o []float32) int {
	n := len(o) &^ 7
	if n == 0 || op > OpDiv || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	vs32[op](&o[0], &a[0], s, n)
	return n
}

func arithSVVec32(op ArithOp, s float32, b, o []float32) int {
	n := len(o) &^ 7
	if n == 0 || op > OpDiv || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	sv32[op](&o[0], &b[0], s, n)
	return n
}

func sqrtVec32(a, o []float32) int {
	n := len(o) &^ 7
	if n == 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	sqrt32(&o[0], &a[0], n)
	return n
}

func reluVec32(a, o []float32) int {
	n := len(o) &^ 7
	if n == 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	relu32(&o[0], &a[0], n)
	return n
}

func scaleShiftVec32(a, o []float32, mul, add float32) int {
	n := len(o) &^ 7
	if n == 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	scaleShift32(&o[0], &a[0], mul, add, n)
	return n
}

//go:noescape
func scaleShiftCols32(d *float32, stride int, mul, add *float32, rows, relu int, mask *uint32)

// scaleShiftColsVec32 applies row p's mul[p] and add[p] (and a ReLU) in place to the first
// cols ≤ 16 of the 16 columns at d[p·stride:] for p < len(mul), leaving the others +0, and
// reports whether it could (AVX2).
func scaleShiftColsVec32(d []float32, stride, cols int, mul, add []float32, relu bool) bool {
	rows := len(mul)
	if rows == 0 || !gemmHasAVX2FMA || arithForceGo {
		return rows == 0
	}
	_ = d[(rows-1)*stride+15]
	_ = add[rows-1]
	r := 0
	if relu {
		r = 1
	}
	var mask [16]uint32
	for i := range min(cols, 16) {
		mask[i] = ^uint32(0)
	}
	scaleShiftCols32(&d[0], stride, &mul[0], &add[0], rows, r, &mask[0])
	return true
}

func scaleShiftReluVec32(a, o []float32, mul, add float32) int {
	n := len(o) &^ 7
	if n == 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	scaleShiftRelu32(&o[0], &a[0], mul, add, n)
	return n
}

//go:noescape
func dot32(a, b *float32, n int) float32

// dotVec32 returns Σ a[i]·b[i] over the longest prefix that is a multiple of 32 elements and
// its length (0, 0 without AVX2 and FMA).
func dotVec32(a, b []float32) (float32, int) {
	n := len(a) &^ 31
	if n == 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0, 0
	}
	return dot32(&a[0], &b[0], n), n
}

//go:noescape
func maxNaN32(o, x *float32, n int)

// maxNaNVec32 runs maxNaN32 over the longest prefix of o that is a multiple of 8 and returns
// its length.
func maxNaNVec32(o, x []float32) int {
	n := len(o) &^ 7
	if n == 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	i := 0
	if arithHasRange { // sixteen lanes at a time, then eight (a row of 56: 48 + 8)
		i = n &^ 15
		if i > 0 {
			maxRange32(&o[0], &x[0], i)
		}
	}
	if i < n {
		maxNaN32(&o[i], &x[i], n-i)
	}
	return n
}

// arithHasRange: the CPU has AVX-512DQ's VRANGEPS (and the zmm state, gemmHasAVX512), with
// which the max kernels take one instruction a max where MAXNAN takes six: GoogLeNet's
// pools spend most of their time in these passes.
var arithHasRange = func() bool {
	_, ebx7, _, _ := gemmCPUID(7, 0)
	return gemmHasAVX512 && ebx7&(1<<17) != 0
}()

//go:noescape
func maxRange32(o, x *float32, n int)

//go:noescape
func maxRange3_32(o, a, b, c *float32, n int)

//go:noescape
func maxNaN3_32(o, a, b, c *float32, n int)

// maxNaN3Vec32 runs maxNaN3_32 over the longest prefix of o that is a multiple of 8 and
// returns its length.
func maxNaN3Vec32(o, a, b, c []float32) int {
	n := len(o) &^ 7
	if n == 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	i := 0
	if arithHasRange {
		i = n &^ 15
		if i > 0 {
			maxRange3_32(&o[0], &a[0], &b[0], &c[0], i)
		}
	}
	if i < n {
		maxNaN3_32(&o[i], &a[i], &b[i], &c[i], n-i)
	}
	return n
}

//go:noescape
func maxNaN3s2_32(o, v *float32, n int)

// maxNaN3s2Vec32 runs maxNaN3s2_32 over the longest prefix of o that is a multiple of 8 and
// whose reads stay inside v, and returns its length.
func maxNaN3s2Vec32(o, v []float32) int {
	n := min(len(o), (len(v)-2)/2) &^ 7
	if n <= 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0
	}
	_ = v[2*n+1] // bounds: the assembly trusts these
	i := 0
	if arithHasRange {
		if i = n &^ 15; i > 0 {
			maxRange3s2_32(&o[0], &v[0], i)
		}
	}
	if i < n {
		maxNaN3s2_32(&o[i], &v[2*i], n-i)
	}
	return n
}

//go:noescape
func maxRange3s2_32(o, v *float32, n int)

//go:noescape
func maxRange2s2_32(o, v *float32, n int)

//go:noescape
func gatherEvenRows32(o, v *float32, wo, rows, ldv int)

// gatherEvenRowsVec32 sets o[r·wo + j] = v[r·ld + 2j] for r < rows, j < wo in one call
// (gatherEvenRows32, AVX-512) and reports whether it did; false, writing nothing, elsewhere.
func gatherEvenRowsVec32(o, v []float32, wo, rows, ld int) bool {
	if !gemmHasAVX512 || arithForceGo || wo <= 0 || rows <= 0 {
		return false
	}
	_ = o[rows*wo-1] // bounds: the assembly trusts these
	_ = v[(rows-1)*ld+2*(wo-1)]
	gatherEvenRows32(&o[0], &v[0], wo, rows, ld)
	return true
}

// max2s2Vec32 runs maxRange2s2_32 (VRANGEPS: o[j] = max(v[2j], v[2j+1]), sixteen a round)
// over the longest prefix of o that is a multiple of 16, and returns its length.
func max2s2Vec32(o, v []float32) int {
	n := min(len(o), len(v)/2) &^ 15
	if n <= 0 || !arithHasRange || arithForceGo {
		return 0
	}
	_ = v[2*n-1] // bounds: the assembly trusts these
	maxRange2s2_32(&o[0], &v[0], n)
	return n
}

//go:noescape
func dot32x2(a, b0, b1 *float32, n int) (s0, s1 float32)

// dotVec32x2 is dotVec32 of a with two rows at once (the same bits as two calls).
func dotVec32x2(a, b0, b1 []float32) (float32, float32, int) {
	n := len(a) &^ 31
	if n == 0 || !gemmHasAVX2FMA || arithForceGo {
		return 0, 0, 0
	}
	s0, s1 := dot32x2(&a[0], &b0[0], &b1[0], n)
	return s0, s1, n
}

//go:noescape
func dot32x4(a, b0, b1, b2, b3 *float32, n int) (s0, s1, s2, s3 float32)

// dotVec32x4 is dotVec32 of a with four rows at once (the same bits as four calls); n is 0
// without AVX-512.
func dotVec32x4(a, b0, b1, b2, b3 []float32) (s [4]float32, n int) {
	n = len(a) &^ 31
	if n == 0 || !gemmHasAVX512 || arithForceGo {
		return s, 0
	}
	s[0], s[1], s[2], s[3] = dot32x4(&a[0], &b0[0], &b1[0], &b2[0], &b3[0], n)
	return s, n
}
