package passes

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"ppc.dev/ppc/ir"
)

// RankOptimizer writes each pipeline rank's optimizer step into its rank program.
var RankOptimizer = &Pass{
	Name: "rank-optimizer",
	Doc: "After rank-programs (and tied-grads): each pipeline rank runs the slice of @optimizer that updates the " +
		"parameters its stages use (and their state), the state that belongs to no parameter ({global}: the loss " +
		"scaler's) and every metric — written as @optimizer.rank<r>, @optimizer with every other result and what only " +
		"they need removed. At the end of @rank<r> it appends what runs before the slice and the slice itself: when " +
		"@optimizer clips, %grad_sumsq — the local sum of squares of the gradients the slice reads, " +
		"@grad_sumsq.rank<r> (GradSumSq; each parameter's gradient counted once over the mesh: on the first pipeline " +
		"rank holding a tied one, and on rank 0 of tp or dp where it is whole on every rank of that axis), called " +
		"(`call`) and all-reduced (sum) over tp, dp and pp; when it is loss-scaled, %found_inf — 1 when some element of " +
		"those gradients is not finite, @found_inf.rank<r> (NonFiniteCheck), all-reduced (max) over tp, dp and pp — so " +
		"that every rank of the mesh agrees on the norm and on skipping the step; then `optimizer %…` running the slice " +
		"(its {grad_sumsq} and {found_inf} arguments marked port: the operands). An axis of one rank is left out. Under " +
		"ZeRO (@optimizer {zero}: its gradients of some parameters are dp blocks and its updates of them the new blocks) " +
		"the rank's ZeRO-1 gradients are first reduce-scattered over dp, `grad_reduce_scatter {axis = dp, grads = […]}` " +
		"(the norm and the overflow check then read the reduced blocks, which count on every replica), and after the " +
		"step the new blocks are all-gathered into the parameters, `param_all_gather {axis = dp, params = […]}` (not " +
		"under ZeRO-3, whose parameters are the blocks: param-gather gathers them where the next step reads them); both " +
		"bucketed as grad-reduce's all-reduces are (one dtype, up to BucketBytes), per stage (the first of the rank's " +
		"stages using the parameter, which the collective is charged to). A rank with nothing to update (no parameter, " +
		"no global state, no metric) has no optimizer step.",
	Run: runRankOptimizer,
}

// Names of the functions rank-optimizer writes for pipeline rank r.
func optimizerSliceName(r int) string { return fmt.Sprintf("%s.rank%d", OptimizerFunc, r) }

func runRankOptimizer(m *ir.Module, _ Options) error {
	opt := m.Func(OptimizerFunc)
	if opt == nil {
		return nil // inference: nothing to update
	}
	progs, err := rankPrograms(m, "rank-optimizer")
	if err != nil {
		return err
	}
	placement, _, err := ReadSchedule(m)
	if err != nil {
		return err
	}
	_, holders, err := tiedPartials(m, placement)
	if err != nil {
		return err
	}
	held := make([]map[string]bool, len(progs))
	stageOf := make([]map[string]int, len(progs)) // parameter → the first of the rank's stages using it
	for r := range held {
		held[r], stageOf[r] = map[string]bool{}, map[string]int{}
	}
	for _, f := range m.Funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue
		}
		st := f.Attrs.Int("stage", 0)
		r := placement[st] // checked by tiedPartials
		if r >= len(progs) {
			return fmt.Errorf("@%s runs on pipeline rank %d, which has no rank program", f.Name, r)
		}
		for i, a := range f.Args {
			if f.ArgAttrs[i].Has(ir.AttrParam) {
				held[r][a.Name] = true
				if cur, ok := stageOf[r][a.Name]; !ok || st < cur {
					stageOf[r][a.Name] = st
				}
			}
		}
	}
	zero, dp := zeroBlocks(m)
	whole := map[string]ir.Type{} // each parameter's type (a ZeRO update's block is 1/dp of it)
	for i, a := range opt.Args {
		if opt.ArgAttrs[i].Has(ir.AttrParam) {
			whole[a.Name] = a.Type
		}
	}
	allReduce := ir.MustLookup("all_reduce")
	for r, prog := range progs {
		slice := sliceOptimizer(opt, held[r])
		if len(slice.Results) == 0 {
			continue
		}
		slice.Name = optimizerSliceName(r)
		if m.Func(slice.Name) != nil {
			return fmt.Errorf("the module already has a function @%s", slice.Name)
		}
		// ZeRO: the gradients of the parameters updated by blocks, and the new blocks.
		var rs, ag []string
		for i := range slice.Args {
			if name := slice.ArgAttrs[i].Str(ir.AttrGrad, ""); zero[name] == 1 && dp > 1 {
				rs = append(rs, name)
			}
		}
		for i := range slice.Results {
			// ZeRO-3 holds the block itself: the next step's functions gather it (param-gather).
			if name := slice.ResultAttrs[i].Str(AttrUpdate, ""); (zero[name] == 1 || zero[name] == 2) && dp > 1 && held[r][name] {
				ag = append(ag, name)
			}
		}
		// ZeRO-1: the accumulated gradients (whole, fp32) reduce-scattered to this replica's
		// blocks before anything reads them, one bucket at a time.
		accTypes := map[string]ir.Type{}
		for name, t := range whole {
			accTypes[name] = accType(t)
		}
		for _, bk := range stageBuckets(rs, stageOf[r], accTypes) {
			op := ir.NewOp(ir.MustLookup("grad_reduce_scatter"), nil, ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}, {Name: "grads", Value: ir.Strings(bk.names...)}}, nil)
			op.Stage = bk.stage
			prog.Ops = append(prog.Ops, op)
		}
		// The values the slice takes from the rank program: clipping's sum of squares, then
		// the loss scaler's overflow flag.
		operand := map[int]*ir.Value{}
		for _, i := range flagArgs(slice) {
			a, at := slice.Args[i], slice.ArgAttrs[i]
			var helper *ir.Func
			var op string
			switch {
			case at.Has(AttrGradSumSq):
				if helper, err = GradSumSq(fmt.Sprintf("grad_sumsq.rank%d", r), sumSqGrads(slice, r, holders)); err != nil {
					return fmt.Errorf("@%s: %v", slice.Name, err)
				}
				op = "sum"
			case at.Has(AttrFoundInf):
				if helper, err = NonFiniteCheck(fmt.Sprintf("found_inf.rank%d", r), sliceGrads(slice)); err != nil {
					return fmt.Errorf("@%s: %v", slice.Name, err)
				}
				op = "max"
			}
			if m.Func(helper.Name) != nil {
				return fmt.Errorf("the module already has a function @%s", helper.Name)
			}
			m.Funcs = append(m.Funcs, helper)
			slice.ArgAttrs[i] = at.Set(AttrPort, ir.String(a.Name))
			call := ir.NewOp(ir.MustLookup("call"), nil, ir.Attrs{{Name: "func", Value: ir.String(helper.Name)}}, []ir.Type{ir.T(ir.F32)})
			prog.Ops = append(prog.Ops, call)
			v := call.Results[0]
			// Every rank of the mesh takes part, so that all agree on the value.
			for _, axis := range []string{"tp", "dp", "pp"} {
				if meshSize(m, axis) > 1 {
					red := ir.NewOp(allReduce, []*ir.Value{v}, ir.Attrs{{Name: "axis", Value: ir.Ident(axis)}, {Name: "op", Value: ir.Ident(op)}}, []ir.Type{ir.T(ir.F32)})
					prog.Ops = append(prog.Ops, red)
					v = red.Results[0]
				}
			}
			v.Name = a.Name
			operand[i] = v
		}
		var operands []*ir.Value
		for i := range slice.Args {
			if v := operand[i]; v != nil {
				operands = append(operands, v)
			}
		}
		m.Funcs = append(m.Funcs, slice)
		prog.Ops = append(prog.Ops, ir.NewOp(ir.MustLookup("optimizer"), operands, ir.Attrs{{Name: "func", Value: ir.String(slice.Name)}}, nil))
		// ZeRO: each replica updated its blocks; gather the whole parameters, bucketed.
		for _, bk := range stageBuckets(ag, stageOf[r], whole) {
			op := ir.NewOp(ir.MustLookup("param_all_gather"), nil, ir.Attrs{{Name: "axis", Value: ir.Ident("dp")}, {Name: "params", Value: ir.Strings(bk.names...)}}, nil)
			op.Stage = bk.stage
			prog.Ops = append(prog.Ops, op)
		}
	}
	return nil
}

type stageBucket struct {
	stage int
	names []string
}

// stageBuckets buckets names (see buckets) per stage, in stage order: a bucket's collective
// is charged to one stage, as the planner prices each stage's.
func stageBuckets(names []string, stageOf map[string]int, types map[string]ir.Type) []stageBucket {
	byStage := map[int][]string{}
	for _, n := range names {
		byStage[stageOf[n]] = append(byStage[stageOf[n]], n)
	}
	var out []stageBucket
	for _, st := range slices.Sorted(maps.Keys(byStage)) {
		for _, b := range buckets(byStage[st], types) {
			out = append(out, stageBucket{st, b})
		}
	}
	return out
}

// flagArgs are the indices of a slice's {grad_sumsq} and {found_inf} arguments, in that
// order: the norm is summed before the overflow check, as the values are computed.
func flagArgs(f *ir.Func) []int {
	var out []int
	for _, attr := range []string{AttrGradSumSq, AttrFoundInf} {
		for i := range f.Args {
			if f.ArgAttrs[i].Has(attr) {
				out = append(out, i)
			}
		}
	}
	return out
}

// sliceOptimizer is @optimizer reduced to what one pipeline rank runs: the updates of the
// parameters it holds and of their state, of the global state, and the metrics, with the ops
// and arguments only other results need removed.
func sliceOptimizer(opt *ir.Func, held map[string]bool) *ir.Func {
	// The slice is found on a shallow copy (RemoveDead only replaces its op list) and only
	// what remains is cloned: a pipeline rank holds 1/pp of the updates, and cloning all of
	// @optimizer for each rank cost a twentieth of a GPT-3 compile's allocations.
	f := &ir.Func{}
	*f = *opt
	global := map[string]bool{}
	for i := range f.Args {
		if IsGlobalState(f, i) {
			global[f.ArgAttrs[i].Str(AttrState, "")] = true
		}
	}
	holds := func(name string) bool {
		// A parameter, or state named after its parameter: "<param>.<state>".
		for {
			if held[name] {
				return true
			}
			i := strings.LastIndexByte(name, '.')
			if i < 0 {
				return false
			}
			name = name[:i]
		}
	}
	var keepR []*ir.Value
	var keepRA []ir.Attrs
	for i, r := range f.Results {
		target := f.ResultAttrs[i].Str(AttrUpdate, "")
		if holds(target) || global[target] || f.ResultAttrs[i].Has(AttrMetric) {
			keepR = append(keepR, r)
			keepRA = append(keepRA, f.ResultAttrs[i])
		}
	}
	f.Results, f.ResultAttrs = keepR, keepRA
	RemoveDead(f)
	f = f.Clone()
	used := map[*ir.Value]bool{}
	for _, op := range f.Ops {
		for _, x := range op.Operands {
			used[x] = true
		}
	}
	for _, r := range f.Results {
		used[r] = true
	}
	var args []*ir.Value
	var argAttrs []ir.Attrs
	for i, a := range f.Args {
		if used[a] {
			a.Index = len(args)
			args = append(args, a)
			argAttrs = append(argAttrs, f.ArgAttrs[i])
		}
	}
	f.Args, f.ArgAttrs = args, argAttrs
	return f
}

// sliceGrads are the gradients a slice of @optimizer reads, in argument order.
func sliceGrads(f *ir.Func) []GradArg {
	var out []GradArg
	for i, a := range f.Args {
		if name := f.ArgAttrs[i].Str(ir.AttrGrad, ""); name != "" {
			out = append(out, GradArg{Name: name, Type: a.Type})
		}
	}
	return out
}

// sumSqGrads are the gradients pipeline rank r counts in the global norm: those of the
// parameters it is the first holder of, each with the mesh axes over which it is whole on
// every rank (counted on that axis's rank 0 only). A gradient split over an axis — a
// tensor-parallel block, ZeRO's dp block — counts on every rank of it.
func sumSqGrads(f *ir.Func, r int, holders map[string][]int) []GradArg {
	var out []GradArg
	for i, a := range f.Args {
		at := f.ArgAttrs[i]
		name := at.Str(ir.AttrGrad, "")
		if name == "" || (len(holders[name]) > 0 && holders[name][0] != r) {
			continue
		}
		split := map[string]bool{}
		for _, j := range []int{i, paramArg(f, name)} {
			if j < 0 {
				continue
			}
			if s, _ := ir.ArgSharding(f, j); s != nil { // checked by the verifier
				for _, d := range s.Dims {
					for _, ax := range d {
						split[ax] = true
					}
				}
			}
		}
		g := GradArg{Name: name, Type: a.Type}
		for _, ax := range []string{"tp", "dp"} {
			if !split[ax] {
				g.Replicated = append(g.Replicated, ax)
			}
		}
		out = append(out, g)
	}
	return out
}

// paramArg is the index of f's argument for parameter name (-1: none).
func paramArg(f *ir.Func, name string) int {
	return slices.IndexFunc(f.Args, func(a *ir.Value) bool { return f.ArgAttrs[a.Index].Has(ir.AttrParam) && a.Name == name })
}
