package cpu

import (
	"fmt"
	"math"
	"testing"
)

// BenchmarkAttention times one causal attention forward and backward (4 heads of 64, batch
// 1, f32; and the tiny GPT's 8 × 4 heads of 16 at seq 256) fused — the tiled kernels — against the decomposed chain on this package's kernels:
// S = scale·Q·Kᵀ (batched GEMM), the causal mask, P = softmax(S), O = P·V, and backward
// dP = dO·Vᵀ, dV = Pᵀ·dO, dS = softmax_grad(P, dP), dQ = scale·dS·K, dK = scale·dSᵀ·Q. The
// buffers beyond q, k, v, o, do and the gradients are allocated in the loop, so B/op is what
// each form needs besides them: the s × s matrices P and dP (S and dS in place) for the
// chain, tiles and one float per row for the fused kernels.
//
//	go test ./kernels/cpu -run '^$' -bench BenchmarkAttention -benchtime 2x
func BenchmarkAttention(b *testing.B) {
	for _, c := range []struct{ d, bh, s int }{{64, 4, 512}, {64, 4, 2048}, {64, 4, 8192}, {16, 32, 256}} {
		d, h, s := c.d, c.bh, c.s // batch × heads as heads: the same work
		p := &AttentionParams{Batch: 1, Hq: h, Hkv: h, Sq: s, Skv: s, D: d, Dv: d, Scale: 1 / math.Sqrt(float64(d)), Causal: true, MaskOff: []int{0}}
		r := tkRand(uint64(s))
		n := h * s * d
		name := fmt.Sprintf("s=%d", s)
		if d != 64 {
			name = fmt.Sprintf("s=%d,d=%d,heads=%d", s, d, h)
		}
		q, k, v, do := tkTo32(tkNormals(r, n)), tkTo32(tkNormals(r, n)), tkTo32(tkNormals(r, n)), tkTo32(tkNormals(r, n))
		o, dq, dk, dv := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		b.Run("fused/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				lse := make([]float32, h*s)
				AttentionForward(p, q, k, v, nil, o, lse)
				AttentionBackward(p, q, k, v, o, lse, do, nil, dq, dk, dv)
			}
		})
		b.Run("decomposed/"+name, func(b *testing.B) {
			b.ReportAllocs()
			scale := float32(p.Scale)
			inf := float32(math.Inf(-1))
			for b.Loop() {
				pm, dp := make([]float32, h*s*s), make([]float32, h*s*s)
				sd, ss := s*d, s*s
				BatchedGemm(h, false, true, s, s, d, scale, q, d, sd, k, d, sd, 0, pm, s, ss)
				for i := range h * s {
					row := pm[i*s : (i+1)*s]
					for j := i%s + 1; j < s; j++ {
						row[j] = inf
					}
				}
				Softmax(pm, pm, h*s, s, 1)
				BatchedGemm(h, false, false, s, d, s, 1, pm, s, ss, v, d, sd, 0, o, d, sd)
				BatchedGemm(h, false, true, s, s, d, 1, do, d, sd, v, d, sd, 0, dp, s, ss)
				BatchedGemm(h, true, false, s, d, s, 1, pm, s, ss, do, d, sd, 0, dv, d, sd)
				SoftmaxBackward(pm, dp, dp, h*s, s, 1)
				BatchedGemm(h, false, false, s, d, s, scale, dp, s, ss, k, d, sd, 0, dq, d, sd)
				BatchedGemm(h, true, false, s, d, s, scale, dp, s, ss, q, d, sd, 0, dk, d, sd)
			}
		})
	}
}
