package cpu

import (
	"fmt"

	"ppc.dev/ppc/ir"
	k "ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
)

// The mixture-of-experts ops (kernels/cpu/moe.go). Floats are f32 and f64; bf16 and f16 run
// through the f32 kernels on widened copies (lowprec.go) — exact, since the kernels only
// copy, scale and sum in a fixed order.

func init() {
	register("top_k", prepareTopK)
	register("moe_slots", prepareMoESlots)
	register("moe_dispatch", prepareMoE(moeDispatch))
	register("moe_combine", prepareMoE(moeCombine))
	register("moe_weights_grad", prepareMoE(moeWeightsGrad))
}

// checkInferred checks a launch's result types against the op's inference, so a kernel
// never indexes past a result a corrupted program declared too small.
func checkInferred(s *device.Spec) error {
	want, err := s.Op.Infer(s.In, s.Attrs)
	if err != nil {
		return err
	}
	if len(want) != len(s.Out) {
		return fmt.Errorf("%s has %d results, want %d", s.Name(), len(s.Out), len(want))
	}
	for i := range want {
		if !want[i].Equal(s.Out[i]) {
			return fmt.Errorf("%s result %d is %s, want %s", s.Name(), i, s.Out[i], want[i])
		}
	}
	return nil
}

func prepareTopK(s *device.Spec) (device.Impl, error) {
	if err := checkInferred(s); err != nil {
		return nil, err
	}
	x := s.In[0]
	axis, _ := ir.NormAxis(s.Attrs.Int("axis", -1), x.Rank())
	outer, n, inner := shapeProd(x.Shape[:axis]), x.Shape[axis], shapeProd(x.Shape[axis+1:])
	kk, largest := s.Attrs.Int("k", 0), s.Attrs.Bool("largest", true)
	groups, topkGroups, err := ir.TopKGroups(s.Attrs, n)
	if err != nil {
		return nil, err
	}
	run := func(in, out []device.Tensor) error { return nil }
	switch x.DType {
	case ir.F32:
		run = func(in, out []device.Tensor) error {
			k.TopKGrouped(in[0].F32(), outer, n, inner, kk, groups, topkGroups, largest, out[0].F32(), out[1].I64())
			return nil
		}
	case ir.F64:
		run = func(in, out []device.Tensor) error {
			k.TopKGrouped(in[0].F64(), outer, n, inner, kk, groups, topkGroups, largest, out[0].F64(), out[1].I64())
			return nil
		}
	case ir.I64:
		run = func(in, out []device.Tensor) error {
			k.TopKGrouped(in[0].I64(), outer, n, inner, kk, groups, topkGroups, largest, out[0].I64(), out[1].I64())
			return nil
		}
	case ir.I32:
		run = func(in, out []device.Tensor) error {
			k.TopKGrouped(in[0].I32(), outer, n, inner, kk, groups, topkGroups, largest, out[0].I32(), out[1].I64())
			return nil
		}
	default:
		return nil, unsupported(s, "f32, f64, i64 and i32", x.DType)
	}
	return run, nil
}

func prepareMoESlots(s *device.Spec) (device.Impl, error) {
	if err := checkInferred(s); err != nil {
		return nil, err
	}
	idx := s.In[0]
	kk, capacity := idx.Shape[idx.Rank()-1], s.Attrs.Int("capacity", 0)
	return func(in, out []device.Tensor) error {
		return k.MoESlots(indicesOf(in[0]), kk, capacity, out[0].I64(), out[1].I64())
	}, nil
}

// moeKernel runs one of the three row kernels on f32 or f64 data with k choices per token
// and rows of d elements.
type moeKernel struct {
	f32 func(in []device.Tensor, slots []int64, k, d int, out []float32) error
	f64 func(in []device.Tensor, slots []int64, k, d int, out []float64) error
	// slotsAt is the slots operand's position; weighted the optional weights' position (0:
	// none).
	slotsAt, weightsAt int
}

func weightsOf[T float32 | float64](in []device.Tensor, at int, view func(device.Tensor) []T) []T {
	if at == 0 || len(in) <= at {
		return nil
	}
	return view(in[at])
}

func f32s(t device.Tensor) []float32 { return t.F32() }
func f64s(t device.Tensor) []float64 { return t.F64() }

var moeDispatch = moeKernel{slotsAt: 1, weightsAt: 2,
	f32: func(in []device.Tensor, slots []int64, kk, d int, out []float32) error {
		return k.MoEDispatch(in[0].F32(), slots, weightsOf(in, 2, f32s), kk, d, out)
	},
	f64: func(in []device.Tensor, slots []int64, kk, d int, out []float64) error {
		return k.MoEDispatch(in[0].F64(), slots, weightsOf(in, 2, f64s), kk, d, out)
	}}

var moeCombine = moeKernel{slotsAt: 1, weightsAt: 2,
	f32: func(in []device.Tensor, slots []int64, kk, d int, out []float32) error {
		return k.MoECombine(in[0].F32(), slots, weightsOf(in, 2, f32s), kk, d, out)
	},
	f64: func(in []device.Tensor, slots []int64, kk, d int, out []float64) error {
		return k.MoECombine(in[0].F64(), slots, weightsOf(in, 2, f64s), kk, d, out)
	}}

var moeWeightsGrad = moeKernel{slotsAt: 2,
	f32: func(in []device.Tensor, slots []int64, kk, d int, out []float32) error {
		return k.MoEWeightsGrad(in[0].F32(), in[1].F32(), slots, kk, d, out)
	},
	f64: func(in []device.Tensor, slots []int64, kk, d int, out []float64) error {
		return k.MoEWeightsGrad(in[0].F64(), in[1].F64(), slots, kk, d, out)
	}}

func prepareMoE(m moeKernel) builder {
	return func(s *device.Spec) (device.Impl, error) {
		if err := checkInferred(s); err != nil {
			return nil, err
		}
		slots := s.In[m.slotsAt]
		kk := slots.Shape[slots.Rank()-1]
		d := s.In[0].Shape[s.In[0].Rank()-1]
		switch s.In[0].DType {
		case ir.F32:
			return func(in, out []device.Tensor) error {
				return m.f32(in, indicesOf(in[m.slotsAt]), kk, d, out[0].F32())
			}, nil
		case ir.F64:
			return func(in, out []device.Tensor) error {
				return m.f64(in, indicesOf(in[m.slotsAt]), kk, d, out[0].F64())
			}, nil
		}
		return nil, unsupported(s, "f32 and f64", s.In[0].DType)
	}
}
