package ir

import (
	"fmt"
	"slices"
)

// maxVerifyErrors bounds how many problems one Verify call reports.
const maxVerifyErrors = 10

// DefaultMeshAxes are the axis names a sharding may use when the module declares no mesh.
var DefaultMeshAxes = []string{"dp", "pp", "tp", "cp", "ep"}

// Verify checks a module against the op table and the IR's structural rules: unique function
// names; every operand defined earlier in its own function (SSA dominance in a single block);
// operand counts and attribute names and kinds; declared result types equal to the types the
// op table infers (an unknown `?` type is accepted and left for shape-infer); well-formed
// annotations (stage, phase, shardings whose rank matches and whose axes are mesh axes); the
// values of the model convention's attributes (initialisers, the micro-batch count); and,
// once the module carries `comm_explicit` (set by send/recv insertion), that no value crosses a
// pipeline stage boundary except through a send/recv pair. It returns an ErrorList.
func Verify(m *Module) error {
	v := verifier{m: m, axes: meshSizes(m)}
	if m.Attrs.Has(AttrPartitioned) {
		// Shapes are local: a sharding relates them to logical shapes that are not in the IR.
		v.axes = unknownSizes(v.axes)
	}
	v.module()
	if len(v.errs) == 0 {
		return nil
	}
	return v.errs
}

type verifier struct {
	m    *Module
	errs ErrorList
	axes map[string]int // mesh axis sizes (0: unknown)
}

func (v *verifier) errorf(loc Loc, format string, args ...any) {
	if len(v.errs) < maxVerifyErrors {
		v.errs = append(v.errs, ErrorAt(v.m.Source, loc, format, args...))
	}
}

// opErrorf reports a problem with an op; when the op has no source position the message
// quotes the op so the reader can find it in a dump.
func (v *verifier) opErrorf(f *Func, op *Op, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if op.Loc.Line == 0 {
		msg = fmt.Sprintf("%s\n    in @%s: %s", msg, f.Name, op.String())
	}
	v.errorf(op.Loc, "%s", msg)
}

func (v *verifier) module() {
	m := v.m
	if mesh := m.Attrs.Get("mesh"); mesh != nil {
		d, ok := mesh.(Dict)
		if !ok {
			v.errorf(Loc{}, "module attribute mesh must be a dictionary of axis sizes, got %s", AttrString(mesh))
		}
		for _, a := range d {
			if n, ok := a.Value.(Int); !ok || n < 1 {
				v.errorf(Loc{}, "mesh axis %s must have a positive size, got %s", a.Name, AttrString(a.Value))
			}
		}
	}
	if _, err := CheckModuleAttrs(m.Attrs); err != nil {
		v.errorf(Loc{}, "%v", err)
	}
	names := map[string]bool{}
	for _, f := range m.Funcs {
		if f.Name == "" {
			v.errorf(f.Loc, "function without a name")
		}
		if names[f.Name] {
			v.errorf(f.Loc, "function @%s defined twice", f.Name)
		}
		names[f.Name] = true
		v.fn(f, m.Attrs.Has("comm_explicit"))
	}
}

func (v *verifier) fn(f *Func, commExplicit bool) {
	if len(f.ArgAttrs) != len(f.Args) || len(f.ResultAttrs) != len(f.Results) {
		v.errorf(f.Loc, "@%s: argument or result attribute lists do not match the signature", f.Name)
		return
	}
	defined := make(map[*Value]bool, len(f.Args)+len(f.Ops))
	for i, a := range f.Args {
		switch {
		case a == nil:
			v.errorf(f.Loc, "@%s: argument %d is nil", f.Name, i)
			return
		case a.Def != nil || a.Index != i:
			v.errorf(f.Loc, "@%s: argument %%%s is not wired as argument %d", f.Name, a.Name, i)
		case !a.Type.Known():
			v.errorf(f.Loc, "@%s: argument %%%s has no type", f.Name, a.Name)
		case defined[a]:
			v.errorf(f.Loc, "@%s: argument %%%s listed twice", f.Name, a.Name)
		}
		if _, err := CheckArgAttrs(f.ArgAttrs[i]); err != nil {
			v.errorf(f.Loc, "@%s: argument %%%s: %v", f.Name, a.Name, err)
		}
		if u := f.ArgAttrs[i].Get(AttrUnpadded); u != nil {
			// The user-visible shape of a padded tensor: one positive size per dim (the
			// argument's own type may be a shard's, so it is not compared).
			dims := f.ArgAttrs[i].Ints(AttrUnpadded)
			if dims == nil || len(dims) != a.Type.Rank() || slices.ContainsFunc(dims, func(d int) bool { return d < 1 }) {
				v.errorf(f.Loc, "@%s: argument %%%s: attribute %s must list one positive size per dim of %s, got %s", f.Name, a.Name, AttrUnpadded, a.Type, AttrString(u))
			}
		}
		if r := f.ArgAttrs[i].Get(AttrZeroRows); r != nil {
			// A padded ZeRO block: ceil(rows/dp) rows, split over dp on dim 0.
			rows, ok := r.(Int)
			s, _ := ArgSharding(f, i)
			dp := v.axes["dp"]
			switch {
			case !ok || rows < 1:
				v.errorf(f.Loc, "@%s: argument %%%s: attribute %s must be a positive integer, got %s", f.Name, a.Name, AttrZeroRows, AttrString(r))
			case s == nil || a.Type.Rank() == 0 || len(s.Dims) == 0 || len(s.Dims[0]) == 0 || s.Dims[0][len(s.Dims[0])-1] != "dp":
				v.errorf(f.Loc, "@%s: argument %%%s: attribute %s needs a block split over dp on dim 0 (shard [[…, dp], …])", f.Name, a.Name, AttrZeroRows)
			case dp > 0 && a.Type.Shape[0] != (int(rows)+dp-1)/dp:
				v.errorf(f.Loc, "@%s: argument %%%s: %s: a block of %d rows split over dp %d has ceil(%d/%d) = %d rows", f.Name, a.Name, a.Type, rows, dp, rows, dp, (int(rows)+dp-1)/dp)
			}
		}
		defined[a] = true
		if s, err := ArgSharding(f, i); err != nil {
			v.errorf(f.Loc, "@%s: argument %%%s: %v", f.Name, a.Name, err)
		} else if s != nil {
			sizes := v.axes
			if s.Uses("dp") {
				// A split over dp is ZeRO's optimizer-state block, whose type is the block's
				// (dp never splits a value inside a function): nothing to divide.
				sizes = unknownSizes(v.axes)
			}
			if err := s.Check(a.Type, sizes); err != nil {
				v.errorf(f.Loc, "@%s: argument %%%s: %v", f.Name, a.Name, err)
			}
		}
	}
	in := make([]Type, 0, 8)
	for _, op := range f.Ops {
		if op == nil || op.Def == nil {
			v.errorf(f.Loc, "@%s: op without a definition", f.Name)
			continue
		}
		def := op.Def
		if n := len(op.Operands); n < def.MinOperands || def.MaxOperands >= 0 && n > def.MaxOperands {
			v.opErrorf(f, op, "op %s takes %s operands, got %d", def.Name, def.OperandCountString(), n)
			continue
		}
		ok := true
		in = in[:0]
		allKnown := true
		for i, x := range op.Operands {
			switch {
			case x == nil:
				v.opErrorf(f, op, "operand %d of %s is nil", i, def.Name)
				ok = false
			case !defined[x]:
				v.opErrorf(f, op, "operand %d of %s (%s) is not defined before its use in @%s", i, def.Name, valueName(x), f.Name)
				ok = false
			default:
				in = append(in, x.Type)
				allKnown = allKnown && x.Type.Known()
			}
		}
		if _, err := def.CheckAttrs(op.Attrs); err != nil {
			v.opErrorf(f, op, "%v", err)
			ok = false
		}
		for i, r := range op.Results {
			if r == nil || r.Def != op || r.Index != i {
				v.opErrorf(f, op, "result %d of %s is not wired to its op", i, def.Name)
				ok = false
			} else if defined[r] {
				v.opErrorf(f, op, "value %s defined twice", valueName(r))
				ok = false
			}
		}
		if ok && allKnown {
			v.checkTypes(f, op, in)
		}
		if def.Has(State) {
			v.checkState(f, op)
		}
		v.checkAnnotations(f, op, commExplicit)
		for _, r := range op.Results {
			if r != nil {
				defined[r] = true
			}
		}
	}
	for i, r := range f.Results {
		if r == nil || !defined[r] {
			v.errorf(f.Loc, "@%s: returned value %d is not defined in the function", f.Name, i)
		}
	}
}

func (v *verifier) checkTypes(f *Func, op *Op, in []Type) {
	if op.Def.Has(Calls) {
		v.checkCall(f, op, in)
		return
	}
	want, err := op.Def.Infer(in, op.Attrs)
	if err != nil {
		v.opErrorf(f, op, "%s: %v", op.Def.Name, err)
		return
	}
	if len(want) != len(op.Results) {
		v.opErrorf(f, op, "op %s produces %d results, but %d are declared", op.Def.Name, len(want), len(op.Results))
		return
	}
	for i, r := range op.Results {
		if r.Type.Known() && !r.Type.Equal(want[i]) {
			v.opErrorf(f, op, "%s: result %d declared %s, but the operands give %s", op.Def.Name, i, r.Type, want[i])
		}
	}
}

func (v *verifier) checkAnnotations(f *Func, op *Op, commExplicit bool) {
	if op.Stage < NoStage {
		v.opErrorf(f, op, "bad stage %d", op.Stage)
	}
	if op.Phase > Opt {
		v.opErrorf(f, op, "bad phase %d", op.Phase)
	}
	if s := op.Shard; s != nil {
		for _, r := range op.Results {
			if r == nil {
				continue
			}
			if err := s.Check(r.Type, v.axes); err != nil {
				v.opErrorf(f, op, "%s: %v", valueName(r), err)
				break
			}
		}
		if len(op.Results) == 0 {
			if err := s.Check(Type{}, v.axes); err != nil {
				v.opErrorf(f, op, "%v", err)
			}
		}
	}
	if commExplicit && op.Stage != NoStage {
		for _, x := range op.Operands {
			if x != nil && x.Def != nil && x.Def.Stage != NoStage && x.Def.Stage != op.Stage {
				v.opErrorf(f, op, "value %s crosses from stage %d to stage %d without a send/recv pair", valueName(x), x.Def.Stage, op.Stage)
			}
		}
	}
}

func valueName(x *Value) string {
	if x.Name != "" {
		return "%" + x.Name
	}
	if x.Def != nil && x.Def.Def != nil {
		return fmt.Sprintf("result %d of %s", x.Index, x.Def.Def.Name)
	}
	return fmt.Sprintf("argument %d", x.Index)
}

// checkState checks an op on a rank's named state: it is in a rank program, and the names it
// lists are given, once each.
func (v *verifier) checkState(f *Func, op *Op) {
	if !f.Attrs.Has("rank") {
		v.opErrorf(f, op, "%s acts on a rank's gradients and parameters: it belongs in a rank program (a function with attribute rank), not in @%s", op.Def.Name, f.Name)
	}
	for _, a := range op.Attrs {
		spec := op.Def.AttrSpec(a.Name)
		if spec == nil {
			continue
		}
		var names []string
		switch spec.Kind {
		case KindStrings:
			l, _ := a.Value.(List)
			if len(l) == 0 {
				v.opErrorf(f, op, "%s: %s lists nothing", op.Def.Name, a.Name)
			}
			for _, e := range l {
				s, _ := e.(String)
				names = append(names, string(s))
			}
		case KindString:
			s, _ := a.Value.(String)
			names = []string{string(s)}
		}
		seen := map[string]bool{}
		for _, n := range names {
			switch {
			case n == "":
				v.opErrorf(f, op, "%s: %s names an empty gradient or parameter", op.Def.Name, a.Name)
			case seen[n]:
				v.opErrorf(f, op, "%s: %s names %q twice", op.Def.Name, a.Name, n)
			}
			seen[n] = true
		}
	}
	if op.Def.Name == "grad_sum" {
		grad := op.Attrs.Str("grad", "")
		for _, p := range op.Attrs.Strings("parts") {
			if p == grad {
				v.opErrorf(f, op, "grad_sum: %q is one of its own parts", grad)
			}
		}
	}
}

// checkCall checks a run of another function: the callee exists, and the operands and
// results match its arguments and results marked port, in order.
func (v *verifier) checkCall(f *Func, op *Op, in []Type) {
	name := op.Attrs.Str("func", "")
	callee := v.m.Func(name)
	if callee == nil || callee == f {
		v.opErrorf(f, op, "%s: no function @%s to run", op.Def.Name, name)
		return
	}
	var args, results []Type
	for i, a := range callee.Args {
		if callee.ArgAttrs[i].Has("port") {
			args = append(args, a.Type)
		}
	}
	for i, r := range callee.Results {
		if callee.ResultAttrs[i].Has("port") {
			results = append(results, r.Type)
		}
	}
	if len(in) != len(args) || len(op.Results) != len(results) {
		v.opErrorf(f, op, "%s @%s: %d operands and %d results, but @%s takes %d ports and returns %d", op.Def.Name, name, len(in), len(op.Results), name, len(args), len(results))
		return
	}
	for i, t := range in {
		if !t.Equal(args[i]) {
			v.opErrorf(f, op, "%s @%s: operand %d is %s, the port takes %s", op.Def.Name, name, i, t, args[i])
		}
	}
	for i, r := range op.Results {
		if r.Type.Known() && !r.Type.Equal(results[i]) {
			v.opErrorf(f, op, "%s @%s: result %d declared %s, the port gives %s", op.Def.Name, name, i, r.Type, results[i])
		}
	}
}
