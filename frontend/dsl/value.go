package dsl

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"ppc.dev/ppc/ir"
)

// kind is what a DSL expression evaluates to. Numbers, bools, strings, lists, dtypes and
// types are compile-time values; only tensors become IR values.
type kind uint8

const (
	kTensor kind = iota + 1
	kInt
	kFloat
	kBool
	kString
	kList
	kDType
	kType
	kTuple // the results of split or of a block returning several values
	kNone  // a block without a return
)

type val struct {
	k    kind
	t    *ir.Value
	i    int64
	f    float64
	b    bool
	s    string
	list []val
	dt   ir.DType
	typ  ir.Type
}

func tensorVal(v *ir.Value) val { return val{k: kTensor, t: v} }
func intVal(i int64) val        { return val{k: kInt, i: i} }
func floatVal(f float64) val    { return val{k: kFloat, f: f} }
func boolVal(b bool) val        { return val{k: kBool, b: b} }

func (v val) isNum() bool { return v.k == kInt || v.k == kFloat }

func (v val) num() float64 {
	if v.k == kInt {
		return float64(v.i)
	}
	return v.f
}

// describe names a value for diagnostics: `f32[16,64]`, `integer 3`, `list [1, 2]`.
func (v val) describe() string {
	switch v.k {
	case kTensor:
		return v.t.Type.String()
	case kInt:
		return "integer " + strconv.FormatInt(v.i, 10)
	case kFloat:
		return "float " + fmtFloat(v.f)
	case kBool:
		return "bool " + strconv.FormatBool(v.b)
	case kString:
		return "string " + strconv.Quote(v.s)
	case kList:
		return "list " + v.String()
	case kDType:
		return "dtype " + v.dt.String()
	case kType:
		return "type " + v.typ.String()
	case kTuple:
		return fmt.Sprintf("%d values", len(v.list))
	case kNone:
		return "no value"
	}
	return "?"
}

// String prints a compile-time value as DSL text.
func (v val) String() string {
	switch v.k {
	case kInt:
		return strconv.FormatInt(v.i, 10)
	case kFloat:
		return fmtFloat(v.f)
	case kBool:
		return strconv.FormatBool(v.b)
	case kList:
		parts := make([]string, len(v.list))
		for i, e := range v.list {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return v.describe()
}

// fmtFloat formats numbers as the model convention asks (strconv 'g', shortest).
func fmtFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// checked integer arithmetic for compile-time values.

func addInt(a, b int64) (int64, bool) {
	c := a + b
	return c, (c > a) == (b > 0)
}

func subInt(a, b int64) (int64, bool) {
	c := a - b
	return c, (c < a) == (b > 0)
}

func mulInt(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	return c, true
}
