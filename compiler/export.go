package compiler

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"ppc.dev/ppc/frontend/onnx/export"
	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime"
)

// Export loads a model (.ppm, .ir or .onnx) and returns it as an ONNX model for
// `ppc export`: its @forward over the whole global batch (a .ppm's `batch`, an .onnx's leading
// dims; an .ir file as written), every parameter an initializer holding the value `ppc run
// --seed seed` starts it from (runtime.InitialValue: the same code as the run's), and the loss
// as an output named loss (frontend/onnx/export documents the graph). producer is ppc's
// version, written into the file. opset is the ONNX opset written (0: export.Opset); from
// opset 23 the fused attention is ONNX's Attention op, before it the decomposed chain.
func Export(model string, lo LoadOptions, seed uint64, producer string, opset int) (*onnxpb.ModelProto, error) {
	lo.Microbatches, lo.Replicas = 1, 1
	m, _, err := Load(model, lo)
	if err != nil {
		return nil, err
	}
	if m.Name == "" {
		m.Name = strings.TrimSuffix(filepath.Base(model), filepath.Ext(model))
	}
	weight := func(p *ir.Value, at ir.Attrs) ([]byte, error) {
		t, err := runtime.InitialValue(p.Name, p.Type, at, seed)
		return t.Data, err
	}
	doc := fmt.Sprintf("exported by ppc from %s", filepath.Base(model))
	meta := map[string]string{"ppc.source": filepath.Base(model), "ppc.seed": strconv.FormatUint(seed, 10)}
	if lo.Preset != "" {
		doc += " --preset " + lo.Preset
		meta["ppc.preset"] = lo.Preset
	}
	for _, k := range slices.Sorted(maps.Keys(lo.Set)) {
		doc += fmt.Sprintf(" --set %s=%s", k, lo.Set[k])
		meta["ppc.set."+k] = lo.Set[k]
	}
	for _, k := range slices.Sorted(maps.Keys(lo.Dims)) {
		doc += fmt.Sprintf(" --dim %s=%d", k, lo.Dims[k])
		meta["ppc.dim."+k] = strconv.Itoa(lo.Dims[k])
	}
	doc += fmt.Sprintf(", initial weights at --seed %d", seed)
	mp, err := export.Model(m, export.Options{Weight: weight, ProducerVersion: producer, DocString: doc, Metadata: meta, Opset: opset})
	if err != nil {
		// Errors at an op carry its position; the others name the file.
		var e *ir.Error
		if errors.As(err, &e) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %v", model, err)
	}
	return mp, nil
}
