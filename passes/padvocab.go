package passes

import (
	"fmt"
	"slices"

	"ppc.dev/ppc/ir"
)

// PadVocab pads a vocabulary that tp does not divide, as Megatron-LM does, so that the
// vocab-parallel embedding, head and cross-entropy can split it.
var PadVocab = &Pass{
	Name: "pad-vocab",
	Doc: "Pad @forward's vocabulary dims that the module's tp does not divide, as Megatron-LM's " +
		"--make-vocab-size-divisible-by does: a token table (a parameter gathered along dim 0 at a model " +
		"input's indices) and an output head (the parameter of the matmul, and a bias added to it, whose " +
		"result reaches a cross_entropy's classes through casts, reshapes and scalar factors) get their " +
		"vocabulary dim padded from V to the next multiple of multiple·tp, so that every tp rank holds " +
		"multiple·k rows. Only sizes tp does not divide are padded (tp = 1 never is; nor a vocabulary smaller " +
		"than tp, which is an error of shard-annotate), and parameters the " +
		"user sharded by hand are left alone. The padding is exact: the extra rows start at zero (the " +
		"runtime initialises and checkpoints only the first V, the parameter's `unpadded` shape), the " +
		"padded logits are replaced by the dtype's lowest finite value before the cross-entropy (a where on " +
		"an iota), so their softmax weight is exactly 0 and their gradient, and that of the extra rows, is " +
		"exactly 0: the loss, every gradient and every update equal the unpadded model's, and the extra rows " +
		"stay zero. Any other use of a padded value (logits returned as a model output, a table read " +
		"otherwise) reads a slice of its first V entries. Checkpoints, ppc export and ppc infer's outputs " +
		"hold the unpadded tensors, so padded and unpadded layouts resume each other. Runs before " +
		"shard-annotate; a module without a tp axis larger than 1, or already partitioned, is left alone.",
	Options: []Option{
		{Name: "multiple", Default: "128", Doc: "pad to a multiple of this times tp (Megatron's --make-vocab-size-divisible-by); 1 pads to the next multiple of tp"},
	},
	Run: runPadVocab,
}

// PaddedSize is the size Megatron pads a vocabulary of v to for tp ranks: unchanged when tp
// divides it, else the next multiple of multiple·tp.
func PaddedSize(v, tp, multiple int) int {
	if tp <= 1 || v%tp == 0 {
		return v
	}
	k := multiple * tp
	return (v + k - 1) / k * k
}

// padded is a value of the padded module whose dim holds a vocabulary of size (unpadded)
// padded to to.
type padded struct{ dim, size, to int }

func runPadVocab(m *ir.Module, opts Options) error {
	multiple, err := opts.Int("multiple")
	if err != nil || multiple < 1 {
		return fmt.Errorf("pad-vocab: option multiple=%q must be a positive integer", opts["multiple"])
	}
	f, tp := spmdForward(m)
	if f == nil || m.Attrs.Has(ir.AttrPartitioned) {
		return nil
	}
	argIdx := map[*ir.Value]int{}
	for i, a := range f.Args {
		argIdx[a] = i
	}
	// The parameters to pad, with their vocabulary dim.
	seeds := map[*ir.Value]int{}
	seed := func(v *ir.Value, dim int) {
		i, ok := argIdx[v]
		// A vocabulary smaller than tp is not padded: each rank would hold rows of padding
		// only (--tp 1000000 is a mistake to report, not a padding of 128 million rows).
		if !ok || dim >= v.Type.Rank() || v.Type.Shape[dim]%tp == 0 || v.Type.Shape[dim] < tp {
			return
		}
		if at := f.ArgAttrs[i]; !at.Has(ir.AttrParam) || at.Has(ir.AttrShard) || at.Has(ir.AttrUnpadded) {
			return
		}
		seeds[v] = dim
	}
	for _, op := range f.Ops {
		switch op.Name() {
		case "gather":
			// A token table: rows looked up at a model input's indices (positions made by iota
			// index a table Megatron keeps whole, and never reach a padded row anyway).
			table, idx := uncast(op.Operands[0]), op.Operands[1]
			axis, _ := ir.NormAxis(op.Attrs.Int("axis", 0), table.Type.Rank())
			if j, ok := argIdx[idx]; ok && axis == 0 && f.ArgAttrs[j].Has(ir.AttrInput) {
				seed(table, 0)
			}
		case "cross_entropy":
			headParams(op.Operands[0], seed)
		}
	}
	if len(seeds) == 0 {
		return nil
	}
	pads := map[*ir.Value]padded{} // values of the rewritten function
	sub := map[*ir.Value]*ir.Value{}
	for v, dim := range seeds {
		i := argIdx[v]
		size := v.Type.Shape[dim]
		t := ir.Type{DType: v.Type.DType, Shape: slices.Clone(v.Type.Shape)}
		t.Shape[dim] = PaddedSize(size, tp, multiple)
		nv := &ir.Value{Name: v.Name, Type: t, Index: v.Index}
		f.Args[i] = nv
		f.ArgAttrs[i] = f.ArgAttrs[i].Set(ir.AttrUnpadded, ir.Ints(v.Type.Shape...))
		sub[v] = nv
		pads[nv] = padded{dim, size, t.Shape[dim]}
	}
	var ops []*ir.Op
	b := ir.NewBuilder(f)
	b.Emit = func(o *ir.Op) { ops = append(ops, o) }
	get := func(v *ir.Value) *ir.Value {
		if s, ok := sub[v]; ok {
			return s
		}
		return v
	}
	// unpad reads the first `size` entries of a padded value.
	unpad := func(v *ir.Value) *ir.Value {
		p, ok := pads[v]
		if !ok {
			return v
		}
		return b.Op1("slice", ir.Attrs{{Name: "axes", Value: ir.Ints(p.dim)}, {Name: "ends", Value: ir.Ints(p.size)}, {Name: "starts", Value: ir.Ints(0)}}, v)
	}
	for _, op := range f.Ops {
		in := make([]*ir.Value, len(op.Operands))
		any := false
		for i, x := range op.Operands {
			in[i] = get(x)
			_, p := pads[in[i]]
			any = any || p
		}
		if !any {
			op.Operands = in
			ops = append(ops, op)
			continue
		}
		b.Loc, b.Stage, b.Slice, b.Phase = op.Loc, op.Stage, op.Slice, op.Phase
		attrs, out, ok := vocabRule(op, in, pads)
		if !ok {
			// Not a use that keeps the vocabulary apart: it reads the unpadded value, and its
			// results are the original's.
			for i := range in {
				in[i] = unpad(in[i])
			}
			op.Operands = in
			ops = append(ops, op)
			continue
		}
		if op.Name() == "cross_entropy" {
			in[0] = maskPadding(b, in[0], pads[in[0]])
		}
		res := b.Op(op.Name(), attrs, in...)
		if err := b.Err(); err != nil {
			return &ir.Error{Loc: op.Loc, Msg: fmt.Sprintf("pad-vocab: %s: %v", op.Name(), err)}
		}
		for i, r := range res {
			r.Name = op.Results[i].Name
			r.Def.Remat, r.Def.Shard = op.Remat, op.Shard
			sub[op.Results[i]] = r
			if i == 0 && out.to > 0 {
				pads[r] = out
			}
		}
	}
	b.Loc, b.Stage, b.Slice, b.Phase = ir.Loc{}, ir.NoStage, ir.NoSlice, ir.PhaseNone
	for i, r := range f.Results {
		f.Results[i] = unpad(get(r))
	}
	if err := b.Err(); err != nil {
		return err
	}
	f.Ops = ops
	return nil
}

// headParams walks back from a cross-entropy's logits to the head that makes them — through
// casts, reshapes that keep the class dim, scalar factors and an added bias — and seeds the
// matmul's weight at its output dim and the bias at its only dim.
func headParams(v *ir.Value, seed func(*ir.Value, int)) {
	classes := v.Type.Shape[v.Type.Rank()-1]
	carries := func(x *ir.Value) bool { return x.Type.Rank() >= 2 && x.Type.Shape[x.Type.Rank()-1] == classes }
	for v.Def != nil {
		op := v.Def
		switch op.Name() {
		case "cast", "reshape":
			if !carries(op.Operands[0]) {
				return
			}
			v = op.Operands[0]
		case "add", "sub", "mul", "div":
			var next *ir.Value
			for _, x := range op.Operands {
				switch u := uncast(x); {
				case carries(x):
					if next != nil {
						return
					}
					next = x
				case op.Name() == "add" && u.Def == nil && u.Type.Rank() == 1 && u.Type.Shape[0] == classes:
					seed(u, 0)
				case x.Type.NumElements() != 1:
					return
				}
			}
			if next == nil {
				return
			}
			v = next
		case "matmul":
			w, tb := uncast(op.Operands[1]), op.Attrs.Bool("transpose_b", false)
			if w.Def != nil && w.Def.Name() == "transpose" && slices.Equal(w.Def.Attrs.Ints("perm"), []int{1, 0}) {
				w, tb = uncast(w.Def.Operands[0]), !tb
			}
			if w.Def != nil || w.Type.Rank() != 2 {
				return
			}
			dim := 1
			if tb {
				dim = 0
			}
			if w.Type.Shape[dim] == classes {
				seed(w, dim)
			}
			return
		default:
			return
		}
	}
}

// vocabRule says how op computes on padded operands when it keeps the vocabulary apart: the
// attributes to rebuild it with and its result's padded dim (to = 0: the result is not
// padded). ok is false for any other use.
func vocabRule(op *ir.Op, in []*ir.Value, pads map[*ir.Value]padded) (ir.Attrs, padded, bool) {
	attrs := op.Attrs
	p0, pad0 := pads[in[0]]
	switch op.Name() {
	case "cast":
		return attrs, p0, true
	case "transpose":
		perm := attrs.Ints("perm")
		if k := slices.Index(perm, p0.dim); k >= 0 {
			p0.dim = k
			return attrs, p0, true
		}
	case "matmul":
		p1, pad1 := pads[in[1]]
		out := 1
		if attrs.Bool("transpose_b", false) {
			out = 0
		}
		if r := in[1].Type.Rank(); !pad0 && pad1 && r == 2 && p1.dim == out {
			p1.dim = op.Results[0].Type.Rank() - 1
			return attrs, p1, true
		}
	case "add", "sub", "mul", "div":
		rank := op.Results[0].Type.Rank()
		var out padded
		for _, x := range in {
			p, ok := pads[x]
			if !ok {
				continue
			}
			p.dim += rank - x.Type.Rank()
			if out.to > 0 && out != p {
				return nil, padded{}, false
			}
			out = p
		}
		for _, x := range in {
			if _, ok := pads[x]; ok {
				continue
			}
			// A value without the padded dim must broadcast along it.
			if d := out.dim - (rank - x.Type.Rank()); d >= 0 && x.Type.Shape[d] != 1 {
				return nil, padded{}, false
			}
		}
		return attrs, out, true
	case "reshape":
		shape := attrs.Ints("shape")
		if r := in[0].Type.Rank(); pad0 && p0.dim == r-1 && len(shape) > 0 && shape[len(shape)-1] == p0.size {
			shape[len(shape)-1] = p0.to
			p0.dim = len(shape) - 1
			return attrs.Set("shape", ir.Ints(shape...)), p0, true
		}
	case "gather":
		axis, _ := ir.NormAxis(attrs.Int("axis", 0), in[0].Type.Rank())
		if _, pad1 := pads[in[1]]; pad0 && !pad1 && axis == 0 && p0.dim == 0 {
			return attrs, padded{}, true // rows of the table: the indices never reach the padding
		}
	case "cross_entropy":
		if pad0 && p0.dim == in[0].Type.Rank()-1 {
			return attrs, padded{}, true
		}
	}
	return nil, padded{}, false
}

// maskPadding replaces a logits value's padded classes by the dtype's lowest finite value, so
// that their exponentials are exactly 0 and no gradient reaches them (where's gradient is 0
// where the condition is false). Finite rather than −inf: the vocab-parallel cross-entropy
// multiplies a rank's label logit by 0 where the label lies elsewhere.
func maskPadding(b *ir.Builder, logits *ir.Value, p padded) *ir.Value {
	cols := b.Op1("iota", ir.Attrs{{Name: "axis", Value: ir.Int(0)}, {Name: "type", Value: ir.TypeAttr(ir.T(ir.I64, p.to))}})
	real := b.Op1("less", nil, cols, b.Scalar(ir.I64, float64(p.size)))
	return b.Op1("where", nil, real, logits, b.Scalar(logits.Type.DType, -maxFinite(logits.Type.DType)))
}
