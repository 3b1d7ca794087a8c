package cpu

import (
	"fmt"
	"math"
	"runtime"
)

// Fused attention, FlashAttention-2's algorithm on the CPU.
//
// The forward walks each query block of one head over the key blocks it may see, with an
// online softmax: a running row maximum m and sum l, the output accumulator rescaled by
// e^(m_old − m_new) whenever the maximum grows, and the row's log-sum-exp m + log l kept for
// the backward. The s_q × s_kv scores exist only as one block × block tile per worker. The
// backward recomputes the probabilities of each tile from the saved log-sum-exp. It makes two
// passes instead of FlashAttention-2's one with atomic adds to dQ: one over key blocks
// (dK and dV, each kv head's tile summed over its query heads in order), one over query
// blocks (dQ), so every result has one writer and a fixed summation order — results are
// deterministic whatever the number of cores, like every kernel of the package. The tiles'
// products run on the GEMM micro-kernels (the AVX2/AVX-512 assembly on amd64), one core per
// tile; the work units (heads × blocks) are spread over the cores.
//
// Each worker allocates its tiles (a few block × block matrices) once per call; the backward
// also allocates δ = rowsum(dO ∘ O), one element per query row.

// attnBlockQ and attnBlockK are the query and key tile sizes. 64 × 64 tiles keep S, P and dP
// of one worker (48 KiB in f32) in L2; tests shrink them to cover ragged edges cheaply.
var attnBlockQ, attnBlockK = 64, 64

// AttentionParams are the sizes and options of an attention: q is [Batch, Hq, Sq, D], k
// [Batch, Hkv, Skv, D], v [Batch, Hkv, Skv, Dv], o [Batch, Hq, Sq, Dv] and lse [Batch, Hq, Sq],
// all row-major; query head h reads kv head h/(Hq/Hkv). Causal hides key j from query i when
// j > i + Skv − Sq. The optional mask is additive (MaskAdd, the kernel's element type) or
// boolean (MaskBool, nonzero = visible); its element (b, h, i, j) is at MaskOff[b] +
// h·MaskStrides[0] + i·MaskStrides[1] + j·MaskStrides[2] (strides 0 where it broadcasts).
type AttentionParams struct {
	Batch, Hq, Hkv, Sq, Skv, D, Dv int
	Scale                          float64
	Causal                         bool
	MaskOff                        []int
	MaskStrides                    [3]int
	MaskBool                       []uint8
}

// check panics unless the lengths are those of q, k, v, o, lse, then (the backward) do, dq,
// dk, dv.
func (p *AttentionParams) check(name string, lens ...int) {
	nq, nk, nv, no := p.Batch*p.Hq*p.Sq*p.D, p.Batch*p.Hkv*p.Skv*p.D, p.Batch*p.Hkv*p.Skv*p.Dv, p.Batch*p.Hq*p.Sq*p.Dv
	want := []int{nq, nk, nv, no, p.Batch * p.Hq * p.Sq, no, nq, nk, nv}
	ok := p.Batch >= 0 && p.Hq >= 0 && p.Hkv > 0 && p.Hq%p.Hkv == 0 && p.Sq >= 0 && p.Skv >= 0 && p.D >= 0 && p.Dv >= 0
	for i, l := range lens {
		ok = ok && l == want[i]
	}
	if !ok {
		panic(fmt.Sprintf("cpu.%s: lengths %v do not match %+v", name, lens, *p))
	}
}

// attnTile computes one tile of scores s[r, c] = scale·q[i0+r]·k[j0+c] + mask, with −∞ where
// the causal rule or a boolean mask hides the key, for the query rows [i0, i1) of head h and
// the keys [j0, j1) of its kv head.
func attnTile[T Float](p *AttentionParams, maskAdd []T, b, h, i0, i1, j0, j1 int, qh, kh []T, s []T) {
	bq, bk := i1-i0, j1-j0
	gemmRun(false, true, bq, bk, p.D, T(p.Scale), qh[i0*p.D:], p.D, kh[j0*p.D:], p.D, 0, s, bk, 1)
	off := p.Skv - p.Sq
	masked := maskAdd != nil || p.MaskBool != nil
	inf := T(math.Inf(-1))
	for r := range bq {
		row := s[r*bk : (r+1)*bk]
		i := i0 + r
		if masked {
			base := p.MaskOff[b] + h*p.MaskStrides[0] + i*p.MaskStrides[1]
			js := p.MaskStrides[2]
			if maskAdd != nil {
				for c := range row {
					row[c] += maskAdd[base+(j0+c)*js]
				}
			} else {
				for c := range row {
					if p.MaskBool[base+(j0+c)*js] == 0 {
						row[c] = inf
					}
				}
			}
		}
		if p.Causal {
			// Keys j > i + off are hidden: columns from max(0, i+off+1−j0) on.
			for c := max(0, i+off+1-j0); c < bk; c++ {
				row[c] = inf
			}
		}
	}
}

// attnKeyEnd is the end of the keys query rows [i0, i1) may see under the causal rule.
func (p *AttentionParams) attnKeyEnd(i1 int) int {
	if !p.Causal {
		return p.Skv
	}
	return min(p.Skv, max(0, i1+p.Skv-p.Sq))
}

// AttentionForward computes o and lse (see AttentionParams) with the online softmax. maskAdd
// is the additive mask or nil. A row with no visible key gets o = 0 and lse = −∞.
func AttentionForward[T Float](p *AttentionParams, q, k, v, maskAdd, o, lse []T) {
	p.check("AttentionForward", len(q), len(k), len(v), len(o), len(lse))
	bQ, bK := attnBlockQ, attnBlockK
	nqb := (p.Sq + bQ - 1) / bQ
	group := max(1, p.Hq/p.Hkv)
	units := p.Batch * p.Hq * nqb
	work := max(1, p.Skv*bQ*(p.D+p.Dv))
	Parallel(units, max(1, (1<<16)/work), func(lo, hi int) {
		s := make([]T, bQ*bK)
		acc := make([]T, bQ*p.Dv)
		m, l := make([]T, bQ), make([]T, bQ)
		for u := lo; u < hi; u++ {
			bh, qb := u/nqb, u%nqb
			b, h := bh/p.Hq, bh%p.Hq
			kvh := b*p.Hkv + h/group
			qh := q[bh*p.Sq*p.D : (bh+1)*p.Sq*p.D]
			kh := k[kvh*p.Skv*p.D : (kvh+1)*p.Skv*p.D]
			vh := v[kvh*p.Skv*p.Dv : (kvh+1)*p.Skv*p.Dv]
			i0, i1 := qb*bQ, min((qb+1)*bQ, p.Sq)
			bq := i1 - i0
			for r := range bq {
				m[r], l[r] = T(math.Inf(-1)), 0
			}
			clear(acc[:bq*p.Dv])
			kend := p.attnKeyEnd(i1)
			for j0 := 0; j0 < kend; j0 += bK {
				j1 := min(j0+bK, kend)
				bk := j1 - j0
				attnTile(p, maskAdd, b, h, i0, i1, j0, j1, qh, kh, s)
				for r := range bq {
					row := s[r*bk : (r+1)*bk]
					mx := m[r]
					for _, x := range row {
						mx = max(mx, x)
					}
					if math.IsInf(float64(mx), -1) {
						clear(row) // nothing visible yet: the row adds nothing
						continue
					}
					ExpShift(row, row, mx)
					var sum T
					for _, e := range row {
						sum += e
					}
					if mx != m[r] {
						corr := Exp(m[r] - mx)
						l[r] *= corr
						ar := acc[r*p.Dv : (r+1)*p.Dv]
						for c := range ar {
							ar[c] *= corr
						}
					}
					m[r], l[r] = mx, l[r]+sum
				}
				gemmRun(false, false, bq, p.Dv, bk, 1, s, bk, vh[j0*p.Dv:], p.Dv, 1, acc, p.Dv, 1)
			}
			for r := range bq {
				row := bh*p.Sq + i0 + r
				or := o[row*p.Dv : (row+1)*p.Dv]
				if l[r] == 0 {
					clear(or)
					lse[row] = T(math.Inf(-1))
					continue
				}
				inv := 1 / l[r]
				for c, a := range acc[r*p.Dv : (r+1)*p.Dv] {
					or[c] = a * inv
				}
				lse[row] = m[r] + Log(l[r])
			}
		}
	})
}

// attnProbs turns a tile of scores into probabilities p = e^(s − lse) in place, and, when
// dp is given (dO·Vᵀ of the tile), dp into ds = p ∘ (dp − δ). Rows with lse = −∞ saw no key
// and get zeros.
func attnProbs[T Float](s, dp []T, bq, bk int, lse, delta []T) {
	for r := range bq {
		row := s[r*bk : (r+1)*bk]
		lr := lse[r]
		if math.IsInf(float64(lr), -1) {
			clear(row)
			if dp != nil {
				clear(dp[r*bk : (r+1)*bk])
			}
			continue
		}
		ExpShift(row, row, lr)
		if dp != nil {
			dr := dp[r*bk : (r+1)*bk]
			d := delta[r]
			for c, x := range dr {
				dr[c] = row[c] * (x - d)
			}
		}
	}
}

// AttentionBackward computes dq, dk and dv from q, k, v, the forward's o and lse, and do (see
// AttentionParams and ir's attention_grad). maskAdd is the additive mask or nil.
func AttentionBackward[T Float](p *AttentionParams, q, k, v, o, lse, do, maskAdd, dq, dk, dv []T) {
	p.check("AttentionBackward", len(q), len(k), len(v), len(o), len(lse), len(do), len(dq), len(dk), len(dv))
	bQ, bK := attnBlockQ, attnBlockK
	group := max(1, p.Hq/p.Hkv)
	rows := p.Batch * p.Hq * p.Sq
	// δ[i] = Σ_c dO[i, c]·O[i, c] = Σ_j P[i, j]·dP[i, j].
	delta := make([]T, rows)
	Parallel(rows, max(1, 8192/max(1, p.Dv)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			var d T
			or, dr := o[r*p.Dv:(r+1)*p.Dv], do[r*p.Dv:(r+1)*p.Dv]
			for c, x := range or {
				d += x * dr[c]
			}
			delta[r] = d
		}
	})
	work := max(1, p.Sq*bK*(p.D+p.Dv))

	// dK and dV: one unit per key block of a kv head, over every query block of its group.
	// When there are at least as many kv heads (× batch) as cores, a unit is a whole kv head
	// instead and adds each tile's dS·K into dQ as well (one pass: the scores and dP of every
	// tile are computed once); the key blocks are then visited in increasing order, so dQ
	// sums them in the order the dQ pass would, and the results are the same bits either way.
	nkb := (p.Skv + bK - 1) / bK
	onePass := p.Batch*p.Hkv >= runtime.GOMAXPROCS(0)
	units, perUnit := p.Batch*p.Hkv*nkb, 1
	if onePass {
		units, perUnit = p.Batch*p.Hkv, nkb
		clear(dq)
	}
	Parallel(units, max(1, (1<<16)/(work*perUnit)), func(lo, hi int) {
		s, dp := make([]T, bQ*bK), make([]T, bQ*bK)
		dkAcc, dvAcc := make([]T, bK*p.D), make([]T, bK*p.Dv)
		for uu := lo * perUnit; uu < hi*perUnit; uu++ {
			bg, kb := uu/nkb, uu%nkb
			b, g := bg/p.Hkv, bg%p.Hkv
			j0, j1 := kb*bK, min((kb+1)*bK, p.Skv)
			bk := j1 - j0
			kh := k[bg*p.Skv*p.D : (bg+1)*p.Skv*p.D]
			vh := v[bg*p.Skv*p.Dv : (bg+1)*p.Skv*p.Dv]
			clear(dkAcc[:bk*p.D])
			clear(dvAcc[:bk*p.Dv])
			// Under the causal rule, query i sees key j0 when i ≥ j0 − (Skv − Sq).
			first := 0
			if p.Causal {
				first = max(0, j0-(p.Skv-p.Sq))
			}
			for hh := range group {
				h := g*group + hh
				bh := b*p.Hq + h
				qh, doh := q[bh*p.Sq*p.D:(bh+1)*p.Sq*p.D], do[bh*p.Sq*p.Dv:(bh+1)*p.Sq*p.Dv]
				for i0 := first / bQ * bQ; i0 < p.Sq; i0 += bQ {
					i1 := min(i0+bQ, p.Sq)
					bq := i1 - i0
					attnTile(p, maskAdd, b, h, i0, i1, j0, j1, qh, kh, s)
					gemmRun(false, true, bq, bk, p.Dv, 1, doh[i0*p.Dv:], p.Dv, vh[j0*p.Dv:], p.Dv, 0, dp, bk, 1)
					attnProbs(s, nil, bq, bk, lse[bh*p.Sq+i0:], nil)
					// dV += Pᵀ·dO before P turns into dS.
					gemmRun(true, false, bk, p.Dv, bq, 1, s, bk, doh[i0*p.Dv:], p.Dv, 1, dvAcc, p.Dv, 1)
					dsInPlace(s, dp, bq, bk, delta[bh*p.Sq+i0:])
					// dK += scale·dSᵀ·Q.
					gemmRun(true, false, bk, p.D, bq, T(p.Scale), dp, bk, qh[i0*p.D:], p.D, 1, dkAcc, p.D, 1)
					if onePass {
						// dQ += scale·dS·K.
						gemmRun(false, false, bq, p.D, bk, T(p.Scale), dp, bk, kh[j0*p.D:], p.D, 1, dq[(bh*p.Sq+i0)*p.D:], p.D, 1)
					}
				}
			}
			copy(dk[(bg*p.Skv+j0)*p.D:(bg*p.Skv+j1)*p.D], dkAcc[:bk*p.D])
			copy(dv[(bg*p.Skv+j0)*p.Dv:(bg*p.Skv+j1)*p.Dv], dvAcc[:bk*p.Dv])
		}
	})
	if onePass {
		return
	}

	// dQ: one unit per query block of a head, over the key blocks it sees.
	nqb := (p.Sq + bQ - 1) / bQ
	Parallel(p.Batch*p.Hq*nqb, max(1, (1<<16)/work), func(lo, hi int) {
		s, dp := make([]T, bQ*bK), make([]T, bQ*bK)
		dqAcc := make([]T, bQ*p.D)
		for u := lo; u < hi; u++ {
			bh, qb := u/nqb, u%nqb
			b, h := bh/p.Hq, bh%p.Hq
			kvh := b*p.Hkv + h/group
			qh, doh := q[bh*p.Sq*p.D:(bh+1)*p.Sq*p.D], do[bh*p.Sq*p.Dv:(bh+1)*p.Sq*p.Dv]
			kh := k[kvh*p.Skv*p.D : (kvh+1)*p.Skv*p.D]
			vh := v[kvh*p.Skv*p.Dv : (kvh+1)*p.Skv*p.Dv]
			i0, i1 := qb*bQ, min((qb+1)*bQ, p.Sq)
			bq := i1 - i0
			clear(dqAcc[:bq*p.D])
			kend := p.attnKeyEnd(i1)
			for j0 := 0; j0 < kend; j0 += bK {
				j1 := min(j0+bK, kend)
				bk := j1 - j0
				attnTile(p, maskAdd, b, h, i0, i1, j0, j1, qh, kh, s)
				gemmRun(false, true, bq, bk, p.Dv, 1, doh[i0*p.Dv:], p.Dv, vh[j0*p.Dv:], p.Dv, 0, dp, bk, 1)
				attnProbs(s, dp, bq, bk, lse[bh*p.Sq+i0:], delta[bh*p.Sq+i0:])
				// dQ += scale·dS·K.
				gemmRun(false, false, bq, p.D, bk, T(p.Scale), dp, bk, kh[j0*p.D:], p.D, 1, dqAcc, p.D, 1)
			}
			copy(dq[(bh*p.Sq+i0)*p.D:(bh*p.Sq+i1)*p.D], dqAcc[:bq*p.D])
		}
	})
}

// dsInPlace sets dp = p ∘ (dp − δ) for a tile whose probabilities are in s.
func dsInPlace[T Float](s, dp []T, bq, bk int, delta []T) {
	for r := range bq {
		pr, dr := s[r*bk:(r+1)*bk], dp[r*bk:(r+1)*bk]
		d := delta[r]
		for c, x := range dr {
			dr[c] = pr[c] * (x - d)
		}
	}
}
