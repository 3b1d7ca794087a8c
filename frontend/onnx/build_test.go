package onnx

import (
	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/internal/onnxtest"
)

// The importer's tests build their models with internal/onnxtest (in Go, marshalled to .onnx
// bytes and imported like files), under the short names below; models claim to come from
// PyTorch, as most files do.

type mb = onnxtest.Model

func model(opset int64) *mb {
	m := onnxtest.New(opset)
	m.M.ProducerName, m.M.ProducerVersion = "pytorch", "2.1"
	return m
}

var (
	tensorType = onnxtest.Type
	in         = onnxtest.In
	f32        = onnxtest.F32
	f32n       = onnxtest.F32N
	i64        = onnxtest.I64
	scalarF    = onnxtest.ScalarF
	aInt       = onnxtest.Int
	aInts      = onnxtest.Ints
	aFloat     = onnxtest.FloatAttr
	aFloats    = onnxtest.FloatsAttr
	aStr       = onnxtest.StrAttr
	aTensor    = onnxtest.Tensor
)

type onnxpbOpset = onnxpb.OperatorSetIdProto
