//go:build ignore

// gen_gpt_onnx writes gpt-tiny.onnx, a 2-layer GPT-2-style language model in the form
// torch.onnx.export (TorchScript exporter, PyTorch 2.x, opset 17) gives it, built with ppc's
// own ONNX proto subset (frontend/onnx/onnxpb). `go generate ./frontend/onnx` runs it; by
// hand:
//
//	cd testdata/models && go run gen_gpt_onnx.go
//
// The model: vocab 64, d_model 32, 4 heads of 8, d_ff 128, 16 learned positions, sequence 8,
// batch symbolic ("batch": bind it with --dim batch=N). Input input_ids: int64[batch, 8];
// output logits: float[batch, 8, 64]. Pre-LN blocks, GELU (erf) MLP, a final LayerNorm and
// an output head tied to the token embedding.
//
// The two layers are written in the two styles exporters produce, so that the importer's
// raising and the sharding passes meet both:
//
//   - layer 0 as an eval-mode export with constant folding (the default): LayerNormalization
//     ops (opset 17); every Linear is MatMul by a weight pre-transposed into an
//     initializer named onnx::MatMul_<n> (the exporter's name for folded constants),
//     then Add(bias, ·); k is reshaped and transposed once by perm [0, 2, 3, 1] (the
//     exporter fuses view·transpose(1, 2)·transpose(-2, -1)); the causal mask is a Slice of
//     a registered bool buffer [1, 1, 16, 16] and a Where against float32's lowest value
//     (Hugging Face's GPT-2).
//   - layer 1 with LayerNorm decomposed as exporters before opset 17 write it (ReduceMean,
//     Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) and its Linears as an export without
//     constant folding (training mode) writes them: Transpose of the [out, in] weight,
//     MatMul, Add; k is transposed twice; the causal mask is a Constant [1, 1, 8, 8] added
//     to the scores.
//
// Both: q, k and v are separate Linears; heads are split by Reshape (its shape a Concat of
// the batch size read with Shape and Gather, as dynamic axes make the exporter write it) and
// Transpose; scores are divided by sqrt(head_dim); GELU is the erf decomposition
// (x · (erf(x / √2) + 1)) · 0.5 of torch's opset-9 symbolic; positions are
// Range(0, Shape(input_ids)[1]) gathered from the position table; the head is
// MatMul(x, Transpose(wte)), which keeps the tie (constant folding would copy wte).
//
// onnxpb has every field this needs. Real exports also carry value_info (the exporter's
// shapes of intermediate tensors), which the importer does not read, and doc_string stack
// traces; they are left out.
//
// Initializer values are deterministic: splitmix64 and Box–Muller from a fixed seed, so the
// file is byte-identical on every run.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"

	"google.golang.org/protobuf/proto"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
)

const (
	vocab   = 64
	dModel  = 32
	nHeads  = 4
	headDim = dModel / nHeads
	dFF     = 4 * dModel
	seq     = 8
	nPos    = 16 // learned positions (GPT-2's n_positions), more than the sequence uses
	nLayers = 2
	eps     = 1e-5
	seed    = 20240617
)

// ONNX TensorProto data types.
const (
	tFloat = 1
	tInt64 = 7
	tBool  = 9
)

// rng is splitmix64: a fixed, documented sequence whatever the Go version.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform is in (0, 1).
func (r *rng) uniform() float64 { return (float64(r.next()>>11) + 0.5) / (1 << 53) }

// normal is Box–Muller: one standard normal sample per call.
func (r *rng) normal() float64 {
	return math.Sqrt(-2*math.Log(r.uniform())) * math.Cos(2*math.Pi*r.uniform())
}

// gen builds the graph in execution order, naming nodes and tensors as the TorchScript
// exporter does: node "/scope/Op" (then "/scope/Op_1", …), output "<node>_output_0".
type gen struct {
	g      *onnxpb.GraphProto
	rand   *rng
	count  map[string]int // node names used per scope and op
	folded int            // the next onnx::MatMul_<n> number
}

func (b *gen) node(scope, op string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	return b.nodeTo(scope, op, "", inputs, attrs...)
}

// nodeTo is node with the output named out ("" for the exporter's name).
func (b *gen) nodeTo(scope, op, out string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	key := scope + "/" + op
	name := key
	if n := b.count[key]; n > 0 {
		name = fmt.Sprintf("%s_%d", key, n)
	}
	b.count[key]++
	if out == "" {
		out = name + "_output_0"
	}
	b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: name, OpType: op, Input: inputs, Output: []string{out}, Attribute: attrs})
	return out
}

func (b *gen) constant(scope string, t *onnxpb.TensorProto) string {
	return b.node(scope, "Constant", nil, attrTensor("value", t))
}

func (b *gen) scalarF(scope string, v float32) string { return b.constant(scope, floats(nil, v)) }

func (b *gen) ints(scope string, dims []int64, v ...int64) string {
	return b.constant(scope, int64s(dims, v...))
}

// initializer adds a float initializer of normal values (std, plus mean).
func (b *gen) initializer(name string, mean, std float64, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(mean + std*b.rand.normal())
	}
	t := floats(dims, v...)
	t.Name = name
	b.g.Initializer = append(b.g.Initializer, t)
	return name
}

func floats(dims []int64, v ...float32) *onnxpb.TensorProto {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return &onnxpb.TensorProto{Dims: dims, DataType: tFloat, RawData: raw}
}

func int64s(dims []int64, v ...int64) *onnxpb.TensorProto {
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	return &onnxpb.TensorProto{Dims: dims, DataType: tInt64, RawData: raw}
}

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INT, I: v}
}

func attrInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INTS, Ints: v}
}

func attrFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_FLOAT, F: v}
}

func attrTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_TENSOR, T: t}
}

func in(names ...string) []string { return names }

// batchShape is the shape [batch, tail…] as the exporter computes it under dynamic axes:
// Shape(x), Gather index 0, Unsqueeze, Concat with the static dims.
func (b *gen) batchShape(scope, x string, tail ...int64) string {
	shape := b.node(scope, "Shape", in(x))
	n := b.node(scope, "Gather", in(shape, b.ints(scope, nil, 0)), attrInt("axis", 0))
	n1 := b.node(scope, "Unsqueeze", in(n, b.ints(scope, []int64{1}, 0)))
	return b.node(scope, "Concat", in(n1, b.ints(scope, []int64{int64(len(tail))}, tail...)), attrInt("axis", 0))
}

// linear is a Linear layer: folded, MatMul by an onnx::MatMul_<n> initializer [in, out];
// else Transpose of the module's [out, in] weight, then MatMul. Then Add(bias, ·).
func (b *gen) linear(scope, param, x string, nIn, nOut int64, folded bool, std float64) string {
	var w string
	if folded {
		w = b.initializer(fmt.Sprintf("onnx::MatMul_%d", b.folded), 0, std, nIn, nOut)
		b.folded++
	} else {
		w = b.node(scope, "Transpose", in(b.initializer(param+".weight", 0, std, nOut, nIn)), attrInts("perm", 1, 0))
	}
	y := b.node(scope, "MatMul", in(x, w))
	bias := b.initializer(param+".bias", 0, 0.02, nOut)
	return b.node(scope, "Add", in(bias, y))
}

// layerNorm is LayerNormalization (opset 17), or its decomposition.
func (b *gen) layerNorm(scope, param, x string, decomposed bool) string {
	w := b.initializer(param+".weight", 1, 0.1, dModel)
	bias := b.initializer(param+".bias", 0, 0.02, dModel)
	if !decomposed {
		return b.node(scope, "LayerNormalization", in(x, w, bias), attrInt("axis", -1), attrFloat("epsilon", eps))
	}
	mean := b.node(scope, "ReduceMean", in(x), attrInts("axes", -1), attrInt("keepdims", 1))
	d := b.node(scope, "Sub", in(x, mean))
	sq := b.node(scope, "Pow", in(d, b.scalarF(scope, 2)))
	v := b.node(scope, "ReduceMean", in(sq), attrInts("axes", -1), attrInt("keepdims", 1))
	ve := b.node(scope, "Add", in(v, b.scalarF(scope, eps)))
	s := b.node(scope, "Sqrt", in(ve))
	n := b.node(scope, "Div", in(d, s))
	y := b.node(scope, "Mul", in(n, w))
	return b.node(scope, "Add", in(y, bias))
}

// heads is [batch, seq, d_model] → [batch, heads, seq, head_dim] (perm [0, 2, 1, 3]), or
// [batch, heads, head_dim, seq] for keys written with one fused transpose.
func (b *gen) heads(scope, x string, perm ...int64) string {
	r := b.node(scope, "Reshape", in(x, b.batchShape(scope, x, seq, nHeads, headDim)))
	return b.node(scope, "Transpose", in(r), attrInts("perm", perm...))
}

func (b *gen) attention(scope, param, x string, layer int) string {
	legacy := layer == 1
	std := 0.02
	projStd := 0.02 / math.Sqrt(2*nLayers)
	q := b.linear(scope+"/q_proj", param+".q_proj", x, dModel, dModel, !legacy, std)
	k := b.linear(scope+"/k_proj", param+".k_proj", x, dModel, dModel, !legacy, std)
	v := b.linear(scope+"/v_proj", param+".v_proj", x, dModel, dModel, !legacy, std)
	qh := b.heads(scope, q, 0, 2, 1, 3)
	var kt string
	if legacy {
		kt = b.node(scope, "Transpose", in(b.heads(scope, k, 0, 2, 1, 3)), attrInts("perm", 0, 1, 3, 2))
	} else {
		kt = b.heads(scope, k, 0, 2, 3, 1)
	}
	vh := b.heads(scope, v, 0, 2, 1, 3)
	s := b.node(scope, "MatMul", in(qh, kt))
	s = b.node(scope, "Div", in(s, b.scalarF(scope, float32(math.Sqrt(headDim)))))
	lowest := float32(-math.MaxFloat32)
	if legacy {
		mask := make([]float32, seq*seq)
		for i := range seq {
			for j := i + 1; j < seq; j++ {
				mask[i*seq+j] = lowest
			}
		}
		s = b.node(scope, "Add", in(s, b.constant(scope, floats([]int64{1, 1, seq, seq}, mask...))))
	} else {
		buf := make([]byte, nPos*nPos)
		for i := range nPos {
			for j := 0; j <= i; j++ {
				buf[i*nPos+j] = 1
			}
		}
		name := param + ".bias"
		b.g.Initializer = append(b.g.Initializer, &onnxpb.TensorProto{Name: name, Dims: []int64{1, 1, nPos, nPos}, DataType: tBool, RawData: buf})
		causal := b.node(scope, "Slice", in(name, b.ints(scope, []int64{2}, 0, 0), b.ints(scope, []int64{2}, seq, seq),
			b.ints(scope, []int64{2}, 2, 3), b.ints(scope, []int64{2}, 1, 1)))
		s = b.node(scope, "Where", in(causal, s, b.scalarF(scope, lowest)))
	}
	p := b.node(scope, "Softmax", in(s), attrInt("axis", -1))
	y := b.node(scope, "MatMul", in(p, vh))
	y = b.node(scope, "Transpose", in(y), attrInts("perm", 0, 2, 1, 3))
	y = b.node(scope, "Reshape", in(y, b.batchShape(scope, y, seq, dModel)))
	return b.linear(scope+"/out_proj", param+".out_proj", y, dModel, dModel, !legacy, projStd)
}

// gelu is torch's opset-9 GELU: (x · (erf(x / √2) + 1)) · 0.5.
func (b *gen) gelu(scope, x string) string {
	d := b.node(scope, "Div", in(x, b.scalarF(scope, float32(math.Sqrt2))))
	e := b.node(scope, "Erf", in(d))
	a := b.node(scope, "Add", in(e, b.scalarF(scope, 1)))
	m := b.node(scope, "Mul", in(x, a))
	return b.node(scope, "Mul", in(m, b.scalarF(scope, 0.5)))
}

func (b *gen) block(x string, layer int) string {
	scope := fmt.Sprintf("/transformer/h.%d", layer)
	param := fmt.Sprintf("transformer.h.%d", layer)
	legacy := layer == 1
	h := b.layerNorm(scope+"/ln_1", param+".ln_1", x, legacy)
	a := b.attention(scope+"/attn", param+".attn", h, layer)
	x = b.node(scope, "Add", in(x, a))
	h = b.layerNorm(scope+"/ln_2", param+".ln_2", x, legacy)
	h = b.linear(scope+"/mlp/c_fc", param+".mlp.c_fc", h, dModel, dFF, !legacy, 0.02)
	h = b.gelu(scope+"/mlp/act", h)
	h = b.linear(scope+"/mlp/c_proj", param+".mlp.c_proj", h, dFF, dModel, !legacy, 0.02/math.Sqrt(2*nLayers))
	return b.node(scope, "Add", in(x, h))
}

func build() *onnxpb.ModelProto {
	b := &gen{g: &onnxpb.GraphProto{Name: "main_graph"}, rand: &rng{s: seed}, count: map[string]int{}, folded: 301}
	dim := func(d any) *onnxpb.TensorShapeProto_Dimension {
		if s, ok := d.(string); ok {
			return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: s}}
		}
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d.(int))}}
	}
	tensorType := func(dt int32, dims ...any) *onnxpb.TypeProto {
		sh := &onnxpb.TensorShapeProto{}
		for _, d := range dims {
			sh.Dim = append(sh.Dim, dim(d))
		}
		return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: dt, Shape: sh}}}
	}
	b.g.Input = []*onnxpb.ValueInfoProto{{Name: "input_ids", Type: tensorType(tInt64, "batch", seq)}}

	const top = "/transformer"
	wte := b.initializer("transformer.wte.weight", 0, 0.02, vocab, dModel)
	wpe := b.initializer("transformer.wpe.weight", 0, 0.01, nPos, dModel)
	tok := b.node(top+"/wte", "Gather", in(wte, "input_ids"), attrInt("axis", 0))
	shape := b.node(top, "Shape", in("input_ids"))
	n := b.node(top, "Gather", in(shape, b.ints(top, nil, 1)), attrInt("axis", 0))
	pos := b.node(top, "Range", in(b.ints(top, nil, 0), n, b.ints(top, nil, 1)))
	pos = b.node(top, "Unsqueeze", in(pos, b.ints(top, []int64{1}, 0)))
	pe := b.node(top+"/wpe", "Gather", in(wpe, pos), attrInt("axis", 0))
	x := b.node(top, "Add", in(tok, pe))
	for l := range nLayers {
		x = b.block(x, l)
	}
	x = b.layerNorm(top+"/ln_f", "transformer.ln_f", x, false)
	head := b.node("/lm_head", "Transpose", in(wte), attrInts("perm", 1, 0))
	b.nodeTo("/lm_head", "MatMul", "logits", in(x, head))
	b.g.Output = []*onnxpb.ValueInfoProto{{Name: "logits", Type: tensorType(tFloat, "batch", seq, vocab)}}
	return &onnxpb.ModelProto{
		IrVersion:       8,
		ProducerName:    "pytorch",
		ProducerVersion: "2.1.0",
		OpsetImport:     []*onnxpb.OperatorSetIdProto{{Version: 17}},
		Graph:           b.g,
	}
}

func main() {
	out := flag.String("o", "gpt-tiny.onnx", "output file")
	flag.Parse()
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(build())
	if err == nil {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen_gpt_onnx:", err)
		os.Exit(1)
	}
}
