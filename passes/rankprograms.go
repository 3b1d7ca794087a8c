package passes

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
)

// AttrSchedule (on a module) is the pipeline schedule rank-programs follows:
// {placement = [pipeline rank of each stage], actions = ["0F0 0F1 0I0 …" per pipeline rank]},
// actions in PyTorch's grammar (F, I, W, B = I then W).
const AttrSchedule = "schedule"

// RankProgramPrefix names the functions rank-programs writes: @rank0, @rank1, …
const RankProgramPrefix = "rank"

// RankPrograms writes each pipeline rank's step as a function of the module.
var RankPrograms = &Pass{
	Name: "rank-programs",
	Doc: "After split-stages, write what each pipeline rank does in one training step as a function @rank<r>: " +
		"its F, I and W functions in the order of the module's schedule attribute (`run {func, microbatch}`, " +
		"whose operands and results are the function's ports), each value another rank produces received " +
		"right before the first run that needs it (`recv {peer, tag, port, microbatch}`) and each value another " +
		"rank needs sent right after the run that produces it (`send`). Sends never wait, so a schedule whose " +
		"compute order is valid cannot deadlock. Each {grad} result of a run is added into the rank's accumulator of that " +
		"gradient (fp32, zero at the start of the step; see the op grad_reduce_scatter for ZeRO-2's exception). The tensor-parallel collectives are inside the " +
		"per-stage functions; what the rank does with its gradients and its optimizer the passes after this one add " +
		"(grad-reduce, tied-grads, rank-optimizer). Code generation lowers these functions (every dp × tp replica of " +
		"pipeline rank r runs @rank<r>). Peers are pipeline ranks; tag = port index · M + micro-batch.",
	Run: func(m *ir.Module, _ Options) error {
		placement, actions, err := ReadSchedule(m)
		if err != nil {
			return err
		}
		for _, f := range m.Funcs {
			if IsRankProgram(f) {
				return fmt.Errorf("the module already has rank programs (@%s)", f.Name)
			}
		}
		progs, err := buildRankPrograms(m, placement, actions)
		if err != nil {
			return err
		}
		m.Funcs = append(m.Funcs, progs...)
		return nil
	},
}

// RankAction is one compute action of a pipeline rank.
type RankAction struct {
	Kind       string // F, I, W or B
	Stage      int
	Microbatch int
}

func (a RankAction) String() string { return fmt.Sprintf("%d%s%d", a.Stage, a.Kind, a.Microbatch) }

// IsRankProgram reports whether f is a function rank-programs wrote.
func IsRankProgram(f *ir.Func) bool { return f.Attrs.Has("rank") }

// SetSchedule records the schedule in the module attribute rank-programs reads.
func SetSchedule(m *ir.Module, placement []int, actions [][]RankAction) {
	var rows ir.List
	for _, acts := range actions {
		parts := make([]string, len(acts))
		for i, a := range acts {
			parts[i] = a.String()
		}
		rows = append(rows, ir.String(strings.Join(parts, " ")))
	}
	m.Attrs = m.Attrs.Set(AttrSchedule, ir.Dict{{Name: "actions", Value: rows}, {Name: "placement", Value: ir.Ints(placement...)}})
}

// ReadSchedule reads the module's schedule attribute.
func ReadSchedule(m *ir.Module) ([]int, [][]RankAction, error) {
	d, ok := m.Attrs.Get(AttrSchedule).(ir.Dict)
	if !ok {
		return nil, nil, fmt.Errorf("the module has no %s attribute {placement = […], actions = […]} (ppc compile sets it)", AttrSchedule)
	}
	placement := ir.Attrs(d).Ints("placement")
	rows, _ := ir.Attrs(d).Get("actions").(ir.List)
	var actions [][]RankAction
	for r, row := range rows {
		s, ok := row.(ir.String)
		if !ok {
			return nil, nil, fmt.Errorf("schedule: actions of rank %d must be a string", r)
		}
		var acts []RankAction
		for _, w := range strings.Fields(string(s)) {
			i := strings.IndexAny(w, "FIWB")
			if i <= 0 || i == len(w)-1 {
				return nil, nil, fmt.Errorf("schedule: rank %d: bad action %q (want e.g. 0F3)", r, w)
			}
			st, err1 := strconv.Atoi(w[:i])
			mb, err2 := strconv.Atoi(w[i+1:])
			if err1 != nil || err2 != nil || st < 0 || mb < 0 || st >= len(placement) {
				return nil, nil, fmt.Errorf("schedule: rank %d: bad action %q", r, w)
			}
			acts = append(acts, RankAction{Kind: w[i : i+1], Stage: st, Microbatch: mb})
		}
		actions = append(actions, acts)
	}
	for s, r := range placement {
		if r < 0 || r >= len(actions) {
			return nil, nil, fmt.Errorf("schedule: stage %d placed on rank %d of %d", s, r, len(actions))
		}
	}
	return placement, actions, nil
}

// PortMap is where each port of the per-stage functions is produced and consumed (function
// names), and its index (for tags).
type PortMap struct {
	Producer  map[string]string
	Consumers map[string][]string
	Index     map[string]int
}

// PortsOf maps the ports of m's per-stage functions, checking each consumed port has a
// producer.
func PortsOf(m *ir.Module) (PortMap, error) {
	pm := PortMap{Producer: map[string]string{}, Consumers: map[string][]string{}, Index: map[string]int{}}
	for _, f := range m.Funcs {
		if f.Attrs.Str("kind", "") == "" {
			continue
		}
		for i := range f.Results {
			if p := f.ResultAttrs[i].Str(AttrPort, ""); p != "" {
				if _, dup := pm.Producer[p]; !dup {
					pm.Index[p] = len(pm.Index)
				}
				pm.Producer[p] = f.Name
			}
		}
		for i := range f.Args {
			if p := f.ArgAttrs[i].Str(AttrPort, ""); p != "" {
				pm.Consumers[p] = append(pm.Consumers[p], f.Name)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pm.Consumers)) {
		if _, ok := pm.Producer[p]; !ok {
			return pm, fmt.Errorf("port %q is consumed by @%s but produced nowhere", p, pm.Consumers[p][0])
		}
	}
	return pm, nil
}

// buildRankPrograms writes @rank<r> for every pipeline rank r of the schedule.
func buildRankPrograms(m *ir.Module, placement []int, actions [][]RankAction) ([]*ir.Func, error) {
	nmb, err := Microbatches(m)
	if err != nil {
		return nil, err
	}
	pm, err := PortsOf(m)
	if err != nil {
		return nil, err
	}
	for _, f := range m.Funcs {
		if k := f.Attrs.Str("kind", ""); k != "" {
			if st := f.Attrs.Int("stage", 0); st < 0 || st >= len(placement) {
				return nil, ir.ErrorAt(m.Source, f.Loc, "@%s is stage %d, but the schedule places %d stage(s)", f.Name, st, len(placement))
			}
		}
	}
	// A token-sliced module's schedule runs units: unit u is slice u mod M of micro-batch
	// u div M, and its values are those of the micro-batch (each slice has its own ports).
	sliced := TokenSlices(m) != nil
	nslices := max(len(TokenSlices(m)), 1)
	// The module's functions by name (m.Func scans them all: with thousands of stage and
	// token-slice functions that scan was a tenth of planning GPT-3 175B's configurations).
	funcs := make(map[string]*ir.Func, len(m.Funcs))
	for _, f := range m.Funcs {
		if funcs[f.Name] == nil { // the first of a name, as m.Func
			funcs[f.Name] = f
		}
	}
	rankOf := func(name string) int { return placement[funcs[name].Attrs.Int("stage", 0)] }
	tag := func(p string, mb int) ir.Int { return ir.Int(pm.Index[p]*nmb + mb) }
	runDef, sendDef, recvDef := ir.MustLookup("run"), ir.MustLookup("send"), ir.MustLookup("recv")
	var progs []*ir.Func
	for r, acts := range actions {
		fn := ir.NewFunc(RankProgramPrefix + strconv.Itoa(r))
		fn.Attrs = ir.Attrs{{Name: "rank", Value: ir.Int(r)}}
		type key struct {
			port string
			mb   int
		}
		ports := map[key]*ir.Value{}
		for _, a := range acts {
			if placement[a.Stage] != r {
				return nil, fmt.Errorf("rank %d: action %s runs stage %d, which is placed on rank %d", r, a, a.Stage, placement[a.Stage])
			}
			if a.Microbatch >= nmb*nslices {
				if nslices > 1 {
					return nil, fmt.Errorf("rank %d: action %s: unit out of range (%d micro-batches of %d token slices)", r, a, nmb, nslices)
				}
				return nil, fmt.Errorf("rank %d: action %s: micro-batch out of range (%d micro-batches)", r, a, nmb)
			}
			slice := ir.NoSlice
			if sliced {
				slice = a.Microbatch % nslices
			}
			kinds := []string{a.Kind}
			if a.Kind == "B" {
				kinds = []string{KindI, KindW}
			}
			for _, k := range kinds {
				f := funcs[SliceFuncName(k, a.Stage, slice)]
				if f == nil {
					continue // a stage without parameters has no W function
				}
				mb := a.Microbatch / nslices
				var in []*ir.Value
				for i, arg := range f.Args {
					p := f.ArgAttrs[i].Str(AttrPort, "")
					if p == "" {
						continue
					}
					v, ok := ports[key{p, mb}]
					if !ok {
						producer := pm.Producer[p]
						pr := rankOf(producer)
						if pr == r {
							return nil, ir.ErrorAt(m.Source, f.Loc, "rank %d: @%s needs %q of micro-batch %d before @%s computes it on this rank (action %s of the schedule)", r, f.Name, p, mb, producer, a)
						}
						op := ir.NewOp(recvDef, nil, ir.Attrs{{Name: "microbatch", Value: ir.Int(mb)}, {Name: "peer", Value: ir.Int(pr)},
							{Name: "port", Value: ir.String(p)}, {Name: "tag", Value: tag(p, mb)}, {Name: "type", Value: ir.TypeAttr(arg.Type)}}, []ir.Type{arg.Type})
						v = op.Results[0]
						v.Name = fmt.Sprintf("%s#%d", p, mb)
						fn.Ops = append(fn.Ops, op)
						ports[key{p, mb}] = v
					}
					in = append(in, v)
				}
				var outTypes []ir.Type
				var outPorts []string
				for i, res := range f.Results {
					if p := f.ResultAttrs[i].Str(AttrPort, ""); p != "" {
						outTypes = append(outTypes, res.Type)
						outPorts = append(outPorts, p)
					}
				}
				runAttrs := ir.Attrs{{Name: "func", Value: ir.String(f.Name)}, {Name: "microbatch", Value: ir.Int(mb)}}
				if slice != ir.NoSlice {
					runAttrs = runAttrs.Set("slice", ir.Int(slice))
				}
				run := ir.NewOp(runDef, in, runAttrs, outTypes)
				run.Stage = a.Stage
				fn.Ops = append(fn.Ops, run)
				for i, p := range outPorts {
					v := run.Results[i]
					v.Name = fmt.Sprintf("%s#%d", p, mb)
					ports[key{p, mb}] = v
					sent := map[int]bool{}
					for _, c := range pm.Consumers[p] {
						if cr := rankOf(c); cr != r && !sent[cr] {
							sent[cr] = true
							fn.Ops = append(fn.Ops, ir.NewOp(sendDef, []*ir.Value{v}, ir.Attrs{{Name: "microbatch", Value: ir.Int(mb)},
								{Name: "peer", Value: ir.Int(cr)}, {Name: "port", Value: ir.String(p)}, {Name: "tag", Value: tag(p, mb)}}, nil))
						}
					}
				}
			}
		}
		progs = append(progs, fn)
	}
	return progs, nil
}
