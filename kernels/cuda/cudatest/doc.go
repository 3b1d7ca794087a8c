// Package cudatest holds what the tests of ppc's CUDA kernels share across packages: the
// launch-site cases every generator is checked on (Cases), with their tolerances — generated
// and compiled by kernels/cuda's tests, run against the CPU device by runtime/cuda's on the
// emulated driver and on a GPU — random operands for them, and a reference GEMM with
// cuBLASLt's semantics (Gemm), which checks kernels/cuda's matmul plans and stands in for
// cuBLASLt on the emulated device.
package cudatest
