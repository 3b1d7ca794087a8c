// Package lower owns the step from IR to kernel-level instructions: choosing a kernel for
// each op, fusing chains of elementwise ops into one kernel, buffer liveness and the memory
// plan (offsets in one arena per rank, peak bytes reported). It is filled in by the
// single-device training issue; the IR is designed so that lowering needs only the op table's
// traits and static shapes.
package lower
