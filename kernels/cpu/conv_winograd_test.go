package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// TestConvWinogradMatchesDirect checks the Winograd path (a ConvFilter of a 3×3 stride-1
// convolution) against the exact sum in float64: every output within a few float32 units in
// the last place of Σ|w|·|x| over its window (and the bias), on odd planes (tiles past the
// edge), asymmetric and large pads, one-row and one-column planes, groups, batches, channels
// that are not multiples of the micro-kernel's rows and more than a kc slab, and an epilogue.
func TestConvWinogradMatchesDirect(t *testing.T) {
	defer func(v, c int, f float64) { convWinoMin, convWinoBcastCg, convWinoFill = v, c, f }(convWinoMin, convWinoBcastCg, convWinoFill)
	convWinoMin, convWinoBcastCg, convWinoFill = 0, 0, 0
	r := rand.New(rand.NewPCG(7, 8))
	cases := []struct {
		batch, inC, outC, groups, h, w int
		pb, pe                         [2]int
	}{
		{1, 2, 1, 1, 3, 3, [2]int{0, 0}, [2]int{0, 0}},
		{1, 3, 5, 1, 5, 7, [2]int{1, 1}, [2]int{1, 1}},
		{2, 4, 6, 2, 6, 5, [2]int{1, 0}, [2]int{0, 2}},
		{1, 17, 13, 1, 1, 9, [2]int{1, 1}, [2]int{1, 1}},
		{1, 9, 7, 1, 11, 1, [2]int{1, 1}, [2]int{1, 1}},
		{1, 8, 8, 1, 4, 4, [2]int{3, 2}, [2]int{2, 3}},
		{1, 400, 20, 1, 7, 7, [2]int{1, 1}, [2]int{1, 1}},
		{3, 32, 33, 1, 14, 13, [2]int{1, 1}, [2]int{1, 1}},
		{1, 24, 20, 1, 23, 30, [2]int{2, 1}, [2]int{0, 1}},
		{1, 12, 10, 1, 30, 20, [2]int{1, 1}, [2]int{1, 1}},
		{1, 400, 8, 1, 6, 70, [2]int{1, 1}, [2]int{1, 1}}, // two k slabs, three slivers of tiles a tile row
	}
	// Every float32 micro-kernel: the AVX2 kernel's short-row tiles (20 and 8 output
	// channels leave 2 rows in the last sliver, 10 leave 4; pairs of tile slivers and a last
	// one alone) run on AVX-512 machines too.
	for _, impl := range gemmAvailable(4) {
		gemmForceS = impl
		testConvWinogradCases(t, r, impl, cases)
	}
	gemmForceS = nil
}

func testConvWinogradCases(t *testing.T, r *rand.Rand, impl *gemmImpl, cases []struct {
	batch, inC, outC, groups, h, w int
	pb, pe                         [2]int
}) {
	for ci, c := range cases {
		p := &ConvParams{Batch: c.batch, InC: c.inC, OutC: c.outC, Groups: c.groups, Spatial: []int{c.h, c.w}, Kernel: []int{3, 3},
			PadBegin: c.pb[:], PadEnd: c.pe[:]}
		if err := p.Init(); err != nil {
			t.Fatal(ci, err)
		}
		x, w, bias := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen()), randSlice[float32](r, p.OutC)
		f := PackConvFilter(p, w)
		if f.wino == nil {
			t.Fatalf("%s case %d: the filter was not packed for the Winograd path", impl.name, ci)
		}
		want, mag := make([]float64, p.YLen()), make([]float64, p.YLen())
		convNaive(p, func(xi, wi, yi int) {
			want[yi] += float64(x[xi]) * float64(w[wi])
			mag[yi] += math.Abs(float64(x[xi]) * float64(w[wi]))
		})
		outSize := p.YLen() / p.Batch / p.OutC
		for i := range want {
			b := float64(bias[i/outSize%p.OutC])
			want[i] += b
			mag[i] += math.Abs(b)
		}
		for _, run := range []struct {
			epi        bool
			threads    int
			blockBytes int
		}{{false, 1, convWinoBlockBytes}, {true, 2, convWinoBlockBytes}, {true, 1, 1}, {false, 2, 1}, {true, 3, 1}} {
			epi := run.epi
			defer func(v, b int) { runtime.GOMAXPROCS(v); convWinoBlockBytes = b }(runtime.GOMAXPROCS(run.threads), convWinoBlockBytes)
			convWinoBlockBytes = run.blockBytes
			got := make([]float32, p.YLen())
			for i := range got {
				got[i] = float32(math.NaN()) // every output must be written
			}
			var e func(lo, hi int)
			var mu sync.Mutex
			seen := make([]int, p.YLen())
			if epi { // ReLU, which also checks the ranges cover y once
				e = func(lo, hi int) {
					mu.Lock()
					defer mu.Unlock()
					for i := lo; i < hi; i++ {
						seen[i]++
						got[i] = max(got[i], 0)
					}
				}
			}
			f.ConvEpi(x, bias, got, Epilogue[float32]{Func: e})
			for i, n := range seen {
				if epi && n != 1 {
					t.Fatalf("%s case %d %+v: epilogue saw element %d %d times", impl.name, ci, run, i, n)
				}
			}
			for i, g := range got {
				wv := want[i]
				if epi {
					wv = max(wv, 0)
				}
				// A few roundings of partial sums each bounded by Σ|w·x| (transforms of up to 9
				// terms, the GEMM's sum over channels, the output transform).
				if tol := 8 * float64(float32eps) * mag[i]; !(math.Abs(float64(g)-wv) <= tol) {
					t.Fatalf("%s case %d %+v: y[%d] = %g, want %g ± %g", impl.name, ci, run, i, g, wv, tol)
				}
			}
		}
	}
}

const float32eps = 1.0 / (1 << 23)

// TestConvWinogradVecMatchesGo checks the eight-tile assembly transforms give the bits of
// the Go loops (winoInput, winoOutput), on planes whose tile rows hold one, two and more
// groups of eight tiles with a remainder, whose rows start mid-sliver, and with a last
// output row or column cut off by the plane's edge.
func TestConvWinogradVecMatchesGo(t *testing.T) {
	if !winoVec {
		t.Skip("no AVX2 here: the Go loops are the only transforms")
	}
	defer func(v, b, c int, f float64) {
		convWinoMin, convWinoBlockBytes, convWinoBcastCg, convWinoFill = v, b, c, f
	}(convWinoMin, convWinoBlockBytes, convWinoBcastCg, convWinoFill)
	convWinoMin, convWinoBcastCg, convWinoFill = 0, 0, 0
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ inC, outC, h, w, block int }{
		{5, 7, 16, 16, 1 << 20}, {6, 4, 17, 33, 1 << 20}, {3, 9, 30, 47, 1}, {4, 4, 9, 56, 1 << 20}, {8, 3, 56, 56, 1},
		{5, 6, 28, 28, 1 << 20}, {4, 5, 14, 14, 1 << 20}, // tile rows of 14 and 7: groups from any place in a sliver
	} {
		p := &ConvParams{Batch: 1, InC: c.inC, OutC: c.outC, Spatial: []int{c.h, c.w}, Kernel: []int{3, 3},
			PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		convWinoBlockBytes = c.block
		x, w, bias := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen()), randSlice[float32](r, p.OutC)
		f := PackConvFilter(p, w)
		want, got := make([]float32, p.YLen()), make([]float32, p.YLen())
		winoVec = false
		f.Conv(x, bias, want)
		winoVec = true
		f.Conv(x, bias, got)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: y[%d] = %v with the assembly, %v with the Go loops", c, i, got[i], want[i])
			}
		}
	}
}

// TestConvWinogradWhenItApplies checks which filters take the Winograd path: float32 3×3
// stride-1 undilated 2-d convolutions whose groups have enough channels (convWinoMin,
// convWinoBcastCg).
func TestConvWinogradWhenItApplies(t *testing.T) {
	for _, c := range []struct {
		name string
		p    ConvParams
		want bool
	}{
		{"3x3", ConvParams{Batch: 1, InC: 96, OutC: 128, Spatial: []int{16, 16}, Kernel: []int{3, 3}}, true},
		{"3x3 at the bound", ConvParams{Batch: 1, InC: 64, OutC: 192, Spatial: []int{16, 16}, Kernel: []int{3, 3}}, true},
		{"64 to 64", ConvParams{Batch: 1, InC: 64, OutC: 64, Spatial: []int{8, 8}, Kernel: []int{3, 3}}, false},
		{"few out", ConvParams{Batch: 1, InC: 128, OutC: 32, Spatial: []int{8, 8}, Kernel: []int{3, 3}}, false},
		{"few in", ConvParams{Batch: 1, InC: 32, OutC: 128, Spatial: []int{8, 8}, Kernel: []int{3, 3}}, false},
		{"stride 2", ConvParams{Batch: 1, InC: 128, OutC: 128, Spatial: []int{8, 8}, Kernel: []int{3, 3}, Stride: []int{2, 2}}, false},
		{"dilated", ConvParams{Batch: 1, InC: 128, OutC: 128, Spatial: []int{8, 8}, Kernel: []int{3, 3}, Dilation: []int{2, 2}}, false},
		{"5x5", ConvParams{Batch: 1, InC: 128, OutC: 128, Spatial: []int{8, 8}, Kernel: []int{5, 5}}, false},
		{"3x1", ConvParams{Batch: 1, InC: 128, OutC: 128, Spatial: []int{8, 8}, Kernel: []int{3, 1}}, false},
		{"1-d", ConvParams{Batch: 1, InC: 128, OutC: 128, Spatial: []int{8}, Kernel: []int{3}}, false},
		{"3-d", ConvParams{Batch: 1, InC: 128, OutC: 128, Spatial: []int{4, 8, 8}, Kernel: []int{3, 3, 3}}, false},
		{"groups of 32", ConvParams{Batch: 1, InC: 128, OutC: 128, Groups: 4, Spatial: []int{8, 8}, Kernel: []int{3, 3}}, false},
		// Where the direct path is convBcast (rows under 32 columns), from convWinoBcastCg
		// input channels only; on wider rows (convIndirect) the counts alone decide.
		{"24 to 48 on 16 × 16", ConvParams{Batch: 1, InC: 24, OutC: 48, Spatial: []int{16, 16}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, false},
		{"32 to 96 on 28 × 28", ConvParams{Batch: 1, InC: 32, OutC: 96, Spatial: []int{28, 28}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, false},
		{"64 to 128 on 28 × 28", ConvParams{Batch: 1, InC: 64, OutC: 128, Spatial: []int{28, 28}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, winoVec},
		{"32 to 64 on 56 × 56", ConvParams{Batch: 1, InC: 32, OutC: 64, Spatial: []int{56, 56}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, winoVec},
		{"16 to 32 on 16 × 16", ConvParams{Batch: 1, InC: 16, OutC: 32, Spatial: []int{16, 16}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, false},
		{"24 to 48 on 14 × 14", ConvParams{Batch: 1, InC: 24, OutC: 48, Spatial: []int{14, 14}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, false},
		// 16 tiles: the AVX2 kernel's 16 columns, half the AVX-512 kernel's 32.
		{"7 × 7", ConvParams{Batch: 1, InC: 512, OutC: 512, Spatial: []int{7, 7}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, gemmImplFor(4).nr <= 16},
		{"groups of 128", ConvParams{Batch: 1, InC: 256, OutC: 256, Groups: 2, Spatial: []int{16, 16}, Kernel: []int{3, 3}}, true},
	} {
		p := c.p
		if err := p.Init(); err != nil {
			t.Fatal(c.name, err)
		}
		w := make([]float32, p.WLen())
		if got := PackConvFilter(&p, w).wino != nil; got != c.want {
			t.Errorf("%s: Winograd %v, want %v", c.name, got, c.want)
		}
		if PackConvFilter(&p, make([]float64, p.WLen())).wino != nil {
			t.Errorf("%s: float64 weights took the Winograd path", c.name)
		}
	}
}

// TestConvWinogradFallsBack checks a Winograd filter used under another micro-kernel (the
// tests' forced kernels) computes the direct convolution's bits instead.
func TestConvWinogradFallsBack(t *testing.T) {
	p := &ConvParams{Batch: 1, InC: 16, OutC: 16, Spatial: []int{9, 9}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	x, w := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen())
	f := PackConvFilter(p, w)
	gemmForceGeneric = true
	defer func() { gemmForceGeneric = false }()
	want, got := make([]float32, p.YLen()), make([]float32, p.YLen())
	Conv(p, x, w, nil, want)
	f.Conv(x, nil, got)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("y[%d] = %g, want the direct path's %g", i, got[i], want[i])
		}
	}
}

func BenchmarkConvWinograd(b *testing.B) {
	for _, c := range []struct{ c, oc, hw int }{{64, 64, 56}, {128, 128, 28}, {256, 256, 14}, {512, 512, 7}, {128, 128, 56},
		{64, 192, 56}, {96, 128, 28}, {128, 32, 56}, {128, 32, 14}, {160, 320, 7}, {32, 128, 14}, {128, 32, 28}, {64, 64, 28}, {32, 32, 56}, {128, 32, 7}, {64, 64, 14}, {384, 256, 13}, {192, 384, 13}} {
		p := &ConvParams{Batch: 1, InC: c.c, OutC: c.oc, Spatial: []int{c.hw, c.hw}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}
		if err := p.Init(); err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 1))
		x, w, bias := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen()), randSlice[float32](r, p.OutC)
		y := make([]float32, p.YLen())
		defer func(v, c int, f float64) { convWinoMin, convWinoBcastCg, convWinoFill = v, c, f }(convWinoMin, convWinoBcastCg, convWinoFill)
		convWinoMin, convWinoBcastCg, convWinoFill = 0, 0, 0
		f := PackConvFilter(p, w)
		convWinoOff = true
		fd := PackConvFilter(p, w) // the direct path's packed weights
		convWinoOff = false
		for _, off := range []bool{false, true} {
			name := fmt.Sprintf("%d-%d-%d/winograd", c.c, c.oc, c.hw)
			if off {
				name = fmt.Sprintf("%d-%d-%d/direct", c.c, c.oc, c.hw)
			}
			b.Run(name, func(b *testing.B) {
				f := f
				if off {
					f = fd
				}
				for b.Loop() {
					f.Conv(x, bias, y)
				}
				b.ReportMetric(2*float64(p.YLen())*float64(p.WLen()/p.OutC)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// winoRows takes the fewest tile rows a block that pad the blocks' tiles least to whole
// slivers, within its bounds.
func TestWinoRows(t *testing.T) {
	for _, c := range []struct{ br, th, tw, nr, most, want int }{
		{2, 7, 7, 32, 4, 4},   // 14 × 14 on AVX-512: 28 + 21 tiles, 64 columns, not 4 × 32
		{2, 7, 7, 32, 3, 3},   // bounded: 21 + 21 + 7, 96 columns
		{2, 7, 7, 16, 4, 2},   // AVX2: 14 tiles fill 16 columns already
		{3, 14, 14, 32, 6, 4}, // 28 × 28, 96 channels: 56 tiles a block, not 42
		{2, 14, 14, 32, 4, 2}, // 28 tiles in 32 columns: as good as any
		{5, 3, 10, 32, 9, 5},  // br already past th
		{1, 28, 28, 16, 1, 1}, // most below br
	} {
		if got := winoRows(c.br, c.th, c.tw, c.nr, c.most); got != c.want {
			t.Errorf("winoRows(%d, %d, %d, %d, %d) = %d, want %d", c.br, c.th, c.tw, c.nr, c.most, got, c.want)
		}
	}
}
