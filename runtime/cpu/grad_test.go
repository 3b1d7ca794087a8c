package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Tests of the gradient kernels, two ways each: against a naive float64 reference of the op's
// Doc formula (f64 and f32), and against central finite differences of the forward op run
// through this same device in float64 (relative error below 1e-6).

const fdStep = 1e-5

// forwardLoss returns L(v) = Σ forward(inputs with operand arg replaced by v)·w, the
// forward op running on the CPU device in f64.
func forwardLoss(tb testing.TB, name string, as ir.Attrs, in []device.Tensor, arg int, w []float64) func([]float64) float64 {
	return func(v []float64) float64 {
		args := slices.Clone(in)
		args[arg] = f64T(in[arg].Type.Shape, v)
		out := run1(tb, name, as, args...)
		return dot(out, w)
	}
}

func TestElementwiseGrads(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	type gcase struct {
		grad, fwd string
		as        ir.Attrs
		fromY     bool // the gradient takes the forward's result instead of its input
		ref       func(x, dy float64) float64
	}
	phi := func(x float64) float64 { return math.Exp(-x*x/2) / math.Sqrt(2*math.Pi) }
	Phi := func(x float64) float64 { return (1 + math.Erf(x/math.Sqrt2)) / 2 }
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	cases := []gcase{
		{"relu_grad", "relu", nil, false, func(x, dy float64) float64 { return map[bool]float64{true: dy}[x > 0] }},
		{"gelu_grad", "gelu", nil, false, func(x, dy float64) float64 { return dy * (Phi(x) + x*phi(x)) }},
		{"gelu_grad", "gelu", attrs("approximate", "tanh"), false, func(x, dy float64) float64 {
			k := math.Sqrt(2 / math.Pi)
			th := math.Tanh(k * (x + 0.044715*x*x*x))
			return dy * (0.5*(1+th) + 0.5*x*(1-th*th)*k*(1+3*0.044715*x*x))
		}},
		{"silu_grad", "silu", nil, false, func(x, dy float64) float64 { s := sig(x); return dy * s * (1 + x*(1-s)) }},
		{"sigmoid_grad", "sigmoid", nil, true, func(y, dy float64) float64 { return dy * y * (1 - y) }},
		{"tanh_grad", "tanh", nil, true, func(y, dy float64) float64 { return dy * (1 - y*y) }},
	}
	for _, c := range cases {
		shape := randShape(r, 2, 1, 6)
		xv := randVals(r, prod(shape), -3, 3)
		for i := range xv {
			if math.Abs(xv[i]) < 1e-3 { // keep away from relu's kink
				xv[i] = 0.5
			}
		}
		dyv := randVals(r, prod(shape), -1, 1)
		x, dy := f64T(shape, xv), f64T(shape, dyv)
		first := x
		if c.fromY {
			first = runOp(t, c.fwd, nil, x)[0]
		}
		got := run1(t, c.grad, c.as, first, dy)
		fd := fdGrad(xv, fdStep, forwardLoss(t, c.fwd, c.as, []device.Tensor{x}, 0, dyv))
		checkFD(t, c.grad+" vs fd of "+c.fwd, got, fd)
		for _, d := range floatTypes {
			a, b := tensorOf(d, shape, values(first)), tensorOf(d, shape, dyv)
			got := run1(t, c.grad, c.as, a, b)
			av, bv := values(a), values(b)
			want := make([]float64, len(av))
			for i := range want {
				want[i] = c.ref(av[i], bv[i])
			}
			closeTo(t, c.grad+" "+d.String(), got, want, 4*tolFor(d))
		}
	}
}

func TestSoftmaxGrads(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for i := 0; i < 8; i++ {
		logOf := i%2 == 1
		fwd, grad := "softmax", "softmax_grad"
		if logOf {
			fwd, grad = "log_softmax", "log_softmax_grad"
		}
		shape := randShape(r, 1+r.IntN(3), 1, 5)
		axis := r.IntN(len(shape)) - len(shape)*r.IntN(2)
		as := attrs("axis", axis)
		xv, dyv := randVals(r, prod(shape), -2, 2), randVals(r, prod(shape), -1, 1)
		x := f64T(shape, xv)
		y := runOp(t, fwd, as, x)[0]
		got := run1(t, grad, as, y, f64T(shape, dyv))
		checkFD(t, grad, got, fdGrad(xv, fdStep, forwardLoss(t, fwd, as, []device.Tensor{x}, 0, dyv)))
		// Reference of the Doc formula, in both dtypes.
		ax := (axis + len(shape)) % len(shape)
		for _, d := range floatTypes {
			yt, dyt := tensorOf(d, shape, values(y)), tensorOf(d, shape, dyv)
			yv, gv := values(yt), values(dyt)
			want := make([]float64, len(yv))
			for p := range want {
				c := unravel(p, shape)
				s := 0.0
				for j := 0; j < shape[ax]; j++ {
					c[ax] = j
					q := ravel(c, shape)
					if logOf {
						s += gv[q]
					} else {
						s += gv[q] * yv[q]
					}
				}
				if logOf {
					want[p] = gv[p] - math.Exp(yv[p])*s
				} else {
					want[p] = yv[p] * (gv[p] - s)
				}
			}
			closeTo(t, grad+" "+d.String(), run1(t, grad, as, yt, dyt), want, 4*tolFor(d))
		}
	}
}

// refNormGrad computes the Doc formulas of layer_norm_grad_input/params (rms: rms_norm's):
// dx, dscale and dbias for rows of n elements.
func refNormGrad(x, dy, scale []float64, n int, eps float64, rms bool) (dx, dscale, dbias []float64) {
	rows := len(x) / n
	dx, dscale, dbias = make([]float64, len(x)), make([]float64, n), make([]float64, n)
	for r := 0; r < rows; r++ {
		xr, dyr := x[r*n:(r+1)*n], dy[r*n:(r+1)*n]
		mu, v := 0.0, 0.0
		if !rms {
			for _, a := range xr {
				mu += a
			}
			mu /= float64(n)
		}
		for _, a := range xr {
			v += (a - mu) * (a - mu)
		}
		v /= float64(n)
		rs := 1 / math.Sqrt(v+eps)
		xh, g := make([]float64, n), make([]float64, n)
		mg, mgx := 0.0, 0.0
		for j := range xr {
			xh[j] = (xr[j] - mu) * rs
			g[j] = dyr[j]
			if scale != nil {
				g[j] *= scale[j]
			}
			mg += g[j] / float64(n)
			mgx += g[j] * xh[j] / float64(n)
			dscale[j] += dyr[j] * xh[j]
			dbias[j] += dyr[j]
		}
		if rms {
			mg = 0
		}
		for j := range xr {
			dx[r*n+j] = rs * (g[j] - mg - xh[j]*mgx)
		}
	}
	return dx, dscale, dbias
}

func TestNormGrads(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	for i := 0; i < 12; i++ {
		rms := i%2 == 1
		fwd := "layer_norm"
		if rms {
			fwd = "rms_norm"
		}
		shape := randShape(r, 1+r.IntN(3), 1, 5)
		shape[len(shape)-1] = 2 + r.IntN(5)
		axis := -1
		if len(shape) > 1 && i%4 >= 2 {
			axis = -2 // normalise over the last two dims
		}
		ax := len(shape) + axis
		n := prod(shape[ax:])
		withScale := i%3 != 0
		eps := 1e-5
		if rms {
			eps = 1e-6
		}
		as := attrs("axis", axis)
		if i%5 == 4 {
			eps = 0.01
			as = attrs("axis", axis, "eps", eps)
		}
		xv, dyv := randVals(r, prod(shape), -2, 2), randVals(r, prod(shape), -1, 1)
		sv, bv := randVals(r, n, 0.5, 1.5), randVals(r, n, -1, 1)
		x, dy := f64T(shape, xv), f64T(shape, dyv)
		sc, bi := f64T(shape[ax:], sv), f64T(shape[ax:], bv)
		fwdIn := []device.Tensor{x}
		gradIn := []device.Tensor{x, dy}
		if withScale {
			fwdIn = append(fwdIn, sc)
			gradIn = append(gradIn, sc)
			if !rms {
				fwdIn = append(fwdIn, bi)
			}
		}
		dx := run1(t, fwd+"_grad_input", as, gradIn...)
		checkFD(t, fwd+"_grad_input", dx, fdGrad(xv, fdStep, forwardLoss(t, fwd, as, fwdIn, 0, dyv)))
		params := runOp(t, fwd+"_grad_params", as, x, dy)
		pin := fdInputs(fwdIn, sc, bi, rms)
		checkFD(t, fwd+"_grad_params dscale", values(params[0]), fdGrad(sv, fdStep, forwardLoss(t, fwd, as, pin, 1, dyv)))
		if !rms {
			checkFD(t, fwd+"_grad_params dbias", values(params[1]), fdGrad(bv, fdStep, forwardLoss(t, fwd, as, pin, 2, dyv)))
		}
		// Doc formulas, both dtypes.
		for _, d := range floatTypes {
			xt, dyt, st := tensorOf(d, shape, xv), tensorOf(d, shape, dyv), tensorOf(d, shape[ax:], sv)
			in := []device.Tensor{xt, dyt}
			var sref []float64
			if withScale {
				in, sref = append(in, st), values(st)
			}
			wdx, wds, wdb := refNormGrad(values(xt), values(dyt), sref, n, eps, rms)
			closeTo(t, fwd+"_grad_input "+d.String(), run1(t, fwd+"_grad_input", as, in...), wdx, 20*tolFor(d))
			ps := runOp(t, fwd+"_grad_params", as, xt, dyt)
			closeTo(t, fwd+"_grad_params dscale "+d.String(), values(ps[0]), wds, 20*tolFor(d))
			if !rms {
				closeTo(t, fwd+"_grad_params dbias "+d.String(), values(ps[1]), wdb, 20*tolFor(d))
			}
		}
	}
}

// fdInputs is the forward's operand list with the scale (and for layer_norm the bias) always
// present, so the parameters can be perturbed.
func fdInputs(in []device.Tensor, sc, bi device.Tensor, rms bool) []device.Tensor {
	out := []device.Tensor{in[0], sc}
	if len(in) > 1 {
		out[1] = in[1]
	}
	if !rms {
		out = append(out, bi)
		if len(in) > 2 {
			out[2] = in[2]
		}
	}
	return out
}

// TestNormGradLargeRows checks the blocked statistics of the gradient kernels on rows that
// span several scratch blocks.
func TestNormGradLargeRows(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	rows, n := 3*normStatsBlock/1000+7, 1000
	xv, dyv := randVals(r, rows*n, -1, 3), randVals(r, rows*n, -1, 1)
	x, dy := f64T([]int{rows, n}, xv), f64T([]int{rows, n}, dyv)
	wdx, wds, wdb := refNormGrad(xv, dyv, nil, n, 1e-5, false)
	closeTo(t, "dx", run1(t, "layer_norm_grad_input", nil, x, dy), wdx, 1e-9)
	ps := runOp(t, "layer_norm_grad_params", nil, x, dy)
	closeTo(t, "dscale", values(ps[0]), wds, 1e-9)
	closeTo(t, "dbias", values(ps[1]), wdb, 1e-9)
}

func TestCrossEntropyGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(39, 40))
	for i := 0; i < 12; i++ {
		reduction := []string{"mean", "sum", "none"}[i%3]
		lead := randShape(r, r.IntN(3), 1, 4)
		classes := 1 + r.IntN(6)
		shape := append(slices.Clone(lead), classes)
		rows := prod(lead)
		labels := make([]int64, rows)
		for j := range labels {
			labels[j] = int64(r.IntN(classes))
		}
		kv := []any{"reduction", reduction}
		if i%2 == 1 && rows > 1 {
			kv = append(kv, "ignore_index", -100)
			labels[0] = -100
		}
		as := attrs(kv...)
		xv := randVals(r, prod(shape), -3, 3)
		x, lab := f64T(shape, xv), i64T(lead, labels...)
		dlShape := lossShape(reduction, ir.Shape(lead))
		dlv := randVals(r, prod(dlShape), 0.5, 2)
		dl := f64T(dlShape, dlv)
		got := run1(t, "cross_entropy_grad", as, x, lab, dl)
		checkFD(t, "cross_entropy_grad "+reduction, got, fdGrad(xv, fdStep, forwardLoss(t, "cross_entropy", as, []device.Tensor{x, lab}, 0, dlv)))
		// Reference of the Doc formula in both dtypes, with i32 labels for variety.
		valid := 0
		for _, l := range labels {
			if l != -100 || len(kv) == 2 {
				valid++
			}
		}
		for _, d := range floatTypes {
			xt, dlt := tensorOf(d, shape, xv), tensorOf(d, dlShape, dlv)
			xr, dlr := values(xt), values(dlt)
			want := make([]float64, len(xr))
			for rr := 0; rr < rows; rr++ {
				if len(kv) == 4 && labels[rr] == -100 {
					continue
				}
				w := dlr[0]
				switch reduction {
				case "mean":
					w /= float64(valid)
				case "none":
					w = dlr[rr]
				}
				row := xr[rr*classes : (rr+1)*classes]
				m := slices.Max(row)
				s := 0.0
				for _, v := range row {
					s += math.Exp(v - m)
				}
				for c, v := range row {
					p := math.Exp(v-m) / s
					if int64(c) == labels[rr] {
						p--
					}
					want[rr*classes+c] = w * p
				}
			}
			lab32 := tensorOf(ir.I32, lead, values(lab))
			closeTo(t, "cross_entropy_grad "+reduction+" "+d.String(), run1(t, "cross_entropy_grad", as, xt, lab32, dlt), want, 4*tolFor(d))
		}
	}
	// A label out of range is a run-time error.
	_, err := runOpErr("cross_entropy_grad", nil, f64T([]int{1, 3}, []float64{1, 2, 3}), i64T([]int{1}, 3), f64T(nil, []float64{1}))
	if err == nil {
		t.Fatal("label 3 of 3 classes accepted")
	}
}

func TestMSEGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for i := 0; i < 9; i++ {
		reduction := []string{"mean", "sum", "none"}[i%3]
		shape := randShape(r, r.IntN(3), 1, 5)
		as := attrs("reduction", reduction)
		pv, tv := randVals(r, prod(shape), -2, 2), randVals(r, prod(shape), -2, 2)
		p, tg := f64T(shape, pv), f64T(shape, tv)
		dlShape := lossShape(reduction, ir.Shape(shape))
		dlv := randVals(r, prod(dlShape), 0.5, 2)
		dl := f64T(dlShape, dlv)
		got := run1(t, "mse_grad", as, p, tg, dl)
		checkFD(t, "mse_grad "+reduction, got, fdGrad(pv, fdStep, forwardLoss(t, "mse", as, []device.Tensor{p, tg}, 0, dlv)))
		for _, d := range floatTypes {
			pt, tt, dt := tensorOf(d, shape, pv), tensorOf(d, shape, tv), tensorOf(d, dlShape, dlv)
			a, b, g := values(pt), values(tt), values(dt)
			want := make([]float64, len(a))
			for j := range want {
				w := g[0]
				switch reduction {
				case "mean":
					w /= float64(len(a))
				case "none":
					w = g[j]
				}
				want[j] = 2 * (a[j] - b[j]) * w
			}
			closeTo(t, "mse_grad "+reduction+" "+d.String(), run1(t, "mse_grad", as, pt, tt, dt), want, 4*tolFor(d))
		}
	}
}

func TestGatherGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for i := 0; i < 12; i++ {
		rank := 1 + r.IntN(3)
		shape := randShape(r, rank, 1, 4)
		axis := r.IntN(rank)
		idxShape := randShape(r, r.IntN(3), 1, 3)
		dim := shape[axis]
		idx := make([]int64, prod(idxShape))
		for j := range idx {
			idx[j] = int64(r.IntN(2*dim) - dim) // repeats and negatives
		}
		idxT := i64T(idxShape, idx...)
		dataV := randVals(r, prod(shape), -1, 1)
		data := f64T(shape, dataV)
		fwdAs := attrs("axis", axis-rank*(i%2))
		y := runOp(t, "gather", fwdAs, data, idxT)[0]
		dyv := randVals(r, y.Type.NumElements(), -1, 1)
		as := attrs("axis", axis, "dim", dim)
		got := run1(t, "gather_grad", as, idxT, f64T(y.Type.Shape, dyv))
		checkFD(t, "gather_grad", got, fdGrad(dataV, fdStep, forwardLoss(t, "gather", fwdAs, []device.Tensor{data, idxT}, 0, dyv)))
		// The Doc's scatter-add, in increasing index order, in both dtypes.
		outer, inner := prod(shape[:axis]), prod(shape[axis+1:])
		for _, d := range floatTypes {
			dyt := tensorOf(d, y.Type.Shape, dyv)
			g := values(dyt)
			want := make([]float64, len(dataV))
			for o := 0; o < outer; o++ {
				for k, v := range idx {
					if v < 0 {
						v += int64(dim)
					}
					for e := 0; e < inner; e++ {
						want[(o*dim+int(v))*inner+e] += g[(o*len(idx)+k)*inner+e]
					}
				}
			}
			closeTo(t, "gather_grad "+d.String(), run1(t, "gather_grad", as, tensorOf(ir.I32, idxShape, values(idxT)), dyt), want, 4*tolFor(d))
		}
	}
	if _, err := runOpErr("gather_grad", attrs("axis", 0, "dim", 2), i64T([]int{1}, 2), f64T([]int{1}, []float64{1})); err == nil {
		t.Fatal("index 2 of a dim of 2 accepted")
	}
}

func TestReduceMaxGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	for i := 0; i < 20; i++ {
		rank := r.IntN(4)
		shape := randShape(r, rank, 1, 4)
		axes, red, has := randAxes(r, rank)
		kv := []any{"keepdims", i%2 == 0}
		if has {
			kv = append(kv, "axes", axes)
		}
		as := attrs(kv...)
		// Distinct values for the finite differences.
		xv := make([]float64, prod(shape))
		for j, p := range r.Perm(len(xv)) {
			xv[j] = float64(p)*0.1 + 0.01*r.Float64()
		}
		x := f64T(shape, xv)
		y := runOp(t, "reduce_max", as, x)[0]
		dyv := randVals(r, y.Type.NumElements(), -1, 1)
		got := run1(t, "reduce_max_grad", as, x, y, f64T(y.Type.Shape, dyv))
		checkFD(t, "reduce_max_grad", got, fdGrad(xv, fdStep, forwardLoss(t, "reduce_max", as, []device.Tensor{x}, 0, dyv)))
		// Ties: the first element in row-major order of each group gets dy.
		for j := range xv {
			xv[j] = float64(r.IntN(3))
		}
		for _, d := range floatTypes {
			xt := tensorOf(d, shape, xv)
			yt := runOp(t, "reduce_max", as, xt)[0]
			dyt := tensorOf(d, yt.Type.Shape, dyv)
			ym := values(yt)
			want := make([]float64, len(xv))
			done := make([]bool, len(ym))
			for p, v := range xv {
				c := unravel(p, shape)
				var oc, os []int
				for dd := range shape {
					if !red[dd] {
						oc, os = append(oc, c[dd]), append(os, shape[dd])
					}
				}
				o := ravel(oc, os)
				if !done[o] && v == ym[o] {
					want[p], done[o] = values(dyt)[o], true
				}
			}
			closeTo(t, "reduce_max_grad ties "+d.String(), run1(t, "reduce_max_grad", as, xt, yt, dyt), want, 0)
		}
	}
}

func TestSliceGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 48))
	for i := 0; i < 20; i++ {
		rank := 1 + r.IntN(3)
		shape := randShape(r, rank, 1, 6)
		var starts, ends, axes, steps []int
		for d := 0; d < rank; d++ {
			if r.IntN(3) == 0 {
				continue
			}
			n := shape[d]
			step := []int{1, 2, -1, -2, 3}[r.IntN(5)]
			var st, en int
			if step > 0 {
				st = r.IntN(n + 1)
				en = st + r.IntN(n-st+1)
			} else {
				st = r.IntN(n)
				en = -1 + r.IntN(st+2)
			}
			starts, ends, axes, steps = append(starts, st), append(ends, en), append(axes, d-rank*r.IntN(2)), append(steps, step)
		}
		if len(starts) == 0 {
			continue
		}
		fwdAs := attrs("starts", starts, "ends", ends, "axes", axes, "steps", steps)
		xv := randVals(r, prod(shape), -1, 1)
		x := f64T(shape, xv)
		y := runOp(t, "slice", fwdAs, x)[0]
		dyv := randVals(r, y.Type.NumElements(), -1, 1)
		as := attrs("shape", shape, "starts", starts, "ends", ends, "axes", axes, "steps", steps)
		got := run1(t, "slice_grad", as, f64T(y.Type.Shape, dyv))
		checkFD(t, "slice_grad", got, fdGrad(xv, fdStep, forwardLoss(t, "slice", fwdAs, []device.Tensor{x}, 0, dyv)))
		// The transpose of the slice: scatter dy to the positions slice reads (slice of an
		// index tensor names them).
		pos := make([]float64, len(xv))
		for j := range pos {
			pos[j] = float64(j)
		}
		read := run1(t, "slice", fwdAs, f64T(shape, pos))
		for _, d := range floatTypes {
			dyt := tensorOf(d, y.Type.Shape, dyv)
			want := make([]float64, len(xv))
			for j, p := range read {
				want[int(p)] = values(dyt)[j]
			}
			closeTo(t, "slice_grad "+d.String(), run1(t, "slice_grad", as, dyt), want, 0)
		}
	}
}
