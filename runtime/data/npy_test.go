package data_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ppc.dev/ppc/codegen"
	"ppc.dev/ppc/ir"
	. "ppc.dev/ppc/runtime/data"
	"ppc.dev/ppc/runtime/device"
	"ppc.dev/ppc/runtime/fault"
)

// npyFile builds a .npy file of the given format version with a raw header text (padded as
// numpy pads it) and data.
func npyFile(version byte, header string, data []byte) []byte {
	pre := 10
	if version > 1 {
		pre = 12
	}
	for (pre+len(header)+1)%64 != 0 {
		header += " "
	}
	header += "\n"
	b := append([]byte("\x93NUMPY"), version, 0)
	if version > 1 {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(header)))
	} else {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(header)))
	}
	return append(append(b, header...), data...)
}

func writeBytes(t testing.TB, dir, name string, b []byte) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// npyBytes writes x as dir/good.npy (WriteNpy) and returns the file's bytes.
func npyBytes(t testing.TB, dir string, x device.Tensor) []byte {
	t.Helper()
	good := filepath.Join(dir, "good.npy")
	if err := WriteNpy(good, x); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestReadNpyTruncated: a .npy cut anywhere — inside the magic, the header or the data — is
// refused with a message naming the file, never a panic or zero-padded data.
func TestReadNpyTruncated(t *testing.T) {
	dir := t.TempDir()
	data := npyBytes(t, dir, f32Tensor(1, 2, 3, 4))
	header := len(data) - 16 // the preamble and header; 4 float32s follow
	for n := range len(data) {
		p := writeBytes(t, dir, "cut.npy", data[:n])
		_, err := ReadNpy(p)
		want := p + ": not a .npy file"
		if n >= header {
			want = p + ": truncated: shape [4] needs 16 data bytes"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cut to %d bytes: %v, want %q", n, err, want)
		}
	}
}

// TestReadNpyHeaders: what numpy writes reads (format versions 1 to 3, either byte order,
// Python 2's long dims, Fortran order where it changes nothing); a malformed header is "not
// a .npy file" with the reason.
func TestReadNpyHeaders(t *testing.T) {
	dir := t.TempDir()
	le := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5)), math.Float32bits(-2))
	be := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, math.Float32bits(1.5)), math.Float32bits(-2))
	for _, c := range []struct {
		name    string
		version byte
		header  string
		data    []byte
	}{
		{"v1", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", le},
		{"v2", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", le},
		{"v3", 3, `{"descr": "<f4", "fortran_order": False, "shape": (2,)}`, le},
		{"big-endian", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be},
		{"long dims", 1, "{'shape': (1L, 2L), 'fortran_order': False, 'descr': '<f4'}", le},
		{"fortran vector", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 1), }", le},
	} {
		tt, err := ReadNpy(writeBytes(t, dir, c.name+".npy", npyFile(c.version, c.header, c.data)))
		if err != nil || tt.Type.DType != ir.F32 || tt.Type.NumElements() != 2 || tt.F32()[0] != 1.5 || tt.F32()[1] != -2 {
			t.Errorf("%s: %v %v", c.name, tt, err)
		}
	}
	u16 := []byte{0x01, 0x02, 0xff, 0xff}
	if tt, err := ReadNpy(writeBytes(t, dir, "u2.npy", npyFile(1, "{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }", u16))); err != nil || tt.I32()[0] != 0x0102 || tt.I32()[1] != 0xffff {
		t.Errorf("big-endian uint16: %v %v", tt, err)
	}
	if tt, err := ReadNpy(writeBytes(t, dir, "b1.npy", npyFile(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", []byte{0, 7}))); err != nil || tt.Data[0] != 0 || tt.Data[1] != 1 {
		t.Errorf("bool: %v %v", tt, err)
	}
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"magic", append([]byte("\x93NUMPX\x01\x00\x10\x00"), make([]byte, 16)...), `not a .npy file: it does not start with "\x93NUMPY"`},
		{"version", npyFile(4, "{}", nil), "not a .npy file: unknown format version 4.0"},
		{"huge header", append([]byte("\x93NUMPY\x02\x00\xff\xff\xff\xff"), make([]byte, 64)...), "not a .npy file: a header of 4294967295 bytes"},
		{"no shape", npyFile(1, "{'descr': '<f4', 'fortran_order': False}", le), `not a .npy file: header "{'descr': '<f4', 'fortran_order': False}": no "shape"`},
		{"bad dim", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", le), `'shape' holds "-"`},
		{"huge dim", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999,)}", le), `'shape' holds "99999999999"`},
		{"too many elements", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2000000, 2000000)}", le), "bad shape [2000000 2000000]"},
		{"unknown key", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", le), `unknown key "x"`},
		{"repeated key", npyFile(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", le), `key "descr" twice`},
		{"structured", npyFile(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", le), "a structured dtype?"},
		{"trailing", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", le), "text after the dict"},
		{"unterminated", npyFile(1, "{'descr': '<f4", nil), "unterminated string"},
		{"complex", npyFile(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,)}", append(le, le...)), `unsupported .npy dtype "<c8"`},
		{"fortran matrix", npyFile(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2)}", append(le, le...)), "Fortran-ordered arrays are not supported"},
		{"not text", npyFile(1, "{'descr': '\xff'}", nil), "the header is not text"},
	} {
		p := writeBytes(t, dir, c.name+".npy", c.file)
		if _, err := ReadNpy(p); err == nil || !strings.Contains(err.Error(), p+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// FuzzReadNpy: any bytes given as a .npy file, to `ppc infer --input`, `ppc compare` and
// `ppc run --data` (as one array per input, or as a token stream), are read without a panic
// and without allocating more than the file's size; an array that reads holds exactly the
// elements its shape says.
func FuzzReadNpy(f *testing.F) {
	dir := f.TempDir()
	data := npyBytes(f, dir, f32Tensor(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
	f.Add(data)
	f.Add(data[:11])
	f.Add(npyFile(3, `{"descr": ">u2", "fortran_order": False, "shape": (12L,)}`, make([]byte, 24)))
	f.Add(npyFile(2, "{'descr': '|b1', 'fortran_order': True, 'shape': (3, 1), }", []byte{0, 1, 2}))
	f.Add(npyFile(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (0, 4), }", nil))
	// Token streams: a 1-D array of ids for a model of 8 tokens in [0, 16) and their next tokens.
	tokens := &codegen.Plan{Microbatches: 1, Inputs: []codegen.Input{
		{Name: "tokens", DType: "i64", MicrobatchShape: []int{1, 8}, Range: []int{0, 16}},
		{Name: "labels", DType: "i64", MicrobatchShape: []int{1, 8}, Range: []int{0, 16}, Label: true, ShiftOf: "tokens"},
	}}
	// Arrays: ten samples of x (f32) and a class label y in [0, 3).
	arrays := &codegen.Plan{Microbatches: 1, Inputs: []codegen.Input{
		{Name: "x", DType: "f32", MicrobatchShape: []int{1}},
		{Name: "y", DType: "i64", MicrobatchShape: []int{1}, Range: []int{0, 3}, Label: true},
	}}
	y := filepath.Join(dir, "y.npy")
	if err := WriteNpy(y, f32Tensor(0, 1, 2, 0, 1, 2, 0, 1, 2, 0)); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "f.npy")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tt, err := ReadNpy(p)
		if err == nil {
			if int64(len(tt.Data)) != tt.Type.Bytes() {
				t.Fatalf("%d bytes for %s", len(tt.Data), tt.Type)
			}
			if tt.Type.Bytes() > 2*int64(len(b)) { // u2 widens to 4 bytes
				t.Fatalf("%s from a file of %d bytes", tt.Type, len(b))
			}
		} else if !strings.HasPrefix(err.Error(), p+": ") {
			t.Fatalf("the error does not name the file: %v", err)
		}
		for _, c := range []struct {
			spec string
			plan *codegen.Plan
		}{{p, tokens}, {"x=" + p + ",y=" + y, arrays}} {
			src, _, err := Open(c.spec, c.plan, Options{Seed: 1})
			var ie *fault.InputError
			if err != nil && !errors.As(err, &ie) {
				t.Fatalf("%s: not an input error: %v", c.spec, err)
			}
			if err != nil {
				continue
			}
			// Whatever opened must fill a batch with values the inputs accept.
			for _, in := range c.plan.Inputs {
				x := deviceTensor(in)
				if err := src.Fill(in, 1, 0, x); err != nil {
					t.Fatalf("%s: fill %s: %v", c.spec, in.Name, err)
				}
			}
		}
	})
}

// FuzzTokenFile: any bytes given as a raw token file (nanoGPT's train.bin), read as uint16
// or uint32, open without a panic or feed tokens within the vocabulary.
func FuzzTokenFile(f *testing.F) {
	f.Add(bytes.Repeat([]byte{1, 0, 2, 0, 3, 0}, 8), false)
	f.Add(bytes.Repeat([]byte{1, 0, 0, 0}, 20), true)
	f.Add([]byte{1}, false)
	plan := &codegen.Plan{Microbatches: 2, Inputs: []codegen.Input{
		{Name: "tokens", DType: "i64", MicrobatchShape: []int{1, 4}, Range: []int{0, 5}},
		{Name: "labels", DType: "i64", MicrobatchShape: []int{1, 4}, Range: []int{0, 5}, Label: true, ShiftOf: "tokens"},
	}}
	f.Fuzz(func(t *testing.T, b []byte, wide bool) {
		p := filepath.Join(t.TempDir(), "train.bin")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		o := Options{Seed: 1}
		if wide {
			o.TokenDType = "uint32"
		}
		src, _, err := Open(p, plan, o)
		if err != nil {
			var ie *fault.InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), p) {
				t.Fatalf("not an input error naming the file: %v", err)
			}
			return
		}
		for step := 1; step <= 3; step++ {
			for _, in := range plan.Inputs {
				x := deviceTensor(in)
				if err := src.Fill(in, step, 1, x); err != nil {
					t.Fatalf("fill %s: %v", in.Name, err)
				}
				for _, v := range x.I64() {
					if v < 0 || v >= 5 {
						t.Fatalf("%s holds %d", in.Name, v)
					}
				}
			}
		}
	})
}

// deviceTensor allocates a host tensor for one micro-batch of an input.
func deviceTensor(in codegen.Input) device.Tensor {
	dt, _ := ir.ParseDType(in.DType)
	ty := ir.Type{DType: dt, Shape: ir.Shape(in.MicrobatchShape)}
	return device.Tensor{Type: ty, Data: make([]byte, ty.Bytes())}
}
