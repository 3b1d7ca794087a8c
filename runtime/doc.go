// Package runtime owns execution of compiled plans: the loader, which validates plan.json and
// every program completely before anything runs (each program's bytes against the checksum
// plan.json records, before decoding; buffer ids, sizes, arena offsets, dtypes, peers,
// groups, shardings; the program's action order against plan.json's schedule, which `ppc
// simulate` reads; every kernel launch re-checked against the IR op table and prepared on the
// device), the executor (one goroutine per rank, each running its instruction stream
// for a step), parameter initialisation and Chrome traces — and each job's side of the
// layers below it: joining a multi-process run (multiproc.go, devnet.go), and saving and
// resuming its ranks' tensors (checkpoint.go).
//
// # Layering
//
// The runtime is split by responsibility, and imports run one way, down this list (a package
// imports only packages listed below it, never one above; layering_test.go checks it):
//
//	runtime             the loader and executor (this package)
//	runtime/dist        the distributed layer: the collectives' contract, the in-process and
//	                    TCP transports, the wire protocol, the rendezvous store and process
//	                    supervision
//	runtime/checkpoint  checkpoint directories: safetensors, the block index, byte-range
//	                    reads, atomic writes, the directory lock
//	runtime/data        training data: synthetic data, token files, .npy arrays
//	runtime/device      what the runtime asks of a device (memory, kernels, its own network)
//	runtime/fault       InputError, the error every layer returns for bad input
//
// dist, checkpoint and data are peers: none imports another, so each knows ranks, tensors
// and files but not jobs, and the executor composes them. device and fault import no runtime
// package. The devices, runtime/cpu and runtime/cuda, implement runtime/device and import
// nothing else of the runtime; only a device's tests run whole jobs.
//
// Choices:
//
//   - The device owns memory (runtime/device). Each rank makes one allocation through the
//     device (its arena, then every other buffer at 256-byte offsets) and every instruction
//     runs through it: launches, ZERO, COPY, ACCUM, PACK and UNPACK. Bytes cross to the host
//     only where they must — inputs, losses and metrics, checkpoints, initialisation, and
//     messages for the transports, which move host bytes — through readHost and writeHost,
//     which on the CPU device are the buffers' own bytes (no copy).
//   - Constants are said, not guessed. The loader marks a launch operand constant
//     (device.Spec.Const) when its buffer is a program constant or a parameter no instruction
//     writes, so a device may keep a prepared form of it (the CPU device's packed convolution
//     weights); the job calls the device's ForgetConstants whenever it wrote, or may have
//     written, such a buffer itself: Init, Resume, and before every step once Buffers or
//     Tensors handed out views a caller may write.
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
//   - The runtime imports ir for the op table (docs/DESIGN.md §2; the first blueprint listed
//     only the program format and kernels): a launch's result types must equal what the op infers from its operand types,
//     so a corrupted program is rejected with a message instead of reaching a kernel that
//     would index out of bounds. It imports passes for one name only: resuming a
//     checkpoint needs ScalerOptimizerStep, the name the loss-scale pass gives AdamW's own
//     step count under fp16 loss scaling (an old checkpoint without it starts it at the
//     step), and a copy of the name could drift from the pass's.
//   - The executor talks to other ranks only through a dist.Comm: in-process, the transport
//     that defines the collectives' results and reports a deadlock as a HangError instead of
//     hanging; in a multi-process run, the TCP transport, which keeps them bit for bit
//     (runtime/dist's doc.go states the contract). A step that fails while running a plan
//     that loaded (a hang, a kernel error) is a RunError; a problem with the files given is
//     a fault.InputError, whichever layer found it.
//   - Initialisation is shard-invariant: element i of a parameter is drawn from a Philox
//     stream keyed by (seed, name) at counter i of the full tensor (kernels/cpu.KeyFor), so
//     any layout initialises the same model; InitialValue gives a whole parameter's start
//     by the same code (ppc export writes it). Synthetic data is as shard-invariant
//     (runtime/data). A padded parameter (a vocabulary tp does not divide, pb.Buffer's
//     unpadded shape) counts i in its unpadded tensor, so it starts as the unpadded model
//     does, with zeros in the padding; checkpoints hold only the unpadded block (a block of
//     padding alone is not written) and resuming zeroes the padding, so padded and unpadded
//     layouts resume each other (shardGeom.count, contiguousRuns). ZeRO's padded dp blocks
//     (pb.Buffer.zero_rows: dp does not divide the rows of its tp block) are placed the same
//     way: rank d holds rows d·ceil(rows/dp) … of its tp block, those past it padding.
//   - Traces are streamed to their file step by step on one clock from the start of the run,
//     so a long run's trace costs no memory and an interrupted one is valid once closed.
//   - Checkpoints are runtime/checkpoint's; the job says which rank owns which block (the
//     lowest holding it, from the plan alone), hands over and loads its ranks' bytes, and
//     Resume compares the checkpoint's tensors with the plan's: it refuses one whose tensors
//     differ in name, dtype or shape, listing the differences (an 8-layer checkpoint never
//     quietly fills half of a 4-layer plan); a partial resume, asked for explicitly, loads
//     what matches; a source hash that differs over matching tensors (another --set of the
//     same file) is only a warning.
//
// # Multi-process runs
//
// A rank may be its own process (ppc run --nproc, torchrun, srun, mpirun: cmd/ppc reads the
// launcher's environment). Each process loads the whole plan with LoadRank — every program
// is checked, as Load checks them, but only its rank gets memory — and Join connects it to
// the others through runtime/dist (the rendezvous, the TCP transport, failure reports: its
// doc.go). The steps end with the processes' agreement on the losses; SaveAll writes each
// process's blocks and has rank 0 commit the index once every rank has; MergeTrace gathers
// the ranks' traces at rank 0.
//
// A device that communicates itself (device.Networked: NCCL between GPUs) carries a
// multi-process run's messages and collectives device to device instead (devnet.go): its
// groups, the order of the receives, the staging of messages, and a watch that aborts the
// groups when the run stops, since a GPU waiting for a transfer does not time out.
package runtime
