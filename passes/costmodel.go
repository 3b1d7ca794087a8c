package passes

import (
	"ppc.dev/ppc/ir"
)

// The cost model's constants, all in one place. They describe the device the plan is made
// for (by default one modern datacenter GPU and its interconnect); partitioning compares stage
// costs only relative to each other, so what matters is the balance between compute, memory
// traffic and communication, not the absolute numbers.
var CostConstants = struct {
	PeakFLOPs      float64 // floating-point operations per second of matmul-class work
	VectorFLOPs    float64 // operations per second of elementwise and reduction work
	MemBandwidth   float64 // bytes per second between device memory and the cores
	LinkBandwidth  float64 // bytes per second between pipeline neighbours
	LinkLatency    float64 // seconds per point-to-point message
	OptStateBytes  int64   // bytes of gradient plus optimizer state per parameter byte (fp32 AdamW: 4 grad + 8 state per 4 weight)
	BackwardFactor float64 // backward FLOPs per forward FLOP of an op with weights: I ≈ F and W ≈ F
}{
	PeakFLOPs:      300e12,
	VectorFLOPs:    20e12,
	MemBandwidth:   2e12,
	LinkBandwidth:  50e9,
	LinkLatency:    10e-6,
	OptStateBytes:  3,
	BackwardFactor: 2,
}

// OpCost is the estimated cost of one op for one micro-batch.
type OpCost struct {
	FLOPs      float64 // forward floating-point operations
	Bytes      float64 // forward bytes read and written
	ParamBytes int64   // bytes of parameters the op reads (counted once per parameter by callers)
	ActBytes   int64   // bytes of its results (activations a backward pass may keep)
	F, I, W    float64 // estimated seconds: forward, input gradient, weight gradient
}

// CostOf estimates an op's cost from its types: matmuls and convolutions by their
// multiply-adds, everything else by elements and bytes. The time of each phase is the larger
// of compute time and memory time (a roofline).
func CostOf(op *ir.Op, isParam func(*ir.Value) bool) OpCost {
	var c OpCost
	for _, x := range op.Operands {
		c.Bytes += float64(x.Type.Bytes())
	}
	for _, r := range op.Results {
		c.Bytes += float64(r.Type.Bytes())
		c.ActBytes += r.Type.Bytes()
	}
	hasWeights := false
	for _, x := range op.Operands {
		if isParam(x) {
			hasWeights = true
		}
	}
	matrix := false
	switch op.Def.Name {
	case "matmul":
		if len(op.Operands) >= 2 && len(op.Results) == 1 {
			a := op.Operands[0].Type.Shape
			k := 1
			if len(a) > 0 {
				k = a[len(a)-1]
				if op.Attrs.Bool("transpose_a", false) && len(a) >= 2 {
					k = a[len(a)-2]
				}
			}
			c.FLOPs = 2 * float64(op.Results[0].Type.NumElements()) * float64(k)
			matrix = true
		}
	case "conv", "conv_transpose":
		if len(op.Operands) >= 2 && len(op.Results) == 1 {
			w := op.Operands[1].Type.Shape
			per := 1
			for _, d := range w[1:] {
				per *= d
			}
			c.FLOPs = 2 * float64(op.Results[0].Type.NumElements()) * float64(per)
			matrix = true
		}
	default:
		n := 0
		for _, r := range op.Results {
			n += r.Type.NumElements()
		}
		perElem := 1.0
		switch op.Def.Name {
		case "softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy":
			perElem = 5
		case "gelu", "silu", "exp", "tanh", "sigmoid", "erf":
			perElem = 8
		}
		c.FLOPs = perElem * float64(max(n, 1))
	}
	cc := CostConstants
	rate := cc.VectorFLOPs
	if matrix {
		rate = cc.PeakFLOPs
	}
	c.F = max(c.FLOPs/rate, c.Bytes/cc.MemBandwidth)
	// The input gradient costs about one forward; the weight gradient about one forward for
	// ops with weights and nothing otherwise (BackwardFactor = I + W in forwards).
	c.I = c.F
	if hasWeights {
		c.W = c.F * (cc.BackwardFactor - 1)
	}
	return c
}
