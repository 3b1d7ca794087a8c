package passes

import (
	"fmt"

	"ppc.dev/ppc/ir"
)

// Mixture-of-experts analysis: which parameters are experts' and how the router uses them.

const (
	// AttrExpert (unit, on a parameter) marks an expert's weights: a parameter whose first dim
	// is the experts, read by the ops between a moe_dispatch and the moe_combine of its rows.
	// Reports count them apart from the dense parameters (a token reads top_k of them).
	AttrExpert = "expert"
	// AttrMoE (dict, on the module) records the routing the reports price: experts (the
	// largest expert count of the model's layers), top_k (the most choices per token) and
	// layers (how many moe_dispatch ops the forward has).
	AttrMoE = "moe"
)

// MarkExperts finds the expert parameters of @forward.
var MarkExperts = &Pass{
	Name: "mark-experts",
	Doc: "Mark every parameter of @forward that holds experts' weights {expert}: a parameter whose first dim is a " +
		"moe_dispatch's experts and that an op reads on the experts' side of the layer — between the dispatch " +
		"(whose [experts, capacity, d] result starts that side) and the moe_combine that brings the rows back to " +
		"the tokens. The module gets moe = {experts = E, top_k = K, layers = L} (the largest E and K of its layers), " +
		"which the compile summary and the stage table use to count expert parameters apart from the dense ones " +
		"and the parameters a token reads (dense + experts·K/E). A model without moe_dispatch is unchanged.",
	Run: func(m *ir.Module, _ Options) error {
		f := m.Func(ir.ForwardFunc)
		if f == nil {
			return nil
		}
		info, err := markExperts(f)
		if err != nil || info.Layers == 0 {
			return err
		}
		m.Attrs = m.Attrs.Set(AttrMoE, ir.Dict{
			{Name: "experts", Value: ir.Int(info.Experts)},
			{Name: "layers", Value: ir.Int(info.Layers)},
			{Name: "top_k", Value: ir.Int(info.TopK)},
		})
		return nil
	},
}

// MoEInfo summarises a model's routing.
type MoEInfo struct {
	Experts int `json:"experts"`
	TopK    int `json:"top_k"`
	Layers  int `json:"layers"`
}

// ReadMoE returns the module's moe attribute (zero without one).
func ReadMoE(m *ir.Module) MoEInfo {
	d, ok := m.Attrs.Get(AttrMoE).(ir.Dict)
	if !ok {
		return MoEInfo{}
	}
	at := ir.Attrs(d)
	return MoEInfo{Experts: at.Int("experts", 0), TopK: at.Int("top_k", 0), Layers: at.Int("layers", 0)}
}

func markExperts(f *ir.Func) (MoEInfo, error) {
	var info MoEInfo
	param := map[*ir.Value]int{}
	for i, a := range f.Args {
		if f.ArgAttrs[i].Has(ir.AttrParam) {
			param[a] = i
		}
	}
	// experts[v] is the expert count of the layer whose experts' side v is on (0: a token's
	// side). Ops are in order, so one sweep carries it forward; moe_combine ends it.
	experts := map[*ir.Value]int{}
	for _, op := range f.Ops {
		switch op.Name() {
		case "moe_dispatch":
			e := op.Attrs.Int("experts", 0)
			experts[op.Results[0]] = e
			info.Layers++
			info.Experts = max(info.Experts, e)
			continue
		case "moe_slots":
			idx := op.Operands[0].Type
			info.TopK = max(info.TopK, idx.Shape[idx.Rank()-1])
			continue
		case "moe_combine":
			if e := experts[op.Operands[0]]; e > 0 {
				markExpertParams(f, op.Operands[:1], e, param)
			}
			continue
		}
		e := 0
		for _, x := range op.Operands {
			e = max(e, experts[x])
		}
		if e == 0 {
			continue
		}
		markExpertParams(f, op.Operands, e, param)
		for _, r := range op.Results {
			experts[r] = e
		}
	}
	if info.Layers > 0 && info.TopK == 0 {
		return info, fmt.Errorf("mark-experts: the forward dispatches to experts without moe_slots")
	}
	return info, nil
}

// markExpertParams marks the parameters among operands whose first dim is the experts.
func markExpertParams(f *ir.Func, operands []*ir.Value, experts int, param map[*ir.Value]int) {
	for _, x := range operands {
		if i, ok := param[x]; ok && x.Type.Rank() > 0 && x.Type.Shape[0] == experts {
			f.ArgAttrs[i] = f.ArgAttrs[i].Set(AttrExpert, ir.Unit{})
		}
	}
}
