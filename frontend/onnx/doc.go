// Package onnx imports ONNX models (.onnx protobuf files, decoded with the project's own
// .proto subset in onnxpb) into ir.Module: initializers become parameters, graph inputs
// become inputs, shape arithmetic folds at import so the IR is static, and exporter patterns
// (decomposed LayerNorm, erf/tanh GELU, MatMul+Add) are raised to the IR's high-level ops.
package onnx
