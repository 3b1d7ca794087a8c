package cuda

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Launch sites planned as several kernels with scratch memory (Plan): where one kernel would
// leave a GPU with one thread (a loss reduced to a scalar), or make each thread redo the
// whole input (norms' parameter gradients, the embedding's backward), the work is split into
// passes whose partial results go through scratch buffers, keeping the CPU device's order of
// summation.

func init() {
	planners["cross_entropy"] = planCrossEntropy
	planners["cross_entropy_grad"] = planCrossEntropyGrad
	planners["layer_norm_grad_params"] = planNormParams(false)
	planners["rms_norm_grad_params"] = planNormParams(true)
	planners["gather_grad"] = planGatherGrad
	for _, kind := range []string{"sum", "mean", "max", "min"} {
		planners["reduce_"+kind] = planReduce(kind)
	}
}

// reduceChunk is how many reduced elements one thread of a chunked reduction folds.
const reduceChunk = 64

// planReduce: a reduction with few results, each over many elements (a bias's gradient, the
// sum of [8, 1024, 768] over its first two axes: 768 threads that each read 8,192 elements
// one after another), is two kernels: partial results of chunks of 64 reduced elements (in
// the CPU device's order within a chunk, a thread per chunk and result, neighbouring threads
// reading neighbouring results' elements), then each result's chunks folded in order. Other
// reductions are genReduce's thread per result.
func planReduce(kind string) func(s *device.Spec) ([]ir.Type, []planStep, error) {
	one := genReduce(kind)
	return func(s *device.Spec) ([]ir.Type, []planStep, error) {
		single := []planStep{{in: []Ref{op0}, out: res0, gen: one}}
		if len(s.In) != 1 || len(s.Out) != 1 {
			return nil, single, nil // genReduce names the problem
		}
		in, out := s.In[0], s.Out[0]
		red, err := ir.ReduceAxes(s.Attrs, in.Rank())
		if err != nil {
			return nil, single, nil
		}
		ct, err := floatIO(s)
		if err != nil {
			return nil, single, nil
		}
		results, count := int64(out.NumElements()), int64(in.NumElements())/max(int64(out.NumElements()), 1)
		if count < 8*reduceChunk || results >= 1<<16 {
			return nil, single, nil
		}
		chunks := (count + reduceChunk - 1) / reduceChunk
		ty := ct.ctype()
		init, fold := "0", "acc += v;"
		switch kind {
		case "max", "min":
			init = map[string]string{"max": "-PPC_INF", "min": "PPC_INF"}[kind]
			fold = fmt.Sprintf("acc = ppc_%s<%s>(acc, v);", kind, ty)
		}
		// Chunk c of result o at index i = c·results + o.
		partial := func(s *device.Spec) (string, int64, error) {
			var b strings.Builder
			fmt.Fprintf(&b, "    long long o = i %% %dLL, c = i / %dLL;\n", results, results)
			_, offset := reduceGroup(&b, in, red, "o")
			fmt.Fprintf(&b, "    %s acc = %s;\n    for (long long j = c * %dLL; j < c * %dLL + %dLL && j < %dLL; j++) {\n", ty, init, reduceChunk, reduceChunk, reduceChunk, count)
			offset(&b, "j", "      ")
			fmt.Fprintf(&b, "      %s v = %s;\n      %s\n    }\n    out[i] = acc;\n", ty, load(in.DType, "in0", "off"), fold)
			return b.String(), chunks * results, nil
		}
		finish := func(s *device.Spec) (string, int64, error) {
			var b strings.Builder
			fmt.Fprintf(&b, "    %s acc = in0[i];\n    for (long long c = 1; c < %dLL; c++) { %s v = in0[c * %dLL + i]; %s }\n", ty, chunks, ty, results, fold)
			if kind == "mean" {
				fmt.Fprintf(&b, "    acc = acc / (%s)%dLL;\n", ty, count)
			}
			fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
			return b.String(), results, nil
		}
		return []ir.Type{accType(in.DType, int(chunks*results))},
			[]planStep{{in: []Ref{op0}, out: sc0, gen: partial}, {in: []Ref{sc0}, out: res0, gen: finish}}, nil
	}
}

var (
	op0, op1, op2 = Ref{Operand, 0}, Ref{Operand, 1}, Ref{Operand, 2}
	res0, res1    = Ref{Result, 0}, Ref{Result, 1}
	sc0, sc1, sc2 = Ref{Scratch, 0}, Ref{Scratch, 1}, Ref{Scratch, 2}
	sc3           = Ref{Scratch, 3}
)

// accType is the scratch dtype of a float class's partial results (float for f32, bf16 and
// f16; double for f64).
func accType(d ir.DType, shape ...int) ir.Type {
	if classOf(d) == classDouble {
		return ir.Type{DType: ir.F64, Shape: shape}
	}
	return ir.Type{DType: ir.F32, Shape: shape}
}

// planCrossEntropy: per-row losses −log softmax(logits)[label] (0 for ignored rows) in one
// thread per row, then — for the sum and mean reductions — one thread sums them in row order
// in double and divides by the rows not ignored (mean), as the CPU device does. A label
// outside [0, classes) gives NaN: the runtime checks model inputs against their declared
// ranges when it reads them, so only a bug reaches it (the CPU device reports it).
func planCrossEntropy(s *device.Spec) ([]ir.Type, []planStep, error) {
	if len(s.In) != 2 {
		return nil, nil, fmt.Errorf("want operands logits and labels")
	}
	rows, classes, ignore, err := ceRows(s)
	if err != nil {
		return nil, nil, err
	}
	if _, err := floatIO(&device.Spec{In: s.In[:1], Out: s.Out}); err != nil {
		return nil, nil, err
	}
	perRow := func(s *device.Spec) (string, int64, error) {
		ty, out := classOf(s.In[0].DType).ctype(), s.Out[0]
		var b strings.Builder
		fmt.Fprintf(&b, "    long long l = (long long)in1[i], rb = i * %dLL;\n    %s loss = 0;\n", classes, ty)
		fmt.Fprintf(&b, "    if (l != %dLL) {\n    if (l < 0 || l >= %dLL) loss = (%s)PPC_NAN; else {\n", ignore, classes, ty)
		lse(&b, ty, s.In[0], classes)
		fmt.Fprintf(&b, "    loss = (ppc_loga(sum) + m) - %s; }\n    }\n", load(s.In[0].DType, "in0", "rb + l"))
		fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "loss")))
		return b.String(), rows, nil
	}
	// Long rows (a vocabulary) are a block each; short ones a thread each, whose serial
	// pass is short and sums in the CPU device's order.
	var perRowBlock func(s *device.Spec, name string) (Kernel, error)
	if classes > rowThreshold {
		perRowBlock = func(s *device.Spec, name string) (Kernel, error) {
			ty, out := classOf(s.In[0].DType).ctype(), s.Out[0]
			rk := ceRowKernel(s, rows, classes)
			rk.phases = append(rk.phases, fmt.Sprintf("if (tid == 0) {\n        %s loss = 0;\n        if (l != %dLL) loss = (l < 0 || l >= %dLL) ? (%s)PPC_NAN : (ppc_loga(stat[1]) + stat[0]) - %s;\n        out[row] = %s;\n      }",
				ty, ignore, classes, ty, load(s.In[0].DType, "in0", "rb + (l < 0 || l >= "+fmt.Sprint(classes)+"LL ? 0 : l)"), store(out.DType, round(out.DType, "loss"))))
			return rk.kernel(s, name)
		}
	}
	switch red := s.Attrs.Str("reduction", "mean"); red {
	case "none":
		return nil, []planStep{{in: []Ref{op0, op1}, out: res0, gen: perRow, row: perRowBlock}}, nil
	case "sum", "mean":
		total := func(s *device.Spec) (string, int64, error) {
			out := s.Out[0]
			var b strings.Builder
			fmt.Fprintf(&b, "    double total = 0; long long valid = 0;\n    for (long long r = 0; r < %dLL; r++) {\n", rows)
			fmt.Fprintf(&b, "      total += (double)%s;\n      valid += (long long)in1[r] != %dLL;\n    }\n", load(s.In[0].DType, "in0", "r"), ignore)
			if red == "mean" {
				b.WriteString("    total /= (double)(valid > 1 ? valid : 1);\n")
			}
			fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, fmt.Sprintf("(%s)total", classOf(out.DType).ctype()))))
			return b.String(), 1, nil
		}
		return []ir.Type{{DType: s.In[0].DType, Shape: ir.Shape{int(rows)}}},
			[]planStep{{in: []Ref{op0, op1}, out: sc0, gen: perRow, row: perRowBlock}, {in: []Ref{sc0, op1}, out: res0, gen: total}}, nil
	default:
		return nil, nil, fmt.Errorf("reduction %s", red)
	}
}

// ceRowKernel starts cross-entropy's block per row (logits in0, labels in1): the row's base
// rb and label l, its maximum (stat[0]) and Σ exp (stat[1]).
func ceRowKernel(s *device.Spec, rows, classes int64) *rowKernel {
	rk := &rowKernel{rows: rows, width: classes, ct: classOf(s.In[0].DType).ctype(),
		setup: fmt.Sprintf("const long long rb = row * %dLL; const long long l = (long long)in1[row]; (void)rb; (void)l;", classes)}
	rk.maxSumExp(load(s.In[0].DType, "in0", "rb + j"))
	return rk
}

// planCrossEntropyGrad: dlogits = w·(softmax(logits) − onehot(label)) per row (one thread
// each), zero for ignored rows, where w is dloss per row (none), dloss (sum) or dloss / the
// rows not ignored (mean: counted first by one thread, into scratch). Operands logits,
// labels, dloss.
func planCrossEntropyGrad(s *device.Spec) ([]ir.Type, []planStep, error) {
	if len(s.In) != 3 {
		return nil, nil, fmt.Errorf("want operands logits, labels and dloss")
	}
	rows, classes, ignore, err := ceRows(s)
	if err != nil {
		return nil, nil, err
	}
	if _, err := floatIO(&device.Spec{In: []ir.Type{s.In[0], s.In[2]}, Out: s.Out}); err != nil {
		return nil, nil, err
	}
	red := s.Attrs.Str("reduction", "mean")
	if want := rows; red == "none" && int64(s.In[2].NumElements()) != want || red != "none" && s.In[2].NumElements() != 1 {
		return nil, nil, fmt.Errorf("dloss %s does not match reduction %s of %d rows", s.In[2], red, rows)
	}
	grad := func(s *device.Spec) (string, int64, error) {
		ty, out, logits := classOf(s.In[0].DType).ctype(), s.Out[0], s.In[0]
		var b strings.Builder
		fmt.Fprintf(&b, "    long long rb = i * %dLL, l = (long long)in1[i];\n", classes)
		switch red {
		case "none":
			fmt.Fprintf(&b, "    %s w = %s;\n", ty, load(s.In[2].DType, "in2", "i"))
		case "sum":
			fmt.Fprintf(&b, "    %s w = %s;\n", ty, load(s.In[2].DType, "in2", "0"))
		default:
			fmt.Fprintf(&b, "    long long valid = in3[0];\n")
			fmt.Fprintf(&b, "    %s w = (%s)((double)%s / (double)(valid > 1 ? valid : 1));\n", ty, ty, load(s.In[2].DType, "in2", "0"))
		}
		fmt.Fprintf(&b, "    if (l == %dLL) { for (long long j = 0; j < %dLL; j++) out[rb + j] = %s; continue; }\n", ignore, classes, store(out.DType, "0"))
		lse(&b, ty, logits, classes)
		fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) { %s p = ppc_expo((%s)(%s - m)) / sum; out[rb + j] = %s; }\n",
			classes, ty, ty, load(logits.DType, "in0", "rb + j"), store(out.DType, round(out.DType, fmt.Sprintf("w * (p - (j == l ? (%s)1 : (%s)0))", ty, ty))))
		return b.String(), rows, nil
	}
	var gradBlock func(s *device.Spec, name string) (Kernel, error)
	if classes > rowThreshold {
		gradBlock = func(s *device.Spec, name string) (Kernel, error) {
			ty, out := classOf(s.In[0].DType).ctype(), s.Out[0]
			x := load(s.In[0].DType, "in0", "rb + j")
			w := map[string]string{"none": load(s.In[2].DType, "in2", "row"), "sum": load(s.In[2].DType, "in2", "0")}[red]
			if red == "mean" {
				w = fmt.Sprintf("(%s)((double)%s / (double)(in3[0] > 1 ? in3[0] : 1))", ty, load(s.In[2].DType, "in2", "0"))
			}
			rk := ceRowKernel(s, rows, classes)
			rk.each(fmt.Sprintf("{ %s w = %s; %s p = ppc_expo((%s)(%s - stat[0])) / stat[1]; out[rb + j] = l == %dLL ? %s : %s; }",
				ty, w, ty, ty, x, ignore, store(out.DType, "0"), store(out.DType, round(out.DType, fmt.Sprintf("w * (p - (j == l ? (%s)1 : (%s)0))", ty, ty)))))
			return rk.kernel(s, name)
		}
	}
	if red != "mean" {
		return nil, []planStep{{in: []Ref{op0, op1, op2}, out: res0, gen: grad, row: gradBlock}}, nil
	}
	count := func(s *device.Spec) (string, int64, error) {
		return fmt.Sprintf("    long long valid = 0;\n    for (long long q = 0; q < %dLL; q++) valid += (long long)in0[q] != %dLL;\n    out[0] = valid;\n", rows, ignore), 1, nil
	}
	return []ir.Type{{DType: ir.I64, Shape: ir.Shape{1}}},
		[]planStep{{in: []Ref{op1}, out: sc0, gen: count}, {in: []Ref{op0, op1, op2, sc0}, out: res0, gen: grad, row: gradBlock}}, nil
}

// planNormParams: layer_norm_grad_params (dscale = Σ_rows dy·x̂, dbias = Σ_rows dy) or
// rms_norm_grad_params (dscale); operands x, dy. Three passes: each row's mean and 1/σ (one
// thread per row, in row order), each chunk of 64 rows' partial sums (one thread
// per chunk and column, rows in order), and the chunks' sums in order (one thread per
// column) — the CPU device's chunked order, in O(rows·n) work.
func planNormParams(rms bool) func(s *device.Spec) ([]ir.Type, []planStep, error) {
	return func(s *device.Spec) ([]ir.Type, []planStep, error) {
		if len(s.In) != 2 || !s.In[0].Equal(s.In[1]) {
			return nil, nil, fmt.Errorf("want operands x and dy of one type")
		}
		want := 2
		if rms {
			want = 1
		}
		if len(s.Out) != want {
			return nil, nil, fmt.Errorf("%d results, want %d", len(s.Out), want)
		}
		if _, err := floatIO(s); err != nil {
			return nil, nil, err
		}
		x := s.In[0]
		rows, n, err := normRowsOf(s, x)
		if err != nil {
			return nil, nil, err
		}
		for _, o := range s.Out {
			if int64(o.NumElements()) != n {
				return nil, nil, fmt.Errorf("result %s does not have the normalised dims' %d elements", o, n)
			}
		}
		eps := s.Attrs.Float("eps", 1e-5)
		if rms {
			eps = s.Attrs.Float("eps", 1e-6)
		}
		chunks := (rows + 63) / 64
		ty := classOf(x.DType).ctype()
		// Statistics: mean (0 for RMS) into scratch 0, 1/σ into scratch 1, a block per row as
		// the norm's forward computes them (rowNorm).
		stats := func(rstd bool) func(s *device.Spec, name string) (Kernel, error) {
			return func(s *device.Spec, name string) (Kernel, error) {
				rk := normStats(x.DType, rows, n, ty, rms, eps, rstd)
				rk.phases = append(rk.phases, fmt.Sprintf("if (tid == 0) out[row] = stat[%d];", map[bool]int{false: 0, true: 1}[rstd]))
				return rk.kernel(s, name)
			}
		}
		// Partial sums of chunk c, column j (index i = c·n + j): operands x, dy, mean, 1/σ.
		partial := func(bias bool) generator {
			return func(s *device.Spec) (string, int64, error) {
				var b strings.Builder
				fmt.Fprintf(&b, "    long long c = i / %dLL, j = i %% %dLL;\n    %s part = 0;\n", n, n, ty)
				fmt.Fprintf(&b, "    for (long long row = c * 64; row < c * 64 + 64 && row < %dLL; row++) {\n      long long at = row * %dLL + j;\n", rows, n)
				dy := load(s.In[1].DType, "in1", "at")
				if bias {
					fmt.Fprintf(&b, "      part += %s;\n", dy)
				} else {
					fmt.Fprintf(&b, "      part += %s * ((%s - in2[row]) * in3[row]);\n", dy, load(x.DType, "in0", "at"))
				}
				b.WriteString("    }\n    out[i] = part;\n")
				return b.String(), chunks * n, nil
			}
		}
		// The chunks' sums in order, rounded to the result's dtype.
		finish := func(s *device.Spec) (string, int64, error) {
			out := s.Out[0]
			var b strings.Builder
			fmt.Fprintf(&b, "    %s acc = 0;\n    for (long long c = 0; c < %dLL; c++) acc += in0[c * %dLL + i];\n", ty, chunks, n)
			fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
			return b.String(), n, nil
		}
		scratch := []ir.Type{accType(x.DType, int(rows)), accType(x.DType, int(rows)), accType(x.DType, int(chunks*n))}
		steps := []planStep{
			{in: []Ref{op0}, out: sc0, row: stats(false)},
			{in: []Ref{op0}, out: sc1, row: stats(true)},
			{in: []Ref{op0, op1, sc0, sc1}, out: sc2, gen: partial(false)},
			{in: []Ref{sc2}, out: res0, gen: finish},
		}
		if !rms {
			scratch = append(scratch, accType(x.DType, int(chunks*n)))
			steps = append(steps, planStep{in: []Ref{op0, op1}, out: sc3, gen: partial(true)}, planStep{in: []Ref{sc3}, out: res1, gen: finish})
		}
		return scratch, steps, nil
	}
}

// planGatherGrad: gather's backward, the scatter-add of dy into zeros of the data's shape,
// written as gathers in increasing index position (the CPU device's order, no atomics): how
// many positions gathered each row v of the axis (one thread per v), where each v's list
// starts (one thread, a prefix sum), the lists of positions in order (one thread per v), and
// each result element's sum over its list (one thread per element). Operands idx, dy;
// attributes axis and dim.
func planGatherGrad(s *device.Spec) ([]ir.Type, []planStep, error) {
	if len(s.In) != 2 {
		return nil, nil, fmt.Errorf("want operands idx and dy")
	}
	idx, dy, out := s.In[0], s.In[1], s.Out[0]
	if !idx.DType.IsInt() || !dy.DType.IsFloat() || !out.DType.IsFloat() {
		return nil, nil, fmt.Errorf("want integer indices and a float gradient, got %s, %s", idx, dy)
	}
	axis, dim := s.Attrs.Int("axis", 0), int64(s.Attrs.Int("dim", 0))
	if axis < 0 || axis >= out.Rank() || int64(out.Shape[axis]) != dim {
		return nil, nil, fmt.Errorf("axis %d, dim %d do not match the result %s", axis, dim, out)
	}
	inner, outer := int64(1), int64(1)
	for _, v := range out.Shape[axis+1:] {
		inner *= int64(v)
	}
	for _, v := range out.Shape[:axis] {
		outer *= int64(v)
	}
	K := int64(idx.NumElements())
	if int64(dy.NumElements()) != outer*K*inner {
		return nil, nil, fmt.Errorf("dy %s is not the gather of %s by %s", dy, out, idx)
	}
	norm := fmt.Sprintf("long long w = (long long)in0[k]; if (w < 0) w += %dLL;", dim)
	count := func(*device.Spec) (string, int64, error) {
		return fmt.Sprintf("    long long c = 0;\n    for (long long k = 0; k < %dLL; k++) { %s c += w == i; }\n    out[i] = c;\n", K, norm), dim, nil
	}
	starts := func(*device.Spec) (string, int64, error) {
		return fmt.Sprintf("    long long at = 0;\n    for (long long v = 0; v < %dLL; v++) { out[v] = at; at += in0[v]; }\n", dim), 1, nil
	}
	lists := func(*device.Spec) (string, int64, error) {
		return fmt.Sprintf("    long long at = in1[i];\n    for (long long k = 0; k < %dLL; k++) { %s if (w == i) out[at++] = k; }\n", K, norm), dim, nil
	}
	sum := func(s *device.Spec) (string, int64, error) {
		ct := classOf(out.DType).ctype()
		var b strings.Builder
		fmt.Fprintf(&b, "    long long e = i %% %dLL, v = (i / %dLL) %% %dLL, o = i / (%dLL * %dLL);\n", inner, inner, dim, inner, dim)
		fmt.Fprintf(&b, "    %s acc = 0;\n    for (long long q = in2[v]; q < in2[v] + in1[v]; q++)\n", ct)
		fmt.Fprintf(&b, "      acc += %s;\n", load(dy.DType, "in0", fmt.Sprintf("(o * %dLL + in3[q]) * %dLL + e", K, inner)))
		fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
		return b.String(), int64(out.NumElements()), nil
	}
	i64 := func(n int64) ir.Type { return ir.Type{DType: ir.I64, Shape: ir.Shape{int(n)}} }
	return []ir.Type{i64(dim), i64(dim), i64(max(K, 1))}, []planStep{
		{in: []Ref{op0}, out: sc0, gen: count},
		{in: []Ref{sc0}, out: sc1, gen: starts},
		{in: []Ref{op0, sc1}, out: sc2, gen: lists},
		{in: []Ref{op1, sc0, sc1, sc2}, out: res0, gen: sum},
	}, nil
}
