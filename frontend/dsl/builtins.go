package dsl

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"ppc.dev/ppc/ir"
)

// builtin is one built-in function. params names its arguments in positional order; a
// trailing "?" marks an optional one and a leading "*" a variadic one (positional only; the
// arguments after it are keyword-only).
type builtin struct {
	params []string
	doc    string
	// scalar: the function folds on compile-time numbers, so config values may call it.
	scalar bool
	fn     func(c *callCtx) (val, error)
}

type argv struct {
	v   val
	pos pos
}

// callCtx holds one call's bound arguments.
type callCtx struct {
	l    *lowerer
	name string
	pos  pos
	args map[string]argv
	rest []argv // variadic arguments
	npos int    // positional arguments bound so far
}

var builtins map[string]*builtin

// maxSplit bounds the pieces of one split (each is an IR value).
const maxSplit = 4096

func paramName(p string) string { return strings.TrimLeft(strings.TrimSuffix(p, "?"), "*") }

func (b *builtin) signature(name string) string {
	parts := make([]string, len(b.params))
	for i, p := range b.params {
		switch {
		case strings.HasPrefix(p, "*"):
			parts[i] = paramName(p) + "…"
		case strings.HasSuffix(p, "?"):
			parts[i] = paramName(p) + "?"
		default:
			parts[i] = p
		}
	}
	return name + "(" + strings.Join(parts, ", ") + ")"
}

// bind assigns one argument to its parameter.
func (c *callCtx) bind(b *builtin, a arg, v val) error {
	l := c.l
	if a.name != "" {
		i := slices.IndexFunc(b.params, func(p string) bool { return paramName(p) == a.name && !strings.HasPrefix(p, "*") })
		if i < 0 {
			return l.errorf(a.pos, "%s has no argument %s; it takes %s", c.name, a.name, b.signature(c.name))
		}
		if _, dup := c.args[a.name]; dup {
			return l.errorf(a.pos, "%s: argument %s given twice", c.name, a.name)
		}
		c.args[a.name] = argv{v, a.pos}
		return nil
	}
	if c.npos < len(b.params) && strings.HasPrefix(b.params[c.npos], "*") {
		c.rest = append(c.rest, argv{v, a.pos})
		return nil
	}
	if c.npos >= len(b.params) {
		return l.errorf(a.pos, "too many arguments to %s: it takes %s", c.name, b.signature(c.name))
	}
	name := paramName(b.params[c.npos])
	c.npos++
	if _, dup := c.args[name]; dup {
		return l.errorf(a.pos, "%s: argument %s given twice", c.name, name)
	}
	c.args[name] = argv{v, a.pos}
	return nil
}

func (c *callCtx) checkRequired(b *builtin) error {
	for _, p := range b.params {
		if strings.HasPrefix(p, "*") {
			if len(c.rest) == 0 {
				return c.l.errorf(c.pos, "%s needs at least one %s: %s", c.name, paramName(p), b.signature(c.name))
			}
			continue
		}
		if !strings.HasSuffix(p, "?") {
			if _, ok := c.args[p]; !ok {
				return c.l.errorf(c.pos, "%s is missing argument %s: it takes %s", c.name, p, b.signature(c.name))
			}
		}
	}
	return nil
}

func (c *callCtx) has(name string) bool { _, ok := c.args[name]; return ok }

func (c *callCtx) errorf(name string, format string, args ...any) error {
	p := c.pos
	if a, ok := c.args[name]; ok {
		p = a.pos
	}
	return c.l.errorf(p, "%s: %s", c.name, fmt.Sprintf(format, args...))
}

func (c *callCtx) tensor(name string) (*ir.Value, error) {
	a := c.args[name]
	if a.v.k != kTensor {
		return nil, c.errorf(name, "%s must be a tensor, got %s", name, a.v.describe())
	}
	return a.v.t, nil
}

func (c *callCtx) optTensor(name string) (*ir.Value, error) {
	if !c.has(name) {
		return nil, nil
	}
	return c.tensor(name)
}

func (c *callCtx) intArg(name string) (int64, error) {
	a := c.args[name]
	if a.v.k != kInt {
		return 0, c.errorf(name, "%s must be an integer, got %s", name, a.v.describe())
	}
	return a.v.i, nil
}

// intsArg accepts a list of integers or a single integer.
func (c *callCtx) intsArg(name string) ([]int, error) {
	a := c.args[name]
	switch a.v.k {
	case kInt:
		if a.v.i < math.MinInt32 || a.v.i > maxElements {
			return nil, c.errorf(name, "%s %d is out of range", name, a.v.i)
		}
		return []int{int(a.v.i)}, nil
	case kList:
		out := make([]int, len(a.v.list))
		for i, e := range a.v.list {
			if e.k != kInt || e.i < math.MinInt32 || e.i > maxElements {
				return nil, c.errorf(name, "%s must be a list of integers, got %s", name, a.v.describe())
			}
			out[i] = int(e.i)
		}
		return out, nil
	}
	return nil, c.errorf(name, "%s must be a list of integers, got %s", name, a.v.describe())
}

func (c *callCtx) boolArg(name string) (bool, error) {
	a := c.args[name]
	if a.v.k != kBool {
		return false, c.errorf(name, "%s must be true or false, got %s", name, a.v.describe())
	}
	return a.v.b, nil
}

func (c *callCtx) floatArg(name string) (float64, error) {
	a := c.args[name]
	if !a.v.isNum() {
		return 0, c.errorf(name, "%s must be a number, got %s", name, a.v.describe())
	}
	return a.v.num(), nil
}

func (c *callCtx) enumArg(name string, allowed ...string) (string, error) {
	a := c.args[name]
	if a.v.k != kString || !slices.Contains(allowed, a.v.s) {
		return "", c.errorf(name, "%s must be one of %q, got %s", name, allowed, a.v.describe())
	}
	return a.v.s, nil
}

func (c *callCtx) typeArg(name string) (ir.Type, error) {
	a := c.args[name]
	if a.v.k != kType {
		return ir.Type{}, c.errorf(name, "%s must be a tensor type such as f32[4, 8], got %s", name, a.v.describe())
	}
	return a.v.typ, nil
}

func (c *callCtx) dtypeArg(name string) (ir.DType, error) {
	a := c.args[name]
	switch a.v.k {
	case kDType:
		return a.v.dt, nil
	case kString:
		if dt, ok := ir.ParseDType(a.v.s); ok {
			return dt, nil
		}
	}
	return ir.Invalid, c.errorf(name, "%s must be a dtype (%s), got %s", name, dtypeList(), a.v.describe())
}

// attrs collects the optional attributes that were given.
type attrBuilder struct {
	c   *callCtx
	at  ir.Attrs
	err error
}

func (c *callCtx) attrs() *attrBuilder { return &attrBuilder{c: c} }

func (a *attrBuilder) int(name string) *attrBuilder {
	if a.err == nil && a.c.has(name) {
		var v int64
		if v, a.err = a.c.intArg(name); a.err == nil {
			a.at = append(a.at, ir.NamedAttr{Name: name, Value: ir.Int(v)})
		}
	}
	return a
}

func (a *attrBuilder) float(name string) *attrBuilder {
	if a.err == nil && a.c.has(name) {
		var v float64
		if v, a.err = a.c.floatArg(name); a.err == nil {
			a.at = append(a.at, ir.NamedAttr{Name: name, Value: ir.Float(v)})
		}
	}
	return a
}

func (a *attrBuilder) bool(name string) *attrBuilder {
	if a.err == nil && a.c.has(name) {
		var v bool
		if v, a.err = a.c.boolArg(name); a.err == nil && v {
			a.at = append(a.at, ir.NamedAttr{Name: name, Value: ir.BoolAttr(true)})
		}
	}
	return a
}

func (a *attrBuilder) ints(name string) *attrBuilder {
	if a.err == nil && a.c.has(name) {
		var v []int
		if v, a.err = a.c.intsArg(name); a.err == nil {
			a.at = append(a.at, ir.NamedAttr{Name: name, Value: ir.Ints(v...)})
		}
	}
	return a
}

func (a *attrBuilder) enum(name, def string, allowed ...string) *attrBuilder {
	if a.err == nil && a.c.has(name) {
		var v string
		if v, a.err = a.c.enumArg(name, allowed...); a.err == nil && v != def {
			a.at = append(a.at, ir.NamedAttr{Name: name, Value: ir.Ident(v)})
		}
	}
	return a
}

func (a *attrBuilder) done() (ir.Attrs, error) { return a.at, a.err }

// tensorOp builds an op from tensor arguments plus the given attributes.
func (c *callCtx) tensorOp(op string, at ir.Attrs, operands ...*ir.Value) (val, error) {
	t, err := c.l.op(c.pos, op, at, operands...)
	return tensorVal(t), err
}

// unary math: tensors build the op; numbers fold.
func unaryMath(op string, fold func(float64) float64, intFold func(int64) (int64, bool)) *builtin {
	return &builtin{params: []string{"x"}, scalar: fold != nil, doc: "elementwise " + op, fn: func(c *callCtx) (val, error) {
		x := c.args["x"].v
		switch {
		case x.k == kInt && intFold != nil:
			r, ok := intFold(x.i)
			if !ok {
				return val{}, c.errorf("x", "integer overflow")
			}
			return intVal(r), nil
		case x.isNum() && fold != nil:
			r := fold(x.num())
			if math.IsNaN(r) || (math.IsInf(r, 0) && !math.IsInf(x.num(), 0)) {
				return val{}, c.errorf("x", "%s(%s) is not a finite number", c.name, x.String())
			}
			return floatVal(r), nil
		}
		t, err := c.tensor("x")
		if err != nil {
			return val{}, err
		}
		return c.tensorOp(op, nil, t)
	}}
}

// binary elementwise with broadcasting and scalar operands.
func binaryFn(op string, fold func(x, y float64) float64) *builtin {
	return &builtin{params: []string{"a", "b"}, scalar: fold != nil, doc: "elementwise " + op, fn: func(c *callCtx) (val, error) {
		a, b := c.args["a"].v, c.args["b"].v
		if a.isNum() && b.isNum() && fold != nil {
			if a.k == kInt && b.k == kInt && op != "pow" {
				if op == "max" {
					return intVal(max(a.i, b.i)), nil
				}
				return intVal(min(a.i, b.i)), nil
			}
			r := fold(a.num(), b.num())
			if math.IsNaN(r) {
				return val{}, c.l.errorf(c.pos, "%s(%s, %s) is not a number", c.name, a.String(), b.String())
			}
			return floatVal(r), nil
		}
		if a.k != kTensor && b.k != kTensor {
			return val{}, c.l.errorf(c.pos, "%s needs numbers or tensors, got %s and %s", c.name, a.describe(), b.describe())
		}
		x, y, err := c.l.tensorOperands(c.pos, c.name, "", a, b)
		if err != nil {
			return val{}, err
		}
		return c.tensorOp(op, nil, x, y)
	}}
}

func reduceFn(kind string) *builtin {
	return &builtin{params: []string{"x", "axes?", "keepdims?"}, doc: kind + " over axes (default all)", fn: func(c *callCtx) (val, error) {
		x, err := c.tensor("x")
		if err != nil {
			return val{}, err
		}
		at, err := c.attrs().ints("axes").bool("keepdims").done()
		if err != nil {
			return val{}, err
		}
		return c.tensorOp("reduce_"+kind, at, x)
	}}
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func init() {
	absInt := func(i int64) (int64, bool) {
		if i < 0 {
			return -i, i != math.MinInt64
		}
		return i, true
	}
	builtins = map[string]*builtin{
		"exp":     unaryMath("exp", math.Exp, nil),
		"log":     unaryMath("log", math.Log, nil),
		"sqrt":    unaryMath("sqrt", math.Sqrt, nil),
		"rsqrt":   unaryMath("rsqrt", func(x float64) float64 { return 1 / math.Sqrt(x) }, nil),
		"tanh":    unaryMath("tanh", math.Tanh, nil),
		"sigmoid": unaryMath("sigmoid", sigmoid, nil),
		"sin":     unaryMath("sin", math.Sin, nil),
		"cos":     unaryMath("cos", math.Cos, nil),
		"erf":     unaryMath("erf", math.Erf, nil),
		"ceil":    unaryMath("ceil", math.Ceil, nil),
		"floor":   unaryMath("floor", math.Floor, nil),
		"abs":     unaryMath("abs", math.Abs, absInt),
		"relu": unaryMath("relu", func(x float64) float64 { return math.Max(x, 0) },
			func(i int64) (int64, bool) { return max(i, 0), true }),
		"silu": unaryMath("silu", nil, nil),
		"gelu": {params: []string{"x", "approximate?"}, doc: `x·Φ(x); approximate = "tanh" for GPT-2's formula`, fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("x")
			if err != nil {
				return val{}, err
			}
			at, err := c.attrs().enum("approximate", "none", "none", "tanh").done()
			if err != nil {
				return val{}, err
			}
			return c.tensorOp("gelu", at, x)
		}},
		"softmax": axisFn("softmax"),
		"attention": {params: []string{"q", "k", "v", "mask?", "causal?", "scale?"},
			doc: "fused scaled dot-product attention of q [..., heads, seq, dim] over k and v [..., kv_heads, seq, dim] " +
				"(kv_heads divides heads: grouped-query attention without repeating k and v); causal hides later keys, " +
				"mask is bool (true = visible) or additive; scale defaults to 1/sqrt(dim). The scores are never stored.",
			fn: attentionFn},
		"log_softmax": axisFn("log_softmax"),
		"top_k": {params: []string{"x", "k", "axis?", "largest?", "groups?", "topk_groups?"},
			doc: "the k largest (largest = false: smallest) elements along axis (default the last), sorted, and their i64 indices; ties go to the lower index. " +
				"With groups = G and topk_groups = M (DeepSeek-V3's node-limited routing) the axis is G equal groups, each scored by the sum of its " +
				"⌈k/M⌉ best, and the k are chosen among the M best groups' elements only (G divides the axis, M ≤ G, k ≤ M·axis/G)",
			fn: topKFn},
		"moe_slots": {params: []string{"indices", "experts", "capacity"},
			doc: "capacity rows of routed tokens: for indices [..., k] (each token's distinct experts) the slot e·capacity + row of every choice, " +
				"placed first choices first, tokens in order (−1: dropped, the expert full), and the i64 load [experts] (choices routed to each, dropped included)",
			fn: moeSlotsFn},
		"moe_dispatch": {params: []string{"x", "slots", "experts", "capacity", "weights?"},
			doc: "tokens x [..., d] into the experts' buffer [experts, capacity, d] at their slots (times weights [..., k] when given); unfilled rows are 0",
			fn:  func(c *callCtx) (val, error) { return moeRowsFn(c, "moe_dispatch", "x") }},
		"moe_combine": {params: []string{"y", "slots", "weights?"},
			doc: "the experts' rows y [experts, capacity, d] back to their tokens [..., d]: the weighted sum over each token's choices not dropped",
			fn:  func(c *callCtx) (val, error) { return moeRowsFn(c, "moe_combine", "y") }},
		"layer_norm": {params: []string{"x", "scale?", "bias?", "axis?", "eps?"}, doc: "layer normalisation over dims axis.. (default the last)", fn: func(c *callCtx) (val, error) {
			return normFn(c, "layer_norm", "scale", "bias")
		}},
		"rms_norm": {params: []string{"x", "scale?", "axis?", "eps?"}, doc: "RMS normalisation over dims axis.. (default the last)", fn: func(c *callCtx) (val, error) {
			return normFn(c, "rms_norm", "scale")
		}},
		"matmul": {params: []string{"a", "b", "bias?", "transpose_a?", "transpose_b?"}, doc: "a @ b with optional transposes of the last two dims and a bias", fn: func(c *callCtx) (val, error) {
			bias, err := c.optTensor("bias")
			if err != nil {
				return val{}, err
			}
			var ta, tb bool
			if c.has("transpose_a") {
				if ta, err = c.boolArg("transpose_a"); err != nil {
					return val{}, err
				}
			}
			if c.has("transpose_b") {
				if tb, err = c.boolArg("transpose_b"); err != nil {
					return val{}, err
				}
			}
			a, b := c.args["a"].v, c.args["b"].v
			if (ta && (a.k != kTensor || a.t.Type.Rank() < 2)) || (tb && (b.k != kTensor || b.t.Type.Rank() < 2)) {
				return val{}, c.l.errorf(c.pos, "matmul: a transposed operand needs rank 2 or more")
			}
			return c.l.matmul(c.pos, a, b, ta, tb, bias)
		}},
		"reshape": {params: []string{"x", "shape"}, doc: "same elements, new shape (one -1 is inferred)", fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("x")
			if err != nil {
				return val{}, err
			}
			shape, err := c.intsArg("shape")
			if err != nil {
				return val{}, err
			}
			return c.tensorOp("reshape", ir.Attrs{{Name: "shape", Value: ir.Ints(shape...)}}, x)
		}},
		"transpose": {params: []string{"x", "perm?"}, doc: "permute dims (default: swap the last two)", fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("x")
			if err != nil {
				return val{}, err
			}
			var perm []int
			if c.has("perm") {
				if perm, err = c.intsArg("perm"); err != nil {
					return val{}, err
				}
			} else {
				r := x.Type.Rank()
				if r < 2 {
					return val{}, c.errorf("x", "transpose without perm swaps the last two dims; %s has rank %d", x.Type, r)
				}
				for i := range r {
					perm = append(perm, i)
				}
				perm[r-1], perm[r-2] = perm[r-2], perm[r-1]
			}
			return c.tensorOp("transpose", ir.Attrs{{Name: "perm", Value: ir.Ints(perm...)}}, x)
		}},
		"broadcast": {params: []string{"x", "shape"}, doc: "numpy broadcast_to", fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("x")
			if err != nil {
				return val{}, err
			}
			shape, err := c.intsArg("shape")
			if err != nil {
				return val{}, err
			}
			if err := checkElements(c, "shape", shape); err != nil {
				return val{}, err
			}
			return c.tensorOp("broadcast", ir.Attrs{{Name: "shape", Value: ir.Ints(shape...)}}, x)
		}},
		"gather": {params: []string{"data", "indices", "axis?"}, doc: "take slices of data along axis (default 0) at integer indices (embedding lookup)", fn: func(c *callCtx) (val, error) {
			d, err := c.tensor("data")
			if err != nil {
				return val{}, err
			}
			i, err := c.tensor("indices")
			if err != nil {
				return val{}, err
			}
			at, err := c.attrs().int("axis").done()
			if err != nil {
				return val{}, err
			}
			return c.tensorOp("gather", at, d, i)
		}},
		"concat": {params: []string{"*xs", "axis?"}, doc: "join tensors along axis (default 0)", fn: func(c *callCtx) (val, error) {
			var xs []*ir.Value
			for _, a := range c.rest {
				if a.v.k != kTensor {
					return val{}, c.l.errorf(a.pos, "concat: operands must be tensors, got %s", a.v.describe())
				}
				xs = append(xs, a.v.t)
			}
			axis := int64(0)
			if c.has("axis") {
				var err error
				if axis, err = c.intArg("axis"); err != nil {
					return val{}, err
				}
			}
			return c.tensorOp("concat", ir.Attrs{{Name: "axis", Value: ir.Int(axis)}}, xs...)
		}},
		"split": {params: []string{"x", "sizes", "axis?"}, doc: "cut along axis (default the last) into pieces: a list of sizes, or a count of equal pieces", fn: splitFn},
		"slice": {params: []string{"x", "starts", "ends", "axes?", "steps?"}, doc: "strided slice", fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("x")
			if err != nil {
				return val{}, err
			}
			at, err := c.attrs().ints("starts").ints("ends").ints("axes").ints("steps").done()
			if err != nil {
				return val{}, err
			}
			return c.tensorOp("slice", at, x)
		}},
		"where": {params: []string{"cond", "a", "b"}, doc: "a where cond is true, else b (numbers take the other branch's dtype)", fn: whereFn},
		"cast": {params: []string{"x", "to"}, doc: "convert elements to a dtype", fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("x")
			if err != nil {
				return val{}, err
			}
			dt, err := c.dtypeArg("to")
			if err != nil {
				return val{}, err
			}
			return c.tensorOp("cast", ir.Attrs{{Name: "to", Value: ir.Ident(dt.String())}}, x)
		}},
		"iota": {params: []string{"type", "axis?"}, doc: "a tensor of the given type holding each element's index along axis", fn: func(c *callCtx) (val, error) {
			t, err := c.typeArg("type")
			if err != nil {
				return val{}, err
			}
			axis := int64(0)
			if c.has("axis") {
				if axis, err = c.intArg("axis"); err != nil {
					return val{}, err
				}
			}
			return c.tensorOp("iota", ir.Attrs{{Name: "type", Value: ir.TypeAttr(t)}, {Name: "axis", Value: ir.Int(axis)}})
		}},
		"arange": {params: []string{"n", "dtype?"}, doc: "0, 1, …, n-1 (an iota of shape [n], default i64)", fn: func(c *callCtx) (val, error) {
			n, err := c.intArg("n")
			if err != nil {
				return val{}, err
			}
			if n < 1 || n > maxElements {
				return val{}, c.errorf("n", "n must be a positive integer up to 2^50, got %d", n)
			}
			dt := ir.I64
			if c.has("dtype") {
				if dt, err = c.dtypeArg("dtype"); err != nil {
					return val{}, err
				}
			}
			t := ir.Type{DType: dt, Shape: ir.Shape{int(n)}}
			return c.tensorOp("iota", ir.Attrs{{Name: "type", Value: ir.TypeAttr(t)}, {Name: "axis", Value: ir.Int(0)}})
		}},
		"sum":     reduceFn("sum"),
		"mean":    reduceFn("mean"),
		"max":     reduceFn("max"),
		"maximum": binaryFn("max", math.Max),
		"minimum": binaryFn("min", math.Min),
		"pow":     binaryFn("pow", math.Pow),
		"cross_entropy": {params: []string{"logits", "labels", "reduction?", "ignore_index?"}, doc: "softmax cross-entropy against integer labels (mean by default)", fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("logits")
			if err != nil {
				return val{}, err
			}
			y, err := c.tensor("labels")
			if err != nil {
				return val{}, err
			}
			at, err := c.attrs().enum("reduction", "mean", "mean", "sum", "none").int("ignore_index").done()
			if err != nil {
				return val{}, err
			}
			return c.tensorOp("cross_entropy", at, x, y)
		}},
		"mse": {params: []string{"prediction", "target", "reduction?"}, doc: "mean squared error", fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("prediction")
			if err != nil {
				return val{}, err
			}
			y, err := c.tensor("target")
			if err != nil {
				return val{}, err
			}
			at, err := c.attrs().enum("reduction", "mean", "mean", "sum", "none").done()
			if err != nil {
				return val{}, err
			}
			return c.tensorOp("mse", at, x, y)
		}},
		"zeros": fillFn(0),
		"ones":  fillFn(1),
		"full": {params: []string{"type", "value"}, doc: "a constant tensor holding value everywhere", fn: func(c *callCtx) (val, error) {
			t, err := c.typeArg("type")
			if err != nil {
				return val{}, err
			}
			return splat(c, t, c.args["value"].v)
		}},
		"float": {params: []string{"x"}, scalar: true, doc: "a compile-time number as a float", fn: func(c *callCtx) (val, error) {
			x := c.args["x"].v
			if !x.isNum() {
				return val{}, c.errorf("x", "x must be a number, got %s", x.describe())
			}
			return floatVal(x.num()), nil
		}},
		"int": {params: []string{"x"}, scalar: true, doc: "a compile-time number truncated to an integer", fn: func(c *callCtx) (val, error) {
			x := c.args["x"].v
			if !x.isNum() {
				return val{}, c.errorf("x", "x must be a number, got %s", x.describe())
			}
			f := math.Trunc(x.num())
			if math.IsNaN(f) || f < math.MinInt64 || f >= math.MaxInt64 {
				return val{}, c.errorf("x", "%s does not fit an integer", x.String())
			}
			return intVal(int64(f)), nil
		}},
		"dim": {params: []string{"x", "axis"}, doc: "the size of one dim of a tensor (a compile-time integer)", fn: func(c *callCtx) (val, error) {
			x, err := c.tensor("x")
			if err != nil {
				return val{}, err
			}
			axis, err := c.intArg("axis")
			if err != nil {
				return val{}, err
			}
			if axis < -int64(x.Type.Rank()) || axis >= int64(x.Type.Rank()) {
				return val{}, c.errorf("axis", "axis %d out of range for %s", axis, x.Type)
			}
			if axis < 0 {
				axis += int64(x.Type.Rank())
			}
			return intVal(int64(x.Type.Shape[axis])), nil
		}},
	}
}

// Builtins lists the builtin functions with their signatures and docs, sorted by name (for
// documentation and `ppc import --help`).
func Builtins() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = builtins[n].signature(n) + ": " + builtins[n].doc
	}
	return out
}

func axisFn(op string) *builtin {
	return &builtin{params: []string{"x", "axis?"}, doc: op + " along axis (default the last)", fn: func(c *callCtx) (val, error) {
		x, err := c.tensor("x")
		if err != nil {
			return val{}, err
		}
		at, err := c.attrs().int("axis").done()
		if err != nil {
			return val{}, err
		}
		return c.tensorOp(op, at, x)
	}}
}

func normFn(c *callCtx, op string, operands ...string) (val, error) {
	x, err := c.tensor("x")
	if err != nil {
		return val{}, err
	}
	ops := []*ir.Value{x}
	for i, name := range operands {
		t, err := c.optTensor(name)
		if err != nil {
			return val{}, err
		}
		if t == nil {
			// A bias without a scale cannot be expressed; check the rest are absent.
			for _, later := range operands[i+1:] {
				if c.has(later) {
					return val{}, c.errorf(later, "%s needs %s too", later, name)
				}
			}
			break
		}
		ops = append(ops, t)
	}
	at, err := c.attrs().int("axis").float("eps").done()
	if err != nil {
		return val{}, err
	}
	return c.tensorOp(op, at, ops...)
}

// attentionFn builds the fused attention op (ir's attention) and returns its output; the
// row log-sum-exp it also produces is the gradient's business, not the model's.
func attentionFn(c *callCtx) (val, error) {
	var ops []*ir.Value
	for _, name := range []string{"q", "k", "v"} {
		t, err := c.tensor(name)
		if err != nil {
			return val{}, err
		}
		ops = append(ops, t)
	}
	mask, err := c.optTensor("mask")
	if err != nil {
		return val{}, err
	}
	if mask != nil {
		ops = append(ops, mask)
	}
	at, err := c.attrs().bool("causal").float("scale").done()
	if err != nil {
		return val{}, err
	}
	rs, err := c.l.opN(c.pos, "attention", at, ops...)
	if err != nil {
		return val{}, err
	}
	return tensorVal(rs[0]), nil
}

// tupleOf makes a tuple value of an op's results.
func tupleOf(rs []*ir.Value) val {
	out := val{k: kTuple}
	for _, t := range rs {
		out.list = append(out.list, tensorVal(t))
	}
	return out
}

func topKFn(c *callCtx) (val, error) {
	x, err := c.tensor("x")
	if err != nil {
		return val{}, err
	}
	at, err := c.attrs().int("k").int("axis").done()
	if err != nil {
		return val{}, err
	}
	if c.has("largest") {
		largest, err := c.boolArg("largest")
		if err != nil {
			return val{}, err
		}
		at = append(at, ir.NamedAttr{Name: "largest", Value: ir.BoolAttr(largest)})
	}
	// One group keeping one group is no limit: the op is then written without the
	// attributes, so a model with groups = 1 compiles to the same IR as one without.
	groups, err := c.attrs().int("groups").int("topk_groups").done()
	if err != nil {
		return val{}, err
	}
	if groups.Int("groups", 1) != 1 || groups.Int("topk_groups", 1) != 1 {
		at = append(at, groups...)
	}
	rs, err := c.l.opN(c.pos, "top_k", at, x)
	if err != nil {
		return val{}, err
	}
	return tupleOf(rs), nil
}

func moeSlotsFn(c *callCtx) (val, error) {
	idx, err := c.tensor("indices")
	if err != nil {
		return val{}, err
	}
	at, err := c.attrs().int("experts").int("capacity").done()
	if err != nil {
		return val{}, err
	}
	rs, err := c.l.opN(c.pos, "moe_slots", at, idx)
	if err != nil {
		return val{}, err
	}
	return tupleOf(rs), nil
}

// moeRowsFn builds moe_dispatch or moe_combine: the rows operand (named first), the slots and
// the optional weights.
func moeRowsFn(c *callCtx, op, first string) (val, error) {
	var ops []*ir.Value
	for _, name := range []string{first, "slots"} {
		t, err := c.tensor(name)
		if err != nil {
			return val{}, err
		}
		ops = append(ops, t)
	}
	w, err := c.optTensor("weights")
	if err != nil {
		return val{}, err
	}
	if w != nil {
		ops = append(ops, w)
	}
	var at ir.Attrs
	if op == "moe_dispatch" {
		if at, err = c.attrs().int("experts").int("capacity").done(); err != nil {
			return val{}, err
		}
	}
	return c.tensorOp(op, at, ops...)
}

func splitFn(c *callCtx) (val, error) {
	x, err := c.tensor("x")
	if err != nil {
		return val{}, err
	}
	axis := int64(-1)
	if c.has("axis") {
		if axis, err = c.intArg("axis"); err != nil {
			return val{}, err
		}
	}
	r := int64(x.Type.Rank())
	if axis < -r || axis >= r {
		return val{}, c.errorf("axis", "axis %d out of range for %s", axis, x.Type)
	}
	if axis < 0 {
		axis += r
	}
	dim := int64(x.Type.Shape[axis])
	var sizes []int
	if s := c.args["sizes"].v; s.k == kInt {
		if s.i < 1 || s.i > dim || dim%s.i != 0 {
			return val{}, c.errorf("sizes", "dim %d of %s does not split into %d equal pieces", axis, x.Type, s.i)
		}
		if s.i > maxSplit {
			return val{}, c.errorf("sizes", "%d pieces are too many (at most %d)", s.i, maxSplit)
		}
		for range s.i {
			sizes = append(sizes, int(dim/s.i))
		}
	} else if sizes, err = c.intsArg("sizes"); err != nil {
		return val{}, err
	}
	rs, err := c.l.opN(c.pos, "split", ir.Attrs{{Name: "axis", Value: ir.Int(axis)}, {Name: "sizes", Value: ir.Ints(sizes...)}}, x)
	if err != nil {
		return val{}, err
	}
	return tupleOf(rs), nil
}

func whereFn(c *callCtx) (val, error) {
	cond, err := c.tensor("cond")
	if err != nil {
		return val{}, err
	}
	if cond.Type.DType != ir.Bool {
		return val{}, c.errorf("cond", "cond must be a bool tensor, got %s", cond.Type)
	}
	a, b := c.args["a"].v, c.args["b"].v
	if a.k != kTensor && b.k != kTensor {
		return val{}, c.l.errorf(c.pos, "where: a or b must be a tensor, got %s and %s", a.describe(), b.describe())
	}
	x, y, err := c.l.tensorOperands(c.pos, "where", "", a, b)
	if err != nil {
		return val{}, err
	}
	if _, err := ir.BroadcastShapes(cond.Type.Shape, x.Type.Shape, y.Type.Shape); err != nil {
		return val{}, c.l.errorf(c.pos, "where: shapes %s, %s and %s do not broadcast", cond.Type.Shape, x.Type.Shape, y.Type.Shape)
	}
	return c.tensorOp("where", nil, cond, x, y)
}

func fillFn(v float64) *builtin {
	return &builtin{params: []string{"type"}, doc: fmt.Sprintf("a constant tensor of %g", v), fn: func(c *callCtx) (val, error) {
		t, err := c.typeArg("type")
		if err != nil {
			return val{}, err
		}
		if t.DType.IsFloat() {
			return splat(c, t, floatVal(v))
		}
		if t.DType == ir.Bool {
			return splat(c, t, boolVal(v != 0))
		}
		return splat(c, t, intVal(int64(v)))
	}}
}

// splat builds a constant of type t holding one value (stored once, whatever t's size).
func splat(c *callCtx, t ir.Type, v val) (val, error) {
	one, err := scalarDense(t.DType, v)
	if err != nil {
		return val{}, c.l.errorf(c.pos, "%s: %v", c.name, err)
	}
	one.Type, one.Splat = t, true
	return c.tensorOp("constant", ir.Attrs{{Name: "value", Value: one}})
}

func scalarDense(dt ir.DType, v val) (*ir.Dense, error) {
	t := ir.Type{DType: dt, Shape: ir.Shape{}}
	switch {
	case dt.IsFloat() && v.isNum():
		return ir.NewDenseF64(t, []float64{v.num()}), nil
	case dt.IsInt() && v.k == kInt:
		if lo, hi := intRange(dt); v.i < lo || v.i > hi {
			return nil, fmt.Errorf("%s is out of the range of %s", v.describe(), dt)
		}
		return ir.NewDenseI64(t, []int64{v.i}), nil
	case dt == ir.Bool && v.k == kBool:
		b := int64(0)
		if v.b {
			b = 1
		}
		return ir.NewDenseI64(t, []int64{b}), nil
	}
	return nil, fmt.Errorf("%s does not convert to %s", v.describe(), dt)
}

func checkElements(c *callCtx, name string, shape []int) error {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return c.errorf(name, "negative dim %d", d)
		}
		if d > 0 && n > maxElements/int64(d) {
			return c.errorf(name, "tensor too large: more than 2^50 elements")
		}
		n *= int64(d)
	}
	return nil
}

// intRange is the range of an integer dtype.
func intRange(dt ir.DType) (int64, int64) {
	switch dt {
	case ir.I32:
		return math.MinInt32, math.MaxInt32
	case ir.I8:
		return math.MinInt8, math.MaxInt8
	case ir.U8:
		return 0, math.MaxUint8
	}
	return math.MinInt64, math.MaxInt64
}
