package passes

import (
	"slices"

	"ppc.dev/ppc/ir"
)

// BucketBytes caps a gradient bucket (PyTorch DDP's default is 25 MiB): one collective per
// bucket pays its latency once, and a cap keeps the staging buffer small and lets a later
// bucket's reduction start while the backward goes on.
const BucketBytes = 25 << 20

// GradReduce writes the reductions of the gradients over the mesh into the rank programs.
var GradReduce = &Pass{
	Name: "grad-reduce",
	Doc: "After rank-programs: data parallelism makes each replica's gradient accumulators partial sums over dp (replica d " +
		"runs micro-batches d·M … d·M+M−1 of the global batch), and a whole parameter used in a tensor-parallel region " +
		"leaves its W as a partial sum over tp ({reduce_over = tp}, see split-stages). Right after the run that makes " +
		"the rank's last contribution to an accumulator — the last W (or B) of its stage in the schedule, rather than " +
		"at the end of the step, so that an asynchronous transport overlaps the reduction with the backward work that " +
		"remains (docs/DESIGN.md §6) — write its sum: over tp, `grad_all_reduce {axis = tp, grads = [G]}` for each such " +
		"accumulator, then over dp the accumulators that run completes, bucketed as PyTorch DDP does — one " +
		"`grad_all_reduce {axis = dp, grads = […]}` per bucket of one dtype (fp32 first, then fp64) up to BucketBytes " +
		"(25 MiB), in result order: one collective's latency per bucket, the same additions as one all-reduce each. " +
		"A tied weight's partials are reduced each so, before tied-grads exchanges them. Under ZeRO (@optimizer's " +
		"gradient arguments split over dp) a gradient is not all-reduced: ZeRO-3's functions return blocks, already " +
		"reduce-scattered (param-gather), which accumulate as they are; ZeRO-2 reduce-scatters the gradients each " +
		"run computes right after it, bucketed likewise, `grad_reduce_scatter {axis = dp, grads = […], microbatch = m}`, " +
		"and accumulates only this replica's blocks; ZeRO-1's reduce-scatter is rank-optimizer's. Under context " +
		"parallelism the cp ranks hold replicas of every parameter that saw other tokens: after the last contribution " +
		"each accumulator (under ZeRO-2 its dp block) is summed over cp, `grad_all_reduce {axis = cp, …}` in the same " +
		"buckets, before the dp sum — cp replicas reduce like more dp replicas. Every op carries the run's stage.",
	Run: runGradReduce,
}

func runGradReduce(m *ir.Module, _ Options) error {
	progs, err := rankPrograms(m, "grad-reduce")
	if err != nil {
		return err
	}
	zero, dp := zeroBlocks(m)
	cp := meshSize(m, CPAxis)
	types := gradTypes(m)
	allReduce, reduceScatter := ir.MustLookup("grad_all_reduce"), ir.MustLookup("grad_reduce_scatter")
	for _, prog := range progs {
		last := map[string]int{} // accumulator → index of the run making its last contribution
		for i, op := range prog.Ops {
			if f := ranFunc(m, op); f != nil {
				for j := range f.Results {
					if key := GradKey(f.ResultAttrs[j]); key != "" {
						last[key] = i
					}
				}
			}
		}
		ops := make([]*ir.Op, 0, len(prog.Ops))
		for i, op := range prog.Ops {
			ops = append(ops, op)
			f := ranFunc(m, op)
			if f == nil {
				continue
			}
			add := func(def *ir.OpDef, attrs ir.Attrs) {
				red := ir.NewOp(def, nil, attrs, nil)
				red.Stage = op.Stage
				ops = append(ops, red)
			}
			var blocks, tp, sum, cpSum []string
			out := map[string]ir.Type{} // the run's gradients, as it computes them
			for j := range f.Results {
				at := f.ResultAttrs[j]
				key := GradKey(at)
				if key == "" {
					continue
				}
				name := at.Str(ir.AttrGrad, "")
				if dp > 1 && zero[name] == 2 {
					blocks = append(blocks, key)
					out[key] = f.Results[j].Type
				}
				if last[key] != i {
					continue
				}
				if ax := at.Str(AttrReduceOver, ""); ax != "" {
					tp = append(tp, ax, key)
				}
				if cp > 1 {
					cpSum = append(cpSum, key)
				}
				if dp > 1 && zero[name] == 0 {
					sum = append(sum, key)
				}
			}
			for _, b := range buckets(blocks, out) {
				add(reduceScatter, ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}, {Name: "grads", Value: ir.Strings(b...)},
					{Name: "microbatch", Value: ir.Int(op.Attrs.Int("microbatch", 0))}})
			}
			for k := 0; k < len(tp); k += 2 {
				add(allReduce, ir.Attrs{{Name: "axis", Value: ir.Ident(tp[k])}, {Name: "grads", Value: ir.Strings(tp[k+1])}})
			}
			// The cp ranks are replicas of the parameters that saw other tokens: their sums
			// come before dp's (and ZeRO-1's reduce-scatter), as if they were more dp replicas;
			// under ZeRO-2 the accumulator is already this replica's dp block, summed over cp
			// after its last contribution.
			for _, b := range buckets(cpSum, types) {
				add(allReduce, ir.Attrs{{Name: "axis", Value: ir.Ident(CPAxis)}, {Name: "grads", Value: ir.Strings(b...)}})
			}
			for _, b := range buckets(sum, types) {
				add(allReduce, ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}, {Name: "grads", Value: ir.Strings(b...)}})
			}
		}
		prog.Ops = ops
	}
	return nil
}

// ranFunc is the per-stage function a rank program's run op runs (nil for other ops).
func ranFunc(m *ir.Module, op *ir.Op) *ir.Func {
	if op.Name() != "run" {
		return nil
	}
	return m.Func(op.Attrs.Str("func", ""))
}

// buckets groups names (in order) into buckets of one dtype — fp32 first, then fp64, then
// any other in order of appearance — each at most BucketBytes unless one tensor is larger.
func buckets(names []string, types map[string]ir.Type) [][]string {
	var dtypes []ir.DType
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		if slices.ContainsFunc(names, func(n string) bool { return types[n].DType == dt }) {
			dtypes = append(dtypes, dt)
		}
	}
	for _, n := range names {
		if dt := types[n].DType; !slices.Contains(dtypes, dt) {
			dtypes = append(dtypes, dt)
		}
	}
	var out [][]string
	for _, dt := range dtypes {
		var cur []string
		var bytes int64
		for _, n := range names {
			t := types[n]
			if t.DType != dt {
				continue
			}
			if bytes > 0 && bytes+t.Bytes() > BucketBytes {
				out = append(out, cur)
				cur, bytes = nil, 0
			}
			cur = append(cur, n)
			bytes += t.Bytes()
		}
		if len(cur) > 0 {
			out = append(out, cur)
		}
	}
	return out
}
