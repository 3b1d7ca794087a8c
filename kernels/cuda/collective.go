package cuda

import (
	"fmt"
	"slices"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// CollPlan is what a group's collective needs besides NCCL's calls: the kernels of its NCCL
// run (runtime/cuda's net.go and ordered.go queue them and the calls), and the types and
// chunks they work on.
type CollPlan struct {
	Full, Shard ir.Type // all-gather's result or reduce-scatter's operand, and a member's part
	Permute     *Kernel // between the tensor and NCCL's member-major layout (nil: they agree)
	// PermuteOut is all-to-all's second permute: the blocks received member-major into the
	// result's layout along ConcatDim (nil: they agree). Permute is its first, the operand
	// into member-major blocks along Dim. Full is the operand's type, Shard the result's.
	PermuteOut   *Kernel
	Fold         *Kernel // a float reduction's fold of this member's chunk (nil: NCCL reduces)
	Counts, Offs []int64 // a float reduction's chunks, in elements
}

// PlanCollective plans collective c for member pos of a group of size. Float reductions are
// ordered (runtime/cuda's ordered.go): every member folds its chunk in group order, as the host
// transports do. Gathers and scatters along a dim with more than 1s before it go through a
// scratch buffer in member-major order (NCCL's layout) and a permute kernel: the tensor as
// [pre, n·part] (per pre-row, the members' parts in order), NCCL's buffer as [n, pre, part].
func PlanCollective(c device.Coll, size, pos int) (*CollPlan, error) {
	dt := c.In.DType
	p := &CollPlan{Full: c.In, Shard: c.In}
	switch c.Kind {
	case device.AllReduce:
		p.Counts, p.Offs = chunks(int64(c.In.NumElements()), size)
	case device.Broadcast:
	case device.AllGather, device.ReduceScatter:
		if c.Dim < 0 || c.Dim >= c.In.Rank() {
			return nil, fmt.Errorf("%v along dim %d of %s", c.Kind, c.Dim, c.In)
		}
		if c.Kind == device.AllGather {
			p.Full.Shape = slices.Clone(c.In.Shape)
			p.Full.Shape[c.Dim] *= size
		} else {
			if c.In.Shape[c.Dim]%size != 0 {
				return nil, fmt.Errorf("reduce-scatter of %s along dim %d over %d ranks", c.In, c.Dim, size)
			}
			p.Shard.Shape = slices.Clone(c.In.Shape)
			p.Shard.Shape[c.Dim] /= size
			recv := int64(p.Shard.NumElements())
			for k := range int64(size) {
				p.Counts, p.Offs = append(p.Counts, recv), append(p.Offs, k*recv)
			}
		}
		pre := 1
		for _, x := range c.In.Shape[:c.Dim] {
			pre *= x
		}
		if pre > 1 {
			part := p.Full.NumElements() / pre / size
			from := ir.Type{DType: dt, Shape: ir.Shape{size, pre, part}} // gathered → the tensor
			if c.Kind == device.ReduceScatter {
				from.Shape = ir.Shape{pre, size, part} // the operand → NCCL's layout
			}
			to := ir.Type{DType: dt, Shape: ir.Shape{from.Shape[1], from.Shape[0], part}}
			k, err := Generate(&device.Spec{Op: ir.MustLookup("transpose"), Attrs: ir.Attrs{{Name: "perm", Value: ir.Ints(1, 0, 2)}},
				In: []ir.Type{from}, Out: []ir.Type{to}}, fmt.Sprintf("permute_%s_%d_%d_%d", dt, from.Shape[0], from.Shape[1], part))
			if err != nil {
				return nil, err
			}
			p.Permute = &k
		}
	case device.AllToAll:
		r := c.In.Rank()
		if c.Dim < 0 || c.Dim >= r || c.ConcatDim < 0 || c.ConcatDim >= r || c.In.Shape[c.Dim]%size != 0 {
			return nil, fmt.Errorf("all-to-all of %s split along dim %d, concatenated along %d, over %d ranks", c.In, c.Dim, c.ConcatDim, size)
		}
		block := ir.Type{DType: dt, Shape: slices.Clone(c.In.Shape)}
		block.Shape[c.Dim] /= size
		p.Shard.Shape = slices.Clone(block.Shape)
		p.Shard.Shape[c.ConcatDim] *= size
		prod := func(s ir.Shape) int {
			n := 1
			for _, x := range s {
				n *= x
			}
			return n
		}
		var err error
		// The operand [pre, n·part] along Dim → NCCL's blocks [n, pre, part].
		if pre := prod(c.In.Shape[:c.Dim]); pre > 1 {
			if p.Permute, err = permuteKernel(dt, pre, size, c.In.NumElements()/pre/size); err != nil {
				return nil, err
			}
		}
		// The blocks received [n, pre, part] → the result [pre, n·part] along ConcatDim.
		if pre := prod(block.Shape[:c.ConcatDim]); pre > 1 {
			if p.PermuteOut, err = permuteKernel(dt, size, pre, block.NumElements()/pre); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("unknown collective %d", c.Kind)
	}
	if !dt.IsFloat() || c.Kind != device.AllReduce && c.Kind != device.ReduceScatter {
		p.Counts, p.Offs = nil, nil
		return p, nil
	}
	mine := p.Counts[pos]
	k, err := foldKernel(fmt.Sprintf("fold_%s_%s_%d_%d", c.Op, dt, size, mine), dt, c.Op, size, mine)
	if err != nil {
		return nil, err
	}
	p.Fold = &k
	return p, nil
}

// CollectiveKernels are the kernels member pos of a group of size runs for collective c when
// NCCL carries it (ppc dis --cuda prints them).
func CollectiveKernels(c device.Coll, size, pos int) ([]Kernel, error) {
	p, err := PlanCollective(c, size, pos)
	if err != nil {
		return nil, err
	}
	var ks []Kernel
	for _, k := range []*Kernel{p.Permute, p.PermuteOut, p.Fold} {
		if k != nil {
			ks = append(ks, *k)
		}
	}
	return ks, nil
}

// permuteKernel swaps the first two dims of [a, b, part] (a transpose kernel).
func permuteKernel(dt ir.DType, a, b, part int) (*Kernel, error) {
	from := ir.Type{DType: dt, Shape: ir.Shape{a, b, part}}
	to := ir.Type{DType: dt, Shape: ir.Shape{b, a, part}}
	k, err := Generate(&device.Spec{Op: ir.MustLookup("transpose"), Attrs: ir.Attrs{{Name: "perm", Value: ir.Ints(1, 0, 2)}},
		In: []ir.Type{from}, Out: []ir.Type{to}}, fmt.Sprintf("permute_%s_%d_%d_%d", dt, a, b, part))
	if err != nil {
		return nil, err
	}
	return &k, nil
}

// chunks splits count elements into n chunks in order, the first count%n one longer.
func chunks(count int64, n int) (counts, offs []int64) {
	var at int64
	for k := range int64(n) {
		c := count / int64(n)
		if k < count%int64(n) {
			c++
		}
		counts, offs = append(counts, c), append(offs, at)
		at += c
	}
	return counts, offs
}

// foldKernel writes the kernel that folds n parts of c elements ([n, c], part k at k·c) in
// order into c results.
func foldKernel(name string, dt ir.DType, op string, n int, c int64) (Kernel, error) {
	st, err := storage(dt)
	if err != nil || !dt.IsFloat() {
		return Kernel{}, fmt.Errorf("no ordered reduction of %s", dt)
	}
	ct := classOf(dt).ctype()
	var combine string
	switch op {
	case "sum", "mean":
		combine = "acc = acc + v;"
	case "max": // NaN propagates; ties keep the earlier member's value (its sign of zero)
		combine = "acc = (v > acc || v != v) ? v : acc;"
	case "min":
		combine = "acc = (v < acc || v != v) ? v : acc;"
	default:
		return Kernel{}, fmt.Errorf("no reduction %q", op)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// %s: %d members' parts of %d %s, folded in member order\n", name, n, c, dt)
	fmt.Fprintf(&b, "PPC_GLOBAL void %s(const %s* __restrict__ in0, %s* __restrict__ out, long long n) {\n  PPC_FOR_EACH(i, n) {\n", name, st, st)
	fmt.Fprintf(&b, "    %s acc = %s;\n", ct, load(dt, "in0", "i"))
	fmt.Fprintf(&b, "    for (long long k = 1; k < %dLL; k++) {\n      %s v = %s;\n      %s\n    }\n", n, ct, load(dt, "in0", fmt.Sprintf("k * %dLL + i", c)), combine)
	if op == "mean" {
		fmt.Fprintf(&b, "    acc = acc / (%s)%d;\n", ct, n)
	}
	fmt.Fprintf(&b, "    out[i] = %s;\n  }\n}\n", store(dt, round(dt, "acc")))
	writeHostLauncher(&b, name, []string{fmt.Sprintf("(const %s*)in[0]", st)}, st)
	in := ir.Type{DType: dt, Shape: ir.Shape{n, int(c)}}
	return Kernel{Name: name, Body: b.String(), N: c, In: []ir.Type{in}, Out: ir.Type{DType: dt, Shape: ir.Shape{int(c)}}}, nil
}
