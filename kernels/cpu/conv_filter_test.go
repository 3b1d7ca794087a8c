package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
)

// convFilterCases reach every forward path with odd sizes: convBcast (rows under 32 columns,
// more than one k slab, groups, a stride), the indirect kernel (3×3, more than one k slab, a
// stem's stride), the pointwise GEMM (its row-split shared-B and column-split parallel forms,
// edge rows and columns), the im2col GEMM (3-d) and depthwise loops (nothing packed).
var convFilterCases = []ConvParams{
	{Batch: 1, InC: 40, OutC: 70, Spatial: []int{7, 7}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, // k = 360
	{Batch: 2, InC: 6, OutC: 12, Groups: 3, Spatial: []int{11, 10}, Kernel: []int{3, 3}, Dilation: []int{2, 1}, PadBegin: []int{2, 1}, PadEnd: []int{0, 1}},
	{Batch: 1, InC: 3, OutC: 10, Spatial: []int{30, 29}, Kernel: []int{7, 7}, Stride: []int{2, 2}, PadBegin: []int{3, 3}, PadEnd: []int{3, 3}},
	{Batch: 1, InC: 300, OutC: 301, Spatial: []int{7, 7}, Kernel: []int{1, 1}},                                                                  // pointwise, m ≫ n: shared B
	{Batch: 1, InC: 70, OutC: 27, Spatial: []int{41, 43}, Kernel: []int{1, 1}},                                                                  // pointwise, n ≫ m: column ranges
	{Batch: 1, InC: 90, OutC: 150, Spatial: []int{33, 35}, Kernel: []int{1, 1}},                                                                 // pointwise, rows and columns split
	{Batch: 1, InC: 260, OutC: 70, Spatial: []int{14, 13}, Kernel: []int{1, 1}},                                                                 // pointwise, narrow B: 2-sliver column ranges
	{Batch: 1, InC: 400, OutC: 50, Spatial: []int{9, 9}, Kernel: []int{1, 1}},                                                                   // the same, the last range one column
	{Batch: 1, InC: 100, OutC: 40, Spatial: []int{28, 27}, Kernel: []int{1, 1}},                                                                 // the same up to 1024 columns
	{Batch: 1, InC: 70, OutC: 300, Spatial: []int{14, 13}, Kernel: []int{1, 1}},                                                                 // the same, its ranges split by rows
	{Batch: 1, InC: 17, OutC: 33, Spatial: []int{13, 12}, Kernel: []int{3, 3}, Stride: []int{2, 2}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}}, // im2col
	{Batch: 1, InC: 6, OutC: 6, Groups: 6, Spatial: []int{9, 9}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},               // depthwise
	{Batch: 1, InC: 50, OutC: 21, Spatial: []int{4, 40}, Kernel: []int{3, 3}, PadBegin: []int{1, 1}, PadEnd: []int{1, 1}},                       // indirect, k = 450
	{Batch: 2, InC: 5, OutC: 7, Spatial: []int{4, 5, 6}, Kernel: []int{2, 2, 2}, PadBegin: []int{1, 0, 1}, PadEnd: []int{0, 1, 1}},              // 3-d: im2col
}

// A packed filter's convolution gives Conv's bits on every path, kernel, dtype and thread
// count, with and without a bias; and Conv matches the float64 loops (so both are right).
func TestConvFilterMatchesConv(t *testing.T) {
	for ci := range convFilterCases {
		p := convFilterCases[ci]
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprint(ci), func(t *testing.T) {
			testConvFilter[float32](t, &p)
			testConvFilter[float64](t, &p)
		})
	}
}

func testConvFilter[T Float](t *testing.T, p *ConvParams) {
	r := rand.New(rand.NewPCG(uint64(p.InC), uint64(p.OutC)))
	x, w, bias := randSlice[T](r, p.XLen()), randSlice[T](r, p.WLen()), randSlice[T](r, p.OutC)
	want64 := make([]float64, p.YLen())
	convNaive(p, func(xi, wi, yi int) { want64[yi] += float64(x[xi]) * float64(w[wi]) })
	for _, threads := range []int{1, 2, 3} {
		old := runtime.GOMAXPROCS(threads)
		for _, impl := range gemmAvailable(unsafe.Sizeof(T(0))) {
			withImpl[T](impl, func() {
				f := PackConvFilter(p, w)
				for _, b := range [][]T{nil, bias} {
					got, want := make([]T, p.YLen()), make([]T, p.YLen())
					f.Conv(x, b, got)
					Conv(p, x, w, b, want)
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%T %s threads %d bias %v: y[%d] = %v, Conv %v", T(0), impl.name, threads, b != nil, i, got[i], want[i])
						}
					}
					if b == nil {
						g64 := make([]float64, len(got))
						for i, v := range got {
							g64[i] = float64(v)
						}
						assertClose(t, fmt.Sprintf("%T %s", T(0), impl.name), g64, want64, 1e-4)
					}
				}
			})
		}
		runtime.GOMAXPROCS(old)
	}
}

// A filter packed for one micro-kernel and used while another is selected (tests switch
// them) reads the weights through Conv's own packing instead of slivers of the wrong shape.
func TestConvFilterOtherKernel(t *testing.T) {
	p := convFilterCases[0]
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	impls := gemmAvailable(4)
	r := rand.New(rand.NewPCG(5, 6))
	x, w := randSlice[float32](r, p.XLen()), randSlice[float32](r, p.WLen())
	var f *ConvFilter[float32]
	withImpl[float32](impls[len(impls)-1], func() { f = PackConvFilter(&p, w) })
	withImpl[float32](impls[0], func() {
		got, want := make([]float32, p.YLen()), make([]float32, p.YLen())
		f.Conv(x, nil, got)
		Conv(&p, x, w, nil, want)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("y[%d] = %v, Conv %v", i, got[i], want[i])
			}
		}
	})
}
