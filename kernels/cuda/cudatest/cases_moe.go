package cudatest

import (
	"fmt"
	"math/rand/v2"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
)

// moeCases: top_k along inner and outer axes (ties among the drawn integers, in f32, bf16,
// f64 and i64), also limited to groups (DeepSeek-V3's node-limited routing), and a router's
// routing on 9 tokens choosing 3 of 5 experts: moe_slots with capacity 2 (dropping) and 9
// (dropless), dispatch with and without weights, combine, and the
// weights' gradient, in f32, bf16 and f64. The slots operands are moe_slots' own result on
// the CPU device, so every case routes as training does.
func moeCases(first int) []Case {
	var cs []Case
	add := func(name string, at ir.Attrs, in []ir.Type, out []ir.Type, abs float64, fix func(in []device.Tensor)) {
		cs = append(cs, Case{fmt.Sprintf("k%d_%s", first+len(cs), name), &device.Spec{Op: ir.MustLookup(name), Attrs: at, In: in, Out: out}, 16, abs, 0, fix})
	}
	for _, d := range []ir.DType{f32, bf, ir.F64, ir.I64} {
		add("top_k", ir.Attrs{{Name: "k", Value: ir.Int(3)}}, []ir.Type{ty(d, 3, 5, 7)}, []ir.Type{ty(d, 3, 5, 3), ty(ir.I64, 3, 5, 3)}, 0, nil)
		add("top_k", ir.Attrs{{Name: "axis", Value: ir.Int(0)}, {Name: "k", Value: ir.Int(2)}, {Name: "largest", Value: ir.BoolAttr(false)}},
			[]ir.Type{ty(d, 3, 5)}, []ir.Type{ty(d, 2, 5), ty(ir.I64, 2, 5)}, 0, nil)
	}
	const tokens, k, experts = 9, 3, 5
	idx := ty(ir.I64, tokens, k)
	for _, capacity := range []int{2, tokens} {
		at := ir.Attrs{{Name: "capacity", Value: ir.Int(capacity)}, {Name: "experts", Value: ir.Int(experts)}}
		add("moe_slots", at, []ir.Type{idx}, []ir.Type{idx, ty(ir.I64, experts)}, 0, func(in []device.Tensor) { route(in[0], experts) })
		for _, d := range []ir.DType{f32, bf, ir.F64} {
			x, w, buf := ty(d, tokens, 4), ty(d, tokens, k), ty(d, experts, capacity, 4)
			abs := map[ir.DType]float64{f32: 1e-6, bf: 1.0 / 64, ir.F64: 1e-12}[d]
			slots := slotsFix(at, 1)
			add("moe_dispatch", at, []ir.Type{x, idx}, []ir.Type{buf}, 0, slots)
			add("moe_dispatch", at, []ir.Type{x, idx, w}, []ir.Type{buf}, abs, slots)
			add("moe_combine", nil, []ir.Type{buf, idx, w}, []ir.Type{x}, abs, slots)
			add("moe_combine", nil, []ir.Type{buf, idx}, []ir.Type{x}, abs, slots)
			add("moe_weights_grad", nil, []ir.Type{x, buf, idx}, []ir.Type{w}, abs, slotsFix(at, 2))
		}
	}
	// Node-limited routing (groups): inner and outer axes, ties, smallest first.
	for _, d := range []ir.DType{f32, bf, ir.F64, ir.I64} {
		add("top_k", ir.Attrs{{Name: "groups", Value: ir.Int(4)}, {Name: "k", Value: ir.Int(3)}, {Name: "topk_groups", Value: ir.Int(2)}},
			[]ir.Type{ty(d, 5, 8)}, []ir.Type{ty(d, 5, 3), ty(ir.I64, 5, 3)}, 0, nil)
		add("top_k", ir.Attrs{{Name: "axis", Value: ir.Int(1)}, {Name: "groups", Value: ir.Int(3)}, {Name: "k", Value: ir.Int(4)},
			{Name: "largest", Value: ir.BoolAttr(false)}, {Name: "topk_groups", Value: ir.Int(2)}}, []ir.Type{ty(d, 2, 12, 3)}, []ir.Type{ty(d, 2, 4, 3), ty(ir.I64, 2, 4, 3)}, 0, nil)
	}
	return cs
}

// route draws each token's distinct experts into the integer tensor t [tokens, k].
func route(t device.Tensor, experts int) {
	r := rand.New(rand.NewPCG(3, 4))
	v := t.I64()
	k := t.Type.Shape[1]
	for tk := range t.Type.Shape[0] {
		for j, e := range r.Perm(experts)[:k] {
			v[tk*k+j] = int64(e)
		}
	}
}

// slotsFix makes operand i the CPU device's moe_slots of a drawn routing.
func slotsFix(at ir.Attrs, i int) func(in []device.Tensor) {
	return func(in []device.Tensor) {
		t := in[i].Type
		idx := device.Tensor{Type: t, Data: make([]byte, t.Bytes())}
		route(idx, at.Int("experts", 0))
		load := ir.Type{DType: ir.I64, Shape: ir.Shape{at.Int("experts", 0)}}
		impl, err := cpu.New().Prepare(&device.Spec{Op: ir.MustLookup("moe_slots"), Attrs: at, In: []ir.Type{t}, Out: []ir.Type{t, load}})
		if err != nil {
			panic(err)
		}
		if err := impl([]device.Tensor{idx}, []device.Tensor{in[i], {Type: load, Data: make([]byte, load.Bytes())}}); err != nil {
			panic(err)
		}
	}
}
