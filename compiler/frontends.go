package compiler

import (
	"ppc.dev/ppc/frontend/dsl"
	"ppc.dev/ppc/frontend/onnx"
	"ppc.dev/ppc/ir"
)

func init() {
	frontends[".ppm"] = func(path string, src []byte, opts LoadOptions) (*ir.Module, error) {
		if len(opts.Dims) > 0 {
			return nil, &ir.Error{Loc: ir.Loc{File: path}, Msg: "--dim applies to ONNX models; DSL models take --set NAME=VALUE"}
		}
		if opts.Batch > 0 {
			return nil, &ir.Error{Loc: ir.Loc{File: path}, Msg: "--batch applies to ONNX models; a DSL model's batch is one of its constants, set with --set NAME=VALUE"}
		}
		return dsl.Load(path, src, dsl.Options{Set: opts.Set, Preset: opts.Preset, Microbatches: opts.Microbatches, Replicas: opts.Replicas})
	}
	frontends[".onnx"] = func(path string, src []byte, opts LoadOptions) (*ir.Module, error) {
		if len(opts.Set) > 0 || opts.Preset != "" {
			return nil, &ir.Error{Loc: ir.Loc{File: path}, Msg: "--set and --preset apply to DSL models, not ONNX"}
		}
		return onnx.Import(path, src, dirOf(path), onnx.Options{Dims: opts.Dims, Microbatches: opts.Microbatches, Replicas: opts.Replicas, Frozen: opts.Frozen, Batch: opts.Batch})
	}
}
