// Package cuda is the CUDA device's host side: finding the NVIDIA libraries at run time and
// calling them without cgo.
//
// ppc opens libcuda.so.1 (the driver API), NVRTC, cuBLASLt and NCCL with purego's dlopen
// when a run asks for --device cuda, so the binary builds, and every test passes, on a
// machine with none of them — CI's included — and a GPU machine needs nothing but the
// driver and the CUDA libraries users already have, from a CUDA toolkit or from PyTorch's
// pip wheels (nvidia-cublas-cu12, nvidia-cuda-nvrtc-cu12, nvidia-nccl-cu12).
//
// Why not gorgonia.org/cu, the Go binding users know: it includes cuda.h through cgo, so
// nothing that imports it builds on a machine without the CUDA toolkit's headers, CI
// included; a binding that needs the SDK at build time cannot be the default of a tool whose
// tests run everywhere.
//
// Libraries are looked for, in order, in the directories of LD_LIBRARY_PATH; in $CUDA_HOME
// (and $CUDA_PATH) lib64 and lib, and /usr/local/cuda/lib64; in the nvidia/*/lib folders of
// the Python environments a user may have (the active virtualenv or conda prefix, the user's
// and the system's site-packages); and last by bare name, through the dynamic loader's own
// search (ld.so.cache: where the driver's libcuda.so.1 usually is). Probe reports, for each
// library, where it was found and its version, or every place it looked.
package cuda
