package schedule

import (
	"fmt"
	"testing"
)

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

// BenchmarkZBAuto builds zb-auto on the Zero Bubble paper's 6.2B costs at 2p micro-batches
// in flight (its ZB-2p setting), for p = 8, m = 24 and p = 16, m = 64.
func BenchmarkZBAuto(b *testing.B) {
	for _, pm := range []struct{ p, m int }{{8, 24}, {16, 64}} {
		b.Run(fmt.Sprintf("p%d-m%d", pm.p, pm.m), func(b *testing.B) {
			c := paperModels[1].cost()
			for b.Loop() {
				if _, err := ZBAuto(pm.p, pm.m, c, 2*pm.p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
