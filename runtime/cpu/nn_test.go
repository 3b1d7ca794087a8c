package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// Numeric tests of the nn kernels against naive float64 references written from the op
// table's Docs, on random shapes and attributes, in f64 and f32.

var floatTypes = []ir.DType{ir.F64, ir.F32}

// tolFor is the comparison tolerance of a kernel in dtype d against a float64 reference.
func tolFor(d ir.DType) float64 {
	if d == ir.F32 {
		return 2e-5
	}
	return 1e-10
}

// windowExtent is the output extent rule of ops_nn.go.
func windowExtent(d, k, s, dil, pb, pe int, ceil bool) int {
	span := (k-1)*dil + 1
	avail := d + pb + pe - span
	if !ceil {
		return avail/s + 1
	}
	out := (avail+s-1)/s + 1
	if (out-1)*s >= d+pb {
		out--
	}
	return out
}

type windowCase struct {
	n, c, m, groups                          int
	spatial, kernel, stride, dil, pb, pe, op []int
}

func randWindow(r *rand.Rand, ceilSafe bool) windowCase {
	k := 1 + r.IntN(3)
	wc := windowCase{n: 1 + r.IntN(2)}
	for i := 0; i < k; i++ {
		kk, s, dl := 1+r.IntN(3), 1+r.IntN(2), 1+r.IntN(2)
		pb, pe := r.IntN(kk), r.IntN(kk)
		ext := (kk-1)*dl + 1
		d := max(1, ext-pb-pe) + r.IntN(4)
		if k == 3 {
			d = max(1, ext-pb-pe) + r.IntN(2)
		}
		wc.spatial = append(wc.spatial, d)
		wc.kernel = append(wc.kernel, kk)
		wc.stride = append(wc.stride, s)
		wc.dil = append(wc.dil, dl)
		wc.pb = append(wc.pb, pb)
		wc.pe = append(wc.pe, pe)
		wc.op = append(wc.op, r.IntN(s))
	}
	_ = ceilSafe
	return wc
}

func (wc windowCase) attrs(extra ...any) ir.Attrs {
	return attrs(append([]any{"strides", wc.stride, "dilations", wc.dil, "pads", append(slices.Clone(wc.pb), wc.pe...)}, extra...)...)
}

// refConv is ONNX Conv by its definition.
func refConv(x []float64, xs []int, w []float64, ws []int, b []float64, wc windowCase) ([]float64, []int) {
	n, c, m, g := xs[0], xs[1], ws[0], wc.groups
	sp := xs[2:]
	var os []int
	for i := range sp {
		os = append(os, windowExtent(sp[i], ws[2+i], wc.stride[i], wc.dil[i], wc.pb[i], wc.pe[i], false))
	}
	out := append([]int{n, m}, os...)
	y := make([]float64, prod(out))
	cg, mg := c/g, m/g
	kn := prod(ws[2:])
	for b0 := 0; b0 < n; b0++ {
		for mm := 0; mm < m; mm++ {
			grp := mm / mg
			for oi := 0; oi < prod(os); oi++ {
				oc := unravel(oi, os)
				s := 0.0
				if b != nil {
					s = b[mm]
				}
				for ci := 0; ci < cg; ci++ {
					for ki := 0; ki < kn; ki++ {
						kc := unravel(ki, ws[2:])
						inside := true
						pos := make([]int, len(sp))
						for d := range sp {
							pos[d] = oc[d]*wc.stride[d] + kc[d]*wc.dil[d] - wc.pb[d]
							inside = inside && pos[d] >= 0 && pos[d] < sp[d]
						}
						if !inside {
							continue
						}
						xi := ravel(append([]int{b0, grp*cg + ci}, pos...), xs)
						wi := ravel(append([]int{mm, ci}, kc...), ws)
						s += x[xi] * w[wi]
					}
				}
				y[ravel(append([]int{b0, mm}, oc...), out)] = s
			}
		}
	}
	return y, out
}

func TestConv(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []windowCase{}
	for i := 0; i < 30; i++ {
		wc := randWindow(r, false)
		switch i % 3 {
		case 0:
			wc.groups, wc.c, wc.m = 1, 1+r.IntN(3), 1+r.IntN(3)
		case 1:
			wc.groups = 2
			wc.c, wc.m = 2*(1+r.IntN(2)), 2*(1+r.IntN(2))
		case 2: // depthwise
			wc.c = 1 + r.IntN(4)
			wc.groups, wc.m = wc.c, wc.c*(1+r.IntN(2))
		}
		cases = append(cases, wc)
	}
	// A GEMM-sized 2-D case and a pointwise (1×1, stride 1, unpadded) case.
	cases = append(cases,
		windowCase{n: 2, c: 16, m: 24, groups: 1, spatial: []int{11, 9}, kernel: []int{3, 3}, stride: []int{1, 2}, dil: []int{1, 1}, pb: []int{1, 1}, pe: []int{1, 0}},
		windowCase{n: 2, c: 8, m: 5, groups: 1, spatial: []int{5, 7}, kernel: []int{1, 1}, stride: []int{1, 1}, dil: []int{1, 1}, pb: []int{0, 0}, pe: []int{0, 0}})
	for i, wc := range cases {
		for _, d := range floatTypes {
			xs := append([]int{wc.n, wc.c}, wc.spatial...)
			ws := append([]int{wc.m, wc.c / wc.groups}, wc.kernel...)
			x := tensorOf(d, xs, randVals(r, prod(xs), -1, 1))
			w := tensorOf(d, ws, randVals(r, prod(ws), -1, 1))
			in := []device.Tensor{x, w}
			var bias []float64
			if i%2 == 0 {
				bt := tensorOf(d, []int{wc.m}, randVals(r, wc.m, -1, 1))
				in, bias = append(in, bt), values(bt)
			}
			as := wc.attrs("groups", wc.groups)
			got := runOp(t, "conv", as, in...)[0]
			want, shape := refConv(values(x), xs, values(w), ws, bias, wc)
			if !got.Type.Shape.Equal(shape) {
				t.Fatalf("case %d: shape %s, want %v", i, got.Type, shape)
			}
			closeTo(t, "conv "+d.String(), values(got), want, 10*tolFor(d))
		}
	}
}

// refConvTranspose is ONNX ConvTranspose by its definition: scatter into the full output,
// crop the pads, add the bias.
func refConvTranspose(x []float64, xs []int, w []float64, ws []int, b []float64, wc windowCase) ([]float64, []int) {
	n, c, g := xs[0], xs[1], wc.groups
	mg := ws[1]
	m := mg * g
	sp := xs[2:]
	full := make([]int, len(sp))
	out := []int{n, m}
	for i := range sp {
		full[i] = wc.stride[i]*(sp[i]-1) + wc.op[i] + (ws[2+i]-1)*wc.dil[i] + 1
		out = append(out, full[i]-wc.pb[i]-wc.pe[i])
	}
	fs := append([]int{n, m}, full...)
	yf := make([]float64, prod(fs))
	cg := c / g
	for b0 := 0; b0 < n; b0++ {
		for ci := 0; ci < c; ci++ {
			grp := ci / cg
			for ii := 0; ii < prod(sp); ii++ {
				ic := unravel(ii, sp)
				xv := x[ravel(append([]int{b0, ci}, ic...), xs)]
				for mp := 0; mp < mg; mp++ {
					for ki := 0; ki < prod(ws[2:]); ki++ {
						kc := unravel(ki, ws[2:])
						pos := make([]int, len(sp))
						for d := range sp {
							pos[d] = ic[d]*wc.stride[d] + kc[d]*wc.dil[d]
						}
						yf[ravel(append([]int{b0, grp*mg + mp}, pos...), fs)] += xv * w[ravel(append([]int{ci, mp}, kc...), ws)]
					}
				}
			}
		}
	}
	y := make([]float64, prod(out))
	for i := range y {
		oc := unravel(i, out)
		fc := slices.Clone(oc)
		for d := range sp {
			fc[2+d] += wc.pb[d]
		}
		y[i] = yf[ravel(fc, fs)]
		if b != nil {
			y[i] += b[oc[1]]
		}
	}
	return y, out
}

func TestConvTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 30; i++ {
		wc := randWindow(r, false)
		wc.groups = 1 + r.IntN(2)
		wc.c = wc.groups * (1 + r.IntN(2))
		mg := 1 + r.IntN(3)
		// Keep the output non-empty: the pads must leave at least one position.
		for d := range wc.spatial {
			full := wc.stride[d]*(wc.spatial[d]-1) + wc.op[d] + (wc.kernel[d]-1)*wc.dil[d] + 1
			for wc.pb[d]+wc.pe[d] >= full {
				wc.spatial[d]++
				full += wc.stride[d]
			}
		}
		for _, d := range floatTypes {
			xs := append([]int{wc.n, wc.c}, wc.spatial...)
			ws := append([]int{wc.c, mg}, wc.kernel...)
			x := tensorOf(d, xs, randVals(r, prod(xs), -1, 1))
			w := tensorOf(d, ws, randVals(r, prod(ws), -1, 1))
			in := []device.Tensor{x, w}
			var bias []float64
			if i%2 == 1 {
				bt := tensorOf(d, []int{mg * wc.groups}, randVals(r, mg*wc.groups, -1, 1))
				in, bias = append(in, bt), values(bt)
			}
			as := wc.attrs("groups", wc.groups, "output_padding", wc.op)
			got := runOp(t, "conv_transpose", as, in...)[0]
			want, shape := refConvTranspose(values(x), xs, values(w), ws, bias, wc)
			if !got.Type.Shape.Equal(shape) {
				t.Fatalf("case %d: shape %s, want %v", i, got.Type, shape)
			}
			closeTo(t, "conv_transpose "+d.String(), values(got), want, 10*tolFor(d))
		}
	}
}

// refPool is ONNX MaxPool / AveragePool by the Docs of ops_nn.go.
func refPool(x []float64, xs []int, wc windowCase, ceil, avg, includePad bool) ([]float64, []int) {
	sp := xs[2:]
	out := []int{xs[0], xs[1]}
	for i := range sp {
		out = append(out, windowExtent(sp[i], wc.kernel[i], wc.stride[i], wc.dil[i], wc.pb[i], wc.pe[i], ceil))
	}
	os := out[2:]
	y := make([]float64, prod(out))
	for p := 0; p < xs[0]*xs[1]; p++ {
		for oi := 0; oi < prod(os); oi++ {
			oc := unravel(oi, os)
			best, sum, cnt := math.Inf(-1), 0.0, 0
			for ki := 0; ki < prod(wc.kernel); ki++ {
				kc := unravel(ki, wc.kernel)
				inside, inPadded := true, true
				pos := make([]int, len(sp))
				for d := range sp {
					pos[d] = oc[d]*wc.stride[d] + kc[d]*wc.dil[d] - wc.pb[d]
					inside = inside && pos[d] >= 0 && pos[d] < sp[d]
					inPadded = inPadded && pos[d] >= -wc.pb[d] && pos[d] < sp[d]+wc.pe[d]
				}
				if includePad && inPadded {
					cnt++
				}
				if !inside {
					continue
				}
				v := x[p*prod(sp)+ravel(pos, sp)]
				best = max(best, v)
				sum += v
				if !includePad {
					cnt++
				}
			}
			if avg {
				if cnt > 0 {
					y[p*prod(os)+oi] = sum / float64(cnt)
				}
			} else {
				y[p*prod(os)+oi] = best
			}
		}
	}
	return y, out
}

func TestPool(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 60; i++ {
		wc := randWindow(r, true)
		ceil := i%2 == 1
		avg := i%4 >= 2
		includePad := avg && i%8 >= 4
		for _, d := range floatTypes {
			xs := append([]int{1 + r.IntN(2), 1 + r.IntN(3)}, wc.spatial...)
			x := tensorOf(d, xs, randVals(r, prod(xs), -2, 2))
			extra := []any{"kernel", wc.kernel, "ceil_mode", ceil}
			name := "max_pool"
			if avg {
				name = "avg_pool"
				extra = append(extra, "count_include_pad", includePad)
			}
			got := runOp(t, name, wc.attrs(extra...), x)[0]
			want, shape := refPool(values(x), xs, wc, ceil, avg, includePad)
			if !got.Type.Shape.Equal(shape) {
				t.Fatalf("%s case %d: shape %s, want %v", name, i, got.Type, shape)
			}
			closeTo(t, name+" "+d.String(), values(got), want, tolFor(d))
		}
	}
}

func TestPoolErrors(t *testing.T) {
	_, _, err := prepare("max_pool", attrs("kernel", []int{2}), ir.T(ir.I64, 1, 1, 4))
	if err == nil || !strings.Contains(err.Error(), "max_pool supports f32 and f64, not i64") {
		t.Fatalf("max_pool of i64: %v", err)
	}
	_, _, err = prepare("avg_pool", attrs("kernel", []int{1, 1, 1, 1}), ir.T(ir.F32, 1, 1, 2, 2, 2, 2))
	if err == nil || !strings.Contains(err.Error(), "spatial") {
		t.Fatalf("4-d avg_pool: %v", err)
	}
}

func TestBatchNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 10; i++ {
		shape := append([]int{1 + r.IntN(3), 1 + r.IntN(4)}, randShape(r, r.IntN(3), 1, 4)...)
		c := shape[1]
		sp := prod(shape[2:])
		eps := []float64{1e-5, 0.1}[i%2]
		for _, d := range floatTypes {
			x := tensorOf(d, shape, randVals(r, prod(shape), -2, 2))
			ps := make([]device.Tensor, 4)
			for j := range ps {
				ps[j] = tensorOf(d, []int{c}, randVals(r, c, -1, 1))
			}
			ps[3] = tensorOf(d, []int{c}, randVals(r, c, 0.1, 2)) // variance
			got := run1(t, "batch_norm", attrs("eps", eps), append([]device.Tensor{x}, ps...)...)
			xv, sc, bi, mu, va := values(x), values(ps[0]), values(ps[1]), values(ps[2]), values(ps[3])
			want := make([]float64, len(xv))
			for j := range want {
				ch := j / sp % c
				want[j] = (xv[j]-mu[ch])/math.Sqrt(va[ch]+eps)*sc[ch] + bi[ch]
			}
			closeTo(t, "batch_norm "+d.String(), got, want, 4*tolFor(d))
		}
	}
}

func TestInstanceNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 10; i++ {
		shape := append([]int{1 + r.IntN(3), 1 + r.IntN(4)}, randShape(r, 1+r.IntN(2), 1, 5)...)
		c, sp := shape[1], prod(shape[2:])
		for _, d := range floatTypes {
			x := tensorOf(d, shape, randVals(r, prod(shape), -2, 5))
			sc := tensorOf(d, []int{c}, randVals(r, c, -1, 1))
			bi := tensorOf(d, []int{c}, randVals(r, c, -1, 1))
			got := run1(t, "instance_norm", attrs("eps", 1e-3), x, sc, bi)
			xv, s, b := values(x), values(sc), values(bi)
			want := make([]float64, len(xv))
			for p := 0; p < shape[0]*c; p++ {
				row := xv[p*sp : (p+1)*sp]
				mu, va := 0.0, 0.0
				for _, v := range row {
					mu += v
				}
				mu /= float64(sp)
				for _, v := range row {
					va += (v - mu) * (v - mu)
				}
				va /= float64(sp)
				for j, v := range row {
					want[p*sp+j] = (v-mu)/math.Sqrt(va+1e-3)*s[p%c] + b[p%c]
				}
			}
			closeTo(t, "instance_norm "+d.String(), got, want, 10*tolFor(d))
		}
	}
}

func TestLRN(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 12; i++ {
		shape := append([]int{1 + r.IntN(2), 1 + r.IntN(7)}, randShape(r, r.IntN(3), 1, 4)...)
		size := 1 + r.IntN(6)
		alpha, beta, bias := 1e-4, 0.75, 1.0
		as := attrs("size", size)
		if i%2 == 1 {
			alpha, beta, bias = 0.3, 0.6, 2.0
			as = attrs("size", size, "alpha", alpha, "beta", beta, "bias", bias)
		}
		for _, d := range floatTypes {
			x := tensorOf(d, shape, randVals(r, prod(shape), -3, 3))
			got := run1(t, "lrn", as, x)
			xv := values(x)
			c, sp := shape[1], prod(shape[2:])
			want := make([]float64, len(xv))
			for j := range want {
				ch, n, s := j/sp%c, j/(sp*c), j%sp
				sum := 0.0
				for q := max(0, ch-(size-1)/2); q <= min(c-1, ch+int(math.Ceil(float64(size-1)/2))); q++ {
					v := xv[(n*c+q)*sp+s]
					sum += v * v
				}
				want[j] = xv[j] / math.Pow(bias+alpha/float64(size)*sum, beta)
			}
			closeTo(t, "lrn "+d.String(), got, want, tolFor(d))
		}
	}
}

// refPad maps each output coordinate back to the input by the pad mode.
func refPad(x []float64, shape, pads []int, mode string, value float64) []float64 {
	r := len(shape)
	out := make([]int, r)
	for i := range shape {
		out[i] = shape[i] + pads[i] + pads[r+i]
	}
	y := make([]float64, prod(out))
	for o := range y {
		oc := unravel(o, out)
		ic := make([]int, r)
		constant := false
		for d := range shape {
			j, n := oc[d]-pads[d], shape[d]
			switch mode {
			case "constant":
				constant = constant || j < 0 || j >= n
			case "reflect":
				if j < 0 {
					j = -j
				}
				if j >= n {
					j = 2*(n-1) - j
				}
			case "edge":
				j = min(max(j, 0), n-1)
			case "wrap":
				j = ((j % n) + n) % n
			}
			ic[d] = j
		}
		if constant {
			y[o] = value
		} else {
			y[o] = x[ravel(ic, shape)]
		}
	}
	return y
}

func TestPad(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	dtypes := []ir.DType{ir.F64, ir.F32, ir.I64, ir.I32, ir.U8, ir.Bool, ir.F16}
	for i := 0; i < 80; i++ {
		mode := []string{"constant", "reflect", "edge", "wrap"}[i%4]
		d := dtypes[i%len(dtypes)]
		rank := r.IntN(4)
		shape := randShape(r, rank, 1, 4)
		pads := make([]int, 2*rank)
		for j := range pads {
			switch mode {
			case "reflect":
				pads[j] = r.IntN(shape[j%rank])
			case "constant":
				pads[j] = r.IntN(4) - 1 // negative amounts crop
				if shape[j%rank]+pads[j%rank]+pads[j%rank+rank] < 0 {
					pads[j] = 0
				}
			default:
				pads[j] = r.IntN(3)
			}
		}
		value := float64(r.IntN(5)) + 0.25
		lo, hi := -50.0, 50.0
		if d == ir.U8 || d == ir.Bool {
			lo = 0
		}
		x := tensorOf(d, shape, randVals(r, prod(shape), lo, hi))
		got := run1(t, "pad", attrs("pads", pads, "mode", mode, "value", value), x)
		v := values(tensorOf(d, nil, []float64{value}))[0]
		closeTo(t, "pad "+mode+" "+d.String(), got, refPad(values(x), shape, pads, mode, v), 0)
	}
}

// refNearest and the coordinate rules below are written from the resize Doc.
func refResizeCoord(mode string, o, in, out int, s float64) float64 {
	switch mode {
	case "half_pixel":
		return (float64(o)+0.5)/s - 0.5
	case "pytorch_half_pixel":
		if out == 1 {
			return 0
		}
		return (float64(o)+0.5)/s - 0.5
	case "align_corners":
		if out == 1 {
			return 0
		}
		return float64(o) * float64(in-1) / float64(out-1)
	case "asymmetric":
		return float64(o) / s
	case "tf_half_pixel_for_nn":
		return (float64(o) + 0.5) / s
	case "half_pixel_symmetric":
		lengthResized := s * float64(in)
		adjustment := float64(out) / lengthResized
		center := float64(in) / 2
		return center*(1-adjustment) + (float64(o)+0.5)/s - 0.5
	}
	panic(mode)
}

type resizeTap struct {
	i int
	w float64
}

func refResizeTaps(as ir.Attrs, o, in, out int, s float64) []resizeTap {
	x := refResizeCoord(as.Str("coordinate_transformation_mode", "half_pixel"), o, in, out, s)
	clamp := func(j int) int { return min(max(j, 0), in-1) }
	switch as.Str("mode", "nearest") {
	case "nearest":
		var j float64
		switch as.Str("nearest_mode", "round_prefer_floor") {
		case "round_prefer_floor":
			j = math.Ceil(x - 0.5)
		case "round_prefer_ceil":
			j = math.Floor(x + 0.5)
		case "floor":
			j = math.Floor(x)
		case "ceil":
			j = math.Ceil(x)
		}
		return []resizeTap{{clamp(int(j)), 1}}
	case "linear":
		f := math.Floor(x)
		return []resizeTap{{clamp(int(f)), 1 - (x - f)}, {clamp(int(f) + 1), x - f}}
	}
	a := as.Float("cubic_coeff_a", -0.75)
	f := math.Floor(x)
	var taps []resizeTap
	sum := 0.0
	for j := int(f) - 1; j <= int(f)+2; j++ {
		dist := math.Abs(x - float64(j))
		var w float64
		switch {
		case dist <= 1:
			w = (a+2)*dist*dist*dist - (a+3)*dist*dist + 1
		case dist < 2:
			w = a*dist*dist*dist - 5*a*dist*dist + 8*a*dist - 4*a
		}
		if as.Bool("exclude_outside", false) && (j < 0 || j >= in) {
			w = 0
		}
		sum += w
		taps = append(taps, resizeTap{clamp(j), w})
	}
	if as.Bool("exclude_outside", false) {
		for i := range taps {
			taps[i].w /= sum
		}
	}
	return taps
}

// refResize sums, for each output, the tensor product of the per-dim taps.
func refResize(x []float64, shape []int, as ir.Attrs, scales []float64) []float64 {
	sizes := as.Ints("sizes")
	y := make([]float64, prod(sizes))
	for o := range y {
		oc := unravel(o, sizes)
		taps := make([][]resizeTap, len(shape))
		for d := range shape {
			s := float64(sizes[d]) / float64(shape[d])
			if scales != nil {
				s = scales[d]
			}
			taps[d] = refResizeTaps(as, oc[d], shape[d], sizes[d], s)
		}
		var rec func(d, off int, w float64) float64
		rec = func(d, off int, w float64) float64 {
			if d == len(shape) {
				return w * x[off]
			}
			s := 0.0
			for _, t := range taps[d] {
				s += rec(d+1, off*shape[d]+t.i, w*t.w)
			}
			return s
		}
		y[o] = rec(0, 0, 1)
	}
	return y
}

func TestResize(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	coords := []string{"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"}
	nearest := []string{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}
	for i := 0; i < 120; i++ {
		mode := []string{"nearest", "linear", "cubic"}[i%3]
		coord := coords[i/3%len(coords)]
		rank := 1 + r.IntN(4)
		shape := randShape(r, rank, 1, 5)
		sizes := make([]int, rank)
		for d := range sizes {
			switch {
			case rank == 4 && d < 2:
				sizes[d] = shape[d] // NCHW: N and C unchanged
			default:
				sizes[d] = 1 + r.IntN(8)
			}
		}
		kv := []any{"sizes", sizes, "mode", mode, "coordinate_transformation_mode", coord}
		var scales []float64
		if i%4 == 3 {
			for d := range sizes {
				scales = append(scales, float64(sizes[d])/float64(shape[d])*(0.8+0.4*r.Float64()))
			}
			kv = append(kv, "scales", scales)
		}
		switch mode {
		case "nearest":
			kv = append(kv, "nearest_mode", nearest[i/9%4])
		case "cubic":
			switch i % 4 {
			case 0:
				kv = append(kv, "cubic_coeff_a", -0.5, "exclude_outside", true)
			case 1:
				kv = append(kv, "cubic_coeff_a", 0.0) // a valid value kernels/cpu reads as the default
			}
		}
		as := attrs(kv...)
		dtypes := floatTypes
		if mode == "nearest" {
			dtypes = []ir.DType{ir.F64, ir.F32, ir.I64, ir.I32, ir.U8, ir.Bool, ir.BF16}
		}
		for _, d := range dtypes {
			lo := -10.0
			if d == ir.U8 || d == ir.Bool {
				lo = 0
			}
			x := tensorOf(d, shape, randVals(r, prod(shape), lo, 10))
			got := run1(t, "resize", as, x)
			tol := 10 * tolFor(d)
			if mode == "nearest" {
				tol = 0
			}
			closeTo(t, "resize "+strings.Join([]string{mode, coord, d.String()}, " "), got, refResize(values(x), shape, as, scales), tol)
		}
	}
	// Upsampling an image 2× with align_corners, the common model case.
	x := tensorOf(ir.F32, []int{1, 2, 3, 4}, randVals(r, 24, -1, 1))
	as := attrs("sizes", []int{1, 2, 6, 8}, "mode", "linear", "coordinate_transformation_mode", "align_corners")
	closeTo(t, "resize 2x", run1(t, "resize", as, x), refResize(values(x), []int{1, 2, 3, 4}, as, nil), 2e-6)
	// Linear resize of integers is rejected at prepare time (the inference rejects it too).
	if _, err := prepareResize(&device.Spec{Op: ir.Lookup("resize"), Attrs: attrs("sizes", []int{4}, "mode", "linear"),
		In: []ir.Type{ir.T(ir.I64, 2)}, Out: []ir.Type{ir.T(ir.I64, 4)}}); err == nil {
		t.Fatal("linear resize of i64 prepared")
	}
}

func TestGatherElements(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	dtypes := []ir.DType{ir.F64, ir.F32, ir.I64, ir.I32, ir.I8, ir.Bool, ir.F16}
	for i := 0; i < 40; i++ {
		d := dtypes[i%len(dtypes)]
		rank := 1 + r.IntN(3)
		shape := randShape(r, rank, 1, 4)
		axis := r.IntN(rank)
		idxShape := make([]int, rank)
		for j := range idxShape {
			if j == axis {
				idxShape[j] = 1 + r.IntN(5)
			} else {
				idxShape[j] = 1 + r.IntN(shape[j])
			}
		}
		lo := -20.0
		if d == ir.Bool {
			lo = 0
		}
		x := tensorOf(d, shape, randVals(r, prod(shape), lo, 20))
		idx := make([]int64, prod(idxShape))
		for j := range idx {
			idx[j] = int64(r.IntN(2*shape[axis]) - shape[axis]) // negative counts from the end
		}
		idxT := i64T(idxShape, idx...)
		if i%3 == 1 { // narrower index types convert
			idxT = tensorOf(ir.I32, idxShape, values(idxT))
		}
		axAttr := axis
		if i%2 == 1 {
			axAttr = axis - rank
		}
		got := run1(t, "gather_elements", attrs("axis", axAttr), x, idxT)
		xv := values(x)
		want := make([]float64, len(idx))
		for j := range want {
			c := unravel(j, idxShape)
			v := int(idx[j])
			if v < 0 {
				v += shape[axis]
			}
			c[axis] = v
			want[j] = xv[ravel(c, shape)]
		}
		closeTo(t, "gather_elements "+d.String(), got, want, 0)
	}
	// An out-of-range index is a run-time error; indices larger than the data off the axis are
	// rejected at prepare time.
	if _, err := runOpErr("gather_elements", nil, f64T([]int{3}, []float64{1, 2, 3}), i64T([]int{1}, 3)); err == nil {
		t.Fatal("index 3 of a dim of 3 accepted")
	}
	if _, _, err := prepare("gather_elements", attrs("axis", 1), ir.T(ir.F32, 2, 2), ir.T(ir.I64, 3, 1)); err == nil {
		t.Fatal("indices [3, 1] for data [2, 2] along axis 1 prepared")
	}
}

// refReduce reduces over the marked axes with f, starting from init.
func refReduce(x []float64, shape []int, red []bool, init float64, f func(acc, v float64) float64) []float64 {
	var out []int
	for i, d := range shape {
		if !red[i] {
			out = append(out, d)
		}
	}
	y := make([]float64, prod(out))
	for i := range y {
		y[i] = init
	}
	for i, v := range x {
		c := unravel(i, shape)
		var oc []int
		for d := range shape {
			if !red[d] {
				oc = append(oc, c[d])
			}
		}
		o := ravel(oc, out)
		y[o] = f(y[o], v)
	}
	return y
}

func randAxes(r *rand.Rand, rank int) ([]int, []bool, bool) {
	red := make([]bool, rank)
	if rank == 0 || r.IntN(5) == 0 {
		for i := range red {
			red[i] = true
		}
		return nil, red, false
	}
	var axes []int
	for i := range red {
		if r.IntN(2) == 0 {
			red[i] = true
			a := i
			if r.IntN(2) == 0 {
				a -= rank
			}
			axes = append(axes, a)
		}
	}
	return axes, red, true
}

func TestReductions(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	kinds := []struct {
		name string
		init float64
		f    func(acc, v float64) float64
		post func(float64) float64
	}{
		{"reduce_min", math.Inf(1), math.Min, nil},
		{"reduce_prod", 1, func(a, v float64) float64 { return a * v }, nil},
		{"reduce_log_sum_exp", 0, func(a, v float64) float64 { return a + math.Exp(v) }, math.Log},
		{"reduce_max", math.Inf(-1), math.Max, nil},
		{"reduce_sum", 0, func(a, v float64) float64 { return a + v }, nil},
	}
	for i := 0; i < 150; i++ {
		kd := kinds[i%len(kinds)]
		rank := r.IntN(5)
		shape := randShape(r, rank, 1, 4)
		axes, red, has := randAxes(r, rank)
		keep := r.IntN(2) == 0
		kv := []any{"keepdims", keep}
		if has {
			kv = append(kv, "axes", axes)
		}
		dtypes := floatTypes
		switch kd.name {
		case "reduce_min", "reduce_prod":
			dtypes = []ir.DType{ir.F64, ir.F32, ir.I64, ir.I32, ir.I8, ir.U8}
		}
		for _, d := range dtypes {
			lo, hi := 0.5, 1.5
			if d.IsInt() {
				lo, hi = -3, 4
				if d == ir.U8 {
					lo = 0
				}
			}
			x := tensorOf(d, shape, randVals(r, prod(shape), lo, hi))
			if kd.name != "reduce_prod" {
				x = tensorOf(d, shape, randVals(r, prod(shape), -lo*5, hi*5))
			}
			got := runOp(t, kd.name, attrs(kv...), x)[0]
			want := refReduce(values(x), shape, red, kd.init, kd.f)
			if kd.post != nil {
				for j := range want {
					want[j] = kd.post(want[j])
				}
			}
			if d.IsInt() { // integer arithmetic wraps like the dtype
				want = values(tensorOf(d, []int{len(want)}, want))
			}
			tol := 4 * tolFor(d)
			if d.IsInt() {
				tol = 0
			}
			closeTo(t, kd.name+" "+d.String(), values(got), want, tol)
		}
	}
	if _, _, err := prepare("reduce_log_sum_exp", nil, ir.T(ir.I64, 3)); err == nil ||
		!strings.Contains(err.Error(), "reduce_log_sum_exp supports f32 and f64, not i64") {
		t.Fatalf("reduce_log_sum_exp of i64: %v", err)
	}
}

func TestArgMaxMin(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for i := 0; i < 80; i++ {
		isMin := i%2 == 1
		last := i%4 >= 2
		rank := 1 + r.IntN(3)
		shape := randShape(r, rank, 1, 5)
		axis := r.IntN(rank)
		d := []ir.DType{ir.F64, ir.F32, ir.I64, ir.I32, ir.I8, ir.U8}[i%6]
		vals := make([]float64, prod(shape))
		for j := range vals {
			vals[j] = float64(r.IntN(4)) // ties are common
		}
		x := tensorOf(d, shape, vals)
		name := "arg_max"
		if isMin {
			name = "arg_min"
		}
		keep := r.IntN(2) == 0
		got := runOp(t, name, attrs("axis", axis-rank*r.IntN(2), "keepdims", keep, "select_last_index", last), x)[0]
		if got.Type.DType != ir.I64 {
			t.Fatalf("%s result %s", name, got.Type)
		}
		outShape := slices.Clone(shape)
		outShape[axis] = 1
		want := make([]float64, prod(outShape))
		for o := range want {
			c := unravel(o, outShape)
			best := -1
			for j := 0; j < shape[axis]; j++ {
				c[axis] = j
				v := vals[ravel(c, shape)]
				if best < 0 {
					best = j
					continue
				}
				c2 := slices.Clone(c)
				c2[axis] = best
				b := vals[ravel(c2, shape)]
				if (!isMin && (v > b || last && v == b)) || (isMin && (v < b || last && v == b)) {
					best = j
				}
			}
			want[o] = float64(best)
		}
		closeTo(t, name+" "+d.String(), values(got), want, 0)
	}
}

// TestElementwiseNN checks the ONNX activation functions against their formulas, alone and
// inside a fused chain.
func TestElementwiseNN(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	type ewCase struct {
		name string
		as   ir.Attrs
		f    func(x float64) float64
	}
	selu := func(alpha, gamma float64) func(float64) float64 {
		return func(x float64) float64 {
			if x > 0 {
				return gamma * x
			}
			return gamma * alpha * (math.Exp(x) - 1)
		}
	}
	cases := []ewCase{
		{"elu", nil, func(x float64) float64 { return map[bool]float64{true: x, false: math.Exp(x) - 1}[x > 0] }},
		{"elu", attrs("alpha", 0.3), func(x float64) float64 { return map[bool]float64{true: x, false: 0.3 * (math.Exp(x) - 1)}[x > 0] }},
		{"selu", nil, selu(1.67326319217681884765625, 1.05070102214813232421875)},
		{"selu", attrs("alpha", 2.0, "gamma", 0.5), selu(2, 0.5)},
		{"leaky_relu", nil, func(x float64) float64 { return map[bool]float64{true: x, false: 0.01 * x}[x >= 0] }},
		{"leaky_relu", attrs("alpha", 0.2), func(x float64) float64 { return map[bool]float64{true: x, false: 0.2 * x}[x >= 0] }},
		{"softplus", nil, func(x float64) float64 { return math.Log(math.Exp(x) + 1) }},
		{"hard_sigmoid", nil, func(x float64) float64 { return math.Max(0, math.Min(1, 0.2*x+0.5)) }},
		{"hard_sigmoid", attrs("alpha", 0.5, "beta", 0.25), func(x float64) float64 { return math.Max(0, math.Min(1, 0.5*x+0.25)) }},
		{"shrink", nil, func(x float64) float64 {
			switch {
			case x > 0.5:
				return x
			case x < -0.5:
				return x
			}
			return 0
		}},
		{"shrink", attrs("bias", 1.5, "lambd", 1.0), func(x float64) float64 {
			switch {
			case x > 1:
				return x - 1.5
			case x < -1:
				return x + 1.5
			}
			return 0
		}},
		{"sign", nil, func(x float64) float64 { return float64(map[bool]int{true: 1}[x > 0] - map[bool]int{true: 1}[x < 0]) }},
		{"floor", nil, math.Floor},
		{"ceil", nil, math.Ceil},
		{"round", nil, math.RoundToEven},
	}
	for _, c := range cases {
		for _, d := range floatTypes {
			shape := randShape(r, 1+r.IntN(3), 1, 40)
			v := randVals(r, prod(shape), -6, 6)
			for j := 0; j < len(v); j += 7 {
				v[j] = math.Round(v[j]*2) / 2 // halves and integers for the rounding ops
			}
			x := tensorOf(d, shape, v)
			got := run1(t, c.name, c.as, x)
			xv := values(x)
			want := make([]float64, len(xv))
			for j := range want {
				want[j] = values(tensorOf(d, nil, []float64{c.f(xv[j])}))[0]
			}
			closeTo(t, c.name+" "+d.String(), got, want, 2*tolFor(d))
		}
	}
	// Integer sign and shrink run too; float-only ops reject integers at prepare time.
	x := tensorOf(ir.I64, []int{5}, []float64{-7, -1, 0, 2, 9})
	closeTo(t, "sign i64", run1(t, "sign", nil, x), []float64{-1, -1, 0, 1, 1}, 0)
	closeTo(t, "shrink i64", run1(t, "shrink", attrs("bias", 1.0, "lambd", 1.0), x), []float64{-6, 0, 0, 1, 8}, 0)
	if _, err := prepareElementwise(&device.Spec{Op: ir.Lookup("elu"), In: []ir.Type{ir.T(ir.I64, 2)}, Out: []ir.Type{ir.T(ir.I64, 2)}}); err == nil {
		t.Fatal("elu of i64 prepared")
	}
	// NaN stays NaN through sign and shrink.
	nan := f64T([]int{1}, []float64{math.NaN()})
	for _, name := range []string{"sign", "shrink", "elu", "round"} {
		if g := run1(t, name, nil, nan)[0]; !math.IsNaN(g) {
			t.Errorf("%s(NaN) = %v", name, g)
		}
	}
}
