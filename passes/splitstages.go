package passes

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"

	"ppc.dev/ppc/ir"
)

// Kinds of per-stage functions, named as the schedule actions that run them.
const (
	KindF = "F" // forward
	KindI = "I" // input gradients (bwd_in)
	KindW = "W" // weight gradients (bwd_w)
)

// StageFuncName is the name of stage s's function of the given kind (F, I or W).
func StageFuncName(kind string, stage int) string { return kind + "_s" + strconv.Itoa(stage) }

// SliceFuncName is the name of the function of the given kind for token slice j of stage s
// (StageFuncName when j is ir.NoSlice).
func SliceFuncName(kind string, stage, j int) string {
	if j == ir.NoSlice {
		return StageFuncName(kind, stage)
	}
	return StageFuncName(kind, stage) + "_t" + strconv.Itoa(j)
}

// AttrPort (string, on arguments and results of per-stage functions) names a value that one
// per-stage function produces and another consumes: an activation sent to the next stage, a
// gradient sent back, or a value stashed between a stage's F, I and W. Producer and consumers
// carry the same key; the code generator gives each (key, micro-batch) a buffer, and a
// send/recv pair when producer and consumer sit on different ranks.
const AttrPort = "port"

// SplitStages cuts the training function into per-stage F, I and W functions.
var SplitStages = &Pass{
	Name: "split-stages",
	Doc: "Cut @train (or @forward, for inference) into one function per pipeline stage and phase: " +
		"F_sK (phase fwd), I_sK (bwd_in) and W_sK (bwd_w), so a schedule can run them separately per " +
		"micro-batch. Ops without a stage belong to stage 0, ops without a phase to F. A value used " +
		"outside the function that defines it becomes a result and an argument carrying the same " +
		"`port` key (activations to the next stage, gradients back, stashes between F, I and W); model " +
		"inputs and parameters stay arguments with their attributes; the loss and the parameter " +
		"gradients are returned by the functions that compute them. A parameter gradient autodiff summed " +
		"over several uses (tied weights) is returned as one partial per use, `{grad = NAME, partial = K}` " +
		"in forward order; the runtime accumulates each partial and adds them in order after the last " +
		"micro-batch, so the sum does not depend on the pipeline split. A cast of a parameter (mixed precision's " +
		"16-bit weight copy) is recomputed by the backward in every recompute mode rather than stashed per " +
		"micro-batch. Under recompute=full, I and W each rebuild, one unit at a time, the values they need " +
		"(W reads only gradients from I), so neither holds more than one unit's rebuilt values beside the stash " +
		"however far apart the schedule runs them. In every mode W redoes a recomputed all_gather (sp's " +
		"column-linear input) from the stashed shard rather than hold I's gathered copy until it runs. Empty functions are omitted.",
	Options: []Option{
		{Name: "recompute", Default: "none", Doc: "none: stash every forward value the backward uses; " +
			"full: stash only the inputs of each unit (the partition's units: E, each layer, L) and rebuild one unit at a " +
			"time right before its backward, from its stashed inputs (Megatron's --recompute-granularity full); " +
			"selective: recompute attention internals (the chain from the scores matmul through the softmax), stash the rest; " +
			"a fused attention op has none (it keeps no scores)"},
		{Name: "method", Default: RecomputeUniform, Doc: "for recompute=full, as Megatron's --recompute-method: uniform rebuilds " +
			"chunks of `layers` consecutive units of each stage from the chunk's input; block rebuilds the first `layers` units " +
			"of each stage one by one and stashes everything the backward of the others uses"},
		{Name: "layers", Default: "1", Doc: "for recompute=full: units per chunk (uniform) or units rebuilt per stage (block)"},
	},
	Run: func(m *ir.Module, opts Options) error {
		mode, method, n, err := parseRecomputeOptions(opts)
		if err != nil {
			return err
		}
		src := m.Func("train")
		if src == nil {
			src = m.Func(ir.ForwardFunc)
		}
		if src == nil {
			return fmt.Errorf("module has neither @train nor @forward")
		}
		funcs, err := splitStages(m, src, mode, method, n)
		if err != nil {
			return err
		}
		var out []*ir.Func
		for _, f := range m.Funcs {
			if f != src {
				out = append(out, f)
			}
		}
		m.Funcs = append(funcs, out...)
		return nil
	},
}

func opStage(op *ir.Op) int {
	if op.Stage == ir.NoStage {
		return 0
	}
	return op.Stage
}

func opKind(op *ir.Op) string {
	switch op.Phase {
	case ir.BwdIn:
		return KindI
	case ir.BwdW:
		return KindW
	case ir.Opt:
		return ""
	}
	return KindF
}

type stageKey struct {
	stage int
	slice int // token slice, or ir.NoSlice
	kind  string
}

func splitStages(m *ir.Module, src *ir.Func, recompute, method string, layers int) ([]*ir.Func, error) {
	src.Results, src.ResultAttrs = splitTiedGrads(src)
	hoistTPReductions(src)
	RemoveDead(src) // the sums of tied-weight contributions that were replaced
	results, resultAttrs := src.Results, src.ResultAttrs
	nstages := 0
	sliced := TokenSlices(m) != nil
	home := map[*ir.Value]stageKey{} // defining function of each op result
	keyOf := func(op *ir.Op) stageKey { return stageKey{opStage(op), op.Slice, opKind(op)} }
	for _, op := range src.Ops {
		if op.Phase == ir.Opt {
			return nil, ir.ErrorAt(m.Source, op.Loc, "split-stages: optimizer op %s inside @%s", op.Def.Name, src.Name)
		}
		if sliced != (op.Slice != ir.NoSlice) {
			return nil, ir.ErrorAt(m.Source, op.Loc, "split-stages: op %s has token slice %d in a module with token slices %v", op.Def.Name, op.Slice, TokenSlices(m))
		}
		k := keyOf(op)
		nstages = max(nstages, k.stage+1)
		for _, r := range op.Results {
			home[r] = k
		}
	}
	if nstages == 0 {
		nstages = 1
	}
	funcs := map[stageKey]*ir.Func{}
	get := func(k stageKey) *ir.Func {
		f := funcs[k]
		if f == nil {
			f = ir.NewFunc(SliceFuncName(k.kind, k.stage, k.slice))
			f.Attrs = ir.Attrs{{Name: "kind", Value: ir.Ident(k.kind)}, {Name: "stage", Value: ir.Int(k.stage)}}
			if k.slice != ir.NoSlice {
				f.Attrs = f.Attrs.Set("slice", ir.Int(k.slice))
			}
			funcs[k] = f
		}
		return f
	}
	argIndex := map[*ir.Value]int{}
	for i, a := range src.Args {
		argIndex[a] = i
	}
	ports := map[*ir.Value]string{}
	usedPort := map[string]bool{}
	portOf := func(v *ir.Value) string {
		if p, ok := ports[v]; ok {
			return p
		}
		base := v.Name
		if base == "" {
			base = "v" + strconv.Itoa(len(ports))
		}
		p := base
		for i := 1; usedPort[p]; i++ {
			p = base + "." + strconv.Itoa(i)
		}
		usedPort[p] = true
		ports[v] = p
		return p
	}
	exported := map[*ir.Value]bool{}
	plan := recomputePlan{remat: rematerializable(src, recompute)}
	if recompute == "full" {
		var err error
		if plan, err = fullRecompute(m, src, method, layers); err != nil {
			return nil, err
		}
	}
	// rebuilt: a forward value a backward function of its stage recomputes rather than reads.
	rebuilt := func(v *ir.Value, hk, k stageKey) bool {
		return plan.remat[v.Def] && !plan.checkpoint[v] && hk.kind == KindF && hk.stage == k.stage && hk.slice == k.slice
	}
	// origin maps an argument created in a per-stage function back to the @train value it
	// stands for: ops keep being rewritten to read their function's arguments, and a
	// recomputed copy must start again from the original values.
	origin := map[*ir.Value]*ir.Value{}
	local := map[stageKey]map[*ir.Value]*ir.Value{}
	var localOf func(k stageKey, v *ir.Value) *ir.Value
	localOf = func(k stageKey, v *ir.Value) *ir.Value {
		if local[k] == nil {
			local[k] = map[*ir.Value]*ir.Value{}
		}
		if w, ok := local[k][v]; ok {
			return w
		}
		f := get(k)
		var w *ir.Value
		hk, defined := home[v]
		switch {
		case defined && rebuilt(v, hk, k) && k.kind == KindW && recompute != "full" && !regatheredInW(v.Def):
			// W takes recomputed values from its stage's I, which recomputes them once
			// (selective recomputation's attention internals, a weight's 16-bit cast) — but
			// for a recomputed all_gather, which W redoes from the shard: a deferred W would
			// otherwise hold the full-sequence copy from I for every micro-batch in between.
			c := localOf(stageKey{k.stage, k.slice, KindI}, v)
			w = localOf(k, c)
		case defined && (rebuilt(v, hk, k) && (k.kind == KindI || k.kind == KindW) || gatheredGradInW(v, hk, k)):
			// Recompute the op here instead of stashing its result. The backward's ops run
			// in @train's order, so the first one that needs a value of a unit rebuilds it,
			// from the unit's stashed inputs (checkpoints) up. Under full recomputation W
			// rebuilds what it needs itself rather than take it from I: I runs every unit's
			// backward before W starts, so values I handed to W would be live for every unit
			// at once — and, under zero-bubble schedules, for every micro-batch between its I
			// and its W.
			op := v.Def
			operands := make([]*ir.Value, len(op.Operands))
			for i, x := range op.Operands {
				if o, ok := origin[x]; ok {
					x = o
				}
				operands[i] = localOf(k, x)
			}
			types := make([]ir.Type, len(op.Results))
			for i, r := range op.Results {
				types[i] = r.Type
			}
			c := ir.NewOp(op.Def, operands, op.Attrs, types)
			c.CopyAnnotations(op)
			c.Remat = true
			c.Loc = op.Loc
			for i, r := range op.Results {
				c.Results[i].Name = r.Name
				home[c.Results[i]] = k
				local[k][r] = c.Results[i]
			}
			f.Ops = append(f.Ops, c)
			w = c.Results[v.Index]
		}
		if w != nil {
			local[k][v] = w
			return w
		}
		if i, isArg := argIndex[v]; isArg {
			w = f.AddArg(v.Name, v.Type, src.ArgAttrs[i])
		} else {
			p := portOf(v)
			w = f.AddArg(p, v.Type, ir.Attrs{{Name: AttrPort, Value: ir.String(p)}})
			if !exported[v] {
				get(home[v]).AddResult(v, ir.Attrs{{Name: AttrPort, Value: ir.String(p)}})
				exported[v] = true
			}
		}
		local[k][v] = w
		origin[w] = v
		return w
	}
	for _, op := range src.Ops {
		var k stageKey
		if len(op.Results) == 0 {
			k = keyOf(op)
		} else {
			k = home[op.Results[0]]
		}
		f := get(k)
		for i, x := range op.Operands {
			if hk, ok := home[x]; ok && hk == k {
				continue
			}
			op.Operands[i] = localOf(k, x)
		}
		f.Ops = append(f.Ops, op)
	}
	for i, r := range results {
		k, ok := home[r]
		if !ok {
			if _, isArg := argIndex[r]; !isArg {
				return nil, fmt.Errorf("split-stages: @%s returns a value it does not define (result %d)", src.Name, i)
			}
			// A model that returns one of its inputs: stage 0's forward passes it through.
			k = stageKey{0, ir.NoSlice, KindF}
			if sliced {
				k.slice = 0
			}
			get(k).AddResult(localOf(k, r), resultAttrs[i])
			continue
		}
		get(k).AddResult(r, resultAttrs[i])
	}
	// Order: F, I, W for stage 0 (slice by slice), then stage 1, ….
	sliceIDs := []int{ir.NoSlice}
	if sliced {
		sliceIDs = sliceIDs[:0]
		for j := range TokenSlices(m) {
			sliceIDs = append(sliceIDs, j)
		}
	}
	var out []*ir.Func
	for s := 0; s < nstages; s++ {
		for _, j := range sliceIDs {
			for _, kind := range []string{KindF, KindI, KindW} {
				if f := funcs[stageKey{s, j, kind}]; f != nil {
					out = append(out, f)
				}
			}
		}
	}
	m.Attrs = m.Attrs.Set("stages", ir.Int(nstages))
	return out, nil
}

// AttrPartial (int, on a gradient result) numbers the contributions to a parameter used in
// several places (tied weights), in forward order.
const AttrPartial = "partial"

// splitTiedGrads returns src's results, replacing each parameter gradient that autodiff
// summed from several uses of the parameter by one result per use, numbered in forward order
// (`{grad = "wte", partial = k}`). The sum moves to after the last micro-batch: the runtime
// keeps one accumulator per partial and adds them in partial order, the same order whatever
// the pipeline split, so a tied weight gets bit-identical gradients on one device and on
// many — and no op adds values from two stages.
//
// In a token-sliced module every slice's copy of the forward uses each parameter again, but
// those are not different uses: each slice's contribution is one more run's, as a
// micro-batch's is, and is accumulated like one. Partials are numbered per slice (use k of
// every slice is partial k, summed into one accumulator in run order), and a parameter each
// slice uses once gets no partial at all. Numbering them across slices, as this once did,
// kept one fp32 accumulator per slice and use plus their sum: 17 gradient copies for 16
// slices (28.7 GiB of TeraPipe's 16 GB V100 for GPT-3 175B at pp 48, tp 8).
func splitTiedGrads(src *ir.Func) ([]*ir.Value, []ir.Attrs) {
	pos := map[*ir.Op]int{}
	for i, op := range src.Ops {
		pos[op] = i
	}
	var results []*ir.Value
	var attrs []ir.Attrs
	for i, r := range src.Results {
		isSum := func(v *ir.Value) bool {
			d := v.Def
			return d != nil && d.Def.Name == "add" && d.Phase == ir.BwdW &&
				d.Operands[0].Type.Equal(v.Type) && d.Operands[1].Type.Equal(v.Type)
		}
		if !src.ResultAttrs[i].Has(ir.AttrGrad) || !isSum(r) {
			results = append(results, r)
			attrs = append(attrs, src.ResultAttrs[i])
			continue
		}
		var leaves []*ir.Value
		var walk func(v *ir.Value)
		walk = func(v *ir.Value) {
			if isSum(v) {
				walk(v.Def.Operands[0])
				walk(v.Def.Operands[1])
				return
			}
			leaves = append(leaves, v)
		}
		walk(r)
		// Forward order of the uses: a use's gradient is computed in reverse, so order the
		// leaves by the position of their defining op, latest first.
		sort.SliceStable(leaves, func(a, b int) bool { return leafPos(pos, leaves[a]) > leafPos(pos, leaves[b]) })
		uses := map[int]int{} // token slice → its uses
		for _, l := range leaves {
			uses[leafSlice(l)]++
		}
		tied := slices.Max(slices.Collect(maps.Values(uses))) > 1
		clear(uses)
		for _, l := range leaves {
			results = append(results, l)
			j := leafSlice(l)
			if tied {
				attrs = append(attrs, src.ResultAttrs[i].Set(AttrPartial, ir.Int(uses[j])))
			} else {
				attrs = append(attrs, src.ResultAttrs[i]) // once per slice: one accumulator
			}
			uses[j]++
		}
	}
	return results, attrs
}

// regatheredInW says whether W recomputes op itself rather than taking its result from I:
// a recomputed all_gather (sequence parallelism's gather of a column-parallel linear's input,
// which the SPMD partitioner asks the backward to redo, as Megatron does). Only the weight
// gradient reads the gathered input, so taking it from I would keep a full-sequence copy
// alive per micro-batch from I to W — tp times the shard — and zero-bubble schedules defer W
// by many micro-batches on their later ranks. W gathers the stashed shard again instead: the
// same one collective per use, moved from I to the phase that needs it.
func regatheredInW(op *ir.Op) bool { return op.Def.Name == "all_gather" }

// gatheredGradInW says whether W, reading v from its stage's I, all-gathers v's operand
// itself instead: v is an output gradient I all-gathered over the sequence (a row-parallel
// linear's under sequence parallelism, the conjugate of its forward reduce-scatter), which
// both I's input gradient and W's weight gradient read. Taken from I, it would be held
// whole from I to W for every micro-batch whose W a zero-bubble schedule defers — and ZB-V's
// cool-down defers 2r+1 of them on pipeline rank r, so that with tp/sp the workspace grew
// with the rank (GPT-3 175B at pp 16, tp 4: 0.6 GiB on rank 7, 11.6 GiB on rank 15, the
// two row-parallel gradients being half of what each deferred W held beyond its stash).
// W holds the shard instead (which the bias gradient already reads) and gathers it again:
// one more collective per row-parallel linear, priced as recomputation.
func gatheredGradInW(v *ir.Value, hk, k stageKey) bool {
	op := v.Def
	return op != nil && op.Def.Name == "all_gather" && op.Phase == ir.BwdIn && len(op.Operands) == 1 &&
		k.kind == KindW && hk == (stageKey{k.stage, k.slice, KindI})
}

// leafSlice is the token slice whose forward a gradient contribution belongs to.
func leafSlice(v *ir.Value) int {
	if v.Def == nil {
		return ir.NoSlice
	}
	return v.Def.Slice
}

func leafPos(pos map[*ir.Op]int, v *ir.Value) int {
	if v.Def == nil {
		return -1
	}
	return pos[v.Def]
}

// rematerializable returns the forward ops a backward function recomputes rather than reads
// from a stash outside full recomputation (fullRecompute): for selective, the attention internals
// — each softmax and the chain of elementwise ops feeding it back to and including the
// scores matmul (whose operands, q and k, stay stashed) — and operand-free ops such as iota.
func rematerializable(f *ir.Func, mode string) map[*ir.Op]bool {
	out := alwaysRemat(f)
	switch mode {
	case "selective":
		var walk func(op *ir.Op)
		walk = func(op *ir.Op) {
			if op == nil || out[op] || opKind(op) != KindF {
				return
			}
			switch {
			case op.Def.Name == "matmul":
				out[op] = true // the scores matmul: its operands stay stashed
			case op.Def.Has(ir.Elementwise) || op.Def.Name == "softmax" || len(op.Operands) == 0:
				out[op] = true
				for _, x := range op.Operands {
					walk(x.Def)
				}
			}
		}
		for _, op := range f.Ops {
			if op.Def.Name == "softmax" && opKind(op) == KindF {
				walk(op)
			}
		}
	}
	return out
}

// AttrReduceOver (on a gradient result of a per-stage function) names the mesh axis over
// which the accumulated gradient must still be summed: grad-reduce all-reduces the
// accumulator once, after the rank's last contribution, as it does over dp.
const AttrReduceOver = "reduce_over"

// hoistTPReductions moves the tensor-parallel all-reduce of a parameter gradient out of the
// per-micro-batch backward: a whole parameter used in a split computation (a layer-norm gain
// under sequence parallelism, a bias) gets its gradient as all_reduce(Σ of this rank's part)
// in every W; summing the accumulated gradient once per step is the same sum in another order
// and M times fewer collectives (Megatron reduces such gradients once per step too).
func hoistTPReductions(f *ir.Func) {
	users := f.Uses()
	returned := map[*ir.Value]int{}
	for _, r := range f.Results {
		returned[r]++
	}
	for i, r := range f.Results {
		op := r.Def
		if !f.ResultAttrs[i].Has(ir.AttrGrad) || op == nil || op.Name() != "all_reduce" || len(users[r]) > 0 || returned[r] != 1 ||
			op.Attrs.Str("axis", "") != "tp" || op.Attrs.Str("op", "sum") != "sum" {
			continue
		}
		f.Results[i] = op.Operands[0]
		f.ResultAttrs[i] = f.ResultAttrs[i].Set(AttrReduceOver, ir.Ident("tp"))
	}
}
