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
// {grad_sumsq}, which each rank's program computes (rank-optimizer: GradSumSq, then an
// all-reduce over the mesh) before the slice runs, as the loss scaler's found_inf.

// AttrGradSumSq (unit, on an f32 scalar argument of @optimizer) is the sum of the squares of
// every element of every parameter's accumulated gradient, over the whole mesh, each
// parameter counted once.
const AttrGradSumSq = "grad_sumsq"

// The metrics clipping reports.
const (
	MetricGradNorm = "grad_norm" // the global norm of the step's mean gradient, before clipping
	MetricClipped  = "clipped"   // 1 when the step's gradients were scaled down, else 0
)

// GradArg is one gradient a rank's helper function reads: the accumulator it names, its
// type, and (GradSumSq) the mesh axes over which it is whole on every rank.
type GradArg struct {
	Name       string
	Type       ir.Type
	Replicated []string
}

// GradSumSq builds the function rank-optimizer calls before a rank's slice of a clipping
// @optimizer: @name(grads…) → f32[] {port = "grad_sumsq"}, this rank's share of the global
// sum of squares, which the rank program then all-reduces (sum) over tp, dp and pp. Each
// gradient contributes reduce_sum(g·g) in f32, in argument order; a gradient that is whole on
// every rank of a mesh axis (a tp-replicated parameter's on each tp rank, a gradient
// all-reduced over dp on each replica) counts only on that axis's rank 0
// (where(axis_index == 0, s, 0)), so that the all-reduces count every element once. A
// parameter tied across pipeline ranks is left out by rank-optimizer on all but the first.
// ZeRO's gradients are this replica's dp blocks of the reduced sum (ZeRO-1's reduce-scattered
// before the step), so each counts on every replica, from what is already reduced.
func GradSumSq(name string, grads []GradArg) (*ir.Func, error) {
	f := ir.NewFunc(name)
	b := ir.NewBuilder(f)
	b.Phase = ir.Opt
	zero := scalarConst(b, ir.F32, 0)
	first := map[string]*ir.Value{} // axis → axis_index(axis) == 0
	acc := zero
	for i, ga := range grads {
		t := ga.Type
		if !t.DType.IsFloat() {
			return nil, fmt.Errorf("gradient %d (%s) is %s, not floating point", i, ga.Name, t)
		}
		g := f.AddArg("d."+ga.Name, t, ir.Attrs{{Name: ir.AttrGrad, Value: ir.String(ga.Name)}})
		if t.DType != ir.F32 {
			g = b.Cast(g, ir.F32)
		}
		s := b.Reduce("sum", b.Mul(g, g), nil, false)
		for _, axis := range ga.Replicated {
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
	f.AddResult(acc, ir.Attrs{{Name: AttrPort, Value: ir.String(AttrGradSumSq)}})
	return f, b.Err()
}
