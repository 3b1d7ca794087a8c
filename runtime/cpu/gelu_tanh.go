package cpu

import (
	k "ppc.dev/ppc/kernels/cpu"
)

// The tanh approximation of GELU (GPT-2's) with f32 (or bf16, f16) results runs kernels/cpu's
// vectorised GeluTanhSlice / GeluTanhGradSlice over the engine's float64 chunk: branch-free
// float64 arithmetic within 1e-12 of the formula, so the rounded result is the formula's
// correctly rounded value but within 1e-12 of a rounding boundary. It was the dominant
// elementwise cost of transformer training (about 40 ns an element as scalar float32 code with
// a table exp, 2–3 ns now). Like every step its value depends only on its inputs and its
// dtype, so fused and unfused runs, one device and a pipeline, compute bit-identical results.
// f64 results keep k.GeluTanh (math.Exp).

func geluTanhF32(dst []float64, a [][]float64) {
	k.GeluTanhSlice(dst, a[0][:len(dst)])
}

func geluTanhGradF32(dst []float64, a [][]float64) {
	k.GeluTanhGradSlice(dst, a[0][:len(dst)], a[1][:len(dst)])
}
