package cudatest

import (
	"fmt"
	"math"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// bnormCases: batch_norm and instance_norm and their gradients on odd sizes (N 3, C 5, S 7
// or 3×4, and batch_norm on [N, C] with S 1), default and explicit eps, in f32, bf16 and
// f64 (f16 once). The kernels keep the CPU device's precision and order, so the tolerances
// (the layer-norm cases') only absorb the GPU's fused multiply-adds.
func bnormCases() []Case {
	var cs []Case
	add := func(name string, at ir.Attrs, in, out []ir.Type, abs float64) {
		c := Case{fmt.Sprintf("kbn%d_%s", len(cs), name), &device.Spec{Op: ir.MustLookup(name), Attrs: at, In: in, Out: out}, 64, abs, 0, nil}
		if vi := bnVarOperand(name); vi >= 0 {
			// The harness draws operands from N(0, 4): a variance must be positive, or half
			// the channels would compare NaN with NaN.
			c.Fix = func(in []device.Tensor) {
				v := in[vi]
				for k := 0; k < v.Type.NumElements(); k++ {
					SetFloat(v, k, math.Abs(v.Float(k))+0.05)
				}
			}
		}
		cs = append(cs, c)
	}
	eps := ir.Attrs{{Name: "eps", Value: ir.Float(1e-3)}}
	for _, d := range []ir.DType{f32, bf, ir.F64} {
		abs := map[ir.DType]float64{f32: 1e-5, bf: 1.0 / 16, ir.F64: 1e-12}[d]
		x, x4, x2, ch := ty(d, 3, 5, 7), ty(d, 3, 5, 3, 4), ty(d, 3, 5), ty(d, 5)
		add("batch_norm", nil, []ir.Type{x, ch, ch, ch, ch}, []ir.Type{x}, abs)
		add("batch_norm", eps, []ir.Type{x4, ch, ch, ch, ch}, []ir.Type{x4}, abs)
		add("batch_norm", nil, []ir.Type{x2, ch, ch, ch, ch}, []ir.Type{x2}, abs)
		add("batch_norm_grad_input", nil, []ir.Type{x, ch, ch}, []ir.Type{x}, abs)
		add("batch_norm_grad_input", eps, []ir.Type{x4, ch, ch}, []ir.Type{x4}, abs)
		add("batch_norm_grad_params", nil, []ir.Type{x, x, ch, ch}, []ir.Type{ch, ch}, abs)
		add("batch_norm_grad_params", eps, []ir.Type{x4, x4, ch, ch}, []ir.Type{ch, ch}, abs)
		add("instance_norm", nil, []ir.Type{x, ch, ch}, []ir.Type{x}, abs)
		add("instance_norm", eps, []ir.Type{x4, ch, ch}, []ir.Type{x4}, abs)
		add("instance_norm_grad_input", nil, []ir.Type{x, x, ch}, []ir.Type{x}, abs)
		add("instance_norm_grad_input", eps, []ir.Type{x4, x4, ch}, []ir.Type{x4}, abs)
		add("instance_norm_grad_params", nil, []ir.Type{x, x}, []ir.Type{ch, ch}, abs)
		add("instance_norm_grad_params", eps, []ir.Type{x4, x4}, []ir.Type{ch, ch}, abs)
	}
	h, hc := ty(f16, 3, 5, 7), ty(f16, 5)
	add("instance_norm", nil, []ir.Type{h, hc, hc}, []ir.Type{h}, 1.0/512)
	add("batch_norm", nil, []ir.Type{h, hc, hc, hc, hc}, []ir.Type{h}, 1.0/512)
	return cs
}

// bnVarOperand is the index of the var operand of the batch_norm ops, or -1.
func bnVarOperand(op string) int {
	switch op {
	case "batch_norm":
		return 4
	case "batch_norm_grad_input":
		return 2
	case "batch_norm_grad_params":
		return 3
	}
	return -1
}
