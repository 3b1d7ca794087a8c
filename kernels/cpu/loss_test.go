package cpu

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func tkRefCE(logits []float64, labels []int64, rows, classes int, ignore int64) []float64 {
	loss := make([]float64, rows)
	for r := range rows {
		if labels[r] == ignore {
			continue
		}
		row := logits[r*classes : (r+1)*classes]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(v - m)
		}
		loss[r] = m + math.Log(s) - row[labels[r]]
	}
	return loss
}

func TestCrossEntropy(t *testing.T) {
	r := tkRand(30)
	const ignore = -100
	for _, sh := range [][2]int{{1, 1}, {1, 5}, {7, 3}, {16, 10}, {3, 5000}} {
		rows, classes := sh[0], sh[1]
		logits := tkNormals(r, rows*classes)
		for i := range logits {
			logits[i] *= 4
		}
		logits[0] += 200 // large logit: must not overflow
		labels := make([]int64, rows)
		for i := range labels {
			labels[i] = int64(r.IntN(classes))
		}
		if rows > 2 {
			labels[1] = ignore
		}
		want := tkRefCE(logits, labels, rows, classes, ignore)
		loss := make([]float64, rows)
		valid, err := CrossEntropy(logits, labels, rows, classes, loss, ignore)
		if err != nil {
			t.Fatal(err)
		}
		wantValid := rows
		if rows > 2 {
			wantValid--
		}
		if valid != wantValid {
			t.Fatalf("valid = %d, want %d", valid, wantValid)
		}
		tkCheck(t, "CrossEntropy f64", loss, want, 1e-12, 1e-12)
		loss32 := make([]float32, rows)
		if _, err := CrossEntropy(tkTo32(logits), labels, rows, classes, loss32, ignore); err != nil {
			t.Fatal(err)
		}
		tkCheck(t, "CrossEntropy f32", tkTo64(loss32), want, 1e-5, 1e-4)

		// backward against finite differences of Σ dloss·loss
		dloss := tkNormals(r, rows)
		dl := make([]float64, rows*classes)
		if err := CrossEntropyBackward(logits, labels, dloss, dl, rows, classes, ignore); err != nil {
			t.Fatal(err)
		}
		if rows*classes <= 500 {
			tkGradCheck(t, "CrossEntropyBackward", dl, tkFD(logits, func(x []float64) float64 {
				return tkDot(dloss, tkRefCE(x, labels, rows, classes, ignore))
			}))
		}
		if rows > 2 {
			for _, v := range dl[classes : 2*classes] {
				if v != 0 {
					t.Fatal("ignored row has a non-zero gradient")
				}
			}
		}
		dl32 := make([]float32, rows*classes)
		if err := CrossEntropyBackward(tkTo32(logits), labels, tkTo32(dloss), dl32, rows, classes, ignore); err != nil {
			t.Fatal(err)
		}
		tkCheck(t, "CrossEntropyBackward f32", tkTo64(dl32), dl, 1e-4, 1e-6)
	}
}

func TestCrossEntropyLabelErrors(t *testing.T) {
	logits := make([]float32, 3*4)
	loss := []float32{7, 7, 7}
	for _, bad := range []int64{4, -1, 99} {
		labels := []int64{0, bad, 2}
		_, err := CrossEntropy(logits, labels, 3, 4, loss, -100)
		var le *LabelError
		if !errors.As(err, &le) || le.Row != 1 || le.Label != bad {
			t.Fatalf("label %d: err = %v", bad, err)
		}
		if !strings.Contains(err.Error(), "row 1") {
			t.Fatalf("error %q does not name the row", err)
		}
		if loss[0] != 7 {
			t.Fatal("loss written despite the error")
		}
		if err := CrossEntropyBackward(logits, labels, loss, make([]float32, 12), 3, 4, -100); !errors.As(err, &le) {
			t.Fatalf("backward: err = %v", err)
		}
	}
	// ignore index that is itself negative, or inside the range
	if _, err := CrossEntropy(logits, []int64{0, -1, 2}, 3, 4, loss, -1); err != nil {
		t.Fatal(err)
	}
	if v, err := CrossEntropy(logits, []int64{0, 3, 3}, 3, 4, loss, 3); err != nil || v != 1 || loss[1] != 0 {
		t.Fatalf("ignore inside range: valid=%d err=%v loss=%v", v, err, loss)
	}
}

func TestMSE(t *testing.T) {
	r := tkRand(31)
	p, q := tkNormals(r, 10001), tkNormals(r, 10001)
	loss := make([]float64, len(p))
	MSE(p, q, loss)
	sum := 0.0
	for i := range p {
		d := p[i] - q[i]
		if loss[i] != d*d {
			t.Fatalf("MSE[%d] = %v, want %v", i, loss[i], d*d)
		}
		sum += d * d
	}
	if m := MeanSquaredError(p, q); math.Abs(m-sum/float64(len(p))) > 1e-12 {
		t.Fatalf("MeanSquaredError = %v, want %v", m, sum/float64(len(p)))
	}
	x, y := p[:50], q[:50]
	g := make([]float64, 50)
	MSEBackward(x, y, []float64{1.0 / 50}, g)
	tkGradCheck(t, "MSEBackward", g, tkFD(x, func(x []float64) float64 { return MeanSquaredError(x, y) }))
	dl := tkNormals(r, 50)
	MSEBackward(x, y, dl, g)
	for i := range g {
		if want := 2 * dl[i] * (x[i] - y[i]); math.Abs(g[i]-want) > 1e-15 {
			t.Fatalf("MSEBackward[%d] = %v, want %v", i, g[i], want)
		}
	}
	big := tkTo32(tkNormals(r, 300000))
	zero := make([]float32, len(big))
	tkSameBits(t, "MeanSquaredError", func() []float32 { return []float32{MeanSquaredError(big, zero)} })
}
