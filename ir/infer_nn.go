package ir

import (
	"fmt"
	"math"
	"slices"
)

// Shape inference for nnOps (ops_nn.go). Like infer.go, every function returns an error for
// any bad input and never panics; sizes are checked against maxElements so that hostile
// attributes cannot produce overflowing shapes.

// CheckShapeSize reports whether a shape's dims are non-negative and its element count stays
// within the bound the parser uses (2^50), without overflowing.
func CheckShapeSize(s Shape) error {
	n := 1
	for _, d := range s {
		if d < 0 {
			return fmt.Errorf("negative dim in shape %s", s)
		}
		if d > maxElements {
			return fmt.Errorf("shape %s is too large", s)
		}
		if d != 0 && n > maxElements/d {
			return fmt.Errorf("shape %s is too large", s)
		}
		n *= d
	}
	return nil
}

// WindowExtent is the output extent of a window op (conv, max_pool, avg_pool) along one spatial
// dim of size d with kernel k, stride s, dilation dil and pads pb, pe; see the table comment in
// ops_nn.go for the ceil_mode rule.
func WindowExtent(d, k, s, dil, pb, pe int, ceilMode bool) (int, error) {
	const lim = 1 << 40
	if k < 1 || s < 1 || dil < 1 || k > lim || s > lim || dil > lim || d > lim || pb > lim || pe > lim || pb < -lim || pe < -lim {
		return 0, fmt.Errorf("bad window: size %d, kernel %d, stride %d, dilation %d, pads %d,%d", d, k, s, dil, pb, pe)
	}
	span := (k-1)*dil + 1
	avail := d + pb + pe - span
	if avail < 0 {
		return 0, fmt.Errorf("window of extent %d (kernel %d, dilation %d) does not fit the padded size %d", span, k, dil, d+pb+pe)
	}
	out := avail/s + 1
	if ceilMode {
		out = (avail+s-1)/s + 1
		if (out-1)*s >= d+pb {
			out--
		}
	}
	return out, nil
}

// intsOr returns the attribute's ints, or n copies of def when absent; it fails when present
// with a length other than n.
func intsOr(at Attrs, name string, n, def int) ([]int, error) {
	if !at.Has(name) {
		out := make([]int, n)
		for i := range out {
			out[i] = def
		}
		return out, nil
	}
	v := at.Ints(name)
	if len(v) != n {
		return nil, fmt.Errorf("%s %v needs %d entries", name, v, n)
	}
	return v, nil
}

// WindowParams are a window op's normalised attributes for k spatial dims.
type WindowParams struct {
	Kernel, Strides, Dilations, PadsBegin, PadsEnd, OutputPadding []int
	Groups                                                        int
	CeilMode                                                      bool
}

// Window normalises the window attributes of conv, conv_transpose, max_pool or avg_pool for
// k spatial dims (kernel is taken from the attributes when kernel is nil).
func Window(at Attrs, k int, kernel []int) (*WindowParams, error) {
	var err error
	p := &WindowParams{Kernel: kernel, Groups: at.Int("groups", 1), CeilMode: at.Bool("ceil_mode", false)}
	if p.Kernel == nil {
		if p.Kernel, err = intsOr(at, "kernel", k, 1); err != nil {
			return nil, err
		}
	}
	if p.Strides, err = intsOr(at, "strides", k, 1); err != nil {
		return nil, err
	}
	if p.Dilations, err = intsOr(at, "dilations", k, 1); err != nil {
		return nil, err
	}
	if p.OutputPadding, err = intsOr(at, "output_padding", k, 0); err != nil {
		return nil, err
	}
	pads, err := intsOr(at, "pads", 2*k, 0)
	if err != nil {
		return nil, err
	}
	p.PadsBegin, p.PadsEnd = pads[:k], pads[k:]
	for i := 0; i < k; i++ {
		if p.Strides[i] < 1 || p.Dilations[i] < 1 || p.Kernel[i] < 1 {
			return nil, fmt.Errorf("kernel %v, strides %v and dilations %v must be positive", p.Kernel, p.Strides, p.Dilations)
		}
		if p.PadsBegin[i] < 0 || p.PadsEnd[i] < 0 {
			return nil, fmt.Errorf("negative pads %v", pads)
		}
	}
	if p.Groups < 1 {
		return nil, fmt.Errorf("groups must be positive, got %d", p.Groups)
	}
	return p, nil
}

func spatial(x Type, what string) (int, error) {
	if x.Rank() < 3 {
		return 0, fmt.Errorf("%s operand must be [N, C, D1, ...] with at least one spatial dim, got %s", what, x)
	}
	return x.Rank() - 2, nil
}

func inferConv(in []Type, at Attrs) ([]Type, error) {
	x, w := in[0], in[1]
	if err := sameDType(in); err != nil {
		return nil, err
	}
	if !x.DType.IsFloat() {
		return nil, fmt.Errorf("conv operands must be floating point, got %s", x)
	}
	k, err := spatial(x, "conv input")
	if err != nil {
		return nil, err
	}
	if w.Rank() != x.Rank() {
		return nil, fmt.Errorf("conv weight %s must have rank %d like the input %s", w, x.Rank(), x)
	}
	p, err := Window(at, k, w.Shape[2:])
	if err != nil {
		return nil, err
	}
	if x.Shape[1] != w.Shape[1]*p.Groups {
		return nil, fmt.Errorf("conv input channels %d do not match weight %s with %d groups", x.Shape[1], w.Shape, p.Groups)
	}
	if w.Shape[0]%p.Groups != 0 {
		return nil, fmt.Errorf("conv output channels %d are not divisible by %d groups", w.Shape[0], p.Groups)
	}
	if len(in) == 3 && !in[2].Shape.Equal(Shape{w.Shape[0]}) {
		return nil, fmt.Errorf("conv bias %s must be [%d]", in[2], w.Shape[0])
	}
	out := Shape{x.Shape[0], w.Shape[0]}
	for i := 0; i < k; i++ {
		o, err := WindowExtent(x.Shape[2+i], p.Kernel[i], p.Strides[i], p.Dilations[i], p.PadsBegin[i], p.PadsEnd[i], false)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return one(Type{x.DType, out})
}

func inferConvTranspose(in []Type, at Attrs) ([]Type, error) {
	x, w := in[0], in[1]
	if err := sameDType(in); err != nil {
		return nil, err
	}
	if !x.DType.IsFloat() {
		return nil, fmt.Errorf("conv_transpose operands must be floating point, got %s", x)
	}
	k, err := spatial(x, "conv_transpose input")
	if err != nil {
		return nil, err
	}
	if w.Rank() != x.Rank() {
		return nil, fmt.Errorf("conv_transpose weight %s must have rank %d like the input %s", w, x.Rank(), x)
	}
	p, err := Window(at, k, w.Shape[2:])
	if err != nil {
		return nil, err
	}
	if x.Shape[1] != w.Shape[0] || w.Shape[0]%p.Groups != 0 {
		return nil, fmt.Errorf("conv_transpose input channels %d do not match weight %s with %d groups", x.Shape[1], w.Shape, p.Groups)
	}
	m := w.Shape[1] * p.Groups
	if len(in) == 3 && !in[2].Shape.Equal(Shape{m}) {
		return nil, fmt.Errorf("conv_transpose bias %s must be [%d]", in[2], m)
	}
	out := Shape{x.Shape[0], m}
	const lim = 1 << 40
	for i := 0; i < k; i++ {
		d, op := x.Shape[2+i], p.OutputPadding[i]
		if d < 1 || d > lim || op < 0 || op > lim || p.Strides[i] > lim || p.Dilations[i] > lim || p.Kernel[i] > lim || p.PadsBegin[i] > lim || p.PadsEnd[i] > lim {
			return nil, fmt.Errorf("bad conv_transpose geometry for dim %d", 2+i)
		}
		o := p.Strides[i]*(d-1) + op + (p.Kernel[i]-1)*p.Dilations[i] + 1 - p.PadsBegin[i] - p.PadsEnd[i]
		if o < 1 {
			return nil, fmt.Errorf("conv_transpose output dim %d would be %d", 2+i, o)
		}
		out = append(out, o)
	}
	if err := CheckShapeSize(out); err != nil {
		return nil, err
	}
	return one(Type{x.DType, out})
}

func inferPool(in []Type, at Attrs) ([]Type, error) {
	x := in[0]
	if x.DType == Bool {
		return nil, fmt.Errorf("pooling of bool operand")
	}
	k, err := spatial(x, "pooling input")
	if err != nil {
		return nil, err
	}
	if len(at.Ints("kernel")) != k {
		return nil, fmt.Errorf("kernel %v needs %d entries for input %s", at.Ints("kernel"), k, x)
	}
	p, err := Window(at, k, nil)
	if err != nil {
		return nil, err
	}
	out := Shape{x.Shape[0], x.Shape[1]}
	for i := 0; i < k; i++ {
		if p.PadsBegin[i] >= p.Kernel[i] || p.PadsEnd[i] >= p.Kernel[i] {
			return nil, fmt.Errorf("pads %v must be smaller than the kernel %v", append(slices.Clone(p.PadsBegin), p.PadsEnd...), p.Kernel)
		}
		o, err := WindowExtent(x.Shape[2+i], p.Kernel[i], p.Strides[i], p.Dilations[i], p.PadsBegin[i], p.PadsEnd[i], p.CeilMode)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return one(Type{x.DType, out})
}

func channelParams(in []Type, what string) error {
	x := in[0]
	if !x.DType.IsFloat() {
		return fmt.Errorf("%s operand must be floating point, got %s", what, x)
	}
	if x.Rank() < 2 {
		return fmt.Errorf("%s operand must be [N, C, ...], got %s", what, x)
	}
	for _, p := range in[1:] {
		if p.DType != x.DType || !p.Shape.Equal(Shape{x.Shape[1]}) {
			return fmt.Errorf("%s parameters must be %s[%d] (one per channel), got %s", what, x.DType, x.Shape[1], p)
		}
	}
	return nil
}

func inferBatchNorm(in []Type, _ Attrs) ([]Type, error) {
	if err := channelParams(in, "batch_norm"); err != nil {
		return nil, err
	}
	return one(in[0])
}

func inferInstanceNorm(in []Type, _ Attrs) ([]Type, error) {
	if err := channelParams(in, "instance_norm"); err != nil {
		return nil, err
	}
	if in[0].Rank() < 3 {
		return nil, fmt.Errorf("instance_norm operand needs a spatial dim, got %s", in[0])
	}
	return one(in[0])
}

func inferLRN(in []Type, at Attrs) ([]Type, error) {
	if !in[0].DType.IsFloat() || in[0].Rank() < 2 {
		return nil, fmt.Errorf("lrn operand must be floating point [N, C, ...], got %s", in[0])
	}
	if at.Int("size", 0) < 1 {
		return nil, fmt.Errorf("lrn size must be positive")
	}
	return one(in[0])
}

func inferPad(in []Type, at Attrs) ([]Type, error) {
	x := in[0]
	r := x.Rank()
	pads := at.Ints("pads")
	if len(pads) != 2*r {
		return nil, fmt.Errorf("pads %v needs %d entries for %s", pads, 2*r, x)
	}
	mode := at.Str("mode", "constant")
	out := make(Shape, r)
	const lim = 1 << 40
	for i, d := range x.Shape {
		b, e := pads[i], pads[r+i]
		if b > lim || e > lim || b < -lim || e < -lim {
			return nil, fmt.Errorf("pads %v out of range", pads)
		}
		out[i] = d + b + e
		if out[i] < 0 {
			return nil, fmt.Errorf("pads %v crop dim %d of %s below zero", pads, i, x)
		}
		switch {
		case mode == "reflect" && (b > 0 || e > 0) && (b >= d || e >= d):
			return nil, fmt.Errorf("reflect pads %v must be smaller than dim %d of %s", pads, i, x)
		case mode != "constant" && (b > 0 || e > 0) && d == 0:
			return nil, fmt.Errorf("%s padding of an empty dim %d of %s", mode, i, x)
		}
	}
	if err := CheckShapeSize(out); err != nil {
		return nil, err
	}
	return one(Type{x.DType, out})
}

// ResizeScales reads resize's optional scales attribute for operand x (nil when absent): one
// entry per dim, each positive and finite (integers count as floats). The devices' kernels
// read it too.
func ResizeScales(at Attrs, x Type) ([]float64, error) {
	if !at.Has("scales") {
		return nil, nil
	}
	l, _ := at.Get("scales").(List)
	if len(l) != x.Rank() {
		return nil, fmt.Errorf("resize scales need %d entries for %s", x.Rank(), x)
	}
	var scales []float64
	for _, e := range l {
		var v float64
		switch e := e.(type) {
		case Float:
			v = float64(e)
		case Int:
			v = float64(e)
		}
		if !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("resize scales must be positive and finite, got %s", AttrString(l))
		}
		scales = append(scales, v)
	}
	return scales, nil
}

func inferResize(in []Type, at Attrs) ([]Type, error) {
	x := in[0]
	sizes := Shape(at.Ints("sizes"))
	if len(sizes) != x.Rank() {
		return nil, fmt.Errorf("resize sizes %v need %d entries for %s", []int(sizes), x.Rank(), x)
	}
	if err := CheckShapeSize(sizes); err != nil {
		return nil, err
	}
	if _, err := ResizeScales(at, x); err != nil {
		return nil, err
	}
	mode := at.Str("mode", "nearest")
	if mode != "nearest" && !x.DType.IsFloat() {
		return nil, fmt.Errorf("%s resize needs a floating-point operand, got %s", mode, x)
	}
	for i, d := range x.Shape {
		if d == 0 && sizes[i] != 0 {
			return nil, fmt.Errorf("resize of an empty dim %d of %s", i, x)
		}
	}
	return one(Type{x.DType, sizes})
}

func inferGatherElements(in []Type, at Attrs) ([]Type, error) {
	x, idx := in[0], in[1]
	if !idx.DType.IsInt() {
		return nil, fmt.Errorf("gather_elements indices must be integers, got %s", idx)
	}
	if x.Rank() != idx.Rank() || x.Rank() == 0 {
		return nil, fmt.Errorf("gather_elements operands must have equal rank >= 1, got %s and %s", x, idx)
	}
	if _, err := NormAxis(at.Int("axis", 0), x.Rank()); err != nil {
		return nil, err
	}
	return one(Type{x.DType, idx.Shape})
}

func inferArg(in []Type, at Attrs) ([]Type, error) {
	x := in[0]
	if x.DType == Bool {
		return nil, fmt.Errorf("arg_max/arg_min of bool operand")
	}
	axis, err := NormAxis(at.Int("axis", 0), x.Rank())
	if err != nil {
		return nil, err
	}
	if x.Shape[axis] == 0 {
		return nil, fmt.Errorf("arg_max/arg_min over an empty dim of %s", x)
	}
	s := slices.Clone(x.Shape[:axis])
	if at.Bool("keepdims", false) {
		s = append(s, 1)
	}
	s = append(s, x.Shape[axis+1:]...)
	return one(Type{I64, s})
}
