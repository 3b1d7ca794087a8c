// Package compiler owns the whole compile: it loads a model with the right frontend (.onnx,
// .ppm, or .ir), runs the pass pipeline (cleanup, partition, autodiff, optimizer, split into
// per-stage functions), builds the pipeline schedule and generates the per-rank programs and
// plan.json. The CLI only parses flags into Options and prints the Result.
package compiler
