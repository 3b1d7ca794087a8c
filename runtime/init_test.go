package runtime

import (
	"math"
	"testing"

	"ppc.dev/ppc/codegen"
	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// An f32 buffer (drawn in chunks of initChunk, initF32) holds exactly the float64 path's
// values rounded to f32, for whole tensors longer than a chunk (odd lengths, so chunks start
// at odd counters), a row shard and a padded tensor, under every initialiser.
func TestInitF32MatchesFloat64(t *testing.T) {
	cases := []struct {
		shape []int
		g     *shardGeom
	}{
		{[]int{3*initChunk + 7}, nil},
		{[]int{5, 3001}, &shardGeom{global: []int64{10, 3001}, offset: []int64{5, 0}, count: []int64{5, 3001}}},
		{[]int{4, 40}, &shardGeom{global: []int64{4, 70}, offset: []int64{0, 40}, count: []int64{4, 30}, padded: true}}, // the last 10 columns are padding
		{[]int{4, 50}, &shardGeom{global: []int64{10, 50}, offset: []int64{8, 0}, count: []int64{2, 50}, padded: true}}, // a ZeRO block: the last 2 rows are padding
	}
	for _, c := range cases {
		for _, init := range []string{"normal(0.02)", "uniform(-0.5, 0.25)", "ones", "zeros"} {
			f32 := device.Tensor{Type: ir.T(ir.F32, c.shape...), Data: device.HostBytes(int64(4 * ir.T(ir.F32, c.shape...).NumElements()))}
			f64 := device.Tensor{Type: ir.T(ir.F64, c.shape...), Data: device.HostBytes(int64(8 * ir.T(ir.F64, c.shape...).NumElements()))}
			for i := range f32.Data {
				f32.Data[i] = 0xff // garbage that initialisation must overwrite
			}
			b := &pb.Buffer{Name: "w", Init: init}
			if err := initBuffer(b, c.g, f32, 7); err != nil {
				t.Fatal(err)
			}
			if err := initBuffer(b, c.g, f64, 7); err != nil {
				t.Fatal(err)
			}
			for i, v := range f64.F64() {
				if got := f32.F32()[i]; math.Float32bits(got) != math.Float32bits(float32(v)) {
					t.Fatalf("%v %s: element %d = %v, float64 path %v", c.shape, init, i, got, float32(v))
				}
			}
		}
	}
}

// A ZeRO block dp does not divide (pb.Buffer.ZeroRows) lies in its tp block: dp splits the
// tp block's rows into ceil(rows/dp) each, the last ranks' blocks running past them (here
// rows 5 of a [10, 3] tensor split [[tp, dp], _] over tp 2 × dp 3: blocks of 2 rows, dp 2's
// holding 1 row and 1 of padding), and a block of padding only has no element inside.
func TestShardOfZeroPaddedBlock(t *testing.T) {
	b := &pb.Buffer{Name: "w", Shard: []*pb.ShardDim{{Axes: []string{"tp", "dp"}}, {}}, ZeroRows: 5}
	mesh := codegen.Mesh{PP: 1, DP: 3, CP: 1, TP: 2}
	typ := ir.T(ir.F32, 2, 3)
	want := map[[2]int][2]int64{ // (tp, dp) → offset, count of dim 0
		{0, 0}: {0, 2}, {0, 1}: {2, 2}, {0, 2}: {4, 1},
		{1, 0}: {5, 2}, {1, 1}: {7, 2}, {1, 2}: {9, 1},
	}
	for c, w := range want {
		g, err := shardOf(b, typ, mesh, codegen.Coords{TP: c[0], DP: c[1]})
		if err != nil {
			t.Fatal(err)
		}
		if g.global[0] != 10 || g.global[1] != 3 || g.offset[0] != w[0] || g.count[0] != w[1] || g.count[1] != 3 || g.padded != (w[1] < 2) {
			t.Errorf("tp %d dp %d: %+v, want offset %d count %d in [10, 3]", c[0], c[1], g, w[0], w[1])
		}
	}
	// rows 4 over dp 3: blocks of 2, dp 2's wholly padding.
	b = &pb.Buffer{Name: "w", Shard: []*pb.ShardDim{{Axes: []string{"dp"}}}, ZeroRows: 4}
	g, err := shardOf(b, ir.T(ir.F32, 2), codegen.Mesh{PP: 1, DP: 3, CP: 1, TP: 1}, codegen.Coords{DP: 2})
	if err != nil {
		t.Fatal(err)
	}
	if g.count[0] != 0 || len(contiguousRuns(g, ir.T(ir.F32, 2))) != 0 {
		t.Errorf("a block of padding only: %+v, runs %v", g, contiguousRuns(g, ir.T(ir.F32, 2)))
	}
	// A block that is not ceil(rows/dp) rows, or zero_rows without dp last, is refused.
	for _, bad := range []*pb.Buffer{
		{Name: "w", Shard: []*pb.ShardDim{{Axes: []string{"dp"}}}, ZeroRows: 7},
		{Name: "w", Shard: []*pb.ShardDim{{Axes: []string{"dp", "tp"}}}, ZeroRows: 4},
		{Name: "w", ZeroRows: 4},
	} {
		if _, err := shardOf(bad, ir.T(ir.F32, 2), codegen.Mesh{PP: 1, DP: 3, CP: 1, TP: 2}, codegen.Coords{}); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
