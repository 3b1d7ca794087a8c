package ir

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxElements bounds the element count of any parsed type, so that hostile input cannot make
// later passes size allocations from overflowing dims.
const maxElements = 1 << 50

// Parse reads a module from IR text. name is used in diagnostics (file:line:col). Parse
// checks syntax and structure — undefined or redefined values, unknown ops, operand counts,
// attribute names and kinds — and returns the first problem as an *Error with the source line
// and a caret. Type agreement is the verifier's job (Verify); ParseAndVerify does both.
func Parse(name, text string) (m *Module, err error) {
	// Editors on Windows may start a file with a UTF-8 byte-order mark; it is not IR.
	text = strings.TrimPrefix(text, "\ufeff")
	p := &parser{lx: lexer{src: text, line: 1, col: 1}, src: &Source{Name: name, Text: text}}
	defer func() {
		if r := recover(); r != nil {
			b, ok := r.(bail)
			if !ok {
				panic(r)
			}
			m, err = nil, b.err
		}
	}()
	p.next()
	m = p.module()
	m.Source = p.src
	return m, nil
}

// ParseAndVerify parses and then verifies a module.
func ParseAndVerify(name, text string) (*Module, error) {
	m, err := Parse(name, text)
	if err != nil {
		return nil, err
	}
	if err := Verify(m); err != nil {
		return nil, err
	}
	return m, nil
}

type parser struct {
	lx     lexer
	tok    token
	src    *Source
	values map[string]*Value
}

// bail is how the recursive-descent parser unwinds to Parse on the first error; it never
// escapes the package (Parse recovers only this type).
type bail struct{ err *Error }

func (p *parser) errAt(t token, format string, args ...any) {
	panic(bail{ErrorAt(p.src, Loc{File: p.src.Name, Line: t.line, Col: t.col}, format, args...)})
}

func (p *parser) next() {
	p.tok = p.lx.next()
	if p.lx.err != nil {
		e := p.lx.err
		panic(bail{ErrorAt(p.src, Loc{File: p.src.Name, Line: e.line, Col: e.col}, "%s", e.msg)})
	}
}

func (p *parser) is(kind tokKind, text string) bool {
	return p.tok.kind == kind && (text == "" || p.tok.text == text)
}

func (p *parser) punct(c string) bool { return p.tok.kind == tPunct && p.tok.text == c }

func (p *parser) expectPunct(c string, what string) token {
	t := p.tok
	if !p.punct(c) {
		p.errAt(t, "expected '%s' %s, found %s", c, what, t.describe())
	}
	p.next()
	return t
}

func (p *parser) expect(kind tokKind, what string) token {
	t := p.tok
	if t.kind != kind {
		p.errAt(t, "expected %s, found %s", what, t.describe())
	}
	p.next()
	return t
}

func (p *parser) loc(t token) Loc { return Loc{File: p.src.Name, Line: t.line, Col: t.col} }

func (p *parser) module() *Module {
	m := &Module{}
	if p.is(tIdent, "module") {
		p.next()
		if p.tok.kind == tSymbol {
			m.Name = p.tok.text
			p.next()
		}
		if p.is(tIdent, "attributes") {
			p.next()
			at := p.tok
			var keys map[string]token
			m.Attrs, keys = p.dict()
			if bad, err := CheckModuleAttrs(m.Attrs); err != nil {
				p.errAt(keyToken(keys, bad, at), "%v", err)
			}
		}
	}
	names := map[string]bool{}
	for p.tok.kind != tEOF {
		if !p.is(tIdent, "func") {
			p.errAt(p.tok, "expected 'func', found %s", p.tok.describe())
		}
		start := p.tok
		f := p.fn()
		if names[f.Name] {
			p.errAt(start, "function @%s defined twice", f.Name)
		}
		names[f.Name] = true
		m.Funcs = append(m.Funcs, f)
	}
	return m
}

func (p *parser) fn() *Func {
	start := p.tok
	p.next()
	f := &Func{Name: p.expect(tSymbol, "a function name like @forward").text, Loc: p.loc(start)}
	p.values = make(map[string]*Value)
	p.expectPunct("(", "to open the argument list")
	for !p.punct(")") {
		if len(f.Args) > 0 {
			p.expectPunct(",", "between arguments")
		}
		nt := p.expect(tValue, "an argument like %x")
		p.expectPunct(":", "after the argument name")
		t := p.typ()
		var attrs Attrs
		if p.punct("{") {
			var keys map[string]token
			attrs, keys = p.dict()
			if bad, err := CheckArgAttrs(attrs); err != nil {
				p.errAt(keyToken(keys, bad, nt), "%%%s: %v", nt.text, err)
			}
		}
		v := f.AddArg(nt.text, t, attrs)
		p.define(nt, v)
	}
	p.next()
	if p.tok.kind != tArrow {
		p.errAt(p.tok, "expected '->' and the result types, found %s", p.tok.describe())
	}
	p.next()
	p.expectPunct("(", "to open the result types")
	var rtypes []Type
	for !p.punct(")") {
		if len(rtypes) > 0 {
			p.expectPunct(",", "between result types")
		}
		rtypes = append(rtypes, p.typ())
		var attrs Attrs
		if p.punct("{") {
			attrs, _ = p.dict()
		}
		f.ResultAttrs = append(f.ResultAttrs, attrs)
	}
	p.next()
	if p.is(tIdent, "attributes") {
		p.next()
		f.Attrs, _ = p.dict()
	}
	p.expectPunct("{", "to open the function body")
	for !p.is(tIdent, "return") {
		if p.tok.kind == tEOF || p.punct("}") {
			p.errAt(p.tok, "function @%s has no return", f.Name)
		}
		f.Ops = append(f.Ops, p.op())
	}
	rt := p.tok
	p.next()
	for !p.punct("}") {
		if len(f.Results) > 0 {
			p.expectPunct(",", "between returned values")
		}
		f.Results = append(f.Results, p.use())
	}
	if len(f.Results) != len(rtypes) {
		p.errAt(rt, "return has %d values but @%s declares %d results", len(f.Results), f.Name, len(rtypes))
	}
	for i, v := range f.Results {
		if v.Type.Known() && rtypes[i].Known() && !v.Type.Equal(rtypes[i]) {
			p.errAt(rt, "returned value %d has type %s but @%s declares %s", i, v.Type, f.Name, rtypes[i])
		}
	}
	p.next()
	return f
}

// keyToken is the token of attribute key name, or def when there is none.
func keyToken(keys map[string]token, name string, def token) token {
	if t, ok := keys[name]; ok {
		return t
	}
	return def
}

func (p *parser) define(t token, v *Value) {
	if _, dup := p.values[t.text]; dup {
		p.errAt(t, "value %%%s defined twice", t.text)
	}
	p.values[t.text] = v
	if isDigits(t.text) {
		v.Name = "" // numbers are positional; the printer renumbers
	}
}

func (p *parser) use() *Value {
	t := p.expect(tValue, "a value like %x")
	v := p.values[t.text]
	if v == nil {
		p.errAt(t, "undefined value %%%s", t.text)
	}
	return v
}

func (p *parser) op() *Op {
	var names []token
	if p.tok.kind == tValue {
		for {
			names = append(names, p.tok)
			p.next()
			if !p.punct(",") {
				break
			}
			p.next()
			if p.tok.kind != tValue {
				p.errAt(p.tok, "expected a result name, found %s", p.tok.describe())
			}
		}
		p.expectPunct("=", "after the result names")
	}
	nameTok := p.tok
	if nameTok.kind != tIdent {
		p.errAt(nameTok, "expected an op name, found %s", nameTok.describe())
	}
	def := Lookup(nameTok.text)
	if def == nil {
		p.errAt(nameTok, "unknown op %q%s", nameTok.text, suggest(nameTok.text))
	}
	p.next()
	var operands []*Value
	for p.tok.kind == tValue {
		operands = append(operands, p.use())
		if !p.punct(",") {
			break
		}
		p.next()
	}
	if len(operands) < def.MinOperands || def.MaxOperands >= 0 && len(operands) > def.MaxOperands {
		p.errAt(nameTok, "op %s takes %s operands, got %d", def.Name, def.OperandCountString(), len(operands))
	}
	var attrs Attrs
	if p.punct("{") {
		var keys map[string]token
		attrs, keys = p.dict()
		if bad, err := def.CheckAttrs(attrs); err != nil {
			at := nameTok
			if t, ok := keys[bad]; ok {
				at = t
			}
			p.errAt(at, "%v", err)
		}
	} else if _, err := def.CheckAttrs(nil); err != nil {
		p.errAt(nameTok, "%v", err)
	}
	// Float attributes given as integer literals are stored as floats, so that the printed
	// form is canonical.
	for i, a := range attrs {
		if s := def.AttrSpec(a.Name); s != nil && s.Kind == KindFloat {
			if v, ok := a.Value.(Int); ok {
				attrs[i].Value = Float(v)
			}
		}
	}
	p.expectPunct(":", "before the result types")
	var types []Type
	if p.punct("(") {
		p.next()
		p.expectPunct(")", "for an op without results")
	} else {
		types = append(types, p.typ())
		for p.punct(",") {
			p.next()
			types = append(types, p.typ())
		}
	}
	if len(types) != len(names) {
		p.errAt(nameTok, "op %s has %d result names but %d result types", def.Name, len(names), len(types))
	}
	op := NewOp(def, operands, attrs, types)
	op.Loc = p.loc(nameTok)
	if p.punct("{") {
		p.annotations(op)
	}
	for i, n := range names {
		op.Results[i].Name = n.text
		p.define(n, op.Results[i])
	}
	return op
}

// suggest names the closest known op for a misspelling.
func suggest(name string) string {
	best, bestD := "", 3
	for n := range opIndex {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (p *parser) annotations(op *Op) {
	attrs, keys := p.dict()
	for _, a := range attrs {
		t := keys[a.Name]
		switch a.Name {
		case "stage":
			s, ok := a.Value.(Int)
			if !ok || s < 0 || s > math.MaxInt32 {
				p.errAt(t, "stage must be a non-negative integer, got %s", AttrString(a.Value))
			}
			op.Stage = int(s)
		case "tslice":
			s, ok := a.Value.(Int)
			if !ok || s < 0 || s > math.MaxInt32 {
				p.errAt(t, "tslice must be a non-negative integer, got %s", AttrString(a.Value))
			}
			op.Slice = int(s)
		case "phase":
			id, _ := a.Value.(Ident)
			ph, ok := ParsePhase(string(id))
			if !ok {
				p.errAt(t, "phase must be one of fwd, bwd_in, bwd_w, opt, got %s", AttrString(a.Value))
			}
			op.Phase = ph
		case "remat":
			if _, ok := a.Value.(Unit); !ok {
				p.errAt(t, "remat is a flag and takes no value")
			}
			op.Remat = true
		case "shard":
			s, err := ShardingFromAttr(a.Value)
			if err != nil {
				p.errAt(t, "%v", err)
			}
			op.Shard = s
		default:
			p.errAt(t, "unknown annotation %q (annotations are stage, shard, phase, remat; op attributes go before the ':')", a.Name)
		}
	}
}

// ShardingFromAttr reads a sharding written as in Sharding.Attr.
func ShardingFromAttr(a Attr) (*Sharding, error) {
	bad := fmt.Errorf("shard must be a list of mesh axes per dim (`_` for replicated), optionally {dims = [...], partial = [...]}, got %s", AttrString(a))
	s := &Sharding{}
	dims, ok := a.(List)
	if d, isDict := a.(Dict); isDict {
		as := Attrs(d)
		for _, e := range as {
			if e.Name != "dims" && e.Name != "partial" {
				return nil, bad
			}
		}
		dims, ok = as.Get("dims").(List)
		partial, pok := as.Get("partial").(List)
		if !pok {
			return nil, bad
		}
		for _, e := range partial {
			id, isID := e.(Ident)
			if !isID || id == "_" {
				return nil, bad
			}
			s.Partial = append(s.Partial, string(id))
		}
	}
	if !ok {
		return nil, bad
	}
	s.Dims = make([][]string, len(dims))
	for i, d := range dims {
		switch x := d.(type) {
		case Ident:
			if x != "_" {
				s.Dims[i] = []string{string(x)}
			}
		case List:
			for _, e := range x {
				id, isID := e.(Ident)
				if !isID || id == "_" {
					return nil, bad
				}
				s.Dims[i] = append(s.Dims[i], string(id))
			}
		default:
			return nil, bad
		}
	}
	return s, nil
}

func (p *parser) typ() Type {
	t := p.tok
	if p.punct("?") {
		p.next()
		return Type{}
	}
	if t.kind != tIdent {
		p.errAt(t, "expected a type like f32[2,3], found %s", t.describe())
	}
	dt, ok := ParseDType(t.text)
	if !ok {
		p.errAt(t, "unknown dtype %q (dtypes: f64, f32, f16, bf16, i64, i32, i8, u8, bool)", t.text)
	}
	p.next()
	return p.dims(dt)
}

// dims parses the `[d0,d1,…]` that follows a dtype.
func (p *parser) dims(dt DType) Type {
	p.expectPunct("[", "after the dtype (a scalar is written f32[])")
	shape := Shape{}
	n := 1
	for !p.punct("]") {
		if len(shape) > 0 {
			p.expectPunct(",", "between dims")
		}
		t := p.tok
		if t.kind != tInt {
			p.errAt(t, "expected a dim size, found %s", t.describe())
		}
		d, err := strconv.Atoi(t.text)
		if err != nil || d < 0 {
			p.errAt(t, "bad dim size %s", t.text)
		}
		if d > 0 && n > maxElements/d {
			p.errAt(t, "type has more than 2^50 elements")
		}
		n *= max(d, 1)
		shape = append(shape, d)
		p.next()
		if len(shape) > 64 {
			p.errAt(t, "rank above 64")
		}
	}
	p.next()
	return Type{DType: dt, Shape: shape}
}

// dict parses `{key = value, flag, …}` and returns it sorted, plus each key's token.
func (p *parser) dict() (Attrs, map[string]token) {
	p.expectPunct("{", "to open attributes")
	var as Attrs
	keys := map[string]token{}
	for !p.punct("}") {
		if len(as) > 0 {
			p.expectPunct(",", "between attributes")
		}
		kt := p.tok
		if kt.kind != tIdent && kt.kind != tString {
			p.errAt(kt, "expected an attribute name, found %s", kt.describe())
		}
		if _, dup := keys[kt.text]; dup {
			p.errAt(kt, "attribute %s given twice", kt.text)
		}
		keys[kt.text] = kt
		p.next()
		var v Attr = Unit{}
		if p.punct("=") {
			p.next()
			v = p.attrValue(0)
		}
		as = append(as, NamedAttr{kt.text, v})
	}
	p.next()
	return as.Sorted(), keys
}

func (p *parser) attrValue(depth int) Attr {
	if depth > 32 {
		p.errAt(p.tok, "attribute nesting too deep")
	}
	t := p.tok
	switch t.kind {
	case tInt:
		v, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			p.errAt(t, "integer %s out of range", t.text)
		}
		p.next()
		return Int(v)
	case tFloat:
		p.next()
		return Float(parseFloat(t.text))
	case tString:
		p.next()
		return String(t.text)
	case tIdent:
		switch t.text {
		case "true", "false":
			p.next()
			return BoolAttr(t.text == "true")
		case "dense":
			return p.dense()
		}
		if _, isDType := ParseDType(t.text); isDType {
			p.next()
			if p.punct("[") {
				// A dtype followed by dims is a type.
				dt, _ := ParseDType(t.text)
				return TypeAttr(p.dims(dt))
			}
			return Ident(t.text)
		}
		p.next()
		return Ident(t.text)
	case tPunct:
		switch t.text {
		case "[":
			p.next()
			l := List{}
			for !p.punct("]") {
				if len(l) > 0 {
					p.expectPunct(",", "between list elements")
				}
				l = append(l, p.attrValue(depth+1))
			}
			p.next()
			return l
		case "{":
			d, _ := p.dict()
			return Dict(d)
		case "?":
			p.next()
			return TypeAttr(Type{})
		}
	}
	p.errAt(t, "expected an attribute value, found %s", t.describe())
	return nil
}

func parseFloat(s string) float64 {
	switch s {
	case "inf":
		return math.Inf(1)
	case "-inf":
		return math.Inf(-1)
	case "nan":
		return math.NaN()
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		// Out-of-range literals saturate to ±Inf, as ParseFloat reports them.
		return f
	}
	return f
}

func (p *parser) dense() Attr {
	start := p.tok
	p.next()
	p.expectPunct("<", "after dense")
	t := p.typ()
	if !t.Known() {
		p.errAt(start, "dense data needs a concrete type")
	}
	p.expectPunct(":", "after the dense type")
	d := &Dense{Type: t}
	n := t.NumElements()
	switch {
	case p.is(tIdent, "elided"):
		p.errAt(p.tok, "dense data was elided when this IR was printed; it cannot be read back")
	case p.tok.kind == tHex:
		raw, err := hex.DecodeString(p.tok.text[2:])
		if err != nil {
			p.errAt(p.tok, "bad hex data: %v", err)
		}
		d.Data = raw
		p.next()
	case p.punct("["):
		p.next()
		d.Data = make([]byte, 0, min(n, 1<<20)*t.DType.Size())
		i := 0
		for !p.punct("]") {
			if i > 0 {
				p.expectPunct(",", "between elements")
			}
			if i >= n {
				p.errAt(p.tok, "dense %s has more than %d elements", t, n)
			}
			d.Data = append(d.Data, make([]byte, t.DType.Size())...)
			p.denseElem(d, i)
			i++
		}
		if i != n {
			p.errAt(p.tok, "dense %s needs %d elements, got %d", t, n, i)
		}
		p.next()
	default:
		d.Splat = true
		d.Data = make([]byte, t.DType.Size())
		p.denseElem(d, 0)
	}
	if err := d.Check(); err != nil {
		p.errAt(start, "%v", err)
	}
	p.expectPunct(">", "to close dense")
	return d
}

func (p *parser) denseElem(d *Dense, i int) {
	t := p.tok
	switch {
	case t.kind == tInt && !d.Type.DType.IsFloat():
		v, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			p.errAt(t, "integer %s out of range", t.text)
		}
		d.setI64(i, v)
	case t.kind == tInt || t.kind == tFloat:
		if !d.Type.DType.IsFloat() {
			p.errAt(t, "float %s in %s data", t.text, d.Type.DType)
		}
		d.setF64(i, parseFloat(t.text))
	case t.kind == tIdent && (t.text == "true" || t.text == "false"):
		if d.Type.DType != Bool {
			p.errAt(t, "%s in %s data", t.text, d.Type.DType)
		}
		d.setI64(i, b2i(t.text == "true"))
	default:
		p.errAt(t, "expected a number, found %s", t.describe())
	}
	p.next()
}
