package runtime

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/dist"
)

// rankProg is one rank's program for a test job: activation buffers of the given types
// (buffer i has type types[i]) and instructions over them.
type rankProg struct {
	types  []ir.Type
	instrs []*pb.Instr
}

var protoDType = map[ir.DType]pb.DType{ir.F64: pb.DType_F64, ir.F32: pb.DType_F32, ir.F16: pb.DType_F16, ir.BF16: pb.DType_BF16,
	ir.I64: pb.DType_I64, ir.I32: pb.DType_I32, ir.I8: pb.DType_I8, ir.U8: pb.DType_U8, ir.Bool: pb.DType_BOOL}

// program is rank r's program in a world of the given size whose ranks are all pipeline
// ranks, so that each runs its own program, its sends and receives name their peers' ranks,
// and its collectives name explicit groups.
func program(r, world int, rp rankProg) *pb.Program {
	p := &pb.Program{FormatVersion: codegen.FormatVersion, Pp: int32(r), Microbatches: 1, Instrs: rp.instrs,
		Mesh: []*pb.NamedInt{{Name: "pp", Value: int64(world)}, {Name: "dp", Value: 1}, {Name: "tp", Value: 1}}}
	var off int64
	for i, t := range rp.types {
		shape := make([]int64, len(t.Shape))
		for d, x := range t.Shape {
			shape[d] = int64(x)
		}
		p.Buffers = append(p.Buffers, &pb.Buffer{Id: int32(i), Name: fmt.Sprintf("b%d", i), Dtype: protoDType[t.DType], Shape: shape,
			Role: pb.Role_ACTIVATION, Offset: off})
		off += (t.Bytes() + 63) / 64 * 64
	}
	p.ArenaBytes = off
	return p
}

func testPlan(world int) *codegen.Plan {
	plan := &codegen.Plan{FormatVersion: codegen.FormatVersion, World: world, Mesh: codegen.Mesh{PP: world, DP: 1, TP: 1}, Microbatches: 1}
	plan.SetRanks()
	for r := range world {
		plan.Programs = append(plan.Programs, codegen.ProgramInfo{File: codegen.ProgramFile(r), PP: r})
	}
	return plan
}

// buildJob prepares one program per rank without the loader's cross-program check, so that
// tests can run programs whose members disagree and watch the transport catch it.
func buildJob(t testing.TB, progs []rankProg) *Job {
	t.Helper()
	world := len(progs)
	j := &Job{Plan: testPlan(world), dev: cpu.New(), comm: dist.NewLocal(world)}
	for r, rp := range progs {
		rank, err := j.prepare(r, program(r, world, rp), true)
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		j.add(rank, true)
	}
	return j
}

// newJob goes through New, which also checks the programs against each other.
func newJob(progs []rankProg) (*Job, error) {
	world := len(progs)
	out := &codegen.Output{Plan: testPlan(world)}
	for r, rp := range progs {
		out.Programs = append(out.Programs, program(r, world, rp))
	}
	return New(out, cpu.New())
}

func typ(dt ir.DType, shape ...int) ir.Type { return ir.Type{DType: dt, Shape: shape} }

// The tests hold tensor values as float64, exact for every dtype used here.
func setElem(t device.Tensor, i int, v float64) {
	switch t.Type.DType {
	case ir.F32:
		t.F32()[i] = float32(v)
	case ir.F64:
		t.F64()[i] = v
	case ir.I64:
		t.I64()[i] = int64(v)
	case ir.I32:
		t.I32()[i] = int32(v)
	case ir.F16:
		t.U16()[i] = ir.F32ToF16(float32(v))
	case ir.BF16:
		t.U16()[i] = ir.F32ToBF16(float32(v))
	case ir.U8, ir.I8, ir.Bool:
		t.Data[i] = byte(v)
	}
}

func getElem(t device.Tensor, i int) float64 {
	switch t.Type.DType {
	case ir.I64:
		return float64(t.I64()[i])
	case ir.I32:
		return float64(t.I32()[i])
	case ir.U8, ir.I8, ir.Bool:
		return float64(t.Data[i])
	}
	return t.Float(i)
}

// randomValue draws a value exactly representable in dt.
func randomValue(rng *rand.Rand, dt ir.DType) float64 {
	switch dt {
	case ir.I64, ir.I32:
		return float64(rng.Intn(2001) - 1000)
	case ir.U8, ir.I8:
		return float64(rng.Intn(100))
	case ir.Bool:
		return float64(rng.Intn(2))
	case ir.F16:
		return float64(ir.F16ToF32(ir.F32ToF16(float32(rng.NormFloat64()))))
	case ir.BF16:
		return float64(ir.BF16ToF32(ir.F32ToBF16(float32(rng.NormFloat64() * 100))))
	case ir.F32:
		return float64(float32(rng.NormFloat64() * 100))
	}
	return rng.NormFloat64() * 100
}

// refReduce is the contract written out plainly: combine the members' values left to right
// in group order, in the element type (f32 for f16/bf16, rounded once at the end).
func refReduce(dt ir.DType, op pb.Instr_ReduceOp, vals []float64) float64 {
	switch dt {
	case ir.F64:
		acc := vals[0]
		for _, v := range vals[1:] {
			acc = refCombine(op, acc, v)
		}
		if op == pb.Instr_MEAN {
			acc /= float64(len(vals))
		}
		return acc
	case ir.I64, ir.I32:
		acc := int64(vals[0])
		for _, v := range vals[1:] {
			acc = int64(refCombine(op, float64(acc), v))
		}
		return float64(acc)
	}
	acc := float32(vals[0])
	for _, v := range vals[1:] {
		acc = refCombine32(op, acc, float32(v))
	}
	if op == pb.Instr_MEAN {
		acc /= float32(len(vals))
	}
	switch dt {
	case ir.F16:
		return float64(ir.F16ToF32(ir.F32ToF16(acc)))
	case ir.BF16:
		return float64(ir.BF16ToF32(ir.F32ToBF16(acc)))
	}
	return float64(acc)
}

func refCombine(op pb.Instr_ReduceOp, a, b float64) float64 {
	switch op {
	case pb.Instr_MAX:
		return math.Max(a, b)
	case pb.Instr_MIN:
		return math.Min(a, b)
	}
	return a + b
}

func refCombine32(op pb.Instr_ReduceOp, a, b float32) float32 {
	switch op {
	case pb.Instr_MAX:
		return max(a, b)
	case pb.Instr_MIN:
		return min(a, b)
	}
	return a + b
}

// unravel and ravel convert between flat row-major indices and multi-indices.
func unravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = i % shape[d]
		i /= shape[d]
	}
	return idx
}

func ravel(idx, shape []int) int {
	i := 0
	for d := range shape {
		i = i*shape[d] + idx[d]
	}
	return i
}

// TestCollectivesMatchReference runs every collective across 2, 3 and 4 ranks, along every
// dim of a rank-3 tensor, for several dtypes, with the group listed out of rank order, and
// compares each member's result bit for bit with an element-by-element reference.
func TestCollectivesMatchReference(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	base := []int{3, 2, 5}
	for _, n := range []int{2, 3, 4} {
		// A group order that differs from rank order, so that order bugs show.
		group := make([]int32, n)
		for i := range group {
			group[i] = int32((i*(n-1) + 1) % n)
		}
		if n == 2 {
			group = []int32{1, 0}
		}
		pos := func(r int) int { return slices.Index(group, int32(r)) }
		for dim := range base {
			for _, dt := range []ir.DType{ir.F32, ir.F64, ir.I64, ir.BF16, ir.F16, ir.I32} {
				t.Run(fmt.Sprintf("n%d/dim%d/%s", n, dim, dt), func(t *testing.T) {
					shard := slices.Clone(base)
					full := slices.Clone(base)
					full[dim] *= n
					types := []ir.Type{
						typ(dt, shard...), typ(dt, full...), // 0 → 1: all-gather
						typ(dt, full...), typ(dt, shard...), // 2 → 3: reduce-scatter sum
						typ(dt, full...), typ(dt, shard...), // 4 → 5: reduce-scatter max
						typ(dt, full...),                   // 6: in-place all-reduce sum
						typ(dt, full...), typ(dt, full...), // 7 → 8: all-reduce min
						typ(dt, full...), typ(dt, full...), // 9 → 10: all-reduce max
						typ(dt, full...), typ(dt, full...), // 11 → 12: all-reduce mean (floats)
						typ(dt, shard...), // 13: in-place broadcast from group[n-1]
					}
					instrs := []*pb.Instr{
						{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: group, Dim: int32(dim)},
						{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{2}, Out: []int32{3}, Group: group, Dim: int32(dim)},
						{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{4}, Out: []int32{5}, Group: group, Dim: int32(dim), ReduceOp: pb.Instr_MAX},
						{Kind: pb.Instr_ALL_REDUCE, In: []int32{6}, Group: group},
						{Kind: pb.Instr_ALL_REDUCE, In: []int32{7}, Out: []int32{8}, Group: group, ReduceOp: pb.Instr_MIN},
						{Kind: pb.Instr_ALL_REDUCE, In: []int32{9}, Out: []int32{10}, Group: group, ReduceOp: pb.Instr_MAX},
						{Kind: pb.Instr_BROADCAST, In: []int32{13}, Group: group, Root: int32(n - 1)},
					}
					if dt.IsFloat() {
						instrs = append(instrs, &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{11}, Out: []int32{12}, Group: group, ReduceOp: pb.Instr_MEAN})
					}
					progs := make([]rankProg, n)
					for r := range progs {
						progs[r] = rankProg{types, instrs}
					}
					j, err := newJob(progs)
					if err != nil {
						t.Fatal(err)
					}
					// vals[r][b] holds rank r's initial values of buffer b.
					vals := make([][][]float64, n)
					for r := range n {
						vals[r] = make([][]float64, len(types))
						for b, ty := range types {
							vals[r][b] = make([]float64, ty.NumElements())
							for i := range vals[r][b] {
								vals[r][b][i] = randomValue(rng, dt)
								setElem(j.Ranks[r].Bufs[b], i, vals[r][b][i])
							}
						}
					}
					if err := stepWithin(t, j); err != nil {
						t.Fatal(err)
					}
					inGroupOrder := func(b, i int) []float64 {
						v := make([]float64, n)
						for p, m := range group {
							v[p] = vals[m][b][i]
						}
						return v
					}
					check := func(r, b int, what string, want func(i int) float64) {
						t.Helper()
						got := j.Ranks[r].Bufs[b]
						for i := range got.Type.NumElements() {
							if w, g := want(i), getElem(got, i); g != w {
								t.Fatalf("rank %d %s: element %d (%v of %v) is %v, want %v", r, what, i, unravel(i, got.Type.Shape), got.Type.Shape, g, w)
							}
						}
					}
					for r := range n {
						check(r, 1, "all-gather", func(i int) float64 {
							idx := unravel(i, full)
							m := group[idx[dim]/base[dim]]
							idx[dim] %= base[dim]
							return vals[m][0][ravel(idx, shard)]
						})
						for _, c := range []struct {
							in, out int
							op      pb.Instr_ReduceOp
						}{{2, 3, pb.Instr_SUM}, {4, 5, pb.Instr_MAX}} {
							check(r, c.out, "reduce-scatter "+c.op.String(), func(i int) float64 {
								idx := unravel(i, shard)
								idx[dim] += pos(r) * base[dim]
								return refReduce(dt, c.op, inGroupOrder(c.in, ravel(idx, full)))
							})
						}
						check(r, 6, "all-reduce sum", func(i int) float64 { return refReduce(dt, pb.Instr_SUM, inGroupOrder(6, i)) })
						check(r, 8, "all-reduce min", func(i int) float64 { return refReduce(dt, pb.Instr_MIN, inGroupOrder(7, i)) })
						check(r, 10, "all-reduce max", func(i int) float64 { return refReduce(dt, pb.Instr_MAX, inGroupOrder(9, i)) })
						check(r, 7, "all-reduce min input", func(i int) float64 { return vals[r][7][i] })
						if dt.IsFloat() {
							check(r, 12, "all-reduce mean", func(i int) float64 { return refReduce(dt, pb.Instr_MEAN, inGroupOrder(11, i)) })
						}
						check(r, 13, "broadcast", func(i int) float64 { return vals[group[n-1]][13][i] })
					}
				})
			}
		}
	}
}

// TestGatherAndBroadcastAnyDType: gathers and broadcasts move bytes, so every dtype works.
func TestGatherAndBroadcastAnyDType(t *testing.T) {
	for _, dt := range []ir.DType{ir.Bool, ir.U8, ir.I8, ir.I32} {
		instrs := []*pb.Instr{
			{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: []int32{0, 1}, Dim: 1},
			{Kind: pb.Instr_BROADCAST, In: []int32{0}, Out: []int32{2}, Group: []int32{0, 1}, Root: 1},
		}
		types := []ir.Type{typ(dt, 2, 3), typ(dt, 2, 6), typ(dt, 2, 3)}
		j, err := newJob([]rankProg{{types, instrs}, {types, instrs}})
		if err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			for i := range 6 {
				setElem(j.Ranks[r].Bufs[0], i, float64((r*6+i*i/2)%2))
			}
		}
		// Row o of the result is rank 0's row o, then rank 1's.
		row := 3 * dt.Size()
		var want []byte
		for o := range 2 {
			for r := range 2 {
				want = append(want, j.Ranks[r].Bufs[0].Data[o*row:(o+1)*row]...)
			}
		}
		if err := stepWithin(t, j); err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			got := j.Ranks[r].Bufs[1].Data
			if !slices.Equal(got, want) || !slices.Equal(j.Ranks[r].Bufs[2].Data, j.Ranks[1].Bufs[0].Data) {
				t.Fatalf("%s rank %d: gather %v, broadcast %v", dt, r, got, j.Ranks[r].Bufs[2].Data)
			}
		}
	}
}

// TestDisjointGroupsConcurrently: two tp groups {0,1} and {2,3} reduce and gather at the
// same time, then the dp groups {0,2} and {1,3} reduce what they got, as a 2×2 mesh would.
func TestDisjointGroupsConcurrently(t *testing.T) {
	progs := make([]rankProg, 4)
	for r := range progs {
		tp := []int32{int32(r / 2 * 2), int32(r/2*2 + 1)}
		dp := []int32{int32(r % 2), int32(r%2 + 2)}
		types := []ir.Type{typ(ir.F64, 4, 2), typ(ir.F64, 4, 4), typ(ir.F64, 4, 2)}
		var instrs []*pb.Instr
		for range 5 { // repeated collectives on the same groups match by sequence number
			instrs = append(instrs,
				&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: tp},
				&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: tp, Dim: 1},
				&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{1}, Out: []int32{2}, Group: dp, Dim: 1})
		}
		progs[r] = rankProg{types, instrs}
	}
	j, err := newJob(progs)
	if err != nil {
		t.Fatal(err)
	}
	// Keep the reference in float64 and the values small integers, so sums are exact.
	x := make([][]float64, 4)
	for r := range x {
		x[r] = make([]float64, 8)
		for i := range x[r] {
			x[r][i] = float64(r*10 + i)
			j.Ranks[r].Bufs[0].F64()[i] = x[r][i]
		}
	}
	if err := stepWithin(t, j); err != nil {
		t.Fatal(err)
	}
	gathered := make([][]float64, 4)
	for range 5 {
		for g := 0; g < 4; g += 2 {
			for i := range 8 {
				s := x[g][i] + x[g+1][i]
				x[g][i], x[g+1][i] = s, s
			}
		}
		for r := range 4 {
			gathered[r] = make([]float64, 16)
			for row := range 4 {
				for m := range 2 {
					copy(gathered[r][row*4+m*2:row*4+m*2+2], x[r/2*2+m][row*2:row*2+2])
				}
			}
		}
	}
	for r := range 4 {
		if got := j.Ranks[r].Bufs[0].F64(); !slices.Equal(got, x[r]) {
			t.Fatalf("rank %d all-reduce: %v, want %v", r, got, x[r])
		}
		if got := j.Ranks[r].Bufs[1].F64(); !slices.Equal(got, gathered[r]) {
			t.Fatalf("rank %d all-gather: %v, want %v", r, got, gathered[r])
		}
		want := make([]float64, 8)
		half := r / 2 // position in the dp group
		for row := range 4 {
			for c := range 2 {
				want[row*2+c] = gathered[r%2][row*4+half*2+c] + gathered[r%2+2][row*4+half*2+c]
			}
		}
		if got := j.Ranks[r].Bufs[2].F64(); !slices.Equal(got, want) {
			t.Fatalf("rank %d reduce-scatter over dp: %v, want %v", r, got, want)
		}
	}
	// The job runs again: sequence numbers restart every step.
	if err := stepWithin(t, j); err != nil {
		t.Fatal(err)
	}
}

// TestCollectiveHangReports: a member that never arrives is reported with what it waits
// for instead, and the job recovers for the next step.
func TestCollectiveHangReports(t *testing.T) {
	f32x4 := []ir.Type{typ(ir.F32, 4), typ(ir.F32, 8)}
	gather := &pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: []int32{0, 1}}
	j := buildJob(t, []rankProg{
		{f32x4, []*pb.Instr{{Kind: pb.Instr_RECV, Out: []int32{0}, Peer: 2, Tag: 5}, gather}},
		{f32x4, []*pb.Instr{gather}},
		{f32x4, []*pb.Instr{{Kind: pb.Instr_RECV, Out: []int32{0}, Peer: 0, Tag: 6}}},
	})
	err := stepWithin(t, j)
	var he *dist.HangError
	if !errors.As(err, &he) {
		t.Fatalf("got %v, want a dist.HangError", err)
	}
	for _, want := range []string{
		"rank 1 waits for all-gather over ranks [0 1] (dim 0, f32[4]): rank 0 has not arrived, it waits for recv from rank 2 (tag 5)",
		"rank 0 waits for recv from rank 2 (tag 5)",
		"rank 2 waits for recv from rank 0 (tag 6)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("report lacks %q:\n%v", want, err)
		}
	}
	// A member that finished the step without arriving; a later collective of the same
	// group is numbered in the report.
	ar := &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{1, 0}, ReduceOp: pb.Instr_MAX, Tag: 9}
	j = buildJob(t, []rankProg{{f32x4, []*pb.Instr{ar}}, {f32x4, []*pb.Instr{ar, ar}}})
	err = stepWithin(t, j)
	want := "rank 1 waits for all-reduce max over ranks [1 0] (f32[4], tag 9), the group's collective #1: rank 0 has not arrived, it finished the step"
	if !errors.As(err, &he) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %q", err, want)
	}
	// The loader refuses the same programs up front.
	if _, err := newJob([]rankProg{{f32x4, []*pb.Instr{ar}}, {f32x4, []*pb.Instr{ar, ar}}}); err == nil ||
		!strings.Contains(err.Error(), "rank 1 (instruction 1) issues collective #1 over ranks {0,1}, all-reduce max over ranks [1 0] (f32[4], tag 9), but rank 0 issues only 1 collectives over that group") {
		t.Fatalf("New: %v", err)
	}
	// After a hang the transport is clean again.
	j = buildJob(t, []rankProg{{f32x4, []*pb.Instr{ar, ar}}, {f32x4, []*pb.Instr{ar, ar}}})
	for range 3 {
		if err := stepWithin(t, j); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCollectiveMismatch: members that meet with different collectives are an error naming
// both ranks, at run time (a remote transport sees only its own program) and at load time.
func TestCollectiveMismatch(t *testing.T) {
	types := []ir.Type{typ(ir.F32, 4, 2), typ(ir.F32, 4, 4), typ(ir.F32, 8, 2), typ(ir.F64, 4, 2), typ(ir.F32, 8, 4)}
	g01 := []int32{0, 1}
	cases := []struct {
		name   string
		r0, r1 *pb.Instr
		want   string
	}{
		{"size", &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g01}, &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{2}, Group: g01},
			"issues all-reduce sum over ranks [0 1] (f32[8,2]), rank 0 issues all-reduce sum over ranks [0 1] (f32[4,2])"},
		{"dtype", &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g01}, &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{3}, Group: g01},
			"(f64[4,2])"},
		{"dim", &pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: g01, Dim: 1},
			&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{2}, Group: g01},
			"rank 1 issues all-gather over ranks [0 1] (dim 0, f32[4,2]), rank 0 issues all-gather over ranks [0 1] (dim 1, f32[4,2])"},
		{"kind", &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g01}, &pb.Instr{Kind: pb.Instr_BROADCAST, In: []int32{0}, Group: g01},
			"rank 1 issues broadcast from rank 0 over ranks [0 1] (f32[4,2]), rank 0 issues all-reduce sum"},
		{"order", &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g01}, &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{1, 0}},
			"over ranks [1 0]"},
		{"op", &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g01}, &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g01, ReduceOp: pb.Instr_MAX},
			"all-reduce max"},
		{"tag", &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g01, Tag: 1}, &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g01, Tag: 2},
			"tag 2"},
		{"root", &pb.Instr{Kind: pb.Instr_BROADCAST, In: []int32{0}, Group: g01}, &pb.Instr{Kind: pb.Instr_BROADCAST, In: []int32{0}, Group: g01, Root: 1},
			"broadcast from rank 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Rank 1 waits for a message rank 0 sends before its collective, so rank 0 arrives
			// first and rank 1 is the one that finds the mismatch.
			progs := []rankProg{
				{types, []*pb.Instr{{Kind: pb.Instr_SEND, In: []int32{0}, Peer: 1, Tag: 99}, c.r0}},
				{types, []*pb.Instr{{Kind: pb.Instr_RECV, Out: []int32{0}, Peer: 0, Tag: 99}, c.r1}},
			}
			j := buildJob(t, progs)
			err := stepWithin(t, j)
			if err == nil || !strings.Contains(err.Error(), "does not match") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run: %v\nwant %q", err, c.want)
			}
			if _, err := newJob(progs); err == nil || !strings.Contains(err.Error(), "does not match") {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

// TestLoaderRejectsBadCollectives: each check of a collective instruction, one by one;
// every bad program is an error message, never a panic.
func TestLoaderRejectsBadCollectives(t *testing.T) {
	types := []ir.Type{typ(ir.F32, 4, 6), typ(ir.F32, 4, 12), typ(ir.F32, 4, 3), typ(ir.Bool, 4), typ(ir.I64, 4), typ(ir.F32, 4, 5), typ(ir.F64, 4, 12)}
	g := []int32{0, 1}
	cases := []struct {
		in   *pb.Instr
		want string
	}{
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}}, "all-reduce names neither a mesh axis nor a group"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{0, 2}}, "2 is not a rank of the 2-rank world"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{0, -1}}, "-1 is not a rank"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{0, 0}}, "names rank 0 twice"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{1}}, "rank 0 is not in its all-reduce group [1]"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, Group: g}, "all-reduce takes 1 input and 0 outputs (in place) or 1, has 0 and 0"},
		{&pb.Instr{Kind: pb.Instr_BROADCAST, In: []int32{0}, Out: []int32{0, 0}, Group: g}, "broadcast takes 1 input"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Group: g}, "all-gather takes 1 input and 1 output, has 1 and 0"},
		{&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{0, 1}, Out: []int32{2}, Group: g}, "reduce-scatter takes 1 input and 1 output"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{12}, Group: g}, "buffer 12 out of range"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g, Dim: 1}, "all-reduce has dim 1: only all-gather, reduce-scatter and all-to-all take a dim"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g, ConcatDim: 1}, "all-reduce has concat dim 1: only all-to-all takes one"},
		{&pb.Instr{Kind: pb.Instr_ALL_TO_ALL, In: []int32{0}, Group: g}, "all-to-all takes 1 input and 1 output, has 1 and 0"},
		{&pb.Instr{Kind: pb.Instr_ALL_TO_ALL, In: []int32{0}, Out: []int32{1}, Group: g, ConcatDim: 1}, "all-to-all of f32[4,6] over 2 ranks (split dim 0, concat dim 1): the output must be f32[2,12], the buffer is f32[4,12]"},
		{&pb.Instr{Kind: pb.Instr_ALL_TO_ALL, In: []int32{5}, Out: []int32{1}, Group: g, Dim: 1}, "all-to-all: dim 1 of f32[4,5] (size 5) does not split into 2 equal parts"},
		{&pb.Instr{Kind: pb.Instr_ALL_TO_ALL, In: []int32{0}, Out: []int32{1}, Group: g, ConcatDim: 2}, "all-to-all split dim 0 or concat dim 2 is not a dim of f32[4,6]"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: g, Dim: 1, ReduceOp: pb.Instr_MAX}, "all-gather has reduce op MAX"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g, Root: 1}, "all-reduce has root 1: only broadcast has a root"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g, Peer: 1}, "collectives name their ranks in group"},
		{&pb.Instr{Kind: pb.Instr_BROADCAST, In: []int32{0}, Group: g, Root: 2}, "broadcast root 2 is not a position in group [0 1] (0 … 1)"},
		{&pb.Instr{Kind: pb.Instr_BROADCAST, In: []int32{0}, Group: g, Root: -1}, "broadcast root -1"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{3}, Group: g}, "cannot reduce bool"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{4}, Group: g, ReduceOp: pb.Instr_MEAN}, "mean of i64"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: g, ReduceOp: 17}, "unknown reduce op 17"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Out: []int32{1}, Group: g}, "all-reduce of f32[4,6] into f32[4,12]: the output must have the input's type"},
		{&pb.Instr{Kind: pb.Instr_BROADCAST, In: []int32{0}, Out: []int32{2}, Group: g}, "broadcast of f32[4,6] into f32[4,3]"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: g}, "all-gather of f32[4,6] over 2 ranks along dim 0: the output must be dim 0 × 2, the buffer is f32[4,12]"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{5}, Group: g, Dim: 1}, "the output must be dim 1 × 2, the buffer is f32[4,5]"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{6}, Group: g, Dim: 1}, "the output must have the input's dtype and rank"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{4}, Group: g}, "the output must have the input's dtype and rank"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: g, Dim: 2}, "all-gather dim 2 is not a dim of f32[4,6]"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: g, Dim: -1}, "all-gather dim -1 is not a dim"},
		{&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{5}, Out: []int32{2}, Group: g, Dim: 1}, "dim 1 of f32[4,5] (size 5) does not split into 2 equal parts"},
		{&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{1}, Out: []int32{2}, Group: g, Dim: 1}, "reduce-scatter of f32[4,12] over 2 ranks along dim 1: the output must be dim 1 ÷ 2, the buffer is f32[4,3]"},
		{&pb.Instr{Kind: pb.Instr_REDUCE_SCATTER, In: []int32{3}, Out: []int32{3}, Group: g}, "cannot reduce bool"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{0}, Group: []int32{0}, Dim: 1}, "all-gather output buffer 0 overlaps its input buffer 0"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Out: []int32{7}, Group: g}, "all-reduce output buffer 7 overlaps its input buffer 0"},
		{&pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{8}, Group: g}, "all-reduce writes read-only buffer 8 (CONST)"},
		{&pb.Instr{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{9}, Group: g}, "writes to read-only buffer 9 (STEP)"},
	}
	for _, c := range cases {
		p := program(0, 2, rankProg{types, []*pb.Instr{c.in}})
		// Buffer 7 aliases part of buffer 0 in the arena; 8 is a constant; 9 the step counter.
		p.Buffers = append(p.Buffers,
			&pb.Buffer{Id: 7, Dtype: pb.DType_F32, Shape: []int64{4, 6}, Role: pb.Role_ACTIVATION, Offset: 64},
			&pb.Buffer{Id: 8, Dtype: pb.DType_F32, Shape: []int64{4, 6}, Role: pb.Role_CONST, Data: make([]byte, 96)},
			&pb.Buffer{Id: 9, Dtype: pb.DType_F32, Shape: []int64{}, Role: pb.Role_STEP})
		j := &Job{Plan: testPlan(2), dev: cpu.New(), comm: dist.NewLocal(2)}
		_, err := j.prepare(0, p, true)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v:\n got %v\nwant %q", c.in, err, c.want)
		}
	}
	// Parameters may be written by collectives (ZeRO's all-gather of updated shards).
	p := program(0, 1, rankProg{[]ir.Type{typ(ir.F32, 4)}, []*pb.Instr{{Kind: pb.Instr_ALL_GATHER, In: []int32{0}, Out: []int32{1}, Group: []int32{0}}}})
	p.Buffers = append(p.Buffers, &pb.Buffer{Id: 1, Name: "w", Dtype: pb.DType_F32, Shape: []int64{4}, Role: pb.Role_PARAM, Init: "zeros"})
	j := &Job{Plan: testPlan(1), dev: cpu.New(), comm: dist.NewLocal(1)}
	if _, err := j.prepare(0, p, true); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAllReduce16MiB: an in-place f32 all-reduce of 16 MiB over 4 in-process ranks,
// one Step per iteration (so it includes starting the rank goroutines).
func BenchmarkAllReduce16MiB(b *testing.B) {
	const elems = 4 << 20
	ar := &pb.Instr{Kind: pb.Instr_ALL_REDUCE, In: []int32{0}, Group: []int32{0, 1, 2, 3}}
	types := []ir.Type{typ(ir.F32, elems)}
	j := buildJob(b, []rankProg{{types, []*pb.Instr{ar}}, {types, []*pb.Instr{ar}}, {types, []*pb.Instr{ar}}, {types, []*pb.Instr{ar}}})
	for r := range 4 {
		x := j.Ranks[r].Bufs[0].F32()
		for i := range x {
			x[i] = float32(i%7) * 1e-3
		}
	}
	b.SetBytes(4 * elems)
	b.ResetTimer()
	for b.Loop() {
		if _, err := j.Step(Options{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
}
