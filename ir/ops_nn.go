package ir

// nnOps are the ops ONNX models need beyond the transformer core: convolutions, pooling,
// normalisations, padding, resizing and the rest of the model zoo's vocabulary.
var nnOps = []OpDef{}
