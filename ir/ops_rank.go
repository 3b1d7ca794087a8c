package ir

// rankOps are the ops a rank's program (passes' rank-programs, grad-reduce, tied-grads and
// rank-optimizer) uses besides run, send and recv: what the rank does with its gradients and
// its optimizer once its micro-batches have run. They act on the rank's named state (trait
// State): a gradient accumulator is named by its parameter ("w", or "w#k" for partial k of a
// tied weight's gradient), a parameter by its name. The accumulators themselves are implicit
// in run: each result of a per-stage function marked {grad} is added into the rank's fp32
// accumulator of that gradient (fp64 for an fp64 parameter), which is zero at the start of
// the step — unless a grad_reduce_scatter with the run's micro-batch follows for it (ZeRO-2),
// which adds its reduced block instead. Each op is one collective, send or receive (or, for
// call and optimizer, one function's launches), in program order.
var rankOps = []OpDef{
	{Name: "grad_all_reduce", Doc: "sum the named gradient accumulators over the ranks of mesh axis axis, in place, as one collective: " +
		"several (of one dtype) are packed into one flat buffer, all-reduced and unpacked — a bucket, the same additions as one all-reduce each",
		MinOperands: 0, MaxOperands: 0, Traits: Collective | State, Infer: inferNone,
		Attrs: []AttrSpec{collectiveAxis, {Name: "grads", Kind: KindStrings}}},
	{Name: "grad_reduce_scatter", Doc: "ZeRO: reduce-scatter the named gradients over mesh axis axis as one collective (a bucket), " +
		"leaving this rank its block of dim 0 of each: without microbatch, the accumulators, which become the blocks; with microbatch " +
		"(ZeRO-2), the gradients the run of that micro-batch just computed, whose blocks are added into block-shaped accumulators",
		MinOperands: 0, MaxOperands: 0, Traits: Collective | State, Infer: inferNone,
		Attrs: []AttrSpec{collectiveAxis, {Name: "grads", Kind: KindStrings}, {Name: "microbatch", Kind: KindInt, Optional: true}}},
	{Name: "param_all_gather", Doc: "ZeRO: all-gather over mesh axis axis the new dp blocks of the named parameters that the optimizer " +
		"before it computed, as one collective (a bucket), into the whole parameters",
		MinOperands: 0, MaxOperands: 0, Traits: Collective | State, Infer: inferNone,
		Attrs: []AttrSpec{collectiveAxis, {Name: "params", Kind: KindStrings}}},
	{Name: "grad_send", Doc: "send the named gradient accumulator (a tied weight's partial) to pipeline rank peer with tag",
		MinOperands: 0, MaxOperands: 0, Traits: P2P | State, Infer: inferNone,
		Attrs: []AttrSpec{{Name: "grad", Kind: KindString}, {Name: "peer", Kind: KindInt}, {Name: "tag", Kind: KindInt}}},
	{Name: "grad_recv", Doc: "receive a tied weight's partial gradient of the given type from pipeline rank peer with tag, as the named gradient",
		MinOperands: 0, MaxOperands: 0, Traits: P2P | State, Infer: inferNone,
		Attrs: []AttrSpec{{Name: "grad", Kind: KindString}, {Name: "peer", Kind: KindInt}, {Name: "tag", Kind: KindInt}, {Name: "type", Kind: KindType}}},
	{Name: "grad_sum", Doc: "the named gradient is the sum of the named partials, added in the order listed (a tied weight's " +
		"gradient: the same additions in the same order as on one device)",
		MinOperands: 0, MaxOperands: 0, Traits: State, Infer: inferNone,
		Attrs: []AttrSpec{{Name: "grad", Kind: KindString}, {Name: "parts", Kind: KindStrings}}},
	{Name: "call", Doc: "run the function named func once: operands are its arguments marked port and results its results marked " +
		"port, in order; its other arguments are the rank's state they name ({param}, {grad}, {state}, {step})",
		MinOperands: 0, MaxOperands: -1, Traits: Calls | State, Infer: inferNone,
		Attrs: []AttrSpec{{Name: "func", Kind: KindString}}},
	{Name: "optimizer", Doc: "the optimizer step: run the function named func (the rank's slice of @optimizer) once, as call does; " +
		"then each result {update = X} replaces parameter or state X — a parameter's new dp block under ZeRO-1/2 is left to the param_all_gather " +
		"after it — and each result {metric = NAME} is reported to the host with the loss",
		MinOperands: 0, MaxOperands: -1, Traits: Calls | State, Infer: inferNone,
		Attrs: []AttrSpec{{Name: "func", Kind: KindString}}},
}
