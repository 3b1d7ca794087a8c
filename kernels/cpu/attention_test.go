package cpu

import (
	"fmt"
	"math"
	"testing"
)

// tkAttnCase is one attention configuration of the tests.
type tkAttnCase struct {
	b, hq, hkv, sq, skv, d, dv int
	causal                     bool
	mask                       string // "", "add" (additive, [Sq, Skv] broadcast over batch and heads), "bool" ([Hq, Sq, Skv])
}

func (c tkAttnCase) String() string {
	return fmt.Sprintf("b%d hq%d hkv%d sq%d skv%d d%d dv%d causal=%v mask=%q", c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.dv, c.causal, c.mask)
}

// tkAttnInputs makes q, k, v, the masks and the kernel's parameters for c.
func tkAttnInputs(c tkAttnCase, seed uint64) (p *AttentionParams, q, k, v, add []float64) {
	r := tkRand(seed)
	q, k, v = tkNormals(r, c.b*c.hq*c.sq*c.d), tkNormals(r, c.b*c.hkv*c.skv*c.d), tkNormals(r, c.b*c.hkv*c.skv*c.dv)
	p = &AttentionParams{Batch: c.b, Hq: c.hq, Hkv: c.hkv, Sq: c.sq, Skv: c.skv, D: c.d, Dv: c.dv,
		Scale: 1 / math.Sqrt(float64(max(c.d, 1))), Causal: c.causal}
	p.MaskOff = make([]int, c.b)
	switch c.mask {
	case "add":
		add = tkNormals(r, c.sq*c.skv)
		add[0] = math.Inf(-1) // a hidden key spelled as −∞
		p.MaskStrides = [3]int{0, c.skv, 1}
	case "bool":
		p.MaskBool = make([]uint8, c.hq*c.sq*c.skv)
		for i := range p.MaskBool {
			if r.IntN(4) != 0 {
				p.MaskBool[i] = 1
			}
		}
		// Query row 1 of head 0 sees nothing: o = 0, lse = −∞, no gradient.
		if c.sq > 1 {
			clear(p.MaskBool[c.skv : 2*c.skv])
		}
		p.MaskStrides = [3]int{c.sq * c.skv, c.skv, 1}
	}
	return
}

// tkRefAttention is the decomposed chain in float64 — the scores materialised, masked,
// softmax, times v — and its textbook backward through the materialised probabilities.
// It returns o, lse and, given do, dq, dk, dv.
func tkRefAttention(p *AttentionParams, q, k, v, add, do []float64) (o, lse, dq, dk, dv []float64) {
	o, lse = make([]float64, p.Batch*p.Hq*p.Sq*p.Dv), make([]float64, p.Batch*p.Hq*p.Sq)
	dq, dk, dv = make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
	group := p.Hq / p.Hkv
	for b := range p.Batch {
		for h := range p.Hq {
			bh, kvh := b*p.Hq+h, b*p.Hkv+h/group
			for i := range p.Sq {
				s := make([]float64, p.Skv)
				vis := make([]bool, p.Skv)
				m := math.Inf(-1)
				for j := range p.Skv {
					var dot float64
					for c := range p.D {
						dot += q[(bh*p.Sq+i)*p.D+c] * k[(kvh*p.Skv+j)*p.D+c]
					}
					s[j] = dot * p.Scale
					mi := p.MaskOff[b] + h*p.MaskStrides[0] + i*p.MaskStrides[1] + j*p.MaskStrides[2]
					vis[j] = !(p.Causal && j > i+p.Skv-p.Sq) && (p.MaskBool == nil || p.MaskBool[mi] != 0)
					if add != nil {
						s[j] += add[mi]
					}
					if vis[j] {
						m = math.Max(m, s[j])
					}
				}
				row := bh*p.Sq + i
				if math.IsInf(m, -1) {
					lse[row] = math.Inf(-1)
					continue
				}
				var sum float64
				pr := make([]float64, p.Skv)
				for j := range p.Skv {
					if vis[j] {
						pr[j] = math.Exp(s[j] - m)
						sum += pr[j]
					}
				}
				lse[row] = m + math.Log(sum)
				for j := range p.Skv {
					pr[j] /= sum
					for c := range p.Dv {
						o[row*p.Dv+c] += pr[j] * v[(kvh*p.Skv+j)*p.Dv+c]
					}
				}
				if do == nil {
					continue
				}
				// dP = dO·Vᵀ, dS = P∘(dP − Σ P∘dP), dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dO.
				dp := make([]float64, p.Skv)
				var dot float64
				for j := range p.Skv {
					for c := range p.Dv {
						dp[j] += do[row*p.Dv+c] * v[(kvh*p.Skv+j)*p.Dv+c]
					}
					dot += pr[j] * dp[j]
				}
				for j := range p.Skv {
					ds := pr[j] * (dp[j] - dot) * p.Scale
					for c := range p.D {
						dq[row*p.D+c] += ds * k[(kvh*p.Skv+j)*p.D+c]
						dk[(kvh*p.Skv+j)*p.D+c] += ds * q[row*p.D+c]
					}
					for c := range p.Dv {
						dv[(kvh*p.Skv+j)*p.Dv+c] += pr[j] * do[row*p.Dv+c]
					}
				}
			}
		}
	}
	return
}

var tkAttnCases = []tkAttnCase{
	{1, 1, 1, 1, 1, 1, 1, false, ""},
	{2, 3, 3, 7, 7, 5, 5, true, ""},
	{2, 4, 2, 9, 9, 6, 3, true, ""},       // GQA, Dv ≠ D
	{1, 6, 1, 5, 11, 4, 4, true, ""},      // MQA, a query block at the end of its keys
	{1, 2, 1, 11, 5, 4, 4, true, ""},      // more queries than keys: the first rows see nothing
	{2, 2, 2, 13, 10, 3, 3, false, "add"}, // additive mask broadcast over batch and heads
	{1, 4, 2, 8, 12, 5, 5, false, "bool"},
	{1, 4, 2, 8, 8, 5, 5, true, "bool"},
	{1, 2, 1, 70, 67, 16, 8, true, "add"}, // more than one 64-row tile
}

// TestAttentionMatchesDecomposed checks the tiled kernels, forward and backward, against
// the decomposed chain: in float64 tightly, in float32 at rtol 1e-5 / atol 1e-6 (against the
// reference on the same rounded inputs), with the default 64 × 64 tiles and with small ragged
// ones.
func TestAttentionMatchesDecomposed(t *testing.T) {
	defer func(q, k int) { attnBlockQ, attnBlockK = q, k }(attnBlockQ, attnBlockK)
	for _, tiles := range [][2]int{{64, 64}, {4, 3}, {5, 8}} {
		attnBlockQ, attnBlockK = tiles[0], tiles[1]
		for ci, c := range tkAttnCases {
			p, q, k, v, add := tkAttnInputs(c, uint64(ci))
			do := tkNormals(tkRand(uint64(100+ci)), c.b*c.hq*c.sq*c.dv)
			// Round the inputs to f32 once, so that both precisions see the same values.
			for _, x := range [][]float64{q, k, v, add, do} {
				copy(x, tkTo64(tkTo32(x)))
			}
			wo, wl, wdq, wdk, wdv := tkRefAttention(p, q, k, v, add, do)
			name := fmt.Sprintf("%v tiles %v", c, tiles)

			o, lse := make([]float64, len(wo)), make([]float64, len(wl))
			AttentionForward(p, q, k, v, add, o, lse)
			dq, dk, dv := make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
			AttentionBackward(p, q, k, v, o, lse, do, add, dq, dk, dv)
			for _, r := range []struct {
				n         string
				got, want []float64
			}{{"o", o, wo}, {"lse", lse, wl}, {"dq", dq, wdq}, {"dk", dk, wdk}, {"dv", dv, wdv}} {
				tkCheck(t, name+" f64 "+r.n, r.got, r.want, 1e-11, 1e-12)
			}

			o32, lse32 := make([]float32, len(wo)), make([]float32, len(wl))
			q32, k32, v32, add32, do32 := tkTo32(q), tkTo32(k), tkTo32(v), tkTo32(add), tkTo32(do)
			AttentionForward(p, q32, k32, v32, add32, o32, lse32)
			dq32, dk32, dv32 := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
			AttentionBackward(p, q32, k32, v32, o32, lse32, do32, add32, dq32, dk32, dv32)
			for _, r := range []struct {
				n    string
				got  []float32
				want []float64
			}{{"o", o32, wo}, {"lse", lse32, wl}, {"dq", dq32, wdq}, {"dk", dk32, wdk}, {"dv", dv32, wdv}} {
				tkCheck(t, name+" f32 "+r.n, tkTo64(r.got), r.want, 1e-5, 1e-6)
			}
		}
	}
}

// TestAttentionFiniteDifferences checks the backward against central differences of the
// forward kernel (float64) of L = Σ o∘w.
func TestAttentionFiniteDifferences(t *testing.T) {
	defer func(q, k int) { attnBlockQ, attnBlockK = q, k }(attnBlockQ, attnBlockK)
	attnBlockQ, attnBlockK = 3, 4
	for ci, c := range []tkAttnCase{{1, 4, 2, 5, 7, 3, 2, true, ""}, {2, 2, 1, 6, 6, 4, 4, false, "add"}, {1, 2, 2, 5, 5, 3, 3, true, "bool"}} {
		p, q, k, v, add := tkAttnInputs(c, uint64(50+ci))
		w := tkNormals(tkRand(uint64(60+ci)), c.b*c.hq*c.sq*c.dv)
		loss := func() float64 {
			o, lse := make([]float64, len(w)), make([]float64, c.b*c.hq*c.sq)
			AttentionForward(p, q, k, v, add, o, lse)
			var l float64
			for i := range o {
				l += o[i] * w[i]
			}
			return l
		}
		o, lse := make([]float64, len(w)), make([]float64, c.b*c.hq*c.sq)
		AttentionForward(p, q, k, v, add, o, lse)
		dq, dk, dv := make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
		AttentionBackward(p, q, k, v, o, lse, w, add, dq, dk, dv)
		for _, x := range []struct {
			n    string
			x, g []float64
		}{{"q", q, dq}, {"k", k, dk}, {"v", v, dv}} {
			const h = 1e-6
			for i := range x.x {
				old := x.x[i]
				x.x[i] = old + h
				lp := loss()
				x.x[i] = old - h
				lm := loss()
				x.x[i] = old
				fd := (lp - lm) / (2 * h)
				if math.Abs(fd-x.g[i]) > 1e-7+1e-6*math.Abs(fd) {
					t.Fatalf("%v: d%s[%d] = %v, finite difference %v", c, x.n, i, x.g[i], fd)
				}
			}
		}
	}
}

// TestAttentionDeterministic: the results are the same bits under any number of cores.
func TestAttentionDeterministic(t *testing.T) {
	c := tkAttnCase{2, 4, 2, 130, 130, 16, 16, true, ""}
	p, q, k, v, _ := tkAttnInputs(c, 7)
	q32, k32, v32 := tkTo32(q), tkTo32(k), tkTo32(v)
	do := tkTo32(tkNormals(tkRand(8), len(q)))
	tkSameBits(t, "attention", func() []float32 {
		o, lse := make([]float32, len(q)), make([]float32, c.b*c.hq*c.sq)
		AttentionForward(p, q32, k32, v32, nil, o, lse)
		dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
		AttentionBackward(p, q32, k32, v32, o, lse, do, nil, dq, dk, dv)
		return append(append(append(append(o, lse...), dq...), dk...), dv...)
	})
}
