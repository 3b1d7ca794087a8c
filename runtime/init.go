package runtime

import (
	"fmt"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
)

// initBuffer fills a parameter or state buffer. Random values come from the counter-based RNG
// keyed by (seed, name) at element indices of the full tensor, so a shard (g places it in the
// full tensor; nil for a whole tensor) holds exactly its slice of what one device would hold.
func initBuffer(b *pb.Buffer, g *shardGeom, t device.Tensor, seed uint64) error {
	if b.Data != nil {
		if g != nil {
			// Imported weights: the program holds the whole tensor, every replica its block
			// (a padded tensor's padding is zero).
			clear(t.Data)
			copyBlock(b.Data, t, g, false)
			return nil
		}
		copy(t.Data, b.Data)
		return nil
	}
	spec, err := ir.ParseInit(b.Init)
	if err != nil {
		return err
	}
	if t.Type.DType == ir.F32 {
		return initF32(b.Name, spec, g, t, seed)
	}
	n := t.Type.NumElements()
	f64 := make([]float64, n)
	switch spec.Kind {
	case "ones":
		// Only the tensor's own elements: a padded tensor's padding stays zero.
		for _, r := range contiguousRuns(g, t.Type) {
			for i := range f64[r.local : r.local+r.n] {
				f64[r.local+int64(i)] = 1
			}
		}
	case "normal", "uniform":
		key := cpu.KeyFor(seed, b.Name)
		// Fill each run of elements that is contiguous in the full tensor with one call, so
		// an unsharded tensor is one run and a shard one run per row of its last dim.
		runs := contiguousRuns(g, t.Type)
		for _, r := range runs {
			dst := f64[r.local : r.local+r.n]
			if spec.Kind == "normal" {
				cpu.FillNormal(dst, key, uint64(r.global), 0, spec.A)
			} else {
				cpu.FillUniform(dst, key, uint64(r.global), spec.A, spec.B)
			}
		}
	}
	return data.StoreF64(t, f64)
}

// initF32 is initBuffer's drawing for f32 buffers: the same values (drawn in float64 and
// rounded), through a float64 buffer of at most initChunk elements rather than one as large
// as the tensor — a GPT-2 token table's float64 copy was 309 MB of garbage that the Go heap
// kept in the process's peak RSS.
func initF32(name string, spec ir.Init, g *shardGeom, t device.Tensor, seed uint64) error {
	d := t.F32()
	clear(d) // zeros, and the padding of a padded tensor
	runs := contiguousRuns(g, t.Type)
	switch spec.Kind {
	case "ones":
		for _, r := range runs {
			for i := range d[r.local : r.local+r.n] {
				d[r.local+int64(i)] = 1
			}
		}
	case "normal", "uniform":
		key := cpu.KeyFor(seed, name)
		buf := make([]float64, min(initChunk, int64(len(d))))
		for _, r := range runs {
			for at := int64(0); at < r.n; at += initChunk {
				f := buf[:min(initChunk, r.n-at)]
				if spec.Kind == "normal" {
					cpu.FillNormal(f, key, uint64(r.global+at), 0, spec.A)
				} else {
					cpu.FillUniform(f, key, uint64(r.global+at), spec.A, spec.B)
				}
				dst := d[r.local+at:]
				for i, v := range f {
					dst[i] = float32(v)
				}
			}
		}
	}
	return nil
}

// initChunk is the most elements initF32 draws at a time.
const initChunk = 1 << 16

// InitialValue returns the whole value a parameter starts from at seed: its data (imported
// weights), or the values of its initialiser (ir.AttrInit) drawn as Job.Init draws them, by
// the same code, so that a run's shards hold exactly its blocks. ppc export writes these as a
// model's ONNX initializers: the file starts where `ppc run --seed` starts.
func InitialValue(name string, t ir.Type, attrs ir.Attrs, seed uint64) (device.Tensor, error) {
	out := device.Tensor{Type: t, Data: make([]byte, t.Bytes())}
	b := &pb.Buffer{Name: name, Init: attrs.Str(ir.AttrInit, "zeros")}
	if d, ok := attrs.Get(ir.AttrData).(*ir.Dense); ok {
		if d.Elided {
			return device.Tensor{}, fmt.Errorf("parameter %q: its data was elided from the IR text; re-import the model", name)
		}
		if !d.Type.Equal(t) {
			return device.Tensor{}, fmt.Errorf("parameter %q: its data is %s, the parameter %s", name, d.Type, t)
		}
		if d.Splat {
			for i := 0; i < len(out.Data); i += len(d.Data) {
				copy(out.Data[i:], d.Data)
			}
			return out, nil
		}
		b.Data = d.Data
	}
	if err := initBuffer(b, nil, out, seed); err != nil {
		return device.Tensor{}, fmt.Errorf("parameter %q: %v", name, err)
	}
	return out, nil
}

type run struct{ local, global, n int64 }

// contiguousRuns lists the stretches of a buffer of type t, placed in its full tensor by g
// (nil: the whole tensor), that are contiguous in the full tensor, with their element offsets
// in the buffer and in the full tensor. Initialisation and checkpoints use them. The full
// tensor of a padded one is the unpadded tensor (g.full): elements of the padding (beyond
// g.count along some dim: a padded vocabulary's, a ZeRO block's) are in no run, and the
// offsets are the unpadded tensor's, so that a padded parameter draws exactly the unpadded
// one's values and checkpoints hold the unpadded tensor.
func contiguousRuns(g *shardGeom, t ir.Type) []run {
	n := int64(t.NumElements())
	if g == nil || t.Rank() == 0 {
		return []run{{0, 0, n}}
	}
	rank := t.Rank()
	last := int64(t.Shape[rank-1])
	full := g.full()
	// The part of each row of the last dim inside the full tensor.
	row := g.count[rank-1]
	if last == 0 || row <= 0 {
		return nil
	}
	var out []run
	coord := make([]int64, rank)
	for local := int64(0); local < n; local += last {
		var lin int64
		inside := true
		for d := 0; d < rank; d++ {
			c := g.offset[d] + coord[d]
			inside = inside && coord[d] < g.count[d]
			lin = lin*full[d] + c
		}
		// Rows that follow each other in the buffer and in the full tensor (a split of the
		// first dim only) make one run.
		switch k := len(out) - 1; {
		case !inside:
		case k >= 0 && out[k].global+out[k].n == lin && out[k].local+out[k].n == local:
			out[k].n += row
		default:
			out = append(out, run{local, lin, row})
		}
		for d := rank - 2; d >= 0; d-- {
			coord[d]++
			if coord[d] < int64(t.Shape[d]) {
				break
			}
			coord[d] = 0
		}
	}
	return out
}
