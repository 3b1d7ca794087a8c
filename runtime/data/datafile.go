package data

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/kernels/cpu"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/fault"
)

// Options say how to read training data.
type Options struct {
	// Seed draws the windows of a token stream.
	Seed uint64
	// TokenDType is the element type of a raw token file: "uint16" (nanoGPT's train.bin) or
	// "uint32"; empty reads uint16. The width cannot be told from the vocabulary: a uint32
	// file of a small vocabulary read as uint16 is valid tokens with every other one 0. A
	// .npy carries its own dtype, so giving one that disagrees is an error.
	TokenDType string
}

// Open opens training data given as `FILE` (a token stream: raw little-endian tokens of
// Options.TokenDType, or a 1-D integer .npy) or as `NAME=FILE.npy,…` (one array per model
// input whose first axis is the sample). Data that would feed a batch with repeated or
// mis-paired samples is refused. Warnings are for data that is valid but looks wrong (a raw
// file that looks like uint32 tokens read as uint16).
func Open(spec string, plan *codegen.Plan, o Options) (src Source, warnings []string, err error) {
	switch o.TokenDType {
	case "", "uint16", "uint32":
	default:
		return nil, nil, fault.Inputf("--data-dtype %q: want uint16 or uint32", o.TokenDType)
	}
	if !strings.Contains(spec, "=") {
		return openTokenStream(spec, plan, o)
	}
	if o.TokenDType != "" {
		return nil, nil, fault.Inputf("--data-dtype applies to a token file; arrays given as NAME=FILE.npy carry their own dtypes")
	}
	src, err = openArrays(spec, plan)
	return src, nil, err
}

func openArrays(spec string, plan *codegen.Plan) (Source, error) {
	src := &arrayData{plan: plan, arrays: map[string]*array{}}
	paths := map[string]string{}
	for _, kv := range strings.Split(spec, ",") {
		name, path, ok := strings.Cut(strings.TrimSpace(kv), "=")
		name, path = strings.TrimSpace(name), strings.TrimSpace(path)
		if !ok || name == "" || path == "" {
			return nil, fault.Inputf("--data %q: want NAME=FILE.npy", kv)
		}
		if _, dup := src.arrays[name]; dup {
			return nil, fault.Inputf("--data gives input %q twice", name)
		}
		var in *codegen.Input
		for i := range plan.Inputs {
			if plan.Inputs[i].Name == name {
				in = &plan.Inputs[i]
			}
		}
		if in == nil {
			return nil, fault.Inputf("--data: the model has no input %q", name)
		}
		a, err := readNpy(path)
		if err != nil {
			return nil, &fault.InputError{Err: err}
		}
		if len(a.shape) == 0 || !ir.Shape(a.shape[1:]).Equal(in.SampleShape()) {
			return nil, fault.Inputf("%s: array shape %v does not hold samples of input %q (%v per sample)", path, a.shape, name, in.SampleShape())
		}
		if a.shape[0] == 0 {
			return nil, fault.Inputf("%s: no samples", path)
		}
		if err := checkArrayValues(path, *in, a); err != nil {
			return nil, err
		}
		if err := a.store(*in); err != nil {
			return nil, fault.Inputf("%s: %v", path, err)
		}
		src.arrays[name] = a
		paths[name] = path
	}
	for _, in := range plan.Inputs {
		if _, ok := src.arrays[in.Name]; !ok {
			return nil, fault.Inputf("--data gives no array for input %q", in.Name)
		}
	}
	// Sample i of every input is read together, and each array wraps at its own length: arrays
	// of different lengths would pair x[i] with y[j≠i] from the shorter one's second pass on.
	first := plan.Inputs[0]
	for _, in := range plan.Inputs[1:] {
		if a, b := src.arrays[first.Name].shape[0], src.arrays[in.Name].shape[0]; a != b {
			var counts []string
			for _, in := range plan.Inputs {
				counts = append(counts, fmt.Sprintf("%s has %d (%s)", in.Name, src.arrays[in.Name].shape[0], paths[in.Name]))
			}
			return nil, fault.Inputf("--data: the inputs have different numbers of samples: %s; sample i of each input goes together, so every array needs the same number", strings.Join(counts, ", "))
		}
	}
	// A data set smaller than one batch would wrap inside the batch: the same sample twice
	// in one step.
	for _, in := range plan.Inputs {
		if n, need := src.arrays[in.Name].shape[0], in.Samples()*plan.GlobalMicrobatches(); n < need {
			return nil, fault.Inputf("--data: %s holds %d sample(s) of input %q, fewer than one batch needs: %d (%d per micro-batch × %d micro-batches)",
				paths[in.Name], n, in.Name, need, in.Samples(), plan.GlobalMicrobatches())
		}
	}
	return src, nil
}

// checkArrayValues checks, before training starts, that an array can feed its input: whole
// numbers for an integer input, within the declared range for tokens and class labels.
// Otherwise a bad label would stop training at whatever step first samples it, or a
// fractional one would be truncated without a word.
func checkArrayValues(path string, in codegen.Input, a *array) error {
	dt, ok := ir.ParseDType(in.DType)
	if !ok || !dt.IsInt() {
		return nil
	}
	per := max(len(a.vals)/a.shape[0], 1)
	for i, v := range a.vals {
		switch {
		case v != math.Trunc(v):
			return fault.Inputf("%s: sample %d: value %v is not an integer, but input %q is %s", path, i/per, v, in.Name, in.DType)
		case in.Range != nil && (v < float64(in.Range[0]) || v >= float64(in.Range[1])):
			return fault.Inputf("%s: sample %d: value %v is outside [%d, %d), the range of input %q", path, i/per, v, in.Range[0], in.Range[1], in.Name)
		}
	}
	return nil
}

// array is a loaded .npy array as float64 values (exact for the integer ranges of token ids
// and labels), and then (store) as the bytes of its input's dtype.
type array struct {
	shape []int
	vals  []float64
	typed []byte   // the values in dtype's bytes
	dtype ir.DType // the input's
}

// store converts the array once into the bytes of in's dtype and drops the float64 values,
// so that a step's input is a copy: converting each step's samples cost a float64 batch
// allocated and converted a step (0.5–1.1 ms of a 20 ms GoogLeNet step on one image).
func (a *array) store(in codegen.Input) error {
	dt, ok := ir.ParseDType(in.DType)
	if !ok {
		return fmt.Errorf("input %q has unknown dtype %q", in.Name, in.DType)
	}
	a.dtype = dt
	a.typed = make([]byte, len(a.vals)*dt.Size())
	if err := storeAny(device.Tensor{Type: ir.Type{DType: dt, Shape: ir.Shape{len(a.vals)}}, Data: a.typed}, a.vals); err != nil {
		return err
	}
	a.vals = nil
	return nil
}

func readNpy(path string) (*array, error) {
	t, err := ReadNpy(path)
	if err != nil {
		return nil, err
	}
	return &array{shape: t.Type.Shape, vals: Float64s(t)}, nil
}

type arrayData struct {
	plan   *codegen.Plan
	arrays map[string]*array
}

func (d *arrayData) Fill(in codegen.Input, step, mb int, t device.Tensor) error {
	a := d.arrays[in.Name]
	samples := in.Samples()
	per := t.Type.NumElements() / max(samples, 1)
	global := samples * d.plan.GlobalMicrobatches()
	if t.Type.DType != a.dtype {
		return fmt.Errorf("input %q: the program's tensor is %s, the plan's input %s", in.Name, t.Type.DType, a.dtype)
	}
	size := t.Type.DType.Size()
	for i := 0; i < samples; i++ {
		row := ((step-1)*global + mb*samples + i) % a.shape[0]
		copy(t.Data[i*per*size:(i+1)*per*size], a.typed[row*per*size:(row+1)*per*size])
	}
	return nil
}

// tokenStream samples windows of a token file: sample s of step t reads tokens at a random
// offset (from the seed, step and sample index); labels with shift_of read the next tokens.
type tokenStream struct {
	path   string
	tokens []uint32
	seed   uint64
	plan   *codegen.Plan
}

// npyTokenTypes names the .npy dtypes a token stream may have as --data-dtype spells them.
var npyTokenTypes = map[string]string{"u2": "uint16", "u4": "uint32", "i8": "int64", "i4": "int32", "u1": "uint8", "i1": "int8", "f8": "float64", "f4": "float32"}

func openTokenStream(path string, plan *codegen.Plan, o Options) (Source, []string, error) {
	var vocab, seq, samples int
	for _, in := range plan.Inputs {
		if in.Range != nil && !in.Label {
			vocab, seq, samples = in.Range[1], 1, in.Samples()
			if sh := in.SampleShape(); len(sh) > 0 {
				seq = sh[len(sh)-1]
			}
		} else if in.ShiftOf == "" && in.Range == nil {
			return nil, nil, fault.Inputf("--data %s: a token stream feeds token inputs, but the model has input %q (%s); give NAME=FILE.npy per input", path, in.Name, in.DType)
		}
	}
	if vocab == 0 {
		return nil, nil, fault.Inputf("--data %s: the model has no token input", path)
	}
	var toks []uint32
	var warnings []string
	if strings.EqualFold(filepath.Ext(path), ".npy") {
		t, descr, err := readNpyTensor(path)
		if err != nil {
			return nil, nil, &fault.InputError{Err: err}
		}
		dt, ok := npyTokenTypes[descr]
		if !ok {
			dt = descr
		}
		if o.TokenDType != "" && dt != o.TokenDType {
			return nil, nil, fault.Inputf("--data-dtype %s: %s holds %s tokens; --data-dtype is for raw token files (a .npy carries its dtype)", o.TokenDType, path, dt)
		}
		if len(t.Type.Shape) != 1 {
			return nil, nil, fault.Inputf("%s: a token stream must be 1-D, has shape %v", path, t.Type.Shape)
		}
		vals := Float64s(t)
		toks = make([]uint32, len(vals))
		for i, v := range vals {
			// Converting a negative or fractional value (or NaN) would make up a token.
			if v != math.Trunc(v) || v < 0 || v >= float64(vocab) {
				return nil, nil, fault.Inputf("%s: token %v at position %d is not a token id in [0, %d)", path, v, i, vocab)
			}
			toks[i] = uint32(v)
		}
	} else {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, &fault.InputError{Err: err}
		}
		dtype, width := "uint16", 2
		if o.TokenDType == "uint32" {
			dtype, width = "uint32", 4
		}
		if len(raw)%width != 0 {
			return nil, nil, fault.Inputf("%s: %d bytes is not a whole number of %d-byte %s tokens", path, len(raw), width, dtype)
		}
		toks = make([]uint32, len(raw)/width)
		for i := range toks {
			if width == 2 {
				toks[i] = uint32(binary.LittleEndian.Uint16(raw[2*i:]))
			} else {
				toks[i] = binary.LittleEndian.Uint32(raw[4*i:])
			}
		}
		if width == 2 {
			warnings = uint16Warnings(path, toks, vocab, o.TokenDType == "")
		}
	}
	for i, t := range toks {
		if int(t) >= vocab {
			return nil, nil, fault.Inputf("%s: token %d at position %d is outside the vocabulary of %d", path, t, i, vocab)
		}
	}
	// Each sample is a window of seq tokens and its next token. Windows start anywhere, but a
	// file shorter than a batch of disjoint windows would repeat tokens within every batch.
	global := samples * plan.GlobalMicrobatches()
	if need := global * (seq + 1); len(toks) < need {
		return nil, nil, fault.Inputf("%s: %d tokens, fewer than one batch needs: %d sequences (%d per micro-batch × %d micro-batches) of %d+1 tokens = %d",
			path, len(toks), global, samples, plan.GlobalMicrobatches(), seq, need)
	}
	return &tokenStream{path: path, tokens: toks, seed: o.Seed, plan: plan}, warnings, nil
}

// uint16Warnings flags a raw file read as uint16 that was probably written as uint32: its
// odd tokens (the high halves of uint32 tokens below 65536) all 0, the others not.
func uint16Warnings(path string, toks []uint32, vocab int, byDefault bool) []string {
	var w []string
	if vocab > 1<<16 && byDefault {
		w = append(w, fmt.Sprintf("%s: read as uint16 tokens (the default), but the model's vocabulary of %d needs uint32 for ids of 65536 and up; give --data-dtype uint32 if the file holds uint32 tokens", path, vocab))
	}
	if len(toks) < 16 {
		return w
	}
	oddZero, evenNonzero := true, false
	for i, t := range toks {
		if i%2 == 1 {
			oddZero = oddZero && t == 0
		} else {
			evenNonzero = evenNonzero || t != 0
		}
	}
	if oddZero && evenNonzero {
		w = append(w, fmt.Sprintf("%s: every other uint16 token is 0, as when a file of uint32 tokens is read as uint16; give --data-dtype uint32 if it holds uint32 tokens", path))
	}
	return w
}

func (d *tokenStream) Fill(in codegen.Input, step, mb int, t device.Tensor) error {
	samples := in.Samples()
	per := t.Type.NumElements() / max(samples, 1)
	shift := 0
	if in.ShiftOf != "" {
		shift = 1
	}
	// A window is per tokens and the next one (the last label): it starts at 0 … len-per-1.
	windows := len(d.tokens) - per
	key := cpu.KeyFor(d.seed, fmt.Sprintf("data/stream/%d", step))
	vals := make([]float64, t.Type.NumElements())
	u := make([]float64, 1)
	for i := 0; i < samples; i++ {
		cpu.FillUniform(u, key, uint64(mb*samples+i), 0, 1)
		off := min(int(u[0]*float64(windows)), windows-1) + shift
		for j := 0; j < per; j++ {
			vals[i*per+j] = float64(d.tokens[off+j])
		}
	}
	return storeAny(t, vals)
}

// Float64s returns a tensor's elements as float64.
func Float64s(t device.Tensor) []float64 {
	n := t.Type.NumElements()
	out := make([]float64, n)
	get, err := elementGetter(t.Type.DType)
	if err != nil {
		return out
	}
	for i := range out {
		out[i] = get(t, i)
	}
	return out
}

func elementGetter(d ir.DType) (func(t device.Tensor, i int) float64, error) {
	switch d {
	case ir.F64, ir.F32, ir.F16, ir.BF16:
		return func(t device.Tensor, i int) float64 { return t.Float(i) }, nil
	case ir.I64:
		return func(t device.Tensor, i int) float64 { return float64(t.I64()[i]) }, nil
	case ir.I32:
		return func(t device.Tensor, i int) float64 { return float64(t.I32()[i]) }, nil
	case ir.I8:
		return func(t device.Tensor, i int) float64 { return float64(int8(t.Data[i])) }, nil
	case ir.U8, ir.Bool:
		return func(t device.Tensor, i int) float64 { return float64(t.Data[i]) }, nil
	}
	return nil, fmt.Errorf("dtype %s", d)
}
