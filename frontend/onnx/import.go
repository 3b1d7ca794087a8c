package onnx

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// Options controls an import.
type Options struct {
	Dims         map[string]int // --dim NAME=VALUE bindings of symbolic dims
	Microbatches int            // 0 or 1: as declared. M > 1: the leading (batch) dim of every graph input is divided by M before shape folding, so @forward describes one micro-batch (error if not divisible, naming the input)
	Replicas     int            // > 1: Microbatches counts the micro-batches of that many data-parallel replicas (for messages)
	// Frozen gives graph inputs fixed values, imported as initializers (constants), for inputs
	// that decide shapes, which a static IR cannot take at run time.
	Frozen map[string]*ir.Dense
	// Batch > 0 re-batches a model exported with a fixed batch of 1: the leading dim of every
	// graph input becomes Batch (before Microbatches divides it), and the shape constants
	// that carry the batch follow (see batch.go); 0 imports the model as it is.
	Batch int
}

// Load reads an .onnx file (and external data relative to its directory), decodes it,
// imports it and verifies the result.
func Load(path string, opts Options) (*ir.Module, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Import(path, data, filepath.Dir(path), opts)
}

// Import is Load from bytes: name is the file name used in diagnostics and dir resolves
// external tensor data ("" forbids external data).
func Import(name string, data []byte, dir string, opts Options) (*ir.Module, error) {
	var m onnxpb.ModelProto
	if err := (proto.UnmarshalOptions{RecursionLimit: 64}).Unmarshal(data, &m); err != nil {
		return nil, &ir.Error{Loc: ir.Loc{File: name}, Msg: "not a valid ONNX model: " + protoMessage(err)}
	}
	if err := freezeInputs(&m, opts.Frozen); err != nil {
		return nil, &ir.Error{Loc: ir.Loc{File: name}, Msg: err.Error()}
	}
	budget := foldBase + foldPerByte*int64(len(data))
	var mod *ir.Module
	var err error
	if opts.Batch > 0 {
		mod, err = importBatched(name, &m, dir, opts, budget)
	} else {
		mod, err = (&importer{file: name, dir: dir, opts: opts, model: &m, foldBudget: budget}).run()
	}
	if err != nil {
		return nil, err
	}
	if err := ir.Verify(mod); err != nil {
		return nil, err
	}
	return mod, nil
}

// protoMessage drops the "proto:" prefix (followed by a space or, deliberately, a no-break
// space) from a protobuf decoding error.
func protoMessage(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "proto:"); ok {
		msg = strings.TrimLeft(rest, " \u00a0")
	}
	return msg
}

type importer struct {
	file  string
	dir   string
	opts  Options
	model *onnxpb.ModelProto
	g     *onnxpb.GraphProto
	opset int64 // version of the default domain

	fn *ir.Func
	b  *ir.Builder

	vals   map[string]*ir.Value // tensors defined so far
	inits  map[string]*ir.Dense // initializer data by name
	consts map[string]bool      // initializers imported as constants (created on first use)
	// weights are the Constant nodes whose tensor is imported as an initializer would be (see
	// constantWeights), by output name, in graph order.
	weights map[string]*onnxpb.NodeProto
	order   []string               // initializer names, then those Constant outputs
	lost    map[string]string      // outputs a node declares but the importer does not produce
	node    *onnxpb.NodeProto      // the node being imported
	loc     ir.Loc                 // its location
	names   map[*ir.Value]struct{} // values that already carry an ONNX name

	// batch follows the batch dim when Options.Batch re-batches the model (batch.go).
	batch *batchRef

	// foldBudget is the element visits constant folding may still spend (see foldCost): a
	// fixed allowance plus an amount per byte of the model, so the importer's work stays
	// proportional to its input however the nodes chain large constants together.
	foldBudget int64
}

func (imp *importer) errf(loc ir.Loc, format string, args ...any) error {
	return &ir.Error{Loc: loc, Msg: fmt.Sprintf(format, args...)}
}

func (imp *importer) fileLoc() ir.Loc { return ir.Loc{File: imp.file} }

func nodeLoc(file string, n *onnxpb.NodeProto) ir.Loc {
	name := n.Name
	if name == "" && len(n.Output) > 0 {
		name = n.Output[0]
	}
	return ir.Loc{File: file, Node: fmt.Sprintf("%q (%s)", name, n.OpType)}
}

func (imp *importer) run() (*ir.Module, error) {
	m := imp.model
	g := m.Graph
	if g == nil {
		return nil, imp.errf(imp.fileLoc(), "model has no graph")
	}
	imp.g = g
	opsets := ir.Attrs{}
	imp.opset = -1
	for _, o := range m.OpsetImport {
		dom := o.Domain
		if dom == "ai.onnx" {
			dom = ""
		}
		if dom == "" {
			imp.opset = o.Version
		}
		opsets = opsets.Set(dom, ir.Int(o.Version))
	}
	if imp.opset < 0 {
		if len(m.OpsetImport) > 0 || m.IrVersion >= 3 {
			return nil, imp.errf(imp.fileLoc(), "model imports no version of the default ONNX operator set")
		}
		imp.opset = 1
		opsets = opsets.Set("", ir.Int(1))
	}
	if imp.opset < 1 || imp.opset > 1000 {
		return nil, imp.errf(imp.fileLoc(), "bad default opset version %d", imp.opset)
	}
	// Unsupported ops are reported before anything else: they are what a user most needs to
	// know about a model.
	for _, n := range g.Node {
		if err := imp.checkSupported(n); err != nil {
			return nil, err
		}
	}
	// TrainingInfo (on-device training steps) is ignored: the inference graph imports as usual.

	name := sanitize(g.Name)
	if name == "" {
		name = sanitize(strings.TrimSuffix(filepath.Base(imp.file), filepath.Ext(imp.file)))
	}
	if name == "" {
		name = "model"
	}
	mod := &ir.Module{Name: name}
	mod.Attrs = mod.Attrs.Set("opset", ir.Dict(opsets))
	if p := strings.TrimSpace(m.ProducerName + " " + m.ProducerVersion); p != "" {
		mod.Attrs = mod.Attrs.Set("producer", ir.String(p))
	}
	imp.fn = ir.NewFunc(ir.ForwardFunc)
	imp.fn.Loc = imp.fileLoc()
	mod.Funcs = []*ir.Func{imp.fn}
	imp.b = ir.NewBuilder(imp.fn)
	imp.b.Emit = imp.emit
	imp.vals = map[string]*ir.Value{}
	imp.inits = map[string]*ir.Dense{}
	imp.consts = map[string]bool{}
	imp.weights = map[string]*onnxpb.NodeProto{}
	imp.lost = map[string]string{}
	imp.names = map[*ir.Value]struct{}{}

	if err := imp.initializers(); err != nil {
		return nil, err
	}
	if err := imp.inputs(); err != nil {
		return nil, err
	}
	imp.constantWeights()
	if err := imp.params(); err != nil {
		return nil, err
	}
	for _, n := range g.Node {
		if len(n.Output) == 1 && imp.weights[n.Output[0]] == n {
			continue // imported with the initializers
		}
		if err := imp.importNode(n); err != nil {
			return nil, err
		}
		if imp.batch != nil && imp.batch.factor > 1 {
			if err := imp.checkBatch(n); err != nil {
				return nil, err
			}
		}
	}
	if err := imp.outputs(); err != nil {
		return nil, err
	}
	imp.b.Loc = ir.Loc{}
	raise(imp.fn)
	dce(imp.fn)
	inputRanges(imp.fn)
	if err := imp.b.Err(); err != nil {
		return nil, err
	}
	return mod, nil
}

// sanitize turns a graph or file name into a bare IR symbol.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// bareName reports whether the printer keeps name as written (a bare name, not all digits).
func bareName(s string) bool {
	if s == "" {
		return false
	}
	digits := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
		digits = digits && c >= '0' && c <= '9'
	}
	return !digits
}

// printableName reports whether an ONNX name can serve as an IR value name (the printer
// quotes names that are not bare).
func printableName(s string) bool {
	if s == "" || len(s) > 256 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// emit receives every op the builder creates: it guards result sizes and folds ops whose
// operands are all compile-time constants into constants (the IR stays static and shape
// arithmetic disappears); unused constants are removed at the end.
func (imp *importer) emit(op *ir.Op) {
	for _, r := range op.Results {
		if err := ir.CheckShapeSize(r.Type.Shape); err != nil {
			imp.b.Failf("%s: %v", op.Def.Name, err)
			return
		}
	}
	if op.Def.Name != "constant" && len(op.Operands) > 0 {
		in := make([]*ir.Dense, len(op.Operands))
		for i, x := range op.Operands {
			in[i] = constOf(x)
			// Folding costs time in the operands' size too (reductions walk their input):
			// huge splat constants are left for run time.
			if in[i] == nil || in[i].Len() > maxFoldOperand {
				in[len(in)-1] = nil
				break
			}
		}
		if in[len(in)-1] != nil && imp.spendFold(op, in) {
			out, err := ir.Fold(op, in)
			if err != nil {
				imp.b.Failf("%s: %v", op.Def.Name, err)
				return
			}
			if out != nil {
				for i, r := range op.Results {
					c := ir.NewOp(ir.MustLookup("constant"), nil, ir.Attrs{{Name: "value", Value: out[i]}}, nil)
					c.Loc, c.Stage, c.Phase = op.Loc, op.Stage, op.Phase
					r.Def, r.Index = c, 0
					c.Results = []*ir.Value{r}
					imp.fn.Ops = append(imp.fn.Ops, c)
				}
				return
			}
		}
	}
	imp.fn.Ops = append(imp.fn.Ops, op)
}

// maxFoldOperand bounds the element count of operands the importer folds.
const maxFoldOperand = 1 << 20

// Folding allowance: every model may fold foldBase element visits, plus foldPerByte for
// each byte of its file. Real models fold shape arithmetic of a few elements per node and
// never come near it; a hostile one (thousands of ten-byte nodes each reducing a
// million-element splat) would otherwise spend seconds of compile time per kilobyte.
const (
	foldBase    = 1 << 22
	foldPerByte = 1 << 10
)

// spendFold reports whether op may be folded within the remaining budget, and spends its
// cost: the elements it reads plus the elements it writes. An op over budget stays in the
// graph for run time, which is always correct.
func (imp *importer) spendFold(op *ir.Op, in []*ir.Dense) bool {
	var cost int64
	for _, d := range in {
		cost += int64(d.Len())
	}
	for _, r := range op.Results {
		if r.Type.Known() {
			cost += int64(r.Type.NumElements())
		}
	}
	if cost > imp.foldBudget {
		return false
	}
	imp.foldBudget -= cost
	return true
}

// constOf returns the compile-time value of v, or nil.
func constOf(v *ir.Value) *ir.Dense {
	if v == nil || v.Def == nil || v.Def.Def.Name != "constant" {
		return nil
	}
	d, _ := v.Def.Attrs.Get("value").(*ir.Dense)
	return d
}

// nonTrainable lists, per op type, the input slots that hold shapes, indices, statistics or
// hyper-parameters rather than trainable weights. A float initializer that feeds only such
// slots is imported as a constant, not a parameter.
var nonTrainable = map[string][]int{
	"Reshape": {1}, "Slice": {1, 2, 3, 4}, "Squeeze": {1}, "Unsqueeze": {1}, "Split": {1},
	"Pad": {1, 2, 3}, "Resize": {1, 2, 3}, "Upsample": {1}, "Expand": {1}, "Tile": {1},
	"ConstantOfShape": {0}, "Range": {0, 1, 2}, "BatchNormalization": {3, 4}, "Clip": {1, 2},
	"Dropout": {1, 2}, "ReduceSum": {1}, "ReduceMean": {1}, "ReduceMax": {1}, "ReduceMin": {1},
	"ReduceProd": {1}, "ReduceL1": {1}, "ReduceL2": {1}, "ReduceLogSum": {1}, "ReduceLogSumExp": {1},
	"ReduceSumSquare": {1}, "Shape": {0}, "Size": {0}, "CastLike": {1},
}

func (imp *importer) initializers() error {
	for _, t := range imp.g.Initializer {
		if t.Name == "" {
			return imp.errf(imp.fileLoc(), "initializer without a name")
		}
		if _, dup := imp.inits[t.Name]; dup {
			return imp.errf(imp.fileLoc(), "initializer %q defined twice", t.Name)
		}
		d, err := tensorData(t, imp.dir)
		if err != nil {
			return imp.errf(imp.fileLoc(), "initializer %q: %v", t.Name, err)
		}
		imp.inits[t.Name] = d
		imp.order = append(imp.order, t.Name)
	}
	if len(imp.g.SparseInitializer) > 0 {
		return imp.errf(imp.fileLoc(), "sparse initializers are not supported")
	}
	return nil
}

// constantWeights treats the Constant nodes that hold weights as initializers, so that the
// rule of params decides whether each is a parameter: exporters such as paddle2onnx, and
// older ones, store every weight of a model in a Constant node rather than an initializer.
// A Constant is taken when it feeds at least one trainable operand slot (nonTrainable) and
// its tensor looks like a weight (weightLike); the others are imported where they stand.
// A Constant whose value cannot be read is left to its node, which reports the error with
// its location.
func (imp *importer) constantWeights() {
	trainable := map[string]bool{}
	for _, n := range imp.g.Node {
		for i, in := range n.Input {
			if !slices.Contains(nonTrainable[n.OpType], i) {
				trainable[in] = true
			}
		}
	}
	for _, n := range imp.g.Node {
		if n.OpType != "Constant" || len(n.Output) != 1 || !trainable[n.Output[0]] {
			continue
		}
		name := n.Output[0]
		if _, taken := imp.inits[name]; taken || imp.vals[name] != nil || imp.weights[name] != nil {
			continue // a name defined twice: the node's import reports it
		}
		d, err := constantValue(n, imp.dir)
		if err != nil || !weightLike(d) {
			continue
		}
		imp.inits[name] = d
		imp.weights[name] = n
		imp.order = append(imp.order, name)
	}
}

// weightLike reports whether a Constant node's tensor can be a weight: floating-point, at
// least two elements, every value finite and of magnitude below 1e4. A one-element tensor
// is an epsilon, a scale or an exponent far more often than a weight (and an initializer
// of rank 0 is a constant too); a tensor holding an infinity or a huge value is an
// attention mask (−∞, −1e9, float32's lowest, −1e4), which training must not change.
func weightLike(d *ir.Dense) bool {
	if !d.Type.DType.IsFloat() || d.Type.Rank() == 0 || d.Len() < 2 {
		return false
	}
	for i := range d.Len() {
		if v := d.F64(i); !(math.Abs(v) < 1e4) {
			return false
		}
	}
	return true
}

// params decides, for every initializer (and Constant node taken by constantWeights),
// whether it is a parameter or a constant: float initializers of rank >= 1 used in at least
// one trainable slot become parameters; the rest (integers, bools, scalars, and tensors
// that feed only shape, index or statistics slots) are constants, created where first used
// (and folded away where possible).
func (imp *importer) params() error {
	trainable := map[string]bool{}
	used := map[string]bool{}
	for _, n := range imp.g.Node {
		for i, in := range n.Input {
			if _, ok := imp.inits[in]; !ok || imp.vals[in] != nil {
				continue
			}
			used[in] = true
			if !slices.Contains(nonTrainable[n.OpType], i) {
				trainable[in] = true
			}
		}
	}
	for _, o := range imp.g.Output {
		if _, ok := imp.inits[o.Name]; ok && imp.vals[o.Name] == nil {
			used[o.Name] = true
		}
	}
	for _, name := range imp.order {
		if !used[name] || imp.vals[name] != nil {
			continue
		}
		d := imp.inits[name]
		if trainable[name] && d.Type.DType.IsFloat() && d.Type.Rank() > 0 {
			at := ir.Attrs{{Name: ir.AttrData, Value: d}, {Name: ir.AttrParam, Value: ir.Unit{}}}
			if !bareName(name) {
				// The printer cannot keep this name (it renames all-digit and odd names).
				at = at.Set(ir.AttrName, ir.String(name))
			}
			v := imp.fn.AddArg(name, d.Type, at)
			imp.vals[name] = v
			imp.names[v] = struct{}{}
		} else {
			imp.consts[name] = true
		}
	}
	return nil
}

type unboundDim struct {
	name  string
	where []string
}

// inputs turns graph inputs that are not initializers into @forward arguments, binding
// symbolic dims and dividing the batch dim by the micro-batch count.
func (imp *importer) inputs() error {
	unbound := map[string]*unboundDim{}
	var order []string
	var shapes []ir.Shape
	var dtypes []ir.DType
	var names []string
	seen := map[string]bool{}
	// A --dim that names no symbolic dim is a typo (or a model other than the one meant);
	// binding nothing without a word would leave the user puzzling over the shapes. (Checked
	// after unbound dims, whose message lists the names to bind.)
	symbolic := map[string]bool{}
	for _, in := range imp.g.Input {
		for _, d := range in.GetType().GetTensorType().GetShape().GetDim() {
			if p := d.GetDimParam(); p != "" {
				symbolic[p] = true
			}
		}
	}
	for _, in := range imp.g.Input {
		if _, isInit := imp.inits[in.Name]; isInit {
			continue // an old export listing its initializers as inputs
		}
		if in.Name == "" {
			return imp.errf(imp.fileLoc(), "graph input without a name")
		}
		if seen[in.Name] {
			return imp.errf(imp.fileLoc(), "graph input %q listed twice", in.Name)
		}
		seen[in.Name] = true
		tt := in.GetType().GetTensorType()
		if tt == nil {
			return imp.errf(imp.fileLoc(), "graph input %q is not a tensor (only tensor inputs are supported)", in.Name)
		}
		dt, err := irDType(tt.ElemType)
		if err != nil {
			return imp.errf(imp.fileLoc(), "graph input %q: %v", in.Name, err)
		}
		if tt.Shape == nil {
			return imp.errf(imp.fileLoc(), "graph input %q has no shape", in.Name)
		}
		if len(tt.Shape.Dim) > maxRank {
			return imp.errf(imp.fileLoc(), "graph input %q: rank %d exceeds the limit of %d", in.Name, len(tt.Shape.Dim), maxRank)
		}
		shape := make(ir.Shape, len(tt.Shape.Dim))
		for i, d := range tt.Shape.Dim {
			if v, ok := d.Value.(*onnxpb.TensorShapeProto_Dimension_DimValue); ok {
				if v.DimValue < 0 || v.DimValue > 1<<40 {
					return imp.errf(imp.fileLoc(), "graph input %q: bad dim %d at %d", in.Name, v.DimValue, i)
				}
				shape[i] = int(v.DimValue)
				continue
			}
			key := d.GetDimParam()
			if val, ok := imp.opts.Dims[key]; ok && key != "" {
				if val < 0 || val > 1<<40 {
					return imp.errf(imp.fileLoc(), "--dim %s=%d is out of range", key, val)
				}
				shape[i] = val
				continue
			}
			if unbound[key] == nil {
				unbound[key] = &unboundDim{name: key}
				order = append(order, key)
			}
			unbound[key].where = append(unbound[key].where, fmt.Sprintf("input %q dim %d", in.Name, i))
		}
		if imp.batch != nil {
			if err := imp.batchInput(in, shape); err != nil {
				return err
			}
		}
		shapes, dtypes, names = append(shapes, shape), append(dtypes, dt), append(names, in.Name)
	}
	if len(unbound) > 0 {
		var parts []string
		example := ""
		for _, k := range order {
			u := unbound[k]
			label := k
			if k == "" {
				label = "(unnamed)"
			} else if example == "" {
				example = k
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", label, strings.Join(u.where, ", ")))
		}
		how := "bind each with --dim NAME=VALUE"
		if example != "" {
			how += fmt.Sprintf(", e.g. --dim %s=8", example)
		}
		if _, ok := unbound[""]; ok {
			how += "; unnamed dims cannot be bound and must be fixed in the model"
		}
		return imp.errf(imp.fileLoc(), "unbound symbolic dims: %s; %s", strings.Join(parts, "; "), how)
	}
	var unknown []string
	for k := range imp.opts.Dims {
		if !symbolic[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		have := "the model's inputs have no symbolic dims"
		if len(symbolic) > 0 {
			var names []string
			for k := range symbolic {
				names = append(names, k)
			}
			sort.Strings(names)
			have = "its symbolic dims are " + strings.Join(names, ", ")
		}
		return imp.errf(imp.fileLoc(), "--dim %s: the model has no symbolic dim of that name (%s)", strings.Join(unknown, ", "), have)
	}
	mb := imp.opts.Microbatches
	for i, shape := range shapes {
		if mb > 1 {
			if len(shape) == 0 {
				return imp.errf(imp.fileLoc(), "--microbatches %d: graph input %q is a scalar and has no batch dim", mb, names[i])
			}
			if shape[0]%mb != 0 {
				what := fmt.Sprintf("--microbatches %d", mb)
				if r := imp.opts.Replicas; r > 1 {
					what = fmt.Sprintf("--microbatches %d × --dp %d", mb/r, r)
				}
				lo := shape[0] / mb * mb
				sizes := fmt.Sprint(mb)
				if lo > 0 {
					sizes = fmt.Sprintf("%d or %d", lo, lo+mb)
				}
				batch := "(its leading dim)"
				if imp.batch != nil {
					batch = "(--batch)"
				}
				return imp.errf(imp.fileLoc(), "%s: graph input %q has batch size %d %s, which does not divide into %d micro-batches; batch sizes that do: %s", what, names[i], shape[0], batch, mb, sizes)
			}
			shape[0] /= mb
		}
		if err := ir.CheckShapeSize(shape); err != nil {
			return imp.errf(imp.fileLoc(), "graph input %q: %v", names[i], err)
		}
		v := imp.fn.AddArg(names[i], ir.Type{DType: dtypes[i], Shape: shape},
			ir.Attrs{{Name: ir.AttrInput, Value: ir.Unit{}}, {Name: ir.AttrName, Value: ir.String(names[i])}})
		imp.vals[names[i]] = v
		imp.names[v] = struct{}{}
	}
	return nil
}

// value returns the IR value of a tensor name, creating constants for initializers on first use.
func (imp *importer) value(name string) (*ir.Value, error) {
	if v := imp.vals[name]; v != nil {
		return v, nil
	}
	if imp.consts[name] {
		v := imp.b.Constant(imp.inits[name])
		if err := imp.b.Err(); err != nil {
			return nil, err
		}
		v.Name = name
		imp.vals[name] = v
		imp.names[v] = struct{}{}
		return v, nil
	}
	if why, ok := imp.lost[name]; ok {
		return nil, imp.errf(imp.loc, "input %q is %s, which ppc does not produce", name, why)
	}
	return nil, imp.errf(imp.loc, "input %q is not defined (no graph input, initializer or earlier node output has that name)", name)
}

// constValue returns the compile-time value of a tensor name, or nil.
func (imp *importer) constValue(name string) *ir.Dense {
	if d, ok := imp.inits[name]; ok {
		return d
	}
	return constOf(imp.vals[name])
}

func (imp *importer) importNode(n *onnxpb.NodeProto) error {
	imp.node = n
	imp.loc = nodeLoc(imp.file, n)
	imp.b.Loc = imp.loc
	h := handlers[n.OpType]
	c := &nodeCtx{imp: imp, n: n, opset: imp.opset}
	c.attrs = map[string]*onnxpb.AttributeProto{}
	for _, a := range n.Attribute {
		if a.RefAttrName != "" {
			return c.errorf("attribute %s refers to a function attribute, which is not supported", a.Name)
		}
		c.attrs[a.Name] = a
	}
	c.outs = make([]*ir.Value, len(n.Output))
	if err := h(c); err != nil {
		var e *ir.Error
		if errors.As(err, &e) {
			return err
		}
		return c.errorf("%v", err)
	}
	if err := imp.b.Err(); err != nil {
		return err
	}
	for i, name := range n.Output {
		if name == "" {
			continue
		}
		v := c.outs[i]
		if v == nil {
			imp.lost[name] = fmt.Sprintf("output %d of node %s", i, imp.loc.Node)
			continue
		}
		if _, exists := imp.vals[name]; exists {
			return c.errorf("output %q is defined twice", name)
		}
		imp.vals[name] = v
		if _, named := imp.names[v]; !named && printableName(name) {
			v.Name = name
			imp.names[v] = struct{}{}
		}
	}
	return nil
}

func (imp *importer) outputs() error {
	imp.b.Loc = imp.fileLoc()
	imp.loc = imp.fileLoc()
	if len(imp.g.Output) == 0 {
		return imp.errf(imp.fileLoc(), "graph has no outputs")
	}
	for _, o := range imp.g.Output {
		v, err := imp.value(o.Name)
		if err != nil {
			var e *ir.Error
			if errors.As(err, &e) {
				return imp.errf(imp.fileLoc(), "graph output %q: %s", o.Name, e.Msg)
			}
			return err
		}
		// A re-batched model's declared outputs were checked at the exported batch (batch.go).
		if tt := o.GetType().GetTensorType(); tt != nil && imp.batch == nil {
			if err := imp.checkDeclared(o.Name, tt, v.Type); err != nil {
				return err
			}
		}
		at := ir.Attrs{{Name: ir.AttrName, Value: ir.String(o.Name)}}
		if o.Name == "loss" && v.Type.Rank() == 0 && v.Type.DType.IsFloat() {
			// A scalar output named loss is the model's training loss (ppc export writes
			// one): training needs no --loss, and the other outputs are left to inference.
			at = append(at, ir.NamedAttr{Name: ir.AttrLoss, Value: ir.Unit{}})
		}
		imp.fn.AddResult(v, at.Sorted())
	}
	return nil
}

// checkDeclared compares a graph output's declared type with the imported one: dtype and
// every fixed dim (the batch dim is skipped when micro-batching divides it).
func (imp *importer) checkDeclared(name string, tt *onnxpb.TypeProto_Tensor, t ir.Type) error {
	if tt.ElemType != 0 {
		dt, err := irDType(tt.ElemType)
		if err != nil {
			return imp.errf(imp.fileLoc(), "graph output %q: %v", name, err)
		}
		if dt != t.DType {
			return imp.errf(imp.fileLoc(), "graph output %q is declared %s but computes %s", name, dt, t)
		}
	}
	if tt.Shape == nil {
		return nil
	}
	if len(tt.Shape.Dim) != t.Rank() {
		return imp.errf(imp.fileLoc(), "graph output %q is declared with rank %d but computes %s", name, len(tt.Shape.Dim), t)
	}
	for i, d := range tt.Shape.Dim {
		if i == 0 && imp.opts.Microbatches > 1 {
			continue
		}
		if v, ok := d.Value.(*onnxpb.TensorShapeProto_Dimension_DimValue); ok && v.DimValue > 0 && int64(t.Shape[i]) != v.DimValue {
			return imp.errf(imp.fileLoc(), "graph output %q is declared with dim %d = %d but computes %s (inconsistent shapes)", name, i, v.DimValue, t)
		}
		if p, ok := d.Value.(*onnxpb.TensorShapeProto_Dimension_DimParam); ok {
			if val, bound := imp.opts.Dims[p.DimParam]; bound && imp.opts.Microbatches <= 1 && t.Shape[i] != val {
				return imp.errf(imp.fileLoc(), "graph output %q dim %d is %s = %d but computes %s (inconsistent shapes)", name, i, p.DimParam, val, t)
			}
		}
	}
	return nil
}

// dce removes pure ops whose results are unused (constants consumed by folding, the
// remains of raised patterns).
func dce(f *ir.Func) {
	uses := map[*ir.Value]int{}
	for _, op := range f.Ops {
		for _, x := range op.Operands {
			uses[x]++
		}
	}
	for _, r := range f.Results {
		uses[r]++
	}
	keep := make([]bool, len(f.Ops))
	for i := len(f.Ops) - 1; i >= 0; i-- {
		op := f.Ops[i]
		live := !op.Def.Has(ir.Pure)
		for _, r := range op.Results {
			if uses[r] > 0 {
				live = true
			}
		}
		keep[i] = live
		if !live {
			for _, x := range op.Operands {
				uses[x]--
			}
		}
	}
	out := f.Ops[:0]
	for i, op := range f.Ops {
		if keep[i] {
			out = append(out, op)
		}
	}
	for i := len(out); i < len(f.Ops); i++ {
		f.Ops[i] = nil
	}
	f.Ops = out
}

// freezeInputs adds the frozen inputs' values as initializers.
func freezeInputs(m *onnxpb.ModelProto, frozen map[string]*ir.Dense) error {
	if len(frozen) == 0 {
		return nil
	}
	if m.Graph == nil {
		return fmt.Errorf("the model has no graph")
	}
	codes := map[ir.DType]int32{ir.F32: 1, ir.U8: 2, ir.I8: 3, ir.I32: 6, ir.I64: 7, ir.Bool: 9, ir.F16: 10, ir.F64: 11, ir.BF16: 16}
	names := make([]string, 0, len(frozen))
	for n := range frozen {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := frozen[n]
		found := false
		for _, in := range m.Graph.Input {
			found = found || in.GetName() == n
		}
		if !found {
			return fmt.Errorf("cannot freeze %q: not a graph input", n)
		}
		dims := make([]int64, len(d.Type.Shape))
		for i, x := range d.Type.Shape {
			dims[i] = int64(x)
		}
		raw := d.Data
		if d.Splat {
			raw = bytes.Repeat(d.Data, d.Type.NumElements())
		}
		m.Graph.Initializer = append(m.Graph.Initializer, &onnxpb.TensorProto{Name: n, Dims: dims, DataType: codes[d.Type.DType], RawData: raw})
	}
	return nil
}
