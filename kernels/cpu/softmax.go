package cpu

import "fmt"

// Softmax and LogSoftmax over the middle axis of an (outer, n, inner) view (n = the softmax axis,
// inner = the product of the dimensions after it; inner = 1 for the usual last-axis softmax).
// Both subtract the maximum first, so they never overflow; sums follow the determinism contract
// of reduce.go (blocked for contiguous rows, sequential over j for strided ones).

func checkSoftmax(name string, lens []int, outer, n, inner int) {
	want := outer * n * inner
	for _, l := range lens {
		if outer < 0 || n < 0 || inner < 0 || l != want {
			panic(fmt.Sprintf("cpu.%s: lengths %v do not match outer=%d n=%d inner=%d", name, lens, outer, n, inner))
		}
	}
}

// softmaxRowsGrain is the element count a goroutine should get at least (exp is ~2 ns).
const softmaxGrain = 8192

// Softmax sets y = e^(x−max) / Σ e^(x−max) along the middle axis. x and y may alias.
func Softmax[T Float](x, y []T, outer, n, inner int) {
	softmaxImpl("Softmax", x, y, outer, n, inner, false)
}

// LogSoftmax sets y = x − max − log Σ e^(x−max) along the middle axis. x and y may alias.
func LogSoftmax[T Float](x, y []T, outer, n, inner int) {
	softmaxImpl("LogSoftmax", x, y, outer, n, inner, true)
}

func softmaxImpl[T Float](name string, x, y []T, outer, n, inner int, logMode bool) {
	checkSoftmax(name, []int{len(x), len(y)}, outer, n, inner)
	if len(x) == 0 {
		return
	}
	if inner == 1 {
		Parallel(outer, max(1, softmaxGrain/n), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				softmaxRow(x[o*n:(o+1)*n], y[o*n:(o+1)*n], logMode)
			}
		})
		return
	}
	nb := (inner + reduceColBlock - 1) / reduceColBlock
	Parallel(outer*nb, max(1, softmaxGrain/(n*min(inner, reduceColBlock))), func(lo, hi int) {
		var mbuf, sbuf [reduceColBlock]T
		for u := lo; u < hi; u++ {
			o, b := u/nb, u%nb
			i0, i1 := b*reduceColBlock, min((b+1)*reduceColBlock, inner)
			base := o*n*inner + i0
			w := i1 - i0
			m, s := mbuf[:w], sbuf[:w]
			maxCols(x[base:base+(n-1)*inner+w], n, inner, m)
			clear(s)
			for j := range n {
				xr := x[base+j*inner : base+j*inner+w]
				yr := y[base+j*inner : base+j*inner+w]
				for i, v := range xr {
					e := Exp(v - m[i])
					s[i] += e
					if !logMode {
						yr[i] = e
					}
				}
			}
			if logMode {
				for i := range s {
					s[i] = m[i] + Log(s[i])
				}
				for j := range n {
					xr := x[base+j*inner : base+j*inner+w]
					yr := y[base+j*inner : base+j*inner+w]
					for i, v := range xr {
						yr[i] = v - s[i]
					}
				}
				continue
			}
			for i := range s {
				s[i] = 1 / s[i]
			}
			for j := range n {
				yr := y[base+j*inner : base+j*inner+w]
				for i := range yr {
					yr[i] *= s[i]
				}
			}
		}
	})
}

// softmaxRow computes one contiguous softmax (or log-softmax) row.
func softmaxRow[T Float](x, y []T, logMode bool) {
	m := maxRow(x)
	if logMode {
		lse := m + Log(expSumRow(x, m))
		for i, v := range x {
			y[i] = v - lse
		}
		return
	}
	y = y[:len(x)]
	var acc T
	for lo := 0; lo < len(x); lo += reduceRowBlock {
		xb := x[lo:min(lo+reduceRowBlock, len(x))]
		yb := y[lo : lo+len(xb)]
		ExpShift(yb, xb, m)
		acc += sum4(yb)
	}
	inv := 1 / acc
	for i := range y {
		y[i] *= inv
	}
}

// SoftmaxBackward sets dx = y·(dy − Σ_j dy·y) along the middle axis, given the forward output y.
// dx may alias dy.
func SoftmaxBackward[T Float](y, dy, dx []T, outer, n, inner int) {
	softmaxBackwardImpl("SoftmaxBackward", y, dy, dx, outer, n, inner, false)
}

// LogSoftmaxBackward sets dx = dy − e^y·Σ_j dy along the middle axis, given the forward output
// y = LogSoftmax(x). dx may alias dy.
func LogSoftmaxBackward[T Float](y, dy, dx []T, outer, n, inner int) {
	softmaxBackwardImpl("LogSoftmaxBackward", y, dy, dx, outer, n, inner, true)
}

func softmaxBackwardImpl[T Float](name string, y, dy, dx []T, outer, n, inner int, logMode bool) {
	checkSoftmax(name, []int{len(y), len(dy), len(dx)}, outer, n, inner)
	if len(y) == 0 {
		return
	}
	if inner == 1 {
		Parallel(outer, max(1, softmaxGrain/n), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				yr, dyr, dxr := y[o*n:(o+1)*n], dy[o*n:(o+1)*n], dx[o*n:(o+1)*n]
				if logMode {
					s := sumRow(dyr)
					for i, v := range yr {
						dxr[i] = dyr[i] - Exp(v)*s
					}
				} else {
					s := dotRow(dyr, yr)
					for i, v := range yr {
						dxr[i] = v * (dyr[i] - s)
					}
				}
			}
		})
		return
	}
	nb := (inner + reduceColBlock - 1) / reduceColBlock
	Parallel(outer*nb, max(1, softmaxGrain/(n*min(inner, reduceColBlock))), func(lo, hi int) {
		var sbuf [reduceColBlock]T
		for u := lo; u < hi; u++ {
			o, b := u/nb, u%nb
			i0, i1 := b*reduceColBlock, min((b+1)*reduceColBlock, inner)
			base := o*n*inner + i0
			w := i1 - i0
			s := sbuf[:w]
			clear(s)
			for j := range n {
				yr := y[base+j*inner : base+j*inner+w]
				dyr := dy[base+j*inner : base+j*inner+w]
				if logMode {
					for i, v := range dyr {
						s[i] += v
					}
				} else {
					for i, v := range dyr {
						s[i] += v * yr[i]
					}
				}
			}
			for j := range n {
				yr := y[base+j*inner : base+j*inner+w]
				dyr := dy[base+j*inner : base+j*inner+w]
				dxr := dx[base+j*inner : base+j*inner+w]
				if logMode {
					for i, v := range yr {
						dxr[i] = dyr[i] - Exp(v)*s[i]
					}
				} else {
					for i, v := range yr {
						dxr[i] = v * (dyr[i] - s[i])
					}
				}
			}
		}
	})
}
