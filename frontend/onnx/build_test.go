package onnx

import (
	"encoding/binary"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
)

// A small programmatic ModelProto writer for the importer's tests: models are built in Go,
// marshalled to .onnx bytes and imported like files.

type mb struct{ m *onnxpb.ModelProto }

// model starts a model importing the default opset at the given version.
func model(opset int64) *mb {
	return &mb{m: &onnxpb.ModelProto{
		IrVersion:    8,
		ProducerName: "pytorch", ProducerVersion: "2.1",
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: opset}},
		Graph:       &onnxpb.GraphProto{Name: "test_graph"},
	}}
}

// dim is an int (fixed) or a string (symbolic) dimension.
func tensorType(dt int32, dims ...any) *onnxpb.TypeProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(v)}})
		case string:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: v}})
		case nil:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{})
		}
	}
	return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: dt, Shape: sh}}}
}

func (b *mb) input(name string, dt int32, dims ...any) *mb {
	b.m.Graph.Input = append(b.m.Graph.Input, &onnxpb.ValueInfoProto{Name: name, Type: tensorType(dt, dims...)})
	return b
}

func (b *mb) output(name string) *mb {
	b.m.Graph.Output = append(b.m.Graph.Output, &onnxpb.ValueInfoProto{Name: name})
	return b
}

func (b *mb) outputTyped(name string, dt int32, dims ...any) *mb {
	b.m.Graph.Output = append(b.m.Graph.Output, &onnxpb.ValueInfoProto{Name: name, Type: tensorType(dt, dims...)})
	return b
}

func (b *mb) init(t *onnxpb.TensorProto) *mb {
	b.m.Graph.Initializer = append(b.m.Graph.Initializer, t)
	return b
}

// node appends a node; ins and outs are comma-free lists.
func (b *mb) node(op, name string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *mb {
	b.m.Graph.Node = append(b.m.Graph.Node, &onnxpb.NodeProto{OpType: op, Name: name, Input: ins, Output: outs, Attribute: attrs})
	return b
}

func (b *mb) bytes(t testing.TB) []byte {
	t.Helper()
	data, err := proto.Marshal(b.m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func in(names ...string) []string { return names }

// f32 builds a FLOAT tensor in raw_data.
func f32(name string, dims []int64, vals ...float32) *onnxpb.TensorProto {
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return &onnxpb.TensorProto{Name: name, Dims: dims, DataType: dtFloat, RawData: raw}
}

// f32n builds a FLOAT tensor of n elements 0.01·i.
func f32n(name string, dims ...int64) *onnxpb.TensorProto {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = 0.01 * float32(i)
	}
	return f32(name, dims, vals...)
}

func i64(name string, dims []int64, vals ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: name, Dims: dims, DataType: dtInt64, Int64Data: vals}
}

func aInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INT, I: v}
}

func aInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INTS, Ints: v}
}

func aFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_FLOAT, F: v}
}

func aFloats(name string, v ...float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_FLOATS, Floats: v}
}

func aStr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_STRING, S: []byte(v)}
}

func aTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_TENSOR, T: t}
}

// constant appends a Constant node producing out.
func (b *mb) constant(out string, t *onnxpb.TensorProto) *mb {
	return b.node("Constant", out, nil, in(out), aTensor("value", t))
}

// scalarF is a rank-0 FLOAT tensor.
func scalarF(v float32) *onnxpb.TensorProto { return f32("", nil, v) }

type onnxpbOpset = onnxpb.OperatorSetIdProto

const math64Min = math.MinInt64
