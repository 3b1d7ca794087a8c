// Package frontend groups ppc's model importers: frontend/onnx (ONNX protobuf models) and
// frontend/dsl (ppc's model language). Each turns its input into an ir.Module whose forward
// function takes the model's inputs and parameters and returns its outputs or loss.
package frontend
