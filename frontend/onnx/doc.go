// Package onnx imports ONNX models (.onnx protobuf files, decoded with the project's own
// .proto subset in onnxpb) into an ir.Module with one function @forward that follows the
// model convention of ir/model.go.
//
//	m, err := onnx.Load("model.onnx", onnx.Options{Dims: map[string]int{"batch_size": 8}})
//
// Load reads the file (external tensor data relative to its directory), Import does the same
// from bytes; both verify the result with ir.Verify. Errors are *ir.Error values whose Loc
// names the file and, for anything a node causes, the ONNX node as `"name" (OpType)` (the
// first output's name when the node has none); every op of the IR carries that Loc too, so
// the verifier's and later passes' messages point at the model.
//
// # The module
//
//   - Module name: the graph's name (else the file's base name) with every byte that is not a
//     letter, digit, '_' or '.' replaced by '_'. Module attributes: opset = {domain = version}
//     (the default domain written "") and producer = "<producer_name> <producer_version>".
//   - Graph inputs that are not initializers become arguments {input, name = "<onnx name>"}.
//     Symbolic dims are bound from Options.Dims; every unbound dim is reported at once, with
//     the inputs and dim indices where it appears and how to bind it (--dim NAME=VALUE).
//     With Options.Microbatches = M > 1 the leading dim of every input is divided by M
//     before anything else, so shape arithmetic folds for one micro-batch.
//   - Options.Batch = N (--batch) re-batches a model exported with a fixed batch of 1: every
//     graph input must have a fixed leading dim of 1, which becomes N (then divided by M).
//     The model is imported at its batch of 1 first; the second import follows the batch
//     dim through every node against the first, rewrites the shapes that pin it (Reshape
//     targets, Resize sizes) and reports a node that drops or moves it — x[0], a Concat
//     with a constant of batch 1 — by name (batch.go).
//   - Integer inputs get the range a model file would declare (ranges.go): an input that
//     indexes a table (Gather: an embedding) holds [0, rows), an input a cross-entropy
//     compares against holds [0, classes) and is {label} (unless its ignore_index lies
//     outside the classes), through reshapes, transposes, slices and integer casts; labels of
//     a token input's type and range are its next tokens (shift_of). Synthetic data and token
//     files then feed a language model as they feed gpt.ppm; other integer inputs (masks)
//     keep none.
//   - Initializers: a floating-point initializer of rank >= 1 that feeds at least one
//     trainable operand slot becomes a parameter argument {param, data = dense<…>} named after
//     the initializer (plus name = "<onnx name>" when the printer could not keep the name,
//     as for the all-digit names of old PyTorch exports). Every other initializer — integer
//     or bool data, rank-0 scalars, and tensors that feed only non-trainable slots
//     (shape, axes, pads, scales and sizes operands, Slice starts/ends/steps, Clip bounds,
//     BatchNormalization's running mean and variance; the table nonTrainable) — is a
//     constant, created where first used and folded away when only shape arithmetic uses
//     it. Old exports that also list initializers as graph inputs are handled the same way.
//     Unused initializers are dropped.
//   - Constant nodes that hold weights (paddle2onnx and older exporters store every weight
//     of a model that way) are imported as initializers are, by the same rule, and become
//     parameters named after the node's output. A Constant is taken for a weight when it
//     feeds at least one trainable operand slot and its tensor is floating-point with at
//     least two elements, every one finite and of magnitude below 1e4; the others — a
//     one-element epsilon, scale or exponent, an attention mask of −∞ or −1e9 — stay
//     constants where they stand. (A model with nothing to train is then refused by a
//     training compile, which says why.)
//   - Graph outputs become results {name = "<onnx output name>"} in order; a declared output
//     type that disagrees with the computed one (dtype, rank or a fixed dim) is an error. A
//     floating-point scalar output named loss is also {loss}: the model's training loss (ppc
//     export writes one), so a training compile needs no --loss.
//   - IR values keep the ONNX tensor name when it is printable (the printer quotes names
//     that are not bare and numbers all-digit ones).
//
// # Lowering
//
// Every op is built through an ir.Builder whose emit hook folds any op whose operands are
// all constants (ir.Fold, extended for the nn ops in ir/fold_nn.go), so Shape, Size,
// ConstantOfShape, Range, Constant and the Gather/Unsqueeze/Concat/Cast/arithmetic chains
// exporters build around them become constants and then disappear; operands that must be
// static (Reshape's shape, Slice's starts, Pad's pads, Resize's sizes…) are read from those
// constants, and an operand that depends on a graph input is an error naming it. A final
// dead-code pass removes what folding and raising left unused.
//
// Decompositions into core ops: Flatten, Squeeze, Unsqueeze and Reshape → reshape (0 copies
// the input dim unless allowzero); DepthToSpace (DCR, CRD) and SpaceToDepth → reshape,
// transpose, reshape; Expand → broadcast (bidirectional); Tile → reshape, broadcast,
// reshape; Sum, Mean, Max, Min of n inputs → chains of add / max / min (Mean divides);
// Clip → max and min with the bounds; Softsign → x / (1 + |x|); Reciprocal → 1 / x;
// PRelu → where(x < 0, x·slope, x) (before opset 7 a 1-D slope is per channel);
// HardSwish → x · hard_sigmoid(x; 1/6, 1/2); ThresholdedRelu, Celu, Mish likewise;
// LessOrEqual / GreaterOrEqual → or(less|greater, equal); Xor → not(equal); ReduceL1,
// ReduceL2, ReduceSumSquare, ReduceLogSum → reduce_sum with abs / mul / sqrt / log;
// Identity, inference Dropout (its mask is a constant true), Cast to the same dtype and
// trivial Slice / Pad / Transpose / Resize → nothing; Gemm → matmul with transpose flags and
// C as the bias operand when alpha = beta = 1 (else explicit mul and add); opset < 13
// Softmax / LogSoftmax → reshape to 2-D at axis, softmax over the last dim, reshape back
// (or the plain op when axis is already the last dim); opset < 7 broadcast = 1 with axis →
// a reshape of B appending unit dims. Ops with their own IR rows (ir/ops_nn.go, each Doc
// stating the exact ONNX semantics): conv and conv_transpose (auto_pad and output_shape
// resolved to explicit pads), max_pool and avg_pool (global pools as kernel = spatial dims),
// batch_norm, instance_norm, lrn, pad, resize (Upsample and opset 10 Resize as asymmetric
// with nearest rounding down; sizes always static), gather_elements, elu, selu,
// leaky_relu, softplus, hard_sigmoid, shrink, sign, floor, ceil, round, reduce_min,
// reduce_prod, reduce_log_sum_exp, arg_max and arg_min. LayerNormalization (opset 17) →
// layer_norm, Gelu (opset 20) → gelu, SoftmaxCrossEntropyLoss → cross_entropy (ONNX's
// class axis 1 moved last by a transpose; log_prob → log_softmax; per-class weights refused).
//
// Opset differences are honoured from opset 1 on where the exports need them: attributes
// that became inputs (Slice 10, Split / Squeeze / Unsqueeze / ReduceSum 13, the other
// Reduce* 18, Pad 11, Clip 11, Reshape 5, Upsample 9), changed defaults (Softmax axis, Concat
// axis), and ops that gained attributes (pool dilations and ceil_mode, Split num_outputs,
// Shape start/end, Pad axes).
//
// Sequence, optional, string, training (ai.onnx.preview.training) and control-flow (If,
// Loop, Scan) ops, ops of other domains and ops ppc does not implement are rejected before
// anything else is imported, with one uniform message:
//
//	model.onnx: node "seq" (SequenceConstruct): unsupported op SequenceConstruct (sequence ops are not supported)
//
// # Pattern raising
//
// After lowering, raise.go rewrites exporter patterns into the IR's high-level ops so that
// sharding and recompute see them: the decomposed LayerNorm (ReduceMean → Sub → Pow 2 or
// self-Mul → ReduceMean → Add eps → Sqrt → Div [→ Mul gamma [→ Add beta]] over trailing
// axes) → layer_norm with scale and bias when their shapes are exactly the normalised dims;
// GELU's erf form x·0.5·(1 + erf(x/√2)) in its association orders → gelu; the tanh form
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) → gelu {approximate = tanh}; a Transpose that
// swaps the last two dims of a MatMul (or Gemm) operand and has no other use → the matmul's
// transpose_a / transpose_b flag (a Linear exported without constant folding, a tied output
// head MatMul(x, Transpose(wte)), attention's q·kᵀ), so that shard-annotate sees the weight
// itself; MatMul followed by the only use Add of a 1-D bias over the last dim → matmul with a
// bias operand; torch.onnx.export's attention — MatMul(q, kᵀ) → Div or Mul by a scalar →
// Where(causal condition, ·, ≤ −1e4) or Add(causal bias) → Softmax(last axis) → MatMul(·, v)
// — → the fused attention op with causal = true when the constant mask hides exactly the keys
// after each query (with no mask, causal false; any other mask keeps the chain). ONNX's own
// Attention (opset 23) maps onto the same op (ops.go). A pattern is raised only when it matches exactly: constants within 1e-6
// relative, every intermediate value used only inside the pattern and not returned.
//
// # Robustness
//
// The loader never trusts sizes from the file: ranks are capped at 32, element counts at
// 2^50, every tensor's payload (raw_data, typed fields or external file range) must hold
// exactly what its dims declare before anything is allocated from them, external data must
// stay inside the model's directory, splat constants stand for ConstantOfShape, and folding
// is bounded by ir.MaxFoldElements. FuzzImport exercises this; its crashers are kept under
// testdata/fuzz.
package onnx

// The exporter-pattern GPT that the importer, sharding and compiler tests share
// (testdata/models/gpt-tiny.onnx) is generated here, by the package whose patterns it
// exercises; testdata itself is outside `go generate ./...`, and TestGPTTinyUpToDate checks
// that the committed file is what the generator writes.
//go:generate go run ../../testdata/models/gen_gpt_onnx.go -o ../../testdata/models/gpt-tiny.onnx
