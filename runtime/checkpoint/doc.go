// Package checkpoint owns checkpoint directories: the safetensors files (safetensors.go),
// the index of blocks and the step directories (shards.go), reading by byte range
// (ckread.go), atomic writes (atomic.go) and the directory lock (lock.go). It knows tensors
// by name and blocks by rank, not jobs: the executor (package runtime) says which rank owns
// which block of which tensor, hands over their bytes, and loads what ReadInto reads into
// its ranks' buffers (runtime/checkpoint.go: Job.Save, Job.SaveAll, Job.Resume).
//
//   - Checkpoints hold parameters and optimizer state by name as full tensors, with the step
//     count, seed and the plan's source hash, stored as blocks: each distinct block — a
//     tensor-parallel or ZeRO shard, or a whole tensor — is written once, by the lowest rank
//     holding it, to that rank's safetensors file, and an index (checkpoint.json) lists every
//     tensor's blocks with their shapes and SHA-256s. Ownership follows from the plan alone,
//     so every process of a multi-process run writes its own file and rank 0 the index, and
//     the directory is byte for byte the one an in-process run writes. Reading checks the
//     index alone first — the blocks tile each tensor exactly once, the step is its
//     directory's — then reads by byte range: a resume gives each rank of the process its
//     block from the stored blocks it overlaps, reading nothing else (each block checked
//     against its SHA-256, each file's header against the index's step), and Read assembles
//     full tensors, checking whole files too. So any layout — pp, dp, tp — resumes any other,
//     and merging and slicing are exact (a resume then a save writes the same bits). Older
//     single-file checkpoints (checkpoint.safetensors) are still read. A checkpoint that is
//     wrong is a *fault.InputError naming the file.
//   - A save is atomic: every file is written to a temporary file in the same directory,
//     synced, renamed into place and the directory synced; the rank files go to a new step
//     directory (never over the files the current index vouches for), and the index is
//     written last — the commit point — after which the previous step directory is removed.
//     So a full disk, a failed write or a killed process, in any rank, leaves the previous
//     checkpoint byte for byte. `ppc run --save DIR` also holds DIR's lock (LockDir; on Unix
//     an flock of DIR/.ppc-lock, which records the holder's pid and which the kernel releases
//     if the process dies; rank 0 holds it for a multi-process run) from start-up until its
//     save completes, so a second run saving there is refused at once, naming the holder,
//     instead of replacing the first run's checkpoint.
//
// Layering (runtime/doc.go): checkpoint imports runtime/device and runtime/fault and no other
// runtime package; the executor (package runtime) imports it.
package checkpoint
