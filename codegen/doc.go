// Package codegen owns ppc's per-rank program format (programpb: a protobuf Program of
// buffers, kernels and an instruction stream of launches, inputs, send/recv, collectives,
// accumulations, copies and trace markers), plan.json, and the generation of both from a
// module split into per-stage functions, plus the disassembler behind `ppc dis`. plan.json
// records each program's SHA-256 and the schedule; readers check a program's bytes against
// the first before decoding them (Plan.CheckProgramBytes) and its action order against the
// second (Plan.CheckSchedule), so that what `ppc simulate` reads is what `ppc run` executes.
//
// Generation instantiates each per-stage function (F, I, W) once per micro-batch, in the order
// the schedule gives each rank, so a program is one whole training step, unrolled. That makes
// the runtime a plain loop and lets the memory plan see the real lifetimes: a stashed
// activation lives in the arena from its F to its I or W under exactly this schedule, and the
// arena size is the schedule's true peak. plan.json splits that arena into the most forward
// activations live at once (buffers created by F actions) and the workspace the backward and
// optimizer need beyond them, and counts a tied weight once per rank that holds it.
//
// Each pipeline rank's step is IR too (passes.RankPrograms, the rank-programs pass the compiler
// runs last): @rank<r> lists its F/I/W functions in schedule order as `run` ops whose operands
// and results are the functions' ports, with explicit `recv` right before the first run that
// needs a value from another rank and `send` right after the run that produces one. Code
// generation lowers those ops in order — run to the function's launches, send and recv to
// SEND and RECV with the IR's peer and tag — so `ppc compile --print-ir-after=rank-programs`
// shows exactly what each rank does, and golden tests check where its communication goes.
// Sends never block, so a schedule whose compute order passes schedule.Validate cannot
// deadlock. A module without rank programs (a caller generating code directly) gets them
// written from the schedule first. Added by code generation and not in the rank programs: the
// data-parallel gradient reductions, a tied weight's partial-sum exchange and the optimizer.
//
// Gradients accumulate over micro-batches in fp32 (fp64 for fp64 parameters). A tied weight's
// partial gradients (one per use, see passes.SplitStages) are exchanged between the ranks that
// hold it and summed in partial order on each of them — the same additions in the same order
// as on one device — so the weights stay bit-identical to single-device training (DESIGN.md
// §6's all-reduce would sum in a different order).
//
// # The mesh: one program per pipeline rank
//
// A plan runs on a pp × dp × tp mesh, ranks numbered as Megatron-core numbers them (tp
// fastest, then dp, pp slowest: rank = (pp·dp_size + dp)·tp_size + tp). The schedule's ranks
// are pipeline ranks; the dp × tp replicas of a pipeline rank run the same actions on their own
// micro-batches (dp) or their own shards (tp), so they run the same program: Generate emits
// one Program per pipeline rank, written as the file of its first rank (ProgramFile of the
// replica with dp = tp = 0), and plan.json lists the programs (Plan.Programs: memory, FLOPs,
// checksum — each replica's) and every rank of the world (Plan.Ranks: its coordinates, the file
// it runs, and its pp, dp and tp groups). GPT-3 175B at pp 8 × dp 16 × tp 8 is 1024 ranks and
// 8 program files. For that, a program bakes in nothing that differs between its replicas:
//
//   - Collectives name their mesh axis (Instr.axis), not ranks: the loader makes the group of
//     the ranks that share the executing rank's other coordinates, in the axis's order.
//   - SEND and RECV name the peer's pipeline rank: the loader picks its replica with the same
//     dp and tp coordinates (activations and a tied weight's partials never cross replicas).
//   - A parameter or optimizer-state buffer records its sharding (Buffer.shard: the mesh axes
//     that split each dim), not its block: the loader computes the rank's block of the full
//     tensor from its coordinates, for the shard-invariant initialiser and for checkpoints.
//   - INPUT, LOSS and OUTPUT name the micro-batch among the replica's M; the runtime adds
//     d·M for data-parallel replica d.
//
// Explicit groups (Instr.group) remain in the format for hand-written programs and tests; a
// program with them cannot be shared.
//
// Tensor parallelism arrives as a partitioned module (ir.AttrPartitioned: local shapes,
// shardings on parameter arguments, collective ops in the functions). The collective ops
// lower to ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and BROADCAST over their axis, writing fresh
// activation buffers that the memory plan places like any other; lower.Func never fuses them
// into elementwise chains. copy_to_axis (the identity forward; autodiff made its all_reduce
// explicit) and a collective over an axis of one rank alias their result to their operand's
// buffer instead of copying: no instruction writes a buffer in place but the gradient
// accumulators and the optimizer's final copies, so the alias is safe and free. axis_index
// (the offset of a rank's block, for the vocab-parallel embedding and cross-entropy and for
// taking a block of a whole value) lowers to AXIS_INDEX, which names the axis: the loader
// writes each replica's own coordinate, so the program stays shared. The optimizer
// pass gives state the parameter's shard attribute, so state buffers carry the parameter's
// sharding. Code generation splits parameters over tp only: a split over dp is ZeRO's, whose
// gradients are reduce-scattered rather than all-reduced (ZeRO, --zero).
//
// Data parallelism needs nothing in the IR: replica d runs the same functions on micro-batches
// d·M … d·M+M−1, so each gradient accumulator holds a partial sum over dp. Its ALL_REDUCE (sum,
// in place, over dp) is issued right after the rank's last action that contributes to it —
// the last W (or B) of its stage in the schedule, found before emitting — rather than at the
// end of the step, so that an asynchronous transport can overlap it with the backward work
// that remains (DESIGN.md §6); a tied weight's partials are each reduced that way before the
// exchange. The accumulators one action completes are bucketed as PyTorch DDP does: PACK
// copies them into one flat activation buffer (up to BucketBytes), one ALL_REDUCE sums it, and
// UNPACK copies the sums back — one collective's latency per bucket instead of one per
// gradient, and the same additions in the same order (so bit-identical to reducing each
// alone). The optimizer divides by M·dp. The sum over dp adds the replicas' partial sums,
// which is not one device's left-to-right order over M·dp micro-batches: data parallelism
// agrees with one device within rounding, not bit for bit.
//
// Mixed precision (passes.Precision, passes.LossScale) keeps parameters, gradient
// accumulators and optimizer state fp32, so code generation lays them out as for fp32; only
// activations are 16-bit. Loss scaling adds three things. State that belongs to no parameter
// (@optimizer arguments marked {global}: the loss scaler's scale and growth tracker) is held
// whole by every pipeline rank and updated by each rank's slice of @optimizer; its initial
// value is the argument's data. The @optimizer argument {found_inf} is computed before the
// slice runs, per rank, by passes.NonFiniteCheck over the gradient buffers the slice reads,
// then all-reduced (max) over tp, dp and pp — the one collective over pp, which outside the
// per-stage functions every pipeline rank reaches — so every rank of the mesh skips or applies
// the same step. Gradient clipping's {grad_sumsq} argument is computed the same way, by
// passes.GradSumSq: each gradient the rank holds is counted on the first pipeline rank that
// holds its parameter (a tied one is held by two), and, over tp or dp where the gradient is
// whole on every rank of the axis, only on that axis's rank 0 (sharded gradients — tp blocks,
// ZeRO-2's dp blocks, ZeRO-1's partial sums once reduce-scattered — count everywhere); then
// all-reduced (sum) over tp, dp and pp, so the
// global norm counts every element of the model's gradient once. An @optimizer result
// marked {metric = NAME} becomes a METRIC instruction,
// emitted before the updates are written back, which the runtime reports with the loss.
//
// plan.json's stage_info carries the cost model's per-stage times for `ppc simulate` and the
// compile summary: F, I and W from the partition pass with their tensor-parallel collective
// parts (f_comm, i_comm, w_comm), and the data-parallel collectives as code generation emits
// them, priced by the same ring formulas on the inter-node link — each gradient's all-reduce
// (charged to the stage whose W issues it), ZeRO-2's per-micro-batch reduce-scatters, and the
// collectives in each rank's @optimizer (charged to the first stage on that rank using the
// parameter whose update needs them).
package codegen
