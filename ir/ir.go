package ir

import "fmt"

// Loc is where an op or value came from: a position in IR or DSL text, or an ONNX node.
type Loc struct {
	File      string
	Line, Col int    // 1-based; 0 when unknown
	Node      string // ONNX node name and op type, e.g. `"Conv_3" (Conv)`, when imported
}

// Known reports whether the location says anything.
func (l Loc) Known() bool { return l.File != "" || l.Node != "" }

func (l Loc) String() string {
	s := l.File
	if l.Line > 0 {
		s = fmt.Sprintf("%s:%d:%d", l.File, l.Line, l.Col)
	}
	if l.Node != "" {
		if s != "" {
			s += ": "
		}
		s += "node " + l.Node
	}
	return s
}

// Value is an SSA value: a function argument or an op result. Values are compared by
// identity; Name is only for printing (an empty or all-digit name prints as a number).
type Value struct {
	Name string
	Type Type
	Def  *Op // defining op; nil for a function argument
	// Index is the result index within Def, or the argument index.
	Index int
}

// Phase says which part of a training step an op belongs to.
type Phase uint8

// The phases. PhaseNone is the zero value: not annotated.
const (
	PhaseNone Phase = iota
	Fwd             // forward
	BwdIn           // input (activation) gradients: "B"/"I" in schedules
	BwdW            // weight gradients: "W" in schedules
	Opt             // optimizer update
)

var phaseNames = [...]string{"", "fwd", "bwd_in", "bwd_w", "opt"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// ParsePhase maps a phase name to its Phase.
func ParsePhase(s string) (Phase, bool) {
	for i, n := range phaseNames {
		if i > 0 && n == s {
			return Phase(i), true
		}
	}
	return PhaseNone, false
}

// Sharding says how each dimension of an op's results is laid out over the device mesh:
// Dims[i] lists the mesh axes dimension i is split over (empty = replicated), and Partial
// lists mesh axes over which the value is a partial sum awaiting a reduction.
type Sharding struct {
	Dims    [][]string
	Partial []string
}

// NoStage marks an op that has not been assigned a pipeline stage.
const NoStage = -1

// Op is one operation. Annotations (Stage, Shard, Phase, Remat) are fields rather than
// attributes so that passes read them without lookups, but they print and parse as
// attributes after the result types.
type Op struct {
	Def      *OpDef
	Operands []*Value
	Results  []*Value
	Attrs    Attrs
	Stage    int // pipeline stage (virtual stages included), or NoStage
	Shard    *Sharding
	Phase    Phase
	Remat    bool // recomputed in backward rather than stashed
	// Slice is the token slice (TeraPipe) the op computes, or NoSlice: the token-slice pass
	// replicates the forward once per slice of the sequence, and split-stages cuts one
	// function per (stage, slice, phase).
	Slice int
	Loc   Loc
}

// NoSlice is the Slice of an op of a module that is not cut into token slices.
const NoSlice = -1

// Name is the op's name from the op table.
func (o *Op) Name() string { return o.Def.Name }

// Result returns the single result of a one-result op.
func (o *Op) Result() *Value { return o.Results[0] }

// NewOp creates an op with result values of the given types (no annotations).
func NewOp(def *OpDef, operands []*Value, attrs Attrs, types []Type) *Op {
	op := &Op{Def: def, Operands: operands, Attrs: attrs, Stage: NoStage, Slice: NoSlice}
	op.Results = make([]*Value, len(types))
	for i, t := range types {
		op.Results[i] = &Value{Type: t, Def: op, Index: i}
	}
	return op
}

// CopyAnnotations copies stage, token slice, shard, phase and remat from another op.
func (o *Op) CopyAnnotations(from *Op) {
	o.Stage, o.Slice, o.Shard, o.Phase, o.Remat = from.Stage, from.Slice, from.Shard, from.Phase, from.Remat
}

// Func is a function: arguments, a topologically ordered op list, and returned values.
type Func struct {
	Name        string
	Args        []*Value
	ArgAttrs    []Attrs // parallel to Args
	Results     []*Value
	ResultAttrs []Attrs // parallel to Results
	Attrs       Attrs
	Ops         []*Op
	Loc         Loc
}

// NewFunc creates an empty function.
func NewFunc(name string) *Func { return &Func{Name: name} }

// AddArg appends an argument and returns its value.
func (f *Func) AddArg(name string, t Type, attrs Attrs) *Value {
	v := &Value{Name: name, Type: t, Index: len(f.Args)}
	f.Args = append(f.Args, v)
	f.ArgAttrs = append(f.ArgAttrs, attrs)
	return v
}

// AddResult appends a returned value.
func (f *Func) AddResult(v *Value, attrs Attrs) {
	f.Results = append(f.Results, v)
	f.ResultAttrs = append(f.ResultAttrs, attrs)
}

// Arg returns the argument with the given name, or nil.
func (f *Func) Arg(name string) *Value {
	for _, a := range f.Args {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Replace rewrites every use (operands and returned values) of a key of repl to its value,
// following chains (a→b, b→c gives a→c). Passes batch their replacements through it so that a
// rewrite costs one walk over the function rather than one per replaced value.
func (f *Func) Replace(repl map[*Value]*Value) {
	if len(repl) == 0 {
		return
	}
	find := func(v *Value) *Value {
		for n := 0; n <= len(repl); n++ {
			w, ok := repl[v]
			if !ok {
				return v
			}
			v = w
		}
		return v // a cycle: leave it for the verifier to report
	}
	for _, op := range f.Ops {
		for i, v := range op.Operands {
			op.Operands[i] = find(v)
		}
	}
	for i, v := range f.Results {
		f.Results[i] = find(v)
	}
}

// Uses maps each value to the ops that use it (an op appears once per operand slot).
func (f *Func) Uses() map[*Value][]*Op {
	uses := make(map[*Value][]*Op)
	for _, op := range f.Ops {
		for _, v := range op.Operands {
			uses[v] = append(uses[v], op)
		}
	}
	return uses
}

// Module is a compilation unit: named functions plus module attributes (mesh, micro-batches…).
type Module struct {
	Name  string
	Attrs Attrs
	Funcs []*Func
	// Source is the text the module was parsed from, kept so that later diagnostics (the
	// verifier's) can show the offending line with a caret.
	Source *Source
}

// Source is a named text.
type Source struct {
	Name string
	Text string
}

// Func returns the function with the given name, or nil.
func (m *Module) Func(name string) *Func {
	for _, f := range m.Funcs {
		if f.Name == name {
			return f
		}
	}
	return nil
}
