package ir

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Attr is an attribute value. The concrete kinds are Int, Float, BoolAttr, String, Ident, Unit,
// List, Dict, TypeAttr and *Dense.
type Attr interface{ appendAttr(b []byte) []byte }

// Int is an integer attribute (`3`, `-1`).
type Int int64

// Float is a floating-point attribute (`0.5`, `1e-05`, `inf`, `nan`); it always prints with a
// '.' or an exponent so it never reads back as an Int.
type Float float64

// BoolAttr is `true` or `false`.
type BoolAttr bool

// String is a quoted string attribute.
type String string

// Ident is a bare identifier: enum values (`tanh`, `fwd`), dtypes (`f32`), mesh axes (`tp`),
// and `_` (replicated).
type Ident string

// Unit is a flag: a key with no value (`{param}`).
type Unit struct{}

// List is `[a, b, …]`.
type List []Attr

// Dict is a nested attribute dictionary (`{pp = 4, tp = 2}`).
type Dict Attrs

// TypeAttr is a tensor type used as an attribute value (`f32[4,8]`).
type TypeAttr Type

// NamedAttr is one entry of an attribute dictionary.
type NamedAttr struct {
	Name  string
	Value Attr
}

// Attrs is an attribute dictionary kept sorted by name, so that equal dictionaries compare
// and print identically whatever order they were built in.
type Attrs []NamedAttr

// Get returns the value of name, or nil.
func (as Attrs) Get(name string) Attr {
	i := sort.Search(len(as), func(i int) bool { return as[i].Name >= name })
	if i < len(as) && as[i].Name == name {
		return as[i].Value
	}
	return nil
}

// Has reports whether name is present.
func (as Attrs) Has(name string) bool { return as.Get(name) != nil }

// Set returns as with name set to v, keeping the order; it copies rather than aliasing so
// that attribute slices shared between ops are never mutated behind their backs.
func (as Attrs) Set(name string, v Attr) Attrs {
	i := sort.Search(len(as), func(i int) bool { return as[i].Name >= name })
	out := make(Attrs, 0, len(as)+1)
	out = append(out, as[:i]...)
	out = append(out, NamedAttr{name, v})
	if i < len(as) && as[i].Name == name {
		i++
	}
	return append(out, as[i:]...)
}

// Delete returns as without name.
func (as Attrs) Delete(name string) Attrs {
	i := sort.Search(len(as), func(i int) bool { return as[i].Name >= name })
	if i >= len(as) || as[i].Name != name {
		return as
	}
	out := make(Attrs, 0, len(as)-1)
	out = append(out, as[:i]...)
	return append(out, as[i+1:]...)
}

// Sorted returns the dictionary sorted by name (stable for duplicates, which the parser rejects).
func (as Attrs) Sorted() Attrs {
	if sort.SliceIsSorted(as, func(i, j int) bool { return as[i].Name < as[j].Name }) {
		return as
	}
	out := slices.Clone(as)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Int returns an integer attribute or def when absent.
func (as Attrs) Int(name string, def int) int {
	if v, ok := as.Get(name).(Int); ok {
		return int(v)
	}
	return def
}

// Float returns a float attribute (an Int is accepted) or def.
func (as Attrs) Float(name string, def float64) float64 {
	switch v := as.Get(name).(type) {
	case Float:
		return float64(v)
	case Int:
		return float64(v)
	}
	return def
}

// Bool returns a boolean attribute or def; a Unit flag counts as true.
func (as Attrs) Bool(name string, def bool) bool {
	switch v := as.Get(name).(type) {
	case BoolAttr:
		return bool(v)
	case Unit:
		return true
	}
	return def
}

// Str returns a String or Ident attribute's text, or def.
func (as Attrs) Str(name string, def string) string {
	switch v := as.Get(name).(type) {
	case String:
		return string(v)
	case Ident:
		return string(v)
	}
	return def
}

// Ints returns an integer-list attribute, or nil when absent or not a list of ints.
func (as Attrs) Ints(name string) []int {
	l, ok := as.Get(name).(List)
	if !ok {
		return nil
	}
	out := make([]int, len(l))
	for i, e := range l {
		v, ok := e.(Int)
		if !ok {
			return nil
		}
		out[i] = int(v)
	}
	return out
}

// Strings returns a string-list attribute, or nil when absent or not a list of strings.
func (as Attrs) Strings(name string) []string {
	l, ok := as.Get(name).(List)
	if !ok {
		return nil
	}
	out := make([]string, len(l))
	for i, e := range l {
		v, ok := e.(String)
		if !ok {
			return nil
		}
		out[i] = string(v)
	}
	return out
}

// DTypeAttr returns a dtype given as an Ident, or Invalid.
func (as Attrs) DType(name string) DType {
	if v, ok := as.Get(name).(Ident); ok {
		d, _ := ParseDType(string(v))
		return d
	}
	return Invalid
}

// Strings builds a List of String.
func Strings(v ...string) List {
	l := make(List, len(v))
	for i, x := range v {
		l[i] = String(x)
	}
	return l
}

// Ints builds a List of Int.
func Ints(v ...int) List {
	l := make(List, len(v))
	for i, x := range v {
		l[i] = Int(x)
	}
	return l
}

// AttrEqual compares two attribute values structurally.
func AttrEqual(a, b Attr) bool {
	switch x := a.(type) {
	case List:
		y, ok := b.(List)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !AttrEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case Dict:
		y, ok := b.(Dict)
		return ok && AttrsEqual(Attrs(x), Attrs(y))
	case TypeAttr:
		y, ok := b.(TypeAttr)
		return ok && Type(x).Equal(Type(y))
	case *Dense:
		y, ok := b.(*Dense)
		return ok && x.Type.Equal(y.Type) && x.Splat == y.Splat && string(x.Data) == string(y.Data)
	case Float:
		y, ok := b.(Float)
		// Compare bits so NaN equals NaN: attributes are compared as syntax, not numbers.
		return ok && math.Float64bits(float64(x)) == math.Float64bits(float64(y))
	default:
		return a == b
	}
}

// AttrsEqual compares two dictionaries.
func AttrsEqual(a, b Attrs) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !AttrEqual(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// AttrString prints an attribute value as it appears in IR text.
func AttrString(a Attr) string { return string(a.appendAttr(nil)) }

func (v Int) appendAttr(b []byte) []byte { return strconv.AppendInt(b, int64(v), 10) }
func (v Float) appendAttr(b []byte) []byte {
	return appendFloat(b, float64(v), 64, true)
}
func (v BoolAttr) appendAttr(b []byte) []byte { return strconv.AppendBool(b, bool(v)) }
func (v String) appendAttr(b []byte) []byte   { return strconv.AppendQuote(b, string(v)) }
func (v Ident) appendAttr(b []byte) []byte    { return append(b, v...) }
func (Unit) appendAttr(b []byte) []byte       { return b }
func (v TypeAttr) appendAttr(b []byte) []byte {
	return Type(v).appendTo(b)
}
func (v List) appendAttr(b []byte) []byte {
	b = append(b, '[')
	for i, e := range v {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = e.appendAttr(b)
	}
	return append(b, ']')
}
func (v Dict) appendAttr(b []byte) []byte { return appendAttrs(b, Attrs(v)) }

func appendAttrs(b []byte, as Attrs) []byte {
	b = append(b, '{')
	for i, a := range as {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendKey(b, a.Name)
		if _, unit := a.Value.(Unit); !unit {
			b = append(b, " = "...)
			b = a.Value.appendAttr(b)
		}
	}
	return append(b, '}')
}

func appendKey(b []byte, k string) []byte {
	if isBareName(k) && !isDigits(k) {
		return append(b, k...)
	}
	return strconv.AppendQuote(b, k)
}

// appendFloat prints the shortest decimal that reads back to the same value at the given
// precision. With mark set, an integral value gets ".0" so it parses back as a Float.
func appendFloat(b []byte, f float64, bits int, mark bool) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "nan"...)
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, bits)
	if mark && !strings.ContainsAny(string(b[start:]), ".eE") {
		b = append(b, ".0"...)
	}
	return b
}

// Dense is constant tensor data: little-endian raw elements of Type. When Splat is set, Data
// holds one element that fills the whole tensor (so a large zeros constant costs nothing).
type Dense struct {
	Type  Type
	Splat bool
	Data  []byte
	// Elided marks data the printer left out (`dense<f32[…]: elided>`); such IR cannot run.
	Elided bool
}

// DenseMaxListed is the element count up to which dense data prints as a list of numbers;
// larger data prints as hex.
const DenseMaxListed = 64

// NewDenseF64 builds a dense attribute of dtype d from float64 values (converting each).
func NewDenseF64(t Type, vals []float64) *Dense {
	d := &Dense{Type: t, Data: make([]byte, len(vals)*t.DType.Size())}
	for i, v := range vals {
		d.setF64(i, v)
	}
	return d
}

// NewDenseI64 builds a dense attribute of an integer (or any) dtype from int64 values.
func NewDenseI64(t Type, vals []int64) *Dense {
	d := &Dense{Type: t, Data: make([]byte, len(vals)*t.DType.Size())}
	for i, v := range vals {
		if t.DType.IsFloat() {
			d.setF64(i, float64(v))
		} else {
			d.setI64(i, v)
		}
	}
	return d
}

// Splat builds a splat constant of type t holding v everywhere.
func Splat(t Type, v float64) *Dense {
	d := NewDenseF64(Type{DType: t.DType}, []float64{v})
	d.Type = t
	d.Splat = true
	return d
}

// Len is the number of elements the attribute describes.
func (d *Dense) Len() int { return d.Type.NumElements() }

func (d *Dense) elem(i int) []byte {
	sz := d.Type.DType.Size()
	if d.Splat {
		i = 0
	}
	return d.Data[i*sz : (i+1)*sz]
}

// F64 returns element i converted to float64.
func (d *Dense) F64(i int) float64 {
	e := d.elem(i)
	switch d.Type.DType {
	case F64:
		return math.Float64frombits(binary.LittleEndian.Uint64(e))
	case F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
	case F16:
		return float64(F16ToF32(binary.LittleEndian.Uint16(e)))
	case BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(e)) << 16))
	default:
		return float64(d.I64(i))
	}
}

// I64 returns element i converted to int64 (floats truncate toward zero).
func (d *Dense) I64(i int) int64 {
	e := d.elem(i)
	switch d.Type.DType {
	case I64:
		return int64(binary.LittleEndian.Uint64(e))
	case I32:
		return int64(int32(binary.LittleEndian.Uint32(e)))
	case I8:
		return int64(int8(e[0]))
	case U8, Bool:
		return int64(e[0])
	default:
		return int64(d.F64(i))
	}
}

func (d *Dense) setF64(i int, v float64) {
	e := d.Data[i*d.Type.DType.Size():]
	switch d.Type.DType {
	case F64:
		binary.LittleEndian.PutUint64(e, math.Float64bits(v))
	case F32:
		binary.LittleEndian.PutUint32(e, math.Float32bits(float32(v)))
	case F16:
		binary.LittleEndian.PutUint16(e, F32ToF16(float32(v)))
	case BF16:
		binary.LittleEndian.PutUint16(e, F32ToBF16(float32(v)))
	case Bool:
		if v != 0 {
			e[0] = 1
		} else {
			e[0] = 0
		}
	default:
		d.setI64(i, int64(v))
	}
}

func (d *Dense) setI64(i int, v int64) {
	e := d.Data[i*d.Type.DType.Size():]
	switch d.Type.DType {
	case I64:
		binary.LittleEndian.PutUint64(e, uint64(v))
	case I32:
		binary.LittleEndian.PutUint32(e, uint32(int32(v)))
	case I8, U8:
		e[0] = byte(v)
	case Bool:
		e[0] = 0
		if v != 0 {
			e[0] = 1
		}
	default:
		d.setF64(i, float64(v))
	}
}

// Ints returns all elements as ints (for shape-like constants).
func (d *Dense) Ints() []int {
	out := make([]int, d.Len())
	for i := range out {
		out[i] = int(d.I64(i))
	}
	return out
}

// Floats returns all elements as float64.
func (d *Dense) Floats() []float64 {
	out := make([]float64, d.Len())
	for i := range out {
		out[i] = d.F64(i)
	}
	return out
}

// IsSplatOf reports whether every element equals v (used by algebraic simplification).
func (d *Dense) IsSplatOf(v float64) bool {
	if d.Elided {
		return false
	}
	n := d.Len()
	if d.Splat {
		n = min(n, 1)
	}
	for i := 0; i < n; i++ {
		if d.F64(i) != v {
			return false
		}
	}
	return true
}

func (d *Dense) appendAttr(b []byte) []byte {
	b = append(b, "dense<"...)
	b = d.Type.appendTo(b)
	b = append(b, ": "...)
	switch {
	case d.Elided:
		b = append(b, "elided"...)
	case d.Splat:
		b = d.appendElem(b, 0)
	case d.Len() <= DenseMaxListed:
		b = append(b, '[')
		for i := 0; i < d.Len(); i++ {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = d.appendElem(b, i)
		}
		b = append(b, ']')
	default:
		b = append(b, "0x"...)
		b = hex.AppendEncode(b, d.Data)
	}
	return append(b, '>')
}

func (d *Dense) appendElem(b []byte, i int) []byte {
	switch dt := d.Type.DType; {
	case dt == Bool:
		return strconv.AppendBool(b, d.I64(i) != 0)
	case dt == F64:
		return appendFloat(b, d.F64(i), 64, false)
	case dt.IsFloat():
		return appendFloat(b, d.F64(i), 32, false)
	default:
		return strconv.AppendInt(b, d.I64(i), 10)
	}
}

func isBareName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
