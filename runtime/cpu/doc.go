// Package cpu is the runtime's CPU device: it prepares a kernel for every IR op from the
// numeric routines in kernels/cpu, checking dtypes and attributes once at load time so that a
// launch only computes.
//
// Elementwise ops, alone or fused into chains by the lowering, run on one engine
// (elementwise.go): values are computed in float64 chunks and rounded to each step's dtype
// after every step, which for + − × ÷ and √ equals IEEE arithmetic in that dtype; so the
// results do not depend on how ops were fused, and a pipeline that cuts a chain at a stage
// boundary computes exactly what one device computes.
//
// A convolution with an epilogue (device.Spec.Epilogue: the ReLU or residual add + ReLU that
// lowering fuses after it) applies the chain inside the convolution, to each block of output
// channels as the block becomes final (epilogue.go), with the typed chain's operations, so
// the bits are those of the two launches; other epilogues run as the op and then the chain
// in place. A pointwise convolution with a prologue (device.Spec.Pre: the inference batch
// norm, and its ReLU, before it) applies the batch norm's scale and shift and the ReLU to
// each panel of its input as its GEMM packs it (prologue.go), with BatchNormInference's
// multipliers and roundings: the bits of the two launches, without writing the normalised
// input. Other prologues run into a buffer of the launch site's, then the op.
//
// Operands the runtime marks constant (device.Spec.Const: an inference program's parameters)
// may keep a prepared form between launches — a convolution's packed weights (constant.go) —
// used only while the device's ForgetConstants count and the operand's buffer are those it
// was made under.
//
// bf16 and f16 (mixed-precision training) run every other op by rounding: the op's f32
// kernel on widened copies, its float results rounded to nearest even (lowprec.go); kernels
// that only move elements take them as they are.
package cpu
