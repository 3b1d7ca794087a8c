package planner

import (
	"errors"
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/compiler"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/passes"
	"ppc.dev/ppc/schedule"
)

// Request is one planning question: a model, a cluster and a global batch, with any
// dimension of the configuration fixed.
type Request struct {
	Model string
	// Load carries --preset and --set (the global batch and sequence are set by the
	// planner: GlobalBatch and Seq).
	Load        compiler.LoadOptions
	Device      passes.DeviceProfile
	GPUs        int
	GlobalBatch int    // sequences per step (0: the model's own batch)
	Seq         int    // tokens per sequence (0: the model's own)
	Precision   string // compute dtype (default bf16)
	Fix         Fixed
	Top         int // plans to return (default 5)
	// VocabMultiple is --make-vocab-size-divisible-by: under tp, a vocabulary tp does not
	// divide is padded to a multiple of it times tp (0: compiler.DefaultVocabMultiple).
	VocabMultiple int
}

// Fixed are the dimensions the user fixed, with ppc compile's flags; zero values leave a
// dimension to the search (SP and Zero use −1 for that, since 0 is a setting).
type Fixed struct {
	PP, DP, TP, V, Microbatches, MicrobatchSize int
	// CP is the context-parallel size (0: searched where each rank keeps at least
	// MinCPTokens tokens of a sequence; 1: none).
	CP int
	// EP is the expert-parallel size, carved from dp (0: searched for a mixture-of-experts
	// model among the sizes dividing its experts and dp that keep tp·cp·ep inside a node;
	// 1: none).
	EP                  int
	SP, Zero            int // −1: search
	Schedule, Recompute string
	// TokenSlices: "" searches (token slices are tried where they can help: fewer
	// micro-batches than pipeline ranks), "1" turns them off, "auto" turns them on with
	// TeraPipe's slicing, explicit lengths fix them.
	TokenSlices string
}

// Config is one point of the search space.
type Config struct {
	PP             int    `json:"pp"`
	DP             int    `json:"dp"`
	CP             int    `json:"cp"`
	EP             int    `json:"ep,omitempty"` // expert parallelism inside dp (0 or 1: none)
	TP             int    `json:"tp"`
	SP             bool   `json:"sp"`
	V              int    `json:"virtual_stages"`
	MicrobatchSize int    `json:"microbatch_size"`
	Microbatches   int    `json:"microbatches"` // per data-parallel replica
	Schedule       string `json:"schedule"`
	Recompute      string `json:"recompute"`
	Zero           int    `json:"zero"`
	TokenSlices    []int  `json:"token_slices,omitempty"` // lengths per micro-batch (TeraPipe)
	Layout         string `json:"layout"`
	sliced         bool   // token slices to be chosen for it
}

// Plan is one configuration with its predicted figures.
type Plan struct {
	Config       Config  `json:"config"`
	StepTime     float64 `json:"step_time"` // seconds
	TokensPerSec float64 `json:"tokens_per_s"`
	TFLOPsPerGPU float64 `json:"tflops_per_gpu"` // model FLOPs (3× the forward's matmuls) per second per GPU, in 10¹²
	MFU          float64 `json:"mfu"`            // of the profile's dense peak at the compute dtype
	// BubbleRatio is BubbleTime / Ideal, the bubble as ppc compile, ppc simulate and the
	// papers give it ((p−1)/m for 1F1B), not a fraction of the step.
	BubbleRatio float64 `json:"bubble_ratio"`
	PeakMemory  []int64 `json:"peak_memory"` // bytes per pipeline rank
	Command     string  `json:"command"`
	// The step's parts (seconds): StepTime = Ideal + BubbleTime + Collectives + Transfers.
	Ideal       float64          `json:"ideal_time"`
	BubbleTime  float64          `json:"bubble_time"`
	Collectives float64          `json:"collective_time"`
	Transfers   float64          `json:"transfer_time"`
	Memory      []codegen.Memory `json:"memory"`
}

// Result is the search's outcome.
type Result struct {
	Model      string  `json:"model"`
	Params     int64   `json:"parameters"`
	Device     string  `json:"device"`
	DeviceMem  int64   `json:"device_memory"` // bytes per GPU
	GPUs       int     `json:"gpus"`
	Batch      int     `json:"global_batch"`
	Seq        int     `json:"seq"`
	Plans      []Plan  `json:"plans"`
	Searched   int     `json:"searched"`  // configurations enumerated
	Fit        int     `json:"fit"`       // of them, those that fit in memory
	Simulated  int     `json:"simulated"` // of those, the ones simulated (the rest could not beat the top K)
	Seconds    float64 `json:"search_seconds"`
	Unfit      *Plan   `json:"fastest_unfit,omitempty"` // the configuration with the best bound that does not fit
	Assumption string  `json:"assumptions"`
	// Routing is plan 1's dispatch traffic for a mixture-of-experts model with node-limited
	// routing or an ep group across nodes (nil otherwise): what each all-to-all moves (and
	// the cost model prices) beside what a dispatch deduplicated per node would.
	Routing *Routing `json:"routing,omitempty"`
}

// Routing is one MoE layer's dispatch traffic from one ep rank per micro-batch of plan 1.
type Routing struct {
	passes.MoEInfo
	passes.DispatchTraffic
}

// InputError is a request the planner cannot satisfy: bad input (exit status 2). Its
// message says what the nearest feasible setting is.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

func inputErr(format string, args ...any) error { return &InputError{fmt.Sprintf(format, args...)} }

// planner holds one search's state.
type planner struct {
	req         Request
	dev         passes.DeviceProfile
	precision   string
	units       int    // units of the model (E, layers, L)
	unitNames   string // the first and last units, for messages: "E, t0 … L"
	causal      bool   // the model can be cut into token slices
	attention   bool   // the model has attention (context parallelism can split it)
	experts     int    // the most experts of a mixture-of-experts layer (0: none)
	fixedSlices []int  // --token-slices lengths, when given
	batch       int
	seq         int
	params      int64 // the model's parameter count
	zero3       bool  // ZeRO-3 is searched: probes measure its runs too
	mu          sync.Mutex
	probes      map[probeKey][2][]unitCost // at one and two sequences per micro-batch
	scaled      map[scaledKey][]unitCost   // at b sequences
	splits      map[splitKey][]int
	slicers     map[int]*passes.SliceCostModel // per tp: the probe's token-slice cost model
	sliceCache  map[[5]int]passes.SliceTimes   // (tp, group, b, l, c) → one unit's slice times
	compiledMem map[string]compiledEntry       // command → ppc compile's memory (token slices)
	scheds      map[schedKey]schedEntry

	// The mixture of experts' routing (mark-experts' record) and the largest moe_dispatch of
	// the one-sequence probe — capacity, row width, tokens, element bytes — which the routing
	// report scales by the micro-batch.
	moe      passes.MoEInfo
	dispatch struct{ capacity, d, tokens, elem int }
}

// load is the request's load options with the global batch set to batch sequences.
func (p *planner) load(batch int) compiler.LoadOptions {
	lo := p.req.Load
	set := map[string]string{}
	for k, v := range lo.Set {
		set[k] = v
	}
	set["batch"] = strconv.Itoa(batch)
	if p.req.Seq > 0 {
		set["seq"] = strconv.Itoa(p.req.Seq)
	}
	lo.Set = set
	return lo
}

// Search plans the request.
func Search(req Request) (*Result, error) {
	start := time.Now()
	if req.GPUs < 1 {
		return nil, inputErr("--gpus %d: want at least 1", req.GPUs)
	}
	if req.Top <= 0 {
		req.Top = 5
	}
	if req.Precision == "" {
		req.Precision = "bf16"
	}
	if ext := strings.ToLower(filepath.Ext(req.Model)); ext != ".ppm" {
		return nil, inputErr("%s: ppc plan reads .ppm models, whose config sets the global batch and sequence (batch, seq); for an ONNX model, predict one configuration with ppc compile --gpu and ppc simulate", req.Model)
	}
	p := &planner{req: req, dev: req.Device, precision: req.Precision, probes: map[probeKey][2][]unitCost{}, scaled: map[scaledKey][]unitCost{}, splits: map[splitKey][]int{}, slicers: map[int]*passes.SliceCostModel{}, sliceCache: map[[5]int]passes.SliceTimes{}, compiledMem: map[string]compiledEntry{}, scheds: map[schedKey]schedEntry{},
		zero3: req.Fix.Zero < 0 || req.Fix.Zero == 3}
	if p.dev.MemBytes <= 0 {
		return nil, inputErr("--gpu %s has no memory size; name a GPU (%s) or give mem_bytes, e.g. %s{mem_bytes=80e9}", p.dev.Name, passes.DeviceNames(), p.dev.Name)
	}
	// A cluster is whole nodes (one partial node: fewer GPUs than a node holds). Tensor
	// parallelism stays inside a node and the cost model prices the links by it, so a count
	// that leaves a remainder describes no machine.
	if n := p.dev.GPUsPerNode; n > 0 && req.GPUs > n && req.GPUs%n != 0 {
		lo := req.GPUs / n * n
		nodes := func(k int) string {
			if k == 1 {
				return "1 node holds"
			}
			return fmt.Sprintf("%d nodes hold", k)
		}
		return nil, inputErr("--gpus %d is not a whole number of nodes of %d GPUs (%s): %s %d, %s %d; give one of those, or the GPUs per node the cluster has (--gpus-per-node)",
			req.GPUs, n, p.dev.Name, nodes(lo/n), lo, nodes(lo/n+1), lo+n)
	}
	// The model as the user sized it: its units, heads, batch and sequence.
	if err := p.inspect(); err != nil {
		return nil, err
	}
	if req.GlobalBatch > 0 {
		p.batch = req.GlobalBatch
	}
	cands, err := p.enumerate()
	if err != nil {
		return nil, err
	}
	res := &Result{Model: req.Model, Params: p.params, Device: p.dev.Name, DeviceMem: p.dev.MemBytes, GPUs: req.GPUs, Batch: p.batch, Seq: p.seq, Searched: len(cands),
		Assumption: "ppc's recipe: " + p.recipe().Name + " (" + p.recipe().PerParam(0, 1) + " before ZeRO); costs from the model's IR on the device profile (GEMM efficiency curve, roofline for other ops, ring collectives); one sequence's probe scaled by the micro-batch size"}
	if err := p.run(cands, res); err != nil {
		return nil, err
	}
	res.Routing = p.routing(res)
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// inspect loads the model once (one micro-batch, no parallelism) to learn its units, heads,
// batch, sequence and parameter count.
func (p *planner) inspect() error {
	lo := p.req.Load
	if p.req.Seq > 0 {
		lo.Set = map[string]string{}
		for k, v := range p.req.Load.Set {
			lo.Set[k] = v
		}
		lo.Set["seq"] = strconv.Itoa(p.req.Seq)
	}
	m, _, err := compiler.Load(p.req.Model, lo)
	if err != nil {
		return err
	}
	f := m.Func(ir.ForwardFunc)
	if f == nil {
		return fmt.Errorf("%s: no @forward", p.req.Model)
	}
	for i, a := range f.Args {
		at := f.ArgAttrs[i]
		switch {
		case at.Has(ir.AttrParam):
			p.params += int64(a.Type.NumElements())
		case at.Has(ir.AttrInput) && p.batch == 0 && a.Type.Rank() >= 1:
			p.batch = a.Type.Shape[0]
		}
	}
	if p.seq, err = passes.SequenceLength(f); err != nil {
		return fmt.Errorf("%s: %v", p.req.Model, err)
	}
	// The units, from a probe partitioned into one stage: the analysis numbers them.
	res, err := compiler.Compile(p.req.Model, compiler.Options{Load: p.load(1), Microbatches: 1, Precision: p.precision,
		GPU: p.dev.Name, StopAfter: "partition"})
	if err != nil {
		return err
	}
	for _, op := range res.Module.Func(ir.ForwardFunc).Ops {
		p.attention = p.attention || op.Name() == "attention"
		if op.Name() == "moe_dispatch" {
			p.experts = max(p.experts, op.Attrs.Int("experts", 0))
			if t := op.Results[0].Type; t.Bytes() > int64(p.dispatch.capacity*p.dispatch.d*p.dispatch.elem) {
				p.dispatch.capacity, p.dispatch.d, p.dispatch.elem = t.Shape[1], t.Shape[2], t.DType.Size()
				p.dispatch.tokens = op.Operands[0].Type.NumElements() / t.Shape[2]
			}
		}
	}
	p.moe = passes.ReadMoE(res.Module)
	if ep := p.req.Fix.EP; ep > 1 {
		switch {
		case p.experts == 0:
			return inputErr("--ep %d: the model has no mixture-of-experts layer (moe_dispatch); use --ep 1", ep)
		case p.experts%ep != 0:
			return inputErr("--ep %d: the model's layers have %d experts, which %d ep ranks do not divide; %s", ep, p.experts, ep, nearestDivisorsOf(p.experts, ep))
		}
	}
	if fx := p.req.Fix; fx.CP > 1 {
		if !p.attention {
			return inputErr("--cp %d: the model has no attention op to split over a ring; use --cp 1", fx.CP)
		}
		if err := passes.CheckCPSplit(p.seq, fx.CP, passes.CPZigzag); err != nil {
			return inputErr("%v", err)
		}
		if fx.TokenSlices != "" && fx.TokenSlices != "1" {
			return inputErr("--token-slices with --cp: use one or the other")
		}
	}
	labels, err := passes.LayerUnits(res.Module)
	if err != nil {
		return err
	}
	p.units = len(labels)
	p.unitNames = strings.Join(labels, ", ")
	if len(labels) > 3 {
		p.unitNames = labels[0] + ", " + labels[1] + " … " + labels[len(labels)-1]
	}
	// Token slices need a causal model: the token-slice analysis decides.
	_, serr := passes.NewSliceCostModel(res.Module, p.dev)
	p.causal = serr == nil
	if f := p.req.Fix.TokenSlices; f != "" && f != "1" {
		if !p.causal {
			return inputErr("%s: --token-slices: %v", p.req.Model, serr)
		}
		if f != "auto" {
			if p.fixedSlices, err = compiler.ResolveTokenSlices(f, p.seq); err != nil {
				return inputErr("%v", err)
			}
		}
	}
	return nil
}

// candidate is a configuration before simulation, with what can be known without it.
type candidate struct {
	Config
	key    probeKey
	bound  float64 // a lower bound on the step time: the busiest rank's compute
	static []int64 // per pipeline rank: the memory that does not depend on the schedule's timing
}

// tpSizes are the tensor-parallel sizes worth trying: divisors of the GPU count and the
// attention heads that stay inside a node.
func (p *planner) tpSizes() []int {
	var out []int
	for t := 1; t <= p.dev.GPUsPerNode && t <= p.req.GPUs; t++ {
		if p.req.GPUs%t == 0 && (p.req.Fix.TP == 0 || p.req.Fix.TP == t) {
			out = append(out, t)
		}
	}
	return out
}

// MinCPTokens is the fewest tokens of a sequence a cp rank keeps when the search chooses cp:
// below it a ring step's block is too small to hide its transfer, and Megatron uses context
// parallelism for long sequences only.
const MinCPTokens = 4096

// cpSizes are the context-parallel sizes worth trying with tp: the fixed one, or 1 and every
// power of two that divides the GPUs left by tp, whose zig-zag chunks (2·cp) divide the
// sequence and whose ranks keep at least MinCPTokens tokens — for a model with attention.
func (p *planner) cpSizes(tp int) []int {
	if f := p.req.Fix.CP; f > 0 {
		return []int{f}
	}
	out := []int{1}
	if !p.attention {
		return out
	}
	for c := 2; c*tp <= p.req.GPUs && p.seq/c >= MinCPTokens; c *= 2 {
		if p.req.GPUs%(c*tp) == 0 && p.seq%(2*c) == 0 {
			out = append(out, c)
		}
	}
	return out
}

// epSizes are the expert-parallel sizes worth trying with tp, cp and dp: the fixed one (when
// it divides dp), or 1 and every power of two dividing the experts and dp whose ep group
// (tp·cp·ep consecutive ranks) stays inside a node — where the all-to-alls run on NVLink, as
// Megatron-Core's recipes keep them — for a mixture-of-experts model.
func (p *planner) epSizes(tp, cp, dp int) []int {
	if f := p.req.Fix.EP; f > 0 {
		if dp%f != 0 {
			return nil
		}
		return []int{f}
	}
	out := []int{1}
	for e := 2; p.experts > 0 && e <= p.experts && tp*cp*e <= p.dev.GPUsPerNode; e *= 2 {
		if p.experts%e == 0 && dp%e == 0 {
			out = append(out, e)
		}
	}
	return out
}

// nearestDivisorsOf names the divisors of n nearest k as --ep flags.
func nearestDivisorsOf(n, k int) string {
	var near []string
	for d := 1; d <= n && len(near) < 2; d++ {
		for _, c := range []int{k - d, k + d} {
			if c >= 1 && c <= n && n%c == 0 && len(near) < 2 {
				near = append(near, fmt.Sprintf("--ep %d", c))
			}
		}
	}
	return "the nearest that do: " + strings.Join(near, " or ")
}

// scheduleChoice is a schedule with its stages per rank.
type scheduleChoice struct {
	name string
	v    int
}

func (p *planner) schedules(pp int) []scheduleChoice {
	all := []scheduleChoice{{"1f1b", 1}, {"gpipe", 1}, {"interleaved-1f1b", 2}, {"interleaved-1f1b", 4}, {"zb-h1", 1}, {"zb-h2", 1}, {"zbv", 2}, {"zb-auto", 1}}
	if pp == 1 {
		all = []scheduleChoice{{"1f1b", 1}}
	}
	var out []scheduleChoice
	for _, s := range all {
		if f := p.req.Fix.Schedule; f != "" && !strings.EqualFold(f, s.name) {
			continue
		}
		if v := p.req.Fix.V; v > 0 && v != s.v {
			if !strings.EqualFold(s.name, "interleaved-1f1b") || p.req.Fix.Schedule == "" {
				continue
			}
			s.v = v
		}
		dup := false
		for _, o := range out {
			dup = dup || o == s
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

// enumerate lists every configuration the fixed dimensions allow.
func (p *planner) enumerate() ([]candidate, error) {
	fx := p.req.Fix
	if fx.TP > 0 && (p.req.GPUs%fx.TP != 0 || fx.TP > p.dev.GPUsPerNode) {
		return nil, inputErr("--tp %d: tensor parallelism must divide --gpus %d and stay inside a node of %d GPUs", fx.TP, p.req.GPUs, p.dev.GPUsPerNode)
	}
	if err := p.checkFixed(); err != nil {
		return nil, err
	}
	var cands []candidate
	tps := p.tpSizes()
	if len(tps) == 0 {
		return nil, inputErr("--tp %d: tensor parallelism must divide --gpus %d and stay inside a node of %d GPUs", p.req.Fix.TP, p.req.GPUs, p.dev.GPUsPerNode)
	}
	recomputes := []string{"none", "selective", "full"}
	if fx.Recompute != "" {
		recomputes = []string{fx.Recompute}
	}
	zeros := []int{0, 1, 2, 3}
	if fx.Zero >= 0 {
		zeros = []int{fx.Zero}
	}
	usable := false
	for _, tp := range tps {
		sps := []bool{false}
		if tp > 1 {
			sps = []bool{false, true}
		}
		if fx.SP >= 0 {
			sps = []bool{fx.SP == 1}
		}
		for _, sp := range sps {
			for _, cp := range p.cpSizes(tp) {
				for pp := 1; pp <= p.req.GPUs/(tp*cp); pp++ {
					if (p.req.GPUs/(tp*cp))%pp != 0 || (fx.PP > 0 && fx.PP != pp) || pp > p.units {
						continue
					}
					dp := p.req.GPUs / (tp * cp * pp)
					if fx.DP > 0 && fx.DP != dp {
						continue
					}
					for b := 1; b <= p.batch; b *= 2 {
						if p.batch%(dp*b) != 0 || (fx.MicrobatchSize > 0 && fx.MicrobatchSize != b) {
							continue
						}
						m := p.batch / (dp * b)
						if fx.Microbatches > 0 && fx.Microbatches != m {
							continue
						}
						usable = true
						for _, sc := range p.schedules(pp) {
							if pp*sc.v > p.units {
								continue
							}
							if _, err := schedule.Generate(sc.name, min(pp, 2), max(m*min(pp, 2)/pp, 1), sc.v); err != nil && m < pp {
								// The schedule needs more micro-batches than this setting has
								// (checked for real when it is built).
								if _, err := schedule.Generate(sc.name, pp, m, sc.v); err != nil {
									continue
								}
							}
							slicings := p.slicings(pp, m, sp, sc)
							if cp > 1 {
								slicings = []bool{false} // a ring has no token-slice form (ppc compile refuses both)
							}
							for _, sliced := range slicings {
								for _, rc := range recomputes {
									for _, z := range zeros {
										if z > 0 && dp == 1 {
											continue
										}
										for _, ep := range p.epSizes(tp, cp, dp) {
											cands = append(cands, candidate{Config: Config{PP: pp, DP: dp, TP: tp, SP: sp, V: sc.v, MicrobatchSize: b, Microbatches: m,
												Schedule: sc.name, Recompute: rc, Zero: z, sliced: sliced && ep == 1, CP: cp, EP: ep}, key: probeKey{tp, sp, rc, cp, ep}})
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	if !usable {
		return nil, inputErr("no configuration of %d GPUs can split the global batch of %d sequences%s: the data-parallel size must divide it; try --gpus %s or --global-batch %s",
			p.req.GPUs, p.batch, fixedNote(fx), nearestGPUs(p.req.GPUs, p.batch), nearestBatch(p.batch, p.req.GPUs))
	}
	if len(cands) == 0 {
		return nil, inputErr("the fixed dimensions%s leave no configuration (a schedule needs enough micro-batches and stages per rank no more than the model's %d units)", fixedNote(fx), p.units)
	}
	return cands, nil
}

// checkFixed checks the fixed dimensions (tp is checked by itself) against the model and
// the cluster before the search, most fundamental first: a pipeline deeper than the model's
// units, then sizes the GPU count cannot hold. Otherwise the search finds no configuration and can only suggest
// other GPU counts or batch sizes, which would not help.
func (p *planner) checkFixed() error {
	fx, gpus := p.req.Fix, p.req.GPUs
	if stages := fx.PP * max(fx.V, 1); fx.PP > 0 && stages > p.units {
		if fx.V > 1 {
			return inputErr("--pp %d --virtual-stages %d needs %d stages, but the model has %d units to cut into pipeline stages (%s): --pp %d at most with %d stages per rank",
				fx.PP, fx.V, stages, p.units, p.unitNames, p.units/fx.V, fx.V)
		}
		return inputErr("--pp %d: the model has %d units to cut into pipeline stages (%s): --pp %d at most", fx.PP, p.units, p.unitNames, p.units)
	}
	for _, d := range []struct {
		flag string
		n    int
	}{{"pp", fx.PP}, {"dp", fx.DP}} {
		if d.n > gpus {
			return inputErr("--%s %d is more than --gpus %d", d.flag, d.n, gpus)
		}
	}
	given := strings.TrimSuffix(strings.TrimPrefix(fixedNote(Fixed{PP: fx.PP, DP: fx.DP, TP: fx.TP}), " ("), ")")
	switch n := max(fx.PP, 1) * max(fx.DP, 1) * max(fx.TP, 1); {
	case fx.PP > 0 && fx.DP > 0 && fx.TP > 0 && n != gpus:
		return inputErr("%s make %d GPUs, not --gpus %d", given, n, gpus)
	case gpus%n != 0 && strings.Count(given, "--") == 1:
		return inputErr("%s does not divide --gpus %d", given, gpus)
	case gpus%n != 0:
		return inputErr("%s make %d GPUs, which does not divide --gpus %d", given, n, gpus)
	}
	if fx.DP > p.batch {
		return inputErr("--dp %d is more than the global batch of %d sequences: each replica needs one at least", fx.DP, p.batch)
	}
	return nil
}

// slicings are the token-slice settings worth trying for a configuration: with fewer
// micro-batches than pipeline ranks (TeraPipe's setting: the pipeline cannot fill with
// micro-batches alone) both, else none; --token-slices decides when given. Token slices
// need one stage per rank in micro-batch order (gpipe or 1f1b) and no sequence parallelism.
func (p *planner) slicings(pp, m int, sp bool, sc scheduleChoice) []bool {
	ok := !sp && sc.v == 1 && (sc.name == "gpipe" || sc.name == "1f1b") && pp > 1 && p.causal
	switch f := p.req.Fix.TokenSlices; {
	case f == "1":
		return []bool{false}
	case f != "":
		if ok {
			return []bool{true}
		}
		return nil
	case ok && m < pp:
		return []bool{false, true}
	}
	return []bool{false}
}

// fixedNote lists the fixed dimensions for messages.
func fixedNote(fx Fixed) string {
	var s []string
	for _, kv := range []struct {
		k string
		v int
	}{{"pp", fx.PP}, {"dp", fx.DP}, {"tp", fx.TP}, {"virtual-stages", fx.V}, {"microbatches", fx.Microbatches}, {"microbatch-size", fx.MicrobatchSize}} {
		if kv.v > 0 {
			s = append(s, fmt.Sprintf("--%s %d", kv.k, kv.v))
		}
	}
	if fx.Schedule != "" {
		s = append(s, "--schedule "+fx.Schedule)
	}
	if fx.TokenSlices != "" {
		s = append(s, "--token-slices "+fx.TokenSlices)
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, " ") + ")"
}

// nearestGPUs suggests GPU counts near n whose data-parallel part can divide batch: powers
// of two and multiples of 8.
func nearestGPUs(n, batch int) string {
	var below, above int
	ok := func(g int) bool { return g >= 1 && (batch%g == 0 || g%8 == 0 && batch%(g/8) == 0) }
	for g := n - 1; g >= 1; g-- {
		if ok(g) {
			below = g
			break
		}
	}
	for g := n + 1; g <= 4*n+8; g++ {
		if ok(g) {
			above = g
			break
		}
	}
	switch {
	case below > 0 && above > 0:
		return fmt.Sprintf("%d or %d", below, above)
	case above > 0:
		return strconv.Itoa(above)
	}
	return strconv.Itoa(max(below, 1))
}

// nearestBatch is the nearest global batch a data-parallel size dividing gpus can split.
func nearestBatch(batch, gpus int) string {
	// From d = 1: the batch given is the one that does not work.
	for d := 1; d < batch; d++ {
		for _, b := range []int{batch + d, batch - d} {
			if b >= 1 && gcd(gpus, b) > 1 { // some data-parallel size > 1 divides both
				return strconv.Itoa(b)
			}
		}
	}
	return strconv.Itoa(gpus)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// run probes every (tp, sp, recompute) the candidates need, then evaluates the candidates
// in order of their lower bound, simulating each until no remaining bound can enter the
// top K.
func (p *planner) run(cands []candidate, res *Result) error {
	// One probe per tensor-parallel layout, split per recompute mode.
	type layout struct {
		tp, cp, ep int
		sp         bool
	}
	modes := map[layout][]string{}
	for _, c := range cands {
		// Each mode's probe holds everything its runs need (full recomputation's one-unit
		// probe rebuilds its unit itself), so a candidate needs only its own mode's.
		l := layout{c.key.tp, c.key.cp, c.key.ep, c.key.sp}
		if !slices.Contains(modes[l], c.key.recompute) {
			modes[l] = append(modes[l], c.key.recompute)
		}
	}
	var list []layout
	for l := range modes {
		list = append(list, l)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].tp != list[j].tp {
			return list[i].tp < list[j].tp
		}
		if list[i].cp != list[j].cp {
			return list[i].cp < list[j].cp
		}
		if list[i].ep != list[j].ep {
			return list[i].ep < list[j].ep
		}
		return !list[i].sp && list[j].sp
	})
	// The probes are independent compiles: run them on every core.
	errs := make([]error, len(list))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, goruntime.NumCPU()))
	for i, l := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			got, err := p.probe(l.tp, l.cp, l.ep, l.sp, modes[l])
			errs[i] = err
			p.mu.Lock()
			for k, u := range got {
				p.probes[k] = u
			}
			p.mu.Unlock()
		}()
	}
	wg.Wait()
	// A tp size the model's shapes do not divide (heads, vocabulary) drops out of the search;
	// when it was fixed, or every size fails, the compile's own message says why.
	var firstErr error
	ok := 0
	for i, err := range errs {
		if err == nil {
			ok++
			continue
		}
		var ie *ir.Error
		if !errors.As(err, &ie) || list[i].tp == 1 {
			return fmt.Errorf("probe compile (tp %d, cp %d, sp %t): %v", list[i].tp, list[i].cp, list[i].sp, err)
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if ok == 0 {
		if p.req.Fix.TP > 0 {
			return inputErr("%v", firstErr) // the user's tp: the compile's message says why
		}
		return p.noSplitError(list[0].tp, firstErr)
	}
	// The token-slice cost model per tp (a probe partitioned one unit per stage).
	for _, c := range cands {
		if !c.sliced {
			continue
		}
		if _, done := p.slicers[c.TP]; done {
			continue
		}
		res, err := compiler.Compile(p.req.Model, compiler.Options{Load: p.load(1), PP: p.units, TP: c.TP, Microbatches: 1, Schedule: "gpipe",
			Precision: p.precision, Partition: "auto", GPU: p.dev.Name, StopAfter: "partition", VocabMultiple: p.req.VocabMultiple})
		var sl *passes.SliceCostModel
		if err == nil {
			sl, err = passes.NewSliceCostModel(res.Module, p.dev)
		}
		if err != nil {
			sl = nil // no token slices at this tp; the unsliced candidates remain
		}
		p.slicers[c.TP] = sl
	}
	// The faster configuration that misses the memory by at most a quarter, reported beside
	// the winner (with its step time, or its bound when it was not simulated).
	unfitScore := 0.0
	nearMiss := func(peak int64) bool { return float64(peak) <= 1.25*float64(p.dev.MemBytes) }
	// Bounds and the memory that does not depend on timing.
	var fit []*evaluation
	var leastMem *evaluation
	for i := range cands {
		e := p.prepare(&cands[i])
		if e == nil {
			continue
		}
		if e.fitsStatic() {
			fit = append(fit, e)
		} else if nearMiss(e.staticPeak()) && (res.Unfit == nil || e.bound < unfitScore) {
			pl := e.unsimulated()
			res.Unfit, unfitScore = &pl, e.bound
		}
		if leastMem == nil || e.staticPeak() < leastMem.staticPeak() {
			leastMem = e
		}
	}
	res.Fit = len(fit)
	if len(fit) == 0 {
		if leastMem == nil {
			return inputErr("no configuration could be built for %d GPUs", p.req.GPUs)
		}
		return inputErr("nothing fits in the %s of a %s: the least memory any configuration needs is %s per GPU (%s); use more GPUs, a GPU with more memory, or a smaller --global-batch",
			codegen.FormatBytes(p.dev.MemBytes), p.dev.Name, codegen.FormatBytes(leastMem.staticPeak()), leastMem.c.describe())
	}
	sort.Slice(fit, func(i, j int) bool { return fit[i].bound < fit[j].bound })
	k := max(p.req.Top, 2)
	type ranked struct {
		pl Plan
		e  *evaluation
	}
	var best []ranked
	var leastUnfit *Plan // the simulated configuration closest to fitting
	for _, e := range fit {
		if len(best) >= k && e.bound >= best[len(best)-1].pl.StepTime {
			break
		}
		pl, ok, built := e.simulate(false)
		if !built {
			continue
		}
		res.Simulated++
		if !ok {
			if nearMiss(slices.Max(pl.PeakMemory)) && (res.Unfit == nil || pl.StepTime < unfitScore) {
				res.Unfit, unfitScore = &pl, pl.StepTime
			}
			if leastUnfit == nil || slices.Max(pl.PeakMemory) < slices.Max(leastUnfit.PeakMemory) {
				leastUnfit = &pl
			}
			continue
		}
		best = append(best, ranked{pl, e})
		sort.SliceStable(best, func(i, j int) bool { return best[i].pl.StepTime < best[j].pl.StepTime })
		if len(best) > k {
			best = best[:k]
		}
	}
	if len(best) == 0 {
		near := ""
		if u := leastUnfit; u != nil {
			r := slices.Index(u.PeakMemory, slices.Max(u.PeakMemory))
			near = fmt.Sprintf(": the closest, %s, needs on pipeline rank %d %s", u.Config.describe(), r, u.Memory[r])
		}
		return inputErr("nothing fits in the %s of a %s once the schedules' activations are counted%s; use more GPUs, a GPU with more memory, or a smaller --global-batch", codegen.FormatBytes(p.dev.MemBytes), p.dev.Name, near)
	}
	// The printed plans with their step times broken down (the runner-up too: the
	// explanation compares it).
	for _, b := range best {
		if len(b.e.c.TokenSlices) > 1 {
			// Token slices: the memory printed is ppc compile's (compiledMemory); a plan
			// that does not fit once compiled is not printed.
			mem, err := p.compiledMemory(b.pl.Config)
			if err != nil {
				continue
			}
			b.e.compiled = mem
		}
		if pl, fits, built := b.e.simulate(true); built && fits {
			res.Plans = append(res.Plans, pl)
		}
	}
	sort.SliceStable(res.Plans, func(i, j int) bool { return res.Plans[i].StepTime < res.Plans[j].StepTime })
	res.Plans = res.Plans[:min(len(res.Plans), max(p.req.Top, 2))]
	if res.Unfit != nil && unfitScore >= res.Plans[0].StepTime {
		res.Unfit = nil // it would not have won anyway
	}
	return nil
}

// noSplitError explains a search whose every configuration needs a tensor-parallel size the
// model cannot be split by (tp, the first, failing with err): the GPU count admits no other,
// given the model's units and the batch. That is the request's problem, not a configuration
// the planner made up: it names the GPU counts near --gpus that some tp the model takes can
// use.
func (p *planner) noSplitError(tp int, err error) error {
	var sizes []int
	for t := 1; t <= p.dev.GPUsPerNode; t++ {
		if p.tpSplits(t) {
			sizes = append(sizes, t)
		}
	}
	feasible := func(g int) bool {
		if g > p.dev.GPUsPerNode && g%p.dev.GPUsPerNode != 0 {
			return false // whole nodes
		}
		for _, t := range sizes {
			for dp := 1; t <= g && dp <= g/t; dp++ {
				if g%(t*dp) == 0 && p.batch%dp == 0 && g/(t*dp) <= p.units {
					return true
				}
			}
		}
		return false
	}
	var near []string
	for g := p.req.GPUs - 1; g >= 1; g-- {
		if feasible(g) {
			near = append(near, strconv.Itoa(g))
			break
		}
	}
	for g := p.req.GPUs + 1; g <= 4*p.req.GPUs+8; g++ {
		if feasible(g) {
			near = append(near, strconv.Itoa(g))
			break
		}
	}
	msg := fmt.Sprintf("no configuration of %d GPUs fits the model: with at most %d pipeline stages (its units, %s) and a data-parallel size dividing the global batch of %d, every one needs tensor parallelism %d, and %v",
		p.req.GPUs, p.units, p.unitNames, p.batch, tp, err)
	if len(sizes) > 0 {
		msg += fmt.Sprintf("; the model splits over tp %s", joinInts(sizes))
	}
	if len(near) > 0 {
		msg += fmt.Sprintf("; try --gpus %s", strings.Join(near, " or "))
	}
	return inputErr("%s", msg)
}

// tpSplits reports whether the model's tp passes split it over tp ranks (a compile through
// pipeline partitioning, one stage).
func (p *planner) tpSplits(tp int) bool {
	if tp == 1 {
		return true
	}
	_, err := compiler.Compile(p.req.Model, compiler.Options{Load: p.load(1), TP: tp, Microbatches: 1, Precision: p.precision,
		GPU: p.dev.Name, StopAfter: "partition", VocabMultiple: p.req.VocabMultiple})
	return err == nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// describe is a configuration in a few words.
func (c Config) describe() string {
	s := fmt.Sprintf("pp %d, dp %d, tp %d", c.PP, c.DP, c.TP)
	if c.CP > 1 {
		s = fmt.Sprintf("pp %d, dp %d, cp %d, tp %d", c.PP, c.DP, c.CP, c.TP)
	}
	if c.EP > 1 {
		s = strings.Replace(s, fmt.Sprintf("dp %d", c.DP), fmt.Sprintf("dp %d (ep %d)", c.DP, c.EP), 1)
	}
	if c.SP {
		s += " with sp"
	}
	s += fmt.Sprintf(", %s", c.Schedule)
	if c.V > 1 {
		s += fmt.Sprintf(" v %d", c.V)
	}
	s += fmt.Sprintf(", %d micro-batches of %d, recompute %s, ZeRO %d", c.Microbatches, c.MicrobatchSize, c.Recompute, c.Zero)
	return s
}

// recipe is the model state ppc plan's commands compile: the precision's, AdamW, fp32
// gradients.
func (p *planner) recipe() passes.StateRecipe {
	dt, err := passes.ParsePrecision(p.precision)
	if err != nil {
		dt = ir.BF16
	}
	return passes.CompileRecipe(dt, ir.F32, 2)
}

// peakRate is the device's dense matmul rate at the compute dtype.
func (p *planner) peakRate() float64 {
	dt, err := passes.ParsePrecision(p.precision)
	if err != nil {
		dt = ir.BF16
	}
	return p.dev.MatmulRate(dt)
}

// routing reports plan 1's dispatch traffic (passes.MoEDispatchTraffic) when the model routes
// node-limited or plan 1's ep group spans nodes. The probe's one-sequence buffer is scaled
// by the micro-batch size, as every probe figure is.
func (p *planner) routing(res *Result) *Routing {
	if p.moe.Layers == 0 || len(res.Plans) == 0 {
		return nil
	}
	c := res.Plans[0].Config
	b := max(c.MicrobatchSize, 1)
	t := passes.MoEDispatchTraffic(p.moe, b*p.dispatch.tokens, p.dispatch.d, b*p.dispatch.capacity, p.dispatch.elem,
		max(c.EP, 1), max(c.TP, 1)*max(c.CP, 1), p.dev.GPUsPerNode)
	if p.moe.Groups <= 1 && t.Nodes == 1 {
		return nil
	}
	return &Routing{MoEInfo: p.moe, DispatchTraffic: t}
}
