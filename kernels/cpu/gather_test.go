package cpu

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestGather(t *testing.T) {
	r := tkRand(50)
	for trial := 0; trial < 200; trial++ {
		rank := 1 + r.IntN(3)
		shape := make([]int, rank)
		for d := range shape {
			shape[d] = 1 + r.IntN(5)
		}
		axis := r.IntN(rank)
		idxShape := [][]int{{}, {3}, {2, 2}, {0}}[r.IntN(4)]
		indices := make([]int64, elemCount(idxShape))
		for i := range indices {
			indices[i] = int64(r.IntN(2*shape[axis]) - shape[axis]) // negative too
		}
		outShape := append(append(slices.Clone(shape[:axis]), idxShape...), shape[axis+1:]...)
		x := tkIota(elemCount(shape))
		want := make([]int32, elemCount(outShape))
		oi := make([]int, len(outShape))
		src := make([]int, rank)
		for lin := range want {
			tkUnravel(lin, outShape, oi)
			copy(src, oi[:axis])
			k := tkRavel(oi[axis:axis+len(idxShape)], idxShape)
			v := int(indices[k])
			if v < 0 {
				v += shape[axis]
			}
			src[axis] = v
			copy(src[axis+1:], oi[axis+len(idxShape):])
			want[lin] = x[tkRavel(src, shape)]
		}
		y := make([]int32, len(want))
		ax := axis
		if trial%2 == 1 {
			ax -= rank
		}
		if err := Gather(x, shape, ax, indices, idxShape, y); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(y, want) {
			t.Fatalf("Gather %v axis %d idx %v: got %v want %v", shape, axis, indices, y, want)
		}
		for _, es := range []int{3, 4} {
			bx := make([]byte, es*len(x))
			for i, v := range x {
				bx[es*i] = byte(v)
			}
			by := make([]byte, es*len(want))
			if err := GatherBytes(bx, es, shape, ax, indices, idxShape, by); err != nil {
				t.Fatal(err)
			}
			for i, v := range want {
				if by[es*i] != byte(v) {
					t.Fatalf("GatherBytes es=%d element %d", es, i)
				}
			}
		}

		// backward: ScatterAdd reference in float64
		dout := tkNormals(r, len(want))
		wantD := make([]float64, len(x))
		for lin := range want {
			tkUnravel(lin, outShape, oi)
			copy(src, oi[:axis])
			v := int(indices[tkRavel(oi[axis:axis+len(idxShape)], idxShape)])
			if v < 0 {
				v += shape[axis]
			}
			src[axis] = v
			copy(src[axis+1:], oi[axis+len(idxShape):])
			wantD[tkRavel(src, shape)] += dout[lin]
		}
		dx := make([]float64, len(x))
		for i := range dx {
			dx[i] = 99 // must be overwritten
		}
		if err := GatherBackward(dout, shape, ax, indices, dx); err != nil {
			t.Fatal(err)
		}
		tkCheck(t, "GatherBackward", dx, wantD, 1e-12, 1e-12)
	}
}

func TestGatherErrors(t *testing.T) {
	x := make([]float32, 12)
	for _, bad := range []int64{4, -5, 1 << 40} {
		idx := []int64{0, 3, bad}
		err := Gather(x, []int{4, 3}, 0, idx, []int{3}, make([]float32, 9))
		var ie *IndexError
		if !errors.As(err, &ie) || ie.Pos != 2 || ie.Index != bad || ie.Dim != 4 {
			t.Fatalf("index %d: err = %v", bad, err)
		}
		if !strings.Contains(err.Error(), "indices[2]") {
			t.Fatalf("error %q does not name the position", err)
		}
		if err := ScatterAdd(x, []int{4, 3}, 0, idx, make([]float32, 9)); !errors.As(err, &ie) {
			t.Fatalf("ScatterAdd: err = %v", err)
		}
		if err := GatherElements(x, []int{4, 3}, 0, []int64{bad, 0, 0}, []int{1, 3}, make([]float32, 3)); !errors.As(err, &ie) {
			t.Fatalf("GatherElements: err = %v", err)
		}
	}
}

func TestScatterAddDeterminism(t *testing.T) {
	r := tkRand(51)
	const V, H, K = 50, 700, 3000
	idx := make([]int64, K)
	for i := range idx {
		idx[i] = int64(r.IntN(V))
	}
	dout := tkTo32(tkNormals(r, K*H))
	dx := make([]float32, V*H)
	tkSameBits(t, "GatherBackward", func() []float32 {
		if err := GatherBackward(dout, []int{V, H}, 0, idx, dx); err != nil {
			t.Fatal(err)
		}
		return dx
	})
	// and it equals the sequential in-order sum
	want := make([]float32, V*H)
	for k, v := range idx {
		for j := range H {
			want[int(v)*H+j] += dout[k*H+j]
		}
	}
	if !slices.Equal(dx, want) {
		t.Fatal("GatherBackward differs from the in-order sum")
	}
}

func TestGatherScatterElements(t *testing.T) {
	r := tkRand(52)
	for trial := 0; trial < 200; trial++ {
		rank := 1 + r.IntN(3)
		shape := make([]int, rank)
		idxShape := make([]int, rank)
		for d := range shape {
			shape[d] = 1 + r.IntN(4)
			idxShape[d] = 1 + r.IntN(shape[d])
		}
		axis := r.IntN(rank)
		idxShape[axis] = 1 + r.IntN(5)
		indices := make([]int64, elemCount(idxShape))
		for i := range indices {
			indices[i] = int64(r.IntN(2*shape[axis]) - shape[axis])
		}
		data := tkNormals(r, elemCount(shape))
		upd := tkNormals(r, len(indices))
		target := func(lin int) int {
			idx := make([]int, rank)
			tkUnravel(lin, idxShape, idx)
			v := int(indices[lin])
			if v < 0 {
				v += shape[axis]
			}
			idx[axis] = v
			return tkRavel(idx, shape)
		}
		want := make([]float64, len(indices))
		for lin := range want {
			want[lin] = data[target(lin)]
		}
		got := make([]float64, len(indices))
		if err := GatherElements(data, shape, axis, indices, idxShape, got); err != nil {
			t.Fatal(err)
		}
		tkCheck(t, "GatherElements", got, want, 0, 0)

		for red := ScatterReduceNone; red <= ScatterReduceMin; red++ {
			wantS := slices.Clone(data)
			// apply in the documented order: along the axis in increasing index position
			order := make([]int, len(indices))
			for i := range order {
				order[i] = i
			}
			slices.SortStableFunc(order, func(a, b int) int {
				ia, ib := make([]int, rank), make([]int, rank)
				tkUnravel(a, idxShape, ia)
				tkUnravel(b, idxShape, ib)
				for d := range rank {
					if d == axis {
						continue
					}
					if ia[d] != ib[d] {
						return ia[d] - ib[d]
					}
				}
				return ia[axis] - ib[axis]
			})
			for _, lin := range order {
				tg := target(lin)
				switch red {
				case ScatterReduceNone:
					wantS[tg] = upd[lin]
				case ScatterReduceAdd:
					wantS[tg] += upd[lin]
				case ScatterReduceMul:
					wantS[tg] *= upd[lin]
				case ScatterReduceMax:
					wantS[tg] = max(wantS[tg], upd[lin])
				case ScatterReduceMin:
					wantS[tg] = min(wantS[tg], upd[lin])
				}
			}
			gotS := slices.Clone(data)
			if err := ScatterElements(gotS, shape, axis, indices, idxShape, upd, red); err != nil {
				t.Fatal(err)
			}
			tkCheck(t, "ScatterElements", gotS, wantS, 1e-15, 0)
		}
		dd := make([]float64, len(data))
		if err := GatherElementsBackward(upd, shape, axis, indices, idxShape, dd); err != nil {
			t.Fatal(err)
		}
		wantD := make([]float64, len(data))
		for lin := range indices {
			wantD[target(lin)] += upd[lin]
		}
		tkCheck(t, "GatherElementsBackward", dd, wantD, 1e-12, 1e-15)
	}
}

func TestOneHot(t *testing.T) {
	idx := []int64{0, 2, -1, 5, -4, 1}
	idxShape := []int{2, 3}
	const depth = 3
	for axis := -3; axis <= 2; axis++ {
		ax := axis
		if ax < 0 {
			ax += 3
		}
		outShape := slices.Insert(slices.Clone(idxShape), ax, depth)
		out := make([]float32, len(idx)*depth)
		OneHot(idx, idxShape, depth, axis, 0.5, 7, out)
		oi := make([]int, 3)
		for lin := range out {
			tkUnravel(lin, outShape, oi)
			class := oi[ax]
			ii := slices.Delete(slices.Clone(oi), ax, ax+1)
			v := idx[tkRavel(ii, idxShape)]
			if v < 0 {
				v += depth
			}
			want := float32(0.5)
			if v == int64(class) {
				want = 7
			}
			if out[lin] != want {
				t.Fatalf("OneHot axis %d at %v = %v want %v", axis, oi, out[lin], want)
			}
		}
	}
}
