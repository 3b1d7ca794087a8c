package cpu

import (
	"math"
	"testing"
)

// tkULP32 is the distance in float32 ulps between a and b (same sign assumed for finite values).
func tkULP32(a, b float32) int64 {
	if a == b {
		return 0
	}
	ia, ib := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if ia < 0x80000000 != (ib < 0x80000000) {
		return math.MaxInt32
	}
	d := ia - ib
	if d < 0 {
		d = -d
	}
	return d
}

func TestExp32Accuracy(t *testing.T) {
	r := tkRand(70)
	check := func(x float32) {
		got := Exp(x)
		want := float32(math.Exp(float64(x)))
		if u := tkULP32(got, want); u > 1 {
			t.Fatalf("Exp(%v) = %v, want %v (%d ulp)", x, got, want, u)
		}
	}
	for i := 0; i <= 400000; i++ {
		check(float32(-104 + 193*float64(i)/400000))
	}
	for range 200000 {
		check(float32((r.Float64() - 0.5) * 40))
		check(float32((r.Float64() - 0.5) * 1e-6))
	}
	for _, x := range []float32{0, -0, 88.72283, 88.7229, 89, 1e30, -103.9, -104, -1e30} {
		check(x)
	}
	if Exp(float32(math.Inf(1))) != float32(math.Inf(1)) || Exp(float32(math.Inf(-1))) != 0 || !math.IsNaN(float64(Exp(float32(math.NaN())))) {
		t.Fatal("Exp special values")
	}
	if Exp(1.0) != math.E {
		t.Fatalf("Exp[float64](1) = %v", Exp(1.0))
	}
}

type tkUnaryCase struct {
	name string
	f    func(float64) float64
	g    func(float64) float64 // derivative
	f32  func(float32) float32
	ref  func(float64) float64 // independent formula, valid on [lo, hi]
	lo   float64
	hi   float64
}

func tkUnaryCases() []tkUnaryCase {
	const a = 0.375 // parameters exactly representable in float32
	return []tkUnaryCase{
		{"erf", Erf[float64], ErfGrad[float64], Erf[float32], math.Erf, -5, 5},
		{"tanh", Tanh[float64], TanhGrad[float64], Tanh[float32], math.Tanh, -5, 5},
		{"sigmoid", Sigmoid[float64], SigmoidGrad[float64], Sigmoid[float32], func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }, -30, 30},
		{"gelu", Gelu[float64], GeluGrad[float64], Gelu[float32], func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }, -2, 8},
		{"gelu_tanh", GeluTanh[float64], GeluTanhGrad[float64], GeluTanh[float32], func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}, -2, 8},
		{"silu", Silu[float64], SiluGrad[float64], Silu[float32], func(x float64) float64 { return x / (1 + math.Exp(-x)) }, -20, 20},
		{"softplus", Softplus[float64], SoftplusGrad[float64], Softplus[float32], func(x float64) float64 { return math.Log(1 + math.Exp(x)) }, -20, 20},
		{"softsign", Softsign[float64], SoftsignGrad[float64], Softsign[float32], func(x float64) float64 { return x / (1 + math.Abs(x)) }, -20, 20},
		{"elu", func(x float64) float64 { return Elu(x, a) }, func(x float64) float64 { return EluGrad(x, a) },
			func(x float32) float32 { return Elu(x, a) }, func(x float64) float64 {
				if x > 0 {
					return x
				}
				return a * (math.Exp(x) - 1)
			}, -20, 20},
		{"selu", Selu[float64], SeluGrad[float64], Selu[float32], func(x float64) float64 {
			// ONNX defaults: the float32 roundings of Klambauer et al.'s constants
			const alpha, gamma = 1.67326319217681884765625, 1.05070102214813232421875
			if x > 0 {
				return gamma * x
			}
			return gamma * (alpha*math.Exp(x) - alpha)
		}, -20, 20},
		{"celu", func(x float64) float64 { return Celu(x, 2.0) }, func(x float64) float64 { return CeluGrad(x, 2.0) },
			func(x float32) float32 { return Celu(x, 2) }, func(x float64) float64 {
				return math.Max(0, x) + math.Min(0, 2*(math.Exp(x/2)-1))
			}, -20, 20},
		{"leaky_relu", func(x float64) float64 { return LeakyRelu(x, 0.0625) }, func(x float64) float64 { return LeakyReluGrad(x, 0.0625) },
			func(x float32) float32 { return LeakyRelu(x, 0.0625) }, func(x float64) float64 { return math.Max(x, 0.0625*x) }, -20, 20},
		{"relu", Relu[float64], ReluGrad[float64], Relu[float32], func(x float64) float64 { return math.Max(x, 0) }, -20, 20},
		{"hard_sigmoid", func(x float64) float64 { return HardSigmoid(x, 0.25, 0.5) }, func(x float64) float64 { return HardSigmoidGrad(x, 0.25, 0.5) },
			func(x float32) float32 { return HardSigmoid(x, 0.25, 0.5) }, func(x float64) float64 { return math.Max(0, math.Min(1, 0.25*x+0.5)) }, -20, 20},
		{"hard_swish", HardSwish[float64], HardSwishGrad[float64], HardSwish[float32], func(x float64) float64 {
			return x * math.Max(0, math.Min(1, x/6+0.5))
		}, -20, 20},
		{"mish", Mish[float64], MishGrad[float64], Mish[float32], func(x float64) float64 { return x * math.Tanh(math.Log(1+math.Exp(x))) }, -20, 20},
		{"thresholded_relu", func(x float64) float64 { return ThresholdedRelu(x, 1.0) }, func(x float64) float64 { return ThresholdedReluGrad(x, 1.0) },
			func(x float32) float32 { return ThresholdedRelu(x, 1) }, func(x float64) float64 {
				if x > 1 {
					return x
				}
				return 0
			}, -20, 20},
	}
}

func TestUnaryFunctions(t *testing.T) {
	kinks := []float64{0, 1, -3, 3, -2, 2}
	nearKink := func(x float64) bool {
		for _, k := range kinks {
			if math.Abs(x-k) < 1e-3 {
				return true
			}
		}
		return false
	}
	for _, c := range tkUnaryCases() {
		for i := 0; i <= 2000; i++ {
			x := c.lo + (c.hi-c.lo)*float64(i)/2000 + 1e-7
			got, want := c.f(x), c.ref(x)
			if math.Abs(got-want) > 1e-13*math.Max(1, math.Abs(want)) {
				t.Fatalf("%s(%v) = %v, want %v", c.name, x, got, want)
			}
			// float32 within 1 ulp of the rounded float64 value
			x32 := float32(x)
			if u := tkULP32(c.f32(x32), float32(c.f(float64(x32)))); u > 1 {
				t.Fatalf("%s[float32](%v) = %v, want %v", c.name, x32, c.f32(x32), float32(c.f(float64(x32))))
			}
			if nearKink(x) {
				continue
			}
			h := 1e-6 * math.Max(1, math.Abs(x))
			fd := (c.f(x+h) - c.f(x-h)) / (2 * h)
			if g := c.g(x); math.Abs(g-fd) > 1e-6*math.Max(1, math.Abs(fd)) {
				t.Fatalf("%sGrad(%v) = %v, finite difference %v", c.name, x, g, fd)
			}
		}
	}
}

func TestUnaryStability(t *testing.T) {
	for _, x := range []float64{-1e4, -800, -40, 40, 800, 1e4} {
		for _, c := range tkUnaryCases() {
			if v, g := c.f(x), c.g(x); math.IsNaN(v) || math.IsNaN(g) || math.IsInf(g, 0) {
				t.Errorf("%s(%v) = %v, grad %v", c.name, x, v, g)
			}
		}
	}
	if Sigmoid(-800.0) != 0 || Sigmoid(800.0) != 1 || Softplus(800.0) != 800 || Softplus(-800.0) != 0 {
		t.Error("sigmoid/softplus saturation")
	}
	// relative accuracy in the far negative tail (no cancellation)
	if g, want := Gelu(-10.0), -10*0.5*math.Erfc(10/math.Sqrt2); math.Abs(g-want) > 1e-13*math.Abs(want) || g == 0 {
		t.Errorf("Gelu(-10) = %v, want %v", g, want)
	}
	// reference values (scipy / PyTorch)
	for _, c := range []struct{ got, want float64 }{
		{Gelu(1.0), 0.8413447460685429},
		{GeluTanh(1.0), 0.8411919906082768},
		{Erf(0.5), 0.5204998778130465},
		{Silu(1.0), 0.7310585786300049},
		{Mish(1.0), 0.8650983882673103},
		{Selu(-1.0), 1.05070102214813232421875 * 1.67326319217681884765625 * (math.Exp(-1) - 1)},
	} {
		if math.Abs(c.got-c.want) > 1e-15 {
			t.Errorf("got %v, want %v", c.got, c.want)
		}
	}
}

func TestUnaryApply(t *testing.T) {
	r := tkRand(71)
	x := tkNormals(r, 100003)
	y := make([]float64, len(x))
	Unary(Gelu[float64], x, y)
	dy := tkNormals(r, len(x))
	dx := make([]float64, len(x))
	UnaryGrad(GeluGrad[float64], x, dy, dx)
	b := make([]bool, len(x))
	UnaryTo(func(v float64) bool { return v > 0 }, x, b)
	for i, v := range x {
		if y[i] != Gelu(v) || dx[i] != dy[i]*GeluGrad(v) || b[i] != (v > 0) {
			t.Fatalf("element %d", i)
		}
	}
	Unary(Relu[float64], x, x) // in place
	for i, v := range x {
		if v < 0 {
			t.Fatalf("in-place Relu element %d = %v", i, v)
		}
	}
}

func BenchmarkExp32(b *testing.B) {
	x := tkTo32(tkNormals(tkRand(72), 4096))
	y := make([]float32, len(x))
	b.SetBytes(int64(8 * len(x)))
	for b.Loop() {
		for i, v := range x {
			y[i] = Exp(v)
		}
	}
}
