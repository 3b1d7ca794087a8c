package onnx

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
)

// Re-batching (Options.Batch): a model exported with a fixed batch of 1 — every graph input
// [1, …], and Reshape shapes written as constants [1, …] — cannot be cut into micro-batches
// as it stands. With Batch = N the importer imports it twice:
//
//  1. at its own batch of 1, as exported (the reference), remembering the shape of every
//     tensor that is not a compile-time constant;
//  2. with the leading dim of every graph input set to N (then divided by the micro-batch
//     count M: each micro-batch holds b = N/M samples). After each node, the shape of each
//     of its outputs is compared with the reference: a tensor carries the batch in dim k
//     when that dim is b times its reference size and the others are equal, and does not
//     carry it when the shapes are equal.
//
// The shape operands that pin the batch are rewritten from the reference: a Reshape whose
// input carries the batch gets the reference output shape with the batch multiplied into
// the dim where it falls in memory order (the first dim whose preceding dims hold exactly
// the elements before the batch in the input, so that [1, 256] becomes [b, 256] and a
// flattened [T, C] becomes [b·T, C]); a Resize's sizes get the batch dim of the input. Every
// other node must carry the batch by itself (broadcasting, axis attributes, shapes computed
// from Shape(x)); a node whose input carries the batch and whose output does not — a
// Gather or Slice that takes sample 0, a reduction over the batch — or whose output changes
// shape in any other way, is an error naming the node, as is any error of the second import
// at a node the first one imported (a Concat with a constant of batch 1, say).

// batchRef is what the reference import leaves for the re-batched one.
type batchRef struct {
	shapes map[string]ir.Shape // non-constant tensors at batch 1, by ONNX name
	factor int                 // b: samples per micro-batch, the growth of a batch dim
	axis   map[string]int      // the dim carrying the batch of each tensor seen (-1: none)
}

// importBatched is Import with Options.Batch > 0.
func importBatched(name string, m *onnxpb.ModelProto, dir string, opts Options, budget int64) (*ir.Module, error) {
	refOpts := opts
	refOpts.Batch, refOpts.Microbatches, refOpts.Replicas = 0, 0, 0
	ref := &importer{file: name, dir: dir, opts: refOpts, model: m, foldBudget: budget}
	if _, err := ref.run(); err != nil {
		return nil, err
	}
	br := &batchRef{shapes: map[string]ir.Shape{}, factor: opts.Batch / max(opts.Microbatches, 1), axis: map[string]int{}}
	for n, v := range ref.vals {
		if constOf(v) == nil {
			br.shapes[n] = v.Type.Shape
		}
	}
	imp := &importer{file: name, dir: dir, opts: opts, model: m, foldBudget: budget, batch: br}
	mod, err := imp.run()
	var e *ir.Error
	if err != nil && errors.As(err, &e) && e.Loc.Node != "" && e.Loc.Node == imp.loc.Node && !strings.HasPrefix(e.Msg, "--batch") {
		// The node imported at the model's own batch: it is what fixes the batch at 1.
		return nil, &ir.Error{Loc: e.Loc, Msg: fmt.Sprintf("--batch %d: %s (the node imports at the exported batch of 1: it fixes the batch)", opts.Batch, e.Msg)}
	}
	return mod, err
}

// batchInput sets the leading dim of a graph input to Options.Batch, checking that the
// model was exported with a batch of 1.
func (imp *importer) batchInput(in *onnxpb.ValueInfoProto, shape ir.Shape) error {
	n := imp.opts.Batch
	dims := in.GetType().GetTensorType().GetShape().GetDim()
	switch {
	case len(shape) == 0:
		return imp.errf(imp.fileLoc(), "--batch %d: graph input %q is a scalar and has no batch dim", n, in.Name)
	case dims[0].GetDimParam() != "":
		return imp.errf(imp.fileLoc(), "--batch %d: graph input %q has a symbolic batch dim %s; bind it with --dim %s=%d instead", n, in.Name, dims[0].GetDimParam(), dims[0].GetDimParam(), n)
	case shape[0] != 1:
		return imp.errf(imp.fileLoc(), "--batch %d re-batches a model exported with a batch of 1, but graph input %q has a fixed leading dim of %d", n, in.Name, shape[0])
	}
	shape[0] = n
	imp.batch.axis[in.Name] = 0
	return nil
}

// checkBatch follows the batch through node n (see the comment at the top of the file).
func (imp *importer) checkBatch(n *onnxpb.NodeProto) error {
	b := imp.batch
	from := ""
	for _, x := range n.Input {
		if k, ok := b.axis[x]; ok && k >= 0 {
			from = x
			break
		}
	}
	for _, name := range n.Output {
		v := imp.vals[name]
		ref, ok := b.shapes[name]
		if v == nil || !ok || constOf(v) != nil {
			continue
		}
		got := v.Type.Shape
		k, moved := batchDim(ref, got, b.factor)
		switch {
		case moved:
			return imp.errf(imp.loc, "--batch %d: output %q is %v at batch 1 but %v with %d sample(s) per micro-batch: ppc cannot follow the batch through this node", imp.opts.Batch, name, ref, got, b.factor)
		case k < 0 && from != "":
			return imp.errf(imp.loc, "--batch %d: the node pins the batch at 1: its input %q carries the batch, but its output %q is %v whatever the batch (it selects or combines samples)", imp.opts.Batch, from, name, got)
		}
		b.axis[name] = k
	}
	return nil
}

// batchDim compares a tensor's shape at batch 1 with its shape now: the dim that grew by
// factor (-1 when none did); moved reports any other difference.
func batchDim(ref, got ir.Shape, factor int) (int, bool) {
	if len(ref) != len(got) {
		return -1, true
	}
	k := -1
	for i := range ref {
		switch {
		case ref[i] == got[i]:
		case k < 0 && got[i] == ref[i]*factor:
			k = i
		default:
			return -1, true
		}
	}
	return k, false
}

// rebatchReshape returns the target shape of a Reshape (node c) whose input carries the
// batch: the reference output shape with the batch multiplied into the dim where it falls
// in memory order. Targets of other Reshapes are returned unchanged.
func (imp *importer) rebatchReshape(c *nodeCtx, target []int) ([]int, error) {
	b := imp.batch
	if b == nil || b.factor == 1 || len(c.n.Output) == 0 {
		return target, nil
	}
	k, ok := b.axis[c.n.Input[0]]
	in, out := b.shapes[c.n.Input[0]], b.shapes[c.n.Output[0]]
	if !ok || k < 0 || in == nil || out == nil {
		return target, nil
	}
	before := in[:k].NumElements()
	for j := range out {
		if n := out[:j].NumElements(); n == before {
			t := slices.Clone([]int(out))
			t[j] *= b.factor
			return t, nil
		} else if n > before {
			break
		}
	}
	return nil, c.errorf("--batch %d: the reshape of %v (batch in dim %d) to %v splits the batch across dims; ppc cannot re-batch it", imp.opts.Batch, in, k, out)
}

// rebatchSizes multiplies the batch dim of a Resize's sizes (node c, input 0 carrying the
// batch) by the samples per micro-batch: resizing never changes the batch.
func (imp *importer) rebatchSizes(c *nodeCtx, sizes []int) []int {
	b := imp.batch
	if b == nil || b.factor == 1 {
		return sizes
	}
	if k, ok := b.axis[c.n.Input[0]]; ok && k >= 0 && k < len(sizes) {
		sizes = slices.Clone(sizes)
		sizes[k] *= b.factor
	}
	return sizes
}
