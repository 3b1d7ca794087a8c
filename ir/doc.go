// Package ir owns ppc's intermediate representation: dtypes, static shapes, attributes, SSA
// values, ops, functions and modules; the op table (ops as data, with traits and shape
// inference); a builder with a sticky first error; the printer, the parser and the verifier;
// and compile-time evaluation of constant ops (Fold).
//
// # Text form
//
//	module @gpt attributes {mesh = {pp = 4, tp = 2}, microbatches = 8}
//
//	func @forward(%tokens: i64[8,128] {input}, %wte: f32[512,64] {init = "normal(0.02)", param}) -> (f32[] {loss}) {
//	  %0 = gather %wte, %tokens : f32[8,128,64] {stage = 0}
//	  %1, %2 = split %0 {axis = 2, sizes = [32, 32]} : f32[8,128,32], f32[8,128,32] {stage = 0}
//	  send %1 {peer = 1, tag = 0} : () {stage = 0}
//	  …
//	  return %loss
//	}
//
// An op line is `results = name operands {attributes} : result-types {annotations}`. The
// attributes are the op's own (checked against its table row); the annotations after the
// types are the first-class fields stage, tslice (a TeraPipe token slice), shard, phase and
// remat, printed in that fixed order.
// An op without results writes `: ()`. A result type may be written `?` for the shape-infer
// pass to fill in. Values with names keep them; unnamed values print as numbers, renumbered
// in order, so print → parse → print is byte-identical. Dense data prints as a list up to 64
// elements, as hex above, or as a single splat value; `//` starts a comment.
//
// # Choices
//
//   - The parser is hand-written rather than generated with participle (which ppc uses for its
//     model DSL): the IR must parse, verify and print 100,000 ops in well under a second, and
//     every diagnostic must carry file:line:col with a caret at the offending token.
//   - Parsing checks structure (syntax, undefined or redefined values, unknown ops, operand
//     counts, attribute names and kinds, and the values of the model convention's attributes:
//     initialisers, the micro-batch count) with exact positions; Verify checks semantics (types
//     against the op table's inference, SSA dominance, annotations, stage crossings) for
//     parsed and built IR alike, so every pass is held to the same rules.
//   - numpy's broadcast_to is `broadcast`; the collective that copies a root's value to a mesh
//     axis is therefore `collective_broadcast` (XLA's name for it).
//   - Attribute dictionaries are kept sorted by name so that equal dictionaries compare and
//     print identically; attribute values are immutable and may be shared between ops.
package ir
