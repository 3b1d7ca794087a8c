package cuda

import (
	"fmt"
	"math"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Attention and its gradient as plans of thread-per-row kernels, with fp32 accumulation
// (fp64 for f64), bf16/fp16 operands widened on load and results rounded once on store. A
// thread keeps one query (or key) row's accumulators in registers and streams the keys (or
// queries) it may see; the scores are never written to memory, so the memory is O(s·d) as on
// the CPU device:
//
//	attention       lse (a thread per query row: the running maximum and sum), then o (a
//	                thread per query row: Σ_j e^(s − lse)·v_j, reading lse)
//	attention_grad  δ = rowsum(dO ∘ O) into scratch; dq (a thread per query row); dk and dv
//	                (a thread per key row, over the query heads of its kv head's group)
//
// This is the simple form, not FlashAttention-2's tiles in shared memory: every thread reads
// its keys from global memory (L2 holds a head's K and V for the sequences of the tests and
// the tiny models). Each result has one writer and a fixed order of summation: no atomics.

func init() {
	planners["attention"] = planAttention
	planners["attention_grad"] = planAttentionGrad
}

// attnGen is what the kernels of one site share: sizes, options and the C of the scores.
type attnGen struct {
	d          ir.AttentionDims
	ty         string // the compute type
	scale      string
	causal     bool
	maskDType  ir.DType // 0: no mask
	maskSt     []int    // the mask's strides against the scores' shape
	lead       ir.Shape // the scores' leading dims
	q, k, v    ir.Type
	lseDType   ir.DType
	maskOpName string // the mask's parameter in the step's kernel (in<N>)
}

func newAttnGen(s *device.Spec, maskAt int) (*attnGen, error) {
	d, mask, err := ir.AttentionOperands(s.In, maskAt)
	if err != nil {
		return nil, err
	}
	q, kt, v := s.In[0], s.In[1], s.In[2]
	ct := classOf(q.DType)
	g := &attnGen{d: d, ty: ct.ctype(), causal: s.Attrs.Bool("causal", false), q: q, k: kt, v: v,
		lseDType: ir.AttentionLSEType(q.DType)}
	g.scale = fmt.Sprintf("(%s)%.17g", g.ty, s.Attrs.Float("scale", 1/math.Sqrt(float64(d.D))))
	if mask != nil {
		r := q.Rank()
		scores := append(append(ir.Shape{}, q.Shape[:r-1]...), d.Skv)
		g.maskDType, g.maskSt, g.lead = mask.DType, broadcastStrides(mask.Shape, scores), scores[:r-3]
	}
	return g, nil
}

// rowHead writes the coordinates of a query-row thread: bh (batch·Hq + head), b, h, qi and
// the kv head's row base kvh, and the mask's base offset mb.
func (g *attnGen) rowHead(b *strings.Builder) {
	d := g.d
	fmt.Fprintf(b, "    long long bh = i / %dLL, qi = i %% %dLL;\n", d.Sq, d.Sq)
	fmt.Fprintf(b, "    long long bb = bh / %dLL, h = bh %% %dLL;\n", d.Hq, d.Hq)
	fmt.Fprintf(b, "    long long kvh = bb * %dLL + h / %dLL;\n", d.Hkv, d.Hq/d.Hkv)
	g.maskBase(b)
}

// maskBase writes mb, the mask's offset for batch index bb and head h (0 without a mask).
func (g *attnGen) maskBase(b *strings.Builder) {
	if g.maskDType == 0 {
		return
	}
	b.WriteString("    long long mb = 0;\n    { long long rb = bb;\n")
	for i := len(g.lead) - 1; i >= 0; i-- {
		fmt.Fprintf(b, "      mb += (rb %% %dLL) * %dLL; rb /= %dLL;\n", g.lead[i], g.maskSt[i], g.lead[i])
	}
	r := len(g.maskSt)
	fmt.Fprintf(b, "      (void)rb; mb += h * %dLL; }\n", g.maskSt[r-3])
}

// score writes `ty s = scale·q[qrow]·k[krow] (+ mask)` and `bool vis` for query qi, key j.
func (g *attnGen) score(b *strings.Builder, indent, qrow, krow, qi, j string) {
	d := g.d
	fmt.Fprintf(b, "%s%s s = 0;\n", indent, g.ty)
	fmt.Fprintf(b, "%sfor (long long c = 0; c < %dLL; c++) s += %s * %s;\n", indent, d.D,
		load(g.q.DType, "in0", fmt.Sprintf("(%s) * %dLL + c", qrow, d.D)), load(g.k.DType, "in1", fmt.Sprintf("(%s) * %dLL + c", krow, d.D)))
	fmt.Fprintf(b, "%ss *= %s;\n%sbool vis = true;\n", indent, g.scale, indent)
	if g.causal {
		fmt.Fprintf(b, "%sif (%s > %s + %dLL) vis = false;\n", indent, j, qi, d.Skv-d.Sq)
	}
	if g.maskDType != 0 {
		r := len(g.maskSt)
		off := fmt.Sprintf("mb + (%s) * %dLL + (%s) * %dLL", qi, g.maskSt[r-2], j, g.maskSt[r-1])
		if g.maskDType == ir.Bool {
			fmt.Fprintf(b, "%sif (!%s[%s]) vis = false;\n", indent, g.maskOpName, off)
		} else {
			fmt.Fprintf(b, "%ss += %s;\n", indent, load(g.maskDType, g.maskOpName, off))
		}
	}
	fmt.Fprintf(b, "%sif (s == -PPC_INF) vis = false;\n", indent)
}

func planAttention(s *device.Spec) ([]ir.Type, []planStep, error) {
	g, err := newAttnGen(s, 3)
	if err != nil {
		return nil, nil, err
	}
	d := g.d
	rows := int64(d.Batch * d.Hq * d.Sq)
	in := []Ref{op0, op1}
	maskRef := []Ref{}
	if len(s.In) > 3 {
		maskRef = []Ref{{Operand, 3}}
	}
	// lse: in0 q, in1 k [, in2 mask].
	lse := func(*device.Spec) (string, int64, error) {
		g.maskOpName = "in2"
		var b strings.Builder
		g.rowHead(&b)
		fmt.Fprintf(&b, "    %s m = -PPC_INF, l = 0;\n", g.ty)
		fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) {\n", d.Skv)
		g.score(&b, "      ", "bh * "+fmt.Sprint(d.Sq)+"LL + qi", "kvh * "+fmt.Sprint(d.Skv)+"LL + j", "qi", "j")
		b.WriteString("      if (!vis) continue;\n")
		b.WriteString("      if (s > m) { l = l * ppc_expo(m - s) + 1; m = s; } else l += ppc_expo(s - m);\n    }\n")
		fmt.Fprintf(&b, "    out[i] = %s;\n", store(g.lseDType, round(g.lseDType, "l == 0 ? -PPC_INF : m + ppc_loga(l)")))
		return b.String(), rows, nil
	}
	// o: in0 q, in1 k, in2 v, in3 lse [, in4 mask].
	o := func(*device.Spec) (string, int64, error) {
		g.maskOpName = "in4"
		var b strings.Builder
		g.rowHead(&b)
		fmt.Fprintf(&b, "    %s acc[%d];\n    for (int c = 0; c < %d; c++) acc[c] = 0;\n", g.ty, d.Dv, d.Dv)
		fmt.Fprintf(&b, "    %s lse = %s;\n", g.ty, load(g.lseDType, "in3", "i"))
		b.WriteString("    if (lse != -PPC_INF) {\n")
		fmt.Fprintf(&b, "      for (long long j = 0; j < %dLL; j++) {\n", d.Skv)
		g.score(&b, "        ", "bh * "+fmt.Sprint(d.Sq)+"LL + qi", "kvh * "+fmt.Sprint(d.Skv)+"LL + j", "qi", "j")
		b.WriteString("        if (!vis) continue;\n        " + g.ty + " p = ppc_expo(s - lse);\n")
		fmt.Fprintf(&b, "        for (int c = 0; c < %d; c++) acc[c] += p * %s;\n      }\n    }\n", d.Dv,
			load(g.v.DType, "in2", fmt.Sprintf("(kvh * %dLL + j) * %dLL + c", d.Skv, d.Dv)))
		fmt.Fprintf(&b, "    for (int c = 0; c < %d; c++) out[i * %dLL + c] = %s;\n", d.Dv, d.Dv, store(g.q.DType, round(g.q.DType, "acc[c]")))
		return b.String(), rows, nil
	}
	return nil, []planStep{
		{in: append(append([]Ref{}, in...), maskRef...), out: res1, gen: lse},
		{in: append([]Ref{op0, op1, op2, res1}, maskRef...), out: res0, gen: o},
	}, nil
}

func planAttentionGrad(s *device.Spec) ([]ir.Type, []planStep, error) {
	g, err := newAttnGen(s, 6)
	if err != nil {
		return nil, nil, err
	}
	if len(s.In) < 6 {
		return nil, nil, fmt.Errorf("want q, k, v, o, lse and do")
	}
	d := g.d
	rows := int64(d.Batch * d.Hq * d.Sq)
	group := d.Hq / d.Hkv
	op3, op4, op5 := Ref{Operand, 3}, Ref{Operand, 4}, Ref{Operand, 5}
	maskRef := []Ref{}
	if len(s.In) > 6 {
		maskRef = []Ref{{Operand, 6}}
	}
	ct := classOf(s.In[0].DType)
	deltaType := ir.Type{DType: ir.F32, Shape: ir.Shape{int(rows)}}
	if ct == classDouble {
		deltaType.DType = ir.F64
	}
	doT := s.In[5]
	// δ: in0 o, in1 do.
	delta := func(*device.Spec) (string, int64, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "    %s acc = 0;\n    for (long long c = 0; c < %dLL; c++) acc += %s * %s;\n    out[i] = acc;\n", g.ty, d.Dv,
			load(s.In[3].DType, "in0", fmt.Sprintf("i * %dLL + c", d.Dv)), load(doT.DType, "in1", fmt.Sprintf("i * %dLL + c", d.Dv)))
		return b.String(), rows, nil
	}
	// The probability and its score gradient for query row qrow (head bh) and key row krow:
	// p and ds (in1 k, in2 v, in3 lse, in4 do, in5 δ).
	probs := func(b *strings.Builder, indent, qrow, krow, qi, j string) {
		g.score(b, indent, qrow, krow, qi, j)
		fmt.Fprintf(b, "%s%s lse = %s;\n", indent, g.ty, load(g.lseDType, "in3", qrow))
		fmt.Fprintf(b, "%sif (!vis || lse == -PPC_INF) continue;\n", indent)
		fmt.Fprintf(b, "%s%s p = ppc_expo(s - lse), dp = 0;\n", indent, g.ty)
		fmt.Fprintf(b, "%sfor (long long c = 0; c < %dLL; c++) dp += %s * %s;\n", indent, d.Dv,
			load(doT.DType, "in4", fmt.Sprintf("(%s) * %dLL + c", qrow, d.Dv)), load(g.v.DType, "in2", fmt.Sprintf("(%s) * %dLL + c", krow, d.Dv)))
		fmt.Fprintf(b, "%s%s ds = p * (dp - in5[%s]);\n", indent, g.ty, qrow)
	}
	grads := []Ref{op0, op1, op2, op4, op5, sc0}
	// dq: a thread per query row.
	dq := func(*device.Spec) (string, int64, error) {
		g.maskOpName = "in6"
		var b strings.Builder
		g.rowHead(&b)
		fmt.Fprintf(&b, "    %s acc[%d];\n    for (int c = 0; c < %d; c++) acc[c] = 0;\n", g.ty, d.D, d.D)
		fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) {\n", d.Skv)
		probs(&b, "      ", "i", fmt.Sprintf("kvh * %dLL + j", d.Skv), "qi", "j")
		fmt.Fprintf(&b, "      for (int c = 0; c < %d; c++) acc[c] += %s * ds * %s;\n    }\n", d.D, g.scale,
			load(g.k.DType, "in1", fmt.Sprintf("(kvh * %dLL + j) * %dLL + c", d.Skv, d.D)))
		fmt.Fprintf(&b, "    for (int c = 0; c < %d; c++) out[i * %dLL + c] = %s;\n", d.D, d.D, store(g.q.DType, round(g.q.DType, "acc[c]")))
		return b.String(), rows, nil
	}
	// dk and dv: a thread per key row of a kv head, over its group's query heads in order.
	keyRows := int64(d.Batch * d.Hkv * d.Skv)
	keyGrad := func(dv bool) generator {
		return func(*device.Spec) (string, int64, error) {
			g.maskOpName = "in6"
			width, outT := d.D, g.k
			if dv {
				width, outT = d.Dv, g.v
			}
			var b strings.Builder
			fmt.Fprintf(&b, "    long long kvh = i / %dLL, j = i %% %dLL;\n", d.Skv, d.Skv)
			fmt.Fprintf(&b, "    long long bb = kvh / %dLL, gg = kvh %% %dLL;\n", d.Hkv, d.Hkv)
			fmt.Fprintf(&b, "    %s acc[%d];\n    for (int c = 0; c < %d; c++) acc[c] = 0;\n", g.ty, width, width)
			fmt.Fprintf(&b, "    for (long long hh = 0; hh < %dLL; hh++) {\n      long long h = gg * %dLL + hh, bh = bb * %dLL + h;\n", group, group, d.Hq)
			if g.maskDType != 0 {
				var mbuf strings.Builder
				g.maskBase(&mbuf)
				b.WriteString(strings.ReplaceAll(mbuf.String(), "\n    ", "\n      "))
			}
			fmt.Fprintf(&b, "      for (long long qi = 0; qi < %dLL; qi++) {\n", d.Sq)
			probs(&b, "        ", fmt.Sprintf("bh * %dLL + qi", d.Sq), "i", "qi", "j")
			if dv {
				fmt.Fprintf(&b, "        (void)ds;\n        for (int c = 0; c < %d; c++) acc[c] += p * %s;\n", width,
					load(doT.DType, "in4", fmt.Sprintf("(bh * %dLL + qi) * %dLL + c", d.Sq, d.Dv)))
			} else {
				fmt.Fprintf(&b, "        for (int c = 0; c < %d; c++) acc[c] += %s * ds * %s;\n", width, g.scale,
					load(g.q.DType, "in0", fmt.Sprintf("(bh * %dLL + qi) * %dLL + c", d.Sq, d.D)))
			}
			b.WriteString("      }\n    }\n")
			fmt.Fprintf(&b, "    for (int c = 0; c < %d; c++) out[i * %dLL + c] = %s;\n", width, width, store(outT.DType, round(outT.DType, "acc[c]")))
			return b.String(), keyRows, nil
		}
	}
	return []ir.Type{deltaType}, []planStep{
		{in: []Ref{op3, op5}, out: sc0, gen: delta},
		{in: append(append([]Ref{}, grads...), maskRef...), out: res0, gen: dq},
		{in: append(append([]Ref{}, grads...), maskRef...), out: Ref{Result, 1}, gen: keyGrad(false)},
		{in: append(append([]Ref{}, grads...), maskRef...), out: Ref{Result, 2}, gen: keyGrad(true)},
	}, nil
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
