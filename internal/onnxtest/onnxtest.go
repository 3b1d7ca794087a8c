package onnxtest

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
)

// ONNX TensorProto data types.
const (
	Float = 1
	Int64 = 7
	Bool  = 9
)

// Model is a ModelProto under construction.
type Model struct{ M *onnxpb.ModelProto }

// New starts a model importing the default opset at the given version.
func New(opset int64) *Model {
	return &Model{M: &onnxpb.ModelProto{
		IrVersion:    8,
		ProducerName: "onnxtest", ProducerVersion: "1",
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: opset}},
		Graph:       &onnxpb.GraphProto{Name: "test_graph"},
	}}
}

// Type is a tensor type; each dim is an int (fixed) or a string (symbolic).
func Type(dt int32, dims ...any) *onnxpb.TypeProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(v)}})
		case string:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: v}})
		case nil:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{}) // unknown
		}
	}
	return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: dt, Shape: sh}}}
}

// Input declares a graph input.
func (m *Model) Input(name string, dt int32, dims ...any) *Model {
	m.M.Graph.Input = append(m.M.Graph.Input, &onnxpb.ValueInfoProto{Name: name, Type: Type(dt, dims...)})
	return m
}

// Output declares a graph output (its type left to the importer).
func (m *Model) Output(name string) *Model {
	m.M.Graph.Output = append(m.M.Graph.Output, &onnxpb.ValueInfoProto{Name: name})
	return m
}

// OutputTyped declares a graph output with its type.
func (m *Model) OutputTyped(name string, dt int32, dims ...any) *Model {
	m.M.Graph.Output = append(m.M.Graph.Output, &onnxpb.ValueInfoProto{Name: name, Type: Type(dt, dims...)})
	return m
}

// Init adds an initializer.
func (m *Model) Init(t *onnxpb.TensorProto) *Model {
	m.M.Graph.Initializer = append(m.M.Graph.Initializer, t)
	return m
}

// Node appends a node.
func (m *Model) Node(op, name string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *Model {
	m.M.Graph.Node = append(m.M.Graph.Node, &onnxpb.NodeProto{OpType: op, Name: name, Input: ins, Output: outs, Attribute: attrs})
	return m
}

// Constant appends a Constant node producing out, as paddle2onnx writes weights.
func (m *Model) Constant(out string, t *onnxpb.TensorProto) *Model {
	return m.Node("Constant", out, nil, []string{out}, Tensor("value", t))
}

// Bytes marshals the model.
func (m *Model) Bytes(t testing.TB) []byte {
	t.Helper()
	data, err := proto.Marshal(m.M)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Write writes the model as name in a temporary directory of the test and returns its path.
func (m *Model) Write(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, m.Bytes(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// F32 is a FLOAT tensor in raw_data.
func F32(name string, dims []int64, vals ...float32) *onnxpb.TensorProto {
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return &onnxpb.TensorProto{Name: name, Dims: dims, DataType: Float, RawData: raw}
}

// Random is a FLOAT tensor of the given dims with values uniform in [-scale, scale), from a
// fixed sequence (splitmix64 seeded by seed), so a model is the same on every run.
func Random(name string, seed uint64, scale float32, dims ...int64) *onnxpb.TensorProto {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	vals := make([]float32, n)
	s := seed
	for i := range vals {
		s += 0x9e3779b97f4a7c15
		z := s
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		vals[i] = scale * (2*float32(z>>40)/(1<<24) - 1)
	}
	return F32(name, dims, vals...)
}

// I64 is an INT64 tensor.
func I64(name string, dims []int64, vals ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: name, Dims: dims, DataType: Int64, Int64Data: vals}
}

// Int is an INT attribute.
func Int(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INT, I: v}
}

// Ints is an INTS attribute.
func Ints(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INTS, Ints: v}
}

// Tensor is a TENSOR attribute.
func Tensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_TENSOR, T: t}
}

// In lists tensor names (a node's inputs or outputs).
func In(names ...string) []string { return names }

// F32N is a FLOAT tensor of the given dims holding 0.01·i at element i.
func F32N(name string, dims ...int64) *onnxpb.TensorProto {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = 0.01 * float32(i)
	}
	return F32(name, dims, vals...)
}

// ScalarF is a rank-0 FLOAT tensor.
func ScalarF(v float32) *onnxpb.TensorProto { return F32("", nil, v) }

// FloatAttr is a FLOAT attribute.
func FloatAttr(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_FLOAT, F: v}
}

// FloatsAttr is a FLOATS attribute.
func FloatsAttr(name string, v ...float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_FLOATS, Floats: v}
}

// StrAttr is a STRING attribute.
func StrAttr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_STRING, S: []byte(v)}
}
