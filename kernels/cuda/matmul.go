package cuda

import (
	"fmt"

	"ppc.dev/ppc/ir"
	"ppc.dev/ppc/runtime/device"
)

// GemmCall is one cuBLASLt matmul, in cuBLASLt's column-major terms: D = op(A)·op(B) (+ bias
// per row of D), over Batch matrices Stride elements apart (stride 0 repeats one matrix),
// starting Off elements into each buffer.
//
// A row-major matrix is its transpose in column-major order, so numpy's C = A·B (row-major)
// is Cᵀ = Bᵀ·Aᵀ in column-major: cuBLASLt's A is the IR's second operand and its B the
// first, M = the result's columns (N), N = its rows (M). transpose_b becomes op(A) = T,
// transpose_a op(B) = T.
type GemmCall struct {
	TransA, TransB            bool
	M, N, K                   int64
	LDA, LDB, LDC             int64
	StrideA, StrideB, StrideC int64
	Batch                     int64
	OffA, OffB, OffC          int64
	// Bias: the epilogue adds a vector of M elements (the result's last dim) to every column.
	Bias  bool
	DType ir.DType
	// Compute is cuBLASLt's compute type: CUBLAS_COMPUTE_32F for f32, bf16 and f16 (fp32
	// accumulation), CUBLAS_COMPUTE_32F_FAST_TF32 for f32 only with --tf32, 64F for f64.
	Compute string
}

// PlanMatmul maps a matmul launch site (numpy semantics: batch dims broadcast, rank-1
// operands promoted, transpose_a/b swap the last two dims, an optional bias broadcast onto
// the result) to cuBLASLt calls: one strided-batched call when the batch dims broadcast as a
// whole, else one per combination of the leading batch dims that break the stride pattern.
// A bias is the epilogue when it is a vector over the result's last dim; any other bias
// shape is an error here (the lowering adds it separately).
func PlanMatmul(s *device.Spec, tf32 bool) ([]GemmCall, error) {
	if s.Op == nil || s.Op.Name != "matmul" || len(s.In) < 2 || len(s.Out) != 1 {
		return nil, fmt.Errorf("not a matmul launch site")
	}
	a, b, c := s.In[0], s.In[1], s.Out[0]
	ta, tb := s.Attrs.Bool("transpose_a", false), s.Attrs.Bool("transpose_b", false)
	as, bs := []int(a.Shape), []int(b.Shape)
	if len(as) == 1 {
		as, ta = []int{1, as[0]}, false
	}
	if len(bs) == 1 {
		bs, tb = []int{bs[0], 1}, false
	}
	if len(as) < 2 || len(bs) < 2 {
		return nil, fmt.Errorf("matmul of %s and %s", a, b)
	}
	M, K := int64(as[len(as)-2]), int64(as[len(as)-1])
	if ta {
		M, K = K, M
	}
	K2, N := int64(bs[len(bs)-2]), int64(bs[len(bs)-1])
	if tb {
		K2, N = N, K2
	}
	if K != K2 {
		return nil, fmt.Errorf("matmul contracts %d with %d", K, K2)
	}
	call := GemmCall{TransA: tb, TransB: ta, M: N, N: M, K: K, DType: c.DType, LDC: N}
	call.LDA = int64(bs[len(bs)-1]) // the row length of the IR's B buffer
	call.LDB = int64(as[len(as)-1])
	switch c.DType {
	case ir.F32:
		call.Compute = "CUBLAS_COMPUTE_32F"
		if tf32 {
			call.Compute = "CUBLAS_COMPUTE_32F_FAST_TF32"
		}
	case ir.BF16, ir.F16:
		call.Compute = "CUBLAS_COMPUTE_32F"
	case ir.F64:
		call.Compute = "CUBLAS_COMPUTE_64F"
	default:
		return nil, fmt.Errorf("no cuBLASLt matmul for %s", c.DType)
	}
	if len(s.In) == 3 {
		if bias := s.In[2].Shape; len(bias) == 0 || int64(bias[len(bias)-1]) != N || s.In[2].NumElements() != int(N) {
			return nil, fmt.Errorf("bias %s is not a vector over the result's last dim (%d)", s.In[2], N)
		}
		call.Bias = true
	}
	// Batch dims, right-aligned and broadcast.
	ab, bb := as[:len(as)-2], bs[:len(bs)-2]
	rank := max(len(ab), len(bb))
	dim := func(d []int, i int) int {
		if j := i - (rank - len(d)); j >= 0 {
			return d[j]
		}
		return 1
	}
	batch := make([]int, rank)
	for i := range batch {
		x, y := dim(ab, i), dim(bb, i)
		switch {
		case x == y || y == 1:
			batch[i] = x
		case x == 1:
			batch[i] = y
		default:
			return nil, fmt.Errorf("batch dims %v and %v do not broadcast", ab, bb)
		}
	}
	// The trailing batch dims over which each operand is either whole (its matrices
	// contiguous: stride one matrix) or broadcast (stride 0) fold into one strided batch;
	// the leading dims where that pattern breaks are looped over, one call each.
	matA, matB, matC := M*K, K*N, M*N
	const unknown, whole, repeated = 0, 1, 2
	stA, stB := unknown, unknown
	split := rank
	for i := rank - 1; i >= 0; i-- {
		if batch[i] == 1 {
			split = i
			continue
		}
		sa, sb := repeated, repeated
		if dim(ab, i) == batch[i] {
			sa = whole
		}
		if dim(bb, i) == batch[i] {
			sb = whole
		}
		if (stA != unknown && stA != sa) || (stB != unknown && stB != sb) {
			break
		}
		stA, stB, split = sa, sb, i
	}
	call.Batch = 1
	for _, d := range batch[split:] {
		call.Batch *= int64(d)
	}
	if call.Batch > 1 {
		call.StrideC = matC
		if stA == whole {
			call.StrideB = matA
		}
		if stB == whole {
			call.StrideA = matB
		}
	}
	// The leading batch dims: one call per combination, with element offsets.
	outer := batch[:split]
	n := 1
	for _, d := range outer {
		n *= d
	}
	var calls []GemmCall
	for o := 0; o < n; o++ {
		rem := o
		var offA, offB, offC int64
		strideIR := func(d []int, mat int64) []int64 { // element strides of d's batch dims, right-aligned to rank
			st := make([]int64, rank)
			acc := mat
			for i := rank - 1; i >= 0; i-- {
				st[i] = acc
				acc *= int64(dim(d, i))
			}
			return st
		}
		sa, sb, sc := strideIR(ab, matA), strideIR(bb, matB), strideIR(batch, matC)
		coord := make([]int, len(outer))
		for i := len(outer) - 1; i >= 0; i-- {
			coord[i] = rem % outer[i]
			rem /= outer[i]
		}
		for i, x := range coord {
			if dim(ab, i) != 1 {
				offB += int64(x) * sa[i]
			}
			if dim(bb, i) != 1 {
				offA += int64(x) * sb[i]
			}
			offC += int64(x) * sc[i]
		}
		cl := call
		cl.OffA, cl.OffB, cl.OffC = offA, offB, offC
		calls = append(calls, cl)
	}
	return calls, nil
}
