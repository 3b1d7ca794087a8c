package passes

import (
	"fmt"

	"ppc.dev/ppc/ir"
)

// StateRecipe is a training recipe's model state in bytes per parameter: the weights the
// forward reads, their gradients, fp32 master weights kept beside 16-bit ones, the optimizer
// state, and an fp32 gradient accumulator kept beside 16-bit gradients.
type StateRecipe struct {
	Name                                     string
	Weights, Grads, Master, Optimizer, Accum float64
}

// The Ultra-Scale Playbook's recipes, which its tables use: mixed precision keeps bf16
// weights and gradients beside fp32 masters (16 bytes), 20 with an fp32 accumulator. ppc's
// own recipe is CompileRecipe's.
var (
	RecipeMixed          = StateRecipe{Name: "bf16 weights and gradients, fp32 master and Adam", Weights: 2, Grads: 2, Master: 4, Optimizer: 8}
	RecipeMixedFP32Accum = StateRecipe{Name: "bf16 weights and gradients, fp32 master, Adam and gradient accumulator", Weights: 2, Grads: 2, Master: 4, Optimizer: 8, Accum: 4}
	RecipeFP32           = StateRecipe{Name: "fp32 weights, gradients and Adam", Weights: 4, Grads: 4, Optimizer: 8}
)

// CompileRecipe is the model state a ppc compile keeps per parameter: in fp32, 4 B weights,
// 4 B gradients and the optimizer's state; in mixed precision Megatron-LM's recipe
// (Float16OptimizerWithFloat16Params, and with ZeRO-1 its distributed optimizer) — 16-bit
// parameters the forward reads, gradients accumulated in grad (fp32: Megatron's
// --accumulate-allreduce-grads-in-fp32; or the 16-bit dtype), and the fp32 main parameters
// with the optimizer state, held by the optimizer. states is the optimizer's fp32 tensors
// per parameter (AdamW 2, SGD with momentum 1, plain SGD 0). ZeRO-1 shards the main
// parameters and optimizer state over dp, ZeRO-2 the gradients too (ModelState): Megatron's
// table of bytes per parameter (docs: distributed optimizer) is 18 and 6 + 12/d for bf16
// parameters with fp32 gradients, 16 and 8 + 8/d in fp32.
func CompileRecipe(precision, grad ir.DType, states int) StateRecipe {
	r := StateRecipe{Weights: 4, Grads: 4, Optimizer: 4 * float64(states)}
	opt := map[int]string{0: "SGD", 1: "SGD momentum", 2: "AdamW"}[states]
	if precision == ir.F32 || precision == ir.F64 || precision == ir.Invalid {
		r.Name = "fp32 params, fp32 grads, fp32 " + opt + " state"
		return r
	}
	r.Weights, r.Master = float64(precision.Size()), 4
	if grad == precision {
		r.Grads = float64(grad.Size())
	} else {
		grad = ir.F32
	}
	name := map[ir.DType]string{ir.BF16: "bf16", ir.F16: "fp16", ir.F32: "fp32"}
	r.Name = fmt.Sprintf("Megatron mixed precision: %s params, %s grads, fp32 main params + %s state", name[precision], name[grad], opt)
	return r
}

// PerParam writes the recipe's bytes per parameter on a rank of dp replicas under ZeRO stage
// zero, as Megatron's table does: "18 B/param (2 params + 4 grads + 12 main params and
// optimizer state)", "6 + 12/d = 9 B/param at dp 4 (…)".
func (r StateRecipe) PerParam(zero, dp int) string {
	parts := fmt.Sprintf("%g params + %g grads + %g main params and optimizer state", r.Weights, r.Grads+r.Accum, r.Master+r.Optimizer)
	if r.Master == 0 {
		parts = fmt.Sprintf("%g params + %g grads + %g optimizer state", r.Weights, r.Grads+r.Accum, r.Optimizer)
	}
	whole, shard := r.Weights+r.Grads+r.Accum+r.Master+r.Optimizer, 0.0
	switch {
	case zero == 3:
		// The parameters too: everything over dp (plus the padding of blocks dp does not divide).
		if dp <= 1 {
			return fmt.Sprintf("%g B/param (%s)", whole, parts)
		}
		return fmt.Sprintf("%g/d = %.4g B/param at dp %d (%s; ZeRO-3 shards all four over dp)", whole, whole/float64(dp), dp, parts)
	case zero >= 2:
		whole, shard = r.Weights, r.Grads+r.Accum+r.Master+r.Optimizer
	case zero == 1:
		whole, shard = r.Weights+r.Grads+r.Accum, r.Master+r.Optimizer
	}
	if shard == 0 || dp <= 1 {
		return fmt.Sprintf("%g B/param (%s)", whole+shard, parts)
	}
	return fmt.Sprintf("%g + %g/d = %.4g B/param at dp %d (%s; ZeRO-%d shards the last %s over dp)", whole, shard, whole+shard/float64(dp), dp, parts,
		zero, map[bool]string{true: "three", false: "one"}[zero >= 2])
}

// StateBytes is one rank's model state.
type StateBytes struct {
	Weights, Grads, Optimizer float64 // Optimizer includes the master weights and the accumulator's share
}

// Total is the sum of the parts.
func (s StateBytes) Total() float64 { return s.Weights + s.Grads + s.Optimizer }

// ModelState is the model state of one data-parallel rank holding params parameters under
// ZeRO stage zero over dp replicas (the playbook's formulas, with k = master + optimizer bytes
// per parameter): stage 0 keeps everything, stage 1 shards the optimizer state and the
// masters (2Ψ + 2Ψ + kΨ/N_d), stage 2 the gradients too (2Ψ + (2+k)Ψ/N_d), stage 3 the
// weights too ((2+2+k)Ψ/N_d). An fp32 accumulator is sharded with the gradients.
func ModelState(params float64, r StateRecipe, zero, dp int) (StateBytes, error) {
	if zero < 0 || zero > 3 {
		return StateBytes{}, fmt.Errorf("ZeRO stage %d: want 0 to 3", zero)
	}
	if dp < 1 {
		return StateBytes{}, fmt.Errorf("%d data-parallel replicas", dp)
	}
	n := float64(dp)
	s := StateBytes{Weights: r.Weights * params, Grads: (r.Grads + r.Accum) * params, Optimizer: (r.Master + r.Optimizer) * params}
	if zero >= 1 {
		s.Optimizer /= n
	}
	if zero >= 2 {
		s.Grads /= n
	}
	if zero >= 3 {
		s.Weights /= n
	}
	return s, nil
}

// TransformerParams is the playbook's parameter count of a simple transformer: h·v (the
// embedding, tied with the head) + L·(12h² + 13h) (attention and MLP weights and biases,
// two LayerNorms) + 2h (the final LayerNorm).
func TransformerParams(layers, hidden, vocab int) float64 {
	h, L, v := float64(hidden), float64(layers), float64(vocab)
	return h*v + L*(12*h*h+13*h) + 2*h
}

// ActivationBytesPerLayer is Korthikanti et al.'s activation memory of one transformer layer
// in 16-bit training without recomputation, in bytes: s·b·h·(34 + 5·a·s/h) on one device —
// per token and hidden unit, 4 for the two LayerNorms' inputs, 4 for the inputs of the QKV
// projection and the MLP, 4 for Q and K, 2 for V, 2 for the output projection's input, 16 for
// the MLP's 4h activations before and after GELU, and 2 for the dropout masks; per attention
// score, 2 for the softmax output, 1 for its dropout mask and 2 for the dropout's output.
// Tensor parallelism over t ranks divides what lies between the column and the row linears
// (24 and the scores' 5·a·s/h) by t; sequence parallelism divides the rest (10) too.
// Selective recomputation drops the scores' term. dropout false is the same model without
// dropout — ppc's transformers — which keeps 32 per token and hidden unit and 2 per score.
func ActivationBytesPerLayer(seq, batch, hidden, heads, tp int, sp, selective, dropout bool) float64 {
	s, b, h, a, t := float64(seq), float64(batch), float64(hidden), float64(heads), float64(max(tp, 1))
	outside, inside, perScore := 10.0, 24.0, 5.0
	if !dropout {
		outside, perScore = 8, 2
	}
	if sp {
		outside /= t
	}
	scores := perScore * a * s / (h * t)
	if selective {
		scores = 0
	}
	return s * b * h * (outside + inside/t + scores)
}

// FullRecomputeActivationBytes is Korthikanti et al.'s activation memory of a stage of
// layers transformer layers under full recomputation, one layer at a time (Megatron's
// --recompute-granularity full, uniform method, one layer per chunk; ppc's split-stages),
// with inflight micro-batches stashed: each layer stashes only its input, 2·s·b·h bytes in
// 16-bit (divided by t under sequence parallelism, whose layer input is split over the tp
// ranks), and the backward rebuilds one layer's activations (ActivationBytesPerLayer) at a
// time beside them. stash is what the micro-batches in flight hold; peak adds the one layer
// being rebuilt. Without per-layer rebuilding the second term would be the whole stage's.
func FullRecomputeActivationBytes(seq, batch, hidden, heads, tp, layers, inflight int, sp, dropout bool) (stash, peak float64) {
	input := 2 * float64(seq) * float64(batch) * float64(hidden)
	if sp {
		input /= float64(max(tp, 1))
	}
	stash = input * float64(layers) * float64(inflight)
	return stash, stash + ActivationBytesPerLayer(seq, batch, hidden, heads, tp, sp, false, dropout)
}
