package cpu

import (
	"hash/fnv"
	"math"
	"slices"
	"testing"
)

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (tests/kat_vectors):
// counter (4 words), key (2 words) -> output (4 words).
func TestPhiloxKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, [2]uint32{0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		if got := Philox4x32(c.ctr, c.key); got != c.want {
			t.Errorf("Philox4x32(%08x, %08x) = %08x, want %08x", c.ctr, c.key, got, c.want)
		}
	}
}

func TestKeyFor(t *testing.T) {
	for _, s := range []string{"", "a", "layer.0.weight", "embed.weight"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if fnv1a64(s) != h.Sum64() {
			t.Fatalf("fnv1a64(%q) differs from hash/fnv", s)
		}
	}
	// Pinned values: part of the checkpoint-compatibility contract. If this fails, every
	// initial weight of every model changed.
	pinned := []struct {
		seed uint64
		name string
		want [2]uint32
	}{
		{0, "", [2]uint32{0xfa77f14c, 0x5b21f68f}},
		{42, "layer.0.weight", [2]uint32{0xc8eb2ebd, 0xd9234199}},
		{1, "embed.weight", [2]uint32{0x6626a37c, 0x5b9c4df7}},
	}
	for _, c := range pinned {
		if got := KeyFor(c.seed, c.name); got != c.want {
			t.Errorf("KeyFor(%d, %q) = %#08x, pinned %#08x", c.seed, c.name, got, c.want)
		}
	}
	seen := map[[2]uint32]bool{}
	for seed := uint64(0); seed < 50; seed++ {
		for _, name := range []string{"w", "b", "w1", "layer.0.weight", "layer.1.weight"} {
			k := KeyFor(seed, name)
			if seen[k] {
				t.Fatalf("key collision at seed %d name %q", seed, name)
			}
			seen[k] = true
		}
	}
	// Pinned first samples of the normal stream (values from an independent implementation of
	// the contract; libm differences allow an ulp or two).
	x := make([]float64, 4)
	FillNormal(x, KeyFor(42, "layer.0.weight"), 0, 0, 1)
	tkCheck(t, "pinned normals", x, []float64{-0.7312301240974542, 0.6189112922852128, 0.8068708615026274, 1.84250516296111}, 1e-15, 0)
	for i, v := range x {
		if v != NormalAt(KeyFor(42, "layer.0.weight"), uint64(i)) {
			t.Fatal("FillNormal differs from NormalAt")
		}
	}
}

func TestFillNormalStatistics(t *testing.T) {
	const n = 1000000
	x := make([]float32, n)
	FillNormal(x, KeyFor(7, "stats"), 0, 0, 1)
	var s, s2, s3, s4 float64
	tail := 0
	for _, v := range x {
		d := float64(v)
		s += d
		s2 += d * d
		s3 += d * d * d
		s4 += d * d * d * d
		if math.Abs(d) > 3 {
			tail++
		}
	}
	mean := s / n
	std := math.Sqrt(s2/n - mean*mean)
	// standard errors: mean 1e-3, std 7e-4, skew 2.4e-3, kurtosis 4.9e-3; allow ~5σ
	if math.Abs(mean) > 5e-3 || math.Abs(std-1) > 4e-3 || math.Abs(s3/n) > 1.5e-2 || math.Abs(s4/n-3) > 3e-2 {
		t.Fatalf("normal moments: mean %v std %v m3 %v m4 %v", mean, std, s3/n, s4/n)
	}
	// P(|z| > 3) = 0.0026998
	if p := float64(tail) / n; math.Abs(p-0.0026998) > 5*math.Sqrt(0.0027/n) {
		t.Fatalf("tail fraction %v", p)
	}
	y := make([]float64, 100000)
	FillNormal(y, KeyFor(7, "stats2"), 0, 3, 0.5)
	m := 0.0
	for _, v := range y {
		m += v
	}
	if m /= float64(len(y)); math.Abs(m-3) > 0.01 {
		t.Fatalf("mean with offset = %v", m)
	}
}

func TestRNGShardInvariance(t *testing.T) {
	key := KeyFor(3, "w")
	const n = 10007
	const off = 1 << 33 // counters above 2^32 use the second counter word
	whole := make([]float32, n)
	FillNormal(whole, key, off, 0.1, 2)
	for _, r := range [][2]int{{0, 1}, {5, 6}, {100, 5000}, {101, 5000}, {100, 5001}, {4096, n}, {n - 1, n}, {0, n}} {
		part := make([]float32, r[1]-r[0])
		FillNormal(part, key, off+uint64(r[0]), 0.1, 2)
		if !slices.Equal(part, whole[r[0]:r[1]]) {
			t.Fatalf("slice %v differs from the whole tensor's", r)
		}
	}
	u := make([]float64, n)
	FillUniform(u, key, off, -1, 1)
	up := make([]float64, 10)
	FillUniform(up, key, off+500, -1, 1)
	if !slices.Equal(up, u[500:510]) {
		t.Fatal("uniform slice differs")
	}
	tkSameBits(t, "FillNormal", func() []float32 { FillNormal(whole, key, off, 0.1, 2); return whole })
	if KeyFor(3, "w") == KeyFor(3, "w2") || KeyFor(3, "w") == KeyFor(4, "w") {
		t.Fatal("keys do not depend on seed and name")
	}
}

func TestFillUniformAndTrunc(t *testing.T) {
	const n = 200000
	u := make([]float32, n)
	FillUniform(u, KeyFor(1, "u"), 0, 2, 3)
	s := 0.0
	for _, v := range u {
		if v < 2 || v >= 3 {
			t.Fatalf("uniform sample %v outside [2, 3)", v)
		}
		s += float64(v)
	}
	if m := s / n; math.Abs(m-2.5) > 0.005 {
		t.Fatalf("uniform mean %v", m)
	}
	// a narrow range where rounding to float32 could hit hi
	FillUniform(u, KeyFor(1, "narrow"), 0, 1, math.Nextafter32(1, 2))
	for _, v := range u {
		if v != 1 {
			t.Fatalf("narrow uniform gave %v", v)
		}
	}
	tr := make([]float64, n)
	FillTruncNormal(tr, KeyFor(1, "t"), 0, 0, 1, -2, 2)
	var m, m2 float64
	for _, v := range tr {
		if v < -2 || v > 2 {
			t.Fatalf("truncated normal sample %v outside [-2, 2]", v)
		}
		m += v
		m2 += v * v
	}
	// variance of N(0,1) truncated to ±2: 1 − 2·2·φ(2)/(Φ(2)−Φ(−2)) = 0.773741
	if m /= n; math.Abs(m) > 0.01 || math.Abs(m2/n-0.773741) > 0.01 {
		t.Fatalf("truncated normal mean %v var %v", m, m2/n)
	}
	mask := make([]bool, n)
	FillBernoulli(mask, KeyFor(1, "drop"), 0, 0.9)
	kept := 0
	for _, b := range mask {
		if b {
			kept++
		}
	}
	if p := float64(kept) / n; math.Abs(p-0.9) > 0.005 {
		t.Fatalf("bernoulli rate %v", p)
	}
}

func BenchmarkFillNormal(b *testing.B) {
	x := make([]float32, 1<<20)
	key := KeyFor(1, "bench")
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		FillNormal(x, key, 0, 0, 1)
	}
}
