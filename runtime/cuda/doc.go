// Package cuda is ppc's CUDA device: finding the NVIDIA libraries at run time and calling them
// without cgo, the kernels (generated CUDA C, and cuBLASLt for GEMMs), and the device
// (device.Device) that runs a rank's program on a GPU.
//
// Design, and where it departs from DESIGN.md §8 (which sketched hand-written .cu files under
// kernels/cuda and cuBLAS):
//
//   - Kernels are generated per launch site from the same op table and fused expressions as
//     the CPU device, with shapes and strides compiled in, rather than written per op: the
//     fused elementwise chains the lowering produces are open-ended, and a generated kernel
//     can follow the CPU device's rounding and summation order exactly, which is what makes
//     a CUDA run comparable with the reference device. Identical kernels (same op, same
//     shapes) are named by their source's hash and generated once; a program's kernels are
//     compiled at the first launch after load by NVRTC to the GPU's own machine code (CUBIN,
//     so the driver does not compile PTX again at load), in modules of a few dozen kernels
//     compiled concurrently (NVRTC compiles a program on one thread, about 10 ms a kernel),
//     and cached on disk. NVRTC's branch of ppc_cuda.h has neither the SDK's headers nor
//     clang's __builtin_* constants: infinity and NaN are spelled by their bits.
//
//   - GEMMs go to cuBLASLt, not cuBLAS: one API for strided batches, bias epilogues and
//     compute types (fp32 accumulation; TF32 only when asked).
//
//   - No atomics: every thread computes its own outputs, and scatters (gradients of
//     gathers, pooling, padding) are written as gathers in the CPU device's order. Results
//     are deterministic, and every kernel runs on the host too: ppc_cuda.h's PPC_HOST
//     branch turns a launch into a loop over blocks and threads, which is how CI checks
//     each kernel, and whole training runs (an emulated driver in the tests), against the
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
//   - Device memory is the runtime's: one allocation per rank (device.Device.Alloc), the
//     cuBLASLt workspace, scratch per launch site or collective and the messages' staging,
//     all made at load or join, and nothing per launch. Host transfers (Read, Write)
//     synchronise the compute stream.
//
//   - Multi-result ops (layer_norm_grad_params, split, …) are one kernel per result.
//
//   - Launch sites that one kernel would make serial or quadratic (a loss reduced to a
//     scalar, the norms' parameter gradients, the embedding's backward, a reduction of many
//     elements into few results such as a bias's gradient) are Plans: several kernels passing
//     partial results through scratch memory allocated once per site. A reshape is a Plan
//     with no kernel: the driver's device-to-device copy.
//
//   - The device is device.Async: in a multi-process run without NCCL the runtime queues a
//     send's copy into page-locked memory behind the kernels and sends it from a goroutine,
//     so the rank keeps queueing work.
//
//   - With NCCL the device is device.Networked (net.go): a communicator and a stream per
//     communication group, each transfer queued behind a compute event, and the compute
//     stream waiting for a transfer only when an operation touches its memory (the device
//     tracks the memory of the transfers in flight), so gradient reductions overlap the
//     backward and sends the next micro-batch. The runtime makes the groups (a direction of
//     a pipeline pair, a collective group) and orders the receives (runtime/devnet.go).
//
//   - cuBLASLt and NCCL work on the calling thread's current context, so their calls run
//     under Driver.Bound, on one OS thread with the GPU's context made current, like every
//     driver call.
//
// Tests check the stream order without a GPU: the emulated driver runs work as it is
// queued, which would hide a missing wait, so a checker keeps vector clocks per stream,
// event and host over the calls and fails on any two unordered operations on one buffer.
//
// ppc opens libcuda.so.1 (the driver API), NVRTC, cuBLASLt and NCCL with purego's dlopen
// when a run asks for --device cuda, so the binary builds, and every test passes, on a
// machine with none of them — CI's included — and a GPU machine needs nothing but the
// driver and the CUDA libraries users already have, from a CUDA toolkit or from PyTorch's
// pip wheels (nvidia-cublas-cu12, nvidia-cuda-nvrtc-cu12, nvidia-nccl-cu12, or CUDA 13's
// nvidia-cublas and nvidia-cuda-nvrtc, which share nvidia/cu13/lib).
//
// Why not gorgonia.org/cu, the Go binding users know: it includes cuda.h through cgo, so
// nothing that imports it builds on a machine without the CUDA toolkit's headers, CI
// included; a binding that needs the SDK at build time cannot be the default of a tool whose
// tests run everywhere.
//
// Libraries are looked for, in order, in the directories of LD_LIBRARY_PATH; in $CUDA_HOME
// (and $CUDA_PATH) lib64 and lib, and /usr/local/cuda/lib64; in the nvidia/*/lib and
// nvidia/cu13/lib folders of the Python environments a user may have (the active virtualenv
// or conda prefix, the first python3 on PATH's, the user's and the system's site-packages);
// and last by bare name, through the dynamic loader's own
// search (ld.so.cache: where the driver's libcuda.so.1 usually is). Probe reports, for each
// library, where it was found and its version, or every place it looked.
package cuda
