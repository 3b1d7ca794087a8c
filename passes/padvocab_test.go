package passes

import (
	"strings"
	"testing"
)

// PaddedSize is Megatron's rule: unchanged when tp divides the vocabulary, else the next
// multiple of multiple·tp.
func TestPaddedSize(t *testing.T) {
	for _, c := range []struct{ v, tp, multiple, want int }{
		{50257, 1, 128, 50257},   // tp 1 never pads
		{50257, 8, 128, 51200},   // 400 × 128
		{50257, 5, 128, 50560},   // 79 × 640
		{50257, 8, 1, 50264},     // the next multiple of tp
		{50304, 8, 128, 50304},   // already divisible: left alone
		{509, 4, 128, 512},       // one multiple·tp block
		{509, 2, 1, 510},         // one row of padding
		{128256, 3, 128, 128256}, // Llama 3's 128,256 = 3 · 42,752: tp 3 divides it
	} {
		if got := PaddedSize(c.v, c.tp, c.multiple); got != c.want {
			t.Errorf("PaddedSize(%d, tp %d, multiple %d) = %d, want %d", c.v, c.tp, c.multiple, got, c.want)
		}
	}
}

// A multiple that is not a positive integer is the option's error, before the IR is read.
func TestPadVocabOption(t *testing.T) {
	const tied = `module @m attributes {mesh = {tp = 2}}

func @forward(%tokens: i64[2,4] {input}, %labels: i64[2,4] {input, label}, %wte: f32[13,8] {init = "normal(0.02)", param}) -> (f32[] {loss}) {
  %x = gather %wte, %tokens : f32[2,4,8]
  %logits = matmul %x, %wte {transpose_b = true} : f32[2,4,13]
  %loss = cross_entropy %logits, %labels : f32[]
  return %loss
}
`
	for _, bad := range []string{"0", "-8", "x"} {
		pl, err := ParsePipeline("pad-vocab{multiple=" + bad + "}")
		if err != nil {
			t.Fatal(err)
		}
		err = Run(mustParse(t, tied), pl, Config{NoReproducer: true})
		if err == nil || !strings.Contains(err.Error(), `option multiple="`+bad+`" must be a positive integer`) {
			t.Errorf("multiple=%s: %v", bad, err)
		}
	}
}
