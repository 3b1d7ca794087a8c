package passes

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ppc.dev/ppc/ir"
)

// cpGradModel is a one-layer attention model in f64 whose every ingredient context
// parallelism rewrites: a data input read whole and gathered at the rank's positions, a
// learned position table gathered where it meets the sequence, grouped-query attention made a
// ring (4 query heads over 2 kv heads), and a mean loss summed over cp.
const cpGradModel = `module @cp attributes {mesh = {cp = %d}}

func @forward(%%x: f64[2,8,4] {input}, %%pos: f64[8,4] {param}, %%wq: f64[4,8] {param}, %%wk: f64[4,4] {param}, %%wv: f64[4,4] {param}) -> (f64[] {loss}) {
  %%h = add %%x, %%pos : f64[2,8,4]
  %%q0 = matmul %%h, %%wq : f64[2,8,8]
  %%q1 = reshape %%q0 {shape = [2, 8, 4, 2]} : f64[2,8,4,2]
  %%q = transpose %%q1 {perm = [0, 2, 1, 3]} : f64[2,4,8,2]
  %%k0 = matmul %%h, %%wk : f64[2,8,4]
  %%k1 = reshape %%k0 {shape = [2, 8, 2, 2]} : f64[2,8,2,2]
  %%k = transpose %%k1 {perm = [0, 2, 1, 3]} : f64[2,2,8,2]
  %%v0 = matmul %%h, %%wv : f64[2,8,4]
  %%v1 = reshape %%v0 {shape = [2, 8, 2, 2]} : f64[2,8,2,2]
  %%v = transpose %%v1 {perm = [0, 2, 1, 3]} : f64[2,2,8,2]
  %%o, %%lse = attention %%q, %%k, %%v {causal = %t} : f64[2,4,8,2], f64[2,4,8,1]
  %%t = tanh %%o : f64[2,4,8,2]
  %%loss = reduce_mean %%t : f64[]
  return %%loss
}
`

// TestCPGradients checks context parallelism at the IR level, for every layout (cp 2 and 4,
// zigzag and contiguous, causal and not): cp-partition, autodiff and ring-attention turn the
// model into one rank's @train; run on every cp rank in lockstep (ring_send/ring_recv as
// FIFO links to the next rank), each rank's loss must be the one-device model's and the sum
// of the ranks' gradients of each (replicated) parameter its finite difference.
func TestCPGradients(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, split := range []string{CPZigzag, CPContiguous} {
			for _, causal := range []bool{true, false} {
				t.Run(fmt.Sprintf("cp%d-%s-causal=%t", n, split, causal), func(t *testing.T) {
					src := fmt.Sprintf(cpGradModel, n, causal)
					one, err := ir.ParseAndVerify("cp.ir", src)
					if err != nil {
						t.Fatal(err)
					}
					m := one.Clone()
					runGradPipeline(t, m, fmt.Sprintf("cp-partition{size=%d,split=%s},autodiff,ring-attention", n, split))
					train := m.Func(TrainFunc)
					fwd := one.Func(ir.ForwardFunc)
					rng := rand.New(rand.NewPCG(3, uint64(n)))
					var args []*ir.Dense
					for _, a := range fwd.Args {
						v := make([]float64, a.Type.NumElements())
						for i := range v {
							v[i] = rng.Float64()*2 - 1
						}
						args = append(args, ir.NewDenseF64(a.Type, v))
					}
					lossAt := func(args []*ir.Dense) float64 {
						out, err := evalFunc(fwd, args)
						if err != nil {
							t.Fatal(err)
						}
						return out[0].F64(0)
					}
					rankArgs := make([][]*ir.Dense, n)
					for r := range rankArgs {
						rankArgs[r] = args
					}
					outs, err := cpEval(train, rankArgs)
					if err != nil {
						t.Fatalf("%v\n%s", err, train)
					}
					want := lossAt(args)
					for r := range n {
						if got := outs[r][0].F64(0); math.Abs(got-want) > 1e-12 {
							t.Errorf("rank %d: loss %.15g, one device %.15g", r, got, want)
						}
					}
					const h = 1e-6
					gi := 0
					for ai, a := range fwd.Args {
						if !fwd.ArgAttrs[ai].Has(ir.AttrParam) {
							continue
						}
						gi++
						for e := range a.Type.NumElements() {
							shifted := func(d float64) float64 {
								as := slices.Clone(args)
								v := args[ai].Floats()
								v[e] += d
								as[ai] = ir.NewDenseF64(a.Type, v)
								return lossAt(as)
							}
							fd := (shifted(h) - shifted(-h)) / (2 * h)
							ad := 0.0
							for r := range n {
								ad += outs[r][gi].F64(e)
							}
							if diff := math.Abs(ad - fd); diff > 1e-8 && diff > 1e-6*math.Max(math.Abs(ad), math.Abs(fd)) {
								t.Errorf("d loss/d %s[%d]: Σ over cp ranks %.12g, finite difference %.12g", a.Name, e, ad, fd)
							}
						}
					}
				})
			}
		}
	}
}

// cpEval runs f on every rank of the cp ring in lockstep: spmdEval's collectives, and
// ring_send/ring_recv as one FIFO link from each rank to the next.
func cpEval(f *ir.Func, args [][]*ir.Dense) ([][]*ir.Dense, error) {
	parts := len(args)
	env := make([]map[*ir.Value]*ir.Dense, parts)
	for r := range parts {
		env[r] = map[*ir.Value]*ir.Dense{}
		for i, a := range f.Args {
			env[r][a] = args[r][i]
		}
	}
	links := make([][]*ir.Dense, parts) // links[r]: sent by r to r+1, not yet received
	for _, op := range f.Ops {
		in := make([][]*ir.Dense, parts)
		for r := range parts {
			for _, x := range op.Operands {
				in[r] = append(in[r], env[r][x])
			}
		}
		out := make([][]*ir.Dense, parts)
		switch {
		case op.Name() == "ring_send":
			for r := range parts {
				links[r] = append(links[r], in[r][0])
			}
			continue
		case op.Name() == "ring_recv":
			for r := range parts {
				from := (r + parts - 1) % parts
				if len(links[from]) == 0 {
					return nil, fmt.Errorf("rank %d: ring_recv with nothing sent", r)
				}
				if !links[from][0].Type.Equal(op.Results[0].Type) {
					return nil, fmt.Errorf("rank %d: ring_recv of %s receives %s", r, op.Results[0].Type, links[from][0].Type)
				}
				out[r] = []*ir.Dense{links[from][0]}
			}
			for r := range parts {
				links[r] = links[r][1:]
			}
		case op.Def.Has(ir.Collective):
			var err error
			if out, err = spmdCollective(op, in); err != nil {
				return nil, err
			}
		default:
			for r := range parts {
				o, err := evalOp(op, in[r])
				if err != nil {
					return nil, fmt.Errorf("rank %d: %s: %v", r, op, err)
				}
				out[r] = o
			}
		}
		for r := range parts {
			for i, v := range op.Results {
				env[r][v] = out[r][i]
			}
		}
	}
	for r := range parts {
		if len(links[r]) != 0 {
			return nil, fmt.Errorf("rank %d sent %d values nobody received", r, len(links[r]))
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

// TestCPAttentionWork: the zig-zag split gives every rank the same causal attention work;
// the contiguous one gives the last rank (2n−1)/n² of it.
func TestCPAttentionWork(t *testing.T) {
	z := CPAttentionWork(64, 4, CPZigzag, true)
	c := CPAttentionWork(64, 4, CPContiguous, true)
	sum := 0.0
	for i := range z {
		sum += c[i]
		if math.Abs(z[i]-z[0]) > 1e-12 {
			t.Errorf("zigzag rank %d has work %g, rank 0 %g", i, z[i], z[0])
		}
	}
	if math.Abs(sum-1) > 1e-12 || c[3] < 3*c[0] {
		t.Errorf("contiguous shares %v: want them to sum to 1 and the last rank's to be far above the first's", c)
	}
}

// TestRingAttentionCost: a ring of n ranks costs n blocks of attention when its transfers hide
// behind the blocks' compute, and the transfers' excess when they do not (a slow link, or the
// backward's larger messages).
func TestRingAttentionCost(t *testing.T) {
	m, err := ir.ParseAndVerify("r.ir", `module @r attributes {mesh = {cp = 4}}

func @forward(%q: bf16[1,16,2048,128] {input}, %k: bf16[1,2,2048,128] {input}, %v: bf16[1,2,2048,128] {input}) -> (bf16[1,16,2048,128], bf16[1,16,2048,128]) {
  %o, %l = ring_attention %q, %k, %v {axis = cp, causal = true, size = 4, split = zigzag} : bf16[1,16,2048,128], f32[1,16,2048,1]
  %a, %b = attention %q, %k, %v {causal = true} : bf16[1,16,2048,128], f32[1,16,2048,1]
  return %o, %a
}
`)
	if err != nil {
		t.Fatal(err)
	}
	ops := m.Funcs[0].Ops
	none := func(*ir.Value) bool { return false }
	one := func(string) int { return 1 }
	dev, _ := ParseDevice("h100-80gb")
	ring, block := dev.CostOf(ops[0], none, one), dev.CostOf(ops[1], none, one)
	if math.Abs(ring.F-4*block.F) > 1e-12 || ring.FComm != 0 || math.Abs(ring.FLOPs-4*block.FLOPs) > 1 {
		t.Errorf("fast link: ring F %g (comm %g, %g FLOPs), want 4 blocks of %g (%g FLOPs), no comm", ring.F, ring.FComm, ring.FLOPs, block.F, block.FLOPs)
	}
	// Backward, each step sends K/V and the f32 dK/dV partial sums (3× the bf16 K/V bytes),
	// and the last dK/dV go home.
	kv := float64(2 * 2 * 2048 * 128 * 2) // k and v, bf16
	home := dev.InterNodeLatency + 2*kv/dev.InterNodeBandwidth
	back := dev.InterNodeLatency + 3*kv/dev.InterNodeBandwidth
	if want := block.I + 3*max(block.I, back) + home; math.Abs(ring.I-want) > 1e-12 || math.Abs(ring.IComm-(3*max(0, back-block.I)+home)) > 1e-12 {
		t.Errorf("ring I %g (comm %g), want %g", ring.I, ring.IComm, want)
	}
	dev.InterNodeBandwidth = 1e9 // a slow link: each step waits for its K/V block
	slow := dev.CostOf(ops[0], none, one)
	step := dev.InterNodeLatency + kv/dev.InterNodeBandwidth
	if want := block.F + 3*step; math.Abs(slow.F-want) > 1e-9 || math.Abs(slow.FComm-3*(step-block.F)) > 1e-9 {
		t.Errorf("slow link: ring F %g (comm %g), want %g (comm %g)", slow.F, slow.FComm, want, 3*(step-block.F))
	}
}
