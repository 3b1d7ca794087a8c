package passes

import (
	"fmt"

	"ppc.dev/ppc/ir"
)

// Gradient clipping by the global norm (torch.nn.utils.clip_grad_norm_): the optimizer
// pass's clip option multiplies every gradient by min(1, clip/(‖g‖ + 1e-6)), ‖g‖ the L2 norm
// of all the model's (mean) gradients together. No rank holds them all, and @optimizer runs
// on each rank only as the slice for the parameters the rank holds, so the norm cannot be
// computed in @optimizer: it takes the sum of squares as an argument, %grad_sumsq
// {grad_sumsq}, which code generation computes per rank with GradSumSq and reduces over the
// mesh before the slice runs (as the loss scaler's found_inf).

// AttrGradSumSq (unit, on an f32 scalar argument of @optimizer) is the sum of the squares of
// every element of every parameter's accumulated gradient, over the whole mesh, each
// parameter counted once.
const AttrGradSumSq = "grad_sumsq"

// The metrics clipping reports.
const (
	MetricGradNorm = "grad_norm" // the global norm of the step's mean gradient, before clipping
	MetricClipped  = "clipped"   // 1 when the step's gradients were scaled down, else 0
)

// GradSumSq builds the function code generation runs before a rank's slice of a clipping
// @optimizer: @grad_sumsq(grads…) → f32[]. Each gradient contributes reduce_sum(g·g) in f32,
// in argument order; a gradient that is whole on every rank of a mesh axis (a tp-replicated
// parameter's on each tp rank, a gradient all-reduced over dp on each replica) counts only
// on that axis's rank 0 (where(axis_index == 0, s, 0)), so that the all-reduces (sum) over
// tp, dp and pp that follow, in that order, count every element once. A parameter tied
// across pipeline ranks is left out by code generation on all but the first. replicated[i]
// lists the axes gradient i is whole over. A gradient that is this replica's partial sum
// (ZeRO-1's {dp_partial}, partialDP[i]) is first reduce-scattered over the dp replicas,
// as @optimizer does again for the update (a second transfer of ZeRO-1's gradients: the
// price of clipping with it), and its block counts on every replica.
func GradSumSq(grads []ir.Type, replicated [][]string, partialDP []bool, dp int) (*ir.Func, error) {
	f := ir.NewFunc("grad_sumsq")
	b := ir.NewBuilder(f)
	b.Phase = ir.Opt
	zero := scalarConst(b, ir.F32, 0)
	first := map[string]*ir.Value{} // axis → axis_index(axis) == 0
	acc := zero
	for i, t := range grads {
		if !t.DType.IsFloat() {
			return nil, fmt.Errorf("gradient %d is %s, not floating point", i, t)
		}
		g := f.AddArg(fmt.Sprintf("g%d", i), t, ir.Attrs{{Name: ir.AttrGrad, Value: ir.String(fmt.Sprint(i))}})
		if partialDP[i] {
			g = b.Op1("reduce_scatter", ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}, {Name: "dim", Value: ir.Int(0)}, {Name: "parts", Value: ir.Int(dp)}}, g)
		}
		if t.DType != ir.F32 {
			g = b.Cast(g, ir.F32)
		}
		s := b.Reduce("sum", b.Mul(g, g), nil, false)
		for _, axis := range replicated[i] {
			c := first[axis]
			if c == nil {
				idx := b.Op1("axis_index", ir.Attrs{{Name: "axis", Value: ir.Ident(axis)}})
				c = b.Op1("equal", nil, idx, b.Scalar(ir.I64, 0))
				first[axis] = c
			}
			s = b.Op1("where", nil, c, s, zero)
		}
		acc = b.Add(acc, s)
	}
	for _, axis := range []string{"tp", "dp", "pp"} {
		acc = b.Op1("all_reduce", ir.Attrs{{Name: "axis", Value: ir.Ident(axis)}, {Name: "op", Value: ir.Ident("sum")}}, acc)
	}
	acc.Name = "grad_sumsq"
	f.AddResult(acc, ir.Attrs{{Name: AttrGradSumSq, Value: ir.Unit{}}})
	return f, b.Err()
}
