package cpu

import (
	"math"
	"slices"
	"testing"
	"unsafe"
)

// tkUnravel writes the row-major multi-index of lin over shape into idx.
func tkUnravel(lin int, shape, idx []int) {
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = lin % shape[d]
		lin /= shape[d]
	}
}

func tkRavel(idx, shape []int) int {
	lin := 0
	for d := range shape {
		lin = lin*shape[d] + idx[d]
	}
	return lin
}

func tkPerms(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range tkPerms(n - 1) {
		for pos := 0; pos <= len(p); pos++ {
			q := append(append(append([]int{}, p[:pos]...), n-1), p[pos:]...)
			out = append(out, q)
		}
	}
	return out
}

func tkIota(n int) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(i)
	}
	return x
}

func tkRefTranspose(x []int32, shape, perm []int) []int32 {
	outShape := make([]int, len(shape))
	for i, p := range perm {
		outShape[i] = shape[p]
	}
	y := make([]int32, len(x))
	oi := make([]int, len(shape))
	ii := make([]int, len(shape))
	for lin := range y {
		tkUnravel(lin, outShape, oi)
		for i, p := range perm {
			ii[p] = oi[i]
		}
		y[lin] = x[tkRavel(ii, shape)]
	}
	return y
}

func TestTransposeAllPerms(t *testing.T) {
	r := tkRand(40)
	sizes := []int{1, 2, 3, 5, 7, 33}
	for rank := 0; rank <= 4; rank++ {
		for trial := 0; trial < 6; trial++ {
			shape := make([]int, rank)
			for d := range shape {
				shape[d] = sizes[r.IntN(len(sizes))]
			}
			if trial == 0 && rank >= 2 {
				shape[rank-1], shape[0] = 40, 37 // crosses tile edges
			}
			x := tkIota(elemCount(shape))
			for _, perm := range tkPerms(rank) {
				want := tkRefTranspose(x, shape, perm)
				y := make([]int32, len(x))
				Transpose(x, shape, perm, y)
				if !slices.Equal(y, want) {
					t.Fatalf("Transpose %v perm %v: got %v want %v", shape, perm, y[:min(20, len(y))], want[:min(20, len(want))])
				}
				y64 := make([]float64, len(x))
				x64 := make([]float64, len(x))
				for i, v := range x {
					x64[i] = float64(v)
				}
				Transpose(x64, shape, perm, y64)
				for i := range y64 {
					if y64[i] != float64(want[i]) {
						t.Fatalf("Transpose f64 %v perm %v differs at %d", shape, perm, i)
					}
				}
			}
		}
	}
	// big 2-D and a batched case with sizes that are not multiples of the tile
	for _, sh := range [][]int{{67, 1031}, {3, 129, 65}, {1, 1, 1}} {
		x := tkIota(elemCount(sh))
		for _, perm := range tkPerms(len(sh)) {
			y := make([]int32, len(x))
			Transpose(x, sh, perm, y)
			if !slices.Equal(y, tkRefTranspose(x, sh, perm)) {
				t.Fatalf("Transpose %v %v", sh, perm)
			}
		}
	}
}

func TestTransposeBytes(t *testing.T) {
	shape := []int{3, 4, 5}
	perm := []int{2, 0, 1}
	ref := tkRefTranspose(tkIota(60), shape, perm)
	for _, es := range []int{1, 2, 3, 4, 8, 16} {
		for _, misalign := range []int{0, 1} {
			buf := make([]byte, 60*es+misalign)
			x := buf[misalign:]
			for i := range 60 {
				for b := range es {
					x[i*es+b] = byte(i*7 + b)
				}
			}
			ybuf := make([]byte, 60*es+misalign)
			y := ybuf[misalign:]
			TransposeBytes(x, es, shape, perm, y)
			for i := range 60 {
				src := int(ref[i])
				for b := range es {
					if y[i*es+b] != byte(src*7+b) {
						t.Fatalf("TransposeBytes es=%d misalign=%d element %d byte %d", es, misalign, i, b)
					}
				}
			}
		}
	}
}

// tkSliceIndices enumerates the indices ONNX Slice selects on one axis.
func tkSliceIndices(dim int, start, end, step int64) []int {
	d := int64(dim)
	if start < 0 {
		start += d
	}
	if end < 0 {
		end += d
	}
	var out []int
	if step > 0 {
		start = min(max(start, 0), d)
		end = min(max(end, 0), d)
		for i := start; i < end; i += step {
			out = append(out, int(i))
		}
	} else {
		start = min(max(start, 0), d-1)
		end = min(max(end, -1), d-1)
		for i := start; i > end; i += step {
			out = append(out, int(i))
		}
	}
	return out
}

func TestSlice(t *testing.T) {
	r := tkRand(41)
	for trial := 0; trial < 300; trial++ {
		rank := 1 + r.IntN(4)
		shape := make([]int, rank)
		for d := range shape {
			shape[d] = 1 + r.IntN(7)
		}
		x := tkIota(elemCount(shape))
		var starts, ends, axes, steps []int64
		sel := make([][]int, rank)
		for d := range rank {
			sel[d] = make([]int, shape[d])
			for i := range sel[d] {
				sel[d][i] = i
			}
		}
		for d := range rank {
			if r.IntN(3) == 0 {
				continue
			}
			st := int64(r.IntN(7) - 3)
			if st == 0 {
				st = 1
			}
			s := int64(r.IntN(2*shape[d]+4) - shape[d] - 2)
			e := int64(r.IntN(2*shape[d]+4) - shape[d] - 2)
			if r.IntN(6) == 0 {
				e = math.MaxInt64
				if st < 0 {
					e = math.MinInt64
				}
			}
			ax := int64(d)
			if r.IntN(2) == 0 {
				ax -= int64(rank)
			}
			starts, ends, axes, steps = append(starts, s), append(ends, e), append(axes, ax), append(steps, st)
			sel[d] = tkSliceIndices(shape[d], s, e, st)
		}
		start, step, outShape, err := SliceParams(shape, starts, ends, axes, steps)
		if err != nil {
			t.Fatal(err)
		}
		want := []int32{}
		wantShape := make([]int, rank)
		for d := range rank {
			wantShape[d] = len(sel[d])
		}
		if !slices.Equal(outShape, wantShape) {
			t.Fatalf("SliceParams(%v, %v, %v, %v, %v) shape %v, want %v", shape, starts, ends, axes, steps, outShape, wantShape)
		}
		idx, src := make([]int, rank), make([]int, rank)
		for lin := range elemCount(wantShape) {
			tkUnravel(lin, wantShape, idx)
			for d := range rank {
				src[d] = sel[d][idx[d]]
			}
			want = append(want, x[tkRavel(src, shape)])
		}
		y := make([]int32, len(want))
		Slice(x, shape, start, step, y, outShape)
		if !slices.Equal(y, want) {
			t.Fatalf("Slice %v starts %v ends %v axes %v steps %v: got %v want %v", shape, starts, ends, axes, steps, y, want)
		}
		yb := make([]byte, 4*len(want))
		SliceBytes(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)), 4, shape, start, step, yb, outShape)
		if len(want) > 0 && !slices.Equal(unsafe.Slice((*int32)(unsafe.Pointer(&yb[0])), len(want)), want) {
			t.Fatal("SliceBytes differs from Slice")
		}
	}
	if _, _, _, err := SliceParams([]int{3}, []int64{0}, []int64{3}, nil, []int64{0}); err == nil {
		t.Fatal("step 0 accepted")
	}
	// full reverse
	_, _, outShape, _ := SliceParams([]int{4}, []int64{-1}, []int64{math.MinInt64}, nil, []int64{-1})
	y := make([]int32, 4)
	Slice(tkIota(4), []int{4}, []int{3}, []int{-1}, y, outShape)
	if !slices.Equal(y, []int32{3, 2, 1, 0}) {
		t.Fatalf("reverse = %v", y)
	}
}

func TestConcatSplit(t *testing.T) {
	r := tkRand(42)
	for trial := 0; trial < 100; trial++ {
		rank := 1 + r.IntN(4)
		base := make([]int, rank)
		for d := range base {
			base[d] = 1 + r.IntN(4)
		}
		axis := r.IntN(rank)
		n := 1 + r.IntN(4)
		var xs [][]int32
		var shapes [][]int
		var sizes []int
		next := int32(0)
		for range n {
			s := slices.Clone(base)
			s[axis] = r.IntN(4) // may be 0
			x := make([]int32, elemCount(s))
			for i := range x {
				x[i] = next
				next++
			}
			xs, shapes, sizes = append(xs, x), append(shapes, s), append(sizes, s[axis])
		}
		outShape := slices.Clone(base)
		outShape[axis] = 0
		for _, s := range sizes {
			outShape[axis] += s
		}
		// reference: walk the output and find the owning input
		want := make([]int32, elemCount(outShape))
		idx := make([]int, rank)
		for lin := range want {
			tkUnravel(lin, outShape, idx)
			a := idx[axis]
			for k, s := range sizes {
				if a < s {
					local := slices.Clone(idx)
					local[axis] = a
					want[lin] = xs[k][tkRavel(local, shapes[k])]
					break
				}
				a -= s
			}
		}
		y := make([]int32, len(want))
		ax := axis
		if trial%2 == 0 {
			ax -= rank
		}
		Concat(xs, shapes, ax, y)
		if !slices.Equal(y, want) {
			t.Fatalf("Concat %v axis %d", shapes, axis)
		}
		parts := make([][]int32, n)
		for k := range parts {
			parts[k] = make([]int32, len(xs[k]))
		}
		Split(y, outShape, ax, sizes, parts)
		for k := range parts {
			if !slices.Equal(parts[k], xs[k]) {
				t.Fatalf("Split %v axis %d part %d", outShape, axis, k)
			}
		}
		// byte versions with a 3-byte element
		bx := make([][]byte, n)
		for k, x := range xs {
			bx[k] = make([]byte, 3*len(x))
			for i, v := range x {
				bx[k][3*i], bx[k][3*i+1], bx[k][3*i+2] = byte(v), byte(v>>8), 0xAB
			}
		}
		by := make([]byte, 3*len(want))
		ConcatBytes(bx, 3, shapes, ax, by)
		for i, v := range want {
			if by[3*i] != byte(v) || by[3*i+1] != byte(v>>8) || by[3*i+2] != 0xAB {
				t.Fatalf("ConcatBytes element %d", i)
			}
		}
		bp := make([][]byte, n)
		for k := range bp {
			bp[k] = make([]byte, len(bx[k]))
		}
		SplitBytes(by, 3, outShape, ax, sizes, bp)
		for k := range bp {
			if !slices.Equal(bp[k], bx[k]) {
				t.Fatalf("SplitBytes part %d", k)
			}
		}
	}
}

// tkPadSrc maps an output coordinate to an input one (−1 = constant), by repeated reflection.
func tkPadSrc(o, b, d int, mode PadMode) int {
	i := o - b
	if i >= 0 && i < d {
		return i
	}
	switch mode {
	case PadConstant:
		return -1
	case PadEdge:
		if i < 0 {
			return 0
		}
		return d - 1
	case PadWrap:
		return ((i % d) + d) % d
	}
	if d == 1 {
		return 0
	}
	for i < 0 || i >= d {
		if i < 0 {
			i = -i
		}
		if i >= d {
			i = 2*(d-1) - i
		}
	}
	return i
}

func TestPad(t *testing.T) {
	r := tkRand(43)
	for trial := 0; trial < 400; trial++ {
		rank := 1 + r.IntN(3)
		shape := make([]int, rank)
		for d := range shape {
			shape[d] = 1 + r.IntN(5)
		}
		mode := PadMode(r.IntN(4))
		pads := make([]int, 2*rank)
		outShape := make([]int, rank)
		for d := range rank {
			for { // keep the output non-negative
				pads[d], pads[rank+d] = r.IntN(9)-3, r.IntN(9)-3
				if mode != PadConstant { // negative pads are crops; reflect/edge/wrap need the data
					pads[d], pads[rank+d] = max(pads[d], -shape[d]+1), max(pads[rank+d], 0)
				}
				if shape[d]+pads[d]+pads[rank+d] >= 0 {
					break
				}
			}
			outShape[d] = shape[d] + pads[d] + pads[rank+d]
		}
		x := tkIota(elemCount(shape))
		for i := range x {
			x[i] += 1
		}
		want := make([]int32, elemCount(outShape))
		idx, src := make([]int, rank), make([]int, rank)
		for lin := range want {
			tkUnravel(lin, outShape, idx)
			want[lin] = -7
			ok := true
			for d := range rank {
				src[d] = tkPadSrc(idx[d], pads[d], shape[d], mode)
				ok = ok && src[d] >= 0
			}
			if ok {
				want[lin] = x[tkRavel(src, shape)]
			}
		}
		got, err := PadShape(shape, pads)
		if err != nil || !slices.Equal(got, outShape) {
			t.Fatalf("PadShape(%v, %v) = %v, %v", shape, pads, got, err)
		}
		y := make([]int32, len(want))
		Pad(x, shape, pads, mode, -7, y)
		if !slices.Equal(y, want) {
			t.Fatalf("Pad %v pads %v mode %v:\n got %v\nwant %v", shape, pads, mode, y, want)
		}
		// bytes, with 3-byte elements (the fallback path) and 4-byte (word path)
		for _, es := range []int{3, 4} {
			bx := make([]byte, es*len(x))
			for i, v := range x {
				for b := range es {
					bx[es*i+b] = byte(int(v) + b)
				}
			}
			val := make([]byte, es)
			for b := range val {
				val[b] = byte(0xF0 + b)
			}
			by := make([]byte, es*len(want))
			PadBytes(bx, es, shape, pads, mode, val, by)
			for i, v := range want {
				for b := range es {
					w := byte(int(v) + b)
					if v == -7 {
						w = byte(0xF0 + b)
					}
					if by[es*i+b] != w {
						t.Fatalf("PadBytes es=%d %v pads %v mode %v element %d", es, shape, pads, mode, i)
					}
				}
			}
		}
	}
	if _, err := PadShape([]int{2}, []int{-2, -1}); err == nil {
		t.Fatal("negative output size accepted")
	}
	// numpy: np.pad([1,2,3], (5,5), 'reflect') = [2 1 2 3 2 1 2 3 2 1 2 3 2]
	y := make([]float64, 13)
	Pad([]float64{1, 2, 3}, []int{3}, []int{5, 5}, PadReflect, 0, y)
	if !slices.Equal(y, []float64{2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2}) {
		t.Fatalf("reflect = %v", y)
	}
}

func TestTileExpand(t *testing.T) {
	r := tkRand(44)
	for trial := 0; trial < 200; trial++ {
		rank := 1 + r.IntN(4)
		shape := make([]int, rank)
		reps := make([]int, rank)
		for d := range shape {
			shape[d] = 1 + r.IntN(3)
			reps[d] = r.IntN(4)
		}
		x := tkIota(elemCount(shape))
		outShape := make([]int, rank)
		for d := range shape {
			outShape[d] = shape[d] * reps[d]
		}
		want := make([]int32, elemCount(outShape))
		idx := make([]int, rank)
		for lin := range want {
			tkUnravel(lin, outShape, idx)
			for d := range idx {
				idx[d] %= shape[d]
			}
			want[lin] = x[tkRavel(idx, shape)]
		}
		y := make([]int32, len(want))
		Tile(x, shape, reps, y)
		if !slices.Equal(y, want) {
			t.Fatalf("Tile %v reps %v", shape, reps)
		}
		yb := make([]byte, 4*len(want))
		TileBytes(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)), 4, shape, reps, yb)
		for i, v := range want {
			if int32(uint32(yb[4*i])|uint32(yb[4*i+1])<<8|uint32(yb[4*i+2])<<16|uint32(yb[4*i+3])<<24) != v {
				t.Fatalf("TileBytes element %d", i)
			}
		}

		// Expand: random broadcastable input shape of lower or equal rank
		full := make([]int, rank)
		for d := range full {
			full[d] = 1 + r.IntN(4)
		}
		k := r.IntN(rank + 1)
		in := slices.Clone(full[rank-k:])
		for d := range in {
			if r.IntN(2) == 0 {
				in[d] = 1
			}
		}
		xe := tkIota(elemCount(in))
		wantE := make([]int32, elemCount(full))
		ii := make([]int, len(in))
		for lin := range wantE {
			tkUnravel(lin, full, idx)
			for d := range in {
				ii[d] = idx[rank-k+d]
				if in[d] == 1 {
					ii[d] = 0
				}
			}
			wantE[lin] = xe[tkRavel(ii, in)]
		}
		ye := make([]int32, len(wantE))
		Expand(xe, in, ye, full)
		if !slices.Equal(ye, wantE) {
			t.Fatalf("Expand %v -> %v", in, full)
		}
		bx := make([]byte, 3*len(xe))
		for i, v := range xe {
			bx[3*i], bx[3*i+1], bx[3*i+2] = byte(v), 1, 2
		}
		by := make([]byte, 3*len(wantE))
		ExpandBytes(bx, 3, in, by, full)
		for i, v := range wantE {
			if by[3*i] != byte(v) || by[3*i+1] != 1 || by[3*i+2] != 2 {
				t.Fatalf("ExpandBytes %v -> %v element %d", in, full, i)
			}
		}
	}
}

func TestDepthToSpace(t *testing.T) {
	const n, c, h, w, b = 2, 8, 3, 2, 2
	cc := c / (b * b)
	x := tkIota(n * c * h * w)
	for _, crd := range []bool{false, true} {
		y := make([]int32, len(x))
		DepthToSpace(x, n, c, h, w, b, crd, y)
		for in := range n {
			for oc := range cc {
				for oh := range h * b {
					for ow := range w * b {
						i, j := oh%b, ow%b
						ic := (i*b+j)*cc + oc
						if crd {
							ic = oc*b*b + i*b + j
						}
						want := x[((in*c+ic)*h+oh/b)*w+ow/b]
						if got := y[((in*cc+oc)*h*b+oh)*w*b+ow]; got != want {
							t.Fatalf("DepthToSpace(crd=%v) at %d,%d,%d,%d = %d want %d", crd, in, oc, oh, ow, got, want)
						}
					}
				}
			}
		}
		if !crd {
			back := make([]int32, len(x))
			SpaceToDepth(y, n, cc, h*b, w*b, b, back)
			if !slices.Equal(back, x) {
				t.Fatal("SpaceToDepth does not invert DCR DepthToSpace")
			}
		}
	}
}

func TestLayoutPanicsOnBadShapes(t *testing.T) {
	for name, f := range map[string]func(){
		"perm":  func() { Transpose(make([]int, 6), []int{2, 3}, []int{0, 0}, make([]int, 6)) },
		"len":   func() { Transpose(make([]int, 5), []int{2, 3}, []int{1, 0}, make([]int, 6)) },
		"slice": func() { Slice(make([]int, 6), []int{6}, []int{4}, []int{1}, make([]int, 3), []int{3}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func BenchmarkTranspose2D(b *testing.B) {
	const n = 2048
	x := make([]float32, n*n)
	for i := range x {
		x[i] = float32(i)
	}
	y := make([]float32, n*n)
	b.SetBytes(int64(8 * n * n)) // read + write
	for b.Loop() {
		Transpose(x, []int{n, n}, []int{1, 0}, y)
	}
}

func BenchmarkTransposeNCHWtoNHWC(b *testing.B) {
	shape := []int{32, 64, 56, 56}
	x := make([]float32, elemCount(shape))
	y := make([]float32, len(x))
	b.SetBytes(int64(8 * len(x)))
	for b.Loop() {
		Transpose(x, shape, []int{0, 2, 3, 1}, y)
	}
}
