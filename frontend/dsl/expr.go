package dsl

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
)

// eval evaluates an expression. Compile-time values fold; anything touching a tensor builds
// IR ops at the position of its operator or call.
func (l *lowerer) eval(sc *scope, e *exprAST) (val, error) {
	v, err := l.evalAnd(sc, e.Left)
	if err != nil {
		return val{}, err
	}
	for _, t := range e.Rest {
		r, err := l.evalAnd(sc, t.Right)
		if err != nil {
			return val{}, err
		}
		if v, err = l.logical(t.Pos, t.Op, v, r); err != nil {
			return val{}, err
		}
	}
	return v, nil
}

func (l *lowerer) evalAnd(sc *scope, e *andAST) (val, error) {
	v, err := l.evalCmp(sc, e.Left)
	if err != nil {
		return val{}, err
	}
	for _, t := range e.Rest {
		r, err := l.evalCmp(sc, t.Right)
		if err != nil {
			return val{}, err
		}
		if v, err = l.logical(t.Pos, t.Op, v, r); err != nil {
			return val{}, err
		}
	}
	return v, nil
}

func (l *lowerer) evalCmp(sc *scope, e *cmpAST) (val, error) {
	v, err := l.evalAdd(sc, e.Left)
	if err != nil || e.Rest == nil {
		return v, err
	}
	r, err := l.evalAdd(sc, e.Rest.Right)
	if err != nil {
		return val{}, err
	}
	return l.compare(e.Rest.Pos, e.Rest.Op, v, r)
}

func (l *lowerer) evalAdd(sc *scope, e *addAST) (val, error) {
	v, err := l.evalMul(sc, e.Left)
	if err != nil {
		return val{}, err
	}
	for _, t := range e.Rest {
		r, err := l.evalMul(sc, t.Right)
		if err != nil {
			return val{}, err
		}
		if v, err = l.arith(t.Pos, t.Op, v, r); err != nil {
			return val{}, err
		}
	}
	return v, nil
}

func (l *lowerer) evalMul(sc *scope, e *mulAST) (val, error) {
	var v val
	var vt bool
	var err error
	if len(e.Rest) > 0 && e.Rest[0].Op == "@" {
		v, vt, err = l.matmulOperand(sc, e.Left)
	} else {
		v, err = l.evalUnary(sc, e.Left)
	}
	if err != nil {
		return val{}, err
	}
	for _, t := range e.Rest {
		if t.Op == "@" {
			r, rt, err := l.matmulOperand(sc, t.Right)
			if err != nil {
				return val{}, err
			}
			if v, err = l.matmul(t.Pos, v, r, vt, rt, nil); err != nil {
				return val{}, err
			}
		} else {
			r, err := l.evalUnary(sc, t.Right)
			if err != nil {
				return val{}, err
			}
			if v, err = l.arith(t.Pos, t.Op, v, r); err != nil {
				return val{}, err
			}
		}
		vt = false
	}
	return v, nil
}

// matmulOperand evaluates an operand of `@`; `transpose(w)` (the last two dims swapped)
// becomes w with a transpose flag, so `x @ transpose(w)` is one matmul with transpose_b.
func (l *lowerer) matmulOperand(sc *scope, u *unaryAST) (val, bool, error) {
	if u.Primary != nil && u.Primary.Name != nil {
		n := u.Primary.Name
		if len(n.Path) == 1 && n.Path[0] == "transpose" && n.Call != nil && n.Call.As == nil &&
			len(n.Call.Args) == 1 && n.Call.Args[0].Rhs == nil {
			v, err := l.eval(sc, n.Call.Args[0].Lhs)
			if err != nil {
				return val{}, false, err
			}
			if v.k == kTensor && v.t.Type.Rank() >= 2 {
				return v, true, nil
			}
		}
	}
	v, err := l.evalUnary(sc, u)
	return v, false, err
}

func (l *lowerer) evalUnary(sc *scope, u *unaryAST) (val, error) {
	if u.Primary != nil {
		return l.evalPrimary(sc, u.Primary)
	}
	v, err := l.evalUnary(sc, u.Operand)
	if err != nil {
		return val{}, err
	}
	switch u.Op {
	case "-":
		switch v.k {
		case kInt:
			if v.i == math.MinInt64 {
				return val{}, l.errorf(u.Pos, "integer overflow")
			}
			return intVal(-v.i), nil
		case kFloat:
			return floatVal(-v.f), nil
		case kTensor:
			if v.t.Type.DType == ir.Bool {
				return val{}, l.errorf(u.Pos, "cannot negate %s", v.describe())
			}
			t, err := l.op(u.Pos, "neg", nil, v.t)
			return tensorVal(t), err
		}
		return val{}, l.errorf(u.Pos, "cannot negate %s", v.describe())
	default: // "!"
		switch {
		case v.k == kBool:
			return boolVal(!v.b), nil
		case v.k == kTensor && v.t.Type.DType == ir.Bool:
			t, err := l.op(u.Pos, "not", nil, v.t)
			return tensorVal(t), err
		}
		return val{}, l.errorf(u.Pos, "! needs a bool, got %s", v.describe())
	}
}

func (l *lowerer) evalPrimary(sc *scope, p *primaryAST) (val, error) {
	switch {
	case p.Int != nil:
		return l.intLiteral(p.Pos, *p.Int)
	case p.Float != nil:
		f, err := strconv.ParseFloat(*p.Float, 64)
		if err != nil {
			return val{}, l.errorf(p.Pos, "float literal %s is out of range", *p.Float)
		}
		return floatVal(f), nil
	case p.Str != nil:
		s, err := strconv.Unquote(*p.Str)
		if err != nil {
			return val{}, l.errorf(p.Pos, "bad string literal %s", *p.Str)
		}
		return val{k: kString, s: s}, nil
	case p.Paren != nil:
		return l.eval(sc, p.Paren)
	case p.List != nil:
		out := val{k: kList, list: make([]val, 0, len(p.List.Elems))}
		for _, e := range p.List.Elems {
			v, err := l.eval(sc, e)
			if err != nil {
				return val{}, err
			}
			switch v.k {
			case kInt, kFloat, kBool, kString:
			default:
				return val{}, l.errorf(e.Pos, "list elements must be numbers, bools or strings, got %s", v.describe())
			}
			out.list = append(out.list, v)
		}
		return out, nil
	case p.Name != nil:
		return l.evalName(sc, p.Name)
	}
	return val{}, l.errorf(p.Pos, "empty expression")
}

func (l *lowerer) intLiteral(p pos, s string) (val, error) {
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return val{}, l.errorf(p, "integer literal %s is out of range", s)
	}
	return intVal(i), nil
}

func (l *lowerer) evalName(sc *scope, n *nameExpr) (val, error) {
	key := strings.Join(n.Path, ".")
	switch {
	case n.Call != nil:
		return l.call(sc, n, key)
	case n.Index != nil:
		dt, ok := ir.ParseDType(key)
		if !ok {
			return val{}, l.errorf(n.Index.Pos, "%s[…]: only a dtype takes dims, as in f32[4, 8] (the language has no indexing)", key)
		}
		t, err := l.shape(sc, n.Pos, dt, n.Index.Elems)
		if err != nil {
			return val{}, err
		}
		return val{k: kType, typ: t}, nil
	}
	return l.lookup(sc, n.Pos, key)
}

// lookup resolves a name: a local variable, an input, a config constant, a constant.
func (l *lowerer) lookup(sc *scope, p pos, key string) (val, error) {
	if !sc.config {
		if v, ok := sc.vars[key]; ok {
			return v, nil
		}
	}
	if in := l.inputs[key]; in != nil {
		if sc.config || in.v == nil {
			return val{}, l.errorf(p, "input %s cannot be used in a config value or a type", key)
		}
		return tensorVal(in.v), nil
	}
	if c := l.cfg[key]; c != nil {
		if sc.self == c && sc.layer > 0 {
			// The overridden value: evaluate the expression beneath.
			if err := l.tick(p); err != nil {
				return val{}, err
			}
			return l.eval(&scope{config: true, self: c, layer: sc.layer - 1}, c.under[sc.layer-1])
		}
		return l.config(key, p)
	}
	switch key {
	case "true", "false":
		return boolVal(key == "true"), nil
	case "pi":
		return floatVal(math.Pi), nil
	case "inf":
		return floatVal(math.Inf(1)), nil
	}
	if dt, ok := ir.ParseDType(key); ok {
		return val{k: kDType, dt: dt}, nil
	}
	if l.blocks[key] != nil || builtins[key] != nil {
		return val{}, l.errorf(p, "%s is a function; call it as %s(…)", key, key)
	}
	if sc.config {
		return val{}, l.errorf(p, "undefined: %s (config values may use only config constants)", key)
	}
	return val{}, l.errorf(p, "undefined: %s", key)
}

// call evaluates a call of a block or a builtin.
func (l *lowerer) call(sc *scope, n *nameExpr, key string) (val, error) {
	if err := l.tick(n.Pos); err != nil {
		return val{}, err
	}
	if blk := l.blocks[key]; blk != nil {
		if sc.config {
			return val{}, l.errorf(n.Pos, "config values cannot call block %s", key)
		}
		return l.callBlock(sc, blk, n)
	}
	b := builtins[key]
	if b == nil {
		if _, ok := sc.vars[key]; ok {
			return val{}, l.errorf(n.Pos, "%s is a variable, not a function", key)
		}
		return val{}, l.errorf(n.Pos, "unknown function %s (not a block or a builtin)", key)
	}
	if n.Call.As != nil {
		return val{}, l.errorf(n.Call.As.Pos, "`as` names the parameter scope of a block call; %s is a builtin", key)
	}
	c := &callCtx{l: l, name: key, pos: n.Pos, args: map[string]argv{}}
	args, err := l.args(n.Call)
	if err != nil {
		return val{}, err
	}
	for _, a := range args {
		v, err := l.eval(sc, a.value)
		if err != nil {
			return val{}, err
		}
		if v.k == kTuple || v.k == kNone {
			return val{}, l.errorf(a.value.Pos, "%s: an argument cannot be %s", key, v.describe())
		}
		if err := c.bind(b, a, v); err != nil {
			return val{}, err
		}
	}
	if err := c.checkRequired(b); err != nil {
		return val{}, err
	}
	if sc.config && !b.scalar {
		return val{}, l.errorf(n.Pos, "config values cannot call %s (it makes tensors)", key)
	}
	return b.fn(c)
}

// arg is one argument of a call: positional (name "") or named.
type arg struct {
	name  string
	value *exprAST
	pos   pos
}

// args reads a call's arguments, checking that named ones are named by identifiers.
func (l *lowerer) args(c *callAST) ([]arg, error) {
	out := make([]arg, len(c.Args))
	for i, a := range c.Args {
		if a.Rhs == nil {
			out[i] = arg{value: a.Lhs, pos: a.Pos}
			continue
		}
		n := asName(a.Lhs)
		if n == nil || len(n.Path) != 1 || n.Call != nil || n.Index != nil {
			return nil, l.errorf(a.Lhs.Pos, "a named argument needs an identifier before `=`, as in axis = -1")
		}
		out[i] = arg{name: n.Path[0], value: a.Rhs, pos: a.Pos}
	}
	return out, nil
}

// callBlock expands a block: a fresh scope whose parameters live under the call's
// namespace (the block's name, or the `as` path).
func (l *lowerer) callBlock(sc *scope, blk *blockAST, n *nameExpr) (val, error) {
	name := blk.Name.Name
	if i := slices.Index(l.calls, name); i >= 0 {
		chain := strings.Join(append(slices.Clone(l.calls[i:]), name), " → ")
		return val{}, l.errorf(n.Pos, "recursive block call: %s", chain)
	}
	if len(l.calls) >= maxCallDepth {
		return val{}, l.errorf(n.Pos, "block calls nest too deeply (more than %d)", maxCallDepth)
	}
	rel := name
	if n.Call.As != nil {
		var err error
		if rel, err = l.evalNS(sc, n.Call.As); err != nil {
			return val{}, err
		}
	}
	ns := rel
	if sc.ns != "" {
		ns = sc.ns + "." + rel
	}
	child := &scope{vars: map[string]val{}, ns: ns, block: blk}
	npos := 0
	args, err := l.args(n.Call)
	if err != nil {
		return val{}, err
	}
	for _, a := range args {
		v, err := l.eval(sc, a.value)
		if err != nil {
			return val{}, err
		}
		if v.k == kTuple || v.k == kNone {
			return val{}, l.errorf(a.value.Pos, "%s: an argument cannot be %s", name, v.describe())
		}
		pname := ""
		if a.name != "" {
			i := slices.IndexFunc(blk.Params, func(p *nameAST) bool { return p.Name == a.name })
			if i < 0 {
				return val{}, l.errorf(a.pos, "block %s has no parameter %s (%s)", name, a.name, blockSig(blk))
			}
			pname = a.name
		} else {
			if npos >= len(blk.Params) {
				return val{}, l.errorf(a.pos, "block %s takes %d arguments (%s), got more", name, len(blk.Params), blockSig(blk))
			}
			pname = blk.Params[npos].Name
			npos++
		}
		if _, dup := child.vars[pname]; dup {
			return val{}, l.errorf(a.pos, "block %s: argument %s given twice", name, pname)
		}
		child.vars[pname] = v
	}
	for _, p := range blk.Params {
		if _, ok := child.vars[p.Name]; !ok {
			return val{}, l.errorf(n.Pos, "block %s takes %d arguments (%s): missing %s", name, len(blk.Params), blockSig(blk), p.Name)
		}
	}
	l.calls = append(l.calls, name)
	ret, returned, err := l.execBody(child, blk.Body)
	l.calls = l.calls[:len(l.calls)-1]
	switch {
	case err != nil:
		return val{}, err
	case !returned:
		return val{k: kNone}, nil
	case len(ret) == 1:
		// An unnamed result is named after the call's scope until an assignment names it.
		if v := ret[0]; v.k == kTensor && v.t.Def != nil && v.t.Name == "" {
			v.t.Name = ns
			l.weak[v.t] = true
		}
		return ret[0], nil
	}
	return val{k: kTuple, list: ret}, nil
}

func blockSig(b *blockAST) string {
	names := make([]string, len(b.Params))
	for i, p := range b.Params {
		names[i] = p.Name
	}
	return b.Name.Name + "(" + strings.Join(names, ", ") + ")"
}

// evalNS evaluates an `as` path: `layers[i]` → "layers.3".
func (l *lowerer) evalNS(sc *scope, ns *nsAST) (string, error) {
	var parts []string
	for _, p := range ns.Parts {
		parts = append(parts, p.Name)
		for _, e := range p.Index {
			v, err := l.eval(sc, e)
			if err != nil {
				return "", err
			}
			if v.k != kInt || v.i < 0 {
				return "", l.errorf(e.Pos, "a scope index must be a non-negative integer, got %s", v.describe())
			}
			parts = append(parts, strconv.FormatInt(v.i, 10))
		}
	}
	return strings.Join(parts, "."), nil
}

// Operators.

var arithOps = map[string]struct{ op, verb string }{
	"+": {"add", "add"}, "-": {"sub", "subtract"}, "*": {"mul", "multiply"}, "/": {"div", "divide"},
}

func (l *lowerer) arith(p pos, op string, a, b val) (val, error) {
	if a.isNum() && b.isNum() {
		return l.foldArith(p, op, a, b)
	}
	info := arithOps[op]
	if a.k != kTensor && b.k != kTensor {
		return val{}, l.errorf(p, "cannot %s %s %s %s", info.verb, a.describe(), op, b.describe())
	}
	x, y, err := l.tensorOperands(p, info.verb, op, a, b)
	if err != nil {
		return val{}, err
	}
	if x.Type.DType == ir.Bool {
		return val{}, l.errorf(p, "cannot %s %s %s %s: arithmetic on bools", info.verb, x.Type, op, y.Type)
	}
	t, err := l.op(p, info.op, nil, x, y)
	return tensorVal(t), err
}

func (l *lowerer) foldArith(p pos, op string, a, b val) (val, error) {
	if a.k == kInt && b.k == kInt {
		var r int64
		ok := true
		switch op {
		case "+":
			r, ok = addInt(a.i, b.i)
		case "-":
			r, ok = subInt(a.i, b.i)
		case "*":
			r, ok = mulInt(a.i, b.i)
		case "/":
			switch {
			case b.i == 0:
				return val{}, l.errorf(p, "division by zero")
			case a.i == math.MinInt64 && b.i == -1:
				ok = false
			case a.i%b.i != 0:
				return val{}, l.errorf(p, "%d / %d is not exact (write %d.0 / %d for a float)", a.i, b.i, a.i, b.i)
			default:
				r = a.i / b.i
			}
		}
		if !ok {
			return val{}, l.errorf(p, "integer overflow in %d %s %d", a.i, op, b.i)
		}
		return intVal(r), nil
	}
	x, y := a.num(), b.num()
	switch op {
	case "+":
		return floatVal(x + y), nil
	case "-":
		return floatVal(x - y), nil
	case "*":
		return floatVal(x * y), nil
	}
	if y == 0 {
		return val{}, l.errorf(p, "division by zero")
	}
	return floatVal(x / y), nil
}

// tensorOperands turns the operands of a binary operator into tensors of one dtype whose
// shapes broadcast, making compile-time scalars rank-0 constants of the tensor's dtype. verb
// and op describe the operation in messages: ("add", "+") reads "cannot add A + B: …"; a
// function (op "") reads "where(A, B): …" with verb "where".
func (l *lowerer) tensorOperands(p pos, verb, op string, a, b val) (*ir.Value, *ir.Value, error) {
	fail := func(format string, args ...any) error {
		what := "cannot " + verb + " " + a.describe() + " " + op + " " + b.describe()
		if op == "" {
			what = verb + "(" + a.describe() + ", " + b.describe() + ")"
		}
		return l.errorf(p, "%s: %s", what, fmt.Sprintf(format, args...))
	}
	conv := func(dt ir.DType, v val) (*ir.Value, error) {
		d, err := scalarDense(dt, v)
		if err != nil {
			return nil, fail("%v", err)
		}
		return l.op(p, "constant", ir.Attrs{{Name: "value", Value: d}})
	}
	var x, y *ir.Value
	var err error
	switch {
	case a.k == kTensor && b.k == kTensor:
		x, y = a.t, b.t
	case a.k == kTensor:
		x = a.t
		if y, err = conv(x.Type.DType, b); err != nil {
			return nil, nil, err
		}
	default:
		y = b.t
		if x, err = conv(y.Type.DType, a); err != nil {
			return nil, nil, err
		}
	}
	if x.Type.DType != y.Type.DType {
		return nil, nil, fail("dtypes differ (use cast)")
	}
	if _, err := ir.BroadcastShapes(x.Type.Shape, y.Type.Shape); err != nil {
		return nil, nil, fail("shapes %s and %s do not broadcast", x.Type.Shape, y.Type.Shape)
	}
	return x, y, nil
}

var compareOps = map[string]struct {
	op  string
	not bool
	fn  func(x, y float64) bool
}{
	"<":  {"less", false, func(x, y float64) bool { return x < y }},
	">":  {"greater", false, func(x, y float64) bool { return x > y }},
	"==": {"equal", false, func(x, y float64) bool { return x == y }},
	"<=": {"greater", true, func(x, y float64) bool { return x <= y }},
	">=": {"less", true, func(x, y float64) bool { return x >= y }},
	"!=": {"equal", true, func(x, y float64) bool { return x != y }},
}

func (l *lowerer) compare(p pos, op string, a, b val) (val, error) {
	info := compareOps[op]
	switch {
	case a.k == kInt && b.k == kInt:
		var r bool
		switch op {
		case "<":
			r = a.i < b.i
		case ">":
			r = a.i > b.i
		case "==":
			r = a.i == b.i
		case "<=":
			r = a.i <= b.i
		case ">=":
			r = a.i >= b.i
		default:
			r = a.i != b.i
		}
		return boolVal(r), nil
	case a.isNum() && b.isNum():
		return boolVal(info.fn(a.num(), b.num())), nil
	case (op == "==" || op == "!=") && a.k == b.k && (a.k == kBool || a.k == kString):
		eq := a.b == b.b && a.s == b.s
		return boolVal(eq == (op == "==")), nil
	case a.k != kTensor && b.k != kTensor:
		return val{}, l.errorf(p, "cannot compare %s %s %s", a.describe(), op, b.describe())
	}
	x, y, err := l.tensorOperands(p, "compare", op, a, b)
	if err != nil {
		return val{}, err
	}
	t, err := l.op(p, info.op, nil, x, y)
	if err == nil && info.not {
		t, err = l.op(p, "not", nil, t)
	}
	return tensorVal(t), err
}

func (l *lowerer) logical(p pos, op string, a, b val) (val, error) {
	if a.k == kBool && b.k == kBool {
		if op == "&&" {
			return boolVal(a.b && b.b), nil
		}
		return boolVal(a.b || b.b), nil
	}
	bad := func() (val, error) {
		return val{}, l.errorf(p, "%s needs bools, got %s and %s", op, a.describe(), b.describe())
	}
	if a.k != kTensor && b.k != kTensor {
		return bad()
	}
	if (a.k == kTensor && a.t.Type.DType != ir.Bool) || (b.k == kTensor && b.t.Type.DType != ir.Bool) {
		return bad()
	}
	x, y, err := l.tensorOperands(p, "combine", op, a, b)
	if err != nil {
		return val{}, err
	}
	name := "and"
	if op == "||" {
		name = "or"
	}
	t, err := l.op(p, name, nil, x, y)
	return tensorVal(t), err
}

// matmul builds a @ b (with optional transposes and bias) after checking the shapes, so the
// message names both operands as the model wrote them.
func (l *lowerer) matmul(p pos, a, b val, ta, tb bool, bias *ir.Value) (val, error) {
	shown := func(v val, tr bool) string {
		if v.k != kTensor {
			return v.describe()
		}
		t := v.t.Type
		if tr {
			s := slices.Clone(t.Shape)
			s[len(s)-1], s[len(s)-2] = s[len(s)-2], s[len(s)-1]
			t.Shape = s
		}
		return t.String()
	}
	as, bs := shown(a, ta), shown(b, tb)
	if a.k != kTensor || b.k != kTensor {
		return val{}, l.errorf(p, "cannot matmul %s @ %s: operands must be tensors", as, bs)
	}
	x, y := a.t.Type, b.t.Type
	if x.DType != y.DType {
		return val{}, l.errorf(p, "cannot matmul %s @ %s: dtypes differ (use cast)", as, bs)
	}
	if x.DType == ir.Bool {
		return val{}, l.errorf(p, "cannot matmul %s @ %s: operands are bools", as, bs)
	}
	if x.Rank() == 0 || y.Rank() == 0 {
		return val{}, l.errorf(p, "cannot matmul %s @ %s: operands must have rank 1 or more", as, bs)
	}
	if _, err := ir.MatMulShape(x.Shape, y.Shape, ta, tb); err != nil {
		ak := x.Shape[x.Rank()-1]
		if ta {
			ak = x.Shape[x.Rank()-2]
		}
		bk := y.Shape[0]
		if y.Rank() >= 2 {
			bk = y.Shape[y.Rank()-2]
			if tb {
				bk = y.Shape[y.Rank()-1]
			}
		}
		if ak != bk {
			return val{}, l.errorf(p, "cannot matmul %s @ %s: contraction dims %d and %d differ", as, bs, ak, bk)
		}
		return val{}, l.errorf(p, "cannot matmul %s @ %s: batch dims do not broadcast", as, bs)
	}
	var attrs ir.Attrs
	if ta {
		attrs = append(attrs, ir.NamedAttr{Name: "transpose_a", Value: ir.BoolAttr(true)})
	}
	if tb {
		attrs = append(attrs, ir.NamedAttr{Name: "transpose_b", Value: ir.BoolAttr(true)})
	}
	ops := []*ir.Value{a.t, b.t}
	if bias != nil {
		ops = append(ops, bias)
	}
	t, err := l.op(p, "matmul", attrs, ops...)
	return tensorVal(t), err
}
