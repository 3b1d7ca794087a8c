package onnx

import (
	"fmt"
	"math"
	"slices"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// Shape manipulation, data movement and compile-time values.

func lowerReshape(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	var shape []int
	if c.opset < 5 {
		if shape, err = c.attrInts("shape"); err != nil {
			return err
		}
	} else if shape, err = c.constInts(1, "shape"); err != nil {
		return err
	}
	allowZero, err := c.attrInt("allowzero", 0)
	if err != nil {
		return err
	}
	if len(shape) > maxRank {
		return c.errorf("reshape target %v exceeds the rank limit %d", shape, maxRank)
	}
	target := slices.Clone(shape)
	for i, d := range target {
		if d == 0 && allowZero == 0 {
			if i >= x.Type.Rank() {
				return c.errorf("reshape target %v copies dim %d, but the input is %s", shape, i, x.Type)
			}
			target[i] = x.Type.Shape[i]
		}
	}
	if target, err = c.imp.rebatchReshape(c, target); err != nil {
		return err
	}
	if t, err := ir.ReshapeTarget(target, x.Type.NumElements()); err != nil {
		return c.errorf("%v (input %s)", err, x.Type)
	} else if t.Equal(x.Type.Shape) {
		c.set(0, x)
		return nil
	}
	c.set(0, c.b().Reshape(x, target...))
	return nil
}

// reshapeTo reshapes x to shape unless it already has it.
func (c *nodeCtx) reshapeTo(x *ir.Value, shape ir.Shape) *ir.Value {
	if x.Type.Shape.Equal(shape) {
		return x
	}
	return c.b().Reshape(x, shape...)
}

func lowerFlatten(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	axis, err := c.attrInt("axis", 1)
	if err != nil {
		return err
	}
	r := x.Type.Rank()
	if axis < 0 {
		axis += r
	}
	if axis < 0 || axis > r {
		return c.errorf("axis %d out of range for %s", axis, x.Type)
	}
	c.set(0, c.reshapeTo(x, ir.Shape{x.Type.Shape[:axis].NumElements(), x.Type.Shape[axis:].NumElements()}))
	return nil
}

// axesIn reads the axes of Squeeze / Unsqueeze: the attribute before opset 13, input 1 after.
func (c *nodeCtx) axesIn() ([]int, error) {
	if c.opset < 13 {
		return c.attrInts("axes")
	}
	if !c.has(1) {
		return nil, nil
	}
	return c.constInts(1, "axes")
}

func lowerSqueeze(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	axes, err := c.axesIn()
	if err != nil {
		return err
	}
	r := x.Type.Rank()
	drop := make([]bool, r)
	if len(axes) == 0 {
		for i, d := range x.Type.Shape {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		n, err := ir.NormAxis(a, r)
		if err != nil {
			return c.errorf("axes %v: %v", axes, err)
		}
		if x.Type.Shape[n] != 1 {
			return c.errorf("cannot squeeze dim %d of %s: its size is not 1", n, x.Type)
		}
		drop[n] = true
	}
	var shape ir.Shape
	for i, d := range x.Type.Shape {
		if !drop[i] {
			shape = append(shape, d)
		}
	}
	if shape == nil {
		shape = ir.Shape{}
	}
	c.set(0, c.reshapeTo(x, shape))
	return nil
}

func lowerUnsqueeze(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	axes, err := c.axesIn()
	if err != nil {
		return err
	}
	if len(axes) == 0 {
		return c.errorf("Unsqueeze needs axes")
	}
	r := x.Type.Rank() + len(axes)
	if r > maxRank {
		return c.errorf("Unsqueeze result rank %d exceeds the limit %d", r, maxRank)
	}
	ins := make([]bool, r)
	for _, a := range axes {
		n, err := ir.NormAxis(a, r)
		if err != nil {
			return c.errorf("axes %v: %v", axes, err)
		}
		if ins[n] {
			return c.errorf("axes %v repeat axis %d", axes, n)
		}
		ins[n] = true
	}
	shape := make(ir.Shape, 0, r)
	j := 0
	for i := range r {
		if ins[i] {
			shape = append(shape, 1)
		} else {
			shape = append(shape, x.Type.Shape[j])
			j++
		}
	}
	c.set(0, c.reshapeTo(x, shape))
	return nil
}

func lowerTranspose(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	perm, err := c.attrInts("perm")
	if err != nil {
		return err
	}
	r := x.Type.Rank()
	if perm == nil {
		for i := r - 1; i >= 0; i-- {
			perm = append(perm, i)
		}
	}
	if err := ir.CheckPerm(perm, r); err != nil {
		return c.errorf("%v", err)
	}
	identity := true
	for i, p := range perm {
		identity = identity && p == i
	}
	if identity {
		c.set(0, x)
		return nil
	}
	c.set(0, c.b().Transpose(x, perm...))
	return nil
}

func lowerConcat(c *nodeCtx) error {
	vs, err := c.ins(0)
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		return c.errorf("Concat needs inputs")
	}
	def := 1
	if c.opset >= 4 && !c.hasAttr("axis") {
		return c.errorf("Concat needs attribute axis")
	}
	ax, err := c.axisAttr(def, vs[0].Type.Rank())
	if err != nil {
		return err
	}
	if len(vs) == 1 {
		c.set(0, vs[0])
		return nil
	}
	c.set(0, c.b().Op1("concat", ir.Attrs{{Name: "axis", Value: ir.Int(ax)}}, vs...))
	return nil
}

func lowerSplit(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	ax, err := c.axisAttr(0, x.Type.Rank())
	if err != nil {
		return err
	}
	var sizes []int
	switch {
	case c.has(1):
		if sizes, err = c.constInts(1, "split"); err != nil {
			return err
		}
	case c.opset < 13:
		if sizes, err = c.attrInts("split"); err != nil {
			return err
		}
	}
	dim := x.Type.Shape[ax]
	n := len(c.n.Output)
	if len(sizes) == 0 {
		if c.opset >= 18 && c.hasAttr("num_outputs") {
			if n, err = c.attrInt("num_outputs", 0); err != nil {
				return err
			}
		}
		if n < 1 || n > 1<<16 {
			return c.errorf("Split into %d outputs", n)
		}
		chunk := (dim + n - 1) / n
		if dim%n != 0 && c.opset < 18 {
			return c.errorf("dim %d of %s does not split evenly into %d outputs", ax, x.Type, n)
		}
		for i := range n {
			sizes = append(sizes, max(min(chunk, dim-i*chunk), 0))
		}
	}
	if len(sizes) != len(c.n.Output) {
		return c.errorf("Split has %d outputs but %d sizes %v", len(c.n.Output), len(sizes), sizes)
	}
	if len(sizes) == 1 {
		if sizes[0] != dim {
			return c.errorf("split sizes %v do not add up to dim %d of %s", sizes, ax, x.Type)
		}
		c.set(0, x)
		return nil
	}
	rs := c.b().Op("split", ir.Attrs{{Name: "axis", Value: ir.Int(ax)}, {Name: "sizes", Value: ir.Ints(sizes...)}}, x)
	for i, r := range rs {
		c.set(i, r)
	}
	return nil
}

// sliceBounds clamps one ONNX slice dim the way ONNX defines it.
func sliceBounds(start, end, step, d int) (int, int, int) {
	if d == 0 {
		return 0, 0, 1
	}
	if start < 0 {
		start += d
	}
	if end < 0 {
		end += d
	}
	if step > 0 {
		start, end = min(max(start, 0), d), min(max(end, 0), d)
		end = max(end, start)
	} else {
		start, end = min(max(start, 0), d-1), min(max(end, -1), d-1)
		end = min(end, start)
	}
	return start, end, step
}

func lowerSlice(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	var starts, ends, axes, steps []int
	if c.opset < 10 {
		if starts, err = c.attrInts("starts"); err != nil {
			return err
		}
		if ends, err = c.attrInts("ends"); err != nil {
			return err
		}
		if axes, err = c.attrInts("axes"); err != nil {
			return err
		}
	} else {
		if starts, err = c.constInts(1, "starts"); err != nil {
			return err
		}
		if ends, err = c.constInts(2, "ends"); err != nil {
			return err
		}
		if c.has(3) {
			if axes, err = c.constInts(3, "axes"); err != nil {
				return err
			}
		}
		if c.has(4) {
			if steps, err = c.constInts(4, "steps"); err != nil {
				return err
			}
		}
	}
	r := x.Type.Rank()
	if len(starts) != len(ends) || len(starts) > r {
		return c.errorf("starts %v and ends %v do not fit %s", starts, ends, x.Type)
	}
	if axes == nil {
		for i := range starts {
			axes = append(axes, i)
		}
	}
	if steps == nil {
		for range starts {
			steps = append(steps, 1)
		}
	}
	if len(axes) != len(starts) || len(steps) != len(starts) {
		return c.errorf("starts %v, ends %v, axes %v and steps %v differ in length", starts, ends, axes, steps)
	}
	var st, en, ax, sp []int
	trivial := true
	for i := range starts {
		a, err := ir.NormAxis(axes[i], r)
		if err != nil {
			return c.errorf("axes %v: %v", axes, err)
		}
		if steps[i] == 0 {
			return c.errorf("slice step is 0")
		}
		d := x.Type.Shape[a]
		s, e, p := sliceBounds(starts[i], ends[i], steps[i], d)
		trivial = trivial && s == 0 && e == d && p == 1
		st, en, ax, sp = append(st, s), append(en, e), append(ax, a), append(sp, p)
	}
	if trivial {
		c.set(0, x)
		return nil
	}
	at := ir.Attrs{{Name: "starts", Value: ir.Ints(st...)}, {Name: "ends", Value: ir.Ints(en...)}, {Name: "axes", Value: ir.Ints(ax...)}}
	if slices.ContainsFunc(sp, func(v int) bool { return v != 1 }) {
		at = append(at, ir.NamedAttr{Name: "steps", Value: ir.Ints(sp...)})
	}
	c.set(0, c.b().Op1("slice", at, x))
	return nil
}

func lowerGather(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	ax, err := c.axisAttr(0, x.Type.Rank())
	if err != nil {
		return err
	}
	idx, err := c.in(1)
	if err != nil {
		return err
	}
	if d := constOf(idx); d != nil && d.Type.DType.IsInt() {
		// Normalise negative constant indices (ONNX counts them from the end).
		dim := int64(x.Type.Shape[ax])
		// A splat holds one value however many elements it has (ConstantOfShape can make
		// 2^40 of them from a few bytes): check and normalise that value alone.
		n := d.Len()
		if d.Splat {
			n = 1
		}
		vals := make([]int64, n)
		neg := false
		for i := range vals {
			v := d.I64(i)
			if v < -dim || v >= dim {
				return c.errorf("index %d out of range for dim %d of %s", v, ax, x.Type)
			}
			if v < 0 {
				v += dim
				neg = true
			}
			vals[i] = v
		}
		if neg && d.Splat {
			idx = c.b().Constant(ir.Splat(d.Type, float64(vals[0])))
		} else if neg {
			idx = c.b().Constant(ir.NewDenseI64(d.Type, vals))
		}
	}
	var at ir.Attrs
	if ax != 0 {
		at = ir.Attrs{{Name: "axis", Value: ir.Int(ax)}}
	}
	c.set(0, c.b().Op1("gather", at, x, idx))
	return nil
}

func lowerGatherElements(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	idx, err := c.in(1)
	if err != nil {
		return err
	}
	axis, err := c.attrInt("axis", 0)
	if err != nil {
		return err
	}
	c.set(0, c.b().Op1("gather_elements", ir.Attrs{{Name: "axis", Value: ir.Int(axis)}}, x, idx))
	return nil
}

// lowerExpand: ONNX Expand broadcasts both ways (the result is broadcast(x.shape, shape)).
func lowerExpand(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	shape, err := c.constInts(1, "shape")
	if err != nil {
		return err
	}
	if len(shape) > maxRank {
		return c.errorf("Expand shape %v exceeds the rank limit", shape)
	}
	for _, d := range shape {
		if d < 0 {
			return c.errorf("Expand shape %v has a negative dim", shape)
		}
	}
	target, err := ir.BroadcastShapes(x.Type.Shape, ir.Shape(shape))
	if err != nil {
		return c.errorf("Expand: %v", err)
	}
	if target.Equal(x.Type.Shape) {
		c.set(0, x)
		return nil
	}
	c.set(0, c.b().Op1("broadcast", ir.Attrs{{Name: "shape", Value: ir.Ints(target...)}}, x))
	return nil
}

// lowerTile: x [d0, …] repeated r_i times along each dim is reshape to [1, d0, 1, d1, …],
// broadcast to [r0, d0, r1, d1, …] and reshape to [r0·d0, r1·d1, …].
func lowerTile(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	if c.opset < 6 {
		return c.errorf("Tile before opset 6 is not supported")
	}
	reps, err := c.constInts(1, "repeats")
	if err != nil {
		return err
	}
	r := x.Type.Rank()
	if len(reps) != r {
		return c.errorf("repeats %v needs %d entries for %s", reps, r, x.Type)
	}
	var split, bshape, out ir.Shape
	trivial := true
	for i, d := range x.Type.Shape {
		if reps[i] < 0 || reps[i] > 1<<40 {
			return c.errorf("bad repeats %v", reps)
		}
		trivial = trivial && reps[i] == 1
		split = append(split, 1, d)
		bshape = append(bshape, reps[i], d)
		out = append(out, reps[i]*d)
	}
	if trivial {
		c.set(0, x)
		return nil
	}
	if err := ir.CheckShapeSize(bshape); err != nil {
		return c.errorf("Tile: %v", err)
	}
	b := c.b()
	y := b.Op1("broadcast", ir.Attrs{{Name: "shape", Value: ir.Ints(bshape...)}}, b.Reshape(x, split...))
	c.set(0, b.Reshape(y, out...))
	return nil
}

func lowerPad(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	mode, err := c.attrString("mode", "constant")
	if err != nil {
		return err
	}
	switch mode {
	case "constant", "reflect", "edge":
	case "wrap":
		if c.opset < 19 {
			return c.errorf("Pad mode wrap needs opset 19")
		}
	default:
		return c.errorf("unknown Pad mode %q", mode)
	}
	r := x.Type.Rank()
	var pads []int
	value := 0.0
	switch {
	case c.opset < 2:
		if pads, err = c.attrInts("paddings"); err != nil {
			return err
		}
		if value, err = c.attrFloat("value", 0); err != nil {
			return err
		}
	case c.opset < 11:
		if pads, err = c.attrInts("pads"); err != nil {
			return err
		}
		if value, err = c.attrFloat("value", 0); err != nil {
			return err
		}
	default:
		if pads, err = c.constInts(1, "pads"); err != nil {
			return err
		}
		if c.has(2) {
			v, err := c.constIn(2, "constant_value")
			if err != nil {
				return err
			}
			if v.Len() > 0 {
				value = v.F64(0)
			}
		}
		if c.has(3) {
			axes, err := c.constInts(3, "axes")
			if err != nil {
				return err
			}
			if len(pads) != 2*len(axes) {
				return c.errorf("pads %v needs %d entries for axes %v", pads, 2*len(axes), axes)
			}
			full := make([]int, 2*r)
			for i, a := range axes {
				n, err := ir.NormAxis(a, r)
				if err != nil {
					return c.errorf("axes %v: %v", axes, err)
				}
				full[n], full[r+n] = pads[i], pads[len(axes)+i]
			}
			pads = full
		}
	}
	if len(pads) != 2*r {
		return c.errorf("pads %v needs %d entries for %s", pads, 2*r, x.Type)
	}
	if !slices.ContainsFunc(pads, func(v int) bool { return v != 0 }) {
		c.set(0, x)
		return nil
	}
	at := ir.Attrs{{Name: "pads", Value: ir.Ints(pads...)}}
	if mode != "constant" {
		at = append(at, ir.NamedAttr{Name: "mode", Value: ir.Ident(mode)})
	}
	if value != 0 && !math.IsNaN(value) || math.IsNaN(value) {
		at = append(at, ir.NamedAttr{Name: "value", Value: ir.Float(value)})
	}
	c.set(0, c.b().Op1("pad", at, x))
	return nil
}

func (c *nodeCtx) blocksize(x *ir.Value) (int, error) {
	bs, err := c.attrInt("blocksize", 0)
	if err != nil {
		return 0, err
	}
	if bs < 1 || bs > 1<<20 {
		return 0, c.errorf("blocksize must be positive, got %d", bs)
	}
	if x.Type.Rank() != 4 {
		return 0, c.errorf("input must be 4-D [N, C, H, W], got %s", x.Type)
	}
	return bs, nil
}

// lowerDepthToSpace: reshape, transpose, reshape (DCR or CRD order).
func lowerDepthToSpace(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	bs, err := c.blocksize(x)
	if err != nil {
		return err
	}
	mode, err := c.attrString("mode", "DCR")
	if err != nil {
		return err
	}
	n, ch, h, w := x.Type.Shape[0], x.Type.Shape[1], x.Type.Shape[2], x.Type.Shape[3]
	if ch%(bs*bs) != 0 {
		return c.errorf("channels %d are not divisible by blocksize² = %d", ch, bs*bs)
	}
	cc := ch / (bs * bs)
	b := c.b()
	var y *ir.Value
	switch mode {
	case "DCR":
		y = b.Transpose(b.Reshape(x, n, bs, bs, cc, h, w), 0, 3, 4, 1, 5, 2)
	case "CRD":
		y = b.Transpose(b.Reshape(x, n, cc, bs, bs, h, w), 0, 1, 4, 2, 5, 3)
	default:
		return c.errorf("unknown DepthToSpace mode %q", mode)
	}
	c.set(0, b.Reshape(y, n, cc, h*bs, w*bs))
	return nil
}

func lowerSpaceToDepth(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	bs, err := c.blocksize(x)
	if err != nil {
		return err
	}
	n, ch, h, w := x.Type.Shape[0], x.Type.Shape[1], x.Type.Shape[2], x.Type.Shape[3]
	if h%bs != 0 || w%bs != 0 {
		return c.errorf("spatial dims of %s are not divisible by blocksize %d", x.Type, bs)
	}
	b := c.b()
	y := b.Transpose(b.Reshape(x, n, ch, h/bs, bs, w/bs, bs), 0, 3, 5, 1, 2, 4)
	c.set(0, b.Reshape(y, n, ch*bs*bs, h/bs, w/bs))
	return nil
}

// lowerResize handles Resize (all opsets) and Upsample: the output sizes are made static
// (floor(in·scale) when scales are given) and opset 10 Resize and Upsample get their fixed
// coordinate rules (asymmetric, nearest rounding down).
func lowerResize(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	r := x.Type.Rank()
	mode, err := c.attrString("mode", "nearest")
	if err != nil {
		return err
	}
	if mode == "bilinear" || mode == "trilinear" {
		mode = "linear"
	}
	if mode != "nearest" && mode != "linear" && mode != "cubic" {
		return c.errorf("unknown %s mode %q", c.n.OpType, mode)
	}
	legacy := c.n.OpType == "Upsample" || c.opset < 11
	coord, nearest := "asymmetric", "floor"
	var scales []float64
	var sizes []int
	if legacy {
		if mode == "cubic" {
			return c.errorf("cubic mode needs Resize from opset 11")
		}
		if c.n.OpType == "Upsample" && c.opset < 9 {
			if scales, err = c.attrFloats("scales"); err != nil {
				return err
			}
		} else {
			d, err := c.constIn(1, "scales")
			if err != nil {
				return err
			}
			scales = d.Floats()
		}
	} else {
		if coord, err = c.attrString("coordinate_transformation_mode", "half_pixel"); err != nil {
			return err
		}
		if nearest, err = c.attrString("nearest_mode", "round_prefer_floor"); err != nil {
			return err
		}
		if coord == "tf_crop_and_resize" {
			return c.errorf("coordinate_transformation_mode tf_crop_and_resize is not supported")
		}
		if aa, err := c.attrInt("antialias", 0); err != nil {
			return err
		} else if aa != 0 {
			return c.errorf("antialiased Resize is not supported")
		}
		if c.hasAttr("axes") {
			return c.errorf("Resize with axes is not supported")
		}
		if pol, err := c.attrString("keep_aspect_ratio_policy", "stretch"); err != nil {
			return err
		} else if pol != "stretch" {
			return c.errorf("keep_aspect_ratio_policy %s is not supported", pol)
		}
		if c.has(3) {
			if sizes, err = c.constInts(3, "sizes"); err != nil {
				return err
			}
			sizes = c.imp.rebatchSizes(c, sizes)
		}
		if len(sizes) == 0 && c.has(2) {
			d, err := c.constIn(2, "scales")
			if err != nil {
				return err
			}
			scales = d.Floats()
		}
	}
	if len(sizes) == 0 {
		if len(scales) != r {
			return c.errorf("scales %v need %d entries for %s", scales, r, x.Type)
		}
		for i, s := range scales {
			if !(s > 0) || s > 1<<20 {
				return c.errorf("scales %v must be positive", scales)
			}
			sizes = append(sizes, int(math.Floor(float64(x.Type.Shape[i])*s)))
		}
	}
	if len(sizes) != r {
		return c.errorf("sizes %v need %d entries for %s", sizes, r, x.Type)
	}
	if err := ir.CheckShapeSize(ir.Shape(sizes)); err != nil {
		return c.errorf("%v", err)
	}
	if ir.Shape(sizes).Equal(x.Type.Shape) && !slices.ContainsFunc(scales, func(s float64) bool { return s != 1 }) {
		c.set(0, x)
		return nil
	}
	at := ir.Attrs{{Name: "sizes", Value: ir.Ints(sizes...)}, {Name: "coordinate_transformation_mode", Value: ir.Ident(coord)}}
	if mode != "nearest" {
		at = append(at, ir.NamedAttr{Name: "mode", Value: ir.Ident(mode)})
	} else {
		at = append(at, ir.NamedAttr{Name: "nearest_mode", Value: ir.Ident(nearest)})
	}
	if scales != nil {
		l := make(ir.List, len(scales))
		for i, s := range scales {
			l[i] = ir.Float(s)
		}
		at = append(at, ir.NamedAttr{Name: "scales", Value: l})
	}
	if mode == "cubic" {
		a, err := c.attrFloat("cubic_coeff_a", -0.75)
		if err != nil {
			return err
		}
		at = append(at, ir.NamedAttr{Name: "cubic_coeff_a", Value: ir.Float(a)})
		if ex, err := c.attrInt("exclude_outside", 0); err != nil {
			return err
		} else if ex != 0 {
			at = append(at, ir.NamedAttr{Name: "exclude_outside", Value: ir.BoolAttr(true)})
		}
	}
	c.set(0, c.b().Op1("resize", at, x))
	return nil
}

func lowerConstant(c *nodeCtx) error {
	d, err := constantValue(c.n, c.imp.dir)
	if err != nil {
		return c.errorf("%v", err)
	}
	c.set(0, c.b().Constant(d))
	return nil
}

// constantValue reads the tensor a Constant node holds, from whichever value attribute it has.
func constantValue(n *onnxpb.NodeProto, dir string) (*ir.Dense, error) {
	var d *ir.Dense
	for _, a := range n.Attribute {
		var err error
		switch a.Name {
		case "value":
			if a.T == nil {
				return nil, fmt.Errorf("Constant value attribute holds no tensor")
			}
			d, err = tensorData(a.T, dir)
			if err != nil {
				return nil, fmt.Errorf("Constant value: %v", err)
			}
		case "value_float":
			d = ir.NewDenseF64(ir.Type{DType: ir.F32, Shape: ir.Shape{}}, []float64{float64(a.F)})
		case "value_floats":
			vals := make([]float64, len(a.Floats))
			for i, f := range a.Floats {
				vals[i] = float64(f)
			}
			d = ir.NewDenseF64(ir.Type{DType: ir.F32, Shape: ir.Shape{len(vals)}}, vals)
		case "value_int":
			d = ir.NewDenseI64(ir.Type{DType: ir.I64, Shape: ir.Shape{}}, []int64{a.I})
		case "value_ints":
			d = ir.NewDenseI64(ir.Type{DType: ir.I64, Shape: ir.Shape{len(a.Ints)}}, a.Ints)
		case "value_string", "value_strings":
			return nil, fmt.Errorf("string constants are not supported")
		case "sparse_value":
			return nil, fmt.Errorf("sparse constants are not supported")
		}
	}
	if d == nil {
		return nil, fmt.Errorf("Constant has no value attribute")
	}
	return d, nil
}

func i64Const(c *nodeCtx, shape ir.Shape, vals []int) *ir.Value {
	v := make([]int64, len(vals))
	for i, x := range vals {
		v[i] = int64(x)
	}
	return c.b().Constant(ir.NewDenseI64(ir.Type{DType: ir.I64, Shape: shape}, v))
}

func lowerShape(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	r := x.Type.Rank()
	start, end := 0, r
	if c.opset >= 15 {
		if start, err = c.attrInt("start", 0); err != nil {
			return err
		}
		if end, err = c.attrInt("end", r); err != nil {
			return err
		}
	}
	norm := func(v int) int {
		if v < 0 {
			v += r
		}
		return min(max(v, 0), r)
	}
	start, end = norm(start), norm(end)
	dims := []int{}
	if start < end {
		dims = x.Type.Shape[start:end]
	}
	c.set(0, i64Const(c, ir.Shape{len(dims)}, dims))
	return nil
}

func lowerSize(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	c.set(0, i64Const(c, ir.Shape{}, []int{x.Type.NumElements()}))
	return nil
}

func lowerConstantOfShape(c *nodeCtx) error {
	shape, err := c.constInts(0, "shape")
	if err != nil {
		return err
	}
	if len(shape) > maxRank {
		return c.errorf("shape %v exceeds the rank limit", shape)
	}
	if err := ir.CheckShapeSize(ir.Shape(shape)); err != nil {
		return c.errorf("%v", err)
	}
	d := &ir.Dense{Type: ir.Type{DType: ir.F32}, Splat: true, Data: make([]byte, 4)}
	if a, err := c.attr("value", onnxpb.AttributeProto_TENSOR); err != nil {
		return err
	} else if a != nil {
		if a.T == nil {
			return c.errorf("ConstantOfShape value attribute holds no tensor")
		}
		v, err := tensorData(a.T, c.imp.dir)
		if err != nil {
			return c.errorf("ConstantOfShape value: %v", err)
		}
		if v.Len() != 1 {
			return c.errorf("ConstantOfShape value must hold one element, got %s", v.Type)
		}
		d = &ir.Dense{Type: ir.Type{DType: v.Type.DType}, Splat: true, Data: v.Data}
	}
	d.Type.Shape = ir.Shape(shape)
	c.set(0, c.b().Constant(d))
	return nil
}

// lowerRange folds Range with constant operands: a constant when small, else
// start + delta·iota.
func lowerRange(c *nodeCtx) error {
	var v [3]*ir.Dense
	for i, what := range []string{"start", "limit", "delta"} {
		d, err := c.constIn(i, what)
		if err != nil {
			return err
		}
		if d.Len() != 1 {
			return c.errorf("Range %s must be a scalar, got %s", what, d.Type)
		}
		v[i] = d
	}
	dt := v[0].Type.DType
	start, limit, delta := v[0].F64(0), v[1].F64(0), v[2].F64(0)
	if delta == 0 || math.IsNaN(start+limit+delta) || math.IsInf(start+limit+delta, 0) {
		return c.errorf("Range(%v, %v, %v) is not a finite sequence", start, limit, delta)
	}
	nf := math.Max(math.Ceil((limit-start)/delta), 0)
	if nf > 1<<40 {
		return c.errorf("Range(%v, %v, %v) has too many elements", start, limit, delta)
	}
	n := int(nf)
	t := ir.Type{DType: dt, Shape: ir.Shape{n}}
	if n <= ir.MaxFoldElements {
		if dt.IsFloat() {
			vals := make([]float64, n)
			for i := range vals {
				vals[i] = start + float64(i)*delta
			}
			c.set(0, c.b().Constant(ir.NewDenseF64(t, vals)))
		} else {
			s, d := v[0].I64(0), v[2].I64(0)
			vals := make([]int64, n)
			for i := range vals {
				vals[i] = s + int64(i)*d
			}
			c.set(0, c.b().Constant(ir.NewDenseI64(t, vals)))
		}
		return nil
	}
	b := c.b()
	io := b.Op1("iota", ir.Attrs{{Name: "type", Value: ir.TypeAttr(t)}, {Name: "axis", Value: ir.Int(0)}})
	c.set(0, b.Add(b.Mul(io, b.Constant(v[2])), b.Constant(v[0])))
	return nil
}
