package passes

import (
	"fmt"
	"math"

	"ppc.dev/ppc/ir"
)

// A float64 reference evaluator for IR functions: a test oracle for the gradient checks, not an
// execution path (programs run on the runtime's kernels). Core ops that ir.Fold evaluates go
// through it; the rest — matmul, softmax, the norms, the losses and every fused gradient op —
// have straightforward float64 implementations here, written from the op table's docs. So do
// the nn ops and their gradient ops (evalNNOps, below): naive loops over every output element
// and window position, independent of the kernels the runtime runs.

// evalTensor is one operand: shape and elements as float64 (integers and bools converted).
type evalTensor struct {
	s ir.Shape
	v []float64
}

type evalImpl func(op *ir.Op, in []evalTensor) [][]float64

// evalFunc runs f on args (one dense per argument) and returns its results.
func evalFunc(f *ir.Func, args []*ir.Dense) ([]*ir.Dense, error) {
	if len(args) != len(f.Args) {
		return nil, fmt.Errorf("@%s takes %d arguments, got %d", f.Name, len(f.Args), len(args))
	}
	env := map[*ir.Value]*ir.Dense{}
	for i, a := range f.Args {
		if !args[i].Type.Equal(a.Type) {
			return nil, fmt.Errorf("argument %%%s is %s, got %s", a.Name, a.Type, args[i].Type)
		}
		env[a] = args[i]
	}
	for _, op := range f.Ops {
		in := make([]*ir.Dense, len(op.Operands))
		for i, x := range op.Operands {
			if in[i] = env[x]; in[i] == nil {
				return nil, fmt.Errorf("%s: operand %d undefined", op.Name(), i)
			}
		}
		out, err := evalOp(op, in)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", op.String(), err)
		}
		for i, r := range op.Results {
			env[r] = out[i]
		}
	}
	res := make([]*ir.Dense, len(f.Results))
	for i, r := range f.Results {
		res[i] = env[r]
	}
	return res, nil
}

func evalOp(op *ir.Op, in []*ir.Dense) ([]*ir.Dense, error) {
	if op.Name() == "constant" {
		d := op.Attrs.Get("value").(*ir.Dense)
		// Materialise splats so later reads index freely.
		return []*ir.Dense{ir.NewDenseF64(d.Type, d.Floats())}, nil
	}
	impl := evalOps[op.Name()]
	if impl == nil {
		impl = evalNNOps[op.Name()]
	}
	if impl != nil {
		tv := make([]evalTensor, len(in))
		for i, d := range in {
			tv[i] = evalTensor{d.Type.Shape, d.Floats()}
		}
		vals := impl(op, tv)
		out := make([]*ir.Dense, len(vals))
		for i, v := range vals {
			if len(v) != op.Results[i].Type.NumElements() {
				return nil, fmt.Errorf("evaluator produced %d elements for %s", len(v), op.Results[i].Type)
			}
			out[i] = ir.NewDenseF64(op.Results[i].Type, v)
		}
		return out, nil
	}
	out, err := ir.Fold(op, in)
	if err == nil && out == nil {
		err = fmt.Errorf("no evaluator for op %s", op.Name())
	}
	return out, err
}

// evalForEach calls fn with each linear index and coordinate of shape, in row-major order.
func evalForEach(shape ir.Shape, fn func(k int, c []int)) {
	n := shape.NumElements()
	c := make([]int, len(shape))
	for k := 0; k < n; k++ {
		fn(k, c)
		for d := len(shape) - 1; d >= 0; d-- {
			if c[d]++; c[d] < shape[d] {
				break
			}
			c[d] = 0
		}
	}
}

// evalBroadcastMap maps each linear index of out to the linear index of in broadcast to out.
func evalBroadcastMap(in, out ir.Shape) []int {
	m := make([]int, out.NumElements())
	off := len(out) - len(in)
	evalForEach(out, func(k int, c []int) {
		j := 0
		for d, n := range in {
			x := c[off+d]
			if n == 1 {
				x = 0
			}
			j = j*n + x
		}
		m[k] = j
	})
	return m
}

// evalSplit3 views shape around an axis as (outer, n, inner).
func evalSplit3(s ir.Shape, axis int) (outer, n, inner int) {
	return s[:axis].NumElements(), s[axis], s[axis+1:].NumElements()
}

func evalAxis(op *ir.Op, rank int) int {
	a, err := ir.NormAxis(op.Attrs.Int("axis", -1), rank)
	if err != nil {
		panic(err)
	}
	return a
}

// rows views shape as rows of the normalised dims axis.. for the norms.
func evalNormRows(op *ir.Op, s ir.Shape) (rows, n int) {
	a := evalAxis(op, len(s))
	return s[:a].NumElements(), s[a:].NumElements()
}

func evalElementwise2(f func(a, b float64) float64) evalImpl {
	return func(op *ir.Op, in []evalTensor) [][]float64 {
		out := make([]float64, len(in[0].v))
		for i := range out {
			out[i] = f(in[0].v[i], in[1].v[i])
		}
		return [][]float64{out}
	}
}

func evalSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// evalAlongAxis applies f to each 1-D fibre along axis of the operands (all of one shape).
func evalAlongAxis(op *ir.Op, in []evalTensor, f func(fibres [][]float64) []float64) [][]float64 {
	s := in[0].s
	outer, n, inner := evalSplit3(s, evalAxis(op, len(s)))
	out := make([]float64, len(in[0].v))
	fib := make([][]float64, len(in))
	for i := range fib {
		fib[i] = make([]float64, n)
	}
	for o := 0; o < outer; o++ {
		for e := 0; e < inner; e++ {
			for t := range in {
				for j := 0; j < n; j++ {
					fib[t][j] = in[t].v[(o*n+j)*inner+e]
				}
			}
			r := f(fib)
			for j := 0; j < n; j++ {
				out[(o*n+j)*inner+e] = r[j]
			}
		}
	}
	return [][]float64{out}
}

func evalSoftmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	s := 0.0
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

// evalNormStats returns x̂ and r = 1/σ for one row (layer norm when centre, else RMS norm).
func evalNormStats(x []float64, eps float64, centre bool) ([]float64, float64) {
	n := float64(len(x))
	mu := 0.0
	if centre {
		for _, v := range x {
			mu += v
		}
		mu /= n
	}
	ss := 0.0
	for _, v := range x {
		ss += (v - mu) * (v - mu)
	}
	r := 1 / math.Sqrt(ss/n+eps)
	xh := make([]float64, len(x))
	for i, v := range x {
		xh[i] = (v - mu) * r
	}
	return xh, r
}

func evalNormForward(centre bool) evalImpl {
	return func(op *ir.Op, in []evalTensor) [][]float64 {
		rows, n := evalNormRows(op, in[0].s)
		eps := op.Attrs.Float("eps", 1e-5)
		out := make([]float64, len(in[0].v))
		for r := 0; r < rows; r++ {
			xh, _ := evalNormStats(in[0].v[r*n:(r+1)*n], eps, centre)
			for i, v := range xh {
				if len(in) > 1 {
					v *= in[1].v[i]
				}
				if len(in) > 2 {
					v += in[2].v[i]
				}
				out[r*n+i] = v
			}
		}
		return [][]float64{out}
	}
}

// evalNormGradInput evaluates (layer|rms)_norm_grad_input(x, dy [, scale]).
func evalNormGradInput(centre bool) evalImpl {
	return func(op *ir.Op, in []evalTensor) [][]float64 {
		rows, n := evalNormRows(op, in[0].s)
		eps := op.Attrs.Float("eps", 1e-5)
		out := make([]float64, len(in[0].v))
		for r := 0; r < rows; r++ {
			xh, rs := evalNormStats(in[0].v[r*n:(r+1)*n], eps, centre)
			g := make([]float64, n)
			mg, mgx := 0.0, 0.0
			for i := range g {
				g[i] = in[1].v[r*n+i]
				if len(in) > 2 {
					g[i] *= in[2].v[i]
				}
				mg += g[i] / float64(n)
				mgx += g[i] * xh[i] / float64(n)
			}
			if !centre {
				mg = 0
			}
			for i := range g {
				out[r*n+i] = rs * (g[i] - mg - xh[i]*mgx)
			}
		}
		return [][]float64{out}
	}
}

func evalNormGradParams(centre bool, results int) evalImpl {
	return func(op *ir.Op, in []evalTensor) [][]float64 {
		rows, n := evalNormRows(op, in[0].s)
		eps := op.Attrs.Float("eps", 1e-5)
		ds, db := make([]float64, n), make([]float64, n)
		for r := 0; r < rows; r++ {
			xh, _ := evalNormStats(in[0].v[r*n:(r+1)*n], eps, centre)
			for i := range xh {
				dy := in[1].v[r*n+i]
				ds[i] += dy * xh[i]
				db[i] += dy
			}
		}
		return [][]float64{ds, db}[:results]
	}
}

func evalMatMul(op *ir.Op, in []evalTensor) [][]float64 {
	a, b := in[0], in[1]
	ta, tb := op.Attrs.Bool("transpose_a", false), op.Attrs.Bool("transpose_b", false)
	as, bs := a.s, b.s
	if len(as) == 1 {
		as = ir.Shape{1, as[0]}
	}
	if len(bs) == 1 {
		bs = ir.Shape{bs[0], 1}
	}
	ra, rb := len(as), len(bs)
	m, k := as[ra-2], as[ra-1]
	if ta {
		m, k = k, m
	}
	n := bs[rb-1]
	if tb {
		n = bs[rb-2]
	}
	batchA, batchB := as[:ra-2], bs[:rb-2]
	batch, err := ir.BroadcastShapes(batchA, batchB)
	if err != nil {
		panic(err)
	}
	mapA, mapB := evalBroadcastMap(batchA, batch), evalBroadcastMap(batchB, batch)
	out := make([]float64, batch.NumElements()*m*n)
	for bi := range batch.NumElements() {
		oa, ob := mapA[bi]*m*k, mapB[bi]*k*n
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				s := 0.0
				for l := 0; l < k; l++ {
					ai, bj := oa+i*k+l, ob+l*n+j
					if ta {
						ai = oa + l*m + i
					}
					if tb {
						bj = ob + j*k + l
					}
					s += a.v[ai] * b.v[bj]
				}
				out[(bi*m+i)*n+j] = s
			}
		}
	}
	if len(in) == 3 {
		rs := op.Result().Type.Shape
		for i, j := range evalBroadcastMap(in[2].s, rs) {
			out[i] += in[2].v[j]
		}
	}
	return [][]float64{out}
}

// evalCERows yields, per row, the logits row, the label and whether the row is ignored.
func evalCERows(op *ir.Op, in []evalTensor) (rows, c int, label func(r int) (int, bool)) {
	c = in[0].s[len(in[0].s)-1]
	rows = len(in[1].v)
	ign, hasIgn := op.Attrs.Get("ignore_index").(ir.Int)
	return rows, c, func(r int) (int, bool) {
		l := int(in[1].v[r])
		if hasIgn && l == int(ign) {
			return l, true
		}
		if l < 0 || l >= c {
			panic(fmt.Sprintf("label %d out of range", l))
		}
		return l, false
	}
}

var evalOps = map[string]evalImpl{
	"matmul": evalMatMul,
	"softmax": func(op *ir.Op, in []evalTensor) [][]float64 {
		return evalAlongAxis(op, in, func(f [][]float64) []float64 { return evalSoftmax(f[0]) })
	},
	"log_softmax": func(op *ir.Op, in []evalTensor) [][]float64 {
		return evalAlongAxis(op, in, func(f [][]float64) []float64 {
			p := evalSoftmax(f[0])
			for i := range p {
				p[i] = math.Log(p[i])
			}
			return p
		})
	},
	"layer_norm": evalNormForward(true),
	"rms_norm":   evalNormForward(false),
	"cross_entropy": func(op *ir.Op, in []evalTensor) [][]float64 {
		rows, c, label := evalCERows(op, in)
		per := make([]float64, rows)
		total, valid := 0.0, 0
		for r := 0; r < rows; r++ {
			l, ignored := label(r)
			if ignored {
				continue
			}
			x := in[0].v[r*c : (r+1)*c]
			p := evalSoftmax(x)
			per[r] = -math.Log(p[l])
			total += per[r]
			valid++
		}
		switch op.Attrs.Str("reduction", "mean") {
		case "none":
			return [][]float64{per}
		case "sum":
			return [][]float64{{total}}
		}
		return [][]float64{{total / float64(valid)}}
	},
	"mse": func(op *ir.Op, in []evalTensor) [][]float64 {
		per := make([]float64, len(in[0].v))
		total := 0.0
		for i := range per {
			d := in[0].v[i] - in[1].v[i]
			per[i] = d * d
			total += per[i]
		}
		switch op.Attrs.Str("reduction", "mean") {
		case "none":
			return [][]float64{per}
		case "sum":
			return [][]float64{{total}}
		}
		return [][]float64{{total / float64(len(per))}}
	},

	// The fused gradient ops, from their docs in ir/ops_grad.go.
	"relu_grad": evalElementwise2(func(x, dy float64) float64 {
		if x > 0 {
			return dy
		}
		return 0
	}),
	"gelu_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		tanhApprox := op.Attrs.Str("approximate", "none") == "tanh"
		return evalElementwise2(func(x, dy float64) float64 {
			if tanhApprox {
				k := math.Sqrt(2 / math.Pi)
				t := math.Tanh(k * (x + 0.044715*x*x*x))
				return dy * (0.5*(1+t) + 0.5*x*(1-t*t)*k*(1+3*0.044715*x*x))
			}
			cdf := 0.5 * (1 + math.Erf(x/math.Sqrt2))
			pdf := math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
			return dy * (cdf + x*pdf)
		})(op, in)
	},
	"silu_grad": evalElementwise2(func(x, dy float64) float64 {
		s := evalSigmoid(x)
		return dy * s * (1 + x*(1-s))
	}),
	"sigmoid_grad": evalElementwise2(func(y, dy float64) float64 { return dy * y * (1 - y) }),
	"tanh_grad":    evalElementwise2(func(y, dy float64) float64 { return dy * (1 - y*y) }),
	"softmax_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		return evalAlongAxis(op, in, func(f [][]float64) []float64 {
			y, dy := f[0], f[1]
			s := 0.0
			for i := range y {
				s += dy[i] * y[i]
			}
			out := make([]float64, len(y))
			for i := range y {
				out[i] = y[i] * (dy[i] - s)
			}
			return out
		})
	},
	"log_softmax_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		return evalAlongAxis(op, in, func(f [][]float64) []float64 {
			y, dy := f[0], f[1]
			s := 0.0
			for _, v := range dy {
				s += v
			}
			out := make([]float64, len(y))
			for i := range y {
				out[i] = dy[i] - math.Exp(y[i])*s
			}
			return out
		})
	},
	"layer_norm_grad_input":  evalNormGradInput(true),
	"layer_norm_grad_params": evalNormGradParams(true, 2),
	"rms_norm_grad_input":    evalNormGradInput(false),
	"rms_norm_grad_params":   evalNormGradParams(false, 1),
	"cross_entropy_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		rows, c, label := evalCERows(op, in)
		valid := 0
		for r := 0; r < rows; r++ {
			if _, ignored := label(r); !ignored {
				valid++
			}
		}
		out := make([]float64, rows*c)
		for r := 0; r < rows; r++ {
			l, ignored := label(r)
			if ignored {
				continue
			}
			var w float64
			switch op.Attrs.Str("reduction", "mean") {
			case "none":
				w = in[2].v[r]
			case "sum":
				w = in[2].v[0]
			default:
				w = in[2].v[0] / float64(valid)
			}
			p := evalSoftmax(in[0].v[r*c : (r+1)*c])
			for j := range p {
				if j == l {
					p[j]--
				}
				out[r*c+j] = w * p[j]
			}
		}
		return [][]float64{out}
	},
	"mse_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		out := make([]float64, len(in[0].v))
		for i := range out {
			var w float64
			switch op.Attrs.Str("reduction", "mean") {
			case "none":
				w = in[2].v[i]
			case "sum":
				w = in[2].v[0]
			default:
				w = in[2].v[0] / float64(len(out))
			}
			out[i] = 2 * (in[0].v[i] - in[1].v[i]) * w
		}
		return [][]float64{out}
	},
	"gather_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		idx, dy := in[0], in[1]
		axis, dim := op.Attrs.Int("axis", 0), op.Attrs.Int("dim", 0)
		outer := dy.s[:axis].NumElements()
		ni := len(idx.v)
		inner := dy.s[axis+len(idx.s):].NumElements()
		out := make([]float64, outer*dim*inner)
		for o := 0; o < outer; o++ {
			for i := 0; i < ni; i++ {
				j := int(idx.v[i])
				if j < 0 {
					j += dim
				}
				for e := 0; e < inner; e++ {
					out[(o*dim+j)*inner+e] += dy.v[(o*ni+i)*inner+e]
				}
			}
		}
		return [][]float64{out}
	},
	"reduce_max_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, y, dy := in[0], in[1], in[2]
		red, err := ir.ReduceAxes(op.Attrs, len(x.s))
		if err != nil {
			panic(err)
		}
		out := make([]float64, len(x.v))
		done := make([]bool, len(y.v))
		evalForEach(x.s, func(k int, c []int) {
			j := 0
			for d, n := range x.s {
				if !red[d] {
					j = j*n + c[d]
				}
			}
			if !done[j] && x.v[k] == y.v[j] {
				out[k], done[j] = dy.v[j], true
			}
		})
		return [][]float64{out}
	},
	"slice_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		shape := ir.Shape(op.Attrs.Ints("shape"))
		dims, err := ir.SliceDims(op.Attrs, shape)
		if err != nil {
			panic(err)
		}
		out := make([]float64, shape.NumElements())
		evalForEach(in[0].s, func(k int, c []int) {
			j := 0
			for d, n := range shape {
				j = j*n + dims[d].Start + c[d]*dims[d].Step
			}
			out[j] = in[0].v[k]
		})
		return [][]float64{out}
	},
}

// ---- nn ops (ir/ops_nn.go) and their gradient ops, from the docs ----

// evalIndex is the row-major linear index of coordinate c in shape s.
func evalIndex(s ir.Shape, c []int) int {
	j := 0
	for d, n := range s {
		j = j*n + c[d]
	}
	return j
}

func evalWindowParams(op *ir.Op, k int, kernel []int) *ir.WindowParams {
	p, err := ir.Window(op.Attrs, k, kernel)
	if err != nil {
		panic(err)
	}
	return p
}

// evalWindowPos maps output coordinates o (spatial) and kernel offsets t to the input position
// o·stride + t·dilation − pad_begin; ok is false outside x's spatial dims sp.
func evalWindowPos(p *ir.WindowParams, sp ir.Shape, o, t []int) ([]int, bool) {
	pos := make([]int, len(o))
	ok := true
	for i := range o {
		pos[i] = o[i]*p.Strides[i] + t[i]*p.Dilations[i] - p.PadsBegin[i]
		ok = ok && pos[i] >= 0 && pos[i] < sp[i]
	}
	return pos, ok
}

// evalConvTerms calls f(xi, wi, yi) for every product x[xi]·w[wi] conv adds into y[yi]; conv's
// Doc read as a loop nest over outputs, input channels of the group and kernel positions.
func evalConvTerms(op *ir.Op, xs, ws, ys ir.Shape, f func(xi, wi, yi int)) {
	k := len(xs) - 2
	p := evalWindowParams(op, k, ws[2:])
	cg, mg := xs[1]/p.Groups, ws[0]/p.Groups
	evalForEach(ys, func(yi int, yc []int) {
		n, m := yc[0], yc[1]
		g := m / mg
		evalForEach(ws[1:], func(_ int, wc []int) {
			pos, ok := evalWindowPos(p, xs[2:], yc[2:], wc[1:])
			if !ok {
				return
			}
			xc := append([]int{n, g*cg + wc[0]}, pos...)
			f(evalIndex(xs, xc), evalIndex(ws, append([]int{m}, wc...)), yi)
		})
	})
}

// evalConvTransposeTerms calls f(xi, wi, yi) for every product conv_transpose adds: x[n, c, i…]
// times w[c, m', k…] into the full output position i·stride + k·dilation, kept when it lies
// in the result after dropping pad_begin.
func evalConvTransposeTerms(op *ir.Op, xs, ws, ys ir.Shape, f func(xi, wi, yi int)) {
	k := len(xs) - 2
	p := evalWindowParams(op, k, ws[2:])
	cg, mg := xs[1]/p.Groups, ws[1]
	evalForEach(xs, func(xi int, xc []int) {
		n, c := xc[0], xc[1]
		g := c / cg
		evalForEach(ws[1:], func(_ int, wc []int) {
			yc := []int{n, g*mg + wc[0]}
			for i := 0; i < k; i++ {
				o := xc[2+i]*p.Strides[i] + wc[1+i]*p.Dilations[i] - p.PadsBegin[i]
				if o < 0 || o >= ys[2+i] {
					return
				}
				yc = append(yc, o)
			}
			f(xi, evalIndex(ws, append([]int{c}, wc...)), evalIndex(ys, yc))
		})
	})
}

func evalAddBias(out []float64, ys ir.Shape, bias []float64) {
	evalForEach(ys, func(i int, c []int) { out[i] += bias[c[1]] })
}

// evalPoolWindows calls f(yi, xis, padded) for every pooling output: xis are the window's
// positions inside x in row-major kernel-offset order, padded the count of positions inside
// the explicitly padded input.
func evalPoolWindows(op *ir.Op, xs, ys ir.Shape, f func(yi int, xis []int, padded int)) {
	k := len(xs) - 2
	kernel := ir.Shape(op.Attrs.Ints("kernel"))
	p := evalWindowParams(op, k, kernel)
	evalForEach(ys, func(yi int, yc []int) {
		var xis []int
		padded := 0
		evalForEach(kernel, func(_ int, t []int) {
			pos, ok := evalWindowPos(p, xs[2:], yc[2:], t)
			in := true
			for i, v := range pos {
				in = in && v >= -p.PadsBegin[i] && v < xs[2+i]+p.PadsEnd[i]
			}
			if in {
				padded++
			}
			if ok {
				xis = append(xis, evalIndex(xs, append([]int{yc[0], yc[1]}, pos...)))
			}
		})
		f(yi, xis, padded)
	})
}

func evalAvgDivisor(op *ir.Op, xis []int, padded int) float64 {
	if op.Attrs.Bool("count_include_pad", false) {
		return float64(padded)
	}
	return float64(len(xis))
}

// evalChannelStats returns the per-(n, c) instance statistics μ and r = 1/√(σ² + eps).
func evalInstanceStats(x evalTensor, eps float64) (mu, r []float64, sp int) {
	sp = x.s[2:].NumElements()
	rows := x.s[0] * x.s[1]
	mu, r = make([]float64, rows), make([]float64, rows)
	for u := 0; u < rows; u++ {
		_, ru := evalNormStats(x.v[u*sp:(u+1)*sp], eps, true)
		m := 0.0
		for _, v := range x.v[u*sp : (u+1)*sp] {
			m += v / float64(sp)
		}
		mu[u], r[u] = m, ru
	}
	return mu, r, sp
}

// evalLRNDen returns D = bias + alpha/size·Σ x² over each channel's window.
func evalLRNDen(op *ir.Op, x evalTensor) (den []float64, before, after int) {
	size := op.Attrs.Int("size", 1)
	alpha, bias := op.Attrs.Float("alpha", 1e-4), op.Attrs.Float("bias", 1)
	before, after = (size-1)/2, size-1-(size-1)/2
	n, c, sp := x.s[0], x.s[1], x.s[2:].NumElements()
	den = make([]float64, len(x.v))
	for b := 0; b < n; b++ {
		for ch := 0; ch < c; ch++ {
			for i := 0; i < sp; i++ {
				s := 0.0
				for j := max(0, ch-before); j <= min(c-1, ch+after); j++ {
					v := x.v[(b*c+j)*sp+i]
					s += v * v
				}
				den[(b*c+ch)*sp+i] = bias + alpha/float64(size)*s
			}
		}
	}
	return den, before, after
}

// evalPadSource maps position o of a padded dim (begin pad b, operand size d) to the operand
// index it copies, or −1 for the constant fill, as pad's Doc defines the modes.
func evalPadSource(mode string, o, b, d int) int {
	i := o - b
	if i >= 0 && i < d {
		return i
	}
	switch mode {
	case "edge":
		return min(max(i, 0), d-1)
	case "wrap":
		return ((i % d) + d) % d
	case "reflect":
		if d == 1 {
			return 0
		}
		for i < 0 || i >= d { // mirror without repeating the edge
			if i < 0 {
				i = -i
			}
			if i >= d {
				i = 2*(d-1) - i
			}
		}
		return i
	}
	return -1
}

// evalPadMap returns, for every element of the padded shape ps, the operand index it copies
// (−1: the constant).
func evalPadMap(op *ir.Op, xs, ps ir.Shape) []int {
	pads, mode, r := op.Attrs.Ints("pads"), op.Attrs.Str("mode", "constant"), len(xs)
	m := make([]int, ps.NumElements())
	evalForEach(ps, func(k int, c []int) {
		src := make([]int, r)
		for d := range r {
			if src[d] = evalPadSource(mode, c[d], pads[d], xs[d]); src[d] < 0 {
				m[k] = -1
				return
			}
		}
		m[k] = evalIndex(xs, src)
	})
	return m
}

// evalResizeTaps returns, for one dim, every output's source indices and weights as resize's
// Doc defines them.
func evalResizeTaps(op *ir.Op, dim, in, out int) (idx [][]int, w [][]float64) {
	s := float64(out) / float64(in)
	if l, ok := op.Attrs.Get("scales").(ir.List); ok {
		switch v := l[dim].(type) {
		case ir.Float:
			s = float64(v)
		case ir.Int:
			s = float64(v)
		}
	}
	fin, fout := float64(in), float64(out)
	clampIdx := func(j int) int { return min(max(j, 0), in-1) }
	for o := 0; o < out; o++ {
		x, fo := 0.0, float64(o)
		switch op.Attrs.Str("coordinate_transformation_mode", "half_pixel") {
		case "half_pixel":
			x = (fo+0.5)/s - 0.5
		case "pytorch_half_pixel":
			if out > 1 {
				x = (fo+0.5)/s - 0.5
			}
		case "align_corners":
			if out > 1 {
				x = fo * (fin - 1) / (fout - 1)
			}
		case "asymmetric":
			x = fo / s
		case "tf_half_pixel_for_nn":
			x = (fo + 0.5) / s
		case "half_pixel_symmetric":
			x = fin/2*(1-fout/(s*fin)) + (fo+0.5)/s - 0.5
		}
		fl := math.Floor(x)
		fr, i0 := x-fl, int(fl)
		switch op.Attrs.Str("mode", "nearest") {
		case "nearest":
			j := i0
			switch op.Attrs.Str("nearest_mode", "round_prefer_floor") {
			case "round_prefer_floor":
				if fr > 0.5 {
					j++
				}
			case "round_prefer_ceil":
				if fr >= 0.5 {
					j++
				}
			case "ceil":
				if fr > 0 {
					j++
				}
			}
			idx, w = append(idx, []int{clampIdx(j)}), append(w, []float64{1})
		case "linear":
			idx, w = append(idx, []int{clampIdx(i0), clampIdx(i0 + 1)}), append(w, []float64{1 - fr, fr})
		case "cubic":
			a := op.Attrs.Float("cubic_coeff_a", -0.75)
			kern := func(t float64) float64 { // Keys' cubic convolution kernel
				t = math.Abs(t)
				switch {
				case t <= 1:
					return (a+2)*t*t*t - (a+3)*t*t + 1
				case t < 2:
					return a*t*t*t - 5*a*t*t + 8*a*t - 4*a
				}
				return 0
			}
			var is []int
			var ws []float64
			sum := 0.0
			for t := -1; t <= 2; t++ {
				j, wt := i0+t, kern(float64(t)-fr)
				if op.Attrs.Bool("exclude_outside", false) && (j < 0 || j >= in) {
					wt = 0
				}
				is, ws = append(is, clampIdx(j)), append(ws, wt)
				sum += wt
			}
			if op.Attrs.Bool("exclude_outside", false) {
				for t := range ws {
					ws[t] /= sum
				}
			}
			idx, w = append(idx, is), append(w, ws)
		}
	}
	return idx, w
}

// evalResizeTerms calls f(xi, yi, weight) for every (output, source combination) of resize
// from shape xs to ys: the per-dim taps multiplied out.
func evalResizeTerms(op *ir.Op, xs, ys ir.Shape, f func(xi, yi int, w float64)) {
	idx := make([][][]int, len(xs))
	ws := make([][][]float64, len(xs))
	for d := range xs {
		idx[d], ws[d] = evalResizeTaps(op, d, xs[d], ys[d])
	}
	evalForEach(ys, func(yi int, yc []int) {
		var rec func(d, xi int, w float64)
		rec = func(d, xi int, w float64) {
			if d == len(xs) {
				f(xi, yi, w)
				return
			}
			for t, j := range idx[d][yc[d]] {
				rec(d+1, xi*xs[d]+j, w*ws[d][yc[d]][t])
			}
		}
		rec(0, 0, 1)
	})
}

// evalGatherElementsMap returns, for every position of indices, the data index it reads.
func evalGatherElementsMap(axis int, ds, is ir.Shape, idx []float64) []int {
	m := make([]int, len(idx))
	evalForEach(is, func(k int, c []int) {
		j := int(idx[k])
		if j < 0 {
			j += ds[axis]
		}
		cc := append([]int(nil), c...)
		cc[axis] = j
		m[k] = evalIndex(ds, cc)
	})
	return m
}

// evalReduceGroups maps every element of x to the index of its group in the reduced result.
func evalReduceGroups(op *ir.Op, xs ir.Shape) []int {
	red, err := ir.ReduceAxes(op.Attrs, len(xs))
	if err != nil {
		panic(err)
	}
	g := make([]int, xs.NumElements())
	evalForEach(xs, func(k int, c []int) {
		j := 0
		for d, n := range xs {
			if !red[d] {
				j = j*n + c[d]
			}
		}
		g[k] = j
	})
	return g
}

func evalUnaryGrad(f func(op *ir.Op, x float64) float64) evalImpl {
	return func(op *ir.Op, in []evalTensor) [][]float64 {
		out := make([]float64, len(in[0].v))
		for i, x := range in[0].v {
			out[i] = in[1].v[i] * f(op, x)
		}
		return [][]float64{out}
	}
}

var evalNNOps = map[string]evalImpl{
	"conv": func(op *ir.Op, in []evalTensor) [][]float64 {
		ys := op.Result().Type.Shape
		out := make([]float64, ys.NumElements())
		evalConvTerms(op, in[0].s, in[1].s, ys, func(xi, wi, yi int) { out[yi] += in[0].v[xi] * in[1].v[wi] })
		if len(in) == 3 {
			evalAddBias(out, ys, in[2].v)
		}
		return [][]float64{out}
	},
	"conv_transpose": func(op *ir.Op, in []evalTensor) [][]float64 {
		ys := op.Result().Type.Shape
		out := make([]float64, ys.NumElements())
		evalConvTransposeTerms(op, in[0].s, in[1].s, ys, func(xi, wi, yi int) { out[yi] += in[0].v[xi] * in[1].v[wi] })
		if len(in) == 3 {
			evalAddBias(out, ys, in[2].v)
		}
		return [][]float64{out}
	},
	"conv_grad_filter": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, dy := in[0], in[1]
		fs := ir.Shape(op.Attrs.Ints("filter_shape"))
		out := make([]float64, fs.NumElements())
		evalConvTerms(op, x.s, fs, dy.s, func(xi, wi, yi int) { out[wi] += x.v[xi] * dy.v[yi] })
		return [][]float64{out}
	},
	"max_pool": func(op *ir.Op, in []evalTensor) [][]float64 {
		ys := op.Result().Type.Shape
		out := make([]float64, ys.NumElements())
		evalPoolWindows(op, in[0].s, ys, func(yi int, xis []int, _ int) {
			out[yi] = math.Inf(-1)
			for _, xi := range xis {
				out[yi] = math.Max(out[yi], in[0].v[xi])
			}
		})
		return [][]float64{out}
	},
	"max_pool_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, dy := in[0], in[1]
		out := make([]float64, len(x.v))
		evalPoolWindows(op, x.s, dy.s, func(yi int, xis []int, _ int) {
			best := -1
			for _, xi := range xis {
				if best < 0 || x.v[xi] > x.v[best] {
					best = xi
				}
			}
			if best >= 0 {
				out[best] += dy.v[yi]
			}
		})
		return [][]float64{out}
	},
	"avg_pool": func(op *ir.Op, in []evalTensor) [][]float64 {
		ys := op.Result().Type.Shape
		out := make([]float64, ys.NumElements())
		evalPoolWindows(op, in[0].s, ys, func(yi int, xis []int, padded int) {
			for _, xi := range xis {
				out[yi] += in[0].v[xi]
			}
			out[yi] /= evalAvgDivisor(op, xis, padded)
		})
		return [][]float64{out}
	},
	"avg_pool_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		xs := ir.Shape(op.Attrs.Ints("input_shape"))
		out := make([]float64, xs.NumElements())
		evalPoolWindows(op, xs, in[0].s, func(yi int, xis []int, padded int) {
			for _, xi := range xis {
				out[xi] += in[0].v[yi] / evalAvgDivisor(op, xis, padded)
			}
		})
		return [][]float64{out}
	},
	"batch_norm": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, scale, bias, mean, variance := in[0], in[1].v, in[2].v, in[3].v, in[4].v
		eps := op.Attrs.Float("eps", 1e-5)
		out := make([]float64, len(x.v))
		evalForEach(x.s, func(i int, c []int) {
			ch := c[1]
			out[i] = (x.v[i]-mean[ch])/math.Sqrt(variance[ch]+eps)*scale[ch] + bias[ch]
		})
		return [][]float64{out}
	},
	"batch_norm_grad_input": func(op *ir.Op, in []evalTensor) [][]float64 {
		dy, scale, variance := in[0], in[1].v, in[2].v
		eps := op.Attrs.Float("eps", 1e-5)
		out := make([]float64, len(dy.v))
		evalForEach(dy.s, func(i int, c []int) { out[i] = dy.v[i] * scale[c[1]] / math.Sqrt(variance[c[1]]+eps) })
		return [][]float64{out}
	},
	"batch_norm_grad_params": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, dy, mean, variance := in[0], in[1], in[2].v, in[3].v
		eps := op.Attrs.Float("eps", 1e-5)
		ds, db := make([]float64, x.s[1]), make([]float64, x.s[1])
		evalForEach(x.s, func(i int, c []int) {
			ch := c[1]
			ds[ch] += dy.v[i] * (x.v[i] - mean[ch]) / math.Sqrt(variance[ch]+eps)
			db[ch] += dy.v[i]
		})
		return [][]float64{ds, db}
	},
	"instance_norm": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, scale, bias := in[0], in[1].v, in[2].v
		mu, r, sp := evalInstanceStats(x, op.Attrs.Float("eps", 1e-5))
		out := make([]float64, len(x.v))
		for i, v := range x.v {
			u := i / sp
			ch := u % x.s[1]
			out[i] = (v-mu[u])*r[u]*scale[ch] + bias[ch]
		}
		return [][]float64{out}
	},
	"instance_norm_grad_input": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, dy, scale := in[0], in[1].v, in[2].v
		mu, r, sp := evalInstanceStats(x, op.Attrs.Float("eps", 1e-5))
		out := make([]float64, len(x.v))
		for u := range mu {
			g := make([]float64, sp)
			mg, mgx := 0.0, 0.0
			for i := range g {
				g[i] = dy[u*sp+i] * scale[u%x.s[1]]
				mg += g[i] / float64(sp)
				mgx += g[i] * (x.v[u*sp+i] - mu[u]) * r[u] / float64(sp)
			}
			for i := range g {
				out[u*sp+i] = r[u] * (g[i] - mg - (x.v[u*sp+i]-mu[u])*r[u]*mgx)
			}
		}
		return [][]float64{out}
	},
	"instance_norm_grad_params": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, dy := in[0], in[1].v
		mu, r, sp := evalInstanceStats(x, op.Attrs.Float("eps", 1e-5))
		ds, db := make([]float64, x.s[1]), make([]float64, x.s[1])
		for i, v := range x.v {
			u := i / sp
			ds[u%x.s[1]] += dy[i] * (v - mu[u]) * r[u]
			db[u%x.s[1]] += dy[i]
		}
		return [][]float64{ds, db}
	},
	"lrn": func(op *ir.Op, in []evalTensor) [][]float64 {
		den, _, _ := evalLRNDen(op, in[0])
		beta := op.Attrs.Float("beta", 0.75)
		out := make([]float64, len(den))
		for i, d := range den {
			out[i] = in[0].v[i] / math.Pow(d, beta)
		}
		return [][]float64{out}
	},
	"lrn_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, dy := in[0], in[1].v
		den, before, after := evalLRNDen(op, x)
		size := float64(op.Attrs.Int("size", 1))
		alpha, beta := op.Attrs.Float("alpha", 1e-4), op.Attrs.Float("beta", 0.75)
		c, sp := x.s[1], x.s[2:].NumElements()
		out := make([]float64, len(den))
		evalForEach(x.s, func(q int, cc []int) {
			i, s := cc[1], 0.0
			for ch := max(0, i-after); ch <= min(c-1, i+before); ch++ {
				p := q + (ch-i)*sp
				s += dy[p] * x.v[p] * math.Pow(den[p], -beta-1)
			}
			out[q] = dy[q]*math.Pow(den[q], -beta) - 2*alpha*beta/size*x.v[q]*s
		})
		return [][]float64{out}
	},
	"pad": func(op *ir.Op, in []evalTensor) [][]float64 {
		ps := op.Result().Type.Shape
		value := op.Attrs.Float("value", 0)
		out := make([]float64, ps.NumElements())
		for k, j := range evalPadMap(op, in[0].s, ps) {
			if out[k] = value; j >= 0 {
				out[k] = in[0].v[j]
			}
		}
		return [][]float64{out}
	},
	"pad_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		xs := op.Result().Type.Shape
		out := make([]float64, xs.NumElements())
		for k, j := range evalPadMap(op, xs, in[0].s) {
			if j >= 0 {
				out[j] += in[0].v[k]
			}
		}
		return [][]float64{out}
	},
	"resize": func(op *ir.Op, in []evalTensor) [][]float64 {
		ys := op.Result().Type.Shape
		out := make([]float64, ys.NumElements())
		evalResizeTerms(op, in[0].s, ys, func(xi, yi int, w float64) { out[yi] += w * in[0].v[xi] })
		return [][]float64{out}
	},
	"resize_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		xs := ir.Shape(op.Attrs.Ints("input_shape"))
		out := make([]float64, xs.NumElements())
		evalResizeTerms(op, xs, in[0].s, func(xi, yi int, w float64) { out[xi] += w * in[0].v[yi] })
		return [][]float64{out}
	},
	"gather_elements": func(op *ir.Op, in []evalTensor) [][]float64 {
		out := make([]float64, len(in[1].v))
		for k, j := range evalGatherElementsMap(evalAxisDefault(op, len(in[0].s), 0), in[0].s, in[1].s, in[1].v) {
			out[k] = in[0].v[j]
		}
		return [][]float64{out}
	},
	"gather_elements_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		ds := ir.Shape(op.Attrs.Ints("shape"))
		out := make([]float64, ds.NumElements())
		for k, j := range evalGatherElementsMap(op.Attrs.Int("axis", 0), ds, in[0].s, in[0].v) {
			out[j] += in[1].v[k]
		}
		return [][]float64{out}
	},
	"reduce_log_sum_exp": func(op *ir.Op, in []evalTensor) [][]float64 {
		out := make([]float64, op.Result().Type.NumElements())
		for k, j := range evalReduceGroups(op, in[0].s) {
			out[j] += math.Exp(in[0].v[k])
		}
		for j := range out {
			out[j] = math.Log(out[j])
		}
		return [][]float64{out}
	},
	"reduce_min_grad": func(op *ir.Op, in []evalTensor) [][]float64 { return evalOps["reduce_max_grad"](op, in) },
	"reduce_prod_grad": func(op *ir.Op, in []evalTensor) [][]float64 {
		x, dy := in[0], in[1].v
		groups := evalReduceGroups(op, x.s)
		out := make([]float64, len(x.v))
		for k, j := range groups {
			p := dy[j]
			for k2, j2 := range groups {
				if j2 == j && k2 != k {
					p *= x.v[k2]
				}
			}
			out[k] = p
		}
		return [][]float64{out}
	},
	"elu_grad": evalUnaryGrad(func(op *ir.Op, x float64) float64 {
		if x > 0 {
			return 1
		}
		return op.Attrs.Float("alpha", 1) * math.Exp(x)
	}),
	"selu_grad": evalUnaryGrad(func(op *ir.Op, x float64) float64 {
		g := op.Attrs.Float("gamma", 1.05070102214813232421875)
		if x > 0 {
			return g
		}
		return g * op.Attrs.Float("alpha", 1.67326319217681884765625) * math.Exp(x)
	}),
	"leaky_relu_grad": evalUnaryGrad(func(op *ir.Op, x float64) float64 {
		if x > 0 {
			return 1
		}
		return op.Attrs.Float("alpha", 0.01)
	}),
	"softplus_grad": evalUnaryGrad(func(_ *ir.Op, x float64) float64 { return evalSigmoid(x) }),
	"hard_sigmoid_grad": evalUnaryGrad(func(op *ir.Op, x float64) float64 {
		a := op.Attrs.Float("alpha", 0.2)
		if v := a*x + op.Attrs.Float("beta", 0.5); v > 0 && v < 1 {
			return a
		}
		return 0
	}),
	"shrink_grad": evalUnaryGrad(func(op *ir.Op, x float64) float64 {
		if l := op.Attrs.Float("lambd", 0.5); x > l || x < -l {
			return 1
		}
		return 0
	}),
}

func evalAxisDefault(op *ir.Op, rank, def int) int {
	a, err := ir.NormAxis(op.Attrs.Int("axis", def), rank)
	if err != nil {
		panic(err)
	}
	return a
}
