// Package onnxtest builds small ONNX models in Go for the tests of the packages that
// compile and train them (compiler, cmd/ppc): a model is written node by node, marshalled to
// .onnx bytes and imported like a file, so that a test states exactly the exporter pattern
// it is about and no binary model is committed. (frontend/onnx's own tests have the same
// builder, unexported, in build_test.go.)
package onnxtest
