// Package cpu holds ppc's CPU kernels: the numeric routines the runtime's CPU device calls for
// each kernel-level instruction (GEMM, convolution, pooling, reductions, normalisations,
// elementwise math, data movement, the counter-based RNG).
//
// Kernels work on flat row-major slices with explicit shapes and know nothing of the IR, the
// program format or the runtime: the runtime adapts its buffers to these signatures. Every
// kernel is generic over float32 and float64 (the gradient checks run in float64), uses every
// core through Parallel, and allocates nothing on its hot path beyond what is documented.
package cpu
