// Package cuda generates ppc's CUDA kernels: the CUDA C of every launch site a program has
// (Kernels, Generate; the fused elementwise chains in elementwise.go, the row kernels in
// rows.go, the tile kernels of FlashAttention-2 in tiles.go and kernels_attention.go), the plans of the sites that run as several kernels through scratch memory
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
//     row-major matmul onto its column-major calls (GemmCall); runtime/cuda makes them. A
//     batch of activations against one weight is one GEMM of the stacked rows, not a strided
//     batch; a large 16-bit GEMM whose dims or leading dimensions are not multiples of 8
//     (GPT-2's vocabulary of 50,257) runs on zero-padded copies (AlignGemm, strided batches
//     matrix by matrix), where cuBLASLt otherwise picks kernels loading 2 bytes at a time
//     (96 TFLOP/s on an H100 against 365–387 padded).
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
//     time on an H100). Barriers and shared memory are in these and in the tile kernels
//     only, between phases that keep every value crossing a barrier in shared memory, so
//     that the host build runs each phase for all of a block's threads before the next:
//     barriers need no threads on the host. Cross-entropy's rows are a block each when they
//     are a vocabulary (over 1,024 classes), else a thread. A row's maximum and Σexp come
//     from one pass (the online softmax: each thread rescales its sum when its maximum
//     grows, and the tree folds (max, sum) pairs), not a pass for each.
//
//   - Attention and its gradient are FlashAttention-2's tiled kernels (kernels_attention.go
//     on tiles.go): a block of 128 threads per query tile (forward, dq) or key tile (dk,
//     dv), a thread per row; the other side's tiles (up to 32 rows, within 40 KiB of static
//     shared memory) staged in shared memory in turn; the online softmax's running maximum
//     and sum and the row's accumulator in registers, carried across phases (on the host an
//     element per thread); causal blocks stop at (or start from) the last (first) tile they
//     see. The backward is four kernels — δ = rowsum(dO∘O), dq over key tiles, dk and dv
//     over the group's query heads and tiles — so that every result has one writer and one
//     order of summation (no atomicAdd into dq): deterministic, as the CPU device's two
//     passes. For f32 and f64 the products are FMAs from shared memory; bf16 and f16 run on
//     tensor cores (kernels_attention_mma.go: mma.sync.m16n8k16, 4 warps of 16 rows a
//     block, dk and dv in one kernel, tiles staged 16 bytes a thread, the forward's softmax
//     in the lanes), where ppc_cuda.h's fragments are registers (loaded by ldmatrix) on sm_80+
//     and tile addresses on the host, each lane computing its own elements of a product by
//     the PTX layout, so the host checks every index (an earlier version of this package
//     kept to FMAs because the host "cannot run a warp-wide mma": 6× slower on an H100).
//     The FMA generator unrolls the loops
//     over a tile's rows itself (scores are named registers): under #pragma unroll clang
//     left such arrays in local memory, which TestKernelsCompileToPTX now refuses.
//
//     Verified on the host: results against the CPU device on odd sizes (head dims 6, 37,
//     64, 80, 128; ragged tiles; Sq ≠ Skv both ways; GQA and MQA; causal, boolean and
//     additive masks; f32, bf16, f16, f64), and f32 accuracy against the f64 CPU device no
//     worse than the CPU device's own f32 (runtime/cuda's TestAttentionF32Accuracy); the
//     PTX for sm_80 (and sm_90 where clang knows it) has no local memory in these kernels;
//     static shared memory is the kernel's comment and Kernel.Shared (16 KiB at head dim
//     64, 32 KiB at 128, in 16-bit or f32). Only a GPU can tell registers per thread (ptxas),
//     occupancy and speed: bench/gpu.sh times forward + backward against PyTorch's SDPA.
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
