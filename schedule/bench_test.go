package schedule

import "testing"

func BenchmarkGenerate1F1B(b *testing.B) {
	for b.Loop() {
		if _, err := Generate("1f1b", 8, 32, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSimulate(b *testing.B) {
	s, err := Generate("interleaved-1f1b", 8, 64, 4)
	if err != nil {
		b.Fatal(err)
	}
	c := UnitCost()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Simulate(s, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	s, err := Generate("dualpipev", 8, 64, 0)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := Validate(s); err != nil {
			b.Fatal(err)
		}
	}
}
