// Package codegen owns ppc's per-rank program format (programpb: a protobuf Program of
// buffers, kernels and an instruction stream of launches, inputs, send/recv, collectives,
// accumulations, copies and trace markers), plan.json, and the lowering of a module's rank
// programs to both, plus the disassembler behind `ppc dis`. plan.json records each program's
// SHA-256 and the schedule; readers check a program's bytes against the first before decoding
// them (Plan.CheckProgramBytes) and its action order against the second (Plan.CheckSchedule),
// so that what `ppc simulate` reads is what `ppc run` executes.
//
// # Lowering, and nothing else
//
// What each pipeline rank does in a step is IR: @rank<r>, which the passes write (see the
// passes package): rank-programs runs the per-stage functions in schedule order with send and
// recv where values cross ranks; grad-reduce adds the gradients' reductions (tensor-parallel
// partial sums and data-parallel buckets right after the last contributing run, ZeRO-2's
// per-micro-batch reduce-scatters); tied-grads a tied weight's partial exchange and ordered sum;
// rank-optimizer ZeRO-1's reduce-scatters, the clipping norm and the overflow flag with their
// all-reduces, the optimizer step and ZeRO's all-gathers. Code generation decides nothing about
// what is communicated, when, or what the optimizer updates: it lowers each op, in order, to
// the instructions it stands for —
//
//   - run: the function's launches for the micro-batch (its collectives to collective
//     instructions, below), framed by BEGIN and END markers; each {grad} result ACCUMulated into
//     the rank's accumulator of it (GRAD buffers, fp32 or fp64, zeroed at the start of the step)
//     right after the launch that computes it, so a W run holds one weight gradient at a time,
//     unless a grad_reduce_scatter with the run's micro-batch takes it (ZeRO-2: after the run);
//   - send, recv, grad_send, grad_recv: SEND and RECV with the op's peer and tag;
//   - grad_all_reduce: ALL_REDUCE in place, or for several accumulators PACK into one flat
//     buffer, ALL_REDUCE, UNPACK — the same additions in the same order as one each;
//   - grad_reduce_scatter: REDUCE_SCATTER into a block; for several tensors PACK in n blocks
//     (every tensor's block 0, then block 1, …: the layout that gives each member a contiguous
//     run), REDUCE_SCATTER, UNPACK into the blocks; ZeRO-2's are then ACCUMulated into block
//     accumulators;
//   - param_all_gather: ALL_GATHER into the parameter, or for several PACK, ALL_GATHER and
//     UNPACK in n blocks into the parameters (only COPY, UNPACK and collectives write
//     parameters);
//   - grad_sum: COPY of the first part into a new accumulator and an ACCUM of each other;
//   - call: the function's launches once; its port results are the op's results;
//   - all_reduce of a value: ALL_REDUCE into a fresh buffer (an axis of one rank: the value);
//   - optimizer: the slice's launches between BEGIN and END markers labelled OPT, a COPY of
//     each update into its parameter or state as soon as the launch computing it has run and
//     no later launch reads the old value (so no update is read as an old value, and the arena
//     holds one tensor's new values at a time, not three times the rank's parameters), a
//     METRIC per {metric} result, and the COPYs into a target a metric reads (the loss scale
//     reported is the one this step used) — but for ZeRO's new blocks, which the
//     param_all_gather after it takes.
//
// The test TestProgramsCommunicateWhatTheIRSays (compiler) holds every program's sends,
// receives, collectives and optimizer steps to its rank program's ops, one for one.
//
// Generation instantiates each per-stage function once per run, so a program is one whole
// training step, unrolled. That makes the runtime a plain loop and lets the memory plan see
// the real lifetimes: a stashed activation lives in the arena from its F to its I or W under
// exactly this schedule, and the arena size is the schedule's true peak. plan.json splits
// that arena into the most forward activations live at once (buffers created by F actions,
// values received for them included) and the workspace the backward and optimizer need beyond
// them, and counts a tied weight once per rank that holds it; it also records the arena's live
// bytes (the most its buffers hold at one instruction), the least any placement needs, which
// the planner predicts. Sends never block, so a schedule whose compute order passes
// schedule.Validate cannot deadlock.
//
// RunMemories measures one run of each per-stage function of a split module as instance
// lowers it — its peak, with and without its inputs, and the bytes of the values it hands
// other runs — so that `ppc plan` builds a rank's arena from code generation's own buffers
// rather than from a model of them.
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
// lower to ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST and ALL_TO_ALL (expert
// parallelism's exchange: `dim` the split dim, `concat_dim`) over their axis, writing fresh
// activation buffers that the memory plan places like any other; lower.Func never fuses them
// into elementwise chains. copy_to_axis (the identity forward; autodiff made its all_reduce
// explicit) and a collective over an axis of one rank alias their result to their operand's
// buffer instead of copying: no instruction writes a buffer in place but the gradient
// accumulators, the buckets' unpacking and the optimizer's step (whose elementwise updates
// write each parameter and state tensor in place: no copy back, no buffer for the new
// value; a fused chain writing several updates — AdamW's moments and parameter, one launch —
// writes each in place, every device reading the chain's inputs before writing its
// results), so the alias is safe and free. A reshape of an activation is likewise a view of its
// operand's bytes (aliasReshapes: its buffer shares the operand's offset, the instruction is
// dropped) wherever both are written exactly once, which is checked over the whole stream;
// the operands of a concatenation over its outer dim are views of the result's ranges,
// written there by their producers (aliasConcats: DenseNet's blocks, Inception's branches),
// under the same condition and at offsets that keep the arena's alignment. axis_index (the offset of a rank's block, for the vocab-parallel embedding and
// cross-entropy and for ZeRO's block of a parameter) lowers to AXIS_INDEX, which names the
// axis: the loader writes each replica's own coordinate, so the program stays shared. The
// optimizer pass gives state the parameter's shard attribute, so state buffers carry the
// parameter's sharding; ZeRO's state is a block over dp (its shape is the block's in any
// module). Parameters are split over tp, and under ZeRO-3 over dp too: a parameter buffer is
// then its dp block (passes.ParamGather gives the per-stage functions the block and the
// all_gather and reduce_scatter over dp that make and consume whole copies, which lower as
// every collective does: into fresh arena buffers, freed after their last reader).
//
// Data parallelism needs nothing in the functions: replica d runs the same functions on
// micro-batches d·M … d·M+M−1, so each gradient accumulator holds a partial sum over dp until
// the rank program's reductions sum it, and the optimizer divides by M·dp. The sum over dp
// adds the replicas' partial sums, which is not one device's left-to-right order over M·dp
// micro-batches: data parallelism agrees with one device within rounding, not bit for bit.
//
// Mixed precision (passes.Precision, passes.LossScale) makes the parameters 16-bit copies of
// fp32 main parameters that @optimizer keeps as state ({main_param}): the main copy's STATE
// buffer is named as the parameter (what checkpoints hold) and the PARAM buffer is marked
// copy, which the runtime initialises and resumes as the main copy rounded and never saves.
// Gradient accumulators are fp32 unless the module's grad_dtype is the 16-bit dtype; a 16-bit
// gradient that ZeRO-2 reduce-scatters per micro-batch is widened to fp32 first (ZERO +
// ACCUM), so that it is summed over dp in its accumulation dtype. State that belongs to no parameter (@optimizer arguments marked
// {global}: the loss scaler's scale and growth tracker) is held whole by every pipeline rank,
// whose slice of @optimizer updates it; its initial value is the argument's data.
//
// plan.json's stage_info carries the cost model's per-stage times for `ppc simulate` and the
// compile summary: F, I and W from the partition pass with their tensor-parallel collective
// parts (f_comm, i_comm, w_comm), and the rank programs' gradient and parameter collectives
// as lowered, priced by the same ring formulas on the inter-node link — each dp bucket's
// all-reduce and each hoisted tp all-reduce (charged to the stage of the run it follows),
// ZeRO-2's per-micro-batch reduce-scatters, and ZeRO's collectives around the optimizer
// (charged to the stage the rank-optimizer pass gives the bucket). ZeRO-3's gathers and
// reduce-scatters inside the runs are added to F, I and W and to their collective parts, per
// micro-batch, as the runs wait for them (the prefetch's overlap is not credited).
package codegen
