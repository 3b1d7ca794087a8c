package data_test

import (
	"encoding/binary"
	"errors"
	"fmt"
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

func f32Tensor(vals ...float32) device.Tensor {
	t := device.Tensor{Type: ir.Type{DType: ir.F32, Shape: ir.Shape{len(vals)}}, Data: make([]byte, 4*len(vals))}
	copy(t.F32(), vals)
	return t
}

// TestReadNpySize: a file whose size does not match its header is refused, not padded with
// zeros or cut.
func TestReadNpySize(t *testing.T) {
	dir := t.TempDir()
	data := npyBytes(t, dir, f32Tensor(1, 2, 3, 4))
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"short.npy", data[:len(data)-3], "truncated: shape [4] needs 16 data bytes, the file holds 13"},
		{"long.npy", append(append([]byte{}, data...), 0, 0, 0, 0), "4 bytes follow the data of shape [4]"},
	} {
		p := filepath.Join(dir, c.name)
		os.WriteFile(p, c.data, 0o644)
		if _, err := ReadNpy(p); err == nil || !strings.Contains(err.Error(), p+": "+c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if tt, err := ReadNpy(filepath.Join(dir, "good.npy")); err != nil || tt.F32()[3] != 4 {
		t.Fatalf("good file: %v %v", tt, err)
	}
}

// TestOpenDataChecksValues: bad values in --data files are reported when the data is opened,
// with the file and the sample, not at the step that first draws them.
func TestOpenDataChecksValues(t *testing.T) {
	dir := t.TempDir()
	plan := &codegen.Plan{Microbatches: 1, Inputs: []codegen.Input{
		{Name: "x", DType: "f32", MicrobatchShape: []int{2}},
		{Name: "y", DType: "i64", MicrobatchShape: []int{2}, Range: []int{0, 3}, Label: true},
	}}
	write := func(name string, vals ...float32) string {
		p := filepath.Join(dir, name)
		if err := WriteNpy(p, f32Tensor(vals...)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	x := write("x.npy", 0.5, 0.25, 1, 2)
	for _, c := range []struct{ y, want string }{
		{write("big.npy", 0, 1, 2, 3), "big.npy: sample 3: value 3 is outside [0, 3), the range of input \"y\""},
		{write("frac.npy", 0, 0.5, 1, 1), "frac.npy: sample 1: value 0.5 is not an integer"},
		{write("nan.npy", float32(math.NaN()), 0, 1, 1), "nan.npy: sample 0: value NaN is not an integer"},
	} {
		_, _, err := Open("x="+x+",y="+c.y, plan, Options{Seed: 1})
		var ie *fault.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	if _, _, err := Open(" x="+x+" , y="+write("ok.npy", 0, 1, 2, 2), plan, Options{Seed: 1}); err != nil {
		t.Fatalf("good data with spaces: %v", err)
	}

	tokens := &codegen.Plan{Microbatches: 1, Inputs: []codegen.Input{
		{Name: "tokens", DType: "i64", MicrobatchShape: []int{1, 4}, Range: []int{0, 8}},
		{Name: "labels", DType: "i64", MicrobatchShape: []int{1, 4}, Range: []int{0, 8}, Label: true, ShiftOf: "tokens"},
	}}
	for _, c := range []struct {
		vals []float32
		want string
	}{
		{[]float32{1, 2, -1, 3, 4, 5, 6}, "token -1 at position 2 is not a token id in [0, 8)"},
		{[]float32{1, 2, 3, 2.5, 4, 5, 6}, "token 2.5 at position 3 is not a token id"},
		{[]float32{1, 2, 3, 4, float32(math.NaN()), 5, 6}, "token NaN at position 4"},
	} {
		_, _, err := Open(write("toks.npy", c.vals...), tokens, Options{Seed: 1})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// TestScalarInputs: an input without a batch dim (a class label for one row of logits) is
// one sample per micro-batch, for synthetic data and for arrays.
func TestScalarInputs(t *testing.T) {
	in := codegen.Input{Name: "y", DType: "i64", MicrobatchShape: []int{}, Range: []int{0, 5}, Label: true}
	plan := &codegen.Plan{Microbatches: 2, Inputs: []codegen.Input{in}}
	tt := device.Tensor{Type: ir.Type{DType: ir.I64}, Data: make([]byte, 8)}
	if err := (&Synthetic{Seed: 1, Plan: plan}).Fill(in, 1, 1, tt); err != nil || tt.I64()[0] < 0 || tt.I64()[0] >= 5 {
		t.Fatalf("synthetic: %v %v", tt.I64(), err)
	}
	p := filepath.Join(t.TempDir(), "y.npy")
	if err := WriteNpy(p, f32Tensor(1, 4, 2)); err != nil {
		t.Fatal(err)
	}
	src, _, err := Open("y="+p, plan, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Fill(in, 1, 1, tt); err != nil || tt.I64()[0] != 4 {
		t.Fatalf("array: %v %v", tt.I64(), err)
	}
}

// TestOpenDataRefusesMispairedOrShortData: arrays of different lengths would pair samples
// differently once the shorter wraps, and data smaller than one batch would repeat samples
// within a step; both are refused with the counts.
func TestOpenDataRefusesMispairedOrShortData(t *testing.T) {
	dir := t.TempDir()
	plan := &codegen.Plan{Microbatches: 2, Inputs: []codegen.Input{
		{Name: "x", DType: "f32", MicrobatchShape: []int{2}},
		{Name: "y", DType: "i64", MicrobatchShape: []int{2}, Range: []int{0, 3}, Label: true},
	}}
	write := func(name string, n int) string {
		p := filepath.Join(dir, name)
		if err := WriteNpy(p, f32Tensor(make([]float32, n)...)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	x5, y4, x3, y3, x4 := write("x5.npy", 5), write("y4.npy", 4), write("x3.npy", 3), write("y3.npy", 3), write("x4.npy", 4)
	for _, c := range []struct{ spec, want string }{
		{"x=" + x5 + ",y=" + y4, `the inputs have different numbers of samples: x has 5 (` + x5 + `), y has 4 (` + y4 + `)`},
		{"x=" + x3 + ",y=" + y3, x3 + ` holds 3 sample(s) of input "x", fewer than one batch needs: 4 (2 per micro-batch × 2 micro-batches)`},
	} {
		_, _, err := Open(c.spec, plan, Options{Seed: 1})
		var ie *fault.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.spec, err, c.want)
		}
	}
	if _, _, err := Open("x="+x4+",y="+y4, plan, Options{Seed: 1}); err != nil {
		t.Fatalf("one batch exactly: %v", err)
	}

	// A token stream of 2×2 sequences of 4 tokens needs 2·2·(4+1) = 20 tokens.
	tokens := &codegen.Plan{Microbatches: 2, Inputs: []codegen.Input{
		{Name: "tokens", DType: "i64", MicrobatchShape: []int{2, 4}, Range: []int{0, 8}},
		{Name: "labels", DType: "i64", MicrobatchShape: []int{2, 4}, Range: []int{0, 8}, Label: true, ShiftOf: "tokens"},
	}}
	short := writeTokens(t, dir, "short.bin", 2, 19)
	_, _, err := Open(short, tokens, Options{Seed: 1})
	if err == nil || !strings.Contains(err.Error(), "short.bin: 19 tokens, fewer than one batch needs: 4 sequences (2 per micro-batch × 2 micro-batches) of 4+1 tokens = 20") {
		t.Fatalf("got %v", err)
	}
	// With exactly one batch of tokens, every window (the last label included) is in the file.
	src, _, err := Open(writeTokens(t, dir, "exact.bin", 2, 20), tokens, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	lab := device.Tensor{Type: ir.Type{DType: ir.I64, Shape: ir.Shape{2, 4}}, Data: make([]byte, 64)}
	for step := 1; step <= 50; step++ {
		if err := src.Fill(tokens.Inputs[1], step, 1, lab); err != nil {
			t.Fatal(err)
		}
	}
}

// writeTokens writes n raw little-endian tokens of the given width, token i = 1 + i%7.
func writeTokens(t *testing.T, dir, name string, width, n int) string {
	t.Helper()
	b := make([]byte, width*n)
	for i := 0; i < n; i++ {
		if width == 2 {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(1+i%7))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(1+i%7))
		}
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeU16Npy writes a 1-D .npy of uint16 values.
func writeU16Npy(t *testing.T, path string, vals ...uint16) string {
	t.Helper()
	header := fmt.Sprintf("{'descr': '<u2', 'fortran_order': False, 'shape': (%d,), }", len(vals))
	for (10+len(header)+1)%64 != 0 {
		header += " "
	}
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(header)+1), 0)
	b = append(b, header+"\n"...)
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTokenFileWidth: the width of a raw token file is what Options.TokenDType says, not
// a guess from the vocabulary. A uint32 file of a small vocabulary reads correctly as uint32;
// read as uint16 (the default) it is flagged, since every other token is 0.
func TestTokenFileWidth(t *testing.T) {
	dir := t.TempDir()
	plan := &codegen.Plan{Microbatches: 1, Inputs: []codegen.Input{
		{Name: "tokens", DType: "i64", MicrobatchShape: []int{2, 4}, Range: []int{0, 8}},
		{Name: "labels", DType: "i64", MicrobatchShape: []int{2, 4}, Range: []int{0, 8}, Label: true, ShiftOf: "tokens"},
	}}
	u32 := writeTokens(t, dir, "u32.bin", 4, 40)
	src, warnings, err := Open(u32, plan, Options{Seed: 1, TokenDType: "uint32"})
	if err != nil || len(warnings) != 0 {
		t.Fatalf("as uint32: %v %v", err, warnings)
	}
	tok := device.Tensor{Type: ir.Type{DType: ir.I64, Shape: ir.Shape{2, 4}}, Data: make([]byte, 64)}
	if err := src.Fill(plan.Inputs[0], 1, 0, tok); err != nil {
		t.Fatal(err)
	}
	for i, v := range tok.I64() {
		// Consecutive tokens of the file: each one more than the last, modulo 7, never 0.
		if v < 1 || v > 7 || (i%4 > 0 && v != 1+(tok.I64()[i-1])%7) {
			t.Fatalf("uint32 tokens read as %v", tok.I64())
		}
	}
	_, warnings, err = Open(u32, plan, Options{Seed: 1})
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "every other uint16 token is 0") || !strings.Contains(warnings[0], "--data-dtype uint32") {
		t.Fatalf("uint32 file read as uint16: %v %q", err, warnings)
	}
	if _, warnings, err := Open(writeTokens(t, dir, "u16.bin", 2, 40), plan, Options{Seed: 1}); err != nil || len(warnings) != 0 {
		t.Fatalf("a uint16 file: %v %q", err, warnings)
	}

	big := writeTokens(t, dir, "big.bin", 4, 40)
	data, _ := os.ReadFile(big)
	binary.LittleEndian.PutUint32(data[4*13:], 9)
	os.WriteFile(big, data, 0o644)
	u16npy := writeU16Npy(t, filepath.Join(dir, "toks.npy"), 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5)
	for _, c := range []struct {
		path, dtype, want string
	}{
		{writeTokens(t, dir, "odd.bin", 2, 21), "uint32", "odd.bin: 42 bytes is not a whole number of 4-byte uint32 tokens"},
		{big, "uint32", "big.bin: token 9 at position 13 is outside the vocabulary of 8"},
		{u16npy, "uint32", "--data-dtype uint32: " + u16npy + " holds uint16 tokens; --data-dtype is for raw token files"},
		{u32, "int8", `--data-dtype "int8": want uint16 or uint32`},
		{"x=" + u16npy, "uint16", "--data-dtype applies to a token file"},
	} {
		_, _, err := Open(c.path, plan, Options{Seed: 1, TokenDType: c.dtype})
		var ie *fault.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s as %s: got %v, want %q", c.path, c.dtype, err, c.want)
		}
	}
	// A uint16 .npy is a token stream, with or without a --data-dtype that agrees.
	for _, dt := range []string{"", "uint16"} {
		if _, _, err := Open(u16npy, plan, Options{Seed: 1, TokenDType: dt}); err != nil {
			t.Errorf("uint16 .npy, dtype %q: %v", dt, err)
		}
	}
}

// TestArrayFill: each micro-batch takes the next samples of the array in order, wrapping at
// its end, converted to the input's dtype (a float64 array into an f32 input here); a tensor
// of another dtype than the plan's input is refused.
func TestArrayFill(t *testing.T) {
	in := codegen.Input{Name: "x", DType: "f32", MicrobatchShape: []int{2, 3}}
	plan := &codegen.Plan{Microbatches: 2, Inputs: []codegen.Input{in}}
	arr := device.Tensor{Type: ir.Type{DType: ir.F64, Shape: ir.Shape{5, 3}}, Data: make([]byte, 8*15)}
	for i := range arr.F64() {
		arr.F64()[i] = float64(i) + 0.25
	}
	p := filepath.Join(t.TempDir(), "x.npy")
	if err := WriteNpy(p, arr); err != nil {
		t.Fatal(err)
	}
	src, _, err := Open("x="+p, plan, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ step, mb, s0, s1 int }{{1, 0, 0, 1}, {1, 1, 2, 3}, {2, 0, 4, 0}, {2, 1, 1, 2}} {
		tt := device.Tensor{Type: ir.Type{DType: ir.F32, Shape: ir.Shape{2, 3}}, Data: make([]byte, 4*6)}
		if err := src.Fill(in, c.step, c.mb, tt); err != nil {
			t.Fatal(err)
		}
		for i, v := range tt.F32() {
			s := c.s0
			if i >= 3 {
				s = c.s1
			}
			if want := float32(3*s+i%3) + 0.25; v != want {
				t.Fatalf("step %d micro-batch %d: element %d = %v, want %v (sample %d)", c.step, c.mb, i, v, want, s)
			}
		}
	}
	bad := device.Tensor{Type: ir.Type{DType: ir.F64, Shape: ir.Shape{2, 3}}, Data: make([]byte, 8*6)}
	if err := src.Fill(in, 1, 0, bad); err == nil || !strings.Contains(err.Error(), "f64") {
		t.Fatalf("an f64 tensor for an f32 input: %v", err)
	}
}

// TestArrayUnknownDType: an input whose dtype the runtime does not know (a hand-edited
// plan) is refused when the data opens, naming the file, the input and the dtype, as an input
// error — not at the first step.
func TestArrayUnknownDType(t *testing.T) {
	in := codegen.Input{Name: "x", DType: "f7", MicrobatchShape: []int{1, 3}}
	plan := &codegen.Plan{Microbatches: 1, Inputs: []codegen.Input{in}}
	p := filepath.Join(t.TempDir(), "x.npy")
	arr := f32Tensor(1, 2, 3)
	arr.Type.Shape = ir.Shape{1, 3}
	if err := WriteNpy(p, arr); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open("x="+p, plan, Options{Seed: 1})
	var ie *fault.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `"x"`) || !strings.Contains(err.Error(), `"f7"`) {
		t.Fatalf("got %v", err)
	}
}
