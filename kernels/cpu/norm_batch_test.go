package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestBatchNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	n, c, sp := 3, 4, 5
	const eps = 1e-5
	x := randSlice[float64](r, n*c*sp)
	for i := range x {
		x[i] = x[i]*2 + 0.5
	}
	scale, bias := randSlice[float64](r, c), randSlice[float64](r, c)
	mean, variance := randSlice[float64](r, c), randSlice[float64](r, c)
	for i := range variance {
		variance[i] = math.Abs(variance[i]) + 0.1
	}
	y := make([]float64, len(x))
	BatchNormInference(x, scale, bias, mean, variance, eps, n, c, sp, y, nil)
	for i, v := range x {
		ch := (i / sp) % c
		want := scale[ch]*(v-mean[ch])/math.Sqrt(variance[ch]+eps) + bias[ch]
		if math.Abs(y[i]-want) > 1e-12 {
			t.Fatalf("inference y[%d] = %v, want %v", i, y[i], want)
		}
	}
	y32 := make([]float32, len(x))
	BatchNormInference(toF32(x), toF32(scale), toF32(bias), toF32(mean), toF32(variance), eps, n, c, sp, y32, nil)
	assertClose(t, "inference f32", toF64(y32), y, 1e-5)

	bm, bv := make([]float64, c), make([]float64, c)
	BatchNormTraining(x, scale, bias, eps, n, c, sp, y, bm, bv)
	for ch := 0; ch < c; ch++ {
		var s, q float64
		for b := 0; b < n; b++ {
			for i := 0; i < sp; i++ {
				s += x[(b*c+ch)*sp+i]
			}
		}
		m := s / float64(n*sp)
		for b := 0; b < n; b++ {
			for i := 0; i < sp; i++ {
				d := x[(b*c+ch)*sp+i] - m
				q += d * d
			}
		}
		if math.Abs(bm[ch]-m) > 1e-14 || math.Abs(bv[ch]-q/float64(n*sp)) > 1e-14 {
			t.Fatalf("channel %d stats %v %v, want %v %v", ch, bm[ch], bv[ch], m, q/float64(n*sp))
		}
	}
	rm, rv := []float64{1, 2, 3, 4}, []float64{1, 1, 1, 1}
	BatchNormRunningUpdate(rm, rv, bm, bv, 0.9)
	if want := 0.9*1 + 0.1*bm[0]; math.Abs(rm[0]-want) > 1e-15 {
		t.Errorf("running mean %v, want %v", rm[0], want)
	}

	// Backward against central differences of L = Σ y·dy for x, scale and bias.
	dy := randSlice[float64](r, len(x))
	dx, dscale, dbias := make([]float64, len(x)), make([]float64, c), make([]float64, c)
	BatchNormBackward(x, dy, scale, bm, bv, eps, n, c, sp, dx, dscale, dbias)
	fwd := func(out []float64) {
		m, v := make([]float64, c), make([]float64, c)
		BatchNormTraining(x, scale, bias, eps, n, c, sp, out, m, v)
	}
	checkFD(t, "bn dx", x, dx, dy, fwd, len(x))
	checkFD(t, "bn dscale", scale, dscale, dy, fwd, len(x))
	checkFD(t, "bn dbias", bias, dbias, dy, fwd, len(x))
}
