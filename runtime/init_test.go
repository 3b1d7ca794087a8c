package runtime

import (
	"math"
	"testing"

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
		{[]int{5, 3001}, &shardGeom{global: []int64{10, 3001}, offset: []int64{5, 0}}},
		{[]int{4, 40}, &shardGeom{global: []int64{4, 80}, offset: []int64{0, 40}, valid: []int64{4, 70}}}, // the last 10 columns are padding
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
