package cpu

import (
	"math"
	"unsafe"
)

// Scalar math for the runtime's fused elementwise interpreter, and slice-level apply helpers.
//
// Every function is generic over Float. The float32 instantiation computes in float64 and rounds
// once at the end, so its result is within about one float32 ulp of the exact value; the float64
// instantiation is as accurate as the math package functions it is built on (a few ulp). Each
// activation F has a derivative FGrad(x) = dF/dx evaluated at the input x (not at the output),
// which is what the autodiff's backward instructions multiply by the incoming gradient.
// Definitions and default constants follow the ONNX operator documents.

// isFloat32Type reports whether T is a 4-byte float; the compiler folds it per instantiation.
func isFloat32Type[T Float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}

// Exp returns e**x. For float32 it computes in float64 with a 32-entry table of 2^(j/32) and a
// cubic polynomial (the scheme of glibc's expf): within 1 ulp, correctly rounded for all but
// about 0.02% of inputs, overflow to +Inf and underflow to 0 like expf, and several times faster
// than math.Exp. For float64 it is math.Exp.
func Exp[T Float](x T) T {
	if isFloat32Type[T]() {
		return T(exp32(float32(x)))
	}
	return T(math.Exp(float64(x)))
}

const (
	exp32N     = 32
	exp32InvL  = exp32N / 0.6931471805599453 // N/ln2
	exp32L     = 0.6931471805599453 / exp32N // ln2/N
	exp32Round = 6755399441055744.0          // 1.5·2^52: adding and subtracting it rounds to an integer
)

// exp32Table holds the bits of 2^(j/32), j = 0…31.
var exp32Table = func() (t [exp32N]uint64) {
	for j := range t {
		t[j] = math.Float64bits(math.Exp2(float64(j) / exp32N))
	}
	return
}()

// exp32 is expf computed in float64: x = (32m + j)·ln2/32 + r with |r| ≤ ln2/64, so that
// e^x = 2^m · 2^(j/32) · e^r, with e^r from its Taylor polynomial of degree 3 (truncation error
// below 6e-10 relative).
func exp32(x float32) float32 {
	if !(x > -104) { // also NaN
		if x != x {
			return x
		}
		return 0
	}
	if x > 89 {
		return float32(math.Inf(1))
	}
	xd := float64(x)
	kf := (xd*exp32InvL + exp32Round) - exp32Round
	r := xd - kf*exp32L
	k := int64(kf)
	p := 1 + r*(1+r*(0.5+r*(1.0/6)))
	sc := math.Float64frombits(exp32Table[k&(exp32N-1)] + uint64(k>>5)<<52)
	return float32(sc * p)
}

// Log returns the natural logarithm (computed in float64).
func Log[T Float](x T) T { return T(math.Log(float64(x))) }

// Erf is the error function (computed in float64).
func Erf[T Float](x T) T { return T(math.Erf(float64(x))) }

// ErfGrad is d erf(x)/dx = 2/√π · e^(−x²).
func ErfGrad[T Float](x T) T {
	xd := float64(x)
	return T(2 / math.SqrtPi * math.Exp(-xd*xd))
}

// Tanh is the hyperbolic tangent; TanhGrad its derivative 1 − tanh²(x).
func Tanh[T Float](x T) T { return T(math.Tanh(float64(x))) }

// TanhGrad is 1 − tanh²(x).
func TanhGrad[T Float](x T) T {
	t := math.Tanh(float64(x))
	return T(1 - t*t)
}

func sigmoid64(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// Sigmoid is 1/(1+e^−x), evaluated without overflow for large |x|.
func Sigmoid[T Float](x T) T { return T(sigmoid64(float64(x))) }

// SigmoidGrad is σ(x)(1 − σ(x)).
func SigmoidGrad[T Float](x T) T {
	s := sigmoid64(float64(x))
	return T(s * (1 - s))
}

// Relu is max(x, 0); NaN stays NaN.
func Relu[T Float](x T) T {
	if x < 0 {
		return 0
	}
	return x
}

// ReluGrad is 1 for x > 0 and 0 otherwise (0 at x = 0, as PyTorch).
func ReluGrad[T Float](x T) T {
	if x > 0 {
		return 1
	}
	return 0
}

// LeakyRelu is x for x ≥ 0 and alpha·x otherwise (ONNX default alpha 0.01).
func LeakyRelu[T Float](x, alpha T) T {
	if x < 0 {
		return alpha * x
	}
	return x
}

// LeakyReluGrad is 1 for x > 0 and alpha otherwise.
func LeakyReluGrad[T Float](x, alpha T) T {
	if x > 0 {
		return 1
	}
	return alpha
}

// Elu is x for x > 0 and alpha·(e^x − 1) otherwise (ONNX default alpha 1).
func Elu[T Float](x, alpha T) T {
	if x > 0 {
		return x
	}
	return T(float64(alpha) * math.Expm1(float64(x)))
}

// EluGrad is 1 for x > 0 and alpha·e^x otherwise.
func EluGrad[T Float](x, alpha T) T {
	if x > 0 {
		return 1
	}
	return T(float64(alpha) * math.Exp(float64(x)))
}

// The ONNX Selu defaults (the float32 values of the constants of Klambauer et al. 2017).
const (
	SeluAlpha = 1.67326319217681884765625
	SeluGamma = 1.05070102214813232421875
)

// Selu is γ·x for x > 0 and γ·α·(e^x − 1) otherwise, with the ONNX default α and γ.
func Selu[T Float](x T) T {
	if x > 0 {
		return T(SeluGamma * float64(x))
	}
	return T(SeluGamma * SeluAlpha * math.Expm1(float64(x)))
}

// SeluGrad is γ for x > 0 and γ·α·e^x otherwise.
func SeluGrad[T Float](x T) T {
	if x > 0 {
		return SeluGamma
	}
	return T(SeluGamma * SeluAlpha * math.Exp(float64(x)))
}

// Celu is max(0, x) + min(0, α·(e^(x/α) − 1)) (ONNX default alpha 1).
func Celu[T Float](x, alpha T) T {
	if x > 0 {
		return x
	}
	a := float64(alpha)
	return T(a * math.Expm1(float64(x)/a))
}

// CeluGrad is 1 for x > 0 and e^(x/α) otherwise.
func CeluGrad[T Float](x, alpha T) T {
	if x > 0 {
		return 1
	}
	return T(math.Exp(float64(x) / float64(alpha)))
}

func softplus64(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// Softplus is ln(1 + e^x), evaluated without overflow or cancellation.
func Softplus[T Float](x T) T { return T(softplus64(float64(x))) }

// SoftplusGrad is σ(x).
func SoftplusGrad[T Float](x T) T { return Sigmoid(x) }

// Softsign is x / (1 + |x|).
func Softsign[T Float](x T) T {
	xd := float64(x)
	return T(xd / (1 + math.Abs(xd)))
}

// SoftsignGrad is 1 / (1 + |x|)².
func SoftsignGrad[T Float](x T) T {
	d := 1 + math.Abs(float64(x))
	return T(1 / (d * d))
}

// HardSigmoid is max(0, min(1, alpha·x + beta)) (ONNX defaults alpha 0.2, beta 0.5).
func HardSigmoid[T Float](x, alpha, beta T) T {
	v := float64(alpha)*float64(x) + float64(beta)
	return T(max(0, min(1, v)))
}

// HardSigmoidGrad is alpha inside the linear region 0 < alpha·x+beta < 1 and 0 outside.
func HardSigmoidGrad[T Float](x, alpha, beta T) T {
	v := float64(alpha)*float64(x) + float64(beta)
	if v > 0 && v < 1 {
		return alpha
	}
	return 0
}

// HardSwish is x·HardSigmoid(x, 1/6, 1/2).
func HardSwish[T Float](x T) T {
	xd := float64(x)
	return T(xd * max(0, min(1, xd/6+0.5)))
}

// HardSwishGrad is 0 for x < −3, 1 for x > 3 and x/3 + 1/2 between.
func HardSwishGrad[T Float](x T) T {
	switch {
	case x < -3:
		return 0
	case x > 3:
		return 1
	}
	return T(float64(x)/3 + 0.5)
}

// ThresholdedRelu is x for x > alpha and 0 otherwise (ONNX default alpha 1).
func ThresholdedRelu[T Float](x, alpha T) T {
	if x > alpha {
		return x
	}
	return 0
}

// ThresholdedReluGrad is 1 for x > alpha and 0 otherwise.
func ThresholdedReluGrad[T Float](x, alpha T) T {
	if x > alpha {
		return 1
	}
	return 0
}

// Mish is x·tanh(softplus(x)).
func Mish[T Float](x T) T {
	xd := float64(x)
	return T(xd * math.Tanh(softplus64(xd)))
}

// MishGrad is tanh(sp) + x·(1 − tanh²(sp))·σ(x) with sp = softplus(x).
func MishGrad[T Float](x T) T {
	xd := float64(x)
	t := math.Tanh(softplus64(xd))
	return T(t + xd*(1-t*t)*sigmoid64(xd))
}

// Silu (swish with alpha 1) is x·σ(x).
func Silu[T Float](x T) T {
	xd := float64(x)
	return T(xd * sigmoid64(xd))
}

// SiluGrad is σ(x)·(1 + x·(1 − σ(x))).
func SiluGrad[T Float](x T) T {
	xd := float64(x)
	s := sigmoid64(xd)
	return T(s * (1 + xd*(1-s)))
}

// Gelu is the exact GELU, 0.5·x·(1 + erf(x/√2)), evaluated as 0.5·x·erfc(−x/√2) so that it
// keeps full relative accuracy for large negative x.
func Gelu[T Float](x T) T {
	xd := float64(x)
	return T(0.5 * xd * math.Erfc(-xd/math.Sqrt2))
}

const invSqrt2Pi = 0.3989422804014327 // 1/√(2π)

// GeluGrad is Φ(x) + x·φ(x), with Φ, φ the standard normal CDF and density.
func GeluGrad[T Float](x T) T {
	xd := float64(x)
	return T(0.5*math.Erfc(-xd/math.Sqrt2) + xd*invSqrt2Pi*math.Exp(-0.5*xd*xd))
}

const (
	geluTanhC = 0.7978845608028654 // √(2/π)
	geluTanhA = 0.044715
)

// GeluTanh is the tanh approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), evaluated as
// x·σ(2u) (the same function, without cancellation for negative x).
func GeluTanh[T Float](x T) T {
	xd := float64(x)
	u := geluTanhC * (xd + geluTanhA*xd*xd*xd)
	return T(xd * sigmoid64(2*u))
}

// GeluTanhGrad is the derivative of GeluTanh: s + 2·x·s·(1 − s)·u′ with s = σ(2u),
// u′ = √(2/π)·(1 + 3·0.044715·x²).
func GeluTanhGrad[T Float](x T) T {
	xd := float64(x)
	u := geluTanhC * (xd + geluTanhA*xd*xd*xd)
	du := geluTanhC * (1 + 3*geluTanhA*xd*xd)
	s := sigmoid64(2 * u)
	return T(s + 2*xd*s*(1-s)*du)
}

// elementwiseGrain is the number of elements below which the slice helpers run inline.
const elementwiseGrain = 16384

// Unary sets y[i] = f(x[i]) for every i, in parallel over contiguous chunks. x and y may be the
// same slice. It panics if the lengths differ.
func Unary[T any](f func(T) T, x, y []T) {
	if len(x) != len(y) {
		panic("cpu.Unary: length mismatch")
	}
	Parallel(len(x), elementwiseGrain, func(lo, hi int) {
		xs, ys := x[lo:hi], y[lo:hi]
		for i, v := range xs {
			ys[i] = f(v)
		}
	})
}

// UnaryGrad sets dx[i] = dy[i]·grad(x[i]): the backward of an elementwise activation whose
// derivative grad is given as a function of the input.
func UnaryGrad[T Float](grad func(T) T, x, dy, dx []T) {
	if len(x) != len(dy) || len(x) != len(dx) {
		panic("cpu.UnaryGrad: length mismatch")
	}
	Parallel(len(x), elementwiseGrain, func(lo, hi int) {
		xs, dys, dxs := x[lo:hi], dy[lo:hi], dx[lo:hi]
		for i, v := range xs {
			dxs[i] = dys[i] * grad(v)
		}
	})
}

// UnaryTo sets y[i] = f(x[i]) where input and output element types differ (e.g. IsNaN → bool).
func UnaryTo[A, B any](f func(A) B, x []A, y []B) {
	if len(x) != len(y) {
		panic("cpu.UnaryTo: length mismatch")
	}
	Parallel(len(x), elementwiseGrain, func(lo, hi int) {
		xs, ys := x[lo:hi], y[lo:hi]
		for i, v := range xs {
			ys[i] = f(v)
		}
	})
}
