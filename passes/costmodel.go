package passes

import (
	"fmt"
	"math"
	"strconv"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/schedule"
)

// DeviceProfile describes the device a plan's time estimates assume: the rates of one
// accelerator and of the link between pipeline neighbours. Partitioning compares stage costs
// only relative to each other, so what matters there is the balance between compute, memory
// traffic and communication; the absolute numbers matter to the step time the compile
// summary and plan.json report, which is why the profile is named wherever a time is shown.
type DeviceProfile struct {
	Name          string  `json:"name"`
	PeakFLOPs     float64 `json:"peak_flops"`     // floating-point operations per second of matmul-class work
	VectorFLOPs   float64 `json:"vector_flops"`   // operations per second of elementwise and reduction work
	MemBandwidth  float64 `json:"mem_bandwidth"`  // bytes per second between device memory and the cores
	LinkBandwidth float64 `json:"link_bandwidth"` // bytes per second between pipeline neighbours
	LinkLatency   float64 `json:"link_latency"`   // seconds per point-to-point message
	// Collectives: tensor-parallel groups stay inside a node (NVLink/NVSwitch); data-parallel
	// groups span nodes (InfiniBand) once the ranks outgrow one.
	IntraNodeBandwidth float64 `json:"intra_node_bandwidth"` // bytes per second per rank, inside a node
	IntraNodeLatency   float64 `json:"intra_node_latency"`   // seconds per ring step inside a node
	InterNodeBandwidth float64 `json:"inter_node_bandwidth"` // bytes per second per rank, between nodes
	InterNodeLatency   float64 `json:"inter_node_latency"`   // seconds per ring step between nodes
	// Dense matmul rates by dtype (tensor cores; fp32 without TF32); 0 falls back to
	// PeakFLOPs, the one rate of profiles written before these existed.
	PeakFP32 float64 `json:"peak_fp32,omitempty"`
	PeakBF16 float64 `json:"peak_bf16,omitempty"`
	PeakFP16 float64 `json:"peak_fp16,omitempty"`
	// MemBytes is the device memory; GPUsPerNode the GPUs sharing a node's NVLink domain.
	MemBytes    int64 `json:"mem_bytes,omitempty"`
	GPUsPerNode int   `json:"gpus_per_node,omitempty"`
	// What the generation achieves of those peaks (0: the package defaults): the fraction of
	// the dense matmul peak large GEMMs reach (GEMMPeakEfficiency by default), the fraction
	// of a link's bandwidth ring collectives move (NCCL's bus bandwidth over the link's; 1 by
	// default), and the seconds each kernel launch adds (its launch and tail; 0 by default).
	GEMMEff       float64 `json:"gemm_efficiency,omitempty"`
	CollectiveEff float64 `json:"collective_efficiency,omitempty"`
	LaunchSeconds float64 `json:"launch_seconds,omitempty"`
	Source        string  `json:"source,omitempty"` // where the figures come from
}

// MatmulRate is the dense matmul rate for results of dtype dt.
func (d DeviceProfile) MatmulRate(dt ir.DType) float64 {
	r := 0.0
	switch dt {
	case ir.F32, ir.F64:
		r = d.PeakFP32
	case ir.BF16:
		r = d.PeakBF16
	case ir.F16:
		r = d.PeakFP16
	}
	if r == 0 {
		return d.PeakFLOPs
	}
	return r
}

// CollectiveTime is the time of a ring collective over n ranks on a tensor of the given
// bytes (the whole tensor: the operand of an all-reduce or reduce-scatter, the result of an
// all-gather): an all-reduce moves 2(n−1)/n of it through each rank's link in 2(n−1) steps,
// an all-gather or reduce-scatter (n−1)/n in n−1 steps, each step paying the link's latency.
func (d DeviceProfile) CollectiveTime(kind string, bytes float64, n int, intraNode bool) float64 {
	if n <= 1 {
		return 0
	}
	bw, lat := d.InterNodeBandwidth, d.InterNodeLatency
	if intraNode {
		bw, lat = d.IntraNodeBandwidth, d.IntraNodeLatency
	}
	if d.CollectiveEff > 0 {
		bw *= d.CollectiveEff
	}
	steps := float64(n - 1)
	share := steps / float64(n) * bytes / bw
	switch kind {
	case "all_reduce":
		return 2*share + 2*steps*lat
	case "all_gather", "reduce_scatter", "all_to_all":
		// An all-to-all keeps 1/n of its operand and exchanges the rest with the n−1 others
		// (pairwise, one latency each): the bytes of a gather.
		return share + steps*lat
	}
	return 0
}

// String names the profile with its rates, e.g. "a100-like (300 TFLOP/s matmul, 2 TB/s
// memory, links 50 GB/s + 10 µs)".
func (d DeviceProfile) String() string {
	matmul := siRate(d.PeakFLOPs, "FLOP/s") + " matmul"
	if d.PeakBF16 > 0 || d.PeakFP16 > 0 || d.PeakFP32 > 0 {
		matmul = fmt.Sprintf("matmul %s bf16, %s fp16, %s fp32", siRate(d.MatmulRate(ir.BF16), "FLOP/s"),
			siRate(d.MatmulRate(ir.F16), "FLOP/s"), siRate(d.MatmulRate(ir.F32), "FLOP/s"))
	}
	return fmt.Sprintf("%s (%s, %s memory, links %s + %s)", d.Name, matmul,
		siRate(d.MemBandwidth, "B/s"), siRate(d.LinkBandwidth, "B/s"), schedule.Seconds.Format(d.LinkLatency))
}

// CostConstants are the cost model's constants that describe the training job rather than
// the device.
var CostConstants = struct {
	OptStateBytes  int64   // bytes of gradient plus optimizer state per parameter byte (fp32 AdamW: 4 grad + 8 state per 4 weight)
	BackwardFactor float64 // backward FLOPs per forward FLOP of an op with weights: I ≈ F and W ≈ F
}{
	OptStateBytes:  3,
	BackwardFactor: 2,
}

// siRate writes a rate with an SI prefix and three significant digits: 3e14 → "300 TFLOP/s".
func siRate(v float64, unit string) string {
	for _, p := range []string{"", "k", "M", "G", "T", "P"} {
		if r := schedule.RoundSignificant(v, 3); math.Abs(r) < 1000 {
			return strconv.FormatFloat(r, 'f', -1, 64) + " " + p + unit
		}
		v /= 1000
	}
	return strconv.FormatFloat(schedule.RoundSignificant(v, 3), 'f', -1, 64) + " E" + unit
}

// OpCost is the estimated cost of one op for one micro-batch.
type OpCost struct {
	FLOPs      float64 // forward floating-point operations
	Bytes      float64 // forward bytes read and written
	ParamBytes int64   // bytes of parameters the op reads (counted once per parameter by callers)
	ActBytes   int64   // bytes of its results (activations a backward pass may keep)
	F, I, W    float64 // estimated seconds: forward, input gradient, weight gradient
	// Of F, I and W, the seconds spent in collectives (tensor parallelism): all of a
	// collective op's time, none of another's. Reports show them apart from compute, since
	// a faster link (or overlap) shrinks them and a faster device does not.
	FComm, IComm, WComm float64
}

// Comm is the op's collective time over its three phases.
func (c OpCost) Comm() float64 { return c.FComm + c.IComm + c.WComm }

// AxisCollectiveTime is CollectiveTime over a mesh axis of n ranks: tensor-parallel groups
// stay inside a node, every other axis (dp) is assumed to span nodes.
func (d DeviceProfile) AxisCollectiveTime(kind string, bytes float64, n int, axis string) float64 {
	return d.CollectiveTime(kind, bytes, n, axis == "tp")
}

// CostOf estimates an op's cost from its types: matmuls and convolutions by their
// multiply-adds, collectives by CollectiveTime over their mesh axis (axisSize gives its size;
// tensor-parallel collectives stay inside a node), everything else by elements and bytes.
// The time of each phase is the larger of compute time and memory time (a roofline). A
// collective's backward time is its conjugate's: an all-reduce for copy_to_axis,
// reduce-scatter and all-gather swapped. It is input-gradient time, except when the
// collective's operand is a weight (isParam: a parameter, or computed from parameters
// alone): its gradient is then a weight gradient, and autodiff puts the conjugate in W (a
// replicated bias added inside a sequence-parallel region is copied to the axis, and its
// gradient all-reduced, in the W pass).
func CostOf(op *ir.Op, isParam func(*ir.Value) bool, axisSize func(string) int) OpCost {
	return DefaultDevice.CostOf(op, isParam, axisSize)
}

// CostOf is the package's CostOf on the device d.
func (d DeviceProfile) CostOf(op *ir.Op, isParam func(*ir.Value) bool, axisSize func(string) int) OpCost {
	var c OpCost
	if op.Def.Has(ir.Collective) && len(op.Operands) == 1 && len(op.Results) == 1 {
		axis := op.Attrs.Str("axis", "")
		n := axisSize(axis)
		x, y := float64(op.Operands[0].Type.Bytes()), float64(op.Results[0].Type.Bytes())
		var back float64
		c.F, back = d.collectiveTimes(op.Def.Name, op.Attrs.Str("grad", "reduce_scatter"), x, y, n, axis)
		if op.Def.Name == "all_to_all" {
			// An ep group is tp·cp·ep consecutive ranks: inside a node when they fit in one
			// (NVLink), across nodes otherwise.
			intra := axis == "tp" || axis == EPAxis && max(axisSize("tp"), 1)*max(axisSize(CPAxis), 1)*n <= max(d.GPUsPerNode, 1)
			c.F = d.CollectiveTime("all_to_all", x, n, intra)
			back = c.F
		}
		switch {
		case op.Def.Name == "copy_to_axis" && op.Operands[0].Def == nil && isParam(op.Operands[0]):
			// A parameter copied to the axis: its gradient's all-reduce is summed once per
			// step after accumulation (passes.hoistTPReductions, grad-reduce); code
			// generation prices it there, not per micro-batch.
		case isParam(op.Operands[0]):
			c.W = back
		default:
			c.I = back
		}
		c.FComm, c.IComm, c.WComm = c.F, c.I, c.W
		c.ActBytes = int64(y)
		return c
	}
	if op.Def.Name == "ring_attention" {
		return d.ringAttentionCost(op)
	}
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
	matrix, eff, backward := false, 1.0, 1.0
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
			if r := op.Results[0].Type.Shape; len(r) > 0 {
				n := r[len(r)-1]
				eff = d.GEMMEfficiency(op.Results[0].Type.NumElements()/max(n, 1), n, k)
			}
		}
	case "attention":
		// The two products of every query row with every key it may see, counted in full as
		// for the decomposed chain (2·rows·Skv·(D + Dv)); the scores never reach memory. A
		// causal FlashAttention kernel skips the key tiles wholly in a row's future, so it
		// runs about half of them: the time is priced on what runs, FLOPs reports count all.
		// Its backward (FlashAttention-2) recomputes the scores and runs five products where
		// the forward runs two: 2.5 forwards, all input gradient (attention has no weights).
		if dims, err := ir.AttentionShape(op.Operands[0].Type, op.Operands[1].Type, op.Operands[2].Type, nil); err == nil {
			rows := dims.Batch * dims.Hq * dims.Sq
			c.FLOPs = 2 * float64(rows) * float64(dims.Skv) * float64(dims.D+dims.Dv)
			matrix, eff = true, d.GEMMEfficiency(rows, dims.Skv, dims.D)
			if op.Attrs.Bool("causal", false) && dims.Sq > 1 {
				eff *= 2
			}
			backward = AttentionBackwardFactor
		}
	case "conv", "conv_transpose":
		if len(op.Operands) >= 2 && len(op.Results) == 1 {
			w := op.Operands[1].Type.Shape
			per := 1
			for _, d := range w[1:] {
				per *= d
			}
			c.FLOPs = 2 * float64(op.Results[0].Type.NumElements()) * float64(per)
			matrix, eff = true, d.GEMMEfficiency(1<<20, 1<<20, per)
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
	var dt ir.DType
	if len(op.Results) > 0 {
		dt = op.Results[0].Type.DType
	}
	c.F, c.I, c.W = d.opTimes(c.FLOPs/eff, c.Bytes, backward, matrix, hasWeights, dt, launches(op))
	return c
}

// launches says whether op runs as a kernel on the device: constants are made at load time
// and a reshape moves no data.
func launches(op *ir.Op) bool { return !op.Def.Has(ir.ConstantLike) && !isView(op.Def.Name) }

// opTimes are the forward, input-gradient and weight-gradient seconds of a compute op of the
// given FLOPs (already divided by the GEMM efficiency) and bytes: computeTimes, the input
// gradient scaled by backward (FlashAttention-2's for attention), and a kernel launch per
// phase with work when the op launches one. CostOf and the token-slice cost model
// (SliceCostModel) both price ops here, so that a sliced plan's estimate is the same model
// as an unsliced one's.
func (d DeviceProfile) opTimes(flops, bytes, backward float64, matrix, hasWeights bool, dt ir.DType, launched bool) (f, i, w float64) {
	f, i, w = d.computeTimes(flops, bytes, matrix, hasWeights, dt)
	i *= backward
	// Each phase with work is at least one kernel; elementwise chains that lowering fuses
	// pay it once per chain on the device, so this overcounts them somewhat.
	if l := d.LaunchSeconds; l > 0 && launched {
		f += l
		if i > 0 {
			i += l
		}
		if w > 0 {
			w += l
		}
	}
	return f, i, w
}

// isView reports ops that move no data on the device (a reshape of a contiguous tensor).
func isView(name string) bool { return name == "reshape" }

// AttentionBackwardFactor is FlashAttention-2's backward time in forwards: it recomputes
// the scores (one product) and computes the gradients of the probabilities, the queries,
// the keys and the values (four), where the forward computes two (Dao 2023, §3.2: the
// backward does 2.5× the forward's matmul FLOPs).
const AttentionBackwardFactor = 2.5

// collectiveTimes are the forward and backward seconds of a collective op on an operand of x
// bytes with a result of y bytes over n ranks of axis; grad is all_gather's gradient kind.
func (d DeviceProfile) collectiveTimes(name, grad string, x, y float64, n int, axis string) (f, back float64) {
	switch name {
	case "all_reduce": // its gradient passes through
		f = d.AxisCollectiveTime("all_reduce", x, n, axis)
	case "copy_to_axis":
		back = d.AxisCollectiveTime("all_reduce", x, n, axis)
	case "all_gather":
		f = d.AxisCollectiveTime("all_gather", y, n, axis)
		if grad == "reduce_scatter" {
			back = d.AxisCollectiveTime("reduce_scatter", y, n, axis)
		}
	case "reduce_scatter":
		f = d.AxisCollectiveTime("reduce_scatter", x, n, axis)
		back = d.AxisCollectiveTime("all_gather", x, n, axis)
	case "all_to_all": // its gradient is the reverse exchange, as many bytes
		f = d.AxisCollectiveTime("all_to_all", x, n, axis)
		back = f
	}
	return f, back
}

// The GEMM efficiency curve: the fraction of the profile's peak matmul rate a GEMM of M
// rows (every leading dim of a batched matmul's result counts: the batch fills the GPU as
// rows do), N columns and K-long dot products reaches. Each dim x costs a factor
// x/(x + GEMMHalfDim) — tiles along a short dim are partly empty and a short K amortises
// each tile's loads and epilogue over fewer multiply-adds — times GEMMPeakEfficiency, the
// best cuBLAS(Lt) reaches on large bf16 problems. With 80 and 0.85: 4096³ runs at 80% of
// peak, 1024³ at 68%, attention's scores at head dim 128 (s 2048) at 50%, a 12288 × 1536 (GPT-3
// at tp 8) projection of 2048 tokens at 77%. These are the shapes of published cuBLAS measurements on
// A100 and H100 (roughly 75–85% of the datasheet's dense peak for large GEMMs, falling
// below half for dims of about 100); calibrate them on a GPU with `ppc devices` once the
// CUDA device lands.
const (
	GEMMPeakEfficiency = 0.85
	GEMMHalfDim        = 80
)

// GEMMEfficiency is the curve above for an M×K by K×N GEMM, on the default profile.
func GEMMEfficiency(m, n, k int) float64 { return DefaultDevice.GEMMEfficiency(m, n, k) }

// GEMMEfficiency is the curve on d: its generation's best fraction (GEMMEff) in place of
// GEMMPeakEfficiency.
func (d DeviceProfile) GEMMEfficiency(m, n, k int) float64 {
	peak := GEMMPeakEfficiency
	if d.GEMMEff > 0 {
		peak = d.GEMMEff
	}
	f := func(x int) float64 { return float64(x) / float64(x+GEMMHalfDim) }
	return peak * f(max(m, 1)) * f(max(n, 1)) * f(max(k, 1))
}

// computeTimes are the forward, input-gradient and weight-gradient seconds of a compute op
// with the given forward FLOPs and bytes: the larger of compute time (at the matmul rate for
// matmuls and convolutions, the vector rate otherwise) and memory time. The input gradient
// costs about one forward; the weight gradient about one forward for ops with weights and
// nothing otherwise (BackwardFactor = I + W in forwards).
func (d DeviceProfile) computeTimes(flops, bytes float64, matrix, hasWeights bool, dt ir.DType) (f, i, w float64) {
	rate := d.VectorFLOPs
	if matrix {
		rate = d.MatmulRate(dt)
	}
	f = max(flops/rate, bytes/d.MemBandwidth)
	i = f
	if hasWeights {
		w = f * (CostConstants.BackwardFactor - 1)
	}
	return f, i, w
}

// ringAttentionCost prices ring attention over the cp ranks (passes.RingAttention writes its
// steps): n blocks, each the fused attention of the rank's L queries over L keys (counted in
// full, as attention is), and the ring's transfers over the cp axis, which spans nodes (tp
// fills a node first). Each step's transfer is issued before its block's compute, so a step
// costs the larger of the two: forward, the K/V block (n−1 times); backward, the K/V block
// and the dK/dV partial sums (f32 for 16-bit operands) travelling with it, plus the last
// dK/dV's way home. FComm and IComm are the transfer time the compute does not hide.
func (d DeviceProfile) ringAttentionCost(op *ir.Op) OpCost {
	var c OpCost
	n := max(op.Attrs.Int("size", 1), 1)
	q, k, v := op.Operands[0].Type, op.Operands[1].Type, op.Operands[2].Type
	dims, err := ir.AttentionShape(q, k, v, nil)
	if err != nil {
		return c
	}
	rows := dims.Batch * dims.Hq * dims.Sq
	blockFLOPs := 2 * float64(rows) * float64(dims.Skv) * float64(dims.D+dims.Dv)
	var io float64
	for _, x := range op.Operands {
		io += float64(x.Type.Bytes())
	}
	for _, r := range op.Results {
		io += float64(r.Type.Bytes())
		c.ActBytes += r.Type.Bytes()
	}
	c.FLOPs, c.Bytes = float64(n)*blockFLOPs, float64(n)*io
	// Each block is priced as the fused attention op is (the generation's GEMM efficiency,
	// a causal kernel's half, FlashAttention-2's backward, a launch).
	var attrs ir.Attrs
	if op.Attrs.Bool("causal", false) {
		attrs = ir.Attrs{{Name: "causal", Value: ir.BoolAttr(true)}}
	}
	types := make([]ir.Type, len(op.Results))
	for j, r := range op.Results {
		types[j] = r.Type
	}
	block := d.CostOf(ir.NewOp(ir.MustLookup("attention"), op.Operands[:3], attrs, types), func(*ir.Value) bool { return false }, func(string) int { return 1 })
	f, i := block.F, block.I
	kv := float64(k.Bytes() + v.Bytes())
	wide := float64(ir.AttentionLSEType(q.DType).Size()) / float64(q.DType.Size())
	send := func(bytes float64) float64 { return d.InterNodeLatency + bytes/d.InterNodeBandwidth }
	steps := float64(n - 1)
	fwd, back, home := send(kv), send(kv+wide*kv), send(wide*kv)
	c.F = f + steps*max(f, fwd)
	c.I = i + steps*max(i, back) + home
	c.FComm = steps * max(0, fwd-f)
	c.IComm = steps*max(0, back-i) + home
	return c
}
