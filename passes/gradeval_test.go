package passes

import (
	"fmt"
	"math"

	"ppc.dev/ppc/ir"
)

// A float64 reference evaluator for IR functions: a test oracle for the gradient checks, not an
// execution path (programs run on the runtime's kernels). Core ops that ir.Fold evaluates go
// through it; the rest — matmul, softmax, the norms, the losses and every fused gradient op —
// have straightforward float64 implementations here, written from the op table's docs.

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
	if impl := evalOps[op.Name()]; impl != nil {
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
