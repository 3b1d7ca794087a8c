package onnx

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/frontend/onnx/onnxpb"
	"ppc.dev/ppc/internal/filecheck"
	"ppc.dev/ppc/ir"
)

func addModel() *mb {
	return model(13).Input("x", dtFloat, 2, 3).Init(f32n("w", 2, 3)).
		Node("Add", "add", in("x", "w"), in("y")).Output("y")
}

// TestBadInput checks that malformed models give precise messages naming the file and the
// node or tensor at fault.
func TestBadInput(t *testing.T) {
	valid := addModel().Bytes(t)
	cases := []struct {
		name string
		data func() []byte
		opts Options
		want string // exact message
	}{
		{"attention_kv_cache", func() []byte {
			return model(23).Input("q", dtFloat, 1, 2, 3, 4).Input("pk", dtFloat, 1, 2, 3, 4).
				Node("Attention", "attn", in("q", "q", "q", "", "pk", "pk"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "attn" (Attention): Attention with past_key/past_value (a KV cache for inference) is not supported`},
		{"attention_present", func() []byte {
			return model(23).Input("q", dtFloat, 1, 2, 3, 4).
				Node("Attention", "attn", in("q", "q", "q"), in("y", "pk")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "attn" (Attention): Attention output 1 (the present key/value or the QK product) is not supported; ppc computes Y only`},
		{"attention_3d", func() []byte {
			return model(23).Input("q", dtFloat, 1, 3, 8).
				Node("Attention", "attn", in("q", "q", "q"), in("y"), aInt("q_num_heads", 2), aInt("kv_num_heads", 2)).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "attn" (Attention): Attention input 0 is f32[1,3,8]: ppc takes 4-D Q, K and V [batch, heads, seq, head_dim], not the 3-D form with q_num_heads/kv_num_heads`},
		{"attention_causal_lengths", func() []byte {
			return model(23).Input("q", dtFloat, 1, 2, 3, 4).Input("k", dtFloat, 1, 2, 5, 4).
				Node("Attention", "attn", in("q", "k", "k"), in("y"), aInt("is_causal", 1)).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "attn" (Attention): Attention is_causal with 3 queries over 5 keys: ONNX aligns the causal mask at the top left and ppc at the bottom right, so only equal lengths are supported`},
		{"attention_heads", func() []byte {
			return model(23).Input("q", dtFloat, 1, 4, 3, 4).Input("k", dtFloat, 1, 3, 3, 4).
				Node("Attention", "attn", in("q", "k", "k"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "attn" (Attention): Attention: k's 3 heads must divide q's 4`},
		{"attention_softcap", func() []byte {
			return model(23).Input("q", dtFloat, 1, 2, 3, 4).
				Node("Attention", "attn", in("q", "q", "q"), in("y"), aFloat("softcap", 30)).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "attn" (Attention): Attention with softcap 30 is not supported`},
		{"truncated", func() []byte { return valid[:len(valid)/2] }, Options{},
			"model.onnx: not a valid ONNX model: cannot parse invalid wire-format data"},
		{"missing_input", func() []byte {
			return model(13).Input("x", dtFloat, 2).Node("Add", "add", in("x", "nope"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "add" (Add): input "nope" is not defined (no graph input, initializer or earlier node output has that name)`},
		{"raw_data_length", func() []byte {
			w := f32("w", []int64{3}, 1, 2)
			return model(13).Input("x", dtFloat, 3).Init(w).Node("Add", "add", in("x", "w"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: initializer "w": raw data holds 8 bytes, but FLOAT [3] needs 12`},
		{"typed_data_length", func() []byte {
			return model(13).Input("x", dtInt64, 3).Init(i64("w", []int64{3}, 1, 2)).Node("Add", "add", in("x", "w"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: initializer "w": holds 2 elements, but INT64 [3] needs 3`},
		{"unknown_dtype", func() []byte {
			w := f32("w", []int64{1}, 1)
			w.DataType = 99
			return model(13).Input("x", dtFloat, 1).Init(w).Node("Add", "add", in("x", "w"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: initializer "w": unknown data type 99`},
		{"unsupported_dtype", func() []byte {
			return model(13).Input("s", dtString, 2).Node("Identity", "id", in("s"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: graph input "s": unsupported data type STRING`},
		{"cast_dtype", func() []byte {
			return model(13).Input("x", dtFloat, 2).Node("Cast", "cast", in("x"), in("y"), aInt("to", 14)).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "cast" (Cast): attribute to: unsupported data type COMPLEX64`},
		{"inconsistent_shapes", func() []byte {
			return model(13).Input("a", dtFloat, 2, 3).Input("b", dtFloat, 4).Node("Add", "add", in("a", "b"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "add" (Add): add: shapes [2,3] and [4] do not broadcast`},
		{"declared_output", func() []byte {
			return model(13).Input("a", dtFloat, 2, 3).Node("Relu", "relu", in("a"), in("y")).OutputTyped("y", dtFloat, 2, 4).Bytes(t)
		}, Options{}, `model.onnx: graph output "y" is declared with dim 1 = 4 but computes f32[2,3] (inconsistent shapes)`},
		{"unbound_dims", func() []byte {
			return model(13).Input("ids", dtInt64, "batch_size", "seq_len").Input("mask", dtInt64, "batch_size", "seq_len", nil).
				Node("Add", "add", in("ids", "mask"), in("y")).Output("y").Bytes(t)
		}, Options{Dims: map[string]int{"other": 1}},
			`model.onnx: unbound symbolic dims: batch_size (input "ids" dim 0, input "mask" dim 0); seq_len (input "ids" dim 1, input "mask" dim 1); (unnamed) (input "mask" dim 2); bind each with --dim NAME=VALUE, e.g. --dim batch_size=8; unnamed dims cannot be bound and must be fixed in the model`},
		{"unknown_dim", func() []byte { return addModel().Bytes(t) }, Options{Dims: map[string]int{"batch": 2}},
			`model.onnx: --dim batch: the model has no symbolic dim of that name (the model's inputs have no symbolic dims)`},
		{"misspelt_dim", func() []byte {
			return model(13).Input("ids", dtInt64, "batch_size", 4).Node("Relu", "relu", in("ids"), in("y")).Output("y").Bytes(t)
		}, Options{Dims: map[string]int{"batch_size": 2, "batch": 2}},
			`model.onnx: --dim batch: the model has no symbolic dim of that name (its symbolic dims are batch_size)`},
		{"microbatches", func() []byte { return addModel().Bytes(t) }, Options{Microbatches: 4},
			`model.onnx: --microbatches 4: graph input "x" has batch size 2 (its leading dim), which does not divide into 4 micro-batches; batch sizes that do: 4`},
		{"kernel_shape", func() []byte {
			return model(13).Input("x", dtFloat, 1, 3, 16, 16).Init(f32n("w", 64, 3, 7, 7)).
				Node("Conv", "Conv_3", in("x", "w"), in("y"), aInts("kernel_shape", 3, 3)).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "Conv_3" (Conv): kernel_shape [3,3] does not match weight shape [64,3,7,7]`},
		{"sequence_op", func() []byte {
			return model(13).Input("x", dtFloat, 2).Node("SequenceConstruct", "seq", in("x"), in("s")).Output("s").Bytes(t)
		}, Options{}, `model.onnx: node "seq" (SequenceConstruct): unsupported op SequenceConstruct (sequence ops are not supported)`},
		{"string_op", func() []byte {
			return model(13).Input("x", dtFloat, 2).Node("StringNormalizer", "", in("x"), in("s")).Output("s").Bytes(t)
		}, Options{}, `model.onnx: node "s" (StringNormalizer): unsupported op StringNormalizer (string ops are not supported)`},
		{"if", func() []byte {
			return model(13).Input("c", dtBool).Node("If", "branch", in("c"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "branch" (If): unsupported op If (control-flow ops are not supported)`},
		{"loop", func() []byte {
			return model(13).Input("c", dtBool).Node("Loop", "loop_1", in("", "c"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "loop_1" (Loop): unsupported op Loop (control-flow ops are not supported)`},
		{"scan", func() []byte {
			return model(13).Input("c", dtFloat, 2).Node("Scan", "scan", in("c"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "scan" (Scan): unsupported op Scan (control-flow ops are not supported)`},
		{"custom_domain", func() []byte {
			m := model(13).Input("x", dtFloat, 2).Node("FusedMatMul", "fm", in("x", "x"), in("y")).Output("y")
			m.M.Graph.Node[0].Domain = "com.microsoft"
			return m.Bytes(t)
		}, Options{}, `model.onnx: node "fm" (FusedMatMul): unsupported op com.microsoft.FusedMatMul (operator domain com.microsoft is not supported)`},
		{"not_implemented", func() []byte {
			return model(13).Input("x", dtFloat, 2).Node("NonZero", "nz", in("x"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "nz" (NonZero): unsupported op NonZero (not implemented by ppc's ONNX importer)`},
		{"dynamic_shape", func() []byte {
			return model(13).Input("x", dtFloat, 2, 3).Input("s", dtInt64, 1).Node("Reshape", "view", in("x", "s"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: node "view" (Reshape): input "s" (shape) must be a compile-time constant (ppc needs static shapes), but it depends on graph inputs`},
		{"unproduced_output", func() []byte {
			return model(13).Input("x", dtFloat, 1, 1, 4, 4).
				Node("MaxPool", "pool", in("x"), in("y", "idx"), aInts("kernel_shape", 2, 2)).Output("idx").Bytes(t)
		}, Options{}, `model.onnx: graph output "idx": input "idx" is output 1 of node "pool" (MaxPool), which ppc does not produce`},
		{"external_without_dir", func() []byte {
			w := &onnxpb.TensorProto{Name: "w", Dims: []int64{2}, DataType: dtFloat, DataLocation: onnxpb.TensorProto_EXTERNAL,
				ExternalData: []*onnxpb.StringStringEntryProto{{Key: "location", Value: "w.bin"}}}
			return model(13).Input("x", dtFloat, 2).Init(w).Node("Add", "add", in("x", "w"), in("y")).Output("y").Bytes(t)
		}, Options{}, `model.onnx: initializer "w": external data "w.bin" cannot be read: the model was given as bytes without a directory`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Import("model.onnx", c.data(), "", c.opts)
			if err == nil {
				t.Fatalf("no error; want %s", c.want)
			}
			if err.Error() != c.want {
				t.Fatalf("got  %s\nwant %s", err, c.want)
			}
			var e *ir.Error
			if !errors.As(err, &e) {
				t.Errorf("error is %T, not *ir.Error", err)
			}
		})
	}
}

// TestRandomBytes: garbage is an error naming the file, never a panic.
func TestRandomBytes(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	valid := addModel().Bytes(t)
	for i := 0; i < 2000; i++ {
		var data []byte
		if i%2 == 0 {
			data = make([]byte, rng.Intn(200))
			rng.Read(data)
		} else {
			data = append([]byte(nil), valid...)
			for k := 0; k < 1+rng.Intn(4); k++ {
				data[rng.Intn(len(data))] = byte(rng.Intn(256))
			}
		}
		_, err := Import("model.onnx", data, "", Options{})
		if err != nil && !strings.HasPrefix(err.Error(), "model.onnx") {
			t.Fatalf("error does not name the file: %v", err)
		}
	}
}

func externalModel(t *testing.T, length string) []byte {
	w := &onnxpb.TensorProto{Name: "w", Dims: []int64{2, 3}, DataType: dtFloat, DataLocation: onnxpb.TensorProto_EXTERNAL,
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: "location", Value: "weights.bin"}, {Key: "offset", Value: "4"}}}
	if length != "" {
		w.ExternalData = append(w.ExternalData, &onnxpb.StringStringEntryProto{Key: "length", Value: length})
	}
	return model(13).Input("x", dtFloat, 2, 3).Init(w).Node("Add", "add", in("x", "w"), in("y")).Output("y").Bytes(t)
}

func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, externalModel(t, "24"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Missing file.
	_, err := Load(path, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), path+`: initializer "w": external data: open `) {
		t.Fatalf("missing file: %v", err)
	}
	// Too short: 4 bytes of offset plus 20 of the 24 needed.
	bin := make([]byte, 4+24)
	for i := 0; i < 6; i++ {
		binary.LittleEndian.PutUint32(bin[4+4*i:], math.Float32bits(float32(i)+0.5))
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), bin[:24], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, Options{})
	want := path + `: initializer "w": external data file ` + filepath.Join(dir, "weights.bin") + ` holds 24 bytes; the tensor needs 24 at offset 4`
	if err == nil || err.Error() != want {
		t.Fatalf("short file:\ngot  %v\nwant %s", err, want)
	}
	// Wrong declared length.
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), bin, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, externalModel(t, "20"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, Options{})
	if err == nil || !strings.Contains(err.Error(), `initializer "w": external data "weights.bin": length 20 does not match the 24 bytes the tensor needs`) {
		t.Fatalf("bad length: %v", err)
	}
	// Good.
	if err := os.WriteFile(path, externalModel(t, ""), 0o644); err != nil {
		t.Fatal(err)
	}
	mod, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checks := `
// CHECK: module @test_graph
// CHECK: %w: f32[2,3] {data = dense<f32[2,3]: [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]>, param}
// CHECK: %y = add %x, %w : f32[2,3]
`
	if err := filecheck.Run("external", checks, 0, mod.String()); err != nil {
		t.Fatal(err)
	}
	// A location escaping the model's directory is refused.
	m := model(13).Input("x", dtFloat, 2).Init(&onnxpb.TensorProto{Name: "w", Dims: []int64{2}, DataType: dtFloat,
		DataLocation: onnxpb.TensorProto_EXTERNAL, ExternalData: []*onnxpb.StringStringEntryProto{{Key: "location", Value: "../secret.bin"}}}).
		Node("Add", "add", in("x", "w"), in("y")).Output("y")
	_, err = Import("model.onnx", m.Bytes(t), dir, Options{})
	if err == nil || !strings.Contains(err.Error(), `external data location "../secret.bin" must be a relative path inside the model's directory`) {
		t.Fatalf("escape: %v", err)
	}
}

// TestVerifierNamesNode: an error found after building (here by the importer's own
// inference of a new op) carries the ONNX node.
func TestNewOpErrorsNameNode(t *testing.T) {
	m := model(13).Input("x", dtFloat, 1, 3, 4, 4).
		Node("MaxPool", "pool", in("x"), in("y"), aInts("kernel_shape", 2, 2), aInts("pads", 2, 2, 2, 2)).Output("y")
	_, err := Import("model.onnx", m.Bytes(t), "", Options{})
	want := `model.onnx: node "pool" (MaxPool): max_pool: pads [2 2 2 2] must be smaller than the kernel [2 2]`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

// TestHugeConstantsStayLazy: a ConstantOfShape of 2^40 elements is a splat, and reducing it
// is left to run time instead of walking every element at import (found by review of the
// fold path; a regression here hangs).
func TestHugeConstantsStayLazy(t *testing.T) {
	m := model(13).Input("x", dtFloat, 1).
		Constant("shape", i64("", []int64{2}, 1<<20, 1<<20)).
		Node("ConstantOfShape", "big", in("shape"), in("z")).
		Node("ReduceSum", "sum", in("z"), in("s"), aInt("keepdims", 0)).
		Node("Add", "add", in("x", "s"), in("y")).Output("y")
	mod, err := Import("model.onnx", m.Bytes(t), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	checks := `
// CHECK: %z = constant {value = dense<f32[1048576,1048576]: 0>}
// CHECK-NEXT: %s = reduce_sum %z : f32[]
`
	if err := filecheck.Run("huge", checks, 0, mod.String()); err != nil {
		t.Fatal(err)
	}
}
