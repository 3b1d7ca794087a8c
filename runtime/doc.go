// Package runtime owns execution of compiled plans: the loader, which validates plan.json and
// every rank program completely before anything runs (each program's bytes against the
// checksum plan.json records, before decoding; buffer ids, sizes, arena offsets, dtypes,
// peers, groups; the program's action order against plan.json's schedule, which `ppc
// simulate` reads; every kernel launch re-checked against the IR op table and prepared on the
// device), the executor (one goroutine per rank, each running its instruction stream
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
//     deadlock is reported, never hung on. A step that fails while running a plan that
//     loaded (a hang, a kernel error) is a RunError; a problem with the files given is an
//     InputError.
//   - Initialisation is shard-invariant: element i of a parameter is drawn from a Philox
//     stream keyed by (seed, name) at counter i of the full tensor (kernels/cpu.KeyFor), so
//     any layout initialises the same model. Synthetic data depends only on (seed, step,
//     global sample index).
//   - Checkpoints hold parameters and optimizer state merged by name (one entry however many
//     ranks hold a tied weight), with the step count and seed, so any layout resumes any
//     other and resuming is bit-exact.
package runtime
