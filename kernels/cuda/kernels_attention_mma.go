package cuda

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Attention on tensor cores: for bf16 and f16 operands the attention kernels do their tile
// products with mma.sync.m16n8k16 (ppc_cuda.h's ppc_mma_*), fp32 accumulation, as
// FlashAttention-2 does on Ampere and Hopper. A block is warps of 16 rows each (query rows
// for the forward and dq, key rows for dk/dv); operand tiles are staged in shared memory as
// their 16-bit bits, padded with zeros to 16 columns (any head dim), and the products read
// their fragments from there.
//
//	attention       a block per (batch·head, 64 query rows): per key tile, each warp's
//	                S = Q·Kᵀ stays in its lanes' registers, scaled and masked there; the
//	                online softmax runs in the lanes too (each lane holds two rows' elements:
//	                the row's maximum is the max of its four lanes' shares, passed through
//	                shared memory, and each lane keeps its share of the row's sum, added up
//	                once at the end), writing P, rounded to the operands' type as
//	                FlashAttention-2 does, for the warps' O += P·V. (Run 5 on an H100 had a
//	                thread per query row do the softmax from a float tile of S in shared
//	                memory, on half the block's threads: the forward's largest cost.)
//	attention_grad  δ = rowsum(dO ∘ O) as before; dq: a block per query tile, per key tile
//	                S = Q·Kᵀ and dP = dO·Vᵀ in registers, dS = P ∘ (dP − δ) elementwise in
//	                the lanes (rows' lse and δ from shared memory) into shared memory, then
//	                dQ += dS·K; dk and dv in one kernel: a block per 64 key rows, over the
//	                group's query heads and their query tiles, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ,
//	                Pᵀ and dSᵀ to shared memory, dV += Pᵀ·dO and dK += dSᵀ·Q.
//
// Every result still has one writer and a fixed order of summation (no atomics), so runs are
// bit-reproducible. P is rounded to the operands' type before P·V and Pᵀ·dO, as
// FlashAttention-2 does; dS is split into a 16-bit value and its 16-bit remainder, and
// dQ and dK each take both products, which keeps dS to about 16 significant bits (rounded
// to 8, as bf16, the gradients of the 130-row test case were 6 ulps off the CPU device's).
// So the backward does 9 tile products where FlashAttention-2's one pass does 5: S and dP
// in both kernels (rather than dQ accumulated by atomics), and dS's remainder twice.
//
// On the host (and GPUs before sm_80) each lane computes its elements of a product from the
// shared tiles (ppc_cuda.h), so CI checks these kernels' indexing against the CPU device like
// every other kernel; host and GPU differ only in the products' order of summation.

// mmaTiles are the rows per block (br: 16 per warp) and the staged tile's rows (bc) of the
// tensor-core kernels: the largest of 64×32, 64×16, 32×32, 32×16, 16×16 whose shared tiles
// fit attnMMAShared for every kernel of the site.
func mmaTiles(d16, dv16 int) (br, bc int, ok bool) {
	for _, t := range [][2]int{{64, 32}, {64, 16}, {32, 32}, {32, 16}, {16, 16}} {
		br, bc = t[0], t[1]
		q, v, p := ld(d16), ld(dv16), ld(bc)
		fwd := 2*(br*q+bc*q+bc*v+br*p) + 4*(br*4+2*br)
		dq := 2*(br*q+br*v+bc*q+bc*v+2*br*p) + 4*2*br
		dkv := 2*(br*q+br*v+bc*q+bc*v+3*br*p) + 4*2*bc
		if max(fwd, dq, dkv) <= attnMMAShared {
			return br, bc, true
		}
	}
	return 0, 0, false
}

// attnMMAShared bounds a tensor-core kernel's static shared memory (48 KiB without opting in).
const attnMMAShared = 46 << 10

// mmaAttention reports whether a site's attention runs on tensor cores: bf16 or f16
// operands, all three of one type, and head dims the shared tiles hold.
func mmaAttention(s *device.Spec, maskAt int) bool {
	if len(s.In) < 3 {
		return false
	}
	t := s.In[0].DType
	if t != ir.BF16 && t != ir.F16 || s.In[1].DType != t || s.In[2].DType != t {
		return false
	}
	d, _, err := ir.AttentionOperands(s.In, maskAt)
	if err != nil {
		return false
	}
	_, _, ok := mmaTiles(roundUp(d.D, 16), roundUp(d.Dv, 16))
	return ok
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// ld is the row stride of a 16-bit shared tile of w columns: 8 more, so that the rows a
// warp's fragment loads touch (8 rows apart in A, 2 in B) fall in different banks (with
// stride w, a multiple of 64 bytes, the eight rows of an A fragment's load hit one bank).
func ld(w int) int { return w + 8 }

// mmaGen is the tensor-core kernels' generator: attnGen's sizes and masks, the padded head
// dims, the tiles and the mma flavour.
type mmaGen struct {
	*attnGen
	dt         ir.DType // the operands' type
	mma        string   // ppc_mma_bf16 or ppc_mma_f16
	d16, dv16  int
	br, bc, nt int // rows per block, staged rows, threads per block
}

func newMMAGen(s *device.Spec, maskAt int) (*mmaGen, error) {
	g, err := newAttnGen(s, maskAt)
	if err != nil {
		return nil, err
	}
	m := &mmaGen{attnGen: g, dt: s.In[0].DType, mma: "ppc_mma_bf16", d16: roundUp(g.d.D, 16), dv16: roundUp(g.d.Dv, 16)}
	if m.dt == ir.F16 {
		m.mma = "ppc_mma_f16"
	}
	m.br, m.bc, _ = mmaTiles(m.d16, m.dv16)
	m.nt = 2 * m.br
	m.cols = m.bc
	m.names()
	return m, nil
}

// names sets the $ names of the kernels: attnGen's, with $BR the block's rows (query rows,
// or key rows for dk/dv), $BC the staged rows, $NT the block's threads and $D16/$DV16 the
// padded head dims.
func (m *mmaGen) names() {
	d := m.d
	c := func(x int) string { return fmt.Sprintf("%dLL", x) }
	m.attnGen.br = m.br
	m.r = strings.NewReplacer("$T", "float", "$DV16", fmt.Sprint(m.dv16), "$D16", fmt.Sprint(m.d16), "$DV", c(d.Dv), "$D", c(d.D),
		"$SQ", c(d.Sq), "$SKV", c(d.Skv), "$HQ", c(d.Hq), "$HKV", c(d.Hkv), "$G", c(d.Hq/d.Hkv), "$OFF", c(d.Skv-d.Sq),
		"$BC", fmt.Sprint(m.bc), "$BR", fmt.Sprint(m.br), "$NT", fmt.Sprint(m.nt), "$LP", fmt.Sprint(ld(m.bc)), "$LS", fmt.Sprint(m.bc+1),
		"$NQT", c(ceilDiv(d.Sq, m.br)), "$NKT", c(ceilDiv(d.Skv, m.br)), "$SCALE", m.scale)
}

// stageBits writes the loop of a block's threads copying rows [r0, r0 + rows) of a
// [·, width] 16-bit operand (rows from base) into tile as [rows, padded] bits (row stride
// ld(padded)), zeros past end and past width.
//
// Where rows are whole 16-byte vectors (width a multiple of 8) and the operand is 16-byte
// aligned (checked at run time: a view may start anywhere), a thread copies eight elements
// at a time (ppc_copy16): run 6's Nsight Compute saw the kernels latency-bound, and the
// element-at-a-time staging — an index division and a 2-byte load per element — was most of
// their instructions besides the products.
func (m *mmaGen) stageBits(tile string, rows, width, padded int, op, base, r0, end string) string {
	scalar := m.c(fmt.Sprintf("for (int e = (int)tid; e < %d; e += $NT) {\n  const int rr = e / %d, cc = e %% %d;\n  const long long i = %s + rr;\n  %s[rr * %d + cc] = i < %s && cc < %d ? %s[(%s + i) * %dLL + cc] : (uint16_t)0;\n}\n",
		rows*padded, padded, padded, r0, tile, ld(padded), end, width, op, base, width))
	if width%8 != 0 {
		return scalar
	}
	vec := m.c(fmt.Sprintf("for (int e = (int)tid; e < %d; e += $NT) {\n  const int rr = e / %d, cc = e %% %d * 8;\n  const long long i = %s + rr;\n  if (i < %s && cc < %d) ppc_copy16(&%s[rr * %d + cc], &%s[(%s + i) * %dLL + cc]);\n  else ppc_zero16(&%s[rr * %d + cc]);\n}\n",
		rows*padded/8, padded/8, padded/8, r0, end, width, tile, ld(padded), op, base, width, tile, ld(padded)))
	return fmt.Sprintf("if ((((unsigned long long)%s) & 15ULL) == 0) {\n%s} else {\n%s}\n", op, indent(vec, "  "), indent(scalar, "  "))
}

// lanes declares a phase's warp coordinates: lane, warp w, the lane's row g and column pair t.
const lanes = "const int lane = (int)(tid & 31), w = (int)(tid >> 5), g = lane >> 2, t = lane & 3;\n(void)g; (void)t;\n"

// fragsA declares the warp's A fragments of a [·, width] tile at rows w·16…: name_kk for
// each 16 columns.
func fragsA(name, tile string, width int) string {
	var b strings.Builder
	for kk := 0; kk < width/16; kk++ {
		fmt.Fprintf(&b, "const ppc_fa %s_%d = ppc_frag_a(%s + w * 16 * %d + %d, %d, lane);\n", name, kk, tile, ld(width), kk*16, ld(width))
	}
	return b.String()
}

// product writes c[0..3] (names c0…c3) += A(16 × 16·len(frags)) · Bᵀ where B's column n is
// row n0 + n of tile (width columns): the sum over the A fragments' column blocks.
func (m *mmaGen) productBt(c [4]string, a string, kblocks int, tile string, width int, n0 string) string {
	var b strings.Builder
	for kk := 0; kk < kblocks; kk++ {
		fmt.Fprintf(&b, "%s(%s, %s, %s, %s, %s_%d, ppc_frag_bt(%s + (%s) * %d + %d, %d, lane), lane);\n",
			m.mma, c[0], c[1], c[2], c[3], a, kk, tile, n0, ld(width), kk*16, ld(width))
	}
	return b.String()
}

// productBtFrom is productBt with each A fragment loaded where it is used, from the warp's
// rows of tileA (width columns), rather than held in registers across the tile: the dk/dv
// kernel holds two accumulators of the head dim besides, and run 7's Nsight Compute saw it at
// 198 registers a thread, two blocks an SM; ldmatrix makes the reload one instruction.
func (m *mmaGen) productBtFrom(c [4]string, tileA string, kblocks int, tile string, width int, n0 string) string {
	var b strings.Builder
	for kk := 0; kk < kblocks; kk++ {
		fmt.Fprintf(&b, "%s(%s, %s, %s, %s, ppc_frag_a(%s + w * 16 * %d + %d, %d, lane), ppc_frag_bt(%s + (%s) * %d + %d, %d, lane), lane);\n",
			m.mma, c[0], c[1], c[2], c[3], tileA, ld(width), kk*16, ld(width), tile, n0, ld(width), kk*16, ld(width))
	}
	return b.String()
}

// accumulate writes acc (an array of 4 per 8 columns) += A · B for A the warp's rows of a
// [·, k] 16-bit tile at, and B rows of the [k, width] tile bt: k in blocks of 16.
func (m *mmaGen) accumulate(acc, at string, k int, bt string, width int) string {
	var b strings.Builder
	for kk := 0; kk < k/16; kk++ {
		fmt.Fprintf(&b, "{\n  const ppc_fa pa = ppc_frag_a(%s + w * 16 * %d + %d, %d, lane);\n", at, ld(k), kk*16, ld(k))
		for nt := 0; nt < width/8; nt++ {
			fmt.Fprintf(&b, "  %s(%s[%d], %s[%d], %s[%d], %s[%d], pa, ppc_frag_b(%s + %d * %d + %d, %d, lane), lane);\n",
				m.mma, acc, 4*nt, acc, 4*nt+1, acc, 4*nt+2, acc, 4*nt+3, bt, kk*16, ld(width), nt*8, ld(width))
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// storeFrags writes a warp's accumulator rows to out: for each of the lane's elements of row
// (w·16 + g [+ 8]) and column c < width, out[rowOf(row) · width + c] = value(acc element).
func (m *mmaGen) storeFrags(acc string, width, padded int, valid, rowAt, value string, dt ir.DType) string {
	var b strings.Builder
	for half := 0; half < 2; half++ {
		fmt.Fprintf(&b, "{\n  const int row = w * 16 + g + %d;\n  if (%s) {\n    const long long rr = %s;\n", 8*half, m.c(valid), m.c(rowAt))
		for nt := 0; nt < padded/8; nt++ {
			for e := 0; e < 2; e++ {
				fmt.Fprintf(&b, "    if (%d + 2 * t + %d < %d) out_[rr * %dLL + %d + 2 * t + %d] = %s;\n", nt*8, e, width, width, nt*8, e,
					store(dt, round(dt, m.c(fmt.Sprintf(value, fmt.Sprintf("%s[%d]", acc, 4*nt+2*half+e))))))
			}
		}
		b.WriteString("  }\n}\n")
	}
	return b.String()
}

// kernelSpec is the writer of a tile kernel of $NT threads (two per row of the block).
func (m *mmaGen) kernelSpec(tiles int64, shared []tileVar, private []tileVar, setup string, body ...tileItem) func(s *device.Spec, name string) (Kernel, error) {
	block := m.nt
	return func(s *device.Spec, name string) (Kernel, error) {
		tk := &tileKernel{tiles: tiles, block: block, shared: shared, private: private, setup: setup, body: body}
		return tk.kernel(s, name)
	}
}

func planAttentionMMA(s *device.Spec) ([]ir.Type, []planStep, error) {
	m, err := newMMAGen(s, 3)
	if err != nil {
		return nil, nil, err
	}
	d := m.d
	in := []Ref{op0, op1, op2}
	if len(s.In) > 3 {
		in = append(in, Ref{Operand, 3})
	}
	br, bc := m.br, m.bc
	shared := []tileVar{{"uint16_t", "qs", br * ld(m.d16)}, {"uint16_t", "ks", bc * ld(m.d16)}, {"uint16_t", "vs", bc * ld(m.dv16)},
		{"uint16_t", "ps", br * ld(bc)}, {"float", "red", br * 4}, {"float", "m_s", br}, {"float", "l_s", br}}
	// A lane's scores sv (its four elements of each 8 keys: rows g and g + 8), and for its two
	// rows the running maximum mr and its own columns' share of the running sum lr.
	private := []tileVar{{"float", "o", m.dv16 / 8 * 4}, {"float", "sv", bc / 8 * 4}, {"float", "mr", 2}, {"float", "lr", 2}}
	init := zeros("o", m.dv16/8*4) + "mr[0] = -PPC_INF; mr[1] = -PPC_INF; lr[0] = 0; lr[1] = 0;\n" +
		m.stageBits("qs", br, d.D, m.d16, "in0", "bh * $SQ", "q0", "$SQ")
	staging := m.stageBits("ks", bc, d.D, m.d16, "in1", "kvh * $SKV", "j0", "kend") + m.stageBits("vs", bc, d.Dv, m.dv16, "in2", "kvh * $SKV", "j0", "kend")
	// S = Q·Kᵀ, a warp's 16 rows by the tile's bc keys, scaled and masked in the lanes' own
	// registers; each lane's maximum of its share of each row goes to red (row·4 + t).
	var sp strings.Builder
	sp.WriteString(lanes + fragsA("qa", "qs", m.d16))
	for nt := 0; nt < bc/8; nt++ {
		fmt.Fprintf(&sp, "{\n  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;\n%s", indent(m.productBt([4]string{"s0", "s1", "s2", "s3"}, "qa", m.d16/16, "ks", m.d16, fmt.Sprint(nt*8)), "  "))
		body := m.c("const long long qi = q0 + row, j = j0 + col;\n$T x = @v * $SCALE;\n") +
			m.visible("qi < $SQ && j < kend", "qi", "j", "x", "in3") + "sv[@i] = vis ? x : -PPC_INF;\n"
		sp.WriteString(indent(eachElem(nt, body), "  "))
		sp.WriteString("}\n")
	}
	sp.WriteString("float pm0 = -PPC_INF, pm1 = -PPC_INF;\n")
	for i := 0; i < bc/8*4; i++ {
		fmt.Fprintf(&sp, "if (sv[%d] > pm%d) pm%d = sv[%d];\n", i, i%4/2, i%4/2, i)
	}
	sp.WriteString("red[(w * 16 + g) * 4 + t] = pm0;\nred[(w * 16 + g + 8) * 4 + t] = pm1;\n")
	// The online softmax in the lanes: a row's maximum from its four lanes' shares, the
	// correction α of the lane's O and sum, and P (rounded to the operands' type, as
	// FlashAttention-2 does) into ps for P·V.
	var soft strings.Builder
	soft.WriteString(lanes)
	for h := 0; h < 2; h++ {
		fmt.Fprintf(&soft, "{\n  const int row = w * 16 + g + %d;\n  float mt = red[row * 4];\n", 8*h)
		for q := 1; q < 4; q++ {
			fmt.Fprintf(&soft, "  if (red[row * 4 + %d] > mt) mt = red[row * 4 + %d];\n", q, q)
		}
		fmt.Fprintf(&soft, "  const float mo = mr[%d], mn = mo > mt ? mo : mt, alpha = mn == -PPC_INF ? 1.0f : ppc_expo(mo - mn);\n  mr[%d] = mn;\n  float l = 0;\n", h, h)
		for nt := 0; nt < bc/8; nt++ {
			for e := 2 * h; e < 2*h+2; e++ {
				fmt.Fprintf(&soft, "  {\n    const int col = %d + 2 * t + %d;\n    const float p = mn == -PPC_INF ? 0.0f : %s;\n    ps[row * %d + col] = %s;\n    l += p;\n  }\n",
					nt*8, e%2, round(m.dt, fmt.Sprintf("ppc_expo(sv[%d] - mn)", 4*nt+e)), ld(bc), store(m.dt, "p"))
			}
		}
		fmt.Fprintf(&soft, "  lr[%d] = lr[%d] * alpha + l;\n", h, h)
		for nt := 0; nt < m.dv16/8; nt++ {
			fmt.Fprintf(&soft, "  o[%d] *= alpha; o[%d] *= alpha;\n", 4*nt+2*h, 4*nt+2*h+1)
		}
		soft.WriteString("}\n")
	}
	// O += P·V.
	pv := lanes + m.accumulate("o", "ps", bc, "vs", m.dv16)
	// The rows' sums from their lanes' shares, in a fixed order; then O / l and the lse.
	sums := lanes + "red[(w * 16 + g) * 4 + t] = lr[0];\nred[(w * 16 + g + 8) * 4 + t] = lr[1];\n"
	rows := lanes + "if (t == 0) {\n  const int r0 = w * 16 + g, r1 = r0 + 8;\n" +
		"  l_s[r0] = red[r0 * 4] + red[r0 * 4 + 1] + red[r0 * 4 + 2] + red[r0 * 4 + 3];\n  m_s[r0] = mr[0];\n" +
		"  l_s[r1] = red[r1 * 4] + red[r1 * 4 + 1] + red[r1 * 4 + 2] + red[r1 * 4 + 3];\n  m_s[r1] = mr[1];\n}\n"
	final := lanes + strings.ReplaceAll(m.storeFrags("o", d.Dv, m.dv16, "q0 + row < $SQ", "bh * $SQ + q0 + row", "(l_s[row] == 0 ? 0.0f : %s / l_s[row])", m.dt), "out_[", "out[") +
		m.c("if (tid < $BR && q0 + tid < $SQ) {\n  const $T l = l_s[tid];\n  out1[bh * $SQ + q0 + tid] = "+store(m.lseDType, round(m.lseDType, "l == 0 ? ($T)-PPC_INF : m_s[tid] + ppc_loga(l)"))+";\n}\n")
	tiles := int64(d.Batch * d.Hq * ceilDiv(d.Sq, br))
	fwd := m.kernelSpec(tiles, shared, private, m.queryTiles(),
		phase(init), loop(m.c("for (long long j0 = 0; j0 < kend; j0 += $BC)"), phase(staging), phase(sp.String()), phase(soft.String()), phase(pv)),
		phase(sums), phase(rows), phase(final))
	return nil, []planStep{{in: in, also: []Ref{res1}, out: res0, row: fwd}}, nil
}

func planAttentionGradMMA(s *device.Spec) ([]ir.Type, []planStep, error) {
	m, err := newMMAGen(s, 6)
	if err != nil {
		return nil, nil, err
	}
	if len(s.In) < 6 {
		return nil, nil, fmt.Errorf("want q, k, v, o, lse and do")
	}
	d := m.d
	if s.In[5].DType != m.dt {
		return nil, nil, fmt.Errorf("do is %s, q %s", s.In[5].DType, m.dt)
	}
	deltaType, deltaStep, grads := attnGradInputs(s, m.attnGen)
	lseAt := func(r string) string { return load(m.lseDType, "in4", r) }
	br, bc := m.br, m.bc

	// dq: a block per query tile.
	dqInit := zeros("acc", m.d16/8*4) +
		m.stageBits("qs", br, d.D, m.d16, "in0", "bh * $SQ", "q0", "$SQ") + m.stageBits("dos", br, d.Dv, m.dv16, "in3", "bh * $SQ", "q0", "$SQ") +
		m.c("if (tid < $BR) {\n  const bool ok = q0 + tid < $SQ;\n  lse_s[tid] = ok ? "+lseAt("bh * $SQ + q0 + tid")+" : ($T)-PPC_INF;\n  dl_s[tid] = ok ? in5[bh * $SQ + q0 + tid] : 0;\n}\n")
	dqStage := m.stageBits("ks", bc, d.D, m.d16, "in1", "kvh * $SKV", "j0", "kend") + m.stageBits("vs", bc, d.Dv, m.dv16, "in2", "kvh * $SKV", "j0", "kend")
	var dqc strings.Builder
	dqc.WriteString(lanes + fragsA("qa", "qs", m.d16) + fragsA("da", "dos", m.dv16))
	for nt := 0; nt < bc/8; nt++ {
		fmt.Fprintf(&dqc, "{\n  float s0 = 0, s1 = 0, s2 = 0, s3 = 0, p0 = 0, p1 = 0, p2 = 0, p3 = 0;\n%s%s", indent(m.productBt([4]string{"s0", "s1", "s2", "s3"}, "qa", m.d16/16, "ks", m.d16, fmt.Sprint(nt*8)), "  "),
			indent(m.productBt([4]string{"p0", "p1", "p2", "p3"}, "da", m.dv16/16, "vs", m.dv16, fmt.Sprint(nt*8)), "  "))
		body := m.c("const long long qi = q0 + row, j = j0 + col;\nconst $T lse = lse_s[row];\n$T x = @v * $SCALE;\n") +
			m.visible("qi < $SQ && j < kend && lse != -PPC_INF", "qi", "j", "x", "in6") +
			m.c("const $T ds = vis ? ppc_expo(x - lse) * (@p - dl_s[row]) : ($T)0, dh = "+round(m.dt, "ds")+";\n"+
				"dss[row * $LP + col] = "+store(m.dt, "dh")+";\ndsl[row * $LP + col] = "+store(m.dt, "ds - dh")+";\n")
		dqc.WriteString(indent(eachElem(nt, body), "  "))
		dqc.WriteString("}\n")
	}
	dqUpd := lanes + m.accumulate("acc", "dss", bc, "ks", m.d16) + m.accumulate("acc", "dsl", bc, "ks", m.d16)
	dqFinal := lanes + strings.ReplaceAll(m.storeFrags("acc", d.D, m.d16, "q0 + row < $SQ", "bh * $SQ + q0 + row", "$SCALE * %s", m.dt), "out_[", "out[")
	dq := m.kernelSpec(int64(d.Batch*d.Hq*ceilDiv(d.Sq, br)),
		[]tileVar{{"uint16_t", "qs", br * ld(m.d16)}, {"uint16_t", "dos", br * ld(m.dv16)}, {"uint16_t", "ks", bc * ld(m.d16)}, {"uint16_t", "vs", bc * ld(m.dv16)},
			{"uint16_t", "dss", br * ld(bc)}, {"uint16_t", "dsl", br * ld(bc)}, {"float", "lse_s", br}, {"float", "dl_s", br}},
		[]tileVar{{"float", "acc", m.d16 / 8 * 4}},
		m.queryTiles(), phase(dqInit), loop(m.c("for (long long j0 = 0; j0 < kend; j0 += $BC)"), phase(dqStage), phase(dqc.String()), phase(dqUpd)), phase(dqFinal))

	// dk and dv: a block per br key rows of a kv head, over the group's query heads and their
	// query tiles of bc rows (causal: from the first that sees the block).
	keySetup := "const long long kvh = tile / $NKT, k0 = (tile % $NKT) * $BR;\nconst long long bb = kvh / $HKV, gg = kvh % $HKV;\n(void)bb;\n"
	if m.causal {
		keySetup += "long long qstart = k0 - $OFF;\nif (qstart < 0) qstart = 0;\nqstart -= qstart % $BC;\n"
	} else {
		keySetup += "const long long qstart = 0;\n"
	}
	kvInit := zeros("dk", m.d16/8*4) + zeros("dv", m.dv16/8*4) +
		m.stageBits("ks", br, d.D, m.d16, "in1", "kvh * $SKV", "k0", "$SKV") + m.stageBits("vs", br, d.Dv, m.dv16, "in2", "kvh * $SKV", "k0", "$SKV")
	kvStage := m.c("const long long bh = bb * $HQ + gg * $G + hh;\n") +
		m.stageBits("qs", bc, d.D, m.d16, "in0", "bh * $SQ", "i0", "$SQ") + m.stageBits("dos", bc, d.Dv, m.dv16, "in3", "bh * $SQ", "i0", "$SQ") +
		m.c("if (tid < $BC) {\n  const bool ok = i0 + tid < $SQ;\n  ls[tid] = ok ? "+lseAt("bh * $SQ + i0 + tid")+" : ($T)-PPC_INF;\n  dls[tid] = ok ? in5[bh * $SQ + i0 + tid] : 0;\n}\n")
	var kvc strings.Builder
	kvc.WriteString(lanes + m.c("const long long h = gg * $G + hh;\n(void)h;\n") + m.maskBase())
	for nt := 0; nt < bc/8; nt++ {
		fmt.Fprintf(&kvc, "{\n  float s0 = 0, s1 = 0, s2 = 0, s3 = 0, p0 = 0, p1 = 0, p2 = 0, p3 = 0;\n%s%s", indent(m.productBtFrom([4]string{"s0", "s1", "s2", "s3"}, "ks", m.d16/16, "qs", m.d16, fmt.Sprint(nt*8)), "  "),
			indent(m.productBtFrom([4]string{"p0", "p1", "p2", "p3"}, "vs", m.dv16/16, "dos", m.dv16, fmt.Sprint(nt*8)), "  "))
		// Here row is a key row of the block and col a query row of the tile.
		body := m.c("const long long j = k0 + row, qi = i0 + col;\nconst $T lse = ls[col];\n$T x = @v * $SCALE;\n") +
			m.visible("qi < $SQ && j < $SKV && lse != -PPC_INF", "qi", "j", "x", "in6") +
			m.c("const $T p = vis ? ppc_expo(x - lse) : ($T)0;\npts[row * $LP + col] = "+store(m.dt, "p")+";\n"+
				"const $T ds = p * (@p - dls[col]), dh = "+round(m.dt, "ds")+";\ndsts[row * $LP + col] = "+store(m.dt, "dh")+";\ndstl[row * $LP + col] = "+store(m.dt, "ds - dh")+";\n")
		kvc.WriteString(indent(eachElem(nt, body), "  "))
		kvc.WriteString("}\n")
	}
	kvUpd := lanes + m.accumulate("dv", "pts", bc, "dos", m.dv16) + m.accumulate("dk", "dsts", bc, "qs", m.d16) + m.accumulate("dk", "dstl", bc, "qs", m.d16)
	kvFinal := lanes + strings.ReplaceAll(m.storeFrags("dk", d.D, m.d16, "k0 + row < $SKV", "kvh * $SKV + k0 + row", "$SCALE * %s", m.k.DType), "out_[", "out[") +
		strings.ReplaceAll(m.storeFrags("dv", d.Dv, m.dv16, "k0 + row < $SKV", "kvh * $SKV + k0 + row", "%s", m.v.DType), "out_[", "out1[")
	dkv := m.kernelSpec(int64(d.Batch*d.Hkv*ceilDiv(d.Skv, br)),
		[]tileVar{{"uint16_t", "ks", br * ld(m.d16)}, {"uint16_t", "vs", br * ld(m.dv16)}, {"uint16_t", "qs", bc * ld(m.d16)}, {"uint16_t", "dos", bc * ld(m.dv16)},
			{"uint16_t", "pts", br * ld(bc)}, {"uint16_t", "dsts", br * ld(bc)}, {"uint16_t", "dstl", br * ld(bc)}, {"float", "ls", bc}, {"float", "dls", bc}},
		[]tileVar{{"float", "dk", m.d16 / 8 * 4}, {"float", "dv", m.dv16 / 8 * 4}},
		m.c(keySetup), phase(kvInit),
		loop("for (long long hh = 0; hh < "+m.c("$G")+"; hh++)",
			loop(m.c("for (long long i0 = qstart; i0 < $SQ; i0 += $BC)"), phase(kvStage), phase(kvc.String()), phase(kvUpd))),
		phase(kvFinal))
	return []ir.Type{deltaType}, []planStep{
		deltaStep,
		{in: grads, out: res0, row: dq},
		{in: grads, out: Ref{Result, 1}, also: []Ref{{Result, 2}}, row: dkv},
	}, nil
}

// eachElem writes body once per element e < 4 of a lane's tile of D at column block nt,
// with the element's row (within the block) and column (within the tile) as the constants
// `row` and `col`, @v and @p naming its registers s_e and p_e (S and dP), and @i its index
// 4·nt + e among the lane's elements of the whole tile.
func eachElem(nt int, body string) string {
	var b strings.Builder
	for e := 0; e < 4; e++ {
		r := strings.NewReplacer("@v", fmt.Sprintf("s%d", e), "@p", fmt.Sprintf("p%d", e), "@i", fmt.Sprint(4*nt+e))
		fmt.Fprintf(&b, "{\n  const int row = w * 16 + g + %d, col = %d + 2 * t + %d;\n%s}\n", 8*(e/2), nt*8, e%2, indent(r.Replace(body), "  "))
	}
	return b.String()
}
