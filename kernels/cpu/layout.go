package cpu

import (
	"fmt"
	"unsafe"
)

// Data movement: Transpose, Slice, Concat, Split, Pad, Tile, DepthToSpace, SpaceToDepth (Expand
// is in broadcast.go). Each is generic over any element type, so it serves every dtype, and has a
// byte version taking an element size that reinterprets the buffers as 1-, 2-, 4- or 8-byte
// words when they are aligned (and otherwise moves elemSize-byte groups through a trailing
// byte axis). Rows are split across goroutines; pure copies have no ordering issues.

const (
	layoutCopyGrain = 32768 // elements per goroutine for copies
	transposeTile   = 32    // Transpose: rows (of the output's last axis) per work unit
	transposeBlockB = 16    // Transpose: columns per cache block
)

func layoutPanic(name string, format string, args ...any) {
	panic(fmt.Sprintf("cpu.%s: %s", name, fmt.Sprintf(format, args...)))
}

func contigStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for d := len(shape) - 1; d >= 0; d-- {
		st[d] = s
		s *= shape[d]
	}
	return st
}

// ---- Transpose ----

// Transpose sets y to x (of shape) with its axes permuted: dimension i of y is dimension perm[i]
// of x (numpy.transpose). Size-1 axes are dropped and axes that stay adjacent are merged first;
// then a permutation that keeps the last axis becomes row copies, and any other is a batch of
// cache-blocked 2-D tile transposes between the input's last axis and the output's last axis.
func Transpose[T any](x []T, shape []int, perm []int, y []T) {
	r := len(shape)
	if len(perm) != r {
		layoutPanic("Transpose", "perm %v does not match rank %d", perm, r)
	}
	seen := make([]bool, r)
	for _, p := range perm {
		if p < 0 || p >= r || seen[p] {
			layoutPanic("Transpose", "perm %v is not a permutation", perm)
		}
		seen[p] = true
	}
	n := elemCount(shape)
	if len(x) != n || len(y) != n {
		layoutPanic("Transpose", "len(x)=%d len(y)=%d, shape %v", len(x), len(y), shape)
	}
	if n == 0 {
		return
	}
	dims, p := simplifyPerm(shape, perm)
	k := len(dims)
	identity := true
	for i, v := range p {
		identity = identity && v == i
	}
	if identity {
		Parallel(n, layoutCopyGrain, func(lo, hi int) { copy(y[lo:hi], x[lo:hi]) })
		return
	}
	is := contigStrides(dims)
	outDims := make([]int, k)
	for i, a := range p {
		outDims[i] = dims[a]
	}
	os := contigStrides(outDims)
	if p[k-1] == k-1 {
		// Rows of the last axis stay contiguous: copy them.
		L := dims[k-1]
		odims := outDims[:k-1]
		ist := make([]int, k-1) // input stride of each output position
		for i := range k - 1 {
			ist[i] = is[p[i]]
		}
		rows := n / L
		Parallel(rows, max(1, layoutCopyGrain/L), func(lo, hi int) {
			idx := make([]int, len(odims))
			rem := lo
			for d := len(odims) - 1; d >= 0; d-- {
				idx[d] = rem % odims[d]
				rem /= odims[d]
			}
			off := linOffset(lo, odims, ist)
			for rw := lo; rw < hi; rw++ {
				copy(y[rw*L:(rw+1)*L], x[off:off+L])
				off = odoNext(idx, odims, ist, off)
			}
		})
		return
	}
	// Batched 2-D transposes: input axis A is the output's last axis, input axis B = k−1 (the
	// input's last) sits at output position q.
	A := p[k-1]
	B := k - 1
	q := 0
	for i, a := range p {
		if a == B {
			q = i
		}
	}
	outStrideOf := make([]int, k) // output stride of each input axis
	for i, a := range p {
		outStrideOf[a] = os[i]
	}
	var bdims, bin, bout []int
	for a := range k {
		if a != A && a != B {
			bdims = append(bdims, dims[a])
			bin = append(bin, is[a])
			bout = append(bout, outStrideOf[a])
		}
	}
	nA, nB := dims[A], dims[B]
	ldx, ldy := is[A], os[q]
	nbatch := elemCount(bdims)
	tilesA := (nA + transposeTile - 1) / transposeTile
	Parallel(nbatch*tilesA, max(1, layoutCopyGrain/(transposeTile*nB)), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			bt, ta := u/tilesA, u%tilesA
			xo := linOffset(bt, bdims, bin)
			yo := linOffset(bt, bdims, bout)
			a0 := ta * transposeTile
			a1 := min(a0+transposeTile, nA)
			transposeStrip(x[xo:], ldx, y[yo:], ldy, a0, a1, nB)
		}
	})
}

// transposeStrip sets y[b·ldy + a] = x[a·ldx + b] for a in [a0, a1), b in [0, nB): blocks of
// transposeTile (a) × transposeBlockB (b), each done as 4×4 register blocks. The narrow b
// block keeps the working set small even when ldx, ldy are large powers of two (cache-set
// aliasing), which measured best on 2048² and NCHW↔NHWC shapes.
func transposeStrip[T any](x []T, ldx int, y []T, ldy int, a0, a1, nB int) {
	for b0 := 0; b0 < nB; b0 += transposeBlockB {
		b1 := min(b0+transposeBlockB, nB)
		a := a0
		for ; a+4 <= a1; a += 4 {
			b := b0
			for ; b+4 <= b1; b += 4 {
				i0, i1, i2, i3 := a*ldx+b, (a+1)*ldx+b, (a+2)*ldx+b, (a+3)*ldx+b
				r0, r1, r2, r3 := x[i0:i0+4:i0+4], x[i1:i1+4:i1+4], x[i2:i2+4:i2+4], x[i3:i3+4:i3+4]
				o0, o1, o2, o3 := b*ldy+a, (b+1)*ldy+a, (b+2)*ldy+a, (b+3)*ldy+a
				w0, w1, w2, w3 := y[o0:o0+4:o0+4], y[o1:o1+4:o1+4], y[o2:o2+4:o2+4], y[o3:o3+4:o3+4]
				w0[0], w0[1], w0[2], w0[3] = r0[0], r1[0], r2[0], r3[0]
				w1[0], w1[1], w1[2], w1[3] = r0[1], r1[1], r2[1], r3[1]
				w2[0], w2[1], w2[2], w2[3] = r0[2], r1[2], r2[2], r3[2]
				w3[0], w3[1], w3[2], w3[3] = r0[3], r1[3], r2[3], r3[3]
			}
			for ; b < b1; b++ {
				w := y[b*ldy+a : b*ldy+a+4 : b*ldy+a+4]
				w[0], w[1], w[2], w[3] = x[a*ldx+b], x[(a+1)*ldx+b], x[(a+2)*ldx+b], x[(a+3)*ldx+b]
			}
		}
		for ; a < a1; a++ {
			for b := b0; b < b1; b++ {
				y[b*ldy+a] = x[a*ldx+b]
			}
		}
	}
}

// simplifyPerm drops size-1 axes and merges runs of axes that are adjacent in both the input
// and the output. It returns the merged input dims and the permutation over them.
func simplifyPerm(shape, perm []int) ([]int, []int) {
	// compact index of each non-1 input axis
	comp := make([]int, len(shape))
	var cdims []int
	for a, s := range shape {
		comp[a] = -1
		if s != 1 {
			comp[a] = len(cdims)
			cdims = append(cdims, s)
		}
	}
	if len(cdims) == 0 {
		return []int{1}, []int{0}
	}
	var order []int // compact input axes in output order
	for _, a := range perm {
		if comp[a] >= 0 {
			order = append(order, comp[a])
		}
	}
	// runs in output order
	var runStart []int // first compact axis of each run (output order)
	var runLen []int
	for i, c := range order {
		if i > 0 && c == order[i-1]+1 {
			runLen[len(runLen)-1]++
			continue
		}
		runStart = append(runStart, c)
		runLen = append(runLen, 1)
	}
	// merged input dims: runs sorted by start
	nr := len(runStart)
	rank := make([]int, nr) // input position of each run
	for i := range nr {
		for j := range nr {
			if runStart[j] < runStart[i] {
				rank[i]++
			}
		}
	}
	dims := make([]int, nr)
	for i := range nr {
		d := 1
		for c := runStart[i]; c < runStart[i]+runLen[i]; c++ {
			d *= cdims[c]
		}
		dims[rank[i]] = d
	}
	return dims, rank
}

// ---- Slice ----

// SliceParams resolves ONNX Slice inputs (starts, ends, optional axes and steps; negative
// values count from the end, out-of-range values clamp) against shape into the per-dimension
// start and step and the output shape that Slice takes. axes nil means 0, 1, …; steps nil
// means all 1.
func SliceParams(shape []int, starts, ends, axes, steps []int64) (start, step, outShape []int, err error) {
	r := len(shape)
	if len(ends) != len(starts) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return nil, nil, nil, fmt.Errorf("slice: starts, ends, axes and steps must have the same length")
	}
	start = make([]int, r)
	step = make([]int, r)
	outShape = append([]int(nil), shape...)
	for d := range step {
		step[d] = 1
	}
	seen := make([]bool, r)
	for i := range starts {
		ax := int64(i)
		if axes != nil {
			ax = axes[i]
		}
		if ax < 0 {
			ax += int64(r)
		}
		if ax < 0 || ax >= int64(r) {
			return nil, nil, nil, fmt.Errorf("slice: axis %d out of range for rank %d", axes[i], r)
		}
		if seen[ax] {
			return nil, nil, nil, fmt.Errorf("slice: axis %d repeated", ax)
		}
		seen[ax] = true
		st := int64(1)
		if steps != nil {
			st = steps[i]
		}
		if st == 0 {
			return nil, nil, nil, fmt.Errorf("slice: step 0 on axis %d", ax)
		}
		dim := int64(shape[ax])
		s, e := starts[i], ends[i]
		if s < 0 {
			s += dim
		}
		if e < 0 {
			e += dim
		}
		var cnt int64
		if st > 0 {
			s = min(max(s, 0), dim)
			e = min(max(e, 0), dim)
			if e > s {
				cnt = (e - s + st - 1) / st
			}
		} else {
			s = min(max(s, 0), dim-1)
			e = min(max(e, -1), dim-1)
			if s > e {
				cnt = (s - e + (-st) - 1) / (-st)
			}
		}
		start[ax], step[ax], outShape[ax] = int(s), int(st), int(cnt)
		if cnt == 0 {
			start[ax] = 0
		}
	}
	return start, step, outShape, nil
}

// Slice sets y[i₀, i₁, …] = x[start₀ + i₀·step₀, start₁ + i₁·step₁, …] for the output shape
// outShape (steps may be negative). Use SliceParams to resolve ONNX-style arguments.
func Slice[T any](x []T, shape, start, step []int, y []T, outShape []int) {
	r := len(shape)
	if len(start) != r || len(step) != r || len(outShape) != r || len(x) != elemCount(shape) || len(y) != elemCount(outShape) {
		layoutPanic("Slice", "inconsistent arguments: shape %v start %v step %v out %v len(x)=%d len(y)=%d",
			shape, start, step, outShape, len(x), len(y))
	}
	if len(y) == 0 {
		return
	}
	is := contigStrides(shape)
	base := 0
	st := make([]int, r) // input stride per output index step
	for d := range r {
		last := start[d] + (outShape[d]-1)*step[d]
		if start[d] < 0 || start[d] >= shape[d] || last < 0 || last >= shape[d] {
			layoutPanic("Slice", "axis %d: start %d step %d count %d outside dimension %d", d, start[d], step[d], outShape[d], shape[d])
		}
		base += start[d] * is[d]
		st[d] = step[d] * is[d]
	}
	if r == 0 {
		y[0] = x[0]
		return
	}
	L := outShape[r-1]
	ls := st[r-1]
	odims, ost := outShape[:r-1], st[:r-1]
	rows := len(y) / L
	Parallel(rows, max(1, layoutCopyGrain/L), func(lo, hi int) {
		idx := make([]int, len(odims))
		rem := lo
		for d := len(odims) - 1; d >= 0; d-- {
			idx[d] = rem % odims[d]
			rem /= odims[d]
		}
		off := base + linOffset(lo, odims, ost)
		for rw := lo; rw < hi; rw++ {
			yr := y[rw*L : (rw+1)*L]
			if ls == 1 {
				copy(yr, x[off:off+L])
			} else {
				xi := off
				for i := range yr {
					yr[i] = x[xi]
					xi += ls
				}
			}
			off = odoNext(idx, odims, ost, off)
		}
	})
}

// ---- Concat / Split ----

func concatGeometry(name string, shapes [][]int, axis int) (rank, ax, outer, inner int) {
	if len(shapes) == 0 {
		layoutPanic(name, "no tensors")
	}
	rank = len(shapes[0])
	ax = axis
	if ax < 0 {
		ax += rank
	}
	if ax < 0 || ax >= rank {
		layoutPanic(name, "axis %d out of range for rank %d", axis, rank)
	}
	for _, s := range shapes {
		if len(s) != rank {
			layoutPanic(name, "shapes %v differ in rank", shapes)
		}
		for d := range s {
			if d != ax && s[d] != shapes[0][d] {
				layoutPanic(name, "shapes %v differ outside axis %d", shapes, ax)
			}
		}
	}
	outer = elemCount(shapes[0][:ax])
	inner = elemCount(shapes[0][ax+1:])
	return
}

// Concat joins the tensors xs (with shapes, equal except along axis) along axis into y.
func Concat[T any](xs [][]T, shapes [][]int, axis int, y []T) {
	if len(xs) != len(shapes) {
		layoutPanic("Concat", "%d tensors but %d shapes", len(xs), len(shapes))
	}
	_, ax, outer, inner := concatGeometry("Concat", shapes, axis)
	chunk := make([]int, len(xs)) // elements per outer index
	offs := make([]int, len(xs))  // offset inside an output outer block
	total := 0
	for k, s := range shapes {
		if len(xs[k]) != elemCount(s) {
			layoutPanic("Concat", "tensor %d has %d elements, shape %v", k, len(xs[k]), s)
		}
		chunk[k] = s[ax] * inner
		offs[k] = total
		total += chunk[k]
	}
	if len(y) != outer*total {
		layoutPanic("Concat", "len(y)=%d, want %d", len(y), outer*total)
	}
	concatSplit(xs, chunk, offs, total, outer, y, true)
}

// Split cuts x (of shape) along axis into pieces of sizes[k] along that axis, written to ys[k].
func Split[T any](x []T, shape []int, axis int, sizes []int, ys [][]T) {
	if len(ys) != len(sizes) {
		layoutPanic("Split", "%d outputs but %d sizes", len(ys), len(sizes))
	}
	r := len(shape)
	ax := axis
	if ax < 0 {
		ax += r
	}
	if ax < 0 || ax >= r {
		layoutPanic("Split", "axis %d out of range for rank %d", axis, r)
	}
	if len(x) != elemCount(shape) {
		layoutPanic("Split", "len(x)=%d, shape %v", len(x), shape)
	}
	outer, inner := elemCount(shape[:ax]), elemCount(shape[ax+1:])
	chunk := make([]int, len(ys))
	offs := make([]int, len(ys))
	total := 0
	for k, s := range sizes {
		if s < 0 || len(ys[k]) != outer*s*inner {
			layoutPanic("Split", "output %d has %d elements, want %d", k, len(ys[k]), outer*s*inner)
		}
		chunk[k] = s * inner
		offs[k] = total
		total += chunk[k]
	}
	if total != shape[ax]*inner {
		layoutPanic("Split", "sizes %v do not add up to dimension %d", sizes, shape[ax])
	}
	concatSplit(ys, chunk, offs, total, outer, x, false)
}

// concatSplit copies part k (chunk[k] elements per outer index) to/from offset offs[k] of each
// total-element block of whole.
func concatSplit[T any](parts [][]T, chunk, offs []int, total, outer int, whole []T, toWhole bool) {
	np := len(parts)
	if outer == 0 || total == 0 {
		return
	}
	avg := max(1, total/np)
	Parallel(outer*np, max(1, layoutCopyGrain/avg), func(lo, hi int) {
		for u := lo; u < hi; u++ {
			o, k := u/np, u%np
			c := chunk[k]
			if c == 0 {
				continue
			}
			w := whole[o*total+offs[k] : o*total+offs[k]+c]
			pt := parts[k][o*c : (o+1)*c]
			if toWhole {
				copy(w, pt)
			} else {
				copy(pt, w)
			}
		}
	})
}

// ---- Pad ----

// PadMode is the ONNX Pad mode.
type PadMode int

// Pad modes: constant value, reflect (mirror without repeating the edge), edge (repeat the edge),
// wrap (periodic).
const (
	PadConstant PadMode = iota
	PadReflect
	PadEdge
	PadWrap
)

func (m PadMode) String() string {
	switch m {
	case PadConstant:
		return "constant"
	case PadReflect:
		return "reflect"
	case PadEdge:
		return "edge"
	case PadWrap:
		return "wrap"
	}
	return fmt.Sprintf("PadMode(%d)", int(m))
}

// PadShape returns the output shape of Pad: shape[d] + pads[d] + pads[rank+d]. It returns an
// error for a wrong pads length or a negative result.
func PadShape(shape, pads []int) ([]int, error) {
	r := len(shape)
	if len(pads) != 2*r {
		return nil, fmt.Errorf("pad: %d pads for rank %d (want begins then ends)", len(pads), r)
	}
	out := make([]int, r)
	for d := range shape {
		out[d] = shape[d] + pads[d] + pads[r+d]
		if out[d] < 0 {
			return nil, fmt.Errorf("pad: axis %d of size %d with pads %d, %d is negative", d, shape[d], pads[d], pads[r+d])
		}
	}
	return out, nil
}

// Pad pads x (of shape) as ONNX Pad: pads = [begin₀, begin₁, …, end₀, end₁, …], negative pads
// crop. y has shape PadShape(shape, pads). value is used by PadConstant.
func Pad[T any](x []T, shape []int, pads []int, mode PadMode, value T, y []T) {
	layoutPad(x, shape, pads, mode, func(dst []T) {
		for i := range dst {
			dst[i] = value
		}
	}, y)
}

// layoutPadIndex maps output index o of an axis (begin pad b, input size d) to an input index, or −1
// for a constant-padded position.
func layoutPadIndex(o, b, d int, mode PadMode) int {
	i := o - b
	if i >= 0 && i < d {
		return i
	}
	switch mode {
	case PadEdge:
		return min(max(i, 0), d-1)
	case PadWrap:
		i %= d
		if i < 0 {
			i += d
		}
		return i
	case PadReflect:
		if d == 1 {
			return 0
		}
		p := 2 * (d - 1)
		i %= p
		if i < 0 {
			i += p
		}
		if i >= d {
			i = p - i
		}
		return i
	}
	return -1
}

func layoutPad[T any](x []T, shape []int, pads []int, mode PadMode, fill func([]T), y []T) {
	outShape, err := PadShape(shape, pads)
	if err != nil {
		layoutPanic("Pad", "%v", err)
	}
	if mode < PadConstant || mode > PadWrap {
		layoutPanic("Pad", "unknown mode %d", int(mode))
	}
	r := len(shape)
	if len(x) != elemCount(shape) || len(y) != elemCount(outShape) {
		layoutPanic("Pad", "len(x)=%d len(y)=%d for shape %v pads %v", len(x), len(y), shape, pads)
	}
	if len(y) == 0 {
		return
	}
	if r == 0 {
		y[0] = x[0]
		return
	}
	if len(x) == 0 {
		if mode != PadConstant {
			layoutPanic("Pad", "mode %v needs a non-empty input", mode)
		}
		Parallel(len(y), layoutCopyGrain, func(lo, hi int) { fill(y[lo:hi]) })
		return
	}
	maps := make([][]int, r)
	for d := range r {
		m := make([]int, outShape[d])
		for o := range m {
			m[o] = layoutPadIndex(o, pads[d], shape[d], mode)
		}
		maps[d] = m
	}
	is := contigStrides(shape)
	L := outShape[r-1]
	lm := maps[r-1]
	// interior of the last axis: a contiguous copy
	j0 := min(max(pads[r-1], 0), L)
	j1 := max(min(pads[r-1]+shape[r-1], L), j0)
	odims := outShape[:r-1]
	rows := len(y) / L
	Parallel(rows, max(1, layoutCopyGrain/L), func(lo, hi int) {
		idx := make([]int, len(odims))
		rem := lo
		for d := len(odims) - 1; d >= 0; d-- {
			idx[d] = rem % odims[d]
			rem /= odims[d]
		}
		for rw := lo; rw < hi; rw++ {
			yr := y[rw*L : (rw+1)*L]
			off, pad := 0, false
			for d, i := range idx {
				m := maps[d][i]
				if m < 0 {
					pad = true
					break
				}
				off += m * is[d]
			}
			if pad {
				fill(yr)
			} else {
				xr := x[off : off+shape[r-1]]
				if j1 > j0 {
					copy(yr[j0:j1], xr[j0-pads[r-1]:j1-pads[r-1]])
				}
				if mode == PadConstant {
					if j0 > 0 {
						fill(yr[:j0])
					}
					if j1 < L {
						fill(yr[j1:])
					}
				} else {
					for j := 0; j < j0; j++ {
						yr[j] = xr[lm[j]]
					}
					for j := j1; j < L; j++ {
						yr[j] = xr[lm[j]]
					}
				}
			}
			for d := len(idx) - 1; d >= 0; d-- {
				idx[d]++
				if idx[d] < odims[d] {
					break
				}
				idx[d] = 0
			}
		}
	})
}

// ---- Tile ----

// Tile repeats x (of shape) repeats[d] times along each axis d (ONNX Tile); y has shape
// shape[d]·repeats[d].
func Tile[T any](x []T, shape, repeats []int, y []T) {
	r := len(shape)
	if len(repeats) != r {
		layoutPanic("Tile", "repeats %v do not match rank %d", repeats, r)
	}
	outShape := make([]int, r)
	for d := range shape {
		if repeats[d] < 0 {
			layoutPanic("Tile", "negative repeat %v", repeats)
		}
		outShape[d] = shape[d] * repeats[d]
	}
	if len(x) != elemCount(shape) || len(y) != elemCount(outShape) {
		layoutPanic("Tile", "len(x)=%d len(y)=%d for shape %v repeats %v", len(x), len(y), shape, repeats)
	}
	if len(y) == 0 {
		return
	}
	if r == 0 {
		y[0] = x[0]
		return
	}
	is := contigStrides(shape)
	L := outShape[r-1]
	d0 := shape[r-1]
	odims := outShape[:r-1]
	rows := len(y) / L
	Parallel(rows, max(1, layoutCopyGrain/L), func(lo, hi int) {
		idx := make([]int, len(odims))
		rem := lo
		for d := len(odims) - 1; d >= 0; d-- {
			idx[d] = rem % odims[d]
			rem /= odims[d]
		}
		for rw := lo; rw < hi; rw++ {
			off := 0
			for d, i := range idx {
				off += (i % shape[d]) * is[d]
			}
			yr := y[rw*L : (rw+1)*L]
			xr := x[off : off+d0]
			for j := 0; j < L; j += d0 {
				copy(yr[j:j+d0], xr)
			}
			for d := len(idx) - 1; d >= 0; d-- {
				idx[d]++
				if idx[d] < odims[d] {
					break
				}
				idx[d] = 0
			}
		}
	})
}

// ---- DepthToSpace / SpaceToDepth ----

// DepthToSpace rearranges an NCHW tensor [n, c, h, w] into [n, c/(b²), h·b, w·b] (ONNX
// DepthToSpace). crd selects the CRD mode; otherwise DCR (the ONNX default).
func DepthToSpace[T any](x []T, n, c, h, w, b int, crd bool, y []T) {
	if b <= 0 || c%(b*b) != 0 {
		layoutPanic("DepthToSpace", "channels %d not divisible by blocksize² (%d)", c, b*b)
	}
	cc := c / (b * b)
	if crd {
		Transpose(x, []int{n, cc, b, b, h, w}, []int{0, 1, 4, 2, 5, 3}, y)
		return
	}
	Transpose(x, []int{n, b, b, cc, h, w}, []int{0, 3, 4, 1, 5, 2}, y)
}

// SpaceToDepth rearranges [n, c, h, w] into [n, c·b², h/b, w/b] (ONNX SpaceToDepth, the inverse
// of DCR DepthToSpace).
func SpaceToDepth[T any](x []T, n, c, h, w, b int, y []T) {
	if b <= 0 || h%b != 0 || w%b != 0 {
		layoutPanic("SpaceToDepth", "spatial size %dx%d not divisible by blocksize %d", h, w, b)
	}
	Transpose(x, []int{n, c, h / b, b, w / b, b}, []int{0, 3, 5, 1, 2, 4}, y)
}

// ---- byte versions ----

// wordSize returns elemSize if every buffer can be viewed as elemSize-byte words (size 1, 2, 4
// or 8 and aligned), else 0.
func wordSize(elemSize int, bufs ...[]byte) int {
	switch elemSize {
	case 1, 2, 4, 8:
	default:
		return 0
	}
	for _, b := range bufs {
		if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(elemSize) != 0 {
			return 0
		}
	}
	return elemSize
}

func asWords[W any](b []byte) []W {
	var w W
	sz := int(unsafe.Sizeof(w))
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*W)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/sz)
}

func checkElemBytes(name string, elemSize int, bufs ...[]byte) {
	if elemSize <= 0 {
		layoutPanic(name, "element size %d", elemSize)
	}
	for _, b := range bufs {
		if len(b)%elemSize != 0 {
			layoutPanic(name, "buffer of %d bytes is not a whole number of %d-byte elements", len(b), elemSize)
		}
	}
}

func withTrailing(s []int, v int) []int { return append(append([]int(nil), s...), v) }

// TransposeBytes is Transpose for elements of elemSize bytes.
func TransposeBytes(x []byte, elemSize int, shape, perm []int, y []byte) {
	checkElemBytes("TransposeBytes", elemSize, x, y)
	switch wordSize(elemSize, x, y) {
	case 1:
		Transpose(x, shape, perm, y)
	case 2:
		Transpose(asWords[uint16](x), shape, perm, asWords[uint16](y))
	case 4:
		Transpose(asWords[uint32](x), shape, perm, asWords[uint32](y))
	case 8:
		Transpose(asWords[uint64](x), shape, perm, asWords[uint64](y))
	default:
		Transpose(x, withTrailing(shape, elemSize), withTrailing(perm, len(shape)), y)
	}
}

// SliceBytes is Slice for elements of elemSize bytes.
func SliceBytes(x []byte, elemSize int, shape, start, step []int, y []byte, outShape []int) {
	checkElemBytes("SliceBytes", elemSize, x, y)
	switch wordSize(elemSize, x, y) {
	case 1:
		Slice(x, shape, start, step, y, outShape)
	case 2:
		Slice(asWords[uint16](x), shape, start, step, asWords[uint16](y), outShape)
	case 4:
		Slice(asWords[uint32](x), shape, start, step, asWords[uint32](y), outShape)
	case 8:
		Slice(asWords[uint64](x), shape, start, step, asWords[uint64](y), outShape)
	default:
		Slice(x, withTrailing(shape, elemSize), withTrailing(start, 0), withTrailing(step, 1), y, withTrailing(outShape, elemSize))
	}
}

// ConcatBytes is Concat for elements of elemSize bytes.
func ConcatBytes(xs [][]byte, elemSize int, shapes [][]int, axis int, y []byte) {
	all := append(append(make([][]byte, 0, len(xs)+1), xs...), y)
	checkElemBytes("ConcatBytes", elemSize, all...)
	if axis < 0 && len(shapes) > 0 {
		axis += len(shapes[0])
	}
	switch wordSize(elemSize, all...) {
	case 1:
		Concat(xs, shapes, axis, y)
	case 2:
		Concat(asWordsAll[uint16](xs), shapes, axis, asWords[uint16](y))
	case 4:
		Concat(asWordsAll[uint32](xs), shapes, axis, asWords[uint32](y))
	case 8:
		Concat(asWordsAll[uint64](xs), shapes, axis, asWords[uint64](y))
	default:
		ss := make([][]int, len(shapes))
		for k, s := range shapes {
			ss[k] = withTrailing(s, elemSize)
		}
		Concat(xs, ss, axis, y)
	}
}

// SplitBytes is Split for elements of elemSize bytes.
func SplitBytes(x []byte, elemSize int, shape []int, axis int, sizes []int, ys [][]byte) {
	all := append(append(make([][]byte, 0, len(ys)+1), ys...), x)
	checkElemBytes("SplitBytes", elemSize, all...)
	if axis < 0 {
		axis += len(shape)
	}
	switch wordSize(elemSize, all...) {
	case 1:
		Split(x, shape, axis, sizes, ys)
	case 2:
		Split(asWords[uint16](x), shape, axis, sizes, asWordsAll[uint16](ys))
	case 4:
		Split(asWords[uint32](x), shape, axis, sizes, asWordsAll[uint32](ys))
	case 8:
		Split(asWords[uint64](x), shape, axis, sizes, asWordsAll[uint64](ys))
	default:
		Split(x, withTrailing(shape, elemSize), axis, sizes, ys)
	}
}

func asWordsAll[W any](bs [][]byte) [][]W {
	out := make([][]W, len(bs))
	for k, b := range bs {
		out[k] = asWords[W](b)
	}
	return out
}

// TileBytes is Tile for elements of elemSize bytes.
func TileBytes(x []byte, elemSize int, shape, repeats []int, y []byte) {
	checkElemBytes("TileBytes", elemSize, x, y)
	switch wordSize(elemSize, x, y) {
	case 1:
		Tile(x, shape, repeats, y)
	case 2:
		Tile(asWords[uint16](x), shape, repeats, asWords[uint16](y))
	case 4:
		Tile(asWords[uint32](x), shape, repeats, asWords[uint32](y))
	case 8:
		Tile(asWords[uint64](x), shape, repeats, asWords[uint64](y))
	default:
		Tile(x, withTrailing(shape, elemSize), withTrailing(repeats, 1), y)
	}
}

// ExpandBytes is Expand for elements of elemSize bytes.
func ExpandBytes(x []byte, elemSize int, shape []int, y []byte, outShape []int) {
	checkElemBytes("ExpandBytes", elemSize, x, y)
	switch wordSize(elemSize, x, y) {
	case 1:
		Expand(x, shape, y, outShape)
	case 2:
		Expand(asWords[uint16](x), shape, asWords[uint16](y), outShape)
	case 4:
		Expand(asWords[uint32](x), shape, asWords[uint32](y), outShape)
	case 8:
		Expand(asWords[uint64](x), shape, asWords[uint64](y), outShape)
	default:
		// Align the shapes to the same rank so the trailing byte axis lines up.
		s := make([]int, 0, len(outShape)+1)
		for range len(outShape) - len(shape) {
			s = append(s, 1)
		}
		s = append(append(s, shape...), elemSize)
		Expand(x, s, y, withTrailing(outShape, elemSize))
	}
}

// PadBytes is Pad for elements of elemSize bytes; value holds one element (elemSize bytes) for
// PadConstant and may be nil for zero.
func PadBytes(x []byte, elemSize int, shape, pads []int, mode PadMode, value []byte, y []byte) {
	checkElemBytes("PadBytes", elemSize, x, y)
	if value != nil && len(value) != elemSize {
		layoutPanic("PadBytes", "constant value has %d bytes, element size %d", len(value), elemSize)
	}
	if value == nil {
		value = make([]byte, elemSize)
	}
	if len(pads) != 2*len(shape) {
		layoutPanic("PadBytes", "%d pads for rank %d", len(pads), len(shape))
	}
	switch wordSize(elemSize, x, y) {
	case 1:
		Pad(x, shape, pads, mode, value[0], y)
	case 2:
		Pad(asWords[uint16](x), shape, pads, mode, asWords[uint16](alignedCopy(value))[0], asWords[uint16](y))
	case 4:
		Pad(asWords[uint32](x), shape, pads, mode, asWords[uint32](alignedCopy(value))[0], asWords[uint32](y))
	case 8:
		Pad(asWords[uint64](x), shape, pads, mode, asWords[uint64](alignedCopy(value))[0], asWords[uint64](y))
	default:
		// Trailing byte axis, never padded: every fill is whole elements.
		p := make([]int, 0, len(pads)+2)
		p = append(append(append(p, pads[:len(shape)]...), 0), pads[len(shape):]...)
		p = append(p, 0)
		layoutPad(x, withTrailing(shape, elemSize), p, mode, func(dst []byte) {
			for i := 0; i < len(dst); i += elemSize {
				copy(dst[i:i+elemSize], value)
			}
		}, y)
	}
}

// alignedCopy copies b into a freshly allocated (8-byte aligned) buffer.
func alignedCopy(b []byte) []byte {
	w := make([]uint64, (len(b)+7)/8)
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)[:len(b)]
	copy(out, b)
	return out
}
