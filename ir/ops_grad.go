package ir

// gradOps are fused gradient kernels emitted by the autodiff pass (for example the backward of
// softmax or layer_norm), where expressing the gradient with core ops would cost extra passes
// over memory.
var gradOps = []OpDef{}
