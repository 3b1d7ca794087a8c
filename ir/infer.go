package ir

import (
	"fmt"
	"slices"
)

// Shape-inference helpers shared by the op table. Each returns a clear error rather than
// panicking on any input, since the parser and the fuzzer feed them arbitrary IR.

func one(t Type) ([]Type, error) { return []Type{t}, nil }

// NormAxis maps a possibly negative axis into [0, rank).
func NormAxis(axis, rank int) (int, error) {
	if axis < -rank || axis >= rank {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += rank
	}
	return axis, nil
}

// BroadcastShapes applies numpy broadcasting to any number of shapes.
func BroadcastShapes(shapes ...Shape) (Shape, error) {
	rank := 0
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	out := make(Shape, rank)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			switch o := out[off+i]; {
			case d == o || d == 1:
			case o == 1:
				out[off+i] = d
			default:
				return nil, fmt.Errorf("shapes %s do not broadcast", shapeList(shapes))
			}
		}
	}
	return out, nil
}

func shapeList(shapes []Shape) string {
	s := ""
	for i, sh := range shapes {
		if i > 0 {
			s += " and "
		}
		s += sh.String()
	}
	return s
}

func sameDType(in []Type) error {
	for _, t := range in[1:] {
		if t.DType != in[0].DType {
			return fmt.Errorf("operand dtypes differ: %s and %s", in[0].DType, t.DType)
		}
	}
	return nil
}

func inferUnary(in []Type, _ Attrs) ([]Type, error) { return one(in[0]) }

func inferFloatUnary(in []Type, _ Attrs) ([]Type, error) {
	if !in[0].DType.IsFloat() {
		return nil, fmt.Errorf("operand must be floating point, got %s", in[0])
	}
	return one(in[0])
}

func inferNumericUnary(in []Type, _ Attrs) ([]Type, error) {
	if in[0].DType == Bool {
		return nil, fmt.Errorf("operand must be numeric, got %s", in[0])
	}
	return one(in[0])
}

func broadcastOperands(in []Type) (Shape, error) {
	shapes := make([]Shape, len(in))
	for i, t := range in {
		shapes[i] = t.Shape
	}
	return BroadcastShapes(shapes...)
}

func inferBinary(in []Type, _ Attrs) ([]Type, error) {
	if err := sameDType(in); err != nil {
		return nil, err
	}
	if in[0].DType == Bool {
		return nil, fmt.Errorf("arithmetic on bool operands")
	}
	s, err := broadcastOperands(in)
	if err != nil {
		return nil, err
	}
	return one(Type{in[0].DType, s})
}

func inferCompare(in []Type, _ Attrs) ([]Type, error) {
	if err := sameDType(in); err != nil {
		return nil, err
	}
	s, err := broadcastOperands(in)
	if err != nil {
		return nil, err
	}
	return one(Type{Bool, s})
}

func inferLogical(in []Type, _ Attrs) ([]Type, error) {
	for _, t := range in {
		if t.DType != Bool {
			return nil, fmt.Errorf("logical op needs bool operands, got %s", t)
		}
	}
	s, err := broadcastOperands(in)
	if err != nil {
		return nil, err
	}
	return one(Type{Bool, s})
}

func inferWhere(in []Type, _ Attrs) ([]Type, error) {
	if in[0].DType != Bool {
		return nil, fmt.Errorf("where condition must be bool, got %s", in[0])
	}
	if in[1].DType != in[2].DType {
		return nil, fmt.Errorf("where branches differ: %s and %s", in[1], in[2])
	}
	s, err := broadcastOperands(in)
	if err != nil {
		return nil, err
	}
	return one(Type{in[1].DType, s})
}

// MatMulShape computes numpy matmul's result shape with optional transposes of the last two
// dims of each operand (rank-1 operands are promoted as numpy does and never transposed).
func MatMulShape(a, b Shape, ta, tb bool) (Shape, error) {
	if len(a) == 0 || len(b) == 0 {
		return nil, fmt.Errorf("matmul operands must have rank >= 1, got %s and %s", a, b)
	}
	if (ta && len(a) < 2) || (tb && len(b) < 2) {
		return nil, fmt.Errorf("matmul transpose needs rank >= 2")
	}
	am, ak := 1, a[len(a)-1]
	if len(a) >= 2 {
		am = a[len(a)-2]
		if ta {
			am, ak = ak, am
		}
	}
	bk, bn := b[0], 1
	if len(b) >= 2 {
		bk, bn = b[len(b)-2], b[len(b)-1]
		if tb {
			bk, bn = bn, bk
		}
	}
	if ak != bk {
		return nil, fmt.Errorf("matmul contraction mismatch: %s @ %s (%d vs %d)", a, b, ak, bk)
	}
	var ab, bb Shape
	if len(a) > 2 {
		ab = a[:len(a)-2]
	}
	if len(b) > 2 {
		bb = b[:len(b)-2]
	}
	batch, err := BroadcastShapes(ab, bb)
	if err != nil {
		return nil, fmt.Errorf("matmul batch dims: %v", err)
	}
	out := slices.Clone(batch)
	if len(a) >= 2 {
		out = append(out, am)
	}
	if len(b) >= 2 {
		out = append(out, bn)
	}
	return out, nil
}

func inferMatMul(in []Type, at Attrs) ([]Type, error) {
	if err := sameDType(in); err != nil {
		return nil, err
	}
	if in[0].DType == Bool {
		return nil, fmt.Errorf("matmul on bool operands")
	}
	s, err := MatMulShape(in[0].Shape, in[1].Shape, at.Bool("transpose_a", false), at.Bool("transpose_b", false))
	if err != nil {
		return nil, err
	}
	if len(in) == 3 {
		bs, err := BroadcastShapes(s, in[2].Shape)
		if err != nil || !bs.Equal(s) {
			return nil, fmt.Errorf("matmul bias %s does not broadcast to the result %s", in[2].Shape, s)
		}
	}
	return one(Type{in[0].DType, s})
}

func inferAxisSame(in []Type, at Attrs) ([]Type, error) {
	if !in[0].DType.IsFloat() {
		return nil, fmt.Errorf("operand must be floating point, got %s", in[0])
	}
	if _, err := NormAxis(at.Int("axis", -1), in[0].Rank()); err != nil {
		return nil, err
	}
	return one(in[0])
}

// inferNorm checks layer_norm / rms_norm: the scale and bias cover the normalised dims.
func inferNorm(in []Type, at Attrs) ([]Type, error) {
	x := in[0]
	if !x.DType.IsFloat() {
		return nil, fmt.Errorf("operand must be floating point, got %s", x)
	}
	axis, err := NormAxis(at.Int("axis", -1), x.Rank())
	if err != nil {
		return nil, err
	}
	for _, p := range in[1:] {
		if p.DType != x.DType || !p.Shape.Equal(x.Shape[axis:]) {
			return nil, fmt.Errorf("scale/bias %s must be %s%s (the normalised dims)", p, x.DType, x.Shape[axis:])
		}
	}
	return one(x)
}

// ReshapeTarget resolves a reshape target with at most one -1 against n elements.
func ReshapeTarget(target []int, n int) (Shape, error) {
	out := make(Shape, len(target))
	known, infer := 1, -1
	for i, d := range target {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			return nil, fmt.Errorf("bad reshape target %v", target)
		default:
			known *= d
			if known > 1<<50 {
				return nil, fmt.Errorf("reshape target %v too large", target)
			}
		}
		out[i] = d
	}
	if infer >= 0 {
		if known == 0 || n%known != 0 {
			return nil, fmt.Errorf("cannot reshape %d elements to %v", n, target)
		}
		out[infer] = n / known
	} else if known != n {
		return nil, fmt.Errorf("cannot reshape %d elements to %v", n, target)
	}
	return out, nil
}

func inferReshape(in []Type, at Attrs) ([]Type, error) {
	s, err := ReshapeTarget(at.Ints("shape"), in[0].NumElements())
	if err != nil {
		return nil, fmt.Errorf("%v (operand %s)", err, in[0])
	}
	return one(Type{in[0].DType, s})
}

// CheckPerm verifies perm is a permutation of [0, rank).
func CheckPerm(perm []int, rank int) error {
	if len(perm) != rank {
		return fmt.Errorf("perm %v has %d entries for rank %d", perm, len(perm), rank)
	}
	seen := make([]bool, rank)
	for _, p := range perm {
		if p < 0 || p >= rank || seen[p] {
			return fmt.Errorf("perm %v is not a permutation of 0..%d", perm, rank-1)
		}
		seen[p] = true
	}
	return nil
}

func inferTranspose(in []Type, at Attrs) ([]Type, error) {
	perm := at.Ints("perm")
	if err := CheckPerm(perm, in[0].Rank()); err != nil {
		return nil, err
	}
	s := make(Shape, len(perm))
	for i, p := range perm {
		s[i] = in[0].Shape[p]
	}
	return one(Type{in[0].DType, s})
}

func inferBroadcastTo(in []Type, at Attrs) ([]Type, error) {
	target := Shape(at.Ints("shape"))
	for _, d := range target {
		if d < 0 {
			return nil, fmt.Errorf("bad broadcast shape %s", target)
		}
	}
	s, err := BroadcastShapes(in[0].Shape, target)
	if err != nil || !s.Equal(target) {
		return nil, fmt.Errorf("%s does not broadcast to %s", in[0].Shape, target)
	}
	return one(Type{in[0].DType, target})
}

// ReduceAxes normalises a reduction's axes; absent axes mean every axis.
func ReduceAxes(at Attrs, rank int) ([]bool, error) {
	red := make([]bool, rank)
	if !at.Has("axes") {
		for i := range red {
			red[i] = true
		}
		return red, nil
	}
	for _, a := range at.Ints("axes") {
		ax, err := NormAxis(a, rank)
		if err != nil {
			return nil, err
		}
		if red[ax] {
			return nil, fmt.Errorf("axis %d repeated", a)
		}
		red[ax] = true
	}
	return red, nil
}

func inferReduce(in []Type, at Attrs) ([]Type, error) {
	if in[0].DType == Bool {
		return nil, fmt.Errorf("reduction of bool operand")
	}
	red, err := ReduceAxes(at, in[0].Rank())
	if err != nil {
		return nil, err
	}
	keep := at.Bool("keepdims", false)
	var s Shape
	for i, d := range in[0].Shape {
		switch {
		case !red[i]:
			s = append(s, d)
		case keep:
			s = append(s, 1)
		}
	}
	if s == nil {
		s = Shape{}
	}
	return one(Type{in[0].DType, s})
}

func inferGather(in []Type, at Attrs) ([]Type, error) {
	data, idx := in[0], in[1]
	if !idx.DType.IsInt() {
		return nil, fmt.Errorf("gather indices must be integers, got %s", idx)
	}
	axis, err := NormAxis(at.Int("axis", 0), data.Rank())
	if err != nil {
		return nil, err
	}
	s := slices.Concat(data.Shape[:axis], idx.Shape, data.Shape[axis+1:])
	return one(Type{data.DType, s})
}

func inferConcat(in []Type, at Attrs) ([]Type, error) {
	if err := sameDType(in); err != nil {
		return nil, err
	}
	rank := in[0].Rank()
	axis, err := NormAxis(at.Int("axis", 0), rank)
	if err != nil {
		return nil, err
	}
	s := slices.Clone(in[0].Shape)
	for _, t := range in[1:] {
		if t.Rank() != rank {
			return nil, fmt.Errorf("concat operands differ in rank: %s and %s", in[0], t)
		}
		for i := range s {
			if i == axis {
				s[i] += t.Shape[i]
			} else if t.Shape[i] != s[i] {
				return nil, fmt.Errorf("concat operands differ off axis %d: %s and %s", axis, in[0], t)
			}
		}
	}
	return one(Type{in[0].DType, s})
}

// SliceDim is one dimension of a normalised slice.
type SliceDim struct{ Start, End, Step, Size int }

// SliceDims normalises a slice op's attributes for an operand shape. Absent axes mean the
// first len(starts) dims; absent steps mean 1. Starts and ends must already be in range:
// 0 <= start <= end <= dim for step > 0, and dim > start >= end >= -1 for step < 0 (the
// frontends clamp ONNX's open-ended values).
func SliceDims(at Attrs, shape Shape) ([]SliceDim, error) {
	starts, ends := at.Ints("starts"), at.Ints("ends")
	axes, steps := at.Ints("axes"), at.Ints("steps")
	if len(starts) != len(ends) {
		return nil, fmt.Errorf("slice starts and ends differ in length")
	}
	if axes == nil {
		if len(starts) > len(shape) {
			return nil, fmt.Errorf("slice has %d starts for rank %d", len(starts), len(shape))
		}
		for i := range starts {
			axes = append(axes, i)
		}
	}
	if steps == nil {
		steps = make([]int, len(starts))
		for i := range steps {
			steps[i] = 1
		}
	}
	if len(axes) != len(starts) || len(steps) != len(starts) {
		return nil, fmt.Errorf("slice axes/steps length differs from starts")
	}
	dims := make([]SliceDim, len(shape))
	for i, d := range shape {
		dims[i] = SliceDim{0, d, 1, d}
	}
	seen := make([]bool, len(shape))
	for i, a := range axes {
		ax, err := NormAxis(a, len(shape))
		if err != nil {
			return nil, err
		}
		if seen[ax] {
			return nil, fmt.Errorf("slice axis %d repeated", a)
		}
		seen[ax] = true
		st, en, sp, d := starts[i], ends[i], steps[i], shape[ax]
		var size int
		switch {
		case sp > 0 && 0 <= st && st <= en && en <= d:
			size = (en - st + sp - 1) / sp
		case sp < 0 && -1 <= en && en <= st && st < d:
			size = (st - en - sp - 1) / -sp
		default:
			return nil, fmt.Errorf("slice [%d:%d:%d] out of range for dim %d of size %d", st, en, sp, ax, d)
		}
		dims[ax] = SliceDim{st, en, sp, size}
	}
	return dims, nil
}

func inferSlice(in []Type, at Attrs) ([]Type, error) {
	dims, err := SliceDims(at, in[0].Shape)
	if err != nil {
		return nil, err
	}
	s := make(Shape, len(dims))
	for i, d := range dims {
		s[i] = d.Size
	}
	return one(Type{in[0].DType, s})
}

func inferSplit(in []Type, at Attrs) ([]Type, error) {
	axis, err := NormAxis(at.Int("axis", 0), in[0].Rank())
	if err != nil {
		return nil, err
	}
	sizes := at.Ints("sizes")
	total := 0
	out := make([]Type, len(sizes))
	for i, sz := range sizes {
		if sz < 0 {
			return nil, fmt.Errorf("negative split size %d", sz)
		}
		total += sz
		s := slices.Clone(in[0].Shape)
		s[axis] = sz
		out[i] = Type{in[0].DType, s}
	}
	if len(sizes) == 0 || total != in[0].Shape[axis] {
		return nil, fmt.Errorf("split sizes %v do not add up to dim %d of %s", sizes, axis, in[0])
	}
	return out, nil
}

func inferConstant(_ []Type, at Attrs) ([]Type, error) {
	d, _ := at.Get("value").(*Dense)
	if d == nil || !d.Type.Known() {
		return nil, fmt.Errorf("constant needs a dense value")
	}
	if err := d.Check(); err != nil {
		return nil, err
	}
	return one(d.Type)
}

func inferCast(in []Type, at Attrs) ([]Type, error) {
	return one(Type{at.DType("to"), in[0].Shape})
}

func inferCrossEntropy(in []Type, at Attrs) ([]Type, error) {
	logits, labels := in[0], in[1]
	if !logits.DType.IsFloat() || logits.Rank() < 1 {
		return nil, fmt.Errorf("cross_entropy logits must be floating point with a class dim, got %s", logits)
	}
	if !labels.DType.IsInt() || !labels.Shape.Equal(logits.Shape[:logits.Rank()-1]) {
		return nil, fmt.Errorf("cross_entropy labels must be integers of shape %s, got %s", logits.Shape[:logits.Rank()-1], labels)
	}
	if at.Str("reduction", "mean") == "none" {
		return one(Type{logits.DType, labels.Shape})
	}
	return one(Type{logits.DType, Shape{}})
}

func inferMSE(in []Type, at Attrs) ([]Type, error) {
	if !in[0].Equal(in[1]) || !in[0].DType.IsFloat() {
		return nil, fmt.Errorf("mse operands must be equal floating-point types, got %s and %s", in[0], in[1])
	}
	if at.Str("reduction", "mean") == "none" {
		return one(in[0])
	}
	return one(Type{in[0].DType, Shape{}})
}

func inferGatherScatterDim(grow bool) InferFunc {
	return func(in []Type, at Attrs) ([]Type, error) {
		dim, err := NormAxis(at.Int("dim", 0), in[0].Rank())
		if err != nil {
			return nil, err
		}
		parts := at.Int("parts", 0)
		if parts < 1 {
			return nil, fmt.Errorf("parts must be >= 1")
		}
		s := slices.Clone(in[0].Shape)
		if grow {
			s[dim] *= parts
		} else {
			if s[dim]%parts != 0 {
				return nil, fmt.Errorf("dim %d of %s does not split into %d parts", dim, in[0], parts)
			}
			s[dim] /= parts
		}
		return one(Type{in[0].DType, s})
	}
}

// inferAllToAll: split_dim shrinks by parts and concat_dim grows by it (the same dim: unchanged).
func inferAllToAll(in []Type, at Attrs) ([]Type, error) {
	split, err := NormAxis(at.Int("split_dim", 0), in[0].Rank())
	if err != nil {
		return nil, err
	}
	concat, err := NormAxis(at.Int("concat_dim", 0), in[0].Rank())
	if err != nil {
		return nil, err
	}
	parts := at.Int("parts", 0)
	if parts < 1 {
		return nil, fmt.Errorf("parts must be >= 1")
	}
	s := slices.Clone(in[0].Shape)
	if s[split]%parts != 0 {
		return nil, fmt.Errorf("dim %d of %s does not split into %d parts", split, in[0], parts)
	}
	s[split] /= parts
	s[concat] *= parts
	return one(Type{in[0].DType, s})
}

func inferNone(_ []Type, _ Attrs) ([]Type, error) { return nil, nil }

func inferAxisIndex(_ []Type, _ Attrs) ([]Type, error) { return one(T(I64)) }

func inferRecv(_ []Type, at Attrs) ([]Type, error) {
	t, _ := at.Get("type").(TypeAttr)
	return one(Type(t))
}

// Check verifies that the data length matches the type.
func (d *Dense) Check() error {
	if !d.Type.DType.Valid() {
		return fmt.Errorf("dense value has no dtype")
	}
	for _, x := range d.Type.Shape {
		if x < 0 {
			return fmt.Errorf("dense value has a negative dim")
		}
	}
	if d.Elided {
		return nil
	}
	want := d.Type.Bytes()
	if d.Splat {
		want = int64(d.Type.DType.Size())
	}
	if int64(len(d.Data)) != want {
		return fmt.Errorf("dense %s holds %d bytes, want %d", d.Type, len(d.Data), want)
	}
	return nil
}

func inferIota(_ []Type, at Attrs) ([]Type, error) {
	t := Type(at.Get("type").(TypeAttr))
	if t.DType == Bool {
		return nil, fmt.Errorf("iota of bool")
	}
	if _, err := NormAxis(at.Int("axis", 0), t.Rank()); err != nil {
		return nil, err
	}
	return one(t)
}
