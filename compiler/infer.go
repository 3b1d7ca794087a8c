package compiler

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"ppc.dev/ppc/frontend/onnx"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime"
	"ppc.dev/ppc/runtime/cpu"
	"ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
)

// Output is one model output.
type Output struct {
	Name   string
	Tensor device.Tensor
}

// InferMesh is the layout ppc infer runs the forward pass on: pipeline stages,
// tensor-parallel and context-parallel ranks (CPSplit: zigzag, the default, or contiguous),
// every rank in this process (0 or 1: one).
type InferMesh struct {
	PP, TP, CP int
	CPSplit    string
}

// Infer compiles the model for inference and runs its forward pass once on the CPU, on one
// device or distributed over mesh (the same plan a training compile would run, with
// send/recv between stages and the tp collectives; the outputs are gathered whole, so they
// are the one-device outputs). given maps input names (the model's own names, or IR argument
// names) to .pb (ONNX TensorProto) or .npy files; inputs not given are drawn at random from
// seed and returned so the caller can save them. Outputs come back in the model's order.
func Infer(model string, lo LoadOptions, mesh InferMesh, given map[string]string, seed uint64) ([]Output, map[string]device.Tensor, error) {
	opts := Options{Load: lo, ForwardOnly: true, Microbatches: 1, PP: mesh.PP, TP: mesh.TP, CP: mesh.CP, CPSplit: mesh.CPSplit}
	if mesh.PP > 1 {
		// A pipeline of one micro-batch: GPipe accepts fewer micro-batches than stages.
		opts.Schedule = "gpipe"
	}
	res, err := Compile(model, opts)
	// An input that decides a shape cannot stay an input of a static plan; when its data is
	// given, compile it in as a constant and try again.
	for tries := 0; err != nil && tries < len(given); tries++ {
		var nc *onnx.NeedsConstantError
		if !errors.As(err, &nc) {
			break
		}
		path, ok := given[nc.Tensor]
		if !ok {
			break
		}
		t, rerr := readInputFile(path)
		if rerr != nil {
			return nil, nil, rerr
		}
		if lo.Frozen == nil {
			lo.Frozen = map[string]*ir.Dense{}
		}
		lo.Frozen[nc.Tensor] = &ir.Dense{Type: t.Type, Data: t.Data}
		opts.Load = lo
		res, err = Compile(model, opts)
	}
	if err != nil {
		return nil, nil, err
	}
	frozen := lo.Frozen
	job, err := runtime.New(res.Output, cpu.New())
	if err != nil {
		return nil, nil, err
	}
	if err := job.Init(seed); err != nil {
		return nil, nil, err
	}
	plan := job.Plan
	feed := data.Fixed{}
	generated := map[string]device.Tensor{}
	used := map[string]bool{}
	synth := &data.Synthetic{Seed: seed, Plan: plan}
	for _, in := range plan.Inputs {
		name := in.ModelName
		if name == "" {
			name = in.Name
		}
		dt, _ := ir.ParseDType(in.DType)
		want := ir.Type{DType: dt, Shape: ir.Shape(in.MicrobatchShape)}
		path, ok := given[name]
		if !ok {
			path, ok = given[in.Name]
			used[in.Name] = ok
		} else {
			used[name] = true
		}
		if !ok {
			t := device.Tensor{Type: want, Data: make([]byte, want.Bytes())}
			if err := synth.Fill(in, 1, 0, t); err != nil {
				return nil, nil, err
			}
			feed[in.Name] = t
			generated[name] = t
			continue
		}
		t, err := readInputFile(path)
		if err != nil {
			return nil, nil, err
		}
		if !t.Type.Equal(want) {
			return nil, nil, fmt.Errorf("input %q: %s holds %s, the model needs %s", name, path, t.Type, want)
		}
		// Token ids and class labels out of range would fail inside a kernel, in terms of
		// instructions and rows; say which file holds the bad value.
		if in.Range != nil {
			for i, v := range data.Float64s(t) {
				if v < float64(in.Range[0]) || v >= float64(in.Range[1]) {
					return nil, nil, fmt.Errorf("input %q: %s holds %v at element %d, outside the model's range [%d, %d)", name, path, v, i, in.Range[0], in.Range[1])
				}
			}
		}
		feed[in.Name] = t
	}
	for name := range given {
		if _, ok := frozen[name]; ok {
			continue
		}
		if !used[name] {
			var names []string
			for _, in := range plan.Inputs {
				n := in.ModelName
				if n == "" {
					n = in.Name
				}
				names = append(names, strconv.Quote(n))
			}
			// Quoted: ONNX names such as "0" would read as a count.
			return nil, nil, fmt.Errorf("--input %s: the model has no such input (its inputs: %s)", name, strings.Join(names, ", "))
		}
	}
	if _, err := job.Step(runtime.Options{Seed: seed, Data: feed}); err != nil {
		return nil, nil, err
	}
	outs, err := job.Outputs(0)
	if err != nil {
		return nil, nil, err
	}
	var result []Output
	for _, name := range plan.Outputs {
		result = append(result, Output{name, outs[name]})
	}
	return result, generated, nil
}

// ReadTensorFile reads one tensor from a .npy file or an ONNX TensorProto (.pb) file.
func ReadTensorFile(path string) (device.Tensor, error) { return readInputFile(path) }

func readInputFile(path string) (device.Tensor, error) {
	if strings.EqualFold(filepath.Ext(path), ".npy") {
		return data.ReadNpy(path)
	}
	_, d, err := onnx.ReadTensor(path)
	if err != nil {
		return device.Tensor{}, err
	}
	raw := d.Data
	if d.Splat {
		raw = make([]byte, 0, d.Type.Bytes())
		for i := 0; i < d.Type.NumElements(); i++ {
			raw = append(raw, d.Data...)
		}
	}
	return device.Tensor{Type: d.Type, Data: append([]byte(nil), raw...)}, nil
}
