// Package passes owns ppc's IR transformations and the pass manager.
//
// A pass is a value {Name, Doc, Options, Run}; table.go lists every pass once, in the order a
// full compile runs them, and init validates the table (unique names, docs, options). A
// pipeline is a string — `canonicalize,cse,dce`, or with options `name{key=value}` — parsed
// against that table. The manager (Run) verifies the input and, with VerifyEach, the IR after
// every pass; it prints IR before/after passes or after changes, writes one numbered file per
// pass to a dump directory. A pass's own error is about its input (a bad option, IR it cannot
// handle) and is reported as it is; an internal failure (a verifier error after the pass, or a
// panic) also writes a reproducer .ir holding the remaining pipeline as a `// RUN:` line and
// the pass's exact input, which runs as a golden test under testdata/passes.
//
// # Tensor, sequence and data parallelism (docs/DESIGN.md §6)
//
// Each pipeline stage is an SPMD program over the dp × cp × tp sub-mesh. The shardings live in the
// IR (ir/shard.go: the module's mesh, `shard` on parameter arguments and op results, partial
// sums), and the passes that act on them run on @forward, before pipeline partitioning and
// autodiff — Megatron's conjugate-operator formulation rather than GSPMD's partitioning of
// the whole training graph:
//
//   - pad-vocab (padvocab.go) first pads a vocabulary tp does not divide (GPT-2's 50257) as
//     Megatron-LM's --make-vocab-size-divisible-by does: the token table's rows and the output
//     head's classes go to the next multiple of multiple·tp (default 128·tp; only when tp does
//     not divide the vocabulary, so tp = 1 and divisible vocabularies keep their shapes). We
//     chose padding over an uneven split, which every later pass, the cost model and the
//     rank programs would have to know about; Megatron's choice, and one pass. It is exact,
//     not approximately so: the padded logits become the dtype's lowest finite value (a where
//     on an iota) before the cross-entropy, so their softmax weight and every gradient that
//     reaches the padding are exactly 0, and the extra rows stay zero. The parameter keeps
//     its user-visible shape as `unpadded` (ir.AttrUnpadded, pb.Buffer.unpadded): the runtime
//     draws the initial values of that block exactly as for the unpadded tensor, and
//     checkpoints, ppc export and ppc infer's outputs hold the unpadded tensors, so padded
//     and unpadded layouts resume each other. compiler/padvocab_test.go trains tp 2 and 4
//     against the unpadded model on one device.
//   - shard-annotate (spmd_annotate.go) applies Megatron's rules to the parameters the user
//     left unsharded, recognising the patterns by how a trial sharding propagates rather than
//     by names: a weight goes column-parallel when its split reaches another matmul's
//     contraction or the loss with nothing gathered whole on the way, the weight that
//     contracts it row-parallel, biases with their activations, token tables vocab-parallel.
//     So attention splits by heads (GQA's k/v by groups) and MLPs by their hidden dim in ONNX
//     graphs as in DSL models, and a pattern tp does not divide is an error naming the dim.
//     The DSL's `shard [...]` wins.
//   - shard-propagate (spmd_propagate.go, rules in spmd_rules.go) carries the layouts forward
//     through every op class, one rule table keyed by op; a rule returns the result's layout
//     and the layout each operand must have. Inside a function only tp splits tensors, so a
//     layout is one split dim or a partial sum over tp. With sp, partial sums of [batch, seq,
//     …] activations are reduced into a split of the sequence.
//   - spmd-partition (spmd_partition.go) rewrites @forward to local shapes and inserts the
//     conversions where an operand's layout differs from what its op needs: partial → whole
//     all_reduce, partial → split reduce_scatter, split → whole all_gather, whole → split a
//     block taken with axis_index; a whole value entering an op whose result is split or
//     partial goes through copy_to_axis. The vocab-parallel embedding and cross-entropy are
//     expanded into masked local lookups and reductions over tp.
//
// Autodiff then needs only the conjugate rules of the collectives — all_reduce ↔ identity,
// copy_to_axis ↔ all_reduce, all_gather ↔ reduce_scatter (or a slice of a gradient every rank
// holds whole) — and the B/W split, recompute and the schedules work unchanged on local
// shapes. The alternative, partitioning @train after autodiff (GSPMD), would need a
// propagation rule for every gradient op as well, and would find the same collectives. Two
// checks hold the design to the equivalence invariant: passes/spmd_test.go compares the
// partitioned @train's loss and every gradient with one device's at the IR level (an SPMD
// reference evaluator runs the tp ranks in lockstep), and compiler/spmd_test.go trains the
// compiled programs.
//
// Data parallelism needs no sharding inside a function: the per-micro-batch functions are
// SPMD over dp by construction (rank d of dp runs micro-batches d·M … d·M+M−1 of the global
// batch), so weight gradients leave the W passes as partial sums over dp, and the optimizer
// divides by M·dp. Under ZeRO the optimizer pass updates each replica's dp block of dim 0 of
// every parameter that has one (scalars and expert shards stay whole): its gradient argument
// is the block of the reduced sum, the state is the block (a `shard` over dp, whose shapes are
// the block's in any module), and the result is the new block. Parameters keep their logical
// shapes in the `shard` attribute, so ranks initialise their own blocks (the initialiser is
// shard-invariant) and checkpoints merge by name and offset. Where dp does not divide the
// rows — dp 124 = 4·31, OPT-175B's, divides no dim of a GPT — a block is ceil(rows/dp) rows
// and the last ranks' are padded with zeros, as FSDP and Megatron's distributed optimizer
// pad: the block arguments carry zero_rows = rows (ir.AttrZeroRows), the parameter's block is
// taken from it padded (`pad`), gradients are padded before their reduce-scatters and gathers
// drop the padding. A padded row's gradient is zero, so its state and update stay zero. We
// chose padding over blocks of unequal size because every collective keeps equal blocks and
// nothing else needs to know; where dp divides, the IR is what it was.
//
// ZeRO-3 (FSDP; optimizer{zero=3}) holds the parameter itself as that block: @optimizer's
// parameter argument is the block and its update replaces it in place, with no gather after
// the step. param-gather (paramgather.go), after split-stages, makes every per-stage function
// take the blocks and gather them where it reads them, per segment — the ops reading one
// layer's parameters (layerOfParam, the partition's units) — so that a layer's whole copies
// live in the arena from their gather to their last reader in that run and are gathered again
// by the next function that reads them (F, I, W, and so every recomputation). Each segment's
// gathers are placed before the previous segment's first reader: the next layer is gathered
// while this one computes (FSDP's prefetch, by placement: it overlaps where the device runs
// collectives on a stream of their own), at most two layers whole at once. The granularity is the layer, not the
// stage function, because that is what bounds memory: with pp 1 a stage is the whole model.
// A parameter read through a cast (mixed precision's 16-bit copy) is cast as a block and
// gathered in 16 bits, as FSDP's mixed precision does. W reduce-scatters each such gradient
// right after the op computing it and returns the block, which the rank accumulates: a run
// holds one whole gradient at a time, and the sums are ZeRO-2's, bit for bit.
//
// # Expert parallelism (ep.go)
//
// --ep N shards each mixture-of-experts layer's experts over N ranks carved from the dp
// ranks, as Megatron-Core's --expert-model-parallel-size does: dp stays the whole data-
// parallel size, dp coordinate d is ep coordinate d mod N (ep fastest) and expert-data-
// parallel (edp) coordinate d / N, so the rank numbering does not change. Every rank still
// routes its own micro-batches (moe_slots and moe_dispatch are a micro-batch's, as on one
// device: routing, drops and the balance loss are the single device's); ep-partition puts an
// `all_to_all {axis = ep, split_dim = 0, concat_dim = 1}` after each moe_dispatch — expert
// block k of the [E, C, d] buffer to ep rank k, which gets [E/N, N·C, d]: its experts' rows
// from every ep rank, in ep order — and the reverse exchange before moe_combine. The expert
// weights (the parameters the experts' ops read with E as their first dim) are held as
// [E/N, …] shards (`shard = [ep, …]`), initialised and checkpointed like any shard: element
// i of the full tensor, merged by offset. Why one all_to_all on the buffer rather than a
// token permutation: moe_dispatch already orders rows by expert with a static capacity, so
// the exchange is one fixed-size collective per direction and deterministic — no counts to
// exchange first, and the received rows sit in ep order whatever arrives first.
//
// Autodiff differentiates an all_to_all as the reverse exchange (split and concat dims
// swapped); the expert weights' W then sums over the N·C rows of every ep rank's tokens, so
// their gradients need only the edp sum (grad-reduce's `grad_all_reduce {axis = edp}`), the
// dense parameters' the dp sum. ZeRO (--zero 1–3) applies to the dense parameters only (an
// expert shard's replicas are the edp ranks, not dp); the global norm for clipping counts an
// expert shard on every ep rank and on edp rank 0 only. The buffer stays replicated over tp
// (the experts are not split inside a tp group); tp and sp shard the dense layers as before.
//
// Node-limited routing (DeepSeek-V3: top_k with groups and topk_groups) changes which
// experts a token reaches, not the exchange: the buffer is static, so each all_to_all moves
// the same bytes whatever the router chooses, and the cost model prices them.
// MoEDispatchTraffic sets that beside what a dispatch sending one copy per (token, node)
// would send — at most topk_groups nodes per token when the groups lie whole on nodes (group
// g is ep ranks [g·ep/G, (g+1)·ep/G), expert blocks being in ep order) — which ppc plan
// reports. ppc does not deduplicate: DeepSeek's scheme is a two-level exchange (a token
// once to each target node's GPU of the same local index, then forwarded over NVLink to its
// experts there), which would need the ep axis split into node and local sub-axes and the
// routing carried with the rows; a one-level exchange deduplicated per rank gains nothing
// where, as in DeepSeek-V3 at ep 64, a token's experts lie on as many ranks as it has
// choices.
//
// # The rank programs: everything a rank does, as IR
//
// After split-stages, four passes write each pipeline rank's step as a function @rank<r>,
// which code generation only lowers (codegen/doc.go), so that `--print-ir-after` shows every
// transfer, collective and optimizer step a rank makes:
//
//   - rank-programs (rankprograms.go): the rank's F, I and W runs in schedule order, a value
//     another rank needs sent right after the run computing it and received right before the
//     first run needing it; each {grad} result of a run is added into the rank's accumulator
//     of that gradient.
//   - grad-reduce (gradreduce.go): right after the run making the rank's last contribution to
//     an accumulator, its tensor-parallel sum (a hoisted partial, grad_all_reduce over tp) and
//     its data-parallel sum, bucketed as PyTorch DDP does (grad_all_reduce over dp, up to
//     BucketBytes), so that the reduction overlaps the backward that remains; under ZeRO-2,
//     each run's gradients reduce-scattered right after it (grad_reduce_scatter {microbatch});
//     under ZeRO-3 nothing for the block parameters, whose runs return reduced blocks.
//   - tied-grads (tiedgrads.go): a tied weight's partials sent between the ranks holding it
//     and summed there in partial order (grad_send, grad_recv, grad_sum), bit-identical to one
//     device.
//   - rank-optimizer (rankoptimizer.go): the slice of @optimizer the rank runs
//     (@optimizer.rank<r>); before it ZeRO-1's bucketed reduce-scatters, clipping's sum of
//     squares (GradSumSq, from the reduced gradients) and the loss scaler's overflow flag
//     (NonFiniteCheck), each `call`ed and all-reduced over tp, dp and pp; the `optimizer` op;
//     after it ZeRO-1 and 2's bucketed all-gathers of the new blocks (param_all_gather).
//
// The cost model (costmodel.go) prices a collective by the ring formulas over its axis —
// intra-node links for tp, inter-node for dp — and charges its conjugate's time to the
// backward phase that runs it (I, or W when its operand is a weight). The partition pass
// balances stages by that time with compute, and records, per stage, how much of f, i and w
// is collective time (f_comm, i_comm, w_comm), which the reports show apart from compute.
//
// # Mixed precision
//
// precision (precision.go) runs on @forward before sharding and partitioning, so that they,
// the cost model and the memory plan see 16-bit activations and their real sizes. It is
// Megatron-LM's recipe: every f32 parameter becomes a 16-bit parameter marked {main_param},
// which the forward reads directly; constants become 16-bit, and loss ops compute in f32.
// Autodiff differentiates the 16-bit graph, so each micro-batch's weight gradient is 16-bit;
// the rank programs accumulate and reduce it in fp32 (tiedgrads.go's accType) unless the
// optimizer's grad_dtype says its own dtype. The optimizer pass keeps each parameter's fp32
// main copy as state (a dp block under ZeRO, as Megatron's distributed optimizer), updates it
// and writes the 16-bit parameter from it: one rounding per step, where the per-use cast this
// replaced rounded (and the cost model priced) every weight once per use per micro-batch.
// Code generation names the main copy's buffer as the parameter and marks the 16-bit buffer a
// copy, so checkpoints hold fp32 weights under the parameters' names in every precision. fp16 adds dynamic loss
// scaling with GradScaler's semantics: an f32 scale argument seeds the backward, and
// loss-scale (lossscale.go) unscales the gradients in @optimizer and skips the update of every
// parameter and state on every rank when any rank's gradients overflow (each rank's program
// computes that flag, NonFiniteCheck, and reduces it over the mesh: rank-optimizer).
//
// The optimizer pass also owns gradient clipping by the global norm (clip.go: the sum of
// squares is an @optimizer argument each rank's program computes across the mesh, GradSumSq,
// because @optimizer runs on each rank only as a slice) and the learning-rate schedule
// (ScheduledLR: computed in @optimizer from %step, so resume continues it).
//
// # Full recomputation, one layer at a time
//
// split-stages{recompute=full} (recompute.go) is Megatron's --recompute-granularity full:
// @train's forward ops are cut into the partition's units (layerUnits: E, each layer, L), the
// units of a stage into groups (method uniform: chunks of `layers` units; block: the first
// `layers` units, the rest stashed as without recomputation), and a value crossing from one
// group to another is stashed by F — a layer's input. Every other forward value the backward
// needs is rebuilt by the function that needs it, lazily, from those inputs: the backward's ops
// run last layer first, so each layer is rebuilt right before its own backward and is dead
// after it. I and W each rebuild what they need (W does not take rebuilt values from I, which
// would keep every layer's alive until W), so neither holds more than one group's values
// beside the stash, under any schedule; the price is that W rebuilds part of the forward again.
//
// # Fused attention
//
// Attention is one op, `attention` (ir/ops_attention.go), which keeps the output and the
// row log-sum-exp; autodiff differentiates it with `attention_grad` (FlashAttention-2: the
// probabilities recomputed per tile from the log-sum-exp), all bwd_in since attention has no
// weights. The DSL writes it directly (its builtin `attention`); we chose that over an IR
// pass recognising the matmul–scale–mask–softmax–matmul chain for the DSL: the DSL's models
// say what they mean, and a chain written out keeps its own semantics. Recognising the chain
// belongs to the ONNX importer, which raises torch.onnx.export's pattern with a provably
// causal constant mask to the op (frontend/onnx/raise.go). Its
// sharding rule splits heads (GQA's kv heads with their query heads, Megatron's rule); token
// slicing needs no offset: the op's causal rule is aligned at the bottom right (query i sees
// keys up to i + Skv − Sq), which is exactly a slice's queries over its K/V prefix.
//
// # Token slices (TeraPipe)
//
// token-slice (tokenslice.go) runs on the partitioned @forward, before autodiff, and
// replicates it once per slice of the sequence; ops carry `tslice = j`, which autodiff
// copies to their gradients and split-stages turns into per-slice functions F_sK_tJ. We
// chose compile-time replication over a runtime that carries an offset and a growing K/V
// buffer: every slice is then an ordinary static-shaped function, so autodiff, sharding,
// recompute, the memory plan and code generation need nothing new, and the equivalence of a
// sliced plan with the unsliced one is checked like every other plan. The cost is one copy
// of the forward per slice in the IR (a GPT-3 stage of two layers in 16 slices is ~3,000
// ops). An analysis decides per op which axes index query tokens and which index keys, and
// refuses ops that mix tokens; causality is proven, not assumed, by evaluating each attention
// mask (lazily, element by element — constant folding stops at 65,536 elements) at every
// position where a key follows its query. The same analysis prices slices for TeraPipe's
// dynamic program (tokenslice_cost.go: every op of a stage at the slice's length and context,
// with CostOf's roofline), which `--token-slices auto` and the compile report use. The K/V
// joins are marked remat, so a slice's backward recomputes them from the pieces the stage
// keeps instead of stashing a copy per slice; that keeps the K/V cache at one copy of the
// sequence's keys and values per layer, as TeraPipe's.
//
// # Context parallelism (--cp, ring attention)
//
// cp-partition (cp.go) runs on the logical @forward before the tp passes and rewrites it into
// one cp rank's program: the rank holds size/cp tokens of every sequence (contiguous: block i;
// zig-zag, the default: chunks i and 2·cp−1−i of 2·cp, so that under a causal mask every rank
// has the same attention work). It reuses token-slice's analysis (the axis of each value that
// indexes tokens, the ops that would mix them) with one rank's share instead of one slice:
// data inputs are read whole — like tp replicas, cp replicas read the same micro-batch — and
// gathered at the rank's positions, computed from axis_index; values computed without the
// data (positions, rotary tables, a learned position embedding) are computed whole and
// gathered where they meet the sequence, so positions follow the rank's real tokens. The loss
// (a mean over the rank's tokens) is summed over cp and divided by cp: every rank holds the
// model's loss, and since all_reduce passes its gradient through, each rank differentiates
// its own share; grad-reduce then sums the shares over cp (before dp, as if the cp ranks were
// more dp replicas, Megatron's dp × cp reduction). Parameters stay replicated over cp.
//
// Attention becomes `ring_attention`, one op until after split-stages so that the tp passes
// (heads split as attention's), partitioning (the cost model prices the ring: n blocks, each
// step's transfer overlapped with its block), autodiff (one rule: ring_attention_grad) and
// recomputation (a recomputed ring sends its blocks again) treat it as one. ring-attention then
// writes each as its steps with ring_send/ring_recv over the cp axis (lowered to SEND/RECV to
// the next/previous cp coordinate, paired in order, so every replica runs the same program):
// the next block's send is issued before the current block's attention; blocks are merged by
// log-sum-exp. Its backward is the ring again, with attention_grad per block given the merged
// output and log-sum-exp (FlashAttention-2's backward is exact per block given them, so the
// forward's partial results are not stashed) and each block's dK/dV summed as it travels with
// the block and sent home after its last visit. Causal masking by real positions is done in
// whole pieces masked by a [1, 1] flag (is the block's owner before this rank?), never an
// L × L mask: contiguous, one piece; zig-zag, all queries against the owner's first chunk and
// the second query chunk against both key chunks, one of which is fully masked at run time.
// Refused with the op and the setting to use: decomposed attention (a matmul contracting over
// the sequence), an explicit mask, ops that mix tokens, a sequence cp (2·cp) does not divide,
// token slices, and a model without attention.
//
// Golden tests: every testdata/passes/*.ir file starts with `// RUN: passes=PIPELINE`, holds
// cases split by `// -----`, and checks the printed result with FileCheck directives
// (internal/filecheck) and expected diagnostics with `// ERROR "regex"` on the offending line.
package passes
