package cpu

import (
	k "ppc.dev/ppc/kernels/cpu"
)

// The tanh approximation of GELU (GPT-2's) on f32 results is computed in float32 with the
// fast table-based exp of kernels/cpu, not in float64: it is the dominant elementwise cost of
// transformer training, and float64 exp made it 5× slower. This is the one place where an f32
// step's value is not "float64, rounded once" — it is within a few ulps of that — but like
// every step it depends only on its inputs and its dtype, so fused and unfused runs, one
// device and a pipeline, still compute bit-identical results.
//
//	gelu_tanh(x) = x·σ(2u),  u = √(2/π)·(x + 0.044715·x³)   (since ½(1 + tanh u) = σ(2u))
//	d/dx         = σ(2u) + x·σ(2u)·(1 − σ(2u))·2√(2/π)·(1 + 3·0.044715·x²)

const (
	geluC = 0.7978845608028654 // √(2/π)
	geluA = 0.044715
)

func sigmoid32(z float32) float32 {
	if z >= 0 {
		return 1 / (1 + k.Exp(-z))
	}
	e := k.Exp(z)
	return e / (1 + e)
}

func geluTanh32(x float32) float32 {
	u := float32(geluC) * (x + float32(geluA)*x*x*x)
	return x * sigmoid32(2*u)
}

func geluTanhGrad32(x float32) float32 {
	u := float32(geluC) * (x + float32(geluA)*x*x*x)
	s := sigmoid32(2 * u)
	return s + x*s*(1-s)*2*float32(geluC)*(1+3*float32(geluA)*x*x)
}

func geluTanhF32(dst []float64, a [][]float64) {
	x := a[0][:len(dst)]
	for i, xv := range x {
		dst[i] = float64(geluTanh32(float32(xv)))
	}
}

func geluTanhGradF32(dst []float64, a [][]float64) {
	x, dy := a[0][:len(dst)], a[1][:len(dst)]
	for i, xv := range x {
		dst[i] = float64(float32(dy[i]) * geluTanhGrad32(float32(xv)))
	}
}
