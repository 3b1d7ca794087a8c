package compiler

import (
	"ppc.dev/ppc/frontend/onnx"
	"ppc.dev/ppc/ir"
)

func init() {
	frontends[".onnx"] = func(path string, src []byte, opts LoadOptions) (*ir.Module, error) {
		if len(opts.Set) > 0 || opts.Preset != "" {
			return nil, &ir.Error{Loc: ir.Loc{File: path}, Msg: "--set and --preset apply to DSL models, not ONNX"}
		}
		return onnx.Import(path, src, dirOf(path), onnx.Options{Dims: opts.Dims, Microbatches: opts.Microbatches})
	}
}
