package cuda

import (
	"errors"
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Row kernels: softmax, log_softmax, the norms and their input gradients over contiguous
// rows run a block per row (grid-stride over the rows), its threads splitting the row, so
// that a warp reads consecutive elements (one thread per row reads 32 rows' elements at once,
// 32 memory transactions where one would do, and a few thousand rows leave most of a GPU
// idle). A row's statistics are each thread's partial result over the elements it reads
// (j = tid, tid + T, …), folded pairwise in a fixed tree: deterministic for a given block
// size, though not the CPU device's sequential order (within a few ulps of it).
//
// The kernel is phases separated by barriers, every value that crosses a barrier in shared
// memory. The host build has no barriers, so its launcher runs one phase for all of a
// block's threads before the next; the device runs them with __syncthreads between.

// errStrided is a softmax whose rows are strided (an axis other than the last): the
// generators' one thread per row computes it.
var errStrided = errors.New("strided rows")

// rowKernel is a row kernel's parts.
type rowKernel struct {
	rows, width int64
	ct          string   // the compute type, of the shared arrays
	setup       string   // every phase's prelude (per row and thread)
	phases      []string // each a statement list over tid, T, row
	pairs       bool     // a second shared array part2 (maxSumExp's sums beside its maxima)
}

// rowShared is how many elements each shared array has: the largest block.
const rowShared = 1024

// rowThreshold is the row length above which cross-entropy's rows (a vocabulary, tens of
// thousands wide) are a block each; shorter rows are a thread each, summing in the CPU
// device's order.
const rowThreshold = 1024

// partial adds the phases of a row statistic: each thread folds expr over its elements j
// into part[tid] from init with op ("+" or a ppc_max); then the threads fold part pairwise,
// a level per phase (part[t] with part[t + h] for h = 512, 256, …, 1: the same tree for every
// row of a given block size); then thread 0 applies final (a statement on s, or "") and
// stores the row's statistic in stat[slot]. A fold by thread 0 alone, in thread order, made
// the block wait 256 dependent steps per statistic: softmax over [96·1024, 1024] took 0.88 ms
// on an H100, four times its memory time.
func (rk *rowKernel) partial(init, expr, op string, slot int, final string) {
	fold := func(acc, v string) string {
		if op == "+" {
			return fmt.Sprintf("%s += %s;", acc, v)
		}
		return fmt.Sprintf("%s = %s(%s, %s);", acc, op, acc, v)
	}
	rk.phases = append(rk.phases,
		fmt.Sprintf("%s s = %s;\n      for (long long j = tid; j < %dLL; j += T) { %s }\n      part[tid] = s;", rk.ct, init, rk.width, fold("s", expr)))
	for h := rowShared / 2; h >= 1; h /= 2 {
		rk.phases = append(rk.phases, fmt.Sprintf("if (tid < %d && tid + %d < T) { %s }", h, h, fold("part[tid]", fmt.Sprintf("part[tid + %d]", h))))
	}
	rk.phases = append(rk.phases, fmt.Sprintf("if (tid == 0) {\n        %s s = part[0];\n        %s\n        stat[%d] = s;\n      }", rk.ct, final, slot))
}

// maxSumExp adds the phases of a row's maximum (stat[0]) and Σ exp(x − max) (stat[1]) over
// the elements x, as softmax and cross-entropy need them.
//
// Both in one pass over the row (the online softmax): each thread keeps its elements' running
// maximum m and Σ exp(x − m), rescaling the sum when the maximum grows, and the tree folds
// pairs (m₁, s₁), (m₂, s₂) into (max, s₁·exp(m₁ − max) + s₂·exp(m₂ − max)). Two passes, a
// maximum and then the sum, read a vocabulary-wide row twice: GPT-2's cross-entropy over
// [8192, 50,257] f32 logits took 2.0 ms on an H100 and its gradient 3.9 (run 7), where one
// read of the logits is 0.55 ms. The sums differ from the CPU device's (which sums
// exp(x − max) with the final maximum) by a rounding per rescale: a few ulps. A NaN anywhere
// makes both NaN, as the NaN-aware maximum does on the CPU device.
func (rk *rowKernel) maxSumExp(x string) {
	ty := rk.ct
	rk.pairs = true
	inf := "(" + ty + ")-PPC_INF"
	rk.phases = append(rk.phases,
		fmt.Sprintf("%s m = %s, s = 0;\n      for (long long j = tid; j < %dLL; j += T) {\n        const %s x = %s;\n"+
			"        if (x > m) { s = s * ppc_expo((%s)(m - x)) + 1; m = x; }\n"+
			"        else if (x != x) { m = x; s = x; }\n"+
			"        else if (m != %s) s += ppc_expo((%s)(x - m));\n      }\n      part[tid] = m;\n      part2[tid] = s;",
			ty, inf, rk.width, ty, x, ty, inf, ty))
	for h := rowShared / 2; h >= 1; h /= 2 {
		rk.phases = append(rk.phases, fmt.Sprintf("if (tid < %d && tid + %d < T) {\n        const %s m1 = part[tid], m2 = part[tid + %d], m = ppc_max<%s>(m1, m2);\n"+
			"        part2[tid] = (m1 == %s ? (%s)0 : part2[tid] * ppc_expo((%s)(m1 - m))) + (m2 == %s ? (%s)0 : part2[tid + %d] * ppc_expo((%s)(m2 - m)));\n        part[tid] = m;\n      }",
			h, h, ty, h, ty, inf, ty, ty, inf, ty, h, ty))
	}
	rk.phases = append(rk.phases, "if (tid == 0) { stat[0] = part[0]; stat[1] = part2[0]; }")
}

// each adds a phase that runs body for each of the thread's elements j.
func (rk *rowKernel) each(body string) {
	rk.phases = append(rk.phases, fmt.Sprintf("for (long long j = tid; j < %dLL; j += T) %s", rk.width, body))
}

// kernel writes the device function and the host launcher.
func (rk *rowKernel) kernel(s *device.Spec, name string) (Kernel, error) {
	params, hostArgs, ost, err := signature(s, true)
	if err != nil {
		return Kernel{}, fmt.Errorf("%s: %v", s.Op.Name, err)
	}
	shared := fmt.Sprintf("  PPC_SHARED %s part[%d];\n  PPC_SHARED %s stat[4];\n", rk.ct, rowShared, rk.ct)
	if rk.pairs {
		shared += fmt.Sprintf("  PPC_SHARED %s part2[%d];\n", rk.ct, rowShared)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// %s: %s → %s, a block per row of %d\n", name, s.Op.Name, s.Out[0], rk.width)
	fmt.Fprintf(&b, "#ifndef PPC_HOST\nPPC_GLOBAL void %s(%s) {\n%s", name, strings.Join(params, ", "), shared)
	b.WriteString("  const long long T = PPC_BDIM, tid = PPC_TID;\n")
	fmt.Fprintf(&b, "  for (long long row = PPC_BID; row < %dLL; row += PPC_GDIM) {\n", rk.rows)
	for _, p := range rk.phases {
		fmt.Fprintf(&b, "    {\n      %s\n      %s\n    }\n    PPC_SYNC();\n", rk.setup, p)
	}
	b.WriteString("  }\n}\n#else\n")
	// The host: the same phases, each for every thread of the block before the next.
	fmt.Fprintf(&b, "PPC_GLOBAL void %s_host(void** in, void* out_, long long n, int grid, int block) {\n  (void)in; (void)n;\n%s", name, shared)
	for i, p := range params[:len(params)-2] {
		fmt.Fprintf(&b, "  %s = %s;\n", p, hostArgs[i])
	}
	fmt.Fprintf(&b, "  %s = (%s*)out_;\n", params[len(params)-2], ost)
	b.WriteString("  ppc_gdim = (unsigned)grid; ppc_bdim = (unsigned)block;\n  const long long T = block;\n")
	fmt.Fprintf(&b, "  for (ppc_bid = 0; ppc_bid < ppc_gdim; ppc_bid++)\n    for (long long row = ppc_bid; row < %dLL; row += grid) {\n", rk.rows)
	for _, p := range rk.phases {
		fmt.Fprintf(&b, "      for (ppc_tid = 0; ppc_tid < ppc_bdim; ppc_tid++) {\n        const long long tid = ppc_tid;\n        %s\n        %s\n      }\n", rk.setup, p)
	}
	b.WriteString("    }\n}\n#endif\n")
	return Kernel{Name: name, Body: b.String(), N: rk.rows, Width: rk.width, In: s.In, Out: s.Out[0]}, nil
}

// rowSoftmax is softmax or log_softmax over contiguous rows.
func rowSoftmax(s *device.Spec, name string, logOf bool) (Kernel, error) {
	ct, err := floatIO(s)
	if err != nil {
		return Kernel{}, err
	}
	in, out := s.In[0], s.Out[0]
	outer, n, inner, err := rows(s)
	if err != nil {
		return Kernel{}, err
	}
	if inner != 1 {
		return Kernel{}, errStrided
	}
	ty := ct.ctype()
	x := load(in.DType, "in0", "base + j")
	rk := &rowKernel{rows: outer, width: n, ct: ty, setup: fmt.Sprintf("const long long base = row * %dLL; (void)base;", n)}
	rk.maxSumExp(x)
	if logOf {
		rk.each(fmt.Sprintf("out[base + j] = %s;", store(out.DType, round(out.DType, fmt.Sprintf("%s - stat[0] - ppc_loga(stat[1])", x)))))
	} else {
		rk.each(fmt.Sprintf("out[base + j] = %s;", store(out.DType, round(out.DType, fmt.Sprintf("ppc_expo((%s)(%s - stat[0])) / stat[1]", ty, x)))))
	}
	return rk.kernel(s, name)
}

// rowSoftmaxGrad is softmax_grad or log_softmax_grad over contiguous rows.
func rowSoftmaxGrad(s *device.Spec, name string, logOf bool) (Kernel, error) {
	ct, err := floatIO(s)
	if err != nil {
		return Kernel{}, err
	}
	if len(s.In) != 2 {
		return Kernel{}, fmt.Errorf("want operands y and dy")
	}
	outer, n, inner, err := rows(s)
	if err != nil {
		return Kernel{}, err
	}
	if inner != 1 {
		return Kernel{}, errStrided
	}
	ty, out := ct.ctype(), s.Out[0]
	y, dy := load(s.In[0].DType, "in0", "base + j"), load(s.In[1].DType, "in1", "base + j")
	rk := &rowKernel{rows: outer, width: n, ct: ty, setup: fmt.Sprintf("const long long base = row * %dLL; (void)base;", n)}
	if logOf {
		rk.partial("0", dy, "+", 0, "")
		rk.each(fmt.Sprintf("out[base + j] = %s;", store(out.DType, round(out.DType, fmt.Sprintf("%s - ppc_expo((%s)(%s)) * stat[0]", dy, ty, y)))))
	} else {
		rk.partial("0", dy+" * "+y, "+", 0, "")
		rk.each(fmt.Sprintf("out[base + j] = %s;", store(out.DType, round(out.DType, fmt.Sprintf("%s * (%s - stat[0])", y, dy)))))
	}
	return rk.kernel(s, name)
}

// rowNorm is layer_norm (rms false) or rms_norm, or their input gradient (grad), over rows
// of the dims axis.. (always contiguous): statistics in float (double for f64) with biased
// variance; eps defaults 1e-5 (layer) and 1e-6 (RMS) as on the CPU device. Operands: x [,
// scale [, bias]] for the forward; x, dy [, scale] for the gradient, with g = dy·scale and
// dx = r·(g − mean(g) − x̂·mean(g·x̂)) (layer) or r·(g − x̂·mean(g·x̂)) (RMS).
func rowNorm(s *device.Spec, name string, rms, grad bool) (Kernel, error) {
	ct, err := floatIO(s)
	if err != nil {
		return Kernel{}, err
	}
	x, out := s.In[0], s.Out[0]
	axis, err := ir.NormAxis(s.Attrs.Int("axis", -1), x.Rank())
	if err != nil {
		return Kernel{}, err
	}
	eps := s.Attrs.Float("eps", 1e-5)
	if rms {
		eps = s.Attrs.Float("eps", 1e-6)
	}
	nrows, n := int64(1), int64(1)
	for d, v := range x.Shape {
		if d < axis {
			nrows *= int64(v)
		} else {
			n *= int64(v)
		}
	}
	if grad && len(s.In) < 2 {
		return Kernel{}, fmt.Errorf("want operands x, dy [, scale]")
	}
	ty := ct.ctype()
	xv := load(x.DType, "in0", "base + j")
	// stat[2] and stat[3]: the gradient's means.
	rk := normStats(x.DType, nrows, n, ty, rms, eps, true)
	scale := func(k int) string {
		if k < len(s.In) {
			return " * " + load(s.In[k].DType, fmt.Sprintf("in%d", k), "j")
		}
		return ""
	}
	if !grad {
		y := fmt.Sprintf("(%s - stat[0]) * stat[1]%s", xv, scale(1))
		if len(s.In) > 2 {
			y += " + " + load(s.In[2].DType, "in2", "j")
		}
		rk.each(fmt.Sprintf("out[base + j] = %s;", store(out.DType, round(out.DType, y))))
		return rk.kernel(s, name)
	}
	g := "(" + load(s.In[1].DType, "in1", "base + j") + scale(2) + ")"
	xhat := fmt.Sprintf("((%s - stat[0]) * stat[1])", xv)
	mean := fmt.Sprintf("s /= (%s)%dLL;", ty, n)
	if !rms {
		rk.partial("0", g, "+", 2, mean)
	}
	rk.partial("0", g+" * "+xhat, "+", 3, mean)
	dx := fmt.Sprintf("stat[1] * (%s - stat[2] - %s * stat[3])", g, xhat)
	if rms {
		dx = fmt.Sprintf("stat[1] * (%s - %s * stat[3])", g, xhat)
	}
	rk.each(fmt.Sprintf("out[base + j] = %s;", store(out.DType, round(out.DType, dx))))
	return rk.kernel(s, name)
}

// normStats starts a norm's block per row over x (in0): the row's base, stat[0] μ (0 for
// RMS) and, with rstd, stat[1] r = 1/√(mean square + ε), in float (double for f64) with
// biased variance, as the norm's forward and its gradients all compute them.
func normStats(x ir.DType, rows, n int64, ty string, rms bool, eps float64, rstd bool) *rowKernel {
	xv := load(x, "in0", "base + j")
	rk := &rowKernel{rows: rows, width: n, ct: ty, setup: fmt.Sprintf("const long long base = row * %dLL; (void)base;", n)}
	if rms {
		rk.phases = append(rk.phases, "if (tid == 0) stat[0] = 0;")
	} else {
		rk.partial("0", xv, "+", 0, fmt.Sprintf("s /= (%s)%dLL;", ty, n))
	}
	if rstd {
		rk.partial("0", fmt.Sprintf("(%s - stat[0]) * (%s - stat[0])", xv, xv), "+", 1, fmt.Sprintf("s = 1 / ppc_sqrt(s / (%s)%dLL + (%s)%v);", ty, n, ty, eps))
	}
	return rk
}
