// Package export writes a model's @forward (ir/model.go's convention) as a standard ONNX
// model, for `ppc export`: default opset 20 (the first with Gelu), IR version 9, encoded with
// the project's own ONNX schema (frontend/onnx/onnxpb).
//
//	mp, err := export.Model(m, export.Options{Weight: initialValue})
//	data, err := proto.Marshal(mp)
//
// It is a package of its own beside the importer (frontend/onnx) because it is the
// importer's inverse over the same schema and conventions, yet shares no code with it: the
// importer stays the size it is, and the exporter depends on nothing but ir and onnxpb. The
// initial weights come through Options.Weight, so that the exporter need not know the
// runtime: compiler.Export passes runtime.InitialValue, which fills a parameter exactly as
// `ppc run --seed N` does.
//
// # The graph
//
//   - Graph inputs: the {input} arguments (the data, and the labels of a loss), in order,
//     with static shapes (a .ppm's whole global batch) and their names (an imported model's
//     own names where the IR changed them).
//   - Initializers: one per {param} argument, named after the parameter, holding
//     Options.Weight's bytes as raw_data. Nothing else is an initializer, so that importers
//     which take float initializers for weights (ppc's does) find exactly the parameters.
//   - Outputs: the results of @forward under their model names (IR names otherwise); the
//     {loss} result is named `loss`. A model whose only result is its loss, computed by a loss
//     op (cross_entropy, mse), also outputs that op's prediction first (the logits), so the
//     file serves inference too. The graph is forward + loss: no backward.
//   - Nodes are written in the IR's order (topological), each named after its first output;
//     every tensor name is unique. value_info is not written.
//
// # Ops
//
// Elementwise ops map one to one (add → Add, where → Where, gelu → Gelu with approximate,
// elu/selu/leaky_relu/hard_sigmoid/shrink with their attributes…); softmax, log_softmax,
// transpose, gather, gather_elements, concat, cast, conv, conv_transpose, max_pool, avg_pool,
// batch_norm, instance_norm, lrn, pad and resize to their ONNX ops; reduce_* to Reduce* with
// the axes as an input and keepdims explicit; arg_max/arg_min to ArgMax/ArgMin;
// split to Split with sizes; slice to Slice with every cut axis explicit (a backward slice to
// the start ends at INT64_MIN); layer_norm to LayerNormalization (ones as the scale when it
// has none). Decompositions: silu → x·Sigmoid(x); rsqrt → Reciprocal(Sqrt); rms_norm →
// x / Sqrt(ReduceMean(x·x) + eps) · scale; matmul → MatMul, with Transpose nodes for its
// transpose flags and Add for its bias, or Gemm for two matrices with a bias or a flag;
// iota → Range reshaped and expanded (so causal masks and rotary positions stay a few nodes,
// not tensors); cross_entropy → SoftmaxCrossEntropyLoss on logits reshaped to [rows, C]
// (ONNX's class axis is 1, the IR's the last) with reduction and ignore_index, reshaped back
// for reduction none; mse → Sub, Mul and ReduceMean or ReduceSum. A constant is a Constant
// node, or ConstantOfShape for a splat of rank >= 1.
//
// Shape operands are written so that the batch dim follows the inputs when ppc re-imports
// the file with --microbatches (which divides the inputs' leading dim): a Reshape whose
// leading dim is its operand's writes 0 there (ONNX's "copy"), an Expand writes 1 for every
// dim the operand already has, and the loss flattens with -1.
//
// A model whose parameters take 2 GiB or more is refused (MaxWeightBytes): a protobuf
// message holds at most 2 GiB, and ppc export does not write external data.
//
// An op with no ONNX form — a gradient kernel, a collective, send/recv, run, stop_gradient:
// what only ppc's passes put in a module — is an error naming the op and its position (the
// DSL or IR line with a caret, or the ONNX node, or its index in @forward).
//
// # Round trip
//
// ppc's importer reads the file back to the same model: the same parameters (names and
// values), the same outputs, and a scalar output named loss as the training loss, so that
// `ppc compile FILE.onnx` trains without --loss; the importer's raising folds the Transpose
// nodes into matmul flags and the bias Adds into the matmul. What does not survive: stage
// markers, the decompositions above (they import as their elementwise ops), and what the
// DSL says of its inputs beyond their types (token ranges, labels as the next tokens).
package export
