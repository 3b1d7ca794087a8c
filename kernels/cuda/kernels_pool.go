package cuda

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Kernels of the windowed nn ops: max and average pooling, local response normalisation and
// resize, and their input gradients. Each gives the CPU device's results (runtime/cpu nn.go,
// grad_nn.go, resize.go over kernels/cpu pool.go and resize.go): the same windows and
// interpolation taps, the same tie rules, and sums in the CPU's order and precision. The
// backward ops, scatter-adds on the CPU, are gathers here: one thread per input-gradient
// element finds the outputs that used it and adds their contributions in the order the CPU
// adds them, so the sums round alike and need no atomics.

func init() {
	generators["max_pool"] = genMaxPool
	generators["max_pool_grad"] = genMaxPoolGrad
	generators["avg_pool"] = genAvgPool
	generators["avg_pool_grad"] = genAvgPoolGrad
	generators["lrn"] = genLRN
	generators["lrn_grad"] = genLRNGrad
	generators["resize"] = genResize
	generators["resize_grad"] = genResizeGrad
}

// poolF64 is v as a C double literal that reads back exactly (the shortest round-trip
// decimal), so that constants computed here equal the CPU's float64 values.
func poolF64(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return "(" + s + ")"
}

// poolIndent is the indentation of nesting depth d inside the kernel's loop body.
func poolIndent(d int) string { return strings.Repeat("  ", d+2) }

// poolAxis is one spatial dim of a pooling window: input and output extents, kernel, stride,
// dilation and the pads before and after.
type poolAxis struct{ in, out, k, s, d, pb, pe int64 }

// poolGeom is the window geometry of a pooling op over planes of (n, c).
type poolGeom struct {
	axes            []poolAxis
	inSize, outSize int64 // elements of one plane of x and of y
	includePad      bool
}

// poolGeometry checks x [N, C, D1..Dk] → y [N, C, O1..Ok] against the window attributes as
// kernels/cpu's PoolParams.Init does (1 to 3 spatial dims, ceil_mode dropping a last window
// that would start in the end padding) and returns the geometry.
func poolGeometry(s *device.Spec, x, y ir.Type) (*poolGeom, error) {
	r := x.Rank() - 2
	if r < 1 || r > 3 {
		return nil, fmt.Errorf("want x [N, C, D1..Dk] with 1 to 3 spatial dims (as the CPU device), got %s", x)
	}
	if y.Rank() != x.Rank() || y.Shape[0] != x.Shape[0] || y.Shape[1] != x.Shape[1] || x.Shape[1] < 1 {
		return nil, fmt.Errorf("pooling %s into %s", x, y)
	}
	kernel := s.Attrs.Ints("kernel")
	if len(kernel) != r {
		return nil, fmt.Errorf("kernel %v for %d spatial dims", kernel, r)
	}
	wp, err := ir.Window(s.Attrs, r, kernel)
	if err != nil {
		return nil, err
	}
	g := &poolGeom{inSize: 1, outSize: 1, includePad: s.Attrs.Bool("count_include_pad", false)}
	for a := 0; a < r; a++ {
		ax := poolAxis{in: int64(x.Shape[2+a]), k: int64(kernel[a]), s: int64(wp.Strides[a]), d: int64(wp.Dilations[a]),
			pb: int64(wp.PadsBegin[a]), pe: int64(wp.PadsEnd[a])}
		if ax.in < 1 {
			return nil, fmt.Errorf("empty spatial dim %d of %s", a, x)
		}
		span := ax.in + ax.pb + ax.pe - (ax.d*(ax.k-1) + 1)
		if span < 0 {
			return nil, fmt.Errorf("dilated kernel %v larger than the padded input %s", kernel, x)
		}
		ax.out = span/ax.s + 1
		if wp.CeilMode {
			if c := (span+ax.s-1)/ax.s + 1; c > ax.out && (c-1)*ax.s < ax.in+ax.pb {
				ax.out = c
			}
		}
		if int64(y.Shape[2+a]) != ax.out {
			return nil, fmt.Errorf("the window gives %d along spatial dim %d, the result %s", ax.out, a, y)
		}
		g.axes = append(g.axes, ax)
		g.inSize *= ax.in
		g.outSize *= ax.out
	}
	return g, nil
}

// dims are the spatial extents of x (in) or y (out).
func (g *poolGeom) dims(in bool) []int64 {
	var ds []int64
	for _, ax := range g.axes {
		if in {
			ds = append(ds, ax.in)
		} else {
			ds = append(ds, ax.out)
		}
	}
	return ds
}

// split writes v0, v1… (the spatial coordinates of flat index i within its plane of dims)
// and plane.
func poolSplit(b *strings.Builder, v string, dims []int64) {
	b.WriteString("    long long q = i;\n")
	for a := len(dims) - 1; a >= 0; a-- {
		fmt.Fprintf(b, "    long long %s%d = q %% %dLL; q /= %dLL;\n", v, a, dims[a], dims[a])
	}
	b.WriteString("    long long plane = q;\n")
}

// offset is the plane offset of the spatial coordinates v0, v1… in a plane of dims.
func poolOffset(v string, dims []int64) string {
	var terms []string
	st := int64(1)
	for a := len(dims) - 1; a >= 0; a-- {
		terms = append([]string{fmt.Sprintf("%s%d * %dLL", v, a, st)}, terms...)
		st *= dims[a]
	}
	return strings.Join(terms, " + ")
}

// openTaps opens one loop per spatial dim (the first outermost: row-major order of the
// kernel offsets) over the taps t of output o's window that fall inside x, at positions
// p; it returns the depth inside and the closing braces.
func (g *poolGeom) openTaps(b *strings.Builder, depth int, o, t, p string) (int, string) {
	var closing []string
	for a, ax := range g.axes {
		ind := poolIndent(depth)
		fmt.Fprintf(b, "%sfor (long long %s%d = 0; %s%d < %dLL; %s%d++) {\n", ind, t, a, t, a, ax.k, t, a)
		fmt.Fprintf(b, "%s  long long %s%d = %s%d * %dLL - %dLL + %s%d * %dLL;\n", ind, p, a, o, a, ax.s, ax.pb, t, a, ax.d)
		fmt.Fprintf(b, "%s  if (%s%d < 0 || %s%d >= %dLL) continue;\n", ind, p, a, p, a, ax.in)
		closing = append([]string{ind + "}\n"}, closing...)
		depth++
	}
	return depth, strings.Join(closing, "")
}

// divisor writes cnt, average pooling's divisor of output o: the product over the spatial
// dims of the window taps inside x, or with count_include_pad inside x and its explicit pads
// (never the ceil-mode overhang), as kernels/cpu's PoolParams counts them.
func (g *poolGeom) divisor(b *strings.Builder, depth int, o string) {
	ind := poolIndent(depth)
	fmt.Fprintf(b, "%slong long cnt = 1;\n", ind)
	for a, ax := range g.axes {
		lo, hi := int64(0), ax.in
		if g.includePad {
			lo, hi = -ax.pb, ax.in+ax.pe
		}
		fmt.Fprintf(b, "%s{ long long m = 0; for (long long t = 0; t < %dLL; t++) { long long p = %s%d * %dLL - %dLL + t * %dLL; if (p >= %dLL && p < %dLL) m++; } cnt *= m; }\n",
			ind, ax.k, o, a, ax.s, ax.pb, ax.d, lo, hi)
	}
}

// openOutputs opens, for input position p, one loop per spatial dim over the outputs o whose
// window has a tap at p (o·stride − pad + t·dilation = p for some tap t), increasing in
// every dim, or decreasing in the last when lastDown; it returns the depth inside and the
// closing braces.
func (g *poolGeom) openOutputs(b *strings.Builder, depth int, p, o string, lastDown bool) (int, string) {
	var closing []string
	for a, ax := range g.axes {
		ind := poolIndent(depth)
		fmt.Fprintf(b, "%slong long lo%d = %s%d + %dLL, hi%d = (%s%d + %dLL) / %dLL;\n", ind, a, p, a, ax.pb-(ax.k-1)*ax.d, a, p, a, ax.pb, ax.s)
		fmt.Fprintf(b, "%slo%d = lo%d <= 0 ? 0 : (lo%d + %dLL) / %dLL;\n", ind, a, a, a, ax.s-1, ax.s)
		fmt.Fprintf(b, "%sif (hi%d > %dLL) hi%d = %dLL;\n", ind, a, ax.out-1, a, ax.out-1)
		if lastDown && a == len(g.axes)-1 {
			fmt.Fprintf(b, "%sfor (long long %s%d = hi%d; %s%d >= lo%d; %s%d--) {\n", ind, o, a, a, o, a, a, o, a)
		} else {
			fmt.Fprintf(b, "%sfor (long long %s%d = lo%d; %s%d <= hi%d; %s%d++) {\n", ind, o, a, a, o, a, a, o, a)
		}
		if ax.d > 1 {
			fmt.Fprintf(b, "%s  if ((%s%d + %dLL - %s%d * %dLL) %% %dLL != 0) continue;\n", ind, p, a, ax.pb, o, a, ax.s, ax.d)
		}
		closing = append([]string{ind + "}\n"}, closing...)
		depth++
	}
	return depth, strings.Join(closing, "")
}

// poolTypes checks a pooling op's single float operand of the result's dtype.
func poolTypes(s *device.Spec, operands int) (class, error) {
	if len(s.In) != operands {
		return 0, fmt.Errorf("%d operands, want %d", len(s.In), operands)
	}
	ct, err := floatIO(s)
	if err != nil {
		return 0, err
	}
	for _, t := range s.In {
		if t.DType != s.Out[0].DType {
			return 0, fmt.Errorf("mixed dtypes %s and %s", t.DType, s.Out[0].DType)
		}
	}
	return ct, nil
}

// poolSite checks a pooling site: its operands (poolTypes) and the window between its input
// and output tensors, which picks once the operand count is right. It returns the compute
// type and the geometry.
func poolSite(s *device.Spec, operands int, pick func(in []ir.Type, out ir.Type) (x, y ir.Type)) (string, *poolGeom, error) {
	ct, err := poolTypes(s, operands)
	if err != nil {
		return "", nil, err
	}
	x, y := pick(s.In, s.Out[0])
	g, err := poolGeometry(s, x, y)
	if err != nil {
		return "", nil, err
	}
	return ct.ctype(), g, nil
}

// forward is a pooling op's input and output: operand and result.
func forward(in []ir.Type, out ir.Type) (x, y ir.Type) { return in[0], out }

// genMaxPool: y[n, c, o] = the maximum of x over o's window taps inside x (padding never
// wins; −inf for a window without one), one thread per output. The taps are visited in
// row-major order of the kernel offsets; a NaN wins and stays, and +0 beats −0, as Go's
// max in kernels/cpu's MaxPool.
func genMaxPool(s *device.Spec) (string, int64, error) {
	ty, g, err := poolSite(s, 1, forward)
	if err != nil {
		return "", 0, err
	}
	x, y := s.In[0], s.Out[0]
	var b strings.Builder
	poolSplit(&b, "o", g.dims(false))
	fmt.Fprintf(&b, "    long long xb = plane * %dLL;\n    %s m = -PPC_INF;\n", g.inSize, ty)
	depth, closing := g.openTaps(&b, 0, "o", "t", "p")
	ind := poolIndent(depth)
	fmt.Fprintf(&b, "%s%s v = %s;\n", ind, ty, load(x.DType, "in0", "xb + "+poolOffset("p", g.dims(true))))
	fmt.Fprintf(&b, "%sif (v != v || v > m) m = v; else if (v == m && v == 0) m = m + v;\n", ind)
	b.WriteString(closing)
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(y.DType, round(y.DType, "m")))
	return b.String(), int64(y.NumElements()), nil
}

// genMaxPoolGrad (operands x, dy): dx[p] = Σ dy[o] over the outputs o whose window's argmax
// is p, in increasing output order (the order of kernels/cpu's MaxPoolBackward), summed in
// the dtype (float for 16-bit dtypes). The argmax is recomputed as MaxPool's: the first tap
// in row-major order holding the maximum, the first NaN when there is one, none for a window
// without a tap inside x. One thread per element of dx, visiting only the outputs whose
// window covers it.
func genMaxPoolGrad(s *device.Spec) (string, int64, error) {
	ty, g, err := poolSite(s, 2, func(in []ir.Type, _ ir.Type) (ir.Type, ir.Type) { return in[0], in[1] })
	if err != nil {
		return "", 0, err
	}
	x, dy, dx := s.In[0], s.In[1], s.Out[0]
	if !x.Equal(dx) {
		return "", 0, fmt.Errorf("the gradient of %s is %s", x, dx)
	}
	in, out := g.dims(true), g.dims(false)
	var b strings.Builder
	poolSplit(&b, "p", in)
	fmt.Fprintf(&b, "    long long xb = plane * %dLL, yb = plane * %dLL, self = %s;\n", g.inSize, g.outSize, poolOffset("p", in))
	fmt.Fprintf(&b, "    %s acc = 0;\n", ty)
	depth, closeOuts := g.openOutputs(&b, 0, "p", "o", false)
	ind := poolIndent(depth)
	fmt.Fprintf(&b, "%slong long best = -1; %s bv = 0;\n", ind, ty)
	inner, closeTaps := g.openTaps(&b, depth, "o", "t", "w")
	ind2 := poolIndent(inner)
	fmt.Fprintf(&b, "%slong long off = %s;\n", ind2, poolOffset("w", in))
	fmt.Fprintf(&b, "%s%s v = %s;\n", ind2, ty, load(x.DType, "in0", "xb + off"))
	fmt.Fprintf(&b, "%sif (best < 0 || (bv == bv && (v != v || v > bv))) { bv = v; best = off; }\n", ind2)
	b.WriteString(closeTaps)
	fmt.Fprintf(&b, "%sif (best == self) acc += %s;\n", ind, load(dy.DType, "in1", "yb + "+poolOffset("o", out)))
	b.WriteString(closeOuts)
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(dx.DType, round(dx.DType, "acc")))
	return b.String(), int64(dx.NumElements()), nil
}

// genAvgPool: y[n, c, o] = (Σ x over o's window taps inside x) / divisor, the sum from 0 in
// row-major order of the kernel offsets in the dtype (float for 16-bit dtypes), as
// kernels/cpu's AvgPool; the divisor counts the taps inside x (or with count_include_pad
// inside x and its explicit pads); a window with divisor 0 gives 0. One thread per output.
func genAvgPool(s *device.Spec) (string, int64, error) {
	ty, g, err := poolSite(s, 1, forward)
	if err != nil {
		return "", 0, err
	}
	x, y := s.In[0], s.Out[0]
	var b strings.Builder
	poolSplit(&b, "o", g.dims(false))
	fmt.Fprintf(&b, "    long long xb = plane * %dLL;\n    %s acc = 0;\n", g.inSize, ty)
	depth, closing := g.openTaps(&b, 0, "o", "t", "p")
	fmt.Fprintf(&b, "%sacc += %s;\n", poolIndent(depth), load(x.DType, "in0", "xb + "+poolOffset("p", g.dims(true))))
	b.WriteString(closing)
	g.divisor(&b, 0, "o")
	fmt.Fprintf(&b, "    if (cnt > 0) acc = acc / (%s)cnt;\n", ty)
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(y.DType, round(y.DType, "acc")))
	return b.String(), int64(y.NumElements()), nil
}

// genAvgPoolGrad (operand dy; the result has input_shape): dx[p] = Σ dy[o] / divisor(o) over
// the outputs o whose window has a tap at p (windows with divisor 0 add nothing), each
// quotient and the sum in the dtype (float for 16-bit dtypes). kernels/cpu's
// AvgPoolBackward sweeps output rows in order and, within a row, the last dim's taps in
// order, so p receives its outputs in increasing order of every spatial dim but the last,
// and in decreasing order of the last: the order here.
func genAvgPoolGrad(s *device.Spec) (string, int64, error) {
	ty, g, err := poolSite(s, 1, func(in []ir.Type, out ir.Type) (ir.Type, ir.Type) { return out, in[0] })
	if err != nil {
		return "", 0, err
	}
	dy, dx := s.In[0], s.Out[0]
	var b strings.Builder
	poolSplit(&b, "p", g.dims(true))
	fmt.Fprintf(&b, "    long long yb = plane * %dLL;\n    %s acc = 0;\n", g.outSize, ty)
	depth, closing := g.openOutputs(&b, 0, "p", "o", true)
	g.divisor(&b, depth, "o")
	fmt.Fprintf(&b, "%sif (cnt > 0) acc += %s / (%s)cnt;\n", poolIndent(depth), load(dy.DType, "in0", "yb + "+poolOffset("o", g.dims(false))), ty)
	b.WriteString(closing)
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(dx.DType, round(dx.DType, "acc")))
	return b.String(), int64(dx.NumElements()), nil
}

// lrnParams reads lrn's attributes (the CPU device's defaults) for x [N, C, …]: the channel
// window [c − before, c + after] and the constants alpha/size, beta and bias.
type lrnParams struct {
	c, spatial, before, after int64
	alpha, beta, bias, size   float64
}

func lrnParse(s *device.Spec, operands int) (lrnParams, error) {
	if _, err := poolTypes(s, operands); err != nil {
		return lrnParams{}, err
	}
	x := s.In[0]
	for _, t := range append(s.In[1:], s.Out...) {
		if !t.Equal(x) {
			return lrnParams{}, fmt.Errorf("%s does not match x %s", t, x)
		}
	}
	if x.Rank() < 2 {
		return lrnParams{}, fmt.Errorf("want x [N, C, …], got %s", x)
	}
	size := int64(s.Attrs.Int("size", 0))
	if size < 1 {
		return lrnParams{}, fmt.Errorf("size must be positive, got %d", size)
	}
	p := lrnParams{c: int64(x.Shape[1]), spatial: int64(x.Shape[2:].NumElements()), before: (size - 1) / 2, size: float64(size),
		alpha: s.Attrs.Float("alpha", 1e-4), beta: s.Attrs.Float("beta", 0.75), bias: s.Attrs.Float("bias", 1)}
	p.after = size - 1 - p.before
	for _, v := range []float64{p.alpha, p.beta, p.bias} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return lrnParams{}, fmt.Errorf("alpha, beta and bias must be finite, got %v, %v, %v", p.alpha, p.beta, p.bias)
		}
	}
	return p, nil
}

// sumSquares writes double sq = Σ x[n, j, s]² over j from max(0, ch − before) to
// min(C − 1, ch + after), in increasing j (x at in0[xb + j·spatial]).
func (p lrnParams) sumSquares(b *strings.Builder, ind string, d ir.DType, ch, sq string) {
	fmt.Fprintf(b, "%sdouble %s = 0;\n", ind, sq)
	fmt.Fprintf(b, "%sfor (long long j = %s < %dLL ? 0 : %s - %dLL; j <= (%s + %dLL < %dLL ? %s + %dLL : %dLL); j++) { double v = (double)%s; %s += v * v; }\n",
		ind, ch, p.before, ch, p.before, ch, p.after, p.c-1, ch, p.after, p.c-1, load(d, "in0", fmt.Sprintf("xb + j * %dLL", p.spatial)), sq)
}

// genLRN: y = x / (bias + alpha/size · Σ x[n, j, …]²)^beta over the channel window, in double
// (the window summed in increasing channel order) and rounded once, as the CPU device's
// lrnImpl. One thread per element.
func genLRN(s *device.Spec) (string, int64, error) {
	p, err := lrnParse(s, 1)
	if err != nil {
		return "", 0, err
	}
	x := s.In[0]
	var b strings.Builder
	fmt.Fprintf(&b, "    long long ch = (i / %dLL) %% %dLL, xb = i - ch * %dLL;\n", p.spatial, p.c, p.spatial)
	p.sumSquares(&b, "    ", x.DType, "ch", "sq")
	y := fmt.Sprintf("(double)%s / ppc_pow(%s + %s * sq, %s)", load(x.DType, "in0", "i"), poolF64(p.bias), poolF64(p.alpha/p.size), poolF64(p.beta))
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(x.DType, round(x.DType, y)))
	return b.String(), int64(x.NumElements()), nil
}

// genLRNGrad (operands x, dy): with D = bias + alpha/size · Σ x² over each channel's window
// and t = dy·x·D^(−beta)/D, dx[i] = dy[i]·D[i]^(−beta) − (2·alpha·beta/size)·x[i]·Σ t[c]
// over the channels c whose window holds i (c from i − after to i + before, increasing), all
// in double and rounded once, in the CPU device's lrnGradImpl's operation order. One thread
// per element, recomputing the D of each channel it needs.
func genLRNGrad(s *device.Spec) (string, int64, error) {
	p, err := lrnParse(s, 2)
	if err != nil {
		return "", 0, err
	}
	x := s.In[0]
	bias, aos, nb := poolF64(p.bias), poolF64(p.alpha/p.size), poolF64(-p.beta)
	coef := 2 * p.alpha * p.beta / p.size
	xv := func(ch string) string {
		return "(double)" + load(x.DType, "in0", fmt.Sprintf("xb + %s * %dLL", ch, p.spatial))
	}
	dyv := func(ch string) string {
		return "(double)" + load(s.In[1].DType, "in1", fmt.Sprintf("xb + %s * %dLL", ch, p.spatial))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "    long long ch = (i / %dLL) %% %dLL, xb = i - ch * %dLL;\n", p.spatial, p.c, p.spatial)
	b.WriteString("    double acc = 0;\n")
	fmt.Fprintf(&b, "    for (long long c = ch < %dLL ? 0 : ch - %dLL; c <= (ch + %dLL < %dLL ? ch + %dLL : %dLL); c++) {\n", p.after, p.after, p.before, p.c-1, p.before, p.c-1)
	p.sumSquares(&b, "      ", x.DType, "c", "sq")
	fmt.Fprintf(&b, "      double dn = %s + %s * sq;\n", bias, aos)
	fmt.Fprintf(&b, "      acc += %s * %s * ppc_pow(dn, %s) / dn;\n    }\n", dyv("c"), xv("c"), nb)
	p.sumSquares(&b, "    ", x.DType, "ch", "sq")
	fmt.Fprintf(&b, "    double den = ppc_pow(%s + %s * sq, %s);\n", bias, aos, nb)
	dx := fmt.Sprintf("%s * den - %s * %s * acc", dyv("ch"), poolF64(coef), xv("ch"))
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(x.DType, round(x.DType, dx)))
	return b.String(), int64(x.NumElements()), nil
}

// rszAttrs are resize's (and resize_grad's) attributes, validated.
type rszAttrs struct {
	mode, coord, nearest string
	a                    float64 // cubic_coeff_a
	exclude              bool
	scales               []float64 // nil: sizes/in per dim
}

func rszParse(at ir.Attrs, x ir.Type) (r *rszAttrs, err error) {
	r = &rszAttrs{mode: at.Str("mode", "nearest"), coord: at.Str("coordinate_transformation_mode", "half_pixel"),
		nearest: at.Str("nearest_mode", "round_prefer_floor"), a: at.Float("cubic_coeff_a", -0.75), exclude: at.Bool("exclude_outside", false)}
	switch r.mode {
	case "nearest", "linear", "cubic":
	default:
		return nil, fmt.Errorf("unknown mode %s", r.mode)
	}
	switch r.coord {
	case "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn":
	default: // tf_crop_and_resize needs a roi, which the IR op has no attribute for
		return nil, fmt.Errorf("unsupported coordinate_transformation_mode %s", r.coord)
	}
	switch r.nearest {
	case "round_prefer_floor", "round_prefer_ceil", "floor", "ceil":
	default:
		return nil, fmt.Errorf("unknown nearest_mode %s", r.nearest)
	}
	if math.IsNaN(r.a) || math.IsInf(r.a, 0) {
		return nil, fmt.Errorf("cubic_coeff_a must be finite, got %v", r.a)
	}
	if r.scales, err = ir.ResizeScales(at, x); err != nil {
		return nil, err
	}
	return r, nil
}

// cpuKernels reports whether the CPU device resamples through kernels/cpu's Resize (linear,
// and cubic with a nonzero cubic_coeff_a; also every resize_grad but cubic with a = 0)
// rather than its own tables (nearest, and cubic with a = 0, which kernels/cpu reads as the
// default). The two differ in how they combine taps: see genResize.
func (r *rszAttrs) cpuKernels(grad bool) bool {
	if r.mode == "cubic" {
		return r.a != 0
	}
	return r.mode == "linear" || grad
}

// rszAxis is the resampling of one dim: in → out with scale s. nt is the taps per output
// (nearest 1, linear 2, cubic 4; 1 when collapsed); identity marks a dim every output
// copies from its own index with weight 1, which the CPU skips.
type rszAxis struct {
	in, out    int
	s, hs0     float64 // hs0: half_pixel_symmetric's offset in/2·(1 − out/(s·in))
	raw, nt    int
	collapse   bool
	identity   bool
	dmin, dmax int // the raw taps' offsets from floor(source): a superset of the taps' range
}

// source is the input coordinate of output o (the CPU's resizeSource and ResizeParams.source).
func (r *rszAttrs) source(ax *rszAxis, o int) float64 {
	x, fin := float64(o), float64(ax.in)
	switch r.coord {
	case "pytorch_half_pixel":
		if ax.out == 1 {
			return 0
		}
		return (x+0.5)/ax.s - 0.5
	case "align_corners":
		if ax.out == 1 {
			return 0
		}
		return x * (fin - 1) / float64(ax.out-1)
	case "asymmetric":
		return x / ax.s
	case "tf_half_pixel_for_nn":
		return (x + 0.5) / ax.s
	case "half_pixel_symmetric":
		return ax.hs0 + (x+0.5)/ax.s - 0.5
	}
	return (x+0.5)/ax.s - 0.5
}

// sourceC is source in C, on the output index expression o, with the same operations.
func (r *rszAttrs) sourceC(ax *rszAxis, o string) string {
	od, s := "(double)("+o+")", poolF64(ax.s)
	switch r.coord {
	case "pytorch_half_pixel":
		if ax.out == 1 {
			return "0.0"
		}
	case "align_corners":
		if ax.out == 1 {
			return "0.0"
		}
		return fmt.Sprintf("%s * %s / %s", od, poolF64(float64(ax.in-1)), poolF64(float64(ax.out-1)))
	case "asymmetric":
		return fmt.Sprintf("%s / %s", od, s)
	case "tf_half_pixel_for_nn":
		return fmt.Sprintf("(%s + 0.5) / %s", od, s)
	case "half_pixel_symmetric":
		return fmt.Sprintf("%s + (%s + 0.5) / %s - 0.5", poolF64(ax.hs0), od, s)
	}
	return fmt.Sprintf("(%s + 0.5) / %s - 0.5", od, s)
}

// rawTaps are output o's source indices and weights before any collapse: the CPU's
// buildResizeAxis and ResizeParams.buildAxis, which agree.
func (r *rszAttrs) rawTaps(ax *rszAxis, o int) ([]int, []float64) {
	x := r.source(ax, o)
	fl := math.Floor(x)
	fr, i0 := x-fl, int(fl)
	clamp := func(j int) int { return min(max(j, 0), ax.in-1) }
	switch r.mode {
	case "nearest":
		j := i0
		if r.nearest == "round_prefer_floor" && fr > 0.5 || r.nearest == "round_prefer_ceil" && fr >= 0.5 || r.nearest == "ceil" && fr > 0 {
			j++
		}
		return []int{clamp(j)}, []float64{1}
	case "linear":
		return []int{clamp(i0), clamp(i0 + 1)}, []float64{1 - fr, fr}
	}
	a, t := r.a, fr
	w := []float64{((a*(t+1)-5*a)*(t+1)+8*a)*(t+1) - 4*a, ((a+2)*t-(a+3))*t*t + 1,
		((a+2)*(1-t)-(a+3))*(1-t)*(1-t) + 1, ((a*(2-t)-5*a)*(2-t)+8*a)*(2-t) - 4*a}
	idx := make([]int, 4)
	sum := 0.0
	for k := range w {
		j := i0 - 1 + k
		if r.exclude && (j < 0 || j >= ax.in) {
			w[k] = 0
		}
		sum += w[k]
		idx[k] = clamp(j)
	}
	if r.exclude && sum != 0 {
		for k := range w {
			w[k] /= sum
		}
	}
	return idx, w
}

// axis builds dim in → out with scale s. kern selects kernels/cpu's tables, which collapse a
// dim whose every output has at most one nonzero weight to that single tap (and call a dim
// identity only then); the CPU device's own tables keep the taps and call a dim identity
// when every nonzero weight is 1 at the output's own index.
func (r *rszAttrs) axis(in, out int, s float64, kern bool) (rszAxis, error) {
	ax := rszAxis{in: in, out: out, s: s}
	fin := float64(in)
	adj := float64(out) / (s * fin)
	ax.hs0 = fin / 2 * (1 - adj)
	ax.raw = map[string]int{"nearest": 1, "linear": 2, "cubic": 4}[r.mode]
	ax.dmin, ax.dmax = 0, 1
	if r.mode == "cubic" {
		ax.dmin, ax.dmax = -1, 2
	}
	ax.nt = ax.raw
	// Source coordinates increase with o: the ends bound them. Beyond ±2^40 the CPU's
	// integer conversions differ (and a GPU's overflow).
	for _, o := range []int{0, out - 1} {
		if x := r.source(&ax, o); out > 0 && !(math.Abs(x) <= 1<<40) {
			return ax, fmt.Errorf("scale %v puts source coordinates at %v", s, x)
		}
	}
	single := true
	identity := in == out
	for o := 0; o < out; o++ {
		idx, w := r.rawTaps(&ax, o)
		nz := 0
		for k := range w {
			if w[k] != 0 {
				nz++
				if idx[k] != o || w[k] != 1 {
					identity = false
				}
			}
		}
		single = single && nz <= 1
		if kern && nz == 0 {
			identity = false // collapsed to weight 0
		}
	}
	if kern {
		if single && ax.raw > 1 {
			ax.nt, ax.collapse = 1, true
		}
		identity = identity && ax.nt == 1
	}
	ax.identity = identity
	return ax, nil
}

// emitTaps writes the taps of output index expression o: long long P_i[nt] and double
// P_w[nt] (P the prefix), computed with the CPU's operations in the CPU's order; floor is
// truncation corrected downwards, exact for the coordinates axis admits.
func (r *rszAttrs) emitTaps(b *strings.Builder, ind string, ax *rszAxis, o, p string) {
	fmt.Fprintf(b, "%slong long %s_i[%d]; double %s_w[%d];\n%s{\n", ind, p, ax.nt, p, ax.nt, ind)
	in := ind + "  "
	fmt.Fprintf(b, "%sdouble zx = %s;\n", in, r.sourceC(ax, o))
	fmt.Fprintf(b, "%slong long zi0 = (long long)zx; if ((double)zi0 > zx) zi0--;\n", in)
	fmt.Fprintf(b, "%sdouble zfr = zx - (double)zi0; (void)zfr;\n", in)
	fmt.Fprintf(b, "%slong long zri[%d]; double zrw[%d];\n", in, ax.raw, ax.raw)
	clamp := func(j string) string {
		return fmt.Sprintf("(%s < 0 ? 0 : %s > %dLL ? %dLL : %s)", j, j, ax.in-1, ax.in-1, j)
	}
	switch r.mode {
	case "nearest":
		fmt.Fprintf(b, "%slong long zj = zi0;\n", in)
		switch r.nearest {
		case "round_prefer_floor":
			fmt.Fprintf(b, "%sif (zfr > 0.5) zj++;\n", in)
		case "round_prefer_ceil":
			fmt.Fprintf(b, "%sif (zfr >= 0.5) zj++;\n", in)
		case "ceil":
			fmt.Fprintf(b, "%sif (zfr > 0) zj++;\n", in)
		}
		fmt.Fprintf(b, "%szri[0] = %s; zrw[0] = 1.0;\n", in, clamp("zj"))
	case "linear":
		fmt.Fprintf(b, "%slong long zj = zi0 + 1;\n", in)
		fmt.Fprintf(b, "%szri[0] = %s; zri[1] = %s; zrw[0] = 1.0 - zfr; zrw[1] = zfr;\n", in, clamp("zi0"), clamp("zj"))
	case "cubic":
		fmt.Fprintf(b, "%sconst double A = %s; double t = zfr;\n", in, poolF64(r.a))
		fmt.Fprintf(b, "%szrw[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;\n", in)
		fmt.Fprintf(b, "%szrw[1] = ((A + 2) * t - (A + 3)) * t * t + 1;\n", in)
		fmt.Fprintf(b, "%szrw[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;\n", in)
		fmt.Fprintf(b, "%szrw[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;\n", in)
		fmt.Fprintf(b, "%sdouble zsum = 0;\n", in)
		fmt.Fprintf(b, "%sfor (int zk = 0; zk < 4; zk++) {\n%s  long long zj = zi0 - 1 + zk;\n", in, in)
		if r.exclude {
			fmt.Fprintf(b, "%s  if (zj < 0 || zj >= %dLL) zrw[zk] = 0;\n", in, ax.in)
		}
		fmt.Fprintf(b, "%s  zsum += zrw[zk]; zri[zk] = %s;\n%s}\n", in, clamp("zj"), in)
		if r.exclude {
			fmt.Fprintf(b, "%sif (zsum != 0) for (int zk = 0; zk < 4; zk++) zrw[zk] /= zsum;\n", in)
		}
		fmt.Fprintf(b, "%s(void)zsum;\n", in)
	}
	if ax.collapse {
		// kernels/cpu keeps the last nonzero tap (the first tap with weight 0 if none).
		fmt.Fprintf(b, "%s%s_i[0] = zri[0]; %s_w[0] = 0.0;\n", in, p, p)
		fmt.Fprintf(b, "%sfor (int zk = 0; zk < %d; zk++) if (zrw[zk] != 0) { %s_i[0] = zri[zk]; %s_w[0] = zrw[zk]; }\n", in, ax.raw, p, p)
	} else {
		fmt.Fprintf(b, "%sfor (int zk = 0; zk < %d; zk++) { %s_i[zk] = zri[zk]; %s_w[zk] = zrw[zk]; }\n", in, ax.raw, p, p)
	}
	fmt.Fprintf(b, "%s}\n", ind)
}

// emitRange writes lo and hi, the outputs whose taps may reach input index p: by binary
// search, as the raw taps clamp(floor(source) + dmin..dmax) do not decrease with the output.
func (r *rszAttrs) emitRange(b *strings.Builder, ind string, ax *rszAxis, p, lo, hi string) {
	tap := func(d int) string {
		return fmt.Sprintf("double zx = %s; long long zq = (long long)zx; if ((double)zq > zx) zq--; zq += %d; if (zq < 0) zq = 0; if (zq > %dLL) zq = %dLL;",
			r.sourceC(ax, "zm"), d, ax.in-1, ax.in-1)
	}
	fmt.Fprintf(b, "%slong long %s, %s;\n%s{\n", ind, lo, hi, ind)
	in := ind + "  "
	fmt.Fprintf(b, "%slong long zl = 0, zh = %dLL;\n", in, ax.out)
	fmt.Fprintf(b, "%swhile (zl < zh) { long long zm = (zl + zh) / 2; %s if (zq >= %s) zh = zm; else zl = zm + 1; }\n", in, tap(ax.dmax), p)
	fmt.Fprintf(b, "%s%s = zl; zl = 0; zh = %dLL;\n", in, lo, ax.out)
	fmt.Fprintf(b, "%swhile (zl < zh) { long long zm = (zl + zh) / 2; %s if (zq > %s) zh = zm; else zl = zm + 1; }\n", in, tap(ax.dmin), p)
	fmt.Fprintf(b, "%s%s = zl - 1;\n%s}\n", in, hi, ind)
}

// rszSetup checks resize's or resize_grad's types (x is the resized operand's type, y the
// resized result's) and builds the dims' tables.
func rszSetup(s *device.Spec, x, y ir.Type, grad bool) (*rszAttrs, []rszAxis, error) {
	if len(s.In) != 1 || s.In[0].DType != s.Out[0].DType {
		return nil, nil, fmt.Errorf("want one operand of the result's dtype")
	}
	r, err := rszParse(s.Attrs, x)
	if err != nil {
		return nil, nil, err
	}
	if sizes := s.Attrs.Ints("sizes"); len(sizes) != x.Rank() || !y.Shape.Equal(sizes) {
		return nil, nil, fmt.Errorf("sizes %v do not match the resized %s", sizes, y)
	}
	if x.Rank() == 0 {
		return nil, nil, fmt.Errorf("resize of a scalar")
	}
	if (grad || r.mode != "nearest") && !x.DType.IsFloat() {
		return nil, nil, fmt.Errorf("%s resize of %s: want a float dtype", r.mode, x.DType)
	}
	if y.NumElements() == 0 || x.NumElements() == 0 {
		return r, nil, nil
	}
	axes := make([]rszAxis, x.Rank())
	for d := range axes {
		sc := float64(y.Shape[d]) / float64(x.Shape[d])
		if r.scales != nil {
			sc = r.scales[d]
		}
		if axes[d], err = r.axis(x.Shape[d], y.Shape[d], sc, r.cpuKernels(grad)); err != nil {
			return nil, nil, err
		}
	}
	return r, axes, nil
}

// rszTap is the C of axis d's tap k (an index or a loop variable) at output coordinate c:
// its index, and its weight ("" for an identity dim, whose weight 1 the CPU never applies).
func rszTap(axes []rszAxis, d int, k, c string) (idx, w string) {
	if axes[d].identity {
		return c, ""
	}
	return fmt.Sprintf("a%d_i[%s]", d, k), fmt.Sprintf("a%d_w[%s]", d, k)
}

// rszProduct is Π w over the given weights in dim order, as the CPU builds its weights of
// combined taps from 1 (identity dims multiply by 1, exactly: left out).
func rszProduct(ws []string) string {
	var f []string
	for _, w := range ws {
		if w != "" {
			f = append(f, w)
		}
	}
	if len(f) == 0 {
		return "1.0"
	}
	return strings.Join(f, " * ")
}

// genResize: resize (operand x, result of shape sizes), one thread per output, with the
// per-dim source indices and weights computed as the CPU device does (coordinate transform,
// floor, nearest_mode rounding, linear or Keys cubic weights, exclude_outside, clamping)
// and combined as the CPU combines them:
//   - nearest (any dtype): a copy of x at the per-dim nearest indices;
//   - cubic with cubic_coeff_a = 0 (the CPU's separable resampler): one dim at a time from
//     the first, y = Σ_tL wL·(… Σ_t0 w0·x), each sum from 0 in tap order over the nonzero
//     weights, in double, rounded once;
//   - linear and other cubic (kernels/cpu's Resize, whose dims with at most one nonzero
//     weight per output collapse to that tap): along the last dim one or two taps with one
//     or two combinations of the other dims' taps are computed in the dtype (float for
//     16-bit dtypes) with the weights rounded to it, a·(w0·x0 + w1·x1) and the like, the
//     same expressions; any other case sums ws·w·x over the last dim's taps and, inside,
//     the other dims' combinations (the first dim fastest) in double, rounded once.
func genResize(s *device.Spec) (string, int64, error) {
	x, y := s.In[0], s.Out[0]
	r, axes, err := rszSetup(s, x, y, false)
	if err != nil {
		return "", 0, err
	}
	n := int64(y.NumElements())
	if axes == nil {
		if n > 0 {
			return "", 0, fmt.Errorf("resize of the empty %s into %s", x, y)
		}
		return "", 0, nil
	}
	st := strides(x.Shape)
	var b strings.Builder
	coords(&b, y.Shape, "i")
	for d := range axes {
		if !axes[d].identity {
			r.emitTaps(&b, "    ", &axes[d], fmt.Sprintf("c%d", d), fmt.Sprintf("a%d", d))
		}
	}
	// off is x's offset of the taps ks (one C expression per dim).
	off := func(ks []string) string {
		var terms []string
		for d := range axes {
			idx, _ := rszTap(axes, d, ks[d], fmt.Sprintf("c%d", d))
			terms = append(terms, fmt.Sprintf("%s * %dLL", idx, st[d]))
		}
		return strings.Join(terms, " + ")
	}
	zeros := make([]string, len(axes))
	for d := range zeros {
		zeros[d] = "0"
	}
	if r.mode == "nearest" {
		fmt.Fprintf(&b, "    out[i] = in0[%s];\n", off(zeros))
		return b.String(), n, nil
	}
	if !r.cpuKernels(false) {
		writeSeparable(&b, axes, x.DType, off)
		return b.String(), n, nil
	}
	ty := classOf(x.DType).ctype()
	L := len(axes) - 1
	lead, two := 1, -1 // combinations of the leading dims' taps; the leading dim with 2 taps
	for d := 0; d < L; d++ {
		lead *= axes[d].nt
		if axes[d].nt == 2 {
			two = d
		}
	}
	// weightOf is the C weight of axis d's tap k, in the dtype (T) or in double.
	weightOf := func(d int, k string, inT bool) string {
		_, w := rszTap(axes, d, k, "")
		if w == "" {
			w = "1.0"
		}
		if inT {
			return fmt.Sprintf("(%s)%s", ty, w)
		}
		return w
	}
	// leadWeight is the product of the leading dims' weights of taps ks.
	leadWeight := func(ks []string) string {
		var ws []string
		for d := 0; d < L; d++ {
			_, w := rszTap(axes, d, ks[d], "")
			ws = append(ws, w)
		}
		return rszProduct(ws)
	}
	with := func(ks []string, d int, k string) []string {
		c := append([]string{}, ks...)
		c[d] = k
		return c
	}
	xv := func(ks []string) string { return load(x.DType, "in0", off(ks)) }
	ntL := axes[L].nt
	switch {
	case ntL == 1 && lead == 1:
		fmt.Fprintf(&b, "    %s a = (%s)(%s), xv = %s;\n", ty, ty, leadWeight(zeros), xv(zeros))
		fmt.Fprintf(&b, "    %s yv = a == 1 ? xv : a * %s * xv;\n", ty, weightOf(L, "0", true))
	case ntL == 2 && lead == 1:
		fmt.Fprintf(&b, "    %s a = (%s)(%s), w0 = %s, w1 = %s;\n", ty, ty, leadWeight(zeros), weightOf(L, "0", true), weightOf(L, "1", true))
		fmt.Fprintf(&b, "    %s yv = a * (w0 * %s + w1 * %s);\n", ty, xv(zeros), xv(with(zeros, L, "1")))
	case ntL == 2 && lead == 2:
		k0, k1 := with(zeros, two, "0"), with(zeros, two, "1")
		fmt.Fprintf(&b, "    %s a0 = (%s)(%s), a1 = (%s)(%s), w0 = %s, w1 = %s;\n", ty, ty, leadWeight(k0), ty, leadWeight(k1), weightOf(L, "0", true), weightOf(L, "1", true))
		fmt.Fprintf(&b, "    %s yv = a0 * (w0 * %s + w1 * %s) + a1 * (w0 * %s + w1 * %s);\n", ty,
			xv(k0), xv(with(k0, L, "1")), xv(k1), xv(with(k1, L, "1")))
	default:
		ks := make([]string, len(axes))
		b.WriteString("    double sacc = 0;\n")
		depth := 0
		var closing []string
		for _, d := range append([]int{L}, rszDown(L)...) {
			ks[d] = "0"
			if axes[d].identity {
				continue
			}
			ks[d] = fmt.Sprintf("k%d", d)
			fmt.Fprintf(&b, "%sfor (int k%d = 0; k%d < %d; k%d++) {\n", poolIndent(depth), d, d, axes[d].nt, d)
			closing = append([]string{poolIndent(depth) + "}\n"}, closing...)
			depth++
		}
		fmt.Fprintf(&b, "%ssacc += %s * %s * (double)%s;\n", poolIndent(depth), leadWeight(ks), weightOf(L, ks[L], false), xv(ks))
		b.WriteString(strings.Join(closing, ""))
		b.WriteString("    double yv = sacc;\n")
	}
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(y.DType, round(y.DType, "yv")))
	return b.String(), n, nil
}

// rszDown is L−1, L−2, …, 0: the leading dims from the slowest-varying combination index.
func rszDown(L int) []int {
	var ds []int
	for d := L - 1; d >= 0; d-- {
		ds = append(ds, d)
	}
	return ds
}

// writeSeparable writes the CPU device's separable resampler (resize.go's resizeInterp, for
// cubic_coeff_a = 0): v = Σ over the last non-identity dim's taps of w·(the same sum over
// the previous non-identity dim … of x), each level from 0 over the nonzero weights in tap
// order, in double.
func writeSeparable(b *strings.Builder, axes []rszAxis, d ir.DType, off func([]string) string) {
	var dims []int
	ks := make([]string, len(axes))
	for a := range axes {
		ks[a] = "0"
		if !axes[a].identity {
			dims = append(dims, a)
			ks[a] = fmt.Sprintf("t%d", a)
		}
	}
	value := "(double)" + load(d, "in0", off(ks))
	var level func(k, depth int) string
	level = func(k, depth int) string {
		if k < 0 {
			return value
		}
		a, ind := dims[k], poolIndent(depth)
		fmt.Fprintf(b, "%sdouble v%d = 0;\n", ind, a)
		fmt.Fprintf(b, "%sfor (int t%d = 0; t%d < %d; t%d++) {\n", ind, a, a, axes[a].nt, a)
		fmt.Fprintf(b, "%s  if (a%d_w[t%d] == 0) continue;\n", ind, a, a)
		inner := level(k-1, depth+1)
		fmt.Fprintf(b, "%s  v%d += a%d_w[t%d] * %s;\n%s}\n", ind, a, a, a, inner, ind)
		return fmt.Sprintf("v%d", a)
	}
	v := level(len(dims)-1, 0)
	fmt.Fprintf(b, "    out[i] = %s;\n", store(d, round(d, v)))
}

// genResizeGrad: resize_grad (operand dy; the result has input_shape), the adjoint of the
// CPU's resize as the CPU computes it, one thread per element p of dx gathering the outputs
// whose taps reach p (found per dim by binary search over the outputs):
//   - cubic with cubic_coeff_a = 0 (resize.go's resizeInterpGrad, one dim at a time from
//     the last): dx[p] = Σ_{j0, t0: i0(j0, t0) = p0} w·(… Σ_{jL, tL} w·dy[j]), each level from
//     0 over increasing output index and tap with nonzero weight, in double, rounded once;
//   - otherwise (kernels/cpu's ResizeBackward): dx[p] = Σ over outputs j in increasing order,
//     the last dim's taps k and the leading dims' tap combinations c (first dim fastest)
//     that reach p, of T(ws_c·(w_k·dy[j])), the product in double and the sum in the dtype
//     (float for 16-bit dtypes).
func genResizeGrad(s *device.Spec) (string, int64, error) {
	dy, dx := s.In[0], s.Out[0]
	r, axes, err := rszSetup(s, dx, dy, true)
	if err != nil {
		return "", 0, err
	}
	n := int64(dx.NumElements())
	if axes == nil { // nothing resized: dx = 0
		return fmt.Sprintf("    out[i] = %s;\n", store(dx.DType, "0")), n, nil
	}
	st := strides(dy.Shape)
	ty := classOf(dx.DType).ctype()
	var b strings.Builder
	coords(&b, dx.Shape, "i")
	dyAt := func() string {
		var terms []string
		for d := range axes {
			terms = append(terms, fmt.Sprintf("j%d * %dLL", d, st[d]))
		}
		return load(dy.DType, "in0", strings.Join(terms, " + "))
	}
	// Identity dims read dy at the element's own coordinate.
	for d := range axes {
		if axes[d].identity {
			fmt.Fprintf(&b, "    long long j%d = c%d;\n", d, d)
		}
	}
	// openOutputs opens dim d's loop over the outputs j<d> whose taps may reach c<d>, with
	// their taps (nothing for an identity dim).
	openOutputs := func(d, depth int) string {
		if axes[d].identity {
			return ""
		}
		ind := poolIndent(depth)
		r.emitRange(&b, ind, &axes[d], fmt.Sprintf("c%d", d), fmt.Sprintf("lo%d", d), fmt.Sprintf("hi%d", d))
		fmt.Fprintf(&b, "%sfor (long long j%d = lo%d; j%d <= hi%d; j%d++) {\n", ind, d, d, d, d, d)
		r.emitTaps(&b, ind+"  ", &axes[d], fmt.Sprintf("j%d", d), fmt.Sprintf("a%d", d))
		return ind + "}\n"
	}
	if !r.cpuKernels(true) {
		var dims []int
		for d := range axes {
			if !axes[d].identity {
				dims = append(dims, d)
			}
		}
		// level writes the sum over dim dims[k]'s outputs into v<k> (from the first
		// non-identity dim outwards) and returns the variable.
		var level func(k, depth int) string
		level = func(k, depth int) string {
			if k == len(dims) {
				return "(double)" + dyAt()
			}
			a, ind := dims[k], poolIndent(depth)
			fmt.Fprintf(&b, "%sdouble v%d = 0;\n", ind, a)
			closing := openOutputs(a, depth)
			in := ind + "  "
			fmt.Fprintf(&b, "%sbool hit = false;\n%sfor (int t = 0; t < 4; t++) hit = hit || (a%d_w[t] != 0 && a%d_i[t] == c%d);\n%sif (!hit) continue;\n", in, in, a, a, a, in)
			fmt.Fprintf(&b, "%sdouble inner;\n%s{\n", in, in)
			val := level(k+1, depth+2)
			fmt.Fprintf(&b, "%s  inner = %s;\n", in, val)
			fmt.Fprintf(&b, "%s}\n%sfor (int t = 0; t < 4; t++) if (a%d_w[t] != 0 && a%d_i[t] == c%d) v%d += a%d_w[t] * inner;\n", in, in, a, a, a, a, a)
			b.WriteString(closing)
			return fmt.Sprintf("v%d", a)
		}
		v := level(0, 0)
		fmt.Fprintf(&b, "    out[i] = %s;\n", store(dx.DType, round(dx.DType, v)))
		return b.String(), n, nil
	}
	fmt.Fprintf(&b, "    %s acc = 0;\n", ty)
	var closing []string
	depth := 0
	for d := range axes {
		if !axes[d].identity {
			closing = append([]string{openOutputs(d, depth)}, closing...)
			depth++
		}
	}
	L := len(axes) - 1
	ind := poolIndent(depth)
	fmt.Fprintf(&b, "%sdouble g = (double)%s;\n", ind, dyAt())
	ks := make([]string, len(axes))
	var inner []string
	for _, d := range append([]int{L}, rszDown(L)...) {
		ks[d] = "0"
		if axes[d].identity {
			continue
		}
		ks[d] = fmt.Sprintf("k%d", d)
		fmt.Fprintf(&b, "%sfor (int k%d = 0; k%d < %d; k%d++) {\n", poolIndent(depth), d, d, axes[d].nt, d)
		fmt.Fprintf(&b, "%s  if (a%d_i[k%d] != c%d) continue;\n", poolIndent(depth), d, d, d)
		inner = append([]string{poolIndent(depth) + "}\n"}, inner...)
		depth++
	}
	wL := "1.0"
	if !axes[L].identity {
		wL = fmt.Sprintf("a%d_w[k%d]", L, L)
	}
	var ws []string
	for d := 0; d < L; d++ {
		_, w := rszTap(axes, d, ks[d], "")
		ws = append(ws, w)
	}
	fmt.Fprintf(&b, "%sacc += (%s)(%s * (%s * g));\n", poolIndent(depth), ty, rszProduct(ws), wL)
	b.WriteString(strings.Join(inner, ""))
	b.WriteString(strings.Join(closing, ""))
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(dx.DType, round(dx.DType, "acc")))
	return b.String(), n, nil
}
