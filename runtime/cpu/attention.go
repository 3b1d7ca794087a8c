package cpu

import (
	"fmt"
	"math"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// The fused attention and its gradient (kernels/cpu/attention.go). bf16 and f16 run through
// the f32 kernel on widened copies (lowprec.go), whose log-sum-exp is f32 already.

func init() {
	register("attention", prepareAttention(false))
	register("attention_grad", prepareAttention(true))
}

// attentionParams checks a launch's q, k, v and mask (operand maskAt, when present) and
// returns the kernel's parameters.
func attentionParams(s *device.Spec, maskAt int) (*k.AttentionParams, error) {
	d, mask, err := ir.AttentionOperands(s.In, maskAt)
	if err != nil {
		return nil, err
	}
	q := s.In[0]
	if q.DType != ir.F32 && q.DType != ir.F64 {
		return nil, unsupported(s, "f32 and f64", q.DType)
	}
	p := &k.AttentionParams{Batch: d.Batch, Hq: d.Hq, Hkv: d.Hkv, Sq: d.Sq, Skv: d.Skv, D: d.D, Dv: d.Dv,
		Scale: s.Attrs.Float("scale", 1/math.Sqrt(float64(d.D))), Causal: s.Attrs.Bool("causal", false)}
	p.MaskOff = make([]int, d.Batch)
	if mask != nil {
		// The mask's element strides against the scores [..., Hq, Sq, Skv] (0 where it
		// broadcasts), and its offset for each index of the flattened leading dims.
		r := q.Rank()
		scores := append(append(ir.Shape{}, q.Shape[:r-1]...), d.Skv)
		st := k.BroadcastStrides(mask.Shape, scores)
		p.MaskStrides = [3]int{st[r-3], st[r-2], st[r-1]}
		lead := scores[:r-3]
		coord := make([]int, len(lead))
		for b := range p.MaskOff {
			off := 0
			for i, c := range coord {
				off += c * st[i]
			}
			p.MaskOff[b] = off
			for i := len(coord) - 1; i >= 0; i-- {
				if coord[i]++; coord[i] < lead[i] {
					break
				}
				coord[i] = 0
			}
		}
	}
	return p, nil
}

func prepareAttention(grad bool) builder {
	return func(s *device.Spec) (device.Impl, error) {
		maskAt := 3
		if grad {
			maskAt = 6
		}
		p, err := attentionParams(s, maskAt)
		if err != nil {
			return nil, err
		}
		want, err := s.Op.Infer(s.In, s.Attrs)
		if err != nil {
			return nil, err
		}
		if len(want) != len(s.Out) {
			return nil, fmt.Errorf("%s has %d results, want %d", s.Name(), len(s.Out), len(want))
		}
		for i := range want {
			if !want[i].Equal(s.Out[i]) {
				return nil, fmt.Errorf("%s result %d is %s, want %s", s.Name(), i, s.Out[i], want[i])
			}
		}
		hasMask := len(s.In) > maskAt
		addMask := hasMask && s.In[maskAt].DType != ir.Bool
		if grad {
			return byDType(s.In[0].DType, attentionGradImpl[float32](p, hasMask, addMask), attentionGradImpl[float64](p, hasMask, addMask)), nil
		}
		return byDType(s.In[0].DType, attentionImpl[float32](p, hasMask, addMask), attentionImpl[float64](p, hasMask, addMask)), nil
	}
}

// withMask returns the launch's parameters with the boolean mask's bytes, and the additive
// mask, from the operand at i.
func withMask[T k.Float](p *k.AttentionParams, in []device.Tensor, i int, hasMask, addMask bool) (*k.AttentionParams, []T) {
	if !hasMask {
		return p, nil
	}
	if addMask {
		return p, floats[T](in[i])
	}
	q := *p
	q.MaskBool = in[i].Data
	return &q, nil
}

func attentionImpl[T k.Float](p *k.AttentionParams, hasMask, addMask bool) device.Impl {
	return func(in, out []device.Tensor) error {
		pp, add := withMask[T](p, in, 3, hasMask, addMask)
		k.AttentionForward(pp, floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), add, floats[T](out[0]), floats[T](out[1]))
		return nil
	}
}

func attentionGradImpl[T k.Float](p *k.AttentionParams, hasMask, addMask bool) device.Impl {
	return func(in, out []device.Tensor) error {
		pp, add := withMask[T](p, in, 6, hasMask, addMask)
		k.AttentionBackward(pp, floats[T](in[0]), floats[T](in[1]), floats[T](in[2]), floats[T](in[3]), floats[T](in[4]),
			floats[T](in[5]), add, floats[T](out[0]), floats[T](out[1]), floats[T](out[2]))
		return nil
	}
}
