package cuda

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Kernels of the mixture-of-experts ops (ir/ops_moe.go), each result with one writer and the
// CPU device's order of summation (kernels/cpu/moe.go), so no atomics:
//
//	top_k             a thread per fibre keeps its best k in a local array (insertion, the
//	                  CPU's order: larger first, NaN largest, ties by index); one kernel per
//	                  result, values and indices. With groups (node-limited routing) the
//	                  thread first scores each group by the double sum of its ⌈k/M⌉ best
//	                  (the CPU's float64 sum, in the same order), keeps the M best groups in
//	                  a local array and skips the others' elements
//	moe_slots         slots set to −1 (a thread per choice), then a thread per expert walks
//	                  the choices in choice-major order and numbers its own; load the same walk,
//	                  counting. An expert id outside [0, experts) stays −1 (dropped) where the
//	                  CPU device reports an error
//	moe_dispatch      the buffer zeroed, then a thread per (choice, element) writes its row
//	                  (slots are distinct: each row has at most one writer)
//	moe_combine       a thread per (token, element) sums its choices in order
//	moe_weights_grad  a thread per choice, one dot product in element order
//
// moe_slots' walk is experts-way parallel, O(tokens·k) per thread: a router's choices per
// micro-batch (tens of thousands) read from L2 in a few tens of µs. A prefix sum would be
// faster on long sequences; measure on a GPU first.

func init() {
	perResult["top_k"] = struct {
		results int
		gen     func(r int) generator
	}{2, genTopK}
	planners["moe_slots"] = planMoESlots
	planners["moe_dispatch"] = planMoEDispatch
	generators["moe_combine"] = genMoECombine
	generators["moe_weights_grad"] = genMoEWeightsGrad
}

func genTopK(r int) generator {
	return func(s *device.Spec) (string, int64, error) {
		x := s.In[0]
		if x.DType == ir.Bool || x.Rank() == 0 {
			return "", 0, fmt.Errorf("top_k of %s", x)
		}
		axis, err := ir.NormAxis(s.Attrs.Int("axis", -1), x.Rank())
		if err != nil {
			return "", 0, err
		}
		k, largest := s.Attrs.Int("k", 0), s.Attrs.Bool("largest", true)
		n, inner := int64(x.Shape[axis]), int64(x.Shape[axis+1:].NumElements())
		outer := int64(x.Shape[:axis].NumElements())
		if k < 1 || int64(k) > n {
			return "", 0, fmt.Errorf("k = %d of %d", k, n)
		}
		groups, topkGroups, err := ir.TopKGroups(s.Attrs, int(n))
		if err != nil {
			return "", 0, err
		}
		ty := classOf(x.DType).ctype()
		at := func(j string) string { return load(x.DType, "in0", fmt.Sprintf("base + (%s) * %dLL", j, inner)) }
		var b strings.Builder
		fmt.Fprintf(&b, "    long long base = (i / %dLL) * %dLL + i %% %dLL;\n", inner, n*inner, inner)
		skip := ""
		if groups > 1 {
			// Node-limited routing: each group's ⌈k/M⌉ first summed in double in that order
			// (the CPU's float64 sum), the M first groups by those sums kept.
			size, scored := n/int64(groups), (k+topkGroups-1)/topkGroups
			fmt.Fprintf(&b, "    double gs[%d];\n    for (int g = 0; g < %d; g++) {\n", groups, groups)
			fmt.Fprintf(&b, "      long long gb[%d]; int gc = 0;\n", scored)
			fmt.Fprintf(&b, "      for (long long j = g * %dLL; j < (g + 1) * %dLL; j++) {\n", size, size)
			topKInsert(&b, "        ", "gb", "gc", scored, ty, at, largest)
			fmt.Fprintf(&b, "      }\n      double sum = 0.0;\n      for (int q = 0; q < gc; q++) sum += (double)%s;\n      gs[g] = sum;\n    }\n", at("gb[q]"))
			fmt.Fprintf(&b, "    long long bg[%d]; int bc = 0;\n    for (long long j = 0; j < %dLL; j++) {\n", topkGroups, groups)
			topKInsert(&b, "      ", "bg", "bc", topkGroups, "double", func(j string) string { return fmt.Sprintf("gs[%s]", j) }, largest)
			fmt.Fprintf(&b, "    }\n    bool kept[%d];\n    for (int g = 0; g < %d; g++) kept[g] = false;\n", groups, groups)
			b.WriteString("    for (int q = 0; q < bc; q++) kept[bg[q]] = true;\n")
			skip = fmt.Sprintf("      if (!kept[j / %dLL]) continue;\n", size)
		}
		fmt.Fprintf(&b, "    long long best[%d]; int cnt = 0;\n", k)
		fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) {\n%s", n, skip)
		topKInsert(&b, "      ", "best", "cnt", k, ty, at, largest)
		b.WriteString("    }\n")
		fmt.Fprintf(&b, "    long long ob = (i / %dLL) * %dLL + i %% %dLL;\n", inner, int64(k)*inner, inner)
		if r == 0 {
			fmt.Fprintf(&b, "    for (int q = 0; q < %d; q++) out[ob + q * %dLL] = in0[base + best[q] * %dLL];\n", k, inner, inner)
		} else {
			fmt.Fprintf(&b, "    for (int q = 0; q < %d; q++) out[ob + q * %dLL] = best[q];\n", k, inner)
		}
		return b.String(), outer * inner, nil
	}
}

// topKInsert writes the insertion of element j (at(j), in a loop over j in increasing order)
// into best[0:cnt], the sorted list of the k first elements so far in top_k's order: larger
// first (smaller when !largest), NaN first (last when !largest), ties by index — the CPU's
// before (kernels/cpu/moe.go).
func topKInsert(b *strings.Builder, ind, best, cnt string, k int, ty string, at func(string) string, largest bool) {
	first, nanFirst := ">", "an"
	if !largest {
		first, nanFirst = "<", "!an"
	}
	fmt.Fprintf(b, "%s%s a = %s;\n%sbool an = a != a;\n", ind, ty, at("j"), ind)
	// Whether a (at j, after every index in best) precedes bv, the element at best[q].
	before := fmt.Sprintf("(an || bn ? (!(an && bn) && %s) : (a != bv && a %s bv))", nanFirst, first)
	ld := fmt.Sprintf("%s bv = %s; bool bn = bv != bv;", ty, at(best+"[q]"))
	fmt.Fprintf(b, "%sif (%s == %d) { int q = %d; %s if (!%s) continue; }\n", ind, cnt, k, k-1, ld, before)
	fmt.Fprintf(b, "%sint p = %s == %d ? %d : %s++;\n", ind, cnt, k, k-1, cnt)
	fmt.Fprintf(b, "%swhile (p > 0) { int q = p - 1; %s if (!%s) break; %s[p] = %s[q]; p--; }\n%s%s[p] = j;\n", ind, ld, before, best, best, ind, best)
}

// moeChoices checks a slots (or indices) operand and returns its tokens and choices.
func moeChoices(t ir.Type) (tokens, k int64, err error) {
	if !t.DType.IsInt() || t.Rank() == 0 {
		return 0, 0, fmt.Errorf("want integer slots [..., k], got %s", t)
	}
	k = int64(t.Shape[t.Rank()-1])
	return int64(t.NumElements()) / max(k, 1), k, nil
}

func planMoESlots(s *device.Spec) ([]ir.Type, []planStep, error) {
	if len(s.Out) != 2 {
		return nil, nil, fmt.Errorf("%d results, want 2", len(s.Out))
	}
	tokens, k, err := moeChoices(s.In[0])
	if err != nil {
		return nil, nil, err
	}
	experts, capacity := int64(s.Attrs.Int("experts", 0)), int64(s.Attrs.Int("capacity", 0))
	walk := func(body string) string {
		return fmt.Sprintf("    long long row = 0;\n    for (long long j = 0; j < %dLL; j++)\n      for (long long t = 0; t < %dLL; t++) {\n"+
			"        long long p = t * %dLL + j;\n        if ((long long)in0[p] != i) continue;\n%s        row++;\n      }\n", k, tokens, k, body)
	}
	return nil, []planStep{
		{in: []Ref{{Operand, 0}}, out: Ref{Result, 0}, gen: func(*device.Spec) (string, int64, error) {
			return "    out[i] = -1;\n", tokens * k, nil
		}},
		{in: []Ref{{Operand, 0}}, out: Ref{Result, 0}, gen: func(*device.Spec) (string, int64, error) {
			return walk(fmt.Sprintf("        if (row < %dLL) out[p] = i * %dLL + row;\n", capacity, capacity)), experts, nil
		}},
		{in: []Ref{{Operand, 0}}, out: Ref{Result, 1}, gen: func(*device.Spec) (string, int64, error) {
			return walk("") + "    out[i] = row;\n", experts, nil
		}},
	}, nil
}

// moeWeight is the C of choice p's weight (weights at operand w), or "" without weights.
func moeWeight(s *device.Spec, w int) string {
	if len(s.In) <= w {
		return ""
	}
	return load(s.In[w].DType, fmt.Sprintf("in%d", w), "p")
}

func planMoEDispatch(s *device.Spec) ([]ir.Type, []planStep, error) {
	x, out := s.In[0], s.Out[0]
	if _, err := floatIO(&device.Spec{In: []ir.Type{x}, Out: s.Out}); err != nil {
		return nil, nil, err
	}
	tokens, k, err := moeChoices(s.In[1])
	if err != nil {
		return nil, nil, err
	}
	d, rows := int64(x.Shape[x.Rank()-1]), int64(out.Shape[0]*out.Shape[1])
	all := []Ref{{Operand, 0}, {Operand, 1}}
	if len(s.In) > 2 {
		all = append(all, Ref{Operand, 2})
	}
	return nil, []planStep{
		{in: all, out: Ref{Result, 0}, gen: func(*device.Spec) (string, int64, error) {
			return "    out[i] = 0;\n", int64(out.NumElements()), nil
		}},
		{in: all, out: Ref{Result, 0}, gen: func(st *device.Spec) (string, int64, error) {
			var b strings.Builder
			fmt.Fprintf(&b, "    long long p = i / %dLL, c = i %% %dLL;\n    long long sl = (long long)in1[p];\n", d, d)
			fmt.Fprintf(&b, "    if (sl < 0 || sl >= %dLL) continue;\n", rows)
			src := fmt.Sprintf("(p / %dLL) * %dLL + c", k, d)
			if w := moeWeight(st, 2); w != "" {
				fmt.Fprintf(&b, "    out[sl * %dLL + c] = %s;\n", d, store(out.DType, round(out.DType, load(x.DType, "in0", src)+" * "+w)))
			} else {
				fmt.Fprintf(&b, "    out[sl * %dLL + c] = in0[%s];\n", d, src)
			}
			return b.String(), tokens * k * d, nil
		}},
	}, nil
}

func genMoECombine(s *device.Spec) (string, int64, error) {
	y, out := s.In[0], s.Out[0]
	ct, err := floatIO(&device.Spec{In: []ir.Type{y}, Out: s.Out})
	if err != nil {
		return "", 0, err
	}
	tokens, k, err := moeChoices(s.In[1])
	if err != nil {
		return "", 0, err
	}
	d, rows := int64(y.Shape[2]), int64(y.Shape[0]*y.Shape[1])
	term := load(y.DType, "in0", fmt.Sprintf("sl * %dLL + c", d))
	if w := moeWeight(s, 2); w != "" {
		term = w + " * " + term
	}
	var b strings.Builder
	fmt.Fprintf(&b, "    long long t = i / %dLL, c = i %% %dLL;\n    %s acc = 0;\n", d, d, ct.ctype())
	fmt.Fprintf(&b, "    for (long long p = t * %dLL; p < (t + 1) * %dLL; p++) {\n", k, k)
	fmt.Fprintf(&b, "      long long sl = (long long)in1[p];\n      if (sl >= 0 && sl < %dLL) acc += %s;\n    }\n", rows, term)
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
	return b.String(), tokens * d, nil
}

func genMoEWeightsGrad(s *device.Spec) (string, int64, error) {
	a, bb, out := s.In[0], s.In[1], s.Out[0]
	ct, err := floatIO(&device.Spec{In: []ir.Type{a, bb}, Out: s.Out})
	if err != nil {
		return "", 0, err
	}
	tokens, k, err := moeChoices(s.In[2])
	if err != nil {
		return "", 0, err
	}
	d, rows := int64(bb.Shape[2]), int64(bb.Shape[0]*bb.Shape[1])
	var b strings.Builder
	fmt.Fprintf(&b, "    long long sl = (long long)in2[i];\n    %s acc = 0;\n", ct.ctype())
	fmt.Fprintf(&b, "    if (sl >= 0 && sl < %dLL)\n      for (long long c = 0; c < %dLL; c++) acc += %s * %s;\n", rows, d,
		load(a.DType, "in0", fmt.Sprintf("(i / %dLL) * %dLL + c", k, d)), load(bb.DType, "in1", fmt.Sprintf("sl * %dLL + c", d)))
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
	return b.String(), tokens * k, nil
}
