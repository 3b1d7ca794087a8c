package ir

import (
	"fmt"
	"slices"
)

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
	// AttrUnpadded (ints, on a parameter or optimizer state) is the shape the user sees
	// when the compile padded the tensor (passes.PadVocab pads a vocabulary tp does not
	// divide): checkpoints, exports and initialisation hold this leading block of it, and
	// the elements beyond it are zero and stay zero.
	AttrUnpadded = "unpadded"
	// AttrZeroRows (int, on a ZeRO block: a parameter, gradient or optimizer state split over
	// dp on dim 0) is the rows the dp blocks split when dp does not divide them: dim 0 as the
	// rank's other axes leave it (its tp block, or the whole dim). Each dp rank holds
	// ceil(rows/dp) of them, the last ranks' blocks padded with zeros (possibly wholly
	// padding), as FSDP and Megatron's distributed optimizer pad; absent, dp divides dim 0.
	AttrZeroRows = "zero_rows"
	// AttrMetric (string, on a scalar result) names a value the step reports beside the loss:
	// on a result of @forward (a model's `metric NAME EXPR`), a per-micro-batch count summed
	// over the step's micro-batches and replicas, such as the tokens a mixture of experts
	// dropped; on an @optimizer result, a value every rank agrees on (the loss scale).
	AttrMetric = "metric"
	// AttrMicrobatches (int, on the module) is the number of micro-batches per step.
	AttrMicrobatches = "microbatches"
)

// CheckArgAttrs checks the values of the model convention's argument attributes (an
// initialiser that parses) and returns the name of the bad one. The parser calls it with
// the attributes' positions, the verifier for modules built in memory.
func CheckArgAttrs(attrs Attrs) (bad string, err error) {
	if a := attrs.Get(AttrInit); a != nil {
		s, ok := a.(String)
		if !ok {
			return AttrInit, fmt.Errorf("attribute %s must be a string like \"normal(0.02)\", got %s", AttrInit, AttrString(a))
		}
		if _, err := ParseInit(string(s)); err != nil {
			return AttrInit, err
		}
	}
	return "", nil
}

// CheckModuleAttrs checks the values of module attributes that later stages read (the
// micro-batch count) and returns the name of the bad one.
func CheckModuleAttrs(attrs Attrs) (bad string, err error) {
	if a := attrs.Get(AttrMicrobatches); a != nil {
		if n, ok := a.(Int); !ok || n < 1 {
			return AttrMicrobatches, fmt.Errorf("module attribute %s must be a positive integer, got %s", AttrMicrobatches, AttrString(a))
		}
	}
	return "", nil
}

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

// Prediction returns what a model whose only result is its loss predicts: the first operand
// (the logits) of the loss op (cross_entropy, mse) that computes the loss; nil for any other
// model. Inference and ONNX export output it beside the loss: someone running a model for
// its outputs wants them, not only how far they are from the labels.
func (f *Func) Prediction() *Value {
	if len(f.Results) != 1 || !f.ResultAttrs[0].Has(AttrLoss) {
		return nil
	}
	if d := f.Results[0].Def; d != nil && d.Def.Has(Loss) && len(d.Operands) > 0 {
		return d.Operands[0]
	}
	return nil
}

// AttrRange (ints [lo, hi), on an integer input) is the values the input may hold: token ids
// in [0, vocab), class labels in [0, classes). Synthetic data draws from it and data files
// are checked against it.
const AttrRange = "range"

// AttrShiftOf (string, on a label input) names the token input whose next tokens the labels
// are (a language model's targets): synthetic data and token streams feed them as such.
const AttrShiftOf = "shift_of"

// LinkNextTokens marks a label input that has the type and the range of exactly one token
// input (an integer input with a range that is not a label) as that input's next tokens
// (AttrShiftOf), as a model file's `label y: … next of tokens` does: labels of a token
// sequence's shape over its vocabulary are a language model's targets. Without the link the
// labels would be drawn independently of the tokens, which no model can learn.
func LinkNextTokens(f *Func) {
	for i, y := range f.Args {
		at := f.ArgAttrs[i]
		if !at.Has(AttrInput) || !at.Has(AttrLabel) || at.Has(AttrShiftOf) || !at.Has(AttrRange) {
			continue
		}
		var match *Value
		n := 0
		for j, x := range f.Args {
			xa := f.ArgAttrs[j]
			if xa.Has(AttrInput) && !xa.Has(AttrLabel) && x.Type.Equal(y.Type) && slices.Equal(xa.Ints(AttrRange), at.Ints(AttrRange)) {
				match, n = x, n+1
			}
		}
		if n == 1 {
			f.ArgAttrs[i] = at.Set(AttrShiftOf, String(match.Name)).Sorted()
		}
	}
}
