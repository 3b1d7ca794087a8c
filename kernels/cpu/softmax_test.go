package cpu

import (
	"fmt"
	"math"
	"testing"
)

// tkRefSoftmax is the textbook softmax (or log-softmax) over the middle axis, in float64.
func tkRefSoftmax(x []float64, outer, n, inner int, logMode bool) []float64 {
	y := make([]float64, len(x))
	for o := range outer {
		for i := range inner {
			m := math.Inf(-1)
			for j := range n {
				m = math.Max(m, x[(o*n+j)*inner+i])
			}
			s := 0.0
			for j := range n {
				s += math.Exp(x[(o*n+j)*inner+i] - m)
			}
			for j := range n {
				k := (o*n+j)*inner + i
				if logMode {
					y[k] = x[k] - m - math.Log(s)
				} else {
					y[k] = math.Exp(x[k]-m) / s
				}
			}
		}
	}
	return y
}

var tkSoftmaxShapes = [][3]int{{1, 1, 1}, {1, 5, 1}, {3, 7, 1}, {2, 4, 3}, {3, 1, 5}, {2, 9, 300}, {2, 5000, 1}, {1, 3, 1}}

func TestSoftmaxForward(t *testing.T) {
	r := tkRand(10)
	for _, sh := range tkSoftmaxShapes {
		o, n, in := sh[0], sh[1], sh[2]
		x := tkNormals(r, o*n*in)
		for i := range x {
			x[i] *= 5
		}
		x[0] += 80 // far from the others: exercises max subtraction
		for _, logMode := range []bool{false, true} {
			want := tkRefSoftmax(x, o, n, in, logMode)
			y := make([]float64, len(x))
			y32 := make([]float32, len(x))
			if logMode {
				LogSoftmax(x, y, o, n, in)
				LogSoftmax(tkTo32(x), y32, o, n, in)
			} else {
				Softmax(x, y, o, n, in)
				Softmax(tkTo32(x), y32, o, n, in)
			}
			name := fmt.Sprintf("softmax(log=%v) %v", logMode, sh)
			tkCheck(t, name+" f64", y, want, 1e-12, 1e-13)
			tkCheck(t, name+" f32", tkTo64(y32), want, 2e-6, 1e-5)
		}
	}
	// in place, and overflow safety
	x := []float32{1000, 1001, 1002}
	Softmax(x, x, 1, 3, 1)
	want := tkRefSoftmax([]float64{1000, 1001, 1002}, 1, 3, 1, false)
	tkCheck(t, "softmax in place", tkTo64(x), want, 1e-6, 0)
}

func TestSoftmaxBackward(t *testing.T) {
	r := tkRand(11)
	for _, sh := range tkSoftmaxShapes[:6] {
		o, n, in := sh[0], sh[1], sh[2]
		x := tkNormals(r, o*n*in)
		w := tkNormals(r, o*n*in) // upstream gradient: loss = Σ w·f(x)
		for _, logMode := range []bool{false, true} {
			f := func(x []float64) float64 { return tkDot(w, tkRefSoftmax(x, o, n, in, logMode)) }
			y := make([]float64, len(x))
			dx := make([]float64, len(x))
			if logMode {
				LogSoftmax(x, y, o, n, in)
				LogSoftmaxBackward(y, w, dx, o, n, in)
			} else {
				Softmax(x, y, o, n, in)
				SoftmaxBackward(y, w, dx, o, n, in)
			}
			name := fmt.Sprintf("softmax backward(log=%v) %v", logMode, sh)
			if len(x) <= 500 {
				tkGradCheck(t, name, dx, tkFD(x, f))
			} else {
				// explicit Jacobian-vector product: dx_i = Σ_j w_j ∂y_j/∂x_i
				ref := tkRefSoftmax(x, o, n, in, false)
				want := make([]float64, len(x))
				for oo := range o {
					for i := range in {
						for a := range n {
							ka := (oo*n+a)*in + i
							for bb := range n {
								kb := (oo*n+bb)*in + i
								d := 0.0
								if a == bb {
									d = 1
								}
								if logMode {
									want[ka] += w[kb] * (d - ref[ka])
								} else {
									want[ka] += w[kb] * ref[kb] * (d - ref[ka])
								}
							}
						}
					}
				}
				tkCheck(t, name, dx, want, 1e-9, 1e-12)
			}
			// float32 against the float64 kernel
			y32, dx32 := make([]float32, len(x)), make([]float32, len(x))
			if logMode {
				LogSoftmax(tkTo32(x), y32, o, n, in)
				LogSoftmaxBackward(y32, tkTo32(w), dx32, o, n, in)
			} else {
				Softmax(tkTo32(x), y32, o, n, in)
				SoftmaxBackward(y32, tkTo32(w), dx32, o, n, in)
			}
			tkCheck(t, name+" f32", tkTo64(dx32), dx, 1e-4, 1e-5)
		}
	}
}

func TestSoftmaxDeterminism(t *testing.T) {
	r := tkRand(12)
	x := tkTo32(tkNormals(r, 64*3000))
	dy := tkTo32(tkNormals(r, len(x)))
	y := make([]float32, len(x))
	dx := make([]float32, len(x))
	for _, sh := range [][3]int{{64, 3000, 1}, {2, 32, 3000}} {
		tkSameBits(t, "Softmax", func() []float32 { Softmax(x, y, sh[0], sh[1], sh[2]); return y })
		tkSameBits(t, "SoftmaxBackward", func() []float32 { SoftmaxBackward(y, dy, dx, sh[0], sh[1], sh[2]); return dx })
		tkSameBits(t, "LogSoftmax", func() []float32 { LogSoftmax(x, y, sh[0], sh[1], sh[2]); return y })
	}
}

func BenchmarkSoftmax(b *testing.B) {
	const rows, n = 1024, 1024
	x := tkTo32(tkNormals(tkRand(13), rows*n))
	y := make([]float32, len(x))
	b.SetBytes(int64(8 * len(x))) // read x, write y
	for b.Loop() {
		Softmax(x, y, rows, n, 1)
	}
}

func BenchmarkSoftmaxBackward(b *testing.B) {
	const rows, n = 1024, 1024
	r := tkRand(14)
	y := tkTo32(tkNormals(r, rows*n))
	dy := tkTo32(tkNormals(r, rows*n))
	dx := make([]float32, len(y))
	b.SetBytes(int64(12 * len(y)))
	for b.Loop() {
		SoftmaxBackward(y, dy, dx, rows, n, 1)
	}
}
