package compiler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// denseModel is a DenseNet-like block on [channels, positions] features: each layer
// concatenates every feature before it (torchvision's export), then a chain of two-operand
// concatenations (the other way to write one). CAT(…) is the concatenation over channels.
const denseModel = `model dense

input x: f32[8, 16]
label y: i64[16] in [0, 4)

block layer(c, out) {
  param w: f32[out, dim(c, 0)] = normal(0.2)
  return relu(w @ c)
}

forward {
  x0 = layer(x, 16) as l0
  f1 = layer(x0, 16) as l1
  f2 = layer(CAT(x0, f1), 16) as l2
  c3 = CAT(x0, f1, f2)
  f3 = layer(c3, 16) as l3
  c4 = CAT(c3, f3)
  f4 = layer(c4, 16) as l4
  c5 = CAT(c4, f4)
  param wh: f32[4, dim(c5, 0)] = normal(0.2)
  loss cross_entropy(transpose(wh @ c5), y)
}
`

// A concatenation over channels whose operands are written once is a view: each operand
// written in place into its range of the result, the concatenation gone (DenseNet's blocks,
// codegen's aliasConcats). Training with the views is bit for bit training with copies: the
// same model with each concatenation taken over the other dim between two transposes (not
// consecutive bytes, so copied) gives the same losses and parameters after three steps.
func TestConcatViewsTrainLikeCopies(t *testing.T) {
	dir := t.TempDir()
	write := func(name, cat string) string {
		src := denseModel
		for {
			i := strings.Index(src, "CAT(")
			if i < 0 {
				break
			}
			j := i + strings.Index(src[i:], ")")
			args := strings.Split(src[i+4:j], ", ")
			var repl string
			if cat == "view" {
				repl = "concat(" + strings.Join(args, ", ") + ", axis = 0)"
			} else {
				for k := range args {
					args[k] = "transpose(" + args[k] + ")"
				}
				repl = "transpose(concat(" + strings.Join(args, ", ") + ", axis = 1))"
			}
			src = src[:i] + repl + src[j+1:]
		}
		path := filepath.Join(dir, name+".ppm")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	views, copies := write("views", "view"), write("copies", "copy")
	res, err := Compile(views, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Output.Programs {
		for _, in := range p.Instrs {
			if in.Kind.String() == "LAUNCH" && p.Kernels[in.Kernel].Op == "concat" {
				t.Errorf("a program still launches a concat: %v", in)
			}
		}
	}
	refL, ref := trainRun(t, copies, Options{}, 3)
	gotL, got := trainRun(t, views, Options{}, 3)
	sameTraining(t, "concatenations as views", refL, gotL, ref, got)
}
