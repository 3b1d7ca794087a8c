package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// The safetensors format (huggingface/safetensors): an 8-byte little-endian header length,
// a JSON header mapping tensor names to {dtype, shape, data_offsets} plus "__metadata__"
// (string → string), then the raw little-endian data.

var stDTypes = map[ir.DType]string{ir.F64: "F64", ir.F32: "F32", ir.F16: "F16", ir.BF16: "BF16",
	ir.I64: "I64", ir.I32: "I32", ir.I8: "I8", ir.U8: "U8", ir.Bool: "BOOL"}

type stEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// WriteSafetensors writes tensors (in name order) with metadata. It replaces path atomically:
// a failure (a full disk, say) leaves the previous file as it was (see WriteFileAtomic).
func WriteSafetensors(path string, tensors map[string]device.Tensor, meta map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	var off int64
	for _, n := range names {
		t := tensors[n]
		dt, ok := stDTypes[t.Type.DType]
		if !ok {
			return fmt.Errorf("%s: dtype %s has no safetensors name", n, t.Type.DType)
		}
		shape := t.Type.Shape
		if shape == nil {
			shape = ir.Shape{}
		}
		header[n] = stEntry{DType: dt, Shape: shape, Offsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	// Pad the header with spaces to a multiple of 8 so the data is aligned, as the reference
	// implementation does.
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	return WriteFileAtomic(path, func(w io.Writer) error {
		var lenBuf [8]byte
		binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(h)))
		if _, err := w.Write(lenBuf[:]); err != nil {
			return err
		}
		if _, err := w.Write(h); err != nil {
			return err
		}
		for _, n := range names {
			if _, err := w.Write(tensors[n].Data); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReadSafetensors reads a safetensors file completely, checking every entry (dtype, shape,
// offsets within the file, no overlaps). A corrupt or truncated file is an error, never a panic.
func ReadSafetensors(path string) (map[string]device.Tensor, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	t, m, err := decodeSafetensors(f, st.Size())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", path, err)
	}
	return t, m, nil
}

func decodeSafetensors(r io.Reader, size int64) (map[string]device.Tensor, map[string]string, error) {
	h, err := readHeader(r, size)
	if err != nil {
		return nil, nil, err
	}
	data := make([]byte, h.dataLen)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, nil, fmt.Errorf("truncated data")
	}
	out := map[string]device.Tensor{}
	for name, e := range h.tensors {
		b := device.HostBytes(e.hi - e.lo)
		copy(b, data[e.lo:e.hi])
		out[name] = device.Tensor{Type: e.typ, Data: b}
	}
	return out, h.meta, nil
}

// stHeader is a safetensors file's header, checked: every tensor's type and the byte range
// of its data, within the file and overlapping no other.
type stHeader struct {
	tensors map[string]stTensor
	meta    map[string]string
	dataAt  int64 // where the data starts in the file
	dataLen int64
}

type stTensor struct {
	typ    ir.Type
	lo, hi int64 // its bytes, relative to the data's start
}

// readHeader reads and checks the header at the start of r, a file of size bytes; it reads
// no tensor data.
func readHeader(r io.Reader, size int64) (*stHeader, error) {
	var lenBuf [8]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("not a safetensors file: too short")
	}
	hlen := binary.LittleEndian.Uint64(lenBuf[:])
	if hlen > 100<<20 || int64(hlen) > size-8 {
		return nil, fmt.Errorf("not a safetensors file: header length %d does not fit the %d-byte file", hlen, size)
	}
	h := make([]byte, hlen)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, fmt.Errorf("truncated header")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(h, &raw); err != nil {
		return nil, fmt.Errorf("bad header: %v", err)
	}
	out := &stHeader{tensors: map[string]stTensor{}, meta: map[string]string{}, dataAt: 8 + int64(hlen), dataLen: size - 8 - int64(hlen)}
	type span struct {
		lo, hi int64
		name   string
	}
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &out.meta); err != nil {
				return nil, fmt.Errorf("bad metadata: %v", err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("tensor %q: %v", name, err)
		}
		dt := stDType(e.DType)
		if dt == ir.Invalid {
			return nil, fmt.Errorf("tensor %q: unsupported dtype %q", name, e.DType)
		}
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && n > (1<<50)/int64(d)) {
				return nil, fmt.Errorf("tensor %q: bad shape %v", name, e.Shape)
			}
			n *= int64(d)
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo || hi > out.dataLen || hi-lo != n*int64(dt.Size()) {
			return nil, fmt.Errorf("tensor %q: data offsets [%d, %d) do not match its %s%v in %d data bytes", name, lo, hi, e.DType, e.Shape, out.dataLen)
		}
		spans = append(spans, span{lo, hi, name})
		shape := ir.Shape(e.Shape)
		if shape == nil {
			shape = ir.Shape{}
		}
		out.tensors[name] = stTensor{typ: ir.Type{DType: dt, Shape: shape}, lo: lo, hi: hi}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return nil, fmt.Errorf("tensors %q and %q overlap", spans[i-1].name, spans[i].name)
		}
	}
	return out, nil
}

// stDType is the dtype a safetensors name stands for (Invalid if none).
func stDType(name string) ir.DType {
	for d, s := range stDTypes {
		if s == name {
			return d
		}
	}
	return ir.Invalid
}
