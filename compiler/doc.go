// Package compiler owns the whole compile, which the first blueprint's package table left between
// the CLI and the packages (docs/DESIGN.md §2 lists it). A compile is a short sequence of named
// steps (compile in compiler.go, each a method of the compilation): resolve the options, load the
// model with the right frontend (.onnx, .ppm, or .ir), check it can train, compile again with
// what a probe finds (zb-auto's stage costs, --token-slices auto), build the pipeline schedule
// (which fixes the number of stages per rank) and the mesh, run the pass pipeline —
// compilePasses, one row per pass: canonicalize, cse, dce, [add-loss], [precision], [tp passes: pad-vocab, shard-annotate, shard-propagate, spmd-partition],
// partition, [token-slice], autodiff, optimizer, [loss-scale], cse, dce, split-stages,
// rank-programs, grad-reduce, tied-grads, rank-optimizer, each named as --print-ir-after names it
// — check that the CPU runtime has a kernel for every op in its dtypes (so that an op it lacks is
// a compile error at its position in the model, not a load error of a rank program), lower the
// rank programs to the per-rank programs and plan.json (codegen, which decides nothing about
// communication: the passes wrote it into the rank programs), and estimate the step. It also runs
// inference for `ppc infer`, and loads a model for `ppc export` (Export: the exporter,
// frontend/onnx/export, gets the parameters' initial values from runtime.InitialValue, the run's
// own initialiser). The CLI only parses flags into Options and prints the Result. The plan's
// source hash covers the model source and the frontend options that resolve it (--preset, --set,
// --dim), not the layout, so that a checkpoint names the model it belongs to whatever layout
// saved it.
//
// Micro-batching happens in the frontends: the model's batch (the DSL's `batch` config, the
// leading dim of ONNX inputs) is the global batch, and the frontend builds @forward for one
// micro-batch of it, so every later stage sees static micro-batch shapes. IR files are taken
// to describe one micro-batch.
//
// Before any pass runs, a training compile refuses what would train nothing without a word:
// a model with no trainable parameter (every weight a constant, or none), and a
// cross-entropy (--loss ce, the default for a model without a loss) over a class axis of
// size 1, whose loss is 0 whatever the weights. --loss takes add-loss's options as
// ce{axis=N}; its default class axis is passes.ClassAxis's.
//
// Mixed precision (--precision bf16|fp16) is the precision pass right after add-loss, so that
// sharding, partitioning, the cost model and the memory report all see the 16-bit types and
// their real byte sizes; --grad-precision is the optimizer pass's grad_dtype; fp16 adds the
// loss-scale pass after the optimizer.
package compiler
