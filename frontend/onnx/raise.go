package onnx

import (
	"math"
	"slices"

	"ppc.dev/ppc/ir"
)

// Pattern raising: exporters decompose LayerNorm, GELU, Linear and attention into primitive ops; this
// rewrite over the imported @forward recognises the exact decompositions and replaces them by
// the IR's high-level ops (layer_norm, gelu, matmul with a bias operand), which sharding and
// recompute treat as units. A pattern is raised only when every constant matches within 1e-6
// and every intermediate value is used only inside the pattern; otherwise the decomposition
// stays. The raised op takes the location of the pattern's last op; the dead ops are removed
// by the importer's final dead-code pass.

type raiser struct {
	f    *ir.Func
	uses map[*ir.Value][]*ir.Op
	out  map[*ir.Value]bool // returned values
	dead map[*ir.Op]bool
	// at maps an op to the new ops to insert before it.
	at   map[*ir.Op][]*ir.Op
	repl map[*ir.Value]*ir.Value
}

func raise(f *ir.Func) {
	r := &raiser{f: f, uses: f.Uses(), out: map[*ir.Value]bool{}, dead: map[*ir.Op]bool{},
		at: map[*ir.Op][]*ir.Op{}, repl: map[*ir.Value]*ir.Value{}}
	for _, v := range f.Results {
		r.out[v] = true
	}
	for _, op := range f.Ops {
		if r.dead[op] {
			continue
		}
		switch op.Def.Name {
		case "reduce_mean":
			r.layerNorm(op)
		case "erf":
			r.geluErf(op)
		case "tanh":
			r.geluTanh(op)
		}
	}
	// MatMul + Add runs last so that it sees the rewritten graph; a transposed operand is
	// folded first, so that the bias meets the final matmul.
	for _, op := range f.Ops {
		if !r.dead[op] && op.Def.Name == "matmul" {
			r.matmulTranspose(op)
			r.matmulBias(op)
		}
	}
	// Attention last: its scores matmul has its transposes folded by then.
	for _, op := range f.Ops {
		if !r.dead[op] && op.Def.Name == "softmax" {
			r.attention(op)
		}
	}
	if len(r.at) == 0 {
		return
	}
	ops := make([]*ir.Op, 0, len(f.Ops))
	for _, op := range f.Ops {
		ops = append(ops, r.at[op]...)
		ops = append(ops, op)
	}
	f.Ops = ops
	f.Replace(r.repl)
}

// only reports whether v's only uses are the given ops (counting each operand slot) and it is
// not returned.
func (r *raiser) only(v *ir.Value, users ...*ir.Op) bool {
	if r.out[v] {
		return false
	}
	u := r.uses[v]
	if len(u) != len(users) {
		return false
	}
	for _, op := range u {
		if !slices.Contains(users, op) || r.dead[op] {
			return false
		}
	}
	return true
}

// single returns the only user op of v (nil when v has other uses or is returned).
func (r *raiser) single(v *ir.Value) *ir.Op {
	if r.out[v] || len(r.uses[v]) != 1 || r.dead[r.uses[v][0]] {
		return nil
	}
	return r.uses[v][0]
}

// scalarConst returns the value of a constant holding a single (or splat) value.
func scalarConst(v *ir.Value) (float64, bool) {
	d := constOf(v)
	if d == nil || d.Elided || (!d.Splat && d.Len() != 1) || d.Len() == 0 {
		return 0, false
	}
	return d.F64(0), true
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func isConst(v *ir.Value, want float64) bool {
	x, ok := scalarConst(v)
	return ok && near(x, want)
}

// other returns the operand of a binary op that is not v, or nil if v is not an operand.
func other(op *ir.Op, v *ir.Value) *ir.Value {
	switch {
	case op.Operands[0] == v:
		return op.Operands[1]
	case op.Operands[1] == v:
		return op.Operands[0]
	}
	return nil
}

// replace emits newOp before anchor, maps old to its result and marks the pattern dead.
func (r *raiser) replace(anchor *ir.Op, old *ir.Value, newOp *ir.Op, dead ...*ir.Op) {
	newOp.Loc, newOp.Stage, newOp.Phase = anchor.Loc, anchor.Stage, anchor.Phase
	r.at[anchor] = append(r.at[anchor], newOp)
	r.repl[old] = newOp.Results[0]
	newOp.Results[0].Name = old.Name
	for _, d := range dead {
		r.dead[d] = true
	}
}

func newOp(name string, attrs ir.Attrs, t ir.Type, operands ...*ir.Value) *ir.Op {
	return ir.NewOp(ir.MustLookup(name), operands, attrs.Sorted(), []ir.Type{t})
}

// layerNorm matches, from the first ReduceMean:
//
//	m = reduce_mean(x, trailing axes, keepdims); d = x − m; p = d² (pow 2 or d·d)
//	v = reduce_mean(p, same axes, keepdims); e = v + eps; s = sqrt(e); n = d / s
//	[y = n · gamma] [z = y + beta]
func (r *raiser) layerNorm(m *ir.Op) {
	x := m.Operands[0]
	rank := x.Type.Rank()
	axes := m.Attrs.Ints("axes")
	if !x.Type.DType.IsFloat() || !m.Attrs.Bool("keepdims", false) || len(axes) == 0 || len(axes) > rank {
		return
	}
	first := rank - len(axes)
	for i, a := range axes {
		if n, err := ir.NormAxis(a, rank); err != nil || n != first+i {
			return
		}
	}
	sub := r.single(m.Results[0])
	if sub == nil || sub.Def.Name != "sub" || sub.Operands[0] != x || sub.Operands[1] != m.Results[0] {
		return
	}
	d := sub.Results[0]
	du := r.uses[d]
	if r.out[d] || len(du) < 2 || len(du) > 3 {
		return
	}
	var sq, div *ir.Op
	for _, u := range du {
		switch {
		case u.Def.Name == "pow" && u.Operands[0] == d && isConst(u.Operands[1], 2):
			sq = u
		case u.Def.Name == "mul" && u.Operands[0] == d && u.Operands[1] == d:
			sq = u
		case u.Def.Name == "div" && u.Operands[0] == d:
			div = u
		}
	}
	want := 2
	if sq != nil && sq.Def.Name == "mul" {
		want = 3
	}
	if sq == nil || div == nil || len(du) != want {
		return
	}
	v := r.single(sq.Results[0])
	if v == nil || v.Def.Name != "reduce_mean" || !v.Attrs.Bool("keepdims", false) || !slices.Equal(normAxes(v.Attrs.Ints("axes"), rank), normAxes(axes, rank)) {
		return
	}
	add := r.single(v.Results[0])
	if add == nil || add.Def.Name != "add" {
		return
	}
	eps, ok := scalarConst(other(add, v.Results[0]))
	if !ok || eps < 0 {
		return
	}
	sqrt := r.single(add.Results[0])
	if sqrt == nil || sqrt.Def.Name != "sqrt" || r.single(sqrt.Results[0]) != div || div.Operands[1] != sqrt.Results[0] {
		return
	}
	if !div.Results[0].Type.Equal(x.Type) {
		return
	}
	normDims := x.Type.Shape[first:]
	dead := []*ir.Op{m, sub, sq, v, add, sqrt, div}
	operands := []*ir.Value{x}
	last, result := div, div.Results[0]
	// Optional affine part: · gamma then + beta, each a value of exactly the normalised dims.
	if mul := r.single(result); mul != nil && mul.Def.Name == "mul" {
		if g := other(mul, result); g != nil && g.Type.DType == x.Type.DType && g.Type.Shape.Equal(normDims) && mul.Results[0].Type.Equal(x.Type) {
			operands = append(operands, g)
			dead = append(dead, mul)
			last, result = mul, mul.Results[0]
			if add2 := r.single(result); add2 != nil && add2.Def.Name == "add" {
				if bt := other(add2, result); bt != nil && bt.Type.DType == x.Type.DType && bt.Type.Shape.Equal(normDims) && add2.Results[0].Type.Equal(x.Type) {
					operands = append(operands, bt)
					dead = append(dead, add2)
					last, result = add2, add2.Results[0]
				}
			}
		}
	}
	at := ir.Attrs{{Name: "eps", Value: ir.Float(eps)}}
	if first != rank-1 {
		at = append(at, ir.NamedAttr{Name: "axis", Value: ir.Int(first)})
	}
	r.replace(last, result, newOp("layer_norm", at, x.Type, operands...), dead...)
}

func normAxes(axes []int, rank int) []int {
	out := make([]int, len(axes))
	for i, a := range axes {
		n, err := ir.NormAxis(a, rank)
		if err != nil {
			return nil
		}
		out[i] = n
	}
	slices.Sort(out)
	return out
}

// halfProduct matches x · 0.5 · u in the association orders exporters produce, starting from
// u's single use: (x·u)·0.5, (u·x)·0.5, (u·0.5)·x, (x·0.5)·u. It returns the final op and
// the ops consumed.
func (r *raiser) halfProduct(x, u *ir.Value) (*ir.Op, []*ir.Op) {
	m1 := r.single(u)
	if m1 == nil || m1.Def.Name != "mul" {
		return nil, nil
	}
	w := other(m1, u)
	switch {
	case w == x:
		m2 := r.single(m1.Results[0])
		if m2 != nil && m2.Def.Name == "mul" && isConst(other(m2, m1.Results[0]), 0.5) {
			return m2, []*ir.Op{m1, m2}
		}
	case isConst(w, 0.5):
		m2 := r.single(m1.Results[0])
		if m2 != nil && m2.Def.Name == "mul" && other(m2, m1.Results[0]) == x {
			return m2, []*ir.Op{m1, m2}
		}
	case w != nil && w.Def != nil && w.Def.Def.Name == "mul" && r.only(w, m1):
		h := w.Def
		if y := other(h, x); y != nil && isConst(y, 0.5) {
			return m1, []*ir.Op{h, m1}
		}
	}
	return nil, nil
}

// onePlus matches add(v, 1) (either order) as v's single use.
func (r *raiser) onePlus(v *ir.Value) *ir.Op {
	a := r.single(v)
	if a == nil || a.Def.Name != "add" || !isConst(other(a, v), 1) {
		return nil
	}
	return a
}

// geluErf matches x·0.5·(1 + erf(x/√2)) with x/√2 written as div(x, √2) or mul(x, 1/√2).
func (r *raiser) geluErf(e *ir.Op) {
	t := e.Operands[0]
	if t.Def == nil || !r.only(t, e) {
		return
	}
	td := t.Def
	var x *ir.Value
	switch {
	case td.Def.Name == "div" && isConst(td.Operands[1], math.Sqrt2):
		x = td.Operands[0]
	case td.Def.Name == "mul" && isConst(td.Operands[1], 1/math.Sqrt2):
		x = td.Operands[0]
	case td.Def.Name == "mul" && isConst(td.Operands[0], 1/math.Sqrt2):
		x = td.Operands[1]
	default:
		return
	}
	if !x.Type.DType.IsFloat() || !e.Results[0].Type.Equal(x.Type) {
		return
	}
	a := r.onePlus(e.Results[0])
	if a == nil {
		return
	}
	last, ops := r.halfProduct(x, a.Results[0])
	if last == nil || !last.Results[0].Type.Equal(x.Type) {
		return
	}
	r.replace(last, last.Results[0], newOp("gelu", nil, x.Type, x), append([]*ir.Op{td, e, a}, ops...)...)
}

// geluTanh matches 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) with x³ as pow(x, 3) or
// x·(x·x) and the products in either operand order.
func (r *raiser) geluTanh(th *ir.Op) {
	s := th.Operands[0]
	if s.Def == nil || !r.only(s, th) || s.Def.Def.Name != "mul" {
		return
	}
	sm := s.Def
	var inner *ir.Value
	switch {
	case isConst(sm.Operands[1], math.Sqrt(2/math.Pi)):
		inner = sm.Operands[0]
	case isConst(sm.Operands[0], math.Sqrt(2/math.Pi)):
		inner = sm.Operands[1]
	default:
		return
	}
	if inner.Def == nil || inner.Def.Def.Name != "add" || !r.only(inner, sm) {
		return
	}
	add := inner.Def
	// One operand is x, the other 0.044715·x³.
	for k := 0; k < 2; k++ {
		x, q := add.Operands[k], add.Operands[1-k]
		if q.Def == nil || q.Def.Def.Name != "mul" || !r.only(q, add) {
			continue
		}
		qm := q.Def
		var cube *ir.Value
		switch {
		case isConst(qm.Operands[1], 0.044715):
			cube = qm.Operands[0]
		case isConst(qm.Operands[0], 0.044715):
			cube = qm.Operands[1]
		default:
			continue
		}
		cubeOps, ok := r.cubeOf(cube, x, qm)
		if !ok || !x.Type.DType.IsFloat() || !th.Results[0].Type.Equal(x.Type) {
			continue
		}
		a := r.onePlus(th.Results[0])
		if a == nil {
			return
		}
		last, ops := r.halfProduct(x, a.Results[0])
		if last == nil || !last.Results[0].Type.Equal(x.Type) {
			return
		}
		dead := append(append([]*ir.Op{qm, add, sm, th, a}, cubeOps...), ops...)
		r.replace(last, last.Results[0], newOp("gelu", ir.Attrs{{Name: "approximate", Value: ir.Ident("tanh")}}, x.Type, x), dead...)
		return
	}
}

// cubeOf matches c = x³ (pow(x, 3), x·(x·x) or (x·x)·x) used only by user.
func (r *raiser) cubeOf(c, x *ir.Value, user *ir.Op) ([]*ir.Op, bool) {
	if c.Def == nil || !r.only(c, user) {
		return nil, false
	}
	op := c.Def
	if op.Def.Name == "pow" && op.Operands[0] == x && isConst(op.Operands[1], 3) {
		return []*ir.Op{op}, true
	}
	if op.Def.Name != "mul" {
		return nil, false
	}
	sq := other(op, x)
	if sq == nil || sq.Def == nil || sq.Def.Def.Name != "mul" || sq.Def.Operands[0] != x || sq.Def.Operands[1] != x || !r.only(sq, op) {
		return nil, false
	}
	return []*ir.Op{op, sq.Def}, true
}

// matmulBias folds add(matmul(a, b), bias) into matmul(a, b, bias) when the bias is 1-D over
// the result's last dim and the product is used only by the add.
func (r *raiser) matmulBias(mm *ir.Op) {
	if len(mm.Operands) != 2 {
		return
	}
	y := mm.Results[0]
	add := r.single(y)
	if add == nil || add.Def.Name != "add" {
		return
	}
	bias := other(add, y)
	if bias == nil || bias == y || bias.Type.DType != y.Type.DType || y.Type.Rank() == 0 ||
		!bias.Type.Shape.Equal(ir.Shape{y.Type.Shape[y.Type.Rank()-1]}) || !add.Results[0].Type.Equal(y.Type) {
		return
	}
	r.replace(add, add.Results[0], newOp("matmul", mm.Attrs, y.Type, mm.Operands[0], mm.Operands[1], bias), mm, add)
}

// matmulTranspose folds a Transpose that swaps the last two dims of a MatMul operand into
// the matmul's transpose_a / transpose_b flag, when the matmul is the transpose's only use.
// Exporters write a Linear without constant folding (training-mode exports) as
// MatMul(x, Transpose(W)) with W in PyTorch's [out, in] layout, a tied output head as
// MatMul(x, Transpose(wte)), and attention scores as MatMul(q, Transpose(k)). Folded, the
// weight is the matmul's own operand again — which is what shard-annotate recognises as a
// column- or row-parallel weight (it does not look through ops) — and no transposed copy is
// materialised. It rewrites the matmul in place; the transpose is left to dce.
func (r *raiser) matmulTranspose(mm *ir.Op) {
	for i, flag := range []string{"transpose_a", "transpose_b"} {
		t := mm.Operands[i]
		if t.Def == nil || t.Def.Def.Name != "transpose" || r.dead[t.Def] || !r.only(t, mm) || !swapsLastTwo(t.Def.Attrs.Ints("perm")) {
			continue
		}
		src := t.Def.Operands[0]
		mm.Operands[i] = src
		if mm.Attrs.Bool(flag, false) {
			mm.Attrs = mm.Attrs.Delete(flag)
		} else {
			mm.Attrs = mm.Attrs.Set(flag, ir.BoolAttr(true))
		}
		r.dead[t.Def] = true
		r.uses[t] = nil
		r.uses[src] = append(r.uses[src], mm)
	}
}

// swapsLastTwo reports whether perm exchanges the last two dims and keeps the others.
func swapsLastTwo(perm []int) bool {
	n := len(perm)
	if n < 2 || perm[n-2] != n-1 || perm[n-1] != n-2 {
		return false
	}
	for k := range n - 2 {
		if perm[k] != k {
			return false
		}
	}
	return true
}

// attention matches torch.onnx.export's causal attention and raises it to the fused op:
//
//	s = matmul(q, kᵀ) (transpose_b, or k's transpose to [..., D, S] whose perm is rewritten to
//	give k); s = s / c or s · c (the scale, a scalar constant); s = where(causal, s, neg) or
//	s + bias; p = softmax(s, last axis); o = matmul(p, v)
//
// The mask must be a constant that hides exactly the keys after each query — a bool
// condition true for j ≤ i, or an additive bias 0 for j ≤ i and at most −1e4 beyond, with
// neg at most −1e4 — so that the fused op's causal rule replaces it (no s² constant stays,
// and token slicing sees a causal attention). A chain without a mask is raised with causal
// false. Anything else keeps the chain.
func (r *raiser) attention(sm *ir.Op) {
	x := sm.Operands[0]
	rank := x.Type.Rank()
	if rank < 3 || sm.Attrs.Int("axis", -1) != -1 && sm.Attrs.Int("axis", -1) != rank-1 || !x.Type.DType.IsFloat() {
		return
	}
	pv := r.single(sm.Results[0])
	if pv == nil || pv.Def.Name != "matmul" || len(pv.Operands) != 2 || pv.Operands[0] != sm.Results[0] || len(pv.Attrs) != 0 {
		return
	}
	dead := []*ir.Op{sm, pv}
	s, causal := x, false
	if d := s.Def; d != nil && !r.dead[d] && r.only(s, sm) {
		switch d.Def.Name {
		case "where":
			neg, ok := scalarConst(d.Operands[2])
			if ok && neg <= -1e4 && causalConst(d.Operands[0], rank, func(v float64, hidden bool) bool { return (v != 0) != hidden }) {
				s, causal, dead = d.Operands[1], true, append(dead, d)
			}
		case "add":
			for i := range 2 {
				if causalConst(d.Operands[1-i], rank, func(v float64, hidden bool) bool { return hidden && v <= -1e4 || !hidden && v == 0 }) {
					s, causal, dead = d.Operands[i], true, append(dead, d)
					break
				}
			}
		}
	}
	if s == x && x.Def != nil && (x.Def.Def.Name == "where" || x.Def.Def.Name == "add") {
		return // a mask that is not the causal one
	}
	scale := 1.0
	if d := s.Def; d != nil && !r.dead[d] && (s == x || r.only(s, dead[len(dead)-1])) && (d.Def.Name == "div" || d.Def.Name == "mul") {
		if c, ok := scalarConst(d.Operands[1]); ok && c != 0 {
			scale = c
			if d.Def.Name == "div" {
				scale = 1 / c
			}
			s, dead = d.Operands[0], append(dead, d)
		}
	}
	mm := s.Def
	if mm == nil || r.dead[mm] || mm.Def.Name != "matmul" || len(mm.Operands) != 2 || mm.Attrs.Bool("transpose_a", false) || !r.only(s, dead[len(dead)-1]) {
		return
	}
	q, k, v := mm.Operands[0], mm.Operands[1], pv.Operands[1]
	var kt *ir.Op // k's transpose, whose perm is rewritten to give k itself
	if !mm.Attrs.Bool("transpose_b", false) {
		kt = k.Def
		if kt == nil || r.dead[kt] || kt.Def.Name != "transpose" || !r.only(k, mm) {
			return
		}
	}
	kShape := k.Type.Shape
	if kt != nil {
		kShape = slices.Clone(kShape)
		kShape[rank-2], kShape[rank-1] = kShape[rank-1], kShape[rank-2]
	}
	kType := ir.Type{DType: k.Type.DType, Shape: kShape}
	if _, err := ir.AttentionShape(q.Type, kType, v.Type, nil); err != nil {
		return
	}
	if kt != nil {
		perm := slices.Clone(kt.Attrs.Ints("perm"))
		perm[rank-2], perm[rank-1] = perm[rank-1], perm[rank-2]
		kt.Attrs = kt.Attrs.Set("perm", ir.Ints(perm...))
		k.Type = kType
	}
	at := ir.Attrs{{Name: "scale", Value: ir.Float(scale)}}
	if causal {
		at = append(at, ir.NamedAttr{Name: "causal", Value: ir.BoolAttr(true)})
	}
	lse := ir.Type{DType: ir.AttentionLSEType(q.Type.DType), Shape: append(slices.Clone(q.Type.Shape[:rank-1]), 1)}
	op := ir.NewOp(ir.MustLookup("attention"), []*ir.Value{q, k, v}, at.Sorted(), []ir.Type{pv.Results[0].Type, lse})
	r.replace(pv, pv.Results[0], op, append(dead, mm)...)
}

// causalConst reports whether v is a constant over the last two dims of a rank-r result
// (its other dims 1) of a square [S, S] whose element at (i, j) fits ok(value, j > i).
func causalConst(v *ir.Value, r int, ok func(v float64, hidden bool) bool) bool {
	d := constOf(v)
	sh := v.Type.Shape
	if d == nil || d.Elided || len(sh) < 2 || len(sh) > r || sh[len(sh)-1] != sh[len(sh)-2] || d.Len() != sh.NumElements() && !d.Splat {
		return false
	}
	for _, n := range sh[:len(sh)-2] {
		if n != 1 {
			return false
		}
	}
	n := sh[len(sh)-1]
	if d.Splat || n > 4096 {
		return false
	}
	for i := range n {
		for j := range n {
			if !ok(d.F64(i*n+j), j > i) {
				return false
			}
		}
	}
	return true
}
