package compiler

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

// checkKernels asks the CPU device — the reference device every plan runs on — to prepare a
// kernel for every op the plan will launch, with the op's exact operand and result types and
// attributes. The runtime does the same when it loads a plan (a plan file may have been
// corrupted or written by hand), but by then the model's source is gone: an i32 softmax would
// be reported as "rank-00000.ppx: instruction 3 (LAUNCH)". Here the op still has its position
// in the model, and a backward or optimizer op the position of the op it came from.
//
// Constants become constant buffers and communication ops become send/recv/all-reduce
// instructions, so neither is a kernel. Elementwise ops are checked one by one: the device runs
// a fused chain with the same engine, step by step.
func checkKernels(m *ir.Module) error {
	dev := cpu.New()
	// One check per distinct kernel: a model's layers repeat the same ops on the same
	// shapes, and preparing some kernels builds their constants (an iota's table), which for
	// every copy was a tenth of a GPT-3 compile.
	checked := map[string]bool{}
	for _, f := range m.Funcs {
		for _, op := range f.Ops {
			if op.Def.Name == "constant" || op.Def.Has(ir.P2P) || op.Def.Has(ir.Collective) || op.Def.Has(ir.Calls) || op.Def.Has(ir.State) {
				continue
			}
			s := &device.Spec{Op: op.Def, Attrs: op.Attrs}
			for _, x := range op.Operands {
				s.In = append(s.In, x.Type)
			}
			for _, r := range op.Results {
				s.Out = append(s.Out, r.Type)
			}
			var key strings.Builder
			key.WriteString(op.Def.Name)
			key.WriteString(ir.AttrString(ir.Dict(op.Attrs)))
			fmt.Fprint(&key, s.In, s.Out)
			if checked[key.String()] {
				continue
			}
			checked[key.String()] = true
			if _, err := dev.Prepare(s); err != nil {
				what := "this " + op.Def.Name
				switch op.Phase {
				case ir.BwdIn, ir.BwdW:
					what = op.Def.Name + ", in the backward pass of the op here,"
				case ir.Opt:
					what = op.Def.Name + ", in the optimizer update of the parameter here,"
				}
				return ir.ErrorAt(m.Source, op.Loc, "the CPU runtime cannot run %s: %v", what, err)
			}
		}
	}
	return nil
}
