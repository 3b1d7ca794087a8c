package ir

import (
	"strconv"
	"strings"
)

// PrintOptions adjusts printing. The zero value prints everything, which always parses back.
type PrintOptions struct {
	// ElideAbove, when positive, prints dense data with more elements than this as `elided`
	// (readable dumps of models with weights; such text no longer parses into runnable IR).
	ElideAbove int
}

// String prints the module in IR text form.
func (m *Module) String() string { return string(m.Append(nil, PrintOptions{})) }

// Append appends the module's text to b.
func (m *Module) Append(b []byte, opt PrintOptions) []byte {
	p := printer{b: b, opt: opt}
	p.module(m)
	return p.b
}

// String prints one function.
func (f *Func) String() string {
	p := printer{}
	p.fn(f)
	return string(p.b)
}

// String prints one op (with its operands' names as numbered within the op alone, so only for
// messages).
func (o *Op) String() string {
	p := printer{names: map[*Value]string{}, used: map[string]bool{}}
	for _, v := range o.Operands {
		if _, ok := p.names[v]; !ok {
			p.assign(v)
		}
	}
	for _, v := range o.Results {
		p.assign(v)
	}
	p.op(o)
	return strings.TrimSpace(string(p.b))
}

type printer struct {
	b     []byte
	opt   PrintOptions
	names map[*Value]string
	used  map[string]bool
	next  int
}

func (p *printer) module(m *Module) {
	if m.Name != "" || len(m.Attrs) > 0 {
		p.b = append(p.b, "module"...)
		if m.Name != "" {
			p.b = append(p.b, ' ')
			p.b = appendSymbol(p.b, m.Name)
		}
		if len(m.Attrs) > 0 {
			p.b = append(p.b, " attributes "...)
			p.attrs(m.Attrs)
		}
		p.b = append(p.b, "\n\n"...)
	}
	for i, f := range m.Funcs {
		if i > 0 {
			p.b = append(p.b, '\n')
		}
		p.fn(f)
	}
}

func appendSymbol(b []byte, name string) []byte {
	b = append(b, '@')
	if isBareName(name) {
		return append(b, name...)
	}
	return strconv.AppendQuote(b, name)
}

// assign gives v a printed name: its own if it has a usable, unused one, else the next number.
func (p *printer) assign(v *Value) { p.assignName(v, v.Name) }

func (p *printer) assignName(v *Value, name string) {
	if name != "" && !isDigits(name) {
		if p.used[name] {
			base := name
			for i := 1; p.used[name]; i++ {
				name = base + "_" + strconv.Itoa(i)
			}
		}
		p.used[name] = true
		p.names[v] = name
		return
	}
	p.names[v] = strconv.Itoa(p.next)
	p.next++
}

func (p *printer) fn(f *Func) {
	p.names = make(map[*Value]string, len(f.Args)+len(f.Ops))
	p.used = make(map[string]bool)
	p.next = 0
	// An unnamed argument prints as argN (numbers are for op results).
	for i, a := range f.Args {
		name := a.Name
		if name == "" || isDigits(name) {
			name = "arg" + strconv.Itoa(i)
		}
		p.assignName(a, name)
	}
	for _, op := range f.Ops {
		for _, r := range op.Results {
			p.assign(r)
		}
	}
	p.b = append(p.b, "func "...)
	p.b = appendSymbol(p.b, f.Name)
	p.b = append(p.b, '(')
	for i, a := range f.Args {
		if i > 0 {
			p.b = append(p.b, ", "...)
		}
		p.value(a)
		p.b = append(p.b, ": "...)
		p.b = a.Type.appendTo(p.b)
		if i < len(f.ArgAttrs) && len(f.ArgAttrs[i]) > 0 {
			p.b = append(p.b, ' ')
			p.attrs(f.ArgAttrs[i])
		}
	}
	p.b = append(p.b, ") -> ("...)
	for i, r := range f.Results {
		if i > 0 {
			p.b = append(p.b, ", "...)
		}
		p.b = r.Type.appendTo(p.b)
		if i < len(f.ResultAttrs) && len(f.ResultAttrs[i]) > 0 {
			p.b = append(p.b, ' ')
			p.attrs(f.ResultAttrs[i])
		}
	}
	p.b = append(p.b, ')')
	if len(f.Attrs) > 0 {
		p.b = append(p.b, " attributes "...)
		p.attrs(f.Attrs)
	}
	p.b = append(p.b, " {\n"...)
	for _, op := range f.Ops {
		p.op(op)
	}
	p.b = append(p.b, "  return"...)
	for i, r := range f.Results {
		if i > 0 {
			p.b = append(p.b, ',')
		}
		p.b = append(p.b, ' ')
		p.value(r)
	}
	p.b = append(p.b, "\n}\n"...)
}

func (p *printer) value(v *Value) {
	p.b = append(p.b, '%')
	name, ok := p.names[v]
	if !ok {
		// A value from outside the function: print it recognisably; the verifier reports it.
		name = "<undefined>"
		if v != nil && v.Name != "" {
			name = "<undefined " + v.Name + ">"
		}
		p.b = strconv.AppendQuote(p.b, name)
		return
	}
	if isBareName(name) {
		p.b = append(p.b, name...)
	} else {
		p.b = strconv.AppendQuote(p.b, name)
	}
}

func (p *printer) op(o *Op) {
	p.b = append(p.b, "  "...)
	for i, r := range o.Results {
		if i > 0 {
			p.b = append(p.b, ", "...)
		}
		p.value(r)
	}
	if len(o.Results) > 0 {
		p.b = append(p.b, " = "...)
	}
	p.b = append(p.b, o.Def.Name...)
	for i, v := range o.Operands {
		if i > 0 {
			p.b = append(p.b, ',')
		}
		p.b = append(p.b, ' ')
		p.value(v)
	}
	if len(o.Attrs) > 0 {
		p.b = append(p.b, ' ')
		p.attrs(o.Attrs)
	}
	p.b = append(p.b, " : "...)
	if len(o.Results) == 0 {
		p.b = append(p.b, "()"...)
	}
	for i, r := range o.Results {
		if i > 0 {
			p.b = append(p.b, ", "...)
		}
		p.b = r.Type.appendTo(p.b)
	}
	if ann := o.Annotations(); len(ann) > 0 {
		p.b = append(p.b, ' ')
		p.b = appendAttrs(p.b, ann)
	}
	p.b = append(p.b, '\n')
}

func (p *printer) attrs(as Attrs) {
	if p.opt.ElideAbove <= 0 {
		p.b = appendAttrs(p.b, as)
		return
	}
	p.b = appendAttrs(p.b, elide(as, p.opt.ElideAbove))
}

func elide(as Attrs, above int) Attrs {
	out := as
	for i, a := range as {
		if d, ok := a.Value.(*Dense); ok && !d.Splat && d.Len() > above {
			if &out[0] == &as[0] {
				out = append(Attrs(nil), as...)
			}
			out[i].Value = &Dense{Type: d.Type, Elided: true}
		}
	}
	return out
}

// Annotations returns the op's annotations as an attribute dictionary in their fixed print
// order: stage, tslice, shard, phase, remat.
func (o *Op) Annotations() Attrs {
	var as Attrs
	if o.Stage != NoStage {
		as = append(as, NamedAttr{"stage", Int(o.Stage)})
	}
	if o.Slice != NoSlice {
		as = append(as, NamedAttr{"tslice", Int(o.Slice)})
	}
	if o.Shard != nil {
		as = append(as, NamedAttr{"shard", o.Shard.Attr()})
	}
	if o.Phase != PhaseNone {
		as = append(as, NamedAttr{"phase", Ident(o.Phase.String())})
	}
	if o.Remat {
		as = append(as, NamedAttr{"remat", Unit{}})
	}
	return as
}

// Attr renders a sharding as an attribute value: `[_, tp]`, with `[dp, tp]` for a dim split
// over two axes, and `{dims = […], partial = [tp]}` when a partial sum is pending.
func (s *Sharding) Attr() Attr {
	dims := make(List, len(s.Dims))
	for i, d := range s.Dims {
		switch len(d) {
		case 0:
			dims[i] = Ident("_")
		case 1:
			dims[i] = Ident(d[0])
		default:
			l := make(List, len(d))
			for j, a := range d {
				l[j] = Ident(a)
			}
			dims[i] = l
		}
	}
	if len(s.Partial) == 0 {
		return dims
	}
	partial := make(List, len(s.Partial))
	for i, a := range s.Partial {
		partial[i] = Ident(a)
	}
	return Dict{{"dims", dims}, {"partial", partial}}
}
