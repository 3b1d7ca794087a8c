package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// resizeRef follows the ONNX reference implementation's structure: recursive 1-D
// interpolation, neighbours taken from an edge-padded copy of the data. (It shares the
// kernel's coordinate transform, p.source; TestResizeCoordinates checks that separately.)
func resizeRef(p *ResizeParams, x []float64) []float64 {
	r := len(p.InShape)
	y := make([]float64, p.YLen())
	coord := make([]int, r)
	for yi := range y {
		unflatten(yi, p.OutShape, coord)
		y[yi] = resizeRefND(p, x, 0, coord)
	}
	return y
}

func resizeRefND(p *ResizeParams, data []float64, axis int, coord []int) float64 {
	r := len(p.InShape)
	inner := 1
	for i := axis + 1; i < r; i++ {
		inner *= p.InShape[i]
	}
	vals := make([]float64, p.InShape[axis])
	for i := range vals {
		if axis == r-1 {
			vals[i] = data[i]
		} else {
			vals[i] = resizeRefND(p, data[i*inner:(i+1)*inner], axis+1, coord)
		}
	}
	return resizeRef1D(p, axis, vals, coord[axis])
}

func resizeRef1D(p *ResizeParams, axis int, data []float64, xo int) float64 {
	xOri, ok := p.source(axis, xo)
	if !ok {
		return p.ExtrapolationValue
	}
	xInt := math.Floor(xOri)
	ratio := xOri - xInt
	if ratio == 0 {
		ratio = 1
	}
	var coeffs []float64
	switch p.Mode {
	case ResizeNearest:
		if ratio == 1 {
			coeffs = []float64{0, 1}
		} else {
			var c bool
			switch p.NearestMode {
			case ResizeRoundPreferFloor:
				c = ratio > 0.5
			case ResizeRoundPreferCeil:
				c = ratio >= 0.5
			case ResizeFloor:
				c = false
			case ResizeCeil:
				c = true
			}
			if c {
				coeffs = []float64{0, 1}
			} else {
				coeffs = []float64{1, 0}
			}
		}
	case ResizeLinear:
		coeffs = []float64{1 - ratio, ratio}
	case ResizeCubic:
		a, t := p.CubicCoeffA, ratio
		coeffs = []float64{
			((a*(t+1)-5*a)*(t+1)+8*a)*(t+1) - 4*a,
			((a+2)*t-(a+3))*t*t + 1,
			((a+2)*(1-t)-(a+3))*(1-t)*(1-t) + 1,
			((a*((1-t)+1)-5*a)*((1-t)+1)+8*a)*((1-t)+1) - 4*a,
		}
	}
	n := len(coeffs)
	pad := (n + 1) / 2
	padded := make([]float64, len(data)+2*pad)
	for i := range padded {
		padded[i] = data[min(max(i-pad, 0), len(data)-1)]
	}
	xp := xOri + float64(pad)
	idx := make([]int, len(padded))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		da, db := math.Abs(xp-float64(idx[a])), math.Abs(xp-float64(idx[b]))
		if da != db {
			return da < db
		}
		return idx[a] < idx[b]
	})
	sel := append([]int(nil), idx[:n]...)
	sort.Ints(sel)
	if p.ExcludeOutside {
		sum := 0.0
		for i, j := range sel {
			if j-pad < 0 || j-pad >= len(data) {
				coeffs[i] = 0
			}
			sum += coeffs[i]
		}
		for i := range coeffs {
			coeffs[i] /= sum
		}
	}
	var s float64
	for i, j := range sel {
		s += coeffs[i] * padded[j]
	}
	return s
}

func TestResize(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	type tc struct {
		in, out []int
		scales  []float64
	}
	shapes := []tc{
		{[]int{1, 2, 4, 5}, []int{1, 2, 8, 10}, nil},
		{[]int{2, 1, 7, 6}, []int{2, 1, 3, 4}, nil},
		{[]int{1, 1, 5, 5}, []int{1, 1, 8, 3}, []float64{1, 1, 1.7, 0.6}},
		{[]int{1, 3, 1}, []int{1, 3, 4}, nil},
		{[]int{1, 1, 3, 4, 5}, []int{1, 1, 5, 4, 2}, nil},
		{[]int{6}, []int{1}, nil},
		{[]int{2, 3}, []int{5, 7}, nil},
	}
	coords := []ResizeCoordMode{ResizeHalfPixel, ResizeHalfPixelSymmetric, ResizePytorchHalfPixel, ResizeAlignCorners, ResizeAsymmetric, ResizeTFHalfPixelForNN, ResizeTFCropAndResize}
	nearest := []ResizeNearestMode{ResizeRoundPreferFloor, ResizeRoundPreferCeil, ResizeFloor, ResizeCeil}
	for si, sh := range shapes {
		for _, cm := range coords {
			for _, mode := range []ResizeMode{ResizeNearest, ResizeLinear, ResizeCubic} {
				for ni, nm := range nearest {
					if mode != ResizeNearest && ni > 0 {
						break
					}
					for _, excl := range []bool{false, true} {
						if excl && mode != ResizeCubic {
							continue
						}
						p := ResizeParams{InShape: sh.in, OutShape: sh.out, Scales: sh.scales, Mode: mode, CoordMode: cm, NearestMode: nm, ExcludeOutside: excl, ExtrapolationValue: -7}
						if cm == ResizeTFCropAndResize {
							k := len(sh.in)
							p.Roi = make([]float64, 2*k)
							for i := 0; i < k; i++ {
								p.Roi[i], p.Roi[k+i] = -0.1*float64(i%2), 1+0.2*float64(i%3)
							}
						}
						name := fmt.Sprintf("shape %d %s %s %s excl=%v", si, mode, cm, nm, excl)
						if err := p.Init(); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						x := randSlice[float64](r, p.XLen())
						want := resizeRef(&p, x)
						y := make([]float64, p.YLen())
						Resize(&p, x, y)
						assertClose(t, name, y, want, 1e-12)
						y32 := make([]float32, p.YLen())
						Resize(&p, toF32(x), y32)
						assertClose(t, name+" f32", toF64(y32), want, 1e-5)
						// Adjoint: <Resize(x), dy> = <x, ResizeBackward(dy)> (extrapolated
						// outputs are constants, so leave them out of the product).
						dy := randSlice[float64](r, p.YLen())
						for i := range y {
							if y[i] == -7 {
								dy[i] = 0
							}
						}
						dx := make([]float64, p.XLen())
						ResizeBackward(&p, dy, dx)
						var lhs float64
						for i := range y {
							if dy[i] != 0 {
								lhs += y[i] * dy[i]
							}
						}
						if rhs := dot(x, dx); math.Abs(lhs-rhs) > 1e-10*math.Max(1, math.Abs(lhs)) {
							t.Fatalf("%s: adjoint %v vs %v", name, lhs, rhs)
						}
					}
				}
			}
		}
	}
}

func TestResizeInitErrors(t *testing.T) {
	for i, p := range []ResizeParams{
		{InShape: []int{1, 2}, OutShape: []int{1}},
		{InShape: []int{2}, OutShape: []int{3}, Mode: "bicubic"},
		{InShape: []int{2}, OutShape: []int{3}, CoordMode: ResizeTFCropAndResize},
		{InShape: []int{2}, OutShape: []int{3}, Scales: []float64{0}},
		{InShape: []int{0}, OutShape: []int{3}},
	} {
		if err := p.Init(); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
}

func BenchmarkResizeLinear(b *testing.B) {
	p := ResizeParams{InShape: []int{8, 64, 56, 56}, OutShape: []int{8, 64, 112, 112}, Mode: ResizeLinear}
	if err := p.Init(); err != nil {
		b.Fatal(err)
	}
	x := randSlice[float32](rand.New(rand.NewPCG(1, 1)), p.XLen())
	y := make([]float32, p.YLen())
	for b.Loop() {
		Resize(&p, x, y)
	}
	b.ReportMetric(float64(p.YLen())*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
}

// Known answers from the ONNX operator test suite (resize_upsample_scales_linear,
// ..._linear_align_corners, resize_upsample_scales_nearest, resize_downsample_scales_cubic).
func TestResizeONNXExamples(t *testing.T) {
	x := []float64{1, 2, 3, 4}
	for _, tc := range []struct {
		p    ResizeParams
		x    []float64
		want []float64
	}{
		{ResizeParams{InShape: []int{1, 1, 2, 2}, OutShape: []int{1, 1, 4, 4}, Scales: []float64{1, 1, 2, 2}, Mode: ResizeLinear}, x,
			[]float64{1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}},
		{ResizeParams{InShape: []int{1, 1, 2, 2}, OutShape: []int{1, 1, 4, 4}, Scales: []float64{1, 1, 2, 2}, Mode: ResizeLinear, CoordMode: ResizeAlignCorners}, x,
			[]float64{1, 4.0 / 3, 5.0 / 3, 2, 5.0 / 3, 2, 7.0 / 3, 8.0 / 3, 7.0 / 3, 8.0 / 3, 3, 10.0 / 3, 3, 10.0 / 3, 11.0 / 3, 4}},
		{ResizeParams{InShape: []int{1, 1, 2, 2}, OutShape: []int{1, 1, 4, 6}, Scales: []float64{1, 1, 2, 3}}, x,
			[]float64{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}},
		{ResizeParams{InShape: []int{1, 1, 4, 4}, OutShape: []int{1, 1, 3, 3}, Scales: []float64{1, 1, 0.8, 0.8}, Mode: ResizeCubic},
			[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			[]float64{1.47119141, 2.78125, 4.08251953, 6.71142578, 8.02148438, 9.32275391, 11.91650391, 13.2265625, 14.52783203}},
	} {
		p := tc.p
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		y := make([]float64, p.YLen())
		Resize(&p, tc.x, y)
		assertClose(t, fmt.Sprintf("%s %s", p.Mode, p.CoordMode), y, tc.want, 1e-7)
	}
}

// TestResizeCoordinates pins the coordinate transforms to hand-computed values, including
// the unit-extent cases where ONNX Runtime (followed here) and the Python reference differ.
func TestResizeCoordinates(t *testing.T) {
	for _, tc := range []struct {
		mode    ResizeCoordMode
		in, out int
		scale   float64
		o       int
		want    float64
	}{
		{ResizeHalfPixel, 4, 8, 0, 3, 1.25},
		{ResizePytorchHalfPixel, 4, 8, 0, 3, 1.25},
		{ResizePytorchHalfPixel, 4, 1, 0.3, 0, 0},
		{ResizeAlignCorners, 4, 7, 0, 3, 1.5},
		{ResizeAlignCorners, 4, 1, 0.3, 0, 0},
		{ResizeAlignCorners, 5, 2, 0.5, 1, 4}, // uses the output extent 2, not s·in = 2.5
		{ResizeAsymmetric, 4, 8, 0, 3, 1.5},
		{ResizeTFHalfPixelForNN, 4, 8, 0, 3, 1.75},
		{ResizeHalfPixelSymmetric, 5, 2, 0.5, 0, 5.0/2*(1-2/2.5) + 0.5/0.5 - 0.5},
	} {
		p := ResizeParams{InShape: []int{tc.in}, OutShape: []int{tc.out}, CoordMode: tc.mode}
		if tc.scale != 0 {
			p.Scales = []float64{tc.scale}
		}
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		if got, _ := p.source(0, tc.o); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s in=%d out=%d o=%d: %v, want %v", tc.mode, tc.in, tc.out, tc.o, got, tc.want)
		}
	}
	// Unit extent under pytorch_half_pixel samples exactly input 0, even for cubic.
	p := ResizeParams{InShape: []int{4}, OutShape: []int{1}, Mode: ResizeCubic, CoordMode: ResizePytorchHalfPixel}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	y := make([]float64, 1)
	Resize(&p, []float64{3, 5, 7, 11}, y)
	if y[0] != 3 {
		t.Errorf("pytorch_half_pixel cubic unit extent: %v, want 3", y[0])
	}
}
