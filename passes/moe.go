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
	// largest expert count of the model's layers), top_k (the most choices per token),
	// layers (how many moe_dispatch ops the forward has) and, when every layer's router
	// limits its choices to groups (top_k's groups and topk_groups: DeepSeek-V3's
	// node-limited routing), groups and topk_groups.
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
		"and the parameters a token reads (dense + experts·K/E), and groups = G, topk_groups = M when every layer " +
		"chooses its experts by a top_k limited to M of G groups (node-limited routing; the largest M). A model " +
		"without moe_dispatch is unchanged.",
	Run: func(m *ir.Module, _ Options) error {
		f := m.Func(ir.ForwardFunc)
		if f == nil {
			return nil
		}
		info, err := markExperts(f)
		if err != nil || info.Layers == 0 {
			return err
		}
		d := ir.Dict{{Name: "experts", Value: ir.Int(info.Experts)}}
		if info.Groups > 1 {
			d = append(d, ir.NamedAttr{Name: "groups", Value: ir.Int(info.Groups)})
		}
		d = append(d, ir.NamedAttr{Name: "layers", Value: ir.Int(info.Layers)}, ir.NamedAttr{Name: "top_k", Value: ir.Int(info.TopK)})
		if info.Groups > 1 {
			d = append(d, ir.NamedAttr{Name: "topk_groups", Value: ir.Int(info.TopKGroups)})
		}
		m.Attrs = m.Attrs.Set(AttrMoE, d) // names in order, as the printer keeps them
		return nil
	},
}

// MoEInfo summarises a model's routing.
type MoEInfo struct {
	Experts int `json:"experts"`
	TopK    int `json:"top_k"`
	Layers  int `json:"layers"`
	// Groups and TopKGroups: every layer's choices lie in at most TopKGroups of Groups
	// equal groups of its experts (node-limited routing); 0 without the limit.
	Groups     int `json:"groups,omitempty"`
	TopKGroups int `json:"topk_groups,omitempty"`
}

// ReadMoE returns the module's moe attribute (zero without one).
func ReadMoE(m *ir.Module) MoEInfo {
	d, ok := m.Attrs.Get(AttrMoE).(ir.Dict)
	if !ok {
		return MoEInfo{}
	}
	at := ir.Attrs(d)
	return MoEInfo{Experts: at.Int("experts", 0), TopK: at.Int("top_k", 0), Layers: at.Int("layers", 0),
		Groups: at.Int("groups", 0), TopKGroups: at.Int("topk_groups", 0)}
}

func markExperts(f *ir.Func) (MoEInfo, error) {
	var info MoEInfo
	limitedLayers := 0 // routers limited to groups so far; −1 once one is not
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
			// The routing limit, when the indices are a grouped top_k's: recorded only if
			// every layer has one (a layer without it can send a token anywhere).
			g, tg := 0, 0
			if d := op.Operands[0].Def; d != nil && d.Name() == "top_k" && op.Operands[0] == d.Results[1] {
				if g, tg = d.Attrs.Int("groups", 1), d.Attrs.Int("topk_groups", 1); g <= 1 {
					g, tg = 0, 0
				}
			}
			switch {
			case g == 0 || limitedLayers < 0:
				limitedLayers = -1
			default:
				limitedLayers++
				info.Groups, info.TopKGroups = max(info.Groups, g), max(info.TopKGroups, tg)
			}
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
	if limitedLayers <= 0 {
		info.Groups, info.TopKGroups = 0, 0
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

// DispatchTraffic is what one mixture-of-experts layer's dispatch all-to-all sends from one
// ep rank per micro-batch, in bytes, and what a dispatch deduplicated per node would send:
// the cost model prices the first, ppc's runtime moves it.
type DispatchTraffic struct {
	// Nodes is how many nodes the ep group spans (1: the all-to-alls stay on NVLink).
	Nodes int `json:"nodes"`
	// Buffer is the rank's [experts, capacity, d] dispatch buffer; the all-to-all sends
	// (ep−1)/ep of it and keeps its own block.
	Buffer float64 `json:"buffer_bytes"`
	// OffNode is the part of Buffer sent to ranks on other nodes, (ep − ep/nodes)/ep of it:
	// the buffer is static, so this is what crosses the inter-node link whatever the router
	// chooses, node-limited or not.
	OffNode float64 `json:"off_node_bytes"`
	// Dedup is the most a dispatch sending one copy of a token per destination node (the
	// copy forwarded to the node's experts over NVLink, as DeepSeek-V3's) would send off the
	// node: tokens·d·min(fan-out, nodes − 1), FanOut the nodes a token's experts can lie on.
	// ppc's dispatch does not
	// deduplicate; this is the bound the routing would allow, for the reports.
	Dedup float64 `json:"dedup_bytes"`
	// FanOut bounds the nodes a token's experts lie on: topk_groups (times the nodes a
	// group spans) with node-limited routing whose groups lie whole on nodes, else top_k.
	FanOut int `json:"fan_out"`
}

// MoEDispatchTraffic returns one layer's dispatch traffic from one ep rank: tokens of width d
// routed to info.TopK of info.Experts experts with capacity rows each, elements of elem
// bytes, over ep ranks each tpcp (tp·cp) consecutive GPUs wide, nodes of gpusPerNode GPUs.
// The expert blocks are in ep order (expert block k on ep rank k), so group g is ep ranks
// [g·ep/G, (g+1)·ep/G): the groups lie whole on nodes when every node holds a whole number of
// them, and each on nodes/G whole nodes when G divides the nodes; otherwise a group may
// straddle nodes and only top_k bounds the fan-out.
func MoEDispatchTraffic(info MoEInfo, tokens, d, capacity, elem, ep, tpcp, gpusPerNode int) DispatchTraffic {
	gpus := max(tpcp, 1) * max(ep, 1)
	nodes := 1
	if gpusPerNode > 0 && gpus > gpusPerNode {
		nodes = (gpus + gpusPerNode - 1) / gpusPerNode
	}
	t := DispatchTraffic{Nodes: nodes, Buffer: float64(info.Experts) * float64(capacity) * float64(d) * float64(elem), FanOut: info.TopK}
	switch g := info.Groups; {
	case g <= 1:
	case g%nodes == 0: // whole groups on each node
		t.FanOut = min(info.TopK, info.TopKGroups)
	case nodes%g == 0: // each group on nodes/g whole nodes
		t.FanOut = min(info.TopK, info.TopKGroups*nodes/g)
	}
	if nodes > 1 {
		t.OffNode = t.Buffer * float64(ep-ep/nodes) / float64(ep)
		t.Dedup = float64(tokens) * float64(d) * float64(elem) * float64(min(t.FanOut, nodes-1))
	}
	return t
}
