package onnx

import (
	"ppc.dev/ppc/ir"
)

// lowerSoftmaxCrossEntropyLoss: SoftmaxCrossEntropyLoss (opset 12) → cross_entropy. ONNX's
// class axis is 1 (scores [N, C, d1…], labels [N, d1…]), the IR's the last: scores of rank
// above 2 are transposed to [N, d1…, C] first. reduction and ignore_index carry over (a mean
// divides by the labels not ignored in both). The optional second output, log_prob, is
// log_softmax over axis 1. Per-class weights (input 2) are refused. ppc export writes its
// losses this way, so the files it writes import back.
func lowerSoftmaxCrossEntropyLoss(c *nodeCtx) error {
	x, err := c.in(0)
	if err != nil {
		return err
	}
	y, err := c.in(1)
	if err != nil {
		return err
	}
	if c.has(2) {
		return c.errorf("per-class weights (input 2) are not supported")
	}
	r := x.Type.Rank()
	if r < 2 || !x.Type.DType.IsFloat() {
		return c.errorf("scores must be floating point [N, C, …], got %s", x.Type)
	}
	red, err := c.attrString("reduction", "mean")
	if err != nil {
		return err
	}
	var at ir.Attrs
	switch red {
	case "mean":
	case "sum", "none":
		at = at.Set("reduction", ir.Ident(red))
	default:
		return c.errorf("reduction %q (want mean, sum or none)", red)
	}
	if c.hasAttr("ignore_index") {
		ii, err := c.attrInt("ignore_index", 0)
		if err != nil {
			return err
		}
		at = at.Set("ignore_index", ir.Int(ii))
	}
	logits := x
	if r > 2 {
		perm := []int{0}
		for i := 2; i < r; i++ {
			perm = append(perm, i)
		}
		logits = c.b().Transpose(x, append(perm, 1)...)
	}
	c.set(0, c.b().Op1("cross_entropy", at, logits, y))
	if len(c.n.Output) > 1 && c.n.Output[1] != "" {
		c.set(1, c.b().Op1("log_softmax", ir.Attrs{{Name: "axis", Value: ir.Int(1)}}, x))
	}
	return nil
}
