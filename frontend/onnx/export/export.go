package export

import (
	"fmt"
	"slices"
	"strconv"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// The ONNX versions written. Opset 20 is the first with Gelu (GPT-2's tanh GELU stays one
// node) and keeps every op ppc writes in its current form (Reduce* take axes as an input since
// opset 18); IR version 9 is the one ONNX 1.15 pairs with opset 20.
const (
	Opset     = 20
	IRVersion = 9
)

// MaxOpset is the newest opset ppc export writes (Options.Opset): opset 23 adds ONNX's own
// Attention op, which the fused attention becomes there.
const MaxOpset = 23

// irVersions pairs each opset written with the IR version of the ONNX release that
// introduced it (1.15 to 1.18).
var irVersions = map[int]int64{20: 9, 21: 10, 22: 10, 23: 11}

// MaxWeightBytes bounds the parameters of an exported model: protobuf's 2 GiB limit on a
// message, less room for the graph.
const MaxWeightBytes = 2<<30 - 64<<20

// Options control an export.
type Options struct {
	// Weight returns the initial value of a parameter argument of @forward, the whole tensor
	// in the IR's byte layout (little-endian). Required when the model has parameters.
	Weight func(p *ir.Value, attrs ir.Attrs) ([]byte, error)
	// ProducerVersion is written as the model's producer_version (producer_name is "ppc").
	ProducerVersion string
	// DocString is the model's doc_string (where it came from).
	DocString string
	// Metadata is written as the model's metadata_props, sorted by key.
	Metadata map[string]string
	// Opset is the default domain's opset version written, Opset (20) to MaxOpset; 0 means
	// Opset.
	Opset int
}

// Model exports m's @forward as an ONNX model (see the package documentation).
func Model(m *ir.Module, opts Options) (*onnxpb.ModelProto, error) {
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return nil, fmt.Errorf("the model has no func @%s (its forward pass) to export", ir.ForwardFunc)
	}
	if m.Attrs.Has(ir.AttrPartitioned) {
		return nil, fmt.Errorf("the module is partitioned for tensor parallelism (its shapes are one rank's); export the model before it is compiled")
	}
	// A protobuf message, and so an .onnx file without external data, holds at most 2 GiB:
	// refuse a bigger model before its weights are made, not after they fill the memory.
	var weights int64
	for _, p := range f.Params() {
		weights += p.Type.Bytes()
	}
	if weights >= MaxWeightBytes {
		return nil, fmt.Errorf("the parameters take %.1f GiB; an ONNX file holds at most 2 GiB (protobuf's limit), and ppc export does not write external data", float64(weights)/(1<<30))
	}
	opset := opts.Opset
	if opset == 0 {
		opset = Opset
	}
	if opset < Opset || opset > MaxOpset {
		return nil, fmt.Errorf("opset %d: ppc export writes opsets %d to %d", opset, Opset, MaxOpset)
	}
	e := &exporter{m: m, f: f, g: &onnxpb.GraphProto{Name: graphName(m)}, names: map[*ir.Value]string{}, used: map[string]bool{}, opset: opset}
	if err := e.graph(opts); err != nil {
		return nil, err
	}
	model := &onnxpb.ModelProto{
		IrVersion:       irVersions[opset],
		OpsetImport:     []*onnxpb.OperatorSetIdProto{{Domain: "", Version: int64(opset)}},
		ProducerName:    "ppc",
		ProducerVersion: opts.ProducerVersion,
		DocString:       opts.DocString,
		Graph:           e.g,
	}
	keys := make([]string, 0, len(opts.Metadata))
	for k := range opts.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		model.MetadataProps = append(model.MetadataProps, &onnxpb.StringStringEntryProto{Key: k, Value: opts.Metadata[k]})
	}
	return model, nil
}

func graphName(m *ir.Module) string {
	if m.Name != "" {
		return m.Name
	}
	return "model"
}

type exporter struct {
	opset int
	m     *ir.Module
	f     *ir.Func
	g     *onnxpb.GraphProto
	names map[*ir.Value]string // ONNX tensor names of IR values
	used  map[string]bool      // every tensor name taken
}

// output is one graph output: the value and the name it must have.
type output struct {
	v    *ir.Value
	name string
}

func (e *exporter) graph(opts Options) error {
	f := e.f
	outs, err := e.outputs()
	if err != nil {
		return err
	}
	// Arguments keep their names (an imported model's own names when the IR had to change
	// them): inputs are what a caller feeds, parameters what a checkpoint names.
	for i, a := range f.Args {
		at := f.ArgAttrs[i]
		name := at.Str(ir.AttrName, a.Name)
		if name == "" {
			name = "arg" + strconv.Itoa(i)
		}
		if e.used[name] {
			// Taken by an output: fine when it is this argument, returned as it is.
			i := slices.IndexFunc(outs, func(o output) bool { return o.name == name })
			if i < 0 {
				return fmt.Errorf("two arguments are named %q", name)
			}
			if outs[i].v != a {
				return fmt.Errorf("argument %%%s is named %q, the name of an exported output; rename it", a.Name, name)
			}
		}
		e.take(a, name)
		switch {
		case at.Has(ir.AttrParam):
			if opts.Weight == nil {
				return fmt.Errorf("parameter %%%s: no initial value (internal error: Options.Weight is nil)", a.Name)
			}
			data, err := opts.Weight(a, at)
			if err != nil {
				return err
			}
			if int64(len(data)) != a.Type.Bytes() {
				return fmt.Errorf("parameter %%%s: initial value of %d bytes for %s", a.Name, len(data), a.Type)
			}
			t, err := tensorProto(name, a.Type, data)
			if err != nil {
				return fmt.Errorf("parameter %%%s: %v", a.Name, err)
			}
			e.g.Initializer = append(e.g.Initializer, t)
		default:
			// Data inputs, and arguments of IR text that say nothing: fed by the caller.
			vi, err := valueInfo(name, a.Type)
			if err != nil {
				return fmt.Errorf("input %%%s: %v", a.Name, err)
			}
			e.g.Input = append(e.g.Input, vi)
		}
	}
	e.nameOutputs(outs)
	// Results that an op defines take their output name directly; the others (an argument
	// under another name, a value returned twice) get an Identity node after the ops.
	direct := map[*ir.Value]bool{}
	for _, o := range outs {
		if o.v.Def != nil && !direct[o.v] {
			direct[o.v] = true
			e.take(o.v, o.name)
		}
	}
	for i, op := range f.Ops {
		if err := e.op(i, op); err != nil {
			return err
		}
	}
	for _, o := range outs {
		if e.names[o.v] != o.name {
			e.node("Identity", []string{e.names[o.v]}, []string{o.name})
		}
		vi, err := valueInfo(o.name, o.v.Type)
		if err != nil {
			return fmt.Errorf("output %q: %v", o.name, err)
		}
		e.g.Output = append(e.g.Output, vi)
	}
	return nil
}

// outputs lists the graph outputs and reserves their names: the model's outputs in order,
// under their own names (an imported model's) or their IR names, and the loss as `loss`.
// A model whose only result is its loss computed by a loss op (cross_entropy, mse) also
// outputs that op's prediction first (the logits), so that the file is useful for inference.
func (e *exporter) outputs() ([]output, error) {
	f := e.f
	var outs []output
	lossIdx := -1
	for i, ra := range f.ResultAttrs {
		if ra.Has(ir.AttrLoss) {
			lossIdx = i
		}
	}
	if pred := f.Prediction(); pred != nil {
		outs = append(outs, output{pred, ""})
	}
	for i, v := range f.Results {
		name := f.ResultAttrs[i].Str(ir.AttrName, "")
		if i == lossIdx {
			name = "loss"
		}
		outs = append(outs, output{v, name})
	}
	// The fixed names (the loss's, the model's own) are reserved now; the others are made
	// unique once the arguments have their names (nameOutputs).
	for i := range outs {
		if outs[i].name == "" {
			continue
		}
		if e.used[outs[i].name] {
			return nil, fmt.Errorf("two outputs are named %q", outs[i].name)
		}
		e.used[outs[i].name] = true
	}
	return outs, nil
}

// nameOutputs names the outputs without a fixed name after their IR values: an argument
// keeps its name, an op result gets a fresh one.
func (e *exporter) nameOutputs(outs []output) {
	for i := range outs {
		if outs[i].name != "" {
			continue
		}
		if n, ok := e.names[outs[i].v]; ok {
			outs[i].name = n
			continue
		}
		base := outs[i].v.Name
		if !printable(base) {
			base = "output" + strconv.Itoa(i)
		}
		outs[i].name = e.fresh(base)
	}
}

// printable reports whether an IR value name is worth keeping (the printer numbers empty
// and all-digit names).
func printable(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if c < '0' || c > '9' {
			return true
		}
	}
	return false
}

// take names a value (the name must be free or reserved for it).
func (e *exporter) take(v *ir.Value, name string) {
	e.names[v] = name
	e.used[name] = true
}

// fresh returns an unused tensor name based on base and takes it.
func (e *exporter) fresh(base string) string {
	name := base
	for i := 1; e.used[name]; i++ {
		name = base + "_" + strconv.Itoa(i)
	}
	e.used[name] = true
	return name
}

// name returns the tensor name of a value, naming an op result on first use.
func (e *exporter) name(v *ir.Value) string {
	if n, ok := e.names[v]; ok {
		return n
	}
	base := v.Name
	if !printable(base) {
		base = v.Def.Name()
	}
	n := e.fresh(base)
	e.names[v] = n
	return n
}

// node appends a node named after its first output.
func (e *exporter) node(opType string, inputs, outputs []string, attrs ...*onnxpb.AttributeProto) {
	e.g.Node = append(e.g.Node, &onnxpb.NodeProto{Name: outputs[0], OpType: opType, Input: inputs, Output: outputs, Attribute: attrs})
}

// tmp appends a one-output node whose output is a fresh name based on base, and returns it.
func (e *exporter) tmp(base, opType string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	out := e.fresh(base)
	e.node(opType, inputs, []string{out}, attrs...)
	return out
}

// constant appends a Constant node holding d, its output a fresh name based on base, and
// returns that name.
func (e *exporter) constant(base string, d *ir.Dense) (string, error) {
	out := e.fresh(base)
	return out, e.constantTo(out, d)
}

// constantTo appends a node writing d to out: Constant, or for a splat of rank >= 1
// ConstantOfShape, which says what it is (one value everywhere) in a few bytes.
func (e *exporter) constantTo(out string, d *ir.Dense) error {
	if d.Elided {
		return fmt.Errorf("constant data was elided from the IR text; re-import the model")
	}
	if d.Splat && d.Type.Rank() > 0 {
		v, err := tensorProto("", ir.Type{DType: d.Type.DType, Shape: ir.Shape{1}}, d.Data)
		if err != nil {
			return err
		}
		shape := e.ints(out+"/shape", dims64(d.Type.Shape)...)
		e.node("ConstantOfShape", []string{shape}, []string{out}, tensorAttr("value", v))
		return nil
	}
	t, err := tensorProto("", d.Type, d.Data)
	if err != nil {
		return err
	}
	e.node("Constant", nil, []string{out}, tensorAttr("value", t))
	return nil
}

// ints appends a Constant node holding a 1-D int64 tensor (shapes, axes, sizes).
func (e *exporter) ints(base string, v ...int64) string {
	t := &onnxpb.TensorProto{Dims: []int64{int64(len(v))}, DataType: int32(onnxpb.TensorProto_INT64), Int64Data: v}
	return e.tmp(base, "Constant", nil, tensorAttr("value", t))
}

// scalar appends a Constant node holding a rank-0 tensor of dtype dt.
func (e *exporter) scalar(base string, dt ir.DType, v float64) (string, error) {
	d := ir.NewDenseF64(ir.Type{DType: dt, Shape: ir.Shape{}}, []float64{v})
	return e.constant(base, d)
}

func dims64(s ir.Shape) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

// onnxDType maps an IR dtype to ONNX's TensorProto.DataType.
func onnxDType(d ir.DType) (int32, error) {
	var t onnxpb.TensorProto_DataType
	switch d {
	case ir.F32:
		t = onnxpb.TensorProto_FLOAT
	case ir.F64:
		t = onnxpb.TensorProto_DOUBLE
	case ir.F16:
		t = onnxpb.TensorProto_FLOAT16
	case ir.BF16:
		t = onnxpb.TensorProto_BFLOAT16
	case ir.I64:
		t = onnxpb.TensorProto_INT64
	case ir.I32:
		t = onnxpb.TensorProto_INT32
	case ir.I8:
		t = onnxpb.TensorProto_INT8
	case ir.U8:
		t = onnxpb.TensorProto_UINT8
	case ir.Bool:
		t = onnxpb.TensorProto_BOOL
	default:
		return 0, fmt.Errorf("dtype %s has no ONNX data type", d)
	}
	return int32(t), nil
}

// tensorProto holds data (the IR's little-endian layout, which is ONNX's raw_data layout,
// bools as one byte each) as a TensorProto.
func tensorProto(name string, t ir.Type, data []byte) (*onnxpb.TensorProto, error) {
	dt, err := onnxDType(t.DType)
	if err != nil {
		return nil, err
	}
	return &onnxpb.TensorProto{Name: name, Dims: dims64(t.Shape), DataType: dt, RawData: data}, nil
}

func valueInfo(name string, t ir.Type) (*onnxpb.ValueInfoProto, error) {
	dt, err := onnxDType(t.DType)
	if err != nil {
		return nil, err
	}
	sh := &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{}}
	for _, d := range t.Shape {
		sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
	}
	return &onnxpb.ValueInfoProto{Name: name, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: dt, Shape: sh}}}}, nil
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INT, I: v}
}

func boolAttr(name string, v bool) *onnxpb.AttributeProto {
	if v {
		return intAttr(name, 1)
	}
	return intAttr(name, 0)
}

func intsAttr(name string, v []int) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INTS, Ints: ints64(v)}
}

func floatAttr(name string, v float64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_FLOAT, F: float32(v)}
}

func stringAttr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_STRING, S: []byte(v)}
}

func tensorAttr(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_TENSOR, T: t}
}

func ints64(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}
