// Package data owns the training data a run is fed: Source, through which the executor fills
// each model input one micro-batch at a time; Synthetic, the default; Fixed, given tensors;
// and the files `ppc run --data` names — raw token files and .npy arrays, read by its own
// .npy parser (npy.go; `ppc infer` and `ppc compare` read .npy through it too) — and the
// host-side conversions between a tensor's elements and float64 values (Float64s, StoreF64).
//
//   - Synthetic data depends only on (seed, step, global sample index), drawn from the same
//     counter-based generator as initialisation (kernels/cpu.KeyFor), and sources are asked
//     for global micro-batches, so a data-parallel run reads exactly the samples one device
//     with M·dp micro-batches reads.
//   - Training data is checked whole when it is opened, not at the step that first reads it:
//     values against the inputs' dtypes and ranges, arrays of one length (sample i of every
//     input goes together) holding at least one batch, a token file of at least one batch of
//     sequences. A raw token file's width is given (Options.TokenDType), never guessed from
//     the vocabulary. A file that is wrong is a *fault.InputError naming it.
//
// Layering (runtime/doc.go): data imports runtime/device and runtime/fault and no other
// runtime package; the executor (package runtime) imports it.
package data
