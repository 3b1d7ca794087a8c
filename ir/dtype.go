package ir

import "fmt"

// DType is the element type of a tensor value.
type DType uint8

// The element types. Invalid is the zero value and marks an unknown type (printed `?`).
const (
	Invalid DType = iota
	F64
	F32
	F16
	BF16
	I64
	I32
	I8
	U8
	Bool
)

var dtypeNames = [...]string{Invalid: "?", F64: "f64", F32: "f32", F16: "f16", BF16: "bf16",
	I64: "i64", I32: "i32", I8: "i8", U8: "u8", Bool: "bool"}

var dtypeSizes = [...]int{F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I8: 1, U8: 1, Bool: 1}

// DTypes lists every valid dtype in order.
var DTypes = []DType{F64, F32, F16, BF16, I64, I32, I8, U8, Bool}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes of one element (0 for Invalid).
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F64 || d == F32 || d == F16 || d == BF16 }

// IsInt reports whether d is an integer type (bool excluded).
func (d DType) IsInt() bool { return d == I64 || d == I32 || d == I8 || d == U8 }

// Valid reports whether d is a known, concrete dtype.
func (d DType) Valid() bool { return d > Invalid && int(d) < len(dtypeNames) }

// ParseDType maps a dtype name ("f32") to its DType.
func ParseDType(s string) (DType, bool) {
	for i, n := range dtypeNames {
		if i > 0 && n == s {
			return DType(i), true
		}
	}
	return Invalid, false
}
