package cuda

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Kernels of the channel normalisations on x [N, C, …] (S spatial positions per channel):
// batch_norm (the inference form, with the mean and var operands) and instance_norm, and
// their input and parameter gradients. Each follows the arithmetic of the CPU device's
// routine (runtime/cpu nn.go and grad_nn.go, kernels/cpu norm_batch.go and norm.go): the
// same precision at each step (float64 where the CPU device widens, the dtype's float or
// double where it does not, 16-bit operands through f32) and the same summation order, so
// the results agree to the last bit on IEEE hardware without contraction and to a few ulps
// where the GPU compiler fuses multiply-adds. Without shared memory or atomics, a thread
// that needs statistics computes them itself: one thread per instance (n, c) or per channel
// loops over its elements.

func init() {
	generators["batch_norm"] = genBatchNorm
	generators["batch_norm_grad_input"] = genBatchNormGradInput
	generators["instance_norm"] = genInstanceNorm
	generators["instance_norm_grad_input"] = genInstanceNormGradInput
	perResult["batch_norm_grad_params"] = struct {
		results int
		gen     func(r int) generator
	}{2, genBatchNormParams}
	perResult["instance_norm_grad_params"] = struct {
		results int
		gen     func(r int) generator
	}{2, genInstanceNormParams}
}

// bnRowBlock is kernels/cpu's reduceRowBlock: the block of a contiguous reduction whose
// partial sums are added in order (part of its determinism contract, so of ours).
const bnRowBlock = 4096

// bnGeom is a channel normalisation's geometry and constants.
type bnGeom struct {
	n, c, sp int64  // x viewed as [n, c, sp]
	ty       string // the dtype's compute type: float (f32, bf16, f16) or double (f64)
	eps      string // the eps attribute as a C double literal
}

// bnCheck checks a channel normalisation's launch site as the CPU device does: every
// operand and result of x's float dtype, x of rank minRank or more, the types in same of
// x's shape and those in perChannel [C]. eps defaults to 1e-5; a NaN or infinite eps is
// refused (there is no C literal for it, and no normalisation it makes sense for).
func bnCheck(s *device.Spec, x ir.Type, minRank int, same, perChannel []ir.Type) (bnGeom, error) {
	if _, err := floatIO(s); err != nil {
		return bnGeom{}, err
	}
	for _, t := range append(append([]ir.Type{}, s.In...), s.Out...) {
		if t.DType != x.DType {
			return bnGeom{}, fmt.Errorf("operands and results must share x's dtype %s, got %s", x.DType, t)
		}
	}
	if x.Rank() < minRank {
		return bnGeom{}, fmt.Errorf("x must be [N, C, …] of rank >= %d, got %s", minRank, x)
	}
	for _, t := range same {
		if !t.Shape.Equal(x.Shape) {
			return bnGeom{}, fmt.Errorf("%s does not match x %s", t, x)
		}
	}
	for _, t := range perChannel {
		if !t.Shape.Equal(ir.Shape{x.Shape[1]}) {
			return bnGeom{}, fmt.Errorf("per-channel %s must be [%d]", t, x.Shape[1])
		}
	}
	eps := s.Attrs.Float("eps", 1e-5)
	if math.IsNaN(eps) || math.IsInf(eps, 0) {
		return bnGeom{}, fmt.Errorf("eps %v is not finite", eps)
	}
	return bnGeom{
		n: int64(x.Shape[0]), c: int64(x.Shape[1]), sp: int64(x.Shape[2:].NumElements()),
		ty: classOf(x.DType).ctype(), eps: "(" + strconv.FormatFloat(eps, 'g', -1, 64) + ")",
	}, nil
}

// epsT is eps rounded to the dtype's compute type and widened back, as the CPU device's
// forward kernels take it (T(eps)).
func (g bnGeom) epsT() string { return fmt.Sprintf("(double)(%s)%s", g.ty, g.eps) }

// genBatchNorm: batch_norm in inference form, operands x, scale, bias, mean, var; one thread
// per element. As kernels/cpu's BatchNormInference, the channel's coefficients are computed in
// float64, a = scale/√(var + T(eps)), and rounded to the compute type T: mul = T(a), add =
// T(bias − a·mean); then y = x·mul + add in T. No sums.
func genBatchNorm(s *device.Spec) (string, int64, error) {
	if len(s.In) != 5 {
		return "", 0, fmt.Errorf("want operands x, scale, bias, mean, var")
	}
	x, out := s.In[0], s.Out[0]
	g, err := bnCheck(s, x, 2, s.Out, s.In[1:])
	if err != nil {
		return "", 0, err
	}
	ld := func(k int, off string) string { return load(s.In[k].DType, fmt.Sprintf("in%d", k), off) }
	var b strings.Builder
	fmt.Fprintf(&b, "    long long ch = (i / %dLL) %% %dLL;\n", max(g.sp, 1), max(g.c, 1))
	fmt.Fprintf(&b, "    double a = (double)%s / ppc_sqrt((double)%s + %s);\n", ld(1, "ch"), ld(4, "ch"), g.epsT())
	fmt.Fprintf(&b, "    %s mul = (%s)a, add = (%s)((double)%s - a * (double)%s);\n", g.ty, g.ty, g.ty, ld(2, "ch"), ld(3, "ch"))
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, ld(0, "i")+" * mul + add")))
	return b.String(), int64(out.NumElements()), nil
}

// genBatchNormGradInput: batch_norm's input gradient, operands dy, scale, var; one thread
// per element: dx = T(dy·f) with f = scale/√(var + eps) in float64 (eps not rounded to T,
// as the CPU device's batchNormGradInputImpl). No sums.
func genBatchNormGradInput(s *device.Spec) (string, int64, error) {
	if len(s.In) != 3 {
		return "", 0, fmt.Errorf("want operands dy, scale, var")
	}
	dy, out := s.In[0], s.Out[0]
	g, err := bnCheck(s, dy, 2, s.Out, s.In[1:])
	if err != nil {
		return "", 0, err
	}
	ld := func(k int, off string) string { return load(s.In[k].DType, fmt.Sprintf("in%d", k), off) }
	var b strings.Builder
	fmt.Fprintf(&b, "    long long ch = (i / %dLL) %% %dLL;\n", max(g.sp, 1), max(g.c, 1))
	fmt.Fprintf(&b, "    double f = (double)%s / ppc_sqrt((double)%s + %s);\n", ld(1, "ch"), ld(2, "ch"), g.eps)
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, fmt.Sprintf("(double)%s * f", ld(0, "i")))))
	return b.String(), int64(out.NumElements()), nil
}

// genBatchNormParams: result r of batch_norm_grad_params (operands x, dy, mean, var): 0 is
// dscale[c] = T(Σ dy·(x − mean[c]) · r) with r = 1/√(var[c] + eps), 1 is dbias[c] = T(Σ dy).
// One thread per channel sums in float64 over n, then the spatial positions, in increasing
// order (the order batch_norm_grad_params' Doc fixes), and multiplies by r once at the end.
func genBatchNormParams(r int) generator {
	return func(s *device.Spec) (string, int64, error) {
		if len(s.In) != 4 {
			return "", 0, fmt.Errorf("want operands x, dy, mean, var")
		}
		x, out := s.In[0], s.Out[0]
		g, err := bnCheck(s, x, 2, s.In[1:2], []ir.Type{s.In[2], s.In[3], out})
		if err != nil {
			return "", 0, err
		}
		ld := func(k int, off string) string { return load(s.In[k].DType, fmt.Sprintf("in%d", k), off) }
		var b strings.Builder
		if r == 0 {
			fmt.Fprintf(&b, "    double mu = (double)%s, rs = 1 / ppc_sqrt((double)%s + %s);\n", ld(2, "i"), ld(3, "i"), g.eps)
		}
		b.WriteString("    double acc = 0;\n")
		fmt.Fprintf(&b, "    for (long long bi = 0; bi < %dLL; bi++) {\n", g.n)
		fmt.Fprintf(&b, "      long long base = (bi * %dLL + i) * %dLL;\n", g.c, g.sp)
		fmt.Fprintf(&b, "      for (long long j = 0; j < %dLL; j++) ", g.sp)
		if r == 0 {
			fmt.Fprintf(&b, "acc += (double)%s * ((double)%s - mu);\n    }\n", ld(1, "base + j"), ld(0, "base + j"))
			fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc * rs")))
		} else {
			fmt.Fprintf(&b, "acc += (double)%s;\n    }\n", ld(1, "base + j"))
			fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
		}
		return b.String(), g.c, nil
	}
}

// genInstanceNorm: instance_norm, operands x, scale, bias; one thread per instance (n, c)
// writes its S elements. As the CPU device (BatchNormTraining on x viewed as one image of
// N·C channels): μ = Σx/S and σ² = Σ(x − μ)²/S in float64, summed in position order; then
// a = scale/√(σ² + T(eps)), mul = T(a), add = T(bias − a·μ) in float64, and y = x·mul + add
// in T.
func genInstanceNorm(s *device.Spec) (string, int64, error) {
	if len(s.In) != 3 {
		return "", 0, fmt.Errorf("want operands x, scale, bias")
	}
	x, out := s.In[0], s.Out[0]
	g, err := bnCheck(s, x, 3, s.Out, s.In[1:])
	if err != nil {
		return "", 0, err
	}
	ld := func(k int, off string) string { return load(s.In[k].DType, fmt.Sprintf("in%d", k), off) }
	xj := ld(0, "base + j")
	var b strings.Builder
	fmt.Fprintf(&b, "    long long ch = i %% %dLL, base = i * %dLL;\n", max(g.c, 1), g.sp)
	b.WriteString("    double mean = 0, q = 0;\n")
	fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) mean += (double)%s;\n", g.sp, xj)
	fmt.Fprintf(&b, "    mean /= (double)%dLL;\n", g.sp)
	fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) { double d = (double)%s - mean; q += d * d; }\n", g.sp, xj)
	fmt.Fprintf(&b, "    double a = (double)%s / ppc_sqrt(q / (double)%dLL + %s);\n", ld(1, "ch"), g.sp, g.epsT())
	fmt.Fprintf(&b, "    %s mul = (%s)a, add = (%s)((double)%s - a * mean);\n", g.ty, g.ty, g.ty, ld(2, "ch"))
	fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) out[base + j] = %s;\n", g.sp, store(out.DType, round(out.DType, xj+" * mul + add")))
	return b.String(), g.n * g.c, nil
}

// bnBlockedSums writes, for each name in accs, `T name = Σ_{k<n} term(k)` in kernels/cpu's
// blocked order: blocks of bnRowBlock elements, each block's sum added in order to name (from
// 0), a block summed in `lanes` interleaved accumulators (its element k into lane k mod lanes)
// combined pairwise, ((0+1)+(2+3))+((4+5)+(6+7)). pre declares what the terms of element k
// share. This is sumRow's order with 8 lanes, LayerNorm's variance with 4 and
// LayerNormBackward's Σg, Σg·x̂ with 2.
func bnBlockedSums(b *strings.Builder, ty string, n int64, lanes int, accs []string, pre string, terms func(k string) []string) {
	lane := func(acc string, l int) string { return fmt.Sprintf("%s_%d", acc, l) }
	for _, a := range accs {
		fmt.Fprintf(b, "    %s %s = 0;\n", ty, a)
	}
	fmt.Fprintf(b, "    for (long long lo = 0; lo < %dLL; lo += %dLL) {\n", n, bnRowBlock)
	fmt.Fprintf(b, "      long long hi = lo + %dLL < %dLL ? lo + %dLL : %dLL;\n", bnRowBlock, n, bnRowBlock, n)
	for _, a := range accs {
		var ls []string
		for l := range lanes {
			ls = append(ls, lane(a, l)+" = 0")
		}
		fmt.Fprintf(b, "      %s %s;\n", ty, strings.Join(ls, ", "))
	}
	fmt.Fprintf(b, "      for (long long j = lo; j < hi; j += %d) {\n", lanes)
	for l := range lanes {
		b.WriteString("        ")
		if l > 0 {
			fmt.Fprintf(b, "if (j + %d < hi) ", l)
		}
		fmt.Fprintf(b, "{ long long k = j + %d;", l)
		if pre != "" {
			b.WriteString(" " + pre)
		}
		for t, term := range terms("k") {
			fmt.Fprintf(b, " %s += %s;", lane(accs[t], l), term)
		}
		b.WriteString(" }\n")
	}
	b.WriteString("      }\n")
	for _, a := range accs {
		// The pairwise tree over the lanes.
		parts := make([]string, lanes)
		for l := range parts {
			parts[l] = lane(a, l)
		}
		for len(parts) > 1 {
			var next []string
			for p := 0; p < len(parts); p += 2 {
				next = append(next, "("+parts[p]+" + "+parts[p+1]+")")
			}
			parts = next
		}
		fmt.Fprintf(b, "      %s += %s;\n", a, parts[0])
	}
	b.WriteString("    }\n")
}

// bnInstanceStats writes mu and rs, the statistics of the instance of S elements at base in
// the compute type T, as the CPU device's normStats (kernels/cpu LayerNorm) computes them:
// mu = Σx/S (8 lanes), v = Σ(x − mu)² (4 lanes), rs = T(1/√(float64(v/S + T(eps)))).
func bnInstanceStats(b *strings.Builder, g bnGeom, x ir.Type) {
	xk := load(x.DType, "in0", "base + k")
	bnBlockedSums(b, g.ty, g.sp, 8, []string{"mu"}, "", func(string) []string { return []string{xk} })
	fmt.Fprintf(b, "    mu /= (%s)%dLL;\n", g.ty, g.sp)
	bnBlockedSums(b, g.ty, g.sp, 4, []string{"v"}, fmt.Sprintf("%s d = %s - mu;", g.ty, xk), func(string) []string { return []string{"d * d"} })
	fmt.Fprintf(b, "    %s rs = (%s)(1.0 / ppc_sqrt((double)(v / (%s)%dLL + (%s)%s)));\n", g.ty, g.ty, g.ty, g.sp, g.ty, g.eps)
}

// genInstanceNormGradInput: instance_norm's input gradient, operands x, dy, scale; one thread
// per instance (n, c) writes its S elements. As the CPU device (normStats, then
// LayerNormBackward on g = T(dy·scale[c])), all in the compute type T: the statistics of
// bnInstanceStats, x̂ = (x − mu)·rs, mg = Σg/S and mgx = Σg·x̂/S (2 lanes, blocked), and
// dx = rs·(g − mg − (x − mu)·rs·mgx).
func genInstanceNormGradInput(s *device.Spec) (string, int64, error) {
	if len(s.In) != 3 {
		return "", 0, fmt.Errorf("want operands x, dy, scale")
	}
	x, out := s.In[0], s.Out[0]
	g, err := bnCheck(s, x, 3, []ir.Type{s.In[1], out}, s.In[2:])
	if err != nil {
		return "", 0, err
	}
	ty := g.ty
	xk := load(x.DType, "in0", "base + k")
	gk := fmt.Sprintf("%s gk = (%s)(%s * sc);", ty, ty, load(s.In[1].DType, "in1", "base + k"))
	var b strings.Builder
	fmt.Fprintf(&b, "    long long ch = i %% %dLL, base = i * %dLL;\n", max(g.c, 1), g.sp)
	fmt.Fprintf(&b, "    %s sc = %s;\n", ty, load(s.In[2].DType, "in2", "ch"))
	bnInstanceStats(&b, g, x)
	bnBlockedSums(&b, ty, g.sp, 2, []string{"sg", "sgx"}, gk, func(string) []string {
		return []string{"gk", fmt.Sprintf("gk * ((%s - mu) * rs)", xk)}
	})
	fmt.Fprintf(&b, "    %s mg = sg / (%s)%dLL, mgx = sgx / (%s)%dLL;\n", ty, ty, g.sp, ty, g.sp)
	fmt.Fprintf(&b, "    for (long long k = 0; k < %dLL; k++) { %s out[base + k] = %s; }\n", g.sp, gk,
		store(out.DType, round(out.DType, fmt.Sprintf("rs * (gk - mg - (%s - mu) * rs * mgx)", xk))))
	return b.String(), g.n * g.c, nil
}

// genInstanceNormParams: result r of instance_norm_grad_params (operands x, dy): 0 is
// dscale[c] = T(Σ dy·(x − mu)·rs), 1 is dbias[c] = T(Σ dy). One thread per channel sums in
// float64 over n, then the spatial positions, in increasing order (the order the op's Doc
// fixes), recomputing each instance's mu and rs in T as bnInstanceStats does: O(N·S) per
// thread, which the parameter gradients' C threads can afford.
func genInstanceNormParams(r int) generator {
	return func(s *device.Spec) (string, int64, error) {
		if len(s.In) != 2 {
			return "", 0, fmt.Errorf("want operands x, dy")
		}
		x, out := s.In[0], s.Out[0]
		g, err := bnCheck(s, x, 3, s.In[1:2], s.Out)
		if err != nil {
			return "", 0, err
		}
		dyj := load(s.In[1].DType, "in1", "base + j")
		var b strings.Builder
		b.WriteString("    double acc = 0;\n")
		fmt.Fprintf(&b, "    for (long long bi = 0; bi < %dLL; bi++) {\n", g.n)
		fmt.Fprintf(&b, "    long long base = (bi * %dLL + i) * %dLL;\n", g.c, g.sp)
		if r == 0 {
			bnInstanceStats(&b, g, x)
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) acc += (double)%s * ((double)%s - (double)mu) * (double)rs;\n", g.sp, dyj, load(x.DType, "in0", "base + j"))
		} else {
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) acc += (double)%s;\n", g.sp, dyj)
		}
		b.WriteString("    }\n")
		fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
		return b.String(), g.c, nil
	}
}
