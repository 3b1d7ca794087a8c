package ir

// The model convention: how frontends describe a model in a module and how later passes
// find its parts. A model module has a function @forward whose arguments are data inputs and
// parameters and whose results are the model's outputs, or its loss.
//
//	func @forward(%tokens: i64[2,64] {input}, %labels: i64[2,64] {input, label},
//	              %wte: f32[512,64] {init = "normal(0.02)", param}) -> (f32[] {loss})
//
// Parameter arguments are named after the parameter (`layers.3.attn.wq`, namespaced by the
// blocks that own them) and carry either an initialiser or the initial data (ONNX
// initializers). Inputs are fed once per micro-batch; the leading dim of every input is the
// batch dim. Ops may carry a stage annotation from the model's stage markers.
const (
	// ForwardFunc is the name of a model's forward function.
	ForwardFunc = "forward"

	// AttrInput (unit, on an argument) marks a data input.
	AttrInput = "input"
	// AttrLabel (unit, on an input) marks the labels a loss compares against.
	AttrLabel = "label"
	// AttrParam (unit, on an argument) marks a trainable parameter.
	AttrParam = "param"
	// AttrInit (string, on a parameter) is its initialiser: "normal(STD)", "uniform(A, B)",
	// "zeros" or "ones". Values come from the counter-based RNG keyed by seed, parameter name
	// and element index, so any shard initialises exactly its slice.
	AttrInit = "init"
	// AttrData (dense, on a parameter) is its initial value, for imported weights.
	AttrData = "data"
	// AttrLoss (unit, on a result) marks the scalar training loss.
	AttrLoss = "loss"
	// AttrName (string, on a result or input) is the model's own name for it (an ONNX
	// tensor name), kept when the IR name had to change.
	AttrName = "name"
	// AttrGrad (string, on a result) marks the gradient of the named parameter.
	AttrGrad = "grad"
)

// Params returns the parameter arguments of f in order.
func (f *Func) Params() []*Value {
	var out []*Value
	for i, a := range f.Args {
		if f.ArgAttrs[i].Has(AttrParam) {
			out = append(out, a)
		}
	}
	return out
}

// Inputs returns the data-input arguments of f in order.
func (f *Func) Inputs() []*Value {
	var out []*Value
	for i, a := range f.Args {
		if f.ArgAttrs[i].Has(AttrInput) {
			out = append(out, a)
		}
	}
	return out
}
