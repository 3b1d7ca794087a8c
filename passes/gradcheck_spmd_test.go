package passes

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

// Finite-difference checks of the collectives' gradient rules. A partitioned function runs on
// every rank of a tp axis in lockstep (spmdEval, below); the loss is the value every rank
// agrees on. A parameter sharded over tp is a different tensor on each rank, perturbed one
// rank at a time; a replicated one is one logical tensor, perturbed on every rank at once,
// and each rank's gradient must equal the finite difference. Types are f64 so that the
// finite differences are accurate.
var spmdGradCases = []struct {
	name, src string
	parts     int
}{
	{name: "megatron mlp (copy_to_axis, all_reduce)", parts: 2, src: `module @tp attributes {mesh = {tp = 2}, partitioned}

func @forward(%x: f64[4,6] {input}, %w0: f64[6,6] {param}, %w1: f64[6,4] {param, shard = [_, tp]}, %w2: f64[4,6] {param, shard = [tp, _]}) -> (f64[] {loss}) {
  %h0 = matmul %x, %w0 : f64[4,6]
  %c = copy_to_axis %h0 {axis = tp} : f64[4,6]
  %h = matmul %c, %w1 : f64[4,4]
  %a = tanh %h : f64[4,4]
  %p = matmul %a, %w2 : f64[4,6]
  %y = all_reduce %p {axis = tp} : f64[4,6]
  %t = tanh %y : f64[4,6]
  %loss = reduce_mean %t : f64[]
  return %loss
}
`},
	{name: "sequence parallel (all_gather, reduce_scatter)", parts: 3, src: `module @sp attributes {mesh = {tp = 3}, partitioned}

func @forward(%x: f64[2,5] {input, shard = [tp, _]}, %w0: f64[5,5] {param}, %w1: f64[5,4] {param, shard = [_, tp]}, %w2: f64[4,5] {param, shard = [tp, _]}) -> (f64[] {loss}) {
  %w0c = copy_to_axis %w0 {axis = tp} : f64[5,5]
  %h0 = matmul %x, %w0c : f64[2,5]
  %s0 = sin %h0 : f64[2,5]
  %g = all_gather %s0 {axis = tp, dim = 0, parts = 3} : f64[6,5]
  %h = matmul %g, %w1 : f64[6,4]
  %a = tanh %h : f64[6,4]
  %p = matmul %a, %w2 : f64[6,5]
  %y = reduce_scatter %p {axis = tp, dim = 0, parts = 3} : f64[2,5]
  %q = mul %y, %y : f64[2,5]
  %s = reduce_sum %q : f64[]
  %loss = all_reduce %s {axis = tp} : f64[]
  return %loss
}
`},
	{name: "gather and scatter on an inner dim", parts: 2, src: `module @inner attributes {mesh = {tp = 2}, partitioned}

func @forward(%w: f64[3,2] {param, shard = [_, tp]}) -> (f64[] {loss}) {
  %g = all_gather %w {axis = tp, dim = 1, parts = 2} : f64[3,4]
  %e = exp %g : f64[3,4]
  %r = reduce_scatter %e {axis = tp, dim = 1, parts = 2} : f64[3,2]
  %q = mul %r, %w : f64[3,2]
  %s = reduce_sum %q : f64[]
  %loss = all_reduce %s {axis = tp} : f64[]
  return %loss
}
`},
	{name: "gather into computation every rank repeats (all_gather grad = slice)", parts: 2, src: `module @whole attributes {mesh = {tp = 2}, partitioned}

func @forward(%w: f64[3,2] {param, shard = [_, tp]}) -> (f64[] {loss}) {
  %g = all_gather %w {axis = tp, dim = 1, grad = slice, parts = 2} : f64[3,4]
  %e = exp %g : f64[3,4]
  %q = mul %e, %g : f64[3,4]
  %loss = reduce_sum %q : f64[]
  return %loss
}
`},
}

func TestGradRulesCollectives(t *testing.T) {
	for _, c := range spmdGradCases {
		t.Run(c.name, func(t *testing.T) {
			m, err := ir.ParseAndVerify("spmd.ir", c.src)
			if err != nil {
				t.Fatal(err)
			}
			fwd := m.Clone().Func(ir.ForwardFunc)
			runGradPipeline(t, m, "autodiff")
			train := m.Func(TrainFunc)

			// Arguments: one tensor per rank; unsharded arguments hold the same values on
			// every rank.
			rng := rand.New(rand.NewPCG(11, uint64(len(c.name))))
			args := make([][]*ir.Dense, c.parts)
			for ai, a := range fwd.Args {
				sharded := fwd.ArgAttrs[ai].Has(ir.AttrShard)
				var v []float64
				for r := range c.parts {
					if r == 0 || sharded {
						v = make([]float64, a.Type.NumElements())
						for i := range v {
							v[i] = rng.Float64()*2 - 1
						}
					}
					args[r] = append(args[r], ir.NewDenseF64(a.Type, v))
				}
			}
			lossAt := func(args [][]*ir.Dense) float64 {
				out, err := spmdEval(fwd, args)
				if err != nil {
					t.Fatal(err)
				}
				for r := range out {
					if out[r][0].F64(0) != out[0][0].F64(0) {
						t.Fatalf("rank %d's loss %v differs from rank 0's %v", r, out[r][0].F64(0), out[0][0].F64(0))
					}
				}
				return out[0][0].F64(0)
			}
			grads, err := spmdEval(train, args)
			if err != nil {
				t.Fatalf("%v\n%s", err, train)
			}
			const h = 1e-6
			gi := 0
			for ai, a := range fwd.Args {
				if !fwd.ArgAttrs[ai].Has(ir.AttrParam) {
					continue
				}
				gi++
				sharded := fwd.ArgAttrs[ai].Has(ir.AttrShard)
				for r := range c.parts {
					if !sharded && r > 0 {
						break // perturbed on every rank at once below
					}
					for e := range a.Type.NumElements() {
						shifted := func(delta float64) float64 {
							as := make([][]*ir.Dense, c.parts)
							for q := range c.parts {
								as[q] = slices.Clone(args[q])
								if q == r || !sharded {
									v := args[q][ai].Floats()
									v[e] += delta
									as[q][ai] = ir.NewDenseF64(a.Type, v)
								}
							}
							return lossAt(as)
						}
						fd := (shifted(h) - shifted(-h)) / (2 * h)
						ranks := []int{r}
						if !sharded {
							ranks = ranks[:0]
							for q := range c.parts {
								ranks = append(ranks, q)
							}
						}
						for _, q := range ranks {
							ad := grads[q][gi].F64(e)
							if diff := math.Abs(ad - fd); diff > 1e-8 && diff > 1e-6*math.Max(math.Abs(ad), math.Abs(fd)) {
								t.Errorf("rank %d: d loss/d %s[%d]: autodiff %.12g, finite difference %.12g", q, a.Name, e, ad, fd)
							}
						}
					}
				}
			}
			if t.Failed() {
				t.Logf("@train:\n%s", train)
			}
		})
	}
}

// spmdEval runs f on every rank of one mesh axis in lockstep: ordinary ops run per rank with
// the single-device evaluator; collectives combine the ranks' operands in rank order.
func spmdEval(f *ir.Func, args [][]*ir.Dense) ([][]*ir.Dense, error) {
	parts := len(args)
	env := make([]map[*ir.Value]*ir.Dense, parts)
	for r := range parts {
		env[r] = map[*ir.Value]*ir.Dense{}
		for i, a := range f.Args {
			env[r][a] = args[r][i]
		}
	}
	for _, op := range f.Ops {
		in := make([][]*ir.Dense, parts)
		for r := range parts {
			for _, x := range op.Operands {
				in[r] = append(in[r], env[r][x])
			}
		}
		var out [][]*ir.Dense
		if op.Name() == "stop_gradient" {
			for r := range parts {
				out = append(out, in[r])
			}
		} else if op.Def.Has(ir.Collective) {
			var err error
			if out, err = spmdCollective(op, in); err != nil {
				return nil, err
			}
		} else {
			for r := range parts {
				o, err := evalOp(op, in[r])
				if err != nil {
					return nil, fmt.Errorf("rank %d: %s: %v", r, op, err)
				}
				out = append(out, o)
			}
		}
		for r := range parts {
			for i, v := range op.Results {
				env[r][v] = out[r][i]
			}
		}
	}
	res := make([][]*ir.Dense, parts)
	for r := range parts {
		for _, v := range f.Results {
			res[r] = append(res[r], env[r][v])
		}
	}
	return res, nil
}

// spmdCollective is the reference semantics of the collectives, written independently of the
// runtime: sums in rank order, concatenation of rank blocks along dim.
func spmdCollective(op *ir.Op, in [][]*ir.Dense) ([][]*ir.Dense, error) {
	parts := len(in)
	t := op.Results[0].Type
	out := make([][]*ir.Dense, parts)
	sum := func() []float64 {
		s := make([]float64, in[0][0].Len())
		for r := range parts {
			for i, v := range in[r][0].Floats() {
				if op.Attrs.Str("op", "sum") == "max" {
					if r == 0 || v > s[i] {
						s[i] = v
					}
				} else {
					s[i] += v
				}
			}
		}
		return s
	}
	// block maps element i of a rank's block (shape small) along dim to the full tensor's
	// element, for the block of rank r.
	block := func(full, small ir.Shape, dim, r, i int) int {
		c := make([]int, len(small))
		for d := len(small) - 1; d >= 0; d-- {
			c[d] = i % small[d]
			i /= small[d]
		}
		c[dim] += r * small[dim]
		k := 0
		for d := range full {
			k = k*full[d] + c[d]
		}
		return k
	}
	switch op.Name() {
	case "axis_index":
		for r := range parts {
			out[r] = []*ir.Dense{ir.NewDenseF64(t, []float64{float64(r)})}
		}
	case "copy_to_axis":
		for r := range parts {
			out[r] = []*ir.Dense{in[r][0]}
		}
	case "all_reduce":
		s := sum()
		for r := range parts {
			out[r] = []*ir.Dense{ir.NewDenseF64(t, s)}
		}
	case "all_gather":
		dim := op.Attrs.Int("dim", 0)
		full := make([]float64, t.NumElements())
		for r := range parts {
			for i, v := range in[r][0].Floats() {
				full[block(t.Shape, in[r][0].Type.Shape, dim, r, i)] = v
			}
		}
		for r := range parts {
			out[r] = []*ir.Dense{ir.NewDenseF64(t, full)}
		}
	case "reduce_scatter":
		dim := op.Attrs.Int("dim", 0)
		s := sum()
		for r := range parts {
			mine := make([]float64, t.NumElements())
			for i := range mine {
				mine[i] = s[block(in[r][0].Type.Shape, t.Shape, dim, r, i)]
			}
			out[r] = []*ir.Dense{ir.NewDenseF64(t, mine)}
		}
	default:
		return nil, fmt.Errorf("no SPMD evaluator for %s", op.Name())
	}
	return out, nil
}

// The collectives' rules count as covered for TestGradRulesAllChecked.
func spmdCovered() map[string]bool {
	covered := map[string]bool{"ring_attention": true} // TestCPGradients (cp_test.go)
	for _, c := range spmdGradCases {
		for _, line := range strings.Split(c.src, "\n") {
			if _, rhs, ok := strings.Cut(line, " = "); ok && strings.HasPrefix(line, "  %") {
				covered[strings.Fields(rhs)[0]] = true
			}
		}
	}
	return covered
}
