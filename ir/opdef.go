package ir

import (
	"fmt"
	"sort"
	"strings"
)

// Trait is a property an op declares in the op table; passes read traits instead of
// switching on op names.
type Trait uint32

// The traits.
const (
	// Pure: no side effects; equal ops with equal operands compute equal results (cse, dce).
	Pure Trait = 1 << iota
	// Elementwise: each result element depends only on the operand elements at the same index
	// (after broadcasting); such ops fuse and propagate shardings.
	Elementwise
	// Broadcasting: operands follow numpy broadcasting.
	Broadcasting
	// Commutative: the first two operands can be swapped.
	Commutative
	// Reduction: reduces over some axes.
	Reduction
	// Collective: communicates over a mesh axis.
	Collective
	// P2P: point-to-point communication (send/recv).
	P2P
	// ConstantLike: produces a value fixed at compile time.
	ConstantLike
	// Loss: computes a scalar training loss.
	Loss
	// Calls: runs another function of the module (named by the attribute func): its operands
	// and results are that function's arguments and results marked `port`, checked by the
	// verifier against the callee rather than by type inference.
	Calls
	// State: acts on the rank's named state — its parameters and gradient accumulators,
	// named by attributes rather than passed as values — so it may appear only in a rank's
	// program (a function with the attribute rank), where op order is execution order.
	State
)

var traitNames = []struct {
	t Trait
	n string
}{{Pure, "pure"}, {Elementwise, "elementwise"}, {Broadcasting, "broadcasting"},
	{Commutative, "commutative"}, {Reduction, "reduction"}, {Collective, "collective"},
	{P2P, "p2p"}, {ConstantLike, "constant"}, {Loss, "loss"}, {Calls, "calls"}, {State, "state"}}

func (t Trait) String() string {
	var s []string
	for _, tn := range traitNames {
		if t&tn.t != 0 {
			s = append(s, tn.n)
		}
	}
	return strings.Join(s, ",")
}

// AttrKind is the kind of value an attribute must have.
type AttrKind uint8

// The attribute kinds.
const (
	KindInt     AttrKind = iota + 1
	KindFloat            // Float (an Int literal is accepted and converted)
	KindBool             // Bool
	KindString           // String
	KindEnum             // Ident from AttrSpec.Enum
	KindDType            // Ident naming a dtype
	KindInts             // List of Int
	KindFloats           // List of Float
	KindType             // TypeAttr
	KindDense            // *Dense
	KindAxis             // Ident naming a mesh axis
	KindAny              // anything (checked by the op's inference)
	KindStrings          // List of String
)

var kindNames = [...]string{KindInt: "integer", KindFloat: "float", KindBool: "bool",
	KindString: "string", KindEnum: "identifier", KindDType: "dtype", KindInts: "integer list",
	KindFloats: "float list", KindType: "tensor type", KindDense: "dense tensor",
	KindAxis: "mesh axis", KindAny: "attribute", KindStrings: "string list"}

func (k AttrKind) String() string { return kindNames[k] }

// AttrSpec declares one attribute of an op.
type AttrSpec struct {
	Name     string
	Kind     AttrKind
	Optional bool
	Enum     []string // allowed identifiers for KindEnum
}

// InferFunc computes result types from operand types and attributes. It is only called
// after operand counts and attribute kinds have been checked against the OpDef.
type InferFunc func(in []Type, attrs Attrs) ([]Type, error)

// OpDef is one row of the op table.
type OpDef struct {
	Name string
	Doc  string
	// MinOperands..MaxOperands operands are accepted; MaxOperands < 0 means unbounded.
	MinOperands, MaxOperands int
	Traits                   Trait
	Attrs                    []AttrSpec
	Infer                    InferFunc
}

// Has reports whether the op has all the given traits.
func (d *OpDef) Has(t Trait) bool { return d.Traits&t == t }

// AttrSpec returns the spec of the named attribute, or nil.
func (d *OpDef) AttrSpec(name string) *AttrSpec {
	for i := range d.Attrs {
		if d.Attrs[i].Name == name {
			return &d.Attrs[i]
		}
	}
	return nil
}

// OperandCountString describes the accepted operand count ("2", "1 to 3", "at least 1").
func (d *OpDef) OperandCountString() string {
	switch {
	case d.MaxOperands < 0:
		return fmt.Sprintf("at least %d", d.MinOperands)
	case d.MinOperands == d.MaxOperands:
		return fmt.Sprint(d.MinOperands)
	default:
		return fmt.Sprintf("%d to %d", d.MinOperands, d.MaxOperands)
	}
}

// annotationNames are attribute names reserved for op annotations; no op may declare them.
var annotationNames = map[string]bool{"stage": true, "tslice": true, "shard": true, "phase": true, "remat": true}

var opIndex map[string]*OpDef

// Lookup finds an op by name.
func Lookup(name string) *OpDef { return opIndex[name] }

// Ops returns the op table sorted by name.
func Ops() []*OpDef {
	out := make([]*OpDef, 0, len(opIndex))
	for _, d := range opIndex {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// MustLookup is Lookup for names the caller knows are in the table (a typo is a programming
// error caught by the first test that runs the code).
func MustLookup(name string) *OpDef {
	d := opIndex[name]
	if d == nil {
		panic("ir: unknown op " + name)
	}
	return d
}

func init() {
	opIndex = make(map[string]*OpDef, len(opTable))
	for i := range opTable {
		d := &opTable[i]
		if err := validateDef(d); err != nil {
			panic(err)
		}
		if opIndex[d.Name] != nil {
			panic("ir: op " + d.Name + " defined twice")
		}
		opIndex[d.Name] = d
	}
}

// validateDef checks one table row once at start-up, so a malformed row fails every test.
func validateDef(d *OpDef) error {
	switch {
	case d.Name == "" || !isBareName(d.Name):
		return fmt.Errorf("ir: bad op name %q", d.Name)
	case d.Doc == "":
		return fmt.Errorf("ir: op %s has no doc", d.Name)
	case d.Infer == nil:
		return fmt.Errorf("ir: op %s has no shape inference", d.Name)
	case d.MaxOperands >= 0 && d.MaxOperands < d.MinOperands:
		return fmt.Errorf("ir: op %s: bad operand counts", d.Name)
	}
	for _, a := range d.Attrs {
		if annotationNames[a.Name] {
			return fmt.Errorf("ir: op %s declares reserved attribute %q", d.Name, a.Name)
		}
		if a.Kind == 0 || (a.Kind == KindEnum) != (len(a.Enum) > 0) {
			return fmt.Errorf("ir: op %s attribute %s: bad kind", d.Name, a.Name)
		}
	}
	return nil
}

// CheckAttrs checks attribute names and kinds against the op's table row. It returns the name
// of the offending attribute (empty when the problem is a missing one) and the error.
func (d *OpDef) CheckAttrs(as Attrs) (string, error) {
	for _, a := range as {
		spec := d.AttrSpec(a.Name)
		if spec == nil {
			return a.Name, fmt.Errorf("op %s has no attribute %q%s", d.Name, a.Name, d.attrList())
		}
		if err := spec.check(a.Value); err != nil {
			return a.Name, fmt.Errorf("op %s attribute %s: %v", d.Name, a.Name, err)
		}
	}
	for _, s := range d.Attrs {
		if !s.Optional && !as.Has(s.Name) {
			return "", fmt.Errorf("op %s needs attribute %s (%s)", d.Name, s.Name, s.Kind)
		}
	}
	return "", nil
}

func (d *OpDef) attrList() string {
	if len(d.Attrs) == 0 {
		return " (it takes none)"
	}
	names := make([]string, len(d.Attrs))
	for i, a := range d.Attrs {
		names[i] = a.Name
	}
	return " (it takes " + strings.Join(names, ", ") + ")"
}

func (s *AttrSpec) check(v Attr) error {
	bad := func() error { return fmt.Errorf("want %s, got %s", s.Kind, AttrString(v)) }
	switch s.Kind {
	case KindInt:
		if _, ok := v.(Int); !ok {
			return bad()
		}
	case KindFloat:
		switch v.(type) {
		case Float, Int:
		default:
			return bad()
		}
	case KindBool:
		if _, ok := v.(BoolAttr); !ok {
			return bad()
		}
	case KindString:
		if _, ok := v.(String); !ok {
			return bad()
		}
	case KindEnum:
		id, ok := v.(Ident)
		if !ok {
			return bad()
		}
		for _, e := range s.Enum {
			if string(id) == e {
				return nil
			}
		}
		return fmt.Errorf("want one of %s, got %s", strings.Join(s.Enum, ", "), id)
	case KindDType:
		id, ok := v.(Ident)
		if !ok {
			return bad()
		}
		if _, ok := ParseDType(string(id)); !ok {
			return fmt.Errorf("unknown dtype %s", id)
		}
	case KindInts:
		l, ok := v.(List)
		if !ok {
			return bad()
		}
		for _, e := range l {
			if _, ok := e.(Int); !ok {
				return bad()
			}
		}
	case KindStrings:
		l, ok := v.(List)
		if !ok {
			return bad()
		}
		for _, e := range l {
			if _, ok := e.(String); !ok {
				return bad()
			}
		}
	case KindFloats:
		l, ok := v.(List)
		if !ok {
			return bad()
		}
		for _, e := range l {
			switch e.(type) {
			case Float, Int:
			default:
				return bad()
			}
		}
	case KindType:
		t, ok := v.(TypeAttr)
		if !ok || !Type(t).Known() {
			return bad()
		}
	case KindDense:
		if _, ok := v.(*Dense); !ok {
			return bad()
		}
	case KindAxis:
		if id, ok := v.(Ident); !ok || id == "_" {
			return bad()
		}
	}
	return nil
}
