package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	k "ppc.dev/ppc/kernels/cpu"
)

// sameRounding reports whether got has the bits of want (any NaN matches any NaN).
func sameRounding(got, want float32) bool {
	return math.Float32bits(got) == math.Float32bits(want) || (got != got && want != want)
}

// specialF32 are inputs at the edges: zeros, subnormals, infinities, NaN, the ends of the
// fast range and the pieces' boundaries with their neighbours.
func specialF32() []float32 {
	s := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -1e-45, 1e-38, -1e-38, 3e38, -3e38,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	for p := 0; p <= geluPieces; p++ {
		x := float32(geluLo + float64(p)*(geluHi-geluLo)/geluPieces)
		for d := int32(-2); d <= 2; d++ {
			s = append(s, math.Float32frombits(uint32(int32(math.Float32bits(x))+d)))
		}
	}
	return s
}

// randF32 draws inputs of every kind: normal activations, log-uniform magnitudes down to
// subnormals, and arbitrary bit patterns.
func randF32(r *rand.Rand) float32 {
	switch r.IntN(3) {
	case 0:
		return float32(r.NormFloat64() * 2)
	case 1:
		return float32(math.Copysign(math.Ldexp(1+r.Float64(), 2-r.IntN(152)), r.NormFloat64()))
	}
	return math.Float32frombits(r.Uint32())
}

func TestGeluRounded(t *testing.T) {
	geluOnce.Do(initGeluPolys)
	r := rand.New(rand.NewPCG(61, 62))
	check := func(x float32) {
		got, want := float32(geluRounded(float64(x))), float32(k.Gelu(float64(x)))
		if !sameRounding(got, want) {
			t.Fatalf("gelu(%v): fast %v, exact %v", x, got, want)
		}
	}
	for _, x := range specialF32() {
		check(x)
	}
	for i := 0; i < 1<<20; i++ {
		check(randF32(r))
	}
	// The engine step agrees with geluRounded.
	xs := make([]float64, 4096)
	for i := range xs {
		xs[i] = float64(randF32(r))
	}
	dst := make([]float64, len(xs))
	geluF32(dst, [][]float64{xs})
	for i, x := range xs {
		if math.Float64bits(dst[i]) != math.Float64bits(geluRounded(x)) && dst[i] == dst[i] {
			t.Fatalf("geluF32(%v) = %v, geluRounded %v", x, dst[i], geluRounded(x))
		}
	}
}

func TestGeluGradRounded(t *testing.T) {
	geluOnce.Do(initGeluPolys)
	r := rand.New(rand.NewPCG(63, 64))
	check := func(x, dy float32) {
		got := float32(geluGradRounded(float64(x), float64(dy)))
		want := float32(float64(dy) * k.GeluGrad(float64(x)))
		if !sameRounding(got, want) {
			t.Fatalf("gelu_grad(%v, %v): fast %v, exact %v", x, dy, got, want)
		}
	}
	sp := specialF32()
	for _, x := range sp {
		for _, dy := range sp {
			check(x, dy)
		}
	}
	for i := 0; i < 1<<20; i++ {
		check(randF32(r), randF32(r))
	}
	// Near gelu'(x) = 0 (x ≈ −0.7518) the f32 result is tiny: the absolute bound still decides.
	for i := 0; i < 1<<16; i++ {
		check(float32(-0.7518+1e-4*r.NormFloat64()), randF32(r))
	}
}

// TestGeluPolyBoundsExhaustive checks, for every f32 input, that fast gelu equals the exact
// one rounded to f32 and that the gelu' interpolant stays within its error bound (which makes
// geluGradRounded exact for every dy). It takes a few minutes of CPU: set PPC_EXHAUSTIVE=1.
func TestGeluPolyBoundsExhaustive(t *testing.T) {
	if os.Getenv("PPC_EXHAUSTIVE") == "" {
		t.Skip("set PPC_EXHAUSTIVE=1 to check every f32 input")
	}
	geluOnce.Do(initGeluPolys)
	workers := runtime.GOMAXPROCS(0)
	const total = 1 << 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			lo := uint64(w) * total / uint64(workers)
			hi := uint64(w+1) * total / uint64(workers)
			for b := lo; b < hi; b++ {
				x := math.Float32frombits(uint32(b))
				xd := float64(x)
				if got, want := float32(geluRounded(xd)), float32(k.Gelu(xd)); !sameRounding(got, want) {
					mu.Lock()
					errs = append(errs, fmt.Sprint("gelu mismatch at ", x))
					mu.Unlock()
				}
				if xd >= geluLo && xd < geluHi {
					gp := geluPiece(&geluDeriv, xd)
					if math.Abs(gp.eval(xd)-k.GeluGrad(xd)) > gp.err {
						mu.Lock()
						errs = append(errs, fmt.Sprint("gelu' bound exceeded at ", x))
						mu.Unlock()
					}
				}
			}
		}(w)
	}
	wg.Wait()
	for i, e := range errs {
		if i == 10 {
			break
		}
		t.Error(e)
	}
	if len(errs) > 0 {
		t.Fatalf("%d failures", len(errs))
	}
}
