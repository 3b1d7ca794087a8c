// Package cuda generates ppc's CUDA kernels: the CUDA C of every launch site a program has
// (Kernels, Generate; the fused elementwise chains in elementwise.go, the row kernels in
// rows.go), the plans of the sites that run as several kernels through scratch memory
// (PlanSite), the cuBLASLt calls of the matmuls (PlanMatmul), the kernels of the collectives
// NCCL carries (PlanCollective: ordered folds and layout permutes), and ppc_cuda.h, the
// portability header every kernel includes (Header, Source). It is pure generation: it
// opens no library and touches no GPU. runtime/cuda is the device that compiles the source
// (NVRTC), names each kernel by its source's hash, allocates the plans' scratch memory and
// launches them; `ppc dis --cuda` prints the same source.
//
// Design, and where it departs from the first blueprint (which sketched hand-written .cu files
// here and cuBLAS; docs/DESIGN.md §13):
//
//   - Kernels are generated per launch site from the same op table and fused expressions as
//     the CPU device, with shapes and strides compiled in, rather than written per op: the
//     fused elementwise chains the lowering produces are open-ended, and a generated kernel
//     can follow the CPU device's rounding and summation order exactly, which is what makes
//     a CUDA run comparable with the reference device. A kernel's source is a function of
//     its site alone (the name aside), so identical sites give identical kernels, which the
//     device compiles once. NVRTC's branch of ppc_cuda.h has neither the SDK's headers nor
//     clang's __builtin_* constants: infinity and NaN are spelled by their bits.
//
//   - GEMMs go to cuBLASLt, not cuBLAS: one API for strided batches, bias epilogues and
//     compute types (fp32 accumulation; TF32 only when asked). PlanMatmul maps numpy's
//     row-major matmul onto its column-major calls (GemmCall); runtime/cuda makes them.
//
//   - No atomics: every thread computes its own outputs, and scatters (gradients of
//     gathers, pooling, padding) are written as gathers in the CPU device's order. Results
//     are deterministic, and every kernel runs on the host too: ppc_cuda.h's PPC_HOST
//     branch turns a launch into a loop over blocks and threads, which is how CI checks
//     each kernel, and whole training runs (runtime/cuda's emulated driver), against the
//     CPU device without a GPU.
//
//   - Softmax, log_softmax, the norms and their input gradients over contiguous rows are a
//     block per row (rows.go): the row's threads read consecutive elements, and fold their
//     partial statistics pairwise in a fixed tree (deterministic for a block size; a fold by
//     thread 0 alone made the block wait 256 dependent steps, four times the softmax's memory
//     time on an H100). The only barriers and shared memory
//     in ppc's kernels are there, between phases that keep every value crossing a barrier
//     in shared memory, so that the host build runs each phase for all of a block's
//     threads before the next: barriers need no threads on the host. Cross-entropy's rows
//     are a block each when they are a vocabulary (over 1,024 classes), else a thread.
//
//   - Multi-result ops (layer_norm_grad_params, split, …) are one kernel per result.
//
//   - Launch sites that one kernel would make serial or quadratic (a loss reduced to a
//     scalar, the norms' parameter gradients, the embedding's backward, a reduction of many
//     elements into few results such as a bias's gradient) are Plans: several kernels passing
//     partial results through scratch memory, which the device allocates once per site. A
//     reshape is a Plan with no kernel: the driver's device-to-device copy.
//
// The tests generate every kernel of cudatest's cases and compile them to PTX with clang
// (no CUDA SDK), check the matmul plans against the CPU device, and fuzz the generators;
// runtime/cuda's tests compile the same kernels with NVRTC and run them against the CPU
// device.
package cuda
