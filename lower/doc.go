// Package lower owns the step from an IR function to kernel launches over numbered value
// slots (Block): constants become constant slots, chains of elementwise ops fuse into one
// launch when every use of each intermediate is in the chain and it has the chain's shape —
// an intermediate the function returns is one more result of the launch (AdamW's moments,
// parameter and 16-bit copy are one launch, which code generation writes in place) — an
// elementwise group that alone reads a convolution's result, all of that result's type, is
// the convolution's epilogue (Kernel.Epilogue: the ReLU or residual add + ReLU after it, one
// launch) — an inference batch norm (with its ReLU) whose result only a pointwise
// convolution reads is that convolution's prologue (Kernel.Pre: DenseNet's pre-activation
// layers, one launch, the normalised input never written) — and every other op is one launch — collectives included, which are never fused
// (code generation turns them into collective instructions). It also owns the memory planner (PlanMemory):
// offsets in one arena for buffers with known lifetimes — greedy best-fit in start order and,
// for up to 8,192 buffers, largest first, the smaller arena kept — which code generation runs over each
// rank's whole unrolled step, and PeakLive, the most bytes a subset of those buffers holds at
// once (how code generation tells forward activations from workspace in the arena).
package lower
