package ir

import "math"

// Compile-time evaluation of the nnOps that shape arithmetic in imported models uses
// (rounding and sign of computed sizes, products and minima of shape vectors); foldInto hands
// the ops it does not know to foldNN.

func nnUnaryF(op *Op) func(float64) float64 {
	at := op.Attrs
	switch op.Def.Name {
	case "floor":
		return math.Floor
	case "ceil":
		return math.Ceil
	case "round":
		return math.RoundToEven
	case "sign":
		return func(x float64) float64 {
			switch {
			case x > 0:
				return 1
			case x < 0:
				return -1
			}
			return x // 0 or NaN
		}
	case "softplus":
		return func(x float64) float64 { return math.Log1p(math.Exp(x)) }
	case "elu":
		a := at.Float("alpha", 1)
		return func(x float64) float64 {
			if x > 0 {
				return x
			}
			return a * (math.Exp(x) - 1)
		}
	case "selu":
		a, g := at.Float("alpha", 1.67326319217681884765625), at.Float("gamma", 1.05070102214813232421875)
		return func(x float64) float64 {
			if x > 0 {
				return g * x
			}
			return g * a * (math.Exp(x) - 1)
		}
	case "leaky_relu":
		a := at.Float("alpha", 0.01)
		return func(x float64) float64 {
			if x >= 0 {
				return x
			}
			return a * x
		}
	case "hard_sigmoid":
		a, b := at.Float("alpha", 0.2), at.Float("beta", 0.5)
		return func(x float64) float64 { return math.Max(0, math.Min(1, a*x+b)) }
	case "shrink":
		bias, l := at.Float("bias", 0), at.Float("lambd", 0.5)
		return func(x float64) float64 {
			switch {
			case x > l:
				return x - bias
			case x < -l:
				return x + bias
			}
			return 0
		}
	}
	return nil
}

func foldNN(op *Op, in []*Dense, out []*Dense) (bool, error) {
	o := out[0]
	if f := nnUnaryF(op); f != nil {
		isF := o.Type.DType.IsFloat()
		for i := 0; i < o.Len(); i++ {
			if isF {
				o.setF64(i, f(in[0].F64(i)))
			} else {
				o.setI64(i, int64(f(float64(in[0].I64(i)))))
			}
		}
		return true, nil
	}
	name := op.Def.Name
	if name != "reduce_min" && name != "reduce_prod" {
		return false, nil
	}
	red, err := ReduceAxes(op.Attrs, in[0].Type.Rank())
	if err != nil {
		return false, nil
	}
	src := in[0].Type.Shape
	isF := o.Type.DType.IsFloat()
	accF := make([]float64, o.Len())
	accI := make([]int64, o.Len())
	seen := make([]bool, o.Len())
	forEachCoord(src, func(k int, c []int) {
		j, s := 0, 1
		for d := len(src) - 1; d >= 0; d-- {
			if !red[d] {
				j += c[d] * s
				s *= src[d]
			}
		}
		vf, vi := in[0].F64(k), in[0].I64(k)
		switch {
		case !seen[j]:
			accF[j], accI[j] = vf, vi
		case name == "reduce_min":
			accF[j], accI[j] = math.Min(accF[j], vf), min(accI[j], vi)
		default:
			accF[j], accI[j] = accF[j]*vf, accI[j]*vi
		}
		seen[j] = true
	})
	for j := range accF {
		switch {
		case !seen[j] && name == "reduce_prod":
			o.setF64(j, 1)
		case !seen[j]:
			return false, nil // min of nothing
		case isF:
			o.setF64(j, accF[j])
		default:
			o.setI64(j, accI[j])
		}
	}
	return true, nil
}
