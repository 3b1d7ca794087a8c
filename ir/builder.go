package ir

import (
	"errors"
	"fmt"
)

// Builder appends ops to a function. Its first error is sticky (as in TensorFlow's Go
// op.Scope): after a failure every later call returns a poison value and adds nothing, so
// importers build whole graphs without checking each step and ask Err once at the end.
//
// New ops get the builder's current Loc, Stage, Slice and Phase; frontends set Loc per source
// construct (DSL position or ONNX node) so that later diagnostics point at the model.
type Builder struct {
	Fn    *Func
	Loc   Loc
	Stage int
	Slice int // token slice (NoSlice outside token-sliced modules)
	Phase Phase
	// Emit receives each new op; by default it appends to Fn.Ops. Passes that rebuild an op
	// list point it at their own slice.
	Emit func(*Op)
	err  error
}

// NewBuilder returns a builder appending to fn.
func NewBuilder(fn *Func) *Builder {
	b := &Builder{Fn: fn, Stage: NoStage, Slice: NoSlice}
	b.Emit = func(op *Op) { b.Fn.Ops = append(b.Fn.Ops, op) }
	return b
}

// Err returns the first error, or nil.
func (b *Builder) Err() error { return b.err }

// Fail records err (with the current location) unless an error is already recorded.
func (b *Builder) Fail(err error) {
	if b.err == nil && err != nil {
		var e *Error
		if errors.As(err, &e) || !b.Loc.Known() {
			b.err = err
			return
		}
		b.err = &Error{Loc: b.Loc, Msg: err.Error()}
	}
}

// Failf records a formatted error at the current location.
func (b *Builder) Failf(format string, args ...any) { b.Fail(fmt.Errorf(format, args...)) }

// poison stands in for results after an error; its type is unknown.
var poison = &Value{Name: "poison"}

// Op builds an op, inferring its result types from the op table.
func (b *Builder) Op(name string, attrs Attrs, operands ...*Value) []*Value {
	if b.err != nil {
		return b.poisons(name)
	}
	def := Lookup(name)
	if def == nil {
		b.Failf("unknown op %q", name)
		return []*Value{poison}
	}
	if n := len(operands); n < def.MinOperands || def.MaxOperands >= 0 && n > def.MaxOperands {
		b.Failf("op %s takes %s operands, got %d", name, def.OperandCountString(), n)
		return b.poisons(name)
	}
	attrs = attrs.Sorted()
	if _, err := def.CheckAttrs(attrs); err != nil {
		b.Fail(err)
		return b.poisons(name)
	}
	in := make([]Type, len(operands))
	for i, x := range operands {
		if x == nil || x == poison {
			b.Failf("op %s: operand %d is missing", name, i)
			return b.poisons(name)
		}
		in[i] = x.Type
	}
	types, err := def.Infer(in, attrs)
	if err != nil {
		b.Failf("%s: %v", name, err)
		return b.poisons(name)
	}
	op := NewOp(def, operands, attrs, types)
	op.Loc, op.Stage, op.Slice, op.Phase = b.Loc, b.Stage, b.Slice, b.Phase
	b.Emit(op)
	return op.Results
}

func (b *Builder) poisons(name string) []*Value {
	n := 1
	if name == "send" {
		n = 0
	}
	out := make([]*Value, n)
	for i := range out {
		out[i] = poison
	}
	return out
}

// Op1 builds a single-result op and returns its result.
func (b *Builder) Op1(name string, attrs Attrs, operands ...*Value) *Value {
	rs := b.Op(name, attrs, operands...)
	if len(rs) != 1 {
		b.Failf("op %s has %d results, not 1", name, len(rs))
		return poison
	}
	return rs[0]
}

// Convenience constructors for the ops frontends and passes build most.

func (b *Builder) Add(x, y *Value) *Value { return b.Op1("add", nil, x, y) }
func (b *Builder) Sub(x, y *Value) *Value { return b.Op1("sub", nil, x, y) }
func (b *Builder) Mul(x, y *Value) *Value { return b.Op1("mul", nil, x, y) }
func (b *Builder) Div(x, y *Value) *Value { return b.Op1("div", nil, x, y) }
func (b *Builder) Neg(x *Value) *Value    { return b.Op1("neg", nil, x) }

// Unary builds a one-operand op without attributes (relu, exp, …).
func (b *Builder) Unary(name string, x *Value) *Value { return b.Op1(name, nil, x) }

// MatMul builds x @ y.
func (b *Builder) MatMul(x, y *Value) *Value { return b.Op1("matmul", nil, x, y) }

// Reshape builds a reshape to shape (one -1 allowed).
func (b *Builder) Reshape(x *Value, shape ...int) *Value {
	return b.Op1("reshape", Attrs{{"shape", Ints(shape...)}}, x)
}

// Transpose permutes dims.
func (b *Builder) Transpose(x *Value, perm ...int) *Value {
	return b.Op1("transpose", Attrs{{"perm", Ints(perm...)}}, x)
}

// Constant builds a constant from dense data.
func (b *Builder) Constant(d *Dense) *Value { return b.Op1("constant", Attrs{{"value", d}}) }

// Scalar builds a rank-0 constant of dtype dt.
func (b *Builder) Scalar(dt DType, v float64) *Value {
	return b.Constant(NewDenseF64(Type{DType: dt, Shape: Shape{}}, []float64{v}))
}

// Cast converts x to dtype to.
func (b *Builder) Cast(x *Value, to DType) *Value {
	return b.Op1("cast", Attrs{{"to", Ident(to.String())}}, x)
}

// Reduce builds reduce_<kind> over axes (nil = all axes).
func (b *Builder) Reduce(kind string, x *Value, axes []int, keepdims bool) *Value {
	var at Attrs
	if axes != nil {
		at = append(at, NamedAttr{"axes", Ints(axes...)})
	}
	if keepdims {
		at = append(at, NamedAttr{"keepdims", BoolAttr(true)})
	}
	return b.Op1("reduce_"+kind, at, x)
}
