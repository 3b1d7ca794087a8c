// Package runtime owns execution of compiled plans: the loader, which validates plan.json and
// every program completely before anything runs (each program's bytes against the checksum
// plan.json records, before decoding; buffer ids, sizes, arena offsets, dtypes, peers,
// groups, shardings; the program's action order against plan.json's schedule, which `ppc
// simulate` reads; every kernel launch re-checked against the IR op table and prepared on the
// device), the executor (one goroutine per rank, each running its instruction stream
// for a step), the in-process transport, parameter initialisation and Chrome traces.
// Training data is runtime/data's, checkpoints runtime/checkpoint's.
//
// Choices:
//
//   - The device owns memory (runtime/device). Each rank makes one allocation through the
//     device (its arena, then every other buffer at 256-byte offsets) and every instruction
//     runs through it: launches, ZERO, COPY, ACCUM, PACK and UNPACK. Bytes cross to the host
//     only where they must — inputs, losses and metrics, checkpoints, initialisation, and
//     messages for the transports, which move host bytes — through readHost and writeHost,
//     which on the CPU device are the buffers' own bytes (no copy).
//   - Replicas share programs. plan.json names the program file each rank runs; the dp × tp
//     replicas of a pipeline rank run one file, decoded once. What differs between them is
//     resolved from the rank's mesh coordinates when it is prepared (codegen/doc.go): a
//     collective over an axis gets the group of ranks sharing the rank's other coordinates,
//     ordered by the axis; a send or receive naming a pipeline rank gets that pipeline rank's
//     replica with the same dp and tp; a sharded parameter or state buffer gets its block of
//     the full tensor (along each dim, the block numbered by the rank's coordinates on the
//     dim's axes, first axis outermost); an input of micro-batch mb reads micro-batch
//     dp·M + mb of the global batch. plan.json's coordinates and groups must be the ones the
//     mesh numbering gives (codegen.Plan), and every rank holding a parameter or state by name
//     must hold a block of one full tensor, or the plan is refused before it runs.
//   - A step's loss is the mean over the global batch's M·dp micro-batches, each counted
//     once: the tensor-parallel ranks of a replica compute the same loss (after the
//     all-reduce that forms it), and only the one with tp coordinate 0 records it.
//   - METRIC instructions record scalars by name ("overflow" and "loss_scale" under fp16 loss
//     scaling) that the step reports beside the loss (StepResult.Metrics). Every rank that
//     records a metric computes the same value (collectives form it); the step takes the
//     lowest such rank's, in a multi-process run through the end-of-step agreement.
//   - The runtime imports ir for the op table (DESIGN.md §2 lists only the program format and
//     kernels): a launch's result types must equal what the op infers from its operand types,
//     so a corrupted program is rejected with a message instead of reaching a kernel that
//     would index out of bounds.
//   - The transport delivers sends into the receiver's mailbox without blocking; receives and
//     collectives block. When every rank that has not finished is blocked and no message can
//     wake any of them, it stops the job with a HangError listing who waits for what (for a
//     collective: which members have not arrived and what each of them waits for instead) —
//     a deadlock is reported, never hung on. A step that fails while running a plan that
//     loaded (a hang, a kernel error) is a RunError; a problem with the files given is an
//     InputError.
//
// # Collectives: the contract every transport reproduces
//
// ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and BROADCAST run over an ordered group of ranks:
// the ranks of a mesh axis through the executing rank, in the axis's order (Instr.axis, what
// compiled programs use), or an explicit list (Instr.group). The in-process transport
// defines their results bit for bit; the multi-process TCP transport (tcp.go), a device's
// own communication (NCCL on GPUs: runtime/cuda/ordered.go folds each chunk in group order
// rather than use NCCL's ring or tree sums), and any other, must produce the same bits, so
// that every layout of the same model trains identically run after run:
//
//   - Reduction order. Element i of a SUM is ((m0[i] + m1[i]) + m2[i]) + … with mk the k-th
//     member of the group in the program's group order — never a tree, a ring order, pairwise
//     or fused multiply-add — computed in the element type (f32 adds for f32, f64 for f64,
//     wrapping adds for i64/i32). f16 and bf16 are widened to f32, combined in the same order
//     and rounded to nearest even once at the end. MEAN is that SUM divided by the group
//     size (in f32 for f16/bf16). MAX and MIN fold left to right the same way and propagate
//     NaN. The result does not depend on which member arrives first or who computes which
//     element, and every member receives the same bytes. A ring or tree transport must
//     therefore gather the operands (or reduce in this fixed order at one place per chunk)
//     rather than accumulate partial sums in ring order.
//   - Gather and slice order. ALL_GATHER places member k's block at offset k·d of dim `dim`;
//     REDUCE_SCATTER gives member k the k-th of group-size equal slices of `dim`; BROADCAST
//     copies member group[root]. Tensors are row-major, so along a dim other than the first
//     a member's block is a strided set of runs (one per index of the leading dims).
//   - Matching. A collective is identified by its group's member set and a per-set sequence
//     number: the n-th collective a rank issues over members {0,1} meets the n-th that every
//     other member issues over {0,1}, as NCCL orders the operations of a communicator. Hence
//     every member must issue the collectives of a group in the same order (the loader
//     checks this across programs, the transport again when members meet: kind, group
//     order, dtype, shape, dim, reduce op, root and tag must agree, or the error names both
//     ranks). Instr.tag is not part of the key but is compared, so a compiler that numbers
//     its collectives has mismatches reported. Sequence numbers restart every step.
//     We do not match by a string built from the instruction (the first transport used the
//     buffer name and step): the same buffer may be reduced twice in a step, replicas may be
//     named differently on different ranks, and a remote transport needs a key both sides
//     can compute without seeing each other's programs — the count of earlier collectives
//     on the group is exactly that.
//   - Concurrency. Collectives on disjoint groups (tp groups {0,1} and {2,3}) run at the same
//     time; collectives on overlapping groups are ordered only by each rank's program, so a
//     compiler must not create a cycle of waits (the hang detector reports one).
//   - Initialisation is shard-invariant: element i of a parameter is drawn from a Philox
//     stream keyed by (seed, name) at counter i of the full tensor (kernels/cpu.KeyFor), so
//     any layout initialises the same model; InitialValue gives a whole parameter's start
//     by the same code (ppc export writes it). Synthetic data is as shard-invariant
//     (runtime/data).
//   - Traces are streamed to their file step by step on one clock from the start of the run,
//     so a long run's trace costs no memory and an interrupted one is valid once closed.
//   - Checkpoints and their atomic saves are runtime/checkpoint's (its doc.go); the job's
//     side — which rank owns which block, reading and writing the ranks' buffers, Resume's
//     comparison of the checkpoint's tensors with the plan's — is checkpoint.go here.
//
// # Multi-process runs
//
// A rank may be its own process (ppc run --nproc, torchrun, srun, mpirun: cmd/ppc reads the
// launcher's environment). Each process loads the whole plan with LoadRank — every program
// is checked, as Load checks them, but only its rank gets memory — and Join connects it to
// the others:
//
//   - Rendezvous (store.go). Rank 0's process serves a store at MASTER_ADDR:MASTER_PORT;
//     every process connects, proves the run token, and gives its rank, the world size, the
//     plan's hash, its run flags (JoinOptions.Flags) and the address its peers reach it at
//     (the interface it reaches the store by: loopback for --nproc). While the run starts, a
//     process with another plan, world size or flags is refused with both sides named, and
//     the run stops (the processes were started differently); once it has started, such a
//     process is refused alone, as is a rank that joined already. Ranks join in any order
//     within the join limit (5 minutes); meanwhile the waiting ones say which ranks they wait
//     for (the store's pings name them), and a rank whose rendezvous does not answer yet says
//     so; at the limit the store stops the run naming the missing ranks. Then each rank
//     connects to the ranks it talks to (its pipeline neighbours and collective groups, from
//     its program): it dials the lower ranks and accepts the higher, each connection
//     authenticated like the store's, each handshake on its own (an idle connection delays
//     no one).
//   - Wire (wire.go). A mutual HMAC challenge–response under the token opens every
//     connection, so only the run's own processes get past it, a recorded handshake cannot be
//     replayed, and a dialer knows it did not reach a stale process of another run on a reused
//     port. Frames have a fixed header whose payload length is bounded (by the largest buffer
//     of the rank's program for data) before a byte is read or allocated. Garbage, port
//     scanners and wrong tokens are dropped and logged; FuzzWire covers the decoders.
//   - Transport (tcp.go). A reader goroutine per connection drains frames into a mailbox
//     keyed by (peer, kind, tag or collective, step), so sends never wait on the receiver.
//     Collectives are direct exchanges in which member k reduces chunk k in group order, so
//     results are the in-process transport's bit for bit (TestTCPMatchesInProcess).
//   - Control. The store also ends every step (a gather of the losses, each rank's time and
//     whether a process was interrupted: all stop after the same step), coordinates
//     checkpoints (each rank writes its tensors, rank 0 the index once every rank has) and
//     merges traces. Every process reports what it is doing each second once the run has
//     started; a process whose connection closes, that is silent for 30 s, or that fails
//     sends the first cause to every other, which stop at once with that message (naming the
//     rank, its host and pid, and the step and instruction it was at) and the rank it blames
//     (RemoteError, which the launcher of --nproc is told). A rank that finishes its run is
//     announced to the others: one still in a step fails at once instead of waiting for it.
//     A wait for a peer longer than the hang limit is a hang, reported with what was
//     awaited: --timeout, or by default HangLimit (5 minutes in the first step, then 10× the
//     slowest step so far, at least a minute). A save that fails on any rank removes what it
//     wrote and leaves the previous checkpoint, as an in-process save does.
//
// A device that communicates itself (device.Networked: NCCL between GPUs) carries a
// multi-process run's messages and collectives device to device instead (devnet.go): its
// groups, the order of the receives, the staging of messages, and a watch that aborts the
// groups when the run stops, since a GPU waiting for a transfer does not time out.
//
// DESIGN.md §8 sketched --rank/--world/--master flags beside the launchers' variables; there
// is one way instead: the environment, with torchrun's names (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) also read from Slurm's and MPI's, which is what every launcher sets and what a
// hand-started process can set as easily as flags.
package runtime
