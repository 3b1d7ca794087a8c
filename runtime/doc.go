// Package runtime owns execution of per-rank programs: the loader that validates a program
// completely before running it, the executor, the device interface (cpu always; cuda opened
// at run time through purego) and the communication interface (in-process transport with
// blocking send/recv semantics; NCCL on GPUs).
package runtime
