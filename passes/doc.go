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
// # Tensor, sequence and data parallelism (the plan being built; DESIGN.md §6)
//
// Each pipeline stage is an SPMD program over the dp × tp sub-mesh. The shardings live in the
// IR (ir/shard.go: the module's mesh, `shard` on parameter arguments and op results, partial
// sums), and the passes that act on them run on @forward, before pipeline partitioning and
// autodiff — Megatron's conjugate-operator formulation rather than GSPMD's partitioning of
// the whole training graph:
//
//   - shard-annotate applies Megatron's rules to recognised patterns (column- then
//     row-parallel linears, attention by heads with GQA's shared k/v heads, vocab-parallel
//     embedding, head and cross-entropy) to parameters the user left unsharded; the DSL's
//     `shard [...]` wins.
//   - shard-propagate carries the shardings forward through every op class, one rule table
//     keyed by op (elementwise and broadcasting, reshape and transpose by dim factorisation,
//     matmul with a sharded contracting dim giving a partial sum, reductions, softmax, norms,
//     gather from a sharded table, cross-entropy over a sharded vocab). A rule returns the
//     result's sharding and the sharding each operand must have.
//   - spmd-partition rewrites @forward to local shapes and inserts the collectives where an
//     operand's sharding differs from what its consumer needs: a partial sum meets a
//     replicated consumer → all_reduce (a seq-sharded one under --sp → reduce_scatter), a
//     seq-sharded value meets a column-parallel matmul → all_gather, and a replicated value
//     enters an op whose result is split over an axis → copy_to_axis (identity forward).
//
// Autodiff then needs only the conjugate rules of those four ops — all_reduce ↔ identity,
// copy_to_axis ↔ all_reduce, all_gather ↔ reduce_scatter — and the B/W split, recompute and
// the schedules work unchanged on local shapes. The alternative, partitioning @train after
// autodiff (GSPMD), would need a propagation rule for every gradient op as well, and would
// find the same collectives. Data parallelism needs no sharding inside a function: the
// per-micro-batch functions are SPMD over dp by construction (rank d of dp runs micro-batches
// d·M … d·M+M−1 of the global batch), so weight gradients leave the W passes as partial sums
// over dp. Code generation all-reduces each over dp right after the rank's last W that
// contributes to it (codegen/doc.go) and the optimizer divides by M·dp; under ZeRO (not yet
// built) they would be reduce-scattered into dp-sharded optimizer state instead, and the
// updated parameters all-gathered. Parameters keep their
// logical shapes in the `shard` attribute, so ranks initialise their own blocks (the
// initialiser is shard-invariant) and checkpoints merge by name and offset.
//
// Golden tests: every testdata/passes/*.ir file starts with `// RUN: passes=PIPELINE`, holds
// cases split by `// -----`, and checks the printed result with FileCheck directives
// (internal/filecheck) and expected diagnostics with `// ERROR "regex"` on the offending line.
package passes
