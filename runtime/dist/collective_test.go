package dist

import (
	"math"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// TestReductionDeterministic runs an all-reduce many times with the members arriving in
// random order and at random times: every member must get exactly the left-to-right f32 sum
// in group order, every time. The values make the order visible: in f32, 1e8 + 1 = 1e8, so
// ((1e8 + 1) − 1e8) + 1 = 1 while (1 + 1 + 1e8) − 1e8 = 0 and (1e8 − 1e8) + 1 + 1 = 2.
func TestReductionDeterministic(t *testing.T) {
	const world, elems = 4, 4096
	group := []int{2, 0, 3, 1}
	rng := rand.New(rand.NewSource(2))
	choices := []float32{1e8, 1, -1e8, 3, -1, 1e-3, 7e7}
	inputs := make([][]float32, world)
	for r := range inputs {
		inputs[r] = make([]float32, elems)
		for i := range inputs[r] {
			inputs[r][i] = choices[rng.Intn(len(choices))]
		}
	}
	inputs[2][0], inputs[0][0], inputs[3][0], inputs[1][0] = 1e8, 1, -1e8, 1
	want := make([]float32, elems)
	for i := range want {
		acc := inputs[group[0]][i]
		for _, m := range group[1:] {
			acc += inputs[m][i]
		}
		want[i] = acc
	}
	if want[0] != 1 {
		t.Fatalf("reference: %v", want[0])
	}
	sorted := make([]float32, elems) // the rank-order sum differs: the test can tell
	for i := range sorted {
		sorted[i] = ((inputs[0][i] + inputs[1][i]) + inputs[2][i]) + inputs[3][i]
	}
	if slices.Equal(sorted, want) {
		t.Fatal("the inputs do not distinguish group order from rank order")
	}
	op := &Op{Kind: pb.Instr_ALL_REDUCE, Group: group, Members: MembersKey(group), DType: ir.F32, Shape: ir.Shape{elems}}
	tr := NewLocal(world)
	for run := range 60 {
		tr.ResetStep()
		delays := make([]time.Duration, world)
		for r := range delays {
			delays[r] = time.Duration(rng.Intn(300)) * time.Microsecond
		}
		outs := make([]device.Tensor, world)
		var wg sync.WaitGroup
		errs := make([]error, world)
		for r := range world {
			in := device.Tensor{Type: ir.Type{DType: ir.F32, Shape: ir.Shape{elems}}, Data: device.HostBytes(4 * elems)}
			copy(in.F32(), inputs[r])
			outs[r] = in
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(delays[r])
				errs[r] = tr.Collective(r, op, in, in)
				tr.Finish(r)
			}()
		}
		wg.Wait()
		for r := range world {
			if errs[r] != nil {
				t.Fatalf("run %d rank %d: %v", run, r, errs[r])
			}
			got := outs[r].F32()
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("run %d (delays %v) rank %d element %d: %v, want %v", run, delays, r, i, got[i], want[i])
				}
			}
		}
	}
}

// TestMaxPropagatesNaN: MAX and MIN return NaN where any member holds NaN, whatever the
// position of the NaN in the group (a plain `>` fold would drop a NaN seen first).
func TestMaxPropagatesNaN(t *testing.T) {
	nan, negZero := math.NaN(), math.Copysign(0, -1)
	for _, op := range []pb.Instr_ReduceOp{pb.Instr_MAX, pb.Instr_MIN} {
		ins := [][]float64{{nan, 1, 2, negZero}, {3, nan, 1, 0}, {1, 2, 3, 0}}
		srcs := make([][]byte, len(ins))
		for g, v := range ins {
			x := device.Tensor{Type: ir.Type{DType: ir.F64, Shape: ir.Shape{4}}, Data: device.HostBytes(32)}
			copy(x.F64(), v)
			srcs[g] = x.Data
		}
		dst := device.Tensor{Type: ir.Type{DType: ir.F64, Shape: ir.Shape{4}}, Data: device.HostBytes(32)}
		reduceInto(ir.F64, op, dst.Data, srcs, runs{rows: 1, run: 4})
		got := dst.F64()
		want2 := 3.0
		if op == pb.Instr_MIN {
			want2 = 1
		}
		// Equal zeros keep the first member's sign: the fold is left to right.
		if !math.IsNaN(got[0]) || !math.IsNaN(got[1]) || got[2] != want2 || !math.Signbit(got[3]) {
			t.Fatalf("%s: %v", op, got)
		}
	}
}
