package cpu

import (
	"fmt"
	"math"
)

// Indexing kernels: Gather (ONNX Gather, embedding lookup) and its backward ScatterAdd,
// GatherElements / ScatterElements, OneHot. Indices are int64 and may be negative (counted from
// the end of the axis). Out-of-range indices are reported as an *IndexError before anything is
// written. Scatters accumulate each target in index order (never split across goroutines), so
// duplicate indices give bitwise reproducible sums.

// IndexError reports an index outside [−dim, dim).
type IndexError struct {
	Op    string // kernel name
	Pos   int    // position in the flat indices tensor
	Index int64  // the offending value
	Dim   int    // size of the indexed axis
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("%s: indices[%d] = %d out of range [%d, %d)", e.Op, e.Pos, e.Index, -e.Dim, e.Dim)
}

func checkIndices(op string, indices []int64, dim int) error {
	d := int64(dim)
	for p, v := range indices {
		if v < -d || v >= d {
			return &IndexError{Op: op, Pos: p, Index: v, Dim: dim}
		}
	}
	return nil
}

func wrapIndex(v int64, dim int) int {
	if v < 0 {
		return int(v) + dim
	}
	return int(v)
}

func axisIndex(name string, axis, rank int) int {
	a := axis
	if a < 0 {
		a += rank
	}
	if a < 0 || a >= rank {
		layoutPanic(name, "axis %d out of range for rank %d", axis, rank)
	}
	return a
}

// Gather sets out = data taken along axis at indices (ONNX Gather): with data of shape
// [pre…, d, post…] and indices of shape idxShape, out has shape [pre…, idxShape…, post…] and
// out[p, k…, q] = data[p, indices[k…], q].
func Gather[T any](data []T, shape []int, axis int, indices []int64, idxShape []int, out []T) error {
	ax := axisIndex("Gather", axis, len(shape))
	if len(data) != elemCount(shape) || len(indices) != elemCount(idxShape) {
		layoutPanic("Gather", "len(data)=%d shape %v, len(indices)=%d idxShape %v", len(data), shape, len(indices), idxShape)
	}
	outer, d, inner := elemCount(shape[:ax]), shape[ax], elemCount(shape[ax+1:])
	K := len(indices)
	if len(out) != outer*K*inner {
		layoutPanic("Gather", "len(out)=%d, want %d", len(out), outer*K*inner)
	}
	if err := checkIndices("gather", indices, d); err != nil {
		return err
	}
	if len(out) == 0 {
		return nil
	}
	if inner == 1 {
		Parallel(outer, max(1, layoutCopyGrain/K), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				src := data[o*d : (o+1)*d]
				dst := out[o*K : (o+1)*K]
				for k, v := range indices {
					dst[k] = src[wrapIndex(v, d)]
				}
			}
		})
		return nil
	}
	Parallel(outer*K, max(1, layoutCopyGrain/inner), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			o, k := u/K, u%K
			i := wrapIndex(indices[k], d)
			copy(out[u*inner:(u+1)*inner], data[(o*d+i)*inner:(o*d+i+1)*inner])
		}
	})
	return nil
}

// GatherBytes is Gather for elements of elemSize bytes.
func GatherBytes(data []byte, elemSize int, shape []int, axis int, indices []int64, idxShape []int, out []byte) error {
	checkElemBytes("GatherBytes", elemSize, data, out)
	switch wordSize(elemSize, data, out) {
	case 1:
		return Gather(data, shape, axis, indices, idxShape, out)
	case 2:
		return Gather(asWords[uint16](data), shape, axis, indices, idxShape, asWords[uint16](out))
	case 4:
		return Gather(asWords[uint32](data), shape, axis, indices, idxShape, asWords[uint32](out))
	case 8:
		return Gather(asWords[uint64](data), shape, axis, indices, idxShape, asWords[uint64](out))
	}
	return Gather(data, withTrailing(shape, elemSize), axisIndex("GatherBytes", axis, len(shape)), indices, idxShape, out)
}

const scatterColBlock = 512

// ScatterAdd adds src into dst along axis at indices: with dst of shape [pre…, d, post…] and src
// of shape [pre…, K, post…] (K = len(indices)), dst[p, indices[k], q] += src[p, k, q], taking k in
// increasing order for every target. It is the backward of Gather (idxShape flattened).
func ScatterAdd[T Float](dst []T, shape []int, axis int, indices []int64, src []T) error {
	ax := axisIndex("ScatterAdd", axis, len(shape))
	outer, d, inner := elemCount(shape[:ax]), shape[ax], elemCount(shape[ax+1:])
	K := len(indices)
	if len(dst) != elemCount(shape) || len(src) != outer*K*inner {
		layoutPanic("ScatterAdd", "len(dst)=%d shape %v, len(src)=%d, want %d", len(dst), shape, len(src), outer*K*inner)
	}
	if err := checkIndices("scatter_add", indices, d); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	ncb := (inner + scatterColBlock - 1) / scatterColBlock
	Parallel(outer*ncb, max(1, layoutCopyGrain/(K*min(inner, scatterColBlock))), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			o, cb := u/ncb, u%ncb
			j0, j1 := cb*scatterColBlock, min((cb+1)*scatterColBlock, inner)
			if inner == 1 {
				dr := dst[o*d : (o+1)*d]
				sr := src[o*K : (o+1)*K]
				for k, v := range indices {
					dr[wrapIndex(v, d)] += sr[k]
				}
				continue
			}
			for k, v := range indices {
				i := wrapIndex(v, d)
				dr := dst[(o*d+i)*inner+j0 : (o*d+i)*inner+j1]
				sr := src[(o*K+k)*inner+j0 : (o*K+k)*inner+j1]
				for j, s := range sr {
					dr[j] += s
				}
			}
		}
	})
	return nil
}

// GatherBackward sets ddata = 0 and then scatters dout into it (ScatterAdd): the gradient of
// Gather with respect to data, for data of shape shape.
func GatherBackward[T Float](dout []T, shape []int, axis int, indices []int64, ddata []T) error {
	ax := axisIndex("GatherBackward", axis, len(shape))
	if err := checkIndices("gather_backward", indices, shape[ax]); err != nil {
		return err
	}
	Parallel(len(ddata), layoutCopyGrain, func(lo, hi int) { clear(ddata[lo:hi]) })
	return ScatterAdd(ddata, shape, axis, indices, dout)
}

// elemGeometry validates a GatherElements/ScatterElements call and returns the decomposition of
// idxShape around the axis plus the data offset of each inner (post-axis) index position.
func elemGeometry(name string, shape []int, axis int, idxShape []int, ndata, nidx int) (ax, io, K, ii int, dstride int, innerOff []int, outerDims, outerStrides []int) {
	r := len(shape)
	ax = axisIndex(name, axis, r)
	if len(idxShape) != r {
		layoutPanic(name, "indices rank %d differs from data rank %d", len(idxShape), r)
	}
	for d := range r {
		if d != ax && idxShape[d] > shape[d] {
			layoutPanic(name, "indices shape %v exceeds data shape %v on axis %d", idxShape, shape, d)
		}
	}
	if ndata != elemCount(shape) || nidx != elemCount(idxShape) {
		layoutPanic(name, "len(data)=%d shape %v, len(indices)=%d idxShape %v", ndata, shape, nidx, idxShape)
	}
	is := contigStrides(shape)
	io, K, ii = elemCount(idxShape[:ax]), idxShape[ax], elemCount(idxShape[ax+1:])
	innerOff = make([]int, ii)
	for i := range innerOff {
		innerOff[i] = linOffset(i, idxShape[ax+1:], is[ax+1:])
	}
	return ax, io, K, ii, is[ax], innerOff, idxShape[:ax], is[:ax]
}

// GatherElements sets out[…] = data[…, indices[…], …] where the axis coordinate is replaced by
// the index (ONNX GatherElements); out has the shape of indices.
func GatherElements[T any](data []T, shape []int, axis int, indices []int64, idxShape []int, out []T) error {
	ax, io, K, ii, ds, innerOff, od, os := elemGeometry("GatherElements", shape, axis, idxShape, len(data), len(indices))
	if len(out) != len(indices) {
		layoutPanic("GatherElements", "len(out)=%d, want %d", len(out), len(indices))
	}
	if err := checkIndices("gather_elements", indices, shape[ax]); err != nil {
		return err
	}
	d := shape[ax]
	Parallel(io*K, max(1, layoutCopyGrain/max(ii, 1)), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			base := linOffset(u/K, od, os)
			idx := indices[u*ii : (u+1)*ii]
			dst := out[u*ii : (u+1)*ii]
			for i, v := range idx {
				dst[i] = data[base+wrapIndex(v, d)*ds+innerOff[i]]
			}
		}
	})
	return nil
}

// ScatterReduction is the reduction of ScatterElements.
type ScatterReduction int

// ScatterElements reductions (ONNX "none", "add", "mul", "max", "min").
const (
	ScatterReduceNone ScatterReduction = iota
	ScatterReduceAdd
	ScatterReduceMul
	ScatterReduceMax
	ScatterReduceMin
)

// ScatterElements updates data in place (ONNX ScatterElements): for every position of indices,
// data[…, indices[…], …] = updates[…] (or combined with the reduction). Positions that hit the
// same target are applied in increasing order along the axis, so with duplicates "none" keeps the
// last update and "add" sums in index order.
func ScatterElements[T Float](data []T, shape []int, axis int, indices []int64, idxShape []int, updates []T, red ScatterReduction) error {
	ax, io, K, ii, ds, innerOff, od, os := elemGeometry("ScatterElements", shape, axis, idxShape, len(data), len(indices))
	if len(updates) != len(indices) {
		layoutPanic("ScatterElements", "len(updates)=%d, want %d", len(updates), len(indices))
	}
	if red < ScatterReduceNone || red > ScatterReduceMin {
		layoutPanic("ScatterElements", "unknown reduction %d", int(red))
	}
	if err := checkIndices("scatter_elements", indices, shape[ax]); err != nil {
		return err
	}
	if len(indices) == 0 {
		return nil
	}
	d := shape[ax]
	ncb := (ii + scatterColBlock - 1) / scatterColBlock
	Parallel(io*ncb, max(1, layoutCopyGrain/(K*min(ii, scatterColBlock))), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			o, cb := u/ncb, u%ncb
			j0, j1 := cb*scatterColBlock, min((cb+1)*scatterColBlock, ii)
			base := linOffset(o, od, os)
			for k := range K {
				p := (o*K + k) * ii
				for i := j0; i < j1; i++ {
					t := base + wrapIndex(indices[p+i], d)*ds + innerOff[i]
					v := updates[p+i]
					switch red {
					case ScatterReduceNone:
						data[t] = v
					case ScatterReduceAdd:
						data[t] += v
					case ScatterReduceMul:
						data[t] *= v
					case ScatterReduceMax:
						data[t] = T(math.Max(float64(data[t]), float64(v)))
					case ScatterReduceMin:
						data[t] = T(math.Min(float64(data[t]), float64(v)))
					}
				}
			}
		}
	})
	return nil
}

// GatherElementsBackward sets ddata = 0 and adds dout at the gathered positions: the gradient of
// GatherElements.
func GatherElementsBackward[T Float](dout []T, shape []int, axis int, indices []int64, idxShape []int, ddata []T) error {
	ax := axisIndex("GatherElementsBackward", axis, len(shape))
	if err := checkIndices("gather_elements_backward", indices, shape[ax]); err != nil {
		return err
	}
	clear(ddata)
	return ScatterElements(ddata, shape, axis, indices, idxShape, dout, ScatterReduceAdd)
}

// OneHot writes the ONNX OneHot of indices (shape idxShape) with depth classes: the output has
// idxShape with a new axis of size depth inserted at axis (−1 = last, the default), holding on
// where the class equals the (wrapped) index and off elsewhere. Indices outside [−depth, depth)
// give a row of off values, as ONNX specifies.
func OneHot[T any](indices []int64, idxShape []int, depth, axis int, off, on T, out []T) {
	r := len(idxShape) + 1
	ax := axisIndex("OneHot", axis, r)
	if len(indices) != elemCount(idxShape) || len(out) != len(indices)*depth || depth < 0 {
		layoutPanic("OneHot", "len(indices)=%d idxShape %v depth %d len(out)=%d", len(indices), idxShape, depth, len(out))
	}
	outer, inner := elemCount(idxShape[:ax]), elemCount(idxShape[ax:])
	Parallel(outer, max(1, layoutCopyGrain/max(1, depth*inner)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			blk := out[o*depth*inner : (o+1)*depth*inner]
			for i := range blk {
				blk[i] = off
			}
			for i, v := range indices[o*inner : (o+1)*inner] {
				if v < -int64(depth) || v >= int64(depth) {
					continue
				}
				blk[wrapIndex(v, depth)*inner+i] = on
			}
		}
	})
}
