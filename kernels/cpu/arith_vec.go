package cpu

import "math"

// SqrtRow sets o[i] = √a[i] (correctly rounded in T; a at least as long as o, o may be a).
func SqrtRow[T Float](a, o []T) {
	a = a[:len(o)]
	if isFloat32Type[T]() {
		i := sqrtVec32(f32s(a), f32s(o))
		a, o = a[i:], o[i:]
	}
	for i, v := range a {
		o[i] = T(math.Sqrt(float64(v)))
	}
}

// ReluRow sets o[i] = a[i] if a[i] > 0, else 0 (NaN and −0 give +0), branch-free for float32.
func ReluRow[T Float](a, o []T) {
	a = a[:len(o)]
	if isFloat32Type[T]() {
		i := reluVec32(f32s(a), f32s(o))
		a, o = a[i:], o[i:]
	}
	for i, v := range a {
		if v > 0 {
			o[i] = v
		} else {
			o[i] = 0
		}
	}
}

// scaleShiftRow sets o[i] = a[i]·mul + add, rounding the product before the sum (the
// conversion forbids a fused multiply-add, which the AVX body does not use either): batch
// normalisation at inference, per channel.
func scaleShiftRow[T Float](a, o []T, mul, add T) {
	a = a[:len(o)]
	if isFloat32Type[T]() {
		i := scaleShiftVec32(f32s(a), f32s(o), float32(mul), float32(add))
		a, o = a[i:], o[i:]
	}
	for i, v := range a {
		o[i] = T(v*mul) + add
	}
}

// scaleShiftReluRow sets o[i] = relu(a[i]·mul + add): scaleShiftRow and then ReluRow, the
// same roundings and the same bits, in one pass.
func scaleShiftReluRow[T Float](a, o []T, mul, add T) {
	a = a[:len(o)]
	if isFloat32Type[T]() {
		i := scaleShiftReluVec32(f32s(a), f32s(o), float32(mul), float32(add))
		a, o = a[i:], o[i:]
	}
	for i, v := range a {
		if w := T(v*mul) + add; w > 0 {
			o[i] = w
		} else {
			o[i] = 0
		}
	}
}

// maxIntoRow sets o[i] = max(o[i], x[i]) with Go's builtin max (NaN propagates, +0 beats −0).
func maxIntoRow[T Float](o, x []T) {
	x = x[:len(o)]
	if isFloat32Type[T]() {
		i := maxNaNVec32(f32s(o), f32s(x))
		o, x = o[i:], x[i:]
	}
	for i, v := range x {
		o[i] = max(o[i], v)
	}
}

// max3Row sets o[i] = max(max(a[i], b[i]), c[i]) with Go's builtin max; o may alias a, b or
// c only at the same offsets.
func max3Row[T Float](o, a, b, c []T) {
	a, b, c = a[:len(o)], b[:len(o)], c[:len(o)]
	if isFloat32Type[T]() {
		i := maxNaN3Vec32(f32s(o), f32s(a), f32s(b), f32s(c))
		o, a, b, c = o[i:], a[i:], b[i:], c[i:]
	}
	for i := range o {
		o[i] = max(max(a[i], b[i]), c[i])
	}
}

// max3s2Row sets o[j] = max(max(v[2j], v[2j+1]), v[2j+2]) with Go's builtin max: a 3-wide
// stride-2 pooling window along a row. v needs 2·len(o)+1 elements.
func max3s2Row[T Float](o, v []T) {
	v = v[:2*len(o)+1]
	if isFloat32Type[T]() {
		i := maxNaN3s2Vec32(f32s(o), f32s(v))
		o, v = o[i:], v[2*i:]
	}
	for j := range o {
		o[j] = max(max(v[2*j], v[2*j+1]), v[2*j+2])
	}
}

// max2s2Row sets o[j] = max(v[2j], v[2j+1]) with Go's builtin max: a 2-wide stride-2 pooling
// window along a row. v needs 2·len(o) elements.
func max2s2Row[T Float](o, v []T) {
	v = v[:2*len(o)]
	if isFloat32Type[T]() {
		i := max2s2Vec32(f32s(o), f32s(v))
		o, v = o[i:], v[2*i:]
	}
	for j := range o {
		o[j] = max(v[2*j], v[2*j+1])
	}
}

// maxTapsRow sets o[i] = the max over t < k of src[i + t·step] (builtin max; the order of
// taps changes no value): the row or column pass of a separable max pool, three taps a pass.
// o must not overlap src.
func maxTapsRow[T Float](o, src []T, k, step int) {
	n := len(o)
	switch {
	case k == 1:
		copy(o, src[:n])
		return
	case k == 2:
		copy(o, src[:n])
		maxIntoRow(o, src[step:step+n])
		return
	}
	max3Row(o, src[:n], src[step:step+n], src[2*step:2*step+n])
	for t := 3; t < k; t++ {
		maxIntoRow(o, src[t*step:t*step+n])
	}
}
