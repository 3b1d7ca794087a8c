package cuda

import (
	"fmt"
	"math"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Attention and its gradient as FlashAttention-2's tiled kernels (tile kernels, tiles.go),
// with fp32 accumulation (fp64 for f64), bf16/fp16 operands widened once as they are staged
// and results rounded once on store. The scores exist only per thread, a tile's row at a
// time, so memory is O(s·d) as on the CPU device.
//
//	attention       one kernel: a block per (batch·head, tile of 128 query rows), a
//	                thread per query row; the key and value tiles of attnCols(…) rows are
//	                staged in shared memory in turn; each thread keeps its row's running
//	                maximum, sum and output accumulator in registers (the online softmax) and
//	                writes o and the row's log-sum-exp. Under causal masking a block stops at
//	                the last key tile its rows can see (bottom-right aligned, as the CPU
//	                device), so the blocks of early queries skip the fully masked tiles.
//	attention_grad  δ = rowsum(dO ∘ O) into scratch (a thread per row); dq (a block per query
//	                tile as the forward, looping over key tiles, recomputing p from lse); dk
//	                and dv (a block per (batch·kv head, tile of 128 key rows), a thread
//	                per key row, looping over the group's query heads and their query tiles
//	                staged in shared memory, causal blocks starting at the first query tile
//	                that sees them).
//
// Blocks are 128 rows, fewer (down to a warp) for sequences shorter than that (attnRows).
//
// dq is a kernel of its own rather than FlashAttention-2's atomicAdd from the key-tile
// blocks: every result has one writer and a fixed order of summation, so the results do not
// depend on the blocks' timing, and every layout trains bit-identically run to run. dk and dv
// are two kernels because a kernel writes a result per thread with its accumulator in
// registers, and a key row's dk and dv together (2·128 fp32 at head dim 128, beside the
// scores) would spill; each recomputes the scores. The backward so does about 8 of the 5
// tile products FlashAttention-2's one pass does (measured figures: README's CUDA section).
//
// These kernels are for f32 and f64 operands (and 16-bit ones whose head dims are too wide
// for the tensor-core tiles): the products are FMAs on the CUDA cores. bf16 and f16 run on
// tensor cores (kernels_attention_mma.go), measured on an H100 at GPT-2 small's sizes: these
// kernels took 10.1 ms for a forward and backward at seq 1024 (4.5 TFLOP/s; bench/NOTES.md).

// attnRows is the block of a tile kernel over n query (or key) rows: rows per block, a thread
// each — 128, or down to a warp for short sequences (a tiny model's 32 tokens would leave
// three quarters of a block of 128 idle).
func attnRows(n int) int {
	r := 128
	for r > 32 && r/2 >= n {
		r /= 2
	}
	return r
}

// attnSharedBudget bounds a tile kernel's staged tiles, below the 48 KiB of static shared
// memory a block may have without opting in.
const attnSharedBudget = 40 << 10

// attnCols is the staged tile's rows (keys for the forward and dq, queries for dk and dv):
// 32, halved until the tiles of width d + dv fit the budget. It is also the number of
// per-thread score registers, and the generator unrolls every loop over them: 64 doubled
// the source (and the host build's compile time, a minute more for the test cases) for
// fewer, longer tiles.
func attnCols(d, dv, elem int) int {
	c := 32
	for c > 1 && c*(d+dv+2)*elem > attnSharedBudget {
		c /= 2
	}
	return c
}

func init() {
	planners["attention"] = planAttention
	planners["attention_grad"] = planAttentionGrad
}

// attnGen is what the kernels of one site share: sizes, options and the C of the scores.
type attnGen struct {
	d         ir.AttentionDims
	ty        string // the compute type
	elem      int    // its bytes
	scale     string
	causal    bool
	maskDType ir.DType // 0: no mask
	maskSt    []int    // the mask's strides against the scores' shape
	lead      ir.Shape // the scores' leading dims
	q, k, v   ir.Type
	lseDType  ir.DType
	cols      int
	br        int // the current kernel's rows per block (side)
	r         *strings.Replacer
}

func newAttnGen(s *device.Spec, maskAt int) (*attnGen, error) {
	d, mask, err := ir.AttentionOperands(s.In, maskAt)
	if err != nil {
		return nil, err
	}
	q, kt, v := s.In[0], s.In[1], s.In[2]
	ct := classOf(q.DType)
	g := &attnGen{d: d, ty: ct.ctype(), elem: 4, causal: s.Attrs.Bool("causal", false), q: q, k: kt, v: v,
		lseDType: ir.AttentionLSEType(q.DType)}
	if ct == classDouble {
		g.elem = 8
	}
	g.scale = fmt.Sprintf("(%s)%.17g", g.ty, s.Attrs.Float("scale", 1/math.Sqrt(float64(d.D))))
	if mask != nil {
		r := q.Rank()
		scores := append(append(ir.Shape{}, q.Shape[:r-1]...), d.Skv)
		g.maskDType, g.maskSt, g.lead = mask.DType, broadcastStrides(mask.Shape, scores), scores[:r-3]
	}
	g.cols = attnCols(d.D, d.Dv, g.elem)
	for g.cols > 8 && g.cols/2 >= max(d.Sq, d.Skv) {
		g.cols /= 2 // short sequences: tiles no longer than them
	}
	g.side(d.Sq)
	return g, nil
}

// side sets the rows per block of the kernels written next: attnRows of n, the query rows
// (the forward, dq) or the key rows (dk, dv).
func (g *attnGen) side(n int) {
	d := g.d
	g.br = attnRows(n)
	c := func(x int) string { return fmt.Sprintf("%dLL", x) }
	g.r = strings.NewReplacer("$T", g.ty, "$DV", c(d.Dv), "$D", c(d.D), "$SQ", c(d.Sq), "$SKV", c(d.Skv),
		"$HQ", c(d.Hq), "$HKV", c(d.Hkv), "$G", c(d.Hq/d.Hkv), "$OFF", c(d.Skv-d.Sq), "$BC", fmt.Sprint(g.cols),
		"$BR", c(g.br), "$NQT", c(ceilDiv(d.Sq, g.br)), "$NKT", c(ceilDiv(d.Skv, g.br)), "$SCALE", g.scale)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// c expands the $ names of a template: sizes as long long constants ($BC, the staged tile's
// rows, as an int for the unrolled loops), $T the compute type, $SCALE.
func (g *attnGen) c(tmpl string) string { return g.r.Replace(tmpl) }

// maskBase is the statement setting mb, the mask's offset for batch index bb and query head h.
func (g *attnGen) maskBase() string {
	if g.maskDType == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("long long mb = 0;\n{\n  long long rb = bb;\n")
	for i := len(g.lead) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "  mb += (rb %% %dLL) * %dLL; rb /= %dLL;\n", g.lead[i], g.maskSt[i], g.lead[i])
	}
	fmt.Fprintf(&b, "  (void)rb; mb += h * %dLL;\n}\n", g.maskSt[len(g.maskSt)-3])
	return b.String()
}

// visible writes `bool vis` for query qi and key j (in range when inRange holds), adding an
// additive mask to the scaled score x, as the CPU device: causal hides j > qi + Skv − Sq, a
// boolean mask its false entries, and a score of −∞ hides the key. mask is the mask's operand.
func (g *attnGen) visible(inRange, qi, j, x, mask string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bool vis = %s;\n", inRange)
	if g.causal {
		fmt.Fprintf(&b, "if (%s > %s + $OFF) vis = false;\n", j, qi)
	}
	if g.maskDType != 0 {
		r := len(g.maskSt)
		off := fmt.Sprintf("mb + %s * %dLL + %s * %dLL", qi, g.maskSt[r-2], j, g.maskSt[r-1])
		if g.maskDType == ir.Bool {
			fmt.Fprintf(&b, "if (vis && !%s[%s]) vis = false;\n", mask, off)
		} else {
			fmt.Fprintf(&b, "if (vis) %s += %s;\n", x, load(g.maskDType, mask, off))
		}
	}
	fmt.Fprintf(&b, "if (%s == -PPC_INF) vis = false;\n", x)
	return g.c(b.String())
}

// dots declares the registers acc_k = Σ_c x(c)·tile[k·width + c], k < $BC: the thread's
// row (in global memory, read once per c) against the staged tile's rows. The generator
// unrolls every loop over k itself, so the scores are scalars: an array, even under
// #pragma unroll, stayed in local memory in clang's PTX (the loop over c around it is not
// unrolled), where the scores must be registers.
func (g *attnGen) dots(acc string, width int, x string, tile string) string {
	var b strings.Builder
	names := make([]string, g.cols)
	for k := range names {
		names[k] = fmt.Sprintf("%s_%d", acc, k)
	}
	fmt.Fprintf(&b, "$T %s;\n", strings.Join(names, ", "))
	if width == 0 {
		for _, n := range names {
			fmt.Fprintf(&b, "%s = 0;\n", n)
		}
		return g.c(b.String())
	}
	fmt.Fprintf(&b, "{\n  const long long c = 0;\n  const $T x = %s;\n", x)
	for k, n := range names {
		fmt.Fprintf(&b, "  %s = x * %s[%d];\n", n, tile, k*width)
	}
	fmt.Fprintf(&b, "}\nfor (long long c = 1; c < %dLL; c++) {\n  const $T x = %s;\n", width, x)
	for k, n := range names {
		fmt.Fprintf(&b, "  %s += x * %s[%d + c];\n", n, tile, k*width)
	}
	b.WriteString("}\n")
	return g.c(b.String())
}

// eachK writes body once per k < $BC, as a block with the constant k and with @s and @dp
// naming the registers s_k and dp_k.
func (g *attnGen) eachK(body string) string {
	var b strings.Builder
	for k := 0; k < g.cols; k++ {
		r := strings.NewReplacer("@s", fmt.Sprintf("s_%d", k), "@dp", fmt.Sprintf("dp_%d", k))
		fmt.Fprintf(&b, "{\n  const int k = %d;\n%s}\n", k, indent(r.Replace(g.c(body)), "  "))
	}
	return b.String()
}

// zeros writes acc[c] = 0 for c < n, one statement each: as a loop, clang made it a memset
// before unrolling it, and the array went to local memory (seen in the PTX).
func zeros(acc string, n int) string {
	var b strings.Builder
	for c := 0; c < n; c++ {
		fmt.Fprintf(&b, "%s[%d] = 0;\n", acc, c)
	}
	return b.String()
}

// storeRow writes row r of out, n elements of dtype dt, element c the value v (a format
// of c), one statement each: a loop, even under #pragma unroll, stayed a loop where the
// store's rounding is long (f16), indexing the accumulator array at run time, which put it in
// local memory (seen in the PTX).
func storeRow(out, r string, n int, dt ir.DType, v string) string {
	var b strings.Builder
	for c := 0; c < n; c++ {
		fmt.Fprintf(&b, "%s[%s * %dLL + %d] = %s;\n", out, r, n, c, store(dt, round(dt, fmt.Sprintf(v, c))))
	}
	return b.String()
}

// stage writes the loop of a block's threads loading rows [r0, r0 + $BC) of a [rows, width]
// operand (rows from base) into tile, widened, zeros past end. The tile's element index is an
// int (a tile holds at most $BC·width elements): NVRTC 11.8 rejects the kernel for sm_90
// ("unsupported operation") when the loop divides a 64-bit index by a width that is not a
// power of two (head dims 80, 37, 19), and 32-bit division is cheaper anyway.
func (g *attnGen) stage(tile string, width int, dt ir.DType, op, base, r0, end string) string {
	return g.c(fmt.Sprintf("for (int e = (int)tid; e < $BC * %d; e += $BR) {\n  const long long i = %s + e / %d;\n  %s[e] = i < %s ? %s : ($T)0;\n}\n",
		width, r0, width, tile, end, load(dt, op, fmt.Sprintf("(%s + i) * %dLL + e %% %d", base, width, width))))
}

// queryTiles is the setup of a kernel over query tiles (the forward, dq): bh, the tile's
// first row q0 (the last tiles first, which under causal masking have the most keys), bb, h,
// the kv head kvh, the keys' end kend (causal: the last key the tile's last row sees) and mb.
func (g *attnGen) queryTiles() string {
	s := "const long long bh = tile / $NQT, q0 = ($NQT - 1 - tile % $NQT) * $BR;\n" +
		"const long long bb = bh / $HQ, h = bh % $HQ, kvh = bb * $HKV + h / $G;\n"
	if g.causal {
		s += "long long kend = (q0 + $BR < $SQ ? q0 + $BR : $SQ) + $OFF;\nif (kend > $SKV) kend = $SKV;\nif (kend < 0) kend = 0;\n"
	} else {
		s += "const long long kend = $SKV;\n"
	}
	return g.c(s+"(void)bb; (void)h;\n") + g.maskBase()
}

// kernelSpec is the writer of a tile kernel of the current side's block.
func (g *attnGen) kernelSpec(tiles int64, shared []tileVar, private []tileVar, setup string, body ...tileItem) func(s *device.Spec, name string) (Kernel, error) {
	block := g.br
	return func(s *device.Spec, name string) (Kernel, error) {
		tk := &tileKernel{tiles: tiles, block: block, shared: shared, private: private, setup: setup, body: body}
		return tk.kernel(s, name)
	}
}

func planAttention(s *device.Spec) ([]ir.Type, []planStep, error) {
	if mmaAttention(s, 3) {
		return planAttentionMMA(s)
	}
	g, err := newAttnGen(s, 3)
	if err != nil {
		return nil, nil, err
	}
	if len(s.Out) != 2 {
		return nil, nil, fmt.Errorf("want results o and lse")
	}
	d := g.d
	in := []Ref{op0, op1, op2}
	if len(s.In) > 3 {
		in = append(in, Ref{Operand, 3})
	}
	// in0 q, in1 k, in2 v [, in3 mask]; out1 lse, out o.
	shared := []tileVar{{g.ty, "ks", max(g.cols*d.D, 1)}, {g.ty, "vs", max(g.cols*d.Dv, 1)}}
	private := []tileVar{{g.ty, "m_r", 0}, {g.ty, "l_r", 0}, {g.ty, "acc", max(d.Dv, 1)}}
	row := "const long long qi = q0 + tid;\nif (qi >= $SQ) continue;\nconst long long r = bh * $SQ + qi;\n"
	init := g.c("m_r = -PPC_INF;\nl_r = 0;\n") + zeros("acc", d.Dv)
	staging := g.stage("ks", d.D, g.k.DType, "in1", "kvh * $SKV", "j0", "kend") + g.stage("vs", d.Dv, g.v.DType, "in2", "kvh * $SKV", "j0", "kend")
	compute := g.c(row) + g.dots("s", d.D, load(g.q.DType, "in0", g.c("r * $D + c")), "ks") + g.c("$T mt = -PPC_INF;\n") +
		g.eachK("const long long j = j0 + k;\n$T x = @s * $SCALE;\n"+g.visible("j < $SKV", "qi", "j", "x", "in3")+
			"@s = vis ? x : ($T)-PPC_INF;\nif (vis && x > mt) mt = x;\n") +
		g.c(`if (mt == -PPC_INF) continue;
const $T mn = m_r > mt ? m_r : mt, alpha = ppc_expo(m_r - mn);
l_r *= alpha;
PPC_UNROLL for (int c = 0; c < $DV; c++) acc[c] *= alpha;
`) + g.eachK("const $T p = ppc_expo(@s - mn);\nl_r += p;\nPPC_UNROLL for (int c = 0; c < $DV; c++) acc[c] += p * vs[k * $DV + c];\n") + "m_r = mn;\n"
	final := g.c(row) + storeRow("out", "r", d.Dv, g.q.DType, g.c("l_r == 0 ? ($T)0 : acc[%d] / l_r")) +
		g.c(fmt.Sprintf("out1[r] = %s;\n", store(g.lseDType, round(g.lseDType, "l_r == 0 ? ($T)-PPC_INF : m_r + ppc_loga(l_r)"))))
	tiles := int64(d.Batch * d.Hq * ceilDiv(d.Sq, g.br))
	fwd := g.kernelSpec(tiles, shared, private, g.queryTiles(),
		phase(init), loop(g.c("for (long long j0 = 0; j0 < kend; j0 += $BC)"), phase(staging), phase(compute)), phase(final))
	return nil, []planStep{{in: in, also: []Ref{res1}, out: res0, row: fwd}}, nil
}

func planAttentionGrad(s *device.Spec) ([]ir.Type, []planStep, error) {
	if mmaAttention(s, 6) {
		return planAttentionGradMMA(s)
	}
	g, err := newAttnGen(s, 6)
	if err != nil {
		return nil, nil, err
	}
	if len(s.In) < 6 {
		return nil, nil, fmt.Errorf("want q, k, v, o, lse and do")
	}
	d := g.d
	deltaType, deltaStep, grads := attnGradInputs(s, g)
	doT := s.In[5]
	lseAt := func(r string) string { return load(g.lseDType, "in4", r) }

	// dq: a block per query tile, a thread per query row, over the key tiles.
	dqRow := "const long long qi = q0 + tid;\nif (qi >= $SQ) continue;\nconst long long r = bh * $SQ + qi;\n"
	dqInit := zeros("acc", d.D) + g.c(dqRow) + "lse_r = " + lseAt("r") + ";\ndl_r = in5[r];\n"
	dqLoad := g.stage("ks", d.D, g.k.DType, "in1", "kvh * $SKV", "j0", "kend") + g.stage("vs", d.Dv, g.v.DType, "in2", "kvh * $SKV", "j0", "kend")
	dqCompute := g.c(dqRow+"if (lse_r == -PPC_INF) continue;\n") +
		g.dots("s", d.D, load(g.q.DType, "in0", g.c("r * $D + c")), "ks") +
		g.dots("dp", d.Dv, load(doT.DType, "in3", g.c("r * $DV + c")), "vs") +
		g.eachK("const long long j = j0 + k;\n$T x = @s * $SCALE;\n"+g.visible("j < $SKV", "qi", "j", "x", "in6")+
			"@s = vis ? ppc_expo(x - lse_r) * (@dp - dl_r) : ($T)0;\n") +
		g.eachK("PPC_UNROLL for (int c = 0; c < $D; c++) acc[c] += @s * ks[k * $D + c];\n")
	dqFinal := g.c(dqRow) + storeRow("out", "r", d.D, g.q.DType, g.c("$SCALE * acc[%d]"))
	dq := g.kernelSpec(int64(d.Batch*d.Hq*ceilDiv(d.Sq, g.br)),
		[]tileVar{{g.ty, "ks", max(g.cols*d.D, 1)}, {g.ty, "vs", max(g.cols*d.Dv, 1)}},
		[]tileVar{{g.ty, "lse_r", 0}, {g.ty, "dl_r", 0}, {g.ty, "acc", max(d.D, 1)}},
		g.queryTiles(), phase(dqInit), loop(g.c("for (long long j0 = 0; j0 < kend; j0 += $BC)"), phase(dqLoad), phase(dqCompute)), phase(dqFinal))

	// dk and dv: a block per key tile of a kv head, a thread per key row, over the group's
	// query heads in order and their query tiles (causal: from the first that sees the tile).
	g.side(d.Skv)
	keySetup := "const long long kvh = tile / $NKT, k0 = (tile % $NKT) * $BR;\nconst long long bb = kvh / $HKV, gg = kvh % $HKV;\n"
	if g.causal {
		keySetup += "long long qstart = k0 - $OFF;\nif (qstart < 0) qstart = 0;\n"
	} else {
		keySetup += "const long long qstart = 0;\n"
	}
	keySetup = g.c(keySetup)
	keyGrad := func(dv bool) func(s *device.Spec, name string) (Kernel, error) {
		width, outT := d.D, g.k
		if dv {
			width, outT = d.Dv, g.v
		}
		shared := []tileVar{{g.ty, "qs", max(g.cols*d.D, 1)}, {g.ty, "dos", max(g.cols*d.Dv, 1)}, {g.ty, "ls", g.cols}}
		staging := g.c("const long long bh = bb * $HQ + gg * $G + hh;\n") +
			g.stage("qs", d.D, g.q.DType, "in0", "bh * $SQ", "i0", "$SQ") + g.stage("dos", d.Dv, doT.DType, "in3", "bh * $SQ", "i0", "$SQ") +
			g.c("for (long long e = tid; e < $BC; e += $BR) ls[e] = i0 + e < $SQ ? "+lseAt("bh * $SQ + i0 + e")+" : ($T)-PPC_INF;\n")
		if !dv {
			shared = append(shared, tileVar{g.ty, "dls", g.cols})
			staging += g.c("for (long long e = tid; e < $BC; e += $BR) dls[e] = i0 + e < $SQ ? in5[bh * $SQ + i0 + e] : ($T)0;\n")
		}
		row := "const long long j = k0 + tid;\nif (j >= $SKV) continue;\nconst long long kr = kvh * $SKV + j;\n"
		compute := g.c(row+"const long long h = gg * $G + hh;\n(void)h;\n") + g.maskBase() +
			g.dots("s", d.D, load(g.k.DType, "in1", g.c("kr * $D + c")), "qs")
		if !dv {
			compute += g.dots("dp", d.Dv, load(g.v.DType, "in2", g.c("kr * $DV + c")), "dos")
		}
		vis := "const long long qi = i0 + k;\n$T x = @s * $SCALE;\n" + g.visible("qi < $SQ && ls[k] != -PPC_INF", "qi", "j", "x", "in6")
		tile, scale := "dos", ""
		if dv {
			compute += g.eachK(vis + "@s = vis ? ppc_expo(x - ls[k]) : ($T)0;\n")
		} else {
			compute += g.eachK(vis + "@s = vis ? ppc_expo(x - ls[k]) * (@dp - dls[k]) : ($T)0;\n")
			tile, scale = "qs", "$SCALE * "
		}
		compute += g.eachK(fmt.Sprintf("PPC_UNROLL for (int c = 0; c < %dLL; c++) acc[c] += @s * %s[k * %d + c];\n", width, tile, width))
		final := g.c(row) + storeRow("out", "kr", width, outT.DType, g.c(scale+"acc[%d]"))
		init := zeros("acc", width)
		return g.kernelSpec(int64(d.Batch*d.Hkv*ceilDiv(d.Skv, g.br)), shared, []tileVar{{g.ty, "acc", max(width, 1)}}, keySetup,
			phase(init),
			loop("for (long long hh = 0; hh < "+g.c("$G")+"; hh++)",
				loop(g.c("for (long long i0 = qstart; i0 < $SQ; i0 += $BC)"), phase(staging), phase(compute))),
			phase(final))
	}
	return []ir.Type{deltaType}, []planStep{
		deltaStep,
		{in: grads, out: res0, row: dq},
		{in: grads, out: Ref{Result, 1}, row: keyGrad(false)},
		{in: grads, out: Ref{Result, 2}, row: keyGrad(true)},
	}, nil
}

// attnGradInputs is what both attention_grad planners share: δ's scratch type, the step
// computing δ = rowsum(dO ∘ O) into it (in0 o, in1 do), and the gradient kernels' operands:
// in0 q, in1 k, in2 v, in3 do, in4 lse, in5 δ [, in6 mask].
func attnGradInputs(s *device.Spec, g *attnGen) (ir.Type, planStep, []Ref) {
	d := g.d
	rows := int64(d.Batch * d.Hq * d.Sq)
	delta := func(*device.Spec) (string, int64, error) {
		return fmt.Sprintf("    %s acc = 0;\n    for (long long c = 0; c < %dLL; c++) acc += %s * %s;\n    out[i] = acc;\n", g.ty, d.Dv,
			load(s.In[3].DType, "in0", fmt.Sprintf("i * %dLL + c", d.Dv)), load(s.In[5].DType, "in1", fmt.Sprintf("i * %dLL + c", d.Dv))), rows, nil
	}
	grads := []Ref{op0, op1, op2, {Operand, 5}, {Operand, 4}, sc0}
	if len(s.In) > 6 {
		grads = append(grads, Ref{Operand, 6})
	}
	return accType(s.In[0].DType, int(rows)), planStep{in: []Ref{{Operand, 3}, {Operand, 5}}, out: sc0, gen: delta}, grads
}

// broadcastStrides are the element strides of a row-major tensor of shape when broadcast to
// out (0 where it broadcasts; shape is right-aligned under out).
func broadcastStrides(shape, out ir.Shape) []int {
	st := make([]int, len(out))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] != 1 {
			st[len(out)-len(shape)+i] = acc
		}
		acc *= shape[i]
	}
	return st
}
