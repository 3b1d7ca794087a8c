package onnxpb_test

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
)

// backendDir is the shared ONNX backend test data, relative to this package's
// directory (the working directory of `go test`).
const backendDir = "../../../../shared/testdata/onnx-backend"

// backendModels returns the model.onnx files under backendDir, sorted, or
// skips the test when the folder is absent.
func backendModels(t *testing.T) []string {
	t.Helper()
	info, err := os.Stat(backendDir)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("ONNX backend test data not found at %s (relative to the package directory)", backendDir)
	}
	if err != nil {
		t.Fatalf("stat %s: %v", backendDir, err)
	}
	if !info.IsDir() {
		t.Fatalf("%s is not a directory", backendDir)
	}
	var models []string
	err = filepath.WalkDir(backendDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "model.onnx" {
			models = append(models, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", backendDir, err)
	}
	if len(models) == 0 {
		t.Fatalf("no model.onnx files under %s", backendDir)
	}
	sort.Strings(models)
	return models
}

func readModel(t *testing.T, path string) *onnxpb.ModelProto {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(data, m); err != nil {
		t.Fatalf("%s: unmarshal ModelProto: %v", path, err)
	}
	return m
}

func TestDecodeBackendModels(t *testing.T) {
	models := backendModels(t)
	for _, path := range models {
		m := readModel(t, path)
		g := m.GetGraph()
		switch {
		case g == nil:
			t.Errorf("%s: model has no graph", path)
			continue
		case len(g.GetNode()) == 0:
			t.Errorf("%s: graph has no nodes", path)
		case len(g.GetOutput()) == 0:
			t.Errorf("%s: graph has no outputs", path)
		}
		if m.GetIrVersion() <= 0 {
			t.Errorf("%s: ir_version = %d", path, m.GetIrVersion())
		}
		if len(m.GetOpsetImport()) == 0 {
			t.Errorf("%s: no opset_import", path)
		}
		for _, n := range g.GetNode() {
			if n.GetOpType() == "" {
				t.Errorf("%s: node %q has no op_type", path, n.GetName())
			}
			for _, a := range n.GetAttribute() {
				if a.GetName() == "" {
					t.Errorf("%s: node %q (%s) has an attribute without a name", path, n.GetName(), n.GetOpType())
				}
			}
		}
		for _, o := range g.GetOutput() {
			if o.GetName() == "" {
				t.Errorf("%s: graph output without a name", path)
			}
		}
		if len(m.ProtoReflect().GetUnknown()) != 0 || len(g.ProtoReflect().GetUnknown()) != 0 {
			t.Logf("%s: has fields this schema does not model", path)
		}
	}
	t.Logf("decoded %d models under %s", len(models), backendDir)
}

// TestDecodeBackendTensors decodes every test_data_set_0/*.pb next to a
// model as a TensorProto and checks that its data agrees with its shape.
// input_N.pb belongs to the N-th graph input that is not an initializer and
// output_N.pb to the N-th graph output; files whose graph value is not a
// tensor (sequence, map, optional) are not TensorProto messages and are
// skipped.
func TestDecodeBackendTensors(t *testing.T) {
	models := backendModels(t)
	decoded := 0
	for _, path := range models {
		m := readModel(t, path)
		g := m.GetGraph()
		initializers := map[string]bool{}
		for _, init := range g.GetInitializer() {
			initializers[init.GetName()] = true
		}
		var inputs []*onnxpb.ValueInfoProto
		for _, in := range g.GetInput() {
			if !initializers[in.GetName()] {
				inputs = append(inputs, in)
			}
		}
		files, err := filepath.Glob(filepath.Join(filepath.Dir(path), "test_data_set_0", "*.pb"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			base := filepath.Base(file)
			var value *onnxpb.ValueInfoProto
			if vals, idx, ok := pbIndex(base, inputs, g.GetOutput()); ok && idx < len(vals) {
				value = vals[idx]
			} else {
				t.Errorf("%s: no graph value corresponds to this file", file)
				continue
			}
			if value.GetType().GetValue() != nil && value.GetType().GetTensorType() == nil {
				t.Logf("%s: graph value %q is not a tensor (%T); not a TensorProto", file, value.GetName(), value.GetType().GetValue())
				continue
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			tp := new(onnxpb.TensorProto)
			if err := proto.Unmarshal(data, tp); err != nil {
				t.Errorf("%s: unmarshal TensorProto: %v", file, err)
				continue
			}
			if want := value.GetType().GetTensorType().GetElemType(); want != 0 && tp.GetDataType() != want {
				t.Errorf("%s: data_type %d, graph value %q declares %d", file, tp.GetDataType(), value.GetName(), want)
			}
			if err := checkTensorData(tp); err != nil {
				t.Errorf("%s: %s", file, err)
			}
			decoded++
		}
	}
	if decoded == 0 {
		t.Fatalf("no tensors decoded")
	}
	t.Logf("decoded %d tensors", decoded)
}

// pbIndex maps "input_N.pb" / "output_N.pb" to the list it indexes and N.
func pbIndex(base string, inputs, outputs []*onnxpb.ValueInfoProto) ([]*onnxpb.ValueInfoProto, int, bool) {
	name := strings.TrimSuffix(base, ".pb")
	var vals []*onnxpb.ValueInfoProto
	var digits string
	switch {
	case strings.HasPrefix(name, "input_"):
		vals, digits = inputs, strings.TrimPrefix(name, "input_")
	case strings.HasPrefix(name, "output_"):
		vals, digits = outputs, strings.TrimPrefix(name, "output_")
	default:
		return nil, 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return nil, 0, false
	}
	return vals, n, true
}

// elemBits is the storage width of one element of a fixed-size data type, or
// 0 for STRING and unknown types.
func elemBits(dt onnxpb.TensorProto_DataType) int {
	switch dt {
	case onnxpb.TensorProto_UINT2, onnxpb.TensorProto_INT2:
		return 2
	case onnxpb.TensorProto_UINT4, onnxpb.TensorProto_INT4, onnxpb.TensorProto_FLOAT4E2M1:
		return 4
	case onnxpb.TensorProto_UINT8, onnxpb.TensorProto_INT8, onnxpb.TensorProto_BOOL,
		onnxpb.TensorProto_FLOAT8E4M3FN, onnxpb.TensorProto_FLOAT8E4M3FNUZ,
		onnxpb.TensorProto_FLOAT8E5M2, onnxpb.TensorProto_FLOAT8E5M2FNUZ,
		onnxpb.TensorProto_FLOAT8E8M0:
		return 8
	case onnxpb.TensorProto_UINT16, onnxpb.TensorProto_INT16,
		onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16:
		return 16
	case onnxpb.TensorProto_FLOAT, onnxpb.TensorProto_INT32, onnxpb.TensorProto_UINT32:
		return 32
	case onnxpb.TensorProto_DOUBLE, onnxpb.TensorProto_INT64, onnxpb.TensorProto_UINT64,
		onnxpb.TensorProto_COMPLEX64:
		return 64
	case onnxpb.TensorProto_COMPLEX128:
		return 128
	}
	return 0
}

// checkTensorData reports a disagreement between a tensor's dims and the
// amount of data it carries.
func checkTensorData(tp *onnxpb.TensorProto) error {
	n := int64(1)
	for i, d := range tp.GetDims() {
		if d < 0 {
			return fmt.Errorf("negative dimension %d at axis %d", d, i)
		}
		n *= d
	}
	if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return nil // payload lives in another file
	}
	dt := onnxpb.TensorProto_DataType(tp.GetDataType())
	if dt == onnxpb.TensorProto_UNDEFINED {
		return errors.New("data_type is UNDEFINED")
	}
	if raw := tp.GetRawData(); len(raw) > 0 || n == 0 {
		bits := elemBits(dt)
		if bits == 0 {
			if len(raw) > 0 {
				return fmt.Errorf("raw_data used with data_type %v", dt)
			}
			return nil
		}
		if want := (n*int64(bits) + 7) / 8; int64(len(raw)) != want {
			return fmt.Errorf("raw_data has %d bytes, dims %v of %v need %d", len(raw), tp.GetDims(), dt, want)
		}
		return nil
	}
	// Typed fields: element count per entry depends on the type.
	var got, want int64
	switch dt {
	case onnxpb.TensorProto_FLOAT:
		got, want = int64(len(tp.GetFloatData())), n
	case onnxpb.TensorProto_COMPLEX64:
		got, want = int64(len(tp.GetFloatData())), 2*n
	case onnxpb.TensorProto_DOUBLE:
		got, want = int64(len(tp.GetDoubleData())), n
	case onnxpb.TensorProto_COMPLEX128:
		got, want = int64(len(tp.GetDoubleData())), 2*n
	case onnxpb.TensorProto_INT64:
		got, want = int64(len(tp.GetInt64Data())), n
	case onnxpb.TensorProto_UINT32, onnxpb.TensorProto_UINT64:
		got, want = int64(len(tp.GetUint64Data())), n
	case onnxpb.TensorProto_STRING:
		got, want = int64(len(tp.GetStringData())), n
	default:
		perEntry := int64(1)
		switch elemBits(dt) {
		case 0:
			return fmt.Errorf("unknown data_type %d", tp.GetDataType())
		case 4:
			perEntry = 2
		case 2:
			perEntry = 4
		}
		got, want = int64(len(tp.GetInt32Data())), (n+perEntry-1)/perEntry
	}
	if got != want {
		return fmt.Errorf("typed data has %d entries, dims %v of %v need %d", got, tp.GetDims(), dt, want)
	}
	return nil
}

// sampleModel builds a model that touches every message in the schema.
func sampleModel() *onnxpb.ModelProto {
	dim := func(v int64) *onnxpb.TensorShapeProto_Dimension {
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}}
	}
	sym := func(p string) *onnxpb.TensorShapeProto_Dimension {
		return &onnxpb.TensorShapeProto_Dimension{
			Value:      &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: p},
			Denotation: "DATA_BATCH",
		}
	}
	floatType := func(dims ...*onnxpb.TensorShapeProto_Dimension) *onnxpb.TypeProto {
		return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
			ElemType: int32(onnxpb.TensorProto_FLOAT),
			Shape:    &onnxpb.TensorShapeProto{Dim: dims},
		}}}
	}
	weight := &onnxpb.TensorProto{
		Name:     "W",
		Dims:     []int64{3, 2},
		DataType: int32(onnxpb.TensorProto_FLOAT),
		RawData:  make([]byte, 3*2*4),
	}
	bias := &onnxpb.TensorProto{
		Name:      "B",
		Dims:      []int64{2},
		DataType:  int32(onnxpb.TensorProto_FLOAT),
		FloatData: []float32{0.5, -1.25},
		Segment:   &onnxpb.TensorProto_Segment{Begin: 0, End: 2},
	}
	external := &onnxpb.TensorProto{
		Name:         "E",
		Dims:         []int64{1 << 20},
		DataType:     int32(onnxpb.TensorProto_INT4),
		DataLocation: onnxpb.TensorProto_EXTERNAL,
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: "location", Value: "weights.bin"}, {Key: "offset", Value: "4096"}},
	}
	body := &onnxpb.GraphProto{
		Name:   "body",
		Node:   []*onnxpb.NodeProto{{OpType: "Identity", Input: []string{"x"}, Output: []string{"y"}}},
		Output: []*onnxpb.ValueInfoProto{{Name: "y"}},
	}
	return &onnxpb.ModelProto{
		IrVersion:       int64(onnxpb.Version_IR_VERSION_2023_5_5),
		OpsetImport:     []*onnxpb.OperatorSetIdProto{{Version: 21}, {Domain: "ppc.local", Version: 1}},
		ProducerName:    "ppc-test",
		ProducerVersion: "0",
		Domain:          "dev.ppc",
		ModelVersion:    3,
		DocString:       "round trip",
		MetadataProps:   []*onnxpb.StringStringEntryProto{{Key: "k", Value: "v"}},
		Graph: &onnxpb.GraphProto{
			Name: "main",
			Node: []*onnxpb.NodeProto{
				{
					Name: "mm", OpType: "Gemm", Input: []string{"X", "W", "B"}, Output: []string{"Y"},
					Attribute: []*onnxpb.AttributeProto{
						{Name: "alpha", Type: onnxpb.AttributeProto_FLOAT, F: 1.5},
						{Name: "transB", Type: onnxpb.AttributeProto_INT, I: 1},
					},
				},
				{
					Name: "misc", OpType: "Custom", Domain: "ppc.local", Overload: "v2",
					Input: []string{"Y", ""}, Output: []string{"Z"},
					DocString:     "every attribute kind",
					MetadataProps: []*onnxpb.StringStringEntryProto{{Key: "origin", Value: "test"}},
					Attribute: []*onnxpb.AttributeProto{
						{Name: "s", Type: onnxpb.AttributeProto_STRING, S: []byte("hello")},
						{Name: "t", Type: onnxpb.AttributeProto_TENSOR, T: bias},
						{Name: "g", Type: onnxpb.AttributeProto_GRAPH, G: body},
						{Name: "sp", Type: onnxpb.AttributeProto_SPARSE_TENSOR, SparseTensor: &onnxpb.SparseTensorProto{
							Values:  &onnxpb.TensorProto{Dims: []int64{1}, DataType: int32(onnxpb.TensorProto_INT64), Int64Data: []int64{7}},
							Indices: &onnxpb.TensorProto{Dims: []int64{1}, DataType: int32(onnxpb.TensorProto_INT64), Int64Data: []int64{4}},
							Dims:    []int64{10},
						}},
						{Name: "tp", Type: onnxpb.AttributeProto_TYPE_PROTO, Tp: floatType(dim(1))},
						{Name: "fs", Type: onnxpb.AttributeProto_FLOATS, Floats: []float32{1, 2, 3}},
						{Name: "is", Type: onnxpb.AttributeProto_INTS, Ints: []int64{-1, 0, 1 << 40}},
						{Name: "ss", Type: onnxpb.AttributeProto_STRINGS, Strings: [][]byte{[]byte("a"), []byte("")}},
						{Name: "ts", Type: onnxpb.AttributeProto_TENSORS, Tensors: []*onnxpb.TensorProto{weight}},
						{Name: "gs", Type: onnxpb.AttributeProto_GRAPHS, Graphs: []*onnxpb.GraphProto{body}},
						{Name: "sps", Type: onnxpb.AttributeProto_SPARSE_TENSORS, SparseTensors: []*onnxpb.SparseTensorProto{{Dims: []int64{2, 2}}}},
						{Name: "tps", Type: onnxpb.AttributeProto_TYPE_PROTOS, TypeProtos: []*onnxpb.TypeProto{floatType()}},
						{Name: "ref", Type: onnxpb.AttributeProto_INT, RefAttrName: "outer", DocString: "from caller"},
					},
				},
			},
			Initializer:       []*onnxpb.TensorProto{weight, bias, external},
			SparseInitializer: []*onnxpb.SparseTensorProto{{Dims: []int64{4}}},
			DocString:         "graph doc",
			Input: []*onnxpb.ValueInfoProto{
				{Name: "X", Type: floatType(sym("N"), dim(3)), DocString: "input"},
				{Name: "seq", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_SequenceType{SequenceType: &onnxpb.TypeProto_Sequence{ElemType: floatType()}}}},
				{Name: "map", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_MapType{MapType: &onnxpb.TypeProto_Map{
					KeyType: int32(onnxpb.TensorProto_STRING), ValueType: floatType(),
				}}}},
				{Name: "opt", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_OptionalType{OptionalType: &onnxpb.TypeProto_Optional{ElemType: floatType()}}}},
				{Name: "sparse", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_SparseTensorType{SparseTensorType: &onnxpb.TypeProto_SparseTensor{
					ElemType: int32(onnxpb.TensorProto_FLOAT8E4M3FN), Shape: &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{{}}},
				}}}},
				{Name: "opaque", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_OpaqueType{OpaqueType: &onnxpb.TypeProto_Opaque{Domain: "d", Name: "n"}}, Denotation: "IMAGE"}},
			},
			Output:    []*onnxpb.ValueInfoProto{{Name: "Z", Type: floatType(sym("N"), dim(2))}},
			ValueInfo: []*onnxpb.ValueInfoProto{{Name: "Y", MetadataProps: []*onnxpb.StringStringEntryProto{{Key: "a", Value: "b"}}}},
			QuantizationAnnotation: []*onnxpb.TensorAnnotation{{
				TensorName:                "Y",
				QuantParameterTensorNames: []*onnxpb.StringStringEntryProto{{Key: "SCALE_TENSOR", Value: "s"}},
			}},
			MetadataProps: []*onnxpb.StringStringEntryProto{{Key: "g", Value: "h"}},
		},
		TrainingInfo: []*onnxpb.TrainingInfoProto{{
			Initialization:        body,
			Algorithm:             body,
			InitializationBinding: []*onnxpb.StringStringEntryProto{{Key: "W", Value: "y"}},
			UpdateBinding:         []*onnxpb.StringStringEntryProto{{Key: "B", Value: "y"}},
		}},
		Functions: []*onnxpb.FunctionProto{{
			Name: "Custom", Domain: "ppc.local", Overload: "v2",
			Input: []string{"a", "b"}, Output: []string{"c"},
			Attribute:      []string{"s"},
			AttributeProto: []*onnxpb.AttributeProto{{Name: "k", Type: onnxpb.AttributeProto_INT, I: 2}},
			Node:           []*onnxpb.NodeProto{{OpType: "Add", Input: []string{"a", "b"}, Output: []string{"c"}}},
			OpsetImport:    []*onnxpb.OperatorSetIdProto{{Version: 21}},
			ValueInfo:      []*onnxpb.ValueInfoProto{{Name: "c", Type: floatType()}},
			DocString:      "fn",
			MetadataProps:  []*onnxpb.StringStringEntryProto{{Key: "x", Value: "y"}},
		}},
	}
}

func TestRoundTrip(t *testing.T) {
	want := sampleModel()
	data, err := proto.Marshal(want)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	got := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(data, got); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if !proto.Equal(want, got) {
		t.Fatalf("round trip changed the model:\nwant %v\ngot  %v", want, got)
	}
	if len(got.ProtoReflect().GetUnknown()) != 0 {
		t.Errorf("round trip produced unknown fields")
	}
	// Fields the schema leaves out survive a decode/encode cycle.
	extra := protowire.AppendTag(append([]byte(nil), data...), 26, protowire.BytesType) // ModelProto.configuration
	extra = protowire.AppendBytes(extra, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "cfg"))
	withUnknown := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(extra, withUnknown); err != nil {
		t.Fatalf("unmarshal with unmodelled field: %v", err)
	}
	again, err := proto.Marshal(withUnknown)
	if err != nil {
		t.Fatal(err)
	}
	reread := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(again, reread); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(withUnknown, reread) || len(reread.ProtoReflect().GetUnknown()) == 0 {
		t.Errorf("unmodelled field 26 was not preserved")
	}
}

// TestPackedAndUnpacked checks that repeated numeric fields decode the same
// whether a writer packed them (proto3 style) or not (proto2 onnx.proto
// writers).
func TestPackedAndUnpacked(t *testing.T) {
	want := &onnxpb.TensorProto{
		Dims:       []int64{2, 3},
		DataType:   int32(onnxpb.TensorProto_FLOAT),
		FloatData:  []float32{1, 2, 3, 4, 5, 6},
		Int32Data:  []int32{-1, 7},
		Int64Data:  []int64{1 << 40, -5},
		DoubleData: []float64{0.25},
		Uint64Data: []uint64{1 << 63},
	}
	var unpacked []byte
	for _, d := range want.Dims {
		unpacked = protowire.AppendTag(unpacked, 1, protowire.VarintType)
		unpacked = protowire.AppendVarint(unpacked, uint64(d))
	}
	unpacked = protowire.AppendTag(unpacked, 2, protowire.VarintType)
	unpacked = protowire.AppendVarint(unpacked, uint64(want.DataType))
	for _, f := range want.FloatData {
		unpacked = protowire.AppendTag(unpacked, 4, protowire.Fixed32Type)
		unpacked = protowire.AppendFixed32(unpacked, math.Float32bits(f))
	}
	for _, v := range want.Int32Data {
		unpacked = protowire.AppendTag(unpacked, 5, protowire.VarintType)
		unpacked = protowire.AppendVarint(unpacked, uint64(int64(v)))
	}
	for _, v := range want.Int64Data {
		unpacked = protowire.AppendTag(unpacked, 7, protowire.VarintType)
		unpacked = protowire.AppendVarint(unpacked, uint64(v))
	}
	for _, v := range want.DoubleData {
		unpacked = protowire.AppendTag(unpacked, 10, protowire.Fixed64Type)
		unpacked = protowire.AppendFixed64(unpacked, math.Float64bits(v))
	}
	for _, v := range want.Uint64Data {
		unpacked = protowire.AppendTag(unpacked, 11, protowire.VarintType)
		unpacked = protowire.AppendVarint(unpacked, v)
	}
	got := new(onnxpb.TensorProto)
	if err := proto.Unmarshal(unpacked, got); err != nil {
		t.Fatalf("unmarshal unpacked: %v", err)
	}
	if !proto.Equal(want, got) {
		t.Errorf("unpacked encoding decoded to %v, want %v", got, want)
	}

	packed, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(packed) >= len(unpacked) {
		t.Errorf("proto3 encoding (%d bytes) is not packed (unpacked is %d bytes)", len(packed), len(unpacked))
	}
	got.Reset()
	if err := proto.Unmarshal(packed, got); err != nil {
		t.Fatalf("unmarshal packed: %v", err)
	}
	if !proto.Equal(want, got) {
		t.Errorf("packed encoding decoded to %v, want %v", got, want)
	}

	// Attribute lists likewise.
	attr := &onnxpb.AttributeProto{Name: "a", Type: onnxpb.AttributeProto_INTS, Ints: []int64{3, -4}}
	var wire []byte
	wire = protowire.AppendTag(wire, 1, protowire.BytesType)
	wire = protowire.AppendString(wire, "a")
	for _, v := range attr.Ints {
		wire = protowire.AppendTag(wire, 8, protowire.VarintType)
		wire = protowire.AppendVarint(wire, uint64(v))
	}
	wire = protowire.AppendTag(wire, 20, protowire.VarintType)
	wire = protowire.AppendVarint(wire, uint64(attr.Type))
	gotAttr := new(onnxpb.AttributeProto)
	if err := proto.Unmarshal(wire, gotAttr); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(attr, gotAttr) {
		t.Errorf("unpacked ints decoded to %v, want %v", gotAttr, attr)
	}
}

// TestSpecNumbers pins enum values and field numbers to the ONNX
// specification, independently of onnx.proto, so an edit to the schema that
// breaks wire compatibility fails here.
func TestSpecNumbers(t *testing.T) {
	dataTypes := map[string]int32{
		"UNDEFINED": 0, "FLOAT": 1, "UINT8": 2, "INT8": 3, "UINT16": 4, "INT16": 5, "INT32": 6,
		"INT64": 7, "STRING": 8, "BOOL": 9, "FLOAT16": 10, "DOUBLE": 11, "UINT32": 12, "UINT64": 13,
		"COMPLEX64": 14, "COMPLEX128": 15, "BFLOAT16": 16, "FLOAT8E4M3FN": 17, "FLOAT8E4M3FNUZ": 18,
		"FLOAT8E5M2": 19, "FLOAT8E5M2FNUZ": 20, "UINT4": 21, "INT4": 22, "FLOAT4E2M1": 23,
		"FLOAT8E8M0": 24, "UINT2": 25, "INT2": 26,
	}
	checkEnum(t, "TensorProto.DataType", onnxpb.TensorProto_DataType_value, dataTypes)
	checkEnum(t, "AttributeProto.AttributeType", onnxpb.AttributeProto_AttributeType_value, map[string]int32{
		"UNDEFINED": 0, "FLOAT": 1, "INT": 2, "STRING": 3, "TENSOR": 4, "GRAPH": 5, "FLOATS": 6,
		"INTS": 7, "STRINGS": 8, "TENSORS": 9, "GRAPHS": 10, "SPARSE_TENSOR": 11, "SPARSE_TENSORS": 12,
		"TYPE_PROTO": 13, "TYPE_PROTOS": 14,
	})
	checkEnum(t, "TensorProto.DataLocation", onnxpb.TensorProto_DataLocation_value, map[string]int32{"DEFAULT": 0, "EXTERNAL": 1})

	fields := map[proto.Message]map[string]int32{
		&onnxpb.ModelProto{}: {"ir_version": 1, "producer_name": 2, "producer_version": 3, "domain": 4,
			"model_version": 5, "doc_string": 6, "graph": 7, "opset_import": 8, "metadata_props": 14,
			"training_info": 20, "functions": 25},
		&onnxpb.GraphProto{}: {"node": 1, "name": 2, "initializer": 5, "doc_string": 10, "input": 11,
			"output": 12, "value_info": 13, "quantization_annotation": 14, "sparse_initializer": 15, "metadata_props": 16},
		&onnxpb.NodeProto{}: {"input": 1, "output": 2, "name": 3, "op_type": 4, "attribute": 5,
			"doc_string": 6, "domain": 7, "overload": 8, "metadata_props": 9},
		&onnxpb.AttributeProto{}: {"name": 1, "f": 2, "i": 3, "s": 4, "t": 5, "g": 6, "floats": 7, "ints": 8,
			"strings": 9, "tensors": 10, "graphs": 11, "doc_string": 13, "tp": 14, "type_protos": 15,
			"type": 20, "ref_attr_name": 21, "sparse_tensor": 22, "sparse_tensors": 23},
		&onnxpb.TensorProto{}: {"dims": 1, "data_type": 2, "segment": 3, "float_data": 4, "int32_data": 5,
			"string_data": 6, "int64_data": 7, "name": 8, "raw_data": 9, "double_data": 10, "uint64_data": 11,
			"doc_string": 12, "external_data": 13, "data_location": 14, "metadata_props": 16},
		&onnxpb.TypeProto{}: {"tensor_type": 1, "sequence_type": 4, "map_type": 5, "denotation": 6,
			"opaque_type": 7, "sparse_tensor_type": 8, "optional_type": 9},
		&onnxpb.TensorShapeProto_Dimension{}: {"dim_value": 1, "dim_param": 2, "denotation": 3},
		&onnxpb.ValueInfoProto{}:             {"name": 1, "type": 2, "doc_string": 3, "metadata_props": 4},
		&onnxpb.SparseTensorProto{}:          {"values": 1, "indices": 2, "dims": 3},
		&onnxpb.OperatorSetIdProto{}:         {"domain": 1, "version": 2},
		&onnxpb.FunctionProto{}: {"name": 1, "input": 4, "output": 5, "attribute": 6, "node": 7, "doc_string": 8,
			"opset_import": 9, "domain": 10, "attribute_proto": 11, "value_info": 12, "overload": 13, "metadata_props": 14},
	}
	for msg, want := range fields {
		desc := msg.ProtoReflect().Descriptor()
		if got := desc.Fields().Len(); got != len(want) {
			t.Errorf("%s has %d fields, test lists %d", desc.FullName(), got, len(want))
		}
		for name, num := range want {
			fd := desc.Fields().ByName(protoreflect.Name(name))
			if fd == nil {
				t.Errorf("%s has no field %s", desc.FullName(), name)
				continue
			}
			if int32(fd.Number()) != num {
				t.Errorf("%s.%s is field %d, ONNX says %d", desc.FullName(), name, fd.Number(), num)
			}
		}
	}
}

func checkEnum(t *testing.T, name string, got, want map[string]int32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s has %d values, ONNX defines %d", name, len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s.%s = %d (present %v), ONNX says %d", name, k, g, ok, v)
		}
	}
}
