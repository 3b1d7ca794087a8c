package cpu

import (
	"fmt"
	"math"
)

// Reductions over the middle axis of an (outer, n, inner) view of a row-major tensor: the output
// has outer·inner elements, y[o·inner+i] = reduce_j x[(o·n+j)·inner+i].
//
// Determinism contract. The summation order of every output depends only on the shape, never on
// GOMAXPROCS or the work split:
//   - inner == 1 (contiguous rows): the row is cut into fixed blocks of reduceRowBlock elements; each
//     block is summed with eight interleaved accumulators (element k goes to accumulator k mod 8,
//     combined as ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7))), and the block sums are added left to
//     right. Long rows may compute block sums on several goroutines, but they are always combined
//     in the same order, so the bits are the same.
//   - inner > 1 (strided): each output is accumulated sequentially over j = 0 … n−1.
// Goroutines only ever split independent outputs (or independent blocks as above).

const (
	reduceRowBlock = 4096  // fixed block of a contiguous reduction; part of the determinism contract
	reduceColBlock = 256   // outputs handled together by a strided reduction
	reduceGrain    = 32768 // elements per goroutine below which reductions stay on one goroutine
)

// ReduceAxes maps a reduction over axes of shape onto the (outer, n, inner) view used by the
// Reduce kernels. Axes may be negative (counted from the end) and in any order; duplicates are
// ignored. ok is false when the reduced axes are not contiguous (kept axes of size 1 between
// them do not count), in which case use ReduceSumAxes or transpose first. An empty axes list
// reduces nothing: n = 1.
func ReduceAxes(shape []int, axes []int) (outer, n, inner int, ok bool) {
	red, err := normAxes(len(shape), axes)
	if err != nil {
		return 0, 0, 0, false
	}
	first, last := -1, -1
	for d, r := range red {
		if r {
			if first < 0 {
				first = d
			}
			last = d
		}
	}
	outer, n, inner = 1, 1, 1
	if first < 0 {
		return elemCount(shape), 1, 1, true
	}
	for d := first; d <= last; d++ {
		if !red[d] && shape[d] != 1 {
			return 0, 0, 0, false
		}
		n *= shape[d]
	}
	outer = elemCount(shape[:first])
	inner = elemCount(shape[last+1:])
	return outer, n, inner, true
}

// normAxes returns a per-dimension "reduced" mask for axes (negative allowed, duplicates ok).
func normAxes(rank int, axes []int) ([]bool, error) {
	red := make([]bool, rank)
	for _, a := range axes {
		if a < 0 {
			a += rank
		}
		if a < 0 || a >= rank {
			return nil, fmt.Errorf("axis %d out of range for rank %d", a, rank)
		}
		red[a] = true
	}
	return red, nil
}

func elemCount(s []int) int {
	p := 1
	for _, v := range s {
		p *= v
	}
	return p
}

func checkReduce(name string, lx, ly, outer, n, inner int) {
	if outer < 0 || n < 0 || inner < 0 || lx != outer*n*inner || ly != outer*inner {
		panic(fmt.Sprintf("cpu.%s: len(x)=%d len(y)=%d do not match outer=%d n=%d inner=%d",
			name, lx, ly, outer, n, inner))
	}
}

// reduceOp describes one reduction for the shared driver.
type reduceOp[T Float] struct {
	block   func(x []T) T                     // reduce a non-empty contiguous block
	combine func(acc, v T) T                  // fold block results left to right
	cols    func(x []T, n, stride int, y []T) // y[i] = reduce_j x[j·stride+i] (n ≥ 1)
	finish  func(v T) T                       // per output after reduction; nil = identity
	empty   T                                 // output for n == 0
}

// foldRow reduces a contiguous row blockwise; with par it may compute block results on several
// goroutines (the fold order, hence the result, is the same).
func foldRow[T Float](op *reduceOp[T], x []T, par bool) T {
	nb := (len(x) + reduceRowBlock - 1) / reduceRowBlock
	if par && nb >= 8 {
		part := make([]T, nb)
		Parallel(nb, 2, func(lo, hi int) {
			for b := lo; b < hi; b++ {
				part[b] = op.block(x[b*reduceRowBlock : min((b+1)*reduceRowBlock, len(x))])
			}
		})
		acc := part[0]
		for _, v := range part[1:] {
			acc = op.combine(acc, v)
		}
		return acc
	}
	acc := op.block(x[:min(reduceRowBlock, len(x))])
	for lo := reduceRowBlock; lo < len(x); lo += reduceRowBlock {
		acc = op.combine(acc, op.block(x[lo:min(lo+reduceRowBlock, len(x))]))
	}
	return acc
}

func runReduce[T Float](name string, op *reduceOp[T], x []T, outer, n, inner int, y []T) {
	checkReduce(name, len(x), len(y), outer, n, inner)
	if len(y) == 0 {
		return
	}
	if n == 0 {
		for i := range y {
			y[i] = op.empty
		}
		return
	}
	fin := op.finish
	if inner == 1 {
		if outer < 4 && n >= 8*reduceRowBlock {
			for o := range outer {
				v := foldRow(op, x[o*n:(o+1)*n], true)
				if fin != nil {
					v = fin(v)
				}
				y[o] = v
			}
			return
		}
		Parallel(outer, max(1, reduceGrain/n), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				v := foldRow(op, x[o*n:(o+1)*n], false)
				if fin != nil {
					v = fin(v)
				}
				y[o] = v
			}
		})
		return
	}
	nb := (inner + reduceColBlock - 1) / reduceColBlock
	Parallel(outer*nb, max(1, reduceGrain/(n*min(inner, reduceColBlock))), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			o, b := u/nb, u%nb
			i0, i1 := b*reduceColBlock, min((b+1)*reduceColBlock, inner)
			base := o * n * inner
			ys := y[o*inner+i0 : o*inner+i1]
			op.cols(x[base+i0:base+(n-1)*inner+i1], n, inner, ys)
			if fin != nil {
				for i, v := range ys {
					ys[i] = fin(v)
				}
			}
		}
	})
}

// ---- block and column primitives ----

func sumBlock[T Float](x []T) T {
	var s0, s1, s2, s3, s4, s5, s6, s7 T
	i := 0
	for ; i+8 <= len(x); i += 8 {
		v := x[i : i+8 : i+8]
		s0 += v[0]
		s1 += v[1]
		s2 += v[2]
		s3 += v[3]
		s4 += v[4]
		s5 += v[5]
		s6 += v[6]
		s7 += v[7]
	}
	for k, v := range x[i:] {
		switch k {
		case 0:
			s0 += v
		case 1:
			s1 += v
		case 2:
			s2 += v
		case 3:
			s3 += v
		case 4:
			s4 += v
		case 5:
			s5 += v
		case 6:
			s6 += v
		}
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func sumSqBlock[T Float](x []T) T {
	var s0, s1, s2, s3, s4, s5, s6, s7 T
	i := 0
	for ; i+8 <= len(x); i += 8 {
		v := x[i : i+8 : i+8]
		s0 += v[0] * v[0]
		s1 += v[1] * v[1]
		s2 += v[2] * v[2]
		s3 += v[3] * v[3]
		s4 += v[4] * v[4]
		s5 += v[5] * v[5]
		s6 += v[6] * v[6]
		s7 += v[7] * v[7]
	}
	for k, v := range x[i:] {
		v *= v
		switch k {
		case 0:
			s0 += v
		case 1:
			s1 += v
		case 2:
			s2 += v
		case 3:
			s3 += v
		case 4:
			s4 += v
		case 5:
			s5 += v
		case 6:
			s6 += v
		}
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func fabsT[T Float](v T) T {
	if v < 0 {
		return -v
	}
	return v
}

func sumAbsBlock[T Float](x []T) T {
	var s0, s1, s2, s3 T
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		s0 += fabsT(v[0])
		s1 += fabsT(v[1])
		s2 += fabsT(v[2])
		s3 += fabsT(v[3])
	}
	for k, v := range x[i:] {
		switch k {
		case 0:
			s0 += fabsT(v)
		case 1:
			s1 += fabsT(v)
		case 2:
			s2 += fabsT(v)
		}
	}
	return (s0 + s1) + (s2 + s3)
}

// dotBlock is Σ a[i]·b[i] with the same accumulator pattern as sumBlock.
func dotBlock[T Float](a, b []T) T {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 T
	i := 0
	for ; i+8 <= len(a); i += 8 {
		u := a[i : i+8 : i+8]
		v := b[i : i+8 : i+8]
		s0 += u[0] * v[0]
		s1 += u[1] * v[1]
		s2 += u[2] * v[2]
		s3 += u[3] * v[3]
		s4 += u[4] * v[4]
		s5 += u[5] * v[5]
		s6 += u[6] * v[6]
		s7 += u[7] * v[7]
	}
	for k := i; k < len(a); k++ {
		v := a[k] * b[k]
		switch k - i {
		case 0:
			s0 += v
		case 1:
			s1 += v
		case 2:
			s2 += v
		case 3:
			s3 += v
		case 4:
			s4 += v
		case 5:
			s5 += v
		case 6:
			s6 += v
		}
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

// sumRow sums a contiguous row with the blocked order of the determinism contract.
func sumRow[T Float](x []T) T {
	if len(x) == 0 {
		return 0
	}
	acc := sumBlock(x[:min(reduceRowBlock, len(x))])
	for lo := reduceRowBlock; lo < len(x); lo += reduceRowBlock {
		acc += sumBlock(x[lo:min(lo+reduceRowBlock, len(x))])
	}
	return acc
}

// dotRow is Σ a·b in the blocked order.
func dotRow[T Float](a, b []T) T {
	if len(a) == 0 {
		return 0
	}
	acc := dotBlock(a[:min(reduceRowBlock, len(a))], b)
	for lo := reduceRowBlock; lo < len(a); lo += reduceRowBlock {
		acc += dotBlock(a[lo:min(lo+reduceRowBlock, len(a))], b[lo:])
	}
	return acc
}

// sumSqRow is Σ x² in the blocked order.
func sumSqRow[T Float](x []T) T {
	if len(x) == 0 {
		return 0
	}
	acc := sumSqBlock(x[:min(reduceRowBlock, len(x))])
	for lo := reduceRowBlock; lo < len(x); lo += reduceRowBlock {
		acc += sumSqBlock(x[lo:min(lo+reduceRowBlock, len(x))])
	}
	return acc
}

// maxBlock propagates NaN; among equal values the first wins.
func maxBlock[T Float](x []T) T {
	m := x[0]
	for _, v := range x[1:] {
		if v > m || v != v {
			m = v
			if v != v {
				return v
			}
		}
	}
	return m
}

func minBlock[T Float](x []T) T {
	m := x[0]
	for _, v := range x[1:] {
		if v < m || v != v {
			m = v
			if v != v {
				return v
			}
		}
	}
	return m
}

func prodBlock[T Float](x []T) T {
	p := x[0]
	for _, v := range x[1:] {
		p *= v
	}
	return p
}

func redAdd[T Float](a, b T) T { return a + b }
func redMul[T Float](a, b T) T { return a * b }
func redMax[T Float](a, b T) T {
	if b > a || b != b {
		if a != a {
			return a
		}
		return b
	}
	return a
}
func redMin[T Float](a, b T) T {
	if b < a || b != b {
		if a != a {
			return a
		}
		return b
	}
	return a
}

func sumCols[T Float](x []T, n, stride int, y []T) {
	m := len(y)
	copy(y, x[:m])
	for j := 1; j < n; j++ {
		r := x[j*stride : j*stride+m]
		for i, v := range r {
			y[i] += v
		}
	}
}

func sumSqCols[T Float](x []T, n, stride int, y []T) {
	m := len(y)
	for i, v := range x[:m] {
		y[i] = v * v
	}
	for j := 1; j < n; j++ {
		r := x[j*stride : j*stride+m]
		for i, v := range r {
			y[i] += v * v
		}
	}
}

func sumAbsCols[T Float](x []T, n, stride int, y []T) {
	m := len(y)
	for i, v := range x[:m] {
		y[i] = fabsT(v)
	}
	for j := 1; j < n; j++ {
		r := x[j*stride : j*stride+m]
		for i, v := range r {
			y[i] += fabsT(v)
		}
	}
}

func prodCols[T Float](x []T, n, stride int, y []T) {
	m := len(y)
	copy(y, x[:m])
	for j := 1; j < n; j++ {
		r := x[j*stride : j*stride+m]
		for i, v := range r {
			y[i] *= v
		}
	}
}

func maxCols[T Float](x []T, n, stride int, y []T) {
	m := len(y)
	copy(y, x[:m])
	for j := 1; j < n; j++ {
		r := x[j*stride : j*stride+m]
		for i, v := range r {
			if v > y[i] || (v != v && y[i] == y[i]) {
				y[i] = v
			}
		}
	}
}

func minCols[T Float](x []T, n, stride int, y []T) {
	m := len(y)
	copy(y, x[:m])
	for j := 1; j < n; j++ {
		r := x[j*stride : j*stride+m]
		for i, v := range r {
			if v < y[i] || (v != v && y[i] == y[i]) {
				y[i] = v
			}
		}
	}
}

// ---- exported reductions ----

// ReduceSum sets y[o,i] = Σ_j x[o,j,i]. An empty reduction (n = 0) gives 0.
func ReduceSum[T Float](x []T, outer, n, inner int, y []T) {
	runReduce("ReduceSum", &reduceOp[T]{block: sumBlock[T], combine: redAdd[T], cols: sumCols[T]}, x, outer, n, inner, y)
}

// ReduceMean sets y[o,i] = (Σ_j x[o,j,i]) / n (NaN for n = 0).
func ReduceMean[T Float](x []T, outer, n, inner int, y []T) {
	nn := T(n)
	runReduce("ReduceMean", &reduceOp[T]{block: sumBlock[T], combine: redAdd[T], cols: sumCols[T],
		finish: func(v T) T { return v / nn }, empty: T(math.NaN())}, x, outer, n, inner, y)
}

// ReduceSumSquare sets y = Σ_j x².
func ReduceSumSquare[T Float](x []T, outer, n, inner int, y []T) {
	runReduce("ReduceSumSquare", &reduceOp[T]{block: sumSqBlock[T], combine: redAdd[T], cols: sumSqCols[T]}, x, outer, n, inner, y)
}

// ReduceL1 sets y = Σ_j |x|.
func ReduceL1[T Float](x []T, outer, n, inner int, y []T) {
	runReduce("ReduceL1", &reduceOp[T]{block: sumAbsBlock[T], combine: redAdd[T], cols: sumAbsCols[T]}, x, outer, n, inner, y)
}

// ReduceL2 sets y = √(Σ_j x²).
func ReduceL2[T Float](x []T, outer, n, inner int, y []T) {
	runReduce("ReduceL2", &reduceOp[T]{block: sumSqBlock[T], combine: redAdd[T], cols: sumSqCols[T],
		finish: func(v T) T { return T(math.Sqrt(float64(v))) }}, x, outer, n, inner, y)
}

// ReduceProd sets y = Π_j x (1 for n = 0), multiplying in j order.
func ReduceProd[T Float](x []T, outer, n, inner int, y []T) {
	runReduce("ReduceProd", &reduceOp[T]{block: prodBlock[T], combine: redMul[T], cols: prodCols[T], empty: 1}, x, outer, n, inner, y)
}

// ReduceMax sets y = max_j x; NaN propagates; −Inf for n = 0.
func ReduceMax[T Float](x []T, outer, n, inner int, y []T) {
	runReduce("ReduceMax", &reduceOp[T]{block: maxBlock[T], combine: redMax[T], cols: maxCols[T], empty: T(math.Inf(-1))}, x, outer, n, inner, y)
}

// ReduceMin sets y = min_j x; NaN propagates; +Inf for n = 0.
func ReduceMin[T Float](x []T, outer, n, inner int, y []T) {
	runReduce("ReduceMin", &reduceOp[T]{block: minBlock[T], combine: redMin[T], cols: minCols[T], empty: T(math.Inf(1))}, x, outer, n, inner, y)
}

// lseFinish combines a running max m and Σ e^(x−m) into log Σ e^x.
func lseFinish[T Float](m, s T) T {
	if math.IsInf(float64(m), 0) || m != m {
		return m
	}
	return m + Log(s)
}

// expSumRow returns Σ_k e^(x[k]−m) in the blocked order (the exponentials by ExpShift, a
// block at a time through a stack buffer).
func expSumRow[T Float](x []T, m T) T {
	var acc T
	var buf [reduceRowBlock]T
	for lo := 0; lo < len(x); lo += reduceRowBlock {
		blk := buf[:min(reduceRowBlock, len(x)-lo)]
		ExpShift(blk, x[lo:], m)
		acc += sum4(blk)
	}
	return acc
}

// sum4 returns Σ v in four interleaved partial sums, ((s0 + s1) + (s2 + s3)): the order
// softmax and the log-sum-exp rows have always summed in (s_j adds elements j, j+4, …).
func sum4[T Float](v []T) T {
	var s0, s1, s2, s3 T
	i := 0
	for ; i+4 <= len(v); i += 4 {
		w := v[i : i+4 : i+4]
		s0 += w[0]
		s1 += w[1]
		s2 += w[2]
		s3 += w[3]
	}
	for k, e := range v[i:] {
		switch k {
		case 0:
			s0 += e
		case 1:
			s1 += e
		case 2:
			s2 += e
		}
	}
	return (s0 + s1) + (s2 + s3)
}

func maxRow[T Float](x []T) T {
	m := x[0]
	for _, v := range x[1:] {
		if v > m || v != v {
			m = v
			if v != v {
				return v
			}
		}
	}
	return m
}

// ReduceLogSumExp sets y = log Σ_j e^x, computed as m + log Σ e^(x−m) with m the maximum
// (−Inf for n = 0; ±Inf and NaN maxima pass through).
func ReduceLogSumExp[T Float](x []T, outer, n, inner int, y []T) {
	checkReduce("ReduceLogSumExp", len(x), len(y), outer, n, inner)
	if len(y) == 0 {
		return
	}
	if n == 0 {
		for i := range y {
			y[i] = T(math.Inf(-1))
		}
		return
	}
	if inner == 1 {
		Parallel(outer, max(1, reduceGrain/(4*n)), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				row := x[o*n : (o+1)*n]
				m := maxRow(row)
				y[o] = lseFinish(m, expSumRow(row, m))
			}
		})
		return
	}
	nb := (inner + reduceColBlock - 1) / reduceColBlock
	Parallel(outer*nb, max(1, reduceGrain/(4*n*min(inner, reduceColBlock))), func(lo, hi int) {
		var sbuf [reduceColBlock]T
		for u := lo; u < hi; u++ {
			o, b := u/nb, u%nb
			i0, i1 := b*reduceColBlock, min((b+1)*reduceColBlock, inner)
			base := o * n * inner
			ys := y[o*inner+i0 : o*inner+i1]
			xs := x[base+i0 : base+(n-1)*inner+i1]
			maxCols(xs, n, inner, ys)
			s := sbuf[:len(ys)]
			clear(s)
			for j := range n {
				r := xs[j*inner : j*inner+len(ys)]
				for i, v := range r {
					s[i] += Exp(v - ys[i])
				}
			}
			for i := range ys {
				ys[i] = lseFinish(ys[i], s[i])
			}
		}
	})
}

// ArgMax sets y[o,i] to the index j of the largest x[o,j,i]. Ties resolve to the first index, or
// to the last with selectLast (ONNX select_last_index). NaN counts as larger than every number.
// It panics if n == 0.
func ArgMax[T Float](x []T, outer, n, inner int, y []int64, selectLast bool) {
	argReduce("ArgMax", x, outer, n, inner, y, selectLast, false)
}

// ArgMin is ArgMax for the smallest value (NaN still wins: it propagates as in ReduceMin).
func ArgMin[T Float](x []T, outer, n, inner int, y []int64, selectLast bool) {
	argReduce("ArgMin", x, outer, n, inner, y, selectLast, true)
}

// argBetter reports whether v should replace the current best m (strictly better, or equal with
// last).
func argBetter[T Float](v, m T, isMin, last bool) bool {
	if m != m { // NaN best: only another NaN with last
		return last && v != v
	}
	if v != v {
		return true
	}
	if isMin {
		return v < m || (last && v == m)
	}
	return v > m || (last && v == m)
}

func argReduce[T Float](name string, x []T, outer, n, inner int, y []int64, last, isMin bool) {
	if outer < 0 || n < 0 || inner < 0 || len(x) != outer*n*inner || len(y) != outer*inner {
		panic(fmt.Sprintf("cpu.%s: len(x)=%d len(y)=%d do not match outer=%d n=%d inner=%d",
			name, len(x), len(y), outer, n, inner))
	}
	if len(y) == 0 {
		return
	}
	if n == 0 {
		panic("cpu." + name + ": reduction over an empty axis")
	}
	if inner == 1 {
		Parallel(outer, max(1, reduceGrain/n), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				row := x[o*n : (o+1)*n]
				m, k := row[0], 0
				for j, v := range row {
					if argBetter(v, m, isMin, last) {
						m, k = v, j
					}
				}
				y[o] = int64(k)
			}
		})
		return
	}
	nb := (inner + reduceColBlock - 1) / reduceColBlock
	Parallel(outer*nb, max(1, reduceGrain/(n*min(inner, reduceColBlock))), func(lo, hi int) {
		var best [reduceColBlock]T
		for u := lo; u < hi; u++ {
			o, b := u/nb, u%nb
			i0, i1 := b*reduceColBlock, min((b+1)*reduceColBlock, inner)
			base := o * n * inner
			ys := y[o*inner+i0 : o*inner+i1]
			bs := best[:len(ys)]
			copy(bs, x[base+i0:base+i1])
			clear(ys)
			for j := 1; j < n; j++ {
				r := x[base+j*inner+i0 : base+j*inner+i1]
				for i, v := range r {
					if argBetter(v, bs[i], isMin, last) {
						bs[i], ys[i] = v, int64(j)
					}
				}
			}
		}
	})
}

// ReduceSumAxes sums x (of shape) over any set of axes (negative allowed, any order, not
// necessarily contiguous) into y, whose length is the product of the kept dimensions (the
// keepdims and non-keepdims layouts are the same bytes). This is the "sum over broadcast
// dimensions" of the autodiff. Contiguous axes use ReduceSum; otherwise each output is
// accumulated over the reduced indices in row-major order.
func ReduceSumAxes[T Float](x []T, shape []int, axes []int, y []T) {
	if outer, n, inner, ok := ReduceAxes(shape, axes); ok {
		ReduceSum(x, outer, n, inner, y)
		return
	}
	red, err := normAxes(len(shape), axes)
	if err != nil {
		panic("cpu.ReduceSumAxes: " + err.Error())
	}
	if len(x) != elemCount(shape) {
		panic(fmt.Sprintf("cpu.ReduceSumAxes: len(x)=%d, shape %v", len(x), shape))
	}
	// Drop size-1 dims and merge neighbours of the same kind.
	var dims []int
	var isRed []bool
	for d, s := range shape {
		if s == 1 {
			continue
		}
		if k := len(dims) - 1; k >= 0 && isRed[k] == red[d] {
			dims[k] *= s
			continue
		}
		dims = append(dims, s)
		isRed = append(isRed, red[d])
	}
	strides := make([]int, len(dims))
	st := 1
	for d := len(dims) - 1; d >= 0; d-- {
		strides[d] = st
		st *= dims[d]
	}
	var kd, ks, rd, rs []int // kept / reduced dims and their input strides
	for d := range dims {
		if isRed[d] {
			rd, rs = append(rd, dims[d]), append(rs, strides[d])
		} else {
			kd, ks = append(kd, dims[d]), append(ks, strides[d])
		}
	}
	if len(y) != elemCount(kd) {
		panic(fmt.Sprintf("cpu.ReduceSumAxes: len(y)=%d, want %d", len(y), elemCount(kd)))
	}
	if len(x) == 0 {
		clear(y)
		return
	}
	nred := elemCount(rd)
	if !isRed[len(dims)-1] {
		// Innermost dim kept: for each output row of L contiguous elements, add the matching
		// input rows for every reduced index in row-major order.
		L := kd[len(kd)-1]
		orows := len(y) / L
		okd, oks := kd[:len(kd)-1], ks[:len(ks)-1]
		Parallel(orows, max(1, reduceGrain/(L*nred)), func(lo, hi int) {
			ridx := make([]int, len(rd))
			for r := lo; r < hi; r++ {
				base := linOffset(r, okd, oks)
				yr := y[r*L : (r+1)*L]
				clear(yr)
				clear(ridx)
				off := 0
				for range nred {
					xr := x[base+off : base+off+L]
					for i, v := range xr {
						yr[i] += v
					}
					off = odoNext(ridx, rd, rs, off)
				}
			}
		})
		return
	}
	// Innermost dim reduced: each output sums contiguous rows of length L for every outer
	// reduced index in row-major order.
	L := rd[len(rd)-1]
	ord, ors := rd[:len(rd)-1], rs[:len(rs)-1]
	nrow := nred / L
	Parallel(len(y), max(1, reduceGrain/nred), func(lo, hi int) {
		ridx := make([]int, len(ord))
		for q := lo; q < hi; q++ {
			base := linOffset(q, kd, ks)
			clear(ridx)
			off := 0
			var acc T
			for range nrow {
				acc += sumRow(x[base+off : base+off+L])
				off = odoNext(ridx, ord, ors, off)
			}
			y[q] = acc
		}
	})
}

// linOffset maps a row-major linear index over dims to Σ idx[d]·strides[d].
func linOffset(lin int, dims, strides []int) int {
	off := 0
	for d := len(dims) - 1; d >= 0; d-- {
		off += (lin % dims[d]) * strides[d]
		lin /= dims[d]
	}
	return off
}

// odoNext advances idx (row-major over dims) by one and returns the updated offset
// Σ idx[d]·strides[d], given the current offset.
func odoNext(idx, dims, strides []int, off int) int {
	for d := len(dims) - 1; d >= 0; d-- {
		idx[d]++
		off += strides[d]
		if idx[d] < dims[d] {
			return off
		}
		off -= idx[d] * strides[d]
		idx[d] = 0
	}
	return off
}
