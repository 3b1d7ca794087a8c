package passes

import (
	"ppc.dev/ppc/ir"
)

// SplitCost is what split-stages decides about one stage that the partition's per-op
// estimates (f, i, w) do not show: the forward ops its backward recomputes, and the bytes
// its F stashes for its backward and sends to the next stage, per micro-batch.
type SplitCost struct {
	Recompute   float64 // seconds of recomputed forward ops in I and W
	Stash, Send int64   // bytes per micro-batch
}

// SplitCosts reads per-stage SplitCosts off a module after split-stages, on the device dev.
// Code generation adds Recompute to each stage's input-gradient time (the backward that runs
// the recomputation); the planner reads all three off its probe compile.
func SplitCosts(m *ir.Module, dev DeviceProfile) ([]SplitCost, error) {
	stages := m.Attrs.Int("stages", 0)
	out := make([]SplitCost, max(stages, 0))
	at := func(s int) *SplitCost {
		for s >= len(out) {
			out = append(out, SplitCost{})
		}
		return &out[s]
	}
	axis := func(a string) int { return meshSize(m, a) }
	funcs := map[string]*ir.Func{}
	for _, f := range m.Funcs {
		kind := f.Attrs.Str("kind", "")
		if kind == "" {
			continue
		}
		funcs[f.Name] = f
		if kind == KindF {
			continue
		}
		weight := paramDerived(f)
		s := f.Attrs.Int("stage", 0)
		for _, op := range f.Ops {
			if op.Remat {
				at(s).Recompute += dev.CostOf(op, func(v *ir.Value) bool { return weight[v] }, axis).F
			}
		}
	}
	pm, err := PortsOf(m)
	if err != nil {
		return nil, err
	}
	for p, consumers := range pm.Consumers {
		prod := funcs[pm.Producer[p]]
		if prod == nil || prod.Attrs.Str("kind", "") != KindF {
			continue
		}
		ps := prod.Attrs.Int("stage", 0)
		var bytes int64
		for i := range prod.Results {
			if prod.ResultAttrs[i].Str(AttrPort, "") == p {
				bytes = prod.Results[i].Type.Bytes()
			}
		}
		stashed, sent := map[int]bool{}, false
		for _, c := range consumers {
			cf := funcs[c]
			if cf == nil {
				continue
			}
			cs := cf.Attrs.Int("stage", 0)
			if cf.Attrs.Str("kind", "") != KindF {
				stashed[cs] = true
			} else if cs != ps {
				sent = true
			}
		}
		for s := range stashed {
			at(s).Stash += bytes
		}
		if sent {
			at(ps).Send += bytes
		}
	}
	return out, nil
}

// paramDerived marks f's parameters and the values computed from parameters alone (a cast
// or transposed weight): an op reading one has a weight gradient.
func paramDerived(f *ir.Func) map[*ir.Value]bool {
	param := map[*ir.Value]bool{}
	for i, a := range f.Args {
		param[a] = f.ArgAttrs[i].Has(ir.AttrParam)
	}
	for _, op := range f.Ops {
		side := len(op.Operands) > 0
		for _, x := range op.Operands {
			side = side && param[x]
		}
		for _, r := range op.Results {
			param[r] = side
		}
	}
	return param
}
