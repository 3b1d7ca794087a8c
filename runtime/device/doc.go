// Package device defines what the runtime asks of a device: memory the device allocates and
// owns, typed tensor views into it, the description of one kernel launch site (Spec), Prepare,
// which turns a Spec into a runnable kernel after checking it, and the few data movements a
// program's non-kernel instructions need (zero, copy, accumulate, and host reads and writes).
// The CPU device (runtime/cpu) and the CUDA device (runtime/cuda) implement it.
//
// The runtime never touches a tensor's bytes itself: it allocates one block per rank through
// the device and places every buffer in it, and each instruction — launches, gradient
// accumulation, the optimizer's kernels, copies between buffers — runs through the device. Only
// what must cross to the host does so, through Read and Write: inputs, losses and metrics,
// checkpoints, and the staging of messages for a transport that sends host bytes. On the CPU
// those are the tensor's own bytes (Data), so nothing is copied.
//
// A Spec says which operands are constant for the run (Const: program constants and
// parameters no instruction writes); a device that keeps prepared forms of them (packed
// weights) implements Constants, which the runtime calls whenever it may have changed them.
//
// Host memory for tensors (HostBytes) is aligned as a buffer on the CPU is, so that every
// layer of the runtime that holds tensor bytes on the host (collectives, checkpoints, data)
// gets every element type's views. Layering (runtime/doc.go): device imports no runtime
// package; every other runtime package and the devices may import it.
package device
