// Package dist owns the runtime's distributed layer: how ranks communicate — the
// collectives' contract below, and the two transports that keep it behind one interface
// (Comm): the in-process transport (NewLocal), every rank a goroutine of one process, with
// hang detection, and TCP, every rank its own process — and the runs whose ranks are
// processes: the rendezvous store, the wire protocol, and process supervision (Process:
// heartbeats, failure reports naming the rank to blame, the hang limit, the end-of-step
// agreement, and the gathers through which checkpoints and traces are coordinated). It knows
// collectives (Op) and ranks, not programs: the executor (package runtime) builds each
// collective instruction's Op when it loads a plan, calls a Comm from each rank's goroutine,
// and joins a run through Join with what its rank needs known (its peers, its largest
// message, its status).
//
// # Collectives: the contract every transport reproduces
//
// ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST and ALL_TO_ALL run over an ordered group of ranks:
// the ranks of a mesh axis through the executing rank, in the axis's order (Instr.axis, what
// compiled programs use), or an explicit list (Instr.group). The in-process transport (NewLocal)
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
//     copies member group[root]; ALL_TO_ALL cuts member k's input into group-size blocks along
//     `dim` and gives member j, at position k along `concat_dim`, block j of member k's.
//     Tensors are row-major, so along a dim other than the first
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
//
// # The in-process transport
//
// NewLocal's transport delivers sends into the receiver's mailbox without blocking;
// receives and collectives block. When every rank that has not finished is blocked and no
// message can wake any of them, it stops the job with a HangError listing who waits for what
// (for a collective: which members have not arrived and what each of them waits for
// instead) — a deadlock is reported, never hung on.
//
// # Multi-process runs
//
// A rank may be its own process (ppc run --nproc, torchrun, srun, mpirun: cmd/ppc reads the
// launcher's environment). Each process loads the whole plan (runtime.LoadRank) and Join
// connects its rank to the others:
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
// The first blueprint (docs/DESIGN.md §13) sketched --rank/--world/--master flags beside the
// launchers' variables; there is one way instead: the environment, with torchrun's names
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) also read from Slurm's and MPI's, which is what
// every launcher sets and what a hand-started process can set as easily as flags.
//
// Layering (runtime/doc.go): dist imports runtime/device and runtime/fault and no other
// runtime package; the executor (package runtime) imports it.
package dist
