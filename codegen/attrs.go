package codegen

import (
	"fmt"

	pb "ppc.dev/ppc/codegen/programpb"
	"ppc.dev/ppc/ir"
)

func attrsToProto(as ir.Attrs) []*pb.NamedAttr {
	out := make([]*pb.NamedAttr, 0, len(as))
	for _, a := range as {
		out = append(out, &pb.NamedAttr{Name: a.Name, Value: attrToProto(a.Value)})
	}
	return out
}

func attrToProto(a ir.Attr) *pb.Attr {
	switch v := a.(type) {
	case ir.Int:
		return &pb.Attr{Value: &pb.Attr_I{I: int64(v)}}
	case ir.Float:
		return &pb.Attr{Value: &pb.Attr_F{F: float64(v)}}
	case ir.BoolAttr:
		return &pb.Attr{Value: &pb.Attr_B{B: bool(v)}}
	case ir.String:
		return &pb.Attr{Value: &pb.Attr_S{S: string(v)}}
	case ir.Ident:
		return &pb.Attr{Value: &pb.Attr_Ident{Ident: string(v)}}
	case ir.Unit:
		return &pb.Attr{Value: &pb.Attr_Unit{Unit: true}}
	case ir.TypeAttr:
		dt, shape := tensorFields(ir.Type(v))
		return &pb.Attr{Value: &pb.Attr_Type{Type: &pb.TensorType{Dtype: dt, Shape: shape}}}
	case *ir.Dense:
		dt, shape := tensorFields(v.Type)
		return &pb.Attr{Value: &pb.Attr_Dense{Dense: &pb.Dense{Type: &pb.TensorType{Dtype: dt, Shape: shape}, Splat: v.Splat, Data: v.Data}}}
	case ir.List:
		ints := make([]int64, 0, len(v))
		floats := make([]float64, 0, len(v))
		allInt := true
		for _, e := range v {
			switch x := e.(type) {
			case ir.Int:
				ints = append(ints, int64(x))
				floats = append(floats, float64(x))
			case ir.Float:
				allInt = false
				floats = append(floats, float64(x))
			default:
				panic(fmt.Sprintf("codegen: list attribute %s cannot be encoded", ir.AttrString(a)))
			}
		}
		if allInt {
			return &pb.Attr{Value: &pb.Attr_Ints{Ints: &pb.Ints{V: ints}}}
		}
		return &pb.Attr{Value: &pb.Attr_Floats{Floats: &pb.Floats{V: floats}}}
	}
	panic(fmt.Sprintf("codegen: attribute %s cannot be encoded", ir.AttrString(a)))
}

// AttrsFromProto decodes kernel attributes back into IR attributes (the runtime re-checks them
// against the op table). It returns an error, never panics, on malformed input.
func AttrsFromProto(in []*pb.NamedAttr) (ir.Attrs, error) {
	var out ir.Attrs
	for _, na := range in {
		if na == nil || na.Value == nil {
			return nil, fmt.Errorf("empty attribute")
		}
		v, err := attrFromProto(na.Value)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %v", na.Name, err)
		}
		out = append(out, ir.NamedAttr{Name: na.Name, Value: v})
	}
	sorted := out.Sorted()
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Name == sorted[i-1].Name {
			return nil, fmt.Errorf("attribute %s given twice", sorted[i].Name)
		}
	}
	return sorted, nil
}

// TypeFromProto checks and converts a tensor type.
func TypeFromProto(dt pb.DType, shape []int64) (ir.Type, error) {
	d := ir.DType(dt)
	if !d.Valid() {
		return ir.Type{}, fmt.Errorf("bad dtype %d", dt)
	}
	if len(shape) > 64 {
		return ir.Type{}, fmt.Errorf("rank %d too large", len(shape))
	}
	s := make(ir.Shape, len(shape))
	n := int64(1)
	for i, x := range shape {
		if x < 0 || x > 1<<40 {
			return ir.Type{}, fmt.Errorf("bad dim %d", x)
		}
		if x > 0 && n > (1<<50)/x {
			return ir.Type{}, fmt.Errorf("tensor too large")
		}
		n *= max(x, 1)
		s[i] = int(x)
	}
	return ir.Type{DType: d, Shape: s}, nil
}

func attrFromProto(a *pb.Attr) (ir.Attr, error) {
	switch v := a.Value.(type) {
	case *pb.Attr_I:
		return ir.Int(v.I), nil
	case *pb.Attr_F:
		return ir.Float(v.F), nil
	case *pb.Attr_B:
		return ir.BoolAttr(v.B), nil
	case *pb.Attr_S:
		return ir.String(v.S), nil
	case *pb.Attr_Ident:
		return ir.Ident(v.Ident), nil
	case *pb.Attr_Unit:
		return ir.Unit{}, nil
	case *pb.Attr_Ints:
		if v.Ints == nil {
			return ir.List{}, nil
		}
		l := make(ir.List, len(v.Ints.V))
		for i, x := range v.Ints.V {
			l[i] = ir.Int(x)
		}
		return l, nil
	case *pb.Attr_Floats:
		if v.Floats == nil {
			return ir.List{}, nil
		}
		l := make(ir.List, len(v.Floats.V))
		for i, x := range v.Floats.V {
			l[i] = ir.Float(x)
		}
		return l, nil
	case *pb.Attr_Type:
		if v.Type == nil {
			return nil, fmt.Errorf("empty type")
		}
		t, err := TypeFromProto(v.Type.Dtype, v.Type.Shape)
		return ir.TypeAttr(t), err
	case *pb.Attr_Dense:
		if v.Dense == nil || v.Dense.Type == nil {
			return nil, fmt.Errorf("empty dense")
		}
		t, err := TypeFromProto(v.Dense.Type.Dtype, v.Dense.Type.Shape)
		if err != nil {
			return nil, err
		}
		d := &ir.Dense{Type: t, Splat: v.Dense.Splat, Data: v.Dense.Data}
		return d, d.Check()
	}
	return nil, fmt.Errorf("unknown attribute kind")
}

func attrValueText(a ir.Attr) string {
	if _, unit := a.(ir.Unit); unit {
		return ""
	}
	if d, ok := a.(*ir.Dense); ok && d.Len() > 8 && !d.Splat {
		return fmt.Sprintf("dense<%s: %d bytes>", d.Type, len(d.Data))
	}
	return ir.AttrString(a)
}
