// Package planner owns `ppc plan`: the choice of pp × dp × cp × tp, sequence parallelism, the
// schedule and its virtual stages, the micro-batch size and count, recomputation and the
// ZeRO stage for a cluster of GPUs, from the model's own IR.
//
// # How a configuration is priced
//
// Nothing is priced from formulas about transformers: the planner compiles the model itself
// (probe compiles, compiler.ProbeSplit) and reads the costs off the IR.
//
//   - One probe per tensor-parallel layout (tp, sp) partitions the model one unit per stage
//     (E, each layer, L: the units of --partition layout), runs autodiff and the optimizer,
//     and is split once per recompute mode. Each unit's forward, input- and weight-gradient
//     seconds (the partition's per-op cost model on the device profile, TP collectives
//     included), the forward ops the backward recomputes, the bytes it stashes for its
//     backward and sends to the next unit, and its parameters come from that IR.
//   - Each layout is probed at micro-batches of one and of two sequences, and a micro-batch
//     of b sequences costs the affine extrapolation: collectives' latencies and other
//     per-launch costs are paid once per micro-batch whatever its size, so scaling one probe linearly would overcharge large micro-batches
//     (TestAffineInMicrobatch checks the extrapolation against a probe at four).
//   - A configuration groups the units into pp·v contiguous stages that minimise the slowest
//     stage (the layout is printed, so ppc compile reproduces it exactly), prices data
//     parallelism as the rank programs do it (every collective in buckets, gradients in
//     their accumulation dtype: all-reduce; reduce-scatter and all-gather, per micro-batch
//     under ZeRO-2; a tied weight's partials each, and a parameter dp does not split
//     all-reduced whatever the ZeRO stage), builds the schedule, and simulates it with the
//     schedule package's engine: the step time and the bubble (as a fraction of the ideal
//     time, as ppc compile and simulate give it). TestPlanTimeMatchesCompileDP (cmd/ppc)
//     holds the step to ppc compile's estimate for ZeRO 0–3 with a tied embedding dp does
//     not split.
//   - Context parallelism is probed like a tp layout: one probe per (tp, sp, cp), compiled with
//     --cp, so a unit's costs are one cp rank's (its share of each sequence, the ring priced
//     by the cost model: n attention blocks, each step's transfer overlapped with its block)
//     and its memory the ring's own (the K/V blocks in flight, the dK/dV partial sums). The
//     cp ranks' gradients are summed over cp before dp's reduction, in the same buckets. cp
//     is searched over powers of two whose zig-zag chunks divide the sequence and whose ranks
//     keep at least MinCPTokens tokens: below that a block's compute no longer hides its
//     transfer, and each cp size costs its own probes.
//   - Expert parallelism (a model with moe_dispatch) is probed the same way: one probe per
//     (tp, sp, cp, ep), compiled as a dp = ep replica with --ep, so a unit's costs include its
//     all-to-alls (on NVLink while tp·cp·ep fits a node) and its parameters are the expert
//     shards'. Expert parameters are never ZeRO's and their gradients are reduced over
//     edp = dp/ep in their own buckets. ep is searched over 1 and the powers of two dividing
//     the experts and dp whose ep group stays in a node (Megatron-Core's recipes keep it
//     there; an inter-node ep is for --ep to fix). The compute needs no load-imbalance term:
//     the dispatch buffer is static, every ep rank runs experts/ep experts on ep·capacity rows.
//     For the same reason node-limited routing (top_k's groups) does not change the price of
//     the all-to-alls; Result.Routing reports plan 1's dispatch traffic per layer (what
//     crosses nodes, and the bound a per-node deduplicated dispatch would have), so the
//     report says what the routing option would buy and what ppc moves.
//   - Fixed sizes are checked against the model and the cluster before the search, the
//     model's limit first (a --pp deeper than its units), then the GPU count (whole nodes;
//     pp × dp × tp), so that no answer suggests a batch size for a pipeline too deep.
//   - Memory per pipeline rank is the recipe ppc compile keeps (passes.CompileRecipe: in bf16
//     Megatron's 2 B parameters + 4 B fp32 gradients + 12 B fp32 main parameters and AdamW
//     state, the last sharded by ZeRO-1 and the gradients too by ZeRO-2; a tied weight's
//     partial accumulator per use), the arena, and codegen.MemoryMargin, printed as ppc compile prints its memory
//     plan. The arena is ppc compile's memory plan replayed, not a model of it: code
//     generation measures one run of each probe function as it lowers it
//     (codegen.RunMemories: the run's peak with its inputs until their last use, and the
//     bytes of what it hands other runs), and the planner walks each rank's runs in the
//     schedule's order — F stashes, I frees what only it reads and holds its output
//     gradients for W, W frees the rest — with ZeRO-2's per-run reduce-scatter, the dp
//     all-reduce after a stage's last W (under ZeRO-1 only of what dp does not split) and
//     the step's end: ZeRO-1's reduce-scatter bucket by bucket in stage order, the
//     gradient blocks until the optimizer reads them, the new parameter blocks until they
//     are all-gathered (the updates themselves are in place: no copies). A value two
//     stages on one rank pass each other (ZB-V's turn: F's activation, I's output gradient)
//     stays in the arena from the run making it to the run reading it. The most bytes live at once is the arena, the most forward runs
//     made its activations, the rest workspace. A stage of several units composes their runs
//     as its function runs them (F in unit order, I and W in reverse; under full
//     recomputation each unit is rebuilt right before its own backward, which its probe's
//     runs hold). So the planner sees what deferring
//     W costs: under zero-bubble schedules a rank's later I's hold their output gradients
//     until W, and ZB-V's cool-down defers up to 2·pp−1 of them on its later ranks. The
//     planner caps the deferral as ppc compile does (schedule.CapHeld, with each stage's
//     stash and held bytes from stageMem: the same ports codegen.StageHeld measures), so
//     both replay the same order.
//     Under ZeRO-3 (parameters held as dp blocks, gathered per layer inside the runs:
//     passes.ParamGather) each probe is also rewritten as a ZeRO-3 compile would be
//     (passes.GatherAsZero3) and its runs measured before and after their first gather: a
//     unit of a larger stage holds its own copies before it (they were prefetched during the
//     layer before) and the next segment's after it; each run's gathers and gradient
//     reduce-scatters are priced in F, I and W. A gather is issued right before a reader of
//     the copies, so a unit whose run reads none (one with no parameters but scalars: ZeRO
//     pads every other block) prefetches nothing: the next segment's copies arrive in the
//     next unit's run. The probe gathers at dp 2; a configuration's dp pads the copies (and
//     W's padded gradients) otherwise, which evaluation.padGrow and stageMemOf add.
//     TestPlanMemoryMatchesCompile (cmd/ppc) draws configurations over the schedules, tp and
//     sp, recomputation and ZeRO 0–3 and holds each rank's prediction to within 2% of ppc
//     compile's live bytes; the arena's placement adds its fragmentation, reported by ppc
//     compile. TestStageMemComposesUnits holds a stage
//     composed from one-unit probes to what ppc compile's function for the stage holds. A
//     value one unit's I makes and another unit's W reads (the output gradient the final
//     LayerNorm's backward hands the last layer, which that layer's last linear's W reads)
//     is held by the reader from its I to its W, as the stage's own function holds it.
//   - Token slices change what the arena holds beyond the unsliced runs' shares (the K/V
//     prefixes each slice's attention joins and rebuilds, per-slice runs), so each sliced
//     configuration about to be printed is compiled as its printed command compiles it
//     (compiledMemory) and its memory is ppc compile's: a printed sliced plan fits by
//     construction, and one that does not is left out (TestPlanChoiceFitsCompile's
//     token-slice case). The search ranks sliced candidates by the replay. Its time is the token-slice
//     cost model's (passes.SliceCostModel), which prices each op as the partition's CostOf
//     does, as ppc compile's estimate of the same plan does.
//
// # Search
//
// Every configuration the fixed dimensions allow is enumerated (about 10,000 for GPT-3 175B
// on 1024 GPUs). A necessary memory condition (one micro-batch's activations) and a lower
// bound on the step time (each rank's compute, the forward's arrival at its first stage,
// ZeRO's step-end collectives) are known without simulating; the configurations that fit
// are simulated in order of their bound until no remaining bound can enter the top K —
// branch and bound, which simulates a few hundred. The search for GPT-3 175B on 1024
// GPUs takes about 4 s on two cores (BenchmarkSearchGPT3_1024).
//
// The tensor-parallel sizes are the divisors of the GPU count inside a node. A vocabulary
// none of them divides is padded in the probes as ppc compile pads it (passes.PadVocab,
// Request.VocabMultiple), so GPT-3's 50257 does not keep tp > 1 out of the search. A size the
// model cannot take (heads tp does not divide) drops out when its probe fails; when every
// configuration of the GPU count needs such a size, the planner does not report that
// compile's error about a --tp the user never gave, but an input error: which tp the count
// forces, why the model refuses it, the sizes it takes, and the nearest GPU counts that some
// configuration uses (noSplitError).
//
// # Why probes rather than the playbook's formulas
//
// passes.ActivationBytesPerLayer and passes.ModelState are the formulas (and tests hold
// them to the playbook's tables), but a planner built on them would plan a GPT and nothing
// else, and would not see what ppc actually does: its per-use weight casts, its fp32
// gradient reductions, the stash split-stages decides. Probing the IR plans any model the
// frontends read, at the price of a compile per layout (about 0.3 s for GPT-3 175B).
package planner
