package ir

import (
	"strings"
	"testing"
)

const shardedModule = `module @m attributes {mesh = {dp = 2, pp = 2, tp = 4}}

func @forward(%x: f32[8,64] {input, shard = [dp, _]}, %w: f32[64,256] {init = "normal(0.02)", param, shard = [_, tp]}) -> (f32[8,256]) {
  %0 = matmul %x, %w : f32[8,256] {shard = [dp, tp]}
  %1 = relu %0 : f32[8,256] {shard = {dims = [_, _], partial = [tp]}}
  %2 = add %1, %1 : f32[8,256] {shard = [[dp, tp], _]}
  return %2
}
`

func TestShardingRoundTripsAndVerifies(t *testing.T) {
	m, err := ParseAndVerify("s.ir", shardedModule)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); got != shardedModule {
		t.Fatalf("round trip differs:\n%s", got)
	}
	if got := m.Mesh(); len(got) != 3 || got[0] != (MeshAxis{"pp", 2}) || got[2] != (MeshAxis{"tp", 4}) {
		t.Fatalf("Mesh() = %v", got)
	}
	f := m.Funcs[0]
	s, err := ArgSharding(f, 1)
	if err != nil || s == nil || s.String() != "[_, tp]" {
		t.Fatalf("ArgSharding(w) = %v, %v", s, err)
	}
	sizes := meshSizes(m)
	if got := s.LocalShape(f.Args[1].Type.Shape, sizes); got.String() != "[64,64]" {
		t.Errorf("local shape of w = %s, want [64,64]", got)
	}
	two := f.Ops[2].Shard
	if two.Factor(0, sizes) != 8 || two.Factor(1, sizes) != 1 {
		t.Errorf("factors of %s = %d, %d", two, two.Factor(0, sizes), two.Factor(1, sizes))
	}
	if !(&Sharding{Dims: [][]string{nil, nil}}).Replicated() || f.Ops[1].Shard.Replicated() {
		t.Error("Replicated wrong: an all-_ sharding is replicated, a partial one is not")
	}
	if !(&Sharding{Dims: [][]string{nil}}).Equal(nil) || two.Equal(f.Ops[0].Shard) {
		t.Error("Equal wrong")
	}
}

func TestShardingErrors(t *testing.T) {
	for _, c := range []struct{ name, from, to, want string }{
		{"indivisible op", "{shard = {dims = [_, _], partial = [tp]}}", "{shard = [[pp, dp, tp], _]}",
			"s.ir:5:8: result 0 of relu: dim 0 of f32[8,256] (size 8) is not divisible by pp×dp×tp = 16; nearest sizes that divide: 16"},
		{"nearest sizes", "%w: f32[64,256]", "%w: f32[64,250]", "nearest sizes that divide: 248 or 252"},
		{"arg axis", "shard = [dp, _]}", "shard = [cp, _]}", `@forward: argument %x: shard uses "cp", which is not a mesh axis (the mesh has dp, pp, tp)`},
		{"arg twice", "shard = [_, tp]}", "shard = [tp, tp]}", "argument %w: shard uses mesh axis tp twice"},
		{"arg rank", "shard = [_, tp]}", "shard = [tp]}", "argument %w: shard lists 1 dims but the value has rank 2"},
		{"arg kind", "shard = [_, tp]}", "shard = 3}", "argument %w: shard must be a list of mesh axes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(shardedModule, c.from, c.to, 1)
			if src == shardedModule {
				t.Fatal("replacement did not apply")
			}
			_, err := ParseAndVerify("s.ir", src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

// A dp split on an argument is ZeRO's optimizer-state block: its type is the block's, so
// nothing is divided; a tp split on the same module is checked as usual.
func TestZeroBlockArguments(t *testing.T) {
	src := `module @m attributes {mesh = {dp = 2, tp = 2}}

func @optimizer(%w.exp_avg: f32[5,4] {init = "zeros", shard = [dp, _], state = "w.exp_avg"}, %v: f32[5,4] {init = "zeros", shard = [_, tp], state = "v"}) -> () {
  return
}
`
	if _, err := ParseAndVerify("z.ir", src); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(src, "shard = [_, tp], state", "shard = [tp, _], state", 1)
	if _, err := ParseAndVerify("z.ir", bad); err == nil || !strings.Contains(err.Error(), "dim 0 of f32[5,4] (size 5) is not divisible by tp = 2") {
		t.Fatalf("got %v", err)
	}
}

// A rank program's run is checked against its callee's ports.
func TestRunChecksItsCallee(t *testing.T) {
	src := `module @m

func @F_s0(%x: f32[2] {port = "x"}) -> (f32[2] {port = "y"}) {
  %y = neg %x : f32[2]
  return %y
}

func @rank0(%a: f32[2]) -> () {
  %b = run %a {func = "F_s0", microbatch = 0} : f32[2]
  return
}
`
	if _, err := ParseAndVerify("r.ir", src); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, want string }{
		{`func = "F_s0"`, `func = "G"`, `r.ir:9:8: run: no function @G to run`},
		{`%b = run %a {func = "F_s0", microbatch = 0} : f32[2]`, `%b = run %a {func = "F_s0", microbatch = 0} : f32[3]`, "result 0 declared f32[3], the port gives f32[2]"},
		{`%b = run %a {`, `%b = run %a, %a {`, "2 operands and 1 results, but @F_s0 takes 1 ports and returns 1"},
	} {
		bad := strings.Replace(src, c.from, c.to, 1)
		if _, err := ParseAndVerify("r.ir", bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.to, err, c.want)
		}
	}
}
