package cuda

import (
	"fmt"
	"slices"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Convolutions on N-d NC(D)HW tensors (ir/ops_nn.go, ir/ops_grad.go): conv (ONNX Conv),
// conv_transpose (ONNX ConvTranspose, which is also conv's input gradient) and
// conv_grad_filter (the weight gradient of both). Each thread computes one result element
// from scratch, with no shared memory or atomics, so every result is deterministic and a
// gather, never a scatter: conv_transpose finds the input positions that reach an output
// position instead of adding each input into the output. The summation orders follow the
// CPU device's kernels/cpu routines (im2col and GEMM, or their direct loops for depthwise
// groups), so the two agree to a few ulps.

func init() {
	generators["conv"] = genConv
	generators["conv_transpose"] = genConvTranspose
	generators["conv_grad_filter"] = genConvGradFilter
}

// convWindow is the geometry of a convolution from the spatial extents in to out (conv's
// own for conv and conv_grad_filter; for conv_transpose that of the conv it is the adjoint
// of, from its result to its operand).
type convWindow struct {
	in, out                  []int
	kernel, stride, dil, pad []int // pad: the begin pads (the end pads only set out)
}

// planes are the element counts of one spatial plane of in and out, and of one kernel.
func (w *convWindow) planes() (in, out, k int64) {
	in, out, k = 1, 1, 1
	for a := range w.in {
		in *= int64(w.in[a])
		out *= int64(w.out[a])
		k *= int64(w.kernel[a])
	}
	return in, out, k
}

// pointwise is kernels/cpu's test for a 1×1, stride-1, unpadded convolution (a plain GEMM).
func (w *convWindow) pointwise() bool {
	for a := range w.in {
		if w.kernel[a] != 1 || w.stride[a] != 1 || w.pad[a] != 0 || w.in[a] != w.out[a] {
			return false
		}
	}
	return true
}

// direct is kernels/cpu's choice of direct loops over GEMM for a convolution with cg input
// and ocg output channels per group (depthwise ones); it changes the order of summation.
func (w *convWindow) direct(cg, ocg int) bool { return cg == 1 && ocg <= 4 && !w.pointwise() }

// convOperands checks what the three ops share: between minIn and maxIn operands, the op's
// attributes (names and kinds; ir.CheckAttrs refuses any other), one float dtype for every
// operand and the result, and operands and result of one rank ≥ 3 but a 1-d bias. It
// returns that dtype's accumulation type.
func convOperands(s *device.Spec, minIn, maxIn int) (string, error) {
	if len(s.In) < minIn || len(s.In) > maxIn {
		return "", fmt.Errorf("%d operands, want %d to %d", len(s.In), minIn, maxIn)
	}
	if _, err := s.Op.CheckAttrs(s.Attrs); err != nil {
		return "", err
	}
	d, x := s.In[0].DType, s.In[0]
	if !d.IsFloat() {
		return "", fmt.Errorf("%s is not a float dtype", d)
	}
	for _, t := range append(append([]ir.Type{}, s.In...), s.Out...) {
		if t.DType != d {
			return "", fmt.Errorf("mixed dtypes %s and %s: the operands and result share one", d, t.DType)
		}
	}
	if x.Rank() < 3 || s.In[1].Rank() != x.Rank() || s.Out[0].Rank() != x.Rank() {
		return "", fmt.Errorf("want operands and result [N, C, D1..] of one rank ≥ 3, got %s, %s → %s", x, s.In[1], s.Out[0])
	}
	return classOf(d).ctype(), nil
}

// convBias checks the optional bias operand (in2) of conv and conv_transpose: [m].
func convBias(s *device.Spec, m int) error {
	if len(s.In) == 3 && !s.In[2].Shape.Equal(ir.Shape{m}) {
		return fmt.Errorf("bias %s must be [%d]", s.In[2], m)
	}
	return nil
}

// offsetOf is the C expression Σ vars[a]·st[a] (a plane offset).
func offsetOf(vars []string, st []int64) string {
	var terms []string
	for a, v := range vars {
		terms = append(terms, fmt.Sprintf("%s * %dLL", v, st[a]))
	}
	return "(" + strings.Join(terms, " + ") + ")"
}

// spatialVars are the names v0, v1, … of k spatial coordinates; coordVars are coords'
// names c2, c3, … of the result's spatial coordinates (c0, c1 are batch and channel).
func spatialVars(v string, k int) []string {
	out := make([]string, k)
	for a := range out {
		out[a] = fmt.Sprintf("%s%d", v, a)
	}
	return out
}

func coordVars(first, k int) []string {
	out := make([]string, k)
	for a := range out {
		out[a] = fmt.Sprintf("c%d", first+a)
	}
	return out
}

// genConv: y[n, m, o…] = (Σ_c Σ_k… x[n, g·cg + c, o·stride + k·dilation − pad_begin] ·
// w[m, c, k…]) + bias[m], g = m / (M/groups), cg = C/groups input channels per group,
// positions outside x left out (the zero padding). Operands x [N, C, D…], w [M, cg, K…]
// [, bias [M]]. One thread per result element sums, in float (double for f64), over the
// channels c and for each over the kernel taps k… in row-major order: the rows of the CPU
// device's im2col matrix in order (its GEMM; its direct depthwise loops take the taps in
// the same order). The bias is added to the finished sum, as the CPU device adds it.
func genConv(s *device.Spec) (string, int64, error) {
	ty, err := convOperands(s, 2, 3)
	if err != nil {
		return "", 0, err
	}
	x, w, out := s.In[0], s.In[1], s.Out[0]
	k := x.Rank() - 2
	wp, err := ir.Window(s.Attrs, k, slices.Clone(w.Shape[2:]))
	if err != nil {
		return "", 0, err
	}
	N, C, M, G := x.Shape[0], x.Shape[1], w.Shape[0], wp.Groups
	if w.Shape[1]*G != C || M%G != 0 {
		return "", 0, fmt.Errorf("weight %s does not match %d input channels in %d groups", w, C, G)
	}
	if err := convBias(s, M); err != nil {
		return "", 0, err
	}
	win := convWindow{in: x.Shape[2:], kernel: wp.Kernel, stride: wp.Strides, dil: wp.Dilations, pad: wp.PadsBegin}
	want := ir.Shape{N, M}
	for a := 0; a < k; a++ {
		o, err := ir.WindowExtent(x.Shape[2+a], wp.Kernel[a], wp.Strides[a], wp.Dilations[a], wp.PadsBegin[a], wp.PadsEnd[a], false)
		if err != nil {
			return "", 0, err
		}
		want = append(want, o)
		win.out = append(win.out, o)
	}
	if !out.Shape.Equal(want) {
		return "", 0, fmt.Errorf("the result is %s, conv computes %v", out, want)
	}
	inSize, _, kSize := win.planes()
	cg, ocg := C/G, M/G
	var b strings.Builder
	coords(&b, out.Shape, "i")
	fmt.Fprintf(&b, "    long long xb = (c0 * %dLL + (c1 / %dLL) * %dLL) * %dLL, wb = c1 * %dLL;\n", C, ocg, cg, inSize, int64(cg)*kSize)
	fmt.Fprintf(&b, "    %s acc = 0;\n", ty)
	fmt.Fprintf(&b, "    for (long long c = 0; c < %dLL; c++) {\n", cg)
	ind := "      "
	o := coordVars(2, k)
	for a := 0; a < k; a++ {
		fmt.Fprintf(&b, "%sfor (long long k%d = 0; k%d < %dLL; k%d++) {\n", ind, a, a, wp.Kernel[a], a)
		ind += "  "
		fmt.Fprintf(&b, "%slong long p%d = %s * %dLL + k%d * %dLL - %dLL;\n", ind, a, o[a], wp.Strides[a], a, wp.Dilations[a], wp.PadsBegin[a])
		fmt.Fprintf(&b, "%sif (p%d < 0 || p%d >= %dLL) continue;\n", ind, a, a, win.in[a])
	}
	xv := load(x.DType, "in0", fmt.Sprintf("xb + c * %dLL + %s", inSize, offsetOf(spatialVars("p", k), strides(ir.Shape(win.in)))))
	wv := load(w.DType, "in1", fmt.Sprintf("wb + c * %dLL + %s", kSize, offsetOf(spatialVars("k", k), strides(ir.Shape(wp.Kernel)))))
	fmt.Fprintf(&b, "%sacc += %s * %s;\n", ind, wv, xv)
	return convFinish(&b, ind, s)
}

// genConvTranspose: y[n, m, p…] = (Σ x[n, c, i…] · w[c, m', k…]) + bias[m] over the input
// channels c of group g = m / (M/groups), m' = m mod M/groups, and the taps k… and input
// positions i… with i·stride + k·dilation − pad_begin = p (each tap reaches p from at most
// one i). Operands x [N, C, D…], w [C, M/groups, K…] [, bias [M]]; result extents
// stride·(D−1) + output_padding + dilation·(K−1) + 1 − pad_begin − pad_end. One thread
// per result element gathers what the CPU device scatters (the data gradient of the conv
// from y's shape to x's, kernels/cpu convBackwardData), in its order: for each tap in
// row-major order the sum over the channels (a GEMM entry of Wᵀ·x), added to the total —
// or, where that conv runs direct depthwise loops, channel by channel and tap by tap into
// one sum. Then the bias, as the CPU device adds it last.
func genConvTranspose(s *device.Spec) (string, int64, error) {
	ty, err := convOperands(s, 2, 3)
	if err != nil {
		return "", 0, err
	}
	x, w, out := s.In[0], s.In[1], s.Out[0]
	k := x.Rank() - 2
	wp, err := ir.Window(s.Attrs, k, slices.Clone(w.Shape[2:]))
	if err != nil {
		return "", 0, err
	}
	N, C, G := x.Shape[0], x.Shape[1], wp.Groups
	mg := w.Shape[1]
	M := mg * G
	if w.Shape[0] != C || C%G != 0 {
		return "", 0, fmt.Errorf("weight %s does not match %d input channels in %d groups", w, C, G)
	}
	if err := convBias(s, M); err != nil {
		return "", 0, err
	}
	// The associated conv maps y's extents (its input) to x's (its output).
	win := convWindow{out: x.Shape[2:], kernel: wp.Kernel, stride: wp.Strides, dil: wp.Dilations, pad: wp.PadsBegin}
	want := ir.Shape{N, M}
	for a := 0; a < k; a++ {
		e := wp.Strides[a]*(x.Shape[2+a]-1) + wp.OutputPadding[a] + wp.Dilations[a]*(wp.Kernel[a]-1) + 1 - wp.PadsBegin[a] - wp.PadsEnd[a]
		if e < 1 {
			return "", 0, fmt.Errorf("spatial dim %d of the result would be %d (pads too large)", a, e)
		}
		want = append(want, e)
		win.in = append(win.in, e)
	}
	if !out.Shape.Equal(want) {
		return "", 0, fmt.Errorf("the result is %s, conv_transpose computes %v", out, want)
	}
	_, xSize, kSize := win.planes()
	cgx := C / G // x's channels per group: the associated conv's output channels per group
	direct := win.direct(mg, cgx)
	var b strings.Builder
	coords(&b, out.Shape, "i")
	fmt.Fprintf(&b, "    long long g = c1 / %dLL, mm = c1 %% %dLL;\n", mg, mg)
	fmt.Fprintf(&b, "    long long xb = (c0 * %dLL + g * %dLL) * %dLL, wb = (g * %dLL * %dLL + mm) * %dLL;\n", C, cgx, xSize, cgx, mg, kSize)
	fmt.Fprintf(&b, "    %s acc = 0;\n", ty)
	ind := "    "
	if direct {
		fmt.Fprintf(&b, "    for (long long c = 0; c < %dLL; c++) {\n", cgx)
		ind += "  "
	}
	p := coordVars(2, k)
	for a := 0; a < k; a++ {
		fmt.Fprintf(&b, "%sfor (long long k%d = 0; k%d < %dLL; k%d++) {\n", ind, a, a, wp.Kernel[a], a)
		ind += "  "
		fmt.Fprintf(&b, "%slong long t%d = %s + %dLL - k%d * %dLL;\n", ind, a, p[a], wp.PadsBegin[a], a, wp.Dilations[a])
		if st := wp.Strides[a]; st == 1 {
			fmt.Fprintf(&b, "%sif (t%d < 0 || t%d >= %dLL) continue;\n%slong long q%d = t%d;\n", ind, a, a, x.Shape[2+a], ind, a, a)
		} else {
			fmt.Fprintf(&b, "%sif (t%d < 0 || t%d %% %dLL != 0) continue;\n", ind, a, a, st)
			fmt.Fprintf(&b, "%slong long q%d = t%d / %dLL;\n%sif (q%d >= %dLL) continue;\n", ind, a, a, st, ind, a, x.Shape[2+a])
		}
	}
	xv := load(x.DType, "in0", fmt.Sprintf("xb + c * %dLL + %s", xSize, offsetOf(spatialVars("q", k), strides(x.Shape[2:]))))
	wv := load(w.DType, "in1", fmt.Sprintf("wb + c * %dLL + %s", int64(mg)*kSize, offsetOf(spatialVars("k", k), strides(ir.Shape(wp.Kernel)))))
	if direct {
		fmt.Fprintf(&b, "%sacc += %s * %s;\n", ind, wv, xv)
	} else {
		fmt.Fprintf(&b, "%s%s part = 0;\n", ind, ty)
		fmt.Fprintf(&b, "%sfor (long long c = 0; c < %dLL; c++) part += %s * %s;\n", ind, cgx, wv, xv)
		fmt.Fprintf(&b, "%sacc += part;\n", ind)
	}
	return convFinish(&b, ind, s)
}

// genConvGradFilter: dw[m, c, k…] = Σ_n Σ_o… dy[n, m, o…] · x[n, g·cg + c, o·stride +
// k·dilation − pad_begin], g = m / (M/groups), over the output positions o… whose input
// position lies inside x. Operands x [N, C, D…] and dy [N, M, O…] (conv's result shape),
// filter_shape the result's [M, cg, K…]; for conv_transpose's weight gradient the operands
// are its dy and x. One thread per weight element; the valid range of each o is computed
// up front rather than tested. Summation order, the CPU device's: each image's sum over o…
// in row-major order (a GEMM entry) added to the total in image order — or, where
// kernels/cpu runs direct depthwise loops, each output line's sum (the last spatial axis)
// added to the total in line then image order.
func genConvGradFilter(s *device.Spec) (string, int64, error) {
	ty, err := convOperands(s, 2, 2)
	if err != nil {
		return "", 0, err
	}
	x, dy, dw := s.In[0], s.In[1], s.Out[0]
	if fs := s.Attrs.Ints("filter_shape"); !dw.Shape.Equal(fs) {
		return "", 0, fmt.Errorf("the result is %s, filter_shape %v", dw, fs)
	}
	k := x.Rank() - 2
	wp, err := ir.Window(s.Attrs, k, slices.Clone(dw.Shape[2:]))
	if err != nil {
		return "", 0, err
	}
	N, C, M, G := x.Shape[0], x.Shape[1], dw.Shape[0], wp.Groups
	if dw.Shape[1]*G != C || M%G != 0 {
		return "", 0, fmt.Errorf("filter %s does not match %d input channels in %d groups", dw, C, G)
	}
	win := convWindow{in: x.Shape[2:], kernel: wp.Kernel, stride: wp.Strides, dil: wp.Dilations, pad: wp.PadsBegin}
	want := ir.Shape{N, M}
	for a := 0; a < k; a++ {
		o, err := ir.WindowExtent(x.Shape[2+a], wp.Kernel[a], wp.Strides[a], wp.Dilations[a], wp.PadsBegin[a], wp.PadsEnd[a], false)
		if err != nil {
			return "", 0, err
		}
		want = append(want, o)
		win.out = append(win.out, o)
	}
	if !dy.Shape.Equal(want) {
		return "", 0, fmt.Errorf("dy %s does not match the conv's result %v", dy, want)
	}
	inSize, outSize, _ := win.planes()
	cg, ocg := C/G, M/G
	direct := win.direct(cg, ocg)
	var b strings.Builder
	coords(&b, dw.Shape, "i")
	fmt.Fprintf(&b, "    long long xb = ((c0 / %dLL) * %dLL + c1) * %dLL, yb = c0 * %dLL;\n", ocg, cg, inSize, outSize)
	// o ranges over [lo, hi): o·stride ≥ pad_begin − k·dilation and o·stride ≤ D − 1 +
	// pad_begin − k·dilation.
	kv := coordVars(2, k)
	for a := 0; a < k; a++ {
		st := wp.Strides[a]
		fmt.Fprintf(&b, "    long long lo%d = %dLL - %s * %dLL, hi%d = %dLL - %s * %dLL;\n", a, wp.PadsBegin[a], kv[a], wp.Dilations[a], a, win.in[a]-1+wp.PadsBegin[a], kv[a], wp.Dilations[a])
		fmt.Fprintf(&b, "    lo%d = lo%d > 0 ? (lo%d + %dLL) / %dLL : 0;\n", a, a, a, st-1, st)
		fmt.Fprintf(&b, "    hi%d = hi%d < 0 ? 0 : hi%d / %dLL + 1; if (hi%d > %dLL) hi%d = %dLL;\n", a, a, a, st, a, win.out[a], a, win.out[a])
	}
	fmt.Fprintf(&b, "    %s acc = 0;\n", ty)
	fmt.Fprintf(&b, "    for (long long img = 0; img < %dLL; img++) {\n", N)
	ind := "      "
	if !direct {
		fmt.Fprintf(&b, "%s%s part = 0;\n", ind, ty)
	}
	for a := 0; a < k; a++ {
		if direct && a == k-1 {
			fmt.Fprintf(&b, "%s%s part = 0;\n", ind, ty)
		}
		fmt.Fprintf(&b, "%sfor (long long o%d = lo%d; o%d < hi%d; o%d++) {\n", ind, a, a, a, a, a)
		ind += "  "
		fmt.Fprintf(&b, "%slong long p%d = o%d * %dLL + %s * %dLL - %dLL;\n", ind, a, a, wp.Strides[a], kv[a], wp.Dilations[a], wp.PadsBegin[a])
	}
	dyv := load(dy.DType, "in1", fmt.Sprintf("img * %dLL + yb + %s", int64(M)*outSize, offsetOf(spatialVars("o", k), strides(ir.Shape(win.out)))))
	xv := load(x.DType, "in0", fmt.Sprintf("img * %dLL + xb + %s", int64(C)*inSize, offsetOf(spatialVars("p", k), strides(ir.Shape(win.in)))))
	fmt.Fprintf(&b, "%spart += %s * %s;\n", ind, dyv, xv)
	for a := k - 1; a >= 0; a-- {
		ind = ind[:len(ind)-2]
		fmt.Fprintf(&b, "%s}\n", ind)
		if direct && a == k-1 {
			fmt.Fprintf(&b, "%sacc += part;\n", ind)
		}
	}
	if !direct {
		fmt.Fprintf(&b, "%sacc += part;\n", ind)
	}
	b.WriteString("    }\n")
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(dw.DType, round(dw.DType, "acc")))
	return b.String(), int64(dw.NumElements()), nil
}

// convFinish closes the loops a conv kernel opened (ind is the innermost indentation),
// adds the bias operand (the third, per channel c1) last, as the CPU device does, and stores
// the result.
func convFinish(b *strings.Builder, ind string, s *device.Spec) (string, int64, error) {
	out := s.Out[0]
	for len(ind) > 4 {
		ind = ind[:len(ind)-2]
		fmt.Fprintf(b, "%s}\n", ind)
	}
	y := "acc"
	if len(s.In) == 3 {
		y = "acc + " + load(s.In[2].DType, "in2", "c1")
	}
	fmt.Fprintf(b, "    out[i] = %s;\n", store(out.DType, round(out.DType, y)))
	return b.String(), int64(out.NumElements()), nil
}
