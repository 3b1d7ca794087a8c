// Package cuda is ppc's CUDA device: finding the NVIDIA libraries at run time and calling them
// without cgo (the driver, NVRTC, cuBLASLt, NCCL), and the device (device.Device) that runs a
// rank's program on a GPU: its memory, streams and events, the compilation and launch of the
// kernels kernels/cuda generates, the cuBLASLt calls it plans, and NCCL between processes.
//
// Design (the kernels' own is kernels/cuda's):
//
//   - A program's kernels are generated when it is loaded (kernels/cuda), named by their
//     source's hash, so identical kernels (same op, same shapes) are compiled once, and
//     compiled at the first launch after load by NVRTC to the GPU's own machine code (CUBIN,
//     so the driver does not compile PTX again at load), in modules of at least 64 KiB of
//     source compiled concurrently (NVRTC compiles a program on one thread, about 10 ms a
//     small kernel; a tensor-core attention kernel is ~100 KB),
//     and cached on disk, keyed by the source's hash.
//
//   - Device memory is the runtime's: one allocation per rank (device.Device.Alloc), the
//     cuBLASLt workspace, scratch per launch site or collective and the messages' staging,
//     all made at load or join, and nothing per launch. Host transfers (Read, Write)
//     synchronise the compute stream.
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
// The tests run the device without a GPU over an emulated driver, which builds each module's
// kernels for the host (ppc_cuda.h's PPC_HOST branch; each distinct module once per test
// binary, as the disk cache would) and runs them: every kernel of kernels/cuda/cudatest's
// cases, and whole training runs, against the CPU device. They check
// the stream order too: the emulated driver runs work as it is queued, which would hide a
// missing wait, so a checker keeps vector clocks per stream, event and host over the calls and
// fails on any two unordered operations on one buffer.
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
