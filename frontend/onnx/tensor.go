package onnx

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// maxRank caps the rank of any tensor or value type the importer accepts.
const maxRank = 32

// ONNX TensorProto.DataType values.
const (
	dtFloat    = 1
	dtUint8    = 2
	dtInt8     = 3
	dtUint16   = 4
	dtInt16    = 5
	dtInt32    = 6
	dtInt64    = 7
	dtString   = 8
	dtBool     = 9
	dtFloat16  = 10
	dtDouble   = 11
	dtUint32   = 12
	dtUint64   = 13
	dtBfloat16 = 16
)

// dtypeName names an ONNX data type for messages.
func dtypeName(dt int32) string {
	if n, ok := onnxpb.TensorProto_DataType_name[dt]; ok {
		return n
	}
	return "unknown data type " + strconv.Itoa(int(dt))
}

// irDType maps an ONNX data type to the IR dtype that holds it. INT16, UINT16 and UINT32 are
// widened losslessly (to i32, i32 and i64); the others without an IR counterpart are refused.
func irDType(dt int32) (ir.DType, error) {
	switch dt {
	case dtFloat:
		return ir.F32, nil
	case dtDouble:
		return ir.F64, nil
	case dtFloat16:
		return ir.F16, nil
	case dtBfloat16:
		return ir.BF16, nil
	case dtInt64, dtUint32:
		return ir.I64, nil
	case dtInt32, dtInt16, dtUint16:
		return ir.I32, nil
	case dtInt8:
		return ir.I8, nil
	case dtUint8:
		return ir.U8, nil
	case dtBool:
		return ir.Bool, nil
	}
	if _, ok := onnxpb.TensorProto_DataType_name[dt]; ok && dt != 0 {
		return ir.Invalid, fmt.Errorf("unsupported data type %s", dtypeName(dt))
	}
	return ir.Invalid, fmt.Errorf("unknown data type %d", dt)
}

// onnxElemSize is the stored size of one element of an ONNX data type in raw_data.
func onnxElemSize(dt int32) int {
	switch dt {
	case dtDouble, dtInt64, dtUint64:
		return 8
	case dtFloat, dtInt32, dtUint32:
		return 4
	case dtFloat16, dtBfloat16, dtInt16, dtUint16:
		return 2
	}
	return 1
}

// checkDims validates dims read from a file and converts them to a Shape.
func checkDims(dims []int64) (ir.Shape, error) {
	if len(dims) > maxRank {
		return nil, fmt.Errorf("rank %d exceeds the limit of %d", len(dims), maxRank)
	}
	s := make(ir.Shape, len(dims))
	for i, d := range dims {
		if d < 0 || d > 1<<50 {
			return nil, fmt.Errorf("bad dim %d in %v", d, dims)
		}
		s[i] = int(d)
	}
	if err := ir.CheckShapeSize(s); err != nil {
		return nil, err
	}
	return s, nil
}

// tensorData decodes a TensorProto into dense data, checking every length against the
// declared shape before allocating anything from it. dir resolves external data ("" forbids
// it). Errors do not name the tensor; callers add that.
func tensorData(t *onnxpb.TensorProto, dir string) (*ir.Dense, error) {
	if t.Segment != nil {
		return nil, fmt.Errorf("segmented tensors are not supported")
	}
	dt, err := irDType(t.DataType)
	if err != nil {
		return nil, err
	}
	shape, err := checkDims(t.Dims)
	if err != nil {
		return nil, err
	}
	n := shape.NumElements()
	esz := onnxElemSize(t.DataType)
	raw := t.RawData
	if t.DataLocation == onnxpb.TensorProto_EXTERNAL {
		if raw, err = externalData(t, dir, int64(n)*int64(esz)); err != nil {
			return nil, err
		}
	}
	d := &ir.Dense{Type: ir.Type{DType: dt, Shape: shape}, Data: nil}
	if len(raw) > 0 || t.DataLocation == onnxpb.TensorProto_EXTERNAL {
		if int64(len(raw)) != int64(n)*int64(esz) {
			return nil, fmt.Errorf("raw data holds %d bytes, but %s %v needs %d", len(raw), dtypeName(t.DataType), t.Dims, int64(n)*int64(esz))
		}
		d.Data = make([]byte, n*dt.Size())
		if esz == dt.Size() && t.DataType != dtBool {
			copy(d.Data, raw) // same layout: little-endian, fixed width
			return d, nil
		}
		for i := 0; i < n; i++ {
			e := raw[i*esz : (i+1)*esz]
			switch t.DataType {
			case dtInt16:
				setI64(d, i, int64(int16(binary.LittleEndian.Uint16(e))))
			case dtUint16:
				setI64(d, i, int64(binary.LittleEndian.Uint16(e)))
			case dtUint32:
				setI64(d, i, int64(binary.LittleEndian.Uint32(e)))
			case dtBool:
				d.Data[i] = b2u(e[0] != 0)
			default:
				copy(d.Data[i*esz:], e)
			}
		}
		return d, nil
	}
	count := func(have int) error {
		if have != n {
			return fmt.Errorf("holds %d elements, but %s %v needs %d", have, dtypeName(t.DataType), t.Dims, n)
		}
		return nil
	}
	vals := make([]float64, 0)
	switch t.DataType {
	case dtFloat:
		if err := count(len(t.FloatData)); err != nil {
			return nil, err
		}
		d.Data = make([]byte, 4*n)
		for i, v := range t.FloatData {
			binary.LittleEndian.PutUint32(d.Data[4*i:], math.Float32bits(v))
		}
		return d, nil
	case dtDouble:
		if err := count(len(t.DoubleData)); err != nil {
			return nil, err
		}
		vals = t.DoubleData
	case dtInt64:
		if err := count(len(t.Int64Data)); err != nil {
			return nil, err
		}
		d.Data = make([]byte, 8*n)
		for i, v := range t.Int64Data {
			binary.LittleEndian.PutUint64(d.Data[8*i:], uint64(v))
		}
		return d, nil
	case dtUint32:
		if err := count(len(t.Uint64Data)); err != nil {
			return nil, err
		}
		d.Data = make([]byte, 8*n)
		for i, v := range t.Uint64Data {
			setI64(d, i, int64(uint32(v)))
		}
		return d, nil
	case dtFloat16, dtBfloat16:
		if err := count(len(t.Int32Data)); err != nil {
			return nil, err
		}
		d.Data = make([]byte, 2*n)
		for i, v := range t.Int32Data {
			binary.LittleEndian.PutUint16(d.Data[2*i:], uint16(v))
		}
		return d, nil
	default: // INT32, INT16, UINT16, INT8, UINT8, BOOL: one element per int32_data entry
		if err := count(len(t.Int32Data)); err != nil {
			return nil, err
		}
		d.Data = make([]byte, n*dt.Size())
		for i, v := range t.Int32Data {
			switch t.DataType {
			case dtUint16:
				setI64(d, i, int64(uint16(v)))
			case dtBool:
				d.Data[i] = b2u(v != 0)
			default:
				setI64(d, i, int64(v))
			}
		}
		return d, nil
	}
	return ir.NewDenseF64(d.Type, vals), nil
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// setI64 stores an integer element in dense data of an integer dtype.
func setI64(d *ir.Dense, i int, v int64) {
	e := d.Data[i*d.Type.DType.Size():]
	switch d.Type.DType {
	case ir.I64:
		binary.LittleEndian.PutUint64(e, uint64(v))
	case ir.I32:
		binary.LittleEndian.PutUint32(e, uint32(int32(v)))
	default:
		e[0] = byte(v)
	}
}

// externalData reads the bytes of a tensor stored outside the model file. The location must
// be a relative path inside dir; offset and length are checked against the file's size and
// against the size the tensor's shape needs before anything is read.
func externalData(t *onnxpb.TensorProto, dir string, want int64) ([]byte, error) {
	var loc string
	offset, length := int64(0), int64(-1)
	for _, kv := range t.ExternalData {
		switch kv.Key {
		case "location":
			loc = kv.Value
		case "offset", "length":
			v, err := strconv.ParseInt(kv.Value, 10, 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("external data %s %q is not a non-negative integer", kv.Key, kv.Value)
			}
			if kv.Key == "offset" {
				offset = v
			} else {
				length = v
			}
		}
	}
	if loc == "" {
		return nil, fmt.Errorf("external data has no location")
	}
	if dir == "" {
		return nil, fmt.Errorf("external data %q cannot be read: the model was given as bytes without a directory", loc)
	}
	clean := filepath.Clean(filepath.FromSlash(loc))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("external data location %q must be a relative path inside the model's directory", loc)
	}
	if length >= 0 && length != want {
		return nil, fmt.Errorf("external data %q: length %d does not match the %d bytes the tensor needs", loc, length, want)
	}
	path := filepath.Join(dir, clean)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("external data: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("external data: %v", err)
	}
	if offset > st.Size() || st.Size()-offset < want {
		return nil, fmt.Errorf("external data file %s holds %d bytes; the tensor needs %d at offset %d", path, st.Size(), want, offset)
	}
	buf := make([]byte, want)
	if _, err := f.ReadAt(buf, offset); err != nil && err != io.EOF {
		return nil, fmt.Errorf("external data: %v", err)
	}
	return buf, nil
}

// ReadTensor reads a serialized TensorProto file (the test_data_set_N/input_N.pb files of the
// ONNX backend tests, or what `ppc infer --input` is given), returning its name and data.
func ReadTensor(path string) (string, *ir.Dense, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	t := &onnxpb.TensorProto{}
	if err := proto.Unmarshal(data, t); err != nil {
		return "", nil, fmt.Errorf("%s: not an ONNX TensorProto: %v", path, err)
	}
	d, err := tensorData(t, filepath.Dir(path))
	if err != nil {
		return "", nil, fmt.Errorf("%s: %v", path, err)
	}
	return t.Name, d, nil
}
