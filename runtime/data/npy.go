package data

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// The .npy format (numpy's NEP 1): the magic "\x93NUMPY", a major and a minor version byte,
// the header's length (2 bytes little-endian in version 1, 4 in versions 2 and 3), the header
// (a Python dict literal with the keys 'descr', 'fortran_order' and 'shape', padded with
// spaces and ended by a newline), then the elements in row-major order.
//
// ppc reads it itself rather than through a library: a reader for files users hand over
// must refuse every malformed file with a message, and the one ppc used before panicked
// on a file cut inside its header and padded a file cut inside its data with zeros.
const npyMagic = "\x93NUMPY"

// npyMaxHeader bounds the header ppc reads before it knows the file is a .npy (numpy itself
// refuses headers over 10,000 bytes unless told otherwise).
const npyMaxHeader = 1 << 20

// npyItemSize is the element size of the .npy dtypes ReadNpy reads, by dtype without byte
// order ("u2").
var npyItemSize = map[string]int64{"f8": 8, "f4": 4, "i8": 8, "i4": 4, "u4": 4, "u2": 2, "i1": 1, "u1": 1, "b1": 1}

// npyHeader is what a .npy header says.
type npyHeader struct {
	descr   string // the dtype as written: "<f4", "|u1", ">i8"
	fortran bool
	shape   ir.Shape
	data    int64 // offset of the first element
}

// ReadNpy reads a .npy file as a tensor of its own dtype (f64, f32, i64, i32, i8, u8, bool;
// u16 and u32, which ir has not, widen to i32 and i64). A file that is not a well-formed
// .npy, or whose size is not what its header declares, is an error naming the file.
func ReadNpy(path string) (device.Tensor, error) {
	t, _, err := readNpyTensor(path)
	return t, err
}

// readNpyTensor is ReadNpy that also returns the file's dtype without byte order ("u2").
func readNpyTensor(path string) (device.Tensor, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return device.Tensor{}, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return device.Tensor{}, "", err
	}
	t, descr, err := decodeNpy(f, st.Size())
	if err != nil {
		return device.Tensor{}, "", fmt.Errorf("%s: %v", path, err)
	}
	return t, descr, nil
}

// decodeNpy reads a .npy file of size bytes from r. It allocates only after checking that
// the file holds the data its header declares, so a hostile header cannot make it allocate
// more than the file's size.
func decodeNpy(r io.ReaderAt, size int64) (device.Tensor, string, error) {
	h, err := readNpyHeader(r, size)
	if err != nil {
		return device.Tensor{}, "", err
	}
	order, descr := npyByteOrder(h.descr)
	item, ok := npyItemSize[descr]
	if !ok {
		return device.Tensor{}, "", fmt.Errorf("unsupported .npy dtype %q (ppc reads f8, f4, i8, i4, u4, u2, i1, u1 and b1)", h.descr)
	}
	n := int64(1)
	for _, d := range h.shape {
		if d < 0 || (d > 0 && n > (1<<40)/int64(d)) {
			return device.Tensor{}, "", fmt.Errorf("bad shape %v", []int(h.shape))
		}
		n *= int64(d)
	}
	// Column-major order is the same as row-major for fewer than two dims of size above 1.
	if h.fortran && h.shape.NumElements() > 1 && !npyVector(h.shape) {
		return device.Tensor{}, "", fmt.Errorf("Fortran-ordered arrays are not supported (save a C-ordered copy: numpy.ascontiguousarray)")
	}
	switch have, want := size-h.data, n*item; {
	case have < want:
		return device.Tensor{}, "", fmt.Errorf("truncated: shape %v needs %d data bytes, the file holds %d", []int(h.shape), want, max(have, 0))
	case have > want:
		return device.Tensor{}, "", fmt.Errorf("%d bytes follow the data of shape %v (the header does not describe the file)", have-want, []int(h.shape))
	}
	raw := device.HostBytes(n * item)
	if got, err := r.ReadAt(raw, h.data); got < len(raw) {
		return device.Tensor{}, "", err
	}
	shape := h.shape
	var t device.Tensor
	switch descr {
	case "f8", "f4", "i8", "i4":
		dt := map[string]ir.DType{"f8": ir.F64, "f4": ir.F32, "i8": ir.I64, "i4": ir.I32}[descr]
		t = device.Tensor{Type: ir.Type{DType: dt, Shape: shape}, Data: raw}
		// Tensors hold the host's byte order.
		if probe := []byte{1, 0}; order.Uint16(probe) != binary.NativeEndian.Uint16(probe) {
			for i := int64(0); i < int64(len(raw)); i += item {
				e := raw[i : i+item]
				for a, b := 0, len(e)-1; a < b; a, b = a+1, b-1 {
					e[a], e[b] = e[b], e[a]
				}
			}
		}
	case "u4":
		t = device.Tensor{Type: ir.Type{DType: ir.I64, Shape: shape}, Data: device.HostBytes(8 * n)}
		for i := range t.I64() {
			t.I64()[i] = int64(order.Uint32(raw[4*i:]))
		}
	case "u2":
		t = device.Tensor{Type: ir.Type{DType: ir.I32, Shape: shape}, Data: device.HostBytes(4 * n)}
		for i := range t.I32() {
			t.I32()[i] = int32(order.Uint16(raw[2*i:]))
		}
	case "i1":
		t = device.Tensor{Type: ir.Type{DType: ir.I8, Shape: shape}, Data: raw}
	case "u1":
		t = device.Tensor{Type: ir.Type{DType: ir.U8, Shape: shape}, Data: raw}
	case "b1":
		// numpy reads any nonzero byte as True; ppc's booleans are 0 or 1.
		for i, b := range raw {
			if b != 0 {
				raw[i] = 1
			}
		}
		t = device.Tensor{Type: ir.Type{DType: ir.Bool, Shape: shape}, Data: raw}
	}
	return t, descr, nil
}

// npyVector reports a shape with at most one dim above 1, whose two orders are the same.
func npyVector(s ir.Shape) bool {
	big := 0
	for _, d := range s {
		if d > 1 {
			big++
		}
	}
	return big <= 1
}

// npyByteOrder splits a dtype descr into its byte order and the rest ("<f4" → little, "f4").
// '=', '|' (no order, for single bytes) and none mean the host's, as numpy reads them.
func npyByteOrder(descr string) (binary.ByteOrder, string) {
	var order binary.ByteOrder = binary.NativeEndian
	switch {
	case strings.HasPrefix(descr, "<"):
		order = binary.LittleEndian
	case strings.HasPrefix(descr, ">"):
		order = binary.BigEndian
	}
	if descr != "" && strings.IndexByte("<>=|", descr[0]) >= 0 {
		descr = descr[1:]
	}
	return order, descr
}

// readNpyHeader reads and parses the header of a .npy file of size bytes.
func readNpyHeader(r io.ReaderAt, size int64) (npyHeader, error) {
	notNpy := func(format string, args ...any) (npyHeader, error) {
		return npyHeader{}, fmt.Errorf("not a .npy file: "+format, args...)
	}
	var pre [12]byte
	if size < 10 {
		return notNpy("%d bytes, shorter than the magic, version and header length (10)", size)
	}
	if got, err := r.ReadAt(pre[:min(size, 12)], 0); got < int(min(size, 12)) {
		return npyHeader{}, err
	}
	if string(pre[:6]) != npyMagic {
		return notNpy("it does not start with %q", npyMagic)
	}
	var hlen, off int64
	switch pre[6] {
	case 1:
		hlen, off = int64(binary.LittleEndian.Uint16(pre[8:10])), 10
	case 2, 3:
		if size < 12 {
			return notNpy("%d bytes, shorter than a version %d preamble (12)", size, pre[6])
		}
		hlen, off = int64(binary.LittleEndian.Uint32(pre[8:12])), 12
	default:
		return notNpy("unknown format version %d.%d", pre[6], pre[7])
	}
	if hlen > npyMaxHeader {
		return notNpy("a header of %d bytes (ppc reads up to %d)", hlen, npyMaxHeader)
	}
	if off+hlen > size {
		return notNpy("truncated inside its header: the header needs %d bytes, the file holds %d after the preamble", hlen, size-off)
	}
	text := make([]byte, hlen)
	if got, err := r.ReadAt(text, off); got < len(text) {
		return npyHeader{}, err
	}
	// Versions 1 and 2 are latin-1 (in practice ASCII), version 3 UTF-8.
	if !utf8.Valid(text) {
		return notNpy("the header is not text")
	}
	h, err := parseNpyDict(string(text))
	if err != nil {
		return notNpy("header %q: %v", strings.TrimSpace(string(text)), err)
	}
	h.data = off + hlen
	return h, nil
}

// parseNpyDict parses a header: a dict literal of 'descr' (a string), 'fortran_order' (True
// or False) and 'shape' (a tuple of non-negative integers), padded with spaces and a newline.
func parseNpyDict(s string) (npyHeader, error) {
	p := &npyParser{s: s}
	var h npyHeader
	seen := map[string]bool{}
	if err := p.expect('{'); err != nil {
		return h, err
	}
	for {
		p.space()
		if p.peek() == '}' {
			p.pos++
			break
		}
		key, err := p.str()
		if err != nil {
			return h, err
		}
		if seen[key] {
			return h, fmt.Errorf("key %q twice", key)
		}
		seen[key] = true
		if err := p.expect(':'); err != nil {
			return h, err
		}
		p.space()
		switch key {
		case "descr":
			if p.peek() != '\'' && p.peek() != '"' {
				return h, fmt.Errorf("'descr' is not a string (a structured dtype?); ppc reads plain numeric arrays")
			}
			if h.descr, err = p.str(); err != nil {
				return h, err
			}
		case "fortran_order":
			switch {
			case strings.HasPrefix(p.s[p.pos:], "True"):
				h.fortran, p.pos = true, p.pos+4
			case strings.HasPrefix(p.s[p.pos:], "False"):
				p.pos += 5
			default:
				return h, fmt.Errorf("'fortran_order' is not True or False")
			}
		case "shape":
			if h.shape, err = p.tuple(); err != nil {
				return h, err
			}
		default:
			return h, fmt.Errorf("unknown key %q", key)
		}
		p.space()
		if p.peek() == ',' {
			p.pos++
		} else if p.peek() != '}' {
			return h, fmt.Errorf("want ',' or '}' at byte %d", p.pos)
		}
	}
	if rest := strings.TrimRight(p.s[p.pos:], " \t\r\n\x00"); rest != "" {
		return h, fmt.Errorf("text after the dict at byte %d", p.pos)
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, fmt.Errorf("no %q", k)
		}
	}
	return h, nil
}

type npyParser struct {
	s   string
	pos int
}

func (p *npyParser) peek() byte {
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}

func (p *npyParser) space() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n' || p.s[p.pos] == '\r') {
		p.pos++
	}
}

func (p *npyParser) expect(c byte) error {
	p.space()
	if p.peek() != c {
		return fmt.Errorf("want %q at byte %d", c, p.pos)
	}
	p.pos++
	return nil
}

// str reads a quoted string without escapes (numpy's keys and dtype strings have none).
func (p *npyParser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", fmt.Errorf("want a quoted string at byte %d", p.pos)
	}
	end := strings.IndexByte(p.s[p.pos+1:], q)
	if end < 0 {
		return "", fmt.Errorf("unterminated string at byte %d", p.pos)
	}
	v := p.s[p.pos+1 : p.pos+1+end]
	p.pos += end + 2
	return v, nil
}

// tuple reads a Python tuple of integers: (), (3,), (3, 4). Python 2's numpy wrote longs
// with an L suffix.
func (p *npyParser) tuple() (ir.Shape, error) {
	if err := p.expect('('); err != nil {
		return nil, err
	}
	shape := ir.Shape{}
	for {
		p.space()
		if p.peek() == ')' {
			p.pos++
			return shape, nil
		}
		start := p.pos
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
		}
		d, err := strconv.ParseInt(p.s[start:p.pos], 10, 64)
		if err != nil || d > math.MaxInt32 {
			tok := p.s[start:p.pos]
			if tok == "" {
				tok = p.s[start:min(start+1, len(p.s))]
			}
			return nil, fmt.Errorf("'shape' holds %q at byte %d, not a dimension", tok, start)
		}
		if p.peek() == 'L' {
			p.pos++
		}
		shape = append(shape, int(d))
		p.space()
		switch p.peek() {
		case ',':
			p.pos++
		case ')':
		default:
			return nil, fmt.Errorf("want ',' or ')' in 'shape' at byte %d", p.pos)
		}
	}
}

// WriteNpy writes a tensor as .npy version 1.0 (f16 and bf16 are widened to f32, which .npy
// readers all understand).
func WriteNpy(path string, t device.Tensor) error {
	descr := map[ir.DType]string{ir.F64: "<f8", ir.F32: "<f4", ir.I64: "<i8", ir.I32: "<i4", ir.I8: "|i1", ir.U8: "|u1", ir.Bool: "|b1"}
	d, ok := descr[t.Type.DType]
	data := t.Data
	if !ok {
		d = "<f4"
		w := device.Tensor{Type: ir.Type{DType: ir.F32, Shape: t.Type.Shape}, Data: device.HostBytes(int64(4 * t.Type.NumElements()))}
		for i, x := range Float64s(t) {
			w.F32()[i] = float32(x)
		}
		data = w.Data
	}
	dims := make([]string, len(t.Type.Shape))
	for i, x := range t.Type.Shape {
		dims[i] = fmt.Sprint(x)
	}
	shape := strings.Join(dims, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", d, shape)
	// Pad so that magic (6) + version (2) + length (2) + header + newline is a multiple of 64.
	for (10+len(header)+1)%64 != 0 {
		header += " "
	}
	header += "\n"
	out := make([]byte, 0, 10+len(header)+len(data))
	out = append(out, npyMagic+"\x01\x00"...)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(header)))
	out = append(out, header...)
	out = append(out, data...)
	return os.WriteFile(path, out, 0o644)
}
