package cuda

import (
	"fmt"
	"strings"

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
	// A batch of the IR's A (not transposed) against one B — a linear layer on [b, s, d]
	// activations, GPT-2's tied head and its input gradient — is one GEMM of the stacked
	// rows: M = batch·M, the result's rows stacked alike. One large call instead of a batch of
	// smaller ones, which AlignGemm can pad (it stages single calls).
	if call.Batch > 1 && split == 0 && stA == whole && stB == repeated && !ta {
		call.N *= call.Batch
		call.Batch = 1
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

// AlignGemmMin is the smallest GEMM (multiply-adds) AlignGemm stages: 2^30, where the slow
// kernel's loss (~10 µs on an H100) is a few times the copies' launches. Tests lower it.
var AlignGemmMin int64 = 1 << 30

// Pitched is a copy between a matrix as the IR holds it — Rows × Cols elements, column-major
// in cuBLASLt's terms (Cols lines of Rows contiguous elements), leading dimension LD, Off
// elements in — and its padded copy: PadRows × PadCols, contiguous (leading dimension
// PadRows), the padding zeros.
type Pitched struct {
	Rows, Cols, PadRows, PadCols, LD, Off int64
	// Batch matrices (at least 1), Stride elements apart in the IR's buffer, each copy
	// PadRows × PadCols after the last.
	Batch, Stride int64
}

// Bytes is the padded copy's size for elements of n bytes.
func (p *Pitched) Bytes(n int64) int64 { return p.Batch * p.PadRows * p.PadCols * n }

// AlignGemm stages a large 16-bit GEMM whose matrices break cuBLASLt's 16-byte alignment
// through padded copies. A dim or leading dimension that is not a multiple of 8 elements
// (GPT-2's vocabulary of 50,257: the logits' rows, the head's gradients) makes cuBLASLt
// choose its align1 kernels, which load 2 bytes at a time: measured on an H100, 96 TFLOP/s
// for 8192 × 768 × 50,257 where aligned shapes reach 700–800 (bench/NOTES.md; PyTorch gets
// the same kernel, 92–96 TFLOP/s). Padding the leading dimensions alone left it there (87
// TFLOP/s with the copies, run 5): a tile's vector loads and stores need the contiguous
// extent aligned too. So M, N and K are each rounded up to 8: each operand with a padded dim
// or a misaligned leading dimension is copied first, zeros in the padding (zero rows of K
// add nothing; extra rows of M and columns of N are computed and dropped), and a padded
// result is computed contiguous and copied back. In a strided batch (GPT-2's head weight
// gradient: a product per sequence, summed after) each staged operand is copied matrix by
// matrix, and one repeated across the batch (stride 0) once. Only calls of at least
// AlignGemmMin multiply-adds with every dim ≥ 128 are staged, and none whose bias epilogue
// would read past its M elements. a, b and out (nil: as they are) are the copies of
// cuBLASLt's A, B and result; call reads and writes the copies at offset 0.
func AlignGemm(c GemmCall) (call GemmCall, a, b, out *Pitched) {
	if c.DType != ir.BF16 && c.DType != ir.F16 || c.M < 128 || c.N < 128 || c.K < 128 || c.Batch*c.M*c.N*c.K < AlignGemmMin {
		return c, nil, nil, nil
	}
	up := func(x int64) int64 { return (x + 7) / 8 * 8 }
	M, N, K := up(c.M), up(c.N), up(c.K)
	if c.Bias && M != c.M {
		return c, nil, nil, nil
	}
	bad := func(ld, off, stride int64) bool { return ld%8 != 0 || off%8 != 0 || stride%8 != 0 }
	// stage is the copy of a stored rows × cols matrix (stride elements to the next of the
	// batch: 0 when it repeats) to padRows × padCols, or nil.
	stage := func(rows, cols, padRows, padCols, ld, off, stride int64) *Pitched {
		if rows == padRows && cols == padCols && !bad(ld, off, stride) {
			return nil
		}
		n := int64(1)
		if stride != 0 {
			n = c.Batch
		}
		return &Pitched{Rows: rows, Cols: cols, PadRows: padRows, PadCols: padCols, LD: ld, Off: off, Batch: n, Stride: stride}
	}
	call = c
	call.M, call.N, call.K = M, N, K
	if c.TransA {
		a = stage(c.K, c.M, K, M, c.LDA, c.OffA, c.StrideA)
	} else {
		a = stage(c.M, c.K, M, K, c.LDA, c.OffA, c.StrideA)
	}
	if c.TransB {
		b = stage(c.N, c.K, N, K, c.LDB, c.OffB, c.StrideB)
	} else {
		b = stage(c.K, c.N, K, N, c.LDB, c.OffB, c.StrideB)
	}
	out = stage(c.M, c.N, M, N, c.LDC, c.OffC, c.StrideC)
	if a == nil && b == nil && out == nil {
		return c, nil, nil, nil
	}
	// A staged operand's matrices follow each other in its copy.
	restride := func(p *Pitched, stride int64) int64 {
		if stride == 0 {
			return 0
		}
		return p.PadRows * p.PadCols
	}
	if a != nil {
		call.LDA, call.OffA, call.StrideA = a.PadRows, 0, restride(a, c.StrideA)
	}
	if b != nil {
		call.LDB, call.OffB, call.StrideB = b.PadRows, 0, restride(b, c.StrideB)
	}
	if out != nil {
		call.LDC, call.OffC, call.StrideC = out.PadRows, 0, restride(out, c.StrideC)
	}
	return call, a, b, out
}

// PitchKernel is the copy p of dtype dt's elements as a kernel (in0 → out): to the padded
// copy (zeros in the padding), or back to the IR's matrix (toIR).
func PitchKernel(name string, dt ir.DType, p Pitched, toIR bool) Kernel {
	st, _ := storage(dt)
	var b strings.Builder
	batch := max(p.Batch, 1)
	pad := p.PadRows * p.PadCols
	n := batch * pad
	if toIR {
		n = batch * p.Rows * p.Cols
		fmt.Fprintf(&b, "// %s: %d × a %d × %d %s matrix back from its padded copy (%d × %d) to leading dimension %d, stride %d\n", name, batch, p.Rows, p.Cols, dt, p.PadRows, p.PadCols, p.LD, p.Stride)
	} else {
		fmt.Fprintf(&b, "// %s: %d × a %d × %d %s matrix, leading dimension %d, stride %d, to a padded copy (%d × %d)\n", name, batch, p.Rows, p.Cols, dt, p.LD, p.Stride, p.PadRows, p.PadCols)
	}
	fmt.Fprintf(&b, "PPC_GLOBAL void %s(const %s* __restrict__ in0, %s* __restrict__ out, long long n) {\n  PPC_FOR_EACH(i, n) {\n", name, st, st)
	if toIR {
		fmt.Fprintf(&b, "    const long long m = i / %dLL, j = i %% %dLL, c = j / %dLL, r = j %% %dLL;\n    out[m * %dLL + c * %dLL + r + %dLL] = in0[m * %dLL + c * %dLL + r];\n",
			p.Rows*p.Cols, p.Rows*p.Cols, p.Rows, p.Rows, p.Stride, p.LD, p.Off, pad, p.PadRows)
	} else {
		fmt.Fprintf(&b, "    const long long m = i / %dLL, j = i %% %dLL, c = j / %dLL, r = j %% %dLL;\n    out[i] = r < %dLL && c < %dLL ? in0[m * %dLL + c * %dLL + r + %dLL] : (%s)0;\n",
			pad, pad, p.PadRows, p.PadRows, p.Rows, p.Cols, p.Stride, p.LD, p.Off, st)
	}
	b.WriteString("  }\n}\n")
	writeHostLauncher(&b, name, []string{fmt.Sprintf("(const %s*)in[0]", st)}, st)
	t := ir.Type{DType: dt, Shape: ir.Shape{int(n)}}
	return Kernel{Name: name, Body: b.String(), N: n, In: []ir.Type{t}, Out: t}
}
