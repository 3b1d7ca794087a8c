package ir

import (
	"strconv"
	"strings"
	"testing"
)

// bigModule returns the text of a function with n ops: a transformer-like mix of matmuls,
// elementwise ops, reshapes and reductions with annotations.
func bigModule(n int) string {
	var b strings.Builder
	b.WriteString("module @big attributes {mesh = {pp = 8, tp = 8}}\n\nfunc @f(%x: f32[16,64] {input}, %w: f32[64,64] {init = \"normal(0.02)\", param}) -> (f32[16,64]) {\n")
	prev := "%x"
	for i := 0; i < n; i++ {
		name := "%" + strconv.Itoa(i)
		stage := strconv.Itoa(i * 8 / n)
		switch i % 5 {
		case 0:
			b.WriteString("  " + name + " = matmul " + prev + ", %w : f32[16,64] {stage = " + stage + ", shard = [_, tp], phase = fwd}\n")
		case 1:
			b.WriteString("  " + name + " = add " + prev + ", %x : f32[16,64] {stage = " + stage + "}\n")
		case 2:
			b.WriteString("  " + name + " = gelu " + prev + " {approximate = tanh} : f32[16,64] {stage = " + stage + "}\n")
		case 3:
			b.WriteString("  " + name + " = reshape " + prev + " {shape = [16, 8, 8]} : f32[16,8,8] {stage = " + stage + "}\n")
		case 4:
			b.WriteString("  " + name + " = reshape " + prev + " {shape = [16, 64]} : f32[16,64] {stage = " + stage + "}\n")
		}
		prev = name
	}
	b.WriteString("  return " + prev + "\n}\n")
	return b.String()
}

// BenchmarkParseVerifyPrint100k measures the budget: parse, verify and print a module
// of 100,000 ops (must stay under 1 s).
func BenchmarkParseVerifyPrint100k(b *testing.B) {
	src := bigModule(100000)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := Parse("big.ir", src)
		if err != nil {
			b.Fatal(err)
		}
		if err := Verify(m); err != nil {
			b.Fatal(err)
		}
		if out := m.String(); len(out) != len(src) {
			b.Fatalf("printed %d bytes, parsed %d", len(out), len(src))
		}
	}
}

func BenchmarkParse100k(b *testing.B) {
	src := bigModule(100000)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Parse("big.ir", src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify100k(b *testing.B) {
	m, err := Parse("big.ir", bigModule(100000))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := Verify(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPrint100k(b *testing.B) {
	m, err := Parse("big.ir", bigModule(100000))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		_ = m.String()
	}
}

func TestBigModuleRoundTrip(t *testing.T) {
	src := bigModule(1000)
	m, err := ParseAndVerify("big.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	if m.String() != src {
		t.Fatal("big module does not print identically")
	}
}
