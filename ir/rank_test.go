package ir

import (
	"strings"
	"testing"
)

// rankSample is a rank program with every op of rankOps, as the passes after rank-programs
// write them.
const rankSample = `module @m attributes {mesh = {dp = 2, pp = 2}}

func @W_s0(%x: f32[4,2] {port = "x"}) -> (f32[4,2] {grad = "w"}) attributes {kind = W, stage = 0} {
  return %x
}

func @found_inf.rank0(%d.w: f32[2,2] {grad = "w"}) -> (f32[] {port = "found_inf"}) {
  %0 = reduce_sum %d.w : f32[]
  return %0
}

func @optimizer.rank0(%w: f32[4,2] {param}, %d.w: f32[2,2] {grad = "w"}, %found_inf: f32[] {found_inf, port = "found_inf"}) -> (f32[2,2] {update = "w"}, f32[] {metric = "overflow"}) {
  return %d.w, %found_inf
}

func @rank0() -> () attributes {rank = 0} {
  %x = recv {peer = 1, tag = 0, type = f32[4,2]} : f32[4,2]
  run %x {func = "W_s0", microbatch = 0} : () {stage = 0}
  grad_reduce_scatter {axis = dp, grads = ["w#0"], microbatch = 0} : () {stage = 0}
  grad_all_reduce {axis = dp, grads = ["b", "c"]} : () {stage = 0}
  grad_send {grad = "w#0", peer = 1, tag = -1} : ()
  grad_recv {grad = "w#1", peer = 1, tag = -2, type = f32[2,2]} : ()
  grad_sum {grad = "w", parts = ["w#0", "w#1"]} : ()
  grad_reduce_scatter {axis = dp, grads = ["v"]} : ()
  %f = call {func = "found_inf.rank0"} : f32[]
  %found_inf = all_reduce %f {axis = dp, op = max} : f32[]
  optimizer %found_inf {func = "optimizer.rank0"} : ()
  param_all_gather {axis = dp, params = ["w"]} : ()
  return
}
`

// TestRankOpsRoundTrip: the rank programs' ops print, parse back and verify.
func TestRankOpsRoundTrip(t *testing.T) {
	m, err := ParseAndVerify("rank.ir", rankSample)
	if err != nil {
		t.Fatal(err)
	}
	out := m.String()
	m2, err := ParseAndVerify("printed.ir", out)
	if err != nil {
		t.Fatalf("printed IR does not parse: %v\n%s", err, out)
	}
	if out2 := m2.String(); out2 != out {
		t.Fatalf("print → parse → print differs:\n%s\n---\n%s", out, out2)
	}
	for _, want := range []string{`grad_all_reduce {axis = dp, grads = ["b", "c"]} : () {stage = 0}`,
		`grad_recv {grad = "w#1", peer = 1, tag = -2, type = f32[2,2]} : ()`, `optimizer %found_inf {func = "optimizer.rank0"} : ()`} {
		if !strings.Contains(out, want) {
			t.Errorf("printed IR lacks %q:\n%s", want, out)
		}
	}
}

// TestRankOpsErrors: the verifier's rules for the rank programs' ops — each one a clear error.
func TestRankOpsErrors(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{`grads = ["b", "c"]`, `grads = []`, "grad_all_reduce: grads lists nothing"},
		{`grads = ["b", "c"]`, `grads = ["b", "b"]`, `grad_all_reduce: grads names "b" twice`},
		{`grads = ["b", "c"]`, `grads = ["b", ""]`, "grads names an empty gradient or parameter"},
		{`grads = ["b", "c"]`, `grads = [1]`, "op grad_all_reduce attribute grads: want string list, got [1]"},
		{`grads = ["b", "c"]`, `grads = "b"`, "want string list"},
		{`parts = ["w#0", "w#1"]`, `parts = ["w#0", "w"]`, `grad_sum: "w" is one of its own parts`},
		{`grad_send {grad = "w#0", peer = 1, tag = -1}`, `grad_send {grad = "w#0", tag = -1}`, "op grad_send needs attribute peer"},
		{`{func = "optimizer.rank0"}`, `{func = "nothing"}`, "optimizer: no function @nothing to run"},
		{`optimizer %found_inf {`, `optimizer {`, "0 operands and 0 results, but @optimizer.rank0 takes 1 ports and returns 0"},
		{`%f = call {func = "found_inf.rank0"} : f32[]`, `%f = call {func = "found_inf.rank0"} : f32[2]`, "result 0 declared f32[2], the port gives f32[]"},
		{`attributes {rank = 0}`, ``, "grad_reduce_scatter acts on a rank's gradients and parameters: it belongs in a rank program (a function with attribute rank), not in @rank0"},
	} {
		bad := strings.Replace(rankSample, c.from, c.to, 1)
		if bad == rankSample {
			t.Fatalf("%q is not in the sample", c.from)
		}
		if _, err := ParseAndVerify("r.ir", bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.to, err, c.want)
		}
	}
}
