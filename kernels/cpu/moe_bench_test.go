package cpu

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkTopKRouter times a DeepSeek-V3 router's choice for one micro-batch of 4,096 tokens:
// top 8 of 256 sigmoid scores, plain and node-limited (8 groups, 4 kept: each group scored by
// its 2 best, then the 8 best of the 4 best groups' 128 experts).
func BenchmarkTopKRouter(b *testing.B) {
	const tokens, experts, k = 4096, 256, 8
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, tokens*experts)
	for i := range x {
		x[i] = r.Float32()
	}
	vals, idx := make([]float32, tokens*k), make([]int64, tokens*k)
	for _, c := range []struct {
		name       string
		groups, tg int
	}{{"plain", 1, 1}, {"groups8-keep4", 8, 4}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				TopKGrouped(x, tokens, experts, 1, k, c.groups, c.tg, true, vals, idx)
			}
		})
	}
}
