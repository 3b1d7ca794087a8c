package cuda

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Kernels for the remaining ops of the CPU device's core set: arg_max and arg_min, the MSE
// loss and its gradient, pad and its gradient, the gradients of the max/min/prod reductions,
// and slice's gradient.

func init() {
	generators["arg_max"] = genArg(false)
	generators["arg_min"] = genArg(true)
	generators["mse"] = genMSE
	generators["mse_grad"] = genMSEGrad
	generators["pad"] = genPad
	generators["pad_grad"] = genPadGrad
	generators["reduce_max_grad"] = genReduceMaxGrad
	generators["reduce_min_grad"] = genReduceMaxGrad // the same rule: dy to the first x equal to y
	generators["reduce_prod_grad"] = genReduceProdGrad
	generators["slice_grad"] = genSliceGrad
}

// genArg: the index along axis of the largest (smallest) element, the first of equals unless
// select_last_index; a NaN wins and stays (the CPU device's argBetter). One thread per output.
func genArg(isMin bool) generator {
	return func(s *device.Spec) (string, int64, error) {
		x, out := s.In[0], s.Out[0]
		if out.DType != ir.I64 || x.DType == ir.Bool {
			return "", 0, fmt.Errorf("want an i64 result of a numeric operand, got %s → %s", x, out)
		}
		axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), x.Rank())
		if err != nil {
			return "", 0, err
		}
		outer, n, inner := int64(1), int64(x.Shape[axis]), int64(1)
		for d, v := range x.Shape {
			if d < axis {
				outer *= int64(v)
			} else if d > axis {
				inner *= int64(v)
			}
		}
		if n == 0 {
			return "", 0, fmt.Errorf("over the empty dim %d of %s", axis, x)
		}
		ty := classOf(x.DType).ctype()
		last := "0"
		if s.Attrs.Bool("select_last_index", false) {
			last = "1"
		}
		cmp := ">"
		if isMin {
			cmp = "<"
		}
		v := load(x.DType, "in0", fmt.Sprintf("base + j * %dLL", inner))
		var b strings.Builder
		fmt.Fprintf(&b, "    long long base = (i / %dLL) * %dLL + i %% %dLL, best = 0;\n", inner, n*inner, inner)
		fmt.Fprintf(&b, "    %s m = %s;\n", ty, load(x.DType, "in0", "base"))
		fmt.Fprintf(&b, "    for (long long j = 1; j < %dLL; j++) {\n      %s v = %s;\n", n, ty, v)
		fmt.Fprintf(&b, "      bool better = m != m ? (%s && v != v) : (v != v || v %s m || (%s && v == m));\n", last, cmp, last)
		b.WriteString("      if (better) { m = v; best = j; }\n    }\n    out[i] = best;\n")
		return b.String(), outer * inner, nil
	}
}

// lossOperands checks a loss's (or its gradient's) float operands and reduction attribute,
// and returns the accumulation class and the reduction.
func lossOperands(s *device.Spec) (class, string, error) {
	ct, err := floatIO(s)
	if err != nil {
		return 0, "", err
	}
	r := s.Attrs.Str("reduction", "mean")
	if r != "mean" && r != "sum" && r != "none" {
		return 0, "", fmt.Errorf("reduction %s", r)
	}
	return ct, r, nil
}

// genMSE: (x − y)² per element in the dtype, then the reduction summed in element order in
// double (mean divides by the element count), as the CPU device does.
func genMSE(s *device.Spec) (string, int64, error) {
	ct, red, err := lossOperands(s)
	if err != nil {
		return "", 0, err
	}
	if !s.In[0].Equal(s.In[1]) {
		return "", 0, fmt.Errorf("operands %s and %s differ", s.In[0], s.In[1])
	}
	ty, x, out := ct.ctype(), s.In[0], s.Out[0]
	n := int64(x.NumElements())
	sq := func(k string) string {
		return fmt.Sprintf("%s d = (%s)(%s - %s); %s l = d * d;", ty, ty, load(x.DType, "in0", k), load(x.DType, "in1", k), ty)
	}
	var b strings.Builder
	if red == "none" {
		fmt.Fprintf(&b, "    %s\n    out[i] = %s;\n", sq("i"), store(out.DType, round(out.DType, "l")))
		return b.String(), n, nil
	}
	fmt.Fprintf(&b, "    double total = 0;\n    for (long long k = 0; k < %dLL; k++) { %s total += (double)l; }\n", n, sq("k"))
	if red == "mean" {
		fmt.Fprintf(&b, "    total /= (double)%dLL;\n", max(n, 1))
	}
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, fmt.Sprintf("(%s)total", ty))))
	return b.String(), 1, nil
}

// genMSEGrad: dx = 2·g·(x − y), g = dloss per element (none), dloss (sum) or dloss / n
// (mean, divided in double), multiplied in the CPU device's order.
func genMSEGrad(s *device.Spec) (string, int64, error) {
	ct, red, err := lossOperands(s)
	if err != nil {
		return "", 0, err
	}
	x, out := s.In[0], s.Out[0]
	if len(s.In) != 3 || !s.In[1].Equal(x) {
		return "", 0, fmt.Errorf("want operands x, y and dloss")
	}
	ty := ct.ctype()
	n := int64(x.NumElements())
	diff := fmt.Sprintf("(%s - %s)", load(x.DType, "in0", "i"), load(x.DType, "in1", "i"))
	var b strings.Builder
	switch red {
	case "none":
		fmt.Fprintf(&b, "    %s v = 2 * %s * %s;\n", ty, load(s.In[2].DType, "in2", "i"), diff)
	case "sum":
		fmt.Fprintf(&b, "    %s g = 2 * %s;\n    %s v = g * %s;\n", ty, load(s.In[2].DType, "in2", "0"), ty, diff)
	default:
		fmt.Fprintf(&b, "    %s g = 2 * (%s)((double)%s / (double)%dLL);\n    %s v = g * %s;\n", ty, ty, load(s.In[2].DType, "in2", "0"), max(n, 1), ty, diff)
	}
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "v")))
	return b.String(), n, nil
}

// cFloat is v as a C double literal.
func cFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "PPC_NAN"
	case math.IsInf(v, 1):
		return "PPC_INF"
	case math.IsInf(v, -1):
		return "(-PPC_INF)"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// padModes are pad's modes, as the CPU device (kernels/cpu layoutPadIndex) maps an output
// position o of a dim (begin pad b, input size d) to an input position (−1: the constant).
var padModes = map[string]string{
	"constant": "(o - %[1]d >= 0 && o - %[1]d < %[2]d) ? o - %[1]d : -1",
	"edge":     "ppc_clampi(o - %[1]d, 0, %[2]d - 1)",
	"wrap":     "ppc_wrapi(o - %[1]d, %[2]d)",
	"reflect":  "ppc_reflecti(o - %[1]d, %[2]d)",
}

// padIndex is the C expression of input position of output position o along a dim.
func padIndex(mode string, b, d int) string {
	return strings.ReplaceAll(fmt.Sprintf(padModes[mode], b, d), "o - 0", "o")
}

// padAttrs checks pad's attributes for an operand of shape x.
func padAttrs(s *device.Spec, x ir.Type) (pads []int, mode string, err error) {
	pads = s.Attrs.Ints("pads")
	mode = s.Attrs.Str("mode", "constant")
	if _, ok := padModes[mode]; !ok || len(pads) != 2*x.Rank() {
		return nil, "", fmt.Errorf("pads %v, mode %s for %s", pads, mode, x)
	}
	for d, n := range x.Shape {
		b, e := pads[d], pads[x.Rank()+d]
		if mode == "reflect" && (b >= n || e >= n) && (b > 0 || e > 0) || mode != "constant" && n == 0 && (b > 0 || e > 0) {
			return nil, "", fmt.Errorf("%s pads %v do not fit dim %d of %s", mode, pads, d, x)
		}
	}
	return pads, mode, nil
}

// genPad: each output element reads its input position per dim, or the value attribute
// (rounded to the dtype, as the CPU device's elementwise engine rounds it).
func genPad(s *device.Spec) (string, int64, error) {
	x, out := s.In[0], s.Out[0]
	pads, mode, err := padAttrs(s, x)
	if err != nil {
		return "", 0, err
	}
	if x.DType != out.DType {
		return "", 0, fmt.Errorf("pad changes the dtype %s to %s", x.DType, out.DType)
	}
	st := strides(x.Shape)
	var b strings.Builder
	coords(&b, out.Shape, "i")
	b.WriteString("    long long off = 0, o, q;\n")
	for d := range x.Shape {
		fmt.Fprintf(&b, "    o = c%d; q = %s; if (q < 0) goto fill; off += q * %dLL;\n", d, padIndex(mode, pads[d], x.Shape[d]), st[d])
	}
	b.WriteString(move("off") + "    continue;\n  fill:\n")
	value := s.Attrs.Float("value", 0)
	fill := fmt.Sprintf("(%s)%s", classOf(out.DType).ctype(), cFloat(value))
	if out.DType == ir.Bool { // nonzero is true, as the elementwise engine's cast
		fill = map[bool]string{true: "1", false: "0"}[value != 0]
	}
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, fill)))
	return b.String(), int64(out.NumElements()), nil
}

// genPadGrad: the adjoint of pad, dim by dim as the CPU device does it: each dx element sums
// the dy positions its coordinates were read into, the first dim innermost, each dim's sum in
// increasing position and rounded to the dtype before the next dim adds it.
func genPadGrad(s *device.Spec) (string, int64, error) {
	ct, err := floatIO(s)
	if err != nil {
		return "", 0, err
	}
	dy, dx := s.In[0], s.Out[0]
	pads, mode, err := padAttrs(s, dx)
	if err != nil {
		return "", 0, err
	}
	if dy.Rank() != dx.Rank() {
		return "", 0, fmt.Errorf("dy %s is not a pad of %s", dy, dx)
	}
	ty := ct.ctype()
	st := strides(dy.Shape)
	var b strings.Builder
	coords(&b, dx.Shape, "i")
	r := dx.Rank()
	// Loops from the last dim (outermost) to the first (innermost); a dim without padding
	// is the identity (its position is the coordinate itself).
	for d := r - 1; d >= 0; d-- {
		fmt.Fprintf(&b, "    %s s%d = 0;\n", ty, d)
		if pads[d] == 0 && pads[r+d] == 0 {
			fmt.Fprintf(&b, "    { long long j%d = c%d;\n", d, d)
			continue
		}
		fmt.Fprintf(&b, "    for (long long j%d = 0; j%d < %dLL; j%d++) { long long o = j%d; if ((%s) != c%d) continue;\n", d, d, dy.Shape[d], d, d, padIndex(mode, pads[d], dx.Shape[d]), d)
	}
	terms := []string{"0LL"}
	for d := range dy.Shape {
		terms = append(terms, fmt.Sprintf("j%d * %dLL", d, st[d]))
	}
	fmt.Fprintf(&b, "    s0 += %s;\n", load(dy.DType, "in0", strings.Join(terms, " + ")))
	for d := 0; d < r; d++ {
		b.WriteString("    }\n")
		if d+1 < r {
			fmt.Fprintf(&b, "    s%d += s%d;\n", d+1, d)
		}
	}
	acc := "s0"
	if r > 0 {
		acc = fmt.Sprintf("s%d", r-1)
	} else {
		return "", 0, fmt.Errorf("pad_grad of a scalar")
	}
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(dx.DType, round(dx.DType, acc)))
	return b.String(), int64(dx.NumElements()), nil
}

// gradGroup writes, for element i of x (reduced over the axes red), its group's base and its
// own position me in the group, and returns the group size and the offset writer.
func gradGroup(b *strings.Builder, x ir.Type, red []bool) (int64, func(*strings.Builder, string, string)) {
	// The kept coordinates index the group (reduceGroup's output index); the reduced ones,
	// row-major, are the position in it.
	var keptShape ir.Shape
	fmt.Fprintf(b, "    long long me = 0, kept = 0;\n    {\n")
	coords(b, x.Shape, "i")
	for d, r := range red {
		if r {
			fmt.Fprintf(b, "      me = me * %dLL + c%d;\n", x.Shape[d], d)
		} else {
			fmt.Fprintf(b, "      kept = kept * %dLL + c%d;\n", x.Shape[d], d)
			keptShape = append(keptShape, x.Shape[d])
		}
	}
	b.WriteString("    }\n")
	return reduceGroup(b, x, red, "kept")
}

// genReduceMaxGrad: operands x, y (the reduction), dy; dx gets dy at the first element of its
// group (row-major) equal to y, 0 elsewhere — the CPU device's rule for max and min.
func genReduceMaxGrad(s *device.Spec) (string, int64, error) {
	ct, err := floatIO(s)
	if err != nil {
		return "", 0, err
	}
	x := s.In[0]
	red, err := ir.ReduceAxes(s.Attrs, x.Rank())
	if err != nil || len(s.In) != 3 || !s.Out[0].Equal(x) {
		return "", 0, fmt.Errorf("want operands x, y and dy for a result of x's type (%v)", err)
	}
	ty := ct.ctype()
	var b strings.Builder
	count, offset := gradGroup(&b, x, red)
	fmt.Fprintf(&b, "    %s m = %s, g = %s;\n    long long first = -1;\n", ty, load(s.In[1].DType, "in1", "kept"), load(s.In[2].DType, "in2", "kept"))
	fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL && first < 0; j++) {\n", count)
	offset(&b, "j", "      ")
	fmt.Fprintf(&b, "      if (%s == m) first = j;\n    }\n", load(x.DType, "in0", "off"))
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(s.Out[0].DType, round(s.Out[0].DType, fmt.Sprintf("first == me ? g : (%s)0", ty))))
	return b.String(), int64(x.NumElements()), nil
}

// genReduceProdGrad: operands x, dy; dx = dy·Π of the group's other elements, the products
// before and after the element taken in double in the group's order (the CPU device's prefix
// and suffix products).
func genReduceProdGrad(s *device.Spec) (string, int64, error) {
	if _, err := floatIO(s); err != nil {
		return "", 0, err
	}
	x := s.In[0]
	red, err := ir.ReduceAxes(s.Attrs, x.Rank())
	if err != nil || len(s.In) != 2 || !s.Out[0].Equal(x) {
		return "", 0, fmt.Errorf("want operands x and dy for a result of x's type (%v)", err)
	}
	var b strings.Builder
	count, offset := gradGroup(&b, x, red)
	b.WriteString("    double pre = 1, suf = 1;\n")
	fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) {\n", count)
	offset(&b, "j", "      ")
	fmt.Fprintf(&b, "      double v = (double)%s;\n      if (j < me) pre *= v;\n    }\n", load(x.DType, "in0", "off"))
	fmt.Fprintf(&b, "    for (long long j = %dLL - 1; j > me; j--) {\n", count)
	offset(&b, "j", "      ")
	fmt.Fprintf(&b, "      suf *= (double)%s;\n    }\n", load(x.DType, "in0", "off"))
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(s.Out[0].DType, round(s.Out[0].DType, fmt.Sprintf("(double)%s * pre * suf", load(s.In[1].DType, "in1", "kept")))))
	return b.String(), int64(x.NumElements()), nil
}

// genSliceGrad: dx is zero but where the slice read: dx[start + c·step] = dy[c].
func genSliceGrad(s *device.Spec) (string, int64, error) {
	if _, err := floatIO(s); err != nil {
		return "", 0, err
	}
	dy, dx := s.In[0], s.Out[0]
	dims, err := ir.SliceDims(s.Attrs, dx.Shape)
	if err != nil {
		return "", 0, err
	}
	if len(dims) != dx.Rank() || dy.Rank() != dx.Rank() {
		return "", 0, fmt.Errorf("dy %s is not a slice of %s", dy, dx)
	}
	st := strides(dy.Shape)
	var b strings.Builder
	coords(&b, dx.Shape, "i")
	b.WriteString("    long long q = 0, t;\n")
	for d, sd := range dims {
		if sd.Size != dy.Shape[d] {
			return "", 0, fmt.Errorf("dy %s does not match the slice of %s", dy, dx)
		}
		fmt.Fprintf(&b, "    t = c%d - %dLL; if (t %% %dLL != 0 || t / %dLL < 0 || t / %dLL >= %dLL) { out[i] = %s; continue; } q += (t / %dLL) * %dLL;\n",
			d, sd.Start, sd.Step, sd.Step, sd.Step, sd.Size, store(dx.DType, "0"), sd.Step, st[d])
	}
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(dx.DType, round(dx.DType, load(dy.DType, "in0", "q"))))
	return b.String(), int64(dx.NumElements()), nil
}
