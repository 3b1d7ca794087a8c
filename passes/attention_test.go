package passes

import (
	"math"
	"strings"
	"testing"

	"ppc.dev/ppc/ir"
)

// The reference evaluator's attention (gradeval_test.go): the decomposed chain, scores
// materialised, written from the op table's docs and independent of the runtime's tiled
// kernels; attention_grad is its textbook backward through the materialised probabilities —
// recomputed, as the op's doc says, from the o and lse operands it is given (the ring of
// context parallelism gives each block's attention_grad the output and log-sum-exp merged
// over every block, not the block's own).
func init() {
	evalOps["attention"] = func(op *ir.Op, in []evalTensor) [][]float64 {
		o, lse, _, _, _ := evalAttention(op, in, nil)
		return [][]float64{o, lse}
	}
	evalOps["attention_grad"] = func(op *ir.Op, in []evalTensor) [][]float64 {
		args := []evalTensor{in[0], in[1], in[2]}
		if len(in) == 7 {
			args = append(args, in[6])
		}
		_, _, dq, dk, dv := evalAttention(op, args, &evalGrad{o: in[3].v, lse: in[4].v, do: in[5].v})
		return [][]float64{dq, dk, dv}
	}
}

// evalGrad are attention_grad's o, lse and do operands.
type evalGrad struct{ o, lse, do []float64 }

func evalAttention(op *ir.Op, in []evalTensor, g *evalGrad) (o, lse, dq, dk, dv []float64) {
	q, k, v := in[0], in[1], in[2]
	r := len(q.s)
	hq, sq, d := q.s[r-3], q.s[r-2], q.s[r-1]
	hkv, skv, dvn := k.s[r-3], k.s[r-2], v.s[r-1]
	batch := q.s[:r-3].NumElements()
	scale := op.Attrs.Float("scale", 1/math.Sqrt(float64(d)))
	causal := op.Attrs.Bool("causal", false)
	var maskAt func(b, h, i, j int) (add float64, vis bool)
	if len(in) == 4 {
		scores := append(append(ir.Shape{}, q.s[:r-1]...), skv)
		idx := evalBroadcastMap(in[3].s, scores)
		isBool := op.Operands[len(op.Operands)-1].Type.DType == ir.Bool // the mask is the last operand
		maskAt = func(b, h, i, j int) (float64, bool) {
			x := in[3].v[idx[((b*hq+h)*sq+i)*skv+j]]
			if isBool {
				return 0, x != 0
			}
			return x, true
		}
	}
	o, lse = make([]float64, batch*hq*sq*dvn), make([]float64, batch*hq*sq)
	dq, dk, dv = make([]float64, len(q.v)), make([]float64, len(k.v)), make([]float64, len(v.v))
	for b := range batch {
		for h := range hq {
			kv := b*hkv + h/(hq/hkv)
			for i := range sq {
				row := (b*hq+h)*sq + i
				s, p := make([]float64, skv), make([]float64, skv)
				m := math.Inf(-1)
				vis := make([]bool, skv)
				for j := range skv {
					for c := range d {
						s[j] += q.v[row*d+c] * k.v[(kv*skv+j)*d+c]
					}
					s[j] *= scale
					vis[j] = !causal || j <= i+skv-sq
					if maskAt != nil {
						add, ok := maskAt(b, h, i, j)
						s[j] += add
						vis[j] = vis[j] && ok
					}
					if vis[j] {
						m = math.Max(m, s[j])
					}
				}
				if math.IsInf(m, -1) {
					lse[row] = m
					continue
				}
				var sum float64
				for j := range skv {
					if vis[j] {
						p[j] = math.Exp(s[j] - m)
						sum += p[j]
					}
				}
				lse[row] = m + math.Log(sum)
				for j := range skv {
					p[j] /= sum
					for c := range dvn {
						o[row*dvn+c] += p[j] * v.v[(kv*skv+j)*dvn+c]
					}
				}
				if g == nil {
					continue
				}
				// p from the given lse, δ from the given o (attention_grad's doc).
				do := g.do
				for j := range skv {
					p[j] = 0
					if vis[j] {
						p[j] = math.Exp(s[j] - g.lse[row])
					}
				}
				dp := make([]float64, skv)
				var delta float64
				for c := range dvn {
					delta += do[row*dvn+c] * g.o[row*dvn+c]
				}
				for j := range skv {
					for c := range dvn {
						dp[j] += do[row*dvn+c] * v.v[(kv*skv+j)*dvn+c]
					}
				}
				for j := range skv {
					ds := p[j] * (dp[j] - delta) * scale
					for c := range d {
						dq[row*d+c] += ds * k.v[(kv*skv+j)*d+c]
						dk[(kv*skv+j)*d+c] += ds * q.v[row*d+c]
					}
					for c := range dvn {
						dv[(kv*skv+j)*dvn+c] += p[j] * do[row*dvn+c]
					}
				}
			}
		}
	}
	return
}

func init() {
	gradCases = append(gradCases,
		gradCase{name: "attention gqa causal", args: "%q: f64[2,4,5,3] {param}, %k: f64[2,2,5,3] {param}, %v: f64[2,2,5,2] {param}",
			body: "%y, %lse = attention %q, %k, %v {causal = true} : ?, ?", want: []string{"attention_grad"}},
		gradCase{name: "attention mask scale", args: "%q: f64[3,4,3] {param}, %k: f64[1,6,3] {param}, %v: f64[1,6,3] {param}, %m: f64[4,6] {input}",
			body: "%y, %lse = attention %q, %k, %v, %m {scale = 0.7} : ?, ?", want: []string{"attention_grad"}},
		gradCase{name: "attention bool mask", args: "%q: f64[2,4,3] {param}, %k: f64[2,6,3] {param}, %v: f64[2,6,3] {param}, %m: bool[2,1,6] {input}",
			body: "%y, %lse = attention %q, %k, %v, %m {causal = true} : ?, ?",
			vals: map[string][]float64{"m": {1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1}}},
	)
}

// TestAttentionGradPhases: attention's gradient is one attention_grad op reading the
// forward's output and log-sum-exp (no scores), and it runs in bwd_in (attention has no
// weights, so W gets nothing of it).
func TestAttentionGradPhases(t *testing.T) {
	c := gradCase{name: "attention in a layer", args: "%x: f64[2,4,6] {input}, %wq: f64[6,6] {param}",
		body: `%h = matmul %x, %wq : ?
  %q = reshape %h {shape = [2,4,2,3]} : ?
  %t = transpose %q {perm = [0, 2, 1, 3]} : ?
  %y, %lse = attention %t, %t, %t {causal = true} : ?, ?`}
	m, args := buildGradCase(t, c)
	train := checkGradients(t, m, args)
	found := false
	for _, op := range train.Ops {
		if op.Name() == "attention_grad" {
			found = true
			if op.Phase != ir.BwdIn {
				t.Errorf("attention_grad runs in %v, want bwd_in:\n%s", op.Phase, train)
			}
			if len(op.Operands) != 6 || op.Operands[4].Type.Rank() != 4 {
				t.Errorf("attention_grad reads %v, want q, k, v, o, lse [2,2,4,1], do", op.Operands)
			}
		}
		for _, r := range op.Results {
			if sh := r.Type.Shape; len(sh) >= 2 && sh[len(sh)-1] == 4 && sh[len(sh)-2] == 4 {
				t.Errorf("@train materialises a 4×4 score matrix: %s", op)
			}
		}
	}
	if !found {
		t.Fatalf("no attention_grad in @train:\n%s", train)
	}
}

// TestAttentionLSEGradRefused: a loss through the log-sum-exp is an error naming it.
func TestAttentionLSEGradRefused(t *testing.T) {
	src := `func @forward(%q: f32[2,4,3] {param}) -> (f32[] {loss}) {
  %y, %lse = attention %q, %q, %q : f32[2,4,3], f32[2,4,1]
  %l = reduce_sum %lse : f32[]
  return %l
}
`
	m, err := ir.Parse("lse.ir", src)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := ParsePipeline("autodiff")
	if err != nil {
		t.Fatal(err)
	}
	err = Run(m, pl, Config{})
	if err == nil || !strings.Contains(err.Error(), "log-sum-exp") {
		t.Fatalf("got %v, want an error about the log-sum-exp", err)
	}
}
