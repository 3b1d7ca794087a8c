package cpu

import "fmt"

// Loss kernels. They produce per-row (or per-element) losses; the mean over the global batch is
// the caller's business (it knows the global count), which keeps micro-batching and data
// parallelism exact.

// LabelError reports a class label outside [0, classes) that is not the ignore index.
type LabelError struct {
	Row     int
	Label   int64
	Classes int
}

func (e *LabelError) Error() string {
	return fmt.Sprintf("cross entropy: label %d of row %d out of range [0, %d)", e.Label, e.Row, e.Classes)
}

// checkLabels validates labels and counts the rows that are not ignored.
func checkLabels(labels []int64, classes int, ignoreIndex int64) (int, error) {
	valid := 0
	for r, l := range labels {
		if l == ignoreIndex {
			continue
		}
		if l < 0 || l >= int64(classes) {
			return 0, &LabelError{Row: r, Label: l, Classes: classes}
		}
		valid++
	}
	return valid, nil
}

func checkCE(name string, nl, nlab, nloss, rows, classes int) {
	if rows < 0 || classes <= 0 || nl != rows*classes || nlab != rows || nloss != rows {
		panic(fmt.Sprintf("cpu.%s: len(logits)=%d len(labels)=%d len(loss)=%d do not match rows=%d classes=%d",
			name, nl, nlab, nloss, rows, classes))
	}
}

// CrossEntropy sets loss[r] = logsumexp(logits[r,:]) − logits[r, labels[r]] for each of rows rows
// of classes logits (the softmax cross entropy, computed stably). Rows whose label equals
// ignoreIndex get loss 0; valid is the number of rows that were not ignored (the divisor of a
// mean). A label outside [0, classes) that is not ignoreIndex is an error (a *LabelError naming
// the first such row), and then loss is left untouched.
func CrossEntropy[T Float](logits []T, labels []int64, rows, classes int, loss []T, ignoreIndex int64) (valid int, err error) {
	checkCE("CrossEntropy", len(logits), len(labels), len(loss), rows, classes)
	valid, err = checkLabels(labels, classes, ignoreIndex)
	if err != nil {
		return 0, err
	}
	Parallel(rows, max(1, softmaxGrain/classes), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			l := labels[r]
			if l == ignoreIndex {
				loss[r] = 0
				continue
			}
			row := logits[r*classes : (r+1)*classes]
			m := maxRow(row)
			loss[r] = lseFinish(m, expSumRow(row, m)) - row[l]
		}
	})
	return valid, nil
}

// CrossEntropyBackward sets dlogits[r,:] = dloss[r]·(softmax(logits[r,:]) − onehot(labels[r]))
// and zero for ignored rows. dloss holds the gradient of each row's loss (e.g. 1/valid for a mean).
// Label errors are reported as in CrossEntropy, leaving dlogits untouched.
func CrossEntropyBackward[T Float](logits []T, labels []int64, dloss, dlogits []T, rows, classes int, ignoreIndex int64) error {
	checkCE("CrossEntropyBackward", len(logits), len(labels), len(dloss), rows, classes)
	if len(dlogits) != len(logits) {
		panic(fmt.Sprintf("cpu.CrossEntropyBackward: len(dlogits)=%d, want %d", len(dlogits), len(logits)))
	}
	if _, err := checkLabels(labels, classes, ignoreIndex); err != nil {
		return err
	}
	Parallel(rows, max(1, softmaxGrain/classes), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			l := labels[r]
			dr := dlogits[r*classes : (r+1)*classes]
			if l == ignoreIndex {
				clear(dr)
				continue
			}
			softmaxRow(logits[r*classes:(r+1)*classes], dr, false)
			g := dloss[r]
			for i := range dr {
				dr[i] *= g
			}
			dr[l] -= g
		}
	})
	return nil
}

// MSE sets loss[i] = (pred[i] − target[i])² elementwise (the caller reduces; see ReduceSum and
// ReduceMean, whose order is deterministic).
func MSE[T Float](pred, target, loss []T) {
	if len(pred) != len(target) || len(pred) != len(loss) {
		panic("cpu.MSE: length mismatch")
	}
	Parallel(len(pred), elementwiseGrain, func(lo, hi int) {
		p, t, l := pred[lo:hi], target[lo:hi], loss[lo:hi]
		for i, v := range p {
			d := v - t[i]
			l[i] = d * d
		}
	})
}

// MSEBackward sets dpred[i] = 2·(pred[i] − target[i])·dloss[i], the gradient of the elementwise
// loss. dloss may have length 1, a single scale shared by every element (e.g. 1/N for a mean).
func MSEBackward[T Float](pred, target, dloss, dpred []T) {
	if len(pred) != len(target) || len(pred) != len(dpred) || (len(dloss) != 1 && len(dloss) != len(pred)) {
		panic("cpu.MSEBackward: length mismatch")
	}
	Parallel(len(pred), elementwiseGrain, func(lo, hi int) {
		p, t, d := pred[lo:hi], target[lo:hi], dpred[lo:hi]
		if len(dloss) == 1 {
			g := 2 * dloss[0]
			for i, v := range p {
				d[i] = g * (v - t[i])
			}
			return
		}
		g := dloss[lo:hi]
		for i, v := range p {
			d[i] = 2 * g[i] * (v - t[i])
		}
	})
}

// MeanSquaredError returns mean((pred − target)²), summed in fixed blocks of 4096 elements whose
// partial sums are added in order: deterministic for any GOMAXPROCS. It allocates one T per
// block.
func MeanSquaredError[T Float](pred, target []T) T {
	if len(pred) != len(target) {
		panic("cpu.MeanSquaredError: length mismatch")
	}
	if len(pred) == 0 {
		return 0
	}
	n := len(pred)
	nb := (n + reduceRowBlock - 1) / reduceRowBlock
	part := make([]T, nb)
	Parallel(nb, 2, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			p := pred[b*reduceRowBlock : min((b+1)*reduceRowBlock, n)]
			t := target[b*reduceRowBlock : b*reduceRowBlock+len(p)]
			var s0, s1, s2, s3 T
			i := 0
			for ; i+4 <= len(p); i += 4 {
				d0, d1, d2, d3 := p[i]-t[i], p[i+1]-t[i+1], p[i+2]-t[i+2], p[i+3]-t[i+3]
				s0 += d0 * d0
				s1 += d1 * d1
				s2 += d2 * d2
				s3 += d3 * d3
			}
			for k := i; k < len(p); k++ {
				d := p[k] - t[k]
				switch k - i {
				case 0:
					s0 += d * d
				case 1:
					s1 += d * d
				case 2:
					s2 += d * d
				}
			}
			part[b] = (s0 + s1) + (s2 + s3)
		}
	})
	acc := part[0]
	for _, v := range part[1:] {
		acc += v
	}
	return acc / T(n)
}
