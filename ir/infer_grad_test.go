package ir

import (
	"fmt"
	"strings"
	"testing"
)

func TestGradOpInference(t *testing.T) {
	f32 := func(dims ...int) Type { return T(F32, dims...) }
	for _, c := range []struct {
		op    string
		in    []Type
		attrs Attrs
		want  string // result types, or "error: …"
	}{
		{"relu_grad", []Type{f32(2, 3), f32(2, 3)}, nil, "f32[2,3]"},
		{"relu_grad", []Type{f32(2, 3), f32(3)}, nil, "error: operand types differ"},
		{"tanh_grad", []Type{T(I64, 2), T(I64, 2)}, nil, "error: operand must be floating point"},
		{"gelu_grad", []Type{f32(4), f32(4)}, Attrs{{"approximate", Ident("tanh")}}, "f32[4]"},
		{"softmax_grad", []Type{f32(2, 3), f32(2, 3)}, Attrs{{"axis", Int(-2)}}, "f32[2,3]"},
		{"softmax_grad", []Type{f32(2, 3), f32(2, 3)}, Attrs{{"axis", Int(2)}}, "error: axis 2 out of range"},
		{"layer_norm_grad_input", []Type{f32(2, 3, 4), f32(2, 3, 4), f32(3, 4)}, Attrs{{"axis", Int(1)}}, "f32[2,3,4]"},
		{"layer_norm_grad_input", []Type{f32(2, 3, 4), f32(2, 3, 4), f32(4)}, Attrs{{"axis", Int(1)}}, "error: scale f32[4] must be f32[3,4]"},
		{"layer_norm_grad_params", []Type{f32(2, 3, 4), f32(2, 3, 4)}, nil, "f32[4], f32[4]"},
		{"rms_norm_grad_params", []Type{f32(2, 3, 4), f32(2, 3, 4)}, Attrs{{"axis", Int(-2)}}, "f32[3,4]"},
		{"cross_entropy_grad", []Type{f32(2, 5), T(I64, 2), f32()}, nil, "f32[2,5]"},
		{"cross_entropy_grad", []Type{f32(2, 5), T(I64, 2), f32(2)}, Attrs{{"reduction", Ident("none")}}, "f32[2,5]"},
		{"cross_entropy_grad", []Type{f32(2, 5), T(I64, 2), f32(2)}, nil, "error: dloss must be f32[]"},
		{"mse_grad", []Type{f32(2, 5), f32(2, 5), f32()}, nil, "f32[2,5]"},
		{"gather_grad", []Type{T(I64, 2, 3), f32(4, 2, 3, 5)}, Attrs{{"axis", Int(1)}, {"dim", Int(7)}}, "f32[4,7,5]"},
		{"gather_grad", []Type{T(I64, 2, 3), f32(4, 2, 5, 5)}, Attrs{{"axis", Int(1)}, {"dim", Int(7)}}, "error: dy f32[4,2,5,5] does not hold indices"},
		{"gather_grad", []Type{T(I64, 2, 3), f32(4, 2, 3)}, Attrs{{"axis", Int(2)}, {"dim", Int(7)}}, "error: axis 2 out of range [0, 2)"},
		{"gather_grad", []Type{T(I64, 2, 3), f32(2)}, Attrs{{"axis", Int(0)}, {"dim", Int(7)}}, "error: dy f32[2] has too few dims"},
		{"reduce_max_grad", []Type{f32(2, 3, 4), f32(2, 4), f32(2, 4)}, Attrs{{"axes", Ints(1)}}, "f32[2,3,4]"},
		{"reduce_max_grad", []Type{f32(2, 3, 4), f32(2, 1, 4), f32(2, 4)}, Attrs{{"axes", Ints(1)}, {"keepdims", BoolAttr(true)}}, "error: y and dy must be f32[2,1,4]"},
		{"slice_grad", []Type{f32(2, 4)}, Attrs{{"ends", Ints(5)}, {"shape", Ints(5, 4)}, {"starts", Ints(1)}, {"steps", Ints(2)}}, "f32[5,4]"},
		{"slice_grad", []Type{f32(3, 4)}, Attrs{{"ends", Ints(5)}, {"shape", Ints(5, 4)}, {"starts", Ints(1)}, {"steps", Ints(2)}}, "error: the slice of [5,4] is [2,4], but dy is f32[3,4]"},
	} {
		def := MustLookup(c.op)
		if _, err := def.CheckAttrs(c.attrs.Sorted()); err != nil {
			t.Fatalf("%s %v: %v", c.op, c.attrs, err)
		}
		out, err := def.Infer(c.in, c.attrs.Sorted())
		got := fmt.Sprint(err)
		if err == nil {
			s := make([]string, len(out))
			for i, o := range out {
				s[i] = o.String()
			}
			got = strings.Join(s, ", ")
		} else {
			got = "error: " + got
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s%v: got %s, want %s", c.op, c.in, got, c.want)
		}
	}
}

// The gradient ops' inference returns errors, never panics, on any operand types and
// attribute values that pass the table's checks.
func TestGradOpInferenceNeverPanics(t *testing.T) {
	var types []Type
	for _, dt := range []DType{F32, I64, Bool} {
		for _, s := range []Shape{{}, {0}, {3}, {1, 3}, {2, 3}, {2, 3, 4}} {
			types = append(types, Type{dt, s})
		}
	}
	values := map[AttrKind][]Attr{
		KindInt:  {Int(-4), Int(-1), Int(0), Int(1), Int(2), Int(5)},
		KindInts: {Ints(), Ints(0), Ints(-1), Ints(1, 1), Ints(0, 2), Ints(3, 9), Ints(-7)},
		KindBool: {BoolAttr(true)},
	}
	for _, def := range gradOps {
		// Every attribute either absent (when optional) or one of the values of its kind.
		var attrSets []Attrs
		attrSets = append(attrSets, nil)
		for _, spec := range def.Attrs {
			var next []Attrs
			for _, as := range attrSets {
				if spec.Optional {
					next = append(next, as)
				}
				vals := values[spec.Kind]
				if spec.Kind == KindEnum {
					vals = []Attr{Ident(spec.Enum[0])}
				}
				if spec.Kind == KindFloat {
					vals = []Attr{Float(1e-5)}
				}
				for i, v := range vals {
					if len(next) > 4000 && i > 0 {
						break
					}
					next = append(next, as.Set(spec.Name, v))
				}
			}
			attrSets = next
		}
		maxOps := def.MaxOperands
		for n := def.MinOperands; n <= maxOps; n++ {
			idx := make([]int, n)
			for {
				in := make([]Type, n)
				for i, j := range idx {
					in[i] = types[j]
				}
				for _, as := range attrSets {
					if _, err := def.CheckAttrs(as); err != nil {
						continue
					}
					func() {
						defer func() {
							if r := recover(); r != nil {
								t.Fatalf("%s%v %s panics: %v", def.Name, in, AttrString(Dict(as)), r)
							}
						}()
						def.Infer(in, as)
					}()
				}
				// Next operand combination (sampled: every type for operand 0, a stride for the rest).
				k := n - 1
				for ; k >= 0; k-- {
					if idx[k] += 1 + k*2; idx[k] < len(types) {
						break
					}
					idx[k] = 0
				}
				if k < 0 {
					break
				}
			}
		}
	}
}
