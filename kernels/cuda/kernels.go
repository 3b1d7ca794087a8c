package cuda

import (
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Generate writes the kernel of any single-result launch site ppc's CUDA device has a kernel
// for: elementwise ops and fused chains (Elementwise), data movement (reshape, transpose,
// broadcast, iota), reductions, softmax, norms, gathers, cross-entropy and their gradients.
// Other ops are an error naming them (matmuls go to cuBLASLt, not CUDA C). Kernels covers
// launch sites with several results.
func Generate(s *device.Spec, name string) (Kernel, error) {
	if s.Op == nil || s.Op.Has(ir.Elementwise) {
		return Elementwise(s, name)
	}
	if rk := rowKernels[s.Op.Name]; rk != nil {
		if len(s.Out) != 1 {
			return Kernel{}, fmt.Errorf("%s: %d results, want 1", s.Op.Name, len(s.Out))
		}
		if k, err := rk(s, name); err != errStrided {
			return k, err
		}
	}
	g, ok := generators[s.Op.Name]
	if !ok {
		if _, multi := perResult[s.Op.Name]; multi {
			return Kernel{}, fmt.Errorf("%s has several results: one kernel each (Kernels)", s.Op.Name)
		}
		if _, planned := planners[s.Op.Name]; planned {
			return Kernel{}, fmt.Errorf("%s is several kernels (Kernels)", s.Op.Name)
		}
		return Kernel{}, fmt.Errorf("no CUDA kernel for op %s yet", s.Op.Name)
	}
	if len(s.Out) != 1 {
		return Kernel{}, fmt.Errorf("%s: %d results, want 1", s.Op.Name, len(s.Out))
	}
	return wrap(s, name, g)
}

// rowKernels are the ops with a block-per-row kernel (rows.go). Softmax's rows can be strided
// (an axis other than the last): those are the generators' one thread per row (errStrided).
var rowKernels = map[string]func(s *device.Spec, name string) (Kernel, error){
	"softmax":               func(s *device.Spec, n string) (Kernel, error) { return rowSoftmax(s, n, false) },
	"log_softmax":           func(s *device.Spec, n string) (Kernel, error) { return rowSoftmax(s, n, true) },
	"softmax_grad":          func(s *device.Spec, n string) (Kernel, error) { return rowSoftmaxGrad(s, n, false) },
	"log_softmax_grad":      func(s *device.Spec, n string) (Kernel, error) { return rowSoftmaxGrad(s, n, true) },
	"layer_norm":            func(s *device.Spec, n string) (Kernel, error) { return rowNorm(s, n, false, false) },
	"rms_norm":              func(s *device.Spec, n string) (Kernel, error) { return rowNorm(s, n, true, false) },
	"layer_norm_grad_input": func(s *device.Spec, n string) (Kernel, error) { return rowNorm(s, n, false, true) },
	"rms_norm_grad_input":   func(s *device.Spec, n string) (Kernel, error) { return rowNorm(s, n, true, true) },
}

// HasKernel reports whether the CUDA device implements op (elementwise ops always: they are
// generated from the op table's expressions).
func HasKernel(op string) bool {
	if d := ir.Lookup(op); d != nil && d.Has(ir.Elementwise) {
		return true
	}
	_, gen := generators[op]
	_, row := rowKernels[op]
	_, multi := perResult[op]
	_, planned := planners[op]
	return gen || row || multi || planned || op == "matmul" || op == "constant" || op == "reshape"
}

// Kernels writes the kernels of a launch site, in launch order (Plan's). A generator's bug is
// an error naming the op (FuzzKernels looks for them), never a crash of `ppc dis --cuda`. A
// site with a prologue is its prologue's kernels and then its op's, as the device runs them
// (device.PreparePrologue, through scratch memory).
func Kernels(s *device.Spec, name string) (ks []Kernel, err error) {
	defer func() {
		if r := recover(); r != nil {
			ks, err = nil, fmt.Errorf("cannot generate %s: %v", s.Name(), r)
		}
	}()
	if s.Pre != nil {
		pre, op, err := s.SplitPrologue()
		if err != nil {
			return nil, err
		}
		if ks, err = Kernels(pre, name+"_pre"); err != nil {
			return nil, err
		}
		rest, err := Kernels(op, name)
		return append(ks, rest...), err
	}
	p, err := PlanSite(s, name)
	if err != nil {
		return nil, err
	}
	ks = make([]Kernel, len(p.Steps))
	for i, st := range p.Steps {
		ks[i] = st.Kernel
	}
	return ks, nil
}

// A Plan is how a launch site runs: kernels launched in order, each reading some of the
// site's operands, results and scratch buffers and writing one of them. Most sites are one
// kernel; an op with several results is one kernel per result; and ops whose one-kernel form
// would be serial or quadratic on a GPU (planners) are several kernels passing partial
// results through scratch memory, which the device allocates once when it prepares the site.
type Plan struct {
	Steps   []Step
	Scratch []ir.Type
	// Copy is a site that copies its operand's bytes to its result (reshape): the driver's
	// device-to-device copy, no kernel. A generated copy moves an element per thread and
	// instruction (2 bytes for bf16), at a third of the bandwidth a reshape then takes
	// (measured on an H100: 34 µs for 12.6 MB with the launch's wait).
	Copy bool
}

// A Step is one kernel of a plan: its operands (In) and its result (Out). A tile kernel may
// write more results (Also: FlashAttention's forward writes O and the log-sum-exp in one
// pass), passed after the operands.
type Step struct {
	Kernel Kernel
	In     []Ref
	Also   []Ref
	Out    Ref
}

// A Ref names a buffer of a launch site: an operand, a result or a scratch buffer.
type Ref struct {
	Kind  RefKind
	Index int
}

// RefKind says which of a launch site's buffers a Ref names.
type RefKind int

const (
	Operand RefKind = iota
	Result
	Scratch
)

// planStep is a planner's description of one kernel: its types (the spec it is generated
// from, with the site's op and attributes), generator and buffers.
type planStep struct {
	in   []Ref
	also []Ref // results written besides out (tile kernels only)
	out  Ref
	gen  generator
	// row, when set, writes the step's kernel itself (a row kernel, rows.go, or a tile
	// kernel, tiles.go) instead of gen's loop.
	row func(s *device.Spec, name string) (Kernel, error)
}

// planners are the ops launched as several kernels with scratch memory: given the site, the
// scratch buffers' types and the steps.
var planners = map[string]func(s *device.Spec) (scratch []ir.Type, steps []planStep, err error){}

// PlanSite plans a launch site (name prefixes its kernels' names).
func PlanSite(s *device.Spec, name string) (*Plan, error) {
	all := func() []Ref {
		refs := make([]Ref, len(s.In))
		for i := range s.In {
			refs[i] = Ref{Operand, i}
		}
		return refs
	}
	if s.Op != nil && s.Op.Name == "reshape" {
		if len(s.In) != 1 || len(s.Out) != 1 || s.In[0].Bytes() != s.Out[0].Bytes() {
			return nil, fmt.Errorf("reshape of %v to %v", s.In, s.Out)
		}
		return &Plan{Copy: true}, nil
	}
	if s.Op == nil || s.Op.Has(ir.Elementwise) || (generators[s.Op.Name] != nil || rowKernels[s.Op.Name] != nil) && planners[s.Op.Name] == nil {
		k, err := Generate(s, name)
		if err != nil {
			return nil, err
		}
		var also []Ref // a fused chain's results besides the first
		for r := 1; r < len(s.Out); r++ {
			also = append(also, Ref{Result, r})
		}
		return &Plan{Steps: []Step{{Kernel: k, In: all(), Also: also, Out: Ref{Result, 0}}}}, nil
	}
	if per, ok := perResult[s.Op.Name]; ok {
		if per.results > 0 && len(s.Out) != per.results {
			return nil, fmt.Errorf("%s: %d results, want %d", s.Op.Name, len(s.Out), per.results)
		}
		p := &Plan{}
		for r := range s.Out {
			one := *s
			one.Out = s.Out[r : r+1]
			k, err := wrap(&one, fmt.Sprintf("%s_r%d", name, r), per.gen(r))
			if err != nil {
				return nil, err
			}
			p.Steps = append(p.Steps, Step{Kernel: k, In: all(), Out: Ref{Result, r}})
		}
		return p, nil
	}
	planner, ok := planners[s.Op.Name]
	if !ok {
		return nil, fmt.Errorf("no CUDA kernel for op %s yet", s.Op.Name)
	}
	scratch, steps, err := planner(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", s.Op.Name, err)
	}
	p := &Plan{Scratch: scratch}
	typeOf := func(r Ref) (ir.Type, error) {
		switch {
		case r.Kind == Operand && r.Index < len(s.In):
			return s.In[r.Index], nil
		case r.Kind == Result && r.Index < len(s.Out):
			return s.Out[r.Index], nil
		case r.Kind == Scratch && r.Index < len(scratch):
			return scratch[r.Index], nil
		}
		return ir.Type{}, fmt.Errorf("%s: plan names buffer %v of %d operands, %d results, %d scratch", s.Op.Name, r, len(s.In), len(s.Out), len(scratch))
	}
	for i, st := range steps {
		one := &device.Spec{Op: s.Op, Attrs: s.Attrs}
		for _, r := range st.in {
			t, err := typeOf(r)
			if err != nil {
				return nil, err
			}
			one.In = append(one.In, t)
		}
		t, err := typeOf(st.out)
		if err != nil {
			return nil, err
		}
		one.Out = []ir.Type{t}
		for _, r := range st.also {
			t, err := typeOf(r)
			if err != nil {
				return nil, err
			}
			one.Out = append(one.Out, t)
		}
		var k Kernel
		if st.row != nil {
			k, err = st.row(one, fmt.Sprintf("%s_s%d", name, i))
		} else {
			k, err = wrap(one, fmt.Sprintf("%s_s%d", name, i), st.gen)
		}
		if err != nil {
			return nil, err
		}
		p.Steps = append(p.Steps, Step{Kernel: k, In: st.in, Also: st.also, Out: st.out})
	}
	return p, nil
}

// wrap puts a generator's loop body into the kernel function and its host launcher.
func wrap(s *device.Spec, name string, g generator) (Kernel, error) {
	params, hostArgs, ost, err := signature(s, true)
	if err != nil {
		return Kernel{}, fmt.Errorf("%s: %v", s.Op.Name, err)
	}
	out := s.Out[0]
	body, n, err := g(s)
	if err != nil {
		return Kernel{}, fmt.Errorf("%s: %v", s.Op.Name, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// %s: %s → %s\n", name, s.Op.Name, out)
	fmt.Fprintf(&b, "PPC_GLOBAL void %s(%s) {\n  PPC_FOR_EACH(i, n) {\n%s  }\n}\n", name, strings.Join(params, ", "), body)
	writeHostLauncher(&b, name, hostArgs, ost)
	return Kernel{Name: name, Body: b.String(), N: n, In: s.In, Out: out}, nil
}

// perResult lists the ops with several results (how many; 0: any), and the generator of
// each result.
var perResult = map[string]struct {
	results int
	gen     func(r int) generator
}{
	"split": {0, genSplit},
}

// writeHostLauncher writes NAME_host, the host build's launch: every block and thread in
// turn.
func writeHostLauncher(b *strings.Builder, name string, hostArgs []string, ost string) {
	fmt.Fprintf(b, "#ifdef PPC_HOST\nPPC_GLOBAL void %s_host(void** in, void* out, long long n, int grid, int block) {\n", name)
	b.WriteString("  (void)in;\n  ppc_gdim = (unsigned)grid; ppc_bdim = (unsigned)block;\n")
	b.WriteString("  for (ppc_bid = 0; ppc_bid < ppc_gdim; ppc_bid++)\n    for (ppc_tid = 0; ppc_tid < ppc_bdim; ppc_tid++)\n")
	fmt.Fprintf(b, "      %s(%s);\n}\n#endif\n", name, strings.Join(append(hostArgs, fmt.Sprintf("(%s*)out", ost), "n"), ", "))
}

// A generator writes a kernel's loop body over output (or row) index i and says how many
// indices the launch covers.
type generator func(s *device.Spec) (body string, n int64, err error)

var generators = map[string]generator{
	"transpose":   genTranspose,
	"broadcast":   genBroadcast,
	"iota":        genIota,
	"reduce_sum":  genReduce("sum"),
	"reduce_mean": genReduce("mean"),
	"reduce_max":  genReduce("max"),
	"reduce_min":  genReduce("min"),
	"reduce_prod": genReduce("prod"),
	// log Σ exp over the axes.
	"reduce_log_sum_exp": genReduce("log_sum_exp"),
	"softmax":            genSoftmax(false),
	"log_softmax":        genSoftmax(true),
	// Backward of softmax (y, dy): dx = y·(dy − Σ dy·y); of log_softmax: dx = dy − exp(y)·Σ dy.
	"softmax_grad":         genSoftmaxGrad(false),
	"log_softmax_grad":     genSoftmaxGrad(true),
	"concat":               genConcat,
	"slice":                genSlice,
	"gather":               genGather,
	"gather_elements":      genGatherElements,
	"gather_elements_grad": genGatherElementsGrad,
}

// coords writes the output coordinates c0… of index i for shape.
func coords(b *strings.Builder, shape ir.Shape, idx string) {
	fmt.Fprintf(b, "    long long r = %s;\n", idx)
	for d := len(shape) - 1; d >= 0; d-- {
		fmt.Fprintf(b, "    long long c%d = r %% %dLL; r /= %dLL;\n", d, shape[d], shape[d])
	}
	b.WriteString("    (void)r;\n")
}

// strides are a shape's row-major element strides.
func strides(shape ir.Shape) []int64 {
	st := make([]int64, len(shape))
	acc := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		st[d] = acc
		acc *= int64(shape[d])
	}
	return st
}

// move writes out[i] = in0[off] for a data-movement kernel, in the element's storage type
// (a move converts nothing).
func move(off string) string {
	return fmt.Sprintf("    out[i] = in0[%s];\n", off)
}

func genTranspose(s *device.Spec) (string, int64, error) {
	in, out := s.In[0], s.Out[0]
	perm := s.Attrs.Ints("perm")
	if len(perm) != in.Rank() || in.DType != out.DType {
		return "", 0, fmt.Errorf("perm %v for rank %d", perm, in.Rank())
	}
	st := strides(in.Shape)
	var b strings.Builder
	coords(&b, out.Shape, "i")
	var terms []string
	for d, p := range perm {
		if p < 0 || p >= len(st) {
			return "", 0, fmt.Errorf("perm %v out of range", perm)
		}
		terms = append(terms, fmt.Sprintf("c%d * %dLL", d, st[p]))
	}
	if len(terms) == 0 {
		terms = []string{"0"}
	}
	b.WriteString(move(strings.Join(terms, " + ")))
	return b.String(), int64(out.NumElements()), nil
}

func genBroadcast(s *device.Spec) (string, int64, error) {
	in, out := s.In[0], s.Out[0]
	if in.DType != out.DType {
		return "", 0, fmt.Errorf("dtype changes from %s to %s", in.DType, out.DType)
	}
	var b strings.Builder
	off := offset(in, out.Shape)
	if strings.Contains(off, "c") {
		coords(&b, out.Shape, "i")
	}
	b.WriteString(move(off))
	return b.String(), int64(out.NumElements()), nil
}

func genIota(s *device.Spec) (string, int64, error) {
	out := s.Out[0]
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), out.Rank())
	if err != nil {
		return "", 0, err
	}
	var b strings.Builder
	coords(&b, out.Shape, "i")
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, fmt.Sprintf("(%s)c%d", classOf(out.DType).ctype(), axis))))
	return b.String(), int64(out.NumElements()), nil
}

// floatIO checks a float kernel's types and returns its accumulation class: double for f64,
// else float (16-bit inputs are widened, as the CPU device's kernels widen them).
func floatIO(s *device.Spec) (class, error) {
	for _, t := range append(append([]ir.Type{}, s.In...), s.Out...) {
		if !t.DType.IsFloat() {
			return 0, fmt.Errorf("%s is not a float dtype", t.DType)
		}
	}
	return classOf(s.In[0].DType), nil
}

// reduceGroup writes the start (base) of output index idx's group of a reduction of in over
// the axes red, and returns the group's size and a writer of the offset (into off) of its
// j-th element, the reduced coordinates taken in row-major order (the CPU device's order).
func reduceGroup(b *strings.Builder, in ir.Type, red []bool, idx string) (count int64, offset func(b *strings.Builder, j, indent string)) {
	st := strides(in.Shape)
	var kept, gone []int
	for d, r := range red {
		if r {
			gone = append(gone, d)
		} else {
			kept = append(kept, d)
		}
	}
	// The output index enumerates the kept dims in order (keepdims only adds 1s).
	keptShape := make(ir.Shape, len(kept))
	for i, d := range kept {
		keptShape[i] = in.Shape[d]
	}
	coords(b, keptShape, idx)
	base := []string{"0LL"}
	for i, d := range kept {
		base = append(base, fmt.Sprintf("c%d * %dLL", i, st[d]))
	}
	count = 1
	for _, d := range gone {
		count *= int64(in.Shape[d])
	}
	fmt.Fprintf(b, "    long long base = %s;\n", strings.Join(base, " + "))
	return count, func(b *strings.Builder, j, indent string) {
		fmt.Fprintf(b, "%slong long q = %s, off = base;\n", indent, j)
		for k := len(gone) - 1; k >= 0; k-- {
			d := gone[k]
			fmt.Fprintf(b, "%soff += (q %% %dLL) * %dLL; q /= %dLL;\n", indent, in.Shape[d], st[d], in.Shape[d])
		}
	}
}

// genReduce reduces over the axes attribute (default all): one thread per output element
// loops over the reduced elements, accumulating in float (double for f64). max and min
// propagate NaN; log_sum_exp subtracts the maximum first (and returns it when it is ±Inf or
// NaN), as the CPU device does.
func genReduce(kind string) generator {
	return func(s *device.Spec) (string, int64, error) {
		ct, err := floatIO(s)
		if err != nil {
			return "", 0, err
		}
		in, out := s.In[0], s.Out[0]
		red, err := ir.ReduceAxes(s.Attrs, in.Rank())
		if err != nil {
			return "", 0, err
		}
		ty := ct.ctype()
		var b strings.Builder
		count, offset := reduceGroup(&b, in, red, "i")
		v := load(in.DType, "in0", "off")
		loop := func(acc string) {
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) {\n", count)
			offset(&b, "j", "      ")
			fmt.Fprintf(&b, "      %s v = %s;\n      %s\n    }\n", ty, v, acc)
		}
		switch kind {
		case "max", "min":
			fmt.Fprintf(&b, "    %s acc = %sPPC_INF;\n", ty, map[string]string{"max": "-", "min": ""}[kind])
			loop(fmt.Sprintf("acc = ppc_%s<%s>(acc, v);", kind, ty))
		case "prod":
			fmt.Fprintf(&b, "    %s acc = 1;\n", ty)
			loop("acc *= v;")
		case "log_sum_exp":
			fmt.Fprintf(&b, "    %s m = -PPC_INF;\n", ty)
			loop(fmt.Sprintf("m = ppc_max<%s>(m, v);", ty))
			fmt.Fprintf(&b, "    %s acc = 0;\n", ty)
			loop("acc += ppc_expo((" + ty + ")(v - m));")
			b.WriteString("    acc = (m != m || m == PPC_INF || m == -PPC_INF) ? m : m + ppc_loga(acc);\n")
		default: // sum, mean
			fmt.Fprintf(&b, "    %s acc = 0;\n", ty)
			loop("acc += v;")
			if kind == "mean" {
				fmt.Fprintf(&b, "    acc = acc / (%s)%dLL;\n", ty, count)
			}
		}
		fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
		return b.String(), int64(out.NumElements()), nil
	}
}

// genSoftmax: one thread per row along axis (outer × inner rows of n), the maximum
// subtracted before exponentiating.
func genSoftmax(logOf bool) generator {
	return func(s *device.Spec) (string, int64, error) {
		ct, err := floatIO(s)
		if err != nil {
			return "", 0, err
		}
		in, out := s.In[0], s.Out[0]
		outer, n, inner, err := rows(s)
		if err != nil {
			return "", 0, err
		}
		ty := ct.ctype()
		at := func(j string) string { return fmt.Sprintf("base + (%s) * %dLL", j, inner) }
		var b strings.Builder
		fmt.Fprintf(&b, "    long long base = (i / %dLL) * %dLL + i %% %dLL;\n", inner, n*inner, inner)
		fmt.Fprintf(&b, "    %s m = -PPC_INF;\n", ty)
		fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) m = ppc_max<%s>(m, %s);\n", n, ty, load(in.DType, "in0", at("j")))
		fmt.Fprintf(&b, "    %s sum = 0;\n", ty)
		fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) sum += ppc_expo((%s)(%s - m));\n", n, ty, load(in.DType, "in0", at("j")))
		if logOf {
			fmt.Fprintf(&b, "    %s ls = ppc_loga(sum);\n", ty)
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) out[%s] = %s;\n", n, at("j"), store(out.DType, round(out.DType, fmt.Sprintf("%s - m - ls", load(in.DType, "in0", at("j"))))))
		} else {
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) out[%s] = %s;\n", n, at("j"), store(out.DType, round(out.DType, fmt.Sprintf("ppc_expo((%s)(%s - m)) / sum", ty, load(in.DType, "in0", at("j"))))))
		}
		return b.String(), outer * inner, nil
	}
}

// rows is the (outer, n, inner) split of a shape around axis: rows of n elements, inner apart.
func rows(s *device.Spec) (outer, n, inner int64, err error) {
	in := s.In[0]
	axis, err := ir.NormAxis(s.Attrs.Int("axis", -1), in.Rank())
	if err != nil {
		return 0, 0, 0, err
	}
	outer, n, inner = 1, int64(in.Shape[axis]), 1
	for d, x := range in.Shape {
		if d < axis {
			outer *= int64(x)
		} else if d > axis {
			inner *= int64(x)
		}
	}
	return outer, n, inner, nil
}

func genSoftmaxGrad(logOf bool) generator {
	return func(s *device.Spec) (string, int64, error) {
		ct, err := floatIO(s)
		if err != nil {
			return "", 0, err
		}
		if len(s.In) != 2 {
			return "", 0, fmt.Errorf("want operands y and dy")
		}
		outer, n, inner, err := rows(s)
		if err != nil {
			return "", 0, err
		}
		ty, out := ct.ctype(), s.Out[0]
		at := func(j string) string { return fmt.Sprintf("base + (%s) * %dLL", j, inner) }
		y, dy := load(s.In[0].DType, "in0", at("j")), load(s.In[1].DType, "in1", at("j"))
		var b strings.Builder
		fmt.Fprintf(&b, "    long long base = (i / %dLL) * %dLL + i %% %dLL;\n", inner, n*inner, inner)
		fmt.Fprintf(&b, "    %s sum = 0;\n", ty)
		if logOf {
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) sum += %s;\n", n, dy)
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) out[%s] = %s;\n", n, at("j"), store(out.DType, round(out.DType, fmt.Sprintf("%s - ppc_expo((%s)(%s)) * sum", dy, ty, y))))
		} else {
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) sum += %s * %s;\n", n, dy, y)
			fmt.Fprintf(&b, "    for (long long j = 0; j < %dLL; j++) out[%s] = %s;\n", n, at("j"), store(out.DType, round(out.DType, fmt.Sprintf("%s * (%s - sum)", y, dy))))
		}
		return b.String(), outer * inner, nil
	}
}

// genGather: out[o, k, e] = data[o, idx[k], e] (negative indices count from the end). An
// index outside the dim writes zeros: the runtime checks model inputs against their declared
// ranges when it reads them (runtime/data/datafile.go), so only a bug reaches it.
func genGather(s *device.Spec) (string, int64, error) {
	data, idx, out := s.In[0], s.In[1], s.Out[0]
	if !idx.DType.IsInt() || data.DType != out.DType {
		return "", 0, fmt.Errorf("want data and integer indices, got %s, %s", data, idx)
	}
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), data.Rank())
	if err != nil {
		return "", 0, err
	}
	inner, dim := int64(1), int64(data.Shape[axis])
	for _, v := range data.Shape[axis+1:] {
		inner *= int64(v)
	}
	K := int64(idx.NumElements())
	var b strings.Builder
	fmt.Fprintf(&b, "    long long e = i %% %dLL, k = (i / %dLL) %% %dLL, o = i / (%dLL * %dLL);\n", inner, inner, max(K, 1), inner, max(K, 1))
	fmt.Fprintf(&b, "    long long v = (long long)in1[k]; if (v < 0) v += %dLL;\n", dim)
	fmt.Fprintf(&b, "    if (v < 0 || v >= %dLL) { out[i] = 0; continue; }\n", dim)
	fmt.Fprintf(&b, "    out[i] = in0[(o * %dLL + v) * %dLL + e];\n", dim, inner)
	return b.String(), int64(out.NumElements()), nil
}

// genGatherElements (ONNX GatherElements): y[p] = x[p with dim axis replaced by idx(p)], y of
// the indices' shape; an index outside the dim writes 0 (see genGather).
func genGatherElements(s *device.Spec) (string, int64, error) {
	x, idx, out := s.In[0], s.In[1], s.Out[0]
	if !idx.DType.IsInt() || x.Rank() != idx.Rank() || x.DType != out.DType {
		return "", 0, fmt.Errorf("want data and integer indices of one rank, got %s, %s", x, idx)
	}
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), x.Rank())
	if err != nil {
		return "", 0, err
	}
	st := strides(x.Shape)
	var b strings.Builder
	coords(&b, idx.Shape, "i")
	fmt.Fprintf(&b, "    long long v = (long long)in1[i]; if (v < 0) v += %dLL;\n", x.Shape[axis])
	fmt.Fprintf(&b, "    if (v < 0 || v >= %dLL) { out[i] = 0; continue; }\n", x.Shape[axis])
	terms := []string{"0LL"}
	for d := range x.Shape {
		c := fmt.Sprintf("c%d", d)
		if d == axis {
			c = "v"
		}
		terms = append(terms, fmt.Sprintf("%s * %dLL", c, st[d]))
	}
	fmt.Fprintf(&b, "    out[i] = in0[%s];\n", strings.Join(terms, " + "))
	return b.String(), int64(out.NumElements()), nil
}

// genGatherElementsGrad: the scatter-add into zeros of the data's shape, one thread per
// element adding, in increasing order along axis, the dy of every index position that
// gathered it (the CPU device's order; no atomics).
func genGatherElementsGrad(s *device.Spec) (string, int64, error) {
	idx, dy, out := s.In[0], s.In[1], s.Out[0]
	if !idx.DType.IsInt() || !dy.DType.IsFloat() || idx.Rank() != out.Rank() {
		return "", 0, fmt.Errorf("want integer indices and a float gradient of the result's rank, got %s, %s", idx, dy)
	}
	axis := s.Attrs.Int("axis", 0)
	if axis < 0 || axis >= out.Rank() {
		return "", 0, fmt.Errorf("axis %d out of range for %s", axis, out)
	}
	ist := strides(idx.Shape)
	ct := classOf(out.DType)
	var b strings.Builder
	coords(&b, out.Shape, "i")
	fmt.Fprintf(&b, "    %s acc = 0;\n", ct.ctype())
	var inside, base []string
	for d := range out.Shape {
		if d != axis {
			inside = append(inside, fmt.Sprintf("c%d < %dLL", d, idx.Shape[d]))
			base = append(base, fmt.Sprintf("c%d * %dLL", d, ist[d]))
		}
	}
	if len(inside) == 0 {
		inside = []string{"1"}
	}
	if len(base) == 0 {
		base = []string{"0LL"}
	}
	fmt.Fprintf(&b, "    if (%s) {\n      long long pb = %s;\n", strings.Join(inside, " && "), strings.Join(base, " + "))
	fmt.Fprintf(&b, "      for (long long k = 0; k < %dLL; k++) {\n        long long p = pb + k * %dLL;\n", idx.Shape[axis], ist[axis])
	fmt.Fprintf(&b, "        long long w = (long long)in0[p]; if (w < 0) w += %dLL;\n", out.Shape[axis])
	fmt.Fprintf(&b, "        if (w == c%d) acc += %s;\n      }\n    }\n", axis, load(dy.DType, "in1", "p"))
	fmt.Fprintf(&b, "    out[i] = %s;\n", store(out.DType, round(out.DType, "acc")))
	return b.String(), int64(out.NumElements()), nil
}

// normRowsOf splits x at the axis attribute: rows of the normalised dims axis.. (n elements).
func normRowsOf(s *device.Spec, x ir.Type) (rows, n int64, err error) {
	axis, err := ir.NormAxis(s.Attrs.Int("axis", -1), x.Rank())
	if err != nil {
		return 0, 0, err
	}
	rows, n = 1, 1
	for d, v := range x.Shape {
		if d < axis {
			rows *= int64(v)
		} else {
			n *= int64(v)
		}
	}
	return rows, n, nil
}

// ceRows checks cross-entropy's logits and labels: rows of classes, integer labels of the
// leading dims; ignore is ignore_index (or a value no label has).
func ceRows(s *device.Spec) (rows, classes int64, ignore int64, err error) {
	logits, labels := s.In[0], s.In[1]
	if !logits.DType.IsFloat() || !labels.DType.IsInt() || logits.Rank() < 1 || !labels.Shape.Equal(logits.Shape[:logits.Rank()-1]) {
		return 0, 0, 0, fmt.Errorf("labels %s do not match logits %s", labels, logits)
	}
	classes = int64(logits.Shape[logits.Rank()-1])
	rows = int64(logits.NumElements()) / max(classes, 1)
	ignore = -1 << 62
	if s.Attrs.Has("ignore_index") {
		ignore = int64(s.Attrs.Int("ignore_index", 0))
	}
	return rows, classes, ignore, nil
}

// lse writes m and the log-sum-exp's pieces of row rb (classes elements), as genSoftmax does.
func lse(b *strings.Builder, ty string, logits ir.Type, classes int64) {
	at := func(j string) string { return load(logits.DType, "in0", "rb + "+j) }
	fmt.Fprintf(b, "%s m = -PPC_INF;\n", ty)
	fmt.Fprintf(b, "for (long long j = 0; j < %dLL; j++) m = ppc_max<%s>(m, %s);\n", classes, ty, at("j"))
	fmt.Fprintf(b, "%s sum = 0;\n", ty)
	fmt.Fprintf(b, "for (long long j = 0; j < %dLL; j++) sum += ppc_expo((%s)(%s - m));\n", classes, ty, at("j"))
}

// genConcat: one thread per output element takes it from the operand its coordinate along
// axis falls in.
func genConcat(s *device.Spec) (string, int64, error) {
	out := s.Out[0]
	axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), out.Rank())
	if err != nil {
		return "", 0, err
	}
	var b strings.Builder
	coords(&b, out.Shape, "i")
	at := 0
	for k, x := range s.In {
		if x.DType != out.DType || x.Rank() != out.Rank() {
			return "", 0, fmt.Errorf("operand %d is %s, the result %s", k, x, out)
		}
		st := strides(x.Shape)
		terms := []string{"0LL"}
		for d := range x.Shape {
			c := fmt.Sprintf("c%d", d)
			if d == axis {
				c = fmt.Sprintf("(c%d - %d)", d, at)
			}
			terms = append(terms, fmt.Sprintf("%s * %dLL", c, st[d]))
		}
		at += x.Shape[axis]
		fmt.Fprintf(&b, "    if (c%d < %d) { out[i] = in%d[%s]; continue; }\n", axis, at, k, strings.Join(terms, " + "))
	}
	if at != out.Shape[axis] {
		return "", 0, fmt.Errorf("operands cover %d of the result's %d along axis %d", at, out.Shape[axis], axis)
	}
	return b.String(), int64(out.NumElements()), nil
}

// genSplit: result r is the operand's block along axis after the first r sizes.
func genSplit(r int) generator {
	return func(s *device.Spec) (string, int64, error) {
		in, out := s.In[0], s.Out[0]
		axis, err := ir.NormAxis(s.Attrs.Int("axis", 0), in.Rank())
		if err != nil {
			return "", 0, err
		}
		sizes := s.Attrs.Ints("sizes")
		if r >= len(sizes) || in.DType != out.DType || out.Rank() != in.Rank() {
			return "", 0, fmt.Errorf("result %d of %s split into %v", r, in, sizes)
		}
		off := 0
		for _, z := range sizes[:r] {
			off += z
		}
		st := strides(in.Shape)
		var b strings.Builder
		coords(&b, out.Shape, "i")
		terms := []string{"0LL"}
		for d := range out.Shape {
			c := fmt.Sprintf("c%d", d)
			if d == axis {
				c = fmt.Sprintf("(c%d + %d)", d, off)
			}
			terms = append(terms, fmt.Sprintf("%s * %dLL", c, st[d]))
		}
		b.WriteString(move(strings.Join(terms, " + ")))
		return b.String(), int64(out.NumElements()), nil
	}
}

// genSlice: out[c] = in[start + c·step] per dim (negative steps walk backwards).
func genSlice(s *device.Spec) (string, int64, error) {
	in, out := s.In[0], s.Out[0]
	dims, err := ir.SliceDims(s.Attrs, in.Shape)
	if err != nil {
		return "", 0, err
	}
	if in.DType != out.DType || len(dims) != in.Rank() {
		return "", 0, fmt.Errorf("slice of %s into %s", in, out)
	}
	st := strides(in.Shape)
	var b strings.Builder
	coords(&b, out.Shape, "i")
	terms := []string{"0LL"}
	for d, sd := range dims {
		terms = append(terms, fmt.Sprintf("(%dLL + c%d * %dLL) * %dLL", sd.Start, d, sd.Step, st[d]))
	}
	b.WriteString(move(strings.Join(terms, " + ")))
	return b.String(), int64(out.NumElements()), nil
}
