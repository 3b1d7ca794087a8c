// Package runtime owns execution of compiled plans: the loader, which validates plan.json and
// every rank program completely before anything runs (buffer ids, sizes, arena offsets,
// dtypes, peers, groups; every kernel launch re-checked against the IR op table and prepared
// on the device), the executor (one goroutine per rank, each running its instruction stream
// for a step), the in-process transport, parameter initialisation, training data, safetensors
// checkpoints and Chrome traces.
//
// Choices:
//
//   - The runtime imports ir for the op table (DESIGN.md §2 lists only the program format and
//     kernels): a launch's result types must equal what the op infers from its operand types,
//     so a corrupted program is rejected with a message instead of reaching a kernel that
//     would index out of bounds.
//   - The transport delivers sends into the receiver's mailbox without blocking; receives and
//     all-reduces block. When every rank that has not finished is blocked and no message can
//     wake any of them, it stops the job with a HangError listing who waits for what — a
//     deadlock is reported, never hung on.
//   - Initialisation is shard-invariant: element i of a parameter is drawn from a Philox
//     stream keyed by (seed, name) at counter i of the full tensor (kernels/cpu.KeyFor), so
//     any layout initialises the same model. Synthetic data depends only on (seed, step,
//     global sample index).
//   - Checkpoints hold parameters and optimizer state merged by name (one entry however many
//     ranks hold a tied weight), with the step count, seed and the plan's source hash, so any
//     layout resumes any other and resuming is bit-exact. Resume refuses a checkpoint whose
//     tensors differ from the plan's in name, dtype or shape, listing the differences (an
//     8-layer checkpoint never quietly fills half of a 4-layer plan); a partial resume, asked
//     for explicitly, loads what matches. A source hash that differs over matching tensors
//     (another --set of the same file) is only a warning.
//   - A save is atomic: the file is written to a temporary file in the same directory, synced,
//     renamed over the checkpoint and the directory synced, and the temporary file removed on
//     any error, so a full disk, a failed write or a killed process leaves the previous
//     checkpoint byte for byte. `ppc run --save DIR` also holds DIR's lock (LockDir; on Unix an
//     flock of DIR/.ppc-lock, which records the holder's pid and which the kernel releases if
//     the process dies) from start-up until its save completes, so a second run saving there
//     is refused at once, naming the holder, instead of replacing the first run's checkpoint.
package runtime
