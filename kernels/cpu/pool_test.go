package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// poolNaive computes pooling straight from the ONNX reference semantics: a window per
// output over the explicitly padded input, with the ceil-mode overhang clipped.
func poolNaive(p *PoolParams, x []float64, kind string) (y []float64, arg []int32) {
	r := len(p.Spatial)
	inSize, outSize, kSize := 1, 1, 1
	for d := 0; d < r; d++ {
		inSize *= p.Spatial[d]
		outSize *= p.OutSpatial[d]
		kSize *= p.Kernel[d]
	}
	y = make([]float64, p.Batch*p.Channels*outSize)
	arg = make([]int32, len(y))
	o, k := make([]int, r), make([]int, r)
	for pl := 0; pl < p.Batch*p.Channels; pl++ {
		for oi := 0; oi < outSize; oi++ {
			unflatten(oi, p.OutSpatial, o)
			best, bi, sum, cnt, padCnt, lp := math.Inf(-1), -1, 0.0, 0, 0, 0.0
			for ki := 0; ki < kSize; ki++ {
				unflatten(ki, p.Kernel, k)
				xi, inside, inPad := 0, true, true
				for d := 0; d < r; d++ {
					pos := o[d]*p.Stride[d] + k[d]*p.Dilation[d] - p.PadBegin[d]
					if pos < -p.PadBegin[d] || pos >= p.Spatial[d]+p.PadEnd[d] {
						inPad = false
					}
					if pos < 0 || pos >= p.Spatial[d] {
						inside = false
					}
					xi = xi*p.Spatial[d] + pos
				}
				if inPad {
					padCnt++
				}
				if !inside {
					continue
				}
				v := x[pl*inSize+xi]
				cnt++
				sum += v
				lp += math.Pow(math.Abs(v), float64(p.P))
				if v > best {
					best, bi = v, pl*inSize+xi
				}
			}
			i := pl*outSize + oi
			switch kind {
			case "max":
				y[i], arg[i] = best, int32(bi)
			case "avg":
				div := cnt
				if p.CountIncludePad {
					div = padCnt
				}
				y[i] = sum / float64(div)
			case "lp":
				y[i] = math.Pow(lp, 1/float64(p.P))
			}
		}
	}
	return y, arg
}

var poolCases = []PoolParams{
	{Batch: 2, Channels: 3, Spatial: []int{9}, Kernel: []int{3}, Stride: []int{2}, PadBegin: []int{1}, PadEnd: []int{1}},
	{Batch: 1, Channels: 2, Spatial: []int{7, 8}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
	{Batch: 1, Channels: 2, Spatial: []int{7, 8}, Kernel: []int{3, 2}, Stride: []int{2, 3}, PadBegin: []int{1, 0}, PadEnd: []int{0, 1}, CeilMode: true},
	{Batch: 2, Channels: 1, Spatial: []int{6, 6}, Kernel: []int{2, 2}, Stride: []int{2, 2}, CeilMode: true, CountIncludePad: true},
	{Batch: 1, Channels: 2, Spatial: []int{7, 7}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}, CeilMode: true, CountIncludePad: true},
	{Batch: 1, Channels: 2, Spatial: []int{9, 10}, Kernel: []int{2, 3}, Stride: []int{1, 2}, Dilation: []int{2, 3}, PadBegin: []int{1, 2}, PadEnd: []int{2, 0}},
	{Batch: 1, Channels: 2, Spatial: []int{4, 5, 6}, Kernel: []int{2, 3, 2}, Stride: []int{2, 1, 2}, PadBegin: []int{0, 1, 1}, PadEnd: []int{1, 1, 0}, CeilMode: true},
	{Batch: 1, Channels: 1, Spatial: []int{5, 5}, Kernel: []int{5, 5}, P: 3},
}

func TestPool(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for ci := range poolCases {
		p := poolCases[ci]
		if err := p.Init(); err != nil {
			t.Fatalf("case %d: %v", ci, err)
		}
		x := randSlice[float64](r, p.XLen())
		name := fmt.Sprintf("case %d %v", ci, p.OutSpatial)
		y := make([]float64, p.YLen())
		arg := make([]int32, p.YLen())
		wantMax, wantArg := poolNaive(&p, x, "max")
		MaxPool(&p, x, y, arg)
		assertClose(t, name+" max", y, wantMax, 0)
		for i := range arg {
			if arg[i] != wantArg[i] {
				t.Fatalf("%s: argmax[%d] = %d, want %d", name, i, arg[i], wantArg[i])
			}
		}
		wantAvg, _ := poolNaive(&p, x, "avg")
		AvgPool(&p, x, y)
		assertClose(t, name+" avg", y, wantAvg, 1e-14)
		wantLp, _ := poolNaive(&p, x, "lp")
		LpPool(&p, x, y)
		assertClose(t, name+" lp", y, wantLp, 1e-12)
		y32 := make([]float32, p.YLen())
		AvgPool(&p, toF32(x), y32)
		assertClose(t, name+" avg f32", toF64(y32), wantAvg, 1e-6)

		// Backward: adjoint identity for the linear AvgPool and max (with fixed argmax), and
		// finite differences for all three.
		dy := randSlice[float64](r, p.YLen())
		dx := make([]float64, p.XLen())
		AvgPoolBackward(&p, dy, dx)
		AvgPool(&p, x, y)
		if a, b := dot(y, dy), dot(x, dx); math.Abs(a-b) > 1e-12*math.Max(1, math.Abs(a)) {
			t.Errorf("%s: avg adjoint <y,dy>=%v <x,dx>=%v", name, a, b)
		}
		MaxPool(&p, x, y, arg)
		MaxPoolBackward(&p, dy, arg, dx)
		checkFD(t, name+" max", x, dx, dy, func(y []float64) { MaxPool(&p, x, y, nil) }, len(y))
		AvgPoolBackward(&p, dy, dx)
		checkFD(t, name+" avg", x, dx, dy, func(y []float64) { AvgPool(&p, x, y) }, len(y))
		LpPool(&p, x, y)
		LpPoolBackward(&p, x, y, dy, dx)
		checkFD(t, name+" lp", x, dx, dy, func(y []float64) { LpPool(&p, x, y) }, len(y))
	}
}

// checkFD compares grad with central differences of L = Σ f(x)·dy at every coordinate.
func checkFD(t *testing.T, name string, x, grad, dy []float64, f func(y []float64), ylen int) {
	t.Helper()
	y := make([]float64, ylen)
	loss := func() float64 { f(y); return dot(y, dy) }
	const h = 1e-6
	for i := range x {
		old := x[i]
		x[i] = old + h
		lp := loss()
		x[i] = old - h
		lm := loss()
		x[i] = old
		fd := (lp - lm) / (2 * h)
		if math.Abs(fd-grad[i]) > 1e-6*math.Max(1, math.Abs(fd)) {
			t.Fatalf("%s: grad[%d] = %v, finite difference %v", name, i, grad[i], fd)
		}
	}
}

func TestPoolOutputShapes(t *testing.T) {
	for _, tc := range []struct {
		in, k, s, pb, pe int
		ceil             bool
		want             int
	}{
		{112, 3, 2, 1, 1, false, 56}, {5, 2, 2, 0, 0, false, 2}, {5, 2, 2, 0, 0, true, 3},
		{6, 3, 2, 1, 1, true, 4}, {4, 3, 2, 1, 1, true, 3}, {4, 1, 2, 0, 1, true, 3}, {5, 2, 2, 0, 1, true, 3}, {2, 2, 2, 1, 1, true, 2}, {32, 3, 2, 0, 0, true, 16},
	} {
		p := PoolParams{Batch: 1, Channels: 1, Spatial: []int{tc.in}, Kernel: []int{tc.k}, Stride: []int{tc.s}, PadBegin: []int{tc.pb}, PadEnd: []int{tc.pe}, CeilMode: tc.ceil}
		if err := p.Init(); err != nil || p.OutSpatial[0] != tc.want {
			t.Errorf("%+v: out %v err %v, want %d", tc, p.OutSpatial, err, tc.want)
		}
	}
	for _, bad := range []PoolParams{
		{Batch: 1, Channels: 1, Spatial: []int{2}, Kernel: []int{5}},
		{Batch: 1, Channels: 1, Spatial: []int{2, 2, 2, 2}, Kernel: []int{1, 1, 1, 1}},
		{Batch: 1, Channels: 0, Spatial: []int{2}, Kernel: []int{1}},
		{Batch: 1, Channels: 1, Spatial: []int{4}, Kernel: []int{1}, Stride: []int{0}},
	} {
		if err := bad.Init(); err == nil {
			t.Errorf("Init accepted %+v", bad)
		}
	}
}

func TestMaxPoolNaN(t *testing.T) {
	p := PoolParams{Batch: 1, Channels: 1, Spatial: []int{4}, Kernel: []int{2}, Stride: []int{2}}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, 2)
	MaxPool(&p, []float32{1, float32(math.NaN()), float32(math.NaN()), 3}, y, nil)
	if y[0] == y[0] || y[1] == y[1] {
		t.Errorf("NaN did not propagate: %v", y)
	}
}

func TestGlobalPool(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	n, c, sp := 2, 3, 17
	x := randSlice[float64](r, n*c*sp)
	avg, mx := make([]float64, n*c), make([]float64, n*c)
	GlobalAvgPool(x, n, c, sp, avg)
	GlobalMaxPool(x, n, c, sp, mx)
	for i := 0; i < n*c; i++ {
		s, m := 0.0, math.Inf(-1)
		for _, v := range x[i*sp : (i+1)*sp] {
			s += v
			m = math.Max(m, v)
		}
		if math.Abs(avg[i]-s/float64(sp)) > 1e-14 || mx[i] != m {
			t.Fatalf("plane %d: avg %v max %v, want %v %v", i, avg[i], mx[i], s/float64(sp), m)
		}
	}
	dy := randSlice[float64](r, n*c)
	dx := make([]float64, n*c*sp)
	GlobalAvgPoolBackward(dy, n, c, sp, dx)
	if a, b := dot(avg, dy), dot(x, dx); math.Abs(a-b) > 1e-12 {
		t.Errorf("global avg adjoint %v vs %v", a, b)
	}
}

func BenchmarkMaxPool(b *testing.B) {
	p := PoolParams{Batch: 8, Channels: 64, Spatial: []int{112, 112}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := p.Init(); err != nil {
		b.Fatal(err)
	}
	x := randSlice[float32](rand.New(rand.NewPCG(1, 1)), p.XLen())
	y := make([]float32, p.YLen())
	arg := make([]int32, p.YLen())
	for b.Loop() {
		MaxPool(&p, x, y, arg)
	}
	b.ReportMetric(float64(p.XLen()*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkMaxPoolInference is batch-1 inference's 2-d max pools without argmax: ResNet's
// 3×3/2 stem pool (64 × 112 × 112), GoogLeNet's ceil-mode 3×3/2 pools after its stem (192 ×
// 56 × 56) and stage 3 (480 × 28 × 28), its 2×2/2 one after stage 4 (832 × 14 × 14) and
// Inception blocks' 3×3 stride-1 pools (4a's input: 480 × 28 × 28; 5b's: 832 × 7 × 7).
func BenchmarkMaxPoolInference(b *testing.B) {
	for _, c := range []struct {
		name              string
		ch, hw, k, s, pad int
		ceil              bool
	}{{"resnet-stem", 64, 112, 3, 2, 1, false}, {"googlenet-s2-ceil", 192, 56, 3, 2, 0, true}, {"inception-s1", 480, 28, 3, 1, 1, false},
		{"inception-5a-s1", 832, 7, 3, 1, 1, false}, {"googlenet-s2-28", 480, 28, 3, 2, 0, true}, {"googlenet-2x2-14", 832, 14, 2, 2, 0, true},
		{"googlenet-s2-112", 64, 112, 3, 2, 0, true},
		{"inception-4a-s1", 480, 14, 3, 1, 1, false}} {
		b.Run(c.name, func(b *testing.B) {
			p := PoolParams{Batch: 1, Channels: c.ch, Spatial: []int{c.hw, c.hw}, Kernel: []int{c.k, c.k}, Stride: []int{c.s, c.s},
				PadBegin: []int{c.pad, c.pad}, PadEnd: []int{c.pad, c.pad}, CeilMode: c.ceil}
			if err := p.Init(); err != nil {
				b.Fatal(err)
			}
			x := randSlice[float32](rand.New(rand.NewPCG(1, 1)), p.XLen())
			y := make([]float32, p.YLen())
			for b.Loop() {
				MaxPool(&p, x, y, nil)
			}
			b.ReportMetric(float64(p.XLen()*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// 2-d max pooling without argmax (maxPoolFlat: the separable row and plane forms) gives the
// bits of the general path (which MaxPool takes when it also computes argmax), NaNs, zeros
// of both signs, strides, odd sizes, uneven pads and ceil mode's overhang included.
func TestMaxPoolFlatMatchesGeneral(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ h, w, k0, k1, s0, s1, pb0, pb1, pe0, pe1 int }{
		{28, 28, 3, 3, 1, 1, 1, 1, 1, 1}, {7, 7, 3, 3, 1, 1, 1, 1, 1, 1}, {2, 3, 3, 3, 1, 1, 1, 1, 1, 1}, {3, 2, 3, 3, 1, 1, 1, 1, 1, 1}, {3, 5, 3, 3, 1, 1, 1, 2, 1, 0}, {7, 9, 2, 3, 1, 1, 0, 2, 1, 0}, {5, 5, 5, 5, 1, 1, 2, 2, 2, 2}, {1, 17, 1, 3, 1, 1, 0, 1, 0, 1}, {6, 4, 3, 2, 1, 1, 0, 0, 0, 0},
		{112, 112, 3, 3, 2, 2, 1, 1, 1, 1}, {56, 56, 3, 3, 2, 2, 0, 0, 0, 0}, {13, 11, 3, 3, 2, 2, 0, 0, 0, 0}, {14, 14, 3, 3, 2, 2, 0, 0, 0, 0}, {10, 16, 3, 3, 2, 2, 1, 1, 1, 1}, {9, 8, 3, 3, 3, 2, 1, 0, 0, 1}, {9, 10, 2, 3, 2, 3, 1, 0, 0, 1},
		{7, 8, 3, 2, 3, 2, 1, 1, 1, 0}, {6, 6, 2, 2, 2, 2, 0, 0, 0, 0}, {5, 7, 1, 3, 1, 2, 0, 1, 0, 1}, {4, 5, 3, 3, 2, 1, 2, 0, 2, 0},
		{28, 28, 3, 3, 2, 2, 0, 0, 0, 0}, {62, 62, 3, 3, 2, 2, 0, 0, 0, 0}, {112, 112, 3, 3, 2, 2, 0, 0, 0, 0}, {113, 112, 3, 3, 2, 2, 0, 0, 0, 0}, {97, 96, 3, 3, 2, 2, 0, 0, 0, 0}, {9, 12, 3, 3, 2, 2, 0, 0, 0, 0}, {9, 4, 3, 3, 2, 2, 0, 0, 0, 0}, {4, 6, 3, 3, 2, 2, 0, 0, 0, 0}, {3, 4, 3, 3, 2, 2, 0, 0, 0, 0},
		{14, 14, 2, 2, 2, 2, 0, 0, 0, 0}, {2, 4, 2, 2, 2, 2, 0, 0, 0, 0}, {70, 66, 2, 2, 2, 2, 0, 0, 0, 0}, {7, 8, 2, 2, 2, 2, 0, 0, 0, 0}, {8, 7, 2, 2, 2, 2, 0, 0, 0, 0},
	} {
		// Enough planes (maxPoolSame's chunks of planes) to give every worker several.
		p := PoolParams{Batch: 2, Channels: 3 + 61*(c.h*c.w%2), Spatial: []int{c.h, c.w}, Kernel: []int{c.k0, c.k1}, Stride: []int{c.s0, c.s1},
			PadBegin: []int{c.pb0, c.pb1}, PadEnd: []int{c.pe0, c.pe1}, CeilMode: c.h%2 == 0}
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		x := randSlice[float32](r, p.XLen())
		sprinkleSpecials(x, 37)
		want := make([]float32, p.YLen())
		MaxPool(&p, x, want, make([]int32, p.YLen()))
		for _, threads := range []int{1, 3} {
			old := runtime.GOMAXPROCS(threads)
			got := make([]float32, p.YLen())
			MaxPool(&p, x, got, nil)
			runtime.GOMAXPROCS(old)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("%+v, %d threads: y[%d] = %v, general path %v", c, threads, i, got[i], want[i])
				}
			}
		}
	}
}

// maxPool3x3s2 over many planes — several blocks a worker, the last one partial — gives the
// general path's bits on GoogLeNet's ceil-mode pools and a floor-mode one, NaNs and signed
// zeros included.
func TestMaxPool3x3s2Blocks(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		ch, h, w int
		ceil     bool
	}{{45, 14, 14, true}, {13, 28, 28, true}, {50, 7, 8, false}} {
		p := PoolParams{Batch: 1, Channels: c.ch, Spatial: []int{c.h, c.w}, Kernel: []int{3, 3}, Stride: []int{2, 2},
			PadBegin: []int{0, 0}, PadEnd: []int{0, 0}, CeilMode: c.ceil}
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		x := randSlice[float32](r, p.XLen())
		for i := 0; i+7 < len(x); i += 29 {
			x[i] = float32(math.NaN())
			x[i+7] = float32(math.Copysign(0, -1))
		}
		want := make([]float32, p.YLen())
		MaxPool(&p, x, want, make([]int32, p.YLen()))
		for _, threads := range []int{1, 3} {
			old := runtime.GOMAXPROCS(threads)
			got := make([]float32, p.YLen())
			if !maxPool3x3s2(&p, x, got) {
				t.Fatalf("%+v: maxPool3x3s2 did not take it", c)
			}
			runtime.GOMAXPROCS(old)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("%+v, %d threads: y[%d] = %v, general path %v", c, threads, i, got[i], want[i])
				}
			}
		}
	}
}

// An average pool whose windows are whole planes (avgPoolGlobal) sums each plane in order
// from 0, as the general path sums a window's taps, and divides once: checked bit for bit
// against that sum, on 1-, 2- and 3-d planes, plane counts that leave each tail of the
// four-plane loop, one and three threads.
func TestAvgPoolGlobal(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, c := range []struct {
		ch      int
		spatial []int
	}{{1024, []int{7, 7}}, {5, []int{13}}, {7, []int{2, 3, 4}}, {6, []int{1, 1}}} {
		p := PoolParams{Batch: 1, Channels: c.ch, Spatial: c.spatial, Kernel: c.spatial}
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		if !p.global() {
			t.Fatalf("%v: not a global pool", c.spatial)
		}
		x := randSlice[float32](r, p.XLen())
		x[3] = float32(math.Copysign(0, -1))
		want := make([]float32, p.YLen())
		n := p.XLen() / p.YLen()
		for i := range want {
			var s float32
			for _, v := range x[i*n : (i+1)*n] {
				s += v
			}
			want[i] = s / float32(n)
		}
		for _, threads := range []int{1, 3} {
			old := runtime.GOMAXPROCS(threads)
			got := make([]float32, p.YLen())
			AvgPool(&p, x, got)
			runtime.GOMAXPROCS(old)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d × %v, %d threads: y[%d] = %v, the in-order sum gives %v", c.ch, c.spatial, threads, i, got[i], want[i])
				}
			}
		}
	}
	if p := (PoolParams{Batch: 1, Channels: 1, Spatial: []int{7, 7}, Kernel: []int{7, 7}, PadBegin: []int{1, 0}, PadEnd: []int{0, 0}}); p.Init() != nil || p.global() {
		t.Fatal("a padded pool counted as global")
	}
}

// An average pool whose windows all lie inside the input (avgPoolInside) sums each window
// from +0 row by row and divides once, as the general path does: checked bit for bit against
// that sum computed here, with NaNs and zeros of both signs, for power-of-two window sizes
// (multiplied by the reciprocal) and others (divided), at one and three threads. Pools with
// padding or a ceil-mode overhang are left to the general path.
func TestAvgPoolInside(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, c := range []struct{ h, w, k0, k1, s0, s1 int }{
		{56, 56, 2, 2, 2, 2}, {7, 9, 2, 2, 2, 2}, {13, 11, 3, 3, 2, 2}, {9, 9, 3, 3, 3, 3}, {6, 8, 2, 3, 1, 2}, {8, 8, 5, 5, 1, 1}, {4, 6, 1, 4, 2, 1}, {5, 5, 1, 1, 1, 1},
	} {
		p := PoolParams{Batch: 2, Channels: 5, Spatial: []int{c.h, c.w}, Kernel: []int{c.k0, c.k1}, Stride: []int{c.s0, c.s1}}
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		x := randSlice[float32](r, p.XLen())
		for i := range x {
			switch i % 23 {
			case 4:
				x[i] = float32(math.NaN())
			case 7, 8, 9, 10:
				x[i] = float32(math.Copysign(0, -1)) // a window of only −0 sums to +0 from +0
			}
		}
		oh, ow := p.OutSpatial[0], p.OutSpatial[1]
		want := make([]float32, p.YLen())
		for pl := 0; pl < p.Batch*p.Channels; pl++ {
			for o := 0; o < oh; o++ {
				for j := 0; j < ow; j++ {
					s := float32(0)
					for t0 := 0; t0 < c.k0; t0++ {
						for t1 := 0; t1 < c.k1; t1++ {
							s += x[pl*c.h*c.w+(o*c.s0+t0)*c.w+j*c.s1+t1]
						}
					}
					want[pl*oh*ow+o*ow+j] = s / float32(c.k0*c.k1)
				}
			}
		}
		for _, threads := range []int{1, 3} {
			old := runtime.GOMAXPROCS(threads)
			got := make([]float32, p.YLen())
			taken := avgPoolInside(&p, x, got)
			runtime.GOMAXPROCS(old)
			if !taken {
				t.Fatalf("%+v: not taken", c)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("%+v, %d threads: y[%d] = %v, want %v", c, threads, i, got[i], want[i])
				}
			}
		}
	}
	for _, p := range []PoolParams{
		{Batch: 1, Channels: 1, Spatial: []int{8, 8}, Kernel: []int{2, 2}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},
		{Batch: 1, Channels: 1, Spatial: []int{7, 7}, Kernel: []int{2, 2}, Stride: []int{2, 2}, CeilMode: true},
	} {
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		if avgPoolInside(&p, make([]float32, p.XLen()), make([]float32, p.YLen())) {
			t.Fatalf("%v pads, ceil %v: taken", p.PadBegin, p.CeilMode)
		}
	}
}

// BenchmarkAvgPoolTransition is DenseNet-121's first transition pool (2×2/2 on 128 × 56 ×
// 56, batch 1): avgPoolInside.
func BenchmarkAvgPoolTransition(b *testing.B) {
	p := PoolParams{Batch: 1, Channels: 128, Spatial: []int{56, 56}, Kernel: []int{2, 2}, Stride: []int{2, 2}}
	if err := p.Init(); err != nil {
		b.Fatal(err)
	}
	x := randSlice[float32](rand.New(rand.NewPCG(1, 1)), p.XLen())
	y := make([]float32, p.YLen())
	for b.Loop() {
		AvgPool(&p, x, y)
	}
	b.ReportMetric(float64(p.XLen()*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
