package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"ppc.dev/ppc/internal/cputime"
)

// convNaive visits every (image, out channel, output position, in channel, tap) of a
// convolution and calls f with the flat indices of x, w and y involved. Forward, data
// gradient and filter gradient references are all written on top of it.
func convNaive(p *ConvParams, f func(xi, wi, yi int)) {
	r := len(p.Spatial)
	cg, ocg := p.InC/p.Groups, p.OutC/p.Groups
	outSize, inSize, kSize := 1, 1, 1
	for i := 0; i < r; i++ {
		outSize *= p.OutSpatial[i]
		inSize *= p.Spatial[i]
		kSize *= p.Kernel[i]
	}
	o := make([]int, r)
	k := make([]int, r)
	for n := 0; n < p.Batch; n++ {
		for oc := 0; oc < p.OutC; oc++ {
			g := oc / ocg
			for oi := 0; oi < outSize; oi++ {
				unflatten(oi, p.OutSpatial, o)
				for c := 0; c < cg; c++ {
					for ki := 0; ki < kSize; ki++ {
						unflatten(ki, p.Kernel, k)
						xi, ok := 0, true
						for d := 0; d < r; d++ {
							pos := o[d]*p.Stride[d] + k[d]*p.Dilation[d] - p.PadBegin[d]
							if pos < 0 || pos >= p.Spatial[d] {
								ok = false
								break
							}
							xi = xi*p.Spatial[d] + pos
						}
						if !ok {
							continue
						}
						f((n*p.InC+g*cg+c)*inSize+xi, (oc*cg+c)*kSize+ki, (n*p.OutC+oc)*outSize+oi)
					}
				}
			}
		}
	}
}

func unflatten(i int, dims, idx []int) {
	for d := len(dims) - 1; d >= 0; d-- {
		idx[d] = i % dims[d]
		i /= dims[d]
	}
}

type convCase struct {
	batch, inC, outC, groups     int
	spatial, kernel, stride, dil []int
	padB, padE                   []int
}

func (c convCase) params() *ConvParams {
	return &ConvParams{Batch: c.batch, InC: c.inC, OutC: c.outC, Groups: c.groups, Spatial: c.spatial, Kernel: c.kernel, Stride: c.stride, Dilation: c.dil, PadBegin: c.padB, PadEnd: c.padE}
}

var convCases = []convCase{
	{2, 3, 4, 1, []int{7}, []int{3}, []int{1}, []int{1}, []int{1}, []int{1}},
	{1, 4, 6, 2, []int{11}, []int{3}, []int{2}, []int{2}, []int{0}, []int{3}},
	{2, 3, 5, 1, []int{6, 7}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
	{1, 4, 4, 4, []int{9, 8}, []int{3, 3}, []int{2, 1}, []int{1, 2}, []int{1, 0}, []int{2, 1}}, // depthwise
	{2, 2, 6, 2, []int{5, 5}, []int{3, 2}, []int{1, 1}, []int{1, 1}, []int{0, 1}, []int{1, 0}}, // channel multiplier 3
	{2, 6, 4, 2, []int{5, 6}, []int{1, 1}, nil, nil, nil, nil},                                 // pointwise
	{1, 3, 2, 1, []int{8, 7}, []int{1, 1}, []int{2, 2}, nil, nil, nil},                         // strided 1×1
	{1, 2, 3, 1, []int{4, 5, 6}, []int{2, 3, 2}, []int{1, 2, 2}, []int{1, 1, 2}, []int{1, 0, 1}, []int{0, 1, 1}},
	{3, 8, 8, 2, []int{6, 6}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{0, 0}},
	{1, 1, 1, 1, []int{1, 1}, []int{3, 3}, nil, nil, []int{1, 1}, []int{1, 1}},
	{1, 3, 4, 1, []int{12, 11}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{1, 1}},
	// One large task: the GEMM itself is split across cores (through the im2col packer).
	{1, 8, 32, 1, []int{20, 20}, []int{3, 3}, nil, nil, []int{1, 1}, []int{1, 1}},
	{1, 4, 40, 1, []int{30, 31}, []int{2, 3}, []int{2, 1}, nil, []int{0, 1}, []int{1, 0}},
}

func TestConvForward(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for ci, tc := range convCases {
		p := tc.params()
		if err := p.Init(); err != nil {
			t.Fatalf("case %d: %v", ci, err)
		}
		x := randSlice[float64](r, p.XLen())
		w := randSlice[float64](r, p.WLen())
		bias := randSlice[float64](r, p.OutC)
		want := make([]float64, p.YLen())
		convNaive(p, func(xi, wi, yi int) { want[yi] += x[xi] * w[wi] })
		outSize := p.YLen() / max(1, p.Batch*p.OutC)
		for i := range want {
			want[i] += bias[(i/outSize)%p.OutC]
		}
		y := make([]float64, p.YLen())
		for i := range y {
			y[i] = math.NaN()
		}
		Conv(p, x, w, bias, y)
		assertClose(t, fmt.Sprintf("case %d f64", ci), y, want, 1e-12)
		// float32 path
		x32, w32, b32 := toF32(x), toF32(w), toF32(bias)
		y32 := make([]float32, p.YLen())
		Conv(p, x32, w32, b32, y32)
		assertClose(t, fmt.Sprintf("case %d f32", ci), toF64(y32), want, 1e-5)
	}
}

func TestConvBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for ci, tc := range convCases {
		p := tc.params()
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		x := randSlice[float64](r, p.XLen())
		w := randSlice[float64](r, p.WLen())
		dy := randSlice[float64](r, p.YLen())
		wantDx := make([]float64, p.XLen())
		wantDw := make([]float64, p.WLen())
		convNaive(p, func(xi, wi, yi int) {
			wantDx[xi] += w[wi] * dy[yi]
			wantDw[wi] += x[xi] * dy[yi]
		})
		dx := make([]float64, p.XLen())
		dw := make([]float64, p.WLen())
		db := make([]float64, p.OutC)
		// A tiny column block makes ConvBackwardData walk several blocks.
		for _, blk := range []int{1 << 20, 100} {
			old := convColBlock
			convColBlock = blk
			for i := range dx {
				dx[i] = math.NaN()
			}
			ConvBackwardData(p, dy, w, dx)
			convColBlock = old
			assertClose(t, fmt.Sprintf("case %d dx block %d", ci, blk), dx, wantDx, 1e-12)
		}
		ConvBackwardFilter(p, x, dy, dw, db)
		assertClose(t, fmt.Sprintf("case %d dw", ci), dw, wantDw, 1e-12)
		outSize := p.YLen() / max(1, p.Batch*p.OutC)
		wantDb := make([]float64, p.OutC)
		for i, v := range dy {
			wantDb[(i/outSize)%p.OutC] += v
		}
		assertClose(t, fmt.Sprintf("case %d db", ci), db, wantDb, 1e-12)

		// Finite differences of L = Σ y·dy (float64, central differences) at a few points.
		loss := func() float64 {
			y := make([]float64, p.YLen())
			Conv(p, x, w, nil, y)
			var s float64
			for i := range y {
				s += y[i] * dy[i]
			}
			return s
		}
		const h = 1e-4
		for trial := 0; trial < 3; trial++ {
			for _, v := range []struct {
				buf, grad []float64
				name      string
			}{{x, dx, "dx"}, {w, dw, "dw"}} {
				i := r.IntN(len(v.buf))
				old := v.buf[i]
				v.buf[i] = old + h
				lp := loss()
				v.buf[i] = old - h
				lm := loss()
				v.buf[i] = old
				fd := (lp - lm) / (2 * h)
				if math.Abs(fd-v.grad[i]) > 1e-6*math.Max(1, math.Abs(fd)) {
					t.Errorf("case %d: %s[%d] = %v, finite difference %v", ci, v.name, i, v.grad[i], fd)
				}
			}
		}
	}
}

// convTransposeNaive implements ONNX ConvTranspose straight from its definition: every
// input element scatters x·w into the outputs its kernel taps reach.
func convTransposeNaive(p *ConvTransposeParams, x, w, bias []float64) []float64 {
	r := len(p.Spatial)
	y := make([]float64, p.YLen())
	icg, ocg := p.InC/p.Groups, p.OutC/p.Groups
	inSize, outSize, kSize := 1, 1, 1
	for d := 0; d < r; d++ {
		inSize *= p.Spatial[d]
		outSize *= p.OutSpatial[d]
		kSize *= p.Kernel[d]
	}
	ii, k := make([]int, r), make([]int, r)
	for n := 0; n < p.Batch; n++ {
		for ic := 0; ic < p.InC; ic++ {
			g := ic / icg
			for i := 0; i < inSize; i++ {
				unflatten(i, p.Spatial, ii)
				for ki := 0; ki < kSize; ki++ {
					unflatten(ki, p.Kernel, k)
					o, ok := 0, true
					for d := 0; d < r; d++ {
						pos := ii[d]*p.Stride[d] + k[d]*p.Dilation[d] - p.PadBegin[d]
						if pos < 0 || pos >= p.OutSpatial[d] {
							ok = false
							break
						}
						o = o*p.OutSpatial[d] + pos
					}
					if !ok {
						continue
					}
					for j := 0; j < ocg; j++ {
						oc := g*ocg + j
						y[(n*p.OutC+oc)*outSize+o] += x[(n*p.InC+ic)*inSize+i] * w[(ic*ocg+j)*kSize+ki]
					}
				}
			}
		}
	}
	for i := range y {
		y[i] += bias[(i/outSize)%p.OutC]
	}
	return y
}

func TestConvTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	cases := []ConvTransposeParams{
		{Batch: 2, InC: 3, OutC: 2, Groups: 1, Spatial: []int{5}, Kernel: []int{3}, Stride: []int{2}, PadBegin: []int{1}, PadEnd: []int{0}, OutputPadding: []int{1}},
		{Batch: 1, InC: 4, OutC: 6, Groups: 2, Spatial: []int{4, 3}, Kernel: []int{3, 2}, Stride: []int{2, 3}, Dilation: []int{2, 1}, PadBegin: []int{1, 0}, PadEnd: []int{2, 1}, OutputPadding: []int{1, 2}},
		{Batch: 2, InC: 3, OutC: 3, Groups: 3, Spatial: []int{4, 4}, Kernel: []int{3, 3}, Stride: []int{2, 2}},
		{Batch: 1, InC: 2, OutC: 3, Groups: 1, Spatial: []int{3, 3, 2}, Kernel: []int{2, 2, 3}, Stride: []int{1, 2, 1}, PadBegin: []int{0, 1, 1}, PadEnd: []int{1, 0, 1}},
		{Batch: 2, InC: 4, OutC: 5, Groups: 1, Spatial: []int{3, 4}, Kernel: []int{1, 1}},
	}
	for ci := range cases {
		p := &cases[ci]
		if err := p.Init(); err != nil {
			t.Fatalf("case %d: %v", ci, err)
		}
		x := randSlice[float64](r, p.XLen())
		w := randSlice[float64](r, p.WLen())
		bias := randSlice[float64](r, p.OutC)
		want := convTransposeNaive(p, x, w, bias)
		y := make([]float64, p.YLen())
		ConvTranspose(p, x, w, bias, y)
		assertClose(t, fmt.Sprintf("convtranspose case %d", ci), y, want, 1e-12)

		// Adjoint identities: <ConvT(x), dy> = <x, dx> and = <w, dw> (without bias).
		dy := randSlice[float64](r, p.YLen())
		ConvTranspose(p, x, w, nil, y)
		dx := make([]float64, p.XLen())
		dw := make([]float64, p.WLen())
		db := make([]float64, p.OutC)
		ConvTransposeBackwardData(p, dy, w, dx)
		ConvTransposeBackwardFilter(p, x, dy, dw, db)
		lhs := dot(y, dy)
		if d := dot(x, dx); math.Abs(lhs-d) > 1e-10*math.Max(1, math.Abs(lhs)) {
			t.Errorf("case %d: <y,dy>=%v <x,dx>=%v", ci, lhs, d)
		}
		if d := dot(w, dw); math.Abs(lhs-d) > 1e-10*math.Max(1, math.Abs(lhs)) {
			t.Errorf("case %d: <y,dy>=%v <w,dw>=%v", ci, lhs, d)
		}
	}
}

func TestConvInitErrors(t *testing.T) {
	bad := []ConvParams{
		{Batch: 1, InC: 3, OutC: 4, Groups: 2, Spatial: []int{5}, Kernel: []int{3}},
		{Batch: 1, InC: 4, OutC: 4, Groups: 1, Spatial: []int{2}, Kernel: []int{5}},
		{Batch: 1, InC: 4, OutC: 4, Groups: 1, Spatial: []int{5}, Kernel: []int{3, 3}},
		{Batch: 1, InC: 4, OutC: 4, Groups: 1, Spatial: []int{5}, Kernel: []int{3}, Stride: []int{0}},
		{Batch: 1, InC: 4, OutC: 4, Groups: 1, Spatial: []int{5}, Kernel: []int{3}, PadBegin: []int{-1}},
		{Batch: 1, InC: 4, OutC: 4, Groups: 1},
	}
	for i := range bad {
		if err := bad[i].Init(); err == nil {
			t.Errorf("case %d: Init accepted %+v", i, bad[i])
		}
	}
	ct := ConvTransposeParams{Batch: 1, InC: 1, OutC: 1, Groups: 1, Spatial: []int{2}, Kernel: []int{1}, PadBegin: []int{1}, PadEnd: []int{1}}
	if err := ct.Init(); err == nil {
		t.Error("ConvTranspose with empty output accepted")
	}
	defer func() {
		if recover() == nil {
			t.Error("Conv without Init did not panic")
		}
	}()
	Conv(&ConvParams{}, []float32{}, nil, nil, nil)
}

func assertClose(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("%s: len %d < %d", name, len(got), len(want))
	}
	for i := range want {
		if !(math.Abs(got[i]-want[i]) <= tol*(1+math.Abs(want[i]))) {
			t.Fatalf("%s: [%d] = %v, want %v", name, i, got[i], want[i])
		}
	}
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func toF32(s []float64) []float32 {
	o := make([]float32, len(s))
	for i, v := range s {
		o[i] = float32(v)
	}
	return o
}

func toF64(s []float32) []float64 {
	o := make([]float64, len(s))
	for i, v := range s {
		o[i] = float64(v)
	}
	return o
}

// BenchmarkConvResNet is a ResNet-50 stage-1 3×3 convolution: batch 8, 64→64 channels,
// 56×56, pad 1.
func BenchmarkConvResNet(b *testing.B) {
	p := &ConvParams{Batch: 8, InC: 64, OutC: 64, Groups: 1, Spatial: []int{56, 56}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := p.Init(); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	x := randSlice[float32](r, p.XLen())
	w := randSlice[float32](r, p.WLen())
	y := make([]float32, p.YLen())
	dw := make([]float32, p.WLen())
	flops := 2.0 * float64(p.YLen()) * float64(p.WLen()/p.OutC)
	report := func(b *testing.B) {
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			Conv(p, x, w, nil, y)
		}
		report(b)
	})
	b.Run("backward-data", func(b *testing.B) {
		for b.Loop() {
			ConvBackwardData(p, y, w, x)
		}
		report(b)
	})
	b.Run("backward-filter", func(b *testing.B) {
		for b.Loop() {
			ConvBackwardFilter(p, x, y, dw, nil)
		}
		report(b)
	})
}

func BenchmarkConvDepthwise(b *testing.B) {
	p := &ConvParams{Batch: 8, InC: 128, OutC: 128, Groups: 128, Spatial: []int{56, 56}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := p.Init(); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	x := randSlice[float32](r, p.XLen())
	w := randSlice[float32](r, p.WLen())
	y := make([]float32, p.YLen())
	for b.Loop() {
		Conv(p, x, w, nil, y)
	}
	b.ReportMetric(2*float64(p.YLen())*9*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// TestConvGenericKernel runs convolution through the pure-Go GEMM kernel, whose 4-wide
// slivers take the packer's scalar paths.
func TestConvGenericKernel(t *testing.T) {
	gemmForceGeneric = true
	defer func() { gemmForceGeneric = false }()
	r := rand.New(rand.NewPCG(17, 18))
	for _, ci := range []int{2, 8, 11} {
		p := convCases[ci].params()
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		x := randSlice[float64](r, p.XLen())
		w := randSlice[float64](r, p.WLen())
		dy := randSlice[float64](r, p.YLen())
		want := make([]float64, p.YLen())
		wantDw := make([]float64, p.WLen())
		convNaive(p, func(xi, wi, yi int) {
			want[yi] += x[xi] * w[wi]
			wantDw[wi] += x[xi] * dy[yi]
		})
		y32 := make([]float32, p.YLen())
		Conv(p, toF32(x), toF32(w), nil, y32)
		assertClose(t, fmt.Sprintf("case %d generic f32", ci), toF64(y32), want, 1e-5)
		dw := make([]float64, p.WLen())
		ConvBackwardFilter(p, x, dy, dw, nil)
		assertClose(t, fmt.Sprintf("case %d generic dw", ci), dw, wantDw, 1e-12)
	}
}

// BenchmarkConvBatch1 is batch-1 inference's convolutions, ResNet-50's shapes and DenseNet's
// growth layers (bench/cpu.sh's resnet50 and densenet121): GFLOP/s of wall time and per
// CPU-second on GOMAXPROCS threads, with the weights packed at every call (conv) and once
// (filter). The weights stay in cache between calls here; in a whole network they do not.
func BenchmarkConvBatch1(b *testing.B) {
	for _, c := range []struct {
		name             string
		inC, outC, hw, k int
		stride, pad      int
	}{
		{"stem7x7s2", 3, 64, 224, 7, 2, 3},
		{"1x1-64-256-56", 64, 256, 56, 1, 1, 0},
		{"1x1-64-64-56", 64, 64, 56, 1, 1, 0},
		{"1x1-256-64-56", 256, 64, 56, 1, 1, 0},
		{"1x1s2-256-512-56", 256, 512, 56, 1, 2, 0},
		{"1x1s2-512-1024-28", 512, 1024, 28, 1, 2, 0},
		{"1x1s2-1024-2048-14", 1024, 2048, 14, 1, 2, 0},
		{"3x3s2-128-56", 128, 128, 56, 3, 2, 1},
		{"3x3s2-256-28", 256, 256, 28, 3, 2, 1},
		{"3x3s2-512-14", 512, 512, 14, 3, 2, 1},
		{"3x3-64-56", 64, 64, 56, 3, 1, 1},
		{"3x3-256-14", 256, 256, 14, 3, 1, 1},
		{"1x1-1024-256-14", 1024, 256, 14, 1, 1, 0},
		{"1x1-256-1024-14", 256, 1024, 14, 1, 1, 0},
		{"1x1-2048-512-7", 2048, 512, 7, 1, 1, 0},
		{"1x1-128-512-28", 128, 512, 28, 1, 1, 0},
		{"1x1-512-128-28", 512, 128, 28, 1, 1, 0},
		{"3x3-512-7", 512, 512, 7, 3, 1, 1},
		{"1x1-512-2048-7", 512, 2048, 7, 1, 1, 0},
		{"googlenet-3x3-64-192-56", 64, 192, 56, 3, 1, 1},
		{"googlenet-1x1-480-96-14", 480, 96, 14, 1, 1, 0},
		{"googlenet-1x1-528-256-14", 528, 256, 14, 1, 1, 0},
		{"googlenet-1x1-832-128-7", 832, 128, 7, 1, 1, 0},
		{"densenet-1x1-992-128-14", 992, 128, 14, 1, 1, 0},
		{"densenet-1x1-480-128-28", 480, 128, 28, 1, 1, 0},
		{"googlenet-1x1-192-64-28", 192, 64, 28, 1, 1, 0},
		{"densenet-3x3-128-32-56", 128, 32, 56, 3, 1, 1},
		{"densenet-3x3-128-32-28", 128, 32, 28, 3, 1, 1},
		{"densenet-3x3-128-32-14", 128, 32, 14, 3, 1, 1},
		{"densenet-3x3-128-32-7", 128, 32, 7, 3, 1, 1},
		{"alexnet-5x5-64-192-27", 64, 192, 27, 5, 1, 2},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := &ConvParams{Batch: 1, InC: c.inC, OutC: c.outC, Spatial: []int{c.hw, c.hw}, Kernel: []int{c.k, c.k},
				Stride: []int{c.stride, c.stride}, PadBegin: []int{c.pad, c.pad}, PadEnd: []int{c.pad, c.pad}}
			if err := p.Init(); err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 1))
			x, w, bias := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen()), randSlice[float32](r, p.OutC)
			y := make([]float32, p.YLen())
			f := PackConvFilter(p, w)
			for _, v := range []struct {
				name string
				conv func()
			}{
				{"conv", func() { Conv(p, x, w, bias, y) }}, // the weights packed at every call
				{"filter", func() { f.Conv(x, bias, y) }},   // packed once (an inference program's parameters)
			} {
				b.Run(v.name, func(b *testing.B) {
					v.conv()
					cpu0 := cputime.Process()
					for b.Loop() {
						v.conv()
					}
					flop := 2 * float64(p.YLen()) * float64(p.WLen()/p.OutC) * float64(b.N)
					b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					if cpu := cputime.Process() - cpu0; cpu > 0 {
						b.ReportMetric(flop/cpu.Seconds()/1e9, "GFLOP/cpu-s")
					}
				})
			}
		})
	}
}

// The bias the GEMM's micro-kernel adds as it stores C (modes 3 and 4) gives the bits of a
// separate pass over the biasless result: every kernel, f32 and f64, one and two threads
// (the row split hands each range its share of the bias), edge tiles on both axes, more
// than one k slab (k > kc: the last slab's mode 4), groups and 1×1 convolutions.
func TestConvBiasFusedMatchesSeparate(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, p := range []ConvParams{
		{Batch: 2, InC: 40, OutC: 21, Spatial: []int{9, 11}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, // k = 360
		{Batch: 1, InC: 300, OutC: 70, Spatial: []int{7, 7}, Kernel: []int{1, 1}},                                             // pointwise, k = 300
		{Batch: 1, InC: 6, OutC: 10, Groups: 2, Spatial: []int{13}, Kernel: []int{3}, Stride: []int{2}},
		{Batch: 1, InC: 64, OutC: 64, Spatial: []int{20, 20}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, // big enough to split over threads
	} {
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		x, w, bias := randSlice[float64](r, p.XLen()), randSlice[float64](r, p.WLen()), randSlice[float64](r, p.OutC)
		for _, threads := range []int{1, 2} {
			old := runtime.GOMAXPROCS(threads)
			for _, impl := range gemmAvailable(4) {
				withImpl[float32](impl, func() { checkConvBias(t, &p, toF32(x), toF32(w), toF32(bias), impl.name, threads) })
			}
			for _, impl := range gemmAvailable(8) {
				withImpl[float64](impl, func() { checkConvBias(t, &p, x, w, bias, impl.name, threads) })
			}
			runtime.GOMAXPROCS(old)
		}
	}
}

func checkConvBias[T Float](t *testing.T, p *ConvParams, x, w, bias []T, impl string, threads int) {
	t.Helper()
	got, want := make([]T, p.YLen()), make([]T, p.YLen())
	Conv(p, x, w, bias, got)
	Conv(p, x, w, nil, want)
	sp := p.YLen() / p.Batch / p.OutC
	for i := range want {
		want[i] += bias[i/sp%p.OutC]
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%v %s %T threads %d: y[%d] = %v, separate bias pass %v", p.Kernel, impl, got[0], threads, i, got[i], want[i])
		}
	}
}

// convIndirect (the padded image, split into stride phases, read in place by kernInd) gives
// the bits of the im2col GEMM it replaces — kernels, thread counts (row and column task
// splits), bias or none, several k slabs, strides, uneven pads, dilation, non-square kernels,
// groups, odd sizes — and the naive loops' values.
func TestConvIndirectMatchesIm2col(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	for _, p := range []ConvParams{
		{Batch: 1, InC: 128, OutC: 32, Spatial: []int{14, 14}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
		{Batch: 2, InC: 5, OutC: 19, Spatial: []int{9, 13}, Kernel: []int{3, 2}, PadBegin: []int{2, 0}, PadEnd: []int{1, 1}},
		{Batch: 1, InC: 40, OutC: 70, Spatial: []int{7, 7}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, // k = 360: two slabs
		{Batch: 1, InC: 6, OutC: 12, Groups: 3, Spatial: []int{11, 10}, Kernel: []int{3, 3}, Dilation: []int{2, 1}, PadBegin: []int{2, 1}, PadEnd: []int{0, 1}},
		{Batch: 1, InC: 3, OutC: 9, Spatial: []int{6, 40}, Kernel: []int{1, 5}, PadBegin: []int{0, 2}, PadEnd: []int{0, 2}},
		{Batch: 1, InC: 16, OutC: 200, Spatial: []int{5, 5}, Kernel: []int{3, 3}},
		// Strides (taken with at most 4 channels a group, as stems have): the stem's 7×7/2,
		// 3×3/2 and 1×1/2, AlexNet's 11×11/4, uneven strides and pads, stride with dilation,
		// inputs the windows do not reach.
		{Batch: 1, InC: 3, OutC: 10, Spatial: []int{30, 29}, Kernel: []int{7, 7}, Stride: []int{2, 2}, PadBegin: []int{3, 3}, PadEnd: []int{3, 3}},
		{Batch: 2, InC: 4, OutC: 17, Spatial: []int{14, 15}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
		{Batch: 1, InC: 3, OutC: 24, Spatial: []int{14, 14}, Kernel: []int{1, 1}, Stride: []int{2, 2}},
		{Batch: 1, InC: 3, OutC: 8, Spatial: []int{43, 40}, Kernel: []int{11, 11}, Stride: []int{4, 4}, PadBegin: []int{2, 2}, PadEnd: []int{2, 2}},
		{Batch: 1, InC: 4, OutC: 6, Groups: 2, Spatial: []int{13, 17}, Kernel: []int{2, 3}, Stride: []int{3, 2}, Dilation: []int{2, 1}, PadBegin: []int{0, 2}, PadEnd: []int{1, 0}},
		{Batch: 1, InC: 2, OutC: 5, Spatial: []int{12, 12}, Kernel: []int{3, 3}, Stride: []int{5, 5}},
		{Batch: 1, InC: 3, OutC: 7, Spatial: []int{10, 14}, Kernel: []int{3, 4}, Stride: []int{2, 3}, PadBegin: []int{1, 1}, PadEnd: []int{0, 2}},
		// Output rows of whole tiles (32 and 64 columns: 16- and 32-column kernels), stored
		// straight into y: a stem, two k slabs with rows past the last row tile, groups.
		{Batch: 1, InC: 3, OutC: 13, Spatial: []int{64, 63}, Kernel: []int{7, 7}, Stride: []int{2, 2}, PadBegin: []int{3, 3}, PadEnd: []int{3, 4}},
		{Batch: 2, InC: 50, OutC: 11, Spatial: []int{5, 64}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
		{Batch: 1, InC: 4, OutC: 10, Groups: 2, Spatial: []int{3, 32}, Kernel: []int{1, 3}, PadBegin: []int{0, 1}, PadEnd: []int{0, 1}},
		// Rows of whole tiles and a half one on the 32-column kernel (48 and 16 columns).
		{Batch: 1, InC: 3, OutC: 13, Spatial: []int{20, 96}, Kernel: []int{7, 7}, Stride: []int{2, 2}, PadBegin: []int{3, 3}, PadEnd: []int{3, 3}},
		{Batch: 2, InC: 3, OutC: 10, Spatial: []int{6, 16}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
		// A stem's 112-column rows (two whole tiles and a wide one on AVX-512), tasks
		// starting mid-row at two and three threads.
		{Batch: 1, InC: 3, OutC: 16, Spatial: []int{9, 224}, Kernel: []int{7, 7}, Stride: []int{2, 2}, PadBegin: []int{3, 3}, PadEnd: []int{3, 3}},
		// Rows under 32 columns (copied into the padded planes by the short-row loop), uneven
		// pads, and a row width that is not a multiple of 4.
		{Batch: 2, InC: 9, OutC: 7, Spatial: []int{6, 13}, Kernel: []int{3, 3}, PadBegin: []int{1, 2}, PadEnd: []int{2, 1}},
		{Batch: 1, InC: 5, OutC: 12, Spatial: []int{7, 7}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
	} {
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		if p.g.ind == nil {
			t.Fatalf("%+v: not eligible for convIndirect", p)
		}
		if q := (ConvParams{Batch: 1, InC: 16, OutC: 8, Spatial: []int{9, 9}, Kernel: []int{3, 3}, Stride: []int{2, 2}}); q.Init() != nil || q.g.ind != nil {
			t.Fatal("a strided 16-channel convolution took convIndirect")
		}
		convBcastOff = true // it would take these first
		checkConvPath(t, r, &p, &convIndirectOff, func(impl *gemmImpl) bool { return impl.kernInd != nil })
		convBcastOff = false
	}
}

// convBcast computes the im2col GEMM's bits (on the kernels that have kernBcast, one to
// three threads, with and without bias) on strides, dilations, groups and batches, uneven
// pads, padding read and not (the image read in place), several k slabs and a k tail that
// is not a multiple of the 4-step unroll, channels that are not a multiple of 16, and
// fewer positions than a tile.
func TestConvBcastMatchesIm2col(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, p := range []ConvParams{
		{Batch: 1, InC: 16, OutC: 20, Spatial: []int{15, 15}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
		{Batch: 2, InC: 50, OutC: 33, Spatial: []int{9, 10}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, // two k slabs
		{Batch: 1, InC: 6, OutC: 10, Spatial: []int{30, 29}, Kernel: []int{7, 7}, Stride: []int{2, 2}, PadBegin: []int{3, 3}, PadEnd: []int{3, 3}},
		{Batch: 1, InC: 12, OutC: 6, Groups: 2, Spatial: []int{13, 17}, Kernel: []int{2, 3}, Stride: []int{3, 2}, Dilation: []int{2, 1}, PadBegin: []int{0, 2}, PadEnd: []int{1, 0}},
		{Batch: 1, InC: 6, OutC: 5, Spatial: []int{12, 12}, Kernel: []int{3, 3}, Stride: []int{5, 5}},                                             // in place
		{Batch: 1, InC: 7, OutC: 17, Spatial: []int{11, 12}, Kernel: []int{3, 2}, Dilation: []int{2, 3}},                                          // in place, dilated
		{Batch: 1, InC: 7, OutC: 9, Spatial: []int{10, 11}, Kernel: []int{1, 1}, Stride: []int{2, 2}, PadBegin: []int{0, 1}, PadEnd: []int{0, 1}}, // 1×1 reading padding
		{Batch: 1, InC: 32, OutC: 32, Spatial: []int{7, 7}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},                      // DenseNet's last block
		{Batch: 2, InC: 9, OutC: 7, Spatial: []int{6, 13}, Kernel: []int{3, 3}, PadBegin: []int{1, 2}, PadEnd: []int{2, 1}},
		{Batch: 1, InC: 5, OutC: 12, Spatial: []int{2, 2}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},                         // 4 positions
		{Batch: 1, InC: 30, OutC: 40, Spatial: []int{40, 40}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{0, 0}}, // many blocks
		{Batch: 1, InC: 5, OutC: 8, Spatial: []int{43, 40}, Kernel: []int{11, 11}, Stride: []int{4, 4}, PadBegin: []int{2, 2}, PadEnd: []int{2, 2}},
	} {
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		if p.g.bc == nil {
			t.Fatalf("%v %v stride %v: not eligible for convBcast", p.Spatial, p.Kernel, p.Stride)
		}
		convIndirectOff = true // so that the reference is the im2col GEMM itself
		checkConvPath(t, r, &p, &convBcastOff, func(impl *gemmImpl) bool { return impl.kernBcast != nil })
		convIndirectOff = false
	}
	// Where it measured slower: a stem's few channels, stride-1 rows of 32 columns or more;
	// and where convSubsampled applies.
	for _, p := range []ConvParams{
		{Batch: 1, InC: 64, OutC: 64, Spatial: []int{14, 14}, Kernel: []int{1, 1}, Stride: []int{2, 2}},
		{Batch: 1, InC: 3, OutC: 64, Spatial: []int{32, 32}, Kernel: []int{7, 7}, Stride: []int{2, 2}, PadBegin: []int{3, 3}, PadEnd: []int{3, 3}},
		{Batch: 1, InC: 16, OutC: 16, Spatial: []int{8, 32}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
		{Batch: 1, InC: 64, OutC: 64, Spatial: []int{14, 14}, Kernel: []int{1, 1}}, // pointwise on 14 × 14
		{Batch: 1, InC: 64, OutC: 2048, Spatial: []int{7, 7}, Kernel: []int{1, 1}}, // pointwise, many channels out
	} {
		if err := p.Init(); err != nil || p.g.bc != nil {
			t.Fatalf("%v %v stride %v: took convBcast (err %v)", p.Spatial, p.Kernel, p.Stride, err)
		}
	}
}

// checkConvPath runs p with the path that off turns off taken and not, on one to three
// threads and each kernel that use admits (nil: all), with and without bias: the two must
// agree bit for bit, write nothing past y, and match the convolution summed in float64.
func checkConvPath(t *testing.T, r *rand.Rand, p *ConvParams, off *bool, use func(*gemmImpl) bool) {
	t.Helper()
	x, w, bias := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen()), randSlice[float32](r, p.OutC)
	want64 := make([]float64, p.YLen())
	convNaive(p, func(xi, wi, yi int) { want64[yi] += float64(x[xi]) * float64(w[wi]) })
	name := fmt.Sprintf("%v %v stride %v pads %v %v", p.Spatial, p.Kernel, p.Stride, p.PadBegin, p.PadEnd)
	for _, threads := range []int{1, 2, 3} {
		old := runtime.GOMAXPROCS(threads)
		for _, impl := range gemmAvailable(4) {
			if use != nil && !use(impl) {
				continue
			}
			withImpl[float32](impl, func() {
				for _, b := range [][]float32{nil, bias} {
					got, want := make([]float32, p.YLen()+64), make([]float32, p.YLen())
					for i := p.YLen(); i < len(got); i++ {
						got[i] = -7 // past y: must stay
					}
					Conv(p, x, w, b, got[:p.YLen()])
					for i := p.YLen(); i < len(got); i++ {
						if got[i] != -7 {
							t.Fatalf("%s %s threads %d: wrote past y at %d", name, impl.name, threads, i)
						}
					}
					got = got[:p.YLen()]
					*off = true
					Conv(p, x, w, b, want)
					*off = false
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%s %s threads %d bias %v: y[%d] = %v, im2col %v", name, impl.name, threads, b != nil, i, got[i], want[i])
						}
					}
					if b == nil {
						assertClose(t, name+" "+impl.name, toF64(got), want64, 1e-4)
					}
				}
			})
		}
		runtime.GOMAXPROCS(old)
	}
}

// A strided 1×1 convolution that reads no padding (ResNet's 1×1/2 downsampling) computes the
// pointwise GEMM on the subsampled image (convSubsampled): the im2col GEMM's bits, on every
// kernel and thread count, with groups, batches, bias and uneven strides; one whose end
// padding holds outputs does not take it.
func TestConvSubsampledMatchesIm2col(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		p   ConvParams
		sub bool
	}{
		{ConvParams{Batch: 1, InC: 16, OutC: 13, Spatial: []int{15, 14}, Kernel: []int{1, 1}, Stride: []int{2, 2}}, true},
		{ConvParams{Batch: 1, InC: 5, OutC: 8, Spatial: []int{6, 70}, Kernel: []int{1, 1}, Stride: []int{2, 2}}, true}, // rows of 35: 16 + 16 + 3
		{ConvParams{Batch: 1, InC: 5, OutC: 8, Spatial: []int{5, 65}, Kernel: []int{1, 1}, Stride: []int{2, 2}}, true}, // odd width: the last row's gather ends at the plane's end
		{ConvParams{Batch: 2, InC: 12, OutC: 10, Groups: 2, Spatial: []int{9, 17}, Kernel: []int{1, 1}, Stride: []int{3, 2}}, true},
		{ConvParams{Batch: 1, InC: 40, OutC: 20, Spatial: []int{8, 23}, Kernel: []int{1, 1}, Stride: []int{2, 3}, Dilation: []int{2, 2}}, true},
		{ConvParams{Batch: 1, InC: 7, OutC: 9, Spatial: []int{11, 11}, Kernel: []int{1, 1}, Stride: []int{2, 2}, PadEnd: []int{1, 0}}, true},  // end padding no output reads
		{ConvParams{Batch: 1, InC: 7, OutC: 9, Spatial: []int{10, 11}, Kernel: []int{1, 1}, Stride: []int{2, 2}, PadEnd: []int{1, 0}}, false}, // a last row of padding
		{ConvParams{Batch: 1, InC: 7, OutC: 9, Spatial: []int{10, 11}, Kernel: []int{1, 1}, Stride: []int{2, 2}, PadBegin: []int{0, 1}, PadEnd: []int{0, 1}}, false},
	} {
		p := c.p
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		if wantSub := c.sub; (p.g.sub != nil) != wantSub {
			t.Fatalf("%v stride %v pads %v: subsampled %v, want %v", p.Spatial, p.Stride, p.PadEnd, p.g.sub != nil, wantSub)
		}
		checkConvPath(t, r, &p, &convSubsampledOff, nil)
	}
}

// An image whose padded copy and result would pass convIndirectMax takes the im2col GEMM.
func TestConvIndirectScratchBound(t *testing.T) {
	p := ConvParams{Batch: 1, InC: 1, OutC: 8, Spatial: []int{700, 700}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	x, w := make([]float32, p.XLen()), make([]float32, p.WLen())
	if convIndirect(&p.g, x, w, nil, nil, make([]float32, p.YLen()), 1, false, nil) {
		t.Fatal("convIndirect took a 700 × 700 image with 8 output channels")
	}
}

// ConvEpi calls its epilogue's Func on ranges that partition y, each after its values are
// final: a ReLU applied there gives the bits of Conv followed by ReLU, on every path
// (depthwise loops, pointwise GEMM, the indirect kernel, the im2col GEMM, Winograd, float64),
// with and without packed weights, on one and two workers; and so does the epilogue's Relu
// (in the pointwise GEMM's micro-kernel store, elsewhere a pass before Func), with a Func
// after it. The ranges are checked for overlap and coverage.
func TestConvEpilogue(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	cases := append([]convCase{
		{1, 64, 48, 1, []int{14, 14}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{0, 0}, []int{0, 0}},               // pointwise
		{1, 32, 40, 1, []int{6, 40}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{1, 1}},                // indirect
		{1, 3, 20, 1, []int{9, 224}, []int{7, 7}, []int{2, 2}, []int{1, 1}, []int{3, 3}, []int{3, 3}},                // a stem: indirect into y
		{1, 32, 40, 1, []int{5, 48}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{1, 1}},                // indirect into y, two k slabs
		{1, 32, 40, 1, []int{15, 13}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{1, 1}},               // convBcast: rows under 32
		{2, 6, 6, 6, []int{9, 9}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{1, 1}},                   // depthwise
		{1, 16, 24, 1, []int{20, 20}, []int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1}},               // strided: convBcast
		{1, 24, 16, 1, []int{14, 13}, []int{1, 1}, []int{2, 2}, []int{1, 1}, []int{0, 0}, []int{0, 0}},               // strided 1×1: subsampled
		{3, 8, 12, 2, []int{10, 11}, []int{3, 3}, []int{1, 2}, []int{2, 1}, []int{2, 1}, []int{0, 1}},                // groups, dilation
		{1, 96, 160, 1, []int{28, 28}, []int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{1, 1}},              // several k slabs (convBcast)
		{2, 128, 64, 1, []int{7, 7}, []int{1, 1}, []int{1, 1}, []int{1, 1}, []int{0, 0}, []int{0, 0}},                // batch, 7 × 7
		{1, 4, 6, 1, []int{5, 6, 7}, []int{2, 3, 3}, []int{1, 1, 2}, []int{1, 1, 1}, []int{0, 1, 1}, []int{1, 1, 0}}, // 3-d
	}, convCases...)
	for _, threads := range []int{1, 2} {
		old := runtime.GOMAXPROCS(threads)
		for ci, tc := range cases {
			p := tc.params()
			if err := p.Init(); err != nil {
				t.Fatal(err)
			}
			x := randSlice[float32](r, p.XLen())
			w := randSlice[float32](r, p.WLen())
			bias := randSlice[float32](r, p.OutC)
			res := randSlice[float32](r, p.YLen())
			sprinkleSpecials(res, 29) // a residual's NaNs (ReLU: +0) and zeros
			f := PackConvFilter(p, w)
			for _, packed := range []bool{false, true} {
				// Packed weights of a 3×3 layer take the Winograd path (other bits than Conv's):
				// the reference is the same call without the epilogue.
				want := make([]float32, p.YLen())
				if packed {
					f.Conv(x, bias, want)
				} else {
					Conv(p, x, w, bias, want)
				}
				// The residual add and ReLU's reference: want + res, then the ReLU, as passes.
				wantRes := make([]float32, p.YLen())
				ArithVV(OpAdd, want, res, wantRes)
				ReluRow(wantRes, wantRes)
				ReluRow(want, want)
				for _, v := range []struct {
					fused, res bool
				}{{false, false}, {true, false}, {false, true}, {true, true}} {
					fused := v.fused
					got := make([]float32, p.YLen())
					var mu sync.Mutex
					seen := make([]int, len(got))
					epi := Epilogue[float32]{Relu: fused, Func: func(lo, hi int) {
						mu.Lock()
						for i := lo; i < hi; i++ {
							seen[i]++
						}
						mu.Unlock()
						if !fused {
							if v.res {
								ArithVV(OpAdd, got[lo:hi], res[lo:hi], got[lo:hi])
							}
							ReluRow(got[lo:hi], got[lo:hi])
						}
					}}
					want := want
					if v.res {
						want = wantRes
						if fused {
							epi.Res = res
						}
					}
					if packed {
						f.ConvEpi(x, bias, got, epi)
					} else {
						ConvEpi(p, x, w, bias, got, epi)
					}
					name := fmt.Sprintf("case %d, %d threads, packed %v, Relu %v, residual %v", ci, threads, packed, fused, v.res)
					for i, n := range seen {
						if n != 1 {
							t.Fatalf("%s: element %d passed to the epilogue %d times", name, i, n)
						}
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s: y[%d] = %v, Conv (+ residual) then ReLU gives %v", name, i, got[i], want[i])
						}
					}
				}
			}
			// Without a bias (the pointwise GEMM then adds zeros before its ReLU).
			want0, got0 := make([]float32, p.YLen()), make([]float32, p.YLen())
			Conv(p, x, w, nil, want0)
			ReluRow(want0, want0)
			ConvEpi(p, x, w, nil, got0, Epilogue[float32]{Relu: true})
			for i := range got0 {
				if math.Float32bits(got0[i]) != math.Float32bits(want0[i]) {
					t.Fatalf("case %d, %d threads, no bias: y[%d] = %v, Conv then ReLU gives %v", ci, threads, i, got0[i], want0[i])
				}
			}
			Conv(p, x, w, nil, want0)
			ArithVV(OpAdd, want0, res, want0)
			ReluRow(want0, want0)
			ConvEpi(p, x, w, nil, got0, Epilogue[float32]{Relu: true, Res: res})
			for i := range got0 {
				if math.Float32bits(got0[i]) != math.Float32bits(want0[i]) {
					t.Fatalf("case %d, %d threads, no bias, residual: y[%d] = %v, Conv, add and ReLU give %v", ci, threads, i, got0[i], want0[i])
				}
			}
			// float64 takes the im2col GEMM everywhere.
			x64, w64, b64 := toF64(x), toF64(w), toF64(bias)
			want64 := make([]float64, p.YLen())
			Conv(p, x64, w64, b64, want64)
			ReluRow(want64, want64)
			for _, fused := range []bool{false, true} {
				got64 := make([]float64, p.YLen())
				epi := Epilogue[float64]{Relu: fused}
				if !fused {
					epi.Func = func(lo, hi int) { ReluRow(got64[lo:hi], got64[lo:hi]) }
				}
				ConvEpi(p, x64, w64, b64, got64, epi)
				for i := range got64 {
					if math.Float64bits(got64[i]) != math.Float64bits(want64[i]) {
						t.Fatalf("case %d f64, Relu %v: y[%d] = %v, want %v", ci, fused, i, got64[i], want64[i])
					}
				}
			}
		}
		runtime.GOMAXPROCS(old)
	}
}

// BenchmarkConvEpilogue is a batch-1 convolution followed by a ReLU: as two passes (Conv,
// then ReluRow over the result into another buffer, as two launches run) and as ConvEpi's
// epilogue on each block while it is in cache. GoogLeNet's 3×3 144 → 288 on 14 × 14 and its
// 1×1 192 → 64 on 28 × 28, weights packed once.
func BenchmarkConvEpilogue(b *testing.B) {
	for _, c := range []struct {
		name             string
		inC, outC, hw, k int
	}{{"3x3-144-288-14", 144, 288, 14, 3}, {"1x1-192-64-28", 192, 64, 28, 1}} {
		p := &ConvParams{Batch: 1, InC: c.inC, OutC: c.outC, Spatial: []int{c.hw, c.hw}, Kernel: []int{c.k, c.k},
			PadBegin: []int{c.k / 2, c.k / 2}, PadEnd: []int{c.k / 2, c.k / 2}}
		if err := p.Init(); err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 1))
		x, w, bias := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen()), randSlice[float32](r, p.OutC)
		y, z := make([]float32, p.YLen()), make([]float32, p.YLen())
		f := PackConvFilter(p, w)
		b.Run(c.name+"/separate", func(b *testing.B) {
			for b.Loop() {
				f.Conv(x, bias, y)
				ReluRow(y, z)
			}
		})
		b.Run(c.name+"/epilogue", func(b *testing.B) {
			for b.Loop() {
				f.ConvEpi(x, bias, y, Epilogue[float32]{Func: func(lo, hi int) { ReluRow(y[lo:hi], y[lo:hi]) }})
			}
		})
	}
}

// googLeNetConvs are GoogLeNet's 57 convolutions at batch 1 in the order the network runs
// them (torchvision's, bench/cpu.sh's googlenet): inC, outC, input side, kernel, stride, pad.
var googLeNetConvs = [][6]int{
	{3, 64, 224, 7, 2, 3}, {64, 64, 56, 1, 1, 0}, {64, 192, 56, 3, 1, 1}, {192, 64, 28, 1, 1, 0}, {192, 96, 28, 1, 1, 0}, {96, 128, 28, 3, 1, 1}, {192, 16, 28, 1, 1, 0}, {16, 32, 28, 3, 1, 1}, {192, 32, 28, 1, 1, 0}, {256, 128, 28, 1, 1, 0}, {256, 128, 28, 1, 1, 0}, {128, 192, 28, 3, 1, 1}, {256, 32, 28, 1, 1, 0}, {32, 96, 28, 3, 1, 1}, {256, 64, 28, 1, 1, 0},
	{480, 192, 14, 1, 1, 0}, {480, 96, 14, 1, 1, 0}, {96, 208, 14, 3, 1, 1}, {480, 16, 14, 1, 1, 0}, {16, 48, 14, 3, 1, 1}, {480, 64, 14, 1, 1, 0}, {512, 160, 14, 1, 1, 0}, {512, 112, 14, 1, 1, 0}, {112, 224, 14, 3, 1, 1}, {512, 24, 14, 1, 1, 0}, {24, 64, 14, 3, 1, 1}, {512, 64, 14, 1, 1, 0}, {512, 128, 14, 1, 1, 0}, {512, 128, 14, 1, 1, 0}, {128, 256, 14, 3, 1, 1},
	{512, 24, 14, 1, 1, 0}, {24, 64, 14, 3, 1, 1}, {512, 64, 14, 1, 1, 0}, {512, 112, 14, 1, 1, 0}, {512, 144, 14, 1, 1, 0}, {144, 288, 14, 3, 1, 1}, {512, 32, 14, 1, 1, 0}, {32, 64, 14, 3, 1, 1}, {512, 64, 14, 1, 1, 0}, {528, 256, 14, 1, 1, 0}, {528, 160, 14, 1, 1, 0}, {160, 320, 14, 3, 1, 1}, {528, 32, 14, 1, 1, 0}, {32, 128, 14, 3, 1, 1}, {528, 128, 14, 1, 1, 0},
	{832, 256, 7, 1, 1, 0}, {832, 160, 7, 1, 1, 0}, {160, 320, 7, 3, 1, 1}, {832, 32, 7, 1, 1, 0}, {32, 128, 7, 3, 1, 1}, {832, 128, 7, 1, 1, 0}, {832, 384, 7, 1, 1, 0}, {832, 192, 7, 1, 1, 0}, {192, 384, 7, 3, 1, 1}, {832, 48, 7, 1, 1, 0}, {48, 128, 7, 3, 1, 1}, {832, 128, 7, 1, 1, 0},
}

// BenchmarkConvNetwork runs GoogLeNet's convolutions one after another, each on its own
// input, packed weights and output with a ReLU epilogue, as a network runs them: unlike
// BenchmarkConvBatch1's repeated calls, each layer starts with its data out of cache (the
// gap between the two was 1.5× in 2026-11). Sub-benchmarks run the 1×1 layers only, the
// others only, and all; GFLOP/s of wall time.
func BenchmarkConvNetwork(b *testing.B) {
	type layer struct {
		p       *ConvParams
		f       *ConvFilter[float32]
		x, bias []float32
		y       []float32
	}
	r := rand.New(rand.NewPCG(5, 6))
	var layers []layer
	for _, c := range googLeNetConvs {
		p := &ConvParams{Batch: 1, InC: c[0], OutC: c[1], Spatial: []int{c[2], c[2]}, Kernel: []int{c[3], c[3]},
			Stride: []int{c[4], c[4]}, PadBegin: []int{c[5], c[5]}, PadEnd: []int{c[5], c[5]}}
		if err := p.Init(); err != nil {
			b.Fatal(err)
		}
		layers = append(layers, layer{p, PackConvFilter(p, randSlice[float32](r, p.WLen())), randSlice[float32](r, p.XLen()), randSlice[float32](r, p.OutC), make([]float32, p.YLen())})
	}
	for _, sel := range []string{"1x1", "kxk", "all"} {
		b.Run(sel, func(b *testing.B) {
			var flop float64
			run := func() {
				for _, l := range layers {
					if k := l.p.Kernel[0]; sel == "1x1" && k != 1 || sel == "kxk" && k == 1 {
						continue
					}
					y := l.y
					l.f.ConvEpi(l.x, l.bias, y, Epilogue[float32]{Relu: true})
					flop += 2 * float64(l.p.YLen()) * float64(l.p.WLen()/l.p.OutC)
				}
			}
			run()
			flop = 0
			for b.Loop() {
				run()
			}
			b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// A BatchNormPre gives the bits of the inference batch norm (and ReLU) written out and the
// convolution run on the result, for both dtypes, with and without packed weights, over
// shapes that take each parallel GEMM (a shared B panel from 28 × 28 up, per-range panels
// below), edges that are not whole slivers, several k slabs, groups and a batch.
func TestConvPreMatchesBatchNormThenConv(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, tc := range []struct {
		batch, inC, outC, groups int
		hw                       []int
	}{
		{1, 64, 128, 1, []int{56, 56}},
		{1, 992, 128, 1, []int{14, 14}}, // several k slabs
		{1, 37, 19, 1, []int{7, 7}},
		{2, 12, 10, 2, []int{5, 9}},
		{1, 8, 5, 1, []int{3, 4, 5}},
	} {
		p := &ConvParams{Batch: tc.batch, InC: tc.inC, OutC: tc.outC, Groups: tc.groups, Spatial: tc.hw, Kernel: slices.Repeat([]int{1}, len(tc.hw))}
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		if !p.Pointwise() {
			t.Fatalf("%v: not pointwise", tc)
		}
		sp := p.XLen() / tc.batch / tc.inC
		x, w, bias := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen()), randSlice[float32](r, p.OutC)
		scale, shift, mean := randSlice[float32](r, tc.inC), randSlice[float32](r, tc.inC), randSlice[float32](r, tc.inC)
		variance := randSlice[float32](r, tc.inC)
		for i := range variance {
			variance[i] = variance[i]*variance[i] + 0.1
		}
		f := PackConvFilter(p, w)
		for _, relu := range []bool{false, true} {
			xn := make([]float32, len(x))
			if relu {
				BatchNormReluInference(x, scale, shift, mean, variance, 1e-5, tc.batch, tc.inC, sp, xn)
			} else {
				BatchNormInference(x, scale, shift, mean, variance, 1e-5, tc.batch, tc.inC, sp, xn, nil)
			}
			pre := BatchNormPre(scale, shift, mean, variance, 1e-5, relu, make([]float32, tc.inC), make([]float32, tc.inC))
			for _, threads := range []int{1, 2, 3} {
				old := runtime.GOMAXPROCS(threads)
				for _, packed := range []bool{false, true} {
					// Alternately with the vector kernels and the Go loops.
					arithForceGo = threads == 2
					defer func() { arithForceGo = false }()
					want, got := make([]float32, p.YLen()), make([]float32, p.YLen())
					if packed {
						f.Conv(xn, bias, want)
						f.ConvPreEpi(x, pre, bias, got, Epilogue[float32]{})
					} else {
						Conv(p, xn, w, bias, want)
						ConvPreEpi(p, x, pre, w, bias, got, Epilogue[float32]{})
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v relu %v, %d threads, packed %v: y[%d] = %v, batch norm then Conv gives %v", tc, relu, threads, packed, i, got[i], want[i])
						}
					}
				}
				runtime.GOMAXPROCS(old)
			}
			// float64
			x64, xn64 := toF64(x), make([]float64, len(x))
			s64, b64, m64, v64 := toF64(scale), toF64(shift), toF64(mean), toF64(variance)
			if relu {
				BatchNormReluInference(x64, s64, b64, m64, v64, 1e-5, tc.batch, tc.inC, sp, xn64)
			} else {
				BatchNormInference(x64, s64, b64, m64, v64, 1e-5, tc.batch, tc.inC, sp, xn64, nil)
			}
			pre64 := BatchNormPre(s64, b64, m64, v64, 1e-5, relu, make([]float64, tc.inC), make([]float64, tc.inC))
			want64, got64 := make([]float64, p.YLen()), make([]float64, p.YLen())
			Conv(p, xn64, toF64(w), toF64(bias), want64)
			ConvPreEpi(p, x64, pre64, toF64(w), toF64(bias), got64, Epilogue[float64]{})
			for i := range got64 {
				if got64[i] != want64[i] {
					t.Fatalf("%v relu %v f64: y[%d] = %v, want %v", tc, relu, i, got64[i], want64[i])
				}
			}
		}
	}
	// Not on a convolution that is not pointwise: its padding would read relu(Add), not 0.
	p := &ConvParams{Batch: 1, InC: 2, OutC: 2, Spatial: []int{4, 4}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if e := recover(); e == nil || !strings.Contains(fmt.Sprint(e), "not pointwise") {
			t.Fatalf("a prologue on a 3×3 convolution: recovered %v", e)
		}
	}()
	ConvPreEpi(p, make([]float32, p.XLen()), &ConvPre[float32]{Mul: []float32{1, 1}, Add: []float32{0, 0}}, make([]float32, p.WLen()), nil, make([]float32, p.YLen()), Epilogue[float32]{})
}

// BenchmarkConvPre is DenseNet's pre-activation layer on a 1×1 convolution at batch 1: the
// batch norm and ReLU as their own pass (BatchNormReluInference into a buffer, then the
// convolution on it, as two launches run) against the convolution applying them as a
// ConvPre while it packs its input; weights packed once, the ReLU after it as an epilogue.
func BenchmarkConvPre(b *testing.B) {
	for _, c := range []struct {
		name          string
		inC, outC, hw int
	}{
		{"224-128-56", 224, 128, 56},
		{"480-128-28", 480, 128, 28},
		{"992-128-14", 992, 128, 14},
		{"992-128-7", 992, 128, 7},
	} {
		p := &ConvParams{Batch: 1, InC: c.inC, OutC: c.outC, Spatial: []int{c.hw, c.hw}, Kernel: []int{1, 1}}
		if err := p.Init(); err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 1))
		x, w, bias := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen()), randSlice[float32](r, p.OutC)
		scale, shift, mean, variance := randSlice[float32](r, c.inC), randSlice[float32](r, c.inC), randSlice[float32](r, c.inC), randSlice[float32](r, c.inC)
		for i := range variance {
			variance[i] = variance[i]*variance[i] + 0.1
		}
		pre := &ConvPre[float32]{Mul: scale, Add: shift, Relu: true}
		xn, y := make([]float32, p.XLen()), make([]float32, p.YLen())
		f := PackConvFilter(p, w)
		relu := Epilogue[float32]{Relu: true}
		for _, v := range []struct {
			name string
			run  func()
		}{
			{"two-passes", func() {
				BatchNormReluInference(x, scale, shift, mean, variance, 1e-5, 1, c.inC, c.hw*c.hw, xn)
				f.ConvEpi(xn, bias, y, relu)
			}},
			{"prologue", func() { f.ConvPreEpi(x, pre, bias, y, relu) }},
			{"conv-alone", func() { f.ConvEpi(xn, bias, y, relu) }}, // what the prologue adds to
		} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				for b.Loop() {
					v.run()
				}
				flop := 2 * float64(p.YLen()) * float64(c.inC) * float64(b.N)
				b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
