package cuda

import (
	_ "embed"
	"fmt"
	"strings"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Header is ppc_cuda.h, which every generated kernel includes (prepended by Source).
//
//go:embed ppc_cuda.h
var Header string

// Kernel is the CUDA C of one launch site.
type Kernel struct {
	Name string
	// Body is the kernel's source without the header: a __global__ function
	// NAME(const T0* in0, …, TO* out, long long n) over n output elements in a grid-stride
	// loop, and, for the host build, NAME_host(void** in, void* out, long long n, int grid,
	// int block), which runs the grid's blocks and threads one after another.
	Body string
	N    int64
	// Width > 0 marks a row kernel (rows.go): N rows of Width elements, a block per row.
	Width int64
	// Block > 0 marks a tile kernel (tiles.go): N tiles, a block of exactly Block threads
	// each, using Shared bytes of static shared memory.
	Block, Shared int64
	In            []ir.Type
	Out           ir.Type
}

// Source is the kernels' full translation unit: the header, then each body.
func Source(ks ...Kernel) string {
	var b strings.Builder
	b.WriteString(Header)
	for _, k := range ks {
		b.WriteString("\n")
		b.WriteString(k.Body)
	}
	return b.String()
}

// class is how a dtype's values live in a kernel's registers.
type class int

const (
	classInt class = iota
	classFloat
	classDouble
)

func classOf(d ir.DType) class {
	switch d {
	case ir.F64:
		return classDouble
	case ir.F32, ir.BF16, ir.F16:
		return classFloat
	}
	return classInt
}

func (c class) ctype() string {
	return [...]string{"long long", "float", "double"}[c]
}

// storage is the C type of a dtype's elements in memory.
func storage(d ir.DType) (string, error) {
	switch d {
	case ir.F32:
		return "float", nil
	case ir.F64:
		return "double", nil
	case ir.BF16, ir.F16:
		return "uint16_t", nil
	case ir.I64:
		return "long long", nil
	case ir.I32:
		return "int", nil
	case ir.I8:
		return "signed char", nil
	case ir.U8, ir.Bool:
		return "unsigned char", nil
	}
	return "", fmt.Errorf("dtype %s has no CUDA kernel", d)
}

// load reads element off of pointer p (dtype d) into its class's register type.
func load(d ir.DType, p, off string) string {
	switch d {
	case ir.BF16:
		return fmt.Sprintf("ppc_bf16_f32(%s[%s])", p, off)
	case ir.F16:
		return fmt.Sprintf("ppc_f16_f32(%s[%s])", p, off)
	}
	return fmt.Sprintf("(%s)%s[%s]", classOf(d).ctype(), p, off)
}

// round brings a value to what dtype d holds, in d's register type: each step of a fused
// chain rounds to its own dtype, as the CPU device's engine does.
func round(d ir.DType, v string) string {
	switch d {
	case ir.F64:
		return fmt.Sprintf("(double)(%s)", v)
	case ir.F32:
		return fmt.Sprintf("(float)(%s)", v)
	case ir.BF16:
		return fmt.Sprintf("ppc_round_bf16((float)(%s))", v)
	case ir.F16:
		return fmt.Sprintf("ppc_round_f16((float)(%s))", v)
	case ir.I64:
		return fmt.Sprintf("(long long)(%s)", v)
	case ir.I32:
		return fmt.Sprintf("(long long)(int)(%s)", v)
	case ir.I8:
		return fmt.Sprintf("(long long)(signed char)(%s)", v)
	case ir.U8:
		return fmt.Sprintf("(long long)(unsigned char)(%s)", v)
	case ir.Bool:
		return fmt.Sprintf("(long long)((%s) != 0)", v)
	}
	return v
}

// store converts a register value of dtype d to its storage.
func store(d ir.DType, v string) string {
	switch d {
	case ir.BF16:
		return fmt.Sprintf("ppc_f32_bf16(%s)", v)
	case ir.F16:
		return fmt.Sprintf("ppc_f32_f16(%s)", v)
	}
	s, _ := storage(d)
	return fmt.Sprintf("(%s)(%s)", s, v)
}

// opExpr is the C expression of one elementwise op on operand expressions a (already in the
// step's compute type ct), or an error for an op without a CUDA form.
func opExpr(name string, at ir.Attrs, a []string, ct class, out ir.DType) (string, error) {
	need := func(n int) error {
		if len(a) != n {
			return fmt.Errorf("%s: %d operands, want %d", name, len(a), n)
		}
		return nil
	}
	one := func(s string) string { return "(" + ct.ctype() + ")(" + s + ")" }
	var n int
	var e string
	switch name {
	case "add", "sub", "mul", "equal", "less", "greater", "and", "or", "pow", "max", "min", "div":
		n = 2
		x, y := a[0], a[min(1, len(a)-1)]
		switch name {
		case "add":
			e = x + " + " + y
		case "sub":
			e = x + " - " + y
		case "mul":
			e = x + " * " + y
		case "div":
			if out.IsInt() {
				e = fmt.Sprintf("(%s) == 0 ? 0 : (%s) / (%s)", y, x, y) // as the CPU device: x/0 = 0
			} else {
				e = x + " / " + y
			}
		case "equal":
			e = x + " == " + y
		case "less":
			e = x + " < " + y
		case "greater":
			e = x + " > " + y
		case "and":
			e = fmt.Sprintf("(%s) != 0 && (%s) != 0", x, y)
		case "or":
			e = fmt.Sprintf("(%s) != 0 || (%s) != 0", x, y)
		case "pow":
			e = fmt.Sprintf("ppc_power(%s, %s)", one(x), one(y))
		case "max":
			e = fmt.Sprintf("ppc_max<%s>(%s, %s)", ct.ctype(), x, y)
		case "min":
			e = fmt.Sprintf("ppc_min<%s>(%s, %s)", ct.ctype(), x, y)
		}
	case "relu_grad", "gelu_grad", "silu_grad", "sigmoid_grad", "tanh_grad":
		// Operands x (or the forward's result y) and dy.
		n = 2
		x, dy := one(a[0]), one(a[min(1, len(a)-1)])
		switch name {
		case "relu_grad":
			e = fmt.Sprintf("(%s) > 0 ? (%s) : 0", x, dy)
		case "gelu_grad":
			if at.Str("approximate", "none") == "tanh" {
				e = fmt.Sprintf("%s * ppc_gelu_tanh_grad<%s>(%s)", dy, ct.ctype(), x)
			} else {
				e = fmt.Sprintf("%s * ppc_gelu_grad<%s>(%s)", dy, ct.ctype(), x)
			}
		case "silu_grad":
			e = fmt.Sprintf("%s * ppc_sigmoid<%s>(%s) * (1 + %s * (1 - ppc_sigmoid<%s>(%s)))", dy, ct.ctype(), x, x, ct.ctype(), x)
		case "sigmoid_grad":
			e = fmt.Sprintf("%s * %s * (1 - %s)", dy, x, x)
		case "tanh_grad":
			e = fmt.Sprintf("%s * (1 - %s * %s)", dy, x, x)
		}
	case "where":
		n = 3
		if len(a) == 3 {
			e = fmt.Sprintf("(%s) != 0 ? (%s) : (%s)", a[0], a[1], a[2])
		}
	default:
		n = 1
		x := a[0]
		switch name {
		case "neg":
			e = "-" + x
		case "not":
			e = fmt.Sprintf("(%s) == 0", x)
		case "stop_gradient", "cast":
			e = x
		case "abs":
			e = fmt.Sprintf("ppc_fabs(%s)", x)
		case "relu":
			e = fmt.Sprintf("(%s) > 0 ? (%s) : 0", x, x)
		case "exp":
			e = fmt.Sprintf("ppc_expo(%s)", one(x))
		case "log":
			e = fmt.Sprintf("ppc_loga(%s)", one(x))
		case "tanh":
			e = fmt.Sprintf("ppc_tanhy(%s)", one(x))
		case "erf":
			e = fmt.Sprintf("ppc_erfy(%s)", one(x))
		case "sin":
			e = fmt.Sprintf("ppc_sine(%s)", one(x))
		case "cos":
			e = fmt.Sprintf("ppc_cosine(%s)", one(x))
		case "sqrt":
			e = fmt.Sprintf("ppc_sqrt(%s)", one(x))
		case "rsqrt":
			e = fmt.Sprintf("1 / ppc_sqrt(%s)", one(x))
		case "sigmoid":
			e = fmt.Sprintf("ppc_sigmoid<%s>(%s)", ct.ctype(), one(x))
		case "silu":
			e = fmt.Sprintf("%s * ppc_sigmoid<%s>(%s)", one(x), ct.ctype(), one(x))
		case "gelu":
			if at.Str("approximate", "none") == "tanh" {
				e = fmt.Sprintf("ppc_gelu_tanh<%s>(%s)", ct.ctype(), one(x))
			} else {
				e = fmt.Sprintf("ppc_gelu<%s>(%s)", ct.ctype(), one(x))
			}
		default:
			return "", fmt.Errorf("no CUDA kernel for elementwise op %s", name)
		}
	}
	if err := need(n); err != nil {
		return "", err
	}
	return e, nil
}

// offset is the C expression of input t's element offset for output coordinates c0…,
// broadcasting numpy-style (trailing dims aligned, size-1 dims repeated).
func offset(t ir.Type, out ir.Shape) string {
	if t.Shape.Equal(out) {
		return "i"
	}
	if t.NumElements() == 1 {
		return "0"
	}
	var terms []string
	stride := int64(1)
	for d := len(t.Shape) - 1; d >= 0; d-- {
		od := d + len(out) - len(t.Shape)
		if t.Shape[d] != 1 {
			terms = append(terms, fmt.Sprintf("c%d * %dLL", od, stride))
		}
		stride *= int64(t.Shape[d])
	}
	return strings.Join(terms, " + ")
}

// Elementwise writes the kernel of an elementwise launch site: one op, or a chain the
// lowering fused (s.Fused), over the output's elements with broadcast inputs, each step
// computed in float (f32, bf16, f16), double (f64) or 64-bit integers and rounded to its
// own dtype, as the CPU device computes it. A chain writing several results (s.Outputs:
// AdamW's moments, parameter and 16-bit copy) stores them after its last step, each thread
// having read all of its inputs' elements first.
func Elementwise(s *device.Spec, name string) (Kernel, error) {
	if len(s.Out) == 0 || s.Op != nil && len(s.Out) != 1 {
		return Kernel{}, fmt.Errorf("%s: %d results, an elementwise op has one", s.Name(), len(s.Out))
	}
	out := s.Out[0]
	steps := s.Fused
	if s.Op != nil {
		if !s.Op.Has(ir.Elementwise) {
			return Kernel{}, fmt.Errorf("%s is not elementwise", s.Op.Name)
		}
		args := make([]int, len(s.In))
		for i := range args {
			args[i] = i
		}
		steps = []device.FusedStep{{Op: s.Op, Args: args, Attrs: s.Attrs, Type: out}}
	}
	if len(steps) == 0 {
		return Kernel{}, fmt.Errorf("fused kernel without steps")
	}
	outSteps := []int{len(steps) - 1}
	if s.Op == nil {
		outSteps = s.OutputSteps()
	}
	if len(outSteps) != len(s.Out) {
		return Kernel{}, fmt.Errorf("fused kernel writes %d steps into %d results", len(outSteps), len(s.Out))
	}
	for o, j := range outSteps {
		if j < 0 || j >= len(steps) || !steps[j].Type.Equal(s.Out[o]) || !s.Out[o].Shape.Equal(out.Shape) {
			return Kernel{}, fmt.Errorf("fused kernel output %d (step %d) does not match its result %s", o, j, s.Out[o])
		}
	}
	k := Kernel{Name: name, N: int64(out.NumElements()), In: s.In, Out: out}
	// An elementwise launch may write over one of its inputs (the optimizer's in-place
	// updates: each element is read at its own index before it is written), which
	// __restrict__ would promise cannot happen.
	params, hostArgs, ost, err := signature(s, false)
	if err != nil {
		return Kernel{}, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// %s: %s → %s\n", name, Describe(s), out)
	fmt.Fprintf(&b, "PPC_GLOBAL void %s(%s) {\n  PPC_FOR_EACH(i, n) {\n", name, strings.Join(params, ", "))
	// Output coordinates, for the inputs that broadcast.
	broadcast := false
	for _, t := range s.In {
		broadcast = broadcast || (!t.Shape.Equal(out.Shape) && t.NumElements() != 1)
	}
	if broadcast {
		b.WriteString("    long long r = i;\n")
		for d := len(out.Shape) - 1; d >= 0; d-- {
			fmt.Fprintf(&b, "    long long c%d = r %% %dLL; r /= %dLL;\n", d, out.Shape[d], out.Shape[d])
		}
		b.WriteString("    (void)r;\n")
	}
	// vals[k] is the C name and dtype of value k: inputs, then steps.
	type val struct {
		name string
		dt   ir.DType
	}
	var vals []val
	for j, t := range s.In {
		v := fmt.Sprintf("x%d", j)
		fmt.Fprintf(&b, "    %s %s = %s;\n", classOf(t.DType).ctype(), v, load(t.DType, fmt.Sprintf("in%d", j), offset(t, out.Shape)))
		vals = append(vals, val{v, t.DType})
	}
	for si, st := range steps {
		ct := classOf(st.Type.DType)
		var ops []string
		for _, a := range st.Args {
			if a < 0 || a >= len(vals) {
				return Kernel{}, fmt.Errorf("step %d reads value %d of %d", si, a, len(vals))
			}
			ct = max(ct, classOf(vals[a].dt))
			ops = append(ops, vals[a].name)
		}
		if name := st.Op.Name; name == "where" && len(st.Args) == 3 {
			ct = max(classOf(st.Type.DType), classOf(vals[st.Args[1]].dt), classOf(vals[st.Args[2]].dt))
		}
		for i := range ops {
			ops[i] = "(" + ct.ctype() + ")" + ops[i]
		}
		e, err := opExpr(st.Op.Name, st.Attrs, ops, ct, st.Type.DType)
		if err != nil {
			return Kernel{}, err
		}
		v := fmt.Sprintf("s%d", si)
		fmt.Fprintf(&b, "    %s %s = %s; // %s\n", classOf(st.Type.DType).ctype(), v, round(st.Type.DType, e), st.Op.Name)
		vals = append(vals, val{v, st.Type.DType})
	}
	for o := range s.Out[1:] {
		v := vals[len(s.In)+outSteps[o+1]]
		fmt.Fprintf(&b, "    out%d[i] = %s;\n", o+1, store(s.Out[o+1].DType, v.name))
	}
	first := vals[len(s.In)+outSteps[0]]
	fmt.Fprintf(&b, "    out[i] = %s;\n  }\n}\n", store(out.DType, first.name))
	writeHostLauncher(&b, name, hostArgs, ost)
	k.Body = b.String()
	return k, nil
}

// signature is a kernel's parameters (typed inputs in0…, the result out, the size n), the
// host launcher's casts of its void* inputs, and the result's storage type. The pointers are
// __restrict__ when restrict is set: every kernel but the elementwise ones, which may be
// launched in place.
func signature(s *device.Spec, restrict bool) (params, hostArgs []string, ost string, err error) {
	qual := ""
	if restrict {
		qual = " __restrict__"
	}
	for j, t := range s.In {
		st, err := storage(t.DType)
		if err != nil {
			return nil, nil, "", fmt.Errorf("input %d: %v", j, err)
		}
		params = append(params, fmt.Sprintf("const %s*%s in%d", st, qual, j))
		hostArgs = append(hostArgs, fmt.Sprintf("(const %s*)in[%d]", st, j))
	}
	// A kernel's results besides the first (a tile kernel's) come after its operands.
	for j, t := range s.Out[1:] {
		st, err := storage(t.DType)
		if err != nil {
			return nil, nil, "", fmt.Errorf("result %d: %v", j+1, err)
		}
		params = append(params, fmt.Sprintf("%s*%s out%d", st, qual, j+1))
		// The host launch passes them in in[], after the operands.
		hostArgs = append(hostArgs, fmt.Sprintf("(%s*)in[%d]", st, len(s.In)+j))
	}
	if ost, err = storage(s.Out[0].DType); err != nil {
		return nil, nil, "", fmt.Errorf("result: %v", err)
	}
	return append(params, fmt.Sprintf("%s*%s out", ost, qual), "long long n"), hostArgs, ost, nil
}

// Describe names a launch site's ops, as its kernel's comment does: the op, or fused(op,…).
func Describe(s *device.Spec) string {
	if s.Op != nil {
		return s.Op.Name
	}
	var names []string
	for _, st := range s.Fused {
		names = append(names, st.Op.Name)
	}
	return "fused(" + strings.Join(names, ",") + ")"
}
